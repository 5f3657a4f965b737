//! `Broker` (the core broker behind a mutex, driven by the host clock), `Transaction` and
//! `Subscription`.
//!
//! Threading: every call releases the GIL, then takes the broker's mutex; nothing waits for
//! the GIL while holding that mutex, so Python threads and the driver thread cannot deadlock.
//! Checkers run with the GIL and without the mutex (a checker may call the broker).
//!
//! Durability: under `flush="sync"` a write's reply is held by the core until a `sync()`;
//! callers group-commit: the first waiting writer lets the writers queued behind it append
//! (a fair unlock), then syncs once for all of them.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, ThreadId};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex, MutexGuard};
use pyo3::exceptions::{PyStopAsyncIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use rocklet_core::{
    AnyStorage, Broker, CheckRequest, Error as CoreError, Millis, NewMessage, Output, Reply,
    Request, Resolution, TxnId,
};

use crate::convert;
use crate::error::{client_error, core_error, open_error, Fail};
use crate::types::{
    PyMessage, PyPendingDelay, PyPendingTransaction, PyPullResult, PyReceived, PyRecoveryReport,
    PySendResult, PyTopicInfo,
};

type Core = Broker<AnyStorage>;

/// Everything behind the mutex.
struct State {
    /// `None` once closed.
    core: Option<Core>,
    /// Replies released by the core, by request id, until their caller takes them; `Err` is
    /// a reply that waited for a sync that failed (the reason).
    replies: HashMap<u64, Result<Reply, String>>,
    /// Checks to hand to checkers.
    checks: VecDeque<CheckRequest>,
    /// A group-commit leader is gathering writers before its sync.
    syncing: bool,
    /// The manual clock.
    manual_now: Millis,
    /// When the driver next wakes by itself (0 while it is awake).
    driver_wake: Millis,
    /// Bumped whenever state changed: subscribers re-try on a change.
    generation: u64,
    /// Set after a storage failure in the driver or a caught panic: the broker is unusable.
    /// (A failed sync is the core's own state: it refuses every later call itself.)
    broken: Option<String>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the driver thread.
    driver_cv: Condvar,
    /// Wakes group-commit followers and subscribers.
    event_cv: Condvar,
    manual: bool,
    shutdown: AtomicBool,
    checkers: Mutex<HashMap<String, Py<PyAny>>>,
    driver_thread: Mutex<Option<ThreadId>>,
}

fn system_now() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Millis)
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_owned()
    }
}

impl Shared {
    fn now(&self, st: &State) -> Millis {
        if self.manual {
            st.manual_now
        } else {
            system_now()
        }
    }

    fn core(st: &mut State) -> Result<&mut Core, Fail> {
        if let Some(why) = &st.broken {
            return Err(Fail::Broken(why.clone()));
        }
        st.core.as_mut().ok_or(Fail::Closed)
    }

    /// Runs `f` on the core, turning a panic into an error that marks the broker broken.
    fn guarded<T>(
        &self,
        st: &mut State,
        f: impl FnOnce(&mut Core, Millis) -> Result<T, Fail>,
    ) -> Result<T, Fail> {
        let now = self.now(st);
        let core = Self::core(st)?;
        match catch_unwind(AssertUnwindSafe(|| f(core, now))) {
            // The storage error that failed the broker: said as the failure it is, so the call
            // that hit it raises what every later call will.
            Ok(Err(Fail::Core(CoreError::Storage(_)))) if core.failed().is_some() => {
                Err(Fail::Core(CoreError::Failed {
                    reason: core.failed().unwrap_or_default().to_owned(),
                }))
            }
            Ok(r) => r,
            Err(p) => {
                let why = panic_text(&*p);
                st.broken = Some(format!("internal error: {why}"));
                self.event_cv.notify_all();
                Err(Fail::Panic(why))
            }
        }
    }

    /// Drains the core's outputs: replies to their callers, checks to the checker queue.
    fn collect(&self, st: &mut State) {
        let Some(core) = st.core.as_mut() else { return };
        while let Some(out) = core.poll_output() {
            match out {
                Output::Reply { id, reply } => {
                    st.replies.insert(id, Ok(reply));
                }
                Output::Failed { id, reason } => {
                    st.replies.insert(id, Err(reason));
                }
                Output::Check(c) => st.checks.push_back(c),
                // Availability and trace events: the generation bump below wakes waiters.
                _ => {}
            }
        }
        let next = core.poll_timeout().unwrap_or(Millis::MAX);
        st.generation = st.generation.wrapping_add(1);
        self.event_cv.notify_all();
        if !self.manual && (!st.checks.is_empty() || next < st.driver_wake) {
            self.driver_cv.notify_one();
        }
    }

