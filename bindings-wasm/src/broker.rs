//! `Broker` for JS: a core broker over memory storage, driven by the page's clock.
//!
//! Time: the core remembers the latest time it was given ([`Broker::now`]); requests run at
//! that time, and only [`WasmBroker::advance_to`] and [`WasmBroker::step_to_next_event`]
//! move it. Outputs (checks for the producer, trace events, availability notices) queue in
//! the core until [`WasmBroker::drain`]. A check is answered with
//! `end(txn, answer, {fromCheck: true})`; a host that wants every check answered at its own
//! time steps with `stepToNextEvent()` while `nextEventAt()` is due and drains in between.

use alloc::string::String;

use rocklet_core::{Broker, MemStorage};
use rocklet_embed::{self as embed, view, ManualClock};
use wasm_bindgen::prelude::*;

use crate::convert;
use crate::error;

// The shapes `convert` produces and takes, for the generated .d.ts.
#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &str = r#"
/** A message to send. `body`: a string (sent as UTF-8) or bytes. At most one of the delays. */
export interface NewMessage {
  topic: string; body: string | Uint8Array; tag?: string; keys?: string[];
  properties?: Record<string, string>; queueId?: number; messageId?: string; messageGroup?: string;
  delayLevel?: number; deliverAtMs?: number; delayMs?: number; bornTimestamp?: number; flag?: number;
}
export interface SendResult { msgId: string; topic: string; queueId: number; queueOffset: number; offset: number; txn: string | null; }
export interface Ended { txn: string; resolution: "commit" | "rollback" | "unknown"; duplicate: boolean; }
export interface Message {
  topic: string; queueId: number; queueOffset: number; offset: number; msgId: string; tag: string | null;
  keys: string[]; properties: Record<string, string>; body: string; bodyBytes: Uint8Array;
  bornTimestamp: number; storeTimestamp: number; reconsumeTimes: number; flag: number; sysFlag: number;
  bornHost: string; storeHost: string;
}
/** `nextOffset` / `maxOffset`: of the queue, when one was read; `queues`: each queue read. */
export interface Pulled { messages: Message[]; nextOffset?: number; maxOffset?: number; queues: { queueId: number; nextOffset: number; maxOffset: number }[]; }
export interface Received { message: Message; handle: string; attempt: number; visibleAt: number; }
/** Without `queueId`: every queue of the topic in order (`offset` needs a queue). */
export interface PullArgs { group: string; topic: string; queueId?: number; offset?: number; max?: number; tags?: string; autoCommit?: boolean; }
export interface ReceiveArgs { group: string; topic: string; invisibleMs: number; queueId?: number; max?: number; tags?: string; }
export interface EndOptions { fromCheck?: boolean; group?: string; }
export type Output =
  | { type: "check"; group: string; txn: string; check: number; message: Message }
  | { type: "trace"; at: number; kind: string; offset: number; topic: string; detail: string }
  | { type: "available"; topic: string; queueId: number }
  | { type: "reply"; id: number; reply: { type: string; [k: string]: unknown } };
export interface TopicInfo { name: string; queues: { queueId: number; nextOffset: number; visible: number }[]; }
export interface PendingTransaction { txn: string; offset: number; group: string; topic: string; queueId: number; checks: number; nextCheck: number | null; }
export interface PendingDelay { offset: number; topic: string; queueId: number; due: number; }
export interface CqUnit { offset: number; size: number; tagHash: number; bytes: Uint8Array; }
export interface RecordField { name: string; at: number; len: number; value: number | string; }
export interface DecodedRecord {
  offset: number; size: number; topic: string; transactionType: "not" | "prepared" | "commit" | "rollback";
  body: string; properties: { key: string; value: string; at: number; len: number }[];
  fields: RecordField[]; bytes: Uint8Array;
}
export interface RecoveryReport {
  segments: number; records: number; bytesScanned: number; bytesTruncated: number; bytesQuarantined: number;
  cuts: { offset: number; bytes: number; reason: string; keptAs: string | null }[];
  quarantined: { offset: number; bytes: number; reason: string; name: string }[];
}
"#;

