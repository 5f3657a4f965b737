//! A disk that fails under load: the `rocklet` binary (sync flush) on ext4 on a loop device
//! whose backing file lives on a FUSE file system that fails every write and fsync with EIO
//! once told to (common/faulty_fuse.rs). The broker must acknowledge nothing whose fsync
//! failed, answer every waiting client with an error (no hang), exit non-zero by itself,
//! and — restarted on the same disk with the fault cleared — deliver every message it
//! acknowledged.
//!
//! And a write the device refuses while nothing waits for an fsync (ext4 shut down under an
//! idle broker: the next append gets EIO) stops the broker the same way, instead of
//! leaving it up refusing every write.
//!
//! Needs root (FUSE mount, loop device, mount); skips with a message elsewhere. Run by
//! tests/ci/reliability.sh:
//! `cargo test -p rocklet-broker --test failing_disk -- --include-ignored --nocapture`.
#![cfg(target_os = "linux")]

mod common;
#[path = "common/disk.rs"]
mod disk;
#[path = "common/faulty_fuse.rs"]
mod faulty_fuse;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use rocklet_broker::pb::v2 as pb;

#[derive(Default)]
struct Ledger {
    sent: HashSet<String>,
    acked: HashSet<String>,
    /// Error statuses answered (code, message).
    errors: Vec<(i32, String)>,
    /// Sends answered with an error.
    refused: HashSet<String>,
    /// Sends that got no answer within 10 s.
    hung: usize,
}

