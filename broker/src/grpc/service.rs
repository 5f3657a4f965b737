//! RocketMQ 5 gRPC: `apache.rocketmq.v2.MessagingService` over the core thread.
//!
//! Every RPC converts its request (`convert`), asks the core thread, and converts the
//! reply; a client's mistake comes back as a RocketMQ `Status` naming the problem, never as
//! a panic. Per-connection state is only what routing needs: which telemetry streams are
//! producers of which topics (for transaction checks).
//!
//! Memory under clients that never read: a ReceiveMessage response is built whole (the
//! messages popped) and held until the client reads it, as HTTP/2 flow control stops the
//! writes. A broker-wide [`ReceiveBudget`] counts those bytes from when a response is built
//! until its stream is dropped (written out, or the client gone); a receive that starts with
//! the budget used up pops nothing and gets `TOO_MANY_REQUESTS`.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use prost::Message as _;
use rocklet_core::{ClientError, Millis, Resolution, TagFilter, TxnId};
use tokio::sync::{mpsc, Notify};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request as GrpcRequest, Response, Status as GrpcStatus, Streaming};
use tracing::{debug, info};

use super::convert::{self, duration, duration_ms, resource_name, timestamp};
use super::lease::Leases;
use super::status::{bad_request, client_error, core_failure, ok, status};
use crate::auth::{grpc as auth_grpc, Auth};
use crate::clock::{Clock, SystemClock};
use crate::config::{BrokerConfig, TopicMessageType};
use crate::driver::{txn_group, CoreHandle};
use crate::metrics::Metrics;
use crate::pb::v2 as pb;
use crate::pb::v2::messaging_service_server::MessagingService;
use crate::pb::v2::{Code, Status};

/// Long polling of a receive that names none.
const DEFAULT_LONG_POLL_MS: Millis = 20_000;
/// How long before the client's deadline a long poll answers.
const DEADLINE_MARGIN_MS: Millis = 300;
/// Second settings reply on a telemetry stream (Node 1.0.8 can miss the first).
const SETTINGS_RESEND: Duration = Duration::from_secs(1);
/// What a received message holds besides its body, at most (properties, ids, handle), for the
/// budget's reservation while a pop is in progress.
const MESSAGE_OVERHEAD: u64 = 64 << 10;
/// Room for the encoding of one received message beyond its record (ids, receipt handle,
/// timestamps), when a pop's size is bounded by the core's transfer cap.
const PROTO_PER_MESSAGE: u64 = 1 << 10;

/// The service.
#[derive(Debug, Clone)]
pub struct Messaging {
    core: CoreHandle,
    cfg: Arc<BrokerConfig>,
    metrics: Arc<Metrics>,
    next_conn: Arc<AtomicU64>,
    budget: Arc<ReceiveBudget>,
    leases: Arc<Leases>,
    clock: Arc<dyn Clock>,
    auth: Arc<Auth>,
    /// Cluster mode: routes name the group's current master.
    cluster: Option<crate::cluster::View>,
}

impl Messaging {
    /// A service over a running core thread.
    #[must_use]
    pub fn new(core: CoreHandle, cfg: Arc<BrokerConfig>, metrics: Arc<Metrics>) -> Self {
        // The core returns at most max_transfer_bytes of records per receive, or one
        // record of at most the largest message: a pop of many messages needs no more.
        let per_pop = u64::from(cfg.core.max_transfer_bytes)
            .max(u64::from(cfg.core.max_message_size) + MESSAGE_OVERHEAD);
        let budget = Arc::new(ReceiveBudget::new(
            cfg.max_inflight_receive_bytes,
            u64::from(cfg.core.max_message_size) + MESSAGE_OVERHEAD,
            per_pop,
            metrics.clone(),
        ));
        let leases = Arc::new(Leases::new(cfg.core.default_invisible_ms));
        Messaging {
            core,
            cfg,
            metrics,
            next_conn: Arc::new(AtomicU64::new(1)),
            budget,
            leases,
            clock: Arc::new(SystemClock),
            auth: Auth::disabled(),
            cluster: None,
        }
    }

    /// Cluster mode: routes answer with the group's current master, whichever node answers.
    #[must_use]
    pub fn with_cluster(mut self, view: Option<crate::cluster::View>) -> Self {
        self.cluster = view;
        self
    }

    /// Cluster mode on a replica: the master a write goes to (`cluster::forward`).
    fn forward_to(
        &self,
        md: &tonic::metadata::MetadataMap,
    ) -> Option<(crate::cluster::View, std::net::SocketAddr)> {
        let view = self.cluster.as_ref()?;
        let me = self.cfg.cluster.as_ref()?.node_id;
        crate::cluster::forward::target(view, me, md).map(|at| (view.clone(), at))
    }

    /// The clock leases are timed by (the broker's; the system clock by default).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Starts renewing the deliveries push consumers hold ([`super::lease`]); the task ends
    /// when the service is dropped.
    pub fn spawn_renewer(&self) {
        super::lease::spawn_renewer(&self.leases, self.core.clone(), self.clock.clone());
    }

    /// Deliveries held for push consumers now.
    #[must_use]
    pub fn leases(&self) -> &Arc<Leases> {
        &self.leases
    }

    /// The same service checking credentials and ACLs before every call.
    #[must_use]
    pub fn with_auth(mut self, auth: Arc<Auth>) -> Self {
        self.auth = auth;
        self
    }

    /// A resource's name, refused when missing or longer than `max_name_bytes`.
    fn name(&self, r: Option<&pb::Resource>, field: &str) -> Result<String, Status> {
        let name = resource_name(r, field)?;
        let max = self.cfg.max_name_bytes;
        if name.len() > max {
            self.metrics.over_limit("max_name_bytes");
            return Err(bad_request(format!(
                "`{field}` is {} bytes, more than the broker's max_name_bytes of {max}",
                name.len()
            )));
        }
        Ok(name)
    }

    fn counted(&self, rpc: &str, s: &Status) {
        self.metrics.request(rpc);
        self.refused(rpc, s);
    }

    /// Counts and logs a non-OK answer.
    fn refused(&self, rpc: &str, s: &Status) {
        if s.code != Code::Ok as i32 {
            self.metrics.request_errors.fetch_add(1, Ordering::Relaxed);
            debug!(rpc, code = s.code, message = %s.message, "request refused");
        }
    }

