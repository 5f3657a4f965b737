//! Several broker groups (issue #14, item 7): where each topic's queues live, and the
//! masters of the other groups, read from etcd.
//!
//! ```text
//! <prefix>/topics/<topic>   {"groups": [{"name": "g1", "queues": 8}, …]}
//! ```
//!
//! A node that becomes master registers every topic of its config under its group
//! ([`register`]: read, merge its own entry, put only if the key's revision is unchanged;
//! retried), on its own task and connection, so elections and fencing never wait on it.
//! Routes read placements and the other groups' masters through a [`Directory`]: a bounded
//! cache, each entry read again from etcd when older than [`FRESH`]. A topic with no
//! placement is routed as before (this group only); so is any topic while etcd cannot be
//! read and nothing is cached.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::etcd::{self, Etcd, EtcdError};
use super::{Keys, MasterInfo, NodeInfo};

/// How long a cached placement or master is used before it is read again.
pub const FRESH: Duration = Duration::from_secs(1);
/// The most topics (and, apart, groups) the cache holds.
pub const MAX_CACHED: usize = 4096;
/// Attempts of the revision-checked write of one placement.
const REGISTER_TRIES: usize = 5;

/// One group's share of a topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupQueues {
    pub name: String,
    pub queues: u32,
}

/// A topic key's value: the groups hosting the topic's queues.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub groups: Vec<GroupQueues>,
}

impl Placement {
    /// `self` with `group` hosting `queues` (replacing its former entry); whether it changed.
    pub fn merge(&mut self, group: &str, queues: u32) -> bool {
        match self.groups.iter_mut().find(|g| g.name == group) {
            Some(g) if g.queues == queues => false,
            Some(g) => {
                g.queues = queues;
                true
            }
            None => {
                self.groups.push(GroupQueues {
                    name: group.into(),
                    queues,
                });
                self.groups.sort_by(|a, b| a.name.cmp(&b.name));
                true
            }
        }
    }
}

/// The key of `topic`'s placement.
#[must_use]
pub fn topic_key(prefix: &str, topic: &str) -> String {
    format!("{}/topics/{topic}", prefix.trim_end_matches('/'))
}

/// The key prefix of every placement.
#[must_use]
pub fn topics_root(prefix: &str) -> String {
    format!("{}/topics/", prefix.trim_end_matches('/'))
}

/// Writes `group` hosting `queues` of `topic` into its placement, if not there already.
pub async fn register_one(
    c: &mut Etcd,
    prefix: &str,
    topic: &str,
    group: &str,
    queues: u32,
) -> Result<(), String> {
    let key = topic_key(prefix, topic);
    for _ in 0..REGISTER_TRIES {
        let kv = c.get(&key).await.map_err(|e| e.to_string())?;
        let (mut p, when) = match kv {
            Some(kv) => (
                serde_json::from_slice::<Placement>(&kv.value).map_err(|e| {
                    format!("the placement at `{key}` is not readable ({e}); left as is")
                })?,
                etcd::mod_revision_is(&key, kv.mod_revision),
            ),
            None => (Placement::default(), etcd::version_is(&key, 0)),
        };
        if !p.merge(group, queues) {
            return Ok(());
        }
        let value = serde_json::to_vec(&p).expect("serializes");
        if c.txn(vec![when], vec![etcd::put(&key, value, 0)])
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(());
        }
        // Another group wrote it meanwhile: read again.
    }
    Err(format!(
        "the placement at `{key}` kept changing; gave up after {REGISTER_TRIES} tries"
    ))
}

/// Registers `topics` (name, queues) under `group`, on a connection of its own.
pub async fn register(
    etcd: Vec<String>,
    prefix: String,
    group: String,
    topics: Vec<(String, u32)>,
) {
    if topics.is_empty() {
        return;
    }
    let mut c = match Etcd::connect(&etcd, 0).await {
        Ok(c) => c,
        Err(e) => {
            warn!(error = %e, "cannot register the topics' placements");
            return;
        }
    };
    for (t, q) in topics {
        match register_one(&mut c, &prefix, &t, &group, q).await {
            Ok(()) => info!(topic = %t, group = %group, queues = q, "topic placement registered"),
            Err(e) => warn!(topic = %t, error = %e, "topic placement not registered"),
        }
    }
}

/// One group of a route: its name, queues, and its master now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteGroup {
    pub name: String,
    pub queues: u32,
    pub master: Option<MasterInfo>,
}

#[derive(Debug, Default)]
struct Cache {
    topics: Table<Placement>,
    masters: Table<MasterInfo>,
}

/// Entries by name, each with when it was read (`None`: etcd holds none).
type Table<T> = HashMap<String, (Instant, Option<T>)>;

fn bound<V>(m: &mut HashMap<String, (Instant, V)>) {
    if m.len() >= MAX_CACHED {
        m.retain(|_, (at, _)| at.elapsed() < FRESH);
        if m.len() >= MAX_CACHED {
            m.clear();
        }
    }
}

