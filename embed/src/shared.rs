//! [`Shared`]: a [`Engine`] behind a mutex, for hosts whose callers run on many threads (the
//! Python binding): group commit under sync flush, the host-clock driver loop, waiting for a
//! change, and a caught panic that marks the broker broken; the checkers by producer group,
//! checks answered between the driver's steps or a manual drive's, and a waiting
//! subscription. The binding names its own lock ([`Release`]: Python releases the GIL
//! around every call that takes the mutex) and calls its language's checker.
//!
//! Durability: under sync flush a write's reply is held by the core until a sync; callers
//! group-commit: the first waiting writer lets the writers queued behind it append (a fair
//! unlock), then syncs once for all of them.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::marker::PhantomData;
use core::panic::AssertUnwindSafe;
use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::panic::catch_unwind;
use std::thread::{JoinHandle, ThreadId};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard};
use rocklet_core::{
    Broker, CheckRequest, Millis, Received, Reply, Request, Resolution, Storage, TxnId,
};

use crate::clock::Clock;
use crate::engine::{Checkers, Drive, Engine, EngineFail};
use crate::ops::Endpoint;
use crate::subscription::Subscription;
use crate::Fail;

/// What a [`Shared`] call fails with: the binding's error type, built from the host's
/// failures and from the two this layer adds.
pub trait SharedFail<S: Storage>: From<EngineFail<S>> + core::fmt::Debug {
    /// The broker stopped taking requests earlier (a driver failure or a caught panic).
    fn broken(why: String) -> Self;
    /// A panic was caught now (the text is its message); the broker is broken from now on.
    fn panic(why: String) -> Self;
    /// The sync that had to make this reply durable failed.
    fn failed(reason: String) -> Self;
}

/// Everything behind the mutex.
struct State<S: Storage, C: Clock> {
    host: Engine<S, C>,
    /// A group-commit leader is gathering writers before its sync.
    syncing: bool,
    /// When the driver next wakes by itself (0 while it is awake).
    driver_wake: Millis,
    /// Set after a storage failure in the driver or a caught panic: the broker is unusable.
    /// (A failed sync is the core's own state: it refuses every later call itself.)
    broken: Option<String>,
}

/// A host shared by threads: one mutex, a condition variable that wakes the driver and one
/// that wakes waiters (group-commit followers, subscribers); and the checkers (`K`: the
/// language's callable) by producer group, under a lock of their own.
pub struct Shared<S: Storage, C: Clock, K = ()> {
    state: Mutex<State<S, C>>,
    driver_cv: Condvar,
    event_cv: Condvar,
    manual: bool,
    shutdown: AtomicBool,
    driver: Mutex<Option<JoinHandle<()>>>,
    driver_thread: Mutex<Option<ThreadId>>,
    checkers: Mutex<Checkers<K>>,
}

/// Where a binding lets go of its own lock around a call that takes the [`Shared`] mutex
/// (Python: the GIL), so that no thread waits for the mutex while holding that lock.
pub trait Release {
    /// Runs `f` with the binding's lock released.
    fn release<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T;
}

/// No lock of the binding's own.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoLock;

impl Release for NoLock {
    fn release<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        f()
    }
}

impl<S: Storage, C: Clock, K> core::fmt::Debug for Shared<S, C, K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Shared")
            .field("manual", &self.manual)
            .finish_non_exhaustive()
    }
}

