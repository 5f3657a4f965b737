//! [`Engine`]: one core broker, its clock, and the outputs kept until the binding takes them;
//! [`Drive`]: advance and run-until-idle; [`Checkers`]: who answers a group's checks.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use rocklet_core::{
    Broker, CheckRequest, Config, Error, Millis, Output, Reply, Request, Resolution, Storage,
    TraceEvent, TxnId,
};

use crate::clock::Clock;
use crate::Fail;

/// What a [`Engine`] call fails with.
pub type EngineFail<S> = Fail<Error<<S as Storage>::Error>>;

const CLOSED: &str = "the broker is closed";

/// One core broker driven by a clock. Every call drains `poll_output`: replies of
/// [`Engine::submit`]ted requests wait for [`Engine::take_reply`], checks for
/// [`Engine::take_checks`] (or a [`Drive`]), availability notices for
/// [`Engine::take_available`], trace events (when `trace` is on) for [`Engine::take_trace`].
#[derive(Debug)]
pub struct Engine<S: Storage, C: Clock> {
    core: Option<Broker<S>>,
    closed_why: &'static str,
    clock: C,
    /// Sync after every call: storage durable once written (memory), so that under sync
    /// flush replies and messages are released at once.
    eager_sync: bool,
    keep_trace: bool,
    checks: VecDeque<(CheckRequest, Millis)>,
    available: Vec<(String, u32)>,
    trace: Vec<TraceEvent>,
    replies: BTreeMap<u64, Result<Reply, String>>,
    /// Keep every output in order for [`Engine::take_outputs`] instead of sorting them.
    raw: Option<Vec<Output>>,
    generation: u64,
}

impl<S: Storage, C: Clock> Engine<S, C> {
    /// Opens (recovers) the broker at the clock's time; `repair` keeps every valid record of
    /// a damaged log and quarantines the rest. A manual clock moves up to the newest time
    /// recovery found, as the core's own time does.
    pub fn open(cfg: Config, storage: S, clock: C, repair: bool) -> Result<Self, Error<S::Error>> {
        let start = clock.now();
        let keep_trace = cfg.trace;
        let core = if repair {
            Broker::open_repairing(cfg, storage, start)?
        } else {
            Broker::open(cfg, storage, start)?
        };
        clock.move_to(core.now());
        Ok(Engine {
            core: Some(core),
            closed_why: CLOSED,
            clock,
            eager_sync: false,
            keep_trace,
            checks: VecDeque::new(),
            available: Vec::new(),
            trace: Vec::new(),
            replies: BTreeMap::new(),
            raw: None,
            generation: 0,
        })
    }

    /// Syncs after every call (for storage that is durable as soon as it is written).
    #[must_use]
    pub fn eager_sync(mut self, on: bool) -> Self {
        self.eager_sync = on;
        self
    }

    /// Keeps every output in order for [`Engine::take_outputs`] (a host that shows the flow
    /// itself, as the wasm playground does); checks then go there too, not to a [`Drive`].
    #[must_use]
    pub fn raw_outputs(mut self) -> Self {
        self.raw = Some(Vec::new());
        self
    }

    /// Every output since the last take, in order (with [`Engine::raw_outputs`]).
    pub fn take_outputs(&mut self) -> Vec<Output> {
        self.raw.as_mut().map(core::mem::take).unwrap_or_default()
    }

    /// The broker, unless closed.
    pub fn core(&self) -> Result<&Broker<S>, EngineFail<S>> {
        self.core.as_ref().ok_or(Fail::Closed(self.closed_why))
    }

    /// The broker, unless closed. Whatever is done with it directly, call [`Engine::drain`]
    /// after.
    pub fn core_mut(&mut self) -> Result<&mut Broker<S>, EngineFail<S>> {
        let why = self.closed_why;
        self.core.as_mut().ok_or(Fail::Closed(why))
    }

    /// Whether the broker was closed.
    pub fn is_closed(&self) -> bool {
        self.core.is_none()
    }

