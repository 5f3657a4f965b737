//! RocketMQ 5 gRPC: `apache.rocketmq.v2.MessagingService` over the core thread.
//!
//! Every RPC converts its request (convert.rs), asks the core thread, and converts the
//! reply; a client's mistake comes back as a RocketMQ `Status` naming the problem, never as
//! a panic. Per-connection state is only what routing needs: which telemetry streams are
//! producers of which topics (for transaction checks).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocklet_core::{
    ClientError, Millis, ReceiptHandle, Reply, Request, Resolution, TagFilter, TxnId,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request as GrpcRequest, Response, Status as GrpcStatus, Streaming};
use tracing::{debug, info};

use crate::config::{BrokerConfig, TopicMessageType};
use crate::convert::{self, duration, duration_ms, resource_name, timestamp};
use crate::driver::{txn_group, CoreHandle};
use crate::error::{bad_request, client_error, core_failure, ok, status, unexpected};
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

/// The service.
#[derive(Debug, Clone)]
pub struct Messaging {
    core: CoreHandle,
    cfg: Arc<BrokerConfig>,
    metrics: Arc<Metrics>,
    next_conn: Arc<AtomicU64>,
}

impl Messaging {
    /// A service over a running core thread.
    #[must_use]
    pub fn new(core: CoreHandle, cfg: Arc<BrokerConfig>, metrics: Arc<Metrics>) -> Self {
        Messaging {
            core,
            cfg,
            metrics,
            next_conn: Arc::new(AtomicU64::new(1)),
        }
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
            .inspect(move |b| {
                b.topics()
                    .into_iter()
                    .find(|i| i.name == t)
                    .map(|i| i.queues.len() as u32)
            })
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

    fn message_queues(
        &self,
        topic: &str,
        n: u32,
        endpoints: Option<&pb::Endpoints>,
    ) -> Vec<pb::MessageQueue> {
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
                broker: Some(self.broker_of(endpoints)),
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
        let request = if any_txn {
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
            Request::Prepare {
                group: txn_group(&message.topic),
                message,
                check_immunity_ms: immunity,
            }
        } else {
            Request::Send {
                messages: converted.into_iter().map(|(m, _, _)| m).collect(),
            }
        };
        match self.core.request(request).await {
            Ok(Reply::Sent(results)) => {
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
            Ok(Reply::Error(e)) => (client_error(&e), Vec::new()),
            Ok(other) => (unexpected(&other), Vec::new()),
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
        let request = Request::EndTransaction {
            txn,
            resolution,
            group,
            from_check,
        };
        match self.core.request(request).await {
            Ok(Reply::Ended { .. }) => {
                debug!(%txn, resolution = resolution.as_str(), from_check, "transaction ended");
                ok()
            }
            Ok(Reply::Error(e)) => client_error(&e),
            Ok(other) => unexpected(&other),
            Err(e) => core_failure(&e),
        }
    }

    async fn receive(
        &self,
        req: pb::ReceiveMessageRequest,
        grpc_timeout: Option<Millis>,
    ) -> Vec<pb::ReceiveMessageResponse> {
        let one = |s: Status| {
            vec![pb::ReceiveMessageResponse {
                content: Some(pb::receive_message_response::Content::Status(s)),
            }]
        };
        let group = match resource_name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => return one(s),
        };
        let topic = match resource_name(
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
            let request = Request::Receive {
                group: group.clone(),
                topic: topic.clone(),
                queue_id: None,
                max,
                invisible_ms,
                filter: filter.clone(),
            };
            let (reply, woken) = match self.core.receive(request).await {
                Ok(x) => x,
                Err(e) => return one(core_failure(&e)),
            };
            match reply {
                Reply::Received(msgs) if !msgs.is_empty() => {
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
                    return out;
                }
                Reply::Received(_) => {}
                Reply::Error(e) => return one(client_error(&e)),
                other => return one(unexpected(&other)),
            }
            // Nothing ready: wait for a message or the deadline (the guard also counts a
            // poll the client gives up on, when this future is dropped).
            let waiting = Waiting::new(&self.metrics);
            let timed_out = tokio::time::timeout_at(deadline, woken).await.is_err();
            drop(waiting);
            if timed_out || tokio::time::Instant::now() >= deadline {
                let mut out = one(status(
                    Code::MessageNotFound,
                    "MESSAGE_NOT_FOUND: no new message before the long-polling timeout",
                ));
                out.push(delivery_now());
                return out;
            }
        }
    }

    async fn ack(&self, req: pb::AckMessageRequest) -> pb::AckMessageResponse {
        let group = match resource_name(req.group.as_ref(), "group") {
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
        for e in &req.entries {
            let handle: Result<ReceiptHandle, _> = e.receipt_handle.parse();
            waits.push(match handle {
                Ok(handle) => {
                    let core = self.core.clone();
                    let group = group.clone();
                    Ok(tokio::spawn(async move {
                        core.request(Request::Ack { group, handle }).await
                    }))
                }
                Err(err) => Err(client_error(&err)),
            });
        }
        let mut entries = Vec::with_capacity(waits.len());
        for (e, w) in req.entries.into_iter().zip(waits) {
            let s = match w {
                Err(s) => s,
                Ok(j) => match j.await {
                    Ok(Ok(Reply::Acked)) => ok(),
                    Ok(Ok(Reply::Error(err))) => client_error(&err),
                    Ok(Ok(other)) => unexpected(&other),
                    Ok(Err(f)) => core_failure(&f),
                    Err(_) => status(Code::InternalServerError, "INTERNAL: ack task failed"),
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
        let group = match resource_name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => return fail(s),
        };
        let handle: ReceiptHandle = match req.receipt_handle.parse() {
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
            .request(Request::ChangeInvisible {
                group,
                handle,
                invisible_ms,
            })
            .await
        {
            Ok(Reply::InvisibleChanged { handle, .. }) => pb::ChangeInvisibleDurationResponse {
                status: Some(ok()),
                receipt_handle: handle.to_string(),
            },
            Ok(Reply::Error(e)) => fail(client_error(&e)),
            Ok(other) => fail(unexpected(&other)),
            Err(e) => fail(core_failure(&e)),
        }
    }

    async fn forward_to_dlq(&self, req: pb::ForwardMessageToDeadLetterQueueRequest) -> Status {
        let group = match resource_name(req.group.as_ref(), "group") {
            Ok(g) => g,
            Err(s) => return s,
        };
        let handle: ReceiptHandle = match req.receipt_handle.parse() {
            Ok(h) => h,
            Err(e) => return client_error(&e),
        };
        match self
            .core
            .request(Request::ForwardToDeadLetter { group, handle })
            .await
        {
            Ok(Reply::Forwarded) => ok(),
            Ok(Reply::Error(e)) => client_error(&e),
            Ok(other) => unexpected(&other),
            Err(e) => core_failure(&e),
        }
    }

    /// The settings the broker answers a client's settings with.
    fn settings_reply(&self, mut s: pb::Settings) -> pb::Settings {
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
                sub.fifo = Some(false);
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

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, GrpcStatus>> + Send + 'static>>;

#[tonic::async_trait]
impl MessagingService for Messaging {
    async fn query_route(
        &self,
        request: GrpcRequest<pb::QueryRouteRequest>,
    ) -> Result<Response<pb::QueryRouteResponse>, GrpcStatus> {
        let req = request.into_inner();
        let resp = match resource_name(req.topic.as_ref(), "topic") {
            Err(s) => pb::QueryRouteResponse {
                status: Some(s),
                message_queues: Vec::new(),
            },
            Ok(topic) => match self.queues_of(&topic).await {
                Ok(n) => pb::QueryRouteResponse {
                    status: Some(ok()),
                    message_queues: self.message_queues(&topic, n, req.endpoints.as_ref()),
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
        _request: GrpcRequest<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, GrpcStatus> {
        let s = ok();
        self.counted("Heartbeat", &s);
        Ok(Response::new(pb::HeartbeatResponse { status: Some(s) }))
    }

    async fn send_message(
        &self,
        request: GrpcRequest<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, GrpcStatus> {
        let t = Instant::now();
        let client = client_id(&request);
        let req = request.into_inner();
        let n = req.messages.len();
        let (status, mut entries) = self.send(req, client).await;
        if entries.is_empty() {
            // One entry per message, each with the failure, as clients read entries.
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
        let req = request.into_inner();
        let resp = match resource_name(req.topic.as_ref(), "topic") {
            Err(s) => pb::QueryAssignmentResponse {
                status: Some(s),
                assignments: Vec::new(),
            },
            Ok(topic) => match self.queues_of(&topic).await {
                Ok(n) => pb::QueryAssignmentResponse {
                    status: Some(ok()),
                    assignments: self
                        .message_queues(&topic, n, req.endpoints.as_ref())
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
        let timeout = grpc_timeout_ms(&request);
        let out = self.receive(request.into_inner(), timeout).await;
        if let Some(pb::receive_message_response::Content::Status(s)) =
            out.first().and_then(|r| r.content.as_ref())
        {
            // An empty long poll is not a refusal.
            if s.code != Code::MessageNotFound as i32 {
                self.refused("ReceiveMessage", s);
            }
        }
        Ok(Response::new(Box::pin(tokio_stream::iter(
            out.into_iter().map(Ok),
        ))))
    }

    async fn ack_message(
        &self,
        request: GrpcRequest<pb::AckMessageRequest>,
    ) -> Result<Response<pb::AckMessageResponse>, GrpcStatus> {
        let resp = self.ack(request.into_inner()).await;
        self.counted("AckMessage", resp.status.as_ref().expect("set"));
        Ok(Response::new(resp))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: GrpcRequest<pb::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<pb::ForwardMessageToDeadLetterQueueResponse>, GrpcStatus> {
        let s = self.forward_to_dlq(request.into_inner()).await;
        self.counted("ForwardMessageToDeadLetterQueue", &s);
        Ok(Response::new(pb::ForwardMessageToDeadLetterQueueResponse {
            status: Some(s),
        }))
    }

    async fn end_transaction(
        &self,
        request: GrpcRequest<pb::EndTransactionRequest>,
    ) -> Result<Response<pb::EndTransactionResponse>, GrpcStatus> {
        let t = Instant::now();
        let s = Messaging::end_transaction(self, request.into_inner()).await;
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
        let client = client_id(&request);
        let mut inbound = request.into_inner();
        let conn = self.next_conn.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel::<Result<pb::TelemetryCommand, GrpcStatus>>();
        let this = self.clone();
        this.metrics
            .telemetry_streams
            .fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let (check_tx, mut check_rx) = mpsc::unbounded_channel();
            let mut producer = false;
            loop {
                tokio::select! {
                    msg = inbound.next() => match msg {
                        Some(Ok(cmd)) => match cmd.command {
                            Some(pb::telemetry_command::Command::Settings(s)) => {
                                let topics: Option<Vec<String>> = match &s.pub_sub {
                                    Some(pb::settings::PubSub::Publishing(p)) => {
                                        Some(p.topics.iter().map(|t| t.name.clone()).filter(|t| !t.is_empty()).collect())
                                    }
                                    _ => None,
                                };
                                let reply = pb::TelemetryCommand {
                                    status: Some(ok()),
                                    command: Some(pb::telemetry_command::Command::Settings(this.settings_reply(s))),
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
        debug!(client = %client_id(&request), "client terminated");
        let s = ok();
        self.counted("NotifyClientTermination", &s);
        Ok(Response::new(pb::NotifyClientTerminationResponse {
            status: Some(s),
        }))
    }

    async fn change_invisible_duration(
        &self,
        request: GrpcRequest<pb::ChangeInvisibleDurationRequest>,
    ) -> Result<Response<pb::ChangeInvisibleDurationResponse>, GrpcStatus> {
        let resp = self.change_invisible(request.into_inner()).await;
        self.counted(
            "ChangeInvisibleDuration",
            resp.status.as_ref().expect("set"),
        );
        Ok(Response::new(resp))
    }
}
