//! Behaviour tests of the state machine, driven through the simulator.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::testing::{CrashStorage, Sim};
use crate::*;

fn cfg() -> Config {
    Config {
        segment_size: 8 << 20,
        max_message_size: 64 << 10,
        max_batch_size: 256 << 10,
        ..Config::default()
    }
}

fn send(sim: &mut Sim<impl Storage>, topic: &str, body: &str) -> SendResult {
    match sim
        .request(Request::Send {
            messages: vec![NewMessage::new(topic, body)],
        })
        .unwrap()
    {
        Reply::Sent(mut r) => r.remove(0),
        other => panic!("send failed: {other:?}"),
    }
}

fn prepare(sim: &mut Sim<impl Storage>, group: &str, topic: &str, body: &str) -> TxnId {
    let req = Request::Prepare {
        group: group.into(),
        message: NewMessage::new(topic, body),
        check_immunity_ms: None,
    };
    match sim.request(req).unwrap() {
        Reply::Sent(r) => r[0].txn.unwrap(),
        other => panic!("prepare failed: {other:?}"),
    }
}

fn end(sim: &mut Sim<impl Storage>, txn: TxnId, resolution: Resolution) -> Reply {
    let group = sim.broker.transaction_group(txn).unwrap();
    sim.request(Request::EndTransaction {
        txn,
        resolution,
        group,
        from_check: false,
    })
    .unwrap()
}

/// Every visible message body of a topic, all queues, in queue order.
fn bodies(sim: &mut Sim<impl Storage>, topic: &str) -> Vec<String> {
    let mut out = Vec::new();
    for q in 0..8 {
        let req = Request::Pull {
            group: "reader".into(),
            topic: topic.into(),
            queue_id: q,
            offset: Some(0),
            max: 1000,
            filter: TagFilter::All,
            auto_commit: false,
        };
        match sim.request(req).unwrap() {
            Reply::Pulled { messages, .. } => {
                out.extend(
                    messages
                        .into_iter()
                        .map(|m| String::from_utf8(m.body).unwrap()),
                );
            }
            Reply::Error(ClientError::InvalidQueue { .. }) => break,
            other => panic!("{other:?}"),
        }
    }
    out.sort();
    out
}

#[test]
fn send_and_pull() {
    let mut sim = Sim::new(cfg()).unwrap();
    for i in 0..10 {
        send(&mut sim, "T", &alloc::format!("m{i}"));
    }
    let b = bodies(&mut sim, "T");
    assert_eq!(b.len(), 10);
}

#[test]
fn commit_rollback_and_duplicates() {
    let mut sim = Sim::new(cfg()).unwrap();
    let a = prepare(&mut sim, "G", "T", "a");
    let b = prepare(&mut sim, "G", "T", "b");
    assert!(
        bodies(&mut sim, "T").is_empty(),
        "half messages are invisible"
    );
    assert!(matches!(
        end(&mut sim, a, Resolution::Commit),
        Reply::Ended {
            duplicate: false,
            ..
        }
    ));
    assert!(matches!(
        end(&mut sim, b, Resolution::Rollback),
        Reply::Ended {
            duplicate: false,
            ..
        }
    ));
    assert!(matches!(
        end(&mut sim, a, Resolution::Commit),
        Reply::Ended {
            duplicate: true,
            ..
        }
    ));
    assert!(matches!(
        end(&mut sim, b, Resolution::Commit),
        Reply::Error(ClientError::TransactionAlreadyResolved {
            resolution: Some(Resolution::Rollback),
            ..
        })
    ));
    assert!(matches!(
        end(&mut sim, a, Resolution::Rollback),
        Reply::Error(ClientError::TransactionAlreadyResolved {
            resolution: Some(Resolution::Commit),
            ..
        })
    ));
    assert!(matches!(
        end(&mut sim, TxnId(12345), Resolution::Commit),
        Reply::Error(ClientError::UnknownTransaction(_))
    ));
    assert_eq!(bodies(&mut sim, "T"), vec!["a"]);
    // After reopen, the same.
    let storage = sim.broker.into_storage();
    let mut sim = Sim::with_storage(cfg(), storage, 0).unwrap();
    assert_eq!(bodies(&mut sim, "T"), vec!["a"]);
    assert_eq!(sim.broker.pending_transaction_count(), 0);
    assert!(matches!(
        end(&mut sim, b, Resolution::Commit),
        Reply::Error(ClientError::TransactionAlreadyResolved { .. })
    ));
    assert_eq!(bodies(&mut sim, "T"), vec!["a"]);
}

#[test]
fn check_back_commits_and_stops() {
    let mut sim = Sim::new(cfg()).unwrap();
    sim.set_checker("G", |_| Resolution::Commit);
    let _t = prepare(&mut sim, "G", "T", "x");
    sim.advance(5_999).unwrap();
    assert!(sim.checks.is_empty());
    assert!(bodies(&mut sim, "T").is_empty());
    sim.advance(1).unwrap();
    assert_eq!(sim.checks.len(), 1);
    assert_eq!(bodies(&mut sim, "T"), vec!["x"]);
    sim.advance(1_000_000).unwrap();
    assert_eq!(
        sim.checks.len(),
        1,
        "a resolved transaction is never checked again"
    );
}

