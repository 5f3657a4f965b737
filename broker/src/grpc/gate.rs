//! What every gRPC call passes before tonic decodes it:
//!
//! - a deadline for its request to arrive. A call whose request (every RPC but Telemetry has
//!   one request message, read to its end before the handler runs) has not fully arrived
//!   within [`BrokerConfig::request_read_timeout_ms`](crate::config::BrokerConfig) fails
//!   with `DEADLINE_EXCEEDED` naming the limit, and its stream and buffers are freed: a
//!   client that opens streams and trickles (or never sends) their bodies holds nothing for
//!   longer. Telemetry is a bidirectional stream that stays open by design and is not
//!   bounded here.
//! - the broker-wide [`RequestBudget`]. The first 5 bytes of a request body are the gRPC
//!   message's compression flag and length; the call reserves that length before any more
//!   of its body is read and holds it until its handling ends (a unary call's response is
//!   made; a ReceiveMessage's response stream is over, so a long poll holds its request's
//!   bytes while it waits). Over the budget, the call is answered at once without reading
//!   its body: a MessagingService RPC with its response carrying the RocketMQ status
//!   `TOO_MANY_REQUESTS` (clients back off and retry), the admin service with gRPC
//!   `RESOURCE_EXHAUSTED`. A Telemetry message counts while it arrives over more than one
//!   HTTP/2 frame (one that does not fit fails the stream; clients open it again).

use std::collections::VecDeque;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf as _, Bytes};
use http_body::{Body as HttpBody, Frame, SizeHint};
use prost::Message as _;
use tonic::body::Body;
use tonic::Status;

use crate::budget::{HeldBytes, OverRequestBudget, RequestBudget};
use crate::metrics::Metrics;
use crate::pb::v2 as pb;

/// The RPC exempt from the read deadline (a long-lived bidirectional stream).
pub const TELEMETRY_PATH: &str = "/apache.rocketmq.v2.MessagingService/Telemetry";
/// The RPC whose response is a stream that lives as long as its long poll.
const RECEIVE_PATH: &str = "/apache.rocketmq.v2.MessagingService/ReceiveMessage";
const MESSAGING_PREFIX: &str = "/apache.rocketmq.v2.MessagingService/";
/// MessagingService RPCs the broker serves with one response message (the others are
/// answered `UNIMPLEMENTED` by tonic without reading their body).
const ANSWERED: [&str; 10] = [
    "QueryRoute",
    "Heartbeat",
    "SendMessage",
    "QueryAssignment",
    "ReceiveMessage",
    "AckMessage",
    "ForwardMessageToDeadLetterQueue",
    "EndTransaction",
    "NotifyClientTermination",
    "ChangeInvisibleDuration",
];

/// The layer for `tonic::transport::Server::layer`.
#[derive(Debug, Clone)]
pub struct GateLayer {
    read_timeout: Duration,
    budget: Arc<RequestBudget>,
    /// Larger declared messages are left to tonic, which refuses them unread.
    max_message: u64,
    metrics: Arc<Metrics>,
}

impl GateLayer {
    /// Requests must arrive within `read_timeout` and fit in `budget`; a message above
    /// `max_message` (tonic's decode limit) is not reserved, tonic refuses it.
    #[must_use]
    pub fn new(
        read_timeout: Duration,
        budget: Arc<RequestBudget>,
        max_message: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        GateLayer {
            read_timeout,
            budget,
            max_message: max_message as u64,
            metrics,
        }
    }
}

impl<S> tower_layer::Layer<S> for GateLayer {
    type Service = Gate<S>;

    fn layer(&self, inner: S) -> Gate<S> {
        Gate {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`GateLayer`] wraps around tonic's routes.
#[derive(Debug, Clone)]
pub struct Gate<S> {
    inner: S,
    layer: GateLayer,
}

type Answer<E> = Pin<Box<dyn std::future::Future<Output = Result<http::Response<Body>, E>> + Send>>;

impl<S> tower_service::Service<http::Request<Body>> for Gate<S>
where
    S: tower_service::Service<http::Request<Body>, Response = http::Response<Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Answer<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let path = req.uri().path();
        let layer = &self.layer;
        if path == TELEMETRY_PATH {
            let budget = layer.budget.clone();
            let max = layer.max_message;
            return Box::pin(
                self.inner
                    .call(req.map(|b| Body::new(Metered::new(b, budget, max)))),
            );
        }
        let method = path.strip_prefix(MESSAGING_PREFIX);
        if method.is_some_and(|m| !ANSWERED.contains(&m)) {
            return Box::pin(self.inner.call(req));
        }
        let rocketmq = method.is_some();
        let streaming = path == RECEIVE_PATH;
        let (budget, max) = (layer.budget.clone(), layer.max_message);
        let req =
            req.map(|b| Body::new(Deadline::new(b, layer.read_timeout, layer.metrics.clone())));
        // The clone takes the place of the service that was polled ready, which goes into
        // the future (tower's usual way to call a service after an await).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let mut body = Replay::new(body);
            let held = match body.peek_length().await {
                Some(len) if len <= max => match budget.try_reserve(len) {
                    Ok(held) => Some(held),
                    // Refused unread: dropping the body resets the stream once answered.
                    Err(over) => return Ok(refusal(rocketmq, &over)),
                },
                // No message, or one tonic refuses for its size: nothing to hold.
                _ => None,
            };
            let resp = inner
                .call(http::Request::from_parts(parts, Body::new(body)))
                .await?;
            // A unary call's handler is done once its response is made; a receive's response
            // stream still holds its request while its long poll waits.
            Ok(match held {
                Some(held) if streaming => resp.map(|b| {
                    Body::new(Holding {
                        inner: b,
                        _held: held,
                    })
                }),
                _ => resp,
            })
        })
    }
}

