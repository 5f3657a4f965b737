//! The plain views of core values that the JS bindings hand out: serde `Serialize` mirrors
//! (camelCase keys, `null` for absent values, bytes as bytes, numbers for milliseconds and
//! offsets, transaction ids as 16 hex digits, receipt handles as strings). A binding turns a
//! view into its language's value once (wasm: serde-wasm-bindgen); the names and shapes are
//! decided here, once.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use rocklet_core::record::{self, Decoded, RecordView};
use rocklet_core::{
    topic, CheckRequest, CqUnit, Message, Output, PendingDelayInfo, PendingTxnInfo, ReceiptHandle,
    Received, RecoveryReport, Reply, Resolution, SendResult, Stats, TopicInfo, TraceEvent, TxnId,
};
use serde::ser::{self, SerializeMap, Serializer};
use serde::Serialize;

use crate::ops::Pulled;

/// Bytes, serialized as bytes (a `Uint8Array` in JS).
struct Bytes<T>(T);

impl<T: AsRef<[u8]>> Serialize for Bytes<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0.as_ref())
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

pub fn send_result(r: &SendResult) -> impl Serialize + '_ {
    sent(r)
}

pub fn send_results(rs: &[SendResult]) -> impl Serialize + '_ {
    rs.iter().map(sent).collect::<Vec<_>>()
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
    body_bytes: Bytes<&'a [u8]>,
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
pub fn reply(r: &Reply) -> impl Serialize + '_ {
    reply_out(r)
}

pub fn ended(txn: TxnId, resolution: Resolution, duplicate: bool) -> impl Serialize {
    #[derive(Serialize)]
    struct Ended {
        txn: String,
        resolution: &'static str,
        duplicate: bool,
    }
    Ended {
        txn: txn.to_string(),
        resolution: resolution.as_str(),
        duplicate,
    }
}

pub fn pulled(p: &Pulled, one_queue: bool) -> impl Serialize + '_ {
    pulled_with(p, one_queue, message_out)
}

/// A pull with each message in the shape `message` gives it.
fn pulled_with<'a, M: Serialize + 'a>(
    p: &'a Pulled,
    one_queue: bool,
    message: fn(&'a Message) -> M,
) -> impl Serialize + 'a {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Queue {
        queue_id: u32,
        next_offset: u64,
        max_offset: u64,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Out<M> {
        messages: Vec<M>,
        #[serde(skip_serializing_if = "Option::is_none")]
        next_offset: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_offset: Option<u64>,
        queues: Vec<Queue>,
    }
    let single = p.queues.first().filter(|_| one_queue);
    Out {
        messages: p.messages.iter().map(message).collect(),
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
    }
}

pub fn received(rs: &[Received]) -> impl Serialize + '_ {
    rs.iter().map(received_out).collect::<Vec<_>>()
}

pub fn invisible_changed(handle: &ReceiptHandle, visible_at: u64) -> impl Serialize {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Changed {
        handle: String,
        visible_at: u64,
    }
    Changed {
        handle: handle.to_string(),
        visible_at,
    }
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

pub fn outputs(os: &[Output]) -> impl Serialize + '_ {
    os.iter().map(output_out).collect::<Vec<_>>()
}

pub fn topics(ts: &[TopicInfo]) -> impl Serialize + '_ {
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
    ts.iter()
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
        .collect::<Vec<_>>()
}

pub fn pending_transactions(ps: &[PendingTxnInfo]) -> impl Serialize + '_ {
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
    ps.iter()
        .map(|p| Pending {
            txn: p.txn.to_string(),
            offset: p.txn.0,
            group: &p.group,
            topic: &p.topic,
            queue_id: p.queue_id,
            checks: p.checks,
            next_check: p.next_check,
        })
        .collect::<Vec<_>>()
}

pub fn pending_delays(ps: &[PendingDelayInfo]) -> impl Serialize + '_ {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Pending<'a> {
        offset: u64,
        topic: &'a str,
        queue_id: u32,
        due: u64,
    }
    ps.iter()
        .map(|p| Pending {
            offset: p.offset,
            topic: &p.topic,
            queue_id: p.queue_id,
            due: p.due,
        })
        .collect::<Vec<_>>()
}