/// An in-memory broker with a manual clock.
#[wasm_bindgen(js_name = Broker)]
#[derive(Debug)]
pub struct WasmBroker {
    host: Engine,
}

/// Memory storage is durable as soon as it is written: the host syncs whatever a call
/// appended (`eager_sync`), so under sync flush replies and messages are released at once.
type Engine = embed::Engine<MemStorage, ManualClock>;

fn fail(
    e: embed::Fail<rocklet_core::Error<<MemStorage as rocklet_core::Storage>::Error>>,
) -> JsValue {
    error::fail(e)
}

impl WasmBroker {
    fn core(&self) -> Result<&Broker<MemStorage>, JsValue> {
        self.host.core().map_err(fail)
    }
}

#[wasm_bindgen(js_class = Broker)]
impl WasmBroker {
    /// A broker over empty memory storage, its clock at `startMs` (default 0). `config` is a
    /// JSON string or an object with the core `Config`'s snake_case fields
    /// (`transaction_timeout_ms`, `transaction_check_interval_ms`, `transaction_check_max`,
    /// `delay_levels`, `trace`, `flush`, …); absent fields keep RocketMQ's defaults.
    #[wasm_bindgen(constructor)]
    pub fn new(config: Option<JsValue>, start_ms: Option<f64>) -> Result<WasmBroker, JsValue> {
        let cfg = convert::config(config.unwrap_or(JsValue::UNDEFINED))?;
        let now = convert::millis("startMs", start_ms.unwrap_or(0.0))?;
        let host = Engine::open(cfg, MemStorage::new(), ManualClock::new(now), false)
            .map_err(|e| error::core(&e))?
            .eager_sync(true)
            .raw_outputs();
        Ok(WasmBroker { host })
    }

    /// Drops the broker and opens a new one over the same (memory) storage, as a restart
    /// would: state is what recovery rebuilds from the log. Producer groups start offline.
    /// Returns the recovery report.
    #[wasm_bindgen(unchecked_return_type = "RecoveryReport")]
    pub fn reopen(&mut self) -> Result<JsValue, JsValue> {
        self.host.reopen().map_err(fail)?;
        convert::to_js(&view::recovery_report(self.core()?.recovery_report()))
    }

    // ---- clock ---------------------------------------------------------------------------

    /// The broker's time: the latest time it was given.
    #[wasm_bindgen(getter)]
    pub fn now(&self) -> f64 {
        convert::number(self.host.now())
    }

    /// When the next check, delayed delivery or redelivery is due (`undefined`: nothing is).
    #[wasm_bindgen(js_name = nextEventAt)]
    pub fn next_event_at(&self) -> Option<f64> {
        self.host.next_due().map(convert::number)
    }

    /// Moves the clock to `ms` (never backwards), doing everything due on the way.
    #[wasm_bindgen(js_name = advanceTo)]
    pub fn advance_to(&mut self, ms: f64) -> Result<(), JsValue> {
        let ms = convert::millis("ms", ms)?;
        self.host.jump_to(ms).map_err(fail)
    }

    /// Moves the clock to the next event (`nextEventAt()`) and does what is due then; returns
    /// the new time, or `undefined` (clock unchanged) when nothing is scheduled.
    #[wasm_bindgen(js_name = stepToNextEvent)]
    pub fn step_to_next_event(&mut self) -> Result<Option<f64>, JsValue> {
        let Some(at) = self.host.next_due() else {
            return Ok(None);
        };
        self.host.jump_to(at).map_err(fail)?;
        Ok(Some(convert::number(self.host.now())))
    }

    /// Every output queued since the last drain, in order: `{type: "check", group, txn,
    /// check, message}`, `{type: "trace", at, kind, offset, topic, detail}` (with config
    /// `trace`), `{type: "available", topic, queueId}` (with `notify_available`).
    #[wasm_bindgen(unchecked_return_type = "Output[]")]
    pub fn drain(&mut self) -> Result<JsValue, JsValue> {
        self.host.drain();
        convert::to_js(&view::outputs(&self.host.take_outputs()))
    }

