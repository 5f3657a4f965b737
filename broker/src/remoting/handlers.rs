//! RocketMQ 4 requests mapped onto the same core requests the gRPC service uses. Nothing
//! here decides anything about messages: headers are converted, the core answers through
//! the driver's command channel, and the answer is converted back.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rocklet_core::broker::prop;
use rocklet_core::record::{self, sys_flag, Host};
use rocklet_core::{
    CheckRequest, ClientError, Message, NewMessage, Reply, Request, Resolution, TagFilter, TxnId,
};
use tokio::sync::mpsc;
use tracing::debug;

use super::clients::{self, Clients, ConsumerInfo, Member};
use super::codec::{RemotingCommand, SerializeType, FLAG_ONEWAY};
use super::compression;
use super::locks::{QueueKey, QueueLocks, MAX_CLIENT_ID_LEN, MAX_QUEUES_PER_REQUEST};
use super::pop::{self, Renewals};
use super::stats::RemotingStats;
use crate::clock::{Clock, SystemClock};
use crate::config::BrokerConfig;
use crate::driver::{CoreFailure, CoreHandle};
use crate::metrics::Metrics;

/// Request codes (RocketMQ's `RequestCode`).
pub mod code {
    pub const SEND_MESSAGE: i32 = 10;
    pub const PULL_MESSAGE: i32 = 11;
    pub const QUERY_CONSUMER_OFFSET: i32 = 14;
    pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
    pub const GET_MAX_OFFSET: i32 = 30;
    pub const GET_MIN_OFFSET: i32 = 31;
    pub const HEART_BEAT: i32 = 34;
    pub const UNREGISTER_CLIENT: i32 = 35;
    pub const CONSUMER_SEND_MSG_BACK: i32 = 36;
    pub const END_TRANSACTION: i32 = 37;
    pub const GET_CONSUMER_LIST_BY_GROUP: i32 = 38;
    pub const CHECK_TRANSACTION_STATE: i32 = 39;
    pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
    pub const LOCK_BATCH_MQ: i32 = 41;
    pub const UNLOCK_BATCH_MQ: i32 = 42;
    pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
    pub const SEND_MESSAGE_V2: i32 = 310;
    pub const SEND_BATCH_MESSAGE: i32 = 320;
    pub const LITE_PULL_MESSAGE: i32 = 361;
    pub const POP_MESSAGE: i32 = 200_050;
    pub const ACK_MESSAGE: i32 = 200_051;
    pub const CHANGE_MESSAGE_INVISIBLETIME: i32 = 200_053;
}

/// Response codes (RocketMQ's `ResponseCode`).
pub mod status {
    pub const SUCCESS: i32 = 0;
    pub const SYSTEM_ERROR: i32 = 1;
    pub const SYSTEM_BUSY: i32 = 2;
    pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    pub const MESSAGE_ILLEGAL: i32 = 13;
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    pub const TOPIC_NOT_EXIST: i32 = 17;
    pub const PULL_NOT_FOUND: i32 = 19;
    pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
    pub const QUERY_NOT_FOUND: i32 = 22;
    pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
}

/// The broker name in routes (and the cluster name).
pub(super) const BROKER_NAME: &str = "rocklet";
/// Producer group the Java client uses for its own internal producer: not a real group.
const CLIENT_INNER_PRODUCER: &str = "CLIENT_INNER_PRODUCER";
/// Pull request flags (`PullSysFlag`).
const PULL_COMMIT_OFFSET: i32 = 0x1;
/// PULL_MESSAGE's `sysFlag` bit asking the broker to hold the pull (long polling).
pub const PULL_SUSPEND: i32 = 0x2;
/// Most messages one pull returns.
const MAX_PULL: u32 = 1024;
/// Most messages one pop returns (RocketMQ's brokers take at most 32 too).
const MAX_POP: u32 = 32;

/// What every connection shares.
#[derive(Debug)]
pub struct Ctx {
    pub core: CoreHandle,
    pub cfg: Arc<BrokerConfig>,
    /// The broker listener's address, as routes name it (`None`: remoting is off; the
    /// name server then has no broker to route to).
    pub broker_addr: Option<SocketAddr>,
    /// Consumer and producer groups of the connected clients, from heartbeats.
    pub(crate) clients: Mutex<Clients>,
    /// Queue locks of orderly consumers.
    locks: Mutex<QueueLocks>,
    /// Receipts renewed by CHANGE_MESSAGE_INVISIBLETIME, by reviveQid token.
    renewals: Mutex<Renewals>,
    /// The host clock (queue lock expiry).
    clock: Arc<dyn Clock>,
    /// Requests by code and their errors.
    stats: Arc<RemotingStats>,
    /// The broker's metrics: non-SUCCESS answers count in its `request_errors` too.
    metrics: Option<Arc<Metrics>>,
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
            clients: Mutex::new(Clients::default()),
            locks: Mutex::new(QueueLocks::default()),
            renewals: Mutex::new(Renewals::default()),
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

/// One remoting connection.
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    pub peer: SocketAddr,
    local: SocketAddr,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    serialize: Mutex<SerializeType>,
    next_opaque: AtomicI32,
    /// Producer groups this connection answers checks for.
    groups: Mutex<Vec<String>>,
    /// Bytes queued for the peer and not yet written (see [`Conn::written`]).
    queued: AtomicUsize,
    /// The writer stopped (the peer is gone): nothing will drain the queue any more.
    writer_gone: AtomicBool,
    /// Woken when queued bytes were written or the writer stopped.
    drained: tokio::sync::Notify,
    /// The peer closed (or the connection failed): long polls of it end, other requests
    /// already read are still carried out.
    gone: AtomicBool,
    /// Woken when `gone` is set.
    gone_notify: tokio::sync::Notify,
    /// When a request was last read or an answer last written (the idle timeout's start).
    last_active: Mutex<tokio::time::Instant>,
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