/// The text of a caught panic.
pub fn panic_text(p: &(dyn core::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}

impl<S: Storage, C: Clock, K> Shared<S, C, K> {
    /// Shares `host`; `manual` says its clock moves only when told (no driver thread).
    pub fn new(host: Engine<S, C>, manual: bool) -> Self {
        Shared {
            state: Mutex::new(State {
                host,
                syncing: false,
                driver_wake: 0,
                broken: None,
            }),
            driver_cv: Condvar::new(),
            event_cv: Condvar::new(),
            manual,
            shutdown: AtomicBool::new(false),
            driver: Mutex::new(None),
            driver_thread: Mutex::new(None),
            checkers: Mutex::new(Checkers::default()),
        }
    }

    /// Whether the clock is manual.
    pub fn is_manual(&self) -> bool {
        self.manual
    }

    /// Runs `f` on the host, turning a panic into an error that marks the broker broken.
    fn guarded<T, F: SharedFail<S>>(
        &self,
        st: &mut State<S, C>,
        f: impl FnOnce(&mut Engine<S, C>) -> Result<T, F>,
    ) -> Result<T, F> {
        if let Some(why) = &st.broken {
            return Err(F::broken(why.clone()));
        }
        let r = match catch_unwind(AssertUnwindSafe(|| f(&mut st.host))) {
            Ok(r) => r,
            Err(p) => {
                let why = panic_text(&*p);
                st.broken = Some(format!("internal error: {why}"));
                Err(F::panic(why))
            }
        };
        self.notify(st);
        r
    }

    /// Wakes waiters after a change: subscribers and group-commit followers, and the driver
    /// when checks wait or the next deadline moved earlier.
    fn notify(&self, st: &State<S, C>) {
        self.event_cv.notify_all();
        let next = st.host.next_due().unwrap_or(Millis::MAX);
        if !self.manual && (st.host.has_checks() || next < st.driver_wake) {
            self.driver_cv.notify_one();
        }
    }

    /// One request to its reply; under sync flush, group-committed with concurrent writers.
    /// Also says whether checks wait for a checker.
    pub fn request<F: SharedFail<S>>(&self, req: Request) -> Result<(Reply, bool), F> {
        let mut st = self.state.lock();
        // Also after an error: a failed write fails the replies that waited on a sync.
        let id = self.guarded(&mut st, |h| Ok::<_, F>(h.submit(req)?))?;
        let taken = |st: &mut State<S, C>| {
            st.host.take_reply(id).map(|r| match r {
                Ok(r) => Ok((r, st.host.has_checks())),
                Err(reason) => Err(F::failed(reason)),
            })
        };
        loop {
            if let Some(r) = taken(&mut st) {
                return r;
            }
            // The reply waits for a sync (sync flush), unless the broker went away meanwhile.
            self.guarded(&mut st, |h| Ok::<_, F>(h.core().map(drop)?))?;
            if st.syncing {
                self.event_cv.wait(&mut st);
                continue;
            }
            st.syncing = true;
            // Let the writers already queued on the mutex append first: one sync covers all.
            MutexGuard::unlocked_fair(&mut st, || {});
            let res = self.guarded(&mut st, |h| Ok::<_, F>(h.sync()?));
            st.syncing = false;
            if let Err(e) = res {
                // Closed meanwhile: close() synced, so the reply may have been released; or
                // the sync failed, and the reply came out failed with the others that waited.
                return taken(&mut st).unwrap_or(Err(e));
            }
        }
    }

    /// Runs `f` on the host under the mutex.
    pub fn with<T, F: SharedFail<S>>(
        &self,
        f: impl FnOnce(&mut Engine<S, C>) -> Result<T, F>,
    ) -> Result<T, F> {
        let mut st = self.state.lock();
        self.guarded(&mut st, f)
    }

    /// Reads the core under the mutex.
    pub fn read<T, F: SharedFail<S>>(&self, f: impl FnOnce(&Broker<S>) -> T) -> Result<T, F> {
        self.with(|h| Ok(f(h.core()?)))
    }

    /// Looks at the host under the mutex, even when it is broken or closed.
    pub fn peek<T>(&self, f: impl FnOnce(&mut Engine<S, C>) -> T) -> T {
        f(&mut self.state.lock().host)
    }

    /// Whether this thread is the driver's (which must not join itself).
    pub fn is_driver_thread(&self) -> bool {
        *self.driver_thread.lock() == Some(std::thread::current().id())
    }

    /// Starts [`Shared::drive`] on a thread of its own named `name`: `answer` answers the
    /// checks that wait (`false` stops the driver); `stopped` hears why the driver stopped
    /// after a failure. [`Shared::close`] joins the thread.
    pub fn start_driver<F: SharedFail<S>>(
        this: &Arc<Self>,
        name: &str,
        mut answer: impl FnMut(&Self) -> bool + Send + 'static,
        stopped: impl FnOnce(String) + Send + 'static,
    ) -> std::io::Result<()>
    where
        Self: Send + Sync + 'static,
    {
        let t = Arc::clone(this);
        let handle = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                if let Some(why) = t.drive::<F>(|| answer(&t)) {
                    stopped(why);
                }
            })?;
        *this.driver_thread.lock() = Some(handle.thread().id());
        *this.driver.lock() = Some(handle);
        Ok(())
    }

    /// Stops the driver and drops the core (releasing the data directory), syncing first.
    pub fn shut<F: SharedFail<S>>(&self) -> Result<(), F> {
        self.shutdown.store(true, Ordering::SeqCst);
        let mut st = self.state.lock();
        // A broker that broke has nothing it could sync: its failure was reported already.
        let res = if st.broken.is_some() {
            st.host.abandon("the broker is closed");
            Ok(())
        } else {
            self.guarded(&mut st, |h| Ok::<_, F>(h.close()?))
        };
        self.driver_cv.notify_all();
        self.event_cv.notify_all();
        res
    }

    /// [`Shared::shut`], then waits for the driver thread to end (unless called on it: a
    /// checker may close the broker). Idempotent.
    pub fn close<F: SharedFail<S>>(&self) -> Result<(), F> {
        let res = self.shut();
        if !self.is_driver_thread() {
            let handle = self.driver.lock().take();
            if let Some(h) = handle {
                let _ = h.join();
            }
        }
        res
    }

    /// Answers `checks` with `ask`, the binding's call of the group's checker (`None`: the
    /// group has none; the check stays unanswered and the transaction pending). The mutex is
    /// not held while `ask` runs: a checker may call the broker.
    pub fn answer<F: SharedFail<S> + Send>(
        &self,
        lock: &impl Release,
        checks: Vec<(CheckRequest, Millis)>,
        ask: &mut impl FnMut(&CheckRequest) -> Option<Resolution>,
    ) -> Result<(), F>
    where
        Self: Sync,
    {
        for (c, _) in checks {
            if let Some(r) = ask(&c) {
                lock.release(|| self.with::<_, F>(|h| Ok(h.answer(&c, r)?)))?;
            }
        }
        Ok(())
    }

    /// Answers every queued check (see [`Shared::answer`]) until none are left.
    pub fn answer_all<F: SharedFail<S> + Send>(
        &self,
        lock: &impl Release,
        ask: &mut impl FnMut(&CheckRequest) -> Option<Resolution>,
    ) -> Result<(), F>
    where
        Self: Sync,
    {
        loop {
            let batch = lock.release(|| self.peek(|h| h.take_checks()));
            if batch.is_empty() {
                return Ok(());
            }
            self.answer::<F>(lock, batch, ask)?;
        }
    }

    /// Manual clock: a whole [`Drive`], the checks each step makes due answered (with `ask`)
    /// before the next step, so each is answered at its own time.
    pub fn run_drive<F: SharedFail<S> + Send>(
        &self,
        lock: &impl Release,
        mut drive: Drive,
        ask: &mut impl FnMut(&CheckRequest) -> Option<Resolution>,
    ) -> Result<(), F>
    where
        Self: Sync,
    {
        self.answer_all::<F>(lock, ask)?;
        loop {
            let d = &mut drive;
            let checks = lock.release(|| self.with::<_, F>(|h| Ok(d.next(h)?)))?;
            if checks.is_empty() {
                return Ok(());
            }
            self.answer::<F>(lock, checks, ask)?;
        }
    }

    /// The subscription's next message, waiting for one (in waits of at most `slice`, with
    /// `between` called after each: Python checks for signals there) until `deadline` (`None`:
    /// until the broker closes). `None`: the deadline passed, or the broker closed.
    pub fn next_waiting<E: Endpoint>(
        &self,
        lock: &impl Release,
        sub: &mut Subscription,
        ep: &mut E,
        deadline: Option<Instant>,
        slice: Duration,
        mut between: impl FnMut() -> Result<(), Fail<E::Error>>,
    ) -> Result<Option<Received>, Fail<E::Error>>
    where
        Self: Sync,
    {
        loop {
            let (closed, gen) = lock.release(|| self.peek(|h| (h.is_closed(), h.generation())));
            if closed {
                return Ok(None);
            }
            if let Some(r) = sub.next(ep)? {
                return Ok(Some(r));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            let wait = deadline.map_or(slice, |d| {
                d.saturating_duration_since(Instant::now()).min(slice)
            });
            lock.release(|| self.wait_change(gen, wait));
            between()?;
        }
    }

    /// Sets (`Some`) or removes (`None`) the checker of producer group `group`, and tells the
    /// core whether the group is online (its pending transactions get checked, or wait
    /// without using attempts). Answers the checker it replaced, to drop where the binding
    /// may.
    pub fn set_checker<F: SharedFail<S> + Send>(
        &self,
        lock: &impl Release,
        group: &str,
        checker: Option<K>,
    ) -> Result<Option<K>, F>
    where
        Self: Sync,
    {
        let online = checker.is_some();
        let old = self.checkers.lock().set_local(group, checker);
        lock.release(|| self.with::<_, F>(|h| Ok(h.set_producer_online(group, online)?)))?;
        Ok(old)
    }

    /// Every checker, removed (closing).
    pub fn clear_checkers(&self) -> Vec<K> {
        self.checkers.lock().clear()
    }

    /// The `ask` of [`Shared::answer`] from the registered checkers: `copy` takes the
    /// group's checker out of the registry (Python: a new reference), `call` asks it with
    /// the registry unlocked (a checker may set checkers). A group without one: `None`.
    /// A checker that fails (`Err`, or a panic) is reported to `failed` and answered
    /// Unknown: the transaction stays pending and is checked again.
    pub fn asker<'a, E>(
        &'a self,
        copy: impl Fn(&K) -> K + 'a,
        mut call: impl FnMut(&K, &CheckRequest) -> Result<Resolution, E> + 'a,
        mut failed: impl FnMut(CheckerFailed<E>) + 'a,
    ) -> impl FnMut(&CheckRequest) -> Option<Resolution> + 'a {
        move |c| {
            let checker = self.checkers.lock().get(&c.group).map(&copy)?;
            let res = catch_unwind(AssertUnwindSafe(|| call(&checker, c)));
            let why = match res {
                Ok(Ok(r)) => return Some(r),
                Ok(Err(e)) => CheckerError::Failed(e),
                Err(p) => CheckerError::Panicked(panic_text(&*p)),
            };
            failed(CheckerFailed {
                group: c.group.clone(),
                txn: c.txn,
                why,
            });
            Some(Resolution::Unknown)
        }
    }

    /// The operations' [`Endpoint`] over this host: see [`SharedEp`].
    pub fn endpoint<L, A, F>(&self, lock: L, ask: A) -> SharedEp<'_, S, C, K, L, A, F> {
        SharedEp {
            shared: self,
            lock,
            ask,
            fail: PhantomData,
        }
    }

    /// Waits until the state changes after generation `gen`, at most `wait`, unless the
    /// broker is closed.
    pub fn wait_change(&self, gen: u64, wait: Duration) {
        let mut st = self.state.lock();
        if st.host.generation() == gen && !st.host.is_closed() {
            self.event_cv.wait_for(&mut st, wait);
        }
    }

    /// The host-clock driver, for a thread of its own: sleeps until the core's next deadline
    /// (or a wake-up), fires what is due (timers, and the async flush the core schedules),
    /// and calls `answer` when checks wait (it takes them with [`Engine::take_checks`] through
    /// [`Shared::with`]; `false` stops the driver). Returns when the broker closes, or with
    /// the reason it stopped after a failure (waiting callers see it on their next call).
    pub fn drive<F: SharedFail<S>>(&self, mut answer: impl FnMut() -> bool) -> Option<String> {
        loop {
            {
                let mut st = self.state.lock();
                loop {
                    if self.shutdown.load(Ordering::SeqCst)
                        || st.host.is_closed()
                        || st.broken.is_some()
                    {
                        return None;
                    }
                    st.driver_wake = 0;
                    let res = self.guarded(&mut st, |h| {
                        h.fire_due()?;
                        Ok::<_, F>(h.next_due())
                    });
                    let next = match res {
                        Ok(n) => n,
                        Err(f) => {
                            let failed = st.host.failed().map(str::to_string);
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
                            self.notify(&st);
                            return Some(why);
                        }
                    };
                    if st.host.has_checks() {
                        break;
                    }
                    let wake = next.unwrap_or(Millis::MAX);
                    let now = st.host.now();
                    if wake <= now {
                        continue;
                    }
                    st.driver_wake = wake;
                    if wake == Millis::MAX {
                        self.driver_cv.wait(&mut st);
                    } else {
                        self.driver_cv
                            .wait_for(&mut st, Duration::from_millis(wake - now));
                    }
                }
            }
            if !answer() {
                return None;
            }
        }
    }
}

