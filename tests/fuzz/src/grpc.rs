//! The RocketMQ 5 gRPC target (`grpc_requests`): protobuf bytes decoded with prost as the
//! request of an RPC and passed to the broker's `Messaging` service (tonic's
//! `MessagingService` trait), in order, against a fresh broker ([`Host`]) per input.
//!
//! Input: records of `[rpc u8][sel u8][len u16 LE][len bytes]` ([`record`]); the bytes are
//! the request message (anything prost does not decode is skipped, as tonic would refuse
//! it). `sel` bit 7 patches receipt handles (ack, change invisible, forward) or the
//! transaction id (end) with one this input was given earlier (index: `sel & 31`), which
//! fuzzed bytes would never guess; bit 6 adds `x-mq-client-id`; bit 5 a `grpc-timeout` of
//! `(sel & 31) * 100` ms. RPC 10 moves the core's clock by the first two bytes × 10 ms.
//!
//! Checked: no panic, every RPC returns (long polls end: the runtime's clock is paused), a
//! status in every answer, one send entry per message; at the end, every message whose
//! send was answered OK (no delay, not transactional) is received by a new consumer group,
//! at the queue offset the answer named (in the queue the broker picked), with its body.

use rocklet_broker::config::TopicMessageType;
use rocklet_broker::grpc::convert;
use rocklet_broker::grpc::service::Messaging;
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::pb::v2::messaging_service_server::MessagingService;
use tokio_stream::StreamExt;

use crate::host::{check_delivered, runtime, Acked, Host, ANY_QUEUE, NOT_IMMEDIATE};

/// The RPCs, by the record's first byte (modulo the count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rpc {
    Send,
    Receive,
    Ack,
    ChangeInvisible,
    End,
    Forward,
    Route,
    Assignment,
    Heartbeat,
    Terminate,
    /// Not an RPC: moves the core's clock.
    Advance,
}

const RPCS: [Rpc; 11] = [
    Rpc::Send,
    Rpc::Receive,
    Rpc::Ack,
    Rpc::ChangeInvisible,
    Rpc::End,
    Rpc::Forward,
    Rpc::Route,
    Rpc::Assignment,
    Rpc::Heartbeat,
    Rpc::Terminate,
    Rpc::Advance,
];

/// `sel` bits.
pub const PATCH: u8 = 0x80;
pub const CLIENT_ID: u8 = 0x40;
pub const TIMEOUT: u8 = 0x20;

/// One input record (what the seeds are made of).
#[must_use]
pub fn record(rpc: Rpc, sel: u8, bytes: &[u8]) -> Vec<u8> {
    let i = RPCS.iter().position(|r| *r == rpc).expect("listed") as u8;
    let mut out = vec![i, sel];
    out.extend_from_slice(&(bytes.len().min(0xFFFF) as u16).to_le_bytes());
    out.extend_from_slice(&bytes[..bytes.len().min(0xFFFF)]);
    out
}

struct Session {
    host: Host,
    svc: Messaging,
    handles: Vec<String>,
    txns: Vec<String>,
    acked: Vec<Acked>,
    /// Consumer groups the input named (the final receive uses another).
    groups: std::collections::HashSet<String>,
}

fn req<T>(msg: T, sel: u8) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    if sel & CLIENT_ID != 0 {
        r.metadata_mut()
            .insert("x-mq-client-id", "fuzz-client".parse().expect("ascii"));
    }
    if sel & TIMEOUT != 0 {
        let v = format!("{}m", u32::from(sel & 31) * 100);
        r.metadata_mut()
            .insert("grpc-timeout", v.parse().expect("ascii"));
    }
    r
}

fn pick(v: &[String], sel: u8) -> Option<String> {
    (sel & PATCH != 0 && !v.is_empty()).then(|| v[usize::from(sel & 31) % v.len()].clone())
}

fn decode<T: prost::Message + Default>(b: &[u8]) -> Option<T> {
    T::decode(b).ok()
}

fn code(s: Option<&pb::Status>) -> i32 {
    s.expect("every answer has a status").code
}

const OK: i32 = pb::Code::Ok as i32;

impl Session {
    fn start() -> Self {
        let host = Host::start();
        let svc = Messaging::new(host.core.clone(), host.cfg.clone(), host.metrics.clone());
        Session {
            host,
            svc,
            handles: Vec::new(),
            txns: Vec::new(),
            acked: Vec::new(),
            groups: std::collections::HashSet::new(),
        }
    }

    fn group(&mut self, g: Option<&pb::Resource>) {
        if let Some(g) = g {
            self.groups.insert(g.name.clone());
        }
    }

