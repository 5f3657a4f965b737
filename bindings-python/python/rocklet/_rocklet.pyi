"""Type stubs of the native module `rocklet._rocklet` (checked with mypy.stubtest in CI)."""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Awaitable, Callable, ClassVar, Dict, Iterable, List, Literal, Mapping, final, Optional, Sequence, Union

from rocklet._errors import (
    RockletError as RockletError,
    ClientError as ClientError,
    ConfigError as ConfigError,
    StorageError as StorageError,
    BrokerFailed as BrokerFailed,
    CorruptLog as CorruptLog,
    EncodeError as EncodeError,
    BrokerClosed as BrokerClosed,
    WrongClock as WrongClock,
    InternalError as InternalError,
    InvalidTopic as InvalidTopic,
    ReservedTopic as ReservedTopic,
    UnknownTopic as UnknownTopic,
    InvalidGroup as InvalidGroup,
    InvalidQueue as InvalidQueue,
    EmptyBody as EmptyBody,
    MessageTooLarge as MessageTooLarge,
    BatchTooLarge as BatchTooLarge,
    EmptyBatch as EmptyBatch,
    MixedBatch as MixedBatch,
    DelayInBatch as DelayInBatch,
    BatchToRetryTopic as BatchToRetryTopic,
    InvalidDelay as InvalidDelay,
    DelayOnTransaction as DelayOnTransaction,
    InvalidProperty as InvalidProperty,
    PropertiesTooLarge as PropertiesTooLarge,
    UnknownTransaction as UnknownTransaction,
    MalformedTransactionId as MalformedTransactionId,
    TransactionAlreadyResolved as TransactionAlreadyResolved,
    WrongProducerGroup as WrongProducerGroup,
    InvalidReceiptHandle as InvalidReceiptHandle,
    StaleReceiptHandle as StaleReceiptHandle,
    InvalidArgument as InvalidArgument,
    ProducerGroupRequired as ProducerGroupRequired,
    TooManyGroups as TooManyGroups,
    TooManyTopics as TooManyTopics,
    NotConsumable as NotConsumable,
)
from rocklet._types import (
    PullResult as PullResult,
    QueueInfo as QueueInfo,
    TopicInfo as TopicInfo,
    PendingTransaction as PendingTransaction,
    PendingDelay as PendingDelay,
    Cut as Cut,
    Quarantined as Quarantined,
    RecoveryReport as RecoveryReport,
)

__version__: str
__all__ = [
    "BatchToRetryTopic",
    "BatchTooLarge",
    "Broker",
    "BrokerClosed",
    "BrokerFailed",
    "ClientError",
    "ConfigError",
    "CorruptLog",
    "Cut",
    "DelayInBatch",
    "DelayOnTransaction",
    "EmptyBatch",
    "EmptyBody",
    "EncodeError",
    "InternalError",
    "InvalidArgument",
    "InvalidDelay",
    "InvalidGroup",
    "InvalidProperty",
    "InvalidQueue",
    "InvalidReceiptHandle",
    "InvalidTopic",
    "MalformedTransactionId",
    "Message",
    "MessageTooLarge",
    "MixedBatch",
    "NotConsumable",
    "PendingDelay",
    "PendingTransaction",
    "ProducerGroupRequired",
    "PropertiesTooLarge",
    "PullResult",
    "Quarantined",
    "QueueInfo",
    "Received",
    "RecoveryReport",
    "ReservedTopic",
    "RockletError",
    "SendResult",
    "StaleReceiptHandle",
    "StorageError",
    "Subscription",
    "TooManyGroups",
    "TooManyTopics",
    "TopicInfo",
    "Transaction",
    "TransactionAlreadyResolved",
    "UnknownTopic",
    "UnknownTransaction",
    "WrongClock",
    "WrongProducerGroup",
    "__version__",
]

_Body = Union[bytes, bytearray, memoryview, str]
_ResolutionName = Literal["commit", "rollback", "unknown"]
_EndResolution = Literal["commit", "rollback"]
# A checker answers one of the three resolutions; an `async def` checker is awaited.
_Checker = Callable[["Message"], Union[_ResolutionName, Awaitable[_ResolutionName]]]
_BatchItem = Union[_Body, Mapping[str, Any]]

@final
class Message:
    """A stored message as consumers (and checkers) see it."""

    @property
    def topic(self) -> str:
        """Topic."""
    @property
    def body(self) -> bytes:
        """The body, as bytes."""
    @property
    def tag(self) -> Optional[str]:
        """RocketMQ tag, if any."""
    @property
    def keys(self) -> List[str]:
        """Business keys."""
    @property
    def properties(self) -> Dict[str, str]:
        """User properties (not TAGS, KEYS or the broker's own)."""
    @property
    def msg_id(self) -> str:
        """Message id (the client's UNIQ_KEY, else the offset message id)."""
    @property
    def queue_id(self) -> int:
        """Queue."""
    @property
    def queue_offset(self) -> int:
        """Position in the queue."""
    @property
    def offset(self) -> int:
        """Log offset of the record holding the body."""
    @property
    def born_timestamp(self) -> int:
        """Producer's timestamp (ms)."""
    @property
    def store_timestamp(self) -> int:
        """When it was stored (ms, broker clock)."""
    @property
    def reconsume_times(self) -> int:
        """Times it was sent back for retry."""
    @property
    def transaction_id(self) -> Optional[str]:
        """Transaction id: set only on a message handed to a checker."""
    @property
    def check_times(self) -> Optional[int]:
        """Which check this is (from 1): set only on a message handed to a checker."""
    def text(self) -> str:
        """The body decoded as UTF-8 (errors replaced)."""

