//! Model test: random sequences of sends, batches, delayed sends, transactions (commit,
//! rollback, unknown, duplicate and late END_TRANSACTION), check answers, producers going
//! offline, time passing, receive + ack, and crash-and-reopen, checked after every step
//! against a plain reference model:
//!
//! - what consumers see in user topics is exactly what was sent (and is due) or committed,
//!   each exactly once;
//! - nothing delayed appears before it is due; no rolled-back message ever appears;
//! - a resolved transaction is never checked again;
//! - every acknowledged write survives a crash (sync flush: the durable image; async flush:
//!   a process crash, the live image); an unacknowledged one under sync flush does not
//!   appear;
//! - a receive never hands out an acked message or something not visible.
//!
//! `PROPTEST_CASES=2000 cargo test -p rocklet-conformance --test model` runs longer.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use rocklet_conformance::probe;
use rocklet_core::testing::CrashStorage;
use rocklet_core::{
    Broker, ClientError, Config, Delay, FlushMode, NewMessage, Output, ReceiptHandle, Reply,
    Request, Resolution, TagFilter, TxnId,
};

#[derive(Debug, Clone)]
enum Op {
    Send { topic: u8, delay: Option<Delay> },
    Batch { topic: u8, n: u8 },
    Prepare { topic: u8 },
    End { pick: u16, resolution: Resolution },
    Checker(Option<Resolution>),
    Advance(u64),
    Receive { max: u8, invisible_ms: u64 },
    Ack { pick: u16 },
    Crash,
    UnackedSendThenCrash { topic: u8 },
}

