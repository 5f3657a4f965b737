//! The floor of the gRPC serving stack (issue #16): the broker's own generated
//! `MessagingService` types behind the broker's tonic settings (`grpc::builder`) and a
//! TCP_NODELAY accept loop, with the least work behind each RPC that `rocklet bench send|txn
//! --endpoint` calls: an in-memory queue per topic behind a `std::sync::Mutex`, a prepared
//! message held until its EndTransaction (commit makes it receivable, rollback drops it),
//! receive returning up to the batch asked for (long-polling on a `Notify` while empty), acks
//! accepted. No storage, core thread, auth, gate, metrics or checks: what it costs per
//! operation is tonic + hyper + h2 + prost + tokio + the kernel's TCP.
//!
//! ```text
//! cargo build --release -p rocklet-broker --example grpc_floor
//! target/release/examples/grpc_floor [127.0.0.1:0]   # prints `addr=127.0.0.1:PORT`
//! ```

mod floor;

use floor::{lock, now_ms};

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rocklet_broker::config::BrokerConfig;
use rocklet_broker::grpc::builder as grpc_builder;
use rocklet_broker::grpc::convert::{duration, duration_ms, md5_hex, timestamp};
use rocklet_broker::grpc::status::{ok, status};
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::pb::v2::messaging_service_server::{MessagingService, MessagingServiceServer};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status as GrpcStatus, Streaming};

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, GrpcStatus>> + Send + 'static>>;

/// Long polls wait at most this long (the broker's default cap).
const MAX_LONG_POLL_MS: u64 = 20_000;

#[derive(Default)]
struct Topic {
    ready: VecDeque<pb::Message>,
    next_offset: i64,
}

#[derive(Default)]
struct Floor {
    topics: Mutex<HashMap<String, Topic>>,
    /// Prepared messages by transaction id, with their topic.
    prepared: Mutex<HashMap<String, (String, pb::Message)>>,
    available: Notify,
    next_id: AtomicU64,
}

fn name(r: Option<&pb::Resource>) -> String {
    r.map(|r| r.name.clone()).unwrap_or_default()
}

fn queue(topic: Option<pb::Resource>, endpoints: Option<pb::Endpoints>) -> pb::MessageQueue {
    pb::MessageQueue {
        topic,
        id: 0,
        permission: pb::Permission::ReadWrite as i32,
        broker: Some(pb::Broker {
            name: "grpc-floor".into(),
            id: 0,
            endpoints,
        }),
        accept_message_types: vec![
            pb::MessageType::Normal as i32,
            pb::MessageType::Transaction as i32,
        ],
    }
}

fn delivery_now() -> pb::ReceiveMessageResponse {
    pb::ReceiveMessageResponse {
        content: Some(pb::receive_message_response::Content::DeliveryTimestamp(
            timestamp(now_ms()),
        )),
    }
}

impl Floor {
    /// Makes a message receivable; its queue offset.
    fn push(&self, topic: String, mut m: pb::Message) -> i64 {
        let offset = {
            let mut g = lock(&self.topics);
            let t = g.entry(topic).or_default();
            let offset = t.next_offset;
            t.next_offset += 1;
            if let Some(sp) = m.system_properties.as_mut() {
                sp.queue_offset = Some(offset);
            }
            t.ready.push_back(m);
            offset
        };
        self.available.notify_one();
        offset
    }

    fn pop(&self, topic: &str, max: usize) -> Vec<pb::Message> {
        let mut g = lock(&self.topics);
        match g.get_mut(topic) {
            Some(t) => {
                let n = t.ready.len().min(max);
                t.ready.drain(..n).collect()
            }
            None => Vec::new(),
        }
    }
}

#[tonic::async_trait]
impl MessagingService for Floor {
    async fn query_route(
        &self,
        request: Request<pb::QueryRouteRequest>,
    ) -> Result<Response<pb::QueryRouteResponse>, GrpcStatus> {
        let r = request.into_inner();
        Ok(Response::new(pb::QueryRouteResponse {
            status: Some(ok()),
            message_queues: vec![queue(r.topic, r.endpoints)],
        }))
    }