pub fn consume_queue(units: &[CqUnit]) -> impl Serialize + '_ {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Unit {
        offset: u64,
        size: u32,
        tag_hash: i32,
        /// The 20 bytes RocketMQ's ConsumeQueue file holds for it.
        bytes: Bytes<[u8; 20]>,
    }
    units
        .iter()
        .map(|u| Unit {
            offset: u.offset,
            size: u.size,
            tag_hash: u.tag_hash,
            bytes: Bytes(u.to_rocketmq_bytes()),
        })
        .collect::<Vec<_>>()
}

/// The counters by name (snake_case), in a fixed order: Python's dict, JS objects (camelCase).
pub fn stats_fields(s: &Stats) -> [(&'static str, u64); 17] {
    [
        ("messages_stored", s.messages_stored),
        ("halves_stored", s.halves_stored),
        ("committed", s.committed),
        ("rolled_back", s.rolled_back),
        ("unknown_answers", s.unknown_answers),
        ("checks_sent", s.checks_sent),
        ("checks_answered", s.checks_answered),
        ("check_max_reached", s.check_max_reached),
        ("halves_expired", s.halves_expired),
        ("delayed_stored", s.delayed_stored),
        ("delayed_delivered", s.delayed_delivered),
        ("received", s.received),
        ("acked", s.acked),
        ("redelivered", s.redelivered),
        ("dead_lettered", s.dead_lettered),
        ("syncs", s.syncs),
        ("client_errors", s.client_errors),
    ]
}

/// The counters as one object, camelCase keys in [`stats_fields`] order.
pub fn stats(s: &Stats) -> impl Serialize {
    struct Out([(&'static str, u64); 17]);
    impl Serialize for Out {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(Some(self.0.len()))?;
            for (k, v) in &self.0 {
                m.serialize_entry(&camel_case(k), v)?;
            }
            m.end()
        }
    }
    Out(stats_fields(s))
}

/// `transaction_timeout_ms` -> `transactionTimeoutMs` (JS names of core fields).
pub fn camel_case(snake: &str) -> String {
    let mut out = String::with_capacity(snake.len());
    let mut up = false;
    for c in snake.chars() {
        if c == '_' {
            up = true;
        } else if up {
            out.extend(c.to_uppercase());
            up = false;
        } else {
            out.push(c);
        }
    }
    out
}

pub fn recovery_report(r: &RecoveryReport) -> impl Serialize + '_ {
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
    Out {
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
    }
}

pub fn system_topics() -> impl Serialize {
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
    Out {
        half: topic::HALF,
        op: topic::OP,
        check_max: topic::CHECK_MAX,
        schedule: topic::SCHEDULE,
        timer: topic::TIMER,
        delay_op: topic::DELAY_OP,
        offsets: topic::OFFSETS,
        revive: topic::REVIVE,
    }
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
    bytes: Bytes<&'a [u8]>,
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
        Value::S(format!("0x{:08X}", record::MESSAGE_MAGIC)),
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
        Value::S(format!(
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
        Value::S(format!("{} pairs", r.props().count())),
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

/// A record at a log offset, decoded (with its CRCs verified) field by field; the error
/// (bytes that are not a valid record) says why, naming the offset.
pub fn decoded_record(offset: u64, bytes: &[u8]) -> Result<impl Serialize + '_, String> {
    let corrupt = |why: &dyn fmt::Display| format!("record at {offset}: {why}");
    let view = match record::decode(bytes, u32::MAX) {
        Ok(Decoded::Record(v)) => v,
        Ok(Decoded::Blank { len }) => {
            return Err(corrupt(&format!("an end-of-segment blank of {len} bytes")))
        }
        Ok(Decoded::Repaired { len }) => {
            return Err(corrupt(&format!("a repair blank over {len} damaged bytes")))
        }
        Ok(Decoded::Incomplete { .. }) => {
            return Err(corrupt(&"the bytes end before the record does"))
        }
        Err(e) => return Err(corrupt(&e)),
    };
    let (fields, properties) = fields(&view);
    Ok(OutRecord {
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

// ---- Node (rocklet-node) ------------------------------------------------------------------
//
// napi's serde serializer writes `None` as `null` and a u64 above u32::MAX as a BigInt; the
// Node API leaves absent values out and uses plain numbers. [`Plain`] serializes any view
// that way, and the few shapes where Node differs (a `Buffer` body only, a received message
// flat, a check with its time, no extra fields) are below.

/// Serializes a view with every integer above 32 bits as an f64 (milliseconds and offsets
/// stay far below 2^53) and every `None` struct field left out.
#[derive(Debug)]
pub struct Plain<'a, T: ?Sized>(pub &'a T);

impl<T: Serialize + ?Sized> Serialize for Plain<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(PlainSer(s))
    }
}

struct PlainSer<S>(S);

macro_rules! forward {
    ($($f:ident($t:ty)),*) => {$(
        fn $f(self, v: $t) -> Result<S::Ok, S::Error> { self.0.$f(v) }
    )*};
}

impl<S: Serializer> Serializer for PlainSer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = PlainSer<S::SerializeSeq>;
    type SerializeTuple = PlainSer<S::SerializeTuple>;
    type SerializeTupleStruct = PlainSer<S::SerializeTupleStruct>;
    type SerializeTupleVariant = PlainSer<S::SerializeTupleVariant>;
    type SerializeMap = PlainSer<S::SerializeMap>;
    type SerializeStruct = PlainSer<S::SerializeStruct>;
    type SerializeStructVariant = PlainSer<S::SerializeStructVariant>;
    forward!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str)
    );
    #[allow(clippy::cast_precision_loss)]
    fn serialize_i64(self, v: i64) -> Result<S::Ok, S::Error> {
        self.0.serialize_f64(v as f64)
    }
    #[allow(clippy::cast_precision_loss)]
    fn serialize_u64(self, v: u64) -> Result<S::Ok, S::Error> {
        self.0.serialize_f64(v as f64)
    }
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_none()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&Plain(v))
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_variant(name, i, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Plain(v))
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, i, variant, &Plain(v))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(PlainSer)
    }
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(PlainSer)
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(PlainSer)
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0
            .serialize_tuple_variant(name, i, variant, len)
            .map(PlainSer)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(PlainSer)
    }
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(PlainSer)
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0
            .serialize_struct_variant(name, i, variant, len)
            .map(PlainSer)
    }
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! plain_compound {
    ($($tr:ident :: $f:ident),*) => {$(
        impl<S: ser::$tr> ser::$tr for PlainSer<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            fn $f<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), S::Error> {
                self.0.$f(&Plain(v))
            }
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )*};
}
plain_compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl<S: SerializeMap> SerializeMap for PlainSer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), S::Error> {
        self.0.serialize_key(&Plain(k))
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), S::Error> {
        self.0.serialize_value(&Plain(v))
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

macro_rules! plain_struct {
    ($($tr:ident),*) => {$(
        impl<S: ser::$tr> ser::$tr for PlainSer<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                v: &T,
            ) -> Result<(), S::Error> {
                if v.serialize(IsNone) == Ok(true) {
                    self.0.skip_field(key)
                } else {
                    self.0.serialize_field(key, &Plain(v))
                }
            }
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )*};
}
plain_struct!(SerializeStruct, SerializeStructVariant);

