//! Durability: flush modes, syncs, storage failures, crashes and damaged logs.

use super::*;

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