    /// The queues of a topic for routes and assignments; `Err` for an invalid or unknown topic.
    async fn queues_of(&self, topic: &str) -> Result<u32, Status> {
        rocklet_core::topic::validate_name(topic).map_err(|e| client_error(&e))?;
        let t = topic.to_string();
        let existing = self
            .core
            .inspect(move |b| b.topic_info(&t).map(|i| i.queues.len() as u32))
            .await
            .map_err(|e| core_failure(&e))?;
        if let Some(n) = existing {
            return Ok(n.max(1));
        }
        if let Some(d) = self.cfg.topics.iter().find(|d| d.name == topic) {
            return Ok(d.queues.unwrap_or(self.cfg.core.default_queues));
        }
        if self.cfg.core.auto_create_topics {
            return Ok(self.cfg.core.default_queues);
        }
        Err(client_error(&ClientError::UnknownTopic(topic.into())))
    }

    fn broker_of(&self, endpoints: Option<&pb::Endpoints>) -> pb::Broker {
        if let Some(view) = &self.cluster {
            // The group's master, as etcd names it (this node when it is the master).
            return match view.master() {
                Some(m) => broker_at(
                    self.cfg
                        .cluster
                        .as_ref()
                        .map_or("rocklet".into(), |c| c.broker_name.clone()),
                    m.advertise,
                ),
                None => broker_at("rocklet".into(), self.cfg.listen),
            };
        }
        // Answer with the address the client reached us at, so later RPCs go to it too.
        let endpoints = match endpoints {
            Some(e) if !e.addresses.is_empty() => e.clone(),
            _ => pb::Endpoints {
                scheme: if self.cfg.listen.is_ipv4() {
                    pb::AddressScheme::IPv4
                } else {
                    pb::AddressScheme::IPv6
                } as i32,
                addresses: vec![pb::Address {
                    host: self.cfg.listen.ip().to_string(),
                    port: i32::from(self.cfg.listen.port()),
                }],
            },
        };
        pb::Broker {
            name: "rocklet".into(),
            id: 0,
            endpoints: Some(endpoints),
        }
    }

    /// Cluster mode: the queues of every group hosting `topic` (its placement in etcd),
    /// each on its group's master now (groups without one are left out). Without a
    /// placement, this group's queues (HA_NOT_AVAILABLE when `need_master` and the group has
    /// no master now).
    async fn routed(
        &self,
        topic: &str,
        endpoints: Option<&pb::Endpoints>,
        need_master: bool,
    ) -> Result<Vec<pb::MessageQueue>, Status> {
        if let Some(view) = &self.cluster {
            if let Some(d) = view.directory.get() {
                rocklet_core::topic::validate_name(topic).map_err(|e| client_error(&e))?;
                if let Some(groups) = d.route(topic, view.master()).await {
                    let mut out = Vec::new();
                    for g in &groups {
                        if let Some(m) = &g.master {
                            out.extend(self.queues_on(
                                topic,
                                g.queues,
                                &broker_at(g.name.clone(), m.advertise),
                            ));
                        }
                    }
                    if out.is_empty() {
                        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
                        return Err(status(
                            Code::HaNotAvailable,
                            format!("HA_NOT_AVAILABLE: no broker group hosting topic `{topic}` ({}) has a master now (elections are under way); retry", names.join(", ")),
                        ));
                    }
                    return Ok(out);
                }
            }
            if need_master && view.master().is_none() {
                // Cluster mode between masters: no route to give yet (clients retry).
                return Err(status(
                    Code::HaNotAvailable,
                    "HA_NOT_AVAILABLE: the broker group has no master now (an election is under way); retry",
                ));
            }
        }
        let n = self.queues_of(topic).await?;
        Ok(self.message_queues(topic, n, endpoints))
    }

    fn message_queues(
        &self,
        topic: &str,
        n: u32,
        endpoints: Option<&pb::Endpoints>,
    ) -> Vec<pb::MessageQueue> {
        self.queues_on(topic, n, &self.broker_of(endpoints))
    }

    /// Queues 0..n of `topic` on `broker`.
    fn queues_on(&self, topic: &str, n: u32, broker: &pb::Broker) -> Vec<pb::MessageQueue> {
        let types: Vec<i32> = self
            .cfg
            .accepted_types(topic)
            .into_iter()
            .map(|t| match t {
                TopicMessageType::Normal => pb::MessageType::Normal,
                TopicMessageType::Fifo => pb::MessageType::Fifo,
                TopicMessageType::Delay => pb::MessageType::Delay,
                TopicMessageType::Transaction => pb::MessageType::Transaction,
            } as i32)
            .collect();
        (0..n)
            .map(|id| pb::MessageQueue {
                topic: Some(pb::Resource {
                    resource_namespace: String::new(),
                    name: topic.into(),
                }),
                id: id as i32,
                permission: pb::Permission::ReadWrite as i32,
                broker: Some(broker.clone()),
                accept_message_types: types.clone(),
            })
            .collect()
    }

    async fn send(
        &self,
        req: pb::SendMessageRequest,
        client: String,
    ) -> (Status, Vec<pb::SendResultEntry>) {
        let n = req.messages.len();
        if n == 0 {
            return (bad_request("SendMessage holds no message"), Vec::new());
        }
        let limit = self.cfg.max_batch_messages as usize;
        if n > limit {
            self.metrics.over_limit("max_batch_messages");
            return (
                status(
                    Code::PayloadTooLarge,
                    format!("TOO_MANY_MESSAGES: SendMessage holds {n} messages, more than the broker's max_batch_messages of {limit}; send them in smaller batches"),
                ),
                Vec::new(),
            );
        }
        let mut ids = Vec::with_capacity(n);
        let mut converted = Vec::with_capacity(n);
        let mut any_txn = false;
        for (i, m) in req.messages.into_iter().enumerate() {
            let ty = convert::message_type(&m);
            let id = m
                .system_properties
                .as_ref()
                .map(|s| s.message_id.clone())
                .unwrap_or_default();
            let (msg, immunity) = match convert::new_message(m, i) {
                Ok(x) => x,
                Err(s) => return (s, Vec::new()),
            };
            let accepted = self.cfg.accepted_types(&msg.topic);
            if !accepted.contains(&ty) {
                let names: Vec<&str> = accepted.iter().map(|t| t.as_str()).collect();
                return (
                    status(
                        Code::MessagePropertyConflictWithType,
                        format!(
                            "MESSAGE_TYPE_NOT_ACCEPTED: topic `{}` accepts {} messages, not {}",
                            msg.topic,
                            names.join(", "),
                            ty.as_str()
                        ),
                    ),
                    Vec::new(),
                );
            }
            any_txn |= ty == TopicMessageType::Transaction;
            ids.push(id);
            converted.push((msg, immunity, ty));
        }
        let sent = if any_txn {
            if n > 1 {
                return (
                    bad_request(
                        "a transactional message cannot be sent in a batch (send one per call)",
                    ),
                    Vec::new(),
                );
            }
            let (message, immunity, _) = converted.pop().expect("one message");
            if !client.is_empty() {
                // This client's telemetry stream can answer checks of the topic.
                self.core.producer_sends(client, message.topic.clone());
            }
            let group = txn_group(&message.topic);
            self.core
                .prepare(group, message, immunity)
                .await
                .map(|r| r.map(|(half, _)| vec![half]))
        } else {
            let messages = converted.into_iter().map(|(m, _, _)| m).collect();
            self.core.send(messages).await
        };
        match sent {
            Ok(Ok(results)) => {
                let entries = results
                    .into_iter()
                    .zip(ids)
                    .map(|(r, id)| pb::SendResultEntry {
                        status: Some(ok()),
                        message_id: if id.is_empty() { r.msg_id } else { id },
                        transaction_id: r.txn.map(|t| t.to_string()).unwrap_or_default(),
                        offset: r.queue_offset as i64,
                    })
                    .collect();
                (ok(), entries)
            }
            Ok(Err(e)) => (client_error(&e), Vec::new()),
            Err(e) => (core_failure(&e), Vec::new()),
        }
    }