    /// A member record of this connection for the client registry.
    fn member(self: &Arc<Self>, req: &RemotingCommand) -> Member {
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
    fn store_host(&self) -> Host {
        self.cfg.core.store_host.host()
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The connection closed: it no longer answers checks nor consumes.
pub fn closed(ctx: &Ctx, conn: &Conn) {
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

/// The CHECK_TRANSACTION_STATE request for a check: the header names the half message, the
/// body is the message itself with its producer group (PGROUP), as clients look it up. The
/// offset message id is the record's (its own STOREHOST), as consumers compute it.
#[must_use]
pub fn check_command(c: &CheckRequest) -> RemotingCommand {
    let m = &c.message;
    let offset_id = offset_msg_id(m.store_host, c.txn.0);
    let mut ext = BTreeMap::new();
    ext.insert("topic".into(), m.topic.clone());
    ext.insert("tranStateTableOffset".into(), m.queue_offset.to_string());
    ext.insert("commitLogOffset".into(), c.txn.0.to_string());
    ext.insert("msgId".into(), m.msg_id.clone());
    ext.insert("transactionId".into(), m.msg_id.clone());
    ext.insert("offsetMsgId".into(), offset_id);
    let extra = [(prop::PGROUP, c.group.as_str()), (prop::TRAN_MSG, "true")];
    let body = encode_message(m, c.txn.0, sys_flag::TRANSACTION_PREPARED_TYPE, &extra);
    let mut cmd = RemotingCommand::request(code::CHECK_TRANSACTION_STATE, ext, body);
    cmd.flag = FLAG_ONEWAY;
    cmd
}

/// RocketMQ's offset message id: the core's, the one every protocol and the console use.
pub use rocklet_core::offset_msg_id;

/// A stored message as RocketMQ 4 consumers decode it (the CommitLog record layout), under
/// its real topic and queue; `extra` properties are added (TAGS, KEYS and UNIQ_KEY always).
#[must_use]
pub fn encode_message(m: &Message, phys_offset: u64, sys: u32, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut props = Vec::new();
    if let Some(t) = &m.tag {
        record::push_prop(&mut props, prop::TAGS, t);
    }
    if !m.keys.is_empty() {
        record::push_prop(&mut props, prop::KEYS, &m.keys.join(" "));
    }
    if m.property(prop::UNIQ_KEY).is_none() {
        record::push_prop(&mut props, prop::UNIQ_KEY, &m.msg_id);
    }
    for (k, v) in &m.properties {
        if !extra.iter().any(|(e, _)| e == k) {
            record::push_prop(&mut props, k, v);
        }
    }
    for (k, v) in extra {
        record::push_prop(&mut props, k, v);
    }
    let header = record::Header {
        queue_id: m.queue_id,
        flag: m.flag,
        queue_offset: m.queue_offset,
        phys_offset,
        sys_flag: sys,
        born_timestamp: m.born_timestamp,
        born_host: m.born_host,
        store_timestamp: m.store_timestamp,
        store_host: m.store_host,
        reconsume_times: m.reconsume_times,
        prepared_offset: 0,
    };
    let mut out = Vec::new();
    if record::encode(&mut out, &header, &m.body, &m.topic, &props).is_err() {
        // Only a topic above 255 bytes or properties above 32 KiB get here, and the core
        // stored this message with both within bounds: encode without the extras.
        out.clear();
        let _ = record::encode(&mut out, &header, &m.body, &m.topic, &[]);
    }
    out
}

pub(super) fn ok(req: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(req, status::SUCCESS, None)
}

pub(super) fn fail(req: &RemotingCommand, code: i32, remark: impl Into<String>) -> RemotingCommand {
    RemotingCommand::response_to(req, code, Some(remark.into()))
}

pub(super) fn client_error(req: &RemotingCommand, e: &ClientError) -> RemotingCommand {
    let code = match e {
        ClientError::UnknownTopic(_) => status::TOPIC_NOT_EXIST,
        ClientError::InvalidGroup(_) => status::SUBSCRIPTION_GROUP_NOT_EXIST,
        ClientError::UnknownTransaction(_)
        | ClientError::TransactionAlreadyResolved { .. }
        | ClientError::WrongProducerGroup { .. }
        | ClientError::MalformedTransactionId(_)
        | ClientError::InvalidReceiptHandle(_)
        | ClientError::StaleReceiptHandle(_)
        | ClientError::ProducerGroupRequired(_)
        | ClientError::NotConsumable(_)
        | ClientError::TooManyGroups { .. }
        | ClientError::TooManyTopics { .. } => status::SYSTEM_ERROR,
        _ => status::MESSAGE_ILLEGAL,
    };
    fail(req, code, format!("{}: {e}", e.code()))
}

pub(super) fn core_failure(req: &RemotingCommand, e: &CoreFailure) -> RemotingCommand {
    fail(req, status::SERVICE_NOT_AVAILABLE, e.to_string())
}

fn unexpected(req: &RemotingCommand, r: &Reply) -> RemotingCommand {
    fail(
        req,
        status::SYSTEM_ERROR,
        format!("unexpected core reply {r:?}"),
    )
}

/// A header field (with its SEND_MESSAGE_V2 short name, if any).
pub(super) fn field<'a>(req: &'a RemotingCommand, name: &str) -> Option<&'a str> {
    req.ext.get(name).map(String::as_str)
}

pub(super) fn required<'a>(
    req: &'a RemotingCommand,
    name: &str,
) -> Result<&'a str, RemotingCommand> {
    match field(req, name) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("the request header lacks `{name}`"),
        )),
    }
}

pub(super) fn number<T: std::str::FromStr>(
    req: &RemotingCommand,
    name: &str,
) -> Result<T, RemotingCommand> {
    let v = required(req, name)?;
    v.trim().parse().map_err(|_| {
        fail(
            req,
            status::SYSTEM_ERROR,
            format!("header field `{name}` = `{v}` is not a valid number"),
        )
    })
}

pub(super) fn number_or<T: std::str::FromStr>(
    req: &RemotingCommand,
    name: &str,
    default: T,
) -> Result<T, RemotingCommand> {
    match field(req, name) {
        None | Some("") => Ok(default),
        Some(_) => number(req, name),
    }
}

/// Most body bytes of a request whose body is JSON (HEART_BEAT, LOCK_BATCH_MQ,
/// UNLOCK_BATCH_MQ): a heartbeat of a client with thousands of subscriptions is far below it.
pub const MAX_JSON_BODY: usize = 4 << 20;

/// Most body bytes a request of `request_code` may carry: sends their message or batch (as
/// much as a gRPC SendMessage may decode), JSON requests [`MAX_JSON_BODY`], every other
/// served request none (a body there was only held, never read: 96 long-polling pulls with
/// 15 MiB bodies held 1.4 GiB). Codes rocklet does not serve are answered whatever they carry.
#[must_use]
pub fn max_body(cfg: &BrokerConfig, request_code: i32) -> usize {
    match request_code {
        code::SEND_MESSAGE | code::SEND_MESSAGE_V2 | code::SEND_BATCH_MESSAGE => {
            cfg.max_request_message_bytes()
        }
        code::HEART_BEAT | code::LOCK_BATCH_MQ | code::UNLOCK_BATCH_MQ => MAX_JSON_BODY,
        c if super::stats::code_name(c) == "OTHER" => super::codec::MAX_FRAME,
        _ => 0,
    }
}

/// The answer to a request whose body of `body_len` bytes is more than its kind carries
/// ([`max_body`]), or `None` when it fits.
#[must_use]
pub fn body_refusal(ctx: &Ctx, req: &RemotingCommand, body_len: usize) -> Option<RemotingCommand> {
    let max = max_body(&ctx.cfg, req.code);
    if body_len <= max {
        return None;
    }
    let name = super::stats::code_name(req.code);
    ctx.over_limit("remoting_request_body");
    Some(if max == 0 {
        fail(
            req,
            status::SYSTEM_ERROR,
            format!("BODY_NOT_EXPECTED: {name} carries no body; this one has {body_len} bytes (refused unread)"),
        )
    } else {
        fail(
            req,
            status::MESSAGE_ILLEGAL,
            format!("BODY_TOO_LARGE: the body of {name} is {body_len} bytes, more than the {max} it may carry (refused unread)"),
        )
    })
}

/// The answer to a request whose body does not fit in the broker's request budget (read
/// unheld, skipped as it arrives).
#[must_use]
pub fn busy(req: &RemotingCommand, over: &crate::budget::OverRequestBudget) -> RemotingCommand {
    fail(req, status::SYSTEM_BUSY, over.to_string())
}

/// A request refused before it was handled: counted, and answered unless it is oneway.
pub fn refused(ctx: &Ctx, conn: &Conn, req: &RemotingCommand, answer: RemotingCommand) {
    ctx.stats.count(req.code, false);
    if let Some(m) = &ctx.metrics {
        m.request_errors.fetch_add(1, Ordering::Relaxed);
    }
    debug!(code = req.code, remark = ?answer.remark, "remoting request refused unread");
    if !req.is_oneway() {
        conn.send(&answer);
    }
}

/// A tag filter header field (`subscription` of pulls, `exp` of pops), at most
/// `max_filter_expression_bytes` long.
fn filter_field<'a>(
    ctx: &Ctx,
    req: &'a RemotingCommand,
    name: &str,
) -> Result<&'a str, RemotingCommand> {
    let v = field(req, name).unwrap_or("*");
    let max = ctx.cfg.max_filter_expression_bytes;
    if v.len() > max {
        ctx.over_limit("max_filter_expression_bytes");
        return Err(fail(
            req,
            status::SUBSCRIPTION_PARSE_FAILED,
            format!("FILTER_TOO_LONG: `{name}` is {} bytes, more than the broker's max_filter_expression_bytes of {max}", v.len()),
        ));
    }
    Ok(v)
}

