//! Sync flush with the fsync off the broker's thread (`Broker::sync_target` /
//! `Broker::synced_to`, what the `rocklet` driver does): writes go on while a sync runs, and
//! the sync releases only what it covered. Any interleaving of sends, commits, receives and
//! acks with detached syncs, then a power cut: every reply the broker released is durable,
//! every message a consumer could see survives, and nothing released was not covered.
//!
//! Syncs also fail, as Linux's fsync fails on a write error: the bytes it could not write are
//! gone (`CrashStorage` zeroes them in every later durable image), although the page cache
//! still shows them. The broker must never take a later sync as if the failed one had not
//! happened: it fails, answers what waited as `Output::Failed`, and is opened again from what
//! is durable (the worst case: a power cut right after the failure).

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use rocklet_core::testing::CrashStorage;
use rocklet_core::{
    Broker, Config, FlushMode, MemStorage, NewMessage, Output, Reply, Request, Resolution, Storage,
};

#[derive(Clone, Debug)]
enum Op {
    /// A plain send (a batch of `n` when n > 1).
    Send(u8),
    /// Prepare a transaction (answered by a later `End`).
    Prepare,
    /// End the oldest transaction whose prepare was released: commit or roll back.
    End(bool),
    /// Detach a sync of what is appended now (if none is in flight).
    Detach,
    /// Complete the sync in flight.
    Complete,
    /// A blocking sync (what timers and shutdown do).
    SyncHere,
    /// A blocking sync that fails (EIO).
    FailHere,
    /// The sync in flight fails.
    FailDetached,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..4).prop_map(Op::Send),
        2 => Just(Op::Prepare),
        2 => any::<bool>().prop_map(Op::End),
        3 => Just(Op::Detach),
        3 => Just(Op::Complete),
        1 => Just(Op::SyncHere),
        1 => Just(Op::FailHere),
        1 => Just(Op::FailDetached),
    ]
}

fn cfg() -> Config {
    Config {
        flush: FlushMode::Sync,
        segment_size: 64 << 10,
        max_message_size: 4096,
        max_batch_size: 8192,
        default_queues: 2,
        ..Config::default()
    }
}

/// Every visible body of topic T, all queues (`browse`: no sync, no group).
fn visible<S: Storage>(b: &mut Broker<S>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for q in 0..2 {
        let messages = b.browse("T", q, 0, 4096).unwrap();
        out.extend(
            messages
                .into_iter()
                .map(|m| String::from_utf8(m.body).unwrap()),
        );
    }
    out
}

struct Run {
    b: Broker<CrashStorage>,
    next_id: u64,
    next_body: u32,
    /// What each request id wrote (bodies that become visible once it is committed).
    bodies: BTreeMap<u64, Vec<String>>,
    /// Released replies: plain sends and commits (bodies that must survive).
    acked: BTreeSet<String>,
    /// Prepares released, not yet ended: (txn, body).
    prepared: Vec<(rocklet_core::TxnId, String)>,
    /// Prepares in flight: request id -> body.
    preparing: BTreeMap<u64, String>,
    /// Ends in flight: request id -> (txn, body, commit).
    ending: BTreeMap<u64, (rocklet_core::TxnId, String, bool)>,
    in_flight: Option<(u64, MemStorage)>,
    /// Syncs that failed, each followed by a reopen.
    failures: u32,
}

impl Run {
    fn handle(&mut self, req: Request) -> u64 {
        self.next_id += 1;
        self.b.handle(0, self.next_id, req).unwrap();
        self.next_id
    }

    /// After a failed sync: the broker takes nothing more; it is opened again from what is
    /// durable, as a supervisor restarting it after a power cut would.
    fn reopen_after_failure(&mut self) {
        assert!(
            self.b.failed().is_some(),
            "a failed sync must fail the broker"
        );
        assert!(
            matches!(
                self.b.execute(
                    0,
                    Request::Send {
                        messages: vec![NewMessage::new("T", &b"x"[..])]
                    }
                ),
                Err(rocklet_core::Error::Failed { .. })
            ),
            "a failed broker must refuse requests"
        );
        assert!(matches!(
            self.b.sync(),
            Err(rocklet_core::Error::Failed { .. })
        ));
        self.collect();
        assert!(
            self.bodies.is_empty() && self.preparing.is_empty() && self.ending.is_empty(),
            "every reply that waited must come out as Failed"
        );
        self.in_flight = None;
        self.failures += 1;
        let durable = self.b.storage().crash();
        self.b = Broker::open(cfg(), CrashStorage::from_mem(durable), 0).unwrap();
    }