    /// Whether a producer of `group` can be checked (it answers checks). Checks of an
    /// offline group wait without using attempts. Groups start offline.
    #[wasm_bindgen(js_name = setProducerOnline)]
    pub fn set_producer_online(&mut self, group: &str, online: bool) -> Result<(), JsValue> {
        self.host.set_producer_online(group, online).map_err(fail)
    }

    /// Declares a consumer group; `fifo` makes its receives orderly (RocketMQ's
    /// consumeMessageOrderly: a queue's messages in order, none of a queue while an earlier
    /// batch of it is in flight for the group, redelivery in place).
    #[wasm_bindgen(js_name = declareGroup)]
    pub fn declare_group(&mut self, name: &str, fifo: bool) -> Result<(), JsValue> {
        match self.host.declare_group(name, fifo).map_err(fail)? {
            Ok(()) => Ok(()),
            Err(e) => Err(error::client(&e)),
        }
    }

    // ---- producer ------------------------------------------------------------------------

    /// Sends one message: `{topic, body, tag?, keys?, properties?, queueId?, delayLevel?,
    /// deliverAtMs?, delayMs?, …}`. Returns `{msgId, topic, queueId, queueOffset, offset}`.
    #[wasm_bindgen(unchecked_return_type = "SendResult")]
    pub fn send(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "NewMessage")] message: JsValue,
    ) -> Result<JsValue, JsValue> {
        let m = convert::message(message)?;
        convert::to_js(&view::send_result(
            &embed::send_one(&mut self.host, m).map_err(fail)?,
        ))
    }

    /// Sends a batch (one topic, all or nothing). Returns one result per message.
    #[wasm_bindgen(js_name = sendBatch, unchecked_return_type = "SendResult[]")]
    pub fn send_batch(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "NewMessage[]")] messages: JsValue,
    ) -> Result<JsValue, JsValue> {
        let ms = convert::messages(messages)?;
        convert::to_js(&view::send_results(
            &embed::send(&mut self.host, ms).map_err(fail)?,
        ))
    }

    /// Stores a half message of producer group `group`. Returns the send result with `txn`.
    #[wasm_bindgen(unchecked_return_type = "SendResult")]
    pub fn prepare(
        &mut self,
        group: String,
        #[wasm_bindgen(unchecked_param_type = "NewMessage")] message: JsValue,
        check_immunity_ms: Option<f64>,
    ) -> Result<JsValue, JsValue> {
        let message = convert::message(message)?;
        let check_immunity_ms = check_immunity_ms
            .map(|ms| convert::millis("checkImmunityMs", ms))
            .transpose()?;
        let tx = embed::prepare(&mut self.host, group, message, check_immunity_ms).map_err(fail)?;
        let sent = view::send_result(&tx.sent);
        convert::to_js(&sent)
    }

    /// END_TRANSACTION: `resolution` is `commit`, `rollback` or `unknown`; `options` is an
    /// `EndOptions`, `{fromCheck?, group?}` (`fromCheck: true` answers a check). Returns
    /// `{txn, resolution, duplicate}`.
    #[wasm_bindgen(unchecked_return_type = "Ended")]
    pub fn end(
        &mut self,
        txn: &str,
        #[wasm_bindgen(unchecked_param_type = "\"commit\" | \"rollback\" | \"unknown\"")]
        resolution: &str,
        options: Option<JsValue>,
    ) -> Result<JsValue, JsValue> {
        let txn = convert::txn_id(txn)?;
        let resolution = convert::resolution(resolution)?;
        let opts = convert::end_options(options.unwrap_or(JsValue::UNDEFINED))?;
        // Without a group, the transaction's own: the page owns the broker.
        let (group, from_check) = opts
            .into_parts(true)
            .map_err(|e| error::js_error(rocklet_embed::ErrorKind::Argument.code(), e))?;
        let e = embed::end(&mut self.host, txn, resolution, group, from_check).map_err(fail)?;
        convert::to_js(&view::ended(e.txn, e.resolution, e.duplicate))
    }

    // ---- consumer ------------------------------------------------------------------------

    /// Pulls `{group, topic, queueId?, offset?, max?, tags?, autoCommit?}`: the queue
    /// `queueId` names, or every queue of the topic in order; without `offset` from the
    /// group's committed offset. Returns `{messages, nextOffset, maxOffset, queues}`. A topic
    /// that does not exist throws `UNKNOWN_TOPIC`.
    #[wasm_bindgen(unchecked_return_type = "Pulled")]
    pub fn pull(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "PullArgs")] args: JsValue,
    ) -> Result<JsValue, JsValue> {
        let args = convert::pull_args(args)?;
        let one = args.queue.is_some();
        convert::to_js(&view::pulled(
            &embed::pull(&mut self.host, args).map_err(fail)?,
            one,
        ))
    }

    /// Commits a group's pull offset in a queue.
    #[wasm_bindgen(js_name = commitOffset)]
    pub fn commit_offset(
        &mut self,
        group: String,
        topic: String,
        queue_id: u32,
        offset: f64,
    ) -> Result<(), JsValue> {
        let offset = convert::millis("offset", offset)?;
        embed::commit_offset(&mut self.host, group, topic, queue_id, offset).map_err(fail)
    }

    /// Receives (RocketMQ 5 pop) `{group, topic, invisibleMs, queueId?, max?, tags?}`.
    /// Returns `[{message, handle, attempt, visibleAt}]`. A topic that does not exist throws
    /// `UNKNOWN_TOPIC`.
    #[wasm_bindgen(unchecked_return_type = "Received[]")]
    pub fn receive(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "ReceiveArgs")] args: JsValue,
    ) -> Result<JsValue, JsValue> {
        let args = convert::receive_args(args)?;
        convert::to_js(&view::received(
            &embed::receive(&mut self.host, args).map_err(fail)?,
        ))
    }

    /// Acknowledges a received message by its handle.
    pub fn ack(&mut self, group: String, handle: &str) -> Result<(), JsValue> {
        let handle = convert::handle(handle)?;
        embed::ack(&mut self.host, group, handle).map_err(fail)
    }

    /// Changes how long a received message stays invisible. Returns `{handle, visibleAt}`;
    /// the old handle still names this delivery (a redelivery makes both stale).
    #[wasm_bindgen(js_name = changeInvisible, unchecked_return_type = "{ handle: string; visibleAt: number }")]
    pub fn change_invisible(
        &mut self,
        group: String,
        handle: &str,
        invisible_ms: f64,
    ) -> Result<JsValue, JsValue> {
        let handle = convert::handle(handle)?;
        let invisible_ms = convert::millis("invisibleMs", invisible_ms)?;
        let (handle, visible_at) =
            embed::change_invisible(&mut self.host, group, handle, invisible_ms).map_err(fail)?;
        convert::to_js(&view::invisible_changed(&handle, visible_at))
    }

    /// Moves a received message to `%DLQ%<group>` at once.
    #[wasm_bindgen(js_name = forwardToDeadLetter)]
    pub fn forward_to_dead_letter(&mut self, group: String, handle: &str) -> Result<(), JsValue> {
        let handle = convert::handle(handle)?;
        embed::forward_to_dead_letter(&mut self.host, group, handle).map_err(fail)
    }

    // ---- introspection -------------------------------------------------------------------

    /// The configuration in effect (snake_case, as the constructor takes it).
    #[wasm_bindgen(unchecked_return_type = "Record<string, unknown>")]
    pub fn config(&self) -> Result<JsValue, JsValue> {
        convert::to_js(self.core()?.config())
    }

    /// Consumer-visible topics: `[{name, queues: [{queueId, nextOffset, visible}]}]`.
    #[wasm_bindgen(unchecked_return_type = "TopicInfo[]")]
    pub fn topics(&self) -> Result<JsValue, JsValue> {
        convert::to_js(&view::topics(&self.core()?.topics()))
    }

    /// Pending transactions in log order: `[{txn, offset, group, topic, queueId, checks,
    /// nextCheck}]` (`nextCheck` is `null` while the group is offline).
    #[wasm_bindgen(js_name = pendingTransactions, unchecked_return_type = "PendingTransaction[]")]
    pub fn pending_transactions(&self, limit: Option<u32>) -> Result<JsValue, JsValue> {
        convert::to_js(&view::pending_transactions(
            &self
                .core()?
                .pending_transactions(limit.map_or(usize::MAX, |l| l as usize)),
        ))
    }

    /// Delayed messages not yet delivered: `[{offset, topic, queueId, due}]`.
    #[wasm_bindgen(js_name = pendingDelays, unchecked_return_type = "PendingDelay[]")]
    pub fn pending_delays(&self, limit: Option<u32>) -> Result<JsValue, JsValue> {
        convert::to_js(&view::pending_delays(
            &self
                .core()?
                .pending_delays(limit.map_or(usize::MAX, |l| l as usize)),
        ))
    }

    /// The consume-queue units of a queue: `[{offset, size, tagHash, bytes}]`, `bytes` being
    /// the 20 bytes of RocketMQ's ConsumeQueue entry.
    #[wasm_bindgen(js_name = consumeQueue, unchecked_return_type = "CqUnit[]")]
    pub fn consume_queue(&mut self, topic: &str, queue_id: u32) -> Result<JsValue, JsValue> {
        let units = self
            .host
            .core_mut()
            .map_err(fail)?
            .consume_queue(topic, queue_id, 0, usize::MAX)
            .map_err(|e| error::core(&e))?;
        let view = view::consume_queue(&units);
        convert::to_js(&view)
    }

    /// Commit-log records from log offset `from` (at most `max`), each decoded field by field:
    /// `[{offset, size, topic, transactionType, body, properties: [{key, value, at, len}],
    /// fields: [{name, at, len, value}], bytes}]`.
    #[wasm_bindgen(js_name = rawRecords, unchecked_return_type = "DecodedRecord[]")]
    pub fn raw_records(&mut self, from: f64, max: u32) -> Result<js_sys::Array, JsValue> {
        let from = convert::millis("from", from)?;
        let records = self
            .host
            .core_mut()
            .map_err(fail)?
            .raw_records(from, max as usize)
            .map_err(|e| error::core(&e))?;
        let out = js_sys::Array::new();
        for (offset, bytes) in &records {
            out.push(&convert::decoded_record(*offset, bytes)?);
        }
        Ok(out)
    }

    /// Counters.
    #[wasm_bindgen(unchecked_return_type = "Record<string, number>")]
    pub fn stats(&self) -> Result<JsValue, JsValue> {
        convert::to_js(&view::stats(&self.core()?.stats()))
    }

    /// A group's committed pull offset in a queue (`undefined` if none).
    #[wasm_bindgen(js_name = committedOffset)]
    pub fn committed_offset(
        &self,
        group: &str,
        topic: &str,
        queue_id: u32,
    ) -> Result<Option<f64>, JsValue> {
        Ok(self
            .core()?
            .committed_offset(group, topic, queue_id)
            .map(convert::number))
    }

    /// Messages `group` received from `topic` and has not acked.
    #[wasm_bindgen(js_name = inflightCount)]
    pub fn inflight_count(&self, group: &str, topic: &str) -> Result<u32, JsValue> {
        Ok(u32::try_from(self.core()?.inflight_count(group, topic)).unwrap_or(u32::MAX))
    }

    /// Pending (unresolved) transactions.
    #[wasm_bindgen(js_name = pendingTransactionCount)]
    pub fn pending_transaction_count(&self) -> Result<u32, JsValue> {
        Ok(u32::try_from(self.core()?.pending_transaction_count()).unwrap_or(u32::MAX))
    }

    /// Delayed messages not yet delivered.
    #[wasm_bindgen(js_name = pendingDelayCount)]
    pub fn pending_delay_count(&self) -> Result<u32, JsValue> {
        Ok(u32::try_from(self.core()?.pending_delay_count()).unwrap_or(u32::MAX))
    }

    /// Bytes in the log (the next append offset).
    #[wasm_bindgen(getter, js_name = logEnd)]
    pub fn log_end(&self) -> Result<f64, JsValue> {
        Ok(convert::number(self.core()?.log_end()))
    }
}
