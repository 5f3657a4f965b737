//! `rocklet export --to-rocketmq`: a data directory written through the core's public API,
//! exported, and the export read back by `rocklet import` (which reads RocketMQ's layout:
//! halves, op records, commit copies, schedule and timer topics, config JSON) into a second
//! data directory that must serve the same. The same against Apache RocketMQ 5.5.0 itself
//! runs in tests/ci/import.sh (the round trip step).

mod common;

use std::path::Path;

use rocklet_broker::export::{self, MoveError, Options, Report};
use rocklet_broker::import;
use rocklet_core::record::{self, Decoded};
use rocklet_core::{
    Broker, Config, Delay, FileStorage, Message, NewMessage, Reply, Request, Resolution, TxnId,
};

const T0: u64 = 1_700_000_000_000;

fn opts(from: &Path, to: &Path) -> Options {
    Options {
        from: from.to_path_buf(),
        to: to.to_path_buf(),
        core: Config::default(),
        commitlog_file_size: 1 << 20,
    }
}

fn open(dir: &Path, now: u64) -> Broker<FileStorage> {
    Broker::open(Config::default(), FileStorage::open(dir).unwrap(), now).unwrap()
}

fn msg(topic: &str, q: u32, body: &str) -> NewMessage {
    NewMessage {
        queue_id: Some(q),
        tag: Some("TagA".into()),
        keys: vec![format!("k-{body}")],
        message_id: Some(format!("ID-{body}")),
        properties: vec![("p".into(), body.into())],
        ..NewMessage::new(topic, body.as_bytes())
    }
}

fn send(b: &mut Broker<FileStorage>, now: u64, m: NewMessage) {
    let r = b.execute(now, Request::Send { messages: vec![m] }).unwrap();
    assert!(matches!(r, Reply::Sent(_)), "{r:?}");
}

fn prepare(b: &mut Broker<FileStorage>, now: u64, body: &str) -> TxnId {
    let r = b
        .execute(
            now,
            Request::Prepare {
                group: "ExpTxnGroup".into(),
                message: msg("ExpTxn", 0, body),
                check_immunity_ms: None,
            },
        )
        .unwrap();
    match r {
        Reply::Sent(s) => s[0].txn.unwrap(),
        r => panic!("{r:?}"),
    }
}

fn end(b: &mut Broker<FileStorage>, now: u64, txn: TxnId, resolution: Resolution) {
    let r = b
        .execute(
            now,
            Request::EndTransaction {
                txn,
                resolution,
                group: Some("ExpTxnGroup".into()),
                from_check: false,
            },
        )
        .unwrap();
    assert!(matches!(r, Reply::Ended { .. }), "{r:?}");
}

/// What a consumer reads of a queue: (queue offset, message id, body, keys, tag, store time).
fn read(
    b: &mut Broker<FileStorage>,
    topic: &str,
    q: u32,
) -> Vec<(u64, String, String, Vec<String>)> {
    b.browse(topic, q, 0, 1000)
        .unwrap()
        .iter()
        .map(|m: &Message| {
            (
                m.queue_offset,
                m.msg_id.clone(),
                String::from_utf8_lossy(&m.body).into_owned(),
                m.keys.clone(),
            )
        })
        .collect()
}

/// A data directory with every kind of state: messages on 4 queues, a committed, a
/// rolled-back and a pending transaction, delivered and waiting delays (level and time), a
/// FIFO group and a group that consumed part of a queue.
fn scenario(dir: &Path) {
    let mut b = open(dir, T0);
    b.create_topic("ExpT", 4).unwrap().unwrap();
    b.create_topic("ExpTxn", 1).unwrap().unwrap();
    b.create_topic("ExpDelay", 2).unwrap().unwrap();
    for i in 0..8 {
        send(
            &mut b,
            T0 + i,
            msg("ExpT", (i % 4) as u32, &format!("m{i}")),
        );
    }
    let c = prepare(&mut b, T0 + 10, "commit-1");
    let r = prepare(&mut b, T0 + 11, "rollback-1");
    prepare(&mut b, T0 + 12, "pending-1");
    send(&mut b, T0 + 13, msg("ExpTxn", 0, "plain-after-prepare"));
    end(&mut b, T0 + 14, c, Resolution::Commit);
    end(&mut b, T0 + 15, r, Resolution::Rollback);
    let delayed = |body: &str, q: u32, d: Delay| NewMessage {
        delay: Some(d),
        ..msg("ExpDelay", q, body)
    };
    send(&mut b, T0 + 20, delayed("level-1", 0, Delay::Level(1)));
    send(&mut b, T0 + 21, delayed("level-4", 1, Delay::Level(4)));
    send(
        &mut b,
        T0 + 22,
        delayed("timer-2s", 0, Delay::At(T0 + 2_000)),
    );
    send(
        &mut b,
        T0 + 23,
        delayed("timer-100s", 1, Delay::At(T0 + 100_000)),
    );
    b.sync().unwrap();
    b.handle_timeout(T0 + 5_000).unwrap();
    b.sync().unwrap();
    b.declare_group("ExpFifo", true).unwrap().unwrap();
    let r = b
        .execute(
            T0 + 5_001,
            Request::CommitOffset {
                group: "ExpGroup".into(),
                topic: "ExpT".into(),
                queue_id: 1,
                offset: 1,
            },
        )
        .unwrap();
    assert!(matches!(r, Reply::OffsetCommitted), "{r:?}");
    b.close().unwrap();
}

