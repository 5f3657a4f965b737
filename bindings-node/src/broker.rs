//! `JsBroker`, exported to JS as the native `Broker`: a `rocklet_embed::Engine` (one core
//! broker, its clock, the outputs kept until the JS side takes them) and the conversions of
//! its arguments and results.
//!
//! Nothing here decides anything: the drive loop (`driveStart` / `driveNext`), pull across
//! queues, ends without a group, the missing-topic rule are the embedding layer's. Checks go
//! to the JS wrapper, which routes them to the group's checker and feeds the answer back
//! through `endTransaction(txn, answer, { fromCheck: true })`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use napi::bindgen_prelude::*;
use napi::{Env, JsValue};
use napi_derive::napi;
use rocklet_core::Resolution;
use rocklet_embed::{self as embed, view, Clock};

use crate::convert::{self, out, parsed, read};
use crate::error::{arg, JsFail, Res};

type Engine = embed::open::StdEngine;

#[napi(js_name = "Broker")]
#[derive(Debug)]
pub struct JsBroker {
    host: Engine,
    /// The advance / run-until-idle under way (`driveStart` .. `driveNext` answering `[]`).
    drive: embed::Driving,
    /// Open `subscribe` loops by id (the wrapper's async iterators).
    subs: embed::Subscriptions,
}

impl JsBroker {
    /// Runs `f`, turning a `JsFail` into the JS error and a panic into an `INTERNAL` error
    /// (the broker is closed then: its state is unknown).
    fn guard<T>(&mut self, env: &Env, f: impl FnOnce(&mut Self) -> Res<T>) -> napi::Result<T> {
        match catch_unwind(AssertUnwindSafe(|| f(self))) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.into_js(env)),
            Err(p) => {
                let msg = embed::panic_text(&*p);
                self.host
                    .abandon("the broker was closed after an internal error (a caught panic)");
                Err(JsFail::Internal(format!("panic: {msg}")).into_js(env))
            }
        }
    }

    fn end<'e>(
        &mut self,
        env: &'e Env,
        txn: Unknown<'_>,
        resolution: Resolution,
        opts: Option<Unknown<'_>>,
        from_check_ok: bool,
    ) -> Result<Unknown<'e>> {
        self.guard(env, |b| {
            let txn = parsed("txn", txn)?;
            let o: embed::input::EndOptions = read("options", opts)?;
            let (group, from_check) = o.into_parts(from_check_ok).map_err(arg)?;
            let e = embed::end(&mut b.host, txn, resolution, group, from_check)?;
            out(env, view::ended(e.txn, e.resolution, e.duplicate))
        })
    }
}

