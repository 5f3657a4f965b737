//! Every conversion between JS values and core types.
//!
//! Inputs arrive as `Unknown` so that a value of the wrong shape becomes a `ClientError`
//! with code `INVALID_ARGUMENT` naming the argument, not a napi type error.

use std::collections::HashMap;
use std::path::PathBuf;

use napi::bindgen_prelude::*;
use napi::{JsValue, ValueType};
use napi_derive::napi;
use rocklet_core::{
    CheckRequest, Config, CqUnit, Delay, Message, NewMessage, PendingDelayInfo, PendingTxnInfo,
    ReceiptHandle, Received, RecoveryReport, Resolution, SendResult, Stats, TagFilter, TopicInfo,
    TraceEvent, TxnId,
};

use rocklet_embed::config::{self, ConfigFail, Naming};
use rocklet_embed::view::{camel_case, stats_fields};

use crate::error::{arg, Fail, Res};

/// Largest integer a JS number holds exactly.
const MAX_SAFE: f64 = 9_007_199_254_740_991.0;

// ---- reading JS values ------------------------------------------------------------------

fn type_of(v: &Unknown<'_>) -> Res<ValueType> {
    Ok(v.get_type()?)
}

/// `None` for `undefined` and `null`.
pub(crate) fn present<'e>(v: Option<Unknown<'e>>) -> Res<Option<Unknown<'e>>> {
    match v {
        None => Ok(None),
        Some(v) => match type_of(&v)? {
            ValueType::Undefined | ValueType::Null => Ok(None),
            _ => Ok(Some(v)),
        },
    }
}

pub(crate) fn string(what: &str, v: Unknown<'_>) -> Res<String> {
    if type_of(&v)? != ValueType::String {
        return Err(arg(format!("{what} must be a string")));
    }
    Ok(String::from_unknown(v)?)
}

fn number(what: &str, v: Unknown<'_>) -> Res<f64> {
    if type_of(&v)? != ValueType::Number {
        return Err(arg(format!("{what} must be a number")));
    }
    Ok(f64::from_unknown(v)?)
}

pub(crate) fn uint(what: &str, v: Unknown<'_>) -> Res<u64> {
    rocklet_embed::arg::number(what, number(what, v)?, u64::MAX).map_err(Fail::Argument)
}

pub(crate) fn u32_of(what: &str, v: Unknown<'_>) -> Res<u32> {
    rocklet_embed::arg::number_u32(what, number(what, v)?).map_err(Fail::Argument)
}

fn i32_of(what: &str, v: Unknown<'_>) -> Res<i32> {
    let n = number(what, v)?;
    if !(n.is_finite()
        && n.fract() == 0.0
        && (f64::from(i32::MIN)..=f64::from(i32::MAX)).contains(&n))
    {
        return Err(arg(format!("{what} must be a 32-bit integer, got {n}")));
    }
    Ok(n as i32)
}

pub(crate) fn boolean(what: &str, v: Unknown<'_>) -> Res<bool> {
    if type_of(&v)? != ValueType::Boolean {
        return Err(arg(format!("{what} must be a boolean")));
    }
    Ok(bool::from_unknown(v)?)
}

fn object<'e>(what: &str, v: Unknown<'e>) -> Res<Object<'e>> {
    if type_of(&v)? != ValueType::Object || v.is_array()? {
        return Err(arg(format!("{what} must be an object")));
    }
    Ok(Object::from_unknown(v)?)
}

fn array<'e>(what: &str, v: Unknown<'e>) -> Res<Vec<Unknown<'e>>> {
    if !v.is_array()? {
        return Err(arg(format!("{what} must be an array")));
    }
    let a = Array::from_unknown(v)?;
    (0..a.len())
        .map(|i| match a.get::<Unknown<'_>>(i)? {
            Some(x) => Ok(x),
            None => Err(arg(format!("{what}[{i}] is missing"))),
        })
        .collect()
}

