"""The RocketMQ 5 Python client (`rocketmq-python-client`, another venv: its module is also
named `rocketmq`), driven by the v4 tests for cross-protocol checks. Prints JSON.

    v5_client.py send ADDR TOPIC TAG BODY...
    v5_client.py receive ADDR TOPIC GROUP COUNT
    v5_client.py sqlreceive ADDR TOPIC GROUP EXPRESSION

`sqlreceive` subscribes with `FilterExpression(EXPRESSION, SQL92)`, acks what it gets until a
receive of 2 s finds nothing, and prints the bodies (a refusal: `{"error": …}`).

`receive` acks what it gets and prints each message's body, tag, keys and message id.
"""
import json
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer
from rocketmq.grpc_protocol import FilterType


def view(m):
    return {"body": m.body.decode(), "tag": m.tag, "keys": list(m.keys), "id": str(m.message_id)}


def main():
    cmd, addr, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    cfg = ClientConfiguration(addr, Credentials())
    if cmd == "send":
        tag, bodies = sys.argv[4], sys.argv[5:]
        p = Producer(cfg, (topic,))
        p.startup()
        try:
            ids = []
            for b in bodies:
                m = Message()
                m.topic = topic
                m.tag = tag
                m.keys = "k-" + b
                m.body = b.encode()
                ids.append(str(p.send(m).message_id))
            print(json.dumps(ids))
        finally:
            p.shutdown()
    elif cmd == "receive":
        group, count = sys.argv[4], int(sys.argv[5])
        c = SimpleConsumer(cfg, group, {topic: FilterExpression("*")}, await_duration=5)
        c.startup()
        try:
            got = []
            deadline = time.time() + 30
            while len(got) < count and time.time() < deadline:
                for m in c.receive(16, 30):
                    got.append(view(m))
                    c.ack(m)
            # Anything extra would show up now.
            for m in c.receive(16, 30):
                got.append(view(m))
            print(json.dumps(got))
        finally:
            c.shutdown()
    elif cmd == "sqlreceive":
        group, expr = sys.argv[4], sys.argv[5]
        c = SimpleConsumer(cfg, group, {topic: FilterExpression(expr, FilterType.SQL)}, await_duration=2)
        c.startup()
        try:
            got = []
            while True:
                batch = c.receive(16, 30)
                if not batch:
                    break
                for m in batch:
                    got.append(m.body.decode())
                    c.ack(m)
            print(json.dumps(got))
        except Exception as e:  # the broker's refusal, for the test to read
            print(json.dumps({"error": str(e)}))
        finally:
            c.shutdown()
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