/// Handles one request; `None` when nothing is to be answered.
pub async fn handle(
    ctx: &Ctx,
    conn: &Arc<Conn>,
    checks: &mpsc::UnboundedSender<CheckRequest>,
    req: RemotingCommand,
) -> Option<RemotingCommand> {
    *lock(&conn.serialize) = req.serialize;
    tracing::trace!(
        conn = conn.id,
        code = req.code,
        body = req.body.len(),
        "remoting request"
    );
    if let Err(refusal) = crate::auth::remoting::check(ctx, conn, &req).await {
        ctx.stats.count(req.code, false);
        return Some(refusal);
    }
    let r = match req.code {
        code::GET_ROUTEINFO_BY_TOPIC => route(ctx, &req).await,
        code::HEART_BEAT => heartbeat(ctx, conn, checks, &req).await,
        code::UNREGISTER_CLIENT => unregister(ctx, conn, checks, &req),
        code::SEND_MESSAGE | code::SEND_MESSAGE_V2 | code::SEND_BATCH_MESSAGE => {
            send(ctx, conn, checks, &req).await
        }
        code::END_TRANSACTION => end_transaction(ctx, &req).await,
        // The Java DefaultLitePullConsumer's pulls: Apache's PullMessageProcessor serves both.
        code::PULL_MESSAGE | code::LITE_PULL_MESSAGE => pull(ctx, conn, &req).await,
        code::QUERY_CONSUMER_OFFSET => query_offset(ctx, &req).await,
        code::UPDATE_CONSUMER_OFFSET => update_offset(ctx, &req).await,
        code::GET_MAX_OFFSET => max_offset(ctx, &req).await,
        code::GET_MIN_OFFSET => min_offset(ctx, &req).await,
        code::GET_CONSUMER_LIST_BY_GROUP => consumer_list(ctx, &req),
        code::CONSUMER_SEND_MSG_BACK => send_back(ctx, &req).await,
        code::LOCK_BATCH_MQ => lock_batch(ctx, conn, &req),
        code::UNLOCK_BATCH_MQ => unlock_batch(ctx, &req),
        code::POP_MESSAGE => pop_message(ctx, conn, &req).await,
        code::ACK_MESSAGE => ack_message(ctx, &req).await,
        code::CHANGE_MESSAGE_INVISIBLETIME => change_invisible(ctx, &req).await,
        other => match super::admin::handle(ctx, &req).await {
            Some(r) => r,
            None => Err(fail(
                &req,
                status::REQUEST_CODE_NOT_SUPPORTED,
                match super::admin::code_name(other) {
                    Some(name) => {
                        format!("request code {other} ({name}) is not supported by rocklet")
                    }
                    None => format!("request code {other} is not supported by rocklet"),
                },
            )),
        },
    };
    let resp = r.unwrap_or_else(|e| e);
    let ok = resp.code == status::SUCCESS;
    ctx.stats.count(req.code, ok);
    if !ok {
        if let Some(m) = &ctx.metrics {
            m.request_errors.fetch_add(1, Ordering::Relaxed);
        }
        debug!(code = req.code, name = super::stats::code_name(req.code), status = resp.code, remark = ?resp.remark, "remoting request refused");
    }
    Some(resp)
}

pub(super) type Answer = Result<RemotingCommand, RemotingCommand>;

async fn queues_of(ctx: &Ctx, topic: &str) -> Result<Option<u32>, CoreFailure> {
    let t = topic.to_string();
    let existing = ctx.core.inspect(move |b| b.topic_queue_count(&t)).await?;
    if let Some(n) = existing {
        return Ok(Some(n.max(1)));
    }
    if let Some(d) = ctx.cfg.topics.iter().find(|d| d.name == topic) {
        return Ok(Some(d.queues.unwrap_or(ctx.cfg.core.default_queues)));
    }
    if topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%") {
        return Ok(Some(1));
    }
    if ctx.cfg.core.auto_create_topics && rocklet_core::topic::validate_name(topic).is_ok() {
        return Ok(Some(ctx.cfg.core.default_queues));
    }
    Ok(None)
}

/// GET_ROUTEINFO_BY_TOPIC: one broker (this one) holding every queue of the topic.
async fn route(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let topic = required(req, "topic")?;
    // Cluster mode with a placement in etcd: one broker per hosting group, at its master.
    if let Some(view) = &ctx.cluster {
        if let Some(d) = view.directory.get() {
            if let Some(groups) = d.route(topic, view.master()).await {
                return placed_route(ctx, req, topic, &d.group, &groups);
            }
        }
    }
    // Cluster mode: the master's remoting address as etcd has it, whichever node answers.
    let master = match &ctx.cluster {
        Some(view) => match view.master() {
            Some(m) => m.remoting.or(ctx.broker_addr),
            None => {
                return Err(fail(
                    req,
                    status::SYSTEM_ERROR,
                    "the broker group has no master now (an election is under way); retry",
                ))
            }
        },
        None => ctx.broker_addr,
    };
    let Some(addr) = master else {
        return Err(fail(
            req,
            status::TOPIC_NOT_EXIST,
            "the remoting broker listener is off: no route",
        ));
    };
    let n = match queues_of(ctx, topic).await {
        Ok(Some(n)) => n,
        Ok(None) => {
            return Err(fail(
                req,
                status::TOPIC_NOT_EXIST,
                format!("No topic route info in name server for the topic: {topic}"),
            ))
        }
        Err(e) => return Err(core_failure(req, &e)),
    };
    let body = serde_json::json!({
        "orderTopicConf": null,
        "queueDatas": [{
            "brokerName": BROKER_NAME,
            "readQueueNums": n,
            "writeQueueNums": n,
            "perm": 6,
            "topicSysFlag": 0,
            "topicSynFlag": 0,
        }],
        "brokerDatas": [{
            "cluster": BROKER_NAME,
            "brokerName": BROKER_NAME,
            "brokerAddrs": { "0": addr.to_string() },
            "enableActingMaster": false,
        }],
        "filterServerTable": {},
    });
    let mut r = ok(req);
    r.body = serde_json::to_vec(&body).unwrap_or_default();
    Ok(r)
}

/// GET_ROUTEINFO_BY_TOPIC for a topic placed on `groups`: queueDatas and brokerDatas of
/// each group whose master serves remoting now (the others are left out).
fn placed_route(
    ctx: &Ctx,
    req: &RemotingCommand,
    topic: &str,
    own: &str,
    groups: &[crate::cluster::directory::RouteGroup],
) -> Answer {
    let mut queue_datas = Vec::new();
    let mut broker_datas = Vec::new();
    for g in groups {
        let Some(m) = &g.master else { continue };
        let addr = if g.name == own {
            m.remoting.or(ctx.broker_addr)
        } else {
            m.remoting
        };
        let Some(addr) = addr else { continue };
        queue_datas.push(serde_json::json!({
            "brokerName": g.name,
            "readQueueNums": g.queues,
            "writeQueueNums": g.queues,
            "perm": 6,
            "topicSysFlag": 0,
            "topicSynFlag": 0,
        }));
        broker_datas.push(serde_json::json!({
            "cluster": BROKER_NAME,
            "brokerName": g.name,
            "brokerAddrs": { "0": addr.to_string() },
            "enableActingMaster": false,
        }));
    }
    if queue_datas.is_empty() {
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!(
                "no broker group hosting topic `{topic}` ({}) has a master serving remoting now (elections may be under way); retry",
                names.join(", ")
            ),
        ));
    }
    let body = serde_json::json!({
        "orderTopicConf": null,
        "queueDatas": queue_datas,
        "brokerDatas": broker_datas,
        "filterServerTable": {},
    });
    let mut r = ok(req);
    r.body = serde_json::to_vec(&body).unwrap_or_default();
    Ok(r)
}

pub(super) fn json_body(req: &RemotingCommand) -> Result<serde_json::Value, RemotingCommand> {
    serde_json::from_slice(&req.body).map_err(|e| {
        fail(
            req,
            status::SYSTEM_ERROR,
            format!("the body is not valid JSON: {e}"),
        )
    })
}

