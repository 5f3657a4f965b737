//! The storage failing under the broker: a data directory on a tiny tmpfs fills up (ENOSPC on
//! append). The failing request gets an error status naming the storage failure, nothing
//! acknowledged earlier is lost, the broker keeps serving, and it accepts writes again once
//! space returns — and everything survives a restart.
//!
//! Needs `mount -t tmpfs` (root). Where mounting is not permitted the test says so and skips.
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