@final
class SendResult:
    """Where a sent (or prepared) message was stored."""

    @property
    def msg_id(self) -> str:
        """Message id."""
    @property
    def topic(self) -> str:
        """Topic."""
    @property
    def queue_id(self) -> int:
        """Queue."""
    @property
    def queue_offset(self) -> int:
        """Position in the queue (0 for a half message)."""
    @property
    def offset(self) -> int:
        """Log offset of the record."""
    @property
    def transaction_id(self) -> Optional[str]:
        """Transaction id (16 hex digits) for a prepared message, else None."""

@final
class Received:
    """A received message with the handle that acks it."""

    @property
    def message(self) -> Message:
        """The message."""
    @property
    def handle(self) -> str:
        """Receipt handle: pass it to `ack` or `change_invisible`."""
    @property
    def attempt(self) -> int:
        """Delivery attempt, from 1."""
    @property
    def visible_at(self) -> int:
        """When it becomes visible again unless acked (ms, broker clock)."""

@final
class Transaction:
    """A prepared transaction: `commit()` / `rollback()`, or a context manager (a normal exit
    commits, an exception rolls back and propagates)."""

    @property
    def id(self) -> str:
        """The transaction id (16 hex digits)."""
    @property
    def transaction_id(self) -> str:
        """The transaction id (16 hex digits); the same as `id`."""
    @property
    def group(self) -> str:
        """The producer group."""
    @property
    def send_result(self) -> SendResult:
        """Where the half message was stored."""
    @property
    def resolution(self) -> Optional[_EndResolution]:
        """"commit" or "rollback" once this object ended it, else None."""
    def commit(self) -> bool:
        """Commits: the message becomes visible. Returns True if it was already committed."""
    def rollback(self) -> bool:
        """Rolls back: the message is never delivered. Returns True if it was already rolled back."""
    def __enter__(self) -> Transaction: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class Subscription:
    """Messages of a topic as they arrive, for one consumer group (see `Broker.subscribe`)."""

    def __iter__(self) -> Subscription: ...
    def __next__(self) -> Received: ...
    def __aiter__(self) -> Subscription: ...
    def __anext__(self) -> Awaitable[Received]: ...
    def ack(self, received: Union[str, Received]) -> None:
        """Acknowledges a message this subscription delivered (moving on acks it too)."""

