//! Online backup and restore (issue 31, item 4).
//!
//! The property: a backup taken with `rocklet admin backup` while clients write, restored
//! with `rocklet admin restore` and opened by a new broker, is the broker as its log stood
//! at the backup's point — every message acknowledged before the backup started is there,
//! pending transactions are still pending and get checked, delayed messages fire once and
//! not early, a consumer group's acks hold and its in-flight receipts come back. A second
//! backup into the same directory copies only the log written since (the reported byte
//! count is exactly the log's growth); a preallocated segment costs its data only. A
//! damaged or incomplete backup is refused before anything is written.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use rocklet_broker::clock::SystemClock;
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::server;

const SEGMENT: u64 = 8 << 20;

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `rocklet admin <args>`: its stdout, or its stderr when it fails.
async fn admin(args: Vec<String>) -> Result<String, String> {
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rocklet"))
            .arg("admin")
            .args(&args)
            .output()
            .unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    })
    .await
    .unwrap()
}

/// What `rocklet admin backup` printed.
#[derive(Debug)]
struct Printed {
    log_offset: u64,
    files_copied: u64,
    bytes_copied: u64,
    files_held: u64,
}

fn number_after(s: &str, key: &str) -> u64 {
    let i = s.find(key).unwrap_or_else(|| panic!("`{key}` in {s}")) + key.len();
    s[i..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("a number after `{key}` in {s}"))
}

async fn backup(addr: std::net::SocketAddr, to: &Path) -> Result<Printed, String> {
    let out = admin(vec![
        "--broker".into(),
        addr.to_string(),
        "backup".into(),
        "--to".into(),
        to.display().to_string(),
    ])
    .await?;
    Ok(Printed {
        log_offset: number_after(&out, "backup of log offset"),
        files_copied: number_after(&out, "copied"),
        bytes_copied: number_after(&out, "files,"),
        files_held: number_after(&out, "held"),
    })
}

async fn restore(from: &Path, to: &Path) -> Result<String, String> {
    admin(vec![
        "restore".into(),
        "--from".into(),
        from.display().to_string(),
        "--to".into(),
        to.display().to_string(),
    ])
    .await
}

fn id_of(m: &pb::Message) -> String {
    m.system_properties.as_ref().unwrap().message_id.clone()
}

/// Segment files in `dir`: (count, summed length, summed bytes allocated on disk).
fn segment_space(dir: &Path) -> (u64, u64, u64) {
    let mut out = (0, 0, 0);
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()) {
            let m = e.metadata().unwrap();
            out.0 += 1;
            out.1 += m.len();
            out.2 += m.blocks() * 512;
        }
    }
    out
}

