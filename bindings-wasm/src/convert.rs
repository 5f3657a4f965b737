//! Every conversion between JS values and core types, in one place.
//!
//! JS → core: plain objects read with serde-wasm-bindgen into the `Js*` input structs, then
//! turned into core requests. Core → JS: the `Out*` mirror structs, serialized as plain
//! objects (camelCase keys, `null` for absent values, `Uint8Array` for bytes, numbers for
//! milliseconds and offsets). Transaction ids travel as the core's 16 hex digits, receipt
//! handles as the core's string form.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use rocklet_core::record::{self, Decoded, RecordView};
use rocklet_core::{
    topic, ClientError, Config, CqUnit, Delay, Message, NewMessage, Output, PendingDelayInfo,
    PendingTxnInfo, ReceiptHandle, Received, RecoveryReport, Reply, Resolution, SendResult, Stats,
    TagFilter, TopicInfo, TraceEvent, TxnId,
};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use wasm_bindgen::{JsCast, JsValue};

use crate::error;

// ---- helpers ------------------------------------------------------------------------------

/// Serializes a mirror struct as a plain JS object.
pub fn to_js<T: Serialize + ?Sized>(value: &T) -> Result<JsValue, JsValue> {
    let ser = serde_wasm_bindgen::Serializer::new()
        .serialize_maps_as_objects(true)
        .serialize_missing_as_null(true);
    value
        .serialize(&ser)
        .map_err(|e| error::js_error("INTERNAL", &alloc::format!("cannot convert to JS: {e}")))
}

fn from_js<T: de::DeserializeOwned>(what: &str, value: JsValue) -> Result<T, JsValue> {
    known_keys::<T>(&value).map_err(|e| error::argument(what, e))?;
    serde_wasm_bindgen::from_value(value).map_err(|e| error::argument(what, e))
}

/// The field names a derived `Deserialize` struct asks for (serde hands them to
/// `deserialize_struct`); empty for anything else.
fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Probe<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Probe<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("probe"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("probe"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// serde-wasm-bindgen reads only the fields a struct declares, so a misspelt key would be
/// silently ignored: refuse keys of a plain object (or of each object of an array) that the
/// target struct does not have.
fn known_keys<'de, T: Deserialize<'de>>(value: &JsValue) -> Result<(), String> {
    let check = |fields: &[&str], v: &JsValue| -> Result<(), String> {
        if fields.is_empty() || !v.is_object() || js_sys::Array::is_array(v) {
            return Ok(());
        }
        for key in js_sys::Object::keys::<JsValue>(v.unchecked_ref()).iter() {
            let key = key.as_string().unwrap_or_default();
            if !fields.contains(&key.as_str()) {
                return Err(alloc::format!(
                    "unknown field `{key}`, expected one of {}",
                    fields.join(", ")
                ));
            }
        }
        Ok(())
    };
    check(field_names::<T>(), value)
}

/// Milliseconds (or an offset) from a JS number: finite, whole, not negative.
pub fn millis(what: &str, v: f64) -> Result<u64, JsValue> {
    if v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_991.0 {
        Ok(v as u64)
    } else {
        Err(error::argument(
            what,
            alloc::format!("{v} is not a whole number of milliseconds >= 0"),
        ))
    }
}

/// A u64 for JS (milliseconds and offsets stay far below 2^53).
#[allow(clippy::cast_precision_loss)]
pub fn number(v: u64) -> f64 {
    v as f64
}

/// A transaction id from its 16 hex digits (`MALFORMED_TRANSACTION_ID` otherwise).
pub fn txn_id(s: &str) -> Result<TxnId, JsValue> {
    s.parse().map_err(|e: ClientError| error::client(&e))
}

/// `commit`, `rollback` or `unknown`.
pub fn resolution(s: &str) -> Result<Resolution, JsValue> {
    s.parse().map_err(|e: ClientError| error::client(&e))
}

/// A receipt handle from its string form.
pub fn handle(s: &str) -> Result<ReceiptHandle, JsValue> {
    s.parse().map_err(|e: ClientError| error::client(&e))
}

// ---- inputs -------------------------------------------------------------------------------

/// The broker configuration: a JSON string or a plain object with the core `Config`'s
/// snake_case fields; absent fields keep the core's defaults (RocketMQ's).
pub fn config(value: JsValue) -> Result<Config, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(Config::default());
    }
    let value = match value.as_string() {
        Some(json) => js_sys::JSON::parse(&json)
            .map_err(|_| error::config("the config string is not JSON"))?,
        None => value,
    };
    known_keys::<Config>(&value).map_err(error::config)?;
    serde_wasm_bindgen::from_value(value).map_err(error::config)
}

