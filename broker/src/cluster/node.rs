//! One node of a broker group: registration, election, fencing, following, the
//! SyncStateSet and replication acknowledgements. See the module doc of [`super`].

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use super::etcd::{self, Etcd, EtcdResult};
use super::replication::{self, FollowEnd, Replicas};
use super::{
    ClusterConfig, Keys, MasterInfo, NodeInfo, ReplicaLag, ReplicationMode, SyncStateSet, View,
};
use crate::clock::{Clock, SystemClock};
use crate::config::{GroupDecl, TopicDecl};
use crate::driver::CoreHandle;

/// Exit code of a master that fenced itself (its lease could expire, or a newer master
/// exists): a supervisor restarts it, and it comes back as a replica.
pub const FENCED_EXIT: i32 = 3;

/// How often a replica looks at the master key.
const POLL: Duration = Duration::from_millis(100);

/// How long a master handing over waits for the replica it chose to hold its whole log
/// before it gives up and stays master.
pub const HANDOFF_CATCH_UP: Duration = Duration::from_secs(2);
/// How long the old master waits for the new one to appear in etcd after a handoff.
const HANDOFF_ELECTION: Duration = Duration::from_secs(3);

/// A handoff asked of this node as master by its own process (SIGTERM), with where the
/// answer goes.
#[derive(Debug, Default)]
pub struct HandoffSlot {
    asked: std::sync::Mutex<Option<HandoffAsk>>,
    notify: Notify,
    /// The process stops: a replica stops following and campaigning.
    leaving: std::sync::atomic::AtomicBool,
}

type HandoffAsk = (Option<u32>, oneshot::Sender<Result<u32, String>>);

/// `rocklet admin cluster handoff`'s request, the handoff key's value: only the master of
/// `epoch` acts on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffRequest {
    pub id: String,
    pub epoch: u64,
    /// The replica to hand over to (default: the most advanced member of the SyncStateSet).
    pub to: Option<u32>,
}

/// The master's answer to a [`HandoffRequest`], the handoff_result key's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffResult {
    pub id: String,
    pub from: u32,
    pub epoch: u64,
    /// The node that takes over, or why the master stays.
    pub result: Result<u32, String>,
}

/// Asks this node, if it is master, to hand mastership to an in-sync replica (SIGTERM);
/// the node taking over, or why none does.
pub async fn hand_off(view: &super::ClusterView, to: Option<u32>) -> Result<u32, String> {
    if !view.is_master() {
        return Err("this node is not the master".into());
    }
    let (tx, rx) = oneshot::channel();
    *view.handoff.asked.lock().expect("not poisoned") = Some((to, tx));
    view.handoff.notify.notify_one();
    let within = HANDOFF_CATCH_UP + HANDOFF_ELECTION + Duration::from_secs(2);
    match tokio::time::timeout(within, rx).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err("the master's task ended without an answer".into()),
        Err(_) => Err(format!(
            "no answer from the master's task within {within:?}"
        )),
    }
}

/// Before the process stops (SIGTERM): a master hands mastership to an in-sync replica; a
/// replica stops following and campaigning. Whether mastership was handed over.
pub async fn before_stop(view: &super::ClusterView) -> bool {
    if view.is_master() {
        info!("stopping the master: handing mastership over first");
        match hand_off(view, None).await {
            Ok(n) => {
                info!(to = n, "mastership handed over");
                true
            }
            Err(e) => {
                warn!(error = %e, "no handoff: the group elects a master once this one's lease expires");
                false
            }
        }
    } else {
        view.handoff.leaving.store(true, Ordering::SeqCst);
        false
    }
}

/// A master's deadline: it releases nothing at or past it.
#[derive(Debug)]
pub struct Fence {
    base: Instant,
    deadline_ms: AtomicU64,
}

impl Fence {
    fn new() -> Self {
        Fence {
            base: Instant::now(),
            deadline_ms: AtomicU64::new(0),
        }
    }

    /// Moves the deadline to `at` (never back).
    fn extend(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.base).as_millis() as u64;
        self.deadline_ms.fetch_max(ms, Ordering::SeqCst);
    }

    /// Whether the lease is surely held now.
    #[must_use]
    pub fn valid(&self) -> bool {
        (self.base.elapsed().as_millis() as u64) < self.deadline_ms.load(Ordering::SeqCst)
    }
}