async fn start_on(dir: &Path) -> (server::RunningBroker, Client) {
    let mut cfg = test_config(dir);
    cfg.core.segment_size = SEGMENT;
    let b = server::start(cfg, Arc::new(SystemClock)).await.unwrap();
    let c = connect(b.addr).await;
    (b, c)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_under_load_restores_what_was_acknowledged() {
    let mut a = TestBroker::start_with(|c| c.core.segment_size = SEGMENT).await;
    let addr = a.addr();
    let c = &mut a.client;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("backup");

    // Before the backup: 300 messages over two segments, three transactions left pending
    // (no producer online: their checks wait), three delayed messages not yet due, a group
    // that acked 100 messages and holds 10 more in flight.
    let body = vec![b'n'; 30_000];
    let mut normal = Vec::new();
    for i in 0..300 {
        let id = format!("N{i:04}");
        send_ok(c, msg("BkNormal", &body, pb::MessageType::Normal, &id)).await;
        normal.push(id);
    }
    let mut txns = BTreeSet::new();
    for i in 0..3 {
        let e = send_ok(
            c,
            msg(
                "BkTxn",
                b"half",
                pb::MessageType::Transaction,
                &format!("T{i}"),
            ),
        )
        .await;
        txns.insert(e.transaction_id);
    }
    let due = wall_ms() + 7_000;
    for i in 0..3 {
        let mut m = msg(
            "BkDelay",
            b"later",
            pb::MessageType::Delay,
            &format!("D{i}"),
        );
        m.system_properties.as_mut().unwrap().delivery_timestamp = Some(prost_types::Timestamp {
            seconds: (due / 1000) as i64,
            nanos: ((due % 1000) * 1_000_000) as i32,
        });
        send_ok(c, m).await;
    }
    let mut acked = BTreeSet::new();
    while acked.len() < 100 {
        let want = (100 - acked.len()).min(32) as i32;
        for m in receive(c, "BkNormal", "g1", want, 60_000, 1_000)
            .await
            .messages
        {
            assert_eq!(ack(c, "BkNormal", "g1", &m).await.code, OK);
            acked.insert(id_of(&m));
        }
    }
    let in_flight_until = Instant::now() + Duration::from_millis(4_000);
    let mut in_flight = Vec::new();
    while in_flight.len() < 10 {
        let want = 10 - in_flight.len() as i32;
        in_flight.extend(
            receive(c, "BkNormal", "g1", want, 4_000, 1_000)
                .await
                .messages,
        );
    }

    // Load through both backups: each send's id with the time it was acknowledged.
    let stop = Arc::new(AtomicBool::new(false));
    let load: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let loader = {
        let (stop, load) = (stop.clone(), load.clone());
        let mut lc = connect(addr).await;
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let id = format!("L{i:06}");
                i += 1;
                let r = send(
                    &mut lc,
                    vec![msg("BkLoad", &[b'l'; 2000], pb::MessageType::Normal, &id)],
                )
                .await;
                if r.status.is_some_and(|s| s.code == OK) {
                    load.lock().unwrap().insert(id, Instant::now());
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The first backup, while the load runs: everything up to its point, once.
    let started = Instant::now();
    let first = backup(addr, &dir).await.unwrap();
    let acked_before: BTreeSet<String> = load
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, &t)| t < started)
        .map(|(id, _)| id.clone())
        .collect();
    assert!(
        acked_before.len() >= 10,
        "the load ran: {}",
        acked_before.len()
    );
    assert_eq!(first.files_held, 0, "{first:?}");
    // The log's bytes, once: less a segment's blank tail when the next record did not fit
    // (a hole: a few blocks at most with these messages).
    let slack = |files: u64| files * 64 * 1024;
    assert!(
        first.bytes_copied <= first.log_offset
            && first.bytes_copied + slack(first.files_copied) >= first.log_offset,
        "a first backup copies the log's data, once: {first:?}"
    );
    // Sparse: each segment file is as long as the broker's, its preallocated tail a hole.
    let (segs, len, allocated) = segment_space(&dir);
    assert!(segs >= 2, "{segs} segments");
    assert_eq!(len, segs * SEGMENT);
    assert!(
        allocated <= first.log_offset + segs * 64 * 1024,
        "{allocated} bytes allocated for {} bytes of log in {segs} segments",
        first.log_offset
    );
    // The owner's only, as the data directory's auth.json: a backup holds every message.
    for e in std::fs::read_dir(&dir).unwrap() {
        let m = e.unwrap().metadata().unwrap();
        assert_eq!(m.mode() & 0o077, 0, "mode {:o}", m.mode());
    }
    let r1 = work.path().join("restored-1");
    let out = restore(&dir, &r1).await.unwrap();
    assert!(
        out.contains(&format!("restored log offset {}", first.log_offset)),
        "{out}"
    );

    // More writes, then a second backup into the same directory: only what is new.
    for i in 0..50 {
        send_ok(
            c,
            msg("BkLater", &body, pb::MessageType::Normal, &format!("A{i}")),
        )
        .await;
    }
    let second = backup(addr, &dir).await.unwrap();
    assert!(second.log_offset > first.log_offset);
    assert!(
        second.files_held >= 1,
        "sealed segments are held: {second:?}"
    );
    let growth = second.log_offset - first.log_offset;
    assert!(
        second.bytes_copied <= growth && second.bytes_copied + slack(second.files_copied) >= growth,
        "the second backup copies the log's growth only: {first:?} then {second:?}"
    );
    assert!(second.files_copied >= 1);
    let r2 = work.path().join("restored-2");
    restore(&dir, &r2).await.unwrap();
    stop.store(true, Ordering::SeqCst);
    loader.await.unwrap();
    a.stop().await;

    // A new broker on the first backup.
    let (b, mut c) = start_on(&r1).await;
    let core = b.core.clone();
    assert_eq!(
        core.inspect(|b| b.pending_transaction_count())
            .await
            .unwrap(),
        3,
        "the transactions are still pending"
    );
    // Delays: nothing before they are due.
    if wall_ms() + 1_000 < due {
        let early = receive(&mut c, "BkDelay", "gd", 16, 60_000, 300)
            .await
            .messages;
        assert!(early.is_empty(), "a delayed message fired early: {early:?}");
    }
    // The checks go out once a producer of the topic is online.
    let mut producer = Telemetry::producer(&mut c, &["BkTxn"]).await;
    let check = producer
        .next_check(Duration::from_secs(5))
        .await
        .expect("a pending transaction is checked");
    assert!(txns.contains(&check.transaction_id), "{check:?}");
    // The group's offsets: what it acked does not come back; what it held comes back once
    // its invisible time is over.
    tokio::time::sleep_until(in_flight_until.into()).await;
    let left: BTreeSet<String> = drain_ids(&mut c, "BkNormal", "g1")
        .await
        .into_iter()
        .collect();
    let expected: BTreeSet<String> = normal
        .iter()
        .filter(|id| !acked.contains(*id))
        .cloned()
        .collect();
    assert_eq!(left, expected, "group g1 resumes where it was");
    for m in &in_flight {
        assert!(left.contains(&id_of(m)));
    }
    // Every load message acknowledged before the backup started is there.
    let loaded: BTreeSet<String> = drain_ids(&mut c, "BkLoad", "gl")
        .await
        .into_iter()
        .collect();
    let missing: Vec<_> = acked_before.difference(&loaded).collect();
    assert!(
        missing.is_empty(),
        "acknowledged before the backup, missing: {missing:?}"
    );
    // The delays fire once, when due.
    let wait = due.saturating_sub(wall_ms()) + 1_500;
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let delayed = receive_all(&mut c, "BkDelay", "gd").await;
    let ids: BTreeSet<String> = delayed.iter().map(id_of).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(delayed.len(), 3, "each delayed message once");
    b.stop().await;

    // The second (incremental) backup restores whole: what was written between the two.
    let (b, mut c) = start_on(&r2).await;
    let later = drain_ids(&mut c, "BkLater", "gx").await;
    assert_eq!(later.len(), 50);
    let left = drain_ids(&mut c, "BkNormal", "g1").await;
    assert_eq!(left.len(), 200, "g1 as it was at the second backup");
    b.stop().await;
}

fn flip_byte(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= 0x5a;
    f.write_all_at(&b, at).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_or_incomplete_backup_is_refused() {
    let mut a = TestBroker::start_with(|c| c.core.segment_size = SEGMENT).await;
    for i in 0..40 {
        send_ok(
            &mut a.client,
            msg(
                "BkDamage",
                &[b'x'; 1000],
                pb::MessageType::Normal,
                &format!("X{i}"),
            ),
        )
        .await;
    }
    // Beside the log: users and ACLs (none here, so the restored broker runs open) and what
    // a repair set aside.
    let auth = br#"{"version":1,"users":[],"acls":[]}"#;
    std::fs::write(a.dir.path().join("auth.json"), auth).unwrap();
    std::fs::create_dir_all(a.dir.path().join("quarantine")).unwrap();
    std::fs::write(a.dir.path().join("quarantine/10-20.damaged"), [7u8; 10]).unwrap();
    let work = tempfile::tempdir().unwrap();
    let good = work.path().join("good");
    let p = backup(a.addr(), &good).await.unwrap();
    assert!(p.log_offset > 40_000);

    // Refused by the broker: a directory inside its data directory, or one holding other
    // files; the data directory itself.
    let inside = a.dir.path().join("backups");
    let e = backup(a.addr(), &inside).await.unwrap_err();
    assert!(e.contains("inside the broker's data directory"), "{e}");
    let other = work.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), b"mine").unwrap();
    let e = backup(a.addr(), &other).await.unwrap_err();
    assert!(e.contains("holds no backup"), "{e}");
    assert_eq!(std::fs::read(other.join("notes.txt")).unwrap(), b"mine");
    a.stop().await;

    let target = |n: &str| work.path().join(format!("restore-{n}"));
    // The manifest changed by one byte.
    let d = work.path().join("manifest");
    copy_dir(&good, &d);
    flip_byte(&d.join("BACKUP_MANIFEST"), 40);
    let e = restore(&d, &target("m")).await.unwrap_err();
    assert!(e.contains("damaged") && e.contains("CRC"), "{e}");
    assert!(!target("m").exists(), "nothing is written");
    // A byte of a segment's data changed.
    let d = work.path().join("segment");
    copy_dir(&good, &d);
    flip_byte(&d.join("00000000000000000000"), 1234);
    let e = restore(&d, &target("s")).await.unwrap_err();
    assert!(
        e.contains("damaged or incomplete") && e.contains("00000000000000000000"),
        "{e}"
    );
    assert!(!target("s").exists());
    // A segment file missing.
    let d = work.path().join("missing");
    copy_dir(&good, &d);
    std::fs::remove_file(d.join("00000000000000000000")).unwrap();
    let e = restore(&d, &target("x")).await.unwrap_err();
    assert!(e.contains("damaged or incomplete"), "{e}");
    // No manifest: a backup that never finished.
    let d = work.path().join("unfinished");
    copy_dir(&good, &d);
    std::fs::remove_file(d.join("BACKUP_MANIFEST")).unwrap();
    let e = restore(&d, &target("u")).await.unwrap_err();
    assert!(e.contains("not a complete backup"), "{e}");
    // A broker refuses to run on a backup directory.
    let mut cfg = test_config(&good);
    cfg.core.segment_size = SEGMENT;
    let e = server::start(cfg, Arc::new(SystemClock))
        .await
        .expect_err("refused");
    assert!(
        e.contains("is a backup") && e.contains("rocklet admin restore"),
        "{e}"
    );
    // The good one restores, not over a data directory that holds something.
    let busy = target("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("x"), b"x").unwrap();
    let e = restore(&good, &busy).await.unwrap_err();
    assert!(e.contains("not empty"), "{e}");
    restore(&good, &target("ok")).await.unwrap();
    let ok = target("ok");
    assert_eq!(std::fs::read(ok.join("auth.json")).unwrap(), auth);
    assert_eq!(
        std::fs::metadata(ok.join("auth.json")).unwrap().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::read(ok.join("quarantine/10-20.damaged")).unwrap(),
        [7u8; 10]
    );
    let (b, mut c) = start_on(&target("ok")).await;
    assert_eq!(drain_ids(&mut c, "BkDamage", "g").await.len(), 40);
    b.stop().await;
}

/// A backup of a log retention trimmed holds where the log starts (`LOG_START`, as it was at
/// the backup's point): restored, the queue keeps its offsets — its first offset where
/// retention left it, its next one where the sends left it — and a message sent after the
/// restore takes the next offset, not one retention already used.
#[tokio::test]
async fn a_backup_after_retention_keeps_where_the_log_starts() {
    let mut b = TestBroker::start_with(|c| {
        c.core.segment_size = 65536;
        c.core.max_message_size = 8192;
        c.core.max_batch_size = 8192;
        c.topics = vec![rocklet_broker::config::TopicDecl {
            name: "Trimmed".into(),
            queues: Some(1),
            message_types: None,
        }];
    })
    .await;
    for i in 0..100 {
        let m = msg(
            "Trimmed",
            &vec![b't'; 3000],
            pb::MessageType::Normal,
            &format!("T{i}"),
        );
        send_ok(&mut b.client, m).await;
    }
    let r = b.broker.as_ref().unwrap();
    let (core, metrics) = (r.core.clone(), r.metrics.clone());
    let cfg = rocklet_broker::config::RetentionConfig {
        file_reserved_time_hours: 0.0,
        disk_max_used_space_ratio: 1.0,
        disk_space_clean_forcibly_ratio: 1.0,
        ..rocklet_broker::config::RetentionConfig::default()
    };
    let ran = rocklet_broker::retention::run_once(&core, &SystemClock, &metrics, &cfg, true)
        .await
        .unwrap();
    assert!(ran.retired.len() >= 2, "{ran:?}");
    let offsets = |core: rocklet_broker::driver::CoreHandle| async move {
        core.inspect(|b| {
            let min = b.queue_min_offset("Trimmed", 0).unwrap();
            let next = b.topic_info("Trimmed").unwrap().queues[0].1;
            (min, next)
        })
        .await
        .unwrap()
    };
    let before = offsets(core.clone()).await;
    assert!(before.0 > 0 && before.1 == 100, "{before:?}");

    let work = tempfile::tempdir().unwrap();
    let (to, restored) = (work.path().join("backup"), work.path().join("restored"));
    backup(b.addr(), &to).await.unwrap();
    assert!(to.join(rocklet_core::LOG_START_FILE).exists());
    b.stop().await;
    restore(&to, &restored).await.unwrap();
    let (r, mut c) = start_on(&restored).await;
    assert_eq!(
        offsets(r.core.clone()).await,
        before,
        "(first, next) offset restored"
    );
    let e = send_ok(
        &mut c,
        msg("Trimmed", b"after", pb::MessageType::Normal, "AFTER"),
    )
    .await;
    assert!(!e.message_id.is_empty());
    assert_eq!(offsets(r.core.clone()).await.1, 101);
    r.stop().await;
}

/// Backup and retention together (issue 31): retention retires segments before the backup
/// (the backup holds a `LOG_START` and carried records) and again while the backup copies,
/// under load. The run while it copies deletes segment files the copy has not reached yet:
/// the backup must still read them (it holds them open), and its restore is the broker at the
/// backup's point — the pending transactions pending and checked, the delays (carried twice)
/// once and not early, the group's offsets, every message acknowledged before the backup
/// whose segment was still there at its point, and nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_while_retention_deletes_segments_restores_what_was_owed() {
    const SMALL: u64 = 128 * 1024;
    let mut a = TestBroker::start_with(|c| {
        c.core.segment_size = SMALL;
        c.core.max_message_size = 40_000;
        c.core.max_batch_size = 40_000;
    })
    .await;
    let addr = a.addr();
    let (core, metrics) = {
        let r = a.broker.as_ref().unwrap();
        (r.core.clone(), r.metrics.clone())
    };
    let retention = rocklet_broker::config::RetentionConfig {
        file_reserved_time_hours: 0.0,
        disk_max_used_space_ratio: 1.0,
        disk_space_clean_forcibly_ratio: 1.0,
        ..rocklet_broker::config::RetentionConfig::default()
    };
    let c = &mut a.client;
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("backup");

    // Owed from the first segment on: three pending halves, three delays not yet due.
    let mut txns = BTreeSet::new();
    for i in 0..3 {
        let m = msg(
            "RtTxn",
            b"half",
            pb::MessageType::Transaction,
            &format!("T{i}"),
        );
        txns.insert(send_ok(c, m).await.transaction_id);
    }
    let due = wall_ms() + 20_000;
    for i in 0..3 {
        let mut m = msg(
            "RtDelay",
            b"later",
            pb::MessageType::Delay,
            &format!("D{i}"),
        );
        m.system_properties.as_mut().unwrap().delivery_timestamp = Some(prost_types::Timestamp {
            seconds: (due / 1000) as i64,
            nanos: ((due % 1000) * 1_000_000) as i32,
        });
        send_ok(c, m).await;
    }
    // 30 KB messages, four a segment.
    let body = vec![b'o'; 30_000];
    let fill = |c: &mut Client, topic: &'static str, prefix: &'static str, n: usize| {
        let mut c = c.clone();
        let body = body.clone();
        async move {
            let mut ids = Vec::new();
            for i in 0..n {
                let id = format!("{prefix}{i:04}");
                send_ok(&mut c, msg(topic, &body, pb::MessageType::Normal, &id)).await;
                ids.push(id);
            }
            ids
        }
    };
    fill(c, "RtOld", "O", 120).await;
    // The first run: the old segments go, the halves and delays are carried.
    let first =
        rocklet_broker::retention::run_once(&core, &SystemClock, &metrics, &retention, true)
            .await
            .unwrap();
    assert!(first.retired.len() >= 20 && first.carried >= 6, "{first:?}");

    // What the backup must hold: a group's progress over RtKeep (acks 20 of 40), then
    // enough segments that the copy runs long enough for a retention run to land in it.
    let keep = fill(c, "RtKeep", "K", 40).await;
    let mut acked = BTreeSet::new();
    while acked.len() < 20 {
        let want = (20 - acked.len()).min(16) as i32;
        for m in receive(c, "RtKeep", "g1", want, 60_000, 1_000)
            .await
            .messages
        {
            assert_eq!(ack(c, "RtKeep", "g1", &m).await.code, OK);
            acked.insert(id_of(&m));
        }
    }
    let bulk = fill(c, "RtBulk", "B", 600).await;

    // Load through the backup.
    let stop = Arc::new(AtomicBool::new(false));
    let load: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let loader = {
        let (stop, load) = (stop.clone(), load.clone());
        let mut lc = connect(addr).await;
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let id = format!("L{i:06}");
                i += 1;
                let m = msg("RtLoad", &[b'l'; 2000], pb::MessageType::Normal, &id);
                let r = send(&mut lc, vec![m]).await;
                if r.status.is_some_and(|s| s.code == OK) {
                    load.lock().unwrap().insert(id, Instant::now());
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The backup starts; once its copy has begun (its first segment is in DIR: the point
    // and the segment list were taken), a retention run retires and deletes what it copies.
    let started = Instant::now();
    let running = tokio::spawn({
        let dir = dir.clone();
        async move { backup(addr, &dir).await }
    });
    let first_copied = dir.join(format!("{:020}", first.start));
    let wait_until = Instant::now() + Duration::from_secs(30);
    while !first_copied.exists() {
        assert!(Instant::now() < wait_until, "the backup's copy never began");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let during =
        rocklet_broker::retention::run_once(&core, &SystemClock, &metrics, &retention, true)
            .await
            .unwrap();
    assert!(
        !dir.join("BACKUP_MANIFEST").exists(),
        "the backup ended before retention deleted its segments: the test proves nothing"
    );
    assert!(
        during.retired.len() >= 100 && during.retired[0] == first.start,
        "the run during the copy deletes the segments it copies: {during:?}"
    );
    let printed = running.await.unwrap().unwrap_or_else(|e| {
        panic!("the backup failed when retention deleted segments it copies: {e}")
    });
    let acked_before: BTreeSet<String> = load
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, &t)| t < started)
        .map(|(id, _)| id.clone())
        .collect();
    assert!(!acked_before.is_empty(), "the load ran");
    stop.store(true, Ordering::SeqCst);
    loader.await.unwrap();
    let segments_deleted = a.dir.path().join(format!("{:020}", first.start));
    assert!(!segments_deleted.exists(), "retention deleted the file");
    a.stop().await;

    let restored = work.path().join("restored");
    let out = restore(&dir, &restored).await.unwrap();
    assert!(
        out.contains(&format!("restored log offset {}", printed.log_offset)),
        "{out}"
    );
    let mut cfg = test_config(&restored);
    cfg.core.segment_size = SMALL;
    cfg.core.max_message_size = 40_000;
    cfg.core.max_batch_size = 40_000;
    let b = server::start(cfg, Arc::new(SystemClock)).await.unwrap();
    let mut c = connect(b.addr).await;
    assert_eq!(
        b.core
            .inspect(|b| b.pending_transaction_count())
            .await
            .unwrap(),
        3,
        "the transactions are still pending"
    );
    let early = receive(&mut c, "RtDelay", "gd", 16, 60_000, 300)
        .await
        .messages;
    assert!(
        wall_ms() >= due || early.is_empty(),
        "a delayed message fired early: {early:?}"
    );
    let mut producer = Telemetry::producer(&mut c, &["RtTxn"]).await;
    let check = producer
        .next_check(Duration::from_secs(5))
        .await
        .expect("a pending transaction is checked");
    assert!(txns.contains(&check.transaction_id), "{check:?}");
    drop(producer);
    // The group resumes where it was; the backup's segments were all there at its point.
    let left: BTreeSet<String> = drain_ids(&mut c, "RtKeep", "g1")
        .await
        .into_iter()
        .collect();
    let expected: BTreeSet<String> = keep
        .iter()
        .filter(|id| !acked.contains(*id))
        .cloned()
        .collect();
    assert_eq!(left, expected, "group g1 resumes where it was");
    let mut got = drain_ids(&mut c, "RtBulk", "fresh").await;
    got.sort();
    assert!(
        got == bulk,
        "every message of the segments retention deleted during the copy, once: {} of {} came",
        got.len(),
        bulk.len()
    );
    let loaded: BTreeSet<String> = drain_ids(&mut c, "RtLoad", "fresh")
        .await
        .into_iter()
        .collect();
    let missing: Vec<_> = acked_before.difference(&loaded).collect();
    assert!(
        missing.is_empty(),
        "acknowledged before the backup, missing: {missing:?}"
    );
    // RtOld's segments but the one taking appends then went before the backup's point.
    let mut old = drain_ids(&mut c, "RtOld", "fresh").await;
    old.sort();
    let newest: Vec<String> = (120 - old.len()..120).map(|i| format!("O{i:04}")).collect();
    assert!(
        old.len() < 20 && old == newest,
        "what the first run retired is gone, the rest is there once: {old:?}"
    );
    // The delays fire once, when due.
    while wall_ms() < due + 1_000 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut fired = early.iter().map(id_of).collect::<Vec<_>>();
    fired.extend(drain_ids(&mut c, "RtDelay", "gd").await);
    fired.sort();
    assert_eq!(fired, vec!["D0", "D1", "D2"]);
    b.stop().await;
}