/// A message body: a string (sent as its UTF-8 bytes) or a `Uint8Array`.
struct Body(Vec<u8>);

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Body;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a Uint8Array")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Body, E> {
                Ok(Body(v.as_bytes().to_vec()))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Body, E> {
                Ok(Body(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Body, E> {
                Ok(Body(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// User properties: a plain object of string values, in its key order.
#[derive(Default)]
struct Props(Vec<(String, String)>);

impl<'de> Deserialize<'de> for Props {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Props;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of string values")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Props, E> {
                Ok(Props::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Props, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    out.push((k, v));
                }
                Ok(Props(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A message as JS sends it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JsMessage {
    topic: String,
    body: Body,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    keys: Option<Vec<String>>,
    #[serde(default)]
    properties: Option<Props>,
    #[serde(default)]
    queue_id: Option<u32>,
    #[serde(default)]
    message_id: Option<String>,
    #[serde(default)]
    message_group: Option<String>,
    /// RocketMQ delay level (1..=N).
    #[serde(default)]
    delay_level: Option<u32>,
    /// Absolute delivery time (TIMER_DELIVER_MS).
    #[serde(default)]
    deliver_at_ms: Option<u64>,
    /// Delivery after this many ms (TIMER_DELAY_MS).
    #[serde(default)]
    delay_ms: Option<u64>,
    #[serde(default)]
    born_timestamp: Option<u64>,
    #[serde(default)]
    flag: Option<i32>,
}

impl JsMessage {
    fn into_core(self) -> Result<NewMessage, JsValue> {
        let delays = [
            self.delay_level.map(Delay::Level),
            self.deliver_at_ms.map(Delay::At),
            self.delay_ms.map(Delay::After),
        ];
        let mut given = delays.into_iter().flatten();
        let delay = given.next();
        if given.next().is_some() {
            return Err(error::argument(
                "message",
                "give at most one of delayLevel, deliverAtMs, delayMs",
            ));
        }
        Ok(NewMessage {
            topic: self.topic,
            body: self.body.0,
            tag: self.tag,
            keys: self.keys.unwrap_or_default(),
            properties: self.properties.unwrap_or_default().0,
            queue_id: self.queue_id,
            message_id: self.message_id,
            delay,
            message_group: self.message_group,
            born_timestamp: self.born_timestamp,
            born_host: None,
            flag: self.flag.unwrap_or(0),
        })
    }
}

/// `{topic, body, tag?, keys?, properties?, queueId?, messageId?, messageGroup?, delayLevel?,
/// deliverAtMs?, delayMs?, bornTimestamp?, flag?}`.
pub fn message(value: JsValue) -> Result<NewMessage, JsValue> {
    from_js::<JsMessage>("message", value)?.into_core()
}

/// An array of messages.
pub fn messages(value: JsValue) -> Result<Vec<NewMessage>, JsValue> {
    if !js_sys::Array::is_array(&value) {
        return Err(error::argument("messages", "expected an array of messages"));
    }
    js_sys::Array::from(&value).iter().map(message).collect()
}

/// What `pull` takes.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PullArgs {
    pub group: String,
    pub topic: String,
    /// One queue; absent = every queue of the topic.
    #[serde(default)]
    pub queue_id: Option<u32>,
    /// From here; absent = the group's committed offset.
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub max: Option<u32>,
    /// Tag expression (`*`, `a || b`).
    #[serde(default)]
    pub tags: Option<String>,
    /// Commit the offset after what is returned.
    #[serde(default)]
    pub auto_commit: Option<bool>,
}

pub fn pull_args(value: JsValue) -> Result<PullArgs, JsValue> {
    from_js("pull", value)
}

/// What `receive` takes.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiveArgs {
    pub group: String,
    pub topic: String,
    #[serde(default)]
    pub queue_id: Option<u32>,
    #[serde(default)]
    pub max: Option<u32>,
    pub invisible_ms: u64,
    #[serde(default)]
    pub tags: Option<String>,
}

pub fn receive_args(value: JsValue) -> Result<ReceiveArgs, JsValue> {
    from_js("receive", value)
}

/// Options of `end`: `{fromCheck?, group?}`.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndOptions {
    #[serde(default)]
    pub from_check: Option<bool>,
    #[serde(default)]
    pub group: Option<String>,
}

pub fn end_options(value: JsValue) -> Result<EndOptions, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(EndOptions::default());
    }
    from_js("end options", value)
}

pub fn tag_filter(tags: Option<&str>) -> TagFilter {
    tags.map_or(TagFilter::All, TagFilter::parse)
}

// ---- outputs ------------------------------------------------------------------------------

/// Bytes, serialized as a `Uint8Array`.
struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

/// Pairs, serialized as a plain object in their order.
struct Pairs<'a>(&'a [(String, String)]);

impl Serialize for Pairs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutSent<'a> {
    msg_id: &'a str,
    topic: &'a str,
    queue_id: u32,
    queue_offset: u64,
    offset: u64,
    /// Only for a half message: its transaction id.
    txn: Option<String>,
}

fn sent(r: &SendResult) -> OutSent<'_> {
    OutSent {
        msg_id: &r.msg_id,
        topic: &r.topic,
        queue_id: r.queue_id,
        queue_offset: r.queue_offset,
        offset: r.offset,
        txn: r.txn.map(|t| t.to_string()),
    }
}

pub fn send_result(r: &SendResult) -> Result<JsValue, JsValue> {
    to_js(&sent(r))
}

pub fn send_results(rs: &[SendResult]) -> Result<JsValue, JsValue> {
    to_js(&rs.iter().map(sent).collect::<Vec<_>>())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutMessage<'a> {
    topic: &'a str,
    queue_id: u32,
    queue_offset: u64,
    offset: u64,
    msg_id: &'a str,
    tag: Option<&'a str>,
    keys: &'a [String],
    properties: Pairs<'a>,
    /// The body as text (invalid UTF-8 replaced), for display.
    body: String,
    body_bytes: Bytes<'a>,
    born_timestamp: u64,
    store_timestamp: u64,
    reconsume_times: u32,
    flag: i32,
    sys_flag: u32,
    born_host: String,
    store_host: String,
}

fn message_out(m: &Message) -> OutMessage<'_> {
    OutMessage {
        topic: &m.topic,
        queue_id: m.queue_id,
        queue_offset: m.queue_offset,
        offset: m.offset,
        msg_id: &m.msg_id,
        tag: m.tag.as_deref(),
        keys: &m.keys,
        properties: Pairs(&m.properties),
        body: String::from_utf8_lossy(&m.body).into_owned(),
        body_bytes: Bytes(&m.body),
        born_timestamp: m.born_timestamp,
        store_timestamp: m.store_timestamp,
        reconsume_times: m.reconsume_times,
        flag: m.flag,
        sys_flag: m.sys_flag,
        born_host: m.born_host.to_string(),
        store_host: m.store_host.to_string(),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutReceived<'a> {
    message: OutMessage<'a>,
    handle: String,
    attempt: u32,
    visible_at: u64,
}

fn received_out(r: &Received) -> OutReceived<'_> {
    OutReceived {
        message: message_out(&r.message),
        handle: r.handle.to_string(),
        attempt: r.attempt,
        visible_at: r.visible_at,
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutError {
    code: &'static str,
    message: String,
}

/// A reply, tagged by `type`: sent, ended, pulled, offsetCommitted, received, acked,
/// invisibleChanged, forwarded, error.
#[derive(Serialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
enum OutReply<'a> {
    Sent {
        results: Vec<OutSent<'a>>,
    },
    Ended {
        txn: String,
        resolution: &'static str,
        duplicate: bool,
    },
    Pulled {
        messages: Vec<OutMessage<'a>>,
        next_offset: u64,
        max_offset: u64,
    },
    OffsetCommitted,
    Received {
        messages: Vec<OutReceived<'a>>,
    },
    Acked,
    InvisibleChanged {
        handle: String,
        visible_at: u64,
    },
    Forwarded,
    Error(OutError),
}

fn reply_out(r: &Reply) -> OutReply<'_> {
    match r {
        Reply::Sent(rs) => OutReply::Sent {
            results: rs.iter().map(sent).collect(),
        },
        Reply::Ended {
            txn,
            resolution,
            duplicate,
        } => OutReply::Ended {
            txn: txn.to_string(),
            resolution: resolution.as_str(),
            duplicate: *duplicate,
        },
        Reply::Pulled {
            messages,
            next_offset,
            max_offset,
        } => OutReply::Pulled {
            messages: messages.iter().map(message_out).collect(),
            next_offset: *next_offset,
            max_offset: *max_offset,
        },
        Reply::OffsetCommitted => OutReply::OffsetCommitted,
        Reply::Received(rs) => OutReply::Received {
            messages: rs.iter().map(received_out).collect(),
        },
        Reply::Acked => OutReply::Acked,
        Reply::InvisibleChanged { handle, visible_at } => OutReply::InvisibleChanged {
            handle: handle.to_string(),
            visible_at: *visible_at,
        },
        Reply::Forwarded => OutReply::Forwarded,
        Reply::Error(e) => OutReply::Error(OutError {
            code: e.code(),
            message: e.to_string(),
        }),
    }
}

