"""Transaction semantics end to end through the Python API."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import List

import pytest

import rocklet


def bodies(b: rocklet.Broker, topic: str, group: str = "reader") -> List[bytes]:
    return [m.body for m in b.pull(group, topic, max=1000)]


def test_commit_makes_visible(broker: rocklet.Broker) -> None:
    tx = broker.prepare("PG", "Orders", b"o1", keys=["order-1"], properties={"k": "v"})
    assert len(tx.transaction_id) == 16
    assert bodies(broker, "Orders") == []
    assert [p.transaction_id for p in broker.pending_transactions()] == [tx.transaction_id]
    assert tx.commit() is False
    assert tx.resolution == "commit"
    [m] = broker.pull("reader", "Orders")
    assert (m.body, m.keys, m.properties["k"]) == (b"o1", ["order-1"], "v")
    assert broker.pending_transactions() == []


def test_rollback_never_delivers(broker: rocklet.Broker) -> None:
    tx = broker.prepare("PG", "Orders", b"o1")
    assert tx.rollback() is False
    broker.advance(3_600_000)
    assert bodies(broker, "Orders") == []
    assert broker.pending_transactions() == []


def test_with_block_commits_on_normal_exit(broker: rocklet.Broker) -> None:
    with broker.transaction("PG", "Orders", b"ok") as tx:
        assert bodies(broker, "Orders") == []
    assert tx.resolution == "commit"
    assert bodies(broker, "Orders") == [b"ok"]


def test_with_block_rolls_back_on_exception(broker: rocklet.Broker) -> None:
    with pytest.raises(ValueError, match="local work failed"):
        with broker.transaction("PG", "Orders", b"bad") as tx:
            raise ValueError("local work failed")
    assert tx.resolution == "rollback"
    assert broker.pending_transactions() == []
    assert bodies(broker, "Orders") == []


def test_explicit_end_inside_with_block_wins(broker: rocklet.Broker) -> None:
    with broker.transaction("PG", "Orders", b"x") as tx:
        tx.rollback()
    assert tx.resolution == "rollback"
    assert bodies(broker, "Orders") == []


def test_duplicate_commit_is_harmless(broker: rocklet.Broker) -> None:
    tx = broker.prepare("PG", "Orders", b"once")
    assert tx.commit() is False
    assert tx.commit() is True
    assert broker.end_transaction(tx.transaction_id, "commit") is True
    assert bodies(broker, "Orders") == [b"once"]
    with pytest.raises(rocklet.TransactionAlreadyResolved) as e:
        tx.rollback()
    assert e.value.code == "TRANSACTION_ALREADY_RESOLVED"


def test_end_errors(broker: rocklet.Broker) -> None:
    with pytest.raises(rocklet.UnknownTransaction):
        broker.end_transaction("00000000000000FF", "commit")
    with pytest.raises(rocklet.MalformedTransactionId):
        broker.end_transaction("nope", "commit")
    tx = broker.prepare("PG", "Orders", b"x")
    with pytest.raises(rocklet.WrongProducerGroup):
        broker.end_transaction(tx.transaction_id, "commit", group="OTHER")
    # A resolution outside the three is a ValueError naming the argument (Python's idiom).
    with pytest.raises(ValueError, match="resolution"):
        broker.end_transaction(tx.transaction_id, "maybe")  # type: ignore[arg-type]
    with pytest.raises(rocklet.DelayOnTransaction):
        broker.prepare("PG", "Orders", b"x", properties={"DELAY": "1"})


@pytest.mark.parametrize("answer,visible", [("commit", [b"c"]), ("rollback", [])])
def test_checker_resolves(answer: str, visible: List[bytes]) -> None:
    b = rocklet.Broker(clock="manual", transaction_timeout_ms=1000, transaction_check_interval_ms=1000)
    seen: List[rocklet.Message] = []

    def checker(m: rocklet.Message) -> str:
        seen.append(m)
        return answer

    b.set_checker("PG", checker)
    tx = b.prepare("PG", "T", b"c", tag="TagA")
    b.advance(999)
    assert seen == []
    b.advance(1)
    assert len(seen) == 1
    m = seen[0]
    assert (m.transaction_id, m.check_times, m.body, m.tag, m.topic) == (tx.transaction_id, 1, b"c", "TagA", "T")
    assert bodies(b, "T") == visible
    assert b.pending_transactions() == []
    assert b.stats()["checks_answered"] == 1
    b.close()


def test_checker_unknown_checks_again_until_max() -> None:
    b = rocklet.Broker(
        clock="manual", transaction_timeout_ms=100, transaction_check_interval_ms=100, transaction_check_max=3
    )
    checks: List[int] = []
    b.set_checker("PG", lambda m: checks.append(m.check_times or 0) or "unknown")
    b.prepare("PG", "T", b"x")
    b.advance(250)
    assert checks == [1, 2]
    [p] = b.pending_transactions()
    assert p.checks == 2
    b.advance(10_000)
    assert checks == [1, 2, 3]
    assert b.pending_transactions() == []  # moved aside after the maximum, never delivered
    assert bodies(b, "T") == []
    b.close()


def test_checker_raising_is_reported_and_stays_pending(caplog: pytest.LogCaptureFixture) -> None:
    b = rocklet.Broker(clock="manual", transaction_timeout_ms=100, transaction_check_interval_ms=100)
    calls: List[int] = []

    def flaky(m: rocklet.Message) -> str:
        calls.append(m.check_times or 0)
        if len(calls) == 1:
            raise RuntimeError("database unavailable")
        return "commit"

    b.set_checker("PG", flaky)
    tx = b.prepare("PG", "T", b"kept")
    with caplog.at_level(logging.ERROR, logger="rocklet"):
        b.advance(100)
    assert calls == [1]
    assert "database unavailable" in caplog.text and tx.transaction_id in caplog.text
    assert [p.transaction_id for p in b.pending_transactions()] == [tx.transaction_id]
    assert bodies(b, "T") == []
    b.advance(100)
    assert calls == [1, 2]
    assert bodies(b, "T") == [b"kept"]
    b.close()


def test_checker_bad_answer_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    b = rocklet.Broker(clock="manual", transaction_timeout_ms=100, transaction_check_interval_ms=100)
    b.set_checker("PG", lambda m: None)  # type: ignore[arg-type,return-value]
    b.prepare("PG", "T", b"x")
    with caplog.at_level(logging.ERROR, logger="rocklet"):
        b.advance(100)
    assert "checker of producer group `PG` failed" in caplog.text
    assert len(b.pending_transactions()) == 1
    b.close()


def test_checker_may_call_the_broker() -> None:
    b = rocklet.Broker(clock="manual", transaction_timeout_ms=100)
    b.set_checker("PG", lambda m: "commit" if b.pending_transactions() else "rollback")
    b.prepare("PG", "T", b"x")
    b.advance(100)
    assert bodies(b, "T") == [b"x"]
    b.close()


def test_offline_group_waits_then_is_checked() -> None:
    b = rocklet.Broker(clock="manual", transaction_timeout_ms=100)
    b.prepare("PG", "T", b"x")
    b.advance(10_000)
    [p] = b.pending_transactions()
    assert (p.checks, p.next_check) == (0, None)
    b.set_checker("PG", lambda m: "commit")
    b.advance(0)
    assert bodies(b, "T") == [b"x"]
    b.close()


def test_pending_half_survives_restart_and_is_checked(durable: Path) -> None:
    b = rocklet.Broker(durable, clock="manual", transaction_timeout_ms=1000)
    tx = b.prepare("PG", "T", b"survivor", keys="order-7")
    b.close()  # the process "dies" between prepare and commit

    b = rocklet.Broker(durable, clock="manual", start_ms=500, transaction_timeout_ms=1000)
    assert [p.transaction_id for p in b.pending_transactions()] == [tx.transaction_id]
    looked_up: List[List[str]] = []

    def checker(m: rocklet.Message) -> str:
        looked_up.append(m.keys)
        return "commit"

    b.set_checker("PG", checker)
    b.advance(499)
    assert looked_up == []
    b.advance(1)
    assert looked_up == [["order-7"]]
    assert bodies(b, "T") == [b"survivor"]
    b.close()
    b = rocklet.Broker(durable, clock="manual", start_ms=5000)
    assert b.pending_transactions() == []
    assert bodies(b, "T", group="after-restart") == [b"survivor"]
    assert bodies(b, "T") == []  # the first reader's committed offset survived too
    b.close()


def test_system_clock_driver_calls_the_checker() -> None:
    b = rocklet.Broker(transaction_timeout_ms=50, transaction_check_interval_ms=50)
    seen: List[str] = []
    b.set_checker("PG", lambda m: seen.append(m.transaction_id or "") or "commit")
    tx = b.prepare("PG", "T", b"auto")
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [tx.transaction_id]
    # The answer is fed back right after the checker returns.
    while b.pending_transactions() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bodies(b, "T") == [b"auto"]
    b.close()


def test_system_clock_checker_raising_stays_pending(caplog: pytest.LogCaptureFixture) -> None:
    b = rocklet.Broker(transaction_timeout_ms=20, transaction_check_interval_ms=20)
    calls: List[int] = []

    def flaky(m: rocklet.Message) -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("not yet")
        return "commit"

    with caplog.at_level(logging.ERROR, logger="rocklet"):
        b.set_checker("PG", flaky)
        b.prepare("PG", "T", b"late")
        deadline = time.monotonic() + 10
        while b.pending_transactions() and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(calls) == 3
    assert caplog.text.count("not yet") == 2
    assert bodies(b, "T") == [b"late"]
    b.close()
