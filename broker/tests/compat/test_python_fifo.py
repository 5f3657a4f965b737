"""A FIFO consumer group with the official Python client's SimpleConsumer (unmodified)."""
import os
import subprocess
import time
import uuid

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def unique(name):
    return f"{name}_{uuid.uuid4().hex[:8]}"


def declare_fifo(broker, group):
    out = subprocess.run(
        [os.environ["ROCKLET_BIN"], "admin", "--broker", broker, "group", group, "--fifo"],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "declared: FIFO" in out.stdout, out.stdout


def consumer(addr, topic, group, await_s):
    c = SimpleConsumer(ClientConfiguration(addr, Credentials()), group, {topic: FilterExpression("*")},
                       await_duration=await_s)
    c.startup()
    return c


def bodies(msgs):
    return [m.body.decode() for m in msgs]


def test_a_second_consumer_gets_nothing_from_a_queue_the_first_holds(broker):
    topic = unique("PyFifo")
    group = unique("PyFifoGroup")
    declare_fifo(broker, group)
    p = Producer(ClientConfiguration(broker, Credentials()), (topic,))
    p.startup()
    try:
        # One message group: one queue, in this order.
        for i in range(6):
            m = Message()
            m.topic = topic
            m.body = f"m{i}".encode()
            m.message_group = "order-1"
            p.send(m)
    finally:
        p.shutdown()
    first = consumer(broker, topic, group, 3)
    second = consumer(broker, topic, group, 1)
    try:
        held = []
        deadline = time.time() + 15
        while not held and time.time() < deadline:
            held = first.receive(4, 30)
        assert bodies(held) == ["m0", "m1", "m2", "m3"]
        assert [m.message_group for m in held] == ["order-1"] * 4
        # While the first holds the batch, the second gets nothing from the queue.
        t = time.time()
        while time.time() < t + 3:
            got = second.receive(16, 30)
            assert got == [], f"the second consumer got {bodies(got)} while m0..m3 were held"
        for m in held:
            first.ack(m)
        rest = []
        deadline = time.time() + 15
        while len(rest) < 2 and time.time() < deadline:
            rest.extend(second.receive(16, 30))
        assert bodies(rest) == ["m4", "m5"]
        assert [m.delivery_attempt for m in rest] == [1, 1]
        for m in rest:
            second.ack(m)
    finally:
        first.shutdown()
        second.shutdown()