#[test]
fn checks_the_producer_leaves_unanswered_are_counted_once_each() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    b.set_producer_online(0, "G", true);
    let prepare = Request::Prepare {
        group: "G".into(),
        message: NewMessage::new("T", "x"),
        check_immunity_ms: None,
    };
    let Reply::Sent(r) = b.execute(0, prepare).unwrap() else {
        panic!()
    };
    let txn = r[0].txn.unwrap();
    let run = |b: &mut Broker<MemStorage>, now: Millis| {
        b.handle_timeout(now).unwrap();
        while b.poll_output().is_some() {}
        let s = b.stats();
        (s.checks_sent, s.checks_unanswered)
    };
    // Checks at 6 s, 36 s and 66 s, none answered: each earlier one is unanswered once the
    // next comes due.
    assert_eq!(run(&mut b, 6_000), (1, 0));
    assert_eq!(run(&mut b, 36_000), (2, 1));
    assert_eq!(run(&mut b, 66_000), (3, 2));
    // An UNKNOWN answer is an answer (counted as such, not as unanswered).
    let unknown = Request::EndTransaction {
        txn,
        resolution: Resolution::Unknown,
        group: Some("G".into()),
        from_check: true,
    };
    b.execute(70_000, unknown).unwrap();
    assert_eq!(run(&mut b, 96_000), (4, 2));
    assert_eq!(
        (b.stats().unknown_answers, b.stats().checks_unknown),
        (1, 1)
    );
    // The last check unanswered when the transaction reaches the check maximum counts too.
    let mut now = 96_000;
    while b.pending_transaction_count() > 0 {
        now += 30_000;
        run(&mut b, now);
    }
    let s = b.stats();
    assert_eq!(s.checks_sent, 15);
    assert_eq!(
        s.checks_unanswered, 14,
        "every check but the one answered UNKNOWN"
    );
}

#[test]
fn check_max_moves_to_dead_topic() {
    let mut sim = Sim::new(cfg()).unwrap();
    sim.set_checker("G", |_| Resolution::Unknown);
    prepare(&mut sim, "G", "T", "x");
    sim.advance(6_000 + 30_000 * 20).unwrap();
    assert_eq!(sim.checks.len(), 15);
    assert_eq!(bodies(&mut sim, topic::CHECK_MAX), vec!["x"]);
    assert!(bodies(&mut sim, "T").is_empty());
    assert_eq!(sim.broker.pending_transaction_count(), 0);
}

#[test]
fn offline_group_parks_checks_without_using_attempts() {
    let mut sim = Sim::new(cfg()).unwrap();
    prepare(&mut sim, "G", "T", "x");
    sim.advance(1_000_000).unwrap();
    assert!(sim.checks.is_empty());
    assert_eq!(sim.broker.pending_transactions(10)[0].checks, 0);
    sim.set_checker("G", |_| Resolution::Commit);
    sim.advance(1).unwrap();
    assert_eq!(sim.checks.len(), 1);
    assert_eq!(bodies(&mut sim, "T"), vec!["x"]);
}

#[test]
fn immunity_delays_first_check_without_attempts() {
    let mut sim = Sim::new(cfg()).unwrap();
    sim.set_checker("G", |_| Resolution::Unknown);
    let req = Request::Prepare {
        group: "G".into(),
        message: NewMessage::new("T", "x"),
        check_immunity_ms: Some(60_000),
    };
    sim.request(req).unwrap();
    sim.advance(59_999).unwrap();
    assert!(sim.checks.is_empty());
    sim.advance(1).unwrap();
    assert_eq!(sim.checks.len(), 1);
    assert_eq!(sim.checks[0].check, 1);
}

#[test]
fn pending_check_survives_reopen() {
    let mut sim = Sim::new(cfg()).unwrap();
    prepare(&mut sim, "G", "T", "x");
    let storage = sim.broker.into_storage();
    let mut sim = Sim::with_storage(cfg(), storage, 10_000).unwrap();
    sim.set_checker("G", |_| Resolution::Commit);
    sim.advance(0).unwrap();
    assert_eq!(sim.checks.len(), 1);
    assert_eq!(bodies(&mut sim, "T"), vec!["x"]);
}

#[test]
fn delay_levels_and_times() {
    let mut sim = Sim::new(cfg()).unwrap();
    let m = NewMessage::new("T", "lvl2").with_delay(Delay::Level(2));
    sim.request(Request::Send { messages: vec![m] }).unwrap();
    let m = NewMessage::new("T", "at3000").with_delay(Delay::At(3_000));
    sim.request(Request::Send { messages: vec![m] }).unwrap();
    let m = NewMessage::new("T", "max").with_delay(Delay::Level(99));
    sim.request(Request::Send { messages: vec![m] }).unwrap();
    sim.advance(2_999).unwrap();
    assert!(bodies(&mut sim, "T").is_empty());
    sim.advance(1).unwrap();
    assert_eq!(bodies(&mut sim, "T"), vec!["at3000"]);
    sim.advance(2_000).unwrap();
    assert_eq!(bodies(&mut sim, "T"), vec!["at3000", "lvl2"]);
    let storage = sim.broker.into_storage();
    let mut sim = Sim::with_storage(cfg(), storage, 5_000).unwrap();
    assert_eq!(bodies(&mut sim, "T"), vec!["at3000", "lvl2"]);
    sim.advance_to(7_200_000).unwrap();
    assert_eq!(bodies(&mut sim, "T"), vec!["at3000", "lvl2", "max"]);
}

