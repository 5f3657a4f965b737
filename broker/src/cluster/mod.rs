//! Cluster mode (issue #14): broker groups with one master and replicas, on etcd.
//!
//! etcd does all the consensus; this module only reads and writes keys in transactions:
//!
//! ```text
//! <prefix>/groups/<name>/epoch           "7"                        bumped by each election
//! <prefix>/groups/<name>/master          {node, epoch, advertise, replication}, on the master's lease
//! <prefix>/groups/<name>/sync_state_set  {epoch, members: [node ids]}
//! <prefix>/groups/<name>/nodes/<id>      {node, advertise, replication}, on the node's own lease
//! <prefix>/groups/<name>/lag             {epoch, replicas: [{node, acked, lag_bytes, lag_ms, in_sync}]},
//!                                        written by the master about once a second, on its lease
//! ```
//!
//! - **Election** ([`node`]): a node that sees no master key, and is a member of the
//!   SyncStateSet (or the group has none yet), runs one etcd transaction: *if* the master key
//!   does not exist *and* the epoch key is still the revision it read, *then* write epoch+1,
//!   the master key on its lease, and a SyncStateSet of itself. The winner promotes its core
//!   ([`rocklet_core::Broker::promote`]) with that epoch, which the log records.
//! - **Fencing by deadline**: the master renews its lease every quarter TTL. Its deadline is
//!   the send time of the last renewal that etcd answered, plus the TTL, less a margin: etcd
//!   cannot expire the lease before it. Past the deadline the master releases no reply
//!   (replication acknowledgements are refused) and the process exits (crash-only), so
//!   no write is acknowledged once another master can exist.
//! - **Replication** ([`replication`]): replicas pull the master's log bytes over a TCP
//!   stream; each chunk is applied through the core's recovery path
//!   ([`rocklet_core::Broker::apply_replicated`]), synced, then acknowledged.
//! - **SyncStateSet**: a write is acknowledged (sync mode) once every member of the set holds
//!   it durably and the set has at least `min_in_sync_replicas` members, the master included
//!   (RocketMQ's allAckInSyncStateSet). So every member holds every acknowledged record, and
//!   only a member may be elected. The master drops a member that lags more than
//!   `replica_max_lag_ms` (writing the smaller set to etcd *before* it acknowledges without
//!   it) and adds a replica back once it holds the whole log.
//! - **Divergent tail**: a replica that connects sends its epochs; the master answers with
//!   the last offset both histories share ([`rocklet_core::common_prefix`]); the replica cuts
//!   its log there and catches up. What is cut was never in every set member, so never
//!   acknowledged.
//! - **Several groups** ([`directory`]): `<prefix>/topics/<topic>` names the groups hosting
//!   a topic's queues (each master registers its config's topics); routes answer with the
//!   current master of each hosting group, whichever node of whichever group is asked.

pub mod directory;
pub mod etcd;
pub mod forward;
pub mod forward_remoting;
pub mod machine;
pub mod node;
pub mod replication;
pub mod reply;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

/// How a master acknowledges writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ReplicationMode {
    /// Answered once the SyncStateSet holds the bytes (RocketMQ's SYNC_MASTER).
    #[default]
    Sync,
    /// Answered at once; replicas follow (RocketMQ's ASYNC_MASTER).
    Async,
}

/// Default lease TTL, seconds (etcd grants whole seconds).
pub const DEFAULT_LEASE_TTL_S: u64 = 2;
/// Default `min_in_sync_replicas`: 2 of 3, the master included.
pub const DEFAULT_MIN_IN_SYNC: u32 = 2;
/// Default lag after which the master drops a replica from the SyncStateSet.
pub const DEFAULT_REPLICA_MAX_LAG_MS: u64 = 2_000;
/// Default key prefix in etcd.
pub const DEFAULT_PREFIX: &str = "/rocklet";

/// `[cluster]` in the TOML file, every field optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterFileConfig {
    pub etcd: Vec<String>,
    pub broker_name: Option<String>,
    pub node_id: Option<u32>,
    pub advertise: Option<SocketAddr>,
    pub replication_listen: Option<SocketAddr>,
    pub replication_advertise: Option<SocketAddr>,
    pub replication: Option<ReplicationMode>,
    pub min_in_sync_replicas: Option<u32>,
    pub lease_ttl_s: Option<u64>,
    pub replica_max_lag_ms: Option<u64>,
    pub prefix: Option<String>,
}

