//! The exception hierarchy and every mapping from core errors to Python exceptions.
//!
//! ```text
//! RockletError                      base of everything the engine raises; `.code` is stable
//! ├── ClientError                   the caller's mistake (core `ClientError`), one subclass per code
//! │   ├── InvalidTopic, ReservedTopic, UnknownTopic, InvalidGroup, InvalidQueue, EmptyBody,
//! │   ├── MessageTooLarge, BatchTooLarge, EmptyBatch, MixedBatch, DelayInBatch, BatchToRetryTopic,
//! │   ├── InvalidDelay, DelayOnTransaction, InvalidProperty, PropertiesTooLarge,
//! │   ├── UnknownTransaction, MalformedTransactionId, TransactionAlreadyResolved, WrongProducerGroup,
//! │   ├── ProducerGroupRequired, TooManyGroups, TooManyTopics, NotConsumable,
//! │   └── InvalidReceiptHandle, StaleReceiptHandle, InvalidArgument
//! ├── ConfigError                   a configuration that cannot work
//! ├── StorageError                  the storage failed (I/O, data directory locked)
//! │   └── BrokerFailed              a sync failed earlier: the broker takes nothing more; reopen it
//! ├── CorruptLog                    recovery found damage it will not cut by itself (`.offset`);
//! │                                 `Broker(path, repair=True)` opens the log
//! ├── EncodeError                   a record would not fit the format
//! ├── BrokerClosed                  the broker was closed
//! └── InternalError                 a bug in Rocklet (a caught Rust panic)
//! ```

use std::fmt::Display;
use std::io;

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyType;
use rocklet_core::{ClientError as CoreClientError, Error as CoreError};
use rocklet_embed::ErrorKind;

/// The exceptions outside `ClientError`'s family, each with its base and `code`; `register`
/// adds them to the module.
macro_rules! errors {
    ($( $name:ident($base:ty) = $code:literal : $doc:literal ),* $(,)?) => {
        $( create_exception!(rocklet, $name, $base, $doc); )*

        fn add_errors(m: &Bound<'_, PyModule>) -> PyResult<()> {
            let py = m.py();
            $(
                let t = py.get_type::<$name>();
                t.setattr("code", $code)?;
                m.add(stringify!($name), t)?;
            )*
            Ok(())
        }
    };
}

errors! {
    RockletError(PyException) = "ROCKLET_ERROR": "Base of every error Rocklet raises; `code` is a stable upper-case code.",
    ClientError(RockletError) = "CLIENT_ERROR": "The caller's mistake: nothing changed in the broker.",
    ConfigError(RockletError) = "CONFIG": "A configuration value that cannot work.",
    StorageError(RockletError) = "STORAGE": "The storage failed (I/O error, data directory in use).",
    BrokerFailed(StorageError) = "BROKER_FAILED": "A sync failed: the broker stopped taking requests and must be closed and opened again (recovery keeps what is durable).",
    CorruptLog(RockletError) = "CORRUPT_LOG": "The log holds damage recovery will not cut off by itself; `offset` is where it starts. `Broker(path, repair=True)` opens it, moving the damaged bytes to quarantine.",
    EncodeError(RockletError) = "ENCODE": "A record would not fit the commit-log format.",
    BrokerClosed(RockletError) = "BROKER_CLOSED": "The broker was closed.",
    InternalError(RockletError) = "INTERNAL": "A bug in Rocklet (a Rust panic was caught); the broker is unusable.",
}

