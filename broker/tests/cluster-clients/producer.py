"""A producer on the official RocketMQ 5 Python client (rocketmq-python-client), unmodified,
for the cluster kill test (broker/tests/cluster_clients.rs). It sends until the file STOP
exists and writes one ledger line per outcome on stdout, flushed at once (times are Unix ms):

    ACK <id> <ms>       a normal message acknowledged
    COMMIT <id> <ms>    a transaction whose commit was acknowledged
    HALF <id> <ms>      a half message acknowledged whose producer decided to commit (the
                        commit may be lost with a master: the new master's check resolves it)
    ROLLBACK <id>       a transaction the producer rolls back (asked before the rollback)
    FAIL <id> <ms>      a send with no acknowledgement (stored or not)
    CHECK <id> <answer> the broker checked a transaction; the answer given

The message body is its id: `<prefix>-<n>-N` plain, `-C` to commit, `-R` to roll back, `-O`
left open for the broker's check (which commits it), so the checker decides from the message
alone, as a real one decides from its own database.

usage: producer.py ENDPOINTS TOPIC PREFIX STOP
"""
import os
import sys
import threading
import time

from rocketmq import (ClientConfiguration, Credentials, Message, Producer, TransactionChecker,
                      TransactionResolution)

OUT = threading.Lock()


def line(*parts):
    with OUT:
        sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
        sys.stdout.flush()


def now_ms():
    return int(time.time() * 1000)


class Checker(TransactionChecker):
    def check(self, message):
        body = message.body.decode()
        answer = "ROLLBACK" if body.endswith("-R") else "COMMIT"
        line("CHECK", body, answer)
        return TransactionResolution.ROLLBACK if answer == "ROLLBACK" else TransactionResolution.COMMIT


def message(topic, body):
    m = Message()
    m.topic = topic
    m.body = body.encode()
    m.keys = body
    return m


def main():
    endpoints, topic, prefix, stop = sys.argv[1:5]
    # request_timeout: a sync write waits for a replica; the client's 3 attempts then cover
    # an election (lease TTL 2 s).
    cfg = ClientConfiguration(endpoints, Credentials(), request_timeout=3)
    p = Producer(cfg, (topic,), Checker())
    p.startup()
    line("STARTED", now_ms())
    n = 0
    while not os.path.exists(stop):
        n += 1
        kind = "N"
        if n % 4 == 0:
            kind = "R" if n % 8 == 0 else ("O" if n % 16 == 4 else "C")
        body = f"{prefix}-{n:07d}-{kind}"
        try:
            if kind == "N":
                p.send(message(topic, body))
                line("ACK", body, now_ms())
                continue
            t = p.begin_transaction()
            p.send(message(topic, body), t)
            if kind == "R":
                line("ROLLBACK", body)
                try:
                    t.rollback()
                except Exception:
                    pass  # the check rolls it back
                continue
            line("HALF", body, now_ms())
            if kind == "O":
                continue  # left open: the broker checks it, the checker commits it
            t.commit()
            line("COMMIT", body, now_ms())
        except Exception as e:  # noqa: BLE001 - every failure is a ledger line
            line("FAIL", body, now_ms(), type(e).__name__)
            time.sleep(0.02)
    # Stay up a while so the master can check what is still open.
    time.sleep(float(os.environ.get("LINGER_S", "0")))
    p.shutdown()
    line("DONE", n)


if __name__ == "__main__":
    main()
