//! The RocketMQ 4 remoting targets: requests go through `codec` and `handlers::handle` of a
//! real broker ([`Host`]), one connection per input, handled in order as one connection's
//! requests arrive.
//!
//! Checked for every request: no panic, an answer (the handler never goes silent), a
//! response to that request (same opaque and serialization, the response flag), which a
//! client can decode again; every frame the broker pushes by itself (transaction checks)
//! decodes as a CHECK_TRANSACTION_STATE request. At the end of an input: every message
//! whose send was answered SUCCESS (no delay, not transactional) is pulled back, through
//! PULL_MESSAGE, at the queue and offset the answer named, with its body.
//!
//! - `remoting_frames`: the bytes of a connection, cut into frames as the server does
//!   ([`run_frames`]).
//! - `remoting_commands`: well-formed commands with fuzzed header fields and bodies, one
//!   variant per request code ([`Op`], [`run_ops`]); each must also survive an encode and
//!   decode unchanged.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use arbitrary::Arbitrary;
use rocklet_broker::remoting::codec::{self, RemotingCommand, SerializeType, FLAG_ONEWAY};
use rocklet_broker::remoting::codes::{code, status};
use rocklet_broker::remoting::conn::{self, Conn, Ctx};
use rocklet_broker::remoting::handlers;
use rocklet_broker::remoting::message;
use rocklet_core::record::{self, Decoded};
use rocklet_core::CheckRequest;
use tokio::sync::mpsc;

use crate::host::{check_delivered, runtime, Acked, Host, NOT_IMMEDIATE};

/// SEND_MESSAGE_V2's short header names the handler reads.
const V2_NAMES: [(&str, &str); 4] = [
    ("b", "topic"),
    ("i", "properties"),
    ("m", "batch"),
    ("a", "producerGroup"),
];

/// One connection to a fresh broker.
struct Session {
    host: Host,
    ctx: Ctx,
    conn: Arc<Conn>,
    checks: mpsc::UnboundedSender<CheckRequest>,
    pushed: mpsc::UnboundedReceiver<Vec<u8>>,
    acked: Vec<Acked>,
    /// Transactions (half message log offsets) from answered transactional sends.
    txns: Vec<u64>,
    /// Log offsets of stored messages (from the offset message ids of answered sends).
    offsets: Vec<u64>,
    /// CHECK_TRANSACTION_STATE requests the broker pushed: their log offsets.
    checked: Vec<u64>,
    /// Pop receipts: group, topic and the `extraInfo` a client would build.
    receipts: Vec<(String, String, String)>,
}

impl Session {
    fn start() -> Self {
        let host = Host::start();
        let ctx = Ctx::new(host.core.clone(), host.cfg.clone())
            .with_clock(host.clock())
            .with_metrics(host.metrics.clone());
        let peer: SocketAddr = "127.0.0.1:40000".parse().expect("address");
        let local: SocketAddr = "127.0.0.1:10911".parse().expect("address");
        let (tx, pushed) = mpsc::unbounded_channel();
        let conn = Arc::new(Conn::new(1, peer, local, tx));
        let checks = conn::spawn_check_forwarder(conn.clone());
        Session {
            host,
            ctx,
            conn,
            checks,
            pushed,
            acked: Vec::new(),
            txns: Vec::new(),
            offsets: Vec::new(),
            checked: Vec::new(),
            receipts: Vec::new(),
        }
    }

