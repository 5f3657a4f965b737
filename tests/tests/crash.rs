//! Crash and storage-fault tests (issue 2 point 8, issue 8 "storage faults").
//!
//! A scripted scenario writes a log; the log is then cut at every byte offset, and bits are
//! flipped in every record, and each damaged image is reopened. What recovery keeps is
//! compared with what the records before the damage mean, computed independently of the
//! broker ([`probe::expected`]).

use rocklet_conformance::probe::{self, RawRecord};
use rocklet_core::testing::CrashStorage;
use rocklet_core::{
    Broker, Config, Delay, FlushMode, MemStorage, NewMessage, Reply, Request, Resolution, Storage,
    TagFilter, TxnId,
};

fn cfg() -> Config {
    Config {
        segment_size: 1 << 20,
        max_message_size: 4096,
        max_batch_size: 8192,
        default_queues: 2,
        transaction_timeout_ms: 1000,
        transaction_check_interval_ms: 1000,
        ..Config::default()
    }
}

fn send<S: Storage>(b: &mut Broker<S>, now: u64, topic: &str, body: &str) {
    let r = b
        .execute(
            now,
            Request::Send {
                messages: vec![NewMessage::new(topic, body.as_bytes().to_vec())],
            },
        )
        .unwrap();
    assert!(matches!(r, Reply::Sent(_)), "{r:?}");
}

fn prepare<S: Storage>(b: &mut Broker<S>, now: u64, topic: &str, body: &str) -> TxnId {
    let req = Request::Prepare {
        group: "PG".into(),
        message: NewMessage::new(topic, body.as_bytes().to_vec()),
        check_immunity_ms: None,
    };
    match b.execute(now, req).unwrap() {
        Reply::Sent(r) => r[0].txn.unwrap(),
        other => panic!("{other:?}"),
    }
}

fn end<S: Storage>(b: &mut Broker<S>, now: u64, txn: TxnId, resolution: Resolution) {
    let r = b
        .execute(
            now,
            Request::EndTransaction {
                txn,
                resolution,
                group: Some("PG".into()),
                from_check: false,
            },
        )
        .unwrap();
    assert!(matches!(r, Reply::Ended { .. }), "{r:?}");
}