    /// One request to its reply; under sync flush, group-committed with concurrent writers.
    /// Also says whether checks wait for a checker.
    fn request(&self, req: Request) -> Result<(Reply, bool), Fail> {
        let mut st = self.state.lock();
        let id = self.guarded(&mut st, |core, now| {
            let id = core.next_request_id();
            core.handle(now, id, req)?;
            Ok(id)
        });
        // Also after an error: a failed write fails the replies that waited on a sync.
        self.collect(&mut st);
        let id = id?;
        let taken = |st: &mut State| {
            st.replies.remove(&id).map(|r| match r {
                Ok(r) => Ok((r, !st.checks.is_empty())),
                Err(reason) => Err(Fail::Core(CoreError::Failed { reason })),
            })
        };
        loop {
            if let Some(r) = taken(&mut st) {
                return r;
            }
            // The reply waits for a sync (sync flush), unless the broker went away meanwhile.
            Self::core(&mut st)?;
            if st.syncing {
                self.event_cv.wait(&mut st);
                continue;
            }
            st.syncing = true;
            // Let the writers already queued on the mutex append first: one sync covers all.
            MutexGuard::unlocked_fair(&mut st, || {});
            let res = self.guarded(&mut st, |core, _| core.sync().map_err(Fail::from));
            st.syncing = false;
            self.collect(&mut st);
            if let Err(e) = res {
                // Closed meanwhile: close() synced, so the reply may have been released; or
                // the sync failed, and the reply came out failed with the others that waited.
                return taken(&mut st).unwrap_or(Err(e));
            }
        }
    }

    /// The producer group of a transaction (for ends that do not name it: the application
    /// owns the broker).
    fn transaction_group(&self, txn: TxnId) -> Result<Option<String>, Fail> {
        let mut st = self.state.lock();
        self.guarded(&mut st, |core, _| {
            core.transaction_group(txn).map_err(Fail::from)
        })
    }

    /// Feeds a checker's answer back.
    fn answer(&self, txn: TxnId, group: String, resolution: Resolution) -> Result<(), Fail> {
        let mut st = self.state.lock();
        let req = Request::EndTransaction {
            txn,
            resolution,
            group: Some(group),
            from_check: true,
        };
        // The producer may have resolved it meanwhile: a client error here changes nothing.
        let r = self.guarded(&mut st, |core, now| {
            core.execute(now, req).map(drop).map_err(Fail::from)
        });
        self.collect(&mut st);
        r
    }

    /// Manual clock: fires the next timer due at or before `target` (true), or moves the
    /// clock to `target` when none is (false).
    fn step_to(&self, target: Millis) -> Result<bool, Fail> {
        let mut st = self.state.lock();
        let next = Self::core(&mut st)?.poll_timeout();
        let (at, more) = match next {
            Some(t) if t <= target => (t.max(st.manual_now), true),
            _ => (target.max(st.manual_now), false),
        };
        st.manual_now = at;
        let r = self.guarded(&mut st, |core, now| {
            core.handle_timeout(now).map_err(Fail::from)
        });
        self.collect(&mut st);
        r.map(|()| more)
    }

    /// Syncs everything appended.
    fn flush(&self) -> Result<(), Fail> {
        let mut st = self.state.lock();
        let r = self.guarded(&mut st, |core, _| core.sync().map_err(Fail::from));
        self.collect(&mut st);
        r
    }

    /// Reads the core under the mutex.
    fn read<T>(&self, f: impl FnOnce(&mut Core) -> T) -> Result<T, Fail> {
        let mut st = self.state.lock();
        self.guarded(&mut st, |core, _| Ok(f(core)))
    }

    fn is_driver_thread(&self) -> bool {
        *self.driver_thread.lock() == Some(std::thread::current().id())
    }

    /// Stops the driver and drops the core (releasing the data directory), syncing first.
    fn shut(&self) -> Result<(), Fail> {
        self.shutdown.store(true, Ordering::SeqCst);
        let mut st = self.state.lock();
        let failed = st.core.as_ref().is_some_and(|c| c.failed().is_some());
        // A broker that failed has nothing it could sync: its failure was reported already.
        let res = if st.core.is_some() && st.broken.is_none() && !failed {
            let r = self.guarded(&mut st, |core, _| core.sync().map_err(Fail::from));
            self.collect(&mut st);
            r
        } else {
            Ok(())
        };
        st.core = None;
        st.checks.clear();
        self.driver_cv.notify_all();
        self.event_cv.notify_all();
        res
    }
}

/// Logs through Python's `logging` (logger "rocklet"), or prints if that fails.
fn log_error(py: Python<'_>, msg: &str, exc: Option<&PyErr>) {
    let done = (|| -> PyResult<()> {
        let logger = py
            .import("logging")?
            .call_method1("getLogger", ("rocklet",))?;
        let kw = PyDict::new(py);
        if let Some(e) = exc {
            kw.set_item("exc_info", e.value(py))?;
        }
        logger.call_method("error", ("%s", msg), Some(&kw))?;
        Ok(())
    })();
    if done.is_err() {
        eprintln!("rocklet: {msg}");
        if let Some(e) = exc {
            e.print(py);
        }
    }
}

/// Asks the group's checker about a transaction. An exception, a panic or a bad answer is
/// reported and answered Unknown: the transaction stays pending and is checked again.
fn ask_checker(py: Python<'_>, checker: &Py<PyAny>, c: CheckRequest) -> Resolution {
    let (group, txn) = (c.group.clone(), c.txn);
    let res = catch_unwind(AssertUnwindSafe(|| -> PyResult<Resolution> {
        let msg = convert::check_message(py, c)?;
        let answer = checker.call1(py, (msg,))?;
        convert::resolution(py, answer.bind(py))
    }));
    match res {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            log_error(
                py,
                &format!(
                    "checker of producer group `{group}` failed on transaction {txn}; it stays pending and will be checked again"
                ),
                Some(&e),
            );
            Resolution::Unknown
        }
        Err(p) => {
            log_error(
                py,
                &format!(
                    "checker of `{group}` on {txn}: internal error {}",
                    panic_text(&*p)
                ),
                None,
            );
            Resolution::Unknown
        }
    }
}

