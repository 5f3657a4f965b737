"""Feeds a rocklet broker with the official RocketMQ 5 Python client (rocketmq-python-client
5.1.2, unmodified) for the console's browser test.

  feed.py prepare ADDR AK SK TOPIC KEY...   a few committed transactions and sends (traffic
                                            for the charts), then one half message per key,
                                            never ended; the producer then goes away, so
                                            their checks park
  feed.py consume ADDR AK SK TOPIC GROUP KEY
                                            receives (and acks) until a message with KEY
                                            comes, then prints it as JSON; exits 1 after 90 s
"""
import json
import sys
import time

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer, TransactionChecker, TransactionResolution)


class Unknown(TransactionChecker):
    """Never decides: the operator does."""

    def check(self, message):
        return TransactionResolution.UNKNOWN


def config(addr, ak, sk):
    return ClientConfiguration(addr, Credentials(ak, sk), request_timeout=10)


def prepare(addr, ak, sk, topic, keys):
    p = Producer(config(addr, ak, sk), (topic,), Unknown())
    p.startup()
    try:
        for i in range(12):
            m = Message()
            m.topic = topic
            m.body = f"warm-up {i}".encode()
            m.tag = "warm"
            if i % 2:
                p.send(m)
            else:
                tx = p.begin_transaction()
                p.send(m, tx)
                tx.commit()
            time.sleep(0.1)
        for key in keys:
            m = Message()
            m.topic = topic
            m.body = f"payment for {key}".encode()
            m.tag = "pay"
            m.keys = key
            tx = p.begin_transaction()
            receipt = p.send(m, tx)
            print(json.dumps({"key": key, "message_id": receipt.message_id}), flush=True)
            time.sleep(0.7)
    finally:
        p.shutdown()


def consume(addr, ak, sk, topic, group, key):
    c = SimpleConsumer(config(addr, ak, sk), group, {topic: FilterExpression("*")},
                       await_duration=5)
    c.startup()
    print(json.dumps({"consumer": "ready"}), flush=True)
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            for m in c.receive(16, 30):
                c.ack(m)
                if key in m.keys:
                    print(json.dumps({"received": key, "body": m.body.decode(),
                                      "message_id": m.message_id}), flush=True)
                    return 0
        print(json.dumps({"timeout": key}), flush=True)
        return 1
    finally:
        c.shutdown()


if __name__ == "__main__":
    cmd, addr, ak, sk, topic, *rest = sys.argv[1:]
    if cmd == "prepare":
        prepare(addr, ak, sk, topic, rest)
    elif cmd == "consume":
        sys.exit(consume(addr, ak, sk, topic, rest[0], rest[1]))
    else:
        sys.exit(f"unknown command {cmd}")