/// Placements and other groups' masters, cached ([`FRESH`], [`MAX_CACHED`]).
#[derive(Debug)]
pub struct Directory {
    etcd: Vec<String>,
    prefix: String,
    /// This node's group (its master comes from the node's own view).
    pub group: String,
    conn: tokio::sync::Mutex<Option<Etcd>>,
    cache: Mutex<Cache>,
    /// When a read last failed: for [`FRESH`] after it, lookups use what is cached without
    /// asking etcd (so routes do not each wait out a timeout while etcd is unreachable).
    failed_at: Mutex<Option<Instant>>,
}

impl Directory {
    #[must_use]
    pub fn new(etcd: Vec<String>, prefix: String, group: String) -> Self {
        Directory {
            etcd,
            prefix,
            group,
            conn: tokio::sync::Mutex::new(None),
            cache: Mutex::new(Cache::default()),
            failed_at: Mutex::new(None),
        }
    }

    /// `key`'s value; `Err(None)` when not asked (a read failed less than [`FRESH`] ago).
    async fn read<T: for<'de> Deserialize<'de>>(
        &self,
        key: &str,
    ) -> Result<Option<T>, Option<EtcdError>> {
        let recent = self
            .failed_at
            .lock()
            .ok()
            .and_then(|f| *f)
            .is_some_and(|at| at.elapsed() < FRESH);
        if recent {
            return Err(None);
        }
        let mut conn = self.conn.lock().await;
        let got = match conn.as_mut() {
            Some(c) => c.get(key).await,
            None => match Etcd::connect(&self.etcd, 0).await {
                Ok(mut c) => {
                    let r = c.get(key).await;
                    *conn = Some(c);
                    r
                }
                Err(e) => Err(e),
            },
        };
        match got {
            Ok(kv) => Ok(kv.and_then(|kv| serde_json::from_slice(&kv.value).ok())),
            Err(e) => {
                // Connect again next time (maybe to another member).
                *conn = None;
                if let Ok(mut f) = self.failed_at.lock() {
                    *f = Some(Instant::now());
                }
                Err(Some(e))
            }
        }
    }

    /// `topic`'s placement: cached if fresh, else read (a stale entry is used while etcd
    /// cannot be read; `None` when there is none or nothing is known).
    pub async fn placement(&self, topic: &str) -> Option<Placement> {
        let key = topic_key(&self.prefix, topic);
        self.cached(|c| &mut c.topics, topic, &key, "the topic's placement")
            .await
    }

    /// Group `g`'s master (cached if fresh, else read; stale while etcd cannot be read).
    pub async fn master(&self, g: &str) -> Option<MasterInfo> {
        let key = Keys::new(&self.prefix, g).master;
        self.cached(|c| &mut c.masters, g, &key, "the group's master")
            .await
    }

    /// The entry `name` of the cache `table` picks: fresh from the cache, else read from
    /// `key` (a stale entry while etcd cannot be read).
    async fn cached<T: Clone + for<'de> Deserialize<'de>>(
        &self,
        table: fn(&mut Cache) -> &mut Table<T>,
        name: &str,
        key: &str,
        what: &str,
    ) -> Option<T> {
        if let Some((at, v)) = table(&mut *self.cache.lock().ok()?).get(name) {
            if at.elapsed() < FRESH {
                return v.clone();
            }
        }
        match self.read::<T>(key).await {
            Ok(v) => {
                let mut c = self.cache.lock().ok()?;
                let t = table(&mut c);
                bound(t);
                t.insert(name.into(), (Instant::now(), v.clone()));
                v
            }
            Err(e) => {
                if let Some(e) = e {
                    warn!(name, error = %e, "cannot read {what}");
                }
                table(&mut *self.cache.lock().ok()?)
                    .get(name)
                    .and_then(|e| e.1.clone())
            }
        }
    }

    /// The groups hosting `topic` with their masters, `None` for a topic with no placement.
    /// `own` is this group's master as the node knows it.
    pub async fn route(&self, topic: &str, own: Option<MasterInfo>) -> Option<Vec<RouteGroup>> {
        rocklet_core::topic::validate_name(topic).ok()?;
        let p = self.placement(topic).await?;
        if p.groups.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(p.groups.len());
        for g in p.groups {
            let master = if g.name == self.group {
                own.clone()
            } else {
                self.master(&g.name).await
            };
            out.push(RouteGroup {
                name: g.name,
                queues: g.queues.max(1),
                master,
            });
        }
        Some(out)
    }
}

/// One broker group as etcd has it now: its master and its live nodes (their node keys,
/// which expire with their leases).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupNodes {
    pub name: String,
    pub master: Option<MasterInfo>,
    pub nodes: Vec<NodeInfo>,
}

