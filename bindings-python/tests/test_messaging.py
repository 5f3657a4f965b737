"""Sends, delays, batches, consumers and errors through the Python API."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import List

import pytest

import rocklet


def test_send_and_message_fields(broker: rocklet.Broker) -> None:
    broker.advance(1234)
    r = broker.send("T", b"\x00\xffbin", tag="A", keys=["k1", "k2"], properties={"p": "1"}, queue_id=2)
    assert (r.topic, r.queue_id, r.queue_offset, r.transaction_id) == ("T", 2, 0, None)
    [m] = broker.pull("g", "T", queue=2)
    assert isinstance(m, rocklet.Message)
    assert (m.topic, m.body, m.tag, m.keys, m.properties) == ("T", b"\x00\xffbin", "A", ["k1", "k2"], {"p": "1"})
    assert (m.msg_id, m.queue_id, m.queue_offset, m.store_timestamp, m.born_timestamp) == (r.msg_id, 2, 0, 1234, 1234)
    assert m.transaction_id is None and m.check_times is None
    broker.send("T", "text body", message_id="my-id", queue_id=2)
    broker.send("T", bytearray(b"ba"), queue_id=2)
    broker.send("T", memoryview(b"mv"), queue_id=2)
    got = broker.pull("g", "T", queue=2)
    assert [(x.body, x.msg_id if x.body == b"text body" else "") for x in got] == [
        (b"text body", "my-id"),
        (b"ba", ""),
        (b"mv", ""),
    ]


def test_delay_level_not_before_due_and_exactly_once() -> None:
    b = rocklet.Broker(clock="manual", delay_levels=[1000, 5000])
    b.send("D", b"later", delay_level=2)
    assert [d.due for d in b.pending_delays()] == [5000]
    b.advance(4999)
    assert sum(t.depth for t in b.topics() if t.name == "D") == 0
    b.advance(1)
    assert [t.depth for t in b.topics() if t.name == "D"] == [1]
    assert [m.body for m in b.pull("g", "D")] == [b"later"]
    b.advance(100_000)
    assert b.pull("g", "D") == []
    assert [m.body for m in b.pull("other", "D")] == [b"later"]  # delivered once, not twice
    assert b.pending_delays() == []
    b.close()


def test_deliver_at_and_delay_ms(broker: rocklet.Broker) -> None:
    broker.send("D", b"at", deliver_at_ms=300)
    broker.send("D", b"after", delay_ms=200)
    broker.advance(199)
    assert broker.pull("g", "D") == []
    broker.advance(1)
    assert [m.body for m in broker.pull("g", "D")] == [b"after"]
    broker.advance(100)
    assert [m.body for m in broker.pull("g", "D")] == [b"at"]
    with pytest.raises(ValueError):
        broker.send("D", b"x", delay_ms=1, delay_level=1)


def test_delay_survives_reopen_and_fires_once(durable: Path) -> None:
    b = rocklet.Broker(durable, clock="manual", delay_levels=[1000])
    b.send("D", b"d", delay_level=1)
    b.close()
    b = rocklet.Broker(durable, clock="manual", start_ms=10, delay_levels=[1000])
    b.advance(2000)
    assert [m.body for m in b.pull("g", "D")] == [b"d"]
    b.close()
    b = rocklet.Broker(durable, clock="manual", start_ms=5000, delay_levels=[1000])
    b.advance(10_000)
    assert [m.body for m in b.pull("h", "D")] == [b"d"]
    assert b.pending_delays() == []
    b.close()


def test_system_clock_delivers_delays() -> None:
    b = rocklet.Broker()
    b.send("D", b"soon", delay_ms=50)
    t0 = time.monotonic()
    got = list(b.subscribe("g", "D", invisible_ms=10_000, timeout=0.5))
    assert [r.message.body for r in got] == [b"soon"]
    assert time.monotonic() - t0 >= 0.04
    b.close()


def test_batch(broker: rocklet.Broker) -> None:
    rs = broker.send_batch("B", [b"a", "b", {"body": b"c", "tag": "T", "keys": ["k"], "properties": {"p": "v"}}], queue_id=1)
    assert [(r.queue_id, r.queue_offset) for r in rs] == [(1, 0), (1, 1), (1, 2)]
    ms = broker.pull("g", "B", queue=1)
    assert [(m.body, m.tag, m.keys) for m in ms] == [(b"a", None, []), (b"b", None, []), (b"c", "T", ["k"])]
    with pytest.raises(rocklet.EmptyBatch):
        broker.send_batch("B", [])
    with pytest.raises(rocklet.MixedBatch):
        broker.send_batch("B", [b"x", {"body": b"y", "topic": "Other"}])
    with pytest.raises(ValueError, match="not one of"):
        broker.send_batch("B", [{"body": b"x", "bogus": 1}])
    with pytest.raises(rocklet.EmptyBody):
        broker.send_batch("B", [b"x", b""])
    assert broker.pull("g", "B") == []  # all or nothing


def test_pull_offsets_survive_reopen(durable: Path) -> None:
    b = rocklet.Broker(durable, clock="manual", default_queues=1)
    for i in range(5):
        b.send("P", f"m{i}")
    assert [m.text() for m in b.pull("g", "P", max=2)] == ["m0", "m1"]
    assert b.committed_offset("g", "P", 0) == 2
    b.close()
    b = rocklet.Broker(durable, clock="manual", default_queues=1)
    assert b.committed_offset("g", "P", 0) == 2
    assert [m.text() for m in b.pull("g", "P")] == ["m2", "m3", "m4"]
    r = b.pull_queue("g2", "P", 0, offset=3, max=10, auto_commit=False)
    assert ([m.text() for m in r.messages], r.next_offset, r.max_offset) == (["m3", "m4"], 5, 5)
    assert b.committed_offset("g2", "P", 0) is None
    b.commit_offset("g2", "P", 0, 4)
    assert [m.text() for m in b.pull("g2", "P")] == ["m4"]
    b.close()


def test_receive_ack_and_invisible_redelivery(broker: rocklet.Broker) -> None:
    broker.send("R", b"r1", queue_id=0)
    broker.send("R", b"r2", queue_id=0)
    got = broker.receive("G", "R", 10, invisible_ms=1000)
    assert [(r.message.body, r.attempt, r.visible_at) for r in got] == [(b"r1", 1, 1000), (b"r2", 1, 1000)]
    assert broker.inflight_count("G", "R") == 2
    broker.ack("G", got[0])
    assert broker.receive("G", "R", 10, invisible_ms=1000) == []
    broker.advance(999)
    assert broker.receive("G", "R", 10, invisible_ms=1000) == []
    broker.advance(1)
    again = broker.receive("G", "R", 10, invisible_ms=1000)
    assert [(r.message.body, r.attempt) for r in again] == [(b"r2", 2)]
    with pytest.raises(rocklet.StaleReceiptHandle):
        broker.ack("G", got[1].handle)
    new = broker.change_invisible("G", again[0], 5000)
    assert new != again[0].handle
    broker.advance(4999)
    assert broker.receive("G", "R", 10, invisible_ms=1000) == []
    # A change of invisible time renews the delivery: the handle from before it still acks.
    broker.ack("G", again[0])
    with pytest.raises(rocklet.InvalidReceiptHandle):
        broker.ack("G", new)
    broker.advance(100_000)
    assert broker.receive("G", "R", 10, invisible_ms=1000) == []
    assert broker.inflight_count("G", "R") == 0
    with pytest.raises(rocklet.InvalidReceiptHandle):
        broker.ack("G", "garbage")


def test_dead_letter_and_send_back(broker: rocklet.Broker) -> None:
    broker.send("R", b"bad", queue_id=0)
    [r] = broker.receive("G", "R", 1, invisible_ms=1000)
    broker.forward_to_dead_letter("G", r)
    assert [m.body for m in broker.pull("x", "%DLQ%G")] == [b"bad"]
    [m] = broker.pull("PC", "R")
    back = broker.send_back("PC", m.offset)
    assert back.topic == "%RETRY%PC"


def test_subscribe_iterates_and_times_out(broker: rocklet.Broker) -> None:
    for i in range(3):
        broker.send("S", f"s{i}", queue_id=0)
    sub = broker.subscribe("G", "S", invisible_ms=60_000, max=2, timeout=0.05)
    got = [r.message.text() for r in sub]
    assert got == ["s0", "s1", "s2"]
    t0 = time.monotonic()
    assert list(sub) == []
    assert time.monotonic() - t0 < 5


def test_subscribe_async(broker: rocklet.Broker) -> None:
    async def consume() -> List[str]:
        out = []
        async for r in broker.subscribe("G", "A", invisible_ms=60_000, timeout=0.5):
            out.append(r.message.text())
            broker.ack("G", r)
            if len(out) == 2:
                break
        return out

    async def main() -> List[str]:
        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.05)
        broker.send("A", b"a1")
        broker.send("A", b"a2")
        return await task

    assert asyncio.run(main()) == ["a1", "a2"]


def test_introspection(broker: rocklet.Broker) -> None:
    broker.send("I", b"x", queue_id=1)
    broker.prepare("PG", "I", b"h")
    [t] = broker.topics()
    assert t.name == "I" and t.depth == 1
    assert [(q.queue_id, q.next_offset, q.visible) for q in t.queues][1] == (1, 1, 1)
    [p] = broker.pending_transactions()
    assert (p.group, p.topic, p.checks) == ("PG", "I", 0)
    s = broker.stats()
    assert (s["messages_stored"], s["halves_stored"]) == (1, 1)
    broker.create_topic("Wide", 8)
    assert [len(t.queues) for t in broker.topics() if t.name == "Wide"] == [8]
    assert broker.log_end > 0
    broker.flush()
    assert broker.log_synced == broker.log_end


def test_exception_hierarchy_and_codes(broker: rocklet.Broker) -> None:
    assert issubclass(rocklet.InvalidTopic, rocklet.ClientError)
    assert issubclass(rocklet.ClientError, rocklet.RockletError)
    assert issubclass(rocklet.CorruptLog, rocklet.RockletError)
    with pytest.raises(rocklet.InvalidTopic) as e:
        broker.send("bad topic", b"x")
    assert e.value.code == "INVALID_TOPIC" and "bad topic" in str(e.value)
    with pytest.raises(rocklet.ReservedTopic):
        broker.send("RMQ_SYS_TRANS_HALF_TOPIC", b"x")
    with pytest.raises(rocklet.EmptyBody):
        broker.send("T", b"")
    with pytest.raises(TypeError):
        broker.send("T", 42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        broker.send("T", b"x", properties={"k": 1})  # type: ignore[dict-item]
    small = rocklet.Broker(clock="manual", max_message_size=8)
    with pytest.raises(rocklet.MessageTooLarge) as e2:
        small.send("T", b"123456789")
    assert e2.value.code == "MESSAGE_TOO_LARGE"
    small.close()
    off = rocklet.Broker(clock="manual", auto_create_topics=False)
    with pytest.raises(rocklet.UnknownTopic):
        off.send("T", b"x")
    off.close()


def test_limits_and_send_back_errors_have_their_classes() -> None:
    b = rocklet.Broker(clock="manual", max_topics=1, max_groups=2)
    b.send("A", b"x")
    with pytest.raises(rocklet.TooManyTopics) as e:
        b.send("B", b"x")
    assert e.value.code == "TOO_MANY_TOPICS" and "max_topics" in str(e.value)
    half = b.prepare("PG", "A", b"half")
    with pytest.raises(rocklet.NotConsumable) as e2:
        b.send_back("G", half.send_result.offset)
    assert e2.value.code == "NOT_CONSUMABLE"
    b.close()


def test_config_errors() -> None:
    with pytest.raises(rocklet.ConfigError, match="unknown option `no_such_option`"):
        rocklet.Broker(clock="manual", no_such_option=1)
    with pytest.raises(rocklet.ConfigError, match="segment_size"):
        rocklet.Broker(clock="manual", segment_size=10)
    with pytest.raises(rocklet.ConfigError):
        rocklet.Broker(clock="manual", flush="sometimes")
    with pytest.raises(rocklet.ConfigError, match="config `segment_size`: not a finite number"):
        rocklet.Broker(clock="manual", segment_size=float("nan"))
    with pytest.raises(rocklet.ConfigError, match="config `delay_levels`: unsupported value .*set"):
        rocklet.Broker(clock="manual", delay_levels={1, 2})
    with pytest.raises(ValueError):
        rocklet.Broker(clock="lunar")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        rocklet.Broker(start_ms=5)
    with pytest.raises(ValueError):
        rocklet.Broker().advance(1)


def test_closed_and_locked(durable: Path) -> None:
    with rocklet.Broker(durable, clock="manual") as b:
        b.send("T", b"x")
        with pytest.raises(rocklet.StorageError, match="in use"):
            rocklet.Broker(durable, clock="manual")
    assert b.closed
    with pytest.raises(rocklet.BrokerClosed):
        b.send("T", b"y")
    b.close()  # idempotent
    with rocklet.Broker(durable, clock="manual") as again:
        assert [m.body for m in again.pull("g", "T")] == [b"x"]


def test_corrupt_log_is_cut_or_refused(durable: Path) -> None:
    with rocklet.Broker(durable, clock="manual", flush="sync") as b:
        b.send("T", b"kept")
    [seg] = [p for p in durable.iterdir() if p.name.isdigit()]
    with seg.open("ab") as f:
        f.write(b"\x00\x00\x00\x30torn tail of a record")
    # A torn tail is cut on open; everything acknowledged is still there.
    with rocklet.Broker(durable, clock="manual") as b:
        assert [m.body for m in b.pull("g", "T")] == [b"kept"]