/// `{type, ...}` of any reply.
pub fn reply(r: &Reply) -> Result<JsValue, JsValue> {
    to_js(&reply_out(r))
}

pub fn ended(txn: TxnId, resolution: Resolution, duplicate: bool) -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    struct Ended {
        txn: String,
        resolution: &'static str,
        duplicate: bool,
    }
    to_js(&Ended {
        txn: txn.to_string(),
        resolution: resolution.as_str(),
        duplicate,
    })
}

pub fn pulled(p: &rocklet_embed::Pulled, one_queue: bool) -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Queue {
        queue_id: u32,
        next_offset: u64,
        max_offset: u64,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Pulled<'a> {
        messages: Vec<OutMessage<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_offset: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_offset: Option<u64>,
        queues: Vec<Queue>,
    }
    let single = p.queues.first().filter(|_| one_queue);
    to_js(&Pulled {
        messages: p.messages.iter().map(message_out).collect(),
        next_offset: single.map(|q| q.next_offset),
        max_offset: single.map(|q| q.max_offset),
        queues: p
            .queues
            .iter()
            .map(|q| Queue {
                queue_id: q.queue_id,
                next_offset: q.next_offset,
                max_offset: q.max_offset,
            })
            .collect(),
    })
}

pub fn received(rs: &[Received]) -> Result<JsValue, JsValue> {
    to_js(&rs.iter().map(received_out).collect::<Vec<_>>())
}