    async fn step(&mut self, rpc: Rpc, sel: u8, b: &[u8]) {
        match rpc {
            Rpc::Send => {
                if let Some(m) = decode::<pb::SendMessageRequest>(b) {
                    self.send(m, sel).await;
                }
            }
            Rpc::Receive => {
                if let Some(m) = decode::<pb::ReceiveMessageRequest>(b) {
                    self.group(m.group.as_ref());
                    self.receive(m, sel).await;
                }
            }
            Rpc::Ack => {
                if let Some(mut m) = decode::<pb::AckMessageRequest>(b) {
                    self.group(m.group.as_ref());
                    for (i, e) in m.entries.iter_mut().enumerate() {
                        if let Some(h) = pick(&self.handles, sel.wrapping_add(i as u8)) {
                            e.receipt_handle = h;
                        }
                    }
                    let n = m.entries.len();
                    let r = self.svc.ack_message(req(m, sel)).await;
                    if let Ok(r) = r {
                        let r = r.into_inner();
                        code(r.status.as_ref());
                        // A request refused as a whole (no group) has no entries.
                        if !r.entries.is_empty() {
                            assert_eq!(r.entries.len(), n, "one ack entry per entry");
                        }
                    }
                }
            }
            Rpc::ChangeInvisible => {
                if let Some(mut m) = decode::<pb::ChangeInvisibleDurationRequest>(b) {
                    self.group(m.group.as_ref());
                    if let Some(h) = pick(&self.handles, sel) {
                        m.receipt_handle = h;
                    }
                    if let Ok(r) = self.svc.change_invisible_duration(req(m, sel)).await {
                        let r = r.into_inner();
                        if code(r.status.as_ref()) == OK {
                            self.handles.push(r.receipt_handle);
                        }
                    }
                }
            }
            Rpc::End => {
                if let Some(mut m) = decode::<pb::EndTransactionRequest>(b) {
                    if let Some(t) = pick(&self.txns, sel) {
                        m.transaction_id = t;
                    }
                    if let Ok(r) = self.svc.end_transaction(req(m, sel)).await {
                        code(r.into_inner().status.as_ref());
                    }
                }
            }
            Rpc::Forward => {
                if let Some(mut m) = decode::<pb::ForwardMessageToDeadLetterQueueRequest>(b) {
                    self.group(m.group.as_ref());
                    if let Some(h) = pick(&self.handles, sel) {
                        m.receipt_handle = h;
                    }
                    let r = self
                        .svc
                        .forward_message_to_dead_letter_queue(req(m, sel))
                        .await;
                    if let Ok(r) = r {
                        code(r.into_inner().status.as_ref());
                    }
                }
            }
            Rpc::Route => {
                if let Some(m) = decode::<pb::QueryRouteRequest>(b) {
                    if let Ok(r) = self.svc.query_route(req(m, sel)).await {
                        code(r.into_inner().status.as_ref());
                    }
                }
            }
            Rpc::Assignment => {
                if let Some(m) = decode::<pb::QueryAssignmentRequest>(b) {
                    if let Ok(r) = self.svc.query_assignment(req(m, sel)).await {
                        code(r.into_inner().status.as_ref());
                    }
                }
            }
            Rpc::Heartbeat => {
                if let Some(m) = decode::<pb::HeartbeatRequest>(b) {
                    if let Ok(r) = self.svc.heartbeat(req(m, sel)).await {
                        code(r.into_inner().status.as_ref());
                    }
                }
            }
            Rpc::Terminate => {
                if let Some(m) = decode::<pb::NotifyClientTerminationRequest>(b) {
                    if let Ok(r) = self.svc.notify_client_termination(req(m, sel)).await {
                        code(r.into_inner().status.as_ref());
                    }
                }
            }
            Rpc::Advance => {
                let ms = u16::from_le_bytes([
                    b.first().copied().unwrap_or(0),
                    b.get(1).copied().unwrap_or(0),
                ]);
                self.host.advance(u64::from(ms) * 10).await;
            }
        }
    }

    async fn send(&mut self, m: pb::SendMessageRequest, sel: u8) {
        let n = m.messages.len();
        // What an OK answer promises: the messages that are visible at once, each at the
        // queue offset the answer names, in the queue the broker picked (it picks one as
        // Apache's proxy does, whatever queue_id the client set; the answer does not say).
        let expect: Vec<Option<(String, Vec<u8>)>> = m
            .messages
            .iter()
            .map(|x| {
                let ty = convert::message_type(x);
                let sp = x.system_properties.as_ref()?;
                let topic = x.topic.as_ref()?.name.clone();
                let immediate = matches!(ty, TopicMessageType::Normal | TopicMessageType::Fifo)
                    && sp.delivery_timestamp.is_none()
                    && !x
                        .user_properties
                        .keys()
                        .any(|k| NOT_IMMEDIATE.contains(&k.as_str()))
                    && !topic.starts_with('%');
                immediate.then(|| (topic, x.body.clone()))
            })
            .collect();
        let Ok(r) = self.svc.send_message(req(m, sel)).await else {
            return;
        };
        let r = r.into_inner();
        assert_eq!(r.entries.len(), n.max(1), "one send entry per message");
        if code(r.status.as_ref()) != OK {
            return;
        }
        for (e, x) in r.entries.iter().zip(expect) {
            assert_eq!(code(e.status.as_ref()), OK, "an OK send has OK entries");
            if !e.transaction_id.is_empty() {
                self.txns.push(e.transaction_id.clone());
            }
            if let Some((topic, body)) = x {
                self.acked.push(Acked {
                    topic,
                    queue_id: ANY_QUEUE,
                    queue_offset: u64::try_from(e.offset).expect("an offset"),
                    body,
                });
            }
        }
    }