/// A message body: a `Buffer`, any `Uint8Array`, or a string (sent as UTF-8).
pub(crate) fn body(what: &str, v: Unknown<'_>) -> Res<Vec<u8>> {
    match type_of(&v)? {
        ValueType::String => Ok(String::from_unknown(v)?.into_bytes()),
        ValueType::Object if v.is_buffer()? => Ok(BufferSlice::from_unknown(v)?.to_vec()),
        ValueType::Object if v.is_typedarray()? => match Uint8ArraySlice::from_unknown(v) {
            Ok(s) => Ok(s.to_vec()),
            Err(_) => Err(arg(format!(
                "{what} must be a Buffer, a Uint8Array or a string"
            ))),
        },
        _ => Err(arg(format!(
            "{what} must be a Buffer, a Uint8Array or a string"
        ))),
    }
}

/// An options object: `undefined`/`null` is none; every key must be one of `allowed`.
pub(crate) struct Opts<'e> {
    what: String,
    obj: Option<Object<'e>>,
}

impl<'e> Opts<'e> {
    pub(crate) fn new(what: &str, v: Option<Unknown<'e>>, allowed: &[&str]) -> Res<Self> {
        let obj = match present(v)? {
            None => None,
            Some(v) => {
                let obj = object(what, v)?;
                for key in Object::keys(&obj)? {
                    if !allowed.contains(&key.as_str()) {
                        return Err(arg(format!(
                            "{what} has an unknown option `{key}` (known: {})",
                            allowed.join(", ")
                        )));
                    }
                }
                Some(obj)
            }
        };
        Ok(Opts {
            what: what.into(),
            obj,
        })
    }

    pub(crate) fn get(&self, key: &str) -> Res<Option<Unknown<'e>>> {
        match &self.obj {
            None => Ok(None),
            Some(o) => present(o.get::<Unknown<'_>>(key)?),
        }
    }

    fn name(&self, key: &str) -> String {
        format!("{}.{key}", self.what)
    }

    pub(crate) fn string(&self, key: &str) -> Res<Option<String>> {
        self.get(key)?
            .map(|v| string(&self.name(key), v))
            .transpose()
    }
    pub(crate) fn uint(&self, key: &str) -> Res<Option<u64>> {
        self.get(key)?.map(|v| uint(&self.name(key), v)).transpose()
    }
    pub(crate) fn u32(&self, key: &str) -> Res<Option<u32>> {
        self.get(key)?
            .map(|v| u32_of(&self.name(key), v))
            .transpose()
    }
    pub(crate) fn bool(&self, key: &str) -> Res<Option<bool>> {
        self.get(key)?
            .map(|v| boolean(&self.name(key), v))
            .transpose()
    }
    fn i32(&self, key: &str) -> Res<Option<i32>> {
        self.get(key)?
            .map(|v| i32_of(&self.name(key), v))
            .transpose()
    }
    fn required(&self, key: &str) -> Res<Unknown<'e>> {
        self.get(key)?
            .ok_or_else(|| arg(format!("{} is required", self.name(key))))
    }
}

// ---- broker options -----------------------------------------------------------------------

/// Which clock drives the broker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClockKind {
    System,
    Manual,
}

/// `new Broker(options)`.
#[derive(Debug)]
pub(crate) struct BrokerOptions {
    pub(crate) config: Config,
    pub(crate) clock: ClockKind,
    pub(crate) path: Option<PathBuf>,
    pub(crate) now: Option<u64>,
    /// Open a damaged log, moving the damage to quarantine (`Broker::open_repairing`).
    pub(crate) repair: bool,
}