/// Every MessagingService response carries its `Status` in field 1
/// (`proto/rocketmq_v2.proto`; ReceiveMessageResponse's `content` oneof too), so this one
/// message answers any of them.
#[derive(Clone, PartialEq, prost::Message)]
struct StatusOnly {
    #[prost(message, optional, tag = "1")]
    status: Option<pb::Status>,
}

/// The answer to a call refused by the budget: a RocketMQ response with
/// `TOO_MANY_REQUESTS`, or (admin service) gRPC `RESOURCE_EXHAUSTED`.
fn refusal(rocketmq: bool, over: &OverRequestBudget) -> http::Response<Body> {
    if !rocketmq {
        return Status::resource_exhausted(over.to_string()).into_http();
    }
    let msg = StatusOnly {
        status: Some(pb::Status {
            code: pb::Code::TooManyRequests as i32,
            message: over.to_string(),
        }),
    }
    .encode_to_vec();
    let mut frame = Vec::with_capacity(5 + msg.len());
    frame.push(0);
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);
    let mut trailers = http::HeaderMap::new();
    trailers.insert(Status::GRPC_STATUS, http::HeaderValue::from_static("0"));
    let frames = VecDeque::from([
        Ok(Frame::data(Bytes::from(frame))),
        Ok(Frame::trailers(trailers)),
    ]);
    let mut resp = http::Response::new(Body::new(Frames(frames)));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    resp
}

/// A body of frames given up front.
struct Frames(VecDeque<Result<Frame<Bytes>, Status>>);

impl HttpBody for Frames {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        Poll::Ready(self.get_mut().0.pop_front())
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }
}

/// A request body whose first frames were read ahead (to find the message length) and are
/// given to tonic first.
struct Replay {
    ahead: VecDeque<Result<Frame<Bytes>, Status>>,
    inner: Body,
    /// The inner body ended while reading ahead.
    done: bool,
}

impl Replay {
    fn new(inner: Body) -> Self {
        Replay {
            ahead: VecDeque::new(),
            inner,
            done: false,
        }
    }

    /// The declared length of the first message (its 5-byte prefix), reading frames ahead
    /// until it is known; `None` when the body ends, fails or sends trailers first.
    async fn peek_length(&mut self) -> Option<u64> {
        let mut prefix = [0u8; 5];
        let mut have = 0;
        loop {
            let next = std::future::poll_fn(|cx| Pin::new(&mut self.inner).poll_frame(cx)).await;
            match next {
                Some(Ok(f)) => {
                    if let Some(d) = f.data_ref() {
                        let take = (prefix.len() - have).min(d.len());
                        prefix[have..have + take].copy_from_slice(&d[..take]);
                        have += take;
                    }
                    let trailers = f.is_trailers();
                    self.ahead.push_back(Ok(f));
                    if have == prefix.len() {
                        return Some(u64::from(u32::from_be_bytes([
                            prefix[1], prefix[2], prefix[3], prefix[4],
                        ])));
                    }
                    if trailers {
                        return None;
                    }
                }
                Some(Err(e)) => {
                    self.ahead.push_back(Err(e));
                    return None;
                }
                None => {
                    self.done = true;
                    return None;
                }
            }
        }
    }
}

impl HttpBody for Replay {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(f) = this.ahead.pop_front() {
            return Poll::Ready(Some(f));
        }
        if this.done {
            return Poll::Ready(None);
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.ahead.is_empty() && (self.done || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        if !self.ahead.is_empty() || self.done {
            return SizeHint::default();
        }
        self.inner.size_hint()
    }
}

/// A response body holding its request's bytes under the budget until it is dropped.
struct Holding {
    inner: Body,
    _held: HeldBytes,
}

impl HttpBody for Holding {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A Telemetry request body: each message that spans more than one HTTP/2 frame holds its
/// declared length under the budget from its first frame until its last byte has passed
/// (tonic decodes it then, and the stream handles it at once). One that does not fit fails
/// the stream. A message that arrives in one frame is decoded at once and is not counted.
struct Metered {
    inner: Body,
    budget: Arc<RequestBudget>,
    max_message: u64,
    /// The current message's prefix bytes seen so far.
    prefix: [u8; 5],
    have: usize,
    /// The current message's declared length, and how much of it is still to come.
    declared: u64,
    remaining: u64,
    held: Option<HeldBytes>,
}

impl Metered {
    fn new(inner: Body, budget: Arc<RequestBudget>, max_message: u64) -> Self {
        Metered {
            inner,
            budget,
            max_message,
            prefix: [0; 5],
            have: 0,
            declared: 0,
            remaining: 0,
            held: None,
        }
    }

