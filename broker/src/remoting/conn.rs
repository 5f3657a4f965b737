//! What the remoting connections share ([`Ctx`]) and each one's state ([`Conn`]): its
//! writer queue, the groups it named, the checks routed to it, and what happens when it
//! closes.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rocklet_core::record::Host;
use rocklet_core::CheckRequest;
use tokio::sync::mpsc;
use tracing::debug;

use super::clients::{Clients, Member};
use super::codec::{RemotingCommand, SerializeType, FLAG_ONEWAY};
use super::codes::code;
use super::locks::QueueLocks;
use super::message::check_command;
use super::pop::Renewals;
use super::stats::RemotingStats;
use crate::clock::{Clock, SystemClock};
use crate::config::BrokerConfig;
use crate::driver::CoreHandle;
use crate::metrics::Metrics;

/// What every connection shares.
#[derive(Debug)]
pub struct Ctx {
    pub core: CoreHandle,
    pub cfg: Arc<BrokerConfig>,
    /// The broker listener's address, as routes name it (`None`: remoting is off; the
    /// name server then has no broker to route to).
    pub broker_addr: Option<SocketAddr>,
    /// The name-server listener's address (`None`: off), as getBrokerConfig names it.
    pub namesrv_addr: Option<SocketAddr>,
    /// Consumer and producer groups of the connected clients, from heartbeats.
    pub(crate) clients: Mutex<Clients>,
    /// Queue locks of orderly consumers.
    pub(crate) locks: Mutex<QueueLocks>,
    /// Receipts renewed by CHANGE_MESSAGE_INVISIBLETIME, by reviveQid token.
    pub(crate) renewals: Mutex<Renewals>,
    /// Why the broker closes connections, logged at a bounded rate.
    pub(crate) close_log: super::close_log::CloseLog,
    /// Offsets reset by mqadmin on online groups, until their clients take them.
    pub(crate) resets: Mutex<super::admin::resets::PendingResets>,
    /// The host clock (queue lock expiry).
    pub(crate) clock: Arc<dyn Clock>,
    /// Requests by code and their errors.
    pub(crate) stats: Arc<RemotingStats>,
    /// The broker's metrics: non-SUCCESS answers count in its `request_errors` too.
    pub(crate) metrics: Option<Arc<Metrics>>,
    /// The broker-wide connection cap (none: unlimited).
    pub conn_limit: Option<Arc<crate::net::ConnLimit>>,
    /// The broker-wide budget of request bytes held (none: unlimited).
    pub request_budget: Option<Arc<crate::budget::RequestBudget>>,

    /// Users and ACLs (authentication off unless users exist).
    pub auth: Arc<crate::auth::Auth>,
    /// TLS of the listeners, and how long a handshake may take (none: plaintext only).
    pub tls: Option<(Arc<crate::auth::tls::Tls>, Duration)>,
    /// Cluster mode: routes name the group's master (its remoting address, from etcd).
    pub cluster: Option<crate::cluster::View>,
}

impl Ctx {
    /// A context over the core.
    #[must_use]
    pub fn new(core: CoreHandle, cfg: Arc<BrokerConfig>) -> Self {
        Ctx {
            core,
            cfg,
            broker_addr: None,
            namesrv_addr: None,
            clients: Mutex::new(Clients::default()),
            locks: Mutex::new(QueueLocks::default()),
            renewals: Mutex::new(Renewals::default()),
            resets: Mutex::new(Default::default()),
            close_log: Default::default(),
            clock: Arc::new(SystemClock),
            stats: Arc::new(RemotingStats::default()),
            metrics: None,
            conn_limit: None,
            request_budget: None,

            auth: crate::auth::Auth::disabled(),
            tls: None,
            cluster: None,
        }
    }

    /// Cluster mode: the name-server role routes to the group's master.
    #[must_use]
    pub fn with_cluster(mut self, view: Option<crate::cluster::View>) -> Self {
        self.cluster = view;
        self
    }

    /// The same context checking credentials and ACLs.
    #[must_use]
    pub fn with_auth(mut self, auth: Arc<crate::auth::Auth>) -> Self {
        self.auth = auth;
        self
    }

    /// The same context counting its errors in the broker's metrics too.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The same context under a connection cap shared with the other listeners.
    #[must_use]
    pub fn with_conn_limit(mut self, limit: Arc<crate::net::ConnLimit>) -> Self {
        self.conn_limit = Some(limit);
        self
    }