/// The groups under `root` (`<prefix>/groups/`) from its keys and values, by name; keys
/// that do not parse are left out.
#[must_use]
pub fn group_nodes(root: &str, kvs: Vec<(String, Vec<u8>)>) -> Vec<GroupNodes> {
    let mut groups: std::collections::BTreeMap<String, GroupNodes> = Default::default();
    for (k, v) in kvs {
        let Some((g, key)) = k.strip_prefix(root).and_then(|r| r.split_once('/')) else {
            continue;
        };
        let e = groups.entry(g.to_string()).or_insert_with(|| GroupNodes {
            name: g.to_string(),
            master: None,
            nodes: Vec::new(),
        });
        if key == "master" {
            e.master = serde_json::from_slice(&v).ok();
        } else if key.starts_with("nodes/") {
            e.nodes.extend(serde_json::from_slice::<NodeInfo>(&v).ok());
        }
    }
    groups.into_values().collect()
}

impl Directory {
    /// Every broker group under the prefix with its master and live nodes, read from etcd
    /// now (mqadmin clusterList): one range read, not cached.
    pub async fn groups(&self) -> Result<Vec<GroupNodes>, EtcdError> {
        let root = format!("{}/groups/", self.prefix.trim_end_matches('/'));
        let mut conn = self.conn.lock().await;
        if conn.is_none() {
            *conn = Some(Etcd::connect(&self.etcd, 0).await?);
        }
        let Some(c) = conn.as_mut() else {
            return Err(EtcdError("no connection".into()));
        };
        match c.list(&root).await {
            Ok(kvs) => Ok(group_nodes(&root, kvs)),
            Err(e) => {
                // Connect again next time (maybe to another member).
                *conn = None;
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_nodes_reads_masters_and_live_nodes() {
        let root = "/rocklet/groups/";
        let node = |n: u32| NodeInfo {
            node: n,
            advertise: format!("127.0.0.1:{}", 9000 + n).parse().unwrap(),
            replication: format!("127.0.0.1:{}", 9100 + n).parse().unwrap(),
            remoting: Some(format!("127.0.0.1:{}", 9200 + n).parse().unwrap()),
        };
        let master = MasterInfo {
            node: 2,
            epoch: 3,
            advertise: "127.0.0.1:9002".parse().unwrap(),
            replication: "127.0.0.1:9102".parse().unwrap(),
            remoting: Some("127.0.0.1:9202".parse().unwrap()),
        };
        let kvs = vec![
            (
                format!("{root}g1/master"),
                serde_json::to_vec(&master).unwrap(),
            ),
            (
                format!("{root}g1/nodes/1"),
                serde_json::to_vec(&node(1)).unwrap(),
            ),
            (
                format!("{root}g1/nodes/2"),
                serde_json::to_vec(&node(2)).unwrap(),
            ),
            (format!("{root}g1/epoch"), b"3".to_vec()),
            (format!("{root}g2/nodes/7"), b"not json".to_vec()),
            (
                format!("{root}g2/nodes/8"),
                serde_json::to_vec(&node(8)).unwrap(),
            ),
        ];
        let g = group_nodes(root, kvs);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].name, "g1");
        assert_eq!(g[0].master, Some(master));
        assert_eq!(g[0].nodes, vec![node(1), node(2)]);
        assert_eq!(g[1].name, "g2");
        assert_eq!(g[1].master, None);
        assert_eq!(g[1].nodes, vec![node(8)]);
    }

    #[test]
    fn merge_adds_replaces_and_keeps_order() {
        let mut p = Placement::default();
        assert!(p.merge("g2", 4));
        assert!(p.merge("g1", 8));
        assert!(!p.merge("g1", 8));
        assert!(p.merge("g2", 2));
        let names: Vec<(&str, u32)> = p
            .groups
            .iter()
            .map(|g| (g.name.as_str(), g.queues))
            .collect();
        assert_eq!(names, [("g1", 8), ("g2", 2)]);
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(
            text,
            r#"{"groups":[{"name":"g1","queues":8},{"name":"g2","queues":2}]}"#
        );
    }

    #[test]
    fn the_cache_stays_bounded() {
        let mut m: HashMap<String, (Instant, ())> = HashMap::new();
        let old = Instant::now() - 2 * FRESH;
        for i in 0..MAX_CACHED {
            bound(&mut m);
            let at = if i % 2 == 0 { old } else { Instant::now() };
            m.insert(i.to_string(), (at, ()));
        }
        assert_eq!(m.len(), MAX_CACHED);
        // Full: the stale half goes, the fresh half stays.
        bound(&mut m);
        assert_eq!(m.len(), MAX_CACHED / 2);
        for i in 0..MAX_CACHED {
            bound(&mut m);
            m.insert(format!("n{i}"), (Instant::now(), ()));
            assert!(m.len() <= MAX_CACHED);
        }
    }

    #[test]
    fn keys_sit_under_the_prefix() {
        assert_eq!(topic_key("/rocklet/", "t"), "/rocklet/topics/t");
        assert_eq!(topics_root("/r"), "/r/topics/");
    }
}
