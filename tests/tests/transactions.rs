//! Transaction costs and ordering that are properties of the log, not of replies:
//! committing does not re-append the body; END_TRANSACTION's op record is in the log before
//! its reply comes out; checks go out by deadline and none is starved, with many pending.

use std::collections::BTreeMap;

use rocklet_core::testing::CrashStorage;
use rocklet_core::{
    Broker, Config, FlushMode, MemStorage, NewMessage, Output, Reply, Request, Resolution, Storage,
    TxnId,
};

const N: u64 = 200;

fn body(i: u64) -> Vec<u8> {
    let mut b = vec![b'x'; 1024];
    b[..8].copy_from_slice(&i.to_be_bytes());
    b
}

fn prepare<S: Storage>(b: &mut Broker<S>, now: u64, i: u64, immunity_ms: Option<u64>) -> TxnId {
    let req = Request::Prepare {
        group: "PG".into(),
        message: NewMessage::new("Orders", body(i)),
        check_immunity_ms: immunity_ms,
    };
    match b.execute(now, req).unwrap() {
        Reply::Sent(r) => r[0].txn.unwrap(),
        other => panic!("{other:?}"),
    }
}

fn end_req(txn: TxnId, resolution: Resolution, from_check: bool) -> Request {
    Request::EndTransaction {
        txn,
        resolution,
        group: Some("PG".into()),
        from_check,
    }
}

#[test]
fn committing_does_not_append_the_body_again() {
    let mut normal = Broker::open(Config::default(), MemStorage::new(), 0).unwrap();
    for i in 0..N {
        let r = normal
            .execute(
                i,
                Request::Send {
                    messages: vec![NewMessage::new("Orders", body(i))],
                },
            )
            .unwrap();
        assert!(matches!(r, Reply::Sent(_)));
    }
    let per_normal = normal.log_end() as f64 / N as f64;

    // Committed by the producer.
    let mut txn = Broker::open(Config::default(), MemStorage::new(), 0).unwrap();
    for i in 0..N {
        let t = prepare(&mut txn, i, i, None);
        assert!(matches!(
            txn.execute(i, end_req(t, Resolution::Commit, false))
                .unwrap(),
            Reply::Ended { .. }
        ));
    }
    let per_txn = txn.log_end() as f64 / N as f64;
    assert!(
        per_txn <= 1.25 * per_normal,
        "a committed transactional message costs {per_txn:.0} bytes, a normal one {per_normal:.0} (> 1.25x)"
    );

    // Committed after an unknown answer and a check (RocketMQ re-appends the half on every check).
    let mut checked = Broker::open(Config::default(), MemStorage::new(), 0).unwrap();
    checked.set_producer_online(0, "PG", true);
    let txns: Vec<TxnId> = (0..N).map(|i| prepare(&mut checked, 0, i, None)).collect();
    for &t in &txns {
        assert!(matches!(
            checked
                .execute(1, end_req(t, Resolution::Unknown, false))
                .unwrap(),
            Reply::Ended { .. }
        ));
    }
    checked.handle_timeout(6_000).unwrap();
    let mut answered = 0;
    while let Some(o) = checked.poll_output() {
        if let Output::Check(c) = o {
            checked
                .execute(6_000, end_req(c.txn, Resolution::Commit, true))
                .unwrap();
            answered += 1;
        }
    }
    assert_eq!(answered, N);
    assert_eq!(checked.pending_transaction_count(), 0);
    let per_checked = checked.log_end() as f64 / N as f64;
    // A check adds a small op record (the check count), never a copy of the half: well under
    // the 1 KiB body per check.
    assert!(
        per_checked - per_txn <= 256.0,
        "a check costs {:.0} bytes on top of a commit: the body is appended again?",
        per_checked - per_txn
    );
    // And every commit is visible once.
    assert_eq!(
        checked
            .topics()
            .iter()
            .find(|t| t.name == "Orders")
            .unwrap()
            .queues
            .iter()
            .map(|q| q.2)
            .sum::<u64>(),
        N
    );
}

/// The op records in a log, as (half offset, end offset of the op record).
fn op_records<S: Storage>(b: &mut Broker<S>) -> Vec<(u64, u64)> {
    b.raw_records(0, usize::MAX)
        .unwrap()
        .into_iter()
        .filter_map(
            |(off, bytes)| match rocklet_core::record::decode(&bytes, u32::MAX) {
                Ok(rocklet_core::record::Decoded::Record(r))
                    if r.topic == "RMQ_SYS_TRANS_OP_HALF_TOPIC" && r.prop("TAGS") == Some("d") =>
                {
                    Some((r.header.prepared_offset, off + bytes.len() as u64))
                }
                _ => None,
            },
        )
        .collect()
}

