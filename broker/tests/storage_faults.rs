//! The storage failing under the broker: a data directory on a tiny tmpfs fills up (ENOSPC on
//! append). The failing request gets an error status naming the storage failure, nothing
//! acknowledged earlier is lost, the broker keeps serving, and it accepts writes again once
//! space returns — and everything survives a restart.
//!
//! Needs `mount -t tmpfs` (root). Where mounting is not permitted the test says so and skips.
//!
//! And segment files that go missing (the binary, no root needed): a middle one or the newest
//! one is refused by name at start, `--repair` goes on recording the gap in the quarantine,
//! and clean and `kill -9` restarts, and directories without `LOG_END`, still start.
//! EIO on sync is covered at the core level (tests/tests/crash.rs, `CrashStorage`) and, on a
//! real file system whose device fails on demand (ext4 on a loop device over a FUSE file),
//! by tests/failing_disk.rs.

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use rocklet_broker::pb::v2 as pb;
use rocklet_core::FlushMode;

struct Mount(PathBuf);

impl Mount {
    fn tmpfs(at: &Path, size: &str) -> Option<Mount> {
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "SKIPPED: cannot mount a tmpfs to fill up ({}); run as root to test ENOSPC",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Some(Mount(at.to_path_buf()))
    }

    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(ok.success(), "remount {size}");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test]
async fn a_full_disk_fails_the_write_keeps_what_was_acknowledged_and_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(mount) = Mount::tmpfs(&tmp.path().join("mnt"), "1m") else {
        return;
    };
    let data = mount.0.join("data");
    let cfg = |c: &mut rocklet_broker::config::BrokerConfig| {
        c.data_dir = data.clone();
        c.core.flush = FlushMode::Sync;
        c.core.segment_size = 4 << 20;
        c.core.max_message_size = 65_536;
        c.core.max_batch_size = 65_536;
    };
    let mut b = TestBroker::start_with(cfg).await;
    let body = vec![b'd'; 30_000];
    let mut acked = Vec::new();
    let failure = loop {
        let id = format!("F{}", acked.len());
        let r = send(
            &mut b.client,
            vec![msg("Full", &body, pb::MessageType::Normal, &id)],
        )
        .await;
        let s = r.status.unwrap();
        if s.code != OK {
            break s;
        }
        acked.push(id);
        assert!(acked.len() < 100, "a 1 MiB tmpfs never filled up");
    };
    assert!(!acked.is_empty());
    assert_eq!(
        failure.code,
        pb::Code::InternalServerError as i32,
        "{failure:?}"
    );
    assert!(
        failure.message.contains("storage") && failure.message.contains("No space left"),
        "the failure names the storage problem: {}",
        failure.message
    );
    // A transaction cannot start either; the broker answers and keeps serving.
    let r = send(
        &mut b.client,
        vec![msg("FullTx", &body, pb::MessageType::Transaction, "T1")],
    )
    .await;
    assert_ne!(r.status.unwrap().code, OK);
    let r = b
        .client
        .query_route(pb::QueryRouteRequest {
            topic: res("Full"),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, OK, "routes still served");
    // Space returns: writes succeed again, and nothing acknowledged was lost.
    mount.resize("16m");
    let more = "AFTER".to_string();
    send_ok(
        &mut b.client,
        msg("Full", &body, pb::MessageType::Normal, &more),
    )
    .await;
    acked.push(more);
    let got = drain_ids(&mut b.client, "Full", "G").await;
    let want: HashSet<_> = acked.iter().cloned().collect();
    assert_eq!(got.len(), want.len(), "no duplicates: {got:?}");
    assert_eq!(got.into_iter().collect::<HashSet<_>>(), want);
    // And after a restart on the same directory.
    let dir = b.stop().await;
    let mut b = TestBroker::start_with(cfg).await;
    let got = drain_ids(&mut b.client, "Full", "G2").await;
    assert_eq!(got.into_iter().collect::<HashSet<_>>(), want);
    b.stop().await;
    drop(dir);
}

// ---- Missing segment files (issue 29, item 4) ---------------------------------------------

const SEG: u64 = 65_536;