#[test]
fn batch_consecutive_and_validated() {
    let mut sim = Sim::new(cfg()).unwrap();
    let msgs: Vec<_> = (0..5)
        .map(|i| NewMessage {
            queue_id: Some(1),
            ..NewMessage::new("T", alloc::format!("b{i}"))
        })
        .collect();
    let Reply::Sent(r) = sim.request(Request::Send { messages: msgs }).unwrap() else {
        panic!()
    };
    assert_eq!(
        r.iter().map(|r| r.queue_offset).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    let mixed = vec![NewMessage::new("T", "a"), NewMessage::new("U", "b")];
    assert!(matches!(
        sim.request(Request::Send { messages: mixed }).unwrap(),
        Reply::Error(ClientError::MixedBatch(_))
    ));
    let delayed = vec![
        NewMessage::new("T", "a"),
        NewMessage::new("T", "b").with_delay(Delay::Level(1)),
    ];
    assert!(matches!(
        sim.request(Request::Send { messages: delayed }).unwrap(),
        Reply::Error(ClientError::DelayInBatch)
    ));
}

#[test]
fn receive_ack_and_redelivery() {
    let mut sim = Sim::new(cfg()).unwrap();
    send(&mut sim, "T", "a");
    let recv = |sim: &mut Sim<MemStorage>| {
        let req = Request::Receive {
            group: "C".into(),
            topic: "T".into(),
            queue_id: None,
            max: 10,
            invisible_ms: 1000,
            filter: TagFilter::All,
        };
        match sim.request(req).unwrap() {
            Reply::Received(r) => r,
            other => panic!("{other:?}"),
        }
    };
    let r = recv(&mut sim);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].attempt, 1);
    assert!(recv(&mut sim).is_empty(), "invisible");
    sim.advance(1000).unwrap();
    let r2 = recv(&mut sim);
    assert_eq!(r2.len(), 1);
    assert_eq!(r2[0].attempt, 2);
    // The old handle is stale now.
    let stale = sim
        .request(Request::Ack {
            group: "C".into(),
            handle: r[0].handle.clone(),
        })
        .unwrap();
    assert!(matches!(
        stale,
        Reply::Error(ClientError::StaleReceiptHandle(_))
    ));
    let Reply::InvisibleChanged { handle, .. } = sim
        .request(Request::ChangeInvisible {
            group: "C".into(),
            handle: r2[0].handle.clone(),
            invisible_ms: 5000,
        })
        .unwrap()
    else {
        panic!()
    };
    // A change of invisible time renews the attempt: the handle from before it still names
    // the delivery (a consumer that renews need not track the new handle), and acks it.
    assert_eq!(
        sim.request(Request::Ack {
            group: "C".into(),
            handle: r2[0].handle.clone()
        })
        .unwrap(),
        Reply::Acked
    );
    assert!(matches!(
        sim.request(Request::Ack {
            group: "C".into(),
            handle
        })
        .unwrap(),
        Reply::Error(_)
    ));
    sim.advance(10_000).unwrap();
    assert!(recv(&mut sim).is_empty());
}

#[test]
fn a_full_disk_refuses_new_messages_and_serves_what_is_stored() {
    let mut sim = Sim::new(cfg()).unwrap();
    send(&mut sim, "T", "before");
    let txn = prepare(&mut sim, "P", "T", "half");
    let delayed = Request::Send {
        messages: vec![NewMessage::new("T", "later").with_delay(Delay::After(1000))],
    };
    assert!(matches!(sim.request(delayed).unwrap(), Reply::Sent(_)));
    let full = DiskFull {
        used_permille: 915,
        limit_permille: 900,
    };
    sim.broker.set_disk_full(Some(full));

    // New messages, of every kind, are refused by name; nothing is written for them.
    let end_before = sim.broker.log_end();
    let refused = [
        Request::Send {
            messages: vec![NewMessage::new("T", "x")],
        },
        Request::Send {
            messages: vec![NewMessage::new("T", "x"), NewMessage::new("T", "y")],
        },
        Request::Prepare {
            group: "P".into(),
            message: NewMessage::new("T", "x"),
            check_immunity_ms: None,
        },
        Request::SendBack {
            group: "C".into(),
            offset: 0,
            delay_level: None,
        },
    ];
    for r in refused {
        match sim.request(r).unwrap() {
            Reply::Error(e @ ClientError::DiskFull(_)) => {
                assert_eq!(e.code(), "DISK_FULL");
                let text = alloc::format!("{e}");
                assert!(text.contains("91.5 %") && text.contains("90.0 %"), "{text}");
            }
            other => panic!("not refused: {other:?}"),
        }
    }
    let m = MessageRef::new("T", b"direct");
    assert!(matches!(
        sim.broker.send_ref(sim.now, &m).unwrap(),
        Err(ClientError::DiskFull(d)) if d == full
    ));
    assert!(matches!(
        sim.broker.prepare_ref(sim.now, "P", &m, None).unwrap(),
        Err(ClientError::DiskFull(_))
    ));
    assert_eq!(sim.broker.log_end(), end_before, "a refusal writes nothing");

    // What is stored is still served and finished: the commit, the delay coming due,
    // receives and acks.
    assert!(matches!(
        end(&mut sim, txn, Resolution::Commit),
        Reply::Ended { .. }
    ));
    sim.advance(1000).unwrap();
    let got = match sim
        .request(Request::Receive {
            group: "C".into(),
            topic: "T".into(),
            queue_id: None,
            max: 10,
            invisible_ms: 10_000,
            filter: TagFilter::All,
        })
        .unwrap()
    {
        Reply::Received(r) => r,
        other => panic!("{other:?}"),
    };
    let mut seen: Vec<_> = got
        .iter()
        .map(|r| String::from_utf8(r.message.body.clone()).unwrap())
        .collect();
    seen.sort();
    assert_eq!(seen, ["before", "half", "later"]);
    for r in got {
        let ack = Request::Ack {
            group: "C".into(),
            handle: r.handle,
        };
        assert_eq!(sim.request(ack).unwrap(), Reply::Acked);
    }

    // Space freed: new messages are taken again.
    sim.broker.set_disk_full(None);
    send(&mut sim, "T", "after");
}

#[test]
fn a_renewed_delivery_keeps_its_first_handle_across_a_restart() {
    let mut sim = Sim::new(cfg()).unwrap();
    send(&mut sim, "T", "a");
    let Reply::Received(r) = sim
        .request(Request::Receive {
            group: "C".into(),
            topic: "T".into(),
            queue_id: None,
            max: 1,
            invisible_ms: 1000,
            filter: TagFilter::All,
        })
        .unwrap()
    else {
        panic!()
    };
    let first = r[0].handle.clone();
    for _ in 0..3 {
        assert!(matches!(
            sim.request(Request::ChangeInvisible {
                group: "C".into(),
                handle: first.clone(),
                invisible_ms: 60_000,
            })
            .unwrap(),
            Reply::InvisibleChanged { .. }
        ));
    }
    let now = sim.now;
    let storage = sim.broker.into_storage();
    let mut sim = Sim::with_storage(cfg(), storage, now).unwrap();
    assert_eq!(
        sim.request(Request::Ack {
            group: "C".into(),
            handle: first
        })
        .unwrap(),
        Reply::Acked
    );
}

