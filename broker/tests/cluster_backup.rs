//! Backup of a cluster replica (issue 31, item 4) against a real etcd: a 3-node group with
//! sync replication takes messages through its master; `rocklet admin backup` against a
//! replica's listener backs up that replica (the master is not asked), and a standalone
//! broker started on the restored backup serves every acknowledged message. `#[ignore]`d in
//! a plain `cargo test` (it needs the `etcd` binary); `bash tests/ci/cluster.sh` runs it.

mod cluster_support;
mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_support::{find_master, Etcd, Node};
use common::{connect, drain_ids, msg, test_config, OK};
use rocklet_broker::pb::v2 as pb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (Debian etcd-server); run by tests/ci/cluster.sh"]
async fn a_replica_is_backed_up_and_restores_every_acknowledged_message() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let nodes: Vec<Node> = (1..=3)
        .map(|i| Node::start(i, &root.path().join(format!("n{i}")), &etcd.url))
        .collect();
    let topic = "ClusterBackup";
    let all: Vec<_> = nodes.iter().filter_map(Node::addr).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let master = loop {
        if let Some(m) = find_master(&all, topic).await {
            break m;
        }
        assert!(Instant::now() < deadline, "no master elected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut c = connect(master).await;
    let mut acked = BTreeSet::new();
    for i in 0..100 {
        let id = format!("R{i:03}");
        let r = c
            .send_message(pb::SendMessageRequest {
                messages: vec![msg(topic, &[b'r'; 1000], pb::MessageType::Normal, &id)],
            })
            .await
            .unwrap()
            .into_inner();
        if r.status.is_some_and(|s| s.code == OK) {
            acked.insert(id);
        }
    }
    assert!(acked.len() >= 90, "{} acknowledged", acked.len());
    // Each replica in the SyncStateSet holds every acknowledged record; give a lagging one
    // a moment to catch up, then back up a replica through its own listener.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let replica = all.iter().copied().find(|a| *a != master).unwrap();
    let dir = root.path().join("backup");
    let out = tokio::task::spawn_blocking({
        let dir = dir.clone();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_rocklet"))
                .args(["admin", "--broker", &replica.to_string(), "backup", "--to"])
                .arg(&dir)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("backup of log offset"), "{printed}");
    let restored = root.path().join("restored");
    rocklet_broker::backup::restore(&dir, &restored).unwrap();
    drop(nodes);
    // A standalone broker, with the nodes' segment size.
    let mut cfg = test_config(&restored);
    cfg.core.segment_size = rocklet_core::Config::default().segment_size;
    let b = rocklet_broker::server::start(cfg, Arc::new(rocklet_broker::clock::SystemClock))
        .await
        .unwrap();
    let mut c = connect(b.addr).await;
    let got: BTreeSet<String> = drain_ids(&mut c, topic, "g").await.into_iter().collect();
    let missing: Vec<_> = acked.difference(&got).collect();
    assert!(
        missing.is_empty(),
        "acknowledged, not in the replica's backup: {missing:?}"
    );
    b.stop().await;
}