    /// Handles one decoded request as the server does, and checks the answer.
    async fn call(&mut self, req: RemotingCommand) -> Option<RemotingCommand> {
        if req.is_response() {
            // The server drops responses (to its own oneway checks) unanswered.
            return None;
        }
        let (opaque, ser, oneway) = (req.opaque, req.serialize, req.is_oneway());
        let sent = expected_sends(&req);
        let popped = match req.code {
            code::POP_MESSAGE | code::CHANGE_MESSAGE_INVISIBLETIME => Some((
                req.ext.get("consumerGroup").cloned().unwrap_or_default(),
                req.ext.get("topic").cloned().unwrap_or_default(),
            )),
            _ => None,
        };
        let changed_offset = (req.code == code::CHANGE_MESSAGE_INVISIBLETIME)
            .then(|| {
                let f: Vec<String> = req
                    .ext
                    .get("extraInfo")?
                    .split(' ')
                    .map(String::from)
                    .collect();
                Some((f.get(6)?.clone(), f.get(7)?.clone()))
            })
            .flatten();
        let resp = handlers::handle(&self.ctx, &self.conn, &self.checks, req).await;
        let Some(resp) = resp else {
            assert!(oneway, "a request that is not oneway went unanswered");
            return None;
        };
        assert!(resp.is_response(), "the answer is flagged a response");
        assert_eq!(
            resp.opaque, opaque,
            "the answer carries the request's opaque"
        );
        assert_eq!(
            resp.serialize, ser,
            "the answer uses the request's serialization"
        );
        let again = codec::decode(&resp.encode()).expect("a client can decode the answer");
        assert_eq!((again.code, again.opaque), (resp.code, resp.opaque));
        if resp.code == status::SUCCESS {
            self.note_sent(sent, &resp);
            if let Some((group, topic)) = popped {
                self.note_receipts(&group, &topic, &resp, changed_offset);
            }
        }
        self.drain_pushed();
        Some(resp)
    }

    /// Records what an answered send stored.
    fn note_sent(&mut self, sent: Option<Sent>, resp: &RemotingCommand) {
        let Some(sent) = sent else { return };
        let id = |k: &str| resp.ext.get(k).and_then(|v| v.parse::<u64>().ok());
        let (Some(queue_id), Some(queue_offset)) = (id("queueId"), id("queueOffset")) else {
            panic!("a SUCCESS send answer lacks queueId / queueOffset: {resp:?}");
        };
        if let Some(ids) = resp.ext.get("msgId") {
            for m in ids.split(',') {
                // 16 hex digits of log offset end the offset message id.
                if let Some(o) = m
                    .get(m.len().saturating_sub(16)..)
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                {
                    self.offsets.push(o);
                }
            }
        }
        if let Some(t) = resp.ext.get("transactionId") {
            if let Ok(t) = u64::from_str_radix(t, 16) {
                self.txns.push(t);
            }
        }
        if !sent.immediate {
            return;
        }
        for (i, body) in sent.bodies.into_iter().enumerate() {
            self.acked.push(Acked {
                topic: sent.topic.clone(),
                queue_id: u32::try_from(queue_id).expect("queue id fits"),
                queue_offset: queue_offset + i as u64,
                body,
            });
        }
    }

    /// The `extraInfo` of every message a pop answered (per queue `startOffsetInfo`
    /// `0 <queue> <generation>` and `msgOffsetInfo` `0 <queue> <offset>,…`), or of the
    /// message an invisible-time change renewed (`ck` = its queue offset).
    fn note_receipts(
        &mut self,
        group: &str,
        topic: &str,
        resp: &RemotingCommand,
        changed: Option<(String, String)>,
    ) {
        let h = |k: &str| resp.ext.get(k).map_or("", String::as_str);
        let head = format!("{} {} {}", h("popTime"), h("invisibleTime"), h("reviveQid"));
        let mut add = |ck: &str, queue: &str, offset: &str| {
            let extra = format!("{ck} {head} 0 rocklet {queue} {offset}");
            self.receipts
                .push((group.to_string(), topic.to_string(), extra));
        };
        if let Some((queue, offset)) = changed {
            add(&offset, &queue, &offset);
            return;
        }
        let starts: Vec<Vec<&str>> = h("startOffsetInfo")
            .split(';')
            .map(|q| q.split(' ').collect())
            .collect();
        for q in h("msgOffsetInfo").split(';') {
            let f: Vec<&str> = q.split(' ').collect();
            let (Some(queue), Some(offsets)) = (f.get(1), f.get(2)) else {
                continue;
            };
            let ck = starts
                .iter()
                .find(|s| s.get(1) == Some(queue))
                .and_then(|s| s.get(2))
                .copied()
                .unwrap_or("0");
            for o in offsets.split(',') {
                add(ck, queue, o);
            }
        }
    }