    async fn end_transaction(&self, req: pb::EndTransactionRequest) -> Status {
        let txn: TxnId = match req.transaction_id.parse() {
            Ok(t) => t,
            Err(e) => return client_error(&e),
        };
        let resolution = match req.resolution() {
            pb::TransactionResolution::Commit => Resolution::Commit,
            pb::TransactionResolution::Rollback => Resolution::Rollback,
            pb::TransactionResolution::Unspecified => Resolution::Unknown,
        };
        let from_check = req.source() == pb::TransactionSource::SourceServerCheck;
        // The topic names the transaction's group: an END sent with another topic is refused
        // (WRONG_PRODUCER_GROUP) instead of resolving someone else's transaction.
        let group = req
            .topic
            .as_ref()
            .filter(|t| !t.name.is_empty())
            .map(|t| txn_group(&t.name));
        let ended = self
            .core
            .end_transaction(txn, resolution, group, from_check)
            .await;
        match ended {
            Ok(Ok(_)) => {
                debug!(%txn, resolution = resolution.as_str(), from_check, "transaction ended");
                ok()
            }
            Ok(Err(e)) => client_error(&e),
            Err(e) => core_failure(&e),
        }
    }

    /// A receive's responses, and the budget charge they hold while they are in flight.
    async fn receive(
        &self,
        req: pb::ReceiveMessageRequest,
        grpc_timeout: Option<Millis>,
        client: &str,
    ) -> (Vec<pb::ReceiveMessageResponse>, Option<Charge>) {
        let one = |s: Status| {
            (
                vec![pb::ReceiveMessageResponse {
                    content: Some(pb::receive_message_response::Content::Status(s)),
                }],
                None,
            )
        };
        let group = match self.name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => return one(s),
        };
        let topic = match self.name(
            req.message_queue.as_ref().and_then(|q| q.topic.as_ref()),
            "message_queue.topic",
        ) {
            Ok(t) => t,
            Err(s) => return one(s),
        };
        let filter = match req.filter_expression.as_ref() {
            None => TagFilter::All,
            Some(f) if f.r#type() == pb::FilterType::Sql => return one(status(
                Code::IllegalFilterExpression,
                "ILLEGAL_FILTER_EXPRESSION: SQL92 filters are not supported; use a tag expression",
            )),
            Some(f) if f.expression.len() > self.cfg.max_filter_expression_bytes => {
                self.metrics.over_limit("max_filter_expression_bytes");
                return one(status(
                    Code::IllegalFilterExpression,
                    format!(
                        "FILTER_TOO_LONG: filter_expression.expression is {} bytes, more than the broker's max_filter_expression_bytes of {}",
                        f.expression.len(),
                        self.cfg.max_filter_expression_bytes
                    ),
                ));
            }
            Some(f) => TagFilter::parse(&f.expression),
        };
        let invisible_ms = match (&req.invisible_duration, req.auto_renew) {
            (Some(d), _) => match duration_ms(d) {
                Some(ms) if ms > 0 => ms,
                _ => {
                    return one(status(
                        Code::IllegalInvisibleTime,
                        format!("ILLEGAL_INVISIBLE_TIME: invisible_duration {d:?} must be above 0"),
                    ))
                }
            },
            (None, true) => self.cfg.core.default_invisible_ms,
            (None, false) => {
                return one(status(
                    Code::IllegalInvisibleTime,
                    "ILLEGAL_INVISIBLE_TIME: a simple consumer's receive needs invisible_duration",
                ))
            }
        };
        let long_poll = match &req.long_polling_timeout {
            Some(d) => match duration_ms(d) {
                Some(ms) => ms,
                None => {
                    return one(status(
                        Code::IllegalPollingTime,
                        format!("ILLEGAL_POLLING_TIME: long_polling_timeout {d:?} is negative"),
                    ))
                }
            },
            None => DEFAULT_LONG_POLL_MS,
        }
        .min(self.cfg.max_long_polling_ms);
        let mut wait = long_poll;
        if let Some(t) = grpc_timeout {
            wait = wait.min(t.saturating_sub(DEADLINE_MARGIN_MS.max(t / 10)));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait);
        let max = u32::try_from(req.batch_size).unwrap_or(1).max(1);
        loop {
            // Pop nothing while the budget is used up: the messages stay available.
            let reservation = match self.budget.reserve(max).await {
                Ok(r) => r,
                Err(over) => {
                    self.metrics
                        .receives_over_budget
                        .fetch_add(1, Ordering::Relaxed);
                    return one(status(Code::TooManyRequests, over.to_string()));
                }
            };
            let received = self
                .core
                .receive(
                    group.clone(),
                    topic.clone(),
                    None,
                    reservation.count(),
                    invisible_ms,
                    filter.clone(),
                )
                .await;
            let (reply, woken) = match received {
                Ok(x) => x,
                Err(e) => return one(core_failure(&e)),
            };
            match reply {
                Ok(msgs) if !msgs.is_empty() => {
                    if req.auto_renew {
                        // A push consumer: held invisible for as long as it holds them.
                        let now = self.clock.now_ms();
                        for r in &msgs {
                            self.leases
                                .add(client, &group, &r.handle, r.visible_at, now);
                        }
                    }
                    let mut out = Vec::with_capacity(msgs.len() + 2);
                    out.push(pb::ReceiveMessageResponse {
                        content: Some(pb::receive_message_response::Content::Status(ok())),
                    });
                    for r in &msgs {
                        let m = convert::received_out(r, invisible_ms);
                        out.push(pb::ReceiveMessageResponse {
                            content: Some(pb::receive_message_response::Content::Message(m)),
                        });
                    }
                    out.push(delivery_now());
                    let bytes = out.iter().map(|r| r.encoded_len() as u64).sum();
                    return (out, Some(reservation.charge(bytes)));
                }
                Ok(_) => {}
                Err(e) => return one(client_error(&e)),
            }
            drop(reservation);
            // Nothing ready: wait for a message or the deadline (the guard also counts a
            // poll the client gives up on, when this future is dropped).
            let waiting = Waiting::new(&self.metrics);
            let timed_out = tokio::time::timeout_at(deadline, woken).await.is_err();
            drop(waiting);
            if timed_out || tokio::time::Instant::now() >= deadline {
                let (mut out, charge) = one(status(
                    Code::MessageNotFound,
                    "MESSAGE_NOT_FOUND: no new message before the long-polling timeout",
                ));
                out.push(delivery_now());
                return (out, charge);
            }
        }
    }

    async fn ack(&self, req: pb::AckMessageRequest) -> pb::AckMessageResponse {
        let group = match self.name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => {
                return pb::AckMessageResponse {
                    status: Some(s),
                    entries: Vec::new(),
                }
            }
        };
        if req.entries.is_empty() {
            return pb::AckMessageResponse {
                status: Some(bad_request("AckMessage holds no entry")),
                entries: Vec::new(),
            };
        }
        // Send every ack first, then collect: one group commit covers them all.
        let mut waits = Vec::with_capacity(req.entries.len());
        let topic = given_name(req.topic.as_ref());
        for e in &req.entries {
            let handle = match handle_of_topic(&e.receipt_handle, topic) {
                Ok(()) => self.leases.resolve(&group, &e.receipt_handle).await,
                Err(e) => Err(e),
            };
            waits.push(match handle {
                Ok(handle) => Ok(self.core.ack(group.clone(), handle)),
                Err(err) => Err(client_error(&err)),
            });
        }
        let mut entries = Vec::with_capacity(waits.len());
        for (e, w) in req.entries.into_iter().zip(waits) {
            let s = match w {
                Err(s) => s,
                Ok(acked) => match acked.await {
                    Ok(Ok(())) => ok(),
                    Ok(Err(err)) => client_error(&err),
                    Err(f) => core_failure(&f),
                },
            };
            entries.push(pb::AckMessageResultEntry {
                message_id: e.message_id,
                receipt_handle: e.receipt_handle,
                status: Some(s),
            });
        }
        let status = summary(entries.iter().filter_map(|e| e.status.as_ref()));
        pb::AckMessageResponse {
            status: Some(status),
            entries,
        }
    }

    async fn change_invisible(
        &self,
        req: pb::ChangeInvisibleDurationRequest,
    ) -> pb::ChangeInvisibleDurationResponse {
        let fail = |s: Status| pb::ChangeInvisibleDurationResponse {
            status: Some(s),
            receipt_handle: String::new(),
        };
        let group = match self.name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => return fail(s),
        };
        let handle = match self.leases.resolve(&group, &req.receipt_handle).await {
            Ok(h) => h,
            Err(e) => return fail(client_error(&e)),
        };
        let Some(invisible_ms) = req.invisible_duration.as_ref().and_then(duration_ms) else {
            return fail(status(
                Code::IllegalInvisibleTime,
                "ILLEGAL_INVISIBLE_TIME: invisible_duration is missing or negative",
            ));
        };
        match self
            .core
            .change_invisible(group, handle, invisible_ms)
            .await
        {
            Ok(Ok((handle, _))) => pb::ChangeInvisibleDurationResponse {
                status: Some(ok()),
                receipt_handle: handle.to_string(),
            },
            Ok(Err(e)) => fail(client_error(&e)),
            Err(e) => fail(core_failure(&e)),
        }
    }

    async fn forward_to_dlq(&self, req: pb::ForwardMessageToDeadLetterQueueRequest) -> Status {
        let group = match self.name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => return s,
        };
        // The ACL checked the request's topic: the handle must be of that topic, or a
        // handle of another topic's delivery would copy its message into this group's DLQ.
        if let Err(e) = handle_of_topic(&req.receipt_handle, given_name(req.topic.as_ref())) {
            return client_error(&e);
        }
        let handle = match self.leases.resolve(&group, &req.receipt_handle).await {
            Ok(h) => h,
            Err(e) => return client_error(&e),
        };
        match self.core.forward_to_dead_letter(group, handle).await {
            Ok(Ok(())) => ok(),
            Ok(Err(e)) => client_error(&e),
            Err(e) => core_failure(&e),
        }
    }

    /// The settings the broker answers a client's settings with.
    async fn settings_reply(&self, mut s: pb::Settings) -> pb::Settings {
        let max_attempts = i32::try_from(self.cfg.core.max_delivery_attempts).unwrap_or(i32::MAX);
        s.backoff_policy = Some(pb::RetryPolicy {
            max_attempts,
            strategy: Some(pb::retry_policy::Strategy::ExponentialBackoff(
                pb::ExponentialBackoff {
                    initial: Some(duration(1_000)),
                    max: Some(duration(60_000)),
                    multiplier: 2.0,
                },
            )),
        });
        if s.request_timeout.is_none() {
            s.request_timeout = Some(duration(3_000));
        }
        match s.pub_sub.as_mut() {
            Some(pb::settings::PubSub::Publishing(p)) => {
                p.max_body_size = i32::try_from(self.cfg.core.max_message_size).unwrap_or(i32::MAX);
                p.validate_message_type = false;
            }
            Some(pb::settings::PubSub::Subscription(sub)) => {
                // A push consumer picks its consume service by this at start (RocketMQ's
                // proxy reports the group's consumeMessageOrderly the same way).
                let group = sub
                    .group
                    .as_ref()
                    .map(|g| g.name.clone())
                    .unwrap_or_default();
                let fifo = !group.is_empty()
                    && self
                        .core
                        .inspect(move |b| b.group_is_fifo(&group))
                        .await
                        .unwrap_or(false);
                sub.fifo = Some(fifo);
                if sub.receive_batch_size.is_none_or(|n| n <= 0) {
                    sub.receive_batch_size = Some(32);
                }
                let lp = sub
                    .long_polling_timeout
                    .as_ref()
                    .and_then(duration_ms)
                    .unwrap_or(DEFAULT_LONG_POLL_MS);
                sub.long_polling_timeout = Some(duration(lp.min(self.cfg.max_long_polling_ms)));
            }
            None => {}
        }
        s
    }
}