fn resolution() -> impl Strategy<Value = Resolution> {
    prop_oneof![
        Just(Resolution::Commit),
        Just(Resolution::Rollback),
        Just(Resolution::Unknown)
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let delay = prop_oneof![
        3 => Just(None),
        1 => (1u32..=5).prop_map(|l| Some(Delay::Level(l))),
        1 => (0u64..60_000).prop_map(|t| Some(Delay::At(t))),
        1 => (0u64..20_000).prop_map(|t| Some(Delay::After(t))),
    ];
    prop_oneof![
        4 => (0u8..2, delay).prop_map(|(topic, delay)| Op::Send { topic, delay }),
        2 => (0u8..2, 2u8..5).prop_map(|(topic, n)| Op::Batch { topic, n }),
        4 => (0u8..2).prop_map(|topic| Op::Prepare { topic }),
        4 => (any::<u16>(), resolution()).prop_map(|(pick, resolution)| Op::End { pick, resolution }),
        1 => prop_oneof![Just(None), resolution().prop_map(Some)].prop_map(Op::Checker),
        4 => prop_oneof![0u64..2_000, 2_000u64..40_000].prop_map(Op::Advance),
        2 => (1u8..4, 1_000u64..10_000).prop_map(|(max, invisible_ms)| Op::Receive { max, invisible_ms }),
        2 => any::<u16>().prop_map(|pick| Op::Ack { pick }),
        1 => Just(Op::Crash),
        1 => (0u8..2).prop_map(|topic| Op::UnackedSendThenCrash { topic }),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxnState {
    Pending,
    Committed,
    RolledBack,
    /// Ran out of checks: readable in TRANS_CHECK_MAX_TIME_TOPIC only.
    CheckMax,
}

#[derive(Debug)]
struct Txn {
    id: TxnId,
    topic: String,
    body: Vec<u8>,
    state: TxnState,
}

/// The reference model.
#[derive(Debug, Default)]
struct Model {
    /// Acknowledged sends: (topic, body, due).
    sent: Vec<(String, Vec<u8>, u64)>,
    txns: Vec<Txn>,
    /// Bodies acked by the receiving group.
    acked: BTreeSet<Vec<u8>>,
    /// Bodies ever received (a dead-letter copy must be one of these).
    received: BTreeSet<Vec<u8>>,
    /// Bodies whose send was never acknowledged and that a crash took back.
    lost: BTreeSet<Vec<u8>>,
}

const TOPICS: [&str; 2] = ["T0", "T1"];
const RECEIVER: &str = "C";

struct Harness {
    cfg: Config,
    b: Broker<CrashStorage>,
    now: u64,
    checker: Option<Resolution>,
    m: Model,
    handles: Vec<(ReceiptHandle, Vec<u8>)>,
    next: u64,
}

impl Harness {
    fn new(flush: FlushMode) -> Self {
        let cfg = Config {
            flush,
            segment_size: 1 << 20,
            max_message_size: 1024,
            max_batch_size: 4096,
            default_queues: 2,
            transaction_timeout_ms: 3_000,
            transaction_check_interval_ms: 10_000,
            transaction_check_max: 5,
            max_delivery_attempts: 3,
            ..Config::default()
        };
        let b = Broker::open(cfg.clone(), CrashStorage::new(), 0).unwrap();
        Harness {
            cfg,
            b,
            now: 0,
            checker: None,
            m: Model::default(),
            handles: Vec::new(),
            next: 0,
        }
    }

    fn body(&mut self) -> Vec<u8> {
        self.next += 1;
        format!("m{}", self.next).into_bytes()
    }

    fn txn_mut(&mut self, id: TxnId) -> Option<&mut Txn> {
        self.m.txns.iter_mut().find(|t| t.id == id)
    }

    /// Answers checks (and checks that they concern pending transactions only).
    fn drain(&mut self) -> Result<(), TestCaseError> {
        while let Some(o) = self.b.poll_output() {
            let Output::Check(c) = o else { continue };
            let answer = self.checker;
            let txn = self
                .txn_mut(c.txn)
                .ok_or_else(|| TestCaseError::fail(format!("check of unknown txn {}", c.txn)))?;
            prop_assert_eq!(
                txn.state,
                TxnState::Pending,
                "txn {} checked after it was resolved",
                c.txn
            );
            prop_assert!(
                answer.is_some(),
                "txn {} checked while its producer group is offline",
                c.txn
            );
            let answer = answer.unwrap_or(Resolution::Unknown);
            let req = Request::EndTransaction {
                txn: c.txn,
                resolution: answer,
                group: Some(c.group.clone()),
                from_check: true,
            };
            let reply = self.b.execute(self.now, req).unwrap();
            prop_assert!(
                matches!(
                    reply,
                    Reply::Ended {
                        duplicate: false,
                        ..
                    }
                ),
                "check answer: {:?}",
                reply
            );
            let txn = self.txn_mut(c.txn).expect("found above");
            match answer {
                Resolution::Commit => txn.state = TxnState::Committed,
                Resolution::Rollback => txn.state = TxnState::RolledBack,
                Resolution::Unknown => {}
            }
        }
        Ok(())
    }

    /// Fires what is due now, answers checks, and syncs as a host would after a burst.
    fn fire(&mut self) -> Result<(), TestCaseError> {
        self.b.handle_timeout(self.now).unwrap();
        self.drain()?;
        if self.b.needs_sync() {
            self.b.sync().unwrap();
        }
        self.drain()
    }

    fn advance(&mut self, ms: u64) -> Result<(), TestCaseError> {
        let to = self.now + ms;
        self.fire()?;
        while let Some(t) = self.b.poll_timeout() {
            if t > to {
                break;
            }
            self.now = self.now.max(t);
            self.fire()?;
        }
        self.now = to;
        self.fire()
    }

    fn exec(&mut self, req: Request) -> Result<Reply, TestCaseError> {
        let r = self.b.execute(self.now, req).unwrap();
        self.drain()?;
        Ok(r)
    }

    fn reopen(&mut self, image: rocklet_core::MemStorage) {
        self.b = Broker::open(self.cfg.clone(), CrashStorage::from_mem(image), self.now).unwrap();
        if self.checker.is_some() {
            self.b.set_producer_online(self.now, "PG", true);
        }
    }

    fn crash_image(&self) -> rocklet_core::MemStorage {
        match self.cfg.flush {
            FlushMode::Sync => self.b.storage().crash(),
            FlushMode::Async => self.b.storage().live(),
        }
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Send { topic, delay } => {
                let body = self.body();
                let mut m = NewMessage::new(TOPICS[*topic as usize], body.clone());
                m.delay = *delay;
                let due = match delay {
                    None | Some(Delay::Level(0)) => self.now,
                    Some(Delay::Level(l)) => self.now + self.cfg.delay_levels[*l as usize - 1],
                    Some(Delay::At(at)) => (*at).max(self.now),
                    Some(Delay::After(ms)) => self.now + ms,
                };
                let r = self.exec(Request::Send { messages: vec![m] })?;
                prop_assert!(matches!(r, Reply::Sent(_)), "{:?}", r);
                self.m
                    .sent
                    .push((TOPICS[*topic as usize].into(), body, due));
            }
            Op::Batch { topic, n } => {
                let bodies: Vec<Vec<u8>> = (0..*n).map(|_| self.body()).collect();
                let msgs = bodies
                    .iter()
                    .map(|b| NewMessage::new(TOPICS[*topic as usize], b.clone()))
                    .collect();
                let r = self.exec(Request::Send { messages: msgs })?;
                prop_assert!(
                    matches!(&r, Reply::Sent(v) if v.len() == *n as usize),
                    "{:?}",
                    r
                );
                if let Reply::Sent(v) = &r {
                    // One queue, consecutive queue offsets.
                    for w in v.windows(2) {
                        prop_assert_eq!(w[0].queue_id, w[1].queue_id);
                        prop_assert_eq!(w[0].queue_offset + 1, w[1].queue_offset);
                    }
                }
                for b in bodies {
                    self.m
                        .sent
                        .push((TOPICS[*topic as usize].into(), b, self.now));
                }
            }
            Op::Prepare { topic } => {
                let body = self.body();
                let req = Request::Prepare {
                    group: "PG".into(),
                    message: NewMessage::new(TOPICS[*topic as usize], body.clone()),
                    check_immunity_ms: None,
                };
                match self.exec(req)? {
                    Reply::Sent(r) => self.m.txns.push(Txn {
                        id: r[0].txn.expect("a half has a txn id"),
                        topic: TOPICS[*topic as usize].into(),
                        body,
                        state: TxnState::Pending,
                    }),
                    other => prop_assert!(false, "prepare: {:?}", other),
                }
            }
            Op::End { pick, resolution } => {
                if self.m.txns.is_empty() {
                    return Ok(());
                }
                let i = *pick as usize % self.m.txns.len();
                let (id, state) = (self.m.txns[i].id, self.m.txns[i].state);
                let req = Request::EndTransaction {
                    txn: id,
                    resolution: *resolution,
                    group: Some("PG".into()),
                    from_check: false,
                };
                // Nothing is due at `now` (every step ends with `fire`), so no check can cross
                // this END: the reply is judged against the model state before it.
                let r = self.exec(req)?;
                match (state, resolution, &r) {
                    (
                        TxnState::Pending,
                        Resolution::Commit,
                        Reply::Ended {
                            duplicate: false, ..
                        },
                    ) => {
                        self.m.txns[i].state = TxnState::Committed;
                    }
                    (
                        TxnState::Pending,
                        Resolution::Rollback,
                        Reply::Ended {
                            duplicate: false, ..
                        },
                    ) => {
                        self.m.txns[i].state = TxnState::RolledBack;
                    }
                    (
                        TxnState::Pending,
                        Resolution::Unknown,
                        Reply::Ended {
                            duplicate: false, ..
                        },
                    ) => {}
                    // The broker moved it to the check-max topic without us seeing it yet.
                    (
                        TxnState::Pending,
                        _,
                        Reply::Error(ClientError::TransactionAlreadyResolved {
                            resolution: None,
                            ..
                        }),
                    ) => {
                        self.m.txns[i].state = TxnState::CheckMax;
                    }
                    (
                        TxnState::Committed,
                        Resolution::Commit | Resolution::Unknown,
                        Reply::Ended {
                            duplicate: true, ..
                        },
                    )
                    | (
                        TxnState::RolledBack,
                        Resolution::Rollback | Resolution::Unknown,
                        Reply::Ended {
                            duplicate: true, ..
                        },
                    )
                    | (
                        TxnState::Committed,
                        Resolution::Rollback,
                        Reply::Error(ClientError::TransactionAlreadyResolved { .. }),
                    )
                    | (
                        TxnState::RolledBack,
                        Resolution::Commit,
                        Reply::Error(ClientError::TransactionAlreadyResolved { .. }),
                    )
                    | (
                        TxnState::CheckMax,
                        _,
                        Reply::Error(ClientError::TransactionAlreadyResolved { .. }),
                    ) => {}
                    (s, res, r) => prop_assert!(
                        false,
                        "END {:?} of a {:?} transaction answered {:?}",
                        res,
                        s,
                        r
                    ),
                }
            }
            Op::Checker(answer) => {
                self.checker = *answer;
                self.b.set_producer_online(self.now, "PG", answer.is_some());
                self.fire()?;
            }
            Op::Advance(ms) => self.advance(*ms)?,
            Op::Receive { max, invisible_ms } => {
                let req = Request::Receive {
                    group: RECEIVER.into(),
                    topic: TOPICS[0].into(),
                    queue_id: None,
                    max: u32::from(*max),
                    invisible_ms: *invisible_ms,
                    filter: TagFilter::All,
                };
                let r = self.exec(req)?;
                let Reply::Received(list) = r else {
                    return Err(TestCaseError::fail(format!("receive: {r:?}")));
                };
                let expected = self.expected_visible();
                let topic0: BTreeSet<&Vec<u8>> = expected
                    .get(TOPICS[0])
                    .map(|v| v.iter().collect())
                    .unwrap_or_default();
                for rec in list {
                    let body = rec.message.body;
                    prop_assert!(
                        !self.m.acked.contains(&body),
                        "acked message {:?} delivered again",
                        body
                    );
                    prop_assert!(
                        topic0.contains(&body),
                        "received {:?} which is not visible",
                        body
                    );
                    self.m.received.insert(body.clone());
                    self.handles.push((rec.handle, body));
                }
            }
            Op::Ack { pick } => {
                if self.handles.is_empty() {
                    return Ok(());
                }
                let (h, body) = self.handles[*pick as usize % self.handles.len()].clone();
                let r = self.exec(Request::Ack {
                    group: RECEIVER.into(),
                    handle: h,
                })?;
                match r {
                    Reply::Acked => {
                        prop_assert!(self.m.acked.insert(body.clone()), "{:?} acked twice", body);
                    }
                    Reply::Error(
                        ClientError::InvalidReceiptHandle(_) | ClientError::StaleReceiptHandle(_),
                    ) => {}
                    other => prop_assert!(false, "ack: {:?}", other),
                }
            }
            Op::Crash => {
                let image = self.crash_image();
                self.reopen(image);
                self.fire()?;
            }
            Op::UnackedSendThenCrash { topic } => {
                let body = self.body();
                let req = Request::Send {
                    messages: vec![NewMessage::new(TOPICS[*topic as usize], body.clone())],
                };
                self.b.handle(self.now, 1, req).unwrap();
                let acknowledged = self.b.poll_output().is_some();
                let image = self.crash_image();
                self.reopen(image);
                if acknowledged {
                    // Async flush: the reply came out at once, so it must survive a process crash.
                    prop_assert_eq!(self.cfg.flush, FlushMode::Async);
                    self.m
                        .sent
                        .push((TOPICS[*topic as usize].into(), body, self.now));
                } else {
                    self.m.lost.insert(body);
                }
                self.fire()?;
            }
        }
        Ok(())
    }

    /// User-topic bodies the model says are visible now, per topic, sorted.
    fn expected_visible(&self) -> BTreeMap<String, Vec<Vec<u8>>> {
        let mut out: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        for (t, b, due) in &self.m.sent {
            if *due <= self.now {
                out.entry(t.clone()).or_default().push(b.clone());
            }
        }
        for t in &self.m.txns {
            if t.state == TxnState::Committed {
                out.entry(t.topic.clone()).or_default().push(t.body.clone());
            }
        }
        for v in out.values_mut() {
            v.sort();
        }
        out
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        self.fire()?;
        let mut seen = probe::visible(&mut self.b, self.now);
        let check_max = seen
            .remove("TRANS_CHECK_MAX_TIME_TOPIC")
            .unwrap_or_default();
        let dlq = seen.remove("%DLQ%C").unwrap_or_default();
        for body in &check_max {
            let t = self.m.txns.iter_mut().find(|t| &t.body == body);
            let Some(t) = t else {
                return Err(TestCaseError::fail(format!(
                    "{body:?} in check-max topic is no half"
                )));
            };
            prop_assert!(
                matches!(t.state, TxnState::Pending | TxnState::CheckMax),
                "{:?} in check-max topic but {:?}",
                body,
                t.state
            );
            t.state = TxnState::CheckMax;
        }
        for body in &dlq {
            prop_assert!(
                self.m.received.contains(body),
                "{:?} dead-lettered but never received",
                body
            );
            prop_assert!(
                !self.m.acked.contains(body),
                "{:?} dead-lettered after it was acked",
                body
            );
        }
        for bodies in seen.values() {
            for w in bodies.windows(2) {
                prop_assert_ne!(&w[0], &w[1], "a message is visible twice");
            }
        }
        let rolled: BTreeSet<&Vec<u8>> = self
            .m
            .txns
            .iter()
            .filter(|t| t.state == TxnState::RolledBack)
            .map(|t| &t.body)
            .collect();
        for bodies in seen.values() {
            for b in bodies {
                prop_assert!(!rolled.contains(b), "rolled-back {:?} is visible", b);
                prop_assert!(
                    !self.m.lost.contains(b),
                    "unacknowledged {:?} survived a crash under sync flush",
                    b
                );
            }
        }
        let expected = self.expected_visible();
        prop_assert_eq!(
            &seen,
            &expected,
            "visible messages differ from the model at {} ms",
            self.now
        );
        let pending = self
            .m
            .txns
            .iter()
            .filter(|t| t.state == TxnState::Pending)
            .count();
        prop_assert_eq!(
            self.b.pending_transaction_count(),
            pending,
            "pending transactions"
        );
        let delays = self
            .m
            .sent
            .iter()
            .filter(|(_, _, due)| *due > self.now)
            .count();
        prop_assert_eq!(self.b.pending_delay_count(), delays, "pending delays");
        Ok(())
    }
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn broker_matches_the_reference_model(
        sync in any::<bool>(),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut h = Harness::new(if sync { FlushMode::Sync } else { FlushMode::Async });
        for (i, op) in ops.iter().enumerate() {
            h.apply(op).map_err(|e| TestCaseError::fail(format!("step {i} {op:?}: {e}")))?;
            h.check().map_err(|e| TestCaseError::fail(format!("after step {i} {op:?}: {e}")))?;
        }
        // Let everything come due and every check be answered: nothing is left behind.
        h.apply(&Op::Checker(Some(Resolution::Commit)))?;
        h.advance(3_600_000 * 3)?;
        h.check()?;
        prop_assert_eq!(h.b.pending_transaction_count(), 0);
        prop_assert_eq!(h.b.pending_delay_count(), 0);
    }
}