fn set_groups(
    ctx: &Ctx,
    conn: &Conn,
    checks: &mpsc::UnboundedSender<CheckRequest>,
    update: impl FnOnce(&mut Vec<String>) -> bool,
) {
    let mut g = lock(&conn.groups);
    let had = !g.is_empty();
    if !update(&mut g) {
        return;
    }
    if g.is_empty() {
        if had {
            ctx.core.producer_down(conn.id);
        }
    } else {
        ctx.core
            .group_producer_up(conn.id, g.clone(), checks.clone());
    }
}

/// HEART_BEAT: producer groups answer checks through this connection; consumer groups list
/// this client (a new member makes the group's members rebalance, and a group's first
/// member creates its retry topic `%RETRY%<group>`, as Apache's broker does, so offsets of
/// the retry queue can be committed before anything was sent back).
async fn heartbeat(
    ctx: &Ctx,
    conn: &Arc<Conn>,
    checks: &mpsc::UnboundedSender<CheckRequest>,
    req: &RemotingCommand,
) -> Answer {
    let v = json_body(req)?;
    let client = v
        .get("clientID")
        .and_then(|c| c.as_str())
        .unwrap_or_default()
        .to_string();
    let names = |key: &str| -> Vec<String> {
        v.get(key)
            .and_then(|s| s.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.get("groupName").and_then(|g| g.as_str()))
                    .filter(|g| !g.is_empty() && *g != CLIENT_INNER_PRODUCER)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let producers = names("producerDataSet");
    let consumers = names("consumerDataSet");
    let consumer_info = |group: &str| -> ConsumerInfo {
        let data = v
            .get("consumerDataSet")
            .and_then(|s| s.as_array())
            .and_then(|a| {
                a.iter()
                    .find(|c| c.get("groupName").and_then(|g| g.as_str()) == Some(group))
            });
        let text = |k: &str| {
            data.and_then(|d| d.get(k))
                .and_then(|t| t.as_str())
                .unwrap_or_default()
                .to_string()
        };
        ConsumerInfo {
            consume_type: text("consumeType"),
            message_model: text("messageModel"),
            consume_from_where: text("consumeFromWhere"),
            subscriptions: clients::subscriptions(data.and_then(|d| d.get("subscriptionDataSet"))),
        }
    };
    // Names are kept for as long as the connection lives: bounded like every other name.
    let max = ctx.cfg.max_name_bytes;
    if let Some(long) = std::iter::once(&client)
        .chain(&producers)
        .chain(&consumers)
        .find(|n| n.len() > max)
    {
        ctx.over_limit("max_name_bytes");
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!(
                "NAME_TOO_LONG: a name in the heartbeat is {} bytes, more than the broker's max_name_bytes of {max}",
                long.len()
            ),
        ));
    }
    if !client.is_empty() {
        let mut all = lock(&ctx.clients);
        for p in &producers {
            all.producer_heartbeat(p, &client, conn.member(req));
        }
    }
    if !producers.is_empty() {
        set_groups(ctx, conn, checks, |g| {
            let mut changed = false;
            for p in producers {
                if !g.contains(&p) {
                    g.push(p);
                    changed = true;
                }
            }
            changed
        });
    }
    if client.is_empty() {
        return Ok(ok(req));
    }
    let mut joined = Vec::new();
    {
        let mut all = lock(&ctx.clients);
        for c in consumers {
            let info = consumer_info(&c);
            let first = all.consumer_group(&c).is_none();
            if all.consumer_heartbeat(&c, &client, conn.member(req), info) {
                joined.push((c, first));
            }
        }
    }
    for (group, first) in joined {
        if first {
            create_retry_topic(ctx, &group).await;
        }
        notify_ids_changed(ctx, &group);
    }
    Ok(ok(req))
}

/// Creates `%RETRY%<group>` with one queue (Apache's retryQueueNums) unless it exists. A
/// name that cannot be a topic or no room under max_topics leaves it to the first send-back,
/// which answers the reason.
async fn create_retry_topic(ctx: &Ctx, group: &str) {
    let topic = rocklet_core::topic::retry(group);
    let t = topic.clone();
    let r = ctx
        .core
        .inspect(move |b| {
            if b.topic_queue_count(&t).is_some() {
                return Ok(Ok(()));
            }
            b.create_topic(&t, 1).map_err(|e| e.to_string())
        })
        .await;
    match r {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => debug!(%topic, error = %e, "retry topic not created"),
        Ok(Err(e)) => debug!(%topic, error = %e, "retry topic not created: storage"),
        Err(e) => debug!(%topic, error = %e, "retry topic not created"),
    }
}

/// UNREGISTER_CLIENT: the client leaves its producer and consumer groups.
fn unregister(
    ctx: &Ctx,
    conn: &Conn,
    checks: &mpsc::UnboundedSender<CheckRequest>,
    req: &RemotingCommand,
) -> Answer {
    if let Some(p) = field(req, "producerGroup").filter(|p| !p.is_empty()) {
        set_groups(ctx, conn, checks, |g| {
            let before = g.len();
            g.retain(|x| x != p);
            g.len() != before
        });
    }
    if let (Some(p), Some(client)) = (field(req, "producerGroup"), field(req, "clientID")) {
        lock(&ctx.clients).unregister_producer(p, client);
    }
    if let (Some(c), Some(client)) = (field(req, "consumerGroup"), field(req, "clientID")) {
        if lock(&ctx.clients).unregister_consumer(c, client) {
            notify_ids_changed(ctx, c);
        }
        lock(&ctx.locks).release_client(c, client);
    }
    Ok(ok(req))
}

/// The body of LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: `{consumerGroup, clientId, mqSet: [{topic,
/// brokerName, queueId}]}` (`onlyThisBroker` is irrelevant with one broker).
struct LockBody {
    group: String,
    client: String,
    queues: Vec<QueueKey>,
}

fn lock_body(req: &RemotingCommand) -> Result<LockBody, RemotingCommand> {
    let v = json_body(req)?;
    let bad = |what: String| fail(req, status::SYSTEM_ERROR, what);
    let text = |key: &str| -> Result<String, RemotingCommand> {
        match v.get(key).and_then(|g| g.as_str()) {
            Some(s) if !s.is_empty() => Ok(s.to_string()),
            _ => Err(bad(format!("the body lacks `{key}`"))),
        }
    };
    let group = text("consumerGroup")?;
    rocklet_core::topic::validate_group(&group)
        .map_err(|e| bad(format!("`consumerGroup`: {e}")))?;
    let client = text("clientId")?;
    if client.len() > MAX_CLIENT_ID_LEN {
        return Err(bad(format!(
            "`clientId` is {} bytes, longer than {MAX_CLIENT_ID_LEN}",
            client.len()
        )));
    }
    let set = match v.get("mqSet") {
        None | Some(serde_json::Value::Null) => &Vec::new(),
        Some(serde_json::Value::Array(a)) => a,
        Some(_) => return Err(bad("`mqSet` is not an array".into())),
    };
    if set.len() > MAX_QUEUES_PER_REQUEST {
        return Err(bad(format!(
            "`mqSet` names {} queues, at most {MAX_QUEUES_PER_REQUEST} are taken",
            set.len()
        )));
    }
    let mut queues = Vec::with_capacity(set.len());
    for (i, q) in set.iter().enumerate() {
        let topic = q.get("topic").and_then(|t| t.as_str()).unwrap_or_default();
        if topic.is_empty() {
            return Err(bad(format!("`mqSet[{i}]` lacks `topic`")));
        }
        rocklet_core::topic::validate_name(topic)
            .map_err(|e| bad(format!("`mqSet[{i}].topic`: {e}")))?;
        let id = match q.get("queueId") {
            Some(serde_json::Value::Number(n)) => n.as_u64(),
            Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        };
        let Some(queue_id) = id.and_then(|n| u32::try_from(n).ok()) else {
            return Err(bad(format!(
                "`mqSet[{i}].queueId` is not a queue number: {:?}",
                q.get("queueId")
            )));
        };
        queues.push(QueueKey {
            topic: topic.to_string(),
            queue_id,
        });
    }
    Ok(LockBody {
        group,
        client,
        queues,
    })
}

