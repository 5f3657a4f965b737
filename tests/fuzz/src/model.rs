//! `state_machine`: a step sequence run against a broker over [`CrashStorage`] under sync
//! flush and a small reference model. Checked after every step and at the end:
//!
//! - no `Err` except while a storage fault is injected; no panic;
//! - a check only ever concerns a transaction the model holds pending (#1517);
//! - no rolled-back body is ever consumed (pull or receive);
//! - each pull group sees each body at most once (pulling from its committed offset, which
//!   under sync flush survives crashes), and a receive never returns an acked body;
//! - nothing delayed is consumed before it is due;
//! - at the end, with every check answered COMMIT and enough time passed, a fresh group
//!   pulling every queue from offset 0 sees every acknowledged send and committed body
//!   exactly once, and a body whose request failed under a fault at most once.

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::Arbitrary;
use rocklet_core::testing::CrashStorage;
use rocklet_core::{
    Broker, ClientError, Config, Delay, FlushMode, Message, NewMessage, Output, ReceiptHandle,
    Reply, Request, Resolution, TagFilter, TxnId,
};

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Res {
    Commit,
    Rollback,
    Unknown,
}

impl From<Res> for Resolution {
    fn from(r: Res) -> Self {
        match r {
            Res::Commit => Resolution::Commit,
            Res::Rollback => Resolution::Rollback,
            Res::Unknown => Resolution::Unknown,
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum DelayOp {
    /// Level, taken modulo 20: 0 is no delay, 19 is clamped to the last level (18).
    Level(u8),
    After(u16),
    /// An absolute time, relative to now (may be in the past).
    At(i16),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum TxnPick {
    /// One of the transactions prepared so far.
    Known(u8),
    /// The offset of a normal message (a record that is no half).
    NotAHalf(u8),
    /// Any id.
    Bogus(u64),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Forge {
    Generation(u64),
    QueueOffset(u64),
    Topic,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Op {
    Send {
        topic: bool,
        delay: Option<DelayOp>,
    },
    Batch {
        topic: bool,
        n: u8,
    },
    Prepare {
        topic: bool,
        immunity_s: Option<u8>,
    },
    End {
        pick: TxnPick,
        res: Res,
    },
    /// The producer group comes online answering this, or goes offline.
    Checker(Option<Res>),
    Receive {
        max: u8,
        invisible_ms: u16,
    },
    Ack {
        pick: u8,
        forge: Option<Forge>,
    },
    ChangeInvisible {
        pick: u8,
        ms: u16,
    },
    Pull {
        group: bool,
        topic: bool,
        queue: bool,
        max: u8,
    },
    /// A commit by a group nobody pulls with, to any queue id of T0, T1 or a topic that
    /// does not exist.
    CommitOffset {
        topic: u8,
        queue_id: u32,
        offset: u16,
    },
    Advance(u16),
    AdvanceLong(u8),
    /// Power loss: reopen over the durable image.
    Crash,
    /// A send runs with appends (or syncs) failing; then the host restarts from what is
    /// durable, or (space is back) carries on with the same broker.
    FaultySend {
        syncs: bool,
        restart: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxnState {
    Pending,
    Committed,
    RolledBack,
    /// Ran out of checks, or the model lost track of it (a fault).
    Unsure,
}

#[derive(Debug)]
struct Txn {
    id: TxnId,
    body: Vec<u8>,
    state: TxnState,
}

const TOPICS: [&str; 2] = ["T0", "T1"];
const PULLERS: [&str; 2] = ["P0", "P1"];
const RECEIVER: &str = "C";
const PG: &str = "PG";

struct Harness {
    cfg: Config,
    b: Broker<CrashStorage>,
    now: u64,
    checker: Option<Res>,
    /// Acknowledged sends: body → due.
    sent: BTreeMap<Vec<u8>, u64>,
    /// Bodies whose request failed under a fault: may or may not exist.
    maybe: BTreeMap<Vec<u8>, u64>,
    txns: Vec<Txn>,
    /// Offsets of normal messages (for END of something that is no half).
    normal_offsets: Vec<u64>,
    pulled: [BTreeSet<Vec<u8>>; 2],
    acked: BTreeSet<Vec<u8>>,
    /// Received bodies: when they become visible again unless acked (since the last crash).
    invisible_until: BTreeMap<Vec<u8>, u64>,
    handles: Vec<(ReceiptHandle, Vec<u8>)>,
    next: u64,
    faulty: bool,
}

impl Harness {
    fn new() -> Self {
        let cfg = Config {
            flush: FlushMode::Sync,
            segment_size: 1 << 16,
            max_message_size: 1024,
            max_batch_size: 4096,
            default_queues: 2,
            transaction_timeout_ms: 3_000,
            transaction_check_interval_ms: 10_000,
            transaction_check_max: 4,
            max_delivery_attempts: 3,
            ..Config::default()
        };
        let b = Broker::open(cfg.clone(), CrashStorage::new(), 0).expect("empty open");
        Harness {
            cfg,
            b,
            now: 0,
            checker: None,
            sent: BTreeMap::new(),
            maybe: BTreeMap::new(),
            txns: Vec::new(),
            normal_offsets: Vec::new(),
            pulled: [BTreeSet::new(), BTreeSet::new()],
            acked: BTreeSet::new(),
            invisible_until: BTreeMap::new(),
            handles: Vec::new(),
            next: 0,
            faulty: false,
        }
    }

    fn body(&mut self) -> Vec<u8> {
        self.next += 1;
        format!("m{}", self.next).into_bytes()
    }

    /// Runs a request; `None` when it failed under an injected fault.
    fn exec(&mut self, req: Request) -> Option<Reply> {
        match self.b.execute(self.now, req) {
            Ok(r) => {
                self.drain();
                Some(r)
            }
            Err(e) => {
                assert!(self.faulty, "Err without an injected fault: {e}");
                None
            }
        }
    }

    fn drain(&mut self) {
        while let Some(o) = self.b.poll_output() {
            let Output::Check(c) = o else { continue };
            let answer = self
                .checker
                .unwrap_or_else(|| panic!("txn {} checked while its group is offline", c.txn));
            let i = self
                .txns
                .iter()
                .position(|t| t.id == c.txn)
                .unwrap_or_else(|| panic!("check of unknown txn {}", c.txn));
            assert!(
                matches!(self.txns[i].state, TxnState::Pending | TxnState::Unsure),
                "txn {} checked after it was resolved ({:?})",
                c.txn,
                self.txns[i].state
            );
            assert_eq!(
                c.message.body, self.txns[i].body,
                "check carries another body"
            );
            let req = Request::EndTransaction {
                txn: c.txn,
                resolution: answer.into(),
                group: Some(c.group.clone()),
                from_check: true,
            };
            match self.b.execute(self.now, req) {
                Ok(reply) => self.ended(i, answer, &reply),
                Err(e) => {
                    assert!(self.faulty, "Err without an injected fault: {e}");
                    self.txns[i].state = TxnState::Unsure;
                }
            }
        }
    }

    /// Updates the model from an END reply, and checks the reply fits the model.
    fn ended(&mut self, i: usize, res: Res, reply: &Reply) {
        let t = &mut self.txns[i];
        match (t.state, reply) {
            (
                TxnState::Pending | TxnState::Unsure,
                Reply::Ended {
                    duplicate: false, ..
                },
            ) => match res {
                Res::Commit => t.state = TxnState::Committed,
                Res::Rollback => t.state = TxnState::RolledBack,
                Res::Unknown => {}
            },
            (TxnState::Pending, Reply::Error(ClientError::TransactionAlreadyResolved { .. })) => {
                // Moved to the check-max topic without the model seeing it.
                t.state = TxnState::Unsure;
            }
            (
                TxnState::Committed,
                Reply::Ended {
                    duplicate: true, ..
                },
            ) if !matches!(res, Res::Rollback) => {}
            (
                TxnState::RolledBack,
                Reply::Ended {
                    duplicate: true, ..
                },
            ) if !matches!(res, Res::Commit) => {}
            (
                TxnState::Committed | TxnState::RolledBack | TxnState::Unsure,
                Reply::Error(ClientError::TransactionAlreadyResolved { .. }),
            ) => {}
            (
                TxnState::Unsure,
                Reply::Ended {
                    duplicate: true, ..
                },
            ) => {}
            (s, r) => panic!("END {res:?} of a {s:?} transaction {} answered {r:?}", t.id),
        }
    }

    fn fire(&mut self) {
        if let Err(e) = self.b.handle_timeout(self.now) {
            panic!("timer failed without a fault: {e}");
        }
        self.drain();
    }

    fn advance(&mut self, ms: u64) {
        let to = self.now + ms;
        self.fire();
        while let Some(t) = self.b.poll_timeout() {
            if t > to {
                break;
            }
            self.now = self.now.max(t);
            self.fire();
        }
        self.now = to;
        self.fire();
    }

    fn reopen(&mut self) {
        // Invisibility is a lease; a restart may hand a message out again sooner.
        self.invisible_until.clear();
        let image = self.b.storage().crash();
        self.b = Broker::open(self.cfg.clone(), CrashStorage::from_mem(image), self.now)
            .unwrap_or_else(|e| panic!("reopen failed: {e}"));
        if self.checker.is_some() {
            self.b.set_producer_online(self.now, PG, true);
        }
    }

    fn due(&self, delay: Option<DelayOp>) -> (Option<Delay>, Option<u64>) {
        match delay {
            None => (None, Some(self.now)),
            Some(DelayOp::Level(l)) => {
                let l = u32::from(l % 20);
                // Levels above the last one mean the last one, as in RocketMQ.
                let levels = &self.cfg.delay_levels;
                let due = match l {
                    0 => Some(self.now),
                    l => Some(self.now + levels[(l as usize).min(levels.len()) - 1]),
                };
                (Some(Delay::Level(l)), due)
            }
            Some(DelayOp::After(ms)) => (
                Some(Delay::After(u64::from(ms))),
                Some(self.now + u64::from(ms)),
            ),
            Some(DelayOp::At(d)) => {
                let at = self.now.saturating_add_signed(i64::from(d));
                (Some(Delay::At(at)), Some(at.max(self.now)))
            }
        }
    }

    /// A consumed body: known, not rolled back, due.
    fn consumed(&self, m: &Message, how: &str) {
        let body = &m.body;
        if let Some(t) = self.txns.iter().find(|t| &t.body == body) {
            assert!(
                t.state != TxnState::RolledBack,
                "{how}: rolled-back {body:?} consumed"
            );
            return;
        }
        let due = self
            .sent
            .get(body)
            .or_else(|| self.maybe.get(body))
            .unwrap_or_else(|| panic!("{how}: {body:?} was never sent"));
        assert!(
            *due <= self.now,
            "{how}: {body:?} due at {due} consumed at {}",
            self.now
        );
    }

    fn apply(&mut self, op: Op) {
        match op {
            Op::Send { topic, delay } => {
                let body = self.body();
                let (d, due) = self.due(delay);
                let mut m = NewMessage::new(TOPICS[usize::from(topic)], body.clone());
                m.delay = d;
                match self.exec(Request::Send { messages: vec![m] }) {
                    Some(Reply::Sent(v)) => {
                        let due = due.expect("an invalid delay level was accepted");
                        self.sent.insert(body, due);
                        self.normal_offsets.push(v[0].offset);
                    }
                    Some(Reply::Error(ClientError::InvalidDelay(_))) if due.is_none() => {}
                    Some(other) => panic!("send: {other:?}"),
                    None => {}
                }
            }
            Op::Batch { topic, n } => {
                let n = 2 + usize::from(n % 4);
                let bodies: Vec<Vec<u8>> = (0..n).map(|_| self.body()).collect();
                let msgs = bodies
                    .iter()
                    .map(|b| NewMessage::new(TOPICS[usize::from(topic)], b.clone()))
                    .collect();
                match self.exec(Request::Send { messages: msgs }) {
                    Some(Reply::Sent(v)) => {
                        assert_eq!(v.len(), n);
                        for b in bodies {
                            self.sent.insert(b, self.now);
                        }
                    }
                    Some(other) => panic!("batch: {other:?}"),
                    None => {}
                }
            }
            Op::Prepare { topic, immunity_s } => {
                let body = self.body();
                let req = Request::Prepare {
                    group: PG.into(),
                    message: NewMessage::new(TOPICS[usize::from(topic)], body.clone()),
                    check_immunity_ms: immunity_s.map(|s| u64::from(s) * 1000),
                };
                match self.exec(req) {
                    Some(Reply::Sent(r)) => self.txns.push(Txn {
                        id: r[0].txn.expect("a half has a txn id"),
                        body,
                        state: TxnState::Pending,
                    }),
                    Some(other) => panic!("prepare: {other:?}"),
                    None => {}
                }
            }
            Op::End { pick, res } => {
                let (txn, known) = match pick {
                    TxnPick::Known(i) if !self.txns.is_empty() => {
                        let i = usize::from(i) % self.txns.len();
                        (self.txns[i].id, Some(i))
                    }
                    TxnPick::NotAHalf(i) if !self.normal_offsets.is_empty() => (
                        TxnId(self.normal_offsets[usize::from(i) % self.normal_offsets.len()]),
                        None,
                    ),
                    TxnPick::Bogus(id) => match self.txns.iter().position(|t| t.id.0 == id) {
                        Some(i) => (TxnId(id), Some(i)),
                        None => (TxnId(id), None),
                    },
                    _ => return,
                };
                let req = Request::EndTransaction {
                    txn,
                    resolution: res.into(),
                    group: Some(PG.into()),
                    from_check: false,
                };
                match (self.exec(req), known) {
                    (Some(r), Some(i)) => self.ended(i, res, &r),
                    (Some(Reply::Error(_)), None) => {}
                    (Some(r), None) => panic!("END of {txn}, no transaction: {r:?}"),
                    (None, Some(i)) => self.txns[i].state = TxnState::Unsure,
                    (None, None) => {}
                }
            }
            Op::Checker(answer) => {
                self.checker = answer;
                self.b.set_producer_online(self.now, PG, answer.is_some());
                self.fire();
            }
            Op::Receive { max, invisible_ms } => {
                let req = Request::Receive {
                    group: RECEIVER.into(),
                    topic: TOPICS[0].into(),
                    queue_id: None,
                    max: 1 + u32::from(max % 4),
                    invisible_ms: 1_000 + u64::from(invisible_ms),
                    filter: TagFilter::All,
                };
                match self.exec(req) {
                    Some(Reply::Received(list)) => {
                        for rec in list {
                            self.consumed(&rec.message, "receive");
                            let body = rec.message.body;
                            assert!(!self.acked.contains(&body), "acked {body:?} received again");
                            if let Some(&until) = self.invisible_until.get(&body) {
                                assert!(
                                    self.now >= until,
                                    "{body:?} received again at {} while invisible until {until}",
                                    self.now
                                );
                            }
                            assert!(rec.visible_at > self.now, "received yet visible");
                            self.invisible_until.insert(body.clone(), rec.visible_at);
                            self.handles.push((rec.handle, body));
                        }
                    }
                    Some(other) => panic!("receive: {other:?}"),
                    None => {}
                }
            }
            Op::Ack { pick, forge } => {
                if self.handles.is_empty() {
                    return;
                }
                let (mut h, body) = self.handles[usize::from(pick) % self.handles.len()].clone();
                let forged = forge.is_some();
                match forge {
                    None => {}
                    Some(Forge::Generation(g)) => h.generation ^= g | 1 << 40,
                    Some(Forge::QueueOffset(o)) => h.queue_offset ^= o | 1 << 40,
                    Some(Forge::Topic) => h.topic = "NoSuchTopic".into(),
                }
                let req = Request::Ack {
                    group: RECEIVER.into(),
                    handle: h,
                };
                match self.exec(req) {
                    Some(Reply::Acked) => {
                        assert!(!forged, "a forged receipt handle was accepted");
                        assert!(self.acked.insert(body.clone()), "{body:?} acked twice");
                    }
                    Some(Reply::Error(
                        ClientError::InvalidReceiptHandle(_)
                        | ClientError::StaleReceiptHandle(_)
                        | ClientError::UnknownTopic(_),
                    )) => {}
                    Some(other) => panic!("ack: {other:?}"),
                    None => {}
                }
            }
            Op::ChangeInvisible { pick, ms } => {
                if self.handles.is_empty() {
                    return;
                }
                let i = usize::from(pick) % self.handles.len();
                let req = Request::ChangeInvisible {
                    group: RECEIVER.into(),
                    handle: self.handles[i].0.clone(),
                    invisible_ms: u64::from(ms),
                };
                match self.exec(req) {
                    Some(Reply::InvisibleChanged { handle, visible_at }) => {
                        assert!(visible_at >= self.now);
                        self.handles[i].0 = handle;
                        let body = self.handles[i].1.clone();
                        self.invisible_until.insert(body, visible_at);
                    }
                    Some(Reply::Error(
                        ClientError::InvalidReceiptHandle(_) | ClientError::StaleReceiptHandle(_),
                    )) => {}
                    Some(other) => panic!("change invisible: {other:?}"),
                    None => {}
                }
            }
            Op::Pull {
                group,
                topic,
                queue,
                max,
            } => {
                let g = usize::from(group);
                let req = Request::Pull {
                    group: PULLERS[g].into(),
                    topic: TOPICS[usize::from(topic)].into(),
                    queue_id: u32::from(queue),
                    offset: None,
                    max: 1 + u32::from(max % 8),
                    filter: TagFilter::All,
                    auto_commit: true,
                };
                match self.exec(req) {
                    Some(Reply::Pulled { messages, .. }) => {
                        for m in messages {
                            self.consumed(&m, "pull");
                            assert!(
                                self.pulled[g].insert(m.body.clone()),
                                "group {} pulled {:?} twice",
                                PULLERS[g],
                                m.body
                            );
                        }
                    }
                    Some(Reply::Error(ClientError::UnknownTopic(_))) => {}
                    Some(other) => panic!("pull: {other:?}"),
                    None => {}
                }
            }
            Op::CommitOffset {
                topic,
                queue_id,
                offset,
            } => {
                let req = Request::CommitOffset {
                    group: "P9".into(),
                    topic: ["T0", "T1", "NotATopic"][usize::from(topic % 3)].into(),
                    queue_id,
                    offset: u64::from(offset),
                };
                match self.exec(req) {
                    Some(Reply::OffsetCommitted) => {}
                    Some(Reply::Error(
                        ClientError::InvalidQueue { .. } | ClientError::UnknownTopic(_),
                    )) => {}
                    Some(other) => panic!("commit offset: {other:?}"),
                    None => {}
                }
                let queues: usize = self.b.topics().iter().map(|t| t.queues.len()).sum();
                assert!(queues <= 3 * 1024, "{queues} queues");
            }
            Op::Advance(ms) => self.advance(u64::from(ms)),
            Op::AdvanceLong(m) => self.advance(u64::from(m) * 60_000),
            Op::Crash => {
                self.reopen();
                self.fire();
            }
            Op::FaultySend { syncs, restart } => {
                let body = self.body();
                let due = self.now;
                {
                    let s = self.b.storage_mut();
                    s.fail_appends = !syncs;
                    s.fail_syncs = syncs;
                }
                self.faulty = true;
                let m = NewMessage::new(TOPICS[0], body.clone());
                let r = self.exec(Request::Send { messages: vec![m] });
                self.faulty = false;
                {
                    let s = self.b.storage_mut();
                    s.fail_appends = false;
                    s.fail_syncs = false;
                }
                match r {
                    Some(Reply::Sent(_)) => {
                        self.sent.insert(body, due);
                    }
                    Some(other) => panic!("send under a fault: {other:?}"),
                    None => {
                        self.maybe.insert(body, due);
                    }
                }
                // A failed sync fails the broker for good: only a reopen goes on.
                if restart || self.b.failed().is_some() {
                    self.reopen();
                }
                self.fire();
            }
        }
    }

    fn finish(&mut self) {
        self.apply(Op::Checker(Some(Res::Commit)));
        self.advance(3 * 3_600_000);
        let mut seen: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
        for t in self.b.topics() {
            if !TOPICS.contains(&t.name.as_str()) {
                continue;
            }
            for (qid, _, _) in &t.queues {
                let mut offset = 0;
                loop {
                    let req = Request::Pull {
                        group: "FINAL".into(),
                        topic: t.name.clone(),
                        queue_id: *qid,
                        offset: Some(offset),
                        max: 256,
                        filter: TagFilter::All,
                        auto_commit: false,
                    };
                    let Some(Reply::Pulled {
                        messages,
                        next_offset,
                        max_offset,
                    }) = self.exec(req)
                    else {
                        panic!("final pull failed");
                    };
                    for m in messages {
                        self.consumed(&m, "final pull");
                        *seen.entry(m.body).or_default() += 1;
                    }
                    if next_offset <= offset || next_offset >= max_offset {
                        break;
                    }
                    offset = next_offset;
                }
            }
        }
        for (body, n) in &seen {
            assert!(*n == 1, "{body:?} visible {n} times");
        }
        for body in self.sent.keys() {
            assert!(seen.contains_key(body), "acknowledged send {body:?} lost");
        }
        for t in &self.txns {
            if t.state == TxnState::Committed {
                assert!(seen.contains_key(&t.body), "committed {:?} lost", t.body);
            }
        }
    }
}

/// Runs a whole step sequence; panics on the first broken invariant.
pub fn run(ops: &[Op]) {
    let mut h = Harness::new();
    for &op in ops.iter().take(200) {
        h.apply(op);
    }
    h.finish();
}