/// A checker failed ([`Shared::asker`]): the check was answered Unknown. Its `Display` is the
/// report (the error itself goes beside it, where the host logs it).
#[derive(Debug)]
pub struct CheckerFailed<E> {
    /// The producer group.
    pub group: String,
    /// The transaction checked.
    pub txn: TxnId,
    pub why: CheckerError<E>,
}

/// How a checker failed.
#[derive(Debug)]
pub enum CheckerError<E> {
    /// It answered with an error (Python: raised, or answered something else).
    Failed(E),
    /// It panicked (the text).
    Panicked(String),
}

impl<E> CheckerFailed<E> {
    /// The checker's own error (none for a panic).
    pub fn error(&self) -> Option<&E> {
        match &self.why {
            CheckerError::Failed(e) => Some(e),
            CheckerError::Panicked(_) => None,
        }
    }
}

impl<E> core::fmt::Display for CheckerFailed<E> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let (group, txn) = (&self.group, self.txn);
        match &self.why {
            CheckerError::Failed(_) => write!(
                f,
                "checker of producer group `{group}` failed on transaction {txn}; it stays pending and will be checked again"
            ),
            CheckerError::Panicked(panic) => {
                write!(f, "checker of `{group}` on {txn}: internal error {panic}")
            }
        }
    }
}