/// Sends until the broker goes away (or 60 s pass), recording every answer.
async fn producer(addr: std::net::SocketAddr, task: usize, ledger: Arc<Mutex<Ledger>>) {
    let Ok(mut c) =
        pb::messaging_service_client::MessagingServiceClient::connect(format!("http://{addr}"))
            .await
    else {
        return;
    };
    let t = Instant::now();
    for n in 0.. {
        if t.elapsed() > Duration::from_secs(60) {
            return;
        }
        let id = format!("P{task}-{n}");
        ledger.lock().unwrap().sent.insert(id.clone());
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            c.send_message(pb::SendMessageRequest {
                messages: vec![msg("Disk", &[b'd'; 512], pb::MessageType::Normal, &id)],
            }),
        )
        .await;
        let mut l = ledger.lock().unwrap();
        match r {
            Err(_) => {
                l.hung += 1;
                return;
            }
            // The connection closed: the broker exited.
            Ok(Err(_)) => return,
            Ok(Ok(r)) => {
                let s = r.into_inner().status.unwrap_or_default();
                if s.code == OK {
                    l.acked.insert(id);
                } else {
                    l.errors.push((s.code, s.message));
                    l.refused.insert(id);
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root (FUSE, loop device, mount): run by tests/ci/reliability.sh"]
async fn a_failing_disk_acknowledges_nothing_unsynced_exits_non_zero_and_recovers() {
    if let Err(why) = disk::permitted() {
        eprintln!("SKIPPED: a failing disk needs a FUSE mount, a loop device and mount: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let fuse = match faulty_fuse::FaultyMount::mount(
        &tmp.path().join("fuse"),
        &tmp.path().join("backing.img"),
        64,
    ) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            return;
        }
    };
    let faults = fuse.faults.clone();
    let img = tmp.path().join("fuse").join(faulty_fuse::IMAGE);
    let mut ext4 = disk::Ext4::create(&img, 64, &tmp.path().join("ext4"))
        .unwrap_or_else(|e| panic!("ext4 on a loop device over the FUSE file: {e}"));
    let data = ext4.mnt.join("data");
    let cfg = tmp.path().join("rocklet.toml");
    std::fs::write(
        &cfg,
        "[core]\nflush = \"sync\"\nsegment_size = 1048576\nmax_message_size = 65536\nmax_batch_size = 65536\n",
    )
    .unwrap();
    let args = ["--config", cfg.to_str().unwrap()];

    let mut p = BrokerProc::start(&data, &args);
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let tasks: Vec<_> = (0..4)
        .map(|t| tokio::spawn(producer(p.addr, t, ledger.clone())))
        .collect();
    // Under load, after some acknowledgements, the device starts failing.
    let t = Instant::now();
    while ledger.lock().unwrap().acked.len() < 300 && t.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let acked_before = ledger.lock().unwrap().acked.len();
    assert!(
        acked_before >= 300,
        "only {acked_before} sends acknowledged in 20 s"
    );
    faults.fail.store(true, Ordering::SeqCst);
    let failed_at = Instant::now();
    let status = tokio::task::block_in_place(|| p.wait_exit(Duration::from_secs(30)));
    let exited_after = failed_at.elapsed();
    let log = p.log();
    let status = status.unwrap_or_else(|| {
        panic!(
            "the broker still runs 30 s after its disk failed ({} device errors):\n{log}",
            faults.failed.load(Ordering::SeqCst)
        )
    });
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("every producer finishes once the broker is gone")
            .unwrap();
    }
    let l = std::mem::take(&mut *ledger.lock().unwrap());
    eprintln!(
        "device failing after {acked_before} acknowledgements: {} device errors, the broker exited with {status} after {exited_after:?}; {} sends, {} acknowledged, {} error replies, first: {:?}",
        faults.failed.load(Ordering::SeqCst),
        l.sent.len(),
        l.acked.len(),
        l.errors.len(),
        l.errors.first()
    );
    assert!(
        faults.failed.load(Ordering::SeqCst) > 0,
        "the device failed"
    );
    assert_eq!(status.code(), Some(1), "exit non-zero: {status}\n{log}");
    assert!(
        exited_after < Duration::from_secs(15),
        "exited promptly: {exited_after:?}"
    );
    assert_eq!(l.hung, 0, "no send waits for ever");
    // One ERROR naming the files, the offsets and the errno.
    eprintln!(
        "{}",
        log.lines()
            .filter(|l| l.contains("ERROR") || l.contains("WARN"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let line = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains("failed: nothing it covered"))
        .unwrap_or_else(|| panic!("no ERROR line for the failed fsync:\n{log}"));
    assert!(
        line.contains("files=") && line.contains(&data.display().to_string()),
        "{line}"
    );
    assert!(
        line.contains("offsets=") && line.contains("errno="),
        "{line}"
    );
    assert!(!line.contains("errno=0"), "{line}");
    assert!(
        l.errors
            .iter()
            .any(|(code, m)| *code == pb::Code::InternalServerError as i32
                && (m.contains("fsync") || m.contains("failed sync"))),
        "some send was answered with the storage failure: {:?}",
        l.errors
    );
    drop(p);

    // The fault clears; the disk is mounted again (the journal replays) and the broker
    // restarts on it.
    ext4.umount().unwrap();
    ext4.detach().unwrap();
    faults.fail.store(false, Ordering::SeqCst);
    ext4.attach().unwrap();
    ext4.mount().unwrap();
    let p = BrokerProc::start(&data, &args);
    assert!(p.log().contains("log recovered"), "{}", p.log());
    let mut c = connect(p.addr).await;
    let got = drain_ids(&mut c, "Disk", "G").await;
    let unique: HashSet<String> = got.iter().cloned().collect();
    assert_eq!(unique.len(), got.len(), "no message twice");
    let lost: Vec<_> = l.acked.difference(&unique).collect();
    assert!(
        lost.is_empty(),
        "{} acknowledged messages lost, e.g. {:?}",
        lost.len(),
        lost.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        unique.is_subset(&l.sent),
        "nothing delivered that was never sent"
    );
    eprintln!(
        "after the restart: {} delivered, all {} acknowledged among them ({} unacknowledged sends survived too)",
        unique.len(),
        l.acked.len(),
        unique.len() - l.acked.len()
    );
    let (status, _) = p.term();
    assert!(status.success());
    drop(ext4);
    drop(fuse);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root (loop device, mount): run by tests/ci/reliability.sh"]
async fn an_append_the_device_refuses_exits_non_zero_and_recovers() {
    if let Err(why) = disk::permitted() {
        eprintln!("SKIPPED: a failing disk needs a loop device and mount: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut ext4 = disk::Ext4::create(&tmp.path().join("img"), 64, &tmp.path().join("ext4"))
        .unwrap_or_else(|e| panic!("ext4 on a loop device: {e}"));
    let data = ext4.mnt.join("data");
    let mut p = BrokerProc::start(&data, &["--flush", "sync"]);
    let mut c = connect(p.addr).await;
    send_ok(&mut c, msg("Idle", b"kept", pb::MessageType::Normal, "I1")).await;
    // Everything acknowledged is durable; the file system now refuses every write (EIO).
    ext4.power_cut().unwrap();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        send(
            &mut c,
            vec![msg("Idle", b"refused", pb::MessageType::Normal, "I2")],
        ),
    )
    .await
    .expect("answered");
    let s = r.status.unwrap();
    assert_eq!(s.code, pb::Code::InternalServerError as i32, "{s:?}");
    assert!(s.message.contains("Input/output error"), "{}", s.message);
    let status = tokio::task::block_in_place(|| p.wait_exit(Duration::from_secs(15)))
        .unwrap_or_else(|| {
            panic!(
                "the broker still runs after its device refused a write:\n{}",
                p.log()
            )
        });
    assert_eq!(status.code(), Some(1), "{status}");
    let log = p.log();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains("append failed") && l.contains("errno=5")),
        "{log}"
    );
    drop(p);
    ext4.umount().unwrap();
    ext4.mount().unwrap();
    let p = BrokerProc::start(&data, &["--flush", "sync"]);
    let mut c = connect(p.addr).await;
    assert_eq!(drain_ids(&mut c, "Idle", "G").await, vec!["I1".to_string()]);
    let (status, _) = p.term();
    assert!(status.success());
}

/// The same failing disk, but restarted at once on the same mount, as a supervisor does: no
/// remount, so the pages the failed writeback marked clean are still in the page cache.
/// Recovery must read what the disk holds, not what the cache holds: what the broker serves
/// right after the restart (old messages and new ones it acknowledges then) is what it serves
/// after the cache is gone, and every acknowledged message is in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root (FUSE, loop device, mount): run by tests/ci/reliability.sh"]
async fn an_immediate_restart_after_a_failed_fsync_serves_what_the_disk_holds() {
    if let Err(why) = disk::permitted() {
        eprintln!("SKIPPED: a failing disk needs a FUSE mount, a loop device and mount: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let fuse = match faulty_fuse::FaultyMount::mount(
        &tmp.path().join("fuse"),
        &tmp.path().join("backing.img"),
        64,
    ) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            return;
        }
    };
    let faults = fuse.faults.clone();
    let img = tmp.path().join("fuse").join(faulty_fuse::IMAGE);
    let mut ext4 = disk::Ext4::create(&img, 64, &tmp.path().join("ext4"))
        .unwrap_or_else(|e| panic!("ext4 on a loop device over the FUSE file: {e}"));
    // The data blocks fail, the journal holds: the file system stays writable.
    let journal = ext4.journal_range().unwrap();
    faults.spared.lock().unwrap().push(journal);
    let data = ext4.mnt.join("data");
    let cfg = tmp.path().join("rocklet.toml");
    std::fs::write(
        &cfg,
        "[core]\nflush = \"sync\"\nsegment_size = 1048576\nmax_message_size = 65536\nmax_batch_size = 65536\n",
    )
    .unwrap();
    let args = ["--config", cfg.to_str().unwrap()];

    let mut p = BrokerProc::start(&data, &args);
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let tasks: Vec<_> = (0..4)
        .map(|t| tokio::spawn(producer(p.addr, t, ledger.clone())))
        .collect();
    let t = Instant::now();
    while ledger.lock().unwrap().acked.len() < 300 && t.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        ledger.lock().unwrap().acked.len() >= 300,
        "300 sends acknowledged in 20 s"
    );
    faults.fail.store(true, Ordering::SeqCst);
    let status = tokio::task::block_in_place(|| p.wait_exit(Duration::from_secs(30)))
        .unwrap_or_else(|| panic!("the broker still runs 30 s after its disk failed"));
    assert_eq!(status.code(), Some(1), "{status}\n{}", p.log());
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("every producer finishes once the broker is gone")
            .unwrap();
    }
    let l = std::mem::take(&mut *ledger.lock().unwrap());
    let failed_log = p.log();
    drop(p);

    // The device works again, and the broker restarts at once on the same mount.
    faults.fail.store(false, Ordering::SeqCst);
    let p = BrokerProc::start(&data, &args);
    let mut c = connect(p.addr).await;
    let mut acked = l.acked.clone();
    for n in 0..200 {
        let id = format!("N{n}");
        send_ok(
            &mut c,
            msg("Disk", &[b'n'; 512], pb::MessageType::Normal, &id),
        )
        .await;
        acked.insert(id);
    }
    let first: HashSet<String> = drain_ids(&mut c, "Disk", "First")
        .await
        .into_iter()
        .collect();
    let (status, log) = p.term();
    assert!(status.success(), "{log}");

    // The cache goes (unmount, detach, attach, mount): now only the disk speaks.
    ext4.umount().unwrap();
    ext4.detach().unwrap();
    ext4.attach().unwrap();
    ext4.mount().unwrap();
    let p = BrokerProc::try_start(&data, &args).unwrap_or_else(|e| {
        panic!(
            "once the page cache was gone, the log the immediate restart served and appended \
             to is not what the disk holds: {e}"
        )
    });
    let mut c = connect(p.addr).await;
    let after: HashSet<String> = drain_ids(&mut c, "Disk", "After")
        .await
        .into_iter()
        .collect();
    let lost: Vec<_> = acked.difference(&after).collect();
    let phantom: Vec<_> = first.difference(&after).collect();
    let refused_served: Vec<_> = first
        .union(&after)
        .filter(|id| l.refused.contains(*id))
        .collect();
    eprintln!(
        "{} sent before the fault, {} acknowledged; after the immediate restart {} served \
         ({} new acknowledged); after the cache went {} served; {} acknowledged lost, {} served \
         then gone, {} refused sends served",
        l.sent.len(),
        l.acked.len(),
        first.len(),
        acked.len() - l.acked.len(),
        after.len(),
        lost.len(),
        phantom.len(),
        refused_served.len()
    );
    assert!(
        lost.is_empty(),
        "{} acknowledged messages lost once the page cache was gone, e.g. {:?}",
        lost.len(),
        lost.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        phantom.is_empty(),
        "{} messages served right after the restart were not on the disk (refused sends the \
         cache still held), e.g. {:?}",
        phantom.len(),
        phantom.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        refused_served.is_empty(),
        "{} sends answered with the storage failure were served, e.g. {:?}",
        refused_served.len(),
        refused_served.iter().take(5).collect::<Vec<_>>()
    );
    assert!(after.is_subset(&l.sent.union(&acked).cloned().collect()));
    // How: the failed run recorded where its durable log ended, and the restart cut there.
    assert!(
        log.lines()
            .any(|l| l.contains("recovery cut a torn tail") && l.contains("SYNC_FAILED")),
        "the restart cut the log where the failed run's durable log ended:\n{log}\nthe failed run:\n{failed_log}"
    );

    let (status, _) = p.term();
    assert!(status.success());
    drop(ext4);
    drop(fuse);
}