    async fn heartbeat(
        &self,
        _request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, GrpcStatus> {
        Ok(Response::new(pb::HeartbeatResponse { status: Some(ok()) }))
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Result<Response<pb::SendMessageResponse>, GrpcStatus> {
        let req = request.into_inner();
        let mut entries = Vec::with_capacity(req.messages.len());
        for mut m in req.messages {
            let topic = name(m.topic.as_ref());
            let sp = m.system_properties.get_or_insert_with(Default::default);
            let message_id = sp.message_id.clone();
            let (transaction_id, offset) = if sp.message_type == pb::MessageType::Transaction as i32
            {
                let id = format!("{:016X}", self.next_id.fetch_add(1, Ordering::Relaxed));
                lock(&self.prepared).insert(id.clone(), (topic, m));
                (id, 0)
            } else {
                (String::new(), self.push(topic, m))
            };
            entries.push(pb::SendResultEntry {
                status: Some(ok()),
                message_id,
                transaction_id,
                offset,
            });
        }
        Ok(Response::new(pb::SendMessageResponse {
            status: Some(ok()),
            entries,
        }))
    }

    async fn query_assignment(
        &self,
        request: Request<pb::QueryAssignmentRequest>,
    ) -> Result<Response<pb::QueryAssignmentResponse>, GrpcStatus> {
        let r = request.into_inner();
        Ok(Response::new(pb::QueryAssignmentResponse {
            status: Some(ok()),
            assignments: vec![pb::Assignment {
                message_queue: Some(queue(r.topic, r.endpoints)),
            }],
        }))
    }

    type ReceiveMessageStream = BoxStream<pb::ReceiveMessageResponse>;

    async fn receive_message(
        &self,
        request: Request<pb::ReceiveMessageRequest>,
    ) -> Result<Response<Self::ReceiveMessageStream>, GrpcStatus> {
        let r = request.into_inner();
        let topic = name(r.message_queue.as_ref().and_then(|q| q.topic.as_ref()));
        let max = usize::try_from(r.batch_size).unwrap_or(1).max(1);
        let wait = r
            .long_polling_timeout
            .as_ref()
            .and_then(duration_ms)
            .unwrap_or(MAX_LONG_POLL_MS)
            .min(MAX_LONG_POLL_MS);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait);
        let batch = loop {
            // Registered before looking, so a push between the look and the wait wakes it.
            let notified = self.available.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let b = self.pop(&topic, max);
            if !b.is_empty() {
                break b;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                break Vec::new();
            }
        };
        let mut out = Vec::with_capacity(batch.len() + 2);
        if batch.is_empty() {
            out.push(pb::ReceiveMessageResponse {
                content: Some(pb::receive_message_response::Content::Status(status(
                    pb::Code::MessageNotFound,
                    "MESSAGE_NOT_FOUND: no new message before the long-polling timeout",
                ))),
            });
        } else {
            out.push(pb::ReceiveMessageResponse {
                content: Some(pb::receive_message_response::Content::Status(ok())),
            });
            let now = timestamp(now_ms());
            for mut m in batch {
                let handle = format!("{:x}", self.next_id.fetch_add(1, Ordering::Relaxed));
                // What a consumer checks and needs to ack: the body digest (clients verify
                // it), a receipt handle, the attempt and the invisible time.
                let checksum = md5_hex(&m.body);
                let sp = m.system_properties.get_or_insert_with(Default::default);
                sp.body_digest = Some(pb::Digest {
                    r#type: pb::DigestType::Md5 as i32,
                    checksum,
                });
                sp.receipt_handle = Some(handle);
                sp.delivery_attempt = Some(1);
                sp.invisible_duration = r.invisible_duration.or(Some(duration(30_000)));
                sp.store_timestamp = Some(now);
                sp.delivery_timestamp = Some(now);
                sp.queue_id = 0;
                out.push(pb::ReceiveMessageResponse {
                    content: Some(pb::receive_message_response::Content::Message(m)),
                });
            }
        }
        out.push(delivery_now());
        Ok(Response::new(Box::pin(tokio_stream::iter(
            out.into_iter().map(Ok),
        ))))
    }

    async fn ack_message(
        &self,
        request: Request<pb::AckMessageRequest>,
    ) -> Result<Response<pb::AckMessageResponse>, GrpcStatus> {
        let r = request.into_inner();
        let entries = r
            .entries
            .into_iter()
            .map(|e| pb::AckMessageResultEntry {
                message_id: e.message_id,
                receipt_handle: e.receipt_handle,
                status: Some(ok()),
            })
            .collect();
        Ok(Response::new(pb::AckMessageResponse {
            status: Some(ok()),
            entries,
        }))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        _request: Request<pb::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<pb::ForwardMessageToDeadLetterQueueResponse>, GrpcStatus> {
        Ok(Response::new(pb::ForwardMessageToDeadLetterQueueResponse {
            status: Some(status(pb::Code::NotImplemented, "not in the floor")),
        }))
    }

    async fn end_transaction(
        &self,
        request: Request<pb::EndTransactionRequest>,
    ) -> Result<Response<pb::EndTransactionResponse>, GrpcStatus> {
        let r = request.into_inner();
        let held = lock(&self.prepared).remove(&r.transaction_id);
        let s = match held {
            None => status(
                pb::Code::InvalidTransactionId,
                "INVALID_TRANSACTION_ID: no such prepared message",
            ),
            Some((topic, m)) => {
                if r.resolution == pb::TransactionResolution::Commit as i32 {
                    self.push(topic, m);
                }
                ok()
            }
        };
        Ok(Response::new(pb::EndTransactionResponse {
            status: Some(s),
        }))
    }

    type TelemetryStream = BoxStream<pb::TelemetryCommand>;

    async fn telemetry(
        &self,
        request: Request<Streaming<pb::TelemetryCommand>>,
    ) -> Result<Response<Self::TelemetryStream>, GrpcStatus> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::unbounded_channel();
        // Settings answered with themselves (plus a retry policy); the stream stays open for
        // as long as the client's side does.
        tokio::spawn(async move {
            while let Some(Ok(cmd)) = inbound.next().await {
                if let Some(pb::telemetry_command::Command::Settings(mut s)) = cmd.command {
                    s.backoff_policy = Some(pb::RetryPolicy {
                        max_attempts: 16,
                        strategy: Some(pb::retry_policy::Strategy::ExponentialBackoff(
                            pb::ExponentialBackoff {
                                initial: Some(duration(1_000)),
                                max: Some(duration(60_000)),
                                multiplier: 2.0,
                            },
                        )),
                    });
                    let reply = pb::TelemetryCommand {
                        status: Some(ok()),
                        command: Some(pb::telemetry_command::Command::Settings(s)),
                    };
                    if tx.send(Ok(reply)).is_err() {
                        break;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }

    async fn notify_client_termination(
        &self,
        _request: Request<pb::NotifyClientTerminationRequest>,
    ) -> Result<Response<pb::NotifyClientTerminationResponse>, GrpcStatus> {
        Ok(Response::new(pb::NotifyClientTerminationResponse {
            status: Some(ok()),
        }))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<pb::ChangeInvisibleDurationRequest>,
    ) -> Result<Response<pb::ChangeInvisibleDurationResponse>, GrpcStatus> {
        let _ = request;
        Ok(Response::new(pb::ChangeInvisibleDurationResponse {
            status: Some(status(pb::Code::NotImplemented, "not in the floor")),
            receipt_handle: String::new(),
        }))
    }
}

async fn serve(listen: SocketAddr) -> Result<(), String> {
    let cfg = BrokerConfig::default();
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    // The broker's accept (net::grpc_incoming) without its connection cap, idle timer and
    // metrics: TCP_NODELAY on each connection, handed to tonic through a channel.
    let (tx, rx) = mpsc::channel::<std::io::Result<tokio::net::TcpStream>>(16);
    tokio::spawn(async move {
        loop {
            let r = tokio::select! {
                r = listener.accept() => r,
                () = tx.closed() => return,
            };
            match r {
                Ok((io, _)) => {
                    if let Err(e) = io.set_nodelay(true) {
                        eprintln!("cannot set TCP_NODELAY: {e}");
                    }
                    if tx.send(Ok(io)).await.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    eprintln!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    });
    let max = cfg.max_request_message_bytes();
    let messaging = MessagingServiceServer::new(Floor::default())
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    println!("grpc_floor listening addr={addr}");
    grpc_builder(&cfg)
        .add_service(messaging)
        .serve_with_incoming_shutdown(ReceiverStream::new(rx), async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| e.to_string())
}

fn main() -> std::process::ExitCode {
    floor::run(serve)
}