    /// Frames the broker pushed by itself: transaction checks, and NOTIFY_CONSUMER_IDS_CHANGED
    /// when a group this connection's client is in changes.
    fn drain_pushed(&mut self) {
        while let Ok(frame) = self.pushed.try_recv() {
            // As the connection's writer does once a frame is out.
            self.conn.written(frame.len());
            let c = codec::decode(&frame).expect("a pushed frame decodes");
            assert!(c.is_oneway() && !c.is_response(), "pushed: {c:?}");
            if c.code == code::NOTIFY_CONSUMER_IDS_CHANGED {
                assert!(
                    c.ext.get("consumerGroup").is_some_and(|g| !g.is_empty()),
                    "a notification names its group: {c:?}"
                );
                continue;
            }
            assert_eq!(c.code, code::CHECK_TRANSACTION_STATE, "pushed: {c:?}");
            let off = c
                .ext
                .get("commitLogOffset")
                .and_then(|v| v.parse::<u64>().ok())
                .expect("a check names commitLogOffset");
            match record::decode(&c.body, u32::MAX) {
                Ok(Decoded::Record(_)) => {}
                other => panic!("a check's body is not a record: {other:?}"),
            }
            self.checked.push(off);
        }
    }

    async fn advance(&mut self, ms: u64) {
        self.host.advance(ms).await;
        // The forwarder task turns routed checks into frames: let it run.
        tokio::task::yield_now().await;
        self.drain_pushed();
    }

    /// Pulls every queue of every topic with acknowledged sends from offset 0 and checks
    /// that each acknowledged message is there; then closes the connection and the broker.
    async fn finish(mut self) {
        // Fire what falls due (checks, delays) once more before the end.
        self.advance(5_000).await;
        let mut queues: BTreeMap<(String, u32), ()> = BTreeMap::new();
        for a in &self.acked {
            queues.insert((a.topic.clone(), a.queue_id), ());
        }
        let mut delivered = Vec::new();
        let mut opaque = 1_000_000;
        for (topic, queue_id) in queues.into_keys() {
            let mut offset = 0u64;
            for _ in 0..10_000 {
                opaque += 1;
                let mut req = RemotingCommand::request(
                    code::PULL_MESSAGE,
                    fields(&[
                        ("consumerGroup", "__fuzz_drain"),
                        ("topic", &topic),
                        ("queueId", &queue_id.to_string()),
                        ("queueOffset", &offset.to_string()),
                        ("maxMsgNums", "1024"),
                        ("sysFlag", "0"),
                        ("subscription", "*"),
                    ]),
                    Vec::new(),
                );
                req.opaque = opaque;
                let r = self.call(req).await.expect("answered");
                if r.code == status::PULL_RETRY_IMMEDIATELY {
                    let next = r
                        .ext
                        .get("nextBeginOffset")
                        .and_then(|v| v.parse::<u64>().ok());
                    match next {
                        Some(n) if n > offset => {
                            offset = n;
                            continue;
                        }
                        _ => panic!("PULL_RETRY_IMMEDIATELY does not move on: {r:?}"),
                    }
                }
                if r.code != status::SUCCESS {
                    break;
                }
                let mut body = &r.body[..];
                while !body.is_empty() {
                    let Ok(Decoded::Record(rec)) = record::decode(body, u32::MAX) else {
                        panic!("undecodable record in a pull answer");
                    };
                    delivered.push(Acked {
                        topic: rec.topic.to_string(),
                        queue_id: rec.header.queue_id,
                        queue_offset: rec.header.queue_offset,
                        body: rec.body.to_vec(),
                    });
                    body = &body[rec.total_size as usize..];
                }
                let next = r
                    .ext
                    .get("nextBeginOffset")
                    .and_then(|v| v.parse::<u64>().ok())
                    .expect("a pull answer names nextBeginOffset");
                assert!(next > offset, "a SUCCESS pull moves on: {r:?}");
                offset = next;
            }
        }
        check_delivered(&self.acked, &delivered);
        conn::closed(&self.ctx, &self.conn);
        drop(self.checks);
        self.host.stop().await;
    }
}

/// What a send request would store, for the delivery check.
struct Sent {
    topic: String,
    bodies: Vec<Vec<u8>>,
    immediate: bool,
}