#[test]
fn export_then_import_serves_the_same_messages_offsets_groups_transactions_and_delays() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, store, back) = (
        tmp.path().join("data"),
        tmp.path().join("store"),
        tmp.path().join("back"),
    );
    scenario(&data);
    let before = common::files_under(&data);
    let report: Report = export::run(&opts(&data, &store)).unwrap();
    assert_eq!(
        common::files_under(&data),
        before,
        "the export wrote to its source"
    );
    assert_eq!(report.messages, 9, "{report}");
    assert_eq!(report.committed, 1, "{report}");
    assert_eq!(report.rolled_back, 1, "{report}");
    assert_eq!(report.pending.len(), 1, "{report}");
    assert_eq!(report.pending[0].id, "ID-pending-1");
    assert_eq!(report.pending[0].group, "ExpTxnGroup");
    assert_eq!(report.delivered_delays, 2, "{report}");
    assert_eq!(report.pending_level_delays, 1, "{report}");
    assert_eq!(report.pending_timers, 1, "{report}");
    assert_eq!(report.fifo_groups, 1, "{report}");
    assert_eq!(report.consumer_offsets, 1, "{report}");
    assert!(report.not_exported.is_empty(), "{report}");

    // RocketMQ's layout: files of the configured size, config files as fastjson reads them.
    let files: Vec<_> = std::fs::read_dir(store.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 1 << 20);
    let groups = std::fs::read_to_string(store.join("config/subscriptionGroup.json")).unwrap();
    assert!(
        groups.contains(r#""groupName":"ExpFifo","#)
            && groups.contains(
                r#""consumeMessageOrderly":true,"consumeTimeoutMinute":15,"groupName":"ExpFifo""#
            ),
        "{groups}"
    );
    let offsets = std::fs::read_to_string(store.join("config/consumerOffset.json")).unwrap();
    assert!(offsets.contains(r#""ExpT@ExpGroup":{1:1}"#), "{offsets}");
    // The commit copy is EndTransactionProcessor's: commit type, naming its half, no
    // REAL_TOPIC; the pending half keeps its producer group.
    let log = std::fs::read(&files[0]).unwrap();
    let mut at = 0;
    let (mut halves, mut copies, mut ops) = (Vec::new(), Vec::new(), Vec::new());
    while let Ok(Decoded::Record(r)) = record::decode(&log[at..], 1 << 20) {
        match r.topic {
            "RMQ_SYS_TRANS_HALF_TOPIC" => {
                // As TransactionalMessageBridge stores it: not prepared-type (RocketMQ's
                // dispatch keeps prepared records out of every consume queue).
                assert_eq!(r.header.sys_flag & 0xC, 0, "a half's transaction type");
                assert_eq!(r.prop("TRAN_MSG"), Some("true"));
                halves.push((
                    at as u64,
                    r.prop("UNIQ_KEY").unwrap().to_string(),
                    r.prop("PGROUP").map(String::from),
                ));
            }
            "RMQ_SYS_TRANS_OP_HALF_TOPIC" => ops.push(String::from_utf8_lossy(r.body).into_owned()),
            "ExpTxn" if r.header.sys_flag & 0xC == 0x8 => {
                assert_eq!(r.prop("REAL_TOPIC"), None);
                copies.push(r.header.prepared_offset);
            }
            _ => {}
        }
        at += r.total_size as usize;
    }
    assert_eq!(halves.len(), 3, "{halves:?}");
    assert_eq!(
        ops,
        ["0", "1"],
        "the resolved halves (queue offsets 0 and 1) have op records"
    );
    assert_eq!(
        halves[2].1, "ID-pending-1",
        "the pending half comes after the resolved ones"
    );
    assert_eq!(halves[2].2.as_deref(), Some("ExpTxnGroup"));
    let committed_half = halves.iter().find(|h| h.1 == "ID-commit-1").unwrap().0;
    assert_eq!(copies, [committed_half]);

    // Read back by `rocklet import`: the same messages at the same queue offsets.
    let imported = import::run(&import::Options {
        from: store.clone(),
        data_dir: back.clone(),
        core: Config::default(),
    })
    .unwrap();
    assert_eq!(imported.committed, 1, "{imported}");
    assert_eq!(imported.rolled_back, 1, "{imported}");
    let mut src = open(&data, T0 + 6_000);
    let mut dst = open(&back, T0 + 6_000);
    for (t, queues) in [("ExpT", 4), ("ExpTxn", 1), ("ExpDelay", 2)] {
        for q in 0..queues {
            assert_eq!(read(&mut dst, t, q), read(&mut src, t, q), "{t}:{q}");
        }
    }
    assert_eq!(
        read(&mut dst, "ExpTxn", 0).len(),
        2,
        "the plain message and the committed one"
    );
    assert_eq!(dst.committed_offset("ExpGroup", "ExpT", 1), Some(1));
    assert!(dst.group_is_fifo("ExpFifo"));
    let pending = dst.pending_transactions(10);
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].group, "ExpTxnGroup");
    let mut due: Vec<u64> = dst.pending_delays(10).iter().map(|d| d.due).collect();
    due.sort_unstable();
    let mut want: Vec<u64> = src.pending_delays(10).iter().map(|d| d.due).collect();
    want.sort_unstable();
    assert_eq!(due, want, "waiting delays keep their due times");
    assert_eq!(want, [T0 + 21 + 30_000, T0 + 100_000]);
}