macro_rules! client_errors {
    ($( $name:ident = $code:literal : $doc:literal ),* $(,)?) => {
        $( create_exception!(rocklet, $name, ClientError, $doc); )*

        /// The exception class for a client error code; `None` for codes this binding does
        /// not know yet (the core's enum is non-exhaustive).
        fn client_class<'py>(py: Python<'py>, code: &str) -> Option<Bound<'py, PyType>> {
            match code {
                $( $code => Some(py.get_type::<$name>()), )*
                _ => None,
            }
        }

        /// Adds every client error class to the module, each with its `code`.
        fn add_client_errors(m: &Bound<'_, PyModule>) -> PyResult<()> {
            let py = m.py();
            $(
                let t = py.get_type::<$name>();
                t.setattr("code", $code)?;
                m.add(stringify!($name), t)?;
            )*
            Ok(())
        }
    };
}

client_errors! {
    InvalidTopic = "INVALID_TOPIC": "A topic name that is empty, too long or has characters outside [A-Za-z0-9_%|-].",
    ReservedTopic = "RESERVED_TOPIC": "A topic reserved for the broker's own records.",
    UnknownTopic = "UNKNOWN_TOPIC": "A topic that does not exist while auto-creation is off.",
    InvalidGroup = "INVALID_GROUP": "A producer or consumer group name that is not valid.",
    InvalidQueue = "INVALID_QUEUE": "A queue id the topic does not have.",
    EmptyBody = "EMPTY_BODY": "A message without a body.",
    MessageTooLarge = "MESSAGE_TOO_LARGE": "A body above `max_message_size`.",
    BatchTooLarge = "BATCH_TOO_LARGE": "A batch whose bodies together exceed `max_batch_size`.",
    EmptyBatch = "EMPTY_BATCH": "A batch without messages.",
    MixedBatch = "MIXED_BATCH": "A batch whose messages do not share one topic and flags.",
    DelayInBatch = "DELAY_IN_BATCH": "A batch holding a delayed message.",
    BatchToRetryTopic = "BATCH_TO_RETRY_TOPIC": "A batch sent to a %RETRY% topic.",
    InvalidDelay = "INVALID_DELAY": "A delay level or time that is not valid.",
    DelayOnTransaction = "DELAY_ON_TRANSACTION": "A transactional message cannot be delayed.",
    InvalidProperty = "INVALID_PROPERTY": "A property name or value that is not allowed (reserved, or with separators).",
    PropertiesTooLarge = "PROPERTIES_TOO_LARGE": "Properties above 32767 bytes.",
    UnknownTransaction = "UNKNOWN_TRANSACTION": "No such transaction.",
    MalformedTransactionId = "MALFORMED_TRANSACTION_ID": "A transaction id that is not 16 hex digits.",
    TransactionAlreadyResolved = "TRANSACTION_ALREADY_RESOLVED": "The transaction was already resolved the other way.",
    WrongProducerGroup = "WRONG_PRODUCER_GROUP": "The transaction belongs to another producer group.",
    InvalidReceiptHandle = "INVALID_RECEIPT_HANDLE": "A receipt handle that names no delivery in flight.",
    StaleReceiptHandle = "STALE_RECEIPT_HANDLE": "A receipt handle of an earlier delivery: the message was delivered again since.",
    InvalidArgument = "INVALID_ARGUMENT": "An argument outside what the broker accepts.",
    ProducerGroupRequired = "PRODUCER_GROUP_REQUIRED": "An END_TRANSACTION that names no producer group.",
    TooManyGroups = "TOO_MANY_GROUPS": "A new group past `max_groups`.",
    TooManyTopics = "TOO_MANY_TOPICS": "A new topic past `max_topics`.",
    NotConsumable = "NOT_CONSUMABLE": "A send-back of something the group cannot consume (no visible message of a consumer topic at that offset).",
}

/// A failure on the Rust side, carried out of a GIL-free section and turned into an
/// exception once the GIL is held again.
#[derive(Debug)]
pub enum Fail {
    Core(CoreError<io::Error>),
    Client(CoreClientError),
    Closed,
    /// The broker stopped after an earlier storage failure or a caught panic.
    Broken(String),
    Panic(String),
    /// An argument out of range (ValueError; the text names it).
    Value(String),
    /// A bug: an unexpected reply.
    Internal(String),
}

