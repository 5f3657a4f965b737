"""The official RocketMQ 5 Python client (rocketmq-python-client), unmodified, against rocklet."""
import threading
import time
import uuid

import pytest
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer, TransactionChecker, TransactionResolution)


def unique(name):
    return f"{name}_{uuid.uuid4().hex[:8]}"


class Checker(TransactionChecker):
    def __init__(self, answer):
        self.answer = answer
        self.checked = []
        self.event = threading.Event()

    def check(self, message):
        self.checked.append((message.message_id, time.time()))
        self.event.set()
        return self.answer


def producer(addr, topic, checker=None):
    p = Producer(ClientConfiguration(addr, Credentials()), (topic,), checker)
    p.startup()
    return p


def consumer(addr, topic, group, await_s=3):
    c = SimpleConsumer(ClientConfiguration(addr, Credentials()), group, {topic: FilterExpression("*")}, await_duration=await_s)
    c.startup()
    return c


def message(topic, body, tag="TagA"):
    m = Message()
    m.topic = topic
    m.body = body
    m.tag = tag
    m.keys = "key-" + uuid.uuid4().hex[:6]
    return m


def receive_all(c, want, timeout=15, invisible=30):
    got = []
    deadline = time.time() + timeout
    while len(got) < want and time.time() < deadline:
        got.extend(c.receive(16, invisible))
    return got


def test_normal_send_receive_ack(broker):
    topic = unique("PyNormal")
    p = producer(broker, topic)
    try:
        receipt = p.send(message(topic, b"hello rocklet"))
        assert receipt.message_id
    finally:
        p.shutdown()
    c = consumer(broker, topic, unique("PyG"))
    try:
        msgs = receive_all(c, 1)
        assert [m.body for m in msgs] == [b"hello rocklet"]
        assert msgs[0].message_id == receipt.message_id
        assert msgs[0].tag == "TagA"
        assert msgs[0].delivery_attempt == 1
        c.ack(msgs[0])
        assert c.receive(16, 1) == []
    finally:
        c.shutdown()


def test_delayed_three_seconds_never_early(broker):
    topic = unique("PyDelay")
    p = producer(broker, topic)
    deliver_at = int(time.time()) + 3
    try:
        m = message(topic, b"later")
        m.delivery_timestamp = deliver_at  # the Python client sends whole seconds
        p.send(m)
    finally:
        p.shutdown()
    c = consumer(broker, topic, unique("PyG"))
    try:
        msgs = receive_all(c, 1, timeout=15)
        received = time.time()
        assert [m.body for m in msgs] == [b"later"]
        assert received >= deliver_at, f"delivered {deliver_at - received:.3f} s early"
        c.ack(msgs[0])
    finally:
        c.shutdown()


def test_transaction_commit_is_delivered(broker):
    topic = unique("PyTxCommit")
    checker = Checker(TransactionResolution.ROLLBACK)
    p = producer(broker, topic, checker)
    c = consumer(broker, topic, unique("PyG"), await_s=1)
    try:
        t = p.begin_transaction()
        receipt = p.send(message(topic, b"committed"), t)
        assert receipt.transaction_id
        t.commit()
        msgs = receive_all(c, 1)
        assert [m.body for m in msgs] == [b"committed"]
        c.ack(msgs[0])
        assert checker.checked == []
    finally:
        c.shutdown()
        p.shutdown()


def test_transaction_rollback_is_never_delivered(broker):
    topic = unique("PyTxRollback")
    checker = Checker(TransactionResolution.COMMIT)
    p = producer(broker, topic, checker)
    c = consumer(broker, topic, unique("PyG"), await_s=1)
    try:
        t = p.begin_transaction()
        p.send(message(topic, b"rolled back"), t)
        t.rollback()
        # Well past the transaction timeout and a check interval.
        deadline = time.time() + 4
        while time.time() < deadline:
            assert c.receive(16, 30) == []
        assert checker.checked == [], "a rolled back transaction is not checked"
    finally:
        c.shutdown()
        p.shutdown()


def test_unknown_transaction_is_committed_by_the_checker(broker):
    topic = unique("PyTxCheck")
    checker = Checker(TransactionResolution.COMMIT)
    p = producer(broker, topic, checker)
    c = consumer(broker, topic, unique("PyG"), await_s=2)
    try:
        t = p.begin_transaction()
        receipt = p.send(message(topic, b"checked"), t)
        # The local transaction's outcome is unknown: neither commit nor rollback.
        msgs = receive_all(c, 1, timeout=20)
        assert checker.event.is_set(), "delivered only after the broker's check"
        assert [m.body for m in msgs] == [b"checked"]
        assert checker.checked[0][0] == receipt.message_id
        c.ack(msgs[0])
        assert c.receive(16, 30) == [], "delivered once"
    finally:
        c.shutdown()
        p.shutdown()


def test_change_invisible_duration_then_ack_with_the_new_handle(broker):
    topic = unique("PyInvisible")
    p = producer(broker, topic)
    try:
        p.send(message(topic, b"slow work"))
    finally:
        p.shutdown()
    c = consumer(broker, topic, unique("PyG"), await_s=1)
    try:
        msgs = receive_all(c, 1, invisible=2)
        old = msgs[0].receipt_handle
        c.change_invisible_duration(msgs[0], 30)
        assert msgs[0].receipt_handle != old
        time.sleep(3)  # past the first invisible time: the change held
        assert c.receive(16, 30) == []
        c.ack(msgs[0])
    finally:
        c.shutdown()


def test_redelivery_after_invisible_time_has_attempt_two(broker):
    topic = unique("PyRedeliver")
    p = producer(broker, topic)
    try:
        p.send(message(topic, b"again"))
    finally:
        p.shutdown()
    c = consumer(broker, topic, unique("PyG"), await_s=5)
    try:
        first = receive_all(c, 1, invisible=2)
        assert first[0].delivery_attempt == 1
        second = receive_all(c, 1, timeout=15)
        assert [m.body for m in second] == [b"again"]
        assert second[0].delivery_attempt == 2
        c.ack(second[0])
    finally:
        c.shutdown()