fn refused(r: Result<Report, MoveError>) -> String {
    match r {
        Err(MoveError::Refused(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_running_broker_a_non_empty_target_and_overlaps_are_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    scenario(&data);

    // A broker holds the directory.
    let running = open(&data, T0 + 6_000);
    let why = refused(export::run(&opts(&data, &tmp.path().join("s1"))));
    assert!(why.contains("in use by a running broker"), "{why}");
    assert!(!tmp.path().join("s1").exists(), "nothing is created");
    drop(running);

    // A target that is not empty.
    let full = tmp.path().join("full");
    std::fs::create_dir_all(&full).unwrap();
    std::fs::write(full.join("x"), b"keep").unwrap();
    let why = refused(export::run(&opts(&data, &full)));
    assert!(why.contains("is not empty"), "{why}");
    assert_eq!(std::fs::read(full.join("x")).unwrap(), b"keep");

    // A target inside the source, or holding it.
    let before = common::files_under(&data);
    let why = refused(export::run(&opts(&data, &data.join("inside"))));
    assert!(why.contains("overlap"), "{why}");
    assert_eq!(common::files_under(&data), before);

    // Not a Rocklet directory: an Apache store is named as such.
    let apache = tmp.path().join("apache");
    std::fs::create_dir_all(apache.join("commitlog")).unwrap();
    let why = refused(export::run(&opts(&apache, &tmp.path().join("s2"))));
    assert!(why.contains("Apache RocketMQ store"), "{why}");

    // A commit-log file size RocketMQ cannot map, or too small for a message.
    let why = refused(export::run(&Options {
        commitlog_file_size: 1000,
        ..opts(&data, &tmp.path().join("s3"))
    }));
    assert!(why.contains("is outside 4096..=2147483647"), "{why}");
    assert!(!tmp.path().join("s3").exists());
    let big = tmp.path().join("big");
    let mut b = open(&big, T0);
    let m = NewMessage {
        queue_id: Some(0),
        ..NewMessage::new("ExpBig", vec![b'x'; 5000])
    };
    send(&mut b, T0, m);
    b.close().unwrap();
    drop(b);
    let why = refused(export::run(&Options {
        commitlog_file_size: 4096,
        ..opts(&big, &tmp.path().join("s4"))
    }));
    assert!(
        why.contains("a message of topic ExpBig takes") && why.contains("--commitlog-file-size"),
        "{why}"
    );
    assert!(!tmp.path().join("s4").exists(), "the new store is removed");

    // Not a directory.
    let file = tmp.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let why = refused(export::run(&opts(&file, &tmp.path().join("s5"))));
    assert!(why.contains("is not a directory"), "{why}");

    // A backup whose manifest does not check out.
    let backup = tmp.path().join("backup");
    std::fs::create_dir_all(&backup).unwrap();
    std::fs::write(
        backup.join("BACKUP_MANIFEST"),
        b"rocklet-backup 1\ncrc 00000000\n",
    )
    .unwrap();
    let why = refused(export::run(&opts(&backup, &tmp.path().join("s6"))));
    assert!(why.contains("CRC"), "{why}");
    assert!(!tmp.path().join("s6").exists());
}

#[test]
fn a_backup_directory_exports_as_its_data_directory_does() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    scenario(&data);
    let direct = export::run(&opts(&data, &tmp.path().join("s1"))).unwrap();
    // A backup directory's layout: the segments and a manifest, no LOCK, LOG_END or side file.
    let backup = tmp.path().join("backup");
    std::fs::create_dir_all(&backup).unwrap();
    let mut manifest_src = None;
    for e in std::fs::read_dir(&data).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
            std::fs::copy(&p, backup.join(&name)).unwrap();
            manifest_src = Some(name);
        }
    }
    assert!(manifest_src.is_some());
    let b = open(&data, T0 + 7_000);
    let end = b.log_end();
    drop(b);
    write_manifest(&backup, end);
    let from_backup = export::run(&opts(&backup, &tmp.path().join("s2"))).unwrap();
    let strip = |mut r: Report| {
        r.notes.clear();
        r
    };
    assert_eq!(strip(from_backup), strip(direct));
}