/// LOCK_BATCH_MQ: locks (or renews) the queues for the client; the answer lists the queues
/// it holds (`lockOKMQSet`), the others are held by another client of the group.
fn lock_batch(ctx: &Ctx, conn: &Conn, req: &RemotingCommand) -> Answer {
    let b = lock_body(req)?;
    let now = ctx.clock.now_ms();
    let held = lock(&ctx.locks).lock(now, &b.group, &b.client, conn.id, &b.queues);
    let set: Vec<serde_json::Value> = held
        .iter()
        .map(|q| {
            serde_json::json!({
                "topic": q.topic,
                "brokerName": BROKER_NAME,
                "queueId": q.queue_id,
            })
        })
        .collect();
    let mut r = ok(req);
    r.body = serde_json::to_vec(&serde_json::json!({ "lockOKMQSet": set })).unwrap_or_default();
    Ok(r)
}

/// UNLOCK_BATCH_MQ: releases the client's locks on the queues (others' locks stay).
fn unlock_batch(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let b = lock_body(req)?;
    lock(&ctx.locks).unlock(&b.group, &b.client, &b.queues);
    Ok(ok(req))
}

/// GET_CONSUMER_LIST_BY_GROUP: the clients whose heartbeats named the group.
fn consumer_list(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?;
    let ids: Vec<String> = lock(&ctx.clients)
        .consumer_group(group)
        .map(|g| g.members.keys().cloned().collect())
        .unwrap_or_default();
    if ids.is_empty() {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("no consumer of group {group} is connected"),
        ));
    }
    let mut r = ok(req);
    r.body = serde_json::to_vec(&serde_json::json!({ "consumerIdList": ids })).unwrap_or_default();
    Ok(r)
}

/// SEND_MESSAGE_V2's short header names.
const V2_NAMES: [(&str, &str); 14] = [
    ("a", "producerGroup"),
    ("b", "topic"),
    ("c", "defaultTopic"),
    ("d", "defaultTopicQueueNums"),
    ("e", "queueId"),
    ("f", "sysFlag"),
    ("g", "bornTimestamp"),
    ("h", "flag"),
    ("i", "properties"),
    ("j", "reconsumeTimes"),
    ("k", "unitMode"),
    ("l", "maxReconsumeTimes"),
    ("m", "batch"),
    ("n", "brokerName"),
];

/// Parses `key\x01value\x02…`.
#[must_use]
pub fn parse_properties(s: &str) -> Vec<(String, String)> {
    s.split('\u{2}')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            p.split_once('\u{1}')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// What a v4 producer sent, as the core takes it.
struct Incoming {
    message: NewMessage,
    /// Producer group of a transactional (half) message.
    txn_group: Option<String>,
    immunity_ms: Option<u64>,
}

/// A socket address as a record's host field.
pub fn host_of(a: SocketAddr) -> Host {
    match a {
        SocketAddr::V4(v4) => Host::V4(v4.ip().octets(), v4.port()),
        SocketAddr::V6(v6) => Host::V6(v6.ip().octets(), v6.port()),
    }
}

/// What the send header says about every message of the request.
#[derive(Clone, Copy)]
struct SendHead<'a> {
    topic: &'a str,
    queue_id: Option<u32>,
    born: Option<u64>,
    peer: SocketAddr,
    group: Option<&'a str>,
}

fn incoming(h: SendHead<'_>, body: Vec<u8>, flag: i32, props: Vec<(String, String)>) -> Incoming {
    let header_group = h.group;
    let mut m = NewMessage {
        topic: h.topic.to_string(),
        body,
        queue_id: h.queue_id,
        flag,
        born_timestamp: h.born,
        born_host: Some(host_of(h.peer)),
        ..Default::default()
    };
    let mut txn = false;
    let mut group = None;
    let mut immunity_ms = None;
    for (k, v) in props {
        match k.as_str() {
            prop::TAGS => m.tag = Some(v).filter(|t| !t.is_empty()),
            prop::KEYS => {
                m.keys = v
                    .split(' ')
                    .filter(|k| !k.is_empty())
                    .map(String::from)
                    .collect()
            }
            prop::UNIQ_KEY => m.message_id = Some(v).filter(|i| !i.is_empty()),
            prop::TRAN_MSG => txn = v == "true",
            prop::PGROUP => group = Some(v),
            prop::WAIT => {}
            prop::CHECK_IMMUNITY_TIME_IN_SECONDS => {
                immunity_ms = v.trim().parse::<u64>().ok().map(|s| s.saturating_mul(1000));
            }
            prop::SHARDING_KEY => m.message_group = Some(v).filter(|g| !g.is_empty()),
            _ => m.properties.push((k, v)),
        }
    }
    let txn_group = txn.then(|| {
        group
            .or_else(|| header_group.map(String::from))
            .unwrap_or_default()
    });
    Incoming {
        message: m,
        txn_group,
        immunity_ms,
    }
}

/// The messages of a SEND_BATCH_MESSAGE body (`MessageDecoder.encodeMessages`): per
/// message TOTALSIZE 4, MAGICCODE 4, BODYCRC 4, FLAG 4, BODY length 4 + body, PROPERTIES
/// length 2 + properties.
/// At most `max` messages are decoded (`max_batch_messages`; the core bounds the bytes).
pub fn decode_batch(mut b: &[u8], max: usize) -> Result<Vec<(i32, Vec<u8>, String)>, String> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if out.len() >= max {
            return Err(format!(
                "TOO_MANY_MESSAGES: the batch holds more than the broker's max_batch_messages of {max}; send it in smaller batches"
            ));
        }
        if b.len() < 20 {
            return Err(format!(
                "batch message {} is truncated ({} bytes left)",
                out.len(),
                b.len()
            ));
        }
        let total = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if total < 22 || total > b.len() {
            return Err(format!(
                "batch message {} declares {total} bytes, {} are left",
                out.len(),
                b.len()
            ));
        }
        let m = &b[..total];
        let flag = i32::from_be_bytes([m[12], m[13], m[14], m[15]]);
        let body_len = u32::from_be_bytes([m[16], m[17], m[18], m[19]]) as usize;
        if body_len > total - 22 {
            return Err(format!(
                "batch message {}: body of {body_len} bytes overruns the message",
                out.len()
            ));
        }
        let body = m[20..20 + body_len].to_vec();
        let p = 20 + body_len;
        let props_len = u16::from_be_bytes([m[p], m[p + 1]]) as usize;
        if p + 2 + props_len != total {
            return Err(format!(
                "batch message {}: properties of {props_len} bytes do not end the message",
                out.len()
            ));
        }
        let props = String::from_utf8(m[p + 2..total].to_vec())
            .map_err(|_| format!("batch message {}: properties are not UTF-8", out.len()))?;
        out.push((flag, body, props));
        b = &b[total..];
    }
    if out.is_empty() {
        return Err("the batch holds no message".into());
    }
    Ok(out)
}