pub fn invisible_changed(handle: &ReceiptHandle, visible_at: u64) -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Changed {
        handle: String,
        visible_at: u64,
    }
    to_js(&Changed {
        handle: handle.to_string(),
        visible_at,
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutTrace<'a> {
    at: u64,
    kind: &'static str,
    offset: u64,
    topic: &'a str,
    detail: &'a str,
}

fn trace_out(t: &TraceEvent) -> OutTrace<'_> {
    OutTrace {
        at: t.at,
        kind: t.kind.as_str(),
        offset: t.offset,
        topic: &t.topic,
        detail: &t.detail,
    }
}

/// An output, tagged by `type`: `reply`, `check`, `available`, `trace` or `failed`.
#[derive(Serialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
enum OutOutput<'a> {
    Reply {
        id: u64,
        reply: OutReply<'a>,
    },
    /// Ask a producer of `group`; answer with `end(txn, answer, {fromCheck: true})`.
    Check {
        group: &'a str,
        txn: String,
        check: u32,
        message: OutMessage<'a>,
    },
    Available {
        topic: &'a str,
        queue_id: u32,
    },
    Trace(OutTrace<'a>),
    /// The sync that had to make request `id` durable failed; the broker takes nothing more.
    Failed {
        id: u64,
        reason: &'a str,
    },
}

