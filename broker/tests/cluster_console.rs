//! The operator console in cluster mode (issue 33, item 3), on a 3-node broker group over a
//! real etcd. `#[ignore]`d in a plain `cargo test` (it needs the `etcd` binary);
//! `bash tests/ci/console.sh` runs it, with headless Chromium for its browser part
//! (`ROCKLET_CONSOLE_NODE_PATH`: where playwright-core is installed).
//!
//! A replica's console shows the group: its own role, the master (node, epoch), the
//! SyncStateSet and the replicas' lag (from the master's report in etcd). Pending
//! transactions prepared on the master are resolved from the replica's console — once in
//! the browser (the page says the master carries actions out), once through its API — and
//! the master delivers both.

mod cluster_support;
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cluster_support::{find_master, free_port, Etcd, Node};
use common::{connect, msg, receive_all};
use rocklet_broker::pb::v2 as pb;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request to a console; its status and JSON body.
async fn http(at: SocketAddr, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\nX-Rocklet-Console: 1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

async fn until<T>(what: &str, within: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs etcd: bash tests/ci/console.sh"]
async fn a_replicas_console_shows_the_group_and_its_actions_are_carried_out_by_the_master() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let consoles: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let nodes: Vec<Node> = (1..=3u32)
        .map(|id| {
            let console = format!("127.0.0.1:{}", consoles[id as usize - 1]);
            Node::start_fixed(
                id,
                &dir.path().join(format!("n{id}")),
                &etcd.url,
                &["--console-listen".into(), console],
            )
        })
        .collect();
    let addrs: Vec<SocketAddr> = nodes.iter().filter_map(Node::addr).collect();
    let topic = "ConsoleCluster";
    let master = until("a master", Duration::from_secs(30), async || {
        find_master(&addrs, topic).await
    })
    .await;
    let mi = nodes.iter().position(|n| n.addr() == Some(master)).unwrap();
    let ri = (mi + 1) % 3;
    let master_id = nodes[mi].id;
    let replica_console: SocketAddr = format!("127.0.0.1:{}", consoles[ri]).parse().unwrap();
    let master_console: SocketAddr = format!("127.0.0.1:{}", consoles[mi]).parse().unwrap();

    // Two transactions prepared on the master; their producer is not online, so they wait.
    let mut c = connect(master).await;
    let mut txns = Vec::new();
    for key in ["in-browser", "by-api"] {
        let mut m = msg(topic, key.as_bytes(), pb::MessageType::Transaction, key);
        m.system_properties.as_mut().unwrap().keys = vec![key.into()];
        let r = common::send(&mut c, vec![m]).await;
        let e = &r.entries[0];
        assert_eq!(e.status.as_ref().unwrap().code, common::OK, "{r:?}");
        txns.push(e.transaction_id.clone());
    }

    // The replica's console: the group as it sees it.
    let mut last = Value::Null;
    let deadline = Instant::now() + Duration::from_secs(20);
    let o = loop {
        let (s, o) = http(replica_console, "GET", "/api/overview", None).await;
        let c = &o["cluster"];
        let full = c["sync_state_set"].as_array().is_some_and(|m| m.len() == 3)
            && c["replicas"].as_array().is_some_and(|r| r.len() == 2);
        if s == 200 && full {
            break o;
        }
        last = o["cluster"].clone();
        assert!(
            Instant::now() < deadline,
            "the replica's console does not show the whole group: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    drop(last);
    let cl = &o["cluster"];
    assert_eq!(cl["role"], "replica", "{cl}");
    assert_eq!(cl["node"], nodes[ri].id, "{cl}");
    assert_eq!(cl["master"]["node"], master_id, "{cl}");
    assert_eq!(cl["master"]["advertise"], master.to_string(), "{cl}");
    assert_eq!(cl["broker_name"], "g1");
    assert!(cl["epoch"].as_u64().unwrap() >= 1, "{cl}");
    assert_eq!(cl["lag_from"], "etcd (the master's report)", "{cl}");
    let (_, mo) = http(master_console, "GET", "/api/overview", None).await;
    assert_eq!(mo["cluster"]["role"], "master", "{mo}");
    assert_eq!(mo["cluster"]["lag_from"], "this node");

    // The replica lists the pending transactions (replicated). gRPC names a transaction by
    // its message id (RocketMQ's form), the console by its log offset: matched by message id.
    let txns: Vec<String> = until(
        "the replica to list both transactions",
        Duration::from_secs(20),
        async || {
            let (_, p) = http(replica_console, "GET", "/api/pending", None).await;
            let items = p["items"].as_array()?;
            txns.iter()
                .map(|m| {
                    items
                        .iter()
                        .find(|t| t["message_id"] == m.as_str())
                        .and_then(|t| t["transaction_id"].as_str())
                        .map(String::from)
                })
                .collect()
        },
    )
    .await;

    // In the browser, on the replica's page: commit the first.
    match std::env::var("ROCKLET_CONSOLE_NODE_PATH") {
        Ok(node_path) => {
            let script = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/console-browser/cluster.test.cjs"
            );
            let out = std::process::Command::new("node")
                .arg(script)
                .arg(format!("http://{replica_console}"))
                .arg(&txns[0])
                .arg(master_id.to_string())
                .env("NODE_PATH", node_path)
                .output()
                .expect("node runs");
            println!("{}", String::from_utf8_lossy(&out.stdout));
            eprintln!("{}", String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "the browser part failed");
        }
        Err(_) => {
            println!("ROCKLET_CONSOLE_NODE_PATH not set: the browser part is left out");
            let (s, r) = http(
                replica_console,
                "POST",
                "/api/resolve",
                Some(&json!({"resolution": "commit", "transactions": [txns[0]]})),
            )
            .await;
            assert_eq!((s, &r["results"][0]["ok"]), (200, &json!(true)), "{r}");
        }
    }
    // Through the replica's API: commit the second.
    let (s, r) = http(
        replica_console,
        "POST",
        "/api/resolve",
        Some(&json!({"resolution": "commit", "transactions": [txns[1]]})),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["results"][0]["ok"], json!(true), "{r}");

    // The master resolved both: a consumer gets them.
    let got = receive_all(&mut c, topic, "ConsoleClusterReaders").await;
    let mut bodies: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["by-api", "in-browser"]);
    // And no node lists them as pending any more.
    for at in [master_console, replica_console] {
        until(
            "the transactions to leave the pending list",
            Duration::from_secs(20),
            async || {
                let (_, p) = http(at, "GET", "/api/pending", None).await;
                p["items"].as_array()?.is_empty().then_some(())
            },
        )
        .await;
    }
    drop(nodes);
}
