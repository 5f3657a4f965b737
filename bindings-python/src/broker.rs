//! `Broker` (a `rocklet_embed::Shared` host: a mutex, group commit and a driver thread on
//! the host clock), `Transaction` and `Subscription`. The drive loop, group commit, the
//! transaction rule, pull across queues and the subscription's ack rule are the embedding
//! layer's; this file adds the GIL and the checkers.
//!
//! Threading: every call releases the GIL, then takes the broker's mutex; nothing waits for
//! the GIL while holding that mutex, so Python threads and the driver thread cannot deadlock.
//! Checkers run with the GIL and without the mutex (a checker may call the broker).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyStopAsyncIteration, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use rocklet_core::{AnyStorage, CheckRequest, NewMessage, Resolution};
use rocklet_embed::{self as embed, AnyClock, Clock, Drive, SystemClock};

use crate::convert;
use crate::convert::Made;
use crate::error::{client_error, open_error, PyFail};
use crate::types::{PyMessage, PyReceived, PySendResult};

type Engine = embed::Engine<AnyStorage, AnyClock<SystemClock>>;
/// A failure of a shared operation: the caller's mistake, or this binding's `PyFail`.
type EFail = embed::Fail<PyFail>;

/// The shared host (mutex, group commit, driver loop, checker registry: the embedding
/// layer's) with the checkers, Python callables by producer group.
type Shared = embed::Shared<AnyStorage, AnyClock<SystemClock>, Py<PyAny>>;

/// Logs through Python's `logging` (logger "rocklet"), or prints if that fails.
fn log_error(py: Python<'_>, msg: &str, exc: Option<&PyErr>) {
    let exc = exc.map(|e| e.value(py));
    if convert::support(py)
        .and_then(|s| s.call_method1("log_error", (msg, exc)))
        .is_err()
    {
        eprintln!("rocklet: {msg}");
    }
}

/// Asks the group's checker about a transaction (an `async def` checker is awaited by
/// `_support.call_checker`); a bad answer is an exception too.
fn ask_checker(py: Python<'_>, checker: &Py<PyAny>, c: &CheckRequest) -> PyResult<Resolution> {
    let msg = convert::check_message(py, c.clone())?;
    let answer = convert::support(py)?.call_method1("call_checker", (checker, msg))?;
    convert::resolution("the checker's answer", &answer)
}

/// The GIL, released around every call that takes the broker's mutex.
#[derive(Clone, Copy)]
struct Gil<'py>(Python<'py>);

impl embed::Release for Gil<'_> {
    fn release<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.0.detach(f)
    }
}

/// Asks the registered checker of a check's group (`None`: the group has none, the check
/// stays unanswered and the transaction pending; a checker that fails or panics is answered
/// Unknown, the embedding layer's rule).
fn asker<'a>(
    shared: &'a Shared,
    py: Python<'a>,
) -> impl FnMut(&CheckRequest) -> Option<Resolution> + 'a {
    // A checker that fails is logged (with its exception) and answered Unknown.
    let failed = move |f: embed::CheckerFailed<PyErr>| log_error(py, &f.to_string(), f.error());
    shared.asker(
        move |f| f.clone_ref(py),
        move |f, c| ask_checker(py, f, c),
        failed,
    )
}

/// The system-clock driver thread's step: answers the checks that wait (false: the
/// interpreter is shutting down, the driver stops).
fn drive_answer(shared: &Shared) -> bool {
    Python::try_attach(|py| {
        if let Err(f) = shared.answer_all::<PyFail>(&Gil(py), &mut asker(shared, py)) {
            let e = f.into_py(py);
            log_error(py, "rocklet driver could not answer checks", Some(&e));
        }
    })
    .is_some()
}

/// An embedded Rocklet broker: RocketMQ-style transactional messages in-process.
///
/// `Broker()` keeps the log in memory; `Broker("dir")` in segment files in a directory (the
/// broker's own format; reopening recovers everything acknowledged, cutting only a torn tail).
/// A log with other damage raises `CorruptLog` and is left as it is; `repair=True` opens it,
/// keeping every valid record and moving each damaged range to `dir/quarantine/`
/// (`recovery_report` lists what recovery did). Keywords are the core
/// `Config` fields (`transaction_timeout_ms`, `transaction_check_interval_ms`,
/// `transaction_check_max`, `delay_levels`, `flush="async"|"sync"`, `segment_size`,
/// `max_message_size`, ...). `clock="system"` runs a background driver thread that fires
/// checks and delayed deliveries on time; `clock="manual"` moves time only by `advance()`.
#[pyclass(frozen, module = "rocklet", name = "Broker")]
pub struct PyBroker {
    shared: Arc<Shared>,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for PyBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyBroker")
            .field("path", &self.path)
            .field("manual", &self.shared.is_manual())
            .finish_non_exhaustive()
    }
}

