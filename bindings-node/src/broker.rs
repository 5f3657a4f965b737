//! `JsBroker`, exported to JS as the native `Broker`: one core broker, the host clock, and
//! the outputs the core hands out (checks, availability notices, trace events) kept until
//! the JS side takes them.
//!
//! Every request goes through `Broker::execute` (the binding is a synchronous host), then
//! `poll_output` is drained. Nothing here decides anything about messages: checks go to the
//! JS wrapper, which routes them to the group's checker and feeds the answer back through
//! `endTransaction(txn, answer, { fromCheck: true })`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{SystemTime, UNIX_EPOCH};

use napi::bindgen_prelude::*;
use napi::Env;
use napi_derive::napi;
use rocklet_core::{AnyStorage, Broker, CheckRequest, Millis, Output, Reply, Request, TraceEvent};

use crate::convert::{self, ClockKind, Opts};
use crate::error::{arg, Fail, Res};

type Core = Broker<AnyStorage>;

#[napi(js_name = "Broker")]
pub struct JsBroker {
    /// `None` once closed (or after a caught panic, which leaves the state unknown).
    core: Option<Core>,
    closed_why: &'static str,
    clock: ClockKind,
    /// The manual clock's reading.
    manual_now: Millis,
    trace_on: bool,
    checks: Vec<(CheckRequest, Millis)>,
    available: Vec<convert::JsAvailable>,
    trace: Vec<TraceEvent>,
}

impl std::fmt::Debug for JsBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsBroker")
            .field("core", &self.core)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

fn system_now() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn unexpected(r: &Reply) -> Fail {
    Fail::Internal(format!("unexpected reply {r:?}"))
}

impl JsBroker {
    /// Runs `f`, turning a `Fail` into the JS error and a panic into an `INTERNAL` error
    /// (the broker is closed then: its state is unknown).
    fn guard<T>(&mut self, env: &Env, f: impl FnOnce(&mut Self) -> Res<T>) -> napi::Result<T> {
        match catch_unwind(AssertUnwindSafe(|| f(self))) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                // The storage error that failed the broker is said as the failure it is: the
                // call that hit it throws what every later call will.
                let failed = self.core.as_ref().and_then(|c| c.failed());
                let e = match (e, failed) {
                    (Fail::Storage(_), Some(reason)) => Fail::Failed(reason.to_owned()),
                    (e, _) => e,
                };
                Err(e.into_js(env))
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                self.core = None;
                self.closed_why = "the broker was closed after an internal error (a caught panic)";
                Err(Fail::Internal(format!("panic: {msg}")).into_js(env))
            }
        }
    }

    fn core(&mut self) -> Res<&mut Core> {
        let why = self.closed_why;
        self.core.as_mut().ok_or(Fail::Closed(why))
    }

    /// The host clock's reading.
    fn clock_now(&self) -> Millis {
        match self.clock {
            ClockKind::Manual => self.manual_now,
            ClockKind::System => system_now(),
        }
    }

    /// Takes everything the core has for the host.
    fn drain(&mut self) {
        let Some(core) = self.core.as_mut() else {
            return;
        };
        while let Some(out) = core.poll_output() {
            match out {
                Output::Check(c) => self.checks.push((c, core.now())),
                Output::Available { topic, queue_id } => self
                    .available
                    .push(convert::JsAvailable { topic, queue_id }),
                Output::Trace(t) => {
                    if self.trace_on {
                        self.trace.push(t);
                    }
                }
                // `execute` answers directly (a failed sync as its `Err`); no request goes
                // through `handle`.
                Output::Reply { .. } | Output::Failed { .. } => {}
            }
        }
    }

    /// Runs one request to its reply; a client error becomes `Fail::Client`.
    fn exec(&mut self, req: Request) -> Res<Reply> {
        let now = self.clock_now();
        let result = self.core()?.execute(now, req);
        self.drain();
        match result? {
            Reply::Error(e) => Err(Fail::Client(e)),
            r => Ok(r),
        }
    }

    fn send_one(&mut self, req: Request) -> Res<convert::JsSendResult> {
        match self.exec(req)? {
            Reply::Sent(mut v) if v.len() == 1 => Ok(convert::send_result(v.remove(0))),
            r => Err(unexpected(&r)),
        }
    }

    fn end(
        &mut self,
        txn: Unknown<'_>,
        resolution: rocklet_core::Resolution,
        opts: Option<Unknown<'_>>,
        from_check_ok: bool,
    ) -> Res<convert::JsEnded> {
        let txn = convert::txn_id("txn", txn)?;
        let allowed: &[&str] = if from_check_ok {
            &["group", "fromCheck"]
        } else {
            &["group"]
        };
        let o = Opts::new("options", opts, allowed)?;
        // Without a group, the transaction's own: the application owns the broker.
        let group = match o.string("group")? {
            Some(g) => Some(g),
            None => self.core()?.transaction_group(txn)?,
        };
        let from_check = o.bool("fromCheck")?.unwrap_or(false);
        match self.exec(Request::EndTransaction {
            txn,
            resolution,
            group,
            from_check,
        })? {
            Reply::Ended {
                txn,
                resolution,
                duplicate,
            } => Ok(convert::JsEnded {
                txn: txn.to_string(),
                resolution: resolution.as_str().into(),
                duplicate,
            }),
            r => Err(unexpected(&r)),
        }
    }

    /// Fires the timers due by `now` (the core makes what they wrote durable as its flush
    /// mode says).
    fn timers(&mut self, now: Millis) -> Res<()> {
        self.core()?.handle_timeout(now)?;
        Ok(())
    }

    fn manual(&self, what: &'static str) -> Res<()> {
        if self.clock != ClockKind::Manual {
            return Err(Fail::WrongClock(what));
        }
        Ok(())
    }
}