/// `limit` of an introspection call: absent is no limit.
fn limit(v: Option<Unknown<'_>>) -> Res<usize> {
    Ok(embed::arg::limit(read("limit", v)?))
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
            let path = o.path.as_deref().map(std::path::Path::new);
            let start = o.manual().then(|| o.now.unwrap_or(0));
            Ok(JsBroker {
                host: embed::open::open(path, start, o.config, o.repair)?,
                drive: embed::Driving::default(),
                subs: embed::Subscriptions::default(),
            })
        };
        match catch_unwind(AssertUnwindSafe(open)) {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(e)) => Err(e.into_js(&env)),
            Err(_) => Err(JsFail::Internal("panic while opening the broker".into()).into_js(&env)),
        }
    }

    // ---- producer ---------------------------------------------------------------------

    /// Sends one message.
    #[napi]
    pub fn send(
        &mut self,
        env: &Env,
        topic: Unknown<'_>,
        body: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> Result<convert::JsSendResult> {
        self.guard(env, |b| {
            let m = convert::new_message(read("topic", Some(topic))?, body, options)?;
            Ok(convert::send_result(embed::send_one(&mut b.host, m)?))
        })
    }

    /// Sends a batch: one topic, stored together with consecutive queue offsets.
    #[napi]
    pub fn send_batch(
        &mut self,
        env: &Env,
        topic: Unknown<'_>,
        messages: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> Result<Vec<convert::JsSendResult>> {
        self.guard(env, |b| {
            let topic: String = read("topic", Some(topic))?;
            let o: embed::input::BatchOptions = read("options", options)?;
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
                m.queue_id = o.queue_id.or(m.queue_id);
                batch.push(m);
            }
            let sent = embed::send(&mut b.host, batch)?;
            Ok(sent.into_iter().map(convert::send_result).collect())
        })
    }

    /// Stores a half message of a transaction of producer group `group`.
    #[napi]
    pub fn prepare(
        &mut self,
        env: &Env,
        group: Unknown<'_>,
        message: Unknown<'_>,
    ) -> Result<convert::JsSendResult> {
        self.guard(env, |b| {
            let group = read("group", Some(group))?;
            let (message, immunity) = convert::message_object("message", message, None, true)?;
            let tx = embed::prepare(&mut b.host, group, message, immunity)?;
            Ok(convert::send_result(tx.sent))
        })
    }

    /// Ends a transaction: `resolution` is 'commit', 'rollback' or 'unknown'.
    #[napi]
    pub fn end_transaction<'e>(
        &mut self,
        env: &'e Env,
        txn: Unknown<'_>,
        resolution: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> Result<Unknown<'e>> {
        let r = parsed("resolution", resolution).map_err(|e| e.into_js(env))?;
        self.end(env, txn, r, options, true)
    }

    /// Commits a transaction.
    #[napi]
    pub fn commit<'e>(
        &mut self,
        env: &'e Env,
        txn: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> Result<Unknown<'e>> {
        self.end(env, txn, Resolution::Commit, options, false)
    }

    /// Rolls a transaction back.
    #[napi]
    pub fn rollback<'e>(
        &mut self,
        env: &'e Env,
        txn: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> Result<Unknown<'e>> {
        self.end(env, txn, Resolution::Rollback, options, false)
    }

    /// Whether a producer of `group` can answer checks (the wrapper's `setChecker` says so).
    #[napi]
    pub fn set_producer_online(
        &mut self,
        env: &Env,
        group: Unknown<'_>,
        online: bool,
    ) -> napi::Result<()> {
        self.guard(env, |b| {
            let group: String = read("group", Some(group))?;
            Ok(b.host.set_producer_online(&group, online)?)
        })
    }

    /// Creates a topic with `queues` queues (or grows it to that many).
    #[napi]
    pub fn create_topic(
        &mut self,
        env: &Env,
        name: Unknown<'_>,
        queues: Unknown<'_>,
    ) -> napi::Result<()> {
        self.guard(env, |b| {
            let name: String = read("name", Some(name))?;
            let queues = read("queues", Some(queues))?;
            b.host.create_topic(&name, queues)?.map_err(JsFail::Client)
        })
    }

    /// Declares a consumer group: `fifo` makes its receives orderly (RocketMQ's
    /// consumeMessageOrderly: a queue's messages in order, none of a queue while an earlier
    /// batch of it is in flight for the group, redelivery in place).
    #[napi]
    pub fn declare_group(
        &mut self,
        env: &Env,
        name: Unknown<'_>,
        fifo: Unknown<'_>,
    ) -> napi::Result<()> {
        self.guard(env, |b| {
            let name: String = read("name", Some(name))?;
            let fifo = read("fifo", Some(fifo))?;
            b.host.declare_group(&name, fifo)?.map_err(JsFail::Client)
        })
    }

    // ---- consumer -----------------------------------------------------------------------

    /// Reads from the group's committed offsets (or `offset`, with a queue): the queue
    /// `queueId` names, or every queue of the topic in order. `pull(group, topic, options)`
    /// reads every queue too. A topic that does not exist throws `UNKNOWN_TOPIC`.
    #[napi]
    pub fn pull<'e>(
        &mut self,
        env: &'e Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
        queue_id: Option<Unknown<'_>>,
        options: Option<Unknown<'_>>,
    ) -> Result<Unknown<'e>> {
        self.guard(env, |b| {
            let group = read("group", Some(group))?;
            let topic = read("topic", Some(topic))?;
            // `pull(group, topic, options)`: the third argument is the options.
            let (queue, options) = match queue_id {
                Some(v) if v.get_type()? == ValueType::Object => {
                    if read::<Option<serde::de::IgnoredAny>>("options", options)?.is_some() {
                        return Err(arg("queueId must be a number (options come fourth)"));
                    }
                    (None, Some(v))
                }
                v => (read("queueId", v)?, options),
            };
            let o: embed::input::PullOptions = read("options", options)?;
            let args = o.into_args(group, topic, queue);
            let p = embed::pull(&mut b.host, args)?;
            out(env, view::node_pulled(&p, queue.is_some()))
        })
    }

    /// Commits a group's offset in a queue.
    #[napi]
    pub fn commit_offset(
        &mut self,
        env: &Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
        queue_id: Unknown<'_>,
        offset: Unknown<'_>,
    ) -> napi::Result<()> {
        self.guard(env, |b| {
            let (g, t) = (read("group", Some(group))?, read("topic", Some(topic))?);
            let q = read("queueId", Some(queue_id))?;
            let offset = read("offset", Some(offset))?;
            Ok(embed::commit_offset(&mut b.host, g, t, q, offset)?)
        })
    }

    /// Receives messages, invisible to the group for `invisibleMs` unless acked. A topic
    /// that does not exist throws `UNKNOWN_TOPIC`.
    #[napi]
    pub fn receive(
        &mut self,
        env: &Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
        options: Unknown<'_>,
    ) -> Result<Vec<convert::JsReceived>> {
        self.guard(env, |b| {
            let group = read("group", Some(group))?;
            let topic = read("topic", Some(topic))?;
            let o: embed::input::ReceiveOptions = read("options", Some(options))?;
            let args = o.into_args(group, topic);
            let got = embed::receive(&mut b.host, args)?;
            Ok(got.into_iter().map(convert::received).collect())
        })
    }

    /// Acknowledges a received message.
    #[napi]
    pub fn ack(&mut self, env: &Env, group: Unknown<'_>, handle: Unknown<'_>) -> napi::Result<()> {
        self.guard(env, |b| {
            let (g, h) = (read("group", Some(group))?, parsed("handle", handle)?);
            Ok(embed::ack(&mut b.host, g, h)?)
        })
    }

    /// Changes how long a received message stays invisible; answers the new handle.
    #[napi]
    pub fn change_invisible<'e>(
        &mut self,
        env: &'e Env,
        group: Unknown<'_>,
        handle: Unknown<'_>,
        invisible_ms: Unknown<'_>,
    ) -> Result<Unknown<'e>> {
        self.guard(env, |b| {
            let (g, h) = (read("group", Some(group))?, parsed("handle", handle)?);
            let ms = read("invisibleMs", Some(invisible_ms))?;
            let (handle, visible_at) = embed::change_invisible(&mut b.host, g, h, ms)?;
            out(env, view::invisible_changed(&handle, visible_at))
        })
    }

    /// Gives a received message up: to `%DLQ%<group>` at once.
    #[napi]
    pub fn forward_to_dead_letter(
        &mut self,
        env: &Env,
        group: Unknown<'_>,
        handle: Unknown<'_>,
    ) -> napi::Result<()> {
        self.guard(env, |b| {
            let (g, h) = (read("group", Some(group))?, parsed("handle", handle)?);
            Ok(embed::forward_to_dead_letter(&mut b.host, g, h)?)
        })
    }

    /// A pulled message the consumer failed: to `%RETRY%<group>` (later) or the DLQ.
    #[napi]
    pub fn send_back(
        &mut self,
        env: &Env,
        group: Unknown<'_>,
        offset: Unknown<'_>,
        options: Option<Unknown<'_>>,
    ) -> Result<convert::JsSendResult> {
        self.guard(env, |b| {
            let o: embed::input::SendBackOptions = read("options", options)?;
            let (g, offset) = (read("group", Some(group))?, read("offset", Some(offset))?);
            let r = embed::send_back(&mut b.host, g, offset, o.delay_level)?;
            Ok(convert::send_result(r))
        })
    }

    /// Opens a subscription (the wrapper's `subscribe` loop): the embedding layer's ack rule
    /// (a message is acked when the loop asks for the next one) and missing-topic rule (it
    /// waits for the topic). Answers its id for `subscriptionNext` / `subscriptionStop`.
    #[napi]
    pub fn subscription_open(
        &mut self,
        env: &Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
        options: Unknown<'_>,
    ) -> napi::Result<u32> {
        self.guard(env, |b| {
            let (group, topic) = (read("group", Some(group))?, read("topic", Some(topic))?);
            let o: embed::input::SubscribeOptions = read("options", Some(options))?;
            Ok(b.subs.open(o.into_subscription(group, topic)))
        })
    }

    /// The subscription's next message (acking the one before), or `null` when none is
    /// visible now (the wrapper waits for the topic's next availability notice).
    #[napi]
    pub fn subscription_next(&mut self, env: &Env, id: u32) -> Result<Option<convert::JsReceived>> {
        self.guard(env, |b| {
            Ok(b.subs.next(id, &mut b.host)?.map(convert::received))
        })
    }

    /// Ends a subscription; its current message stays un-acked.
    #[napi]
    pub fn subscription_stop(&mut self, id: u32) {
        self.subs.stop(id);
    }

    // ---- durability and lifetime ----------------------------------------------------------

    /// Makes everything written durable (fsync for a broker with a `path`).
    #[napi]
    pub fn sync(&mut self, env: &Env) -> napi::Result<()> {
        self.guard(env, |b| Ok(b.host.sync()?))
    }

    /// Syncs and closes the broker (releasing its data directory). Idempotent. A failed
    /// broker has nothing it could sync: it just closes.
    #[napi]
    pub fn close(&mut self, env: &Env) -> napi::Result<()> {
        self.guard(env, |b| {
            b.drive.stop();
            b.subs.clear();
            Ok(b.host.close()?)
        })
    }

    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.host.is_closed()
    }

    /// Why the broker stopped taking requests (a sync failed), or `null`.
    #[napi(getter)]
    pub fn failed(&self) -> Option<String> {
        self.host.failed().map(str::to_owned)
    }

    // ---- clock -----------------------------------------------------------------------------

    /// 'system' or 'manual'.
    #[napi(getter)]
    pub fn clock(&self) -> &'static str {
        if self.host.clock().is_manual() {
            "manual"
        } else {
            "system"
        }
    }

    /// The host clock's reading, in ms (the manual clock, or the system time): a getter, as
    /// in Python and wasm.
    #[napi(getter)]
    pub fn now(&self) -> f64 {
        self.host.now() as f64
    }

    /// When something is next due (a check, a delayed delivery, a redelivery), or `null`.
    #[napi]
    pub fn poll_timeout(&mut self, env: &Env) -> napi::Result<Option<f64>> {
        self.guard(env, |b| {
            b.host.core()?;
            Ok(b.host.next_due().map(|t| t as f64))
        })
    }

    /// Manual clock: fires the next timer due at or before `target` (any, when `target` is
    /// `null`) at its own time and answers `true`; when none is, moves the clock to `target`
    /// and answers `false`.
    #[napi]
    pub fn step_clock(&mut self, env: &Env, target: Option<Unknown<'_>>) -> napi::Result<bool> {
        self.guard(env, |b| Ok(b.host.step(read("target", target)?)?))
    }

    /// Manual clock: starts an advance to `target` (until idle when `null`); `driveNext`
    /// then hands out the checks of each step until it answers `[]`. The wrapper's
    /// `advance`, `advanceTo` and `runUntilIdle` answer each batch before the next.
    #[napi]
    pub fn drive_start(&mut self, env: &Env, target: Option<Unknown<'_>>) -> napi::Result<()> {
        self.guard(env, |b| {
            if !b.host.clock().is_manual() {
                return Err(JsFail::WrongClock(
                    "advancing needs a broker with clock: 'manual'",
                ));
            }
            Ok(b.drive.start(&b.host, read("target", target)?)?)
        })
    }

    /// The checks of the drive's next step (`[]`: the drive is over).
    #[napi]
    pub fn drive_next<'e>(&mut self, env: &'e Env) -> Result<Unknown<'e>> {
        self.guard(env, |b| {
            out(env, view::node_checks(&b.drive.next(&mut b.host)?))
        })
    }

    /// System clock: does everything due by now.
    #[napi]
    pub fn fire_due(&mut self, env: &Env) -> napi::Result<()> {
        self.guard(env, |b| {
            if b.host.clock().is_manual() {
                return Err(JsFail::WrongClock(
                    "fireDue is for a broker with clock: 'system'",
                ));
            }
            Ok(b.host.fire_due()?)
        })
    }

    // ---- outputs ---------------------------------------------------------------------------

    /// Checks the core asked for since the last call, in order.
    #[napi]
    pub fn take_checks<'e>(&mut self, env: &'e Env) -> Result<Unknown<'e>> {
        self.guard(env, |b| out(env, view::node_checks(&b.host.take_checks())))
    }

    /// Queues that got a visible message since the last call (after every driving call:
    /// a napi object, see `JsSendResult`).
    #[napi]
    pub fn take_available(&mut self) -> Vec<convert::JsAvailable> {
        let a = self.host.take_available();
        a.into_iter()
            .map(|(topic, queue_id)| convert::JsAvailable { topic, queue_id })
            .collect()
    }

    /// Trace events (with `trace: true`) since the last call, in order.
    #[napi]
    pub fn take_trace<'e>(&mut self, env: &'e Env) -> Result<Unknown<'e>> {
        self.guard(env, |b| out(env, view::traces(&b.host.take_trace())))
    }

    // ---- introspection ---------------------------------------------------------------------

    /// Pending transactions in log order (at most `limit`).
    #[napi]
    pub fn pending_transactions<'e>(
        &mut self,
        env: &'e Env,
        limit: Option<Unknown<'_>>,
    ) -> Result<Unknown<'e>> {
        self.guard(env, |b| {
            let p = b.host.core()?.pending_transactions(self::limit(limit)?);
            out(env, view::node_pending_transactions(&p))
        })
    }

    /// Delayed messages not yet delivered, in log order (at most `limit`).
    #[napi]
    pub fn pending_delays<'e>(
        &mut self,
        env: &'e Env,
        limit: Option<Unknown<'_>>,
    ) -> Result<Unknown<'e>> {
        self.guard(env, |b| {
            let p = b.host.core()?.pending_delays(self::limit(limit)?);
            out(env, view::pending_delays(&p))
        })
    }

    /// Topics consumers can read, with their queues' offsets.
    #[napi]
    pub fn topics<'e>(&mut self, env: &'e Env) -> Result<Unknown<'e>> {
        self.guard(env, |b| out(env, view::topics(&b.host.core()?.topics())))
    }

    /// A queue's consume-queue units.
    #[napi]
    pub fn consume_queue<'e>(
        &mut self,
        env: &'e Env,
        topic: Unknown<'_>,
        queue_id: Unknown<'_>,
    ) -> Result<Unknown<'e>> {
        self.guard(env, |b| {
            let topic: String = read("topic", Some(topic))?;
            let queue_id = read("queueId", Some(queue_id))?;
            let units = b
                .host
                .core_mut()?
                .consume_queue(&topic, queue_id, 0, usize::MAX)
                .map_err(embed::Fail::Host)?;
            out(env, view::node_consume_queue(&units))
        })
    }

    /// A group's committed offset in a queue, or `null`.
    #[napi]
    pub fn committed_offset(
        &mut self,
        env: &Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
        queue_id: Unknown<'_>,
    ) -> napi::Result<Option<f64>> {
        self.guard(env, |b| {
            let (g, t): (String, String) =
                (read("group", Some(group))?, read("topic", Some(topic))?);
            let q = read("queueId", Some(queue_id))?;
            Ok(b.host.core()?.committed_offset(&g, &t, q).map(|o| o as f64))
        })
    }

    /// Messages a group has received and not acked in a topic.
    #[napi]
    pub fn inflight_count(
        &mut self,
        env: &Env,
        group: Unknown<'_>,
        topic: Unknown<'_>,
    ) -> napi::Result<u32> {
        self.guard(env, |b| {
            let (g, t): (String, String) =
                (read("group", Some(group))?, read("topic", Some(topic))?);
            Ok(u32::try_from(b.host.core()?.inflight_count(&g, &t)).unwrap_or(u32::MAX))
        })
    }

    /// Core counters.
    #[napi]
    pub fn stats<'e>(&mut self, env: &'e Env) -> Result<Unknown<'e>> {
        self.guard(env, |b| out(env, view::stats(&b.host.core()?.stats())))
    }

    /// Bytes in the log.
    #[napi]
    pub fn log_end(&mut self, env: &Env) -> napi::Result<f64> {
        self.guard(env, |b| Ok(b.host.core()?.log_end() as f64))
    }

    /// What recovery found when the broker opened.
    #[napi]
    pub fn recovery_report<'e>(&mut self, env: &'e Env) -> Result<Unknown<'e>> {
        self.guard(env, |b| {
            out(env, view::recovery_report(b.host.core()?.recovery_report()))
        })
    }

    /// The effective configuration (camelCase).
    #[napi]
    pub fn config<'e>(&mut self, env: &'e Env) -> Result<Unknown<'e>> {
        self.guard(env, |b| {
            out(env, convert::config_out(b.host.core()?.config())?)
        })
    }

    /// Test hook: tells the core a sync failed (`Broker::sync_failed`, what a host that syncs
    /// off its thread reports), to show what a failed broker does. No fsync can be made to
    /// fail from a test.
    #[napi(js_name = "__failSyncForTest")]
    pub fn fail_sync_for_test(&mut self, env: &Env, reason: String) -> napi::Result<()> {
        self.guard(env, |b| Ok(b.host.sync_failed(&reason)?))
    }

    /// Test hook: panics inside a guarded call, to show that no panic reaches JS.
    #[napi(js_name = "__panicForTest")]
    pub fn panic_for_test(&mut self, env: &Env) -> napi::Result<()> {
        self.guard(env, |_| -> Res<()> {
            panic!("deliberate panic for the test suite")
        })
    }
}
