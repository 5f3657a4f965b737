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
use super::machine::{self, Action, Master, Millis, Params};
use super::replication::{self, FollowEnd, Replicas};
use super::{
    monotonic_ms, ClusterConfig, Keys, MasterInfo, NodeInfo, ReplicaLag, ReplicationMode,
    SyncStateSet, View,
};
use crate::clock::{Clock, SystemClock};
use crate::config::{GroupDecl, TopicDecl};
use crate::driver::CoreHandle;

mod handoff;

pub use handoff::{
    before_stop, hand_off, HandoffRequest, HandoffResult, HandoffSlot, HANDOFF_CATCH_UP,
};

/// Exit code of a master that fenced itself (its lease could expire, or a newer master
/// exists): a supervisor restarts it, and it comes back as a replica.
pub const FENCED_EXIT: i32 = 3;

/// How often a replica looks at the master key.
const POLL: Duration = Duration::from_millis(100);

/// How long a replica whose log ends below its master's log start waits before it asks
/// again (a restore, or the master's retention settings, must change first).
const BEHIND_RETRY: Duration = Duration::from_secs(10);

/// A master's deadline ([`machine::lease_deadline`], in [`monotonic_ms`]), shared by the lead
/// loop, the lease keeper, the watchdog and the core thread: it releases nothing at or past it.
#[derive(Debug, Default)]
pub struct Fence {
    deadline_ms: AtomicU64,
}

impl Fence {
    /// Moves the deadline to `at` (never back).
    fn extend(&self, at: Millis) {
        self.deadline_ms.fetch_max(at, Ordering::SeqCst);
    }

    fn deadline(&self) -> Millis {
        self.deadline_ms.load(Ordering::SeqCst)
    }

    /// Whether the lease is surely held now.
    #[must_use]
    pub fn valid(&self) -> bool {
        machine::holds_lease(monotonic_ms(), self.deadline())
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

    /// What the decisions ([`machine`]) are made with.
    fn params(&self) -> Params {
        Params {
            me: self.cfg.node_id,
            sync: self.cfg.replication == ReplicationMode::Sync,
            min_in_sync: self.cfg.min_in_sync_replicas,
            max_lag_ms: self.cfg.replica_max_lag_ms,
            ttl_ms: self.cfg.lease_ttl_s * 1000,
        }
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
            remoting: self.remoting,
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
                    // A node that stops (SIGTERM) does not take over on its way out.
                    let leaving = self.view.handoff.leaving.load(Ordering::SeqCst);
                    if machine::may_campaign(set.as_ref().map(|s| &s.members[..]), me, leaving) {
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
                    FollowEnd::Behind(why) => {
                        // Nothing changes by asking again soon: say it, now and then.
                        error!(master = %addr, epoch, "cannot catch up: {why}");
                        tokio::time::sleep(BEHIND_RETRY).await;
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
    async fn campaign(&self, c: &mut Etcd) -> EtcdResult<Option<(u64, i64, Millis)>> {
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
        let next = machine::next_epoch(epoch, log_last);
        let sent = monotonic_ms();
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

    /// Stops this process: it can no longer be sure it is the only master.
    fn fence(&self, why: &str) -> ! {
        self.view.fencing_events.fetch_add(1, Ordering::SeqCst);
        self.view.master_epoch.store(0, Ordering::SeqCst);
        error!(reason = why, "fenced: this master stops acknowledging and exits (restart it: it comes back as a replica)");
        std::process::exit(FENCED_EXIT);
    }

    /// Serves as master of `epoch` until fenced.
    async fn lead(&self, c: &mut Etcd, epoch: u64, lease: i64, sent: Millis) -> ! {
        let me = self.cfg.node_id;
        let params = self.params();
        let fence = Arc::new(Fence::default());
        fence.extend(machine::lease_deadline(&params, sent, params.ttl_ms));
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
        let log_end = self.core.inspect(|b| b.log_end()).await.unwrap_or(0);
        let mut m = Master::new(params, epoch, log_end);
        if let Ok(mut v) = self.view.sync_state_set.write() {
            *v = Some(SyncStateSet {
                epoch,
                members: m.set.clone(),
            });
        }
        info!(epoch, log_end, "elected master; serving from the log");
        // The lease, renewed every quarter TTL; each answered renewal moves the deadline.
        let keeper = {
            let mut k = match c.keep_alive(lease).await {
                Ok(x) => x,
                Err(e) => self.fence(&format!("cannot renew the lease: {e}")),
            };
            let (fence, ttl) = (fence.clone(), self.ttl());
            tokio::spawn(async move {
                loop {
                    let sent = monotonic_ms();
                    match k.renew().await {
                        Ok(t) if t > 0 => {
                            fence.extend(machine::lease_deadline(&params, sent, t as u64 * 1000));
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
                        node.fence(machine::Fenced::LeaseDeadline.reason());
                    }
                }
            })
        };
        let mut end_rx = self.core.log_end_watch();
        let mut last_check = Instant::now();
        let mut last_lag = Instant::now();
        let mut last_handoff_check = Instant::now();
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
                m.handing_over = true;
                self.view.handoff.handing_over.send_replace(true);
                let result = self.hand_over(c, &info, &m.set, to).await;
                m.handing_over = false;
                if result.is_err() {
                    // Staying master: the writes that waited are taken here.
                    self.view.handoff.handing_over.send_replace(false);
                }
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
                    self.after_hand_over(c, target, &fence, m.released).await;
                    // The new master is known (or the wait ended): the writes that waited
                    // go to it.
                    self.view.handoff.handing_over.send_replace(false);
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
            let now = monotonic_ms();
            let (actions, table) = {
                let mut t = self.replicas.table.lock().expect("not poisoned");
                let actions = m.tick(now, fence.deadline(), log_end, &mut t);
                (actions, t.clone())
            };
            for action in actions {
                match action {
                    Action::Fence(why) => self.fence(why.reason()),
                    Action::WriteSyncStateSet(next) => {
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
                        let outcome = c.txn(when, then).await;
                        match &outcome {
                            Ok(true) => {
                                info!(epoch, from = ?m.set, to = ?next, "SyncStateSet changed");
                                if let Ok(mut v) = self.view.sync_state_set.write() {
                                    *v = Some(value);
                                }
                            }
                            Ok(false) => {}
                            // Keep the old set (acknowledgements wait for its members) and try
                            // again.
                            Err(e) => warn!(error = %e, "cannot write the SyncStateSet"),
                        }
                        if let Some(why) = m.set_written(outcome.map_err(|_| ())) {
                            self.fence(why.reason());
                        }
                    }
                    Action::Release(upto) => {
                        let f = fence.clone();
                        let done = self
                            .core
                            .with_mut(move |b| {
                                // Checked again on the core thread, right before replies go
                                // out.
                                if f.valid() {
                                    b.replicated_to(upto);
                                    true
                                } else {
                                    false
                                }
                            })
                            .await;
                        if done == Ok(true) {
                            m.released(upto);
                        }
                        tracing::debug!(upto, released = m.released, set = ?m.set, "replicated_to");
                    }
                }
            }
            let lags: Vec<ReplicaLag> = table
                .iter()
                .map(|(&n, s)| ReplicaLag {
                    node: n,
                    acked: s.acked,
                    lag_bytes: log_end.saturating_sub(s.acked),
                    lag_ms: s.lag_ms(log_end, now),
                    in_sync: m.set.contains(&n),
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
        }
    }
}