    /// Why the broker stopped taking requests (a sync failed), if it did.
    pub fn failed(&self) -> Option<&str> {
        self.core.as_ref().and_then(|c| c.failed())
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The clock's reading.
    pub fn now(&self) -> Millis {
        self.clock.now()
    }

    /// Bumped when something a waiter (a subscriber) may be waiting for happened: a message
    /// became available, a check or a failure came out, the broker closed. Not by a reply,
    /// so a subscriber's own empty receive does not wake it again at once.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Drops the broker without syncing (after a caught panic its state is unknown);
    /// every later call fails with `why`.
    pub fn abandon(&mut self, why: &'static str) {
        self.core = None;
        self.closed_why = why;
        self.checks.clear();
        self.generation = self.generation.wrapping_add(1);
    }

    /// Syncs and drops the broker (releasing its storage). Idempotent. A failed broker has
    /// nothing it could sync: it just closes.
    pub fn close(&mut self) -> Result<(), EngineFail<S>> {
        let Some(mut core) = self.core.take() else {
            return Ok(());
        };
        self.closed_why = CLOSED;
        self.checks.clear();
        self.generation = self.generation.wrapping_add(1);
        if core.failed().is_none() {
            core.sync().map_err(Fail::Host)?;
        }
        Ok(())
    }

    /// Drops the broker and opens a new one over the same storage, as a restart would.
    pub fn reopen(&mut self) -> Result<(), EngineFail<S>>
    where
        S: Clone,
    {
        let core = self.core()?;
        let (cfg, storage) = (core.config().clone(), core.storage().clone());
        let core = Broker::open(cfg, storage, self.clock.now()).map_err(Fail::Host)?;
        self.clock.move_to(core.now());
        self.core = Some(core);
        self.checks.clear();
        Ok(())
    }

    /// A core `Err`, said as the failure it is when it failed the broker: the call that hit
    /// it fails as every later call will.
    fn host_err(&self, e: Error<S::Error>) -> EngineFail<S> {
        match (e, self.failed()) {
            (Error::Storage(_), Some(reason)) => Fail::Host(Error::Failed {
                reason: reason.into(),
            }),
            (e, _) => Fail::Host(e),
        }
    }

    /// Takes everything the core has for the host.
    pub fn drain(&mut self) {
        let Some(core) = self.core.as_mut() else {
            return;
        };
        let mut changed = false;
        while let Some(out) = core.poll_output() {
            if let Some(raw) = self.raw.as_mut() {
                raw.push(out);
                changed = true;
                continue;
            }
            match out {
                Output::Reply { id, reply } => {
                    self.replies.insert(id, Ok(reply));
                }
                Output::Failed { id, reason } => {
                    self.replies.insert(id, Err(reason));
                    changed = true;
                }
                Output::Check(c) => {
                    self.checks.push_back((c, core.now()));
                    changed = true;
                }
                Output::Available { topic, queue_id } => {
                    self.available.push((topic, queue_id));
                    changed = true;
                }
                Output::Trace(t) => {
                    if self.keep_trace {
                        self.trace.push(t);
                    }
                }
            }
        }
        if changed {
            self.generation = self.generation.wrapping_add(1);
        }
    }

    /// After a call: under eager sync, syncs what it wrote (a failed sync is the call's
    /// error, and the core's failed state from then on); drains; says the error as it is.
    fn after<T>(&mut self, r: Result<T, Error<S::Error>>) -> Result<T, EngineFail<S>> {
        let synced = match self.core.as_mut() {
            Some(core) if self.eager_sync && r.is_ok() && core.needs_sync() => core.sync(),
            _ => Ok(()),
        };
        self.drain();
        let v = r.map_err(|e| self.host_err(e))?;
        synced.map_err(|e| self.host_err(e))?;
        Ok(v)
    }

    /// Runs one request to its reply at the clock's time; a client's mistake is
    /// [`Fail::Client`].
    pub fn execute(&mut self, req: Request) -> Result<Reply, EngineFail<S>> {
        let now = self.clock.now();
        let r = self.core_mut()?.execute(now, req);
        match self.after(r)? {
            Reply::Error(e) => Err(Fail::Client(e)),
            r => Ok(r),
        }
    }

    /// Hands a request to the core; its reply comes out by [`Engine::take_reply`] once the core
    /// releases it (under sync flush: after a [`Engine::sync`]).
    pub fn submit(&mut self, req: Request) -> Result<u64, EngineFail<S>> {
        let now = self.clock.now();
        let core = self.core_mut()?;
        let id = core.next_request_id();
        let r = core.handle(now, id, req);
        self.after(r).map(|()| id)
    }

    /// The reply of a submitted request, once released: `Err` is the reason the sync it
    /// waited for failed.
    pub fn take_reply(&mut self, id: u64) -> Option<Result<Reply, String>> {
        self.replies.remove(&id)
    }

    /// Makes everything written durable.
    pub fn sync(&mut self) -> Result<(), EngineFail<S>> {
        let r = self.core_mut()?.sync();
        self.after(r)
    }

    /// A test hook: tells the core a sync failed (what a host that syncs off its thread
    /// reports).
    pub fn sync_failed(&mut self, reason: &str) -> Result<(), EngineFail<S>> {
        self.core_mut()?.sync_failed(reason);
        self.after(Ok(()))
    }

    /// Whether a producer of `group` can answer checks; checks of an offline group wait
    /// without using attempts.
    pub fn set_producer_online(&mut self, group: &str, online: bool) -> Result<(), EngineFail<S>> {
        let now = self.clock.now();
        self.core_mut()?.set_producer_online(now, group, online);
        self.after(Ok(()))
    }

    /// Creates a topic with `queues` queues (or grows it to that many); a bad name or count
    /// is the inner `Err`.
    pub fn create_topic(
        &mut self,
        name: &str,
        queues: u32,
    ) -> Result<Result<(), rocklet_core::ClientError>, EngineFail<S>> {
        let r = self.core_mut()?.create_topic(name, queues);
        self.after(r)
    }

    /// Declares a consumer group (RocketMQ's subscription group config), durably: `fifo`
    /// makes its receives orderly (a queue's messages in order, one batch of a queue in
    /// flight at a time, redelivery in place); declaring it again changes that. A bad name
    /// is the inner `Err`.
    pub fn declare_group(
        &mut self,
        name: &str,
        fifo: bool,
    ) -> Result<Result<(), rocklet_core::ClientError>, EngineFail<S>> {
        let r = self.core_mut()?.declare_group(name, fifo);
        self.after(r)
    }

    /// Whether `group` was declared FIFO.
    pub fn group_is_fifo(&self, group: &str) -> bool {
        self.core.as_ref().is_some_and(|c| c.group_is_fifo(group))
    }

    /// The producer group of a pending transaction.
    pub fn transaction_group(&mut self, txn: TxnId) -> Result<Option<String>, EngineFail<S>> {
        let r = self.core_mut()?.transaction_group(txn);
        r.map_err(|e| self.host_err(e))
    }

    /// When the next timer is due (a check, a delayed delivery, a redelivery, a flush).
    pub fn next_due(&self) -> Option<Millis> {
        self.core.as_ref().and_then(Broker::poll_timeout)
    }

    /// Manual clock: fires the next timer due at or before `target` (any, when `None`) at
    /// its own time and answers `true`; when none is, moves the clock to `target` and
    /// answers `false`.
    pub fn step(&mut self, target: Option<Millis>) -> Result<bool, EngineFail<S>> {
        if !self.clock.is_manual() {
            return Err(Fail::WrongClock(
                "moving the clock needs a broker with the manual clock",
            ));
        }
        not_before(target, self.clock.now())?;
        let due = self.core()?.poll_timeout();
        let fired = match (due, target) {
            (Some(d), Some(t)) if d <= t => Some(d),
            (Some(d), None) => Some(d),
            _ => None,
        };
        if let Some(to) = fired.or(target) {
            self.clock.move_to(to);
            let now = self.clock.now();
            let r = self.core_mut()?.handle_timeout(now);
            self.after(r)?;
        }
        Ok(fired.is_some())
    }

    /// Moves a manual clock to `t` and does everything due by then at `t` (the wasm
    /// playground's jump; [`Drive`] fires each timer at its own time instead).
    pub fn jump_to(&mut self, t: Millis) -> Result<(), EngineFail<S>> {
        if !self.clock.move_to(t) {
            return Err(Fail::WrongClock(
                "jumping needs a broker with the manual clock",
            ));
        }
        let now = self.clock.now();
        let r = self.core_mut()?.handle_timeout(now);
        self.after(r)
    }

    /// Engine clock: does everything due by now (the host calls it when [`Engine::next_due`]
    /// comes).
    pub fn fire_due(&mut self) -> Result<(), EngineFail<S>> {
        if self.clock.is_manual() {
            return Err(Fail::WrongClock(
                "firing by the system clock needs a broker with the system clock",
            ));
        }
        let now = self.clock.now();
        let core = self.core_mut()?;
        let r = if core.poll_timeout().is_some_and(|t| t <= now) {
            core.handle_timeout(now)
        } else {
            Ok(())
        };
        self.after(r)
    }

    /// Feeds a checker's answer back. The producer may have resolved the transaction
    /// meanwhile: a client error here changes nothing and is not one.
    pub fn answer(
        &mut self,
        check: &CheckRequest,
        answer: Resolution,
    ) -> Result<(), EngineFail<S>> {
        let req = Request::EndTransaction {
            txn: check.txn,
            resolution: answer,
            group: Some(check.group.clone()),
            from_check: true,
        };
        match self.execute(req) {
            Ok(_) | Err(Fail::Client(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether checks wait to be taken.
    pub fn has_checks(&self) -> bool {
        !self.checks.is_empty()
    }

    /// The checks asked for since the last take, in order, each with the time it was asked.
    pub fn take_checks(&mut self) -> Vec<(CheckRequest, Millis)> {
        self.checks.drain(..).collect()
    }

    /// Queues that got a visible message since the last take (with `notify_available`).
    pub fn take_available(&mut self) -> Vec<(String, u32)> {
        core::mem::take(&mut self.available)
    }

    /// Trace events (with `trace`) since the last take.
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        core::mem::take(&mut self.trace)
    }
}

/// Refuses a clock target before `now`.
fn not_before<H>(target: Option<Millis>, now: Millis) -> Result<(), Fail<H>> {
    match target {
        Some(t) if t < now => Err(Fail::Argument(format!(
            "target {t} is before the clock ({now})"
        ))),
        _ => Ok(()),
    }
}

/// Advance / run-until-idle on a manual clock: steps timer by timer and hands out, between
/// steps, the checks each step produced (answer them with [`Engine::answer`], then call
/// [`Drive::next`] again). An empty batch means done: the clock is at the target (or, for
/// [`Drive::until_idle`], no timer is left).
#[derive(Debug, Clone, Copy)]
pub struct Drive {
    target: Option<Millis>,
    done: bool,
}

impl Drive {
    /// Up to time `t`.
    pub fn to(t: Millis) -> Self {
        Drive {
            target: Some(t),
            done: false,
        }
    }

    /// `ms` past the host's clock.
    pub fn by<S: Storage, C: Clock>(host: &Engine<S, C>, ms: Millis) -> Self {
        Self::to(host.now().saturating_add(ms))
    }

    /// Until the core has no timer left.
    pub fn until_idle() -> Self {
        Drive {
            target: None,
            done: false,
        }
    }

    /// The next checks to answer; empty when the drive is over.
    pub fn next<S: Storage, C: Clock>(
        &mut self,
        host: &mut Engine<S, C>,
    ) -> Result<Vec<(CheckRequest, Millis)>, EngineFail<S>> {
        loop {
            let checks = host.take_checks();
            if !checks.is_empty() || self.done {
                return Ok(checks);
            }
            if !host.step(self.target)? {
                self.done = true;
            }
        }
    }

    /// The whole drive, with a checker that answers at once (`None`: leave it unanswered,
    /// the transaction stays pending).
    pub fn run<S: Storage, C: Clock>(
        mut self,
        host: &mut Engine<S, C>,
        mut checker: impl FnMut(&CheckRequest) -> Option<Resolution>,
    ) -> Result<(), EngineFail<S>> {
        loop {
            let checks = self.next(host)?;
            if checks.is_empty() {
                return Ok(());
            }
            for (c, _) in checks {
                if let Some(r) = checker(&c) {
                    host.answer(&c, r)?;
                }
            }
        }
    }
}

/// A [`Drive`] the host's language runs a step at a time, answering each step's checks in
/// between (Node: `driveStart`, then `driveNext` until it answers no checks).
#[derive(Debug, Default)]
pub struct Driving(Option<Drive>);

impl Driving {
    /// Starts a drive to `target` (`None`: until idle), in place of any under way; a target
    /// before the clock is refused as [`Engine::step`] refuses it.
    pub fn start<S: Storage, C: Clock>(
        &mut self,
        host: &Engine<S, C>,
        target: Option<Millis>,
    ) -> Result<(), EngineFail<S>> {
        not_before(target, host.now())?;
        self.0 = Some(target.map_or_else(Drive::until_idle, Drive::to));
        Ok(())
    }

    /// The checks of the drive's next step; none: the drive is over (or none was started).
    pub fn next<S: Storage, C: Clock>(
        &mut self,
        host: &mut Engine<S, C>,
    ) -> Result<Vec<(CheckRequest, Millis)>, EngineFail<S>> {
        let Some(mut d) = self.0.take() else {
            return Ok(Vec::new());
        };
        let checks = d.next(host)?;
        self.0 = (!checks.is_empty()).then_some(d);
        Ok(checks)
    }

    /// Drops the drive under way (closing).
    pub fn stop(&mut self) {
        self.0 = None;
    }
}

/// The checkers of producer groups (`F`: the language's callable). Registering one brings
/// the group online (its pending transactions get checked); removing it takes the group
/// offline (its checks wait without using attempts). A check of a group without a checker
/// is left unanswered: the transaction stays pending.
#[derive(Debug)]
pub struct Checkers<F> {
    by_group: BTreeMap<String, F>,
}

impl<F> Default for Checkers<F> {
    fn default() -> Self {
        Checkers {
            by_group: BTreeMap::new(),
        }
    }
}

impl<F> Checkers<F> {
    /// Sets (`Some`) or removes (`None`) the group's checker, telling the core whether the
    /// group is online; answers the checker it replaces (to drop where the host allows).
    pub fn set<S: Storage, C: Clock>(
        &mut self,
        host: &mut Engine<S, C>,
        group: &str,
        checker: Option<F>,
    ) -> Result<Option<F>, EngineFail<S>> {
        host.set_producer_online(group, checker.is_some())?;
        Ok(self.set_local(group, checker))
    }

    /// Only the registry (for a host that tells the core itself, under its own lock).
    pub fn set_local(&mut self, group: &str, checker: Option<F>) -> Option<F> {
        match checker {
            Some(f) => self.by_group.insert(group.into(), f),
            None => self.by_group.remove(group),
        }
    }

    /// The checker of the check's group.
    pub fn get(&self, group: &str) -> Option<&F> {
        self.by_group.get(group)
    }

    /// Every checker, removed (closing).
    pub fn clear(&mut self) -> Vec<F> {
        core::mem::take(&mut self.by_group).into_values().collect()
    }
}
