"""What the Python binding agrees on with Node and wasm (docs/bindings.md), and its Python
idioms: errors that name the argument, ValueError for ranges, reprs of Python values,
`__module__`, async checkers."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Literal

import pytest

import rocklet


def test_pull_reads_every_queue_unless_a_queue_is_given() -> None:
    b = rocklet.Broker(clock="manual", default_queues=4)
    b.send("orders", b"q1", queue_id=1)
    b.send("orders", b"q3", queue_id=3)
    assert [m.body for m in b.pull("billing", "orders", queue=3)] == [b"q3"]
    assert [m.body for m in b.pull("billing", "orders")] == [b"q1"]
    b.send("orders", b"q0", queue_id=0)
    assert [m.body for m in b.pull("g2", "orders", max=2)] == [b"q0", b"q1"]
    assert [m.body for m in b.pull("g2", "orders", max=2)] == [b"q3"]
    b.close()


def test_pull_and_receive_on_a_missing_topic_raise_unknown_topic(broker: rocklet.Broker) -> None:
    broker.send("orders", b"x")
    with pytest.raises(rocklet.UnknownTopic, match="ordres"):
        broker.pull("g", "ordres")
    with pytest.raises(rocklet.UnknownTopic):
        broker.pull("g", "ordres", queue=0)
    with pytest.raises(rocklet.UnknownTopic):
        broker.pull_queue("g", "ordres", 0)
    with pytest.raises(rocklet.UnknownTopic):
        broker.receive("g", "ordres", invisible_ms=1000)
    assert [t.name for t in broker.topics()] == ["orders"]
    # A bad name is still its own error.
    with pytest.raises(rocklet.InvalidTopic):
        broker.pull("g", "bad topic")


def test_transaction_id(broker: rocklet.Broker) -> None:
    tx = broker.prepare("PG", "T", b"x")
    assert tx.id == tx.transaction_id and len(tx.id) == 16
    assert repr(tx) == f"Transaction(id='{tx.id}', group='PG', resolution=None)"
    tx.commit()
    assert repr(tx) == f"Transaction(id='{tx.id}', group='PG', resolution='commit')"


def test_subscribe_acks_a_message_when_the_loop_moves_on(broker: rocklet.Broker) -> None:
    broker.send("S", b"a", queue_id=0)
    broker.send("S", b"b", queue_id=0)
    sub = broker.subscribe("G", "S", invisible_ms=1000, max=1, timeout=0)
    first = next(sub)
    assert first.message.body == b"a"
    assert broker.inflight_count("G", "S") == 1
    second = next(sub)  # moving on acks `a`
    assert second.message.body == b"b"
    assert broker.inflight_count("G", "S") == 1
    # Leaving the loop leaves `b` un-acked: it comes back after invisible_ms, `a` never.
    broker.advance(1000)
    again = list(broker.subscribe("G", "S", invisible_ms=1000, timeout=0))
    assert [(r.message.body, r.attempt) for r in again] == [(b"b", 2)]
    assert broker.inflight_count("G", "S") == 0


def test_a_subscription_may_start_before_its_topic(broker: rocklet.Broker) -> None:
    assert list(broker.subscribe("G", "Later", invisible_ms=1000, timeout=0)) == []


def test_errors_name_the_argument(broker: rocklet.Broker) -> None:
    # The message itself names the argument (pyo3 alone says only "'int' object is not an
    # instance of 'str'", with the name in a note).
    with pytest.raises(TypeError) as e:
        broker.send(1, b"x")  # type: ignore[arg-type]
    assert str(e.value) == "topic must be a str, not int"
    with pytest.raises(TypeError) as e:
        broker.send("T", b"x", tag=1)  # type: ignore[arg-type]
    assert str(e.value) == "tag must be a str, not int"
    with pytest.raises(TypeError) as e:
        broker.pull("g", "T", max="10")  # type: ignore[arg-type]
    assert str(e.value) == "max must be an int, not str"
    with pytest.raises(ValueError) as v:
        broker.send("T", b"x", delay_level=-1)
    assert str(v.value) == "delay_level must be a whole number from 0 to 4294967295, not -1"
    with pytest.raises(ValueError, match="queue_id"):
        broker.send("T", b"x", queue_id=2**40)
    with pytest.raises(ValueError, match="max"):
        broker.pull("g", "T", max=-1)
    with pytest.raises(ValueError, match="invisible_ms"):
        broker.receive("g", "T", invisible_ms=-5)
    with pytest.raises(ValueError, match="ms"):
        broker.advance(-1)
    tx = broker.prepare("PG", "T", b"x")
    with pytest.raises(ValueError, match="resolution.*'yes'"):
        broker.end_transaction(tx.id, "yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="transaction_id"):
        broker.end_transaction(5, "commit")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"messages\[1\]\.tag"):
        broker.send_batch("T", [b"a", {"body": b"b", "tag": 3}])


def test_reprs_show_python_values(broker: rocklet.Broker) -> None:
    tx = broker.prepare("PG", "T", b"x")
    r = repr(tx.send_result)
    assert "Some(" not in r and f"transaction_id='{tx.id}'" in r
    assert "transaction_id=None" in repr(broker.send("T", b"y"))
    [p] = broker.pending_transactions()
    assert "Some(" not in repr(p) and f"next_check={p.next_check!r}" in repr(p)
    assert repr(broker) == "Broker(path=None, clock='manual')"


def test_classes_say_they_are_rocklets() -> None:
    for cls in (rocklet.Broker, rocklet.Transaction, rocklet.Subscription, rocklet.Message,
                rocklet.SendResult, rocklet.Received, rocklet.RockletError, rocklet.UnknownTopic):
        assert cls.__module__ == "rocklet", cls


def test_async_def_checkers_work() -> None:
    b = rocklet.Broker(clock="manual", transaction_timeout_ms=1000)
    seen: List[str] = []

    async def checker(m: rocklet.Message) -> Literal["commit"]:
        await asyncio.sleep(0)
        seen.append(m.text())
        return "commit"

    b.set_checker("PG", checker)
    b.prepare("PG", "T", b"sync-caller")
    b.advance(1000)

    # From inside a running event loop too.
    async def main() -> None:
        b.prepare("PG", "T", b"async-caller")
        b.advance(1000)

    asyncio.run(main())
    assert seen == ["sync-caller", "async-caller"]
    assert sorted(m.body for m in b.pull("g", "T")) == [b"async-caller", b"sync-caller"]
    b.close()


def test_run_until_idle_and_advance_to(broker: rocklet.Broker) -> None:
    broker.send("T", b"later", delay_ms=500)
    broker.advance_to(100)
    assert broker.now == 100
    with pytest.raises(ValueError, match="before"):
        broker.advance_to(50)
    broker.run_until_idle()
    assert broker.now >= 500
    assert [m.body for m in broker.pull("g", "T")] == [b"later"]


BAD_CHECKER = '''
import rocklet
b = rocklet.Broker(clock="manual")
def ok(m: rocklet.Message) -> rocklet.Resolution:
    return "commit"
b.set_checker("PG", ok)
def any_str(m: rocklet.Message) -> str:
    return "yes"
b.set_checker("PG", any_str)
'''


@pytest.mark.skipif(shutil.which("mypy") is None and not Path(sys.prefix, "bin", "mypy").exists(),
                    reason="mypy is not installed")
def test_resolutions_are_typed_as_literals(tmp_path: Path) -> None:
    f = tmp_path / "bad.py"
    f.write_text(BAD_CHECKER)
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(f)],
                         capture_output=True, text=True)
    # The lambda answering "commit" type-checks; a checker declared to answer any str does not.
    assert out.returncode == 1, out.stdout
    assert "bad.py:9" in out.stdout and "set_checker" in out.stdout, out.stdout
    assert out.stdout.count("error:") == 1, out.stdout


def test_async_def_checkers_work_on_the_system_clock_driver() -> None:
    import time

    async def checker(m: rocklet.Message) -> Literal["rollback"]:
        await asyncio.sleep(0.001)
        return "rollback"

    with rocklet.Broker(transaction_timeout_ms=100, transaction_check_interval_ms=100) as b:
        b.set_checker("PG", checker)
        b.prepare("PG", "T", b"x")
        deadline = time.monotonic() + 10
        while b.pending_transactions() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert b.pending_transactions() == []
        assert b.stats()["rolled_back"] == 1