/// The messages of a send request as the handler reads it (V2 short names, batch bodies);
/// `None` for other requests and for sends the check cannot follow.
fn expected_sends(req: &RemotingCommand) -> Option<Sent> {
    if ![
        code::SEND_MESSAGE,
        code::SEND_MESSAGE_V2,
        code::SEND_BATCH_MESSAGE,
    ]
    .contains(&req.code)
    {
        return None;
    }
    let mut ext = req.ext.clone();
    if req.code != code::SEND_MESSAGE {
        for (short, long) in V2_NAMES {
            if let Some(v) = req.ext.get(short) {
                ext.insert(long.to_string(), v.clone());
            }
        }
    }
    let topic = ext.get("topic")?.clone();
    let props = message::parse_properties(ext.get("properties").map_or("", String::as_str));
    let immediate_props = |p: &[(String, String)]| {
        !p.iter()
            .any(|(k, _)| NOT_IMMEDIATE.contains(&k.as_str()) || k == "PGROUP")
    };
    let batch = req.code == code::SEND_BATCH_MESSAGE
        || matches!(ext.get("batch").map(String::as_str), Some("true" | "1"));
    let mut immediate = immediate_props(&props) && !topic.starts_with('%');
    let bodies = if batch {
        let max = rocklet_broker::config::DEFAULT_MAX_BATCH_MESSAGES as usize;
        let entries = message::decode_batch(&req.body, max).ok()?;
        let mut bodies = Vec::new();
        for (_, body, p) in entries {
            immediate &= immediate_props(&message::parse_properties(&p));
            bodies.push(body);
        }
        bodies
    } else {
        vec![req.body.clone()]
    };
    Some(Sent {
        topic,
        bodies,
        immediate,
    })
}