/// Counts a waiting long poll for as long as it lives.
struct Waiting<'a>(&'a Metrics);

impl<'a> Waiting<'a> {
    fn new(m: &'a Metrics) -> Self {
        m.long_polls_waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(m)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.long_polls_waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The broker-wide budget of ReceiveMessage response bytes in flight
/// ([`BrokerConfig::max_inflight_receive_bytes`]).
///
/// A receive first [reserves](ReceiveBudget::reserve) room for the messages it may pop (the
/// largest message size each, so receives popping at the same time cannot together overshoot
/// the budget by more than one response), then turns the reservation into a [`Charge`] of the
/// response's real size, held by the response stream until it is dropped. A receive that
/// starts while the charged bytes are at or above the limit is refused; one response may go
/// past the limit, so a message larger than what is left is still delivered.
#[derive(Debug)]
pub struct ReceiveBudget {
    limit: u64,
    /// Reserved per message a pop may return.
    per_message: u64,
    /// The most one pop returns, whatever its count (plus [`PROTO_PER_MESSAGE`] each).
    per_pop: u64,
    state: Mutex<BudgetState>,
    /// Wakes receives waiting for room while other pops are in progress.
    freed: Notify,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// Bytes of responses built and not yet dropped.
    charged: u64,
    /// Bytes reserved by pops in progress.
    reserved: u64,
}

/// A receive refused because the budget is used up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    pub in_flight: u64,
    pub limit: u64,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TOO_MANY_REQUESTS: {} bytes of ReceiveMessage responses are waiting for their clients to read them, at or above the broker's max_inflight_receive_bytes of {}; retry later (nothing was received), or raise `max_inflight_receive_bytes` in the broker's config file",
            self.in_flight, self.limit
        )
    }
}