fn json(what: &str, v: Unknown<'_>) -> Res<serde_json::Value> {
    use serde_json::Value;
    Ok(match type_of(&v)? {
        ValueType::Boolean => Value::Bool(bool::from_unknown(v)?),
        ValueType::String => Value::String(String::from_unknown(v)?),
        ValueType::Number => {
            let n = f64::from_unknown(v)?;
            if n.fract() == 0.0 && (0.0..=MAX_SAFE).contains(&n) {
                Value::from(n as u64)
            } else if n.fract() == 0.0 && (-MAX_SAFE..0.0).contains(&n) {
                Value::from(n as i64)
            } else {
                serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
            }
        }
        ValueType::Object if v.is_array()? => Value::Array(
            array(what, v)?
                .into_iter()
                .map(|x| json(what, x))
                .collect::<Res<_>>()?,
        ),
        ValueType::Object => {
            let o = Object::from_unknown(v)?;
            let mut map = serde_json::Map::new();
            for k in Object::keys(&o)? {
                if let Some(x) = present(o.get::<Unknown<'_>>(&k)?)? {
                    map.insert(k, json(what, x)?);
                }
            }
            Value::Object(map)
        }
        _ => Value::Null,
    })
}

/// `{ path?, clock?, now?, ...Config fields in camelCase }`: the embedding layer's config
/// parser reads the Config fields (the core's defaults for the rest).
pub(crate) fn broker_options(v: Option<Unknown<'_>>) -> Res<BrokerOptions> {
    let mut out = BrokerOptions {
        config: Config::default(),
        clock: ClockKind::System,
        path: None,
        now: None,
        repair: false,
    };
    let mut entries = Vec::new();
    if let Some(v) = present(v)? {
        let obj = object("options", v)?;
        for key in Object::keys(&obj)? {
            let Some(val) = present(obj.get::<Unknown<'_>>(&key)?)? else {
                continue;
            };
            match key.as_str() {
                "path" => out.path = Some(PathBuf::from(string("options.path", val)?)),
                "clock" => {
                    out.clock = match string("options.clock", val)?.as_str() {
                        "system" => ClockKind::System,
                        "manual" => ClockKind::Manual,
                        other => {
                            return Err(arg(format!(
                                "options.clock must be 'system' or 'manual', got '{other}'"
                            )))
                        }
                    }
                }
                "now" => out.now = Some(uint("options.now", val)?),
                "repair" => out.repair = boolean("options.repair", val)?,
                "notifyAvailable" => {
                    return Err(arg(
                        "options.notifyAvailable is set by the binding (subscribe waits on it)",
                    ))
                }
                _ => {
                    let value = json(&format!("options.{key}"), val)?;
                    entries.push((key, value));
                }
            }
        }
    }
    if out.now.is_some() && out.clock != ClockKind::Manual {
        return Err(arg(
            "options.now sets the start of a manual clock: give clock: 'manual' too",
        ));
    }
    // The host does long polling (subscribe): it needs availability notices.
    let base = Config {
        notify_available: true,
        ..Config::default()
    };
    let extra = ["path", "clock", "now", "repair"];
    out.config = config::config(&base, entries, Naming::Camel, &extra, &["notify_available"])
        .map_err(|e| match e {
            ConfigFail::Unknown { .. } => arg(e.to_string()),
            ConfigFail::Invalid { key, reason } => Fail::Config {
                option: key,
                reason,
            },
        })?;
    Ok(out)
}

/// The effective configuration, camelCase, for `broker.config()`.
pub(crate) fn config_out(cfg: &Config) -> Res<serde_json::Value> {
    let v = serde_json::to_value(cfg).map_err(|e| Fail::Internal(e.to_string()))?;
    let serde_json::Value::Object(m) = v else {
        return Ok(v);
    };
    Ok(serde_json::Value::Object(
        m.into_iter().map(|(k, v)| (camel_case(&k), v)).collect(),
    ))
}

// ---- messages in ----------------------------------------------------------------------------

/// Options of one message (send options; also the fields of a message object).
pub(crate) const MESSAGE_OPTIONS: [&str; 12] = [
    "tag",
    "keys",
    "properties",
    "queueId",
    "delayLevel",
    "deliverAtMs",
    "deliverAt",
    "delayMs",
    "messageId",
    "messageGroup",
    "flag",
    "bornTimestamp",
];