/// What a node needs to run.
#[derive(Debug, Clone)]
pub struct Node {
    pub cfg: ClusterConfig,
    pub core: CoreHandle,
    pub view: View,
    pub replicas: Arc<Replicas>,
    pub advertise: SocketAddr,
    pub replication: SocketAddr,
    /// This node's remoting listener, named in the master key (v4 routes).
    pub remoting: Option<SocketAddr>,
    pub max_frame: usize,
    pub topics: Vec<TopicDecl>,
    pub groups: Vec<GroupDecl>,
    pub default_queues: u32,
    keys: Keys,
}

/// Binds the replication listener and starts the node's tasks.
#[allow(clippy::too_many_arguments)]
pub async fn start(
    cfg: ClusterConfig,
    core: CoreHandle,
    view: View,
    listen: SocketAddr,
    topics: Vec<TopicDecl>,
    groups: Vec<GroupDecl>,
    default_queues: u32,
    max_frame: usize,
    remoting: Option<SocketAddr>,
) -> Result<(SocketAddr, JoinHandle<()>), String> {
    let at = cfg
        .replication_listen
        .unwrap_or_else(|| SocketAddr::new(listen.ip(), 0));
    let l = TcpListener::bind(at)
        .await
        .map_err(|e| format!("cannot listen for replication on {at}: {e}"))?;
    let bound = l.local_addr().map_err(|e| e.to_string())?;
    // What replicas are told (etcd): the bound address unless an advertised one is set.
    let replication = cfg.replication_advertise.unwrap_or(bound);
    let replicas = Arc::new(Replicas::default());
    tokio::spawn(replication::serve(
        l,
        core.clone(),
        view.clone(),
        replicas.clone(),
        max_frame,
    ));
    let _ = view.directory.set(super::directory::Directory::new(
        cfg.etcd.clone(),
        cfg.prefix.clone(),
        cfg.broker_name.clone(),
    ));
    let node = Node {
        keys: cfg.keys(),
        advertise: cfg.advertise.unwrap_or(listen),
        cfg,
        core,
        view,
        replicas,
        replication,
        remoting,
        max_frame,
        topics,
        groups,
        default_queues,
    };
    info!(broker_name = %node.cfg.broker_name, node = node.cfg.node_id, advertise = %node.advertise, %replication, replication_bound = %bound, etcd = ?node.cfg.etcd, mode = ?node.cfg.replication, "cluster mode: a replica until elected");
    Ok((bound, tokio::spawn(node.run())))
}

impl Node {
    fn ttl(&self) -> Duration {
        Duration::from_secs(self.cfg.lease_ttl_s)
    }

    /// The margin a master keeps before its lease could expire: a quarter TTL, at least
    /// 300 ms.
    fn margin(&self) -> Duration {
        (self.ttl() / 4).max(Duration::from_millis(300))
    }