/// What cluster mode runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// etcd endpoints (`http://HOST:PORT`).
    pub etcd: Vec<String>,
    /// The broker group's name (RocketMQ's brokerName).
    pub broker_name: String,
    /// This node's id in the group.
    pub node_id: u32,
    /// The gRPC address clients are sent to when this node is master (default: `listen`).
    pub advertise: Option<SocketAddr>,
    /// Where this node serves its log to replicas when master (default: `listen`'s IP, a
    /// free port; the address is published in etcd).
    pub replication_listen: Option<SocketAddr>,
    /// The replication address published in etcd, for replicas to connect to (default: the
    /// address bound; differs behind a proxy or NAT).
    pub replication_advertise: Option<SocketAddr>,
    pub replication: ReplicationMode,
    /// Nodes that must hold a write before it is answered (sync mode), the master included.
    pub min_in_sync_replicas: u32,
    pub lease_ttl_s: u64,
    pub replica_max_lag_ms: u64,
    pub prefix: String,
}

impl ClusterConfig {
    /// From the file's `[cluster]`, `None` when it names no etcd endpoint.
    pub fn from_file(f: ClusterFileConfig) -> Result<Option<Self>, String> {
        if f.etcd.is_empty() {
            if f.broker_name.is_some() || f.node_id.is_some() {
                return Err("invalid config `cluster`: `etcd` names no endpoint".into());
            }
            return Ok(None);
        }
        let c = ClusterConfig {
            etcd: f.etcd,
            broker_name: f
                .broker_name
                .ok_or("invalid config `cluster.broker_name`: missing")?,
            node_id: f
                .node_id
                .ok_or("invalid config `cluster.node_id`: missing")?,
            advertise: f.advertise,
            replication_listen: f.replication_listen,
            replication_advertise: f.replication_advertise,
            replication: f.replication.unwrap_or_default(),
            min_in_sync_replicas: f.min_in_sync_replicas.unwrap_or(DEFAULT_MIN_IN_SYNC),
            lease_ttl_s: f.lease_ttl_s.unwrap_or(DEFAULT_LEASE_TTL_S),
            replica_max_lag_ms: f.replica_max_lag_ms.unwrap_or(DEFAULT_REPLICA_MAX_LAG_MS),
            prefix: f.prefix.unwrap_or_else(|| DEFAULT_PREFIX.into()),
        };
        c.validate()?;
        Ok(Some(c))
    }

    /// Parses `--cluster etcd=URL[,URL…]`.
    pub fn parse_endpoints(s: &str) -> Result<Vec<String>, String> {
        let rest = s.strip_prefix("etcd=").ok_or_else(|| {
            format!("invalid --cluster `{s}`: expected etcd=http://HOST:PORT[,http://HOST:PORT…]")
        })?;
        let v: Vec<String> = rest
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_string)
            .collect();
        if v.is_empty() {
            return Err(format!("invalid --cluster `{s}`: no etcd endpoint"));
        }
        for e in &v {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(format!(
                    "invalid --cluster endpoint `{e}`: expected http://HOST:PORT"
                ));
            }
        }
        Ok(v)
    }

    /// Checks what cannot work, naming the field.
    pub fn validate(&self) -> Result<(), String> {
        rocklet_core::topic::validate_group(&self.broker_name)
            .map_err(|e| format!("invalid config `cluster.broker_name`: {e}"))?;
        if self.broker_name.contains('/') {
            return Err("invalid config `cluster.broker_name`: must not contain `/`".into());
        }
        if self.min_in_sync_replicas == 0 {
            return Err(
                "invalid config `cluster.min_in_sync_replicas`: must be at least 1 (the master)"
                    .into(),
            );
        }
        if self.lease_ttl_s < 2 {
            return Err("invalid config `cluster.lease_ttl_s`: must be at least 2 (etcd grants whole seconds; the master fences itself a margin before expiry)".into());
        }
        if self.replica_max_lag_ms == 0 {
            return Err("invalid config `cluster.replica_max_lag_ms`: must be above 0".into());
        }
        if let Some(a) = self.replication_advertise {
            if a.ip().is_unspecified() || a.port() == 0 {
                return Err(format!("invalid config `cluster.replication_advertise` `{a}`: replicas connect to it, so it needs a concrete IP and a port other than 0"));
            }
        }
        if !self.prefix.starts_with('/') {
            return Err("invalid config `cluster.prefix`: must start with `/`".into());
        }
        Ok(())
    }

    /// The group's keys.
    #[must_use]
    pub fn keys(&self) -> Keys {
        Keys::new(&self.prefix, &self.broker_name)
    }
}