fn fields(ext: &[(&str, &str)]) -> BTreeMap<String, String> {
    ext.iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// Cuts a connection's bytes into frames as the server does (LENGTH, then that many
/// bytes), stopping where the server would close the connection, and handles each.
pub fn run_frames(data: &[u8]) {
    answers(data);
}

/// [`run_frames`], returning the broker's answers (for the seed writer).
pub fn answers(data: &[u8]) -> Vec<RemotingCommand> {
    runtime().block_on(async {
        let mut s = Session::start();
        let mut out = Vec::new();
        let mut rest = data;
        while rest.len() >= 4 {
            let Ok(n) = codec::frame_length([rest[0], rest[1], rest[2], rest[3]]) else {
                break;
            };
            rest = &rest[4..];
            if rest.len() < n {
                break;
            }
            let (frame, tail) = rest.split_at(n);
            rest = tail;
            let Ok(cmd) = codec::decode_frame(frame) else {
                break;
            };
            out.extend(s.call(cmd).await);
        }
        s.finish().await;
        out
    })
}

// ---- structure-aware commands ----------------------------------------------------------

/// Names the requests use: a few shared ones (so sends, pulls and offsets meet), or any.
#[derive(Arbitrary, Debug, Clone)]
pub enum Name {
    Pick(u8),
    Any(String),
}

const NAMES: [&str; 8] = ["T0", "T1", "PG", "CG", "%RETRY%CG", "%DLQ%CG", "", "TBW102"];

impl Name {
    fn get(&self) -> String {
        match self {
            Name::Pick(i) => NAMES[*i as usize % NAMES.len()].to_string(),
            Name::Any(s) => s.clone(),
        }
    }
}

/// A numeric header field: a likely value, any integer, or any text.
#[derive(Arbitrary, Debug, Clone)]
pub enum Num {
    Pick(u8),
    Int(i64),
    Text(String),
}

const NUMS: [&str; 12] = [
    "0",
    "1",
    "2",
    "3",
    "-1",
    "8",
    "12",
    "4",
    "32",
    " 1 ",
    "18446744073709551615",
    "99999999999999999999",
];

impl Num {
    fn get(&self) -> String {
        match self {
            Num::Pick(i) => NUMS[*i as usize % NUMS.len()].to_string(),
            Num::Int(n) => n.to_string(),
            Num::Text(s) => s.clone(),
        }
    }
}

/// A property: a name the broker reads (with a fitting value, often) or any.
#[derive(Arbitrary, Debug, Clone)]
pub enum Prop {
    Known(u8, Num),
    Any(String, String),
}

const PROP_KEYS: [&str; 16] = [
    "TAGS",
    "KEYS",
    "UNIQ_KEY",
    "TRAN_MSG",
    "PGROUP",
    "WAIT",
    "DELAY",
    "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "__SHARDINGKEY",
    "REAL_TOPIC",
    "RECONSUME_TIME",
    "MAX_OFFSET",
    "a",
];

impl Prop {
    fn push(&self, out: &mut String) {
        let (k, v) = match self {
            Prop::Known(i, n) => {
                let k = PROP_KEYS[*i as usize % PROP_KEYS.len()];
                let v = match (k, n) {
                    ("TRAN_MSG" | "WAIT", Num::Pick(p)) => {
                        if p % 2 == 0 { "true" } else { "false" }.to_string()
                    }
                    ("PGROUP", Num::Pick(p)) => NAMES[*p as usize % NAMES.len()].to_string(),
                    _ => n.get(),
                };
                (k.to_string(), v)
            }
            Prop::Any(k, v) => (k.clone(), v.clone()),
        };
        out.push_str(&k);
        out.push('\u{1}');
        out.push_str(&v);
        out.push('\u{2}');
    }
}

fn props(p: &[Prop]) -> String {
    let mut s = String::new();
    for x in p {
        x.push(&mut s);
    }
    s
}

/// One batch entry (`MessageDecoder.encodeMessages`), optionally damaged.
#[derive(Arbitrary, Debug, Clone)]
pub struct Entry {
    flag: i32,
    body: Vec<u8>,
    props: Vec<Prop>,
    /// Replaces TOTALSIZE (a lie about the entry's length).
    total: Option<u32>,
}

fn batch_body(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in entries {
        let p = props(&e.props);
        let total = 20 + e.body.len() + 2 + p.len();
        out.extend_from_slice(&e.total.unwrap_or(total as u32).to_be_bytes());
        out.extend_from_slice(&[0xAA, 0xBB, 0xCC, 0xDD, 0, 0, 0, 0]);
        out.extend_from_slice(&e.flag.to_be_bytes());
        out.extend_from_slice(&(e.body.len() as u32).to_be_bytes());
        out.extend_from_slice(&e.body);
        out.extend_from_slice(&(p.len() as u16).to_be_bytes());
        out.extend_from_slice(p.as_bytes());
    }
    out
}

/// Which transaction an END_TRANSACTION names.
#[derive(Arbitrary, Debug, Clone)]
pub enum TxnRef {
    /// One this input's sends were given (index modulo their count).
    Known(u8),
    /// One a pushed check named.
    Checked(u8),
    Any(Num),
}

/// Which delivery an ACK_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME names.
#[derive(Arbitrary, Debug, Clone)]
pub enum Receipt {
    /// One a pop (or change) of this input answered, under its group and topic.
    Known(u8),
    Any {
        group: Name,
        topic: Name,
        extra: String,
    },
}

/// Which stored message a CONSUMER_SEND_MSG_BACK names.
#[derive(Arbitrary, Debug, Clone)]
pub enum OffsetRef {
    Known(u8),
    Any(Num),
}

fn pick(v: &[u64], i: u8) -> Option<u64> {
    (!v.is_empty()).then(|| v[i as usize % v.len()])
}

/// How a send is coded.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum SendCode {
    /// SEND_MESSAGE, long header names.
    V1,
    /// SEND_MESSAGE_V2, short names.
    V2,
    /// SEND_BATCH_MESSAGE, short names.
    Batch,
}