fn str_arg(what: &str, v: Unknown<'_>) -> Res<String> {
    convert::string(what, v)
}

fn to_limit(v: Option<Unknown<'_>>) -> Res<usize> {
    match convert::present(v)? {
        None => Ok(usize::MAX),
        Some(v) => Ok(usize::try_from(convert::uint("limit", v)?).unwrap_or(usize::MAX)),
    }
}

#[napi]
impl JsBroker {
    /// `new Broker({ path?, clock?: 'system' | 'manual', now?, repair?, ...config })`. A log
    /// with damage other than a torn tail is refused (`CorruptedError`, nothing changed);
    /// `repair: true` opens it, moving each damaged range to `path/quarantine/`.
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<Unknown<'_>>) -> napi::Result<Self> {
        let open = || -> Res<Self> {
            let o = convert::broker_options(options)?;
            let storage = AnyStorage::open(o.path.as_deref()).map_err(Fail::Storage)?;
            let start = match o.clock {
                ClockKind::Manual => o.now.unwrap_or(0),
                ClockKind::System => system_now(),
            };
            let trace_on = o.config.trace;
            let core = if o.repair {
                Broker::open_repairing(o.config, storage, start)?
            } else {
                Broker::open(o.config, storage, start)?
            };
            // Recovery moves the broker's time up to the newest record: so does the clock.
            let manual_now = core.now().max(start);
            Ok(JsBroker {
                core: Some(core),
                closed_why: "the broker is closed",
                clock: o.clock,
                manual_now,
                trace_on,
                checks: Vec::new(),
                available: Vec::new(),
                trace: Vec::new(),
            })
        };
        match catch_unwind(AssertUnwindSafe(open)) {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(e)) => Err(e.into_js(&env)),
            Err(_) => Err(Fail::Internal("panic while opening the broker".into()).into_js(&env)),
        }
    }

    // ---- producer ---------------------------------------------------------------------

    /// Sends one message.
    #[napi]
    pub fn send(
        &mut self,
        env: Env,
        topic: Unknown<'_>,
        body: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<convert::JsSendResult> {
        self.guard(&env, |b| {
            let m = convert::new_message(str_arg("topic", topic)?, body, options)?;
            b.send_one(Request::Send { messages: vec![m] })
        })
    }

    /// Sends a batch: one topic, stored together with consecutive queue offsets.
    #[napi]
    pub fn send_batch(
        &mut self,
        env: Env,
        topic: Unknown<'_>,
        messages: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<Vec<convert::JsSendResult>> {
        self.guard(&env, |b| {
            let topic = str_arg("topic", topic)?;
            let o = Opts::new("options", options, &["queueId"])?;
            let queue_id = o.u32("queueId")?;
            if !messages.is_array()? {
                return Err(arg("messages must be an array"));
            }
            let arr = Array::from_unknown(messages)?;
            let mut batch = Vec::with_capacity(arr.len() as usize);
            for i in 0..arr.len() {
                let v = arr
                    .get::<Unknown<'_>>(i)?
                    .ok_or_else(|| arg(format!("messages[{i}] is missing")))?;
                let (mut m, _) =
                    convert::message_object(&format!("messages[{i}]"), v, Some(&topic), false)?;
                if queue_id.is_some() {
                    m.queue_id = queue_id;
                }
                batch.push(m);
            }
            match b.exec(Request::Send { messages: batch })? {
                Reply::Sent(v) => Ok(v.into_iter().map(convert::send_result).collect()),
                r => Err(unexpected(&r)),
            }
        })
    }

    /// Stores a half message of a transaction of producer group `group`.
    #[napi]
    pub fn prepare(
        &mut self,
        env: Env,
        group: Unknown<'_>,
        message: Unknown<'_>,
    ) -> napi::Result<convert::JsSendResult> {
        self.guard(&env, |b| {
            let group = str_arg("group", group)?;
            let (message, check_immunity_ms) =
                convert::message_object("message", message, None, true)?;
            b.send_one(Request::Prepare {
                group,
                message,
                check_immunity_ms,
            })
        })
    }

    /// Ends a transaction: `resolution` is 'commit', 'rollback' or 'unknown'.
    #[napi]
    pub fn end_transaction(
        &mut self,
        env: Env,
        txn: Unknown<'_>,
        resolution: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<convert::JsEnded> {
        self.guard(&env, |b| {
            let r = convert::resolution("resolution", resolution)?;
            b.end(txn, r, options, true)
        })
    }

    /// Commits a transaction.
    #[napi]
    pub fn commit(
        &mut self,
        env: Env,
        txn: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<convert::JsEnded> {
        self.guard(&env, |b| {
            b.end(txn, rocklet_core::Resolution::Commit, options, false)
        })
    }

    /// Rolls a transaction back.
    #[napi]
    pub fn rollback(
        &mut self,
        env: Env,
        txn: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<convert::JsEnded> {
        self.guard(&env, |b| {
            b.end(txn, rocklet_core::Resolution::Rollback, options, false)
        })
    }

    /// Whether a producer of `group` can answer checks (the wrapper's `setChecker` says so).
    #[napi]
    pub fn set_producer_online(
        &mut self,
        env: Env,
        group: Unknown<'_>,
        online: bool,
    ) -> napi::Result<()> {
        self.guard(&env, |b| {
            let group = str_arg("group", group)?;
            let now = b.clock_now();
            b.core()?.set_producer_online(now, &group, online);
            b.drain();
            Ok(())
        })
    }

    /// Creates a topic with `queues` queues (or grows it to that many).
    #[napi]
    pub fn create_topic(
        &mut self,
        env: Env,
        name: Unknown<'_>,
        queues: Unknown<'_>,
    ) -> napi::Result<()> {
        self.guard(&env, |b| {
            let name = str_arg("name", name)?;
            let queues = convert::u32_of("queues", queues)?;
            b.core()?.create_topic(&name, queues)?.map_err(Fail::Client)
        })
    }

    // ---- consumer -----------------------------------------------------------------------

    /// Reads a queue from the group's committed offset (or `offset`).
    #[napi]
    pub fn pull(
        &mut self,
        env: Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
        queue_id: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<convert::JsPulled> {
        self.guard(&env, |b| {
            let group = str_arg("group", group)?;
            let topic = str_arg("topic", topic)?;
            let queue_id = convert::u32_of("queueId", queue_id)?;
            let o = Opts::new("options", options, &["offset", "max", "tags", "autoCommit"])?;
            let req = Request::Pull {
                group,
                topic,
                queue_id,
                offset: o.uint("offset")?,
                // Absent: as many as the core hands out in one call.
                max: o.u32("max")?.unwrap_or(u32::MAX),
                filter: convert::tags(&o)?,
                auto_commit: o.bool("autoCommit")?.unwrap_or(true),
            };
            match b.exec(req)? {
                Reply::Pulled {
                    messages,
                    next_offset,
                    max_offset,
                } => Ok(convert::JsPulled {
                    messages: messages.into_iter().map(convert::message).collect(),
                    next_offset: next_offset as f64,
                    max_offset: max_offset as f64,
                }),
                r => Err(unexpected(&r)),
            }
        })
    }

    /// Commits a group's offset in a queue.
    #[napi]
    pub fn commit_offset(
        &mut self,
        env: Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
        queue_id: Unknown<'_>,
        offset: Unknown<'_>,
    ) -> napi::Result<()> {
        self.guard(&env, |b| {
            let req = Request::CommitOffset {
                group: str_arg("group", group)?,
                topic: str_arg("topic", topic)?,
                queue_id: convert::u32_of("queueId", queue_id)?,
                offset: convert::uint("offset", offset)?,
            };
            match b.exec(req)? {
                Reply::OffsetCommitted => Ok(()),
                r => Err(unexpected(&r)),
            }
        })
    }

    /// Receives messages, invisible to the group for `invisibleMs` unless acked.
    #[napi]
    pub fn receive(
        &mut self,
        env: Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
        options: Unknown<'_>,
    ) -> napi::Result<Vec<convert::JsReceived>> {
        self.guard(&env, |b| {
            let group = str_arg("group", group)?;
            let topic = str_arg("topic", topic)?;
            let o = Opts::new(
                "options",
                Some(options),
                &["invisibleMs", "max", "queueId", "tags"],
            )?;
            let invisible_ms = o
                .uint("invisibleMs")?
                .ok_or_else(|| arg("options.invisibleMs is required"))?;
            let req = Request::Receive {
                group,
                topic,
                queue_id: o.u32("queueId")?,
                max: o.u32("max")?.unwrap_or(u32::MAX),
                invisible_ms,
                filter: convert::tags(&o)?,
            };
            match b.exec(req)? {
                Reply::Received(v) => Ok(v.into_iter().map(convert::received).collect()),
                r => Err(unexpected(&r)),
            }
        })
    }

    /// Acknowledges a received message.
    #[napi]
    pub fn ack(&mut self, env: Env, group: Unknown<'_>, handle: Unknown<'_>) -> napi::Result<()> {
        self.guard(&env, |b| {
            let req = Request::Ack {
                group: str_arg("group", group)?,
                handle: convert::handle("handle", handle)?,
            };
            match b.exec(req)? {
                Reply::Acked => Ok(()),
                r => Err(unexpected(&r)),
            }
        })
    }

    /// Changes how long a received message stays invisible; answers the new handle.
    #[napi]
    pub fn change_invisible(
        &mut self,
        env: Env,
        group: Unknown<'_>,
        handle: Unknown<'_>,
        invisible_ms: Unknown<'_>,
    ) -> napi::Result<convert::JsInvisibleChanged> {
        self.guard(&env, |b| {
            let req = Request::ChangeInvisible {
                group: str_arg("group", group)?,
                handle: convert::handle("handle", handle)?,
                invisible_ms: convert::uint("invisibleMs", invisible_ms)?,
            };
            match b.exec(req)? {
                Reply::InvisibleChanged { handle, visible_at } => Ok(convert::JsInvisibleChanged {
                    handle: handle.to_string(),
                    visible_at: visible_at as f64,
                }),
                r => Err(unexpected(&r)),
            }
        })
    }

    /// Gives a received message up: to `%DLQ%<group>` at once.
    #[napi]
    pub fn forward_to_dead_letter(
        &mut self,
        env: Env,
        group: Unknown<'_>,
        handle: Unknown<'_>,
    ) -> napi::Result<()> {
        self.guard(&env, |b| {
            let req = Request::ForwardToDeadLetter {
                group: str_arg("group", group)?,
                handle: convert::handle("handle", handle)?,
            };
            match b.exec(req)? {
                Reply::Forwarded => Ok(()),
                r => Err(unexpected(&r)),
            }
        })
    }

    /// A pulled message the consumer failed: to `%RETRY%<group>` (later) or the DLQ.
    #[napi]
    pub fn send_back(
        &mut self,
        env: Env,
        group: Unknown<'_>,
        offset: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> napi::Result<convert::JsSendResult> {
        self.guard(&env, |b| {
            let o = Opts::new("options", options, &["delayLevel"])?;
            let req = Request::SendBack {
                group: str_arg("group", group)?,
                offset: convert::uint("offset", offset)?,
                delay_level: o.u32("delayLevel")?,
            };
            b.send_one(req)
        })
    }

    // ---- durability and lifetime ----------------------------------------------------------

    /// Makes everything written durable (fsync for a broker with a `path`).
    #[napi]
    pub fn sync(&mut self, env: Env) -> napi::Result<()> {
        self.guard(&env, |b| {
            b.core()?.sync()?;
            b.drain();
            Ok(())
        })
    }

    /// Syncs and closes the broker (releasing its data directory). Idempotent. A failed
    /// broker has nothing it could sync: it just closes.
    #[napi]
    pub fn close(&mut self, env: Env) -> napi::Result<()> {
        self.guard(&env, |b| {
            let Some(mut core) = b.core.take() else {
                return Ok(());
            };
            b.closed_why = "the broker is closed";
            if core.failed().is_none() {
                core.sync()?;
            }
            Ok(())
        })
    }

    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.core.is_none()
    }

    /// Why the broker stopped taking requests (a sync failed), or `null`.
    #[napi(getter)]
    pub fn failed(&self) -> Option<String> {
        self.core
            .as_ref()
            .and_then(|c| c.failed())
            .map(str::to_owned)
    }

    // ---- clock -----------------------------------------------------------------------------

    /// 'system' or 'manual'.
    #[napi(getter)]
    pub fn clock(&self) -> String {
        match self.clock {
            ClockKind::System => "system".into(),
            ClockKind::Manual => "manual".into(),
        }
    }

    /// The host clock's reading, in ms (the manual clock, or the system time).
    #[napi]
    pub fn now(&self) -> f64 {
        self.clock_now() as f64
    }

    /// When something is next due (a check, a delayed delivery, a redelivery), or `null`.
    #[napi]
    pub fn poll_timeout(&mut self, env: Env) -> napi::Result<Option<f64>> {
        self.guard(&env, |b| Ok(b.core()?.poll_timeout().map(|t| t as f64)))
    }

    /// Manual clock: fires the next timer due at or before `target` (any, when `target` is
    /// `null`) at its own time and answers `true`; when none is, moves the clock to `target`
    /// and answers `false`. The wrapper's `advance` calls it until `false`, answering the
    /// checks each step produced before the next.
    #[napi]
    pub fn step_clock(&mut self, env: Env, target: Option<Unknown<'_>>) -> napi::Result<bool> {
        self.guard(&env, |b| {
            b.manual("stepClock needs a broker with clock: 'manual'")?;
            let target = convert::present(target)?
                .map(|t| convert::uint("target", t))
                .transpose()?;
            if let Some(t) = target {
                if t < b.manual_now {
                    return Err(arg(format!(
                        "target {t} is before the clock ({})",
                        b.manual_now
                    )));
                }
            }
            let due = b.core()?.poll_timeout();
            let fired = match (due, target) {
                (Some(d), Some(t)) if d <= t => Some(d),
                (Some(d), None) => Some(d),
                _ => None,
            };
            let to = fired.or(target);
            if let Some(to) = to {
                b.manual_now = b.manual_now.max(to);
                let now = b.manual_now;
                let r = b.timers(now);
                b.drain();
                r?;
            }
            Ok(fired.is_some())
        })
    }

    /// System clock: does everything due by now.
    #[napi]
    pub fn fire_due(&mut self, env: Env) -> napi::Result<()> {
        self.guard(&env, |b| {
            if b.clock != ClockKind::System {
                return Err(Fail::WrongClock(
                    "fireDue is for a broker with clock: 'system'",
                ));
            }
            let r = b.timers(system_now());
            b.drain();
            r
        })
    }

    // ---- outputs ---------------------------------------------------------------------------

    /// Checks the core asked for since the last call, in order.
    #[napi]
    pub fn take_checks(&mut self) -> Vec<convert::JsCheck> {
        self.checks
            .drain(..)
            .map(|(c, at)| convert::check(c, at))
            .collect()
    }

    /// Queues that got a visible message since the last call.
    #[napi]
    pub fn take_available(&mut self) -> Vec<convert::JsAvailable> {
        std::mem::take(&mut self.available)
    }

    /// Trace events (with `trace: true`) since the last call, in order.
    #[napi]
    pub fn take_trace(&mut self) -> Vec<convert::JsTrace> {
        self.trace.drain(..).map(convert::trace).collect()
    }

    // ---- introspection ---------------------------------------------------------------------

    /// Pending transactions in log order (at most `limit`).
    #[napi]
    pub fn pending_transactions(
        &mut self,
        env: Env,
        limit: Option<Unknown<'_>>,
    ) -> napi::Result<Vec<convert::JsPendingTxn>> {
        self.guard(&env, |b| {
            let n = to_limit(limit)?;
            Ok(b.core()?
                .pending_transactions(n)
                .into_iter()
                .map(convert::pending_txn)
                .collect())
        })
    }

    /// Delayed messages not yet delivered, in log order (at most `limit`).
    #[napi]
    pub fn pending_delays(
        &mut self,
        env: Env,
        limit: Option<Unknown<'_>>,
    ) -> napi::Result<Vec<convert::JsPendingDelay>> {
        self.guard(&env, |b| {
            let n = to_limit(limit)?;
            Ok(b.core()?
                .pending_delays(n)
                .into_iter()
                .map(convert::pending_delay)
                .collect())
        })
    }

    /// Topics consumers can read, with their queues' offsets.
    #[napi]
    pub fn topics(&mut self, env: Env) -> napi::Result<Vec<convert::JsTopicInfo>> {
        self.guard(&env, |b| {
            Ok(b.core()?
                .topics()
                .into_iter()
                .map(convert::topic_info)
                .collect())
        })
    }

    /// A queue's consume-queue units.
    #[napi]
    pub fn consume_queue(
        &mut self,
        env: Env,
        topic: Unknown<'_>,
        queue_id: Unknown<'_>,
    ) -> napi::Result<Vec<convert::JsCqUnit>> {
        self.guard(&env, |b| {
            let topic = str_arg("topic", topic)?;
            let q = convert::u32_of("queueId", queue_id)?;
            Ok(b.core()?
                .consume_queue(&topic, q)
                .into_iter()
                .map(convert::cq_unit)
                .collect())
        })
    }

    /// A group's committed offset in a queue, or `null`.
    #[napi]
    pub fn committed_offset(
        &mut self,
        env: Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
        queue_id: Unknown<'_>,
    ) -> napi::Result<Option<f64>> {
        self.guard(&env, |b| {
            let (g, t) = (str_arg("group", group)?, str_arg("topic", topic)?);
            let q = convert::u32_of("queueId", queue_id)?;
            Ok(b.core()?.committed_offset(&g, &t, q).map(|o| o as f64))
        })
    }

    /// Messages a group has received and not acked in a topic.
    #[napi]
    pub fn inflight_count(
        &mut self,
        env: Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
    ) -> napi::Result<u32> {
        self.guard(&env, |b| {
            let (g, t) = (str_arg("group", group)?, str_arg("topic", topic)?);
            Ok(u32::try_from(b.core()?.inflight_count(&g, &t)).unwrap_or(u32::MAX))
        })
    }

    /// Core counters.
    #[napi]
    pub fn stats(&mut self, env: Env) -> napi::Result<std::collections::HashMap<String, f64>> {
        self.guard(&env, |b| Ok(convert::stats(b.core()?.stats())))
    }

    /// Bytes in the log.
    #[napi]
    pub fn log_end(&mut self, env: Env) -> napi::Result<f64> {
        self.guard(&env, |b| Ok(b.core()?.log_end() as f64))
    }

    /// What recovery found when the broker opened.
    #[napi]
    pub fn recovery_report(&mut self, env: Env) -> napi::Result<convert::JsRecoveryReport> {
        self.guard(&env, |b| Ok(convert::recovery(b.core()?.recovery_report())))
    }

    /// The effective configuration (camelCase).
    #[napi]
    pub fn config(&mut self, env: Env) -> napi::Result<serde_json::Value> {
        self.guard(&env, |b| convert::config_out(b.core()?.config()))
    }

    /// Test hook: tells the core a sync failed (`Broker::sync_failed`, what a host that syncs
    /// off its thread reports), to show what a failed broker does. No fsync can be made to
    /// fail from a test.
    #[napi(js_name = "__failSyncForTest")]
    pub fn fail_sync_for_test(&mut self, env: Env, reason: String) -> napi::Result<()> {
        self.guard(&env, |b| {
            b.core()?.sync_failed(&reason);
            b.drain();
            Ok(())
        })
    }

    /// Test hook: panics inside a guarded call, to show that no panic reaches JS.
    #[napi(js_name = "__panicForTest")]
    pub fn panic_for_test(&mut self, env: Env) -> napi::Result<()> {
        self.guard(&env, |_| -> Res<()> {
            panic!("deliberate panic for the test suite")
        })
    }
}