/// Answers whether a value serializes as `None` (anything compound stops at once: `Err`).
struct IsNone;

macro_rules! not_none {
    ($($f:ident($t:ty)),*) => {$(
        fn $f(self, _: $t) -> Result<bool, fmt::Error> { Ok(false) }
    )*};
}

impl Serializer for IsNone {
    type Ok = bool;
    type Error = fmt::Error;
    type SerializeSeq = ser::Impossible<bool, fmt::Error>;
    type SerializeTuple = ser::Impossible<bool, fmt::Error>;
    type SerializeTupleStruct = ser::Impossible<bool, fmt::Error>;
    type SerializeTupleVariant = ser::Impossible<bool, fmt::Error>;
    type SerializeMap = ser::Impossible<bool, fmt::Error>;
    type SerializeStruct = ser::Impossible<bool, fmt::Error>;
    type SerializeStructVariant = ser::Impossible<bool, fmt::Error>;
    not_none!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str)
    );
    fn serialize_none(self) -> Result<bool, fmt::Error> {
        Ok(true)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<bool, fmt::Error> {
        Ok(false)
    }
    fn serialize_unit(self) -> Result<bool, fmt::Error> {
        Ok(false)
    }
    fn serialize_unit_variant(self, _: &str, _: u32, _: &str) -> Result<bool, fmt::Error> {
        Ok(false)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &str,
        _: &T,
    ) -> Result<bool, fmt::Error> {
        Ok(false)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &str,
        _: u32,
        _: &str,
        _: &T,
    ) -> Result<bool, fmt::Error> {
        Ok(false)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_tuple_struct(
        self,
        _: &str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_tuple_variant(
        self,
        _: &str,
        _: u32,
        _: &str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_struct(self, _: &str, _: usize) -> Result<Self::SerializeStruct, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_struct_variant(
        self,
        _: &str,
        _: u32,
        _: &str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, fmt::Error> {
        Err(fmt::Error)
    }
}

/// A message as Node consumers see it (pull, checks): the body as bytes (a `Buffer`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeMessage<'a> {
    topic: &'a str,
    queue_id: u32,
    queue_offset: u64,
    offset: u64,
    msg_id: &'a str,
    tag: Option<&'a str>,
    keys: &'a [String],
    properties: Pairs<'a>,
    body: Bytes<&'a [u8]>,
    born_timestamp: u64,
    store_timestamp: u64,
    reconsume_times: u32,
    flag: i32,
    sys_flag: u32,
    born_host: String,
    store_host: String,
}

fn node_message_out(m: &Message) -> NodeMessage<'_> {
    NodeMessage {
        topic: &m.topic,
        queue_id: m.queue_id,
        queue_offset: m.queue_offset,
        offset: m.offset,
        msg_id: &m.msg_id,
        tag: m.tag.as_deref(),
        keys: &m.keys,
        properties: Pairs(&m.properties),
        body: Bytes(&m.body),
        born_timestamp: m.born_timestamp,
        store_timestamp: m.store_timestamp,
        reconsume_times: m.reconsume_times,
        flag: m.flag,
        sys_flag: m.sys_flag,
        born_host: m.born_host.to_string(),
        store_host: m.store_host.to_string(),
    }
}

/// A pull, its messages with `Buffer` bodies (Node).
pub fn node_pulled(p: &Pulled, one_queue: bool) -> impl Serialize + '_ {
    pulled_with(p, one_queue, node_message_out)
}

/// The checks of a drive step or the outputs, each with the broker time it was sent (Node).
pub fn node_checks(cs: &[(CheckRequest, u64)]) -> impl Serialize + '_ {
    #[derive(Serialize)]
    struct Check<'a> {
        group: &'a str,
        txn: String,
        check: u32,
        at: u64,
        message: NodeMessage<'a>,
    }
    cs.iter()
        .map(|(c, at)| Check {
            group: &c.group,
            txn: c.txn.to_string(),
            check: c.check,
            at: *at,
            message: node_message_out(&c.message),
        })
        .collect::<Vec<_>>()
}