impl Drop for PyBroker {
    fn drop(&mut self) {
        // Best effort: a broker dropped without close() still releases its directory.
        let _ = self.shared.shut::<PyFail>();
    }
}

fn fail(py: Python<'_>) -> impl Fn(PyFail) -> PyErr + '_ {
    move |f| f.into_py(py)
}

/// The exception for a shared operation's failure.
fn efail(py: Python<'_>) -> impl Fn(EFail) -> PyErr + '_ {
    move |e| PyFail::from(e).into_py(py)
}

#[allow(clippy::too_many_arguments)]
fn new_message(
    topic: String,
    body: &Bound<'_, PyAny>,
    tag: Option<String>,
    keys: Option<&Bound<'_, PyAny>>,
    properties: Option<&Bound<'_, PyAny>>,
    queue_id: Option<u32>,
    message_id: Option<String>,
    message_group: Option<String>,
) -> PyResult<NewMessage> {
    Ok(NewMessage {
        topic,
        body: convert::body(body)?,
        tag,
        keys: convert::keys(keys)?,
        properties: convert::properties(properties)?,
        queue_id,
        message_id,
        message_group,
        ..NewMessage::default()
    })
}

impl PyBroker {
    /// Where the shared operations send requests: the broker, with the GIL at hand for the
    /// checkers a manual-clock request makes due.
    fn ep<'a>(&'a self, py: Python<'a>) -> impl embed::Endpoint<Error = PyFail> + use<'a> {
        self.shared.endpoint(Gil(py), asker(&self.shared, py))
    }

    /// Runs `f` on the host with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Engine) -> Result<T, PyFail> + Send,
    ) -> PyResult<T> {
        py.detach(|| self.shared.with(f)).map_err(fail(py))
    }

    /// Reads the core with the GIL released.
    fn read<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&rocklet_core::Broker<AnyStorage>) -> T + Send,
    ) -> PyResult<T> {
        py.detach(|| self.shared.read(f)).map_err(fail(py))
    }

    /// Manual clock: a whole drive, each step's checks answered before the next.
    fn run_drive(&self, py: Python<'_>, d: Drive) -> PyResult<()> {
        let shared = &self.shared;
        let r = shared.run_drive::<PyFail>(&Gil(py), d, &mut asker(shared, py));
        r.map_err(fail(py))
    }

    fn manual(&self, what: &str) -> PyResult<()> {
        if !self.shared.is_manual() {
            return Err(crate::error::wrong_clock(format!(
                "{what} needs a broker opened with clock='manual'"
            )));
        }
        Ok(())
    }
}

#[pymethods]
impl PyBroker {
    #[new]
    #[pyo3(signature = (path=None, *, clock="system", start_ms=None, repair=false, **config))]
    fn new(
        py: Python<'_>,
        path: Option<PathBuf>,
        clock: &str,
        #[pyo3(from_py_with = convert::arg::start_ms_opt_int)] start_ms: Option<i128>,
        repair: bool,
        config: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let manual = match clock {
            "system" => false,
            "manual" => true,
            other => {
                return Err(crate::error::argument(format!(
                    "clock must be 'system' or 'manual', not {other:?}"
                )))
            }
        };
        if start_ms.is_some() && !manual {
            return Err(crate::error::argument("start_ms needs clock='manual'"));
        }
        let start_ms = convert::opt_u64("start_ms", start_ms)?;
        let cfg = convert::config(py, config)?;
        let start = manual.then(|| start_ms.unwrap_or(0));
        let host = py
            .detach(|| embed::open::open(path.as_deref(), start, cfg, repair))
            .map_err(|e| open_error(py, path.as_deref(), e))?;
        let shared = Arc::new(Shared::new(host, manual));
        if !manual {
            let stopped = |why: String| {
                let msg = format!("rocklet driver stopped: {why}");
                Python::try_attach(|py| log_error(py, &msg, None));
            };
            Shared::start_driver::<PyFail>(&shared, "rocklet-driver", drive_answer, stopped)
                .map_err(|e| {
                    let why = format!("cannot start the driver thread: {e}");
                    crate::error::err(py, "RockletError", why)
                })?;
        }
        Ok(PyBroker { shared, path })
    }