#[test]
fn end_transaction_appends_its_op_record_before_the_reply() {
    for flush in [FlushMode::Async, FlushMode::Sync] {
        let cfg = Config {
            flush,
            ..Config::default()
        };
        let mut b = Broker::open(cfg.clone(), CrashStorage::new(), 0).unwrap();
        let t = prepare(&mut b, 0, 1, None);
        let before = b.log_end();
        b.handle(1, 77, end_req(t, Resolution::Commit, false))
            .unwrap();
        let mut reply = b.poll_output();
        if flush == FlushMode::Sync {
            assert!(
                reply.is_none(),
                "sync flush: reply released before the sync"
            );
            b.sync().unwrap();
            reply = b.poll_output();
        }
        assert!(
            matches!(
                reply,
                Some(Output::Reply {
                    id: 77,
                    reply: Reply::Ended {
                        duplicate: false,
                        ..
                    }
                })
            ),
            "{reply:?}"
        );
        // At the moment the reply is out, the op record is in the log ...
        assert!(
            b.log_end() > before,
            "{flush:?}: the log did not grow before the reply"
        );
        let ops = op_records(&mut b);
        assert_eq!(ops.len(), 1, "{flush:?}");
        assert_eq!(ops[0].0, t.0, "{flush:?}: the op record names the half");
        assert!(ops[0].1 <= b.log_end());
        // ... and under sync flush durable: a crash right after the reply keeps the commit,
        // and a retried commit is a duplicate, not a second copy.
        let image = if flush == FlushMode::Sync {
            b.storage().crash()
        } else {
            b.storage().live()
        };
        let mut after = Broker::open(cfg, CrashStorage::from_mem(image), 2).unwrap();
        assert_eq!(
            after.pending_transaction_count(),
            0,
            "{flush:?}: the commit was lost in a crash"
        );
        let r = after
            .execute(3, end_req(t, Resolution::Commit, false))
            .unwrap();
        assert!(
            matches!(
                r,
                Reply::Ended {
                    duplicate: true,
                    ..
                }
            ),
            "{flush:?}: {r:?}"
        );
        let visible: u64 = after
            .topics()
            .iter()
            .flat_map(|t| t.queues.iter().map(|q| q.2))
            .sum();
        assert_eq!(visible, 1, "{flush:?}: one committed copy");
    }
}

/// 100,000 pending halves with deadlines in a scrambled order: every one is checked exactly at
/// its deadline, in deadline order, and re-checked at the interval; none is starved.
#[test]
fn checks_follow_deadlines_with_many_pending() {
    const HALVES: u64 = 100_000;
    let cfg = Config {
        segment_size: 256 << 20,
        ..Config::default()
    };
    let (timeout, interval) = (
        cfg.transaction_timeout_ms,
        cfg.transaction_check_interval_ms,
    );
    let mut b = Broker::open(cfg, MemStorage::new(), 0).unwrap();
    // deadline of the first check, per transaction
    let mut first: BTreeMap<TxnId, u64> = BTreeMap::new();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for i in 0..HALVES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let now = i / 10; // 10 halves per ms
        let immunity_s = x % 90; // 0..90 s: deadlines far out of prepare order
        let t = prepare(&mut b, now, i, Some(immunity_s * 1000));
        first.insert(t, now + timeout.max(immunity_s * 1000));
    }
    b.set_producer_online(HALVES / 10, "PG", true);
    assert_eq!(b.pending_transaction_count() as u64, HALVES);
    // Drive the clock by poll_timeout; answer unknown the first time for every third, commit
    // otherwise.
    let mut seen: BTreeMap<TxnId, Vec<(u64, u32)>> = BTreeMap::new();
    let mut last_due = 0;
    let mut now = HALVES / 10;
    while let Some(due) = b.poll_timeout() {
        assert!(
            due >= last_due,
            "deadlines went backwards: {due} after {last_due}"
        );
        last_due = due;
        now = now.max(due);
        b.handle_timeout(now).unwrap();
        while let Some(o) = b.poll_output() {
            let Output::Check(c) = o else { continue };
            let checks = seen.entry(c.txn).or_default();
            checks.push((now, c.check));
            let answer = if c.txn.0 % 3 == 0 && checks.len() == 1 {
                Resolution::Unknown
            } else {
                Resolution::Commit
            };
            b.execute(now, end_req(c.txn, answer, true)).unwrap();
        }
    }
    assert_eq!(b.pending_transaction_count(), 0, "halves left unchecked");
    assert_eq!(seen.len() as u64, HALVES, "every half checked");
    for (t, checks) in &seen {
        let want_first = first[t];
        // Checks go out at the deadline, or at the moment the group came online when that was later.
        let want_first = want_first.max(HALVES / 10);
        assert_eq!(checks[0], (want_first, 1), "txn {t}: first check");
        if t.0 % 3 == 0 {
            assert_eq!(checks.len(), 2, "txn {t}: one re-check after unknown");
            assert_eq!(
                checks[1],
                (want_first + interval, 2),
                "txn {t}: re-check at the interval"
            );
        } else {
            assert_eq!(
                checks.len(),
                1,
                "txn {t}: checked again after it was resolved"
            );
        }
    }
    let visible: u64 = b
        .topics()
        .iter()
        .flat_map(|t| t.queues.iter().map(|q| q.2))
        .sum();
    assert_eq!(visible, HALVES);
}