fn keys(what: &str, v: Unknown<'_>) -> Res<Vec<String>> {
    if type_of(&v)? == ValueType::String {
        return Ok(vec![String::from_unknown(v)?]);
    }
    array(what, v)?
        .into_iter()
        .enumerate()
        .map(|(i, k)| string(&format!("{what}[{i}]"), k))
        .collect()
}

fn properties(what: &str, v: Unknown<'_>) -> Res<Vec<(String, String)>> {
    let o = object(what, v)?;
    let mut out = Vec::new();
    for k in Object::keys(&o)? {
        let Some(x) = present(o.get::<Unknown<'_>>(&k)?)? else {
            continue;
        };
        let s = string(&format!("{what}.{k}"), x)?;
        out.push((k, s));
    }
    Ok(out)
}

/// Fills a message's optional fields from `opts`.
fn message_fields(m: &mut NewMessage, o: &Opts<'_>) -> Res<()> {
    m.tag = o.string("tag")?;
    if let Some(k) = o.get("keys")? {
        m.keys = keys(&o.name("keys"), k)?;
    }
    if let Some(p) = o.get("properties")? {
        m.properties = properties(&o.name("properties"), p)?;
    }
    m.queue_id = o.u32("queueId")?;
    let delays = [
        o.u32("delayLevel")?.map(Delay::Level),
        // `deliverAtMs` is the name Python (`deliver_at_ms`) and wasm use; `deliverAt` stays.
        o.uint("deliverAtMs")?.map(Delay::At),
        o.uint("deliverAt")?.map(Delay::At),
        o.uint("delayMs")?.map(Delay::After),
    ];
    let mut given = delays.into_iter().flatten();
    m.delay = given.next();
    if given.next().is_some() {
        return Err(arg(format!(
            "{}: give at most one of delayLevel, deliverAtMs (or deliverAt), delayMs",
            o.what
        )));
    }
    m.message_id = o.string("messageId")?;
    m.message_group = o.string("messageGroup")?;
    m.flag = o.i32("flag")?.unwrap_or(0);
    m.born_timestamp = o.uint("bornTimestamp")?;
    Ok(())
}

/// `send(topic, body, opts)`.
pub(crate) fn new_message(
    topic: String,
    body_v: Unknown<'_>,
    opts: Option<Unknown<'_>>,
) -> Res<NewMessage> {
    let mut m = NewMessage::new(topic, body("body", body_v)?);
    let o = Opts::new("options", opts, &MESSAGE_OPTIONS)?;
    message_fields(&mut m, &o)?;
    Ok(m)
}

/// A message object `{ topic, body, ...options }` (in a batch, `topic` defaults to the
/// batch's and a bare body is accepted too). With `immunity`, the object
/// may hold `checkImmunityMs` (prepare).
pub(crate) fn message_object(
    what: &str,
    v: Unknown<'_>,
    topic: Option<&str>,
    immunity: bool,
) -> Res<(NewMessage, Option<u64>)> {
    let t = type_of(&v)?;
    if topic.is_some() && (t == ValueType::String || v.is_buffer()? || v.is_typedarray()?) {
        let m = NewMessage::new(topic.unwrap_or_default(), body(what, v)?);
        return Ok((m, None));
    }
    let mut allowed: Vec<&str> = MESSAGE_OPTIONS.to_vec();
    allowed.push("body");
    allowed.push("topic");
    if immunity {
        allowed.push("checkImmunityMs");
    }
    let o = Opts::new(what, Some(v), &allowed)?;
    if o.obj.is_none() {
        return Err(arg(format!("{what} must be an object with a body")));
    }
    let topic = match (o.get("topic")?, topic) {
        (Some(t), _) => string(&o.name("topic"), t)?,
        (None, Some(t)) => t.to_string(),
        (None, None) => return Err(arg(format!("{} is required", o.name("topic")))),
    };
    let mut m = NewMessage::new(topic, body(&o.name("body"), o.required("body")?)?);
    message_fields(&mut m, &o)?;
    let imm = if immunity {
        o.uint("checkImmunityMs")?
    } else {
        None
    };
    Ok((m, imm))
}

