//! A network partition in cluster mode (issue #14), against a real etcd: a 3-node group with
//! sync replication where every connection a node has with etcd and with the other nodes
//! goes through a TCP proxy the test controls (`cluster_support::NodeNet`). `#[ignore]`d in
//! a plain `cargo test` (it needs Debian's etcd-server); `bash tests/ci/cluster.sh` runs it.
//!
//! `partition_the_master`: producers write to every node (a replica forwards to the
//! master) while the master is cut off from etcd and from both replicas: existing
//! connections dropped, new ones refused; the producers on its side still reach it. etcd and
//! the replicas keep talking, so they elect a new master in the next epoch. Every answer's
//! `x-rocklet-epoch` and `x-rocklet-node` headers (set by the master that acknowledged)
//! go into a ledger. Checked: the old master acknowledges nothing later than the lease TTL
//! after the cut, and nothing after the new master's first acknowledgement; it fences itself
//! (exit code 3, "fenced"); no two nodes acknowledged in the same epoch; healed and
//! restarted, the old master rejoins as a replica and cuts the tail it alone wrote; every
//! acknowledged message is delivered, and none rolled back is.

mod cluster_support;
mod common;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::{timed, Etcd, Node, NodeNet};
use common::{msg, res, Client, OK};
use rocklet_broker::cluster::reply::{EPOCH, NODE};
use rocklet_broker::pb::v2 as pb;

/// The lease TTL the nodes run with (the default).
const TTL: Duration = Duration::from_secs(rocklet_broker::cluster::DEFAULT_LEASE_TTL_S);

/// Who acknowledged: (epoch, node) from the reply's headers, `None` when absent.
fn acked_by<T>(r: &tonic::Response<T>) -> Option<(u64, u32)> {
    let get = |k: &str| r.metadata().get(k)?.to_str().ok().map(str::to_string);
    Some((get(EPOCH)?.parse().ok()?, get(NODE)?.parse().ok()?))
}

/// One acknowledged write.
#[derive(Clone, Debug)]
struct Ack {
    id: String,
    at: Instant,
    /// The node the producer sent to (0-based index).
    via: usize,
    /// From the reply: `None` if the master named no epoch (a failure of the check).
    by: Option<(u64, u32)>,
}

#[derive(Default)]
struct Ledger {
    acked: Vec<Ack>,
    rolled_back: HashSet<String>,
    /// Writes sent to node i with no acknowledgement (outcome unknown), and when.
    unanswered: Vec<(usize, Instant)>,
}

async fn send(c: &mut Client, m: pb::Message) -> Option<(pb::SendResultEntry, Option<(u64, u32)>)> {
    let r = timed(c.send_message(pb::SendMessageRequest { messages: vec![m] }))
        .await?
        .ok()?;
    let by = acked_by(&r);
    let r = r.into_inner();
    if r.status.as_ref()?.code != OK {
        return None;
    }
    let e = r.entries.into_iter().next()?;
    (e.status.as_ref()?.code == OK).then_some((e, by))
}

async fn end(c: &mut Client, topic: &str, txn: &str, commit: bool) -> Option<Option<(u64, u32)>> {
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
    .await?
    .ok()?;
    let by = acked_by(&r);
    (r.get_ref().status.as_ref()?.code == OK).then_some(by)
}