/// Answers every queued check with the registered checkers, until none are left.
fn answer_checks(shared: &Shared, py: Python<'_>) -> Result<(), Fail> {
    loop {
        let batch: Vec<CheckRequest> = py.detach(|| shared.state.lock().checks.drain(..).collect());
        if batch.is_empty() {
            return Ok(());
        }
        for c in batch {
            let txn = c.txn;
            let group = c.group.clone();
            let checker = shared
                .checkers
                .lock()
                .get(&c.group)
                .map(|f| f.clone_ref(py));
            let answer = match checker {
                Some(f) => ask_checker(py, &f, c),
                None => Resolution::Unknown,
            };
            py.detach(|| shared.answer(txn, group, answer))?;
        }
    }
}

/// The system-clock driver: sleeps until the core's next deadline (or a wake-up), fires what
/// is due (timers, and the async flush the core schedules), and hands checks to checkers.
fn drive(shared: Arc<Shared>) {
    loop {
        {
            let mut st = shared.state.lock();
            loop {
                if shared.shutdown.load(Ordering::SeqCst)
                    || st.core.is_none()
                    || st.broken.is_some()
                {
                    return;
                }
                st.driver_wake = 0;
                let res = shared.guarded(&mut st, |core, now| {
                    if core.poll_timeout().is_some_and(|t| t <= now) {
                        core.handle_timeout(now)?;
                    }
                    Ok(core.poll_timeout())
                });
                let next = match res {
                    Ok(n) => n,
                    Err(f) => {
                        let failed = st.core.as_ref().and_then(|c| c.failed()).map(str::to_owned);
                        let why = match &failed {
                            Some(reason) => format!(
                                "the broker stopped after a failed sync ({reason}); every call raises BrokerFailed: close it and open it again"
                            ),
                            None => format!("{f:?}"),
                        };
                        if failed.is_none() {
                            st.broken.get_or_insert_with(|| why.clone());
                        }
                        // Waiting callers and subscribers see the failure on their next try.
                        shared.collect(&mut st);
                        drop(st);
                        Python::try_attach(|py| {
                            log_error(py, &format!("rocklet driver stopped: {why}"), None)
                        });
                        return;
                    }
                };
                shared.collect(&mut st);
                if !st.checks.is_empty() {
                    break;
                }
                let wake = next.unwrap_or(Millis::MAX);
                let now = system_now();
                if wake <= now {
                    continue;
                }
                st.driver_wake = wake;
                if wake == Millis::MAX {
                    shared.driver_cv.wait(&mut st);
                } else {
                    shared
                        .driver_cv
                        .wait_for(&mut st, Duration::from_millis(wake - now));
                }
            }
        }
        let answered = Python::try_attach(|py| {
            if let Err(f) = answer_checks(&shared, py) {
                let e = f.into_py(py);
                log_error(py, "rocklet driver could not answer checks", Some(&e));
            }
        });
        if answered.is_none() {
            return; // the interpreter is shutting down
        }
    }
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
#[pyclass(frozen, module = "rocklet._rocklet", name = "Broker")]
pub struct PyBroker {
    shared: Arc<Shared>,
    driver: Mutex<Option<JoinHandle<()>>>,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for PyBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyBroker")
            .field("path", &self.path)
            .field("manual", &self.shared.manual)
            .finish_non_exhaustive()
    }
}

impl Drop for PyBroker {
    fn drop(&mut self) {
        // Best effort: a broker dropped without close() still releases its directory.
        let _ = self.shared.shut();
    }
}