/// One request, its header fields fuzzed; `binary`: the RocketMQ binary header instead of
/// JSON; `oneway`: the oneway flag.
#[derive(Arbitrary, Debug, Clone)]
pub enum Op {
    Send {
        how: SendCode,
        topic: Name,
        group: Option<Name>,
        queue: Option<Num>,
        sys_flag: Option<Num>,
        born: Option<Num>,
        flag: Option<Num>,
        props: Vec<Prop>,
        body: Vec<u8>,
        /// For batches (or `batch` = true on a single send): the entries.
        entries: Vec<Entry>,
        batch_field: Option<Num>,
    },
    End {
        txn: TxnRef,
        /// 0 unknown, 8 commit, 12 rollback, or anything.
        kind: Num,
        from_check: bool,
        group: Option<Name>,
    },
    Pull {
        group: Name,
        topic: Name,
        queue: Num,
        offset: Num,
        max: Option<Num>,
        sys_flag: Option<Num>,
        commit: Option<Num>,
        suspend: Option<Num>,
        subscription: Option<String>,
    },
    QueryOffset {
        group: Name,
        topic: Name,
        queue: Num,
    },
    UpdateOffset {
        group: Name,
        topic: Name,
        queue: Num,
        offset: Num,
    },
    MaxOffset {
        topic: Name,
        queue: Num,
    },
    MinOffset {
        topic: Option<Name>,
    },
    Heartbeat {
        client: String,
        producers: Vec<Name>,
        consumers: Vec<Name>,
        /// A body of any bytes instead of the JSON.
        raw: Option<Vec<u8>>,
    },
    Unregister {
        producer: Option<Name>,
        consumer: Option<Name>,
        client: Option<String>,
    },
    ConsumerList {
        group: Name,
    },
    SendBack {
        offset: OffsetRef,
        group: Name,
        level: Option<Num>,
    },
    Route {
        topic: Name,
    },
    Pop {
        group: Name,
        topic: Name,
        queue: Option<Num>,
        max: Option<Num>,
        invisible: Num,
        order: bool,
        exp_type: Option<String>,
        exp: Option<String>,
        poll: Option<Num>,
    },
    /// ACK_MESSAGE of a receipt a pop gave (or any `extraInfo`).
    PopAck {
        receipt: Receipt,
    },
    PopChange {
        receipt: Receipt,
        invisible: Num,
    },
    /// LOCK_BATCH_MQ (`unlock`: UNLOCK_BATCH_MQ) of queues for a client of a group.
    Lock {
        unlock: bool,
        group: Name,
        client: Name,
        queues: Vec<(Name, Num)>,
    },
    /// Any code, any fields, any body.
    Other {
        code: i16,
        ext: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Moves the core's clock (checks, delays, invisible times).
    Advance {
        ms: u16,
    },
}

/// A request with its serialization and flag.
#[derive(Arbitrary, Debug, Clone)]
pub struct Cmd {
    pub op: Op,
    pub binary: bool,
    pub oneway: bool,
}

fn put(ext: &mut BTreeMap<String, String>, k: &str, v: Option<String>) {
    if let Some(v) = v {
        ext.insert(k.to_string(), v);
    }
}

impl Session {
    fn command(&self, op: &Op) -> Option<RemotingCommand> {
        let mut ext = BTreeMap::new();
        let mut body = Vec::new();
        let code = match op {
            Op::Send {
                how,
                topic,
                group,
                queue,
                sys_flag,
                born,
                flag,
                props: p,
                body: b,
                entries,
                batch_field,
            } => {
                let short = !matches!(how, SendCode::V1);
                let n = |long: &'static str, s: &'static str| if short { s } else { long };
                put(&mut ext, n("topic", "b"), Some(topic.get()));
                put(
                    &mut ext,
                    n("producerGroup", "a"),
                    group.as_ref().map(Name::get),
                );
                put(&mut ext, n("queueId", "e"), queue.as_ref().map(Num::get));
                put(&mut ext, n("sysFlag", "f"), sys_flag.as_ref().map(Num::get));
                put(
                    &mut ext,
                    n("bornTimestamp", "g"),
                    born.as_ref().map(Num::get),
                );
                put(&mut ext, n("flag", "h"), flag.as_ref().map(Num::get));
                put(&mut ext, n("properties", "i"), Some(props(p)));
                put(
                    &mut ext,
                    n("batch", "m"),
                    batch_field.as_ref().map(Num::get),
                );
                let batch = matches!(how, SendCode::Batch)
                    || batch_field
                        .as_ref()
                        .is_some_and(|f| matches!(f.get().as_str(), "true" | "1"));
                body = if batch {
                    batch_body(entries)
                } else {
                    b.clone()
                };
                match how {
                    SendCode::V1 => code::SEND_MESSAGE,
                    SendCode::V2 => code::SEND_MESSAGE_V2,
                    SendCode::Batch => code::SEND_BATCH_MESSAGE,
                }
            }
            Op::End {
                txn,
                kind,
                from_check,
                group,
            } => {
                let t = match txn {
                    TxnRef::Known(i) => pick(&self.txns, *i).map(|t| t.to_string()),
                    TxnRef::Checked(i) => pick(&self.checked, *i).map(|t| t.to_string()),
                    TxnRef::Any(n) => Some(n.get()),
                };
                put(&mut ext, "commitLogOffset", t);
                put(&mut ext, "commitOrRollback", Some(kind.get()));
                if *from_check {
                    put(&mut ext, "fromTransactionCheck", Some("true".into()));
                }
                put(&mut ext, "producerGroup", group.as_ref().map(Name::get));
                code::END_TRANSACTION
            }
            Op::Pull {
                group,
                topic,
                queue,
                offset,
                max,
                sys_flag,
                commit,
                suspend,
                subscription,
            } => {
                put(&mut ext, "consumerGroup", Some(group.get()));
                put(&mut ext, "topic", Some(topic.get()));
                put(&mut ext, "queueId", Some(queue.get()));
                put(&mut ext, "queueOffset", Some(offset.get()));
                put(&mut ext, "maxMsgNums", max.as_ref().map(Num::get));
                put(&mut ext, "sysFlag", sys_flag.as_ref().map(Num::get));
                put(&mut ext, "commitOffset", commit.as_ref().map(Num::get));
                put(
                    &mut ext,
                    "suspendTimeoutMillis",
                    suspend.as_ref().map(Num::get),
                );
                put(&mut ext, "subscription", subscription.clone());
                code::PULL_MESSAGE
            }
            Op::QueryOffset {
                group,
                topic,
                queue,
            } => {
                put(&mut ext, "consumerGroup", Some(group.get()));
                put(&mut ext, "topic", Some(topic.get()));
                put(&mut ext, "queueId", Some(queue.get()));
                code::QUERY_CONSUMER_OFFSET
            }
            Op::UpdateOffset {
                group,
                topic,
                queue,
                offset,
            } => {
                put(&mut ext, "consumerGroup", Some(group.get()));
                put(&mut ext, "topic", Some(topic.get()));
                put(&mut ext, "queueId", Some(queue.get()));
                put(&mut ext, "commitOffset", Some(offset.get()));
                code::UPDATE_CONSUMER_OFFSET
            }
            Op::MaxOffset { topic, queue } => {
                put(&mut ext, "topic", Some(topic.get()));
                put(&mut ext, "queueId", Some(queue.get()));
                code::GET_MAX_OFFSET
            }
            Op::MinOffset { topic } => {
                put(&mut ext, "topic", topic.as_ref().map(Name::get));
                code::GET_MIN_OFFSET
            }
            Op::Heartbeat {
                client,
                producers,
                consumers,
                raw,
            } => {
                let set = |v: &[Name]| -> Vec<serde_json_value::Group> {
                    v.iter()
                        .map(|n| serde_json_value::Group { name: n.get() })
                        .collect()
                };
                body = match raw {
                    Some(b) => b.clone(),
                    None => serde_json_value::heartbeat(client, &set(producers), &set(consumers)),
                };
                code::HEART_BEAT
            }
            Op::Unregister {
                producer,
                consumer,
                client,
            } => {
                put(&mut ext, "producerGroup", producer.as_ref().map(Name::get));
                put(&mut ext, "consumerGroup", consumer.as_ref().map(Name::get));
                put(&mut ext, "clientID", client.clone());
                code::UNREGISTER_CLIENT
            }
            Op::ConsumerList { group } => {
                put(&mut ext, "consumerGroup", Some(group.get()));
                code::GET_CONSUMER_LIST_BY_GROUP
            }
            Op::SendBack {
                offset,
                group,
                level,
            } => {
                let o = match offset {
                    OffsetRef::Known(i) => pick(&self.offsets, *i).map(|o| o.to_string()),
                    OffsetRef::Any(n) => Some(n.get()),
                };
                put(&mut ext, "offset", o);
                put(&mut ext, "group", Some(group.get()));
                put(&mut ext, "delayLevel", level.as_ref().map(Num::get));
                code::CONSUMER_SEND_MSG_BACK
            }
            Op::Route { topic } => {
                put(&mut ext, "topic", Some(topic.get()));
                code::GET_ROUTEINFO_BY_TOPIC
            }
            Op::Pop {
                group,
                topic,
                queue,
                max,
                invisible,
                order,
                exp_type,
                exp,
                poll,
            } => {
                put(&mut ext, "consumerGroup", Some(group.get()));
                put(&mut ext, "topic", Some(topic.get()));
                put(&mut ext, "queueId", queue.as_ref().map(Num::get));
                put(&mut ext, "maxMsgNums", max.as_ref().map(Num::get));
                put(&mut ext, "invisibleTime", Some(invisible.get()));
                put(&mut ext, "order", order.then(|| "true".to_string()));
                put(&mut ext, "expType", exp_type.clone());
                put(&mut ext, "exp", exp.clone());
                put(&mut ext, "pollTime", poll.as_ref().map(Num::get));
                code::POP_MESSAGE
            }
            Op::PopAck { receipt } | Op::PopChange { receipt, .. } => {
                let (group, topic, extra) = match receipt {
                    Receipt::Known(i) if !self.receipts.is_empty() => {
                        self.receipts[*i as usize % self.receipts.len()].clone()
                    }
                    Receipt::Known(_) => return None,
                    Receipt::Any {
                        group,
                        topic,
                        extra,
                    } => (group.get(), topic.get(), extra.clone()),
                };
                put(&mut ext, "consumerGroup", Some(group));
                put(&mut ext, "topic", Some(topic));
                put(&mut ext, "extraInfo", Some(extra));
                if let Op::PopChange { invisible, .. } = op {
                    put(&mut ext, "invisibleTime", Some(invisible.get()));
                    code::CHANGE_MESSAGE_INVISIBLETIME
                } else {
                    code::ACK_MESSAGE
                }
            }
            Op::Lock {
                unlock,
                group,
                client,
                queues,
            } => {
                let set: Vec<String> = queues
                    .iter()
                    .map(|(t, q)| {
                        format!(
                            "{{\"topic\":{},\"brokerName\":\"rocklet\",\"queueId\":{}}}",
                            serde_json_value::json_str(&t.get()),
                            serde_json_value::json_str(&q.get())
                        )
                    })
                    .collect();
                body = format!(
                    "{{\"consumerGroup\":{},\"clientId\":{},\"mqSet\":[{}]}}",
                    serde_json_value::json_str(&group.get()),
                    serde_json_value::json_str(&client.get()),
                    set.join(",")
                )
                .into_bytes();
                if *unlock {
                    code::UNLOCK_BATCH_MQ
                } else {
                    code::LOCK_BATCH_MQ
                }
            }
            Op::Other {
                code: c,
                ext: e,
                body: b,
            } => {
                for (k, v) in e {
                    ext.insert(k.clone(), v.clone());
                }
                body = b.clone();
                i32::from(*c)
            }
            Op::Advance { .. } => return None,
        };
        Some(RemotingCommand::request(code, ext, body))
    }
}

/// The heartbeat body (`HeartbeatData`) as the Java client writes it.
mod serde_json_value {
    pub struct Group {
        pub name: String,
    }