pub(crate) fn txn_id(what: &str, v: Unknown<'_>) -> Res<TxnId> {
    string(what, v)?.parse().map_err(Fail::Client)
}

pub(crate) fn resolution(what: &str, v: Unknown<'_>) -> Res<Resolution> {
    string(what, v)?.parse().map_err(Fail::Client)
}

pub(crate) fn handle(what: &str, v: Unknown<'_>) -> Res<ReceiptHandle> {
    string(what, v)?.parse().map_err(Fail::Client)
}

pub(crate) fn tags(o: &Opts<'_>) -> Res<TagFilter> {
    Ok(o.string("tags")?
        .map_or(TagFilter::All, |t| TagFilter::parse(&t)))
}

// ---- values out -----------------------------------------------------------------------------

fn num(v: u64) -> f64 {
    v as f64
}

/// A stored message, as `send`/`prepare` answer it.
#[napi(object)]
#[derive(Debug)]
pub struct JsSendResult {
    pub msg_id: String,
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: f64,
    /// Log offset of the record.
    pub offset: f64,
    /// The transaction of a half message (16 hex digits).
    pub txn: Option<String>,
}

pub(crate) fn send_result(r: SendResult) -> JsSendResult {
    JsSendResult {
        msg_id: r.msg_id,
        topic: r.topic,
        queue_id: r.queue_id,
        queue_offset: num(r.queue_offset),
        offset: num(r.offset),
        txn: r.txn.map(|t| t.to_string()),
    }
}

/// A message as consumers see it.
#[napi(object)]
pub struct JsMessage {
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: f64,
    pub offset: f64,
    pub msg_id: String,
    pub tag: Option<String>,
    pub keys: Vec<String>,
    pub properties: HashMap<String, String>,
    pub body: Buffer,
    pub born_timestamp: f64,
    pub store_timestamp: f64,
    pub reconsume_times: u32,
    pub flag: i32,
    pub sys_flag: u32,
    pub born_host: String,
    pub store_host: String,
}

impl std::fmt::Debug for JsMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsMessage")
            .field("topic", &self.topic)
            .field("queue_id", &self.queue_id)
            .field("queue_offset", &self.queue_offset)
            .field("msg_id", &self.msg_id)
            .field("body_len", &self.body.len())
            .finish_non_exhaustive()
    }
}

fn host(h: rocklet_core::record::Host) -> String {
    use rocklet_core::record::Host;
    match h {
        Host::V4(ip, port) => format!("{}.{}.{}.{}:{port}", ip[0], ip[1], ip[2], ip[3]),
        other => format!("{other:?}"),
    }
}

pub(crate) fn message(m: Message) -> JsMessage {
    JsMessage {
        topic: m.topic,
        queue_id: m.queue_id,
        queue_offset: num(m.queue_offset),
        offset: num(m.offset),
        msg_id: m.msg_id,
        tag: m.tag,
        keys: m.keys,
        properties: m.properties.into_iter().collect(),
        body: m.body.into(),
        born_timestamp: num(m.born_timestamp),
        store_timestamp: num(m.store_timestamp),
        reconsume_times: m.reconsume_times,
        flag: m.flag,
        sys_flag: m.sys_flag,
        born_host: host(m.born_host),
        store_host: host(m.store_host),
    }
}

/// A received message: the message's fields plus its delivery (`handle`, `attempt`,
/// `visibleAt`).
#[napi(object)]
pub struct JsReceived {
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: f64,
    pub offset: f64,
    pub msg_id: String,
    pub tag: Option<String>,
    pub keys: Vec<String>,
    pub properties: HashMap<String, String>,
    pub body: Buffer,
    pub born_timestamp: f64,
    pub store_timestamp: f64,
    pub reconsume_times: u32,
    pub flag: i32,
    pub sys_flag: u32,
    pub born_host: String,
    pub store_host: String,
    /// Receipt handle for `ack` / `changeInvisible`.
    pub handle: String,
    /// Delivery attempt, from 1.
    pub attempt: u32,
    /// When it becomes visible again unless acked.
    pub visible_at: f64,
}