    /// The same context holding request bytes under a budget shared with the other
    /// listeners.
    #[must_use]
    pub fn with_request_budget(mut self, budget: Arc<crate::budget::RequestBudget>) -> Self {
        self.request_budget = Some(budget);
        self
    }

    /// The same context serving TLS as `tls` says (`handshake`: the longest a handshake may
    /// take).
    #[must_use]
    pub fn with_tls(
        mut self,
        tls: Option<Arc<crate::auth::tls::Tls>>,
        handshake: Duration,
    ) -> Self {
        self.tls = tls.map(|t| (t, handshake));
        self
    }

    /// Counts a request refused by the configured limit named `limit`.
    pub fn over_limit(&self, limit: &str) {
        if let Some(m) = &self.metrics {
            m.over_limit(limit);
        }
    }

    /// The request counters (for the metrics endpoint).
    #[must_use]
    pub fn stats(&self) -> Arc<RemotingStats> {
        self.stats.clone()
    }

    /// The same context on another clock (the broker's, so tests can move it).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// Most bytes of an answer's body read for a call of ours ([`Conn::call_for_body`]): a
/// client's ConsumerRunningInfo, its thread dump included.
pub const MAX_ANSWER_BODY: usize = 4 << 20;

/// One remoting connection.
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    pub peer: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) tx: mpsc::UnboundedSender<Vec<u8>>,
    pub(crate) serialize: Mutex<SerializeType>,
    pub(crate) next_opaque: AtomicI32,
    /// Producer groups this connection answers checks for.
    pub(crate) groups: Mutex<Vec<String>>,
    /// Bytes queued for the peer and not yet written (see [`Conn::written`]).
    pub(crate) queued: AtomicUsize,
    /// The writer stopped (the peer is gone): nothing will drain the queue any more.
    pub(crate) writer_gone: AtomicBool,
    /// Woken when queued bytes were written or the writer stopped.
    pub(crate) drained: tokio::sync::Notify,
    /// The peer closed (or the connection failed): long polls of it end, other requests
    /// already read are still carried out.
    pub(crate) gone: AtomicBool,
    /// Woken when `gone` is set.
    pub(crate) gone_notify: tokio::sync::Notify,
    /// When a request was last read or an answer last written (the idle timeout's start).
    pub(crate) last_active: Mutex<tokio::time::Instant>,
    /// Our requests waiting for the peer's answer ([`Conn::call`]), by opaque, with whether
    /// the answer's body is read ([`Conn::call_for_body`]): each is removed when answered or
    /// after its timeout.
    pub(crate) calls: Mutex<HashMap<i32, (tokio::sync::oneshot::Sender<RemotingCommand>, bool)>>,
}

impl Conn {
    /// A connection whose frames go to `tx`.
    #[must_use]
    pub fn new(
        id: u64,
        peer: SocketAddr,
        local: SocketAddr,
        tx: mpsc::UnboundedSender<Vec<u8>>,
    ) -> Self {
        Conn {
            id,
            peer,
            local,
            tx,
            serialize: Mutex::new(SerializeType::Json),
            next_opaque: AtomicI32::new(1),
            groups: Mutex::new(Vec::new()),
            queued: AtomicUsize::new(0),
            writer_gone: AtomicBool::new(false),
            drained: tokio::sync::Notify::new(),
            gone: AtomicBool::new(false),
            gone_notify: tokio::sync::Notify::new(),
            last_active: Mutex::new(tokio::time::Instant::now()),
            calls: Mutex::new(HashMap::new()),
        }
    }

    /// Our end of the connection (which listener it came in on).
    #[must_use]
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// Something was read from or written to the peer just now.
    pub fn active(&self) {
        *lock(&self.last_active) = tokio::time::Instant::now();
    }

    /// When something was last read from or written to the peer.
    #[must_use]
    pub fn last_active(&self) -> tokio::time::Instant {
        *lock(&self.last_active)
    }

    /// Nothing more is read from the peer: long polls waiting for it end now.
    pub fn peer_gone(&self) {
        self.gone.store(true, Ordering::Release);
        self.gone_notify.notify_waiters();
    }

    /// Completes once the peer is gone ([`Conn::peer_gone`]).
    pub async fn gone(&self) {
        loop {
            let woken = self.gone_notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.gone.load(Ordering::Acquire) {
                return;
            }
            woken.await;
        }
    }