/// A manifest as `rocklet admin backup` writes it, for the segment files in `dir`.
fn write_manifest(dir: &Path, point: u64) {
    use rocklet_broker::backup::{Entry, Manifest, HEAD};
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let files = names
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(dir.join(&name)).unwrap();
            let base: u64 = name.parse().unwrap();
            let data = (point - base).min(bytes.len() as u64);
            Entry {
                crc: crc32fast::hash(&bytes[..data as usize]),
                head: crc32fast::hash(&bytes[..data.min(HEAD) as usize]),
                size: bytes.len() as u64,
                data,
                name,
            }
        })
        .collect();
    let m = Manifest {
        version: "0.1.0".into(),
        log_offset: point,
        time_ms: T0,
        files,
    };
    std::fs::write(dir.join("BACKUP_MANIFEST"), m.encode()).unwrap();
}

#[test]
fn a_pop_group_resumes_at_its_first_message_not_acked() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, store) = (tmp.path().join("data"), tmp.path().join("store"));
    let mut b = open(&data, T0);
    b.create_topic("ExpPop", 1).unwrap().unwrap();
    for i in 0..5 {
        send(&mut b, T0 + i, msg("ExpPop", 0, &format!("p{i}")));
    }
    b.sync().unwrap();
    let r = b
        .execute(
            T0 + 10,
            Request::Receive {
                group: "PopGroup".into(),
                topic: "ExpPop".into(),
                queue_id: Some(0),
                max: 4,
                invisible_ms: 600_000,
                filter: rocklet_core::TagFilter::All,
            },
        )
        .unwrap();
    let Reply::Received(got) = r else {
        panic!("{r:?}")
    };
    assert_eq!(got.len(), 4);
    // Acked: queue offsets 0 and 2; in flight: 1 and 3.
    for i in [0, 2] {
        let r = b
            .execute(
                T0 + 11,
                Request::Ack {
                    group: "PopGroup".into(),
                    handle: got[i].handle.clone(),
                },
            )
            .unwrap();
        assert!(matches!(r, Reply::Acked), "{r:?}");
    }
    b.close().unwrap();
    drop(b);
    let report = export::run(&opts(&data, &store)).unwrap();
    let offsets = std::fs::read_to_string(store.join("config/consumerOffset.json")).unwrap();
    assert!(
        offsets.contains(r#""ExpPop@PopGroup":{0:1}"#),
        "the group resumes at its first message not acked: {offsets}"
    );
    assert!(
        report.notes.iter().any(|n| n.contains(
            "group PopGroup had 2 messages received (pop) and not acked in ExpPop:0: it resumes at queue offset 1, so they and 1 acked after them are delivered again"
        )),
        "{report}"
    );
}