    /// Follows the message framing through one frame's data; `Err` when a message that goes
    /// on past this frame does not fit in the budget.
    fn follow(&mut self, mut d: &[u8]) -> Result<(), OverRequestBudget> {
        while !d.is_empty() {
            if self.have < self.prefix.len() {
                let take = (self.prefix.len() - self.have).min(d.len());
                self.prefix[self.have..self.have + take].copy_from_slice(&d[..take]);
                self.have += take;
                d.advance(take);
                if self.have == self.prefix.len() {
                    let p = self.prefix;
                    self.declared = u64::from(u32::from_be_bytes([p[1], p[2], p[3], p[4]]));
                    self.remaining = self.declared;
                }
            } else {
                let take = self.remaining.min(d.len() as u64);
                self.remaining -= take;
                d.advance(take as usize);
            }
            if self.have == self.prefix.len() && self.remaining == 0 {
                // Whole: the next bytes start another message.
                self.have = 0;
                self.held = None;
            }
        }
        if self.have == self.prefix.len()
            && self.held.is_none()
            && self.declared <= self.max_message
        {
            self.held = Some(self.budget.try_reserve(self.declared)?);
        }
        Ok(())
    }
}

impl HttpBody for Metered {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(f))) = &r {
            if let Some(d) = f.data_ref() {
                if let Err(over) = this.follow(d) {
                    return Poll::Ready(Some(Err(Status::resource_exhausted(over.to_string()))));
                }
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that fails once it has not ended within its deadline.
struct Deadline {
    inner: Body,
    sleep: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    ended: bool,
    metrics: Arc<Metrics>,
}

impl Deadline {
    fn new(inner: Body, timeout: Duration, metrics: Arc<Metrics>) -> Self {
        Deadline {
            inner,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            ended: false,
            metrics,
        }
    }
}

impl HttpBody for Deadline {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.ended {
            return Pin::new(&mut this.inner).poll_frame(cx);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                this.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(f))) => {
                if f.is_trailers() || this.inner.is_end_stream() {
                    this.ended = true;
                }
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    this.ended = true;
                    this.metrics.over_limit("request_read_timeout_ms");
                    Poll::Ready(Some(Err(Status::deadline_exceeded(format!(
                        "REQUEST_READ_TIMEOUT: the request did not arrive within the broker's request_read_timeout_ms of {}",
                        this.timeout.as_millis()
                    )))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metered(limit: u64) -> (Metered, Arc<RequestBudget>) {
        let budget = RequestBudget::new(limit, Arc::new(Metrics::default()));
        (Metered::new(Body::empty(), budget.clone(), 1 << 20), budget)
    }

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0u8; 5 + len as usize];
        m[1..5].copy_from_slice(&len.to_be_bytes());
        m
    }

    #[test]
    fn telemetry_messages_hold_their_length_while_they_span_frames() {
        let (mut m, budget) = metered(100);
        // Whole messages in one frame are not held.
        let mut frame = message(10);
        frame.extend(message(0));
        frame.extend(message(30));
        m.follow(&frame).unwrap();
        assert_eq!(budget.held(), 0);
        // A message whose prefix is split, then whose body spans three frames.
        let big = message(80);
        m.follow(&big[..3]).unwrap();
        assert_eq!(budget.held(), 0, "length not known yet");
        m.follow(&big[3..40]).unwrap();
        assert_eq!(budget.held(), 80);
        m.follow(&big[40..70]).unwrap();
        assert_eq!(budget.held(), 80);
        // Its end and the start of the next one in the same frame.
        let mut tail = big[70..].to_vec();
        let next = message(60);
        tail.extend_from_slice(&next[..20]);
        m.follow(&tail).unwrap();
        assert_eq!(budget.held(), 60);
        m.follow(&next[20..]).unwrap();
        assert_eq!(budget.held(), 0);
        // One that spans frames and does not fit fails the stream.
        let _other = budget.try_reserve(50).unwrap();
        let e = m.follow(&message(60)[..30]).unwrap_err();
        assert_eq!((e.held, e.request, e.limit), (50, 60, 100));
        // One above the decode limit is left to tonic (which refuses it), not held.
        let (mut m, budget) = metered(100);
        let mut huge = vec![0u8; 5];
        huge[1..5].copy_from_slice(&(2u32 << 20).to_be_bytes());
        m.follow(&huge).unwrap();
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_refusal_is_a_rocketmq_response_or_resource_exhausted() {
        let over = OverRequestBudget {
            held: 7,
            request: 9,
            limit: 10,
        };
        let r = refusal(false, &over);
        assert_eq!(r.headers()["grpc-status"], "8");
        let r = refusal(true, &over);
        assert_eq!(r.headers()["content-type"], "application/grpc");
        assert!(r.headers().get("grpc-status").is_none(), "in the trailers");
    }
}