    /// Queues a command for the peer.
    pub fn send(&self, c: &RemotingCommand) {
        let frame = c.encode();
        let n = frame.len();
        self.queued.fetch_add(n, Ordering::AcqRel);
        if self.tx.send(frame).is_err() {
            self.queued.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// Sends the peer a oneway request of ours (NOTIFY_CONSUMER_IDS_CHANGED…), serialized as
    /// the peer's last request was.
    pub fn push(&self, mut cmd: RemotingCommand) {
        cmd.flag = FLAG_ONEWAY;
        cmd.opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        cmd.serialize = *lock(&self.serialize);
        self.send(&cmd);
    }

    /// Sends the peer a request of ours and waits for its answer (header only: an answer's
    /// body is never read), at most `timeout`; `None` when none came in time or the peer
    /// went away first.
    pub async fn call(&self, cmd: RemotingCommand, timeout: Duration) -> Option<RemotingCommand> {
        self.call_reading(cmd, timeout, false).await
    }

    /// [`Conn::call`] whose answer's body is read too (GET_CONSUMER_RUNNING_INFO relayed to
    /// a client), at most [`MAX_ANSWER_BODY`] bytes: a larger one comes back as a
    /// SYSTEM_ERROR answer saying so, its body skipped.
    pub async fn call_for_body(
        &self,
        cmd: RemotingCommand,
        timeout: Duration,
    ) -> Option<RemotingCommand> {
        self.call_reading(cmd, timeout, true).await
    }

    async fn call_reading(
        &self,
        mut cmd: RemotingCommand,
        timeout: Duration,
        body: bool,
    ) -> Option<RemotingCommand> {
        let opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        cmd.flag = 0;
        cmd.opaque = opaque;
        cmd.serialize = *lock(&self.serialize);
        let (tx, rx) = tokio::sync::oneshot::channel();
        lock(&self.calls).insert(opaque, (tx, body));
        self.send(&cmd);
        let answer = tokio::select! {
            // An answer that came before the peer left is taken, not lost to the race.
            biased;
            a = tokio::time::timeout(timeout, rx) => a.ok().and_then(Result::ok),
            () = self.gone() => None,
        };
        lock(&self.calls).remove(&opaque);
        answer
    }

    /// Whether a call waits for the answer with this opaque and reads its body
    /// ([`Conn::call_for_body`]).
    #[must_use]
    pub fn wants_body(&self, opaque: i32) -> bool {
        lock(&self.calls).get(&opaque).is_some_and(|c| c.1)
    }

    /// The peer answered a request of ours: to whoever waits for it, if anyone does.
    pub fn answered(&self, answer: RemotingCommand) {
        if let Some((tx, _)) = lock(&self.calls).remove(&answer.opaque) {
            let _ = tx.send(answer);
        }
    }

    /// A member record of this connection for the client registry.
    pub(crate) fn member(self: &Arc<Self>, req: &RemotingCommand) -> Member {
        Member {
            conn: self.id,
            link: Arc::downgrade(self),
            addr: self.peer,
            language: req.language.clone(),
            version: req.version,
        }
    }

    /// The writer wrote a frame of `n` bytes (or dropped it unwritten).
    pub fn written(&self, n: usize) {
        self.active();
        self.queued.fetch_sub(n, Ordering::AcqRel);
        self.drained.notify_waiters();
    }

    /// The writer stopped: waiting for the queue to drain is over.
    pub fn writer_stopped(&self) {
        self.writer_gone.store(true, Ordering::Release);
        self.drained.notify_waiters();
    }

    /// Bytes queued for the peer and not yet written.
    #[must_use]
    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Waits until at most `limit` bytes are queued for the peer; `false` if the writer
    /// stopped instead (the connection is finished).
    pub async fn drained_to(&self, limit: usize) -> bool {
        loop {
            let woken = self.drained.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.writer_gone.load(Ordering::Acquire) {
                return false;
            }
            if self.queued_bytes() <= limit {
                return true;
            }
            woken.await;
        }
    }
}

/// Starts the task that turns the core's transaction checks for this connection into
/// CHECK_TRANSACTION_STATE requests; the sender is what the driver routes checks to.
pub fn spawn_check_forwarder(conn: Arc<Conn>) -> mpsc::UnboundedSender<CheckRequest> {
    let (tx, mut rx) = mpsc::unbounded_channel::<CheckRequest>();
    tokio::spawn(async move {
        while let Some(c) = rx.recv().await {
            let mut cmd = check_command(&c);
            cmd.opaque = conn.next_opaque.fetch_add(1, Ordering::Relaxed);
            cmd.serialize = *lock(&conn.serialize);
            conn.send(&cmd);
        }
    });
    tx
}

impl Ctx {
    /// The store host the core writes in records (the remoting listener's address, set
    /// before the core opened): send results name it in their offset message ids, so they
    /// are the ids consumers compute from the records.
    pub(crate) fn store_host(&self) -> Host {
        self.cfg.core.store_host.host()
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The connection closed: it no longer answers checks nor consumes.
pub fn closed(ctx: &Ctx, conn: &Conn) {
    if let Some(view) = &ctx.cluster {
        view.forward_remoting.closed(conn.id);
    }
    if !lock(&conn.groups).is_empty() {
        ctx.core.producer_down(conn.id);
    }
    let changed = lock(&ctx.clients).conn_closed(conn.id);
    for group in changed {
        notify_ids_changed(ctx, &group);
    }
    lock(&ctx.locks).release_conn(conn.id);
}

/// NOTIFY_CONSUMER_IDS_CHANGED (oneway, header `consumerGroup`) to every member of `group`:
/// its clients rebalance at once (Apache's broker sends it on every membership change).
pub fn notify_ids_changed(ctx: &Ctx, group: &str) {
    let members = lock(&ctx.clients).members(group);
    for m in members.iter().filter_map(std::sync::Weak::upgrade) {
        let mut ext = BTreeMap::new();
        ext.insert("consumerGroup".to_string(), group.to_string());
        m.push(RemotingCommand::request(
            code::NOTIFY_CONSUMER_IDS_CHANGED,
            ext,
            Vec::new(),
        ));
    }
    debug!(
        group,
        members = members.len(),
        "consumer ids changed: members notified"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queued_bytes_are_counted_until_written_and_waiters_wake() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Conn::new(1, a, a, tx));
        let cmd = RemotingCommand::request(code::HEART_BEAT, BTreeMap::new(), vec![0; 1000]);
        conn.send(&cmd);
        conn.send(&cmd);
        let n = cmd.encode().len();
        assert_eq!(conn.queued_bytes(), 2 * n);
        assert!(conn.drained_to(2 * n).await);
        // Waits until the writer writes one frame.
        let c = conn.clone();
        let waiter = tokio::spawn(async move { c.drained_to(n).await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        let f = rx.recv().await.unwrap();
        conn.written(f.len());
        assert!(waiter.await.unwrap());
        // A stopped writer ends the wait with `false`.
        let c = conn.clone();
        let waiter = tokio::spawn(async move { c.drained_to(0).await });
        tokio::task::yield_now().await;
        conn.writer_stopped();
        assert!(!waiter.await.unwrap());
        // Nothing is counted for a frame the closed channel refused.
        drop(rx);
        conn.send(&cmd);
        assert_eq!(conn.queued_bytes(), n);
    }

    #[tokio::test]
    async fn a_call_gets_its_answer_and_forgets_it_after_a_timeout_or_the_peer_leaving() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Conn::new(1, a, a, tx));
        let push = || {
            RemotingCommand::request(code::PUSH_REPLY_MESSAGE_TO_CLIENT, BTreeMap::new(), vec![1])
        };
        // Answered: the answer with the request's opaque comes back.
        let c = conn.clone();
        let call = tokio::spawn(async move { c.call(push(), Duration::from_secs(5)).await });
        let frame = rx.recv().await.unwrap();
        let sent = super::super::codec::decode_frame(&frame[4..]).unwrap();
        assert!(!sent.is_oneway() && !sent.is_response());
        let mut answer = RemotingCommand::response_to(&sent, 0, None);
        // An answer to something else is dropped; the one awaited is delivered.
        answer.opaque = sent.opaque + 1000;
        conn.answered(answer.clone());
        answer.opaque = sent.opaque;
        conn.answered(answer);
        assert_eq!(call.await.unwrap().map(|r| r.code), Some(0));
        assert!(lock(&conn.calls).is_empty());
        // Unanswered: `None` after the timeout, nothing kept.
        assert!(conn.call(push(), Duration::from_millis(20)).await.is_none());
        assert!(lock(&conn.calls).is_empty());
        // The peer leaves: `None` at once.
        let c = conn.clone();
        let call = tokio::spawn(async move { c.call(push(), Duration::from_secs(60)).await });
        tokio::task::yield_now().await;
        conn.peer_gone();
        assert!(call.await.unwrap().is_none());
        assert!(lock(&conn.calls).is_empty());
    }
}