/// A data directory with at least four segment files, written by the `rocklet` binary and
/// stopped cleanly; the ids sent, in order, with the config arguments to start it again.
async fn four_segments(tmp: &Path) -> (PathBuf, Vec<String>, Vec<String>) {
    let data = tmp.join("data");
    let cfg = tmp.join("rocklet.toml");
    std::fs::write(
        &cfg,
        format!(
            "[core]\nflush = \"sync\"\nsegment_size = {SEG}\nmax_message_size = 16384\nmax_batch_size = 16384\n"
        ),
    )
    .unwrap();
    let args = vec!["--config".to_string(), cfg.to_str().unwrap().to_string()];
    let p = BrokerProc::start(&data, &strs(&args));
    let mut c = connect(p.addr).await;
    let mut ids = Vec::new();
    while segment_files(&data).len() < 4 {
        let id = format!("M{}", ids.len());
        send_ok(
            &mut c,
            msg("Seg", &[b's'; 4000], pb::MessageType::Normal, &id),
        )
        .await;
        ids.push(id);
    }
    // One more in the newest segment, so it holds data.
    send_ok(&mut c, msg("Seg", b"last", pb::MessageType::Normal, "LAST")).await;
    ids.push("LAST".into());
    let (status, log) = p.term();
    assert!(status.success(), "{log}");
    (data, ids, args)
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn quarantined(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join(rocklet_core::QUARANTINE_DIR))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[tokio::test]
async fn a_missing_middle_segment_is_refused_by_name_and_repair_records_the_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, ids, args) = four_segments(tmp.path()).await;
    let victim = format!("{SEG:020}");
    assert_eq!(segment_files(&data)[1], victim);
    std::fs::remove_file(data.join(&victim)).unwrap();

    let err = BrokerProc::try_start(&data, &strs(&args))
        .err()
        .expect("a log with a missing middle segment is refused");
    assert!(
        err.contains("damaged")
            && err.contains(&format!("log offsets {SEG}..{}", 2 * SEG))
            && err.contains(&format!("segment file {victim} missing")),
        "{err}"
    );
    assert!(
        quarantined(&data).is_empty(),
        "a refused start changed nothing"
    );

    let mut repair_args = strs(&args);
    repair_args.push("--repair");
    let p = BrokerProc::start(&data, &repair_args);
    let log = p.log();
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains("missing")
            && l.contains(&format!("{victim}-{:020}.missing", 2 * SEG))),
        "{log}"
    );
    assert_eq!(
        quarantined(&data),
        vec![format!("{victim}-{:020}.missing", 2 * SEG)]
    );
    let mut c = connect(p.addr).await;
    let got = drain_ids(&mut c, "Seg", "G").await;
    assert!(got.len() < ids.len() && got.contains(&"LAST".to_string()));
    assert!(
        got.contains(&"M0".to_string()),
        "the first segment's messages are kept"
    );
    let (status, log) = p.term();
    assert!(status.success(), "{log}");
    // The repair is durable: a plain start finds the segments contiguous again.
    let p = BrokerProc::try_start(&data, &strs(&args)).expect("a plain start after the repair");
    p.term();
}

#[tokio::test]
async fn a_missing_last_segment_is_refused_by_name_and_repair_records_the_gap() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, ids, args) = four_segments(tmp.path()).await;
    let files = segment_files(&data);
    let victim = files.last().unwrap().clone();
    std::fs::remove_file(data.join(&victim)).unwrap();

    let err = BrokerProc::try_start(&data, &strs(&args))
        .err()
        .expect("a log whose newest segment is gone is refused");
    assert!(
        err.contains("damaged") && err.contains(&format!("segment file {victim} is missing")),
        "{err}"
    );
    assert!(
        quarantined(&data).is_empty(),
        "a refused start changed nothing"
    );

    let mut repair_args = strs(&args);
    repair_args.push("--repair");
    let p = BrokerProc::start(&data, &repair_args);
    let log = p.log();
    let q = quarantined(&data);
    assert!(
        q.len() == 1 && q[0].ends_with(".missing") && q[0].starts_with(&victim),
        "{q:?}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("missing") && l.contains(&q[0])),
        "{log}"
    );
    let mut c = connect(p.addr).await;
    let got = drain_ids(&mut c, "Seg", "G").await;
    assert!(!got.contains(&"LAST".to_string()) && got.contains(&"M0".to_string()));
    assert!(got.len() < ids.len());
    // The log goes on from where it now ends, and a plain start takes it.
    send_ok(
        &mut c,
        msg("Seg", b"after", pb::MessageType::Normal, "AFTER"),
    )
    .await;
    let (status, log) = p.term();
    assert!(status.success(), "{log}");
    let p = BrokerProc::try_start(&data, &strs(&args)).expect("a plain start after the repair");
    let mut c = connect(p.addr).await;
    assert_eq!(
        drain_ids(&mut c, "Seg", "G").await,
        vec!["AFTER".to_string()]
    );
    p.term();
}

#[tokio::test]
async fn clean_and_kill9_restarts_start_and_a_directory_without_log_end_still_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, ids, args) = four_segments(tmp.path()).await;
    // A clean restart.
    let mut p = BrokerProc::start(&data, &strs(&args));
    assert!(p.log().contains("last_stop_clean=true"), "{}", p.log());
    let mut c = connect(p.addr).await;
    send_ok(&mut c, msg("Seg", b"k", pb::MessageType::Normal, "K1")).await;
    // A kill -9, then a start that reads the disk.
    p.kill9();
    drop(p);
    let p = BrokerProc::start(&data, &strs(&args));
    assert!(p.log().contains("last_stop_clean=false"), "{}", p.log());
    let mut c = connect(p.addr).await;
    let mut want: HashSet<String> = ids.iter().cloned().collect();
    want.insert("K1".into());
    let got: HashSet<String> = drain_ids(&mut c, "Seg", "G").await.into_iter().collect();
    assert_eq!(got, want);
    let (status, log) = p.term();
    assert!(status.success(), "{log}");
    // A directory from before LOG_END (or RocketMQ's): it opens, without the end check...
    std::fs::remove_file(data.join("LOG_END")).unwrap();
    let p = BrokerProc::try_start(&data, &strs(&args)).expect("opens without LOG_END");
    p.term();
    // ...but the segments are still held to follow each other.
    std::fs::remove_file(data.join("LOG_END")).unwrap();
    std::fs::remove_file(data.join(format!("{:020}", 2 * SEG))).unwrap();
    let err = BrokerProc::try_start(&data, &strs(&args))
        .err()
        .expect("a gap without LOG_END is refused too");
    assert!(
        err.contains(&format!("segment file {:020} missing", 2 * SEG)),
        "{err}"
    );
}
