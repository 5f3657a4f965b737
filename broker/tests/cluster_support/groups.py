"""The official RocketMQ 5 Python client (rocketmq-python-client), unmodified, for the
several-groups test (broker/tests/cluster_groups.rs). One line per outcome on stdout:

    send ENDPOINTS TOPIC PREFIX COUNT
        ACK <body> <broker name>    a message acknowledged, and the group it went to
        FAIL <body> <error>         a send that failed
    receive ENDPOINTS TOPIC GROUP COUNT SECONDS
        GOT <body>                  a message received (and acked), until COUNT bodies
                                    were seen or SECONDS passed
"""
import sys
import time

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer)


def out(*parts):
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def send(endpoints, topic, prefix, count):
    p = Producer(ClientConfiguration(endpoints, Credentials(), request_timeout=3), (topic,))
    p.startup()
    try:
        for n in range(int(count)):
            body = f"{prefix}-{n:05d}"
            m = Message()
            m.topic = topic
            m.body = body.encode()
            try:
                r = p.send(m)
                # MessageQueue's text is <broker name>.<topic>.<queue id>.
                out("ACK", body, str(r.message_queue).split(".")[0])
            except Exception as e:  # noqa: BLE001 (the ledger records every failure)
                out("FAIL", body, repr(e).replace("\n", " "))
    finally:
        p.shutdown()


def receive(endpoints, topic, group, count, seconds):
    c = SimpleConsumer(ClientConfiguration(endpoints, Credentials(), request_timeout=5), group,
                       {topic: FilterExpression()}, await_duration=2)
    c.startup()
    seen = set()
    deadline = time.time() + float(seconds)
    try:
        while len(seen) < int(count) and time.time() < deadline:
            try:
                msgs = c.receive(32, 15)
            except Exception as e:  # noqa: BLE001 (a failed receive is tried again)
                out("ERROR", repr(e).replace("\n", " "))
                time.sleep(0.2)
                continue
            for m in msgs:
                body = m.body.decode()
                c.ack(m)
                if body not in seen:
                    seen.add(body)
                    out("GOT", body)
    finally:
        c.shutdown()


def main():
    if sys.argv[1] == "send":
        send(*sys.argv[2:6])
    elif sys.argv[1] == "receive":
        receive(*sys.argv[2:7])
    else:
        sys.exit(f"unknown command {sys.argv[1]!r}: expected send or receive")


if __name__ == "__main__":
    main()