fn output_out(o: &Output) -> OutOutput<'_> {
    match o {
        Output::Reply { id, reply } => OutOutput::Reply {
            id: *id,
            reply: reply_out(reply),
        },
        Output::Check(c) => OutOutput::Check {
            group: &c.group,
            txn: c.txn.to_string(),
            check: c.check,
            message: message_out(&c.message),
        },
        Output::Available { topic, queue_id } => OutOutput::Available {
            topic,
            queue_id: *queue_id,
        },
        Output::Trace(t) => OutOutput::Trace(trace_out(t)),
        Output::Failed { id, reason } => OutOutput::Failed { id: *id, reason },
    }
}

pub fn outputs(os: &[Output]) -> Result<JsValue, JsValue> {
    to_js(&os.iter().map(output_out).collect::<Vec<_>>())
}

pub fn topics(ts: &[TopicInfo]) -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Queue {
        queue_id: u32,
        /// Next queue offset (messages stored, visible or not).
        next_offset: u64,
        /// Messages consumers can see.
        visible: u64,
    }
    #[derive(Serialize)]
    struct Topic<'a> {
        name: &'a str,
        queues: Vec<Queue>,
    }
    let out: Vec<Topic<'_>> = ts
        .iter()
        .map(|t| Topic {
            name: &t.name,
            queues: t
                .queues
                .iter()
                .map(|&(queue_id, next_offset, visible)| Queue {
                    queue_id,
                    next_offset,
                    visible,
                })
                .collect(),
        })
        .collect();
    to_js(&out)
}

pub fn pending_transactions(ps: &[PendingTxnInfo]) -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Pending<'a> {
        txn: String,
        /// Log offset of the half message (the transaction id as a number).
        offset: u64,
        group: &'a str,
        topic: &'a str,
        queue_id: u32,
        checks: u32,
        /// `null` while parked: no producer of the group online.
        next_check: Option<u64>,
    }
    let out: Vec<Pending<'_>> = ps
        .iter()
        .map(|p| Pending {
            txn: p.txn.to_string(),
            offset: p.txn.0,
            group: &p.group,
            topic: &p.topic,
            queue_id: p.queue_id,
            checks: p.checks,
            next_check: p.next_check,
        })
        .collect();
    to_js(&out)
}

pub fn pending_delays(ps: &[PendingDelayInfo]) -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Pending<'a> {
        offset: u64,
        topic: &'a str,
        queue_id: u32,
        due: u64,
    }
    let out: Vec<Pending<'_>> = ps
        .iter()
        .map(|p| Pending {
            offset: p.offset,
            topic: &p.topic,
            queue_id: p.queue_id,
            due: p.due,
        })
        .collect();
    to_js(&out)
}

pub fn consume_queue(units: &[CqUnit]) -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Unit<'a> {
        offset: u64,
        size: u32,
        tag_hash: i32,
        /// The 20 bytes RocketMQ's ConsumeQueue file holds for it.
        bytes: Bytes<'a>,
    }
    let bytes: Vec<[u8; 20]> = units.iter().map(CqUnit::to_rocketmq_bytes).collect();
    let out: Vec<Unit<'_>> = units
        .iter()
        .zip(&bytes)
        .map(|(u, b)| Unit {
            offset: u.offset,
            size: u.size,
            tag_hash: u.tag_hash,
            bytes: Bytes(b),
        })
        .collect();
    to_js(&out)
}

pub fn stats(s: &Stats) -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Out {
        messages_stored: u64,
        halves_stored: u64,
        committed: u64,
        rolled_back: u64,
        unknown_answers: u64,
        checks_sent: u64,
        checks_answered: u64,
        check_max_reached: u64,
        halves_expired: u64,
        delayed_stored: u64,
        delayed_delivered: u64,
        received: u64,
        acked: u64,
        redelivered: u64,
        dead_lettered: u64,
        syncs: u64,
        client_errors: u64,
    }
    to_js(&Out {
        messages_stored: s.messages_stored,
        halves_stored: s.halves_stored,
        committed: s.committed,
        rolled_back: s.rolled_back,
        unknown_answers: s.unknown_answers,
        checks_sent: s.checks_sent,
        checks_answered: s.checks_answered,
        check_max_reached: s.check_max_reached,
        halves_expired: s.halves_expired,
        delayed_stored: s.delayed_stored,
        delayed_delivered: s.delayed_delivered,
        received: s.received,
        acked: s.acked,
        redelivered: s.redelivered,
        dead_lettered: s.dead_lettered,
        syncs: s.syncs,
        client_errors: s.client_errors,
    })
}