fn fail(py: Python<'_>) -> impl Fn(Fail) -> PyErr + '_ {
    move |f| f.into_py(py)
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
    /// Runs a request; a client error becomes its exception. In manual-clock mode the checks
    /// it caused are answered before returning.
    fn call(&self, py: Python<'_>, req: Request) -> PyResult<Reply> {
        let shared = &self.shared;
        let r = py.detach(|| shared.request(req));
        if shared.manual && r.as_ref().map_or(true, |(_, checks)| *checks) {
            answer_checks(shared, py).map_err(fail(py))?;
        }
        match r.map_err(fail(py))?.0 {
            Reply::Error(e) => Err(client_error(py, &e)),
            reply => Ok(reply),
        }
    }

    fn sent(reply: Reply) -> PyResult<Vec<PySendResult>> {
        match reply {
            Reply::Sent(rs) => Ok(rs.into_iter().map(convert::send_result).collect()),
            other => Err(unexpected(&other)),
        }
    }

    fn end(
        &self,
        py: Python<'_>,
        txn: TxnId,
        resolution: Resolution,
        group: Option<String>,
    ) -> PyResult<bool> {
        let group = match group {
            Some(g) => Some(g),
            None => {
                let shared = &self.shared;
                py.detach(|| shared.transaction_group(txn))
                    .map_err(fail(py))?
            }
        };
        match self.call(
            py,
            Request::EndTransaction {
                txn,
                resolution,
                group,
                from_check: false,
            },
        )? {
            Reply::Ended { duplicate, .. } => Ok(duplicate),
            other => Err(unexpected(&other)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn do_receive(
        &self,
        py: Python<'_>,
        group: String,
        topic: String,
        max: u32,
        invisible_ms: Millis,
        queue: Option<u32>,
        tags: &str,
    ) -> PyResult<Vec<Py<PyReceived>>> {
        let req = Request::Receive {
            group,
            topic,
            queue_id: queue,
            max,
            invisible_ms,
            filter: convert::tags(tags),
        };
        match self.call(py, req)? {
            Reply::Received(rs) => rs.into_iter().map(|r| convert::received(py, r)).collect(),
            other => Err(unexpected(&other)),
        }
    }

    fn generation(&self, py: Python<'_>) -> u64 {
        py.detach(|| self.shared.state.lock().generation)
    }

    /// Waits (GIL released) until the state changes after `gen`, the deadline passes, or the
    /// broker closes; at most `slice` at a time so signals are seen.
    fn wait_change(&self, py: Python<'_>, gen: u64, deadline: Option<Instant>) -> PyResult<()> {
        let slice = Duration::from_millis(100);
        py.detach(|| {
            let mut st = self.shared.state.lock();
            if st.generation == gen && st.core.is_some() {
                let wait = deadline.map_or(slice, |d| {
                    d.saturating_duration_since(Instant::now()).min(slice)
                });
                self.shared.event_cv.wait_for(&mut st, wait);
            }
        });
        py.check_signals()
    }
}

fn unexpected(r: &Reply) -> PyErr {
    crate::error::InternalError::new_err(format!("unexpected reply from the core: {r:?}"))
}

#[pymethods]
impl PyBroker {
    #[new]
    #[pyo3(signature = (path=None, *, clock="system", start_ms=None, repair=false, **config))]
    fn new(
        py: Python<'_>,
        path: Option<PathBuf>,
        clock: &str,
        start_ms: Option<Millis>,
        repair: bool,
        config: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let manual = match clock {
            "system" => false,
            "manual" => true,
            other => {
                return Err(PyValueError::new_err(format!(
                    "clock must be 'system' or 'manual', not {other:?}"
                )))
            }
        };
        if start_ms.is_some() && !manual {
            return Err(PyValueError::new_err("start_ms needs clock='manual'"));
        }
        let cfg = convert::config(config)?;
        let storage = py
            .detach(|| AnyStorage::open(path.as_deref()))
            .map_err(|e| {
                open_error(
                    &path.as_deref().unwrap_or("<memory>".as_ref()).display(),
                    &e,
                )
            })?;
        let now = if manual {
            start_ms.unwrap_or(0)
        } else {
            system_now()
        };
        let core = py
            .detach(|| {
                if repair {
                    Broker::open_repairing(cfg, storage, now)
                } else {
                    Broker::open(cfg, storage, now)
                }
            })
            .map_err(|e| core_error(py, e))?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                core: Some(core),
                replies: HashMap::new(),
                checks: VecDeque::new(),
                syncing: false,
                manual_now: now,
                driver_wake: 0,
                generation: 0,
                broken: None,
            }),
            driver_cv: Condvar::new(),
            event_cv: Condvar::new(),
            manual,
            shutdown: AtomicBool::new(false),
            checkers: Mutex::new(HashMap::new()),
            driver_thread: Mutex::new(None),
        });
        let driver = if manual {
            None
        } else {
            let s = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name("rocklet-driver".into())
                .spawn(move || drive(s))
                .map_err(|e| {
                    crate::error::RockletError::new_err(format!(
                        "cannot start the driver thread: {e}"
                    ))
                })?;
            *shared.driver_thread.lock() = Some(handle.thread().id());
            Some(handle)
        };
        Ok(PyBroker {
            shared,
            driver: Mutex::new(driver),
            path,
        })
    }

    /// The data directory, or None for a broker in memory.
    #[getter]
    fn path(&self) -> Option<String> {
        self.path.as_ref().map(|p| p.display().to_string())
    }

    /// `"system"` or `"manual"`.
    #[getter]
    fn clock(&self) -> &'static str {
        if self.shared.manual {
            "manual"
        } else {
            "system"
        }
    }

    /// The broker's current time in ms (the manual clock, or the system clock).
    #[getter]
    fn now(&self, py: Python<'_>) -> u64 {
        py.detach(|| {
            let st = self.shared.state.lock();
            self.shared.now(&st)
        })
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self, py: Python<'_>) -> bool {
        py.detach(|| self.shared.state.lock().core.is_none())
    }

    /// What recovery found when the broker opened: segments and records read, the torn tail
    /// cut (`cuts`), the damaged ranges `repair=True` moved to quarantine (`quarantined`).
    #[getter]
    fn recovery_report(&self, py: Python<'_>) -> PyResult<PyRecoveryReport> {
        py.detach(|| {
            self.shared
                .read(|c| convert::recovery_report(c.recovery_report()))
        })
        .map_err(fail(py))
    }

    /// Why the broker stopped taking requests, or None: a sync failed, and every call raises
    /// `BrokerFailed` until it is closed and opened again.
    #[getter]
    fn failed(&self, py: Python<'_>) -> PyResult<Option<String>> {
        py.detach(|| self.shared.read(|c| c.failed().map(str::to_owned)))
            .map_err(fail(py))
    }

    /// Bytes in the log (next append offset).
    #[getter]
    fn log_end(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.shared.read(|c| c.log_end()))
            .map_err(fail(py))
    }

    /// Everything below this log offset is durable.
    #[getter]
    fn log_synced(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.shared.read(|c| c.log_synced()))
            .map_err(fail(py))
    }

    /// Manual clock only: moves time forward by `ms`, firing every check, delayed delivery
    /// and redelivery due on the way at its own time (checkers are called from here).
    fn advance(&self, py: Python<'_>, ms: Millis) -> PyResult<()> {
        if !self.shared.manual {
            return Err(PyValueError::new_err(
                "advance() needs a broker opened with clock='manual'",
            ));
        }
        let shared = &self.shared;
        let target = py.detach(|| shared.state.lock().manual_now.saturating_add(ms));
        loop {
            answer_checks(shared, py).map_err(fail(py))?;
            let more = py.detach(|| shared.step_to(target)).map_err(fail(py))?;
            if !more {
                return answer_checks(shared, py).map_err(fail(py));
            }
        }
    }

    /// Makes everything appended durable now (fsync), whatever the flush mode.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.shared.flush()).map_err(fail(py))
    }

    /// Syncs, stops the driver thread and releases the data directory. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let shared = &self.shared;
        let res = py.detach(|| {
            let r = shared.shut();
            if !shared.is_driver_thread() {
                if let Some(h) = self.driver.lock().take() {
                    let _ = h.join();
                }
            }
            r
        });
        let old: Vec<Py<PyAny>> = shared.checkers.lock().drain().map(|(_, f)| f).collect();
        drop(old);
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

    fn __repr__(&self, py: Python<'_>) -> String {
        let closed = self.closed(py);
        format!(
            "Broker(path={:?}, clock={:?}{})",
            self.path(),
            self.clock(),
            if closed { ", closed" } else { "" }
        )
    }

    /// Sends one message; returns where it was stored. `delay_level` (1..N of the
    /// `delay_levels`), `deliver_at_ms` (absolute) or `delay_ms` (relative) delay it.
    #[pyo3(signature = (topic, body, *, tag=None, keys=None, properties=None, delay_level=None, deliver_at_ms=None, delay_ms=None, queue_id=None, message_group=None, message_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        py: Python<'_>,
        topic: String,
        body: &Bound<'_, PyAny>,
        tag: Option<String>,
        keys: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        delay_level: Option<u32>,
        deliver_at_ms: Option<Millis>,
        delay_ms: Option<Millis>,
        queue_id: Option<u32>,
        message_group: Option<String>,
        message_id: Option<String>,
    ) -> PyResult<PySendResult> {
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
        m.delay = convert::delay(delay_level, deliver_at_ms, delay_ms)?;
        let mut rs = Self::sent(self.call(py, Request::Send { messages: vec![m] })?)?;
        rs.pop().ok_or_else(|| unexpected(&Reply::Sent(Vec::new())))
    }

    /// Sends a batch to one topic, all or nothing, with consecutive queue offsets. Each item is
    /// a body (bytes or str) or a mapping with `body` and optional `tag`, `keys`, `properties`
    /// (and `topic`, which must then equal the batch's: a batch never mixes topics).
    #[pyo3(signature = (topic, messages, *, queue_id=None))]
    fn send_batch(
        &self,
        py: Python<'_>,
        topic: String,
        messages: &Bound<'_, PyAny>,
        queue_id: Option<u32>,
    ) -> PyResult<Vec<PySendResult>> {
        let mut out = Vec::new();
        for item in messages.try_iter()? {
            let item = item?;
            let m = if let Ok(d) = item.cast::<pyo3::types::PyMapping>() {
                let get = |k: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
                    Ok(if d.contains(k)? {
                        Some(d.get_item(k)?)
                    } else {
                        None
                    })
                };
                for k in d.keys()?.iter() {
                    let k: String = k.extract()?;
                    if !matches!(k.as_str(), "body" | "tag" | "keys" | "properties" | "topic") {
                        return Err(PyValueError::new_err(format!(
                            "batch item key `{k}` is not one of body, tag, keys, properties, topic"
                        )));
                    }
                }
                let body = get("body")?
                    .ok_or_else(|| PyValueError::new_err("batch item without `body`"))?;
                let tag = match get("tag")? {
                    Some(t) if !t.is_none() => Some(t.extract()?),
                    _ => None,
                };
                let item_topic = match get("topic")? {
                    Some(t) if !t.is_none() => t.extract()?,
                    _ => topic.clone(),
                };
                new_message(
                    item_topic,
                    &body,
                    tag,
                    get("keys")?.as_ref(),
                    get("properties")?.as_ref(),
                    queue_id,
                    None,
                    None,
                )?
            } else {
                new_message(topic.clone(), &item, None, None, None, queue_id, None, None)?
            };
            out.push(m);
        }
        Self::sent(self.call(py, Request::Send { messages: out })?)
    }

    /// Registers the checker of a producer group (the group comes online: its pending
    /// transactions are checked). `checker(message)` returns "commit", "rollback" or
    /// "unknown"; `message.transaction_id` names the transaction. None removes it (checks of
    /// the group wait without using attempts).
    #[pyo3(signature = (group, checker))]
    fn set_checker(
        &self,
        py: Python<'_>,
        group: String,
        checker: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        if let Some(c) = &checker {
            if !c.bind(py).is_callable() {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "checker must be callable",
                ));
            }
        }
        let online = checker.is_some();
        let old = match checker {
            Some(c) => self.shared.checkers.lock().insert(group.clone(), c),
            None => self.shared.checkers.lock().remove(&group),
        };
        drop(old);
        let shared = &self.shared;
        py.detach(|| {
            let mut st = shared.state.lock();
            shared.guarded(&mut st, |core, now| {
                core.set_producer_online(now, &group, online);
                Ok(())
            })?;
            shared.collect(&mut st);
            Ok::<(), Fail>(())
        })
        .map_err(fail(py))
    }

    /// Stores a half (prepared) message of producer group `group`: invisible until committed.
    /// Returns the `Transaction`; commit or roll it back, or let the checker decide.
    #[pyo3(signature = (group, topic, body, *, tag=None, keys=None, properties=None, queue_id=None, message_id=None, check_immunity_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        slf: &Bound<'_, Self>,
        group: String,
        topic: String,
        body: &Bound<'_, PyAny>,
        tag: Option<String>,
        keys: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        queue_id: Option<u32>,
        message_id: Option<String>,
        check_immunity_ms: Option<Millis>,
    ) -> PyResult<PyTransaction> {
        let py = slf.py();
        let message = new_message(
            topic, body, tag, keys, properties, queue_id, message_id, None,
        )?;
        let req = Request::Prepare {
            group: group.clone(),
            message,
            check_immunity_ms,
        };
        let mut rs = Self::sent(slf.get().call(py, req)?)?;
        let result = rs
            .pop()
            .ok_or_else(|| unexpected(&Reply::Sent(Vec::new())))?;
        let txn = result
            .transaction_id
            .as_deref()
            .map(|t| convert::txn_id(py, t))
            .transpose()?
            .ok_or_else(|| {
                crate::error::InternalError::new_err("a prepare returned no transaction id")
            })?;
        Ok(PyTransaction {
            broker: slf.clone().unbind(),
            txn,
            group,
            result: Py::new(py, result)?,
            resolution: Mutex::new(None),
        })
    }

    /// `with broker.transaction(group, topic, body) as tx: ...`: prepares now; the block's
    /// normal exit commits, an exception rolls back; if the process dies in between, the
    /// group's checker decides later.
    #[pyo3(signature = (group, topic, body, *, tag=None, keys=None, properties=None, queue_id=None, message_id=None, check_immunity_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn transaction(
        slf: &Bound<'_, Self>,
        group: String,
        topic: String,
        body: &Bound<'_, PyAny>,
        tag: Option<String>,
        keys: Option<&Bound<'_, PyAny>>,
        properties: Option<&Bound<'_, PyAny>>,
        queue_id: Option<u32>,
        message_id: Option<String>,
        check_immunity_ms: Option<Millis>,
    ) -> PyResult<PyTransaction> {
        Self::prepare(
            slf,
            group,
            topic,
            body,
            tag,
            keys,
            properties,
            queue_id,
            message_id,
            check_immunity_ms,
        )
    }

    /// Ends a transaction by id ("commit", "rollback" or "unknown"). Returns True when it
    /// was already resolved this way (a harmless duplicate).
    #[pyo3(signature = (transaction_id, resolution, *, group=None))]
    fn end_transaction(
        &self,
        py: Python<'_>,
        transaction_id: &str,
        resolution: &Bound<'_, PyAny>,
        group: Option<String>,
    ) -> PyResult<bool> {
        let txn = convert::txn_id(py, transaction_id)?;
        let r = convert::resolution(py, resolution)?;
        self.end(py, txn, r, group)
    }

    /// Reads up to `max` messages for consumer group `group`, from its committed offsets,
    /// and commits past them. `queue=None` reads the topic's queues in order.
    #[pyo3(signature = (group, topic, queue=None, max=32, *, tags="*"))]
    fn pull(
        &self,
        py: Python<'_>,
        group: String,
        topic: String,
        queue: Option<u32>,
        max: u32,
        tags: &str,
    ) -> PyResult<Vec<Py<PyMessage>>> {
        let queues: Vec<u32> = match queue {
            Some(q) => vec![q],
            None => {
                let t = topic.clone();
                py.detach(|| {
                    self.shared
                        .read(|c| c.topics().into_iter().find(|i| i.name == t))
                })
                .map_err(fail(py))?
                .map(|i| i.queues.into_iter().map(|(q, _, _)| q).collect())
                .unwrap_or_default()
            }
        };
        let mut out = Vec::new();
        for q in queues {
            let left = max.saturating_sub(out.len() as u32);
            if left == 0 {
                break;
            }
            let req = Request::Pull {
                group: group.clone(),
                topic: topic.clone(),
                queue_id: q,
                offset: None,
                max: left,
                filter: convert::tags(tags),
                auto_commit: true,
            };
            match self.call(py, req)? {
                Reply::Pulled { messages, .. } => out.extend(convert::messages(py, messages)?),
                other => return Err(unexpected(&other)),
            }
        }
        Ok(out)
    }

    /// Reads one queue from `offset` (default: the group's committed offset); commits past
    /// what it returns when `auto_commit`.
    #[pyo3(signature = (group, topic, queue_id, *, offset=None, max=32, tags="*", auto_commit=true))]
    #[allow(clippy::too_many_arguments)]
    fn pull_queue(
        &self,
        py: Python<'_>,
        group: String,
        topic: String,
        queue_id: u32,
        offset: Option<u64>,
        max: u32,
        tags: &str,
        auto_commit: bool,
    ) -> PyResult<PyPullResult> {
        let req = Request::Pull {
            group,
            topic,
            queue_id,
            offset,
            max,
            filter: convert::tags(tags),
            auto_commit,
        };
        match self.call(py, req)? {
            Reply::Pulled {
                messages,
                next_offset,
                max_offset,
            } => Ok(PyPullResult {
                messages: convert::messages(py, messages)?,
                next_offset,
                max_offset,
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// Commits a consumer group's offset in a queue.
    fn commit_offset(
        &self,
        py: Python<'_>,
        group: String,
        topic: String,
        queue_id: u32,
        offset: u64,
    ) -> PyResult<()> {
        self.call(
            py,
            Request::CommitOffset {
                group,
                topic,
                queue_id,
                offset,
            },
        )
        .map(drop)
    }

    /// A consumer group's committed offset in a queue, or None.
    fn committed_offset(
        &self,
        py: Python<'_>,
        group: &str,
        topic: &str,
        queue_id: u32,
    ) -> PyResult<Option<u64>> {
        py.detach(|| {
            self.shared
                .read(|c| c.committed_offset(group, topic, queue_id))
        })
        .map_err(fail(py))
    }

    /// Receives up to `max` messages for `group`, invisible to the group for `invisible_ms`
    /// unless acked (then redelivered with the next attempt number).
    #[pyo3(signature = (group, topic, max=32, *, invisible_ms, queue=None, tags="*"))]
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &self,
        py: Python<'_>,
        group: String,
        topic: String,
        max: u32,
        invisible_ms: Millis,
        queue: Option<u32>,
        tags: &str,
    ) -> PyResult<Vec<Py<PyReceived>>> {
        self.do_receive(py, group, topic, max, invisible_ms, queue, tags)
    }

    /// Acknowledges a received message (by its handle or its `Received`).
    fn ack(&self, py: Python<'_>, group: String, handle: &Bound<'_, PyAny>) -> PyResult<()> {
        let handle = convert::handle(py, handle)?;
        self.call(py, Request::Ack { group, handle }).map(drop)
    }

    /// Changes how long a received message stays invisible; returns the new handle (the old
    /// one still names this delivery; a redelivery makes both stale).
    fn change_invisible(
        &self,
        py: Python<'_>,
        group: String,
        handle: &Bound<'_, PyAny>,
        invisible_ms: Millis,
    ) -> PyResult<String> {
        let handle = convert::handle(py, handle)?;
        match self.call(
            py,
            Request::ChangeInvisible {
                group,
                handle,
                invisible_ms,
            },
        )? {
            Reply::InvisibleChanged { handle, .. } => Ok(handle.to_string()),
            other => Err(unexpected(&other)),
        }
    }

    /// Gives a received message up at once: it goes to `%DLQ%<group>`.
    fn forward_to_dead_letter(
        &self,
        py: Python<'_>,
        group: String,
        handle: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let handle = convert::handle(py, handle)?;
        self.call(py, Request::ForwardToDeadLetter { group, handle })
            .map(drop)
    }

    /// A pulled message (by log `offset`) failed: back to `%RETRY%<group>` after a delay.
    #[pyo3(signature = (group, offset, delay_level=None))]
    fn send_back(
        &self,
        py: Python<'_>,
        group: String,
        offset: u64,
        delay_level: Option<u32>,
    ) -> PyResult<PySendResult> {
        let mut rs = Self::sent(self.call(
            py,
            Request::SendBack {
                group,
                offset,
                delay_level,
            },
        )?)?;
        rs.pop().ok_or_else(|| unexpected(&Reply::Sent(Vec::new())))
    }

    /// An iterator of `Received` for `group` on `topic`: each `next()` waits (GIL released)
    /// for a message; it stops after `timeout` seconds without one (None: waits forever, until
    /// close). Also an async iterator (`async for`), waiting in the default executor.
    #[pyo3(signature = (group, topic, *, invisible_ms, max=32, tags="*", timeout=None))]
    fn subscribe(
        slf: &Bound<'_, Self>,
        group: String,
        topic: String,
        invisible_ms: Millis,
        max: u32,
        tags: &str,
        timeout: Option<f64>,
    ) -> PyResult<PySubscription> {
        let timeout = match timeout {
            Some(t) if !(t >= 0.0 && t.is_finite()) => {
                return Err(PyValueError::new_err(
                    "timeout must be a non-negative number of seconds",
                ))
            }
            Some(t) => Some(Duration::from_secs_f64(t)),
            None => None,
        };
        Ok(PySubscription {
            broker: slf.clone().unbind(),
            group,
            topic,
            invisible_ms,
            max,
            tags: tags.to_owned(),
            timeout,
            buffer: Mutex::new(VecDeque::new()),
        })
    }

    /// Creates a topic with `queues` queues (or grows it).
    fn create_topic(&self, py: Python<'_>, name: &str, queues: u32) -> PyResult<()> {
        py.detach(|| self.shared.read(|c| c.create_topic(name, queues)))
            .and_then(|r| r.map_err(Fail::from))
            .map_err(fail(py))?
            .map_err(|e| client_error(py, &e))
    }

    /// Consumer-visible topics with their queues (and `depth`, visible messages).
    fn topics(&self, py: Python<'_>) -> PyResult<Vec<PyTopicInfo>> {
        let ts = py
            .detach(|| self.shared.read(|c| c.topics()))
            .map_err(fail(py))?;
        Ok(ts.into_iter().map(convert::topic_info).collect())
    }

    /// Transactions waiting for commit or rollback, in log order (at most `limit`).
    #[pyo3(signature = (limit=None))]
    fn pending_transactions(
        &self,
        py: Python<'_>,
        limit: Option<usize>,
    ) -> PyResult<Vec<PyPendingTransaction>> {
        let n = limit.unwrap_or(usize::MAX);
        let ts = py
            .detach(|| self.shared.read(|c| c.pending_transactions(n)))
            .map_err(fail(py))?;
        Ok(ts.into_iter().map(convert::pending_txn).collect())
    }

    /// Delayed messages not yet delivered, in log order (at most `limit`).
    #[pyo3(signature = (limit=None))]
    fn pending_delays(
        &self,
        py: Python<'_>,
        limit: Option<usize>,
    ) -> PyResult<Vec<PyPendingDelay>> {
        let n = limit.unwrap_or(usize::MAX);
        let ds = py
            .detach(|| self.shared.read(|c| c.pending_delays(n)))
            .map_err(fail(py))?;
        Ok(ds.into_iter().map(convert::pending_delay).collect())
    }

    /// Messages `group` received from `topic` and has not acked yet.
    fn inflight_count(&self, py: Python<'_>, group: &str, topic: &str) -> PyResult<usize> {
        py.detach(|| self.shared.read(|c| c.inflight_count(group, topic)))
            .map_err(fail(py))
    }

    /// The broker's counters (messages stored, commits, rollbacks, checks, ...).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = py
            .detach(|| self.shared.read(|c| c.stats()))
            .map_err(fail(py))?;
        convert::stats(py, s)
    }
}

/// A prepared transaction. `commit()` / `rollback()`, or use it as a context manager:
/// a normal exit commits, an exception rolls back (and propagates).
#[pyclass(frozen, module = "rocklet._rocklet", name = "Transaction")]
#[derive(Debug)]
pub struct PyTransaction {
    broker: Py<PyBroker>,
    txn: TxnId,
    group: String,
    result: Py<PySendResult>,
    resolution: Mutex<Option<Resolution>>,
}

impl PyTransaction {
    fn finish(&self, py: Python<'_>, r: Resolution) -> PyResult<bool> {
        let dup = self
            .broker
            .get()
            .end(py, self.txn, r, Some(self.group.clone()))?;
        *self.resolution.lock() = Some(r);
        Ok(dup)
    }
}

#[pymethods]
impl PyTransaction {
    /// The transaction id (16 hex digits).
    #[getter]
    fn transaction_id(&self) -> String {
        self.txn.to_string()
    }
    /// The producer group.
    #[getter]
    fn group(&self) -> &str {
        &self.group
    }
    /// Where the half message was stored (its `msg_id` is the message's id once committed).
    #[getter]
    fn send_result(&self, py: Python<'_>) -> Py<PySendResult> {
        self.result.clone_ref(py)
    }
    /// "commit" or "rollback" once this object ended it, else None.
    #[getter]
    fn resolution(&self) -> Option<&'static str> {
        self.resolution.lock().map(convert::resolution_name)
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
        if self.resolution.lock().is_some() {
            return Ok(false);
        }
        if exc_type.is_none_or(|t| t.is_none()) {
            self.finish(py, Resolution::Commit)?;
        } else if let Err(e) = self.finish(py, Resolution::Rollback) {
            // Keep the block's exception; the checker resolves the transaction later.
            log_error(
                py,
                &format!(
                    "rollback of transaction {} failed; the checker will decide",
                    self.txn
                ),
                Some(&e),
            );
        }
        Ok(false)
    }
    fn __repr__(&self) -> String {
        format!(
            "Transaction(id={:?}, group={:?}, resolution={})",
            self.txn.to_string(),
            self.group,
            self.resolution()
                .map_or("None".to_owned(), |r| format!("{r:?}"))
        )
    }
}