    /// Runs a receive; returns the messages (topic, queue, offset, body, handle) it got.
    async fn receive(&mut self, m: pb::ReceiveMessageRequest, sel: u8) -> Vec<(Acked, String)> {
        let mut got = Vec::new();
        let Ok(r) = self.svc.receive_message(req(m, sel)).await else {
            return got;
        };
        let items: Vec<_> = r.into_inner().collect().await;
        let mut first = true;
        for item in items {
            let item = item.expect("the stream carries no gRPC error");
            match item.content.expect("every response has content") {
                pb::receive_message_response::Content::Status(_) => {}
                pb::receive_message_response::Content::Message(msg) => {
                    assert!(!first, "a status comes before the messages");
                    let sp = msg.system_properties.expect("system properties");
                    let handle = sp.receipt_handle.expect("a receipt handle");
                    self.handles.push(handle.clone());
                    got.push((
                        Acked {
                            topic: msg.topic.map(|t| t.name).unwrap_or_default(),
                            queue_id: u32::try_from(sp.queue_id).expect("a queue id"),
                            queue_offset: sp
                                .queue_offset
                                .and_then(|o| u64::try_from(o).ok())
                                .expect("a queue offset"),
                            body: msg.body,
                        },
                        handle,
                    ));
                }
                pb::receive_message_response::Content::DeliveryTimestamp(_) => {}
            }
            first = false;
        }
        got
    }

    /// Receives every topic with acknowledged sends as a new group (acking as it goes, so
    /// FIFO groups move on) and checks each acknowledged message came.
    async fn finish(mut self) {
        let mut topics: Vec<String> = self.acked.iter().map(|a| a.topic.clone()).collect();
        topics.sort();
        topics.dedup();
        // A group no request of the input named: nothing it received or acked is hidden.
        let name = (0..)
            .map(|i| format!("fuzz_drain_{i}"))
            .find(|n| !self.groups.contains(n))
            .expect("a free name");
        let group = Some(pb::Resource {
            resource_namespace: String::new(),
            name,
        });
        let mut delivered = Vec::new();
        for topic in topics {
            for _ in 0..1_000 {
                let m = pb::ReceiveMessageRequest {
                    group: group.clone(),
                    message_queue: Some(pb::MessageQueue {
                        topic: Some(pb::Resource {
                            resource_namespace: String::new(),
                            name: topic.clone(),
                        }),
                        ..Default::default()
                    }),
                    batch_size: 32,
                    invisible_duration: Some(convert::duration(60_000)),
                    long_polling_timeout: Some(convert::duration(0)),
                    ..Default::default()
                };
                let got = self.receive(m, 0).await;
                if got.is_empty() {
                    break;
                }
                let entries = got
                    .iter()
                    .map(|(_, h)| pb::AckMessageEntry {
                        message_id: String::new(),
                        receipt_handle: h.clone(),
                    })
                    .collect();
                // The topic the handles are of, as every client names it (a handle of
                // another topic, or none named, is refused).
                let ack = pb::AckMessageRequest {
                    group: group.clone(),
                    topic: Some(pb::Resource {
                        resource_namespace: String::new(),
                        name: topic.clone(),
                    }),
                    entries,
                };
                let r = self
                    .svc
                    .ack_message(tonic::Request::new(ack))
                    .await
                    .expect("ack answered")
                    .into_inner();
                assert_eq!(code(r.status.as_ref()), OK, "fresh handles ack: {r:?}");
                delivered.extend(got.into_iter().map(|(a, _)| a));
            }
        }
        check_delivered(&self.acked, &delivered);
        self.host.stop().await;
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    runtime().block_on(async {
        let mut s = Session::start();
        let mut rest = data;
        while rest.len() >= 4 {
            let rpc = RPCS[usize::from(rest[0]) % RPCS.len()];
            let sel = rest[1];
            let len = usize::from(u16::from_le_bytes([rest[2], rest[3]]));
            let body = &rest[4..];
            let (b, tail) = body.split_at(len.min(body.len()));
            rest = tail;
            s.step(rpc, sel, b).await;
        }
        s.finish().await;
    });
}