    async fn run(self) {
        let mut first = 0;
        loop {
            first += 1;
            match Etcd::connect(&self.cfg.etcd, first).await {
                Ok(c) => {
                    if let Err(e) = self.session(c).await {
                        warn!(error = %e, "etcd session ended; reconnecting");
                    }
                }
                Err(e) => warn!(error = %e, etcd = ?self.cfg.etcd, "cannot reach etcd; retrying"),
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    async fn master(&self, c: &mut Etcd) -> EtcdResult<Option<(MasterInfo, i64)>> {
        let kv = c.get(&self.keys.master).await?;
        Ok(kv.and_then(|kv| {
            serde_json::from_slice(&kv.value)
                .ok()
                .map(|m| (m, kv.lease))
        }))
    }

    async fn sync_state_set(&self, c: &mut Etcd) -> EtcdResult<(Option<SyncStateSet>, i64)> {
        Ok(match c.get(&self.keys.sync_state_set).await? {
            Some(kv) => (serde_json::from_slice(&kv.value).ok(), kv.mod_revision),
            None => (None, 0),
        })
    }

    async fn session(&self, mut c: Etcd) -> EtcdResult<()> {
        let me = self.cfg.node_id;
        // This node's own key, on its own lease.
        let lease = c.grant(self.cfg.lease_ttl_s as i64).await?;
        let info = NodeInfo {
            node: me,
            advertise: self.advertise,
            replication: self.replication,
        };
        c.put(
            &self.keys.node(me),
            serde_json::to_vec(&info).expect("serializes"),
            lease,
        )
        .await?;
        let mut keeper = c.keep_alive(lease).await?;
        let ttl = self.ttl();
        let node_keeper = tokio::spawn(async move {
            loop {
                tokio::time::sleep(ttl / 3).await;
                match keeper.renew().await {
                    Ok(t) if t > 0 => {}
                    _ => break,
                }
            }
        });
        let result = self.roles(&mut c).await;
        node_keeper.abort();
        result
    }

    async fn roles(&self, c: &mut Etcd) -> EtcdResult<()> {
        let me = self.cfg.node_id;
        loop {
            if self.view.handoff.leaving.load(Ordering::SeqCst) {
                info!("stopping: no longer following nor campaigning");
                loop {
                    std::future::pending::<()>().await;
                }
            }
            let master = self.master(c).await?;
            if let Ok(mut v) = self.view.master.write() {
                *v = master.as_ref().map(|m| m.0.clone());
            }
            match master {
                None => {
                    let (set, _) = self.sync_state_set(c).await?;
                    if let Ok(mut v) = self.view.sync_state_set.write() {
                        v.clone_from(&set);
                    }
                    let eligible = set.as_ref().is_none_or(|s| s.members.contains(&me));
                    // A node that stops (SIGTERM) does not take over on its way out.
                    if eligible && !self.view.handoff.leaving.load(Ordering::SeqCst) {
                        if let Some((epoch, lease, sent)) = self.campaign(c).await? {
                            // Never returns: the master serves until it fences itself.
                            self.lead(c, epoch, lease, sent).await;
                        }
                    }
                    tokio::time::sleep(POLL).await;
                }
                Some((m, lease)) if m.node == me => {
                    // A key of this node's previous run (it held the data directory's lock,
                    // so that process is gone): end its lease so an election runs now.
                    if !self.view.is_master() {
                        info!(
                            epoch = m.epoch,
                            "the master key is this node's from before its restart; revoking it"
                        );
                        let _ = c.revoke(lease).await;
                    }
                    tokio::time::sleep(POLL).await;
                }
                Some((m, _)) => self.follow(c, m).await?,
            }
        }
    }

    /// Follows `m` until the master key changes.
    async fn follow(&self, c: &mut Etcd, m: MasterInfo) -> EtcdResult<()> {
        let core = self.core.clone();
        let (addr, me, epoch, max) = (m.replication, self.cfg.node_id, m.epoch, self.max_frame);
        let mut stream = tokio::spawn(async move {
            loop {
                match replication::follow(addr, me, epoch, &core, max).await {
                    FollowEnd::Truncated => continue,
                    FollowEnd::Failed(e) => {
                        warn!(master = %addr, epoch, error = %e, "replication stream ended");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
        let result = loop {
            tokio::select! {
                _ = &mut stream => {}
                () = tokio::time::sleep(POLL) => {}
            }
            if self.view.handoff.leaving.load(Ordering::SeqCst) {
                break Ok(());
            }
            match self.master(c).await {
                Ok(Some((now, _))) if now == m => {}
                Ok(_) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        stream.abort();
        result
    }

    /// One election: `Some((epoch, lease, when the lease was asked for))` when won.
    async fn campaign(&self, c: &mut Etcd) -> EtcdResult<Option<(u64, i64, Instant)>> {
        let me = self.cfg.node_id;
        let (epoch, rev) = match c.get(&self.keys.epoch).await? {
            Some(kv) => (
                std::str::from_utf8(&kv.value)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0),
                kv.mod_revision,
            ),
            None => (0, 0),
        };
        let (_, set_rev) = self.sync_state_set(c).await?;
        let log_last = self
            .core
            .inspect(|b| b.epochs().last().map_or(0, |e| e.0))
            .await
            .unwrap_or(0);
        let next = epoch.max(log_last) + 1;
        let sent = Instant::now();
        let lease = c.grant(self.cfg.lease_ttl_s as i64).await?;
        let info = MasterInfo {
            node: me,
            epoch: next,
            advertise: self.advertise,
            replication: self.replication,
            remoting: self.remoting,
        };
        let set = SyncStateSet {
            epoch: next,
            members: vec![me],
        };
        let same = |key: &str, rev: i64| {
            if rev == 0 {
                etcd::version_is(key, 0)
            } else {
                etcd::mod_revision_is(key, rev)
            }
        };
        let when = vec![
            etcd::version_is(&self.keys.master, 0),
            same(&self.keys.epoch, rev),
            same(&self.keys.sync_state_set, set_rev),
        ];
        let then = vec![
            etcd::put(&self.keys.epoch, next.to_string().into_bytes(), 0),
            etcd::put(
                &self.keys.master,
                serde_json::to_vec(&info).expect("serializes"),
                lease,
            ),
            etcd::put(
                &self.keys.sync_state_set,
                serde_json::to_vec(&set).expect("serializes"),
                0,
            ),
        ];
        if c.txn(when, then).await? {
            Ok(Some((next, lease, sent)))
        } else {
            let _ = c.revoke(lease).await;
            Ok(None)
        }
    }

    /// Hands mastership to `to`, or to the most advanced replica of `set`: this master stops
    /// acknowledging (the caller, the lead loop, releases nothing meanwhile), waits until the
    /// replica holds its whole log (at most [`HANDOFF_CATCH_UP`]), then one etcd transaction
    /// — *if* the master key and the epoch are still this master's — deletes the master key
    /// and makes the replica the SyncStateSet alone, so it is the only node that may be
    /// elected, in a new epoch. `Err`: why it stays master (acknowledging again).
    async fn hand_over(
        &self,
        c: &mut Etcd,
        info: &MasterInfo,
        set: &[u32],
        to: Option<u32>,
    ) -> Result<u32, String> {
        let me = self.cfg.node_id;
        let acked = |n: u32| {
            self.replicas
                .table
                .lock()
                .expect("not poisoned")
                .get(&n)
                .map_or(0, |s| s.acked)
        };
        let target = match to {
            Some(n) if n == me => return Err(format!("node {n} is the master already")),
            Some(n) if !set.contains(&n) => {
                return Err(format!(
                    "node {n} is not in the SyncStateSet {set:?}: only an in-sync replica holds every acknowledged write"
                ))
            }
            Some(n) => n,
            None => set
                .iter()
                .copied()
                .filter(|&n| n != me)
                .max_by_key(|&n| (acked(n), std::cmp::Reverse(n)))
                .ok_or_else(|| {
                    format!("the SyncStateSet {set:?} has no replica: no other node holds every acknowledged write")
                })?,
        };
        let end = self
            .core
            .inspect(|b| b.log_end())
            .await
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + HANDOFF_CATCH_UP;
        loop {
            let held = acked(target);
            if held >= end {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "node {target} holds the log to {held}, not to its end {end}, after {HANDOFF_CATCH_UP:?}"
                ));
            }
            tokio::select! {
                () = self.replicas.changed.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        let set = SyncStateSet {
            epoch: info.epoch,
            members: vec![target],
        };
        let when = vec![
            etcd::value_is(
                &self.keys.master,
                &serde_json::to_vec(info).expect("serializes"),
            ),
            etcd::value_is(&self.keys.epoch, info.epoch.to_string().as_bytes()),
        ];
        let then = vec![
            etcd::delete(&self.keys.master),
            etcd::put(
                &self.keys.sync_state_set,
                serde_json::to_vec(&set).expect("serializes"),
                0,
            ),
        ];
        match c.txn(when, then).await {
            Ok(true) => Ok(target),
            Ok(false) => self.fence("the master key is no longer this node's"),
            // Whether the transaction ran is unknown: look.
            Err(e) => match self.master(c).await {
                Ok(Some((m, _))) if m == *info => Err(format!("etcd: {e}")),
                _ => self.fence("a handoff transaction may have run"),
            },
        }
    }

    /// After [`Node::hand_over`] to `target`: releases what `target` holds (it keeps all of
    /// it as the next master's log) until it stops following, and learns the new master
    /// (at most [`HANDOFF_ELECTION`]), so writes that reach this node go there.
    async fn after_hand_over(&self, c: &mut Etcd, target: u32, fence: &Fence, mut released: u64) {
        // The replication streams stay open (they end when `master_epoch` changes) until the
        // new master is known: `target` goes on taking what clients still send here.
        if let Ok(mut v) = self.view.master.write() {
            *v = None;
        }
        let deadline = Instant::now() + HANDOFF_ELECTION;
        let mut last_look = Instant::now();
        while Instant::now() < deadline {
            tokio::select! {
                () = self.replicas.changed.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            let held = self
                .replicas
                .table
                .lock()
                .expect("not poisoned")
                .get(&target)
                .map_or(0, |s| s.acked);
            if held > released && fence.valid() {
                let ok = self
                    .core
                    .with_mut(move |b| {
                        b.replicated_to(held);
                        true
                    })
                    .await;
                if ok == Ok(true) {
                    released = held;
                }
            }
            if last_look.elapsed() >= Duration::from_millis(50) {
                last_look = Instant::now();
                if let Ok(Some((m, _))) = self.master(c).await {
                    if m.node != self.cfg.node_id {
                        info!(node = m.node, epoch = m.epoch, "the new master");
                        if let Ok(mut v) = self.view.master.write() {
                            *v = Some(m);
                        }
                        self.view.master_epoch.store(0, Ordering::SeqCst);
                        return;
                    }
                }
            }
        }
        warn!(node = target, "no new master in etcd yet");
        self.view.master_epoch.store(0, Ordering::SeqCst);
    }

    /// Stops this process: it can no longer be sure it is the only master.
    fn fence(&self, why: &str) -> ! {
        self.view.fencing_events.fetch_add(1, Ordering::SeqCst);
        self.view.master_epoch.store(0, Ordering::SeqCst);
        error!(reason = why, "fenced: this master stops acknowledging and exits (restart it: it comes back as a replica)");
        std::process::exit(FENCED_EXIT);
    }

    /// Serves as master of `epoch` until fenced.
    async fn lead(&self, c: &mut Etcd, epoch: u64, lease: i64, sent: Instant) -> ! {
        let me = self.cfg.node_id;
        let fence = Arc::new(Fence::new());
        fence.extend(sent + self.ttl() - self.margin());
        let now = SystemClock.now();
        match self.core.with_mut(move |b| b.promote(now, epoch)).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => self.fence(&format!("promote to epoch {epoch} refused: {e}")),
            Ok(Err(e)) => self.fence(&format!("promote to epoch {epoch} failed: {e}")),
            Err(e) => self.fence(&format!("promote to epoch {epoch} failed: {e}")),
        }
        // Declarations from the config, now that this node writes.
        for t in self.topics.clone() {
            let q = t.queues.unwrap_or(self.default_queues);
            if let Ok(Err(e)) = self.core.change(move |b| b.create_topic(&t.name, q)).await {
                warn!(error = %e, "a topic of the config was refused");
            }
        }
        for g in self.groups.clone() {
            let _ = self.core.declare_group(g.name, g.fifo).await;
        }
        // The config's topics, placed on this group in etcd (on a task of its own: the
        // election is done and fencing must not wait on it).
        let mut placed = Vec::new();
        for t in &self.topics {
            let name = t.name.clone();
            let q = self
                .core
                .inspect(move |b| b.topic_info(&name).map(|i| i.queues.len() as u32))
                .await
                .ok()
                .flatten()
                .unwrap_or_else(|| t.queues.unwrap_or(self.default_queues));
            placed.push((t.name.clone(), q.max(1)));
        }
        tokio::spawn(super::directory::register(
            self.cfg.etcd.clone(),
            self.cfg.prefix.clone(),
            self.cfg.broker_name.clone(),
            placed,
        ));
        self.view.master_epoch.store(epoch, Ordering::SeqCst);
        self.view.elections.fetch_add(1, Ordering::SeqCst);
        let info = MasterInfo {
            node: me,
            epoch,
            advertise: self.advertise,
            replication: self.replication,
            remoting: self.remoting,
        };
        if let Ok(mut v) = self.view.master.write() {
            *v = Some(info.clone());
        }
        let mut set = vec![me];
        if let Ok(mut v) = self.view.sync_state_set.write() {
            *v = Some(SyncStateSet {
                epoch,
                members: set.clone(),
            });
        }
        let released = self.core.inspect(|b| b.log_end()).await.unwrap_or(0);
        info!(
            epoch,
            log_end = released,
            "elected master; serving from the log"
        );
        // The lease, renewed every quarter TTL; each answered renewal moves the deadline.
        let keeper = {
            let mut k = match c.keep_alive(lease).await {
                Ok(x) => x,
                Err(e) => self.fence(&format!("cannot renew the lease: {e}")),
            };
            let (fence, ttl, margin) = (fence.clone(), self.ttl(), self.margin());
            tokio::spawn(async move {
                loop {
                    let sent = Instant::now();
                    match k.renew().await {
                        Ok(t) if t > 0 => {
                            let granted = Duration::from_secs(t as u64).min(ttl);
                            fence.extend(sent + granted - margin);
                        }
                        // The lease is gone: the deadline runs out.
                        Ok(_) => break,
                        // etcd unreachable now: try again; the deadline decides.
                        Err(_) => {}
                    }
                    tokio::time::sleep(ttl / 4).await;
                }
            })
        };
        // The watchdog: past the deadline the process ends.
        let watchdog = {
            let (fence, node) = (fence.clone(), self.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    if !fence.valid() {
                        node.fence("the lease was not renewed in time: another master may be elected once it expires");
                    }
                }
            })
        };
        let mut end_rx = self.core.log_end_watch();
        let mut released = released;
        let mut last_check = Instant::now();
        let mut last_lag = Instant::now();
        let mut last_handoff_check = Instant::now();
        let max_lag = Duration::from_millis(self.cfg.replica_max_lag_ms);
        loop {
            tokio::select! {
                () = self.replicas.changed.notified() => {}
                _ = end_rx.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
                () = self.view.handoff.notify.notified() => {}
            }
            if keeper.is_finished() {
                self.fence("the lease renewal stopped");
            }
            // A handoff asked by this process (SIGTERM) or, through etcd, by an operator.
            let here = self.view.handoff.asked.lock().expect("not poisoned").take();
            let mut there = None;
            if here.is_none() && last_handoff_check.elapsed() >= Duration::from_millis(200) {
                last_handoff_check = Instant::now();
                if let Ok(Some(kv)) = c.get(&self.keys.handoff).await {
                    match serde_json::from_slice::<HandoffRequest>(&kv.value) {
                        Ok(r) if r.epoch == epoch => there = Some((r, kv.mod_revision)),
                        // Asked of an earlier master, or unreadable: not for this one.
                        _ => {
                            let when =
                                vec![etcd::mod_revision_is(&self.keys.handoff, kv.mod_revision)];
                            let _ = c.txn(when, vec![etcd::delete(&self.keys.handoff)]).await;
                        }
                    }
                }
            }
            if here.is_some() || there.is_some() {
                let to = match (&here, &there) {
                    (Some((to, _)), _) => *to,
                    (None, Some((r, _))) => r.to,
                    (None, None) => None,
                };
                let result = self.hand_over(c, &info, &set, to).await;
                match &result {
                    Ok(n) => info!(epoch, to = n, "handing mastership over: the master key is deleted, node {n} is the SyncStateSet"),
                    Err(e) => warn!(epoch, error = %e, "no handoff; staying master"),
                }
                if let Some((r, rev)) = &there {
                    let answer = HandoffResult {
                        id: r.id.clone(),
                        from: me,
                        epoch,
                        result: result.clone(),
                    };
                    let when = vec![etcd::mod_revision_is(&self.keys.handoff, *rev)];
                    let then = vec![
                        etcd::delete(&self.keys.handoff),
                        etcd::put(
                            &self.keys.handoff_result,
                            serde_json::to_vec(&answer).expect("serializes"),
                            0,
                        ),
                    ];
                    let _ = c.txn(when, then).await;
                }
                if let Ok(target) = result {
                    watchdog.abort();
                    self.after_hand_over(c, target, &fence, released).await;
                    keeper.abort();
                    let _ = c.revoke(lease).await;
                    match here {
                        // The process stops (SIGTERM).
                        Some((_, reply)) => {
                            let _ = reply.send(Ok(target));
                        }
                        None => info!(to = target, "handed mastership over: this node passes what clients send on to the new master until it is restarted (it then follows as a replica)"),
                    }
                    // Never master again in this process: its core holds a log the new
                    // master goes on from, so it must start again to follow. Until then it
                    // keeps learning the master, for what it passes on.
                    loop {
                        tokio::time::sleep(POLL).await;
                        if let Ok(m) = self.master(c).await {
                            if let Ok(mut v) = self.view.master.write() {
                                *v = m.map(|m| m.0).filter(|m| m.node != me);
                            }
                        }
                    }
                }
                if let Some((_, reply)) = here {
                    let _ = reply.send(result);
                }
                continue;
            }
            let log_end = *end_rx.borrow_and_update();
            // Now and then: is the master key still this node's?
            if last_check.elapsed() >= Duration::from_millis(500) {
                last_check = Instant::now();
                match self.master(c).await {
                    Ok(Some((m, _))) if m == info => {}
                    Ok(_) => self.fence("the master key is no longer this node's"),
                    // etcd unreachable: the deadline decides.
                    Err(_) => {}
                }
            }
            let now = Instant::now();
            let table = {
                let mut t = self.replicas.table.lock().expect("not poisoned");
                for s in t.values_mut() {
                    s.mark(log_end, now);
                }
                t.clone()
            };
            let lag_ms = |acked: u64, caught: Instant| replica_lag_ms(acked, caught, log_end, now);
            let next = next_sync_state_set(&set, me, &table, released, log_end, now, max_lag);
            if next != set {
                let value = SyncStateSet {
                    epoch,
                    members: next.clone(),
                };
                let when = vec![etcd::value_is(
                    &self.keys.epoch,
                    epoch.to_string().as_bytes(),
                )];
                let then = vec![etcd::put(
                    &self.keys.sync_state_set,
                    serde_json::to_vec(&value).expect("serializes"),
                    0,
                )];
                match c.txn(when, then).await {
                    Ok(true) => {
                        info!(epoch, from = ?set, to = ?next, "SyncStateSet changed");
                        set = next;
                        if let Ok(mut v) = self.view.sync_state_set.write() {
                            *v = Some(value);
                        }
                    }
                    Ok(_) => self.fence("the epoch moved on: a newer master exists"),
                    // Keep the old set (acknowledgements wait for its members) and try again.
                    Err(e) => warn!(error = %e, "cannot write the SyncStateSet"),
                }
            }
            let lags: Vec<ReplicaLag> = table
                .iter()
                .map(|(&n, s)| ReplicaLag {
                    node: n,
                    acked: s.acked,
                    lag_bytes: log_end.saturating_sub(s.acked),
                    lag_ms: lag_ms(s.acked, s.caught_up_at),
                    in_sync: set.contains(&n),
                })
                .collect();
            if last_lag.elapsed() >= Duration::from_secs(1) {
                last_lag = Instant::now();
                let report = super::LagReport {
                    epoch,
                    replicas: lags.clone(),
                };
                let when = vec![etcd::value_is(
                    &self.keys.epoch,
                    epoch.to_string().as_bytes(),
                )];
                let then = vec![etcd::put(
                    &self.keys.lag,
                    serde_json::to_vec(&report).expect("serializes"),
                    lease,
                )];
                // For `rocklet admin cluster`; a failure here changes nothing.
                let _ = c.txn(when, then).await;
            }
            if let Ok(mut v) = self.view.replicas.write() {
                *v = lags;
            }
            if self.cfg.replication == ReplicationMode::Sync
                && set.len() >= self.cfg.min_in_sync_replicas as usize
            {
                let upto = set
                    .iter()
                    .filter(|&&n| n != me)
                    .map(|n| table.get(n).map_or(0, |s| s.acked))
                    .min()
                    .unwrap_or(log_end);
                if upto > released && fence.valid() {
                    let f = fence.clone();
                    let done = self
                        .core
                        .with_mut(move |b| {
                            // Checked again on the core thread, right before replies go out.
                            if f.valid() {
                                b.replicated_to(upto);
                                true
                            } else {
                                false
                            }
                        })
                        .await;
                    if done == Ok(true) {
                        released = upto;
                    }
                    tracing::debug!(upto, released, ?set, "replicated_to");
                } else {
                    tracing::debug!(
                        upto,
                        released,
                        valid = fence.valid(),
                        ?set,
                        "nothing to release"
                    );
                }
            }
        }
    }
}

/// How long a replica has not held the whole log, ms: 0 while it holds all of it (`acked` at
/// or past `log_end`), else since it last did.
fn replica_lag_ms(acked: u64, caught_up_at: Instant, log_end: u64, now: Instant) -> u64 {
    if acked >= log_end {
        0
    } else {
        now.saturating_duration_since(caught_up_at).as_millis() as u64
    }
}

/// The master's next SyncStateSet, from what it knows of its replicas now.
///
/// A member stays while it keeps up: it held the whole log within `max_lag` (a replica that
/// stopped acknowledging, its connection open or not, goes once that runs out). A replica
/// comes (back) in only when it is connected, holds everything acknowledged so far
/// (`released`) *and* keeps up by the same rule. Without the last condition a stalled member
/// came back at once: its own stalled acknowledgement held `released` where it was, so it
/// always "held everything released", and every write waited on it for the whole stall.
fn next_sync_state_set(
    set: &[u32],
    me: u32,
    table: &std::collections::HashMap<u32, replication::ReplicaState>,
    released: u64,
    log_end: u64,
    now: Instant,
    max_lag: Duration,
) -> Vec<u32> {
    let max_lag = max_lag.as_millis() as u64;
    let keeps_up = |s: &replication::ReplicaState| {
        replica_lag_ms(s.acked, s.caught_up_at, log_end, now) <= max_lag
    };
    let mut next: Vec<u32> = set
        .iter()
        .copied()
        .filter(|&n| n == me || table.get(&n).is_some_and(keeps_up))
        .collect();
    let mut ids: Vec<u32> = table.keys().copied().collect();
    ids.sort_unstable();
    for n in ids {
        let s = &table[&n];
        if n != me && !next.contains(&n) && s.connected && s.acked >= released && keeps_up(s) {
            next.push(n);
        }
    }
    next.sort_unstable();
    next
}

#[cfg(test)]
mod sync_state_set_tests {
    use std::collections::HashMap;

    use super::*;
    use replication::ReplicaState;

    fn replica(acked: u64, caught_up_ago: Duration, now: Instant) -> ReplicaState {
        ReplicaState {
            acked,
            caught_up_at: now - caught_up_ago,
            connected: true,
            conn: 1,
            mark: None,
        }
    }

    const LAG: Duration = Duration::from_millis(3000);

    #[test]
    fn a_stalled_member_with_its_connection_open_leaves_and_stays_out() {
        let now = Instant::now();
        // Node 2 stopped acknowledging at 1,000 four seconds ago (its socket still open);
        // node 3 is current. `released` is stuck at node 2's 1,000.
        let table = HashMap::from([
            (2, replica(1_000, Duration::from_secs(4), now)),
            (3, replica(50_000, Duration::ZERO, now)),
        ]);
        let next = next_sync_state_set(&[1, 2, 3], 1, &table, 1_000, 50_000, now, LAG);
        assert_eq!(next, [1, 3], "node 2 must leave and not come straight back");
        // Once out it stays out while it is behind, even holding everything released.
        let next = next_sync_state_set(&[1, 3], 1, &table, 1_000, 50_000, now, LAG);
        assert_eq!(next, [1, 3]);
    }

    #[test]
    fn a_replica_that_keeps_up_with_a_moving_end_stays_caught_up() {
        let t0 = Instant::now();
        let mut r = replica(0, Duration::ZERO, t0);
        // Every look the log has grown by 1,000 and the replica holds what the previous look
        // saw: never the end itself, always caught up as of the look before.
        for i in 1..=100u64 {
            let now = t0 + Duration::from_millis(100 * i);
            r.acked = 1_000 * (i - 1);
            r.mark(1_000 * i, now);
            let lag = replica_lag_ms(r.acked, r.caught_up_at, 1_000 * i, now);
            assert!(lag <= 200, "look {i}: lag {lag} ms");
        }
        // It stops acknowledging: its lag grows with the time since.
        let stop = t0 + Duration::from_millis(10_000);
        for i in 1..=40u64 {
            r.mark(100_000 + i, stop + Duration::from_millis(100 * i));
        }
        let now = stop + Duration::from_millis(4_000);
        assert!(replica_lag_ms(r.acked, r.caught_up_at, 100_040, now) > 3_000);
    }

    #[test]
    fn a_replica_that_caught_up_comes_back_and_a_lagging_one_within_the_bound_stays() {
        let now = Instant::now();
        let table = HashMap::from([
            // Caught up just now.
            (2, replica(60_000, Duration::ZERO, now)),
            // Behind, but it held the whole log 1 s ago: within the 3 s bound.
            (3, replica(55_000, Duration::from_secs(1), now)),
        ]);
        let next = next_sync_state_set(&[1, 3], 1, &table, 50_000, 60_000, now, LAG);
        assert_eq!(next, [1, 2, 3]);
        // One that does not hold everything acknowledged does not come in.
        let table = HashMap::from([(2, replica(40_000, Duration::ZERO, now))]);
        assert_eq!(
            next_sync_state_set(&[1], 1, &table, 50_000, 60_000, now, LAG),
            [1]
        );
        // Nor one whose connection is gone.
        let mut gone = replica(60_000, Duration::ZERO, now);
        gone.connected = false;
        let table = HashMap::from([(2, gone)]);
        assert_eq!(
            next_sync_state_set(&[1], 1, &table, 50_000, 60_000, now, LAG),
            [1]
        );
    }
}
