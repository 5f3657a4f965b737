//! Several broker groups in cluster mode (issue #14, item 7): groups g1 and g2 (one node
//! each, on one etcd) both declare topic `Placed` (4 queues each), so its placement in etcd
//! names both. Two official clients, unmodified: the Python v5 client
//! (rocketmq-python-client, broker/tests/cluster_support/groups.py) sends through g1's node
//! and the v4 Java client (rocketmq-client 5.5.0, broker/tests/cluster-clients/V4Groups.java)
//! through g1's and g2's name servers: the routes have queues on both groups, and each
//! client's messages land on both. A consumer of each client (a v5 SimpleConsumer reaching
//! g2's node; a v4 lite pull consumer asking g2's name server) receives every message, from
//! both groups. Then g1's master is killed (SIGKILL; with one node its group stays without a
//! master): routes name only g2, `rocklet admin cluster` shows g1 without a master, and
//! fresh clients of both kinds keep sending to and receiving from g2 (a new v4 group reads
//! all g2 holds, from before the kill too). The v4 route (GET_ROUTEINFO_BY_TOPIC) is checked
//! to name both groups, then g2 only.
//! A node of g3, which hosts no queue of the topic, routes it to both groups too; once g2's
//! master is killed as well it answers HA_NOT_AVAILABLE.
//!
//! `#[ignore]`d in a plain `cargo test`: it needs etcd, Python with the client
//! (`ROCKLET_PYTHON`) and a JDK with the v4 client's jars (`ROCKLET_V4_CLASSPATH`), which
//! `bash tests/ci/cluster.sh` installs.

mod cluster_support;
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use cluster_support::{timed, Etcd, Node};
use common::{res, v4, Client};
use rocklet_broker::pb::v2 as pb;

const TOPIC: &str = "Placed";

/// The groups (broker name → endpoint, queue count) of `topic`'s route as `at` answers it.
async fn route_groups(at: SocketAddr, topic: &str) -> BTreeMap<String, (SocketAddr, u32)> {
    let mut out = BTreeMap::new();
    let Some(Ok(mut c)) = timed(Client::connect(format!("http://{at}"))).await else {
        return out;
    };
    let Some(Ok(r)) = timed(c.query_route(pb::QueryRouteRequest {
        topic: res(topic),
        endpoints: None,
    }))
    .await
    else {
        return out;
    };
    for q in r.into_inner().message_queues {
        let b = q.broker.unwrap();
        let a = &b.endpoints.unwrap().addresses[0];
        let addr: SocketAddr = format!("{}:{}", a.host, a.port).parse().unwrap();
        out.entry(b.name).or_insert((addr, 0)).1 += 1;
    }
    out
}