    fn body(&mut self) -> String {
        self.next_body += 1;
        format!("m{}", self.next_body)
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Send(n) => {
                let bodies: Vec<String> = (0..*n).map(|_| self.body()).collect();
                let messages = bodies
                    .iter()
                    .map(|b| NewMessage::new("T", b.as_bytes().to_vec()))
                    .collect();
                let id = self.handle(Request::Send { messages });
                self.bodies.insert(id, bodies);
            }
            Op::Prepare => {
                let body = self.body();
                let id = self.handle(Request::Prepare {
                    group: "PG".into(),
                    message: NewMessage::new("T", body.as_bytes().to_vec()),
                    check_immunity_ms: Some(3_600_000),
                });
                self.preparing.insert(id, body);
            }
            Op::End(commit) => {
                if self.prepared.is_empty() {
                    return;
                }
                let (txn, body) = self.prepared.remove(0);
                let resolution = if *commit {
                    Resolution::Commit
                } else {
                    Resolution::Rollback
                };
                let id = self.handle(Request::EndTransaction {
                    txn,
                    resolution,
                    group: Some("PG".into()),
                    from_check: false,
                });
                self.ending.insert(id, (txn, body, *commit));
            }
            Op::Detach => {
                if self.in_flight.is_none() {
                    if let Some(t) = self.b.sync_target() {
                        let image = self.b.storage().detach_sync();
                        self.in_flight = Some((t, image));
                    }
                }
            }
            Op::Complete => {
                if let Some((t, image)) = self.in_flight.take() {
                    self.b.storage_mut().complete_sync(image);
                    self.b.synced_to(t);
                }
            }
            Op::SyncHere => self.b.sync().unwrap(),
            Op::FailHere => {
                if self.b.needs_sync() {
                    self.b.storage_mut().fail_syncs = true;
                    assert!(self.b.sync().is_err());
                    self.b.storage_mut().fail_syncs = false;
                    self.reopen_after_failure();
                }
            }
            Op::FailDetached => {
                if let Some((_, image)) = self.in_flight.take() {
                    self.b.storage_mut().fail_sync(image);
                    self.b.sync_failed("injected EIO");
                    self.reopen_after_failure();
                }
            }
        }
        self.collect();
    }

    fn collect(&mut self) {
        while let Some(o) = self.b.poll_output() {
            let (id, reply) = match o {
                Output::Reply { id, reply } => (id, reply),
                Output::Failed { id, .. } => {
                    // Unknown outcome: a send or prepare may or may not survive (the model
                    // counts neither); a transaction whose end failed is still pending.
                    self.bodies.remove(&id);
                    self.preparing.remove(&id);
                    if let Some((txn, body, _)) = self.ending.remove(&id) {
                        self.prepared.push((txn, body));
                    }
                    continue;
                }
                _ => continue,
            };
            if let Some(bodies) = self.bodies.remove(&id) {
                assert!(matches!(reply, Reply::Sent(_)), "{reply:?}");
                self.acked.extend(bodies);
            } else if let Some(body) = self.preparing.remove(&id) {
                let Reply::Sent(r) = reply else {
                    panic!("prepare: {reply:?}")
                };
                self.prepared.push((r[0].txn.unwrap(), body));
            } else if let Some((_, body, commit)) = self.ending.remove(&id) {
                assert!(matches!(reply, Reply::Ended { .. }), "{reply:?}");
                if commit {
                    self.acked.insert(body);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn what_a_detached_sync_released_survives_a_power_cut(
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let mut r = Run {
            b: Broker::open(cfg(), CrashStorage::new(), 0).unwrap(),
            next_id: 0,
            next_body: 0,
            bodies: BTreeMap::new(),
            acked: BTreeSet::new(),
            prepared: Vec::new(),
            preparing: BTreeMap::new(),
            ending: BTreeMap::new(),
            in_flight: None,
            failures: 0,
        };
        for op in &ops {
            r.apply(op);
            // Consumers see exactly what was acknowledged: nothing before its sync, nothing
            // acknowledged left invisible.
            let seen = visible(&mut r.b);
            prop_assert_eq!(&seen, &r.acked, "after {:?}", op);
        }
        // Power cut: only what syncs completed is left. A sync in flight did not complete.
        let mut after = Broker::open(cfg(), CrashStorage::from_mem(r.b.storage().crash()), 0).unwrap();
        let survived = visible(&mut after);
        let lost: Vec<_> = r.acked.difference(&survived).collect();
        prop_assert!(lost.is_empty(), "acknowledged but lost: {:?}", lost);
    }
}
