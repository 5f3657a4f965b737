"""Recovery through the binding: a damaged log raises CorruptLog and is left as it is,
`repair=True` opens it with the damage in quarantine/, a torn tail is cut, and the recovery
report says which."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import pytest

import rocklet

BODIES = [b"a" * 100, b"b" * 100, b"c" * 100]


def segment(durable: Path) -> Path:
    [seg] = [p for p in durable.iterdir() if p.name.isdigit()]
    return seg


def write_three(durable: Path) -> List[int]:
    """Three durable messages in one queue; their log offsets."""
    with rocklet.Broker(durable, clock="manual", flush="sync", default_queues=1) as b:
        offsets = [b.send("T", body).offset for body in BODIES]
        assert b.recovery_report.cuts == [] and b.failed is None
    return offsets


def flip_middle_record(durable: Path) -> Tuple[bytes, int]:
    """Flips a byte in the body of the second message; returns the bytes before and where."""
    seg = segment(durable)
    before = seg.read_bytes()
    at = before.index(BODIES[1]) + 50
    damaged = bytearray(before)
    damaged[at] ^= 0xFF
    seg.write_bytes(bytes(damaged))
    return bytes(damaged), at


def test_damage_before_valid_records_is_refused_and_changes_nothing(durable: Path) -> None:
    offsets = write_three(durable)
    damaged, _ = flip_middle_record(durable)
    with pytest.raises(rocklet.CorruptLog) as e:
        rocklet.Broker(durable, clock="manual")
    assert e.value.code == "CORRUPTED"
    assert e.value.offset == offsets[1]
    assert f"segment {0:020}" in str(e.value)
    assert f"log offset {offsets[1]}" in str(e.value)
    assert "repair=True" in str(e.value)
    assert segment(durable).read_bytes() == damaged
    assert not (durable / "quarantine").exists()
    # Refused again, still unchanged (and the directory was released).
    with pytest.raises(rocklet.CorruptLog):
        rocklet.Broker(durable, clock="manual")
    assert segment(durable).read_bytes() == damaged


def test_repair_keeps_every_valid_record_and_quarantines_the_damage(durable: Path) -> None:
    offsets = write_three(durable)
    damaged, _ = flip_middle_record(durable)
    with rocklet.Broker(durable, clock="manual", repair=True) as b:
        assert [m.body for m in b.pull("g", "T")] == [BODIES[0], BODIES[2]]
        report = b.recovery_report
    assert isinstance(report, rocklet.RecoveryReport)
    assert report.cuts == []
    [q] = report.quarantined
    assert isinstance(q, rocklet.Quarantined)
    assert (q.offset, q.bytes) == (offsets[1], offsets[2] - offsets[1])
    assert q.name == f"{offsets[1]:020}-{offsets[2]:020}.damaged"
    assert f"segment {0:020}" in q.reason
    assert report.bytes_quarantined == q.bytes
    assert report.segments == 1
    kept = durable / "quarantine" / q.name
    assert kept.read_bytes() == damaged[offsets[1] : offsets[2]]
    # The repair is durable: a plain open afterwards finds nothing to refuse.
    with rocklet.Broker(durable, clock="manual") as b:
        assert b.recovery_report.quarantined == []
        assert [m.body for m in b.pull("g2", "T")] == [BODIES[0], BODIES[2]]


def test_zeros_at_the_tail_are_the_end_of_the_data(durable: Path) -> None:
    # A file extended and never written (or preallocated, as RocketMQ's): not a cut.
    write_three(durable)
    seg = segment(durable)
    end = seg.stat().st_size
    with seg.open("ab") as f:
        f.write(bytes(64))
    with rocklet.Broker(durable, clock="manual") as b:
        report = b.recovery_report
        assert seg.stat().st_size == end + 64, "the zeros were cut"
        assert [m.body for m in b.pull("g", "T")] == BODIES
    assert report.cuts == [] and report.quarantined == []
    assert report.bytes_truncated == 0


def test_a_torn_record_at_the_tail_is_cut_and_kept_in_quarantine(durable: Path) -> None:
    write_three(durable)
    seg = segment(durable)
    end = seg.stat().st_size
    torn = b"\x00\x00\x00\x30torn tail of a record"
    with seg.open("ab") as f:
        f.write(torn)
    with rocklet.Broker(durable, clock="manual") as b:
        report = b.recovery_report
        assert [m.body for m in b.pull("g", "T")] == BODIES
    [cut] = report.cuts
    assert (cut.offset, cut.bytes) == (end, len(torn))
    assert cut.kept_as is not None
    assert (durable / "quarantine" / cut.kept_as).read_bytes() == torn
    assert report.quarantined == []


def test_a_memory_broker_reports_an_empty_recovery(broker: rocklet.Broker) -> None:
    r = broker.recovery_report
    assert (r.segments, r.records, r.bytes_truncated, r.cuts, r.quarantined) == (0, 0, 0, [], [])
    assert broker.failed is None
    broker.close()
    with pytest.raises(rocklet.BrokerClosed):
        broker.recovery_report


def test_failed_is_a_storage_error_with_its_own_code() -> None:
    assert issubclass(rocklet.BrokerFailed, rocklet.StorageError)
    assert rocklet.BrokerFailed.code == "FAILED"