/// Keys of one broker group in etcd.
#[derive(Clone, Debug)]
pub struct Keys {
    pub lag: String,
    /// A handoff asked of the master (`rocklet admin cluster handoff`).
    pub handoff: String,
    /// The master's answer to the last handoff asked.
    pub handoff_result: String,
    pub epoch: String,
    pub master: String,
    pub sync_state_set: String,
    pub nodes: String,
}

impl Keys {
    #[must_use]
    pub fn new(prefix: &str, group: &str) -> Self {
        let g = format!("{}/groups/{group}", prefix.trim_end_matches('/'));
        Keys {
            lag: format!("{g}/lag"),
            handoff: format!("{g}/handoff"),
            handoff_result: format!("{g}/handoff_result"),
            epoch: format!("{g}/epoch"),
            master: format!("{g}/master"),
            sync_state_set: format!("{g}/sync_state_set"),
            nodes: format!("{g}/nodes/"),
        }
    }

    #[must_use]
    pub fn node(&self, id: u32) -> String {
        format!("{}{id}", self.nodes)
    }
}

/// The master key's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MasterInfo {
    pub node: u32,
    pub epoch: u64,
    /// gRPC address for clients.
    pub advertise: SocketAddr,
    /// Replication address for replicas.
    pub replication: SocketAddr,
    /// RocketMQ 4 remoting address (v4 clients), when the master serves it.
    #[serde(default)]
    pub remoting: Option<SocketAddr>,
}

/// A node key's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub node: u32,
    pub advertise: SocketAddr,
    pub replication: SocketAddr,
    /// RocketMQ 4 remoting address, when the node serves it (mqadmin clusterList lists it).
    #[serde(default)]
    pub remoting: Option<SocketAddr>,
}

/// The SyncStateSet key's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncStateSet {
    /// The epoch of the master that wrote it.
    pub epoch: u64,
    pub members: Vec<u32>,
}

/// What this node knows of its group, shared with the services (routes) and metrics.
#[derive(Debug, Default)]
pub struct ClusterView {
    /// The current master as last read from etcd.
    pub master: RwLock<Option<MasterInfo>>,
    /// The SyncStateSet as last read or written.
    pub sync_state_set: RwLock<Option<SyncStateSet>>,
    /// Per replica (master only): node id, bytes behind, ms since it last held the whole log.
    pub replicas: RwLock<Vec<ReplicaLag>>,
    /// Elections this node won.
    pub elections: AtomicU64,
    /// Times this node fenced itself (lease not renewed in time, or a newer master seen).
    pub fencing_events: AtomicU64,
    /// This node's epoch as master (0: not master).
    pub master_epoch: AtomicU64,
    /// `min_in_sync_replicas` of the group's config, for the metric an alert compares the
    /// SyncStateSet with.
    pub min_in_sync_replicas: AtomicU64,
    /// Channels to the master, for writes that reach a replica ([`forward`]).
    pub forward: forward::Forwarder,
    /// Connections to the master, for RocketMQ 4 remoting writes that reach a replica
    /// ([`forward_remoting`]).
    pub forward_remoting: forward_remoting::RemotingForwarder,
    /// A handoff asked of this node as master by its own process (SIGTERM).
    pub handoff: node::HandoffSlot,
    /// Topic placements and the other groups' masters ([`directory`]), set when the node
    /// starts.
    pub directory: std::sync::OnceLock<directory::Directory>,
}