    /// The data directory, or None for a broker in memory.
    #[getter]
    fn path(&self) -> Option<String> {
        self.path.as_ref().map(|p| p.display().to_string())
    }

    /// `"system"` or `"manual"`.
    #[getter]
    fn clock(&self) -> &'static str {
        if self.shared.is_manual() {
            "manual"
        } else {
            "system"
        }
    }

    /// The broker's current time in ms (the manual clock, or the system clock).
    #[getter]
    fn now(&self, py: Python<'_>) -> u64 {
        py.detach(|| self.shared.peek(|h| h.clock().now()))
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        py.detach(|| self.shared.peek(|h| h.is_closed()))
    }

    /// What recovery found when the broker opened: segments and records read, the torn tail
    /// cut (`cuts`), the damaged ranges `repair=True` moved to quarantine (`quarantined`).
    #[getter]
    fn recovery_report<'py>(&self, py: Python<'py>) -> Made<'py> {
        let r = self.read(py, |c| c.recovery_report().clone())?;
        convert::recovery_report(py, &r)
    }

    /// Why the broker stopped taking requests, or None: a sync failed, and every call raises
    /// `BrokerFailed` until it is closed and opened again.
    #[getter]
    fn failed(&self, py: Python<'_>) -> PyResult<Option<String>> {
        self.read(py, |c| c.failed().map(str::to_owned))
    }

    /// Bytes in the log (next append offset).
    #[getter]
    fn log_end(&self, py: Python<'_>) -> PyResult<u64> {
        self.read(py, |c| c.log_end())
    }

    /// Everything below this log offset is durable.
    #[getter]
    fn log_synced(&self, py: Python<'_>) -> PyResult<u64> {
        self.read(py, |c| c.log_synced())
    }

    /// Manual clock only: moves time forward by `ms`, firing every check, delayed delivery
    /// and redelivery due on the way at its own time (checkers are called from here).
    fn advance(&self, py: Python<'_>, ms: i128) -> PyResult<()> {
        self.manual("advance()")?;
        let ms = convert::u64_arg("ms", ms)?;
        let target = self.now(py).saturating_add(ms);
        self.run_drive(py, Drive::to(target))
    }

    /// Manual clock only: `advance(t - now)`; `t` before `now` is a ValueError.
    fn advance_to(&self, py: Python<'_>, t: i128) -> PyResult<()> {
        self.manual("advance_to()")?;
        let t = convert::u64_arg("t", t)?;
        let now = self.now(py);
        if t < now {
            return Err(crate::error::argument(format!(
                "t ({t}) is before the clock ({now})"
            )));
        }
        self.run_drive(py, Drive::to(t))
    }

    /// Manual clock only: fires timers in order (each at its own time) until none is left.
    fn run_until_idle(&self, py: Python<'_>) -> PyResult<()> {
        self.manual("run_until_idle()")?;
        self.run_drive(py, Drive::until_idle())
    }

    /// Makes everything appended durable now (fsync), whatever the flush mode.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |h| Ok(h.sync()?))
    }

    /// Syncs, stops the driver thread and releases the data directory. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let shared = &self.shared;
        let res = py.detach(|| shared.close());
        drop(shared.clear_checkers());
        res.map_err(fail(py))
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let closed = self.closed(py);
        Ok(format!(
            "Broker(path={}, clock={}{})",
            convert::repr(py, self.path())?,
            convert::repr(py, self.clock())?,
            if closed { ", closed" } else { "" }
        ))
    }

    /// Sends one message; returns where it was stored. `delay_level` (1..N of the
    /// `delay_levels`), `deliver_at_ms` (absolute) or `delay_ms` (relative) delay it.
    #[pyo3(signature = (topic, body, *, tag=None, keys=None, properties=None, delay_level=None, deliver_at_ms=None, delay_ms=None, queue_id=None, message_group=None, message_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::arg::topic_str)] topic: String,
        body: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::arg::tag_opt_str)] tag: Option<String>,
        keys: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = convert::arg::delay_level_opt_int)] delay_level: Option<i128>,
        #[pyo3(from_py_with = convert::arg::deliver_at_ms_opt_int)] deliver_at_ms: Option<i128>,
        #[pyo3(from_py_with = convert::arg::delay_ms_opt_int)] delay_ms: Option<i128>,
        #[pyo3(from_py_with = convert::arg::queue_id_opt_int)] queue_id: Option<i128>,
        #[pyo3(from_py_with = convert::arg::message_group_opt_str)] message_group: Option<String>,
        #[pyo3(from_py_with = convert::arg::message_id_opt_str)] message_id: Option<String>,
    ) -> PyResult<PySendResult> {
        let queue_id = convert::opt_u32("queue_id", queue_id)?;
        let mut m = new_message(
            topic,
            body,
            tag,
            keys,
            properties,
            queue_id,
            message_id,
            message_group,
        )?;
        m.delay = convert::delay(
            convert::opt_u32("delay_level", delay_level)?,
            convert::opt_u64("deliver_at_ms", deliver_at_ms)?,
            convert::opt_u64("delay_ms", delay_ms)?,
        )?;
        let r = embed::send_one(&mut self.ep(py), m).map_err(efail(py))?;
        Ok(convert::send_result(r))
    }

    /// Sends a batch to one topic, all or nothing, with consecutive queue offsets. Each item is
    /// a body (bytes or str) or a mapping with `body` and optional `tag`, `keys`, `properties`
    /// (and `topic`, which must then equal the batch's: a batch never mixes topics).
    #[pyo3(signature = (topic, messages, *, queue_id=None))]
    fn send_batch(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::arg::topic_str)] topic: String,
        messages: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::arg::queue_id_opt_int)] queue_id: Option<i128>,
    ) -> PyResult<Vec<PySendResult>> {
        let queue_id = convert::opt_u32("queue_id", queue_id)?;
        let mut out = Vec::new();
        for (i, item) in messages.try_iter()?.enumerate() {
            let item = item?;
            let m = if item.cast::<pyo3::types::PyMapping>().is_ok() {
                let fields =
                    convert::support(py)?.call_method1("batch_item", (i, &item, &topic))?;
                type Item<'py> = (
                    String,
                    Bound<'py, PyAny>,
                    Option<String>,
                    Option<Bound<'py, PyAny>>,
                    Option<Bound<'py, PyAny>>,
                );
                let (topic, body, tag, keys, props): Item<'_> = fields.extract()?;
                new_message(
                    topic,
                    &body,
                    tag,
                    keys.as_ref(),
                    props.as_ref(),
                    queue_id,
                    None,
                    None,
                )?
            } else {
                new_message(topic.clone(), &item, None, None, None, queue_id, None, None)?
            };
            out.push(m);
        }
        let rs = embed::send(&mut self.ep(py), out).map_err(efail(py))?;
        Ok(rs.into_iter().map(convert::send_result).collect())
    }

    /// Registers the checker of a producer group (the group comes online: its pending
    /// transactions are checked). `checker(message)` returns "commit", "rollback" or
    /// "unknown" (an `async def` checker is awaited); `message.transaction_id` names the
    /// transaction. None removes it (checks of the group wait without using attempts).
    #[pyo3(signature = (group, checker))]
    fn set_checker(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        checker: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        if let Some(c) = &checker {
            if !c.bind(py).is_callable() {
                return Err(PyTypeError::new_err(format!(
                    "checker must be callable or None, not {}",
                    c.bind(py).get_type().name()?
                )));
            }
        }
        let old = self.shared.set_checker::<PyFail>(&Gil(py), &group, checker);
        drop(old.map_err(fail(py))?);
        Ok(())
    }

    /// Stores a half (prepared) message of producer group `group`: invisible until committed.
    /// Returns the `Transaction`; commit or roll it back, or let the checker decide.
    #[pyo3(signature = (group, topic, body, *, tag=None, keys=None, properties=None, queue_id=None, message_id=None, check_immunity_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        #[pyo3(from_py_with = convert::arg::topic_str)] topic: String,
        body: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::arg::tag_opt_str)] tag: Option<String>,
        keys: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = convert::arg::queue_id_opt_int)] queue_id: Option<i128>,
        #[pyo3(from_py_with = convert::arg::message_id_opt_str)] message_id: Option<String>,
        #[pyo3(from_py_with = convert::arg::check_immunity_ms_opt_int)] check_immunity_ms: Option<
            i128,
        >,
    ) -> PyResult<PyTransaction> {
        let py = slf.py();
        let queue_id = convert::opt_u32("queue_id", queue_id)?;
        let immunity = convert::opt_u64("check_immunity_ms", check_immunity_ms)?;
        let message = new_message(
            topic, body, tag, keys, properties, queue_id, message_id, None,
        )?;
        let tx =
            embed::prepare(&mut slf.get().ep(py), group, message, immunity).map_err(efail(py))?;
        Ok(PyTransaction {
            broker: slf.clone().unbind(),
            result: Py::new(py, convert::send_result(tx.sent.clone()))?,
            tx,
            resolution: Mutex::new(None),
        })
    }

    /// Ends a transaction by id ("commit", "rollback" or "unknown"). Returns True when it
    /// was already resolved this way (a harmless duplicate).
    #[pyo3(signature = (transaction_id, resolution, *, group=None))]
    fn end_transaction(
        &self,
        py: Python<'_>,
        transaction_id: &Bound<'_, PyAny>,
        resolution: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::arg::group_opt_str)] group: Option<String>,
    ) -> PyResult<bool> {
        let txn = convert::txn_id(py, &convert::string("transaction_id", transaction_id)?)?;
        let r = convert::resolution("resolution", resolution)?;
        let e = embed::end(&mut self.ep(py), txn, r, group, false).map_err(efail(py))?;
        Ok(e.duplicate)
    }

    /// Reads up to `max` messages for consumer group `group`, from its committed offsets,
    /// and commits past them: the queue `queue` names, or every queue of the topic in order.
    /// A topic that does not exist raises `UnknownTopic`.
    #[pyo3(signature = (group, topic, queue=None, max=32, *, tags="*"))]
    fn pull(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        #[pyo3(from_py_with = convert::arg::topic_str)] topic: String,
        #[pyo3(from_py_with = convert::arg::queue_opt_int)] queue: Option<i128>,
        #[pyo3(from_py_with = convert::arg::max_int)] max: i128,
        tags: &str,
    ) -> PyResult<Vec<Py<PyMessage>>> {
        let args = embed::PullArgs {
            group,
            topic,
            queue: convert::opt_u32("queue", queue)?,
            offset: None,
            max: convert::u32_arg("max", max)?,
            filter: convert::tags(tags),
            auto_commit: true,
        };
        let p = embed::pull(&mut self.ep(py), args).map_err(efail(py))?;
        convert::messages(py, p.messages)
    }

    /// Reads one queue from `offset` (default: the group's committed offset); commits past
    /// what it returns when `auto_commit`.
    #[pyo3(signature = (group, topic, queue_id, *, offset=None, max=32, tags="*", auto_commit=true))]
    #[allow(clippy::too_many_arguments)]
    fn pull_queue<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        #[pyo3(from_py_with = convert::arg::topic_str)] topic: String,
        #[pyo3(from_py_with = convert::arg::queue_id_int)] queue_id: i128,
        #[pyo3(from_py_with = convert::arg::offset_opt_int)] offset: Option<i128>,
        #[pyo3(from_py_with = convert::arg::max_int)] max: i128,
        tags: &str,
        auto_commit: bool,
    ) -> Made<'py> {
        let args = embed::PullArgs {
            group,
            topic,
            queue: Some(convert::u32_arg("queue_id", queue_id)?),
            offset: convert::opt_u64("offset", offset)?,
            max: convert::u32_arg("max", max)?,
            filter: convert::tags(tags),
            auto_commit,
        };
        let p = embed::pull(&mut self.ep(py), args).map_err(efail(py))?;
        let Some(q) = p.queues.first().copied() else {
            return Err(crate::error::err(
                py,
                "InternalError",
                "a pull of one queue read no queue",
            ));
        };
        convert::pull_result(py, p.messages, q.next_offset, q.max_offset)
    }

    /// Commits a consumer group's offset in a queue.
    fn commit_offset(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        #[pyo3(from_py_with = convert::arg::topic_str)] topic: String,
        #[pyo3(from_py_with = convert::arg::queue_id_int)] queue_id: i128,
        #[pyo3(from_py_with = convert::arg::offset_int)] offset: i128,
    ) -> PyResult<()> {
        let q = convert::u32_arg("queue_id", queue_id)?;
        let o = convert::u64_arg("offset", offset)?;
        embed::commit_offset(&mut self.ep(py), group, topic, q, o).map_err(efail(py))
    }

    /// A consumer group's committed offset in a queue, or None.
    fn committed_offset(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        #[pyo3(from_py_with = convert::arg::topic_str)] topic: String,
        #[pyo3(from_py_with = convert::arg::queue_id_int)] queue_id: i128,
    ) -> PyResult<Option<u64>> {
        let q = convert::u32_arg("queue_id", queue_id)?;
        self.read(py, |c| c.committed_offset(&group, &topic, q))
    }

    /// Receives up to `max` messages for `group`, invisible to the group for `invisible_ms`
    /// unless acked (then redelivered with the next attempt number). A topic that does not
    /// exist raises `UnknownTopic`.
    #[pyo3(signature = (group, topic, max=32, *, invisible_ms, queue=None, tags="*"))]
    #[allow(clippy::too_many_arguments)]
    fn receive<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        #[pyo3(from_py_with = convert::arg::topic_str)] topic: String,
        #[pyo3(from_py_with = convert::arg::max_int)] max: i128,
        #[pyo3(from_py_with = convert::arg::invisible_ms_int)] invisible_ms: i128,
        #[pyo3(from_py_with = convert::arg::queue_opt_int)] queue: Option<i128>,
        tags: &str,
    ) -> PyResult<Vec<Py<PyReceived>>> {
        let args = embed::ReceiveArgs {
            group,
            topic,
            queue: convert::opt_u32("queue", queue)?,
            max: convert::u32_arg("max", max)?,
            invisible_ms: convert::u64_arg("invisible_ms", invisible_ms)?,
            filter: convert::tags(tags),
        };
        let rs = embed::receive(&mut self.ep(py), args).map_err(efail(py))?;
        rs.into_iter().map(|r| convert::received(py, r)).collect()
    }

    /// Acknowledges a received message (by its handle or its `Received`).
    fn ack(&self, py: Python<'_>, group: String, handle: &Bound<'_, PyAny>) -> PyResult<()> {
        let handle = convert::handle(py, handle)?;
        embed::ack(&mut self.ep(py), group, handle).map_err(efail(py))
    }

    /// Changes how long a received message stays invisible; returns the new handle (the old
    /// one still names this delivery; a redelivery makes both stale).
    fn change_invisible(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        handle: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = convert::arg::invisible_ms_int)] invisible_ms: i128,
    ) -> PyResult<String> {
        let handle = convert::handle(py, handle)?;
        let ms = convert::u64_arg("invisible_ms", invisible_ms)?;
        let (h, _) =
            embed::change_invisible(&mut self.ep(py), group, handle, ms).map_err(efail(py))?;
        Ok(h.to_string())
    }

    /// Gives a received message up at once: it goes to `%DLQ%<group>`.
    fn forward_to_dead_letter(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        handle: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let handle = convert::handle(py, handle)?;
        embed::forward_to_dead_letter(&mut self.ep(py), group, handle).map_err(efail(py))
    }

    /// A pulled message (by log `offset`) failed: back to `%RETRY%<group>` after a delay.
    #[pyo3(signature = (group, offset, delay_level=None))]
    fn send_back(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        #[pyo3(from_py_with = convert::arg::offset_int)] offset: i128,
        #[pyo3(from_py_with = convert::arg::delay_level_opt_int)] delay_level: Option<i128>,
    ) -> PyResult<PySendResult> {
        let offset = convert::u64_arg("offset", offset)?;
        let level = convert::opt_u32("delay_level", delay_level)?;
        let r = embed::send_back(&mut self.ep(py), group, offset, level).map_err(efail(py))?;
        Ok(convert::send_result(r))
    }

    /// An iterator of `Received` for `group` on `topic`: each `next()` waits (GIL released)
    /// for a message; it stops after `timeout` seconds without one (None: waits forever, until
    /// close). Also an async iterator (`async for`), waiting in the default executor. As in
    /// Node, a message is acked when the loop asks for the next one; leaving the loop
    /// (break, an exception) leaves the current one un-acked, so it comes back after
    /// `invisible_ms`. The topic may not exist yet: the loop waits for it.
    #[pyo3(signature = (group, topic, *, invisible_ms, max=32, tags="*", timeout=None))]
    fn subscribe(
        slf: &Bound<'_, Self>,
        #[pyo3(from_py_with = convert::arg::group_str)] group: String,
        #[pyo3(from_py_with = convert::arg::topic_str)] topic: String,
        #[pyo3(from_py_with = convert::arg::invisible_ms_int)] invisible_ms: i128,
        #[pyo3(from_py_with = convert::arg::max_int)] max: i128,
        tags: &str,
        timeout: Option<f64>,
    ) -> PyResult<PySubscription> {
        let timeout = match timeout {
            Some(t) if !(t >= 0.0 && t.is_finite()) => {
                return Err(crate::error::argument(format!(
                    "timeout must be a non-negative number of seconds, not {t}"
                )))
            }
            Some(t) => Some(Duration::from_secs_f64(t)),
            None => None,
        };
        let sub = embed::Subscription::new(
            group.clone(),
            topic,
            convert::u64_arg("invisible_ms", invisible_ms)?,
            convert::u32_arg("max", max)?,
            convert::tags(tags),
        );
        Ok(PySubscription {
            broker: slf.clone().unbind(),
            group,
            timeout,
            sub: Mutex::new(Some(sub)),
        })
    }

    /// Creates a topic with `queues` queues (or grows it).
    fn create_topic(&self, py: Python<'_>, name: &str, queues: i128) -> PyResult<()> {
        let queues = convert::u32_arg("queues", queues)?;
        self.with(py, |h| Ok(h.create_topic(name, queues)?))?
            .map_err(|e| client_error(py, &e))
    }

    /// Declares a consumer group; `fifo=True` makes its receives orderly (RocketMQ's
    /// consumeMessageOrderly: a queue's messages in order, none of a queue while an earlier
    /// batch of it is in flight for the group, redelivery in place).
    #[pyo3(signature = (name, *, fifo = false))]
    fn declare_group(&self, py: Python<'_>, name: &str, fifo: bool) -> PyResult<()> {
        self.with(py, |h| Ok(h.declare_group(name, fifo)?))?
            .map_err(|e| client_error(py, &e))
    }

    /// Consumer-visible topics with their queues (and `depth`, visible messages).
    fn topics<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let ts = self.read(py, |c| c.topics())?;
        ts.into_iter().map(|t| convert::topic_info(py, t)).collect()
    }

    /// Transactions waiting for commit or rollback, in log order (at most `limit`).
    #[pyo3(signature = (limit=None))]
    fn pending_transactions<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = convert::arg::limit_opt_int)] limit: Option<i128>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let n = convert::limit(limit)?;
        let ts = self.read(py, |c| c.pending_transactions(n))?;
        ts.into_iter()
            .map(|t| convert::pending_txn(py, t))
            .collect()
    }

    /// Delayed messages not yet delivered, in log order (at most `limit`).
    #[pyo3(signature = (limit=None))]
    fn pending_delays<'py>(
        &self,
        py: Python<'py>,
        limit: Option<i128>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let n = convert::limit(limit)?;
        let ds = self.read(py, |c| c.pending_delays(n))?;
        ds.into_iter()
            .map(|d| convert::pending_delay(py, d))
            .collect()
    }

    /// Messages `group` received from `topic` and has not acked yet.
    fn inflight_count(&self, py: Python<'_>, group: &str, topic: &str) -> PyResult<usize> {
        self.read(py, |c| c.inflight_count(group, topic))
    }

    /// The broker's counters (messages stored, commits, rollbacks, checks, ...).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.read(py, |c| c.stats())?;
        convert::stats(py, s)
    }
}

