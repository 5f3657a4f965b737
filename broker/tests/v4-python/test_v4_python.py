"""PyPI `rocketmq` 0.4.4 (the RocketMQ 4 C++ client, unmodified) against rocklet through its
name-server address, and cross-protocol with the RocketMQ 5 Python client."""
import json
import os
import random
import subprocess
import threading
import time
import uuid

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer


def unique(prefix):
    return prefix + uuid.uuid4().hex[:8]


def producer(ns, group=None):
    p = Producer(group or unique("PG"))
    p.set_namesrv_addr(ns)
    p.start()
    return p


def message(topic, body, tag="TagA", keys=None):
    m = Message(topic)
    m.set_tags(tag)
    m.set_keys(keys or ("k-" + body))
    m.set_body(body)
    return m


def pull_all(ns, topic, group=None):
    c = PullConsumer(group or unique("CG"))
    c.set_namesrv_addr(ns)
    c.start()
    try:
        return [(m.body.decode(), m.tags.decode(), m.keys.decode()) for m in c.pull(topic)]
    finally:
        c.shutdown()


def push_until(ns, topic, count, timeout=30):
    got, lock, done = [], threading.Lock(), threading.Event()

    def on_message(m):
        with lock:
            got.append((m.body.decode(), time.time()))
            if len(got) >= count:
                done.set()

    c = PushConsumer(unique("CG"))
    c.set_namesrv_addr(ns)
    c.subscribe(topic, on_message)
    c.start()
    try:
        done.wait(timeout)
        time.sleep(2)  # duplicates would arrive now
    finally:
        c.shutdown()
    return got


def v5(*args):
    py = os.environ.get("V5_PYTHON")
    assert py, "set V5_PYTHON to a python with rocketmq-python-client"
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([py, os.path.join(here, "v5_client.py"), *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_sync_send_then_pull(broker):
    ns, topic = broker["namesrv"], unique("V4Sync")
    p = producer(ns)
    try:
        for i in range(3):
            r = p.send_sync(message(topic, "sync-%d" % i))
            assert r.status == 0 and r.msg_id
    finally:
        p.shutdown()
    got = pull_all(ns, topic)
    assert sorted(got) == [("sync-%d" % i, "TagA", "k-sync-%d" % i) for i in range(3)]


def test_batch_then_push_consumer(broker):
    ns, topic = broker["namesrv"], unique("V4Batch")
    p = producer(ns)
    try:
        r = p.send_batch([message(topic, "batch-%d" % i) for i in range(4)])
        assert r.status == 0
    finally:
        p.shutdown()
    got = push_until(ns, topic, 4)
    assert sorted(b for b, _ in got) == ["batch-%d" % i for i in range(4)], "each exactly once"


def test_delay_level_is_never_early(broker):
    ns, topic = broker["namesrv"], unique("V4Delay")
    p = producer(ns)
    try:
        m = message(topic, "later")
        m.set_delay_time_level(2)  # 5 s with the default levels
        sent = time.time()
        assert p.send_sync(m).status == 0
    finally:
        p.shutdown()
    assert pull_all(ns, topic) == [], "not visible before its delay"
    got = push_until(ns, topic, 1, timeout=30)
    assert [b for b, _ in got] == ["later"]
    assert got[0][1] - sent >= 4.9, "delivered %.2f s after the send" % (got[0][1] - sent)


def test_v4_send_v5_receive(broker):
    ns, topic = broker["namesrv"], unique("V4ToV5")
    p = producer(ns)
    try:
        for i in range(2):
            assert p.send_sync(message(topic, "from-v4-%d" % i, tag="X")).status == 0
    finally:
        p.shutdown()
    got = v5("receive", broker["grpc"], topic, unique("V5G"), "2")
    assert sorted((m["body"], m["tag"], m["keys"]) for m in got) == [
        ("from-v4-%d" % i, "X", ["k-from-v4-%d" % i]) for i in range(2)
    ]


def test_v5_send_v4_pull(broker):
    ns, topic = broker["namesrv"], unique("V5ToV4")
    ids = v5("send", broker["grpc"], topic, "Y", "from-v5-0", "from-v5-1")
    assert len(ids) == 2
    got = pull_all(ns, topic)
    assert sorted(got) == [("from-v5-%d" % i, "Y", "k-from-v5-%d" % i) for i in range(2)]


def big_body(size, seed):
    """Printable (the C++ client's body is a C string), compressible, distinct per seed."""
    rnd = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
    out = []
    n = 0
    while n < size:
        w = "%s-%d " % (rnd.choice(words), rnd.randrange(1000))
        out.append(w)
        n += len(w)
    return "".join(out)[:size]


def test_compressed_bodies_reach_every_consumer_intact(broker):
    # The C++ client zlib-compresses bodies of 4 KiB and more and sets the COMPRESSED flag:
    # the broker stores the plain body, so v4 pull, v4 push and v5 consumers all see it.
    ns, topic = broker["namesrv"], unique("V4Zip")
    bodies = [big_body(10 * 1024, 1), big_body(100 * 1024, 2)]
    p = producer(ns)
    try:
        for b in bodies:
            m = Message(topic)
            m.set_tags("Z")
            m.set_keys("k-%d" % len(b))
            m.set_body(b)
            r = p.send_sync(m)
            assert r.status == 0 and r.msg_id
    finally:
        p.shutdown()
    pulled = pull_all(ns, topic)
    assert sorted(b for b, _, _ in pulled) == sorted(bodies)
    pushed = push_until(ns, topic, 2)
    assert sorted(b for b, _ in pushed) == sorted(bodies)
    got = v5("receive", broker["grpc"], topic, unique("V5Z"), "2")
    assert sorted(m["body"] for m in got) == sorted(bodies)


def test_orderly_push_consumer_gets_each_queue_in_order(broker):
    # The orderly consumer locks its queues (LOCK_BATCH_MQ) before it consumes and consumes
    # a queue on one thread at a time; without the lock it consumes nothing.
    ns, topic = broker["namesrv"], unique("V4Order")
    sent = {1: [], 2: []}
    p = producer(ns)
    try:
        for i in range(20):
            key = 1 + i % 2
            body = "order-%d-%02d" % (key, i)
            r = p.send_orderly(message(topic, body), key)
            assert r.status == 0
            sent[key].append(body)
    finally:
        p.shutdown()
    got, lock, done = [], threading.Lock(), threading.Event()
    rnd = random.Random(7)

    def on_message(m):
        time.sleep(rnd.random() * 0.02)  # a concurrent consumer would now reorder
        with lock:
            got.append(m.body.decode())
            if len(got) >= 20:
                done.set()

    c = PushConsumer(unique("CGO"), orderly=True)
    c.set_namesrv_addr(ns)
    c.set_thread_count(4)
    c.subscribe(topic, on_message)
    c.start()
    try:
        done.wait(40)
        time.sleep(1)
    finally:
        c.shutdown()
    for key in (1, 2):
        assert [b for b in got if b.startswith("order-%d-" % key)] == sent[key]
    assert len(got) == 20, "each exactly once"
