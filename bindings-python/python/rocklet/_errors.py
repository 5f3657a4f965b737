"""The exception hierarchy (raised by the native module, which looks the classes up here).

```text
RockletError                      base of everything the engine raises; `.code` is stable
├── ClientError                   the caller's mistake (core `ClientError`), one subclass per code
│   └── InvalidArgument           an argument out of range (also a ValueError)
├── ConfigError                   a configuration that cannot work
├── StorageError                  the storage failed (I/O, data directory locked)
│   └── BrokerFailed              a sync failed earlier: the broker takes nothing more; reopen it
├── CorruptLog                    recovery found damage it will not cut by itself (`.offset`)
├── EncodeError                   a record would not fit the format
├── BrokerClosed                  the broker was closed
├── WrongClock                    a manual-clock call on the system clock (also a ValueError)
└── InternalError                 a bug in Rocklet (a caught Rust panic)
```

The codes are the one table of the three bindings (Node and wasm give the same code for the
same failure): `tests/vectors/error-codes.json`, checked by `tests/test_error_codes.py`.
Three codes were renamed to that table's; until the next release each still compares equal
to its old name, with a DeprecationWarning: `CONFIG` (now `INVALID_CONFIG`), `CORRUPT_LOG`
(now `CORRUPTED`), `BROKER_FAILED` (now `FAILED`).
"""

from __future__ import annotations

import warnings
from typing import ClassVar, Dict, List, Type


class Code(str):
    """A renamed code: the new name, equal to the old one too (with a DeprecationWarning)
    until the next release."""

    old: str

    def __new__(cls, code: str, old: str) -> "Code":
        c = super().__new__(cls, code)
        c.old = old
        return c

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str) and other == self.old:
            warnings.warn(
                f"the error code {self.old} is now {str(self)}; the old name goes in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
            return True
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


class RockletError(Exception):
    """Base of every error Rocklet raises; `code` is a stable upper-case code."""

    code: ClassVar[str] = "ROCKLET_ERROR"


class ClientError(RockletError):
    """The caller's mistake: nothing changed in the broker."""

    code = "CLIENT_ERROR"


class ConfigError(RockletError):
    """A configuration value that cannot work."""

    code = Code("INVALID_CONFIG", old="CONFIG")


class StorageError(RockletError):
    """The storage failed (I/O error, data directory in use)."""

    code = "STORAGE"


class BrokerFailed(StorageError):
    """A sync failed: the broker stopped taking requests and must be closed and opened again (recovery keeps what is durable)."""

    code = Code("FAILED", old="BROKER_FAILED")


class CorruptLog(RockletError):
    """The log holds damage recovery will not cut off by itself; `offset` is where it starts. `Broker(path, repair=True)` opens it, moving the damaged bytes to quarantine."""

    code = Code("CORRUPTED", old="CORRUPT_LOG")
    offset: int


class EncodeError(RockletError):
    """A record would not fit the commit-log format."""

    code = "ENCODE"


class BrokerClosed(RockletError):
    """The broker was closed."""

    code = "BROKER_CLOSED"


class WrongClock(RockletError, ValueError):
    """A call that moves the clock (`advance`, `run_until_idle`, ...) on a broker opened on the system clock."""

    code = "WRONG_CLOCK"


class InternalError(RockletError):
    """A bug in Rocklet (a Rust panic was caught); the broker is unusable."""

    code = "INTERNAL"


class InvalidTopic(ClientError):
    """A topic name that is empty, too long or has characters outside [A-Za-z0-9_%|-]."""

    code = "INVALID_TOPIC"


class ReservedTopic(ClientError):
    """A topic reserved for the broker's own records."""

    code = "RESERVED_TOPIC"


class UnknownTopic(ClientError):
    """A topic that does not exist while auto-creation is off."""

    code = "UNKNOWN_TOPIC"


class InvalidGroup(ClientError):
    """A producer or consumer group name that is not valid."""

    code = "INVALID_GROUP"


class InvalidQueue(ClientError):
    """A queue id the topic does not have."""

    code = "INVALID_QUEUE"


class EmptyBody(ClientError):
    """A message without a body."""

    code = "EMPTY_BODY"


class MessageTooLarge(ClientError):
    """A body above `max_message_size`."""

    code = "MESSAGE_TOO_LARGE"


class BatchTooLarge(ClientError):
    """A batch whose bodies together exceed `max_batch_size`."""

    code = "BATCH_TOO_LARGE"


class EmptyBatch(ClientError):
    """A batch without messages."""

    code = "EMPTY_BATCH"


class MixedBatch(ClientError):
    """A batch whose messages do not share one topic and flags."""

    code = "MIXED_BATCH"


class DelayInBatch(ClientError):
    """A batch holding a delayed message."""

    code = "DELAY_IN_BATCH"


class BatchToRetryTopic(ClientError):
    """A batch sent to a %RETRY% topic."""

    code = "BATCH_TO_RETRY_TOPIC"


class InvalidDelay(ClientError):
    """A delay level or time that is not valid."""

    code = "INVALID_DELAY"


class DelayOnTransaction(ClientError):
    """A transactional message cannot be delayed."""

    code = "DELAY_ON_TRANSACTION"


class InvalidProperty(ClientError):
    """A property name or value that is not allowed (reserved, or with separators)."""

    code = "INVALID_PROPERTY"


class PropertiesTooLarge(ClientError):
    """Properties above 32767 bytes."""

    code = "PROPERTIES_TOO_LARGE"


class UnknownTransaction(ClientError):
    """No such transaction."""

    code = "UNKNOWN_TRANSACTION"


class MalformedTransactionId(ClientError):
    """A transaction id that is not 16 hex digits."""

    code = "MALFORMED_TRANSACTION_ID"


class TransactionAlreadyResolved(ClientError):
    """The transaction was already resolved the other way."""

    code = "TRANSACTION_ALREADY_RESOLVED"


class WrongProducerGroup(ClientError):
    """The transaction belongs to another producer group."""

    code = "WRONG_PRODUCER_GROUP"


class InvalidReceiptHandle(ClientError):
    """A receipt handle that names no delivery in flight."""

    code = "INVALID_RECEIPT_HANDLE"


class StaleReceiptHandle(ClientError):
    """A receipt handle of an earlier delivery: the message was delivered again since."""

    code = "STALE_RECEIPT_HANDLE"


class InvalidArgument(ClientError, ValueError):
    """An argument outside what the broker accepts (a ValueError too, Python's idiom)."""

    code = "INVALID_ARGUMENT"


class ProducerGroupRequired(ClientError):
    """An END_TRANSACTION that names no producer group."""

    code = "PRODUCER_GROUP_REQUIRED"


class TooManyGroups(ClientError):
    """A new group past `max_groups`."""

    code = "TOO_MANY_GROUPS"


class TooManyTopics(ClientError):
    """A new topic past `max_topics`."""

    code = "TOO_MANY_TOPICS"


class NotConsumable(ClientError):
    """A send-back of something the group cannot consume (no visible message of a consumer topic at that offset)."""

    code = "NOT_CONSUMABLE"


#: The ClientError subclass of each code (a code not listed raises ClientError itself).
BY_CODE: Dict[str, Type[ClientError]] = {c.code: c for c in ClientError.__subclasses__()}

#: Every class here (the native module adds each to itself).
ALL: List[Type[RockletError]] = [
    RockletError, *RockletError.__subclasses__(), BrokerFailed, *BY_CODE.values()
]
for _cls in ALL:
    _cls.__module__ = "rocklet"