async fn send(
    ctx: &Ctx,
    conn: &Conn,
    checks: &mpsc::UnboundedSender<CheckRequest>,
    req: &RemotingCommand,
) -> Answer {
    // Normalize V2's short names (SEND_MESSAGE_V2, and SEND_BATCH_MESSAGE from Java).
    let mut h = RemotingCommand {
        ext: req.ext.clone(),
        opaque: req.opaque,
        version: req.version,
        serialize: req.serialize,
        ..Default::default()
    };
    if req.code != code::SEND_MESSAGE {
        for (short, long) in V2_NAMES {
            if let Some(v) = req.ext.get(short) {
                h.ext.insert(long.to_string(), v.clone());
            }
        }
    }
    // The C++ client marks a batch sent as SEND_MESSAGE with batch = 1.
    let batch =
        req.code == code::SEND_BATCH_MESSAGE || matches!(field(&h, "batch"), Some("true" | "1"));
    let h = &h;
    let topic = required(h, "topic")?.to_string();
    let queue_id: i32 = number_or(h, "queueId", -1)?;
    let queue_id = u32::try_from(queue_id).ok();
    let sys: i32 = number_or(h, "sysFlag", 0)?;
    let sys = sys as u32;
    if batch && compression::is_compressed(sys) {
        // No client compresses a batch (entries carry no sysFlag of their own).
        return Err(fail(
            req,
            status::MESSAGE_ILLEGAL,
            "a batch cannot be compressed as a whole: compress no batch, or send its messages one by one",
        ));
    }
    let born: Option<u64> = number_or(h, "bornTimestamp", 0u64).ok().filter(|b| *b > 0);
    let header_group = field(h, "producerGroup");
    let props = field(h, "properties").unwrap_or_default();
    let head = SendHead {
        topic: &topic,
        queue_id,
        born,
        peer: conn.peer,
        group: header_group,
    };
    let request = if batch {
        let max = ctx.cfg.max_batch_messages as usize;
        let entries = decode_batch(&req.body, max).map_err(|e| {
            if e.starts_with("TOO_MANY_MESSAGES") {
                ctx.over_limit("max_batch_messages");
            }
            fail(req, status::MESSAGE_ILLEGAL, e)
        })?;
        let mut messages = Vec::with_capacity(entries.len());
        for (flag, body, p) in entries {
            let mut all = parse_properties(props);
            all.extend(parse_properties(&p));
            let i = incoming(head, body, flag, all);
            if i.txn_group.is_some() {
                return Err(fail(
                    req,
                    status::MESSAGE_ILLEGAL,
                    "a transactional message cannot be sent in a batch",
                ));
            }
            messages.push(i.message);
        }
        Request::Send { messages }
    } else {
        let flag: i32 = number_or(h, "flag", 0)?;
        let limit = ctx.cfg.core.max_message_size as usize;
        let body = compression::plain_body(sys, req.body.clone(), limit)
            .map_err(|e| fail(req, status::MESSAGE_ILLEGAL, e.to_string()))?;
        let i = incoming(head, body, flag, parse_properties(props));
        match i.txn_group {
            Some(group) if !group.is_empty() => {
                // This connection can answer checks of its group from now on.
                let g = group.clone();
                set_groups(ctx, conn, checks, |gs| {
                    if gs.contains(&g) {
                        false
                    } else {
                        gs.push(g);
                        true
                    }
                });
                Request::Prepare {
                    group,
                    message: i.message,
                    check_immunity_ms: i.immunity_ms,
                }
            }
            Some(_) => {
                return Err(fail(
                    req,
                    status::MESSAGE_ILLEGAL,
                    "a transactional message needs a producer group (PGROUP or producerGroup)",
                ))
            }
            None => Request::Send {
                messages: vec![i.message],
            },
        }
    };
    match ctx.core.request(request).await {
        Ok(Reply::Sent(results)) if !results.is_empty() => {
            let store = ctx.store_host();
            let ids: Vec<String> = results
                .iter()
                .map(|r| offset_msg_id(store, r.offset))
                .collect();
            let first = &results[0];
            let mut r = ok(req);
            r.ext.insert("msgId".into(), ids.join(","));
            r.ext.insert("queueId".into(), first.queue_id.to_string());
            r.ext
                .insert("queueOffset".into(), first.queue_offset.to_string());
            if first.txn.is_some() {
                // As Apache: the message's UNIQ_KEY, which is also the transaction id clients
                // give checkLocalTransaction (from the checked message's UNIQ_KEY).
                r.ext.insert("transactionId".into(), first.msg_id.clone());
            }
            r.ext.insert("MSG_REGION".into(), "DefaultRegion".into());
            r.ext.insert("TRACE_ON".into(), "false".into());
            Ok(r)
        }
        Ok(Reply::Error(e)) => Err(client_error(req, &e)),
        Ok(other) => Err(unexpected(req, &other)),
        Err(e) => Err(core_failure(req, &e)),
    }
}

/// END_TRANSACTION: commitLogOffset is the transaction (the half message's log offset).
async fn end_transaction(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let offset: u64 = number(req, "commitLogOffset")?;
    let kind: u32 = number(req, "commitOrRollback")?;
    let resolution = match kind {
        sys_flag::TRANSACTION_COMMIT_TYPE => Resolution::Commit,
        sys_flag::TRANSACTION_ROLLBACK_TYPE => Resolution::Rollback,
        sys_flag::TRANSACTION_NOT_TYPE => Resolution::Unknown,
        other => {
            return Err(fail(
                req,
                status::SYSTEM_ERROR,
                format!("commitOrRollback {other} is not 0 (unknown), 8 (commit) or 12 (rollback)"),
            ))
        }
    };
    let from_check = field(req, "fromTransactionCheck") == Some("true");
    let group = field(req, "producerGroup")
        .filter(|g| !g.is_empty())
        .map(String::from);
    let request = Request::EndTransaction {
        txn: TxnId(offset),
        resolution,
        group,
        from_check,
    };
    match ctx.core.request(request).await {
        Ok(Reply::Ended { .. }) => Ok(ok(req)),
        Ok(Reply::Error(e)) => Err(client_error(req, &e)),
        Ok(other) => Err(unexpected(req, &other)),
        Err(e) => Err(core_failure(req, &e)),
    }
}

/// PULL_MESSAGE, with long polling when the request allows suspending (cut short when the
/// peer goes: nobody would read the answer).
async fn pull(ctx: &Ctx, conn: &Conn, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let queue_id: u32 = number(req, "queueId")?;
    let offset: u64 = number(req, "queueOffset")?;
    let max: u32 = number_or(req, "maxMsgNums", 32u32)?.clamp(1, MAX_PULL);
    let flags: i32 = number_or(req, "sysFlag", 0)?;
    let commit: i64 = number_or(req, "commitOffset", -1i64)?;
    let suspend_ms: u64 = number_or(req, "suspendTimeoutMillis", 0u64)?;
    let filter = TagFilter::parse(filter_field(ctx, req, "subscription")?);
    if flags & PULL_COMMIT_OFFSET != 0 {
        if let Ok(c) = u64::try_from(commit) {
            let r = ctx
                .core
                .request(Request::CommitOffset {
                    group: group.clone(),
                    topic: topic.clone(),
                    queue_id,
                    offset: c,
                })
                .await;
            if let Err(e) = r {
                return Err(core_failure(req, &e));
            }
        }
    }
    let wait = if flags & PULL_SUSPEND != 0 {
        suspend_ms.min(ctx.cfg.max_long_polling_ms)
    } else {
        0
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait);
    let answer = |code: i32, next: u64, max_offset: u64, body: Vec<u8>| {
        let mut r = RemotingCommand::response_to(req, code, None);
        r.ext.insert("suggestWhichBrokerId".into(), "0".into());
        r.ext.insert("nextBeginOffset".into(), next.to_string());
        r.ext.insert("minOffset".into(), "0".into());
        r.ext.insert("maxOffset".into(), max_offset.to_string());
        r.body = body;
        r
    };
    loop {
        let request = Request::Pull {
            group: group.clone(),
            topic: topic.clone(),
            queue_id,
            offset: Some(offset),
            max,
            filter: filter.clone(),
            auto_commit: false,
        };
        let (reply, woken) = match ctx.core.receive(request).await {
            Ok(x) => x,
            Err(e) => return Err(core_failure(req, &e)),
        };
        match reply {
            Reply::Pulled {
                messages,
                next_offset,
                max_offset,
            } => {
                if !messages.is_empty() {
                    let mut body = Vec::new();
                    for m in &messages {
                        let sys = m.sys_flag & sys_flag::TRANSACTION_TYPE_MASK;
                        body.extend(encode_message(m, m.offset, sys, &[]));
                    }
                    return Ok(answer(status::SUCCESS, next_offset, max_offset, body));
                }
                if offset > max_offset {
                    return Ok(answer(
                        status::PULL_NOT_FOUND,
                        max_offset,
                        max_offset,
                        Vec::new(),
                    ));
                }
                if next_offset != offset {
                    // Everything in between was filtered out.
                    return Ok(answer(
                        status::PULL_RETRY_IMMEDIATELY,
                        next_offset,
                        max_offset,
                        Vec::new(),
                    ));
                }
                if tokio::time::Instant::now() >= deadline {
                    return Ok(answer(
                        status::PULL_NOT_FOUND,
                        offset,
                        max_offset,
                        Vec::new(),
                    ));
                }
                tokio::select! {
                    _ = woken => {}
                    () = tokio::time::sleep_until(deadline) => {}
                    () = conn.gone() => {
                        return Ok(answer(status::PULL_NOT_FOUND, offset, max_offset, Vec::new()));
                    }
                }
            }
            Reply::Error(ClientError::UnknownTopic(_)) => {
                // Nothing was ever sent to it (a retry topic, typically): nothing to pull.
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {}
                    () = conn.gone() => {}
                }
                return Ok(answer(status::PULL_NOT_FOUND, offset, 0, Vec::new()));
            }
            Reply::Error(e) => return Err(client_error(req, &e)),
            other => return Err(unexpected(req, &other)),
        }
    }
}