impl ReceiveBudget {
    /// A budget of `limit` bytes, reserving `per_message` for each message a pop may return
    /// and at most `per_pop` (plus a little encoding room per message) for one pop.
    #[must_use]
    pub fn new(limit: u64, per_message: u64, per_pop: u64, metrics: Arc<Metrics>) -> Self {
        ReceiveBudget {
            limit,
            per_message: per_message.max(1),
            per_pop,
            state: Mutex::new(BudgetState::default()),
            freed: Notify::new(),
            metrics,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        // The state is two counters updated under the lock: still right after a panic.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes of responses in flight.
    #[must_use]
    pub fn in_flight(&self) -> u64 {
        self.state().charged
    }

    /// Room to pop up to `max` messages: `Err` when the charged bytes are at or above the
    /// limit. The reservation may allow fewer messages than `max` (at least one) when other
    /// pops hold the rest; with no room for one, it waits until a pop in progress ends.
    pub async fn reserve(self: &Arc<Self>, max: u32) -> Result<Reservation, OverBudget> {
        loop {
            let freed = self.freed.notified();
            {
                let mut s = self.state();
                if s.charged >= self.limit {
                    return Err(OverBudget {
                        in_flight: s.charged,
                        limit: self.limit,
                    });
                }
                let room = self
                    .limit
                    .saturating_sub(s.charged.saturating_add(s.reserved));
                let want = max.max(1);
                let fits = if self.bytes_for(want) <= room {
                    want
                } else {
                    (room / self.per_message).min(u64::from(want)) as u32
                };
                // With no other pop in progress, one message always goes (never starved).
                let count = if fits == 0 && s.reserved == 0 {
                    1
                } else {
                    fits
                };
                if count > 0 {
                    let bytes = self.bytes_for(count);
                    s.reserved += bytes;
                    return Ok(Reservation {
                        budget: self.clone(),
                        bytes,
                        count,
                    });
                }
            }
            freed.await;
        }
    }

    /// Room a pop of up to `count` messages needs.
    fn bytes_for(&self, count: u32) -> u64 {
        let count = u64::from(count);
        (count * self.per_message).min(self.per_pop.saturating_add(count * PROTO_PER_MESSAGE))
    }

    fn publish(&self, s: &BudgetState) {
        self.metrics
            .receive_bytes_in_flight
            .store(s.charged, Ordering::Relaxed);
    }
}

/// Room reserved for one pop; released when dropped unless [charged](Reservation::charge).
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<ReceiveBudget>,
    bytes: u64,
    count: u32,
}

impl Reservation {
    /// How many messages the pop may return.
    #[must_use]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Turns the reservation into a charge of the response's real size.
    #[must_use]
    pub fn charge(mut self, bytes: u64) -> Charge {
        let budget = self.budget.clone();
        {
            let mut s = budget.state();
            s.reserved -= std::mem::take(&mut self.bytes);
            s.charged += bytes;
            budget.publish(&s);
        }
        budget.freed.notify_waiters();
        Charge { budget, bytes }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.state().reserved -= self.bytes;
            self.budget.freed.notify_waiters();
        }
    }
}

/// Bytes of one response in flight; released when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<ReceiveBudget>,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        {
            let mut s = self.budget.state();
            s.charged -= self.bytes;
            self.budget.publish(&s);
        }
        self.budget.freed.notify_waiters();
    }
}

/// A response stream holding its budget charge until tonic drops it.
struct Charged<S> {
    inner: S,
    _charge: Option<Charge>,
}

impl<S: Stream + Unpin> Stream for Charged<S> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        Pin::new(&mut self.get_mut().inner).poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

fn delivery_now() -> pb::ReceiveMessageResponse {
    let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
    pb::ReceiveMessageResponse {
        content: Some(pb::receive_message_response::Content::DeliveryTimestamp(
            timestamp(now),
        )),
    }
}

/// OK when every entry is; the one status when all share it; else MULTIPLE_RESULTS.
fn summary<'a>(mut statuses: impl Iterator<Item = &'a Status>) -> Status {
    let Some(first) = statuses.next() else {
        return ok();
    };
    let mut all_same = true;
    for s in statuses {
        if s.code != first.code {
            all_same = false;
        }
    }
    if all_same {
        first.clone()
    } else {
        status(
            Code::MultipleResults,
            "MULTIPLE_RESULTS: entries have different results; see each entry",
        )
    }
}