/// Messages of a topic as they arrive, for one consumer group (see `Broker.subscribe`).
#[pyclass(frozen, module = "rocklet._rocklet", name = "Subscription")]
#[derive(Debug)]
pub struct PySubscription {
    broker: Py<PyBroker>,
    group: String,
    topic: String,
    invisible_ms: Millis,
    max: u32,
    tags: String,
    timeout: Option<Duration>,
    buffer: Mutex<VecDeque<Py<PyReceived>>>,
}

impl PySubscription {
    fn next_received(&self, py: Python<'_>) -> PyResult<Option<Py<PyReceived>>> {
        if let Some(r) = self.buffer.lock().pop_front() {
            return Ok(Some(r));
        }
        let broker = self.broker.get();
        let deadline = self.timeout.map(|t| Instant::now() + t);
        loop {
            if broker.closed(py) {
                return Ok(None);
            }
            let gen = broker.generation(py);
            let got = broker.do_receive(
                py,
                self.group.clone(),
                self.topic.clone(),
                self.max,
                self.invisible_ms,
                None,
                &self.tags,
            )?;
            if !got.is_empty() {
                let mut buf = self.buffer.lock();
                buf.extend(got);
                return Ok(buf.pop_front());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            broker.wait_change(py, gen, deadline)?;
        }
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
    /// Acknowledges a message this subscription delivered.
    fn ack(&self, py: Python<'_>, received: &Bound<'_, PyAny>) -> PyResult<()> {
        self.broker.get().ack(py, self.group.clone(), received)
    }
}
