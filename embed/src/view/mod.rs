//! The plain views of core values that the JS bindings hand out: serde `Serialize` mirrors
//! (camelCase keys, `null` for absent values, bytes as bytes, numbers for milliseconds and
//! offsets, transaction ids as 16 hex digits, receipt handles as strings). A binding turns a
//! view into its language's value once (wasm: serde-wasm-bindgen); the names and shapes are
//! decided here, once.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use rocklet_core::{
    topic, CqUnit, Message, Output, PendingDelayInfo, PendingTxnInfo, ReceiptHandle, Received,
    RecoveryReport, Reply, Resolution, SendResult, Stats, TopicInfo, TraceEvent, TxnId,
};
use serde::ser::{SerializeMap, Serializer};
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

mod node;
mod records;

pub use node::{
    node_checks, node_consume_queue, node_pending_transactions, node_pulled, traces, Plain,
};
pub use records::decoded_record;
