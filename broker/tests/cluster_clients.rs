//! Cluster mode with the official clients (issue #14): a 3-node broker group with sync
//! replication on a real etcd, a producer on the official Python v5 client
//! (rocketmq-python-client) and one on the v4 Java client (rocketmq-client 5.5.0), both
//! unmodified (broker/tests/cluster-clients), while the master is killed with SIGKILL again
//! and again (`ROCKLET_CLUSTER_KILLS`, default 10; the long form sets 100) and restarted as a
//! replica on its own addresses.
//!
//! Each producer writes a ledger (see producer.py). At the end every message a producer had
//! acknowledged — plain sends, commits, and half messages whose producer decided to commit
//! (their commit may die with a master, and every 16th transaction is left open: the
//! master's check resolves them, and some checks must have come) — must be
//! delivered by the last master, and no message a producer rolled back ever is. The failover
//! time per kill and client (its last acknowledgement before the kill to its first after) is
//! printed as p50 and max, and must stay under 3 s (max) for each client, with a p50 under
//! 1 s for v4 and 2 s for Python (issue #32). The v4 client polls routes at its default
//! (30 s): it fails over through the restarted old master, which passes its writes and
//! heartbeats on to the new master (`cluster::forward_remoting`), and its transaction checks
//! back.
//!
//! `#[ignore]`d in a plain `cargo test`: it needs etcd, Python with the client
//! (`ROCKLET_PYTHON`) and a JDK with the client's jars (`ROCKLET_V4_CLASSPATH`), which
//! `bash tests/ci/cluster.sh` installs.

mod cluster_support;
mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use cluster_support::{find_master, nodes_addrs, now_ms, percentile, wait_for, ClientsRun};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd, the Python and Java clients; run by tests/ci/cluster.sh"]
async fn kill_the_master_official_clients() {
    let kills: usize = std::env::var("ROCKLET_CLUSTER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let topic = "ClusterClients";
    let mut run = ClientsRun::start(topic, "4").await;
    let mut failovers: HashMap<&str, Vec<u64>> = HashMap::new();
    for k in 0..kills {
        let master = find_master(&nodes_addrs(&run.nodes), topic)
            .await
            .expect("a master");
        let i = run
            .nodes
            .iter()
            .position(|n| n.addr() == Some(master))
            .unwrap();
        let before: Vec<usize> = run.producers.iter().map(|p| p.ack_times().len()).collect();
        let killed_at = now_ms();
        run.nodes[i].proc.as_mut().unwrap().kill9();
        // Restarted at once, as a supervisor does (crash-only), on its own addresses: a
        // client that still routes there reaches the new master through it
        // (`cluster::forward`) until its route refresh names the new master.
        run.nodes[i].restart(&run.etcd.url);
        for (p, &b) in run.producers.iter().zip(&before) {
            wait_for(
                &format!("after kill {k}: {} goes on", p.name),
                Duration::from_secs(60),
                || p.ack_times().len() >= b + 10,
            )
            .await;
            let gap = p
                .outage(killed_at)
                .expect("acknowledgements around the kill");
            eprintln!(
                "kill {k}: node {} was master; {} failover {gap} ms",
                run.nodes[i].id, p.name
            );
            failovers.entry(p.name).or_default().push(gap);
        }
        // The restarted node catches up and rejoins the SyncStateSet.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let (got, resolved_checks) = run.finish("ClusterClientsCheck").await;
    let delivered: HashSet<&str> = got.iter().map(String::as_str).collect();
    let mut failed = false;
    for p in &run.producers {
        let must = p.must_deliver();
        let mut lost: Vec<&String> = must
            .iter()
            .filter(|id| !delivered.contains(id.as_str()))
            .collect();
        lost.sort();
        let mut v = failovers.get(p.name).cloned().unwrap_or_default();
        let (p50, max) = if v.is_empty() {
            (0, 0)
        } else {
            (percentile(&mut v, 0.5), *v.last().unwrap())
        };
        eprintln!(
            "{}: {kills} kills, {} acknowledged ({} commits, {} committed halves), {} unanswered, {} rolled back, {} checks; lost {}; failover p50 {p50} ms, max {max} ms",
            p.name,
            must.len(),
            p.count("COMMIT"),
            p.count("HALF"),
            p.count("FAIL"),
            p.count("ROLLBACK"),
            p.count("CHECK"),
            lost.len(),
        );
        if !lost.is_empty() {
            eprintln!("{} lost {lost:?}\n{}", p.name, p.tail());
            failed = true;
        }
        assert!(
            must.len() > 20 + 10 * kills,
            "{}: too few acknowledged",
            p.name
        );
        // Transactions left open (`-O`, and commits lost with a master) were checked.
        // (The Python producer started again answers for the first one's transactions.)
        let checks = p.count("CHECK")
            + if p.name == "python" {
                resolved_checks
            } else {
                0
            };
        assert!(checks > 0, "{}: no transaction was checked", p.name);
        // Issue #32's target, over every kill: p50 under 1 s, max under 3 s. (A replica
        // that answered a v4 send with code 13, MESSAGE_ILLEGAL, made that client wait for
        // its route refresh: p50 12.8 s, max 27 s; one that held its refusals made it wait
        // out its 3 s send timeout at every kill. Without forwarding the Python client would
        // wait for its route refresh, 30 s.)
        // (The Python client's own retry waits about a second at some kills: p50 under 2 s
        // for it.)
        let p50_max = if p.name == "v4" { 1_000 } else { 2_000 };
        assert!(
            p50 < p50_max,
            "{}: failover p50 {p50} ms, not under {p50_max} ms",
            p.name
        );
        assert!(
            max < 3_000,
            "{}: a failover of {max} ms, not under 3 s",
            p.name
        );
    }
    let rolled: Vec<&&str> = delivered.iter().filter(|b| b.ends_with("-R")).collect();
    let dup = got.len() - delivered.len();
    eprintln!(
        "kill_the_master_official_clients: {} delivered ({dup} twice), rolled back delivered {}",
        got.len(),
        rolled.len()
    );
    assert!(!failed, "acknowledged messages were lost");
    assert!(rolled.is_empty(), "rolled back and delivered: {rolled:?}");
}