/// A prepared transaction. `commit()` / `rollback()`, or use it as a context manager:
/// a normal exit commits, an exception rolls back (and propagates).
#[pyclass(frozen, module = "rocklet", name = "Transaction")]
#[derive(Debug)]
pub struct PyTransaction {
    broker: Py<PyBroker>,
    tx: embed::Transaction,
    result: Py<PySendResult>,
    resolution: Mutex<Option<Resolution>>,
}

impl PyTransaction {
    fn finish(&self, py: Python<'_>, r: Resolution) -> PyResult<bool> {
        let dup = self
            .tx
            .end(&mut self.broker.get().ep(py), r)
            .map_err(efail(py))?;
        *self.resolution.lock() = Some(r);
        Ok(dup)
    }
}

#[pymethods]
impl PyTransaction {
    /// The transaction id (16 hex digits).
    #[getter]
    fn id(&self) -> String {
        self.tx.txn.to_string()
    }
    /// The producer group.
    #[getter]
    fn group(&self) -> &str {
        &self.tx.group
    }
    /// Where the half message was stored (its `msg_id` is the message's id once committed).
    #[getter]
    fn send_result(&self, py: Python<'_>) -> Py<PySendResult> {
        self.result.clone_ref(py)
    }
    /// "commit" or "rollback" once this object ended it, else None.
    #[getter]
    fn resolution(&self) -> Option<&'static str> {
        self.resolution.lock().map(Resolution::as_str)
    }
    /// Commits: the message becomes visible. Returns True if it was already committed.
    fn commit(&self, py: Python<'_>) -> PyResult<bool> {
        self.finish(py, Resolution::Commit)
    }
    /// Rolls back: the message is never delivered. Returns True if it was already rolled back.
    fn rollback(&self, py: Python<'_>) -> PyResult<bool> {
        self.finish(py, Resolution::Rollback)
    }
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    #[pyo3(signature = (exc_type, exc, tb))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        exc: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let _ = (exc, tb);
        let ok = exc_type.is_none_or(|t| t.is_none());
        let ended = *self.resolution.lock();
        match embed::Transaction::on_exit(ended, ok) {
            None => {}
            Some(r @ Resolution::Rollback) => {
                if let Err(e) = self.finish(py, r) {
                    // Keep the block's exception; the checker resolves the transaction later.
                    log_error(
                        py,
                        &format!(
                            "rollback of transaction {} failed; the checker will decide",
                            self.tx.txn
                        ),
                        Some(&e),
                    );
                }
            }
            Some(r) => {
                self.finish(py, r)?;
            }
        }
        Ok(false)
    }
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Transaction(id={}, group={}, resolution={})",
            convert::repr(py, self.id())?,
            convert::repr(py, self.group())?,
            convert::repr(py, self.resolution())?
        ))
    }
}

