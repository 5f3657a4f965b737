//! Cluster mode against a real etcd (issue #14): a 3-node broker group with sync
//! replication, processes on 127.0.0.1. `#[ignore]`d in a plain `cargo test` (they need the
//! `etcd` binary, Debian's etcd-server); `bash tests/ci/cluster.sh` installs it and runs them.
//!
//! - `kill_the_master`: a producer sends normal messages and transactions (committed and
//!   rolled back) through the group's route while the master is killed with SIGKILL again and
//!   again (`ROCKLET_CLUSTER_KILLS`, default 10; the long form sets 100) and restarted as a
//!   replica. Every acknowledged message is then consumed from the last master, none rolled
//!   back is, and the failover time (the killed master's last acknowledgement to the first
//!   by another node; each names its node) is printed as p50 and max.
//! - `etcd_partition`: etcd stops answering (SIGSTOP) under load: the master can no longer
//!   renew its lease, acknowledges nothing past its deadline (within the lease TTL of the
//!   stop) and exits as fenced (exit code 3); once etcd is back the group goes on and every
//!   acknowledged message is delivered.
//! - `divergent_tail`: the master writes a message its replicas never get (both killed), so
//!   it is never acknowledged; the master is killed, the replicas restart, one is elected, and
//!   the old master rejoins: it cuts that tail, catches up, and the group delivers every
//!   acknowledged message exactly once and never the cut one.

mod cluster_support;
mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::{find_master, timed, Etcd, Node};
use common::{connect, msg, res, Client, OK};
use rocklet_broker::pb::v2 as pb;
use tokio_stream::StreamExt;

async fn send_one(c: &mut Client, m: pb::Message) -> Option<pb::SendResultEntry> {
    let r = timed(c.send_message(pb::SendMessageRequest { messages: vec![m] }))
        .await?
        .ok()?
        .into_inner();
    if r.status.as_ref()?.code != OK {
        return None;
    }
    let e = r.entries.into_iter().next()?;
    (e.status.as_ref()?.code == OK).then_some(e)
}

async fn end(c: &mut Client, topic: &str, txn: &str, commit: bool) -> bool {
    let r = timed(c.end_transaction(pb::EndTransactionRequest {
        topic: res(topic),
        message_id: String::new(),
        transaction_id: txn.into(),
        resolution: if commit {
            pb::TransactionResolution::Commit
        } else {
            pb::TransactionResolution::Rollback
        } as i32,
        source: pb::TransactionSource::SourceClient as i32,
        trace_context: String::new(),
    }))
    .await;
    matches!(r, Some(Ok(r)) if r.get_ref().status.as_ref().is_some_and(|s| s.code == OK))
}

/// What the producer saw.
#[derive(Default)]
struct Ledger {
    /// Acknowledged messages (sends, and commits answered OK) with when.
    acked: Vec<(String, Instant, SocketAddr)>,
    /// Transactions whose rollback was asked (answered or not).
    rolled_back: HashSet<String>,
    /// Sends whose answer was an error or none: they may or may not be stored.
    unknown: u64,
}

