"""The value types the native module returns (built by calling the class), besides the hot
`Message`, `SendResult` and `Received`, which stay native for speed. Frozen dataclasses
(each field documented under it); reprs show Python values (a list field, its length)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:
    from rocklet._rocklet import Message


class _Value:
    _shown: tuple[str, ...] = ()

    def __repr__(self) -> str:
        def show(v: object) -> str:
            return str(len(v)) if isinstance(v, list) else repr(v)

        parts = ", ".join(f"{n}={show(getattr(self, n))}" for n in self._shown)
        return f"{type(self).__name__}({parts})"


@dataclass(frozen=True, repr=False)
class PullResult(_Value):
    """One page of a queue read by `pull_queue`."""

    _shown = ("messages", "next_offset", "max_offset")
    messages: List[Message]
    """Messages, in queue order."""
    next_offset: int
    """Offset to read from next."""
    max_offset: int
    """Messages visible in the queue."""


@dataclass(frozen=True, repr=False)
class QueueInfo(_Value):
    """One queue of a topic."""

    _shown = ("queue_id", "next_offset", "visible")
    queue_id: int
    """Queue id."""
    next_offset: int
    """Next queue offset (messages written)."""
    visible: int
    """Messages consumers can see (durable ones, under sync flush)."""


@dataclass(frozen=True, repr=False)
class TopicInfo(_Value):
    """A topic and its queues."""

    _shown = ("name", "queues", "depth")
    name: str
    """Topic name."""
    queues: List[QueueInfo]
    """Its queues."""

    @property
    def depth(self) -> int:
        """Visible messages over all queues."""
        return sum(q.visible for q in self.queues)


@dataclass(frozen=True, repr=False)
class PendingTransaction(_Value):
    """A transaction waiting for its resolution."""

    _shown = ("transaction_id", "group", "topic", "checks", "next_check")
    transaction_id: str
    """Transaction id (16 hex digits)."""
    group: str
    """Producer group (whose checker is asked)."""
    topic: str
    """Topic it will be delivered to."""
    queue_id: int
    """Queue it will be delivered to."""
    checks: int
    """Checks made so far."""
    next_check: Optional[int]
    """Time of the next check (ms); None while no checker of the group is registered."""


@dataclass(frozen=True, repr=False)
class PendingDelay(_Value):
    """A delayed message not yet delivered."""

    _shown = ("offset", "topic", "queue_id", "due")
    offset: int
    """Log offset of the stored delayed message."""
    topic: str
    """Topic it will be delivered to."""
    queue_id: int
    """Queue it will be delivered to."""
    due: int
    """When it becomes visible (ms)."""


@dataclass(frozen=True, repr=False)
class Cut(_Value):
    """A torn tail cut off the log on open (nothing acknowledged can be in one)."""

    _shown = ("offset", "bytes", "kept_as", "reason")
    offset: int
    """Log offset of the first byte cut."""
    bytes: int
    """Bytes cut."""
    reason: str
    """Why."""
    kept_as: Optional[str]
    """The file under `quarantine/` in the data directory that keeps the cut bytes that were not zero; None when they were all zero."""


@dataclass(frozen=True, repr=False)
class Quarantined(_Value):
    """A damaged range that `repair=True` moved out of the log into quarantine."""

    _shown = ("offset", "bytes", "name", "reason")
    offset: int
    """Log offset of the first damaged byte."""
    bytes: int
    """Bytes moved."""
    reason: str
    """What was wrong (names the segment file and the position in it)."""
    name: str
    """The file under `quarantine/` in the data directory holding the bytes, unchanged."""


@dataclass(frozen=True, repr=False)
class RecoveryReport(_Value):
    """What recovery found when the broker opened."""

    _shown = ("segments", "records", "bytes_scanned", "bytes_truncated", "cuts", "quarantined")
    segments: int
    """Segment files read."""
    records: int
    """Valid records kept."""
    bytes_scanned: int
    """Bytes read."""
    bytes_truncated: int
    """Bytes cut off a torn tail."""
    bytes_quarantined: int
    """Bytes `repair=True` moved to quarantine."""
    cuts: List[Cut]
    """Torn tails cut (at most one: the end of the last segment)."""
    quarantined: List[Quarantined]
    """Damaged ranges `repair=True` moved to quarantine (empty after a plain open, which raises `CorruptLog` instead)."""


#: Every class here (the native module adds each to itself).
ALL = (PullResult, QueueInfo, TopicInfo, PendingTransaction, PendingDelay, Cut,
       Quarantined, RecoveryReport)
for _cls in ALL:
    _cls.__module__ = "rocklet"
