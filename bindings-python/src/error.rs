//! Every mapping from core errors to Python exceptions. The hierarchy itself is Python's
//! (`rocklet/_errors.py`); each class is looked up there by name, the module imported once.
//! [`class_of`] gives each kind of failure ([`ErrorKind`], whose codes are the one table of
//! the three bindings) its class; the classes' `code`s are that table's
//! (`tests/vectors/error-codes.json`, checked by `tests/test_error_codes.py`).

use std::io;
use std::path::Path;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;
use rocklet_core::{ClientError as CoreClientError, Error as CoreError};
use rocklet_embed::open::OpenFail;
use rocklet_embed::ErrorKind;

/// `rocklet._errors`, imported once.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn errors(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    let m = ERRORS.get_or_try_init(py, || py.import("rocklet._errors").map(Bound::unbind))?;
    Ok(m.bind(py))
}

/// The exception class `name` of `rocklet._errors`.
pub fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    Ok(errors(py)?.getattr(name)?.cast_into::<PyType>()?)
}

/// An exception of class `name` with message `msg` (if the lookup fails, that error).
pub fn err(py: Python<'_>, name: &str, msg: impl Into<String>) -> PyErr {
    match class(py, name) {
        Ok(c) => PyErr::from_type(c, msg.into()),
        Err(e) => e,
    }
}

/// A failure on the Rust side, carried out of a GIL-free section and turned into an
/// exception once the GIL is held again.
#[derive(Debug)]
pub enum PyFail {
    Core(CoreError<io::Error>),
    Client(CoreClientError),
    Closed,
    /// The broker stopped after an earlier storage failure or a caught panic.
    Broken(String),
    Panic(String),
    /// An argument out of range (`InvalidArgument`, a ValueError; the text names it).
    Argument(String),
    /// A manual-clock call on a broker on the system clock (`WrongClock`, a ValueError).
    WrongClock(String),
    /// A bug: an unexpected reply.
    Internal(String),
    /// A Python exception raised meanwhile (a signal's, while waiting).
    Py(PyErr),
}

/// A shared operation's failure (host errors: the core's, or this binding's own `PyFail`).
impl<H: Into<PyFail> + std::fmt::Debug> From<rocklet_embed::Fail<H>> for PyFail {
    fn from(e: rocklet_embed::Fail<H>) -> Self {
        match e {
            rocklet_embed::Fail::Client(c) => PyFail::Client(c),
            rocklet_embed::Fail::Host(h) => h.into(),
            rocklet_embed::Fail::Closed(_) => PyFail::Closed,
            rocklet_embed::Fail::WrongClock(w) => PyFail::WrongClock(w.into()),
            rocklet_embed::Fail::Argument(w) => PyFail::Argument(w),
            rocklet_embed::Fail::Unexpected(w) => PyFail::Internal(w),
        }
    }
}

impl rocklet_embed::SharedFail<rocklet_core::AnyStorage> for PyFail {
    fn broken(why: String) -> Self {
        PyFail::Broken(why)
    }
    fn panic(why: String) -> Self {
        PyFail::Panic(why)
    }
    fn failed(reason: String) -> Self {
        PyFail::Core(CoreError::Failed { reason })
    }
}

impl From<CoreError<io::Error>> for PyFail {
    fn from(e: CoreError<io::Error>) -> Self {
        PyFail::Core(e)
    }
}

impl From<CoreClientError> for PyFail {
    fn from(e: CoreClientError) -> Self {
        PyFail::Client(e)
    }
}

impl PyFail {
    /// The Python exception for this failure.
    pub fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            PyFail::Client(e) => client_error(py, &e),
            PyFail::Core(e) => core_error(py, e),
            PyFail::Closed => err(py, class_of(ErrorKind::Closed), "the broker is closed"),
            PyFail::Broken(why) => err(
                py,
                class_of(ErrorKind::Failed),
                format!("the broker stopped after an earlier failure: {why}"),
            ),
            PyFail::Panic(why) => err(
                py,
                class_of(ErrorKind::Internal),
                format!("internal error (a bug in Rocklet): {why}"),
            ),
            PyFail::Argument(why) => err(py, class_of(ErrorKind::Argument), why),
            PyFail::WrongClock(why) => err(py, class_of(ErrorKind::WrongClock), why),
            PyFail::Internal(why) => err(
                py,
                class_of(ErrorKind::Internal),
                format!("internal error: {why}"),
            ),
            PyFail::Py(e) => e,
        }
    }
}

/// The exception for a core client error: the class of its code, `code` set on the instance.
pub fn client_error(py: Python<'_>, e: &CoreClientError) -> PyErr {
    let code = e.code();
    let known = errors(py).and_then(|m| m.getattr("BY_CODE")?.get_item(code));
    let class = match known {
        Ok(c) => c.cast_into::<PyType>().map_err(PyErr::from),
        Err(_) => class(py, "ClientError"),
    };
    let err = match class {
        Ok(c) => PyErr::from_type(c, e.to_string()),
        Err(e) => return e,
    };
    // Unknown codes fall back to ClientError; the instance still carries the real code.
    let _ = err.value(py).setattr("code", code);
    err
}

/// The class of each kind of failure (exhaustive: a new kind needs its class).
#[must_use]
pub fn class_of(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Client => "ClientError",
        ErrorKind::Argument => "InvalidArgument",
        ErrorKind::Config => "ConfigError",
        ErrorKind::Storage => "StorageError",
        ErrorKind::Corrupted => "CorruptLog",
        ErrorKind::Encode => "EncodeError",
        ErrorKind::Failed => "BrokerFailed",
        ErrorKind::Closed => "BrokerClosed",
        ErrorKind::WrongClock => "WrongClock",
        ErrorKind::Internal => "InternalError",
    }
}

/// An argument out of range: `InvalidArgument` (a ValueError) naming it.
pub fn argument(msg: impl Into<String>) -> PyErr {
    Python::attach(|py| err(py, class_of(ErrorKind::Argument), msg))
}

/// A manual-clock call on a broker on the system clock: `WrongClock` (a ValueError).
pub fn wrong_clock(msg: impl Into<String>) -> PyErr {
    Python::attach(|py| err(py, class_of(ErrorKind::WrongClock), msg))
}

/// The exception for a core `Err` (not the caller's mistake).
pub fn core_error(py: Python<'_>, e: CoreError<io::Error>) -> PyErr {
    let msg = e.to_string();
    let kind = ErrorKind::of(&e);
    match e {
        CoreError::Corrupted { offset, .. } => {
            let err = err(
                py,
                class_of(kind),
                format!(
                "{msg}; Broker(path, repair=True) opens the log, keeping every valid record and \
                 moving the damaged bytes to quarantine/ in the data directory"
                ),
            );
            // Setting an attribute on a fresh exception instance cannot fail.
            let _ = err.value(py).setattr("offset", offset);
            err
        }
        _ => err(py, class_of(kind), msg),
    }
}

/// Opening the broker failed: its data directory, or recovery.
pub fn open_error(py: Python<'_>, path: Option<&Path>, e: OpenFail) -> PyErr {
    match e {
        OpenFail::Storage(e) => {
            let dir = path.unwrap_or("<memory>".as_ref()).display();
            err(
                py,
                class_of(ErrorKind::Storage),
                format!("cannot open data directory {dir}: {e}"),
            )
        }
        OpenFail::Core(e) => core_error(py, e),
    }
}

/// Adds the hierarchy to the module (it is Python's: `rocklet._errors`).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    crate::convert::add_all(m, errors(m.py())?)
}