/// Sends until `stop`: message n is a plain send, or every 4th a transaction, committed or
/// (every 8th) rolled back. After a failure it finds the master again.
async fn produce(
    addrs: Arc<Mutex<Vec<SocketAddr>>>,
    topic: &'static str,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut n = 0u64;
    let mut client: Option<Client> = None;
    let mut at: Option<SocketAddr> = None;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let c = match client.as_mut() {
            Some(c) => c,
            None => {
                let list = addrs.lock().unwrap().clone();
                match find_master(&list, topic).await {
                    Some(m) => match timed(Client::connect(format!("http://{m}"))).await {
                        Some(Ok(c)) => {
                            at = Some(m);
                            client.insert(c)
                        }
                        _ => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                    None => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
        };
        n += 1;
        let id = format!("M{n:08}");
        let started = Instant::now();
        let ok = if n.is_multiple_of(4) {
            let rollback = n.is_multiple_of(8);
            let m = msg(topic, id.as_bytes(), pb::MessageType::Transaction, &id);
            match send_one(c, m).await {
                Some(e) => {
                    if rollback {
                        ledger.lock().unwrap().rolled_back.insert(id.clone());
                        let _ = end(c, topic, &e.transaction_id, false).await;
                        // Not a message a consumer may see: nothing to record as acked.
                        continue;
                    }
                    end(c, topic, &e.transaction_id, true).await
                }
                None => false,
            }
        } else {
            let m = msg(topic, id.as_bytes(), pb::MessageType::Normal, &id);
            send_one(c, m).await.is_some()
        };
        if ok {
            let by = at.expect("connected");
            ledger.lock().unwrap().acked.push((id, Instant::now(), by));
        } else {
            if std::env::var_os("ROCKLET_CLUSTER_TRACE").is_some() {
                eprintln!(
                    "{:?} {id} to {at:?}: no acknowledgement ({:?} after the send started)",
                    Instant::now(),
                    started.elapsed()
                );
            }
            ledger.lock().unwrap().unknown += 1;
            client = None;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (Debian etcd-server); run by tests/ci/cluster.sh"]
async fn kill_the_master() {
    let kills: usize = std::env::var("ROCKLET_CLUSTER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| Node::start(i, &root.path().join(format!("n{i}")), &etcd.url))
        .collect();
    let addrs = Arc::new(Mutex::new(
        nodes.iter().filter_map(Node::addr).collect::<Vec<_>>(),
    ));
    let topic = "ClusterKill";
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = tokio::spawn(produce(addrs.clone(), topic, ledger.clone(), stop.clone()));
    let acked = |l: &Arc<Mutex<Ledger>>| l.lock().unwrap().acked.len();
    let wait_acks = |more: usize, what: String| {
        let ledger = ledger.clone();
        async move {
            let from = acked(&ledger);
            let deadline = Instant::now() + Duration::from_secs(60);
            while acked(&ledger) < from + more {
                assert!(Instant::now() < deadline, "no progress: {what}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    wait_acks(50, "before the first kill".into()).await;
    let mut failovers = Vec::new();
    for k in 0..kills {
        let list = addrs.lock().unwrap().clone();
        let master = find_master(&list, topic).await.expect("a master");
        let i = nodes.iter().position(|n| n.addr() == Some(master)).unwrap();
        let killed_at = Instant::now();
        nodes[i].proc.as_mut().unwrap().kill9();
        nodes[i].proc = None;
        *addrs.lock().unwrap() = nodes.iter().filter_map(Node::addr).collect();
        // The first acknowledgement by another master.
        let deadline = Instant::now() + Duration::from_secs(60);
        let first_after = loop {
            if let Some(a) = ledger
                .lock()
                .unwrap()
                .acked
                .iter()
                .rev()
                .take_while(|a| a.1 > killed_at)
                .filter(|a| a.2 != master)
                .last()
            {
                break a.1;
            }
            assert!(
                Instant::now() < deadline,
                "kill {k}: no acknowledgement within 60 s of the kill"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        // Its last acknowledgement, read now: replies it sent just before it died may have
        // arrived after the kill. (Each ack names the node that sent it, so this is the old
        // master's last and the new master's first, whatever their order on the wire.)
        let last_before = ledger
            .lock()
            .unwrap()
            .acked
            .iter()
            .filter(|a| a.2 == master)
            .map(|a| a.1)
            .max()
            .unwrap();
        let took = first_after.saturating_duration_since(last_before);
        eprintln!(
            "kill {k}: node {} was master; failover {took:?}",
            nodes[i].id
        );
        failovers.push(took);
        if took > Duration::from_secs(3) {
            // Above the target: show what the live nodes did (their last lines).
            for n in nodes.iter().filter(|n| n.proc.is_some()) {
                let log = n.proc.as_ref().unwrap().log();
                let lines: Vec<&str> = log.lines().collect();
                eprintln!("---- node {} (last lines)", n.id);
                for l in &lines[lines.len().saturating_sub(40)..] {
                    eprintln!("{l}");
                }
            }
        }
        // Back as a replica; the group goes on with it.
        nodes[i].restart(&etcd.url);
        *addrs.lock().unwrap() = nodes.iter().filter_map(Node::addr).collect();
        wait_acks(30, format!("after kill {k}")).await;
        // Let the restarted node catch up and rejoin the SyncStateSet.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    producer.await.unwrap();
    let list = addrs.lock().unwrap().clone();
    let master = find_master(&list, topic)
        .await
        .expect("a master at the end");
    let got = cluster_support::consume_ids(master, topic, "ClusterKillCheck").await;
    let got_set: HashSet<&str> = got.iter().map(String::as_str).collect();
    let l = ledger.lock().unwrap();
    let lost: Vec<&str> = l
        .acked
        .iter()
        .map(|a| a.0.as_str())
        .filter(|id| !got_set.contains(id))
        .collect();
    let rolled_seen: Vec<&&str> = got_set
        .iter()
        .filter(|id| l.rolled_back.contains(**id))
        .collect();
    let mut f = failovers.clone();
    let (p50, max) = (percentile(&mut f, 0.5), *f.last().unwrap());
    eprintln!(
        "kill_the_master: {kills} kills, {} acknowledged, {} received, {} sends unanswered, {} rolled back; lost {}; rolled back delivered {}; failover p50 {p50:?}, max {max:?}",
        l.acked.len(),
        got.len(),
        l.unknown,
        l.rolled_back.len(),
        lost.len(),
        rolled_seen.len()
    );
    assert!(lost.is_empty(), "acknowledged and lost: {lost:?}");
    assert!(
        rolled_seen.is_empty(),
        "rolled back and delivered: {rolled_seen:?}"
    );
    assert!(l.acked.len() > 50 + 30 * kills);
    // `rocklet admin cluster` shows the group as etcd has it, with the epoch every election
    // bumped and the replicas' lag.
    let out = Command::new(env!("CARGO_BIN_EXE_rocklet"))
        .args([
            "admin",
            "cluster",
            "--cluster",
            &format!("etcd={}", etcd.url),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("group g1"), "{text}");
    assert!(text.contains("(master)"), "{text}");
    assert!(text.contains("sync_state_set"), "{text}");
    assert_eq!(text.matches(" live at ").count(), 3, "{text}");
    let epoch: u64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("epoch"))
        .and_then(|e| e.trim().parse().ok())
        .unwrap_or_else(|| panic!("no epoch: {text}"));
    assert!(
        epoch > kills as u64,
        "epoch {epoch} after {kills} failovers"
    );
    assert!(text.contains(" lag "), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (Debian etcd-server); run by tests/ci/cluster.sh"]
async fn divergent_tail() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| Node::start(i, &root.path().join(format!("n{i}")), &etcd.url))
        .collect();
    let topic = "ClusterTail";
    let all: Vec<SocketAddr> = nodes.iter().filter_map(Node::addr).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let master = loop {
        if let Some(m) = find_master(&all, topic).await {
            break m;
        }
        assert!(Instant::now() < deadline, "no master elected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut c = connect(master).await;
    let mut acked = Vec::new();
    // Acknowledged by the whole group first (the set fills as the replicas catch up).
    for n in 0..20 {
        let id = format!("A{n:04}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while send_one(&mut c, msg(topic, b"a", pb::MessageType::Normal, &id))
            .await
            .is_none()
        {
            if Instant::now() >= deadline {
                for n in &nodes {
                    eprintln!("---- node {}\n{}", n.id, n.proc.as_ref().unwrap().log());
                }
                panic!("{id} not acknowledged");
            }
        }
        acked.push(id);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mi = nodes.iter().position(|n| n.addr() == Some(master)).unwrap();
    let replicas: Vec<usize> = (0..3).filter(|&i| i != mi).collect();
    // The replicas die; the master writes a message nobody else gets: never acknowledged.
    // (Killed, not frozen: a frozen process's socket still takes the bytes, and it would
    // apply them once thawed.)
    for &r in &replicas {
        nodes[r].proc.as_mut().unwrap().kill9();
        nodes[r].proc = None;
    }
    // A short wait: well within replica_max_lag_ms, so the set still names the replicas
    // when the master dies (a set of the master alone would leave no one electable).
    let r = tokio::time::timeout(
        Duration::from_millis(800),
        c.send_message(pb::SendMessageRequest {
            messages: vec![msg(topic, b"cut", pb::MessageType::Normal, "CUT")],
        }),
    )
    .await
    .ok();
    let answered =
        matches!(&r, Some(Ok(r)) if r.get_ref().status.as_ref().is_some_and(|s| s.code == OK));
    assert!(
        !answered,
        "a write was acknowledged with every replica down: {r:?}"
    );
    nodes[mi].proc.as_mut().unwrap().kill9();
    nodes[mi].proc = None;
    for &r in &replicas {
        nodes[r].restart(&etcd.url);
    }
    // A replica is elected; then the old master rejoins and cuts what it alone had.
    let all: Vec<SocketAddr> = nodes.iter().filter_map(Node::addr).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let new_master = loop {
        if let Some(m) = find_master(&all, topic).await {
            break m;
        }
        assert!(Instant::now() < deadline, "no new master elected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    nodes[mi].restart(&etcd.url);
    let mut c = connect(new_master).await;
    for n in 20..30 {
        let id = format!("A{n:04}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while send_one(&mut c, msg(topic, b"a", pb::MessageType::Normal, &id))
            .await
            .is_none()
        {
            assert!(
                Instant::now() < deadline,
                "{id} not acknowledged after the failover"
            );
        }
        acked.push(id);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !nodes[mi]
        .proc
        .as_ref()
        .unwrap()
        .log()
        .contains("cutting it")
    {
        if Instant::now() >= deadline {
            for n in &nodes {
                eprintln!("---- node {}\n{}", n.id, n.proc.as_ref().unwrap().log());
            }
        }
        assert!(
            Instant::now() < deadline,
            "the old master did not cut its tail:\n{}",
            nodes[mi].proc.as_ref().unwrap().log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = cluster_support::consume_ids(new_master, topic, "ClusterTailCheck").await;
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(
        sorted, acked,
        "every acknowledged message once, the cut one never"
    );
    // The old master holds the same log as the new one once caught up: killed and asked
    // alone it would serve the same; here it is enough that it follows without a gap.
    let log = nodes[mi].proc.as_ref().unwrap().log();
    assert!(log.contains("following the master"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (Debian etcd-server); run by tests/ci/cluster.sh"]
async fn etcd_partition() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| Node::start(i, &root.path().join(format!("n{i}")), &etcd.url))
        .collect();
    let addrs = Arc::new(Mutex::new(
        nodes.iter().filter_map(Node::addr).collect::<Vec<_>>(),
    ));
    let topic = "ClusterPartition";
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = tokio::spawn(produce(addrs.clone(), topic, ledger.clone(), stop.clone()));
    let acked = |l: &Arc<Mutex<Ledger>>| l.lock().unwrap().acked.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked(&ledger) < 50 {
        assert!(
            Instant::now() < deadline,
            "no progress before the partition"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let list = addrs.lock().unwrap().clone();
    let master = find_master(&list, topic).await.expect("a master");
    let mi = nodes.iter().position(|n| n.addr() == Some(master)).unwrap();
    etcd.signal("-STOP");
    let stopped = Instant::now();
    // The lease is 2 s: the master fences itself before it could expire.
    let status = nodes[mi]
        .proc
        .as_mut()
        .unwrap()
        .wait_exit(Duration::from_secs(5));
    let log = nodes[mi].proc.as_ref().unwrap().log();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(3),
        "the master did not fence itself within 5 s of losing etcd:\n{log}"
    );
    assert!(log.contains("fenced"), "{log}");
    let last_ack = ledger.lock().unwrap().acked.last().unwrap().1;
    let after = last_ack.saturating_duration_since(stopped);
    eprintln!(
        "etcd_partition: master node {} fenced {:?} after etcd stopped; last ack {after:?} after",
        nodes[mi].id,
        stopped.elapsed()
    );
    assert!(
        after < Duration::from_secs(2),
        "an acknowledgement {after:?} after etcd stopped: past the lease"
    );
    nodes[mi].proc = None;
    etcd.signal("-CONT");
    nodes[mi].restart(&etcd.url);
    *addrs.lock().unwrap() = nodes.iter().filter_map(Node::addr).collect();
    let from = acked(&ledger);
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked(&ledger) < from + 30 {
        assert!(
            Instant::now() < deadline,
            "no progress after etcd came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    producer.await.unwrap();
    let list = addrs.lock().unwrap().clone();
    let master = find_master(&list, topic)
        .await
        .expect("a master at the end");
    let got: HashSet<String> = cluster_support::consume_ids(master, topic, "ClusterPartitionCheck")
        .await
        .into_iter()
        .collect();
    let l = ledger.lock().unwrap();
    let lost: Vec<&String> = l
        .acked
        .iter()
        .map(|a| &a.0)
        .filter(|id| !got.contains(*id))
        .collect();
    assert!(lost.is_empty(), "acknowledged and lost: {lost:?}");
    assert!(!got.iter().any(|id| l.rolled_back.contains(id)));
}

/// Receives up to `max` messages of `topic` as `group` (no ack).
async fn receive_some(c: &mut Client, topic: &str, group: &str, max: i32) -> Vec<pb::Message> {
    let req = pb::ReceiveMessageRequest {
        group: res(group),
        message_queue: Some(pb::MessageQueue {
            topic: res(topic),
            ..Default::default()
        }),
        filter_expression: Some(pb::FilterExpression {
            r#type: pb::FilterType::Tag as i32,
            expression: "*".into(),
        }),
        batch_size: max,
        invisible_duration: Some(common::dur(60_000)),
        auto_renew: false,
        long_polling_timeout: Some(common::dur(1_000)),
        attempt_id: None,
    };
    let mut out = Vec::new();
    let Ok(r) = c.receive_message(req).await else {
        return out;
    };
    let mut stream = r.into_inner();
    while let Some(Ok(r)) = stream.next().await {
        if let Some(pb::receive_message_response::Content::Message(m)) = r.content {
            out.push(m);
        }
    }
    out
}

fn id_of(m: &pb::Message) -> String {
    m.system_properties.as_ref().unwrap().message_id.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (Debian etcd-server); run by tests/ci/cluster.sh"]
async fn the_new_master_carries_on() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| Node::start(i, &root.path().join(format!("n{i}")), &etcd.url))
        .collect();
    let topic = "ClusterCarry";
    let group = "CarryGroup";
    let all: Vec<SocketAddr> = nodes.iter().filter_map(Node::addr).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let master = loop {
        if let Some(m) = find_master(&all, topic).await {
            break m;
        }
        assert!(Instant::now() < deadline, "no master elected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut c = connect(master).await;
    let send = |c: &mut Client, m: pb::Message| {
        let mut c = c.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if let Some(e) = send_one(&mut c, m.clone()).await {
                    return e;
                }
                assert!(Instant::now() < deadline, "not acknowledged");
            }
        }
    };
    // Ten plain messages: four consumed and acked (the group's offset), two received and
    // left in flight, four untouched.
    for n in 0..10 {
        let id = format!("P{n}");
        send(&mut c, msg(topic, b"p", pb::MessageType::Normal, &id)).await;
    }
    let mut consumed = HashSet::new();
    let mut in_flight = Vec::new();
    while consumed.len() + in_flight.len() < 6 {
        for m in receive_some(&mut c, topic, group, 1).await {
            if consumed.len() < 4 {
                assert_eq!(common::ack(&mut c, topic, group, &m).await.code, OK);
                consumed.insert(id_of(&m));
            } else {
                in_flight.push(m);
            }
        }
    }
    // Three transactions left open, and a message due in 5 s.
    let mut open = HashSet::new();
    for n in 0..3 {
        let id = format!("T{n}");
        send(&mut c, msg(topic, b"t", pb::MessageType::Transaction, &id)).await;
        open.insert(id);
    }
    let due = rocklet_broker::clock::Clock::now(&rocklet_broker::clock::SystemClock) + 5_000;
    let mut d = msg(topic, b"d", pb::MessageType::Delay, "D0");
    d.system_properties.as_mut().unwrap().delivery_timestamp =
        Some(rocklet_broker::grpc::convert::timestamp(due));
    send(&mut c, d).await;
    // The acks above are replicated: offsets, receipts and halves are in every member's log.
    let mi = nodes.iter().position(|n| n.addr() == Some(master)).unwrap();
    nodes[mi].proc.as_mut().unwrap().kill9();
    nodes[mi].proc = None;
    let all: Vec<SocketAddr> = nodes.iter().filter_map(Node::addr).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let new_master = loop {
        if let Some(m) = find_master(&all, topic).await {
            break m;
        }
        assert!(Instant::now() < deadline, "no new master elected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut c = connect(new_master).await;
    // The new master checks the open transactions with a producer of the topic.
    let mut producer = common::Telemetry::producer(&mut c, &[topic]).await;
    let mut checked = HashSet::new();
    while checked.len() < open.len() {
        let check = producer
            .next_check(Duration::from_secs(40))
            .await
            .unwrap_or_else(|| panic!("no check from the new master; checked {checked:?}"));
        let id = id_of(check.message.as_ref().unwrap());
        assert!(open.contains(&id), "a check of {id}");
        let s = common::end_txn(
            &mut c,
            topic,
            &check.transaction_id,
            pb::TransactionResolution::Commit,
            pb::TransactionSource::SourceServerCheck,
        )
        .await;
        assert_eq!(s.code, OK, "{}", s.message);
        checked.insert(id);
    }
    // The consumer reaches the group through a replica (as one still routed to an old
    // address does): the replica passes its acks and receives on to the new master.
    let replica = all.iter().copied().find(|&a| a != new_master).unwrap();
    let mut r = connect(replica).await;
    // The receipts handed out by the old master are valid on the new one.
    for m in &in_flight {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Retried while the replica may not know the new master yet.
            let s = common::ack(&mut r, topic, group, m).await;
            if s.code == OK {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "ack of {} through the replica {replica} after the failover: {}",
                id_of(m),
                s.message
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        consumed.insert(id_of(m));
    }
    // The group goes on from its offset: the four untouched, the three committed and the
    // delayed message, each once, never before it is due.
    let mut rest = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while rest.len() < 8 {
        assert!(Instant::now() < deadline, "got only {rest:?}");
        for m in receive_some(&mut r, topic, group, 16).await {
            let id = id_of(&m);
            if id == "D0" {
                let now = rocklet_broker::clock::Clock::now(&rocklet_broker::clock::SystemClock);
                assert!(
                    now >= due,
                    "the delayed message came {} ms early",
                    due - now
                );
            }
            assert_eq!(common::ack(&mut r, topic, group, &m).await.code, OK);
            rest.push(id);
        }
    }
    // Nothing more: no duplicate of anything consumed before or after.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let more = receive_some(&mut c, topic, group, 16).await;
    assert!(
        more.is_empty(),
        "delivered again: {:?}",
        more.iter().map(id_of).collect::<Vec<_>>()
    );
    let rest_set: HashSet<String> = rest.iter().cloned().collect();
    assert_eq!(rest.len(), rest_set.len(), "a duplicate: {rest:?}");
    assert!(rest_set.is_disjoint(&consumed), "{rest:?} vs {consumed:?}");
    assert!(rest_set.contains("D0"));
    for t in &open {
        assert!(
            rest_set.contains(t),
            "{t} committed by its check but not delivered"
        );
    }
}

/// GET_ROUTEINFO_BY_TOPIC at `namesrv` until it names `want` (a node learns of a new
/// master within its poll of etcd), for at most 15 s: the last answer.
async fn v4_route_to(namesrv: SocketAddr, topic: &str, want: &str) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let got = v4_route(namesrv, topic).await;
        if got.as_deref() == Some(want) || Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// GET_ROUTEINFO_BY_TOPIC at `namesrv`: the broker address of the route.
async fn v4_route(namesrv: SocketAddr, topic: &str) -> Option<String> {
    use rocklet_broker::remoting::codec::SerializeType;
    let mut ns = common::v4::V4::connect(namesrv, SerializeType::Json).await;
    let r = ns.call(105, &[("topic", topic)], Vec::new()).await;
    if r.code != 0 {
        return None;
    }
    let route: serde_json::Value = serde_json::from_slice(&r.body).ok()?;
    route["brokerDatas"][0]["brokerAddrs"]["0"]
        .as_str()
        .map(str::to_string)
}

/// GET_BROKER_CLUSTER_INFO (mqadmin clusterList) at `namesrv`: group g1's brokerAddrs,
/// polled for at most 15 s until it holds `want` addresses with `master` at brokerId 0 (a
/// node learns of a new master within its poll of etcd); the last answer.
async fn v4_cluster_list(
    namesrv: SocketAddr,
    want: usize,
    master: &str,
) -> serde_json::Map<String, serde_json::Value> {
    use rocklet_broker::remoting::codec::SerializeType;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let mut ns = common::v4::V4::connect(namesrv, SerializeType::Json).await;
        let r = ns.call(106, &[], Vec::new()).await;
        assert_eq!(r.code, 0, "{:?}", r.remark);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["clusterAddrTable"]["rocklet"], serde_json::json!(["g1"]));
        let addrs = v["brokerAddrTable"]["g1"]["brokerAddrs"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let done = addrs.len() == want && addrs.get("0").and_then(|a| a.as_str()) == Some(master);
        if done || Instant::now() >= deadline {
            return addrs;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (Debian etcd-server); run by tests/ci/cluster.sh"]
async fn v4_routes_name_the_master() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| Node::start_v4(i, &root.path().join(format!("n{i}")), &etcd.url))
        .collect();
    let topic = "ClusterV4";
    let all: Vec<SocketAddr> = nodes.iter().filter_map(Node::addr).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let master = loop {
        if let Some(m) = find_master(&all, topic).await {
            break m;
        }
        assert!(Instant::now() < deadline, "no master elected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut c = connect(master).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while send_one(&mut c, msg(topic, b"a", pb::MessageType::Normal, "V0"))
        .await
        .is_none()
    {
        assert!(Instant::now() < deadline, "not acknowledged");
    }
    let mi = nodes.iter().position(|n| n.addr() == Some(master)).unwrap();
    let master_remoting = nodes[mi].v4_addrs().0.to_string();
    // Every node's name server routes v4 clients to the master.
    for n in &nodes {
        let (_, ns) = n.v4_addrs();
        assert_eq!(
            v4_route_to(ns, topic, &master_remoting).await.as_deref(),
            Some(master_remoting.as_str()),
            "node {}",
            n.id
        );
    }
    // mqadmin clusterList at any node (a replica's too) lists all three, the master as
    // brokerId 0 and each replica by its node id.
    for n in &nodes {
        let (_, ns) = n.v4_addrs();
        let addrs = v4_cluster_list(ns, 3, &master_remoting).await;
        assert_eq!(addrs.len(), 3, "node {}: {addrs:?}", n.id);
        assert_eq!(addrs["0"], master_remoting.as_str(), "node {}", n.id);
        for r in nodes.iter().filter(|r| r.id != nodes[mi].id) {
            assert_eq!(
                addrs[&r.id.to_string()],
                r.v4_addrs().0.to_string().as_str(),
                "node {}: replica {}",
                n.id,
                r.id
            );
        }
    }
    nodes[mi].proc.as_mut().unwrap().kill9();
    nodes[mi].proc = None;
    let all: Vec<SocketAddr> = nodes.iter().filter_map(Node::addr).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let new_master = loop {
        if let Some(m) = find_master(&all, topic).await {
            break m;
        }
        assert!(Instant::now() < deadline, "no new master elected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ni = nodes
        .iter()
        .position(|n| n.addr() == Some(new_master))
        .unwrap();
    let new_remoting = nodes[ni].v4_addrs().0.to_string();
    for n in nodes.iter().filter(|n| n.proc.is_some()) {
        let (_, ns) = n.v4_addrs();
        assert_eq!(
            v4_route_to(ns, topic, &new_remoting).await.as_deref(),
            Some(new_remoting.as_str()),
            "node {}",
            n.id
        );
        // The new master is brokerId 0 (the killed node is listed until its lease ends).
        let addrs = v4_cluster_list(ns, 2, &new_remoting).await;
        assert_eq!(
            addrs["0"],
            new_remoting.as_str(),
            "node {}: {addrs:?}",
            n.id
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (Debian etcd-server); run by tests/ci/cluster.sh"]
async fn async_replication_answers_at_once() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| {
            let mut n = Node {
                id: i,
                dir: root.path().join(format!("n{i}")),
                proc: None,
                remoting: false,
                async_replication: true,
                ports: None,
                extra: Vec::new(),
            };
            n.restart(&etcd.url);
            n
        })
        .collect();
    let topic = "ClusterAsync";
    let all: Vec<SocketAddr> = nodes.iter().filter_map(Node::addr).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let master = loop {
        if let Some(m) = find_master(&all, topic).await {
            break m;
        }
        assert!(Instant::now() < deadline, "no master elected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut c = connect(master).await;
    assert!(
        send_one(&mut c, msg(topic, b"a", pb::MessageType::Normal, "S0"))
            .await
            .is_some()
    );
    // With every replica down, an async master still answers (RocketMQ's ASYNC_MASTER); a
    // sync one would not (`divergent_tail`).
    let mi = nodes.iter().position(|n| n.addr() == Some(master)).unwrap();
    for (i, n) in nodes.iter_mut().enumerate() {
        if i != mi {
            n.proc.as_mut().unwrap().kill9();
            n.proc = None;
        }
    }
    for k in 0..5 {
        let id = format!("S{}", k + 1);
        let e = send_one(&mut c, msg(topic, b"a", pb::MessageType::Normal, &id)).await;
        assert!(
            e.is_some(),
            "{id} not answered by an async master with no replica"
        );
    }
    // The replicas come back and catch up from the master.
    for (i, n) in nodes.iter_mut().enumerate() {
        if i != mi {
            n.restart(&etcd.url);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let caught = nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != mi)
            .all(|(_, n)| {
                n.proc
                    .as_ref()
                    .unwrap()
                    .log()
                    .contains("following the master")
            });
        if caught {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replicas did not follow the master again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