    pub fn heartbeat(client: &str, producers: &[Group], consumers: &[Group]) -> Vec<u8> {
        let set = |v: &[Group]| -> Vec<String> {
            v.iter()
                .map(|g| format!("{{\"groupName\":{}}}", json_str(&g.name)))
                .collect()
        };
        format!(
            "{{\"clientID\":{},\"producerDataSet\":[{}],\"consumerDataSet\":[{}]}}",
            json_str(client),
            set(producers).join(","),
            set(consumers).join(",")
        )
        .into_bytes()
    }

    pub fn json_str(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }
}

/// Runs well-formed commands; each also round-trips through the codec unchanged.
pub fn run_ops(ops: &[Cmd]) {
    runtime().block_on(async {
        let mut s = Session::start();
        for (i, c) in ops.iter().enumerate() {
            if let Op::Advance { ms } = c.op {
                s.advance(u64::from(ms) * 10).await;
                continue;
            }
            let Some(mut cmd) = s.command(&c.op) else {
                continue;
            };
            cmd.opaque = i as i32;
            if c.oneway {
                cmd.flag |= FLAG_ONEWAY;
            }
            // The binary header holds the code in 16 bits (as Java's RocketMQSerializable):
            // the pop codes (200050…) only travel in JSON headers.
            if c.binary && i16::try_from(cmd.code).is_ok() {
                cmd.serialize = SerializeType::RocketMq;
            }
            let bytes = cmd.encode();
            let back = codec::decode(&bytes);
            assert_eq!(
                back.as_ref(),
                Ok(&cmd),
                "a command does not survive encode and decode"
            );
            s.call(cmd).await;
        }
        s.finish().await;
    });
}
