"""Several producer threads and a consumer thread: no deadlock, no loss, no duplicates."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import List, Set

import pytest

import rocklet

PRODUCERS = 4
PER_PRODUCER = 200


def run(b: rocklet.Broker) -> Set[str]:
    received: Set[str] = set()
    duplicates: List[str] = []
    errors: List[BaseException] = []
    done = threading.Event()
    b.set_checker("PG", lambda m: "commit")

    def produce(p: int) -> None:
        try:
            for i in range(PER_PRODUCER):
                body = f"{p}-{i}"
                if i % 2:
                    with b.transaction("PG", "Work", body):
                        pass
                else:
                    b.send("Work", body)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    def consume() -> None:
        try:
            for r in b.subscribe("C", "Work", invisible_ms=60_000, timeout=10):
                body = r.message.text()
                if body in received:
                    duplicates.append(body)
                received.add(body)
                b.ack("C", r)
                if len(received) == PRODUCERS * PER_PRODUCER:
                    break
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)
        finally:
            done.set()

    consumer = threading.Thread(target=consume)
    consumer.start()
    producers = [threading.Thread(target=produce, args=(p,)) for p in range(PRODUCERS)]
    for t in producers:
        t.start()
    for t in producers:
        t.join(timeout=60)
        assert not t.is_alive(), "producer deadlocked"
    assert done.wait(timeout=60), "consumer deadlocked"
    consumer.join()
    assert errors == []
    assert duplicates == []
    return received


def expected() -> Set[str]:
    return {f"{p}-{i}" for p in range(PRODUCERS) for i in range(PER_PRODUCER)}


def test_threads_memory() -> None:
    with rocklet.Broker() as b:
        assert run(b) == expected()
        assert b.pending_transactions() == []


@pytest.mark.parametrize("flush", ["async", "sync"])
def test_threads_durable(tmp_path: Path, flush: str) -> None:
    with rocklet.Broker(tmp_path, flush=flush) as b:
        assert run(b) == expected()
        stats = b.stats()
    with rocklet.Broker(tmp_path, flush=flush) as b:
        got = {m.text() for m in b.pull("after", "Work", max=10_000)}
        while True:
            more = b.pull("after", "Work", max=10_000)
            if not more:
                break
            got |= {m.text() for m in more}
        assert got == expected()
    if flush == "sync":
        # Group commit: concurrent writers share syncs (fewer syncs than acknowledged writes).
        # Writes: one per send, two per transaction, one ack per message.
        writes = PRODUCERS * PER_PRODUCER * 5 // 2
        assert 0 < stats["syncs"] < writes, (stats["syncs"], writes)


def test_manual_clock_threads_are_deterministic() -> None:
    b = rocklet.Broker(clock="manual", transaction_timeout_ms=100)
    b.set_checker("PG", lambda m: "commit")
    txs = []
    lock = threading.Lock()

    def prep(p: int) -> None:
        for i in range(50):
            tx = b.prepare("PG", "M", f"{p}-{i}")
            with lock:
                txs.append(tx)

    threads = [threading.Thread(target=prep, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(b.pending_transactions()) == 200
    b.advance(100)  # every half is checked and committed at its own time
    assert b.pending_transactions() == []
    got = {m.text() for m in b.pull("g", "M", max=1000)}
    assert got == {f"{p}-{i}" for p in range(4) for i in range(50)}
    b.close()