pub fn recovery_report(r: &RecoveryReport) -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Cut<'a> {
        offset: u64,
        bytes: u64,
        reason: &'a str,
        kept_as: Option<&'a str>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Quarantined<'a> {
        offset: u64,
        bytes: u64,
        reason: &'a str,
        name: &'a str,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Out<'a> {
        segments: usize,
        records: u64,
        bytes_scanned: u64,
        bytes_truncated: u64,
        bytes_quarantined: u64,
        cuts: Vec<Cut<'a>>,
        quarantined: Vec<Quarantined<'a>>,
    }
    to_js(&Out {
        segments: r.segments,
        records: r.records,
        bytes_scanned: r.bytes_scanned,
        bytes_truncated: r.bytes_truncated,
        bytes_quarantined: r.bytes_quarantined(),
        cuts: r
            .cuts
            .iter()
            .map(|c| Cut {
                offset: c.offset,
                bytes: c.bytes,
                reason: &c.reason,
                kept_as: c.kept_as.as_deref(),
            })
            .collect(),
        quarantined: r
            .quarantined
            .iter()
            .map(|q| Quarantined {
                offset: q.offset,
                bytes: q.bytes,
                reason: &q.reason,
                name: &q.name,
            })
            .collect(),
    })
}

pub fn config_out(c: &Config) -> Result<JsValue, JsValue> {
    to_js(c)
}

pub fn system_topics() -> Result<JsValue, JsValue> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Out {
        half: &'static str,
        op: &'static str,
        check_max: &'static str,
        schedule: &'static str,
        timer: &'static str,
        delay_op: &'static str,
        offsets: &'static str,
        revive: &'static str,
    }
    to_js(&Out {
        half: topic::HALF,
        op: topic::OP,
        check_max: topic::CHECK_MAX,
        schedule: topic::SCHEDULE,
        timer: topic::TIMER,
        delay_op: topic::DELAY_OP,
        offsets: topic::OFFSETS,
        revive: topic::REVIVE,
    })
}

// ---- commit-log records, field by field -----------------------------------------------------

/// A field value: a number or a text.
#[derive(Serialize)]
#[serde(untagged)]
enum Value {
    U(u64),
    I(i64),
    S(String),
}

/// One field of a record: its RocketMQ name, where it is and how long, what it holds.
#[derive(Serialize)]
struct Field {
    name: &'static str,
    at: usize,
    len: usize,
    value: Value,
}

#[derive(Serialize)]
struct Property<'a> {
    key: &'a str,
    value: &'a str,
    at: usize,
    len: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutRecord<'a> {
    offset: u64,
    size: usize,
    topic: &'a str,
    /// SYSFLAG's transaction type: `not`, `prepared`, `commit` or `rollback`.
    transaction_type: &'static str,
    body: String,
    properties: Vec<Property<'a>>,
    fields: Vec<Field>,
    bytes: Bytes<'a>,
}

fn transaction_type(sys: u32) -> &'static str {
    match sys & record::sys_flag::TRANSACTION_TYPE_MASK {
        record::sys_flag::TRANSACTION_PREPARED_TYPE => "prepared",
        record::sys_flag::TRANSACTION_COMMIT_TYPE => "commit",
        record::sys_flag::TRANSACTION_ROLLBACK_TYPE => "rollback",
        _ => "not",
    }
}