impl std::fmt::Debug for JsReceived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsReceived")
            .field("handle", &self.handle)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

pub(crate) fn received(r: Received) -> JsReceived {
    let m = message(r.message);
    JsReceived {
        topic: m.topic,
        queue_id: m.queue_id,
        queue_offset: m.queue_offset,
        offset: m.offset,
        msg_id: m.msg_id,
        tag: m.tag,
        keys: m.keys,
        properties: m.properties,
        body: m.body,
        born_timestamp: m.born_timestamp,
        store_timestamp: m.store_timestamp,
        reconsume_times: m.reconsume_times,
        flag: m.flag,
        sys_flag: m.sys_flag,
        born_host: m.born_host,
        store_host: m.store_host,
        handle: r.handle.to_string(),
        attempt: r.attempt,
        visible_at: num(r.visible_at),
    }
}

#[napi(object)]
#[derive(Debug)]
pub struct JsPulled {
    pub messages: Vec<JsMessage>,
    /// The queue's next offset when one queue was read, else absent (see `queues`).
    pub next_offset: Option<f64>,
    /// The queue's end when one queue was read, else absent.
    pub max_offset: Option<f64>,
    /// Each queue read, in order.
    pub queues: Vec<JsQueueRead>,
}

#[napi(object)]
#[derive(Debug)]
pub struct JsQueueRead {
    pub queue_id: u32,
    pub next_offset: f64,
    pub max_offset: f64,
}

pub(crate) fn pulled(p: rocklet_embed::Pulled, one_queue: bool) -> JsPulled {
    let single = p.queues.first().filter(|_| one_queue).copied();
    JsPulled {
        messages: p.messages.into_iter().map(message).collect(),
        next_offset: single.map(|q| num(q.next_offset)),
        max_offset: single.map(|q| num(q.max_offset)),
        queues: p
            .queues
            .into_iter()
            .map(|q| JsQueueRead {
                queue_id: q.queue_id,
                next_offset: num(q.next_offset),
                max_offset: num(q.max_offset),
            })
            .collect(),
    }
}

#[napi(object)]
#[derive(Debug)]
pub struct JsEnded {
    pub txn: String,
    pub resolution: String,
    pub duplicate: bool,
}

#[napi(object)]
#[derive(Debug)]
pub struct JsInvisibleChanged {
    pub handle: String,
    pub visible_at: f64,
}

/// A check of a transaction, for the producer group's checker.
#[napi(object)]
#[derive(Debug)]
pub struct JsCheck {
    pub group: String,
    pub txn: String,
    /// Which check of this transaction, from 1.
    pub check: u32,
    /// Broker time when the check was sent.
    pub at: f64,
    /// The half message, as it will be seen when committed.
    pub message: JsMessage,
}

pub(crate) fn check(c: CheckRequest, at: u64) -> JsCheck {
    JsCheck {
        group: c.group,
        txn: c.txn.to_string(),
        check: c.check,
        at: num(at),
        message: message(c.message),
    }
}

#[napi(object)]
#[derive(Debug)]
pub struct JsTrace {
    pub at: f64,
    /// half_stored, committed, rolled_back, check_sent, delivered, … (TraceKind::as_str).
    pub kind: String,
    pub offset: f64,
    pub topic: String,
    pub detail: String,
}

pub(crate) fn trace(t: TraceEvent) -> JsTrace {
    JsTrace {
        at: num(t.at),
        kind: t.kind.as_str().into(),
        offset: num(t.offset),
        topic: t.topic,
        detail: t.detail,
    }
}

#[napi(object)]
#[derive(Debug)]
pub struct JsAvailable {
    pub topic: String,
    pub queue_id: u32,
}

#[napi(object)]
#[derive(Debug)]
pub struct JsPendingTxn {
    pub txn: String,
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
    pub checks: u32,
    /// Next check; absent while parked (no checker for the group).
    pub next_check: Option<f64>,
}