/// The lag key's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LagReport {
    pub epoch: u64,
    pub replicas: Vec<ReplicaLag>,
}

/// One replica's lag, as the master sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaLag {
    pub node: u32,
    pub acked: u64,
    pub lag_bytes: u64,
    pub lag_ms: u64,
    pub in_sync: bool,
}

impl ClusterView {
    /// The current master, if known.
    #[must_use]
    pub fn master(&self) -> Option<MasterInfo> {
        self.master.read().map(|m| m.clone()).unwrap_or(None)
    }

    /// Members of the SyncStateSet (0 when unknown).
    #[must_use]
    pub fn in_sync_count(&self) -> usize {
        self.sync_state_set
            .read()
            .ok()
            .and_then(|s| s.as_ref().map(|s| s.members.len()))
            .unwrap_or(0)
    }

    /// Whether this node is master.
    #[must_use]
    pub fn is_master(&self) -> bool {
        self.master_epoch.load(Ordering::Relaxed) > 0
    }
}

/// A handle to what cluster mode shares.
pub type View = Arc<ClusterView>;

/// Milliseconds of a monotonic clock (since this process first asked), the time the
/// cluster's decisions ([`machine`]) are made in: the lease deadline must not move with the
/// wall clock.
#[must_use]
pub fn monotonic_ms() -> machine::Millis {
    static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    BASE.get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// Prometheus text for cluster mode: elections, fencing events, the in-sync count, and each
/// replica's lag in bytes and ms (as its master sees it).
pub fn render_metrics(v: &ClusterView, out: &mut String) {
    use std::fmt::Write;
    let mut one = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    one(
        "rocklet_cluster_elections_total",
        "counter",
        "Elections this node won",
        v.elections.load(Ordering::Relaxed),
    );
    one(
        "rocklet_cluster_fencing_events_total",
        "counter",
        "Times this node fenced itself as master",
        v.fencing_events.load(Ordering::Relaxed),
    );
    one(
        "rocklet_cluster_master_epoch",
        "gauge",
        "This node's epoch as master (0: a replica)",
        v.master_epoch.load(Ordering::Relaxed),
    );
    one(
        "rocklet_cluster_in_sync_replicas",
        "gauge",
        "Members of the SyncStateSet, the master included",
        v.in_sync_count() as u64,
    );
    one(
        "rocklet_cluster_min_in_sync_replicas",
        "gauge",
        "min_in_sync_replicas: with fewer members in the SyncStateSet the master acknowledges no write (sync replication)",
        v.min_in_sync_replicas.load(Ordering::Relaxed),
    );
    let lags = v.replicas.read().map(|r| r.clone()).unwrap_or_default();
    let _ = writeln!(
        out,
        "# HELP rocklet_cluster_replication_lag_bytes Bytes of log a replica does not hold yet (master only)\n# TYPE rocklet_cluster_replication_lag_bytes gauge"
    );
    for l in &lags {
        let _ = writeln!(
            out,
            "rocklet_cluster_replication_lag_bytes{{replica=\"{}\"}} {}",
            l.node, l.lag_bytes
        );
    }
    let _ = writeln!(
        out,
        "# HELP rocklet_cluster_replication_lag_ms Since a replica last held the whole log, ms (master only)\n# TYPE rocklet_cluster_replication_lag_ms gauge"
    );
    for l in &lags {
        let _ = writeln!(
            out,
            "rocklet_cluster_replication_lag_ms{{replica=\"{}\"}} {}",
            l.node, l.lag_ms
        );
    }
}

/// `rocklet admin cluster`: every broker group under `prefix` in etcd — its master and epoch,
/// the SyncStateSet, the live nodes and each replica's lag as its master last reported it —
/// then each topic's placement (the groups hosting its queues).
pub async fn describe(etcd: &[String], prefix: &str) -> Result<String, String> {
    use std::collections::BTreeMap;
    use std::fmt::Write;
    let mut c = etcd::Etcd::connect(etcd, 0)
        .await
        .map_err(|e| e.to_string())?;
    let root = format!("{}/groups/", prefix.trim_end_matches('/'));
    let kvs = c.list(&root).await.map_err(|e| e.to_string())?;
    let mut groups: BTreeMap<String, BTreeMap<String, Vec<u8>>> = BTreeMap::new();
    for (k, v) in kvs {
        let rest = &k[root.len()..];
        if let Some((g, key)) = rest.split_once('/') {
            groups
                .entry(g.to_string())
                .or_default()
                .insert(key.to_string(), v);
        }
    }
    let mut out = String::new();
    if groups.is_empty() {
        let _ = writeln!(out, "no broker group under {root}");
    }
    for (g, keys) in &groups {
        let text = |k: &str| keys.get(k).map(|v| String::from_utf8_lossy(v).into_owned());
        let master: Option<MasterInfo> = keys
            .get("master")
            .and_then(|v| serde_json::from_slice(v).ok());
        let set: Option<SyncStateSet> = keys
            .get("sync_state_set")
            .and_then(|v| serde_json::from_slice(v).ok());
        let lag: Option<LagReport> = keys.get("lag").and_then(|v| serde_json::from_slice(v).ok());
        let _ = writeln!(out, "group {g}");
        let _ = writeln!(
            out,
            "  epoch            {}",
            text("epoch").unwrap_or_else(|| "-".into())
        );
        match &master {
            Some(m) => {
                let _ = writeln!(
                    out,
                    "  master           node {} (epoch {}) at {}, replication {}",
                    m.node, m.epoch, m.advertise, m.replication
                );
            }
            None => {
                let _ = writeln!(out, "  master           none (an election is due)");
            }
        }
        if let Some(s) = &set {
            let _ = writeln!(
                out,
                "  sync_state_set   {:?} (written in epoch {})",
                s.members, s.epoch
            );
        }
        for (k, v) in keys.iter().filter(|(k, _)| k.starts_with("nodes/")) {
            if let Ok(n) = serde_json::from_slice::<NodeInfo>(v) {
                let _ = writeln!(
                    out,
                    "  node {:<11} live at {}, replication {}{}",
                    n.node,
                    n.advertise,
                    n.replication,
                    if master.as_ref().is_some_and(|m| m.node == n.node) {
                        " (master)"
                    } else {
                        ""
                    }
                );
            } else {
                let _ = writeln!(out, "  {k}: unreadable");
            }
        }
        if let Some(l) = lag.filter(|l| master.as_ref().is_some_and(|m| m.epoch == l.epoch)) {
            for r in &l.replicas {
                let _ = writeln!(
                    out,
                    "  replica {:<8} acked {} lag {} B {} ms{}",
                    r.node,
                    r.acked,
                    r.lag_bytes,
                    r.lag_ms,
                    if r.in_sync { " in sync" } else { "" }
                );
            }
        }
    }
    // Topic placements: the groups hosting each topic's queues, with whether each has a
    // master now.
    let troot = directory::topics_root(prefix);
    let placed = c.list(&troot).await.map_err(|e| e.to_string())?;
    for (k, v) in placed {
        let topic = &k[troot.len()..];
        match serde_json::from_slice::<directory::Placement>(&v) {
            Ok(p) => {
                let parts: Vec<String> = p
                    .groups
                    .iter()
                    .map(|g| {
                        let up = groups
                            .get(&g.name)
                            .is_some_and(|keys| keys.contains_key("master"));
                        format!(
                            "{} ({} queues{})",
                            g.name,
                            g.queues,
                            if up { "" } else { ", no master now" }
                        )
                    })
                    .collect();
                let _ = writeln!(out, "topic {topic:<11} on {}", parts.join(", "));
            }
            Err(e) => {
                let _ = writeln!(out, "topic {topic}: unreadable placement ({e})");
            }
        }
    }
    Ok(out)
}

/// `rocklet admin cluster handoff`: asks group `group`'s master, through etcd, to hand
/// mastership to `to` (or the most advanced member of its SyncStateSet) and waits for its
/// answer and the new master. Refuses at once when `to` is not an in-sync replica.
pub async fn handoff(
    etcd: &[String],
    prefix: &str,
    group: &str,
    to: Option<u32>,
) -> Result<String, String> {
    use std::time::{Duration, Instant};
    let keys = Keys::new(prefix, group);
    let mut c = etcd::Etcd::connect(etcd, 0)
        .await
        .map_err(|e| e.to_string())?;
    let master: MasterInfo = match c.get(&keys.master).await.map_err(|e| e.to_string())? {
        Some(kv) => serde_json::from_slice(&kv.value)
            .map_err(|e| format!("group `{group}`: unreadable master key: {e}"))?,
        None => {
            return Err(format!(
                "group `{group}` has no master under {prefix} now (no such group, or an election is due): nothing to hand over"
            ))
        }
    };
    let set: Vec<u32> = match c
        .get(&keys.sync_state_set)
        .await
        .map_err(|e| e.to_string())?
    {
        Some(kv) => serde_json::from_slice::<SyncStateSet>(&kv.value)
            .map(|s| s.members)
            .unwrap_or_default(),
        None => Vec::new(),
    };
    match to {
        Some(n) if n == master.node => {
            return Err(format!("group `{group}`: node {n} is the master already"))
        }
        Some(n) if !set.contains(&n) => {
            return Err(format!(
                "group `{group}`: node {n} is not in the SyncStateSet {set:?}: only an in-sync replica holds every acknowledged write"
            ))
        }
        None if !set.iter().any(|&n| n != master.node) => {
            return Err(format!(
                "group `{group}`: the SyncStateSet {set:?} has no replica to hand over to"
            ))
        }
        _ => {}
    }
    let id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let req = node::HandoffRequest {
        id: id.clone(),
        epoch: master.epoch,
        to,
    };
    c.put(
        &keys.handoff,
        serde_json::to_vec(&req).expect("serializes"),
        0,
    )
    .await
    .map_err(|e| e.to_string())?;
    let within = node::HANDOFF_CATCH_UP + Duration::from_secs(8);
    let deadline = Instant::now() + within;
    let answer = loop {
        if let Ok(Some(kv)) = c.get(&keys.handoff_result).await {
            if let Ok(r) = serde_json::from_slice::<node::HandoffResult>(&kv.value) {
                if r.id == id {
                    break r;
                }
            }
        }
        if Instant::now() >= deadline {
            // Withdrawn, unless the master has taken it meanwhile.
            let when = vec![etcd::value_is(
                &keys.handoff,
                &serde_json::to_vec(&req).expect("serializes"),
            )];
            let _ = c.txn(when, vec![etcd::delete(&keys.handoff)]).await;
            return Err(format!(
                "group `{group}`: no answer from the master (node {}, epoch {}) within {within:?}; the request is withdrawn",
                master.node, master.epoch
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let target = answer
        .result
        .map_err(|e| format!("group `{group}`: node {} stays master: {e}", answer.from))?;
    // The new master, elected in the next epoch.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(Some(kv)) = c.get(&keys.master).await {
            if let Ok(m) = serde_json::from_slice::<MasterInfo>(&kv.value) {
                if m.epoch > master.epoch {
                    return Ok(format!(
                        "group {group}: node {} handed mastership to node {target}; node {} is master in epoch {}\n",
                        master.node, m.node, m.epoch
                    ));
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "group `{group}`: node {} handed mastership to node {target}, but no new master is in etcd after 5 s",
                master.node
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(extra: &str) -> Result<Option<ClusterConfig>, String> {
        let text = format!(
            "etcd = [\"http://127.0.0.1:2379\"]\nbroker_name = \"g1\"\nnode_id = 1\n{extra}"
        );
        let f: ClusterFileConfig = toml::from_str(&text).map_err(|e| e.to_string())?;
        ClusterConfig::from_file(f)
    }

    #[test]
    fn replication_advertise_is_read_and_checked() {
        let c = file("replication_advertise = \"127.0.0.1:7001\"")
            .unwrap()
            .unwrap();
        assert_eq!(
            c.replication_advertise,
            Some("127.0.0.1:7001".parse().unwrap())
        );
        assert_eq!(file("").unwrap().unwrap().replication_advertise, None);
        for bad in ["0.0.0.0:7001", "127.0.0.1:0"] {
            let e = file(&format!("replication_advertise = \"{bad}\"")).unwrap_err();
            assert!(
                e.contains("cluster.replication_advertise") && e.contains(bad),
                "{e}"
            );
        }
    }
}