/// A duplicate or late END_TRANSACTION long after the fact (more resolutions since than the
/// broker remembers answers for) still never makes a second copy or resurrects, also after
/// reopen.
#[test]
fn old_duplicate_ends_never_copy_or_resurrect() {
    let mut b = Broker::open(Config::default(), MemStorage::new(), 0).unwrap();
    let committed = prepare(&mut b, 0, 0, None);
    let rolled = prepare(&mut b, 0, 1, None);
    b.execute(1, end_req(committed, Resolution::Commit, false))
        .unwrap();
    b.execute(1, end_req(rolled, Resolution::Rollback, false))
        .unwrap();
    for i in 0..1500 {
        let t = prepare(&mut b, 2, 10 + i, None);
        b.execute(2, end_req(t, Resolution::Rollback, false))
            .unwrap();
    }
    for round in 0..2 {
        for (t, res) in [
            (committed, Resolution::Commit),
            (committed, Resolution::Rollback),
            (rolled, Resolution::Commit),
            (rolled, Resolution::Rollback),
        ] {
            let r = b.execute(3, end_req(t, res, false)).unwrap();
            let ok = matches!(
                r,
                Reply::Ended {
                    duplicate: true,
                    ..
                }
            ) || matches!(
                r,
                Reply::Error(rocklet_core::ClientError::TransactionAlreadyResolved { .. })
            );
            assert!(ok, "round {round}: late {res:?} of {t}: {r:?}");
        }
        let visible: u64 = b
            .topics()
            .iter()
            .flat_map(|t| t.queues.iter().map(|q| q.2))
            .sum();
        assert_eq!(
            visible, 1,
            "round {round}: only the one committed message is visible"
        );
        assert_eq!(b.pending_transaction_count(), 0);
        b = Broker::open(Config::default(), b.into_storage(), 4).unwrap();
    }
}

#[test]
fn a_half_keeps_the_check_count_it_carries_and_a_committed_message_is_of_commit_type() {
    use rocklet_core::record::sys_flag;
    let mut b = Broker::open(Config::default(), MemStorage::new(), 0).unwrap();
    // As `rocklet import` brings a half over from RocketMQ: with the checks it had there.
    let mut m = NewMessage::new("Orders", body(1));
    m.properties = vec![("TRANSACTION_CHECK_TIMES".into(), "5".into())];
    m.queue_id = Some(0);
    let req = Request::Prepare {
        group: "PG".into(),
        message: m,
        check_immunity_ms: None,
    };
    let Reply::Sent(r) = b.execute(0, req).unwrap() else {
        panic!()
    };
    let txn = r[0].txn.unwrap();
    assert_eq!(b.pending_transactions(10)[0].checks, 5);
    let b2 = Broker::open(Config::default(), b.into_storage(), 1).unwrap();
    assert_eq!(b2.pending_transactions(10)[0].checks, 5, "after a restart");
    let mut b = b2;
    b.execute(1, end_req(txn, Resolution::Commit, false))
        .unwrap();
    let got = b.browse("Orders", 0, 0, 10).unwrap();
    assert_eq!(
        got[0].sys_flag & sys_flag::TRANSACTION_TYPE_MASK,
        sys_flag::TRANSACTION_COMMIT_TYPE,
        "consumers see a committed message, as RocketMQ's committed copy"
    );
    assert_eq!(
        got[0].property("TRAN_MSG"),
        Some("true"),
        "as RocketMQ keeps it"
    );
}
