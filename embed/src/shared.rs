//! [`Shared`]: a [`Host`] behind a mutex, for hosts whose callers run on many threads (the
//! Python binding): group commit under sync flush, the host-clock driver loop, waiting for a
//! change, and a caught panic that marks the broker broken. The binding adds its own lock
//! discipline around it (Python: the GIL is released before any of these calls) and answers
//! the checks the driver hands out.
//!
//! Durability: under sync flush a write's reply is held by the core until a sync; callers
//! group-commit: the first waiting writer lets the writers queued behind it append (a fair
//! unlock), then syncs once for all of them.

use alloc::format;
use alloc::string::{String, ToString};
use core::panic::AssertUnwindSafe;
use core::sync::atomic::{AtomicBool, Ordering};
use core::time::Duration;
use std::panic::catch_unwind;
use std::thread::ThreadId;

use parking_lot::{Condvar, Mutex, MutexGuard};
use rocklet_core::{Broker, Millis, Reply, Request, Storage};

use crate::clock::Clock;
use crate::host::{Host, HostFail};

/// What a [`Shared`] call fails with: the binding's error type, built from the host's
/// failures and from the two this layer adds.
pub trait SharedFail<S: Storage>: From<HostFail<S>> + core::fmt::Debug {
    /// The broker stopped taking requests earlier (a driver failure or a caught panic).
    fn broken(why: String) -> Self;
    /// A panic was caught now (the text is its message); the broker is broken from now on.
    fn panic(why: String) -> Self;
    /// The sync that had to make this reply durable failed.
    fn failed(reason: String) -> Self;
}

/// Everything behind the mutex.
struct State<S: Storage, C: Clock> {
    host: Host<S, C>,
    /// A group-commit leader is gathering writers before its sync.
    syncing: bool,
    /// When the driver next wakes by itself (0 while it is awake).
    driver_wake: Millis,
    /// Set after a storage failure in the driver or a caught panic: the broker is unusable.
    /// (A failed sync is the core's own state: it refuses every later call itself.)
    broken: Option<String>,
}

/// A host shared by threads: one mutex, a condition variable that wakes the driver and one
/// that wakes waiters (group-commit followers, subscribers).
pub struct Shared<S: Storage, C: Clock> {
    state: Mutex<State<S, C>>,
    driver_cv: Condvar,
    event_cv: Condvar,
    manual: bool,
    shutdown: AtomicBool,
    driver_thread: Mutex<Option<ThreadId>>,
}

impl<S: Storage, C: Clock> core::fmt::Debug for Shared<S, C> {
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

impl<S: Storage, C: Clock> Shared<S, C> {
    /// Shares `host`; `manual` says its clock moves only when told (no driver thread).
    pub fn new(host: Host<S, C>, manual: bool) -> Self {
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
            driver_thread: Mutex::new(None),
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
        f: impl FnOnce(&mut Host<S, C>) -> Result<T, F>,
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
        f: impl FnOnce(&mut Host<S, C>) -> Result<T, F>,
    ) -> Result<T, F> {
        let mut st = self.state.lock();
        self.guarded(&mut st, f)
    }

    /// Reads the core under the mutex.
    pub fn read<T, F: SharedFail<S>>(&self, f: impl FnOnce(&Broker<S>) -> T) -> Result<T, F> {
        self.with(|h| Ok(f(h.core()?)))
    }

    /// Looks at the host under the mutex, even when it is broken or closed.
    pub fn peek<T>(&self, f: impl FnOnce(&mut Host<S, C>) -> T) -> T {
        f(&mut self.state.lock().host)
    }

    /// Whether this thread is the driver's (which must not join itself).
    pub fn is_driver_thread(&self) -> bool {
        *self.driver_thread.lock() == Some(std::thread::current().id())
    }

    /// Names the driver thread.
    pub fn set_driver_thread(&self, id: ThreadId) {
        *self.driver_thread.lock() = Some(id);
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
    /// and calls `answer` when checks wait (it takes them with [`Host::take_checks`] through
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