/// Lays the decoded record out as its fields, in the order and sizes of the layout drawn in
/// `rocklet_core::record` (RocketMQ's CommitLog): every length comes from the decoded view.
fn fields<'a>(r: &RecordView<'a>) -> (Vec<Field>, Vec<Property<'a>>) {
    let h = &r.header;
    let v6 = |bit| if h.sys_flag & bit != 0 { 20 } else { 8 };
    let mut out = Vec::with_capacity(24);
    let mut at = 0;
    let mut push = |out: &mut Vec<Field>, name, len, value| {
        out.push(Field {
            name,
            at,
            len,
            value,
        });
        at += len;
        at
    };
    push(&mut out, "TOTALSIZE", 4, Value::U(r.total_size.into()));
    push(
        &mut out,
        "MAGICCODE",
        4,
        Value::S(alloc::format!("0x{:08X}", record::MESSAGE_MAGIC)),
    );
    push(&mut out, "BODYCRC", 4, Value::U(r.body_crc.into()));
    push(&mut out, "QUEUEID", 4, Value::U(h.queue_id.into()));
    push(&mut out, "FLAG", 4, Value::I(h.flag.into()));
    push(&mut out, "QUEUEOFFSET", 8, Value::U(h.queue_offset));
    push(&mut out, "PHYSICALOFFSET", 8, Value::U(h.phys_offset));
    push(
        &mut out,
        "SYSFLAG",
        4,
        Value::S(alloc::format!(
            "0x{:X} ({})",
            h.sys_flag,
            transaction_type(h.sys_flag)
        )),
    );
    push(&mut out, "BORNTIMESTAMP", 8, Value::U(h.born_timestamp));
    push(
        &mut out,
        "BORNHOST",
        v6(record::sys_flag::BORNHOST_V6),
        Value::S(h.born_host.to_string()),
    );
    push(&mut out, "STORETIMESTAMP", 8, Value::U(h.store_timestamp));
    push(
        &mut out,
        "STOREHOST",
        v6(record::sys_flag::STOREHOST_V6),
        Value::S(h.store_host.to_string()),
    );
    push(
        &mut out,
        "RECONSUMETIMES",
        4,
        Value::U(h.reconsume_times.into()),
    );
    push(
        &mut out,
        "PREPARED_TRANSACTION_OFFSET",
        8,
        Value::U(h.prepared_offset),
    );
    push(&mut out, "BODYLENGTH", 4, Value::U(r.body.len() as u64));
    push(
        &mut out,
        "BODY",
        r.body.len(),
        Value::S(String::from_utf8_lossy(r.body).into_owned()),
    );
    push(&mut out, "TOPICLENGTH", 1, Value::U(r.topic.len() as u64));
    push(&mut out, "TOPIC", r.topic.len(), Value::S(r.topic.into()));
    let props_len = r.properties.len() + record::CRC_RESERVED;
    let props_at = push(&mut out, "PROPERTIESLENGTH", 2, Value::U(props_len as u64));
    push(
        &mut out,
        "PROPERTIES",
        r.properties.len(),
        Value::S(alloc::format!("{} pairs", r.props().count())),
    );
    push(
        &mut out,
        "PROPERTIES (__CRC32#)",
        record::CRC_RESERVED,
        Value::S("CRC-32 of every byte before it".into()),
    );
    let mut props = Vec::new();
    let mut p = props_at;
    for (key, value) in r.props() {
        let len = key.len() + value.len() + 2;
        props.push(Property {
            key,
            value,
            at: p,
            len,
        });
        p += len;
    }
    (out, props)
}

/// A record at a log offset, decoded (with its CRCs verified) field by field.
pub fn decoded_record(offset: u64, bytes: &[u8]) -> Result<JsValue, JsValue> {
    let corrupt = |why: &dyn fmt::Display| {
        error::js_error("CORRUPTED", &alloc::format!("record at {offset}: {why}"))
    };
    let view = match record::decode(bytes, u32::MAX) {
        Ok(Decoded::Record(v)) => v,
        Ok(Decoded::Blank { len }) => {
            return Err(corrupt(&alloc::format!(
                "an end-of-segment blank of {len} bytes"
            )))
        }
        Ok(Decoded::Repaired { len }) => {
            return Err(corrupt(&alloc::format!(
                "a repair blank over {len} damaged bytes"
            )))
        }
        Ok(Decoded::Incomplete { .. }) => {
            return Err(corrupt(&"the bytes end before the record does"))
        }
        Err(e) => return Err(corrupt(&e)),
    };
    let (fields, properties) = fields(&view);
    to_js(&OutRecord {
        offset,
        size: view.total_size as usize,
        topic: view.topic,
        transaction_type: transaction_type(view.header.sys_flag),
        body: String::from_utf8_lossy(view.body).into_owned(),
        properties,
        fields,
        bytes: Bytes(&bytes[..view.total_size as usize]),
    })
}
