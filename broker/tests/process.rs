//! The `rocklet` binary as a process: kill -9 and restart, SIGTERM, the lock, the CLI.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use rocklet_broker::pb::v2 as pb;

const BIN: &str = env!("CARGO_BIN_EXE_rocklet");

fn write_config(dir: &Path, text: &str) -> std::path::PathBuf {
    let p = dir.join("rocklet.toml");
    std::fs::write(&p, text).unwrap();
    p
}

#[tokio::test]
async fn kill9_then_restart_keeps_every_acknowledged_message_once_and_checks_halves() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cfg = write_config(
        tmp.path(),
        "[core]\nflush = \"sync\"\ntransaction_timeout_ms = 300\ntransaction_check_interval_ms = 500\nsegment_size = 131072\nmax_message_size = 65536\nmax_batch_size = 65536\n",
    );
    let cfg = cfg.to_str().unwrap();
    let mut p = BrokerProc::start(&data, &["--config", cfg]);
    let addr = p.addr;
    // Acknowledged sends from several connections at once (group commit).
    let mut tasks = Vec::new();
    for i in 0..4 {
        tasks.push(tokio::spawn(async move {
            let mut c = connect(addr).await;
            let mut ids = Vec::new();
            for j in 0..40 {
                let id = format!("K{i}-{j}");
                send_ok(
                    &mut c,
                    msg("Durable", &vec![b'x'; 3000], pb::MessageType::Normal, &id),
                )
                .await;
                ids.push(id);
            }
            ids
        }));
    }
    let mut sent = HashSet::new();
    for t in tasks {
        sent.extend(t.await.unwrap());
    }
    let mut c = connect(addr).await;
    let half = send_ok(
        &mut c,
        msg("Halves", b"half", pb::MessageType::Transaction, "H1"),
    )
    .await;
    p.kill9();
    // A torn write at the tail, as a power cut mid-append leaves it.
    let mut segs: Vec<_> = std::fs::read_dir(&data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().len() == 20)
        .collect();
    segs.sort();
    assert!(segs.len() > 1, "the test spans several segments");
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(segs.last().unwrap())
        .unwrap()
        .write_all(&[0, 0, 1, 0, 0xda, 0xa3, 7, 7])
        .unwrap();

    let p = BrokerProc::start(&data, &["--config", cfg]);
    assert!(p.log().contains("log recovered"), "{}", p.log());
    assert!(p.log().contains("recovery cut a torn tail"), "{}", p.log());
    let mut c = connect(p.addr).await;
    let got = drain_ids(&mut c, "Durable", "G").await;
    let unique: HashSet<_> = got.iter().cloned().collect();
    assert_eq!(unique.len(), got.len(), "a message came twice");
    assert_eq!(
        unique, sent,
        "every acknowledged message is back after kill -9"
    );

    // The half is pending and parked (no producer yet) and shows in `rocklet admin pending`.
    let out = Command::new(BIN)
        .args(["admin", "--broker", &p.addr.to_string(), "pending"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&half.transaction_id) && text.contains("Halves"),
        "{text}"
    );
    // A producer of the topic connects: the half sent before the kill is checked.
    let mut producer = Telemetry::producer(&mut c, &["Halves"]).await;
    let check = producer
        .next_check(Duration::from_secs(5))
        .await
        .expect("checked after restart");
    assert_eq!(check.transaction_id, half.transaction_id);
    let s = end_txn(
        &mut c,
        "Halves",
        &half.transaction_id,
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceServerCheck,
    )
    .await;
    assert_eq!(s.code, OK, "{}", s.message);
    assert_eq!(
        drain_ids(&mut c, "Halves", "G").await,
        vec!["H1".to_string()]
    );
    drop(producer);
    let (status, log) = p.term();
    assert!(status.success(), "SIGTERM exits 0: {status:?}\n{log}");
}

#[tokio::test]
async fn sigterm_flushes_and_exits_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let p = BrokerProc::start(
        &data,
        &["--flush", "async", "--flush-interval-ms", "600000"],
    );
    let mut c = connect(p.addr).await;
    send_ok(&mut c, msg("Term", b"t", pb::MessageType::Normal, "T1")).await;
    drop(c);
    let (status, log) = p.term();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("log flushed"), "{log}");
    let p = BrokerProc::start(&data, &[]);
    let mut c = connect(p.addr).await;
    assert_eq!(drain_ids(&mut c, "Term", "G").await, vec!["T1".to_string()]);
    let (status, _) = p.term();
    assert!(status.success());
}