/// Writes to node `via` (at whatever address `addrs[via]` holds) until `stop`: plain
/// messages, and every 4th a transaction, committed or (every 8th) rolled back.
async fn produce(
    via: usize,
    addrs: Arc<Mutex<Vec<Option<SocketAddr>>>>,
    topic: &'static str,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) {
    let mut n = 0u64;
    let mut client: Option<Client> = None;
    while !stop.load(Ordering::SeqCst) {
        let c = match client.as_mut() {
            Some(c) => c,
            None => {
                let at = addrs.lock().unwrap()[via];
                let connected = match at {
                    Some(a) => timed(Client::connect(format!("http://{a}"))).await,
                    None => None,
                };
                match connected {
                    Some(Ok(c)) => client.insert(c),
                    _ => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
        };
        n += 1;
        let id = format!("N{via}-{n:07}");
        let by = if n.is_multiple_of(4) {
            let m = msg(topic, id.as_bytes(), pb::MessageType::Transaction, &id);
            match send(c, m).await {
                Some((e, _)) if n.is_multiple_of(8) => {
                    ledger.lock().unwrap().rolled_back.insert(id.clone());
                    let _ = end(c, topic, &e.transaction_id, false).await;
                    continue;
                }
                Some((e, _)) => end(c, topic, &e.transaction_id, true).await,
                None => None,
            }
        } else {
            let m = msg(topic, id.as_bytes(), pb::MessageType::Normal, &id);
            send(c, m).await.map(|(_, by)| by)
        };
        if let Some(by) = by {
            ledger.lock().unwrap().acked.push(Ack {
                id,
                at: Instant::now(),
                via,
                by,
            });
        } else {
            ledger
                .lock()
                .unwrap()
                .unanswered
                .push((via, Instant::now()));
            client = None;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn dump(nodes: &[Node]) {
    for n in nodes {
        if let Some(p) = &n.proc {
            let log = p.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!("---- node {} (last lines)", n.id);
            for l in &lines[lines.len().saturating_sub(40)..] {
                eprintln!("{l}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd (Debian etcd-server); run by tests/ci/cluster.sh"]
async fn partition_the_master() {
    let etcd = Etcd::start();
    let root = tempfile::tempdir().unwrap();
    let mut nets = Vec::new();
    for _ in 0..3 {
        nets.push(NodeNet::start(&etcd.url).await);
    }
    let mut nodes: Vec<Node> = (0..3)
        .map(|i| {
            let mut n = Node {
                id: i as u32 + 1,
                dir: root.path().join(format!("n{}", i + 1)),
                proc: None,
                remoting: false,
                async_replication: false,
                ports: None,
                extra: nets[i].args(),
            };
            n.restart(&nets[i].etcd_url());
            n
        })
        .collect();
    let addrs = Arc::new(Mutex::new(nodes.iter().map(Node::addr).collect::<Vec<_>>()));
    let topic = "ClusterNetSplit";
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..3)
        .map(|i| {
            tokio::spawn(produce(
                i,
                addrs.clone(),
                topic,
                ledger.clone(),
                stop.clone(),
            ))
        })
        .collect();
    let acked = |l: &Arc<Mutex<Ledger>>| l.lock().unwrap().acked.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked(&ledger) < 60 {
        if Instant::now() >= deadline {
            dump(&nodes);
            panic!("no progress before the partition");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The master, as its own replies name it.
    let (old_epoch, old_node) = ledger
        .lock()
        .unwrap()
        .acked
        .last()
        .unwrap()
        .by
        .expect("a master names its epoch and node in its replies");
    let mi = (old_node - 1) as usize;
    nets[mi].cut();
    let cut = Instant::now();
    // A write on the old master's side after the cut: it lands in its log only, so it is
    // never acknowledged, and the old master cuts it when it rejoins.
    let old_at = nodes[mi].addr().unwrap();
    let tail = tokio::spawn(async move {
        let mut c = Client::connect(format!("http://{old_at}")).await.ok()?;
        let m = msg(topic, b"tail", pb::MessageType::Normal, "TAIL");
        tokio::time::timeout(
            TTL + Duration::from_secs(2),
            c.send_message(pb::SendMessageRequest { messages: vec![m] }),
        )
        .await
        .ok()?
        .ok()
        .map(|r| r.into_inner())
    });
    // Its lease cannot be renewed: it fences itself before the lease can expire.
    // (Polled without blocking a worker: the proxies and producers run on this runtime.)
    let status = loop {
        if let Some(s) = nodes[mi].proc.as_mut().unwrap().wait_exit(Duration::ZERO) {
            break Some(s);
        }
        if cut.elapsed() > TTL + Duration::from_secs(3) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let log = nodes[mi].proc.as_ref().unwrap().log();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(3),
        "the isolated master did not fence itself:\n{log}"
    );
    assert!(log.contains("fenced"), "{log}");
    let fenced_after = cut.elapsed();
    let tail = tail.await.unwrap();
    assert!(
        tail.as_ref()
            .and_then(|r| r.status.as_ref())
            .is_none_or(|s| s.code != OK),
        "the isolated master acknowledged a write sent after the cut: {tail:?}"
    );
    nodes[mi].proc = None;
    addrs.lock().unwrap()[mi] = None;
    // The other two elect a new master, which acknowledges (through either of them).
    let deadline = Instant::now() + Duration::from_secs(60);
    let first_new = loop {
        let first = ledger
            .lock()
            .unwrap()
            .acked
            .iter()
            .filter(|a| a.at > cut && a.by.is_some_and(|(e, _)| e > old_epoch))
            .map(|a| a.at)
            .min();
        if let Some(t) = first {
            break t;
        }
        if Instant::now() >= deadline {
            dump(&nodes);
            panic!("no acknowledgement by a new master within 60 s of the partition");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Heal; the old master restarts and rejoins as a replica.
    nets[mi].heal();
    nodes[mi].restart(&nets[mi].etcd_url());
    addrs.lock().unwrap()[mi] = nodes[mi].addr();
    let from = acked(&ledger);
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked(&ledger) < from + 60
        || !nodes[mi]
            .proc
            .as_ref()
            .unwrap()
            .log()
            .contains("following the master")
    {
        if Instant::now() >= deadline {
            dump(&nodes);
            panic!("no progress, or the old master did not follow, after the heal");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for p in producers {
        p.await.unwrap();
    }
    let rejoin_log = nodes[mi].proc.as_ref().unwrap().log();
    // The producers are done: the ledger is final.
    let l = std::mem::take(&mut *ledger.lock().unwrap());

    // Every acknowledgement names its master and epoch; one node per epoch.
    let unnamed: Vec<&Ack> = l.acked.iter().filter(|a| a.by.is_none()).collect();
    assert!(
        unnamed.is_empty(),
        "acknowledged with no epoch: {unnamed:?}"
    );
    let mut masters: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for a in &l.acked {
        let (e, n) = a.by.unwrap();
        masters.entry(e).or_default().insert(n);
    }
    for (e, ns) in &masters {
        assert_eq!(ns.len(), 1, "epoch {e} acknowledged by nodes {ns:?}");
    }
    let new_master = masters
        .iter()
        .find(|(e, _)| **e > old_epoch)
        .map(|(e, ns)| (*e, *ns.first().unwrap()))
        .unwrap();
    assert_ne!(
        new_master.1, old_node,
        "the isolated node was elected again"
    );

    // The old master's acknowledgements stop within the lease.
    let last_old = l
        .acked
        .iter()
        .filter(|a| a.by == Some((old_epoch, old_node)))
        .map(|a| a.at)
        .max()
        .unwrap();
    let last_old_after = last_old.saturating_duration_since(cut);
    // Signed, for the report: its last ack may come before the cut (a write in flight then
    // waits for replicas it no longer reaches).
    let last_old_ms = if last_old >= cut {
        (last_old - cut).as_millis() as i64
    } else {
        -((cut - last_old).as_millis() as i64)
    };
    let first_new_after = first_new.saturating_duration_since(cut);
    let old_unanswered = l
        .unanswered
        .iter()
        .filter(|(v, t)| *v == mi && *t > cut)
        .count();
    eprintln!(
        "partition_the_master: node {old_node} (epoch {old_epoch}) cut off; fenced {fenced_after:?} after the cut; cut to its last ack {last_old_ms} ms; cut to node {} (epoch {})'s first ack {} ms; epochs {masters:?}; {} acknowledged ({} via the old master's side), {} unanswered ({old_unanswered} to the old master after the cut), {} rolled back",
        new_master.1,
        new_master.0,
        first_new_after.as_millis(),
        l.acked.len(),
        l.acked.iter().filter(|a| a.via == mi).count(),
        l.unanswered.len(),
        l.rolled_back.len(),
    );
    assert!(
        last_old_after < TTL,
        "the isolated master acknowledged {last_old_after:?} after the cut: past its lease TTL {TTL:?}"
    );
    assert!(
        last_old < first_new,
        "the old master acknowledged {:?} after the new master's first acknowledgement",
        last_old - first_new
    );
    // It wrote TAIL and never acknowledged it: on rejoining it cuts that tail.
    assert!(
        rejoin_log.contains("cutting it"),
        "the old master kept its unacknowledged tail:\n{rejoin_log}"
    );

    // Every acknowledged message is delivered; nothing rolled back is.
    let at = addrs.lock().unwrap()[(new_master.1 - 1) as usize].unwrap();
    let got: HashSet<String> = cluster_support::consume_ids(at, topic, "NetSplitCheck")
        .await
        .into_iter()
        .collect();
    let lost: Vec<&str> = l
        .acked
        .iter()
        .map(|a| a.id.as_str())
        .filter(|id| !got.contains(*id))
        .collect();
    assert!(lost.is_empty(), "acknowledged and lost: {lost:?}");
    let rolled: Vec<&String> = got
        .iter()
        .filter(|id| l.rolled_back.contains(*id))
        .collect();
    assert!(rolled.is_empty(), "rolled back and delivered: {rolled:?}");
    assert!(!got.contains("TAIL"), "the cut tail was delivered");
}