/// Waits until `at` routes `topic` to exactly `want` (group → its node's gRPC address).
async fn wait_route(at: SocketAddr, want: &BTreeMap<String, SocketAddr>) -> Duration {
    let t0 = Instant::now();
    loop {
        let got = route_groups(at, TOPIC).await;
        let named: BTreeMap<String, SocketAddr> =
            got.iter().map(|(g, (a, _))| (g.clone(), *a)).collect();
        if &named == want {
            for (g, (_, n)) in &got {
                assert_eq!(*n, 4, "group {g}'s queues in {got:?}");
            }
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{at} routes {TOPIC} to {got:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An official client: the Python v5 client (groups.py, given a gRPC endpoint) or the v4
/// Java client (V4Groups.java, given name servers).
#[derive(Clone, Copy, Debug)]
enum Official {
    Python,
    V4,
}

/// Runs `client` with `args`; its stdout lines.
async fn run(client: Official, args: Vec<String>) -> Vec<String> {
    let mut cmd = match client {
        Official::Python => {
            let py = std::env::var("ROCKLET_PYTHON").expect(
                "ROCKLET_PYTHON: a Python with rocketmq-python-client (tests/ci/cluster.sh)",
            );
            let mut c = Command::new(py);
            c.arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/cluster_support/groups.py"
            ));
            c
        }
        Official::V4 => {
            let cp = std::env::var("ROCKLET_V4_CLASSPATH").expect(
                "ROCKLET_V4_CLASSPATH: the v4 client's jars and V4Groups (tests/ci/cluster.sh)",
            );
            let mut c = Command::new("java");
            let logs = std::env::temp_dir().join("rocklet-cluster-groups-v4-logs");
            c.arg(format!("-Drocketmq.log.root={}", logs.display()))
                .args(["-cp", &cp, "V4Groups"]);
            c
        }
    };
    cmd.args(&args);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{client:?} client {args:?} failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines().map(str::to_string).collect()
}

/// Sends `count` messages through `at` (a gRPC endpoint for Python, name servers for v4):
/// body → the group it landed on.
async fn send(client: Official, at: &str, prefix: &str, count: usize) -> BTreeMap<String, String> {
    let lines = run(
        client,
        ["send", at, TOPIC, prefix, &count.to_string()]
            .map(String::from)
            .to_vec(),
    )
    .await;
    let mut acked = BTreeMap::new();
    for l in &lines {
        let w: Vec<&str> = l.splitn(3, ' ').collect();
        assert_eq!(
            w[0],
            "ACK",
            "a {client:?} send failed: {l}\n{}",
            lines.join("\n")
        );
        acked.insert(w[1].to_string(), w[2].to_string());
    }
    assert_eq!(acked.len(), count, "{}", lines.join("\n"));
    acked
}

/// What consumer group `group` receives through `at`, waiting for `count` bodies.
async fn receive(client: Official, at: &str, group: &str, count: usize) -> BTreeSet<String> {
    let lines = run(
        client,
        ["receive", at, TOPIC, group, &count.to_string(), "60"]
            .map(String::from)
            .to_vec(),
    )
    .await;
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("GOT "))
        .map(str::to_string)
        .collect()
}

/// GET_ROUTEINFO_BY_TOPIC at the name server `namesrv`: broker name → its address.
async fn v4_route(namesrv: SocketAddr) -> BTreeMap<String, String> {
    use rocklet_broker::remoting::codec::SerializeType;
    let mut ns = v4::V4::connect(namesrv, SerializeType::Json).await;
    let r = ns.call(105, &[("topic", TOPIC)], Vec::new()).await;
    assert_eq!(r.code, 0, "GET_ROUTEINFO_BY_TOPIC: {:?}", r.remark);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let queues = v["queueDatas"].as_array().unwrap();
    let brokers = v["brokerDatas"].as_array().unwrap();
    assert_eq!(queues.len(), brokers.len(), "{v}");
    brokers
        .iter()
        .map(|b| {
            (
                b["brokerName"].as_str().unwrap().to_string(),
                b["brokerAddrs"]["0"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn landed(acked: &BTreeMap<String, String>) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for g in acked.values() {
        *m.entry(g.as_str()).or_default() += 1;
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd and the official clients; run by tests/ci/cluster.sh"]
async fn two_groups_one_topic_official_clients() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let cfg = root.path().join("rocklet.toml");
    std::fs::write(
        &cfg,
        format!("[[topics]]\nname = \"{TOPIC}\"\nqueues = 4\n"),
    )
    .unwrap();
    let node = |g: &str, topics: bool| {
        let mut extra: Vec<String> = [
            "--broker-name",
            g,
            // One node per group: a write is acknowledged once the master holds it.
            "--min-in-sync-replicas",
            "1",
        ]
        .map(String::from)
        .to_vec();
        if topics {
            extra.extend(["--config".to_string(), cfg.display().to_string()]);
        }
        Node::start_fixed(1, &root.path().join(g), &etcd.url, &extra)
    };
    let mut g1 = node("g1", true);
    let mut g2 = node("g2", true);
    // g3 hosts no queue of the topic, and routes it all the same.
    let g3 = node("g3", false);
    let (a1, a2, a3) = (g1.addr().unwrap(), g2.addr().unwrap(), g3.addr().unwrap());
    let both = BTreeMap::from([("g1".to_string(), a1), ("g2".to_string(), a2)]);
    // Any node routes the topic to both groups' masters.
    let t = wait_route(a1, &both).await;
    wait_route(a2, &both).await;
    wait_route(a3, &both).await;
    println!("both groups in the route after {t:?}");
    let (r1, n1) = g1.v4_addrs();
    let (r2, n2) = g2.v4_addrs();
    assert_eq!(
        v4_route(n1).await,
        BTreeMap::from([("g1".into(), r1.to_string()), ("g2".into(), r2.to_string())])
    );

    // Both official clients send through g1's node (the v4 one asks both name servers);
    // their messages land on both groups.
    let namesrvs = format!("{n1};{n2}");
    let mut acked = BTreeMap::new();
    for (client, at, prefix) in [
        (Official::Python, a1.to_string(), "py-before"),
        (Official::V4, namesrvs.clone(), "v4-before"),
    ] {
        let t = Instant::now();
        let sent = send(client, &at, prefix, 40).await;
        let per = landed(&sent);
        println!("{client:?}: 40 sends in {:?}, landed {per:?}", t.elapsed());
        assert!(
            per.get("g1").is_some_and(|&n| n > 0) && per.get("g2").is_some_and(|&n| n > 0),
            "{client:?}'s messages landed on {per:?}, not on both groups"
        );
        acked.extend(sent);
    }
    // A consumer of each client, reaching g2's node (Python) or g2's name server (v4),
    // receives every message, from both groups.
    let want: BTreeSet<String> = acked.keys().cloned().collect();
    for (client, at, group) in [
        (Official::Python, a2.to_string(), "c1"),
        (Official::V4, n2.to_string(), "v4c1"),
    ] {
        let t = Instant::now();
        let got = receive(client, &at, group, want.len()).await;
        println!("{client:?}: {} received in {:?}", got.len(), t.elapsed());
        assert_eq!(
            got, want,
            "{client:?} received other than what was acknowledged"
        );
    }

    let listing = rocklet_broker::cluster::describe(std::slice::from_ref(&etcd.url), "/rocklet")
        .await
        .unwrap();
    assert!(
        listing.contains("group g1")
            && listing.contains("group g2")
            && listing.contains(&format!(
                "topic {TOPIC:<11} on g1 (4 queues), g2 (4 queues)"
            )),
        "{listing}"
    );

    // g1's master dies; with one node, g1 stays without a master. Routes name g2 only.
    g1.proc.as_mut().unwrap().kill9();
    let t = wait_route(a2, &BTreeMap::from([("g2".to_string(), a2)])).await;
    println!("routes name only g2 {t:?} after g1's master was killed");
    assert_eq!(
        v4_route(n2).await,
        BTreeMap::from([("g2".into(), r2.to_string())])
    );
    let listing = rocklet_broker::cluster::describe(std::slice::from_ref(&etcd.url), "/rocklet")
        .await
        .unwrap();
    assert!(
        listing.contains(&format!(
            "topic {TOPIC:<11} on g1 (4 queues, no master now), g2 (4 queues)"
        )),
        "{listing}"
    );

    // Fresh official clients keep sending to and receiving from g2.
    let mut after = BTreeMap::new();
    for (client, at, prefix) in [
        (Official::Python, a2.to_string(), "py-after"),
        (Official::V4, n2.to_string(), "v4-after"),
    ] {
        let t = Instant::now();
        let sent = send(client, &at, prefix, 20).await;
        println!("{client:?}: 20 sends after the kill in {:?}", t.elapsed());
        assert_eq!(landed(&sent), BTreeMap::from([("g2", 20)]), "{client:?}");
        after.extend(sent);
    }
    // The Python group goes on from its offsets: exactly the new messages.
    let want: BTreeSet<String> = after.keys().cloned().collect();
    let got = receive(Official::Python, &a2.to_string(), "c1", want.len()).await;
    assert_eq!(
        got, want,
        "Python received other than what was acknowledged"
    );
    // A new v4 group from the first offset: everything g2 holds, from before the kill too.
    let want: BTreeSet<String> = acked
        .iter()
        .chain(&after)
        .filter(|(_, g)| *g == "g2")
        .map(|(b, _)| b.clone())
        .collect();
    let got = receive(Official::V4, &n2.to_string(), "v4c2", want.len()).await;
    assert_eq!(got, want, "v4 received other than what g2 acknowledged");
    println!("{listing}");

    // g2's master dies too: no group hosting the topic has a master, and g3 says so.
    g2.proc.as_mut().unwrap().kill9();
    let deadline = Instant::now() + Duration::from_secs(30);
    let s = loop {
        let mut c = common::connect(a3).await;
        let r = c
            .query_route(pb::QueryRouteRequest {
                topic: res(TOPIC),
                endpoints: None,
            })
            .await
            .unwrap()
            .into_inner();
        let s = r.status.clone().unwrap();
        if s.code != pb::Code::Ok as i32 {
            assert!(r.message_queues.is_empty());
            break s;
        }
        assert!(Instant::now() < deadline, "g3 still routes {TOPIC}: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(s.code, pb::Code::HaNotAvailable as i32, "{s:?}");
    assert_eq!(
        s.message,
        "HA_NOT_AVAILABLE: no broker group hosting topic `Placed` (g1, g2) has a master now (elections are under way); retry"
    );
}
