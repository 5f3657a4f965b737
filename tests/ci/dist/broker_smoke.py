"""The official RocketMQ 5 Python client (rocketmq-python-client) against a broker started
from the tarball with its default config: a normal message and a committed transaction are
received once, a rolled-back one never.   python broker_smoke.py HOST:PORT"""
import sys
import time
import uuid

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer, TransactionChecker, TransactionResolution)

addr = sys.argv[1]
topic = "DistSmoke_" + uuid.uuid4().hex[:8]


class Checker(TransactionChecker):
    def check(self, message):
        return TransactionResolution.ROLLBACK


def message(body):
    m = Message()
    m.topic = topic
    m.body = body
    m.tag = "Dist"
    return m


conf = ClientConfiguration(addr, Credentials())
p = Producer(conf, (topic,), Checker())
p.startup()
c = SimpleConsumer(conf, "DistSmokeGroup", {topic: FilterExpression("*")}, await_duration=1)
c.startup()
try:
    sent = p.send(message(b"normal"))
    assert sent.message_id
    t = p.begin_transaction()
    p.send(message(b"committed"), t)
    t.commit()
    t = p.begin_transaction()
    p.send(message(b"rolled back"), t)
    t.rollback()
    got = []
    deadline = time.time() + 15
    while len(got) < 2 and time.time() < deadline:
        for m in c.receive(16, 30):
            got.append(m.body)
            c.ack(m)
    end = time.time() + 2
    while time.time() < end:
        for m in c.receive(16, 30):
            got.append(m.body)
            c.ack(m)
    assert sorted(got) == [b"committed", b"normal"], got
finally:
    c.shutdown()
    p.shutdown()
print(f"broker OK: the official Python client sent, committed, rolled back and received on {addr}")