/// A shared operation's failure (host errors: the core's, or this binding's own `Fail`).
impl<H: Into<Fail> + std::fmt::Debug> From<rocklet_embed::Fail<H>> for Fail {
    fn from(e: rocklet_embed::Fail<H>) -> Self {
        match e {
            rocklet_embed::Fail::Client(c) => Fail::Client(c),
            rocklet_embed::Fail::Host(h) => h.into(),
            rocklet_embed::Fail::Closed(_) => Fail::Closed,
            rocklet_embed::Fail::WrongClock(w) => Fail::Value(w.into()),
            rocklet_embed::Fail::Argument(w) => Fail::Value(w),
            rocklet_embed::Fail::Unexpected(w) => Fail::Internal(w),
            other => Fail::Internal(format!("{other:?}")),
        }
    }
}

impl rocklet_embed::SharedFail<rocklet_core::AnyStorage> for Fail {
    fn broken(why: String) -> Self {
        Fail::Broken(why)
    }
    fn panic(why: String) -> Self {
        Fail::Panic(why)
    }
    fn failed(reason: String) -> Self {
        Fail::Core(CoreError::Failed { reason })
    }
}

impl From<CoreError<io::Error>> for Fail {
    fn from(e: CoreError<io::Error>) -> Self {
        Fail::Core(e)
    }
}

impl From<CoreClientError> for Fail {
    fn from(e: CoreClientError) -> Self {
        Fail::Client(e)
    }
}

impl Fail {
    /// The Python exception for this failure.
    pub fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Fail::Client(e) => client_error(py, &e),
            Fail::Core(e) => core_error(py, e),
            Fail::Closed => BrokerClosed::new_err("the broker is closed"),
            Fail::Broken(why) => StorageError::new_err(format!(
                "the broker stopped after an earlier failure: {why}"
            )),
            Fail::Panic(why) => {
                InternalError::new_err(format!("internal error (a bug in Rocklet): {why}"))
            }
            Fail::Value(why) => pyo3::exceptions::PyValueError::new_err(why),
            Fail::Internal(why) => InternalError::new_err(format!("internal error: {why}")),
        }
    }
}

/// The exception for a core client error: the class of its code, `code` set on the instance.
pub fn client_error(py: Python<'_>, e: &CoreClientError) -> PyErr {
    let code = e.code();
    let class = client_class(py, code).unwrap_or_else(|| py.get_type::<ClientError>());
    let err = PyErr::from_type(class, e.to_string());
    // Unknown codes fall back to ClientError; the instance still carries the real code.
    let _ = err.value(py).setattr("code", code);
    err
}

/// The exception for a core `Err` (not the caller's mistake).
pub fn core_error(py: Python<'_>, e: CoreError<io::Error>) -> PyErr {
    let msg = e.to_string();
    match (ErrorKind::of(&e), e) {
        (ErrorKind::Storage, _) => StorageError::new_err(msg),
        (ErrorKind::Config, _) => ConfigError::new_err(msg),
        (_, CoreError::Corrupted { offset, .. }) => {
            let err = CorruptLog::new_err(format!(
                "{msg}; Broker(path, repair=True) opens the log, keeping every valid record and \
                 moving the damaged bytes to quarantine/ in the data directory"
            ));
            // Setting an attribute on a fresh exception instance cannot fail.
            let _ = err.value(py).setattr("offset", offset);
            err
        }
        (ErrorKind::Encode, _) => EncodeError::new_err(msg),
        (ErrorKind::Failed, _) => BrokerFailed::new_err(msg),
        _ => RockletError::new_err(msg),
    }
}

/// Opening a data directory failed.
pub fn open_error(dir: &impl Display, e: &io::Error) -> PyErr {
    StorageError::new_err(format!("cannot open data directory {dir}: {e}"))
}

/// Registers the hierarchy on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add_errors(m)?;
    add_client_errors(m)
}