async fn query_offset(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let queue_id: u32 = number(req, "queueId")?;
    let committed = ctx
        .core
        .inspect(move |b| b.committed_offset(&group, &topic, queue_id))
        .await
        .map_err(|e| core_failure(req, &e))?;
    // Nothing committed: the queue's start (every queue starts at 0 here), as RocketMQ
    // answers while the first messages are still in the log.
    let mut r = ok(req);
    r.ext
        .insert("offset".into(), committed.unwrap_or(0).to_string());
    Ok(r)
}

async fn update_offset(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let queue_id: u32 = number(req, "queueId")?;
    let offset: u64 = number(req, "commitOffset")?;
    match ctx
        .core
        .request(Request::CommitOffset {
            group,
            topic,
            queue_id,
            offset,
        })
        .await
    {
        Ok(Reply::OffsetCommitted) => Ok(ok(req)),
        // The core's UnknownTopic says auto-create is off; for a commit the reason is that
        // offsets are kept only for queues that exist (auto-create or not).
        Ok(Reply::Error(ClientError::UnknownTopic(t))) => Err(fail(
            req,
            status::TOPIC_NOT_EXIST,
            format!("UNKNOWN_TOPIC: topic `{t}` does not exist: offsets are kept only for queues of existing topics"),
        )),
        Ok(Reply::Error(e)) => Err(client_error(req, &e)),
        Ok(other) => Err(unexpected(req, &other)),
        Err(e) => Err(core_failure(req, &e)),
    }
}

async fn max_offset(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let topic = required(req, "topic")?.to_string();
    let queue_id: u32 = number(req, "queueId")?;
    let next = ctx
        .core
        .inspect(move |b| {
            b.topic_info(&topic)
                .and_then(|t| t.queues.iter().find(|q| q.0 == queue_id).map(|q| q.1))
        })
        .await
        .map_err(|e| core_failure(req, &e))?;
    let mut r = ok(req);
    r.ext.insert("offset".into(), next.unwrap_or(0).to_string());
    Ok(r)
}

/// GET_MIN_OFFSET: the queue's first offset (0 unless the queue was started later, as an
/// imported RocketMQ store's queue is).
async fn min_offset(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let topic = required(req, "topic")?.to_string();
    let queue_id: u32 = number_or(req, "queueId", 0)?;
    let min = ctx
        .core
        .inspect(move |b| b.queue_min_offset(&topic, queue_id))
        .await
        .map_err(|e| core_failure(req, &e))?
        .unwrap_or(0);
    let mut r = ok(req);
    r.ext.insert("offset".into(), min.to_string());
    Ok(r)
}

/// CONSUMER_SEND_MSG_BACK: the message at `offset` goes to the group's retry topic (or DLQ).
async fn send_back(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let offset: u64 = number(req, "offset")?;
    let group = required(req, "group")?.to_string();
    let level: i32 = number_or(req, "delayLevel", 0)?;
    let delay_level = u32::try_from(level).ok().filter(|l| *l > 0);
    match ctx
        .core
        .request(Request::SendBack {
            group,
            offset,
            delay_level,
        })
        .await
    {
        Ok(Reply::Sent(_)) | Ok(Reply::Forwarded) => Ok(ok(req)),
        Ok(Reply::Error(e)) => Err(client_error(req, &e)),
        Ok(other) => Err(unexpected(req, &other)),
        Err(e) => Err(core_failure(req, &e)),
    }
}

/// Pop consumers' filter: a tag expression (`expType` TAG, or none).
fn pop_filter(ctx: &Ctx, req: &RemotingCommand) -> Result<TagFilter, RemotingCommand> {
    match field(req, "expType") {
        None | Some("" | "TAG") => Ok(TagFilter::parse(filter_field(ctx, req, "exp")?)),
        Some(other) => Err(fail(
            req,
            status::MESSAGE_ILLEGAL,
            format!("filter type `{other}` is not supported: use a TAG expression"),
        )),
    }
}

/// The answer of a pop that found `msgs`: the records as pulls carry them (reconsume times
/// = delivery attempt - 1), and in the header what clients build each extraInfo from.
fn popped(
    req: &RemotingCommand,
    msgs: &[rocklet_core::Received],
    invisible_ms: u64,
) -> RemotingCommand {
    let pop_time = msgs[0].visible_at.saturating_sub(invisible_ms);
    let handles: Vec<&rocklet_core::ReceiptHandle> = msgs.iter().map(|r| &r.handle).collect();
    let (start, offsets) = pop::offset_infos(&handles);
    let mut body = Vec::new();
    for r in msgs {
        let mut m = r.message.clone();
        m.reconsume_times = r.attempt.saturating_sub(1);
        let sys = m.sys_flag & sys_flag::TRANSACTION_TYPE_MASK;
        body.extend(encode_message(&m, m.offset, sys, &[]));
    }
    let mut resp = ok(req);
    resp.ext.insert("popTime".into(), pop_time.to_string());
    resp.ext
        .insert("invisibleTime".into(), invisible_ms.to_string());
    resp.ext.insert("reviveQid".into(), "0".into());
    resp.ext.insert("restNum".into(), "0".into());
    resp.ext.insert("startOffsetInfo".into(), start);
    resp.ext.insert("msgOffsetInfo".into(), offsets);
    resp.body = body;
    resp
}

/// POP_MESSAGE: the core's Receive (messages invisible to the group for `invisibleTime`),
/// long polling up to `pollTime` when nothing is ready (cut short when the peer goes).
async fn pop_message(ctx: &Ctx, conn: &Conn, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let queue_id: i32 = number_or(req, "queueId", -1)?;
    let queue_id = u32::try_from(queue_id).ok();
    let max: u32 = number_or(req, "maxMsgNums", 32u32)?.clamp(1, MAX_POP);
    let invisible_ms: u64 = number(req, "invisibleTime")?;
    if invisible_ms == 0 {
        return Err(fail(
            req,
            status::MESSAGE_ILLEGAL,
            "invisibleTime must be above 0 ms",
        ));
    }
    if field(req, "order") == Some("true") {
        return Err(fail(
            req,
            status::REQUEST_CODE_NOT_SUPPORTED,
            "orderly pop (order = true) is not supported: use an orderly push consumer",
        ));
    }
    let filter = pop_filter(ctx, req)?;
    let poll_ms: u64 = number_or(req, "pollTime", 0u64)?;
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(poll_ms.min(ctx.cfg.max_long_polling_ms));
    let not_found = |ctx: &Ctx| {
        let mut r = RemotingCommand::response_to(req, status::PULL_NOT_FOUND, None);
        r.ext
            .insert("popTime".into(), ctx.clock.now_ms().to_string());
        r.ext
            .insert("invisibleTime".into(), invisible_ms.to_string());
        r.ext.insert("reviveQid".into(), "0".into());
        r.ext.insert("restNum".into(), "0".into());
        r
    };
    loop {
        let request = Request::Receive {
            group: group.clone(),
            topic: topic.clone(),
            queue_id,
            max,
            invisible_ms,
            filter: filter.clone(),
        };
        let (reply, woken) = ctx
            .core
            .receive(request)
            .await
            .map_err(|e| core_failure(req, &e))?;
        match reply {
            Reply::Received(msgs) if !msgs.is_empty() => {
                return Ok(popped(req, &msgs, invisible_ms))
            }
            Reply::Received(_) => {}
            Reply::Error(ClientError::UnknownTopic(_)) => {
                // Nothing was ever sent to it: nothing to pop (yet).
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {}
                    () = conn.gone() => {}
                }
                return Ok(not_found(ctx));
            }
            Reply::Error(e) => return Err(client_error(req, &e)),
            other => return Err(unexpected(req, &other)),
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(not_found(ctx));
        }
        tokio::select! {
            _ = woken => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = conn.gone() => return Ok(not_found(ctx)),
        }
    }
}