/// Sends, a batch, halves committed / rolled back / checked, delays delivered and pending,
/// receive + ack, a pull offset commit, and a dead-letter move.
fn scripted_log() -> (MemStorage, u64) {
    let cfg = Config {
        max_delivery_attempts: 1,
        ..cfg()
    };
    let mut b = Broker::open(cfg, MemStorage::new(), 0).unwrap();
    send(&mut b, 0, "A", "a1");
    let batch = ["b1", "b2", "b3"]
        .iter()
        .map(|s| NewMessage::new("A", s.as_bytes().to_vec()))
        .collect();
    assert!(matches!(
        b.execute(1, Request::Send { messages: batch }).unwrap(),
        Reply::Sent(_)
    ));
    let t1 = prepare(&mut b, 2, "T", "committed");
    let t2 = prepare(&mut b, 3, "T", "rolled-back");
    let _t3 = prepare(&mut b, 4, "T", "left-pending");
    let t4 = prepare(&mut b, 5, "T", "checked-then-committed");
    end(&mut b, 6, t1, Resolution::Commit);
    end(&mut b, 7, t2, Resolution::Rollback);
    b.set_producer_online(8, "PG", true);
    let delayed = NewMessage::new("D", &b"soon"[..]).with_delay(Delay::At(500));
    assert!(matches!(
        b.execute(
            9,
            Request::Send {
                messages: vec![delayed]
            }
        )
        .unwrap(),
        Reply::Sent(_)
    ));
    let later = NewMessage::new("D", &b"much-later"[..]).with_delay(Delay::Level(18));
    assert!(matches!(
        b.execute(
            10,
            Request::Send {
                messages: vec![later]
            }
        )
        .unwrap(),
        Reply::Sent(_)
    ));
    // Time passes: the delay is delivered, checks go out (checks write op records).
    b.handle_timeout(1500).unwrap();
    while let Some(o) = b.poll_output() {
        if let rocklet_core::Output::Check(c) = o {
            let resolution = if c.txn == t4 {
                Resolution::Commit
            } else {
                Resolution::Unknown
            };
            let req = Request::EndTransaction {
                txn: c.txn,
                resolution,
                group: Some(c.group.clone()),
                from_check: true,
            };
            b.execute(1500, req).unwrap();
        }
    }
    let recv = Request::Receive {
        group: "C".into(),
        topic: "A".into(),
        queue_id: None,
        max: 2,
        invisible_ms: 100,
        filter: TagFilter::All,
    };
    let handles = match b.execute(1600, recv).unwrap() {
        Reply::Received(r) => r.into_iter().map(|r| r.handle).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert!(!handles.is_empty());
    assert!(matches!(
        b.execute(
            1601,
            Request::Ack {
                group: "C".into(),
                handle: handles[0].clone()
            }
        )
        .unwrap(),
        Reply::Acked
    ));
    let pull = Request::Pull {
        group: "P".into(),
        topic: "A".into(),
        queue_id: 0,
        offset: None,
        max: 2,
        filter: TagFilter::All,
        auto_commit: true,
    };
    assert!(matches!(
        b.execute(1602, pull).unwrap(),
        Reply::Pulled { .. }
    ));
    // The unacked delivery expires with max_delivery_attempts = 1: a dead-letter move (two
    // records written as one atomic group).
    b.handle_timeout(2000).unwrap();
    while b.poll_output().is_some() {}
    send(&mut b, 2001, "A", "last");
    let end = b.log_end();
    (b.into_storage(), end)
}

fn open(mem: MemStorage) -> Broker<MemStorage> {
    match std::panic::catch_unwind(|| Broker::open(cfg(), mem, 0)) {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => panic!("open failed: {e}"),
        Err(_) => panic!("open panicked"),
    }
}

fn with_segment(bytes: &[u8]) -> MemStorage {
    let mut m = MemStorage::new();
    m.set_segment(0, bytes.to_vec());
    m
}

#[test]
fn scripted_log_has_every_kind_of_record() {
    let (mem, end) = scripted_log();
    let seg = mem.segment(0).unwrap();
    assert_eq!(seg.len() as u64, end);
    let recs = probe::records(seg);
    assert_eq!(
        recs.last().map(RawRecord::end),
        Some(end),
        "the whole log decodes"
    );
    let topics: std::collections::BTreeSet<&str> = recs.iter().map(|r| r.topic.as_str()).collect();
    for t in [
        "A",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "rmq_sys_wheel_timer",
        "SCHEDULE_TOPIC_XXXX",
        "rmq_sys_schedule_delivered",
        "rmq_sys_REVIVE_LOG",
        "rmq_sys_consumer_offset",
        "%DLQ%C",
    ] {
        assert!(topics.contains(t), "scripted log lacks {t}: {topics:?}");
    }
    let groups = recs
        .iter()
        .filter(|r| r.prop("__BATCH_LEN").is_some())
        .count();
    assert!(
        groups >= 2,
        "scripted log needs a batch and a dead-letter group"
    );
    // And the full log means what the broker says.
    let mut b = open(mem.clone());
    assert_eq!(probe::observed(&mut b, 0), probe::expected(&recs));
    let e = probe::expected(&recs);
    assert_eq!(e.pending_txns, 1);
    assert_eq!(e.pending_delays, 1);
    assert!(e.visible["T"].contains(&b"checked-then-committed".to_vec()));
    assert!(!e.visible["T"].contains(&b"rolled-back".to_vec()));
}

#[test]
fn cut_at_every_byte_keeps_every_whole_record_and_nothing_torn() {
    let (mem, end) = scripted_log();
    let full = mem.segment(0).unwrap().to_vec();
    let recs = probe::records(&full);
    let clean = probe::clean_boundaries(&recs);
    for cut in 0..=end {
        let keep = *clean.iter().rev().find(|&&c| c <= cut).unwrap();
        let mut b = open(with_segment(&full[..cut as usize]));
        assert_eq!(
            b.log_end(),
            keep,
            "cut at {cut}: recovery kept up to {} instead of {keep}",
            b.log_end()
        );
        // What is kept is the whole records; anything after them is gone or zeros (zeros
        // are the end of the data, not cut).
        let seg = b.storage().segment(0).unwrap_or_default();
        assert_eq!(
            &seg[..keep as usize],
            &full[..keep as usize],
            "cut at {cut}"
        );
        assert!(seg[keep as usize..].iter().all(|&x| x == 0), "cut at {cut}");
        let prefix: Vec<RawRecord> = recs.iter().filter(|r| r.end() <= keep).cloned().collect();
        assert_eq!(
            b.recovery_report().records,
            prefix.len() as u64,
            "cut at {cut}"
        );
        if full[keep as usize..cut as usize].iter().any(|&x| x != 0) {
            assert!(
                !b.recovery_report().cuts.is_empty(),
                "cut at {cut}: torn bytes removed without a report"
            );
        }
        assert_eq!(
            probe::observed(&mut b, 0),
            probe::expected(&prefix),
            "cut at {cut}: state differs"
        );
        // Observed at time 0: opening does not move the clock past the log's last record,
        // so nothing fires that the prefix does not already say.
        // The broker goes on: a new record after the cut, and a clean reopen.
        if cut % 97 == 0 {
            send(&mut b, 3001, "After", "x");
            let b2 = open(b.into_storage());
            assert!(
                b2.recovery_report().cuts.is_empty(),
                "cut at {cut}: log not clean after recovery + append"
            );
        }
    }
}

#[test]
fn crash_storage_cut_after_n_bytes_matches_truncation() {
    // The same, through CrashStorage's power cut mid-write, at a sample of points.
    let (mem, end) = scripted_log();
    let full = mem.segment(0).unwrap().to_vec();
    let recs = probe::records(&full);
    let clean = probe::clean_boundaries(&recs);
    for cut in (0..=end).step_by(13) {
        let mut cs = CrashStorage::new();
        cs.cut_after_bytes = Some(cut);
        // Replay the log's bytes as appends of whole records.
        for r in &recs {
            cs.write(0, r.offset, &full[r.offset as usize..r.end() as usize])
                .unwrap();
        }
        let keep = *clean.iter().rev().find(|&&c| c <= cut).unwrap();
        let b = match std::panic::catch_unwind(|| Broker::open(cfg(), cs.live(), 3000)) {
            Ok(Ok(b)) => b,
            _ => panic!("cut after {cut} bytes: open failed or panicked"),
        };
        assert_eq!(b.log_end(), keep, "cut after {cut} bytes");
    }
}

#[test]
fn a_flipped_bit_is_refused_or_repaired_and_never_cuts_valid_records() {
    // Damage followed by valid records is not a torn tail: a plain open refuses it and
    // changes nothing; a repair keeps every other record and moves the damaged one to
    // quarantine. Only damage in the last record (a torn tail) is cut.
    let (mem, _) = scripted_log();
    let full = mem.segment(0).unwrap().to_vec();
    let recs = probe::records(&full);
    let clean = probe::clean_boundaries(&recs);
    for (i, r) in recs.iter().enumerate() {
        for byte in r.offset..r.end() {
            // One bit per byte, rotating; every bit of the first two records and the last.
            let bits: Vec<u8> = if i < 2 || i + 1 == recs.len() {
                (0..8).collect()
            } else {
                vec![(byte % 8) as u8]
            };
            for bit in bits {
                let mut bad = full.clone();
                bad[byte as usize] ^= 1 << bit;
                let ctx = format!(
                    "flip of bit {bit} at byte {byte} (record {i} at {})",
                    r.offset
                );
                if i + 1 == recs.len() {
                    // The last record: a torn tail (possibly with its atomic group).
                    let keep = *clean.iter().rev().find(|&&c| c <= r.offset).unwrap();
                    let mut b = open(with_segment(&bad));
                    assert_eq!(b.log_end(), keep, "{ctx}");
                    assert_eq!(b.recovery_report().cuts.len(), 1, "{ctx}");
                    assert_eq!(b.recovery_report().cuts[0].offset, keep, "{ctx}");
                    // What is cut is kept in quarantine, but for trailing zeros.
                    let cut = &bad[keep as usize..];
                    let kept = &cut[..cut.iter().rposition(|&x| x != 0).map_or(0, |p| p + 1)];
                    let q = b.storage().quarantined().values().next().cloned();
                    assert_eq!(
                        q.unwrap_or_default(),
                        kept,
                        "{ctx}: the cut bytes are kept in quarantine"
                    );
                    let prefix: Vec<RawRecord> =
                        recs.iter().filter(|x| x.end() <= keep).cloned().collect();
                    assert_eq!(
                        probe::observed(&mut b, 0),
                        probe::expected(&prefix),
                        "{ctx}"
                    );
                    continue;
                }
                match Broker::open(cfg(), with_segment(&bad), 0) {
                    Err(rocklet_core::Error::Corrupted { offset, reason }) => {
                        assert_eq!(offset, r.offset, "{ctx}: {reason}");
                        assert!(reason.contains("segment 00000000000000000000"), "{reason}");
                    }
                    Err(e) => panic!("{ctx}: {e}"),
                    Ok(_) => panic!("{ctx}: a damaged log was opened"),
                }
                let mut b = Broker::open_repairing(cfg(), with_segment(&bad), 0)
                    .unwrap_or_else(|e| panic!("{ctx}: repair failed: {e}"));
                let report = b.recovery_report().clone();
                assert_eq!(report.records, recs.len() as u64 - 1, "{ctx}: {report:?}");
                assert_eq!(report.quarantined.len(), 1, "{ctx}");
                assert_eq!(report.quarantined[0].offset, r.offset, "{ctx}");
                assert_eq!(report.quarantined[0].bytes, r.len, "{ctx}");
                assert_eq!(
                    b.storage().quarantined()[&report.quarantined[0].name],
                    &bad[r.offset as usize..r.end() as usize],
                    "{ctx}: quarantine holds the damaged bytes as they were"
                );
                let others: Vec<RawRecord> = recs
                    .iter()
                    .filter(|x| x.offset != r.offset)
                    .cloned()
                    .collect();
                let expected = probe::expected(&others);
                assert_eq!(probe::observed(&mut b, 0), expected, "{ctx}");
                // Repaired for good: a plain open now reads it cleanly, with the same state.
                let mut again = open(b.into_storage());
                assert!(again.recovery_report().cuts.is_empty(), "{ctx}");
                assert!(again.recovery_report().quarantined.is_empty(), "{ctx}");
                assert_eq!(probe::observed(&mut again, 0), expected, "{ctx}");
            }
        }
    }
}

#[test]
fn damage_in_an_older_segment_is_refused_and_repair_keeps_every_other_record() {
    // Two segments, a damaged record in the middle of the first: a plain open refuses it;
    // a repair keeps the records after it in that segment and the second segment, where
    // they are.
    let cfg = Config {
        segment_size: 48 << 10,
        max_message_size: 2048,
        max_batch_size: 2048,
        ..cfg()
    };
    let mut b = Broker::open(cfg.clone(), MemStorage::new(), 0).unwrap();
    let body = "y".repeat(1500);
    let mut n = 0;
    while b.segment_count() < 2 {
        send(&mut b, n, "S", &format!("{n:04}{body}"));
        n += 1;
    }
    send(&mut b, n, "S", &format!("{n:04}-in-second"));
    let mut mem = b.into_storage();
    let first = mem.segment(0).unwrap().to_vec();
    let recs = probe::records(&first);
    let victim = recs[recs.len() / 2].clone();
    let mut bad = first.clone();
    bad[victim.offset as usize + 40] ^= 0x20;
    mem.set_segment(0, bad.clone());
    let before = mem.clone();
    match Broker::open(cfg.clone(), mem.clone(), 100_000) {
        Err(rocklet_core::Error::Corrupted { offset, .. }) => assert_eq!(offset, victim.offset),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a damaged log was opened"),
    }
    assert_eq!(
        mem.segment(0),
        before.segment(0),
        "a refused open changed the segment"
    );
    let mut b = Broker::open_repairing(cfg, mem, 100_000).unwrap();
    let report = b.recovery_report().clone();
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert_eq!(report.quarantined[0].offset, victim.offset);
    assert!(report.cuts.is_empty(), "{report:?}");
    let bodies = probe::visible(&mut b, 100_000).remove("S").unwrap();
    // Every message but the damaged one: the first segment's others, and the two in the
    // second segment (the one that rolled the log over, and the last).
    assert_eq!(bodies.len(), n as usize, "{} of {}", bodies.len(), n + 1);
    assert!(!bodies.contains(&victim.body));
    assert!(bodies.iter().any(|b| b.ends_with(b"-in-second")));
    // Appends continue after the second segment, and a reopen is clean.
    send(&mut b, 100_001, "S", "after-recovery");
    let end = b.log_end();
    let b = Broker::open(b.config().clone(), b.into_storage(), 100_002).unwrap();
    assert!(
        b.recovery_report().cuts.is_empty() && b.recovery_report().quarantined.is_empty(),
        "{:?}",
        b.recovery_report()
    );
    assert_eq!(b.log_end(), end);
}

// ---- failing storage ---------------------------------------------------------------------------

fn bodies_of(b: &mut Broker<CrashStorage>, now: u64, topic: &str) -> Vec<Vec<u8>> {
    probe::visible(b, now).remove(topic).unwrap_or_default()
}

#[test]
fn failing_appends_return_err_lose_nothing_and_recover() {
    for flush in [FlushMode::Async, FlushMode::Sync] {
        let cfg = Config { flush, ..cfg() };
        let mut b = Broker::open(cfg.clone(), CrashStorage::new(), 0).unwrap();
        send(&mut b, 1, "F", "before-1");
        let t = prepare(&mut b, 2, "F", "txn-before");
        b.storage_mut().fail_appends = true;
        let r = b.execute(
            3,
            Request::Send {
                messages: vec![NewMessage::new("F", &b"during"[..])],
            },
        );
        assert!(
            r.is_err(),
            "{flush:?}: a send whose append failed must be an Err, got {r:?}"
        );
        let r = b.execute(
            4,
            Request::EndTransaction {
                txn: t,
                resolution: Resolution::Commit,
                group: Some("PG".into()),
                from_check: false,
            },
        );
        assert!(
            r.is_err(),
            "{flush:?}: a commit whose op record failed must be an Err, got {r:?}"
        );
        // Reads still served, nothing earlier lost, the failed commit not applied.
        assert_eq!(
            bodies_of(&mut b, 5, "F"),
            vec![b"before-1".to_vec()],
            "{flush:?}"
        );
        assert_eq!(b.pending_transaction_count(), 1, "{flush:?}");
        // Space returns: the broker works again, and the commit can be retried.
        b.storage_mut().fail_appends = false;
        send(&mut b, 6, "F", "after");
        end(&mut b, 7, t, Resolution::Commit);
        let want: Vec<Vec<u8>> = vec![
            b"after".to_vec(),
            b"before-1".to_vec(),
            b"txn-before".to_vec(),
        ];
        assert_eq!(bodies_of(&mut b, 8, "F"), want, "{flush:?}");
        // What a crash leaves: everything acknowledged (sync flush: the durable image).
        let image = if flush == FlushMode::Sync {
            b.storage().crash()
        } else {
            b.storage().live()
        };
        let mut b2 = Broker::open(cfg, CrashStorage::from_mem(image), 9).unwrap();
        assert!(
            b2.recovery_report().cuts.is_empty(),
            "{flush:?}: {:?}",
            b2.recovery_report()
        );
        assert_eq!(
            bodies_of(&mut b2, 9, "F"),
            want,
            "{flush:?}: acknowledged messages lost in a crash"
        );
    }
}

#[test]
fn a_failed_sync_fails_the_broker_and_a_reopen_keeps_what_was_acknowledged() {
    // Linux marks the pages a failed fsync could not write as clean: a later sync succeeds
    // without writing them. So a failed sync is never retried as if nothing happened: the
    // broker fails, and only opening it again (recovery) tells what is on disk.
    let cfg = Config {
        flush: FlushMode::Sync,
        ..cfg()
    };
    let mut b = Broker::open(cfg.clone(), CrashStorage::new(), 0).unwrap();
    send(&mut b, 1, "F", "durable");
    // A write held for its sync (handle), then the sync fails.
    b.handle(
        2,
        7,
        Request::Send {
            messages: vec![NewMessage::new("F", &b"held"[..])],
        },
    )
    .unwrap();
    b.storage_mut().fail_syncs = true;
    assert!(b.sync().is_err());
    assert!(b.failed().is_some());
    assert!(
        matches!(
            b.poll_output(),
            Some(rocklet_core::Output::Failed { id: 7, .. })
        ),
        "the reply that waited on the failed sync must fail"
    );
    // The storage "recovers"; the broker does not take it at its word.
    b.storage_mut().fail_syncs = false;
    let r = b.execute(
        3,
        Request::Send {
            messages: vec![NewMessage::new("F", &b"after"[..])],
        },
    );
    assert!(
        matches!(r, Err(rocklet_core::Error::Failed { .. })),
        "a failed broker must refuse requests: {r:?}"
    );
    assert!(matches!(b.sync(), Err(rocklet_core::Error::Failed { .. })));
    assert!(matches!(
        b.handle_timeout(4),
        Err(rocklet_core::Error::Failed { .. })
    ));
    // What is durable is what was acknowledged; the lost bytes never come back.
    let mut reopened =
        Broker::open(cfg.clone(), CrashStorage::from_mem(b.storage().crash()), 5).unwrap();
    assert_eq!(bodies_of(&mut reopened, 5, "F"), vec![b"durable".to_vec()]);
    send(&mut reopened, 6, "F", "later");
    assert_eq!(
        bodies_of(&mut reopened, 7, "F"),
        vec![b"durable".to_vec(), b"later".to_vec()]
    );
    // The same through execute: the send whose sync fails is an Err.
    let mut b = Broker::open(cfg, CrashStorage::new(), 0).unwrap();
    b.storage_mut().fail_syncs = true;
    let r = b.execute(
        1,
        Request::Send {
            messages: vec![NewMessage::new("F", &b"unsynced"[..])],
        },
    );
    assert!(
        r.is_err(),
        "a send whose sync failed must not be acknowledged: {r:?}"
    );
    assert!(b.failed().is_some());
}

#[test]
fn sync_flush_never_shows_what_a_crash_takes_back() {
    // Under sync flush with a host doing group commit, a message is visible only once a sync
    // covers it, so a crash (durable image) never takes back something a consumer has seen.
    let cfg = Config {
        flush: FlushMode::Sync,
        ..cfg()
    };
    let mut b = Broker::open(cfg.clone(), CrashStorage::new(), 0).unwrap();
    b.handle(
        1,
        1,
        Request::Send {
            messages: vec![NewMessage::new("F", &b"held"[..])],
        },
    )
    .unwrap();
    assert!(b.poll_output().is_none(), "reply released before the sync");
    assert!(
        bodies_of(&mut b, 2, "F").is_empty(),
        "visible before durable"
    );
    let mut crashed =
        Broker::open(cfg.clone(), CrashStorage::from_mem(b.storage().crash()), 3).unwrap();
    assert!(bodies_of(&mut crashed, 3, "F").is_empty());
    b.sync().unwrap();
    assert!(matches!(
        b.poll_output(),
        Some(rocklet_core::Output::Reply { id: 1, .. })
    ));
    assert_eq!(bodies_of(&mut b, 4, "F"), vec![b"held".to_vec()]);
    let mut crashed = Broker::open(cfg, CrashStorage::from_mem(b.storage().crash()), 5).unwrap();
    assert_eq!(bodies_of(&mut crashed, 5, "F"), vec![b"held".to_vec()]);
}

// ---- what is not a torn tail -------------------------------------------------------------------

/// Records in RocketMQ's own layout, as Apache RocketMQ writes them by default: no
/// `__CRC32#` property (the body CRC only). `v2` sets MESSAGE_MAGIC_CODE_V2.
fn rocketmq_log(n: usize, v2: bool) -> Vec<u8> {
    use rocklet_core::record::{self, Header, Host};
    let mut log = Vec::new();
    for i in 0..n {
        let header = Header {
            queue_offset: i as u64,
            phys_offset: log.len() as u64,
            born_timestamp: 1_700_000_000_000,
            store_timestamp: 1_700_000_000_001,
            born_host: Host::V4([10, 0, 0, 1], 50000),
            store_host: Host::V4([10, 0, 0, 2], 10911),
            ..Header::default()
        };
        let body = format!("body {i}");
        let mut rec = Vec::new();
        record::encode(&mut rec, &header, body.as_bytes(), "TopicTest", &[]).unwrap();
        // Take the CRC pair off: PROPERTIES length 0, TOTALSIZE 21 bytes less.
        rec.truncate(rec.len() - record::CRC_RESERVED);
        let len = rec.len();
        rec[len - 2..].copy_from_slice(&0u16.to_be_bytes());
        if v2 {
            // MESSAGE_MAGIC_CODE_V2: the topic length takes two bytes.
            rec[4..8].copy_from_slice(&0xDAA3_20ABu32.to_be_bytes());
            let topic_len_at = len - 2 - "TopicTest".len() - 1;
            rec.insert(topic_len_at, 0);
        }
        let len = rec.len();
        rec[..4].copy_from_slice(&(len as u32).to_be_bytes());
        log.extend_from_slice(&rec);
    }
    log
}

#[test]
fn another_programs_log_and_whole_records_that_fail_are_refused_not_cut() {
    // An Apache RocketMQ commit log (its records lack Rocklet's CRC property, v1 or v2
    // magic), preallocated: whole records are not a torn write. Refused, nothing changed;
    // a repair keeps the bytes in quarantine. (`rocklet import` reads such a store.)
    for v2 in [false, true] {
        let mut seg = rocketmq_log(5, v2);
        let data = seg.len();
        seg.resize(64 << 10, 0);
        match Broker::open(cfg(), with_segment(&seg), 0) {
            Err(rocklet_core::Error::Corrupted { offset, reason }) => {
                assert_eq!(offset, 0);
                assert!(reason.contains("not a torn write"), "{reason}");
            }
            Err(e) => panic!("{e}"),
            Ok(b) => panic!("opened another program's log: {:?}", b.recovery_report()),
        }
        let b = Broker::open_repairing(cfg(), with_segment(&seg), 0).unwrap();
        let q = &b.recovery_report().quarantined;
        assert_eq!(q.len(), 1, "{q:?}");
        assert_eq!(
            q[0].bytes,
            seg.len() as u64,
            "the range runs to the segment's end"
        );
        // Kept up to the last byte that is not zero: the whole log, but for the zeros it ends
        // with (here its last PROPERTIES length, 0).
        let kept = &b.storage().quarantined()[&q[0].name];
        assert!(
            kept.len() <= data && kept.len() + 2 >= data,
            "{}",
            kept.len()
        );
        assert_eq!(kept[..], seg[..kept.len()]);
    }
    // Whole records whose CRCs all fail are not a torn write: refused, nothing cut; a repair
    // keeps their bytes in quarantine.
    let (mem, _) = scripted_log();
    let full = mem.segment(0).unwrap().to_vec();
    let recs = probe::records(&full);
    let mut bad = full.clone();
    for r in &recs[recs.len() - 3..] {
        bad[r.offset as usize + 44] ^= 0x40; // BORNTIMESTAMP
    }
    let first = recs[recs.len() - 3].offset;
    match Broker::open(cfg(), with_segment(&bad), 0) {
        Err(rocklet_core::Error::Corrupted { offset, reason }) => {
            assert_eq!(offset, first);
            assert!(reason.contains("not a torn write"), "{reason}");
        }
        Err(e) => panic!("{e}"),
        Ok(b) => panic!("damaged whole records were cut: {:?}", b.recovery_report()),
    }
    let b = Broker::open_repairing(cfg(), with_segment(&bad), 0).unwrap();
    let q = &b.recovery_report().quarantined;
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(b.storage().quarantined()[&q[0].name], bad[first as usize..]);
}

#[test]
fn more_garbage_than_a_torn_write_leaves_is_refused() {
    // A valid record, then more non-zero bytes than the largest record: not a torn tail.
    let (mem, end) = scripted_log();
    let mut seg = mem.segment(0).unwrap().to_vec();
    let max = cfg().max_message_size.max(4 << 20) as usize + (1 << 16);
    seg.extend((0..max + 1000).map(|i| (i % 251) as u8 | 1));
    match Broker::open(cfg(), with_segment(&seg), 0) {
        Err(rocklet_core::Error::Corrupted { offset, reason }) => {
            assert_eq!(offset, end);
            assert!(reason.contains("more than a torn write"), "{reason}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("garbage cut as a torn tail"),
    }
    // Zeros of any length are the end of the data (a file extended, never written).
    let mut seg = mem.segment(0).unwrap().to_vec();
    seg.resize(seg.len() + max * 2, 0);
    let b = open(with_segment(&seg));
    assert_eq!(b.log_end(), end);
    assert!(b.storage().quarantined().is_empty(), "zeros are not kept");
}

#[test]
fn file_storage_refuses_damage_untouched_and_repairs_into_quarantine() {
    use rocklet_core::{FileStorage, QUARANTINE_DIR};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let mut b = Broker::open(cfg(), FileStorage::open(&path).unwrap(), 0).unwrap();
    for i in 0..20 {
        send(&mut b, i, "Q", &format!("message {i:02}"));
    }
    b.sync().unwrap();
    drop(b);
    let seg = path.join(format!("{:020}", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    let recs = probe::records(&bytes);
    let victim = recs[5].clone();
    bytes[victim.offset as usize + 30] ^= 0x01;
    std::fs::write(&seg, &bytes).unwrap();

    let err = Broker::open(cfg(), FileStorage::open(&path).unwrap(), 0).unwrap_err();
    assert!(
        matches!(&err, rocklet_core::Error::Corrupted { offset, .. } if *offset == victim.offset),
        "{err}"
    );
    assert!(err.to_string().contains("00000000000000000000"), "{err}");
    assert_eq!(
        std::fs::read(&seg).unwrap(),
        bytes,
        "a refused open wrote to the segment"
    );
    assert!(!path.join(QUARANTINE_DIR).exists());

    let mut b = Broker::open_repairing(cfg(), FileStorage::open(&path).unwrap(), 0).unwrap();
    let report = b.recovery_report().clone();
    assert_eq!(report.quarantined.len(), 1);
    assert_eq!(report.records, 19);
    let q = std::fs::read(path.join(QUARANTINE_DIR).join(&report.quarantined[0].name)).unwrap();
    assert_eq!(q, &bytes[victim.offset as usize..victim.end() as usize]);
    let seen = probe::visible(&mut b, 0).remove("Q").unwrap();
    assert_eq!(seen.len(), 19);
    assert!(!seen.contains(&victim.body));
    send(&mut b, 100, "Q", "after the repair");
    b.sync().unwrap();
    drop(b);
    let mut b = Broker::open(cfg(), FileStorage::open(&path).unwrap(), 0).unwrap();
    assert!(b.recovery_report().quarantined.is_empty() && b.recovery_report().cuts.is_empty());
    assert_eq!(probe::visible(&mut b, 0).remove("Q").unwrap().len(), 20);
}

#[test]
fn a_restart_continues_in_the_current_segment() {
    // Every restart used to start a new segment at the log's end (off the segment grid),
    // which RocketMQ's recovery never reaches.
    let cfg = Config {
        segment_size: 64 << 10,
        ..cfg()
    };
    let mut b = Broker::open(cfg.clone(), MemStorage::new(), 0).unwrap();
    send(&mut b, 0, "R", "before");
    for i in 1..4 {
        let mut again = Broker::open(cfg.clone(), b.into_storage(), i).unwrap();
        send(&mut again, i, "R", &format!("after restart {i}"));
        assert_eq!(again.segment_count(), 1, "restart {i} opened a new segment");
        b = again;
    }
    // Filling the segment rolls over to the next one on the grid, and that survives too.
    while b.segment_count() < 2 {
        send(&mut b, 10, "R", &"x".repeat(1000));
    }
    let mem = b.into_storage();
    let mut m = mem.clone();
    assert_eq!(m.segments().unwrap(), vec![0, 64 << 10]);
    let mut b = Broker::open(cfg.clone(), mem, 20).unwrap();
    send(&mut b, 20, "R", "last");
    let mut m = b.into_storage();
    assert_eq!(m.segments().unwrap(), vec![0, 64 << 10]);
    let mut b = Broker::open(cfg, m, 30).unwrap();
    assert!(probe::visible(&mut b, 30)["R"].contains(&b"last".to_vec()));
}

#[test]
fn preallocated_segments_are_exactly_segment_size_on_the_grid_and_zeros_end_the_data() {
    // RocketMQ loads only commit-log files of exactly mappedFileSizeCommitLog bytes, named
    // k x that size, zeros after the data.
    use rocklet_core::FileStorage;
    let seg = 64u64 << 10;
    let cfg = Config {
        segment_size: seg,
        ..cfg()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let storage = || FileStorage::open(&path).unwrap().preallocate(seg);
    let mut b = Broker::open(cfg.clone(), storage(), 0).unwrap();
    let mut n = 0;
    while b.segment_count() < 3 {
        send(&mut b, n, "P", &format!("{n:05}{}", "p".repeat(900)));
        n += 1;
    }
    b.sync().unwrap();
    let data_end = b.log_end();
    drop(b);
    let files = || {
        let mut v: Vec<(String, u64)> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_name().len() == 20)
            .map(|e| {
                (
                    e.file_name().into_string().unwrap(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let expected: Vec<(String, u64)> = (0..3).map(|k| (format!("{:020}", k * seg), seg)).collect();
    assert_eq!(files(), expected);
    let last = std::fs::read(path.join(format!("{:020}", 2 * seg))).unwrap();
    let used = (data_end - 2 * seg) as usize;
    assert!(
        last[used..].iter().all(|&x| x == 0),
        "the rest of the file is zero"
    );
    // Reopening: zeros are the end of the data, nothing is cut, appends go on in place.
    let mut end = data_end;
    for i in 0..3 {
        let mut b = Broker::open(cfg.clone(), storage(), 1_000 + i).unwrap();
        assert!(
            b.recovery_report().cuts.is_empty(),
            "{:?}",
            b.recovery_report()
        );
        assert_eq!(b.log_end(), end, "reopen {i} lost or added data");
        send(&mut b, 1_000 + i, "P", &format!("after restart {i}"));
        b.sync().unwrap();
        end = b.log_end();
    }
    assert_eq!(
        files(),
        expected,
        "restarts made no new file and changed no length"
    );
    // A torn write after the data: cut to zeros, the file keeps its length.
    let file = path.join(format!("{:020}", 2 * seg));
    let mut bytes = std::fs::read(&file).unwrap();
    let b = Broker::open(cfg.clone(), storage(), 2_000).unwrap();
    let end = (b.log_end() - 2 * seg) as usize;
    drop(b);
    bytes[end..end + 6].copy_from_slice(&[0, 0, 1, 0, 0xda, 0xa3]);
    std::fs::write(&file, &bytes).unwrap();
    let mut b = Broker::open(cfg.clone(), storage(), 2_001).unwrap();
    assert_eq!(b.recovery_report().cuts.len(), 1);
    assert_eq!(b.recovery_report().cuts[0].bytes, 6);
    assert_eq!(files(), expected);
    assert!(std::fs::read(&file).unwrap()[end..].iter().all(|&x| x == 0));
    let seen = probe::visible(&mut b, 2_001).remove("P").unwrap();
    assert_eq!(seen.len(), n as usize + 3);
}