#[test]
fn redelivery_ends_in_dlq() {
    let mut sim = Sim::new(Config {
        max_delivery_attempts: 3,
        ..cfg()
    })
    .unwrap();
    send(&mut sim, "T", "a");
    for _ in 0..3 {
        let req = Request::Receive {
            group: "C".into(),
            topic: "T".into(),
            queue_id: None,
            max: 10,
            invisible_ms: 1000,
            filter: TagFilter::All,
        };
        let Reply::Received(r) = sim.request(req).unwrap() else {
            panic!()
        };
        assert_eq!(r.len(), 1);
        sim.advance(1000).unwrap();
    }
    assert_eq!(bodies(&mut sim, "%DLQ%C"), vec!["a"]);
    assert_eq!(sim.broker.inflight_count("C", "T"), 0);
}

#[test]
fn sync_flush_holds_replies_and_visibility() {
    let mut b = Broker::open(
        Config {
            flush: FlushMode::Sync,
            ..cfg()
        },
        MemStorage::new(),
        0,
    )
    .unwrap();
    b.handle(
        0,
        1,
        Request::Send {
            messages: vec![NewMessage::new("T", "a")],
        },
    )
    .unwrap();
    b.handle(
        0,
        2,
        Request::Send {
            messages: vec![NewMessage::new("T", "b")],
        },
    )
    .unwrap();
    assert!(b.poll_output().is_none(), "replies wait for the sync");
    assert_eq!(b.topics()[0].queues.iter().map(|q| q.2).sum::<u64>(), 0);
    b.sync().unwrap();
    let outs: Vec<_> = core::iter::from_fn(|| b.poll_output()).collect();
    assert_eq!(outs.len(), 2);
    assert_eq!(b.topics()[0].queues.iter().map(|q| q.2).sum::<u64>(), 2);
}

/// A sync run by the host off the broker's thread covers only what was written before it
/// started: later writes stay held and invisible, including a commit whose half is older.
#[test]
fn synced_to_releases_only_what_the_sync_covered() {
    let mut b = Broker::open(
        Config {
            flush: FlushMode::Sync,
            ..cfg()
        },
        MemStorage::new(),
        0,
    )
    .unwrap();
    let visible = |b: &Broker<MemStorage>| -> u64 {
        b.topics()
            .iter()
            .filter(|t| t.name == "T")
            .flat_map(|t| t.queues.iter().map(|q| q.2))
            .sum()
    };
    let send = |b: &mut Broker<MemStorage>, id: u64, body: &str| {
        b.handle(
            0,
            id,
            Request::Send {
                messages: vec![NewMessage::new("T", body)],
            },
        )
        .unwrap();
    };
    let replies = |b: &mut Broker<MemStorage>| -> Vec<u64> {
        core::iter::from_fn(|| b.poll_output())
            .filter_map(|o| match o {
                Output::Reply { id, .. } => Some(id),
                _ => None,
            })
            .collect()
    };
    send(&mut b, 1, "a");
    let first = b.sync_target().expect("a write waits");
    send(&mut b, 2, "b");
    assert!(replies(&mut b).is_empty());
    b.synced_to(first);
    assert_eq!(replies(&mut b), vec![1], "only the write the sync covered");
    assert_eq!(visible(&b), 1);
    assert_eq!(b.log_synced(), first);
    let second = b.sync_target().expect("b waits");
    b.synced_to(second);
    assert_eq!(replies(&mut b), vec![2]);
    assert_eq!(visible(&b), 2);
    assert_eq!(b.sync_target(), None);
    b.synced_to(second); // a late or repeated report changes nothing
    assert!(replies(&mut b).is_empty());

    // A commit makes an older half visible: it waits for the op record's sync, not the half's.
    b.handle(
        0,
        3,
        Request::Prepare {
            group: "G".into(),
            message: NewMessage::new("T", "tx"),
            check_immunity_ms: None,
        },
    )
    .unwrap();
    b.sync().unwrap();
    let txn = match core::iter::from_fn(|| b.poll_output()).find_map(|o| match o {
        Output::Reply { id: 3, reply } => Some(reply),
        _ => None,
    }) {
        Some(Reply::Sent(r)) => r[0].txn.unwrap(),
        other => panic!("prepare: {other:?}"),
    };
    send(&mut b, 5, "c");
    let before_commit = b.sync_target().unwrap();
    b.handle(
        0,
        4,
        Request::EndTransaction {
            txn,
            resolution: Resolution::Commit,
            group: Some("G".into()),
            from_check: false,
        },
    )
    .unwrap();
    // The sync covers the half (older) and "c", not the commit's op record.
    b.synced_to(before_commit);
    assert_eq!(replies(&mut b), vec![5]);
    assert_eq!(visible(&b), 3, "c only: the commit is not durable yet");
    let t = b.sync_target().unwrap();
    b.synced_to(t);
    assert_eq!(replies(&mut b), vec![4]);
    assert_eq!(visible(&b), 4);
}