/// Pending transactions without the offset field (Node).
pub fn node_pending_transactions(ps: &[PendingTxnInfo]) -> impl Serialize + '_ {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Pending<'a> {
        txn: String,
        group: &'a str,
        topic: &'a str,
        queue_id: u32,
        checks: u32,
        next_check: Option<u64>,
    }
    ps.iter()
        .map(|p| Pending {
            txn: p.txn.to_string(),
            group: &p.group,
            topic: &p.topic,
            queue_id: p.queue_id,
            checks: p.checks,
            next_check: p.next_check,
        })
        .collect::<Vec<_>>()
}

/// Consume-queue units without their bytes (Node).
pub fn node_consume_queue(units: &[CqUnit]) -> impl Serialize + '_ {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Unit {
        offset: u64,
        size: u32,
        tag_hash: i32,
    }
    units
        .iter()
        .map(|u| Unit {
            offset: u.offset,
            size: u.size,
            tag_hash: u.tag_hash,
        })
        .collect::<Vec<_>>()
}

/// Trace events in order.
pub fn traces(ts: &[TraceEvent]) -> impl Serialize + '_ {
    ts.iter().map(trace_out).collect::<Vec<_>>()
}

#[cfg(test)]
mod plain_tests {
    use super::*;

    #[test]
    fn plain_writes_big_integers_as_floats_and_leaves_none_out() {
        let r = SendResult {
            msg_id: "M".into(),
            topic: "T".into(),
            queue_id: 1,
            queue_offset: 1 << 40,
            offset: 7,
            txn: None,
        };
        let v = serde_json::to_value(Plain(&send_result(&r))).unwrap();
        assert_eq!(v["queueOffset"].as_f64(), Some((1u64 << 40) as f64));
        assert!(v["queueOffset"].is_f64());
        assert!(v.get("txn").is_none(), "{v}");
        // Without Plain the same view keeps the null (wasm's shape).
        let v = serde_json::to_value(send_result(&r)).unwrap();
        assert!(v["txn"].is_null() && v.get("txn").is_some());
    }
}