#[tokio::test]
async fn a_second_broker_on_the_same_directory_exits_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let p = BrokerProc::start(&data, &[]);
    let out = Command::new(BIN)
        .args(["broker", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("in use by another process") && err.contains("--data-dir"),
        "{err}"
    );
    let (status, _) = p.term();
    assert!(status.success());
}

#[test]
fn help_documents_every_flag() {
    let out = Command::new(BIN)
        .args(["broker", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--data-dir",
        "--listen",
        "--flush",
        "--config",
        "--no-auto-create",
        "--metrics-listen",
        "--flush-interval-ms",
        "rocklet-data",
        "8081",
    ] {
        assert!(text.contains(flag), "`{flag}` missing from:\n{text}");
    }
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("broker") && text.contains("admin"), "{text}");
    let out = Command::new(BIN)
        .args(["admin", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in ["topics", "pending", "resolve"] {
        assert!(text.contains(cmd), "`{cmd}` missing from:\n{text}");
    }
}

#[test]
fn a_bad_config_file_names_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = write_config(tmp.path(), "[core]\ntransaction_timout_ms = 5\n");
    let out = Command::new(BIN)
        .args(["broker", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("transaction_timout_ms"), "{err}");
    let cfg = write_config(tmp.path(), "[core]\nsegment_size = 100\n");
    let out = Command::new(BIN)
        .args(["broker", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("segment_size"));
}

#[test]
fn admin_reports_an_unreachable_broker() {
    let out = Command::new(BIN)
        .args(["admin", "--broker", "127.0.0.1:1", "topics"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the broker"));
}

#[test]
fn bench_reports_throughput_and_fsyncs() {
    let out = Command::new(BIN)
        .args([
            "bench",
            "--clients",
            "4",
            "--messages",
            "40",
            "--size",
            "100",
            "--transactional",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("40 transactions"), "{text}");
    assert!(text.contains("fsyncs") && text.contains("p99"), "{text}");
}

#[tokio::test]
async fn a_damaged_log_is_refused_untouched_and_repair_keeps_every_valid_record() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let p = BrokerProc::start(&data, &["--flush", "sync"]);
    let mut c = connect(p.addr).await;
    for i in 0..10 {
        send_ok(
            &mut c,
            msg(
                "Damaged",
                format!("body {i}").as_bytes(),
                pb::MessageType::Normal,
                &format!("D-{i}"),
            ),
        )
        .await;
    }
    let (status, _) = p.term();
    assert!(status.success());
    // The clean stop recorded a checkpoint at the log's end: a start from it reads none of
    // the log below it (a read passes over a record whose CRCs fail). Without it, a start
    // replays the whole log and must refuse the damage.
    std::fs::remove_file(data.join("CHECKPOINT")).expect("a clean stop records a checkpoint");
    // Flip one byte inside the third user record: valid records follow it.
    let seg = data.join(format!("{:020}", 0));
    // In place: the segment is a sparse preallocated file; rewriting it whole would make its
    // gigabyte of zeros real, and every start after would scan them.
    let head = |seg: &Path| {
        use std::io::Read;
        let mut b = vec![0u8; 64 << 10];
        std::fs::File::open(seg)
            .unwrap()
            .read_exact(&mut b)
            .unwrap();
        b
    };
    let mut bytes = head(&seg);
    let needle = b"body 2";
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap();
    bytes[at] ^= 0x01;
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        f.write_all_at(&bytes[at..=at], at as u64).unwrap();
        f.sync_all().unwrap();
    }

    let out = Command::new(BIN)
        .args(["broker", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a damaged log was served");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("00000000000000000000")
            && err.contains("--repair")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(head(&seg), bytes, "the refused start changed the segment");

    let p = BrokerProc::start(&data, &["--repair"]);
    assert!(
        p.log().contains("repair moved damaged bytes to quarantine"),
        "{}",
        p.log()
    );
    let quarantined: Vec<_> = std::fs::read_dir(data.join("quarantine"))
        .unwrap()
        .collect();
    assert_eq!(quarantined.len(), 1);
    let mut c = connect(p.addr).await;
    let mut ids = drain_ids(&mut c, "Damaged", "G-damaged").await;
    ids.sort();
    let expected: Vec<String> = (0..10)
        .filter(|&i| i != 2)
        .map(|i| format!("D-{i}"))
        .collect();
    assert_eq!(ids, expected, "every valid record is kept");
    let (status, _) = p.term();
    assert!(status.success());
    // Repaired for good: a plain start serves.
    let p = BrokerProc::start(&data, &[]);
    drop(p);
}