@final
class Broker:
    """An embedded Rocklet broker: RocketMQ-style transactional messages in-process.

    `Broker()` keeps the log in memory; `Broker("dir")` in segment files in a directory.
    A log with damage other than a torn tail raises `CorruptLog`; `repair=True` opens it,
    moving each damaged range to `dir/quarantine/`. Keywords are the core `Config` fields.
    `clock="system"` runs a background driver thread; `clock="manual"` moves time only by
    `advance()`.
    """

    def __new__(
        cls,
        path: Union[str, os.PathLike[str], None] = None,
        *,
        clock: Literal["system", "manual"] = "system",
        start_ms: Optional[int] = None,
        repair: bool = False,
        **config: Any,
    ) -> Broker: ...
    @property
    def path(self) -> Optional[str]:
        """The data directory, or None for a broker in memory."""
    @property
    def clock(self) -> Literal["system", "manual"]:
        """`"system"` or `"manual"`."""
    @property
    def now(self) -> int:
        """The broker's current time in ms (the manual clock, or the system clock)."""
    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
    @property
    def recovery_report(self) -> RecoveryReport:
        """What recovery found when the broker opened (cuts, quarantined ranges)."""
    @property
    def failed(self) -> Optional[str]:
        """Why the broker stopped taking requests (a sync failed), or None."""
    @property
    def log_end(self) -> int:
        """Bytes in the log (next append offset)."""
    @property
    def log_synced(self) -> int:
        """Everything below this log offset is durable."""
    def advance(self, ms: int) -> None:
        """Manual clock only: moves time forward by `ms`, firing everything due on the way."""
    def advance_to(self, t: int) -> None:
        """Manual clock only: `advance(t - now)`."""
    def run_until_idle(self) -> None:
        """Manual clock only: fires timers in order until none is left."""
    def flush(self) -> None:
        """Makes everything appended durable now (fsync), whatever the flush mode."""
    def close(self) -> None:
        """Syncs, stops the driver thread and releases the data directory. Idempotent."""
    def __enter__(self) -> Broker: ...
    def __exit__(self, *_args: object) -> bool: ...
    def send(
        self,
        topic: str,
        body: _Body,
        *,
        tag: Optional[str] = None,
        keys: Union[str, Iterable[str], None] = None,
        properties: Optional[Mapping[str, str]] = None,
        delay_level: Optional[int] = None,
        deliver_at_ms: Optional[int] = None,
        delay_ms: Optional[int] = None,
        queue_id: Optional[int] = None,
        message_group: Optional[str] = None,
        message_id: Optional[str] = None,
    ) -> SendResult:
        """Sends one message; returns where it was stored."""
    def send_batch(self, topic: str, messages: Iterable[_BatchItem], *, queue_id: Optional[int] = None) -> List[SendResult]:
        """Sends a batch to one topic, all or nothing, with consecutive queue offsets."""
    def set_checker(self, group: str, checker: Optional[_Checker]) -> None:
        """Registers (or with None removes) the checker of a producer group."""
    def prepare(
        self,
        group: str,
        topic: str,
        body: _Body,
        *,
        tag: Optional[str] = None,
        keys: Union[str, Iterable[str], None] = None,
        properties: Optional[Mapping[str, str]] = None,
        queue_id: Optional[int] = None,
        message_id: Optional[str] = None,
        check_immunity_ms: Optional[int] = None,
    ) -> Transaction:
        """Stores a half (prepared) message; returns its `Transaction`."""
    def transaction(
        self,
        group: str,
        topic: str,
        body: _Body,
        *,
        tag: Optional[str] = None,
        keys: Union[str, Iterable[str], None] = None,
        properties: Optional[Mapping[str, str]] = None,
        queue_id: Optional[int] = None,
        message_id: Optional[str] = None,
        check_immunity_ms: Optional[int] = None,
    ) -> Transaction:
        """`with broker.transaction(...) as tx:` prepares now; exit commits, an exception rolls back."""
    def end_transaction(self, transaction_id: str, resolution: _ResolutionName, *, group: Optional[str] = None) -> bool:
        """Ends a transaction by id; True when it was already resolved this way."""
    def pull(self, group: str, topic: str, queue: Optional[int] = None, max: int = 32, *, tags: str = "*") -> List[Message]:
        """Reads from the group's committed offsets and commits past what it returns: the
        queue `queue` names, or every queue of the topic. A missing topic raises `UnknownTopic`."""
    def pull_queue(
        self,
        group: str,
        topic: str,
        queue_id: int,
        *,
        offset: Optional[int] = None,
        max: int = 32,
        tags: str = "*",
        auto_commit: bool = True,
    ) -> PullResult:
        """Reads one queue from `offset` (default: the group's committed offset)."""
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commits a consumer group's offset in a queue."""
    def committed_offset(self, group: str, topic: str, queue_id: int) -> Optional[int]:
        """A consumer group's committed offset in a queue, or None."""
    def receive(
        self,
        group: str,
        topic: str,
        max: int = 32,
        *,
        invisible_ms: int,
        queue: Optional[int] = None,
        tags: str = "*",
    ) -> List[Received]:
        """Receives up to `max` messages, invisible to the group for `invisible_ms` unless acked."""
    def ack(self, group: str, handle: Union[str, Received]) -> None:
        """Acknowledges a received message."""
    def change_invisible(self, group: str, handle: Union[str, Received], invisible_ms: int) -> str:
        """Changes how long a received message stays invisible; returns the new handle."""
    def forward_to_dead_letter(self, group: str, handle: Union[str, Received]) -> None:
        """Gives a received message up at once: it goes to `%DLQ%<group>`."""
    def send_back(self, group: str, offset: int, delay_level: Optional[int] = None) -> SendResult:
        """A pulled message (by log offset) failed: back to `%RETRY%<group>` after a delay."""
    def subscribe(
        self,
        group: str,
        topic: str,
        *,
        invisible_ms: int,
        max: int = 32,
        tags: str = "*",
        timeout: Optional[float] = None,
    ) -> Subscription:
        """An iterator (and async iterator) of `Received` that waits for messages."""
    def create_topic(self, name: str, queues: int) -> None:
        """Creates a topic with `queues` queues (or grows it)."""
    def declare_group(self, name: str, *, fifo: bool = False) -> None:
        """Declares a consumer group; `fifo=True` makes its receives orderly."""
    def topics(self) -> List[TopicInfo]:
        """Consumer-visible topics with their queues."""
    def pending_transactions(self, limit: Optional[int] = None) -> List[PendingTransaction]:
        """Transactions waiting for commit or rollback, in log order."""
    def pending_delays(self, limit: Optional[int] = None) -> List[PendingDelay]:
        """Delayed messages not yet delivered, in log order."""
    def inflight_count(self, group: str, topic: str) -> int:
        """Messages `group` received from `topic` and has not acked yet."""
    def stats(self) -> Dict[str, int]:
        """The broker's counters."""