/// The `grpc-timeout` header in ms (the client's deadline).
fn grpc_timeout_ms<T>(req: &GrpcRequest<T>) -> Option<Millis> {
    let v = req.metadata().get("grpc-timeout")?.to_str().ok()?;
    if v.len() < 2 {
        return None;
    }
    let (num, unit) = v.split_at(v.len() - 1);
    let n: u64 = num.parse().ok()?;
    Some(match unit {
        "H" => n.saturating_mul(3_600_000),
        "M" => n.saturating_mul(60_000),
        "S" => n.saturating_mul(1_000),
        "m" => n,
        "u" => n / 1_000,
        "n" => n / 1_000_000,
        _ => return None,
    })
}

fn client_id<T>(req: &GrpcRequest<T>) -> String {
    req.metadata()
        .get("x-mq-client-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// A broker of a route: `name` at `at`.
fn broker_at(name: String, at: std::net::SocketAddr) -> pb::Broker {
    pb::Broker {
        name,
        id: 0,
        endpoints: Some(pb::Endpoints {
            scheme: if at.is_ipv4() {
                pb::AddressScheme::IPv4
            } else {
                pb::AddressScheme::IPv6
            } as i32,
            addresses: vec![pb::Address {
                host: at.ip().to_string(),
                port: i32::from(at.port()),
            }],
        }),
    }
}

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, GrpcStatus>> + Send + 'static>>;

#[tonic::async_trait]
impl MessagingService for Messaging {
    async fn query_route(
        &self,
        request: GrpcRequest<pb::QueryRouteRequest>,
    ) -> Result<Response<pb::QueryRouteResponse>, GrpcStatus> {
        if let Err(s) = auth_grpc::check(&self.auth, &request) {
            self.counted("QueryRoute", &s);
            return Ok(Response::new(pb::QueryRouteResponse {
                status: Some(s),
                message_queues: Vec::new(),
            }));
        }
        let req = request.into_inner();
        let resp = match self.name(req.topic.as_ref(), "topic") {
            Err(s) => pb::QueryRouteResponse {
                status: Some(s),
                message_queues: Vec::new(),
            },
            Ok(topic) => match self.routed(&topic, req.endpoints.as_ref(), true).await {
                Ok(message_queues) => pb::QueryRouteResponse {
                    status: Some(ok()),
                    message_queues,
                },
                Err(s) => pb::QueryRouteResponse {
                    status: Some(s),
                    message_queues: Vec::new(),
                },
            },
        };
        self.counted("QueryRoute", resp.status.as_ref().expect("set"));
        Ok(Response::new(resp))
    }

    async fn heartbeat(
        &self,
        request: GrpcRequest<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, GrpcStatus> {
        let s = auth_grpc::check(&self.auth, &request).map_or_else(|s| s, |_| ok());
        self.counted("Heartbeat", &s);
        Ok(Response::new(pb::HeartbeatResponse { status: Some(s) }))
    }

    async fn send_message(
        &self,
        request: GrpcRequest<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, GrpcStatus> {
        if let Some((view, at)) = self.forward_to(request.metadata()) {
            self.metrics.request("SendMessage");
            return crate::cluster::forward::send_message(&view, at, request).await;
        }
        let t = Instant::now();
        let client = client_id(&request);
        let allowed = auth_grpc::check(&self.auth, &request);
        let req = request.into_inner();
        let n = req.messages.len();
        let (status, mut entries) = match allowed {
            Ok(_) => self.send(req, client).await,
            Err(s) => (s, Vec::new()),
        };
        if entries.is_empty() {
            // One entry per message, each with the failure, as clients read entries (one
            // only for a request refused for its count: its size is the problem).
            let n = if n > self.cfg.max_batch_messages as usize {
                1
            } else {
                n
            };
            entries = (0..n.max(1))
                .map(|_| pb::SendResultEntry {
                    status: Some(status.clone()),
                    ..Default::default()
                })
                .collect();
        }
        self.metrics.send_latency.observe(t.elapsed());
        self.counted("SendMessage", &status);
        Ok(Response::new(pb::SendMessageResponse {
            status: Some(status),
            entries,
        }))
    }

    async fn query_assignment(
        &self,
        request: GrpcRequest<pb::QueryAssignmentRequest>,
    ) -> Result<Response<pb::QueryAssignmentResponse>, GrpcStatus> {
        if let Err(s) = auth_grpc::check(&self.auth, &request) {
            self.counted("QueryAssignment", &s);
            return Ok(Response::new(pb::QueryAssignmentResponse {
                status: Some(s),
                assignments: Vec::new(),
            }));
        }
        let req = request.into_inner();
        let resp = match self.name(req.topic.as_ref(), "topic") {
            Err(s) => pb::QueryAssignmentResponse {
                status: Some(s),
                assignments: Vec::new(),
            },
            Ok(topic) => match self.routed(&topic, req.endpoints.as_ref(), false).await {
                Ok(queues) => pb::QueryAssignmentResponse {
                    status: Some(ok()),
                    assignments: queues
                        .into_iter()
                        .map(|q| pb::Assignment {
                            message_queue: Some(q),
                        })
                        .collect(),
                },
                Err(s) => pb::QueryAssignmentResponse {
                    status: Some(s),
                    assignments: Vec::new(),
                },
            },
        };
        self.counted("QueryAssignment", resp.status.as_ref().expect("set"));
        Ok(Response::new(resp))
    }

    type ReceiveMessageStream = BoxStream<pb::ReceiveMessageResponse>;

    async fn receive_message(
        &self,
        request: GrpcRequest<pb::ReceiveMessageRequest>,
    ) -> Result<Response<Self::ReceiveMessageStream>, GrpcStatus> {
        self.metrics.request("ReceiveMessage");
        if let Some((view, at)) = self.forward_to(request.metadata()) {
            return crate::cluster::forward::receive_message(&view, at, request).await;
        }
        let timeout = grpc_timeout_ms(&request);
        let client = client_id(&request);
        let (out, charge) = match auth_grpc::check(&self.auth, &request) {
            Ok(_) => self.receive(request.into_inner(), timeout, &client).await,
            Err(s) => (
                vec![pb::ReceiveMessageResponse {
                    content: Some(pb::receive_message_response::Content::Status(s)),
                }],
                None,
            ),
        };
        if let Some(pb::receive_message_response::Content::Status(s)) =
            out.first().and_then(|r| r.content.as_ref())
        {
            // An empty long poll is not a refusal.
            if s.code != Code::MessageNotFound as i32 {
                self.refused("ReceiveMessage", s);
            }
        }
        // The stream owns the charge: released when tonic drops it (written out, or the
        // client reset the stream or closed the connection).
        Ok(Response::new(Box::pin(Charged {
            inner: tokio_stream::iter(out.into_iter().map(Ok)),
            _charge: charge,
        })))
    }

    async fn ack_message(
        &self,
        request: GrpcRequest<pb::AckMessageRequest>,
    ) -> Result<Response<pb::AckMessageResponse>, GrpcStatus> {
        if let Some((view, at)) = self.forward_to(request.metadata()) {
            self.metrics.request("AckMessage");
            return crate::cluster::forward::ack_message(&view, at, request).await;
        }
        let resp = match auth_grpc::check(&self.auth, &request) {
            Ok(_) => self.ack(request.into_inner()).await,
            Err(s) => pb::AckMessageResponse {
                status: Some(s),
                entries: Vec::new(),
            },
        };
        self.counted("AckMessage", resp.status.as_ref().expect("set"));
        Ok(Response::new(resp))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: GrpcRequest<pb::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<pb::ForwardMessageToDeadLetterQueueResponse>, GrpcStatus> {
        if let Some((view, at)) = self.forward_to(request.metadata()) {
            self.metrics.request("ForwardMessageToDeadLetterQueue");
            return crate::cluster::forward::forward_message_to_dead_letter_queue(
                &view, at, request,
            )
            .await;
        }
        let s = match auth_grpc::check(&self.auth, &request) {
            Ok(_) => self.forward_to_dlq(request.into_inner()).await,
            Err(s) => s,
        };
        self.counted("ForwardMessageToDeadLetterQueue", &s);
        Ok(Response::new(pb::ForwardMessageToDeadLetterQueueResponse {
            status: Some(s),
        }))
    }

    async fn end_transaction(
        &self,
        request: GrpcRequest<pb::EndTransactionRequest>,
    ) -> Result<Response<pb::EndTransactionResponse>, GrpcStatus> {
        if let Some((view, at)) = self.forward_to(request.metadata()) {
            self.metrics.request("EndTransaction");
            return crate::cluster::forward::end_transaction(&view, at, request).await;
        }
        let t = Instant::now();
        let s = match auth_grpc::check(&self.auth, &request) {
            Ok(_) => Messaging::end_transaction(self, request.into_inner()).await,
            Err(s) => s,
        };
        self.metrics.end_transaction_latency.observe(t.elapsed());
        self.counted("EndTransaction", &s);
        Ok(Response::new(pb::EndTransactionResponse {
            status: Some(s),
        }))
    }

    type TelemetryStream = BoxStream<pb::TelemetryCommand>;

    async fn telemetry(
        &self,
        request: GrpcRequest<Streaming<pb::TelemetryCommand>>,
    ) -> Result<Response<Self::TelemetryStream>, GrpcStatus> {
        self.metrics.request("Telemetry");
        if let Some((view, at)) = self.forward_to(request.metadata()) {
            let me = self.cfg.cluster.as_ref().map_or(0, |c| c.node_id);
            return crate::cluster::forward::telemetry(&view, me, at, request).await;
        }
        let client = client_id(&request);
        // Authenticated once, from the stream's headers; each settings command is authorized.
        let peer = auth_grpc::peer(&request);
        let identity = if self.auth.enabled() {
            auth_grpc::authenticate(&self.auth, &request, crate::auth::Protocol::Grpc)
                .map_err(|r| auth_grpc::status(&r))
        } else {
            Ok(crate::auth::Identity::Open)
        };
        let mut inbound = request.into_inner();
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel::<Result<pb::TelemetryCommand, GrpcStatus>>();
        let this = self.clone();
        this.metrics
            .telemetry_streams
            .fetch_add(1, Ordering::Relaxed);
        this.leases.client_up(&client);
        tokio::spawn(async move {
            let (check_tx, mut check_rx) = mpsc::unbounded_channel();
            let mut producer = false;
            loop {
                tokio::select! {
                    msg = inbound.next() => match msg {
                        Some(Ok(cmd)) => match cmd.command {
                            Some(pb::telemetry_command::Command::Settings(s)) => {
                                let allowed = identity.clone().and_then(|id| {
                                    use crate::auth::grpc::Needs as _;
                                    auth_grpc::authorize(&this.auth, &id, peer, &s.needs())
                                });
                                if let Err(status) = allowed {
                                    let _ = tx.send(Ok(pb::TelemetryCommand { status: Some(status), command: None }));
                                    continue;
                                }
                                let topics: Option<Vec<String>> = match &s.pub_sub {
                                    Some(pb::settings::PubSub::Publishing(p)) => {
                                        Some(p.topics.iter().map(|t| t.name.clone()).filter(|t| !t.is_empty()).collect())
                                    }
                                    _ => None,
                                };
                                let reply = pb::TelemetryCommand {
                                    status: Some(ok()),
                                    command: Some(pb::telemetry_command::Command::Settings(this.settings_reply(s).await)),
                                };
                                let _ = tx.send(Ok(reply.clone()));
                                let again = tx.clone();
                                tokio::spawn(async move {
                                    tokio::time::sleep(SETTINGS_RESEND).await;
                                    let _ = again.send(Ok(reply));
                                });
                                if let Some(topics) = topics {
                                    info!(client = %client, conn, ?topics, "producer connected");
                                    this.core
                                        .producer_up(conn, client.clone(), topics, check_tx.clone());
                                    producer = true;
                                } else {
                                    debug!(client = %client, conn, "consumer connected");
                                }
                            }
                            Some(_) => {}
                            None => {}
                        },
                        Some(Err(e)) => {
                            debug!(client = %client, conn, error = %e, "telemetry stream failed");
                            break;
                        }
                        None => break,
                    },
                    Some(check) = check_rx.recv() => {
                        info!(client = %client, conn, txn = %check.txn, check = check.check, "transaction check pushed");
                        if tx.send(Ok(convert::check_out(&check))).is_err() {
                            break;
                        }
                    }
                }
            }
            if producer {
                info!(client = %client, conn, "producer disconnected");
                this.core.producer_down(conn);
            }
            this.leases.client_down(&client, &this.core);
            this.metrics
                .telemetry_streams
                .fetch_sub(1, Ordering::Relaxed);
        });
        let out: Self::TelemetryStream = Box::pin(UnboundedReceiverStream::new(rx));
        Ok(Response::new(out))
    }

    async fn notify_client_termination(
        &self,
        request: GrpcRequest<pb::NotifyClientTerminationRequest>,
    ) -> Result<Response<pb::NotifyClientTerminationResponse>, GrpcStatus> {
        let client = client_id(&request);
        debug!(client = %client, "client terminated");
        let s = auth_grpc::check(&self.auth, &request).map_or_else(
            |s| s,
            |_| {
                // What it held goes to the group's other consumers at once.
                self.leases.client_gone(&client, &self.core);
                ok()
            },
        );
        self.counted("NotifyClientTermination", &s);
        Ok(Response::new(pb::NotifyClientTerminationResponse {
            status: Some(s),
        }))
    }

    async fn change_invisible_duration(
        &self,
        request: GrpcRequest<pb::ChangeInvisibleDurationRequest>,
    ) -> Result<Response<pb::ChangeInvisibleDurationResponse>, GrpcStatus> {
        if let Some((view, at)) = self.forward_to(request.metadata()) {
            self.metrics.request("ChangeInvisibleDuration");
            return crate::cluster::forward::change_invisible_duration(&view, at, request).await;
        }
        let resp = match auth_grpc::check(&self.auth, &request) {
            Ok(_) => self.change_invisible(request.into_inner()).await,
            Err(s) => pb::ChangeInvisibleDurationResponse {
                status: Some(s),
                receipt_handle: String::new(),
            },
        };
        self.counted(
            "ChangeInvisibleDuration",
            resp.status.as_ref().expect("set"),
        );
        Ok(Response::new(resp))
    }
}

/// A resource's name as given (empty when missing).
fn given_name(r: Option<&pb::Resource>) -> &str {
    r.map_or("", |r| r.name.as_str())
}

/// Refuses a receipt handle of another topic than the one the request names (and the ACL
/// checked). A handle that does not parse is left to the lease lookup to refuse.
fn handle_of_topic(given: &str, topic: &str) -> Result<(), ClientError> {
    match given.parse::<rocklet_core::ReceiptHandle>() {
        Ok(h) if h.topic != topic => Err(ClientError::InvalidReceiptHandle(if topic.is_empty() {
            format!(
                "the receipt handle is of topic `{}`, and the request names no topic (`topic` is required)",
                h.topic
            )
        } else {
            format!(
                "the receipt handle is of topic `{}`, the request names topic `{topic}`",
                h.topic
            )
        })),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_handle_must_be_of_the_topic_the_request_names() {
        let h = rocklet_core::ReceiptHandle {
            topic: "TB".into(),
            queue_id: 0,
            queue_offset: 3,
            generation: 0x40,
        }
        .to_string();
        assert_eq!(handle_of_topic(&h, "TB"), Ok(()));
        for named in ["TC", ""] {
            let e = handle_of_topic(&h, named).unwrap_err();
            assert!(e.to_string().contains("is of topic `TB`"), "{e}");
        }
        // Not a handle: the lease lookup refuses it (INVALID_RECEIPT_HANDLE too).
        assert_eq!(handle_of_topic("garbage", "TB"), Ok(()));
    }

    fn budget(limit: u64, per_message: u64) -> (Arc<ReceiveBudget>, Arc<Metrics>) {
        let m = Arc::new(Metrics::default());
        (
            Arc::new(ReceiveBudget::new(limit, per_message, u64::MAX, m.clone())),
            m,
        )
    }

    /// With the core's transfer cap, a pop of many messages reserves what one pop can
    /// return, not the largest message times the count: concurrent receives of a batch
    /// size of 32 are not serialized by a budget of a few responses.
    #[tokio::test]
    async fn a_pop_reserves_at_most_what_the_transfer_cap_lets_it_return() {
        let m = Arc::new(Metrics::default());
        let mib = 1u64 << 20;
        let b = Arc::new(ReceiveBudget::new(64 * mib, 4 * mib, 4 * mib, m));
        let mut held = Vec::new();
        for _ in 0..15 {
            let r = b.reserve(32).await.unwrap();
            assert_eq!(r.count(), 32);
            held.push(r);
        }
        // 15 x (4 MiB + 32 KiB) reserved (by the largest message alone, one pop of 32 would
        // have reserved 130 MiB and the budget would have allowed none at once).
        assert_eq!(b.state().reserved, 15 * ((4 * mib) + 32 * 1024));
        drop(held);
        assert_eq!(b.state().reserved, 0);
    }

    #[tokio::test]
    async fn charges_count_until_dropped_and_a_receive_over_budget_is_refused() {
        let (b, m) = budget(100, 10);
        let r = b.reserve(32).await.unwrap();
        assert_eq!(r.count(), 10, "room for 100 bytes of 10-byte messages");
        let c1 = r.charge(60);
        assert_eq!(b.in_flight(), 60);
        assert_eq!(m.receive_bytes_in_flight.load(Ordering::Relaxed), 60);
        // 40 bytes left: 4 messages; the response may still come out larger (90 bytes).
        let r = b.reserve(32).await.unwrap();
        assert_eq!(r.count(), 4);
        let c2 = r.charge(90);
        assert_eq!(b.in_flight(), 150);
        let e = b.reserve(1).await.unwrap_err();
        assert_eq!(
            e,
            OverBudget {
                in_flight: 150,
                limit: 100
            }
        );
        let text = e.to_string();
        assert!(text.starts_with("TOO_MANY_REQUESTS"), "{text}");
        assert!(text.contains("max_inflight_receive_bytes"), "{text}");
        drop(c1);
        assert_eq!(b.in_flight(), 90);
        assert_eq!(m.receive_bytes_in_flight.load(Ordering::Relaxed), 90);
        assert_eq!(b.reserve(32).await.unwrap().count(), 1);
        drop(c2);
        assert_eq!(b.in_flight(), 0);
        assert_eq!(m.receive_bytes_in_flight.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_message_larger_than_the_budget_still_goes_and_pops_in_progress_are_waited_for() {
        let (b, _) = budget(5, 8);
        // No room for one 8-byte message, but nothing else is popping: one goes.
        let first = b.reserve(32).await.unwrap();
        assert_eq!(first.count(), 1);
        // A second pop waits for the first rather than overshooting the budget with it.
        let b2 = b.clone();
        let mut second = tokio::spawn(async move { b2.reserve(32).await.map(|r| r.count()) });
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut second)
                .await
                .is_err(),
            "the second pop must wait while the first holds the room"
        );
        // The first pop found nothing: its reservation goes back and the second proceeds.
        drop(first);
        let got = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("woken when the reservation was released")
            .unwrap();
        assert_eq!(got, Ok(1));
        // A charged response over the limit refuses the next receive.
        let c = b.reserve(1).await.unwrap().charge(8);
        assert!(b.reserve(1).await.is_err());
        drop(c);
        assert!(b.reserve(1).await.is_ok());
    }
}