pub(crate) fn pending_txn(p: PendingTxnInfo) -> JsPendingTxn {
    JsPendingTxn {
        txn: p.txn.to_string(),
        group: p.group,
        topic: p.topic,
        queue_id: p.queue_id,
        checks: p.checks,
        next_check: p.next_check.map(num),
    }
}

#[napi(object)]
#[derive(Debug)]
pub struct JsPendingDelay {
    pub offset: f64,
    pub topic: String,
    pub queue_id: u32,
    pub due: f64,
}

pub(crate) fn pending_delay(p: PendingDelayInfo) -> JsPendingDelay {
    JsPendingDelay {
        offset: num(p.offset),
        topic: p.topic,
        queue_id: p.queue_id,
        due: num(p.due),
    }
}

#[napi(object)]
#[derive(Debug)]
pub struct JsQueueInfo {
    pub queue_id: u32,
    /// Next queue offset.
    pub next_offset: f64,
    /// Messages consumers can see.
    pub visible: f64,
}

#[napi(object)]
#[derive(Debug)]
pub struct JsTopicInfo {
    pub name: String,
    pub queues: Vec<JsQueueInfo>,
}

pub(crate) fn topic_info(t: TopicInfo) -> JsTopicInfo {
    JsTopicInfo {
        name: t.name,
        queues: t
            .queues
            .into_iter()
            .map(|(queue_id, next, visible)| JsQueueInfo {
                queue_id,
                next_offset: num(next),
                visible: num(visible),
            })
            .collect(),
    }
}

#[napi(object)]
#[derive(Debug)]
pub struct JsCqUnit {
    pub offset: f64,
    pub size: u32,
    pub tag_hash: i32,
}

pub(crate) fn cq_unit(u: CqUnit) -> JsCqUnit {
    JsCqUnit {
        offset: num(u.offset),
        size: u.size,
        tag_hash: u.tag_hash,
    }
}

/// Core counters, camelCase.
pub(crate) fn stats(s: Stats) -> HashMap<String, f64> {
    stats_fields(&s)
        .into_iter()
        .map(|(k, v)| (camel_case(k), num(v)))
        .collect()
}

#[napi(object)]
#[derive(Debug)]
pub struct JsCut {
    pub offset: f64,
    pub bytes: f64,
    pub reason: String,
    /// The file under `quarantine/` keeping the cut bytes that were not zero.
    pub kept_as: Option<String>,
}

#[napi(object)]
#[derive(Debug)]
pub struct JsQuarantined {
    pub offset: f64,
    pub bytes: f64,
    pub reason: String,
    /// The file under `quarantine/` holding the damaged bytes.
    pub name: String,
}

/// What recovery found when the broker opened.
#[napi(object)]
#[derive(Debug)]
pub struct JsRecoveryReport {
    pub segments: u32,
    pub records: f64,
    pub bytes_scanned: f64,
    pub bytes_truncated: f64,
    pub bytes_quarantined: f64,
    pub cuts: Vec<JsCut>,
    pub quarantined: Vec<JsQuarantined>,
}

pub(crate) fn recovery(r: &RecoveryReport) -> JsRecoveryReport {
    JsRecoveryReport {
        segments: u32::try_from(r.segments).unwrap_or(u32::MAX),
        records: num(r.records),
        bytes_scanned: num(r.bytes_scanned),
        bytes_truncated: num(r.bytes_truncated),
        bytes_quarantined: num(r.bytes_quarantined()),
        cuts: r
            .cuts
            .iter()
            .map(|c| JsCut {
                offset: num(c.offset),
                bytes: num(c.bytes),
                reason: c.reason.clone(),
                kept_as: c.kept_as.clone(),
            })
            .collect(),
        quarantined: r
            .quarantined
            .iter()
            .map(|q| JsQuarantined {
                offset: num(q.offset),
                bytes: num(q.bytes),
                reason: q.reason.clone(),
                name: q.name.clone(),
            })
            .collect(),
    }
}
