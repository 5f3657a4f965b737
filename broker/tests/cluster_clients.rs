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
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cluster_support::{find_master, Etcd, Node};
use common::connect;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// One producer process and the ledger lines it wrote.
struct Producer {
    name: &'static str,
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Producer {
    fn spawn(name: &'static str, mut cmd: Command) -> Self {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the {name} producer {cmd:?}: {e}"));
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Producer { name, child, lines }
    }

    /// Times (Unix ms) of its acknowledgements: ACK, COMMIT and HALF lines.
    fn ack_times(&self) -> Vec<u64> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| {
                let mut w = l.split(' ');
                match w.next() {
                    Some("ACK" | "COMMIT" | "HALF") => w.nth(1).and_then(|t| t.parse().ok()),
                    _ => None,
                }
            })
            .collect()
    }

    /// The outage a kill at `killed_at` caused this client: its longest time without an
    /// acknowledgement, from its last one before the kill on. (Replies the old master
    /// released just before it died arrive after the kill, so "the first acknowledgement
    /// after the kill" would often measure nothing.)
    fn outage(&self, killed_at: u64) -> Option<u64> {
        let mut t = self.ack_times();
        t.sort_unstable();
        let from = t.iter().rposition(|&x| x <= killed_at)?;
        t[from..].windows(2).map(|w| w[1] - w[0]).max()
    }

    fn count(&self, kind: &str) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.split(' ').next() == Some(kind))
            .count()
    }

    /// Ids it acknowledged (or decided to commit once its half was acknowledged).
    fn must_deliver(&self) -> HashSet<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| {
                let mut w = l.split(' ');
                match w.next() {
                    Some("ACK" | "COMMIT" | "HALF") => w.next().map(str::to_string),
                    _ => None,
                }
            })
            .collect()
    }

    fn tail(&self) -> String {
        let l = self.lines.lock().unwrap();
        l[l.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every body the group `group` can receive from `master` (acked as received).
async fn consume_bodies(master: SocketAddr, topic: &str, group: &str) -> Vec<String> {
    let mut c = connect(master).await;
    common::receive_all(&mut c, topic, group)
        .await
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}

fn percentile(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

async fn wait_for(what: &str, within: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd, the Python and Java clients; run by tests/ci/cluster.sh"]
async fn kill_the_master_official_clients() {
    let kills: usize = std::env::var("ROCKLET_CLUSTER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let python = std::env::var("ROCKLET_PYTHON")
        .expect("ROCKLET_PYTHON: a Python with rocketmq-python-client (tests/ci/cluster.sh)");
    let classpath = std::env::var("ROCKLET_V4_CLASSPATH")
        .expect("ROCKLET_V4_CLASSPATH: the v4 client's jars and V4Producer (tests/ci/cluster.sh)");
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    // Checks come soon after a failover (6 s and 30 s by default).
    let cfg = root.path().join("rocklet.toml");
    std::fs::write(
        &cfg,
        "[core]\ntransaction_timeout_ms = 2000\ntransaction_check_interval_ms = 2000\n",
    )
    .unwrap();
    let extra = vec!["--config".to_string(), cfg.display().to_string()];
    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| Node::start_fixed(i, &root.path().join(format!("n{i}")), &etcd.url, &extra))
        .collect();
    let topic = "ClusterClients";
    let deadline = Instant::now() + Duration::from_secs(30);
    while find_master(&nodes_addrs(&nodes), topic).await.is_none() {
        assert!(Instant::now() < deadline, "no master elected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ports: Vec<[u16; 3]> = nodes.iter().map(|n| n.ports.unwrap()).collect();
    // One address: the Python client sends a list ("a;b;c") as the HTTP/2 `:authority`
    // joined with commas, which the broker's HTTP/2 layer resets as a protocol error. Any
    // node answers QueryRoute with the master.
    let grpc = format!("127.0.0.1:{}", ports[0][0]);
    let namesrv = ports
        .iter()
        .map(|p| format!("127.0.0.1:{}", p[2]))
        .collect::<Vec<_>>()
        .join(";");
    let stop = root.path().join("stop");
    let here = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cluster-clients");
    let linger = "4";
    let mut py = Command::new(&python);
    py.arg(format!("{here}/producer.py"))
        .args([&grpc, topic, "py"])
        .arg(&stop)
        .env("LINGER_S", linger);
    let mut java = Command::new("java");
    java.arg(format!(
        "-Drocketmq.log.root={}",
        root.path().join("logs").display()
    ))
    .args(["-cp", &classpath, "V4Producer", &namesrv, topic, "v4"])
    .arg(&stop)
    .env("LINGER_S", linger);
    let producers = [Producer::spawn("python", py), Producer::spawn("v4", java)];
    for p in &producers {
        wait_for(
            &format!("{}: 20 acknowledgements", p.name),
            Duration::from_secs(90),
            || p.ack_times().len() >= 20,
        )
        .await;
    }
    let mut failovers: HashMap<&str, Vec<u64>> = HashMap::new();
    for k in 0..kills {
        let master = find_master(&nodes_addrs(&nodes), topic)
            .await
            .expect("a master");
        let i = nodes.iter().position(|n| n.addr() == Some(master)).unwrap();
        let before: Vec<usize> = producers.iter().map(|p| p.ack_times().len()).collect();
        let killed_at = now_ms();
        nodes[i].proc.as_mut().unwrap().kill9();
        // Restarted at once, as a supervisor does (crash-only), on its own addresses: a
        // client that still routes there reaches the new master through it
        // (`cluster::forward`) until its route refresh names the new master.
        nodes[i].restart(&etcd.url);
        for (p, &b) in producers.iter().zip(&before) {
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
                nodes[i].id, p.name
            );
            failovers.entry(p.name).or_default().push(gap);
        }
        // The restarted node catches up and rejoins the SyncStateSet.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    std::fs::write(&stop, b"").unwrap();
    for p in &producers {
        wait_for(
            &format!("{} producer done", p.name),
            Duration::from_secs(60),
            || p.count("DONE") == 1,
        )
        .await;
    }
    // The Python client 5.1.2 opens a telemetry stream again only when a settings write fails
    // (every 300 s) or its route names a new address: once the master it streamed to died,
    // checks cannot reach it. A producer process started again (as after a deploy) resolves
    // what is left open: it sends nothing (STOP exists) and answers checks for a while.
    let mut again = Command::new(&python);
    again
        .arg(format!("{here}/producer.py"))
        .args([&grpc, topic, "py"])
        .arg(&stop)
        .env("LINGER_S", "8");
    let resolver = Producer::spawn("python (again)", again);
    wait_for(
        "the second python producer done",
        Duration::from_secs(60),
        || resolver.count("DONE") == 1,
    )
    .await;
    eprintln!(
        "python (again): answered {} checks",
        resolver.count("CHECK")
    );
    let master = find_master(&nodes_addrs(&nodes), topic)
        .await
        .expect("a master at the end");
    let got = consume_bodies(master, topic, "ClusterClientsCheck").await;
    let delivered: HashSet<&str> = got.iter().map(String::as_str).collect();
    let mut failed = false;
    for p in &producers {
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
                resolver.count("CHECK")
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

fn nodes_addrs(nodes: &[Node]) -> Vec<SocketAddr> {
    nodes.iter().filter_map(Node::addr).collect()
}