/// The core handle an ACK_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME names (see [`pop`]), and
/// the renewal token it came from, if any.
fn receipt(
    ctx: &Ctx,
    req: &RemotingCommand,
    group: &str,
    topic: &str,
) -> Result<(rocklet_core::ReceiptHandle, Option<u32>), RemotingCommand> {
    let extra = pop::parse_extra_info(required(req, "extraInfo")?)
        .map_err(|e| fail(req, status::MESSAGE_ILLEGAL, e))?;
    let queue_offset = match extra.queue_offset {
        Some(o) => o,
        None => number(req, "offset")?,
    };
    if extra.revive_qid == 0 {
        let handle = rocklet_core::ReceiptHandle {
            topic: topic.to_string(),
            queue_id: extra.queue_id,
            queue_offset,
            generation: extra.ck,
        };
        return Ok((handle, None));
    }
    let token = u32::try_from(extra.revive_qid).ok();
    let renewed =
        token.and_then(|t| lock(&ctx.renewals).get(t, group, topic, extra.queue_id, queue_offset));
    match (renewed, token) {
        (Some(h), Some(t)) => Ok((h, Some(t))),
        _ => Err(client_error(
            req,
            &ClientError::InvalidReceiptHandle(format!(
                "extraInfo names reviveQid {}, which is no invisible-time change of group {group} on {topic} queue {} offset {queue_offset} this broker remembers (it restarted, or the change is long past)",
                extra.revive_qid, extra.queue_id
            )),
        )),
    }
}

/// ACK_MESSAGE: the core's Ack of the delivery extraInfo names.
async fn ack_message(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let (handle, token) = receipt(ctx, req, &group, &topic)?;
    match ctx.core.request(Request::Ack { group, handle }).await {
        Ok(Reply::Acked) => {
            if let Some(t) = token {
                lock(&ctx.renewals).remove(t);
            }
            Ok(ok(req))
        }
        Ok(Reply::Error(e)) => Err(client_error(req, &e)),
        Ok(other) => Err(unexpected(req, &other)),
        Err(e) => Err(core_failure(req, &e)),
    }
}

/// CHANGE_MESSAGE_INVISIBLETIME: the core's ChangeInvisible; the answer's reviveQid is the
/// token the client's next extraInfo will carry.
async fn change_invisible(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let invisible_ms: u64 = number(req, "invisibleTime")?;
    let (handle, old) = receipt(ctx, req, &group, &topic)?;
    let request = Request::ChangeInvisible {
        group: group.clone(),
        handle,
        invisible_ms,
    };
    match ctx.core.request(request).await {
        Ok(Reply::InvisibleChanged { handle, visible_at }) => {
            let token = {
                let mut r = lock(&ctx.renewals);
                if let Some(t) = old {
                    r.remove(t);
                }
                r.insert(ctx.clock.now_ms(), &group, handle, visible_at)
            };
            let mut resp = ok(req);
            resp.ext.insert(
                "popTime".into(),
                visible_at.saturating_sub(invisible_ms).to_string(),
            );
            resp.ext
                .insert("invisibleTime".into(), invisible_ms.to_string());
            resp.ext.insert("reviveQid".into(), token.to_string());
            Ok(resp)
        }
        Ok(Reply::Error(e)) => Err(client_error(req, &e)),
        Ok(other) => Err(unexpected(req, &other)),
        Err(e) => Err(core_failure(req, &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(body: &[u8], props: &str) -> Vec<u8> {
        let total = 20 + body.len() + 2 + props.len();
        let mut v = (total as u32).to_be_bytes().to_vec();
        v.extend_from_slice(&[0; 8]);
        v.extend_from_slice(&5i32.to_be_bytes());
        v.extend_from_slice(&(body.len() as u32).to_be_bytes());
        v.extend_from_slice(body);
        v.extend_from_slice(&(props.len() as u16).to_be_bytes());
        v.extend_from_slice(props.as_bytes());
        v
    }

    #[test]
    fn batches_decode_and_malformed_ones_are_named() {
        let mut b = entry(b"one", "UNIQ_KEY\u{1}A\u{2}");
        b.extend(entry(b"", ""));
        let got = decode_batch(&b, 100).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(
            got[0],
            (5, b"one".to_vec(), "UNIQ_KEY\u{1}A\u{2}".to_string())
        );
        assert_eq!(got[1].1, b"");
        assert!(decode_batch(&[], 100).unwrap_err().contains("no message"));
        assert!(decode_batch(&b, 1)
            .unwrap_err()
            .contains("max_batch_messages of 1"));
        assert!(decode_batch(&b[..b.len() - 1], 100).is_err());
        assert!(decode_batch(&b[..10], 100)
            .unwrap_err()
            .contains("truncated"));
        // a body length past the entry
        let mut bad = entry(b"abc", "");
        bad[16..20].copy_from_slice(&1000u32.to_be_bytes());
        assert!(decode_batch(&bad, 100).unwrap_err().contains("overruns"));
        // a total size past the bytes, and one too small to hold the fixed fields
        let mut bad = entry(b"abc", "");
        bad[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode_batch(&bad, 100).unwrap_err().contains("declares"));
        let mut bad = entry(b"abc", "");
        bad[0..4].copy_from_slice(&3u32.to_be_bytes());
        assert!(decode_batch(&bad, 100).is_err());
    }

    #[test]
    fn properties_parse_and_map_onto_the_core_message() {
        let p = parse_properties("TAGS\u{1}t\u{2}KEYS\u{1}a b\u{2}UNIQ_KEY\u{1}U\u{2}TRAN_MSG\u{1}true\u{2}PGROUP\u{1}G\u{2}WAIT\u{1}true\u{2}DELAY\u{1}2\u{2}x\u{1}y\u{2}junk\u{2}");
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let head = SendHead {
            topic: "T",
            queue_id: Some(1),
            born: None,
            peer,
            group: Some("H"),
        };
        let i = incoming(head, b"b".to_vec(), 0, p);
        assert_eq!(i.txn_group.as_deref(), Some("G"));
        assert_eq!(i.message.tag.as_deref(), Some("t"));
        assert_eq!(i.message.keys, ["a", "b"]);
        assert_eq!(i.message.message_id.as_deref(), Some("U"));
        assert_eq!(
            i.message.properties,
            [
                ("DELAY".to_string(), "2".to_string()),
                ("x".into(), "y".into())
            ]
        );
        assert_eq!(i.message.born_host, Some(Host::V4([127, 0, 0, 1], 5000)));
        // The header's group when PGROUP is absent; not transactional without TRAN_MSG.
        let p = parse_properties("TRAN_MSG\u{1}true\u{2}");
        let i = incoming(head, vec![1], 0, p);
        assert_eq!(i.txn_group.as_deref(), Some("H"));
        let i = incoming(head, vec![1], 0, Vec::new());
        assert_eq!(i.txn_group, None);
    }

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

    #[test]
    fn offset_message_ids_carry_host_and_offset() {
        let id = offset_msg_id(Host::V4([127, 0, 0, 1], 10911), 0x1234);
        assert_eq!(id, "7F00000100002A9F0000000000001234");
    }
}