/// Messages of a topic as they arrive, for one consumer group (see `Broker.subscribe`).
#[pyclass(frozen, module = "rocklet", name = "Subscription")]
#[derive(Debug)]
pub struct PySubscription {
    broker: Py<PyBroker>,
    group: String,
    timeout: Option<Duration>,
    /// Taken while a thread is in `next`.
    sub: Mutex<Option<embed::Subscription>>,
}

impl PySubscription {
    fn next_received(&self, py: Python<'_>) -> PyResult<Option<Py<PyReceived>>> {
        let mut sub = self.sub.lock().take().ok_or_else(|| {
            PyRuntimeError::new_err("this subscription is being read by another thread")
        })?;
        let r = self.next_with(py, &mut sub);
        *self.sub.lock() = Some(sub);
        r
    }

    fn next_with(
        &self,
        py: Python<'_>,
        sub: &mut embed::Subscription,
    ) -> PyResult<Option<Py<PyReceived>>> {
        let broker = self.broker.get();
        let deadline = self.timeout.map(|t| Instant::now() + t);
        // At most 100 ms at a time, so that signals (Ctrl-C) are seen.
        let slice = Duration::from_millis(100);
        let signals = || {
            py.check_signals()
                .map_err(|e| embed::Fail::Host(PyFail::Py(e)))
        };
        let got = broker
            .shared
            .next_waiting(&Gil(py), sub, &mut broker.ep(py), deadline, slice, signals)
            .map_err(efail(py))?;
        got.map(|r| convert::received(py, r)).transpose()
    }
}

#[pymethods]
impl PySubscription {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyReceived>>> {
        self.next_received(py)
    }
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    fn __anext__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let lp = py.import("asyncio")?.call_method0("get_running_loop")?;
        lp.call_method1(
            "run_in_executor",
            (py.None(), slf.getattr("_next_or_stop")?),
        )
    }
    /// Blocking step of the async iterator (runs in an executor thread).
    fn _next_or_stop(&self, py: Python<'_>) -> PyResult<Py<PyReceived>> {
        self.next_received(py)?
            .ok_or_else(|| PyStopAsyncIteration::new_err(()))
    }
    /// Acknowledges a message this subscription delivered (moving on acks it too).
    fn ack(&self, py: Python<'_>, received: &Bound<'_, PyAny>) -> PyResult<()> {
        self.broker.get().ack(py, self.group.clone(), received)
    }
}