#[cfg(feature = "std")]
#[test]
fn detached_file_sync_clears_only_what_no_later_append_touched() {
    let dir = std::env::temp_dir().join(alloc::format!(
        "rocklet-detached-{}-{}",
        std::process::id(),
        line!()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let mut s = FileStorage::open(&dir).unwrap();
    assert!(s.detach_sync().unwrap().is_none(), "nothing written");
    s.write(0, 0, b"first").unwrap();
    let job = s
        .detach_sync()
        .unwrap()
        .expect("a segment and the directory to sync");
    s.write(0, 5, b"second").unwrap();
    job.run().unwrap();
    s.detached_done(&job, true);
    // The directory entry was covered; the segment was appended to after the detach.
    let again = s.detach_sync().unwrap().expect("the later append");
    again.run().unwrap();
    s.detached_done(&again, true);
    assert!(s.detach_sync().unwrap().is_none(), "all clean");
    s.write(0, 11, b"third").unwrap();
    let failed = s.detach_sync().unwrap().unwrap();
    s.detached_done(&failed, false);
    assert!(
        s.detach_sync().unwrap().is_some(),
        "a failed sync leaves it dirty"
    );
    s.sync().unwrap();
    assert!(s.detach_sync().unwrap().is_none());
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A pull or receive returns at most `max_transfer_bytes` of stored messages (the first one
/// always, however large), as RocketMQ's maxTransferBytesOnMessageInMemory.
#[test]
fn pulls_and_receives_stop_at_the_transfer_cap() {
    let mut sim = Sim::new(Config {
        default_queues: 1,
        max_transfer_bytes: 25_000,
        ..cfg()
    })
    .unwrap();
    for i in 0..4 {
        let body = alloc::format!("{i}{}", "x".repeat(10_000));
        send(&mut sim, "Big", &body);
    }
    send(&mut sim, "Big", &"y".repeat(40_000));
    let pull = |sim: &mut Sim<MemStorage>| match sim
        .request(Request::Pull {
            group: "P".into(),
            topic: "Big".into(),
            queue_id: 0,
            offset: None,
            max: 32,
            filter: TagFilter::All,
            auto_commit: true,
        })
        .unwrap()
    {
        Reply::Pulled {
            messages,
            next_offset,
            ..
        } => (messages.len(), next_offset),
        other => panic!("pull: {other:?}"),
    };
    assert_eq!(
        pull(&mut sim),
        (2, 2),
        "two ~10 KB records fit in 25 000 bytes"
    );
    assert_eq!(pull(&mut sim), (2, 4));
    assert_eq!(
        pull(&mut sim),
        (1, 5),
        "one record above the cap still goes, alone"
    );
    let receive = |sim: &mut Sim<MemStorage>| match sim
        .request(Request::Receive {
            group: "R".into(),
            topic: "Big".into(),
            queue_id: None,
            max: 32,
            invisible_ms: 60_000,
            filter: TagFilter::All,
        })
        .unwrap()
    {
        Reply::Received(r) => r.len(),
        other => panic!("receive: {other:?}"),
    };
    assert_eq!(receive(&mut sim), 2);
    assert_eq!(receive(&mut sim), 2);
    assert_eq!(receive(&mut sim), 1);
    assert_eq!(receive(&mut sim), 0);
    // Redeliveries are capped the same way.
    sim.advance(60_001).unwrap();
    assert_eq!(receive(&mut sim), 2);
}

/// A restart gives every topic the queues it had: auto-created ones `default_queues` even if
/// only queue 0 got a message (found by fuzz state_machine: a delayed send had created its
/// topic with 1 queue after a reopen), declared ones exactly their count.
#[test]
fn topics_keep_their_queue_count_across_reopen() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    let sent = b
        .execute(
            0,
            Request::Send {
                messages: vec![NewMessage {
                    queue_id: Some(0),
                    ..NewMessage::new("Auto", "x")
                }],
            },
        )
        .unwrap();
    assert!(matches!(sent, Reply::Sent(_)), "{sent:?}");
    b.create_topic("Wide", 8).unwrap().unwrap();
    b.create_topic("Narrow", 2).unwrap().unwrap();
    assert!(matches!(
        b.create_topic("Bad Name", 2).unwrap(),
        Err(ClientError::InvalidTopic(_))
    ));
    let queues = |b: &Broker<MemStorage>, name: &str| {
        b.topics()
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.queues.len())
    };
    let before: Vec<_> = ["Auto", "Wide", "Narrow"]
        .iter()
        .map(|n| queues(&b, n))
        .collect();
    assert_eq!(before, vec![Some(4), Some(8), Some(2)]);
    let b = Broker::open(cfg(), b.into_storage(), 1).unwrap();
    let after: Vec<_> = ["Auto", "Wide", "Narrow"]
        .iter()
        .map(|n| queues(&b, n))
        .collect();
    assert_eq!(after, before);
}

#[test]
fn crash_cuts_torn_tail_and_keeps_synced() {
    let mut s = CrashStorage::new();
    s.cut_after_bytes = Some(700);
    let mut b = Broker::open(cfg(), s, 0).unwrap();
    for i in 0..10 {
        b.execute(
            0,
            Request::Send {
                messages: vec![NewMessage::new("T", alloc::format!("m{i}"))],
            },
        )
        .unwrap();
    }
    let live = b.into_storage().live();
    let b = Broker::open(cfg(), live, 0).unwrap();
    let report = b.recovery_report();
    assert_eq!(report.cuts.len(), 1);
    let kept: u64 = b.topics()[0].queues.iter().map(|q| q.1).sum();
    assert!((1..10).contains(&kept), "{kept}");
}

#[test]
fn bad_input_is_answered() {
    let mut sim = Sim::new(cfg()).unwrap();
    // An offset for a topic that does not exist is refused and creates nothing (it used to
    // create the topic with `queue_id + 1` queues; found by fuzz state_machine).
    let r = sim
        .request(Request::CommitOffset {
            group: "G".into(),
            topic: "Missing".into(),
            queue_id: 0,
            offset: 3,
        })
        .unwrap();
    assert!(
        matches!(&r, Reply::Error(ClientError::UnknownTopic(t)) if t == "Missing"),
        "{r:?}"
    );
    assert!(sim.broker.topics().iter().all(|t| t.name != "Missing"));
    let r = sim
        .request(Request::Send {
            messages: vec![NewMessage::new("bad topic", "x")],
        })
        .unwrap();
    assert!(matches!(r, Reply::Error(ClientError::InvalidTopic(_))));
    let r = sim
        .request(Request::Send {
            messages: vec![NewMessage::new("T", "")],
        })
        .unwrap();
    assert!(matches!(r, Reply::Error(ClientError::EmptyBody)));
    let r = sim
        .request(Request::Send {
            messages: vec![NewMessage::new("T", vec![0u8; 65 << 10])],
        })
        .unwrap();
    assert!(matches!(
        r,
        Reply::Error(ClientError::MessageTooLarge { .. })
    ));
    let r = sim
        .request(Request::Send {
            messages: vec![NewMessage::new(topic::HALF, "x")],
        })
        .unwrap();
    assert!(matches!(r, Reply::Error(ClientError::ReservedTopic(_))));
    let mut m = NewMessage::new("T", "x");
    m.properties.push(("DELAY".into(), "-1".into()));
    assert!(matches!(
        sim.request(Request::Send { messages: vec![m] }).unwrap(),
        Reply::Error(ClientError::InvalidDelay(_))
    ));
    let mut m = NewMessage::new("T", "x");
    m.properties.push(("a\u{1}".into(), "b".into()));
    assert!(matches!(
        sim.request(Request::Send { messages: vec![m] }).unwrap(),
        Reply::Error(ClientError::InvalidProperty(_))
    ));
    let req = Request::Prepare {
        group: "G".into(),
        message: NewMessage::new("T", "x").with_delay(Delay::Level(1)),
        check_immunity_ms: None,
    };
    assert!(matches!(
        sim.request(req).unwrap(),
        Reply::Error(ClientError::DelayOnTransaction)
    ));
    assert_eq!(sim.broker.log_end(), 0, "nothing was written");
}

#[test]
fn storage_failure_keeps_due_work() {
    let mut sim = Sim::with_storage(cfg(), CrashStorage::new(), 0).unwrap();
    sim.set_checker("G", |_| Resolution::Commit);
    prepare(&mut sim, "G", "T", "x");
    sim.broker.storage_mut().fail_appends = true;
    assert!(
        sim.broker.handle_timeout(6_000).is_err(),
        "the check op cannot be written"
    );
    assert!(
        sim.broker.handle_timeout(6_001).is_err(),
        "and is still due"
    );
    sim.broker.storage_mut().fail_appends = false;
    sim.advance_to(6_002).unwrap();
    assert_eq!(sim.checks.len(), 1);
    assert_eq!(bodies(&mut sim, "T"), vec!["x"]);
}

#[test]
fn async_flush_is_scheduled_by_the_core() {
    let mut b = Broker::open(cfg(), CrashStorage::new(), 0).unwrap();
    assert_eq!(b.poll_timeout(), None);
    b.execute(
        10,
        Request::Send {
            messages: vec![NewMessage::new("T", "a")],
        },
    )
    .unwrap();
    assert_eq!(
        b.poll_timeout(),
        Some(510),
        "flush_interval_ms after the first unsynced write"
    );
    b.execute(
        20,
        Request::Send {
            messages: vec![NewMessage::new("T", "b")],
        },
    )
    .unwrap();
    assert_eq!(b.poll_timeout(), Some(510));
    assert_eq!(b.storage().syncs, 0);
    b.handle_timeout(510).unwrap();
    assert_eq!(b.storage().syncs, 1);
    assert_eq!(b.poll_timeout(), None);
    assert_eq!(
        b.browse("T", 0, 0, 10).unwrap().len()
            + b.browse("T", 1, 0, 10).unwrap().len()
            + b.browse("T", 2, 0, 10).unwrap().len()
            + b.browse("T", 3, 0, 10).unwrap().len(),
        2
    );
}

#[test]
fn sync_flush_syncs_what_timers_write() {
    let mut b = Broker::open(
        Config {
            flush: FlushMode::Sync,
            ..cfg()
        },
        CrashStorage::new(),
        0,
    )
    .unwrap();
    let m = NewMessage::new("T", "later").with_delay(Delay::At(1_000));
    b.execute(0, Request::Send { messages: vec![m] }).unwrap();
    let syncs = b.storage().syncs;
    b.handle_timeout(1_000).unwrap();
    assert_eq!(b.storage().syncs, syncs + 1);
    let visible: u64 = b
        .topics()
        .iter()
        .flat_map(|t| t.queues.iter().map(|q| q.2))
        .sum();
    assert_eq!(visible, 1, "the delivered message is durable and visible");
}

#[test]
fn poll_timeout_shows_only_real_deadlines() {
    let mut sim = Sim::new(cfg()).unwrap();
    sim.set_checker("G", |_| Resolution::Unknown);
    let t = prepare(&mut sim, "G", "T", "x");
    sim.broker.sync().unwrap(); // the async flush deadline is a real one; clear it
    assert_eq!(sim.broker.poll_timeout(), Some(6_000));
    end(&mut sim, t, Resolution::Commit);
    sim.broker.sync().unwrap();
    assert_eq!(
        sim.broker.poll_timeout(),
        None,
        "a resolved transaction leaves no wake-up"
    );
    send(&mut sim, "T", "y");
    let req = Request::Receive {
        group: "C".into(),
        topic: "T".into(),
        queue_id: None,
        max: 10,
        invisible_ms: 1000,
        filter: TagFilter::All,
    };
    let Reply::Received(r) = sim.request(req).unwrap() else {
        panic!()
    };
    sim.broker.sync().unwrap();
    assert_eq!(sim.broker.poll_timeout(), Some(1_000));
    for x in r {
        assert_eq!(
            sim.request(Request::Ack {
                group: "C".into(),
                handle: x.handle
            })
            .unwrap(),
            Reply::Acked
        );
    }
    sim.broker.sync().unwrap();
    assert_eq!(
        sim.broker.poll_timeout(),
        None,
        "acked deliveries leave no wake-up"
    );
}

/// The first message of `topic`'s queue 0 (pulled from offset 0).
fn first_message(sim: &mut Sim<impl Storage>, topic: &str) -> Message {
    let req = Request::Pull {
        group: "reader".into(),
        topic: topic.into(),
        queue_id: 0,
        offset: Some(0),
        max: 1,
        filter: TagFilter::All,
        auto_commit: false,
    };
    match sim.request(req).unwrap() {
        Reply::Pulled { mut messages, .. } if !messages.is_empty() => messages.remove(0),
        other => panic!("nothing in {topic}: {other:?}"),
    }
}

/// A producer's `RETRY_TOPIC` property names no topic of the broker's: a copy into a retry or
/// dead-letter topic names the topic the message was really in, or a consumer of the retry
/// topic (and a console resend of the dead letter) would take it for a message of `Secret`.
#[test]
fn a_copy_names_the_topic_the_message_was_in_not_a_producers_retry_topic_property() {
    let mut sim = Sim::new(Config {
        max_delivery_attempts: 1,
        ..cfg()
    })
    .unwrap();
    let mut m = NewMessage::new("T", "forged");
    m.properties = vec![(
        String::from(broker::prop::RETRY_TOPIC),
        String::from("Secret"),
    )];
    let sent = match sim.request(Request::Send { messages: vec![m] }).unwrap() {
        Reply::Sent(mut r) => r.remove(0),
        other => panic!("{other:?}"),
    };
    // CONSUMER_SEND_MSG_BACK: into %RETRY%C, due after level 1 (1 s).
    let r = sim
        .request(Request::SendBack {
            group: "C".into(),
            offset: sent.offset,
            delay_level: Some(1),
        })
        .unwrap();
    assert!(matches!(r, Reply::Sent(_)), "{r:?}");
    sim.advance(2_000).unwrap();
    let retried = first_message(&mut sim, "%RETRY%C");
    assert_eq!(retried.property(broker::prop::RETRY_TOPIC), Some("T"));
    // A retried message sent back again keeps the topic it came from.
    let r = sim
        .request(Request::SendBack {
            group: "C".into(),
            offset: retried.offset,
            delay_level: Some(1),
        })
        .unwrap();
    assert!(matches!(r, Reply::Sent(_)), "{r:?}");
    // Dead-lettered after its last delivery: %DLQ%D names T too.
    let req = Request::Receive {
        group: "D".into(),
        topic: "T".into(),
        queue_id: None,
        max: 1,
        invisible_ms: 1000,
        filter: TagFilter::All,
    };
    let Reply::Received(r) = sim.request(req).unwrap() else {
        panic!()
    };
    assert_eq!(r.len(), 1);
    sim.advance(1000).unwrap();
    let dead = first_message(&mut sim, "%DLQ%D");
    assert_eq!(dead.property(broker::prop::RETRY_TOPIC), Some("T"));
}

#[cfg(feature = "std")]
pub(crate) fn temp_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(alloc::format!(
        "rocklet-{tag}-{}-{}",
        std::process::id(),
        line!()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[cfg(feature = "std")]
fn send_to(b: &mut Broker<FileStorage>, topic: &str, body: &str) {
    let r = b
        .execute(
            0,
            Request::Send {
                messages: vec![NewMessage::new(topic, body)],
            },
        )
        .unwrap();
    assert!(matches!(r, Reply::Sent(_)), "{r:?}");
}

#[cfg(feature = "std")]
#[test]
fn a_recorded_storage_failure_cuts_the_log_at_its_durable_end_whatever_reached_the_disk() {
    let dir = temp_dir("failed-at");
    let mut b = Broker::open(cfg(), FileStorage::open(&dir).unwrap(), 0).unwrap();
    for i in 0..5 {
        send_to(&mut b, "F", &alloc::format!("durable {i}"));
    }
    b.sync().unwrap();
    let durable = b.log_synced();
    for i in 0..5 {
        send_to(&mut b, "F", &alloc::format!("never synced {i}"));
    }
    let end = b.log_end();
    // A failed writeback lands blocks out of order: a hole right after the durable end,
    // later records whole behind it. A plain open would take that for damage.
    let seg = dir.join(alloc::format!("{:020}", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[durable as usize..durable as usize + 100].fill(0);
    std::fs::write(&seg, &bytes).unwrap();
    b.storage_mut().record_failure(durable).unwrap();
    drop(b);

    let mut s = FileStorage::open(&dir).unwrap();
    assert!(!s.was_clean());
    assert_eq!(s.failed_at().unwrap(), Some(durable));
    let mut b = Broker::open(cfg(), s, 0).unwrap();
    assert_eq!(b.log_end(), durable);
    let cut = &b.recovery_report().cuts[0];
    assert_eq!((cut.offset, cut.bytes), (durable, end - durable));
    assert!(cut.reason.contains("SYNC_FAILED"), "{}", cut.reason);
    let kept = cut.kept_as.clone().unwrap();
    assert!(kept.ends_with(".unsynced"), "{kept}");
    assert!(dir.join(QUARANTINE_DIR).join(&kept).exists());
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("SYNC_FAILED"))
        .collect();
    assert!(left.is_empty(), "the failure record is settled: {left:?}");
    let log_end = b.storage_mut().log_end().unwrap();
    assert_eq!(log_end.map(|e| (e.end, e.clean)), Some((durable, false)));
    // Appends go on at the durable end; a clean stop is recorded as one.
    send_to(&mut b, "F", "after");
    b.close().unwrap();
    drop(b);
    let s = FileStorage::open(&dir).unwrap();
    assert!(s.was_clean());
    let mut sim_body = Vec::new();
    let mut b = Broker::open(cfg(), s, 0).unwrap();
    for q in 0..8 {
        if let Ok(Reply::Pulled { messages, .. }) = b.execute(
            0,
            Request::Pull {
                group: "reader".into(),
                topic: "F".into(),
                queue_id: q,
                offset: Some(0),
                max: 100,
                filter: TagFilter::All,
                auto_commit: false,
            },
        ) {
            sim_body.extend(
                messages
                    .into_iter()
                    .map(|m| String::from_utf8(m.body).unwrap()),
            );
        }
    }
    sim_body.sort();
    assert_eq!(sim_body.len(), 6, "{sim_body:?}");
    assert!(sim_body.iter().all(|m| !m.starts_with("never")));
    drop(b);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "std")]
#[test]
fn an_unreadable_log_end_is_refused_by_name() {
    let dir = temp_dir("log-end");
    drop(FileStorage::open(&dir).unwrap());
    std::fs::write(dir.join(LOG_END_FILE), "rocklet-log-end 1\nsegment x\n").unwrap();
    let e = FileStorage::open(&dir).unwrap_err();
    let msg = alloc::format!("{e}");
    assert!(
        msg.contains("LOG_END is unreadable (`segment` is not a number)")
            && msg.contains("delete it to start without that check"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_gap_between_segments_is_refused_and_a_repair_fills_it() {
    let cfg = Config {
        segment_size: 64 << 10,
        max_message_size: 16 << 10,
        max_batch_size: 16 << 10,
        ..cfg()
    };
    let mut b = Broker::open(cfg.clone(), MemStorage::new(), 0).unwrap();
    while b.segment_count() < 4 {
        b.execute(
            0,
            Request::Send {
                messages: vec![NewMessage::new("G", "g".repeat(4000))],
            },
        )
        .unwrap();
    }
    let mut mem = b.into_storage();
    let segs = mem.segments().unwrap();
    mem.remove(segs[1]).unwrap();
    match Broker::open(cfg.clone(), mem.clone(), 0) {
        Err(Error::Corrupted { offset, reason }) => {
            assert_eq!(offset, segs[1]);
            assert!(
                reason.contains(&alloc::format!(
                    "log offsets {}..{} are missing",
                    segs[1],
                    segs[2]
                )) && reason.contains(&alloc::format!("segment file {:020} missing", segs[1])),
                "{reason}"
            );
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a missing middle segment went unnoticed"),
    }
    let b = Broker::open_repairing(cfg.clone(), mem, 0).unwrap();
    let q = &b.recovery_report().quarantined;
    assert_eq!(q.len(), 1);
    assert_eq!((q[0].offset, q[0].bytes), (segs[1], segs[2] - segs[1]));
    assert!(b.storage().quarantined().contains_key(&q[0].name));
    let mem = b.into_storage();
    let b = Broker::open(cfg, mem, 0).unwrap();
    assert!(b.recovery_report().quarantined.is_empty());
}

fn receive_bodies(sim: &mut Sim<impl Storage>, group: &str, topic: &str) -> Vec<String> {
    match sim
        .request(Request::Receive {
            group: group.into(),
            topic: topic.into(),
            queue_id: None,
            max: 64,
            invisible_ms: 60_000,
            filter: TagFilter::All,
        })
        .unwrap()
    {
        Reply::Received(r) => {
            let mut b: Vec<String> = r
                .iter()
                .map(|m| String::from_utf8_lossy(&m.message.body).into_owned())
                .collect();
            b.sort();
            b
        }
        other => panic!("receive failed: {other:?}"),
    }
}

#[test]
fn a_group_started_at_the_end_gets_only_later_messages_across_a_restart_and_a_checkpoint() {
    let mut sim = Sim::new(cfg()).unwrap();
    for b in ["n1", "n2", "n3"] {
        send(&mut sim, "T", b);
    }
    let queues = sim.broker.topic_queue_count("T").unwrap();
    assert_eq!(
        sim.broker.start_group_at_end("Tail", "T").unwrap(),
        Ok(queues)
    );
    // Started already: a second call (a tail run again) keeps the group where it is.
    assert_eq!(sim.broker.start_group_at_end("Tail", "T").unwrap(), Ok(0));
    // A topic not created yet: nothing to start, nothing created.
    assert_eq!(
        sim.broker.start_group_at_end("Tail", "Later").unwrap(),
        Ok(0)
    );
    assert!(sim.broker.topic_queue_count("Later").is_none());
    // The start is in the log: a restart keeps it, and the messages after it come.
    let now = sim.now;
    let storage = sim.broker.into_storage();
    let mut sim = Sim::with_storage(cfg(), storage, now).unwrap();
    send(&mut sim, "T", "m1");
    assert_eq!(receive_bodies(&mut sim, "Tail", "T"), ["m1"]);
    // From a checkpoint as well.
    send(&mut sim, "T", "m2");
    sim.broker.checkpoint().unwrap();
    let now = sim.now;
    let storage = sim.broker.into_storage();
    let mut sim = Sim::with_storage(cfg(), storage, now).unwrap();
    assert_eq!(receive_bodies(&mut sim, "Tail", "T"), ["m2"]);
    // A group never started reads from the first message, as before.
    assert_eq!(
        receive_bodies(&mut sim, "Other", "T"),
        ["m1", "m2", "n1", "n2", "n3"]
    );
}

#[test]
fn a_group_with_a_position_is_not_moved_to_the_end() {
    let mut sim = Sim::new(cfg()).unwrap();
    let a = send(&mut sim, "T", "a");
    assert_eq!(receive_bodies(&mut sim, "C", "T"), ["a"]);
    let b = send(&mut sim, "T", "b");
    // Only the queues the group never received from start at their end; the one "a" came
    // from keeps the group's position, so "b" still comes if it went there too.
    let queues = sim.broker.topic_queue_count("T").unwrap();
    assert!(queues > 1);
    assert_eq!(
        sim.broker.start_group_at_end("C", "T").unwrap(),
        Ok(queues - 1)
    );
    let expect: &[&str] = if a.queue_id == b.queue_id {
        &["b"]
    } else {
        &[]
    };
    assert_eq!(receive_bodies(&mut sim, "C", "T"), expect);
    assert!(matches!(
        sim.broker.start_group_at_end("bad group!", "T").unwrap(),
        Err(ClientError::InvalidGroup(_))
    ));
}
