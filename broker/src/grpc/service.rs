//! RocketMQ 5 gRPC: `apache.rocketmq.v2.MessagingService` over the core thread.
//!
//! Every RPC converts its request (`convert`), asks the core thread through its typed door
//! ([`CoreHandle`]: `send`, `end_transaction`, `receive`, …, each reply matched once), and
//! converts the answer; a client's mistake comes back as a RocketMQ `Status` naming the
//! problem, never as a panic. Per-connection state is only what routing needs: which
//! telemetry streams are producers of which topics (for transaction checks).
//!
//! This file holds [`Messaging`], its settings and the `MessagingService` entry points
//! (each authorizes, counts and hands over to one method); the methods live by concept:
//! `route.rs` (QueryRoute, QueryAssignment: queues and brokers), `produce.rs` (SendMessage,
//! EndTransaction), `consume.rs` (ReceiveMessage with long polling, AckMessage,
//! ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue) and `budget.rs` (the
//! [`ReceiveBudget`]). A SendMessage: `send_message` here → `produce.rs` `send` →
//! [`CoreHandle::send`] or [`CoreHandle::prepare`] → `status.rs` codes the answer.
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

mod budget;
mod consume;
mod produce;
mod route;

use budget::Charged;
pub use budget::{Charge, OverBudget, ReceiveBudget, Reservation};

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

    /// Cluster mode on a replica: the master a write goes to (`cluster::forward`). On a
    /// master handing over, the write waits for the new master and goes there.
    async fn forward_to(
        &self,
        md: &tonic::metadata::MetadataMap,
    ) -> Option<(crate::cluster::View, std::net::SocketAddr)> {
        self.forward_answer_to(md, false).await
    }

    /// [`Self::forward_to`] for a request that may answer the master's transaction check
    /// (`check_answer`), which a drain after a handoff does not wait for.
    async fn forward_answer_to(
        &self,
        md: &tonic::metadata::MetadataMap,
        check_answer: bool,
    ) -> Option<(crate::cluster::View, std::net::SocketAddr)> {
        let view = self.cluster.as_ref()?;
        let me = self.cfg.cluster.as_ref()?.node_id;
        view.handoff.settled().await;
        let at = crate::cluster::forward::target(view, me, md)?;
        if !check_answer {
            view.handoff.forwarded();
        }
        Some((view.clone(), at))
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
        let forward = self.forward_to(request.metadata()).await;
        if let Some((view, at)) = forward {
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
        let forward = self.forward_to(request.metadata()).await;
        if let Some((view, at)) = forward {
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
        let forward = self.forward_to(request.metadata()).await;
        if let Some((view, at)) = forward {
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
        let forward = self.forward_to(request.metadata()).await;
        if let Some((view, at)) = forward {
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
        let check_answer = request.get_ref().source() == pb::TransactionSource::SourceServerCheck;
        let forward = self
            .forward_answer_to(request.metadata(), check_answer)
            .await;
        if let Some((view, at)) = forward {
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
        let forward = self.forward_to(request.metadata()).await;
        if let Some((view, at)) = forward {
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
        let forward = self.forward_to(request.metadata()).await;
        if let Some((view, at)) = forward {
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
