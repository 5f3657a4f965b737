//! Several broker groups in cluster mode (issue #14, item 7): groups g1 and g2 (one node
//! each, on one etcd) both declare topic `Placed` (4 queues each), so its placement in etcd
//! names both. The official Python v5 client (rocketmq-python-client, unmodified,
//! broker/tests/cluster_support/groups.py) sends through g1's node: the route g1 answers has
//! queues on both groups, and messages land on both. A Python consumer reaching g2's node
//! receives every one of them, from both groups. Then g1's master is killed (SIGKILL; with
//! one node its group stays without a master): routes name only g2, `rocklet admin cluster`
//! shows g1 without a master, and fresh Python clients keep sending to and receiving from
//! g2. The v4 route (GET_ROUTEINFO_BY_TOPIC) is checked to name both groups, then g2 only.
//! A node of g3, which hosts no queue of the topic, routes it to both groups too; once g2's
//! master is killed as well it answers HA_NOT_AVAILABLE.
//!
//! `#[ignore]`d in a plain `cargo test`: it needs etcd and Python with the client
//! (`ROCKLET_PYTHON`), which `bash tests/ci/cluster.sh` installs.

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

/// Runs groups.py with `args`; its stdout lines.
async fn python(args: Vec<String>) -> Vec<String> {
    let py = std::env::var("ROCKLET_PYTHON")
        .expect("ROCKLET_PYTHON: a Python with rocketmq-python-client (tests/ci/cluster.sh)");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/cluster_support/groups.py"
    );
    let out = tokio::task::spawn_blocking(move || {
        Command::new(py).arg(script).args(&args).output().unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "groups.py failed ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text.lines().map(str::to_string).collect()
}

/// Sends `count` messages through `at`: body → the group it landed on.
async fn send(at: SocketAddr, prefix: &str, count: usize) -> BTreeMap<String, String> {
    let lines = python(
        ["send", &at.to_string(), TOPIC, prefix, &count.to_string()]
            .map(String::from)
            .to_vec(),
    )
    .await;
    let mut acked = BTreeMap::new();
    for l in &lines {
        let w: Vec<&str> = l.splitn(3, ' ').collect();
        assert_eq!(w[0], "ACK", "a send failed: {l}\n{}", lines.join("\n"));
        acked.insert(w[1].to_string(), w[2].to_string());
    }
    assert_eq!(acked.len(), count, "{}", lines.join("\n"));
    acked
}

/// What consumer group `group` receives through `at`, waiting for `count` bodies.
async fn receive(at: SocketAddr, group: &str, count: usize) -> BTreeSet<String> {
    let lines = python(
        [
            "receive",
            &at.to_string(),
            TOPIC,
            group,
            &count.to_string(),
            "60",
        ]
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
#[ignore = "needs etcd and the Python client; run by tests/ci/cluster.sh"]
async fn two_groups_one_topic_official_client() {
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

    // The official client sends through g1's node; its messages land on both groups.
    let t = Instant::now();
    let acked = send(a1, "before", 40).await;
    let per = landed(&acked);
    println!("40 sends in {:?}, landed {per:?}", t.elapsed());
    assert!(
        per.get("g1").is_some_and(|&n| n > 0) && per.get("g2").is_some_and(|&n| n > 0),
        "messages landed on {per:?}, not on both groups"
    );
    // A consumer reaching g2's node receives every one, from both groups.
    let t = Instant::now();
    let got = receive(a2, "c1", acked.len()).await;
    println!("{} received in {:?}", got.len(), t.elapsed());
    let want: BTreeSet<String> = acked.keys().cloned().collect();
    assert_eq!(got, want, "received other than what was acknowledged");

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
    let t = Instant::now();
    let after = send(a2, "after", 20).await;
    println!("20 sends after the kill in {:?}", t.elapsed());
    assert_eq!(landed(&after), BTreeMap::from([("g2", 20)]));
    let got = receive(a2, "c1", after.len()).await;
    let want: BTreeSet<String> = after.keys().cloned().collect();
    assert_eq!(got, want, "received other than what was acknowledged");
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