/// The operations' [`Endpoint`] over a [`Shared`] host ([`Shared::endpoint`]): each call
/// releases the binding's lock `L` while it takes the mutex, and under the manual clock the
/// checks a request made due are answered with `ask` before it returns (no driver thread
/// does it). `F` is the binding's failure.
pub struct SharedEp<'a, S: Storage, C: Clock, K, L, A, F> {
    shared: &'a Shared<S, C, K>,
    lock: L,
    ask: A,
    fail: PhantomData<fn() -> F>,
}

impl<S: Storage, C: Clock, K, L, A, F> core::fmt::Debug for SharedEp<'_, S, C, K, L, A, F> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedEp")
            .field("shared", self.shared)
            .finish_non_exhaustive()
    }
}

impl<S, C, K, L, A, F> Endpoint for SharedEp<'_, S, C, K, L, A, F>
where
    S: Storage,
    C: Clock,
    Shared<S, C, K>: Sync,
    L: Release,
    A: FnMut(&CheckRequest) -> Option<Resolution>,
    F: SharedFail<S> + Send,
{
    type Error = F;

    fn request(&mut self, req: Request) -> Result<Reply, Fail<F>> {
        let shared = self.shared;
        let r = self.lock.release(|| shared.request::<F>(req));
        if shared.is_manual() && r.as_ref().map_or(true, |(_, checks)| *checks) {
            shared
                .answer_all::<F>(&self.lock, &mut self.ask)
                .map_err(Fail::Host)?;
        }
        match r.map_err(Fail::Host)?.0 {
            Reply::Error(e) => Err(Fail::Client(e)),
            reply => Ok(reply),
        }
    }

    fn queue_count(&mut self, topic: &str) -> Result<Option<u32>, Fail<F>> {
        let shared = self.shared;
        self.lock
            .release(|| shared.read::<_, F>(|c| c.topic_queue_count(topic)))
            .map_err(Fail::Host)
    }

    fn transaction_group(&mut self, txn: TxnId) -> Result<Option<String>, Fail<F>> {
        let shared = self.shared;
        self.lock
            .release(|| shared.with::<_, F>(|h| Ok(h.transaction_group(txn)?)))
            .map_err(Fail::Host)
    }
}
