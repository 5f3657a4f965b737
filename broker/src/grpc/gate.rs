//! What every gRPC call passes before tonic decodes it, in this order:
//!
//! - authentication, from the call's headers alone (with users configured). A call without
//!   valid credentials is answered at once — a MessagingService RPC with its response
//!   carrying `UNAUTHORIZED` (as the service answers), the admin services with gRPC
//!   `UNAUTHENTICATED` — before any of its body is read, holding nothing.
//! - a deadline for its request to arrive. A call whose request (every RPC but Telemetry has
//!   one request message, read to its end before the handler runs) has not fully arrived
//!   within [`BrokerConfig::request_read_timeout_ms`](crate::config::BrokerConfig) fails
//!   with `DEADLINE_EXCEEDED` naming the limit, and its stream and buffers are freed: a
//!   client that opens streams and trickles (or never sends) their bodies holds nothing for
//!   longer. Telemetry is a bidirectional stream that stays open by design and is not
//!   bounded here.
//! - the broker-wide [`RequestBudget`], with the shares of one connection and one client
//!   address. The gate reads the request itself and hands it to tonic only once it has
//!   arrived whole (tonic allocates a message's declared length as soon as it reads its
//!   5-byte prefix): the call holds what has arrived, as it arrives, until its handling ends
//!   (a unary call's response is made; a ReceiveMessage's response stream is over, so a long
//!   poll holds its request's bytes while it waits). What a prefix declares holds nothing;
//!   it is only checked against the room left, so a call that cannot fit is answered at once
//!   without reading its body. Over the budget or a share — at its prefix or as its bytes
//!   arrive — the call is answered at once: a MessagingService RPC with its response carrying
//!   the RocketMQ status `TOO_MANY_REQUESTS` (clients back off and retry), the admin services
//!   with gRPC `RESOURCE_EXHAUSTED`. A Telemetry message holds what has arrived of it until
//!   it is whole (one that does not fit fails the stream; clients open it again).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use prost::Message as _;
use tonic::body::Body;
use tonic::transport::server::TcpConnectInfo;
use tonic::Status;

use crate::auth::{grpc as auth_grpc, Auth};
use crate::budget::{HeldBytes, Holder, OverRequestBudget, RequestBudget};
use crate::metrics::Metrics;
use crate::pb::v2 as pb;

/// The RPC exempt from the read deadline (a long-lived bidirectional stream).
pub const TELEMETRY_PATH: &str = "/apache.rocketmq.v2.MessagingService/Telemetry";
/// The RPC whose response is a stream that lives as long as its long poll.
const RECEIVE_PATH: &str = "/apache.rocketmq.v2.MessagingService/ReceiveMessage";
const MESSAGING_PREFIX: &str = "/apache.rocketmq.v2.MessagingService/";
/// The admin services (`Admin`, `Security`), when this listener serves them.
const ADMIN_PREFIX: &str = "/rocklet.admin.v1.";
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
/// The gRPC message prefix: a compression flag and a big-endian length.
const PREFIX: usize = 5;

/// The layer for `tonic::transport::Server::layer`.
#[derive(Debug, Clone)]
pub struct GateLayer {
    read_timeout: Duration,
    budget: Arc<RequestBudget>,
    /// Larger declared messages are left to tonic, which refuses them unread.
    max_message: u64,
    metrics: Arc<Metrics>,
    auth: Arc<Auth>,
    /// The admin services are served here (not on a listener of their own).
    admin: bool,
}

impl GateLayer {
    /// Calls must authenticate with `auth` (when it has users), and their requests arrive
    /// within `read_timeout` and fit in `budget`; a message above `max_message` (tonic's
    /// decode limit) is not held, tonic refuses it.
    #[must_use]
    pub fn new(
        read_timeout: Duration,
        budget: Arc<RequestBudget>,
        max_message: usize,
        metrics: Arc<Metrics>,
        auth: Arc<Auth>,
    ) -> Self {
        GateLayer {
            read_timeout,
            budget,
            max_message: max_message as u64,
            metrics,
            auth,
            admin: true,
        }
    }

    /// The admin services are not served on this listener: their calls go to tonic as
    /// they are (answered `UNIMPLEMENTED`, unread).
    #[must_use]
    pub fn without_admin(mut self) -> Self {
        self.admin = false;
        self
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
        let telemetry = path == TELEMETRY_PATH;
        let method = path.strip_prefix(MESSAGING_PREFIX);
        let served = match method {
            Some(m) => telemetry || ANSWERED.contains(&m),
            None => self.layer.admin && path.starts_with(ADMIN_PREFIX),
        };
        // Anything else is answered `UNIMPLEMENTED` by tonic without reading its body.
        if !served {
            return Box::pin(self.inner.call(req));
        }
        let rocketmq = method.is_some();
        let streaming = path == RECEIVE_PATH;
        let layer = self.layer.clone();
        let who: Holder = req
            .extensions()
            .get::<TcpConnectInfo>()
            .and_then(TcpConnectInfo::remote_addr);
        // Credentials first, from the headers: a call without them holds nothing and is
        // answered before its body is read.
        if let Err(r) =
            auth_grpc::authenticate_headers(&layer.auth, req.headers(), who.map(|a| a.ip()))
        {
            let resp = if rocketmq {
                answer(auth_grpc::status(&r))
            } else {
                Status::unauthenticated(r.message).into_http()
            };
            return Box::pin(std::future::ready(Ok(resp)));
        }
        if telemetry {
            let (budget, max) = (layer.budget.clone(), layer.max_message);
            return Box::pin(
                self.inner
                    .call(req.map(|b| Body::new(Metered::new(b, budget, who, max)))),
            );
        }
        // The clone takes the place of the service that was polled ready, which goes into
        // the future (tower's usual way to call a service after an await).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let read = read_request(body, &layer.budget, who, layer.max_message);
            let (body, held) = match tokio::time::timeout(layer.read_timeout, read).await {
                Ok(Ok(read)) => read,
                // Refused as it arrived: dropping the body resets the stream once answered.
                Ok(Err(Stop::Over(over))) => return Ok(refusal(rocketmq, &over)),
                Ok(Err(Stop::Failed(status))) => return Ok(status.into_http()),
                Err(_) => {
                    layer.metrics.over_limit("request_read_timeout_ms");
                    return Ok(Status::deadline_exceeded(format!(
                        "REQUEST_READ_TIMEOUT: the request did not arrive within the broker's request_read_timeout_ms of {}",
                        layer.read_timeout.as_millis()
                    ))
                    .into_http());
                }
            };
            let resp = inner
                .call(http::Request::from_parts(parts, Body::new(body)))
                .await?;
            // A unary call's handler is done once its response is made; a receive's response
            // stream still holds its request while its long poll waits.
            Ok(if streaming {
                resp.map(|b| {
                    Body::new(Holding {
                        inner: b,
                        _held: held,
                    })
                })
            } else {
                resp
            })
        })
    }
}

/// Why a request was not read to its end.
enum Stop {
    /// It did not fit in the budget or its holder's share.
    Over(OverRequestBudget),
    /// Its body failed (the client reset the stream).
    Failed(Status),
}

/// Reads a request body to its end, holding what arrives; `Replay` hands it to tonic. A
/// message above the decode limit stops the reading: its prefix and the rest of the body go
/// to tonic, which refuses it unread.
async fn read_request(
    mut body: Body,
    budget: &Arc<RequestBudget>,
    who: Holder,
    max_message: u64,
) -> Result<(Replay, HeldBytes), Stop> {
    let mut a = Assembler::new(budget, who, max_message, true);
    let mut trailers = None;
    loop {
        let next = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match next {
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => {
                    a.push(&d).map_err(Stop::Over)?;
                    if a.oversized {
                        let ahead = a.finish().into_iter().map(|b| Ok(Frame::data(b))).collect();
                        return Ok((
                            Replay {
                                ahead,
                                inner: Some(body),
                            },
                            a.held,
                        ));
                    }
                }
                Err(f) => {
                    if f.is_trailers() {
                        trailers = Some(f);
                    }
                }
            },
            Some(Err(e)) => return Err(Stop::Failed(e)),
            None => break,
        }
    }
    let mut ahead: VecDeque<_> = a.finish().into_iter().map(|b| Ok(Frame::data(b))).collect();
    ahead.extend(trailers.map(Ok));
    Ok((Replay { ahead, inner: None }, a.held))
}

/// Cuts a body's data into whole gRPC messages, holding the bytes of each under the budget
/// as they arrive (what is allocated for them: at most twice what arrived, never more than
/// the message's declared length). A message's prefix alone holds nothing but is checked:
/// the rest it declares must fit in the room left, or the call is refused at once.
struct Assembler {
    budget: Arc<RequestBudget>,
    who: Holder,
    max_message: u64,
    /// Whole messages keep their bytes held (a unary request, until its handling ends);
    /// otherwise a message's bytes are given back once it is handed on (Telemetry).
    keep: bool,
    held: HeldBytes,
    prefix: [u8; PREFIX],
    have: usize,
    /// The current message (prefix included) once its prefix is whole, its full length,
    /// and how much of its body is still to come.
    current: Vec<u8>,
    total: usize,
    remaining: usize,
    /// Whole messages (and, once the body ends, what it left unfinished), in order.
    ready: VecDeque<Bytes>,
    /// A message above `max_message` began: everything from its prefix on is passed on as
    /// it is, for tonic to refuse.
    oversized: bool,
}

impl Assembler {
    fn new(budget: &Arc<RequestBudget>, who: Holder, max_message: u64, keep: bool) -> Self {
        Assembler {
            budget: budget.clone(),
            who,
            max_message,
            keep,
            held: budget.nothing(who),
            prefix: [0; PREFIX],
            have: 0,
            current: Vec::new(),
            total: 0,
            remaining: 0,
            ready: VecDeque::new(),
            oversized: false,
        }
    }

    /// Follows one frame's data; `Err` when what arrived, or what a prefix in it declares,
    /// does not fit.
    fn push(&mut self, mut d: &[u8]) -> Result<(), OverRequestBudget> {
        if self.oversized {
            self.ready.push_back(Bytes::copy_from_slice(d));
            return Ok(());
        }
        // A message begun in this frame and not finished in it.
        let mut begun = false;
        while !d.is_empty() {
            if self.have < PREFIX {
                let take = (PREFIX - self.have).min(d.len());
                self.prefix[self.have..self.have + take].copy_from_slice(&d[..take]);
                self.have += take;
                d = &d[take..];
                if self.have < PREFIX {
                    break;
                }
                let p = self.prefix;
                let declared = u32::from_be_bytes([p[1], p[2], p[3], p[4]]);
                if u64::from(declared) > self.max_message {
                    self.oversized = true;
                    self.have = 0;
                    self.ready.push_back(Bytes::copy_from_slice(&p));
                    if !d.is_empty() {
                        self.ready.push_back(Bytes::copy_from_slice(d));
                    }
                    return Ok(());
                }
                self.total = PREFIX + declared as usize;
                self.remaining = declared as usize;
                self.append(&p)?;
                begun = true;
            } else {
                let take = self.remaining.min(d.len());
                self.append(&d[..take])?;
                self.remaining -= take;
                d = &d[take..];
            }
            if self.have == PREFIX && self.remaining == 0 {
                let m = std::mem::take(&mut self.current);
                let cap = m.capacity() as u64;
                self.ready.push_back(Bytes::from(m));
                self.have = 0;
                begun = false;
                if !self.keep {
                    self.held.shrink(cap);
                }
            }
        }
        if begun {
            self.budget.fits(self.who, self.remaining as u64)?;
        }
        Ok(())
    }

    /// Appends to the current message, holding what its buffer grows by first.
    fn append(&mut self, d: &[u8]) -> Result<(), OverRequestBudget> {
        let (len, cap) = (self.current.len(), self.current.capacity());
        if len + d.len() > cap {
            let want = (len + d.len()).max((cap * 2).min(self.total));
            self.held.grow((want - cap) as u64)?;
            self.current.reserve_exact(want - len);
        }
        self.current.extend_from_slice(d);
        Ok(())
    }

    /// Everything collected, in order: whole messages, then what an unfinished one left.
    fn finish(&mut self) -> VecDeque<Bytes> {
        if self.have == PREFIX {
            self.ready
                .push_back(Bytes::from(std::mem::take(&mut self.current)));
        } else if self.have > 0 {
            self.ready
                .push_back(Bytes::copy_from_slice(&self.prefix[..self.have]));
        }
        self.have = 0;
        std::mem::take(&mut self.ready)
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
    answer(pb::Status {
        code: pb::Code::TooManyRequests as i32,
        message: over.to_string(),
    })
}

/// A MessagingService response carrying only `status`.
fn answer(status: pb::Status) -> http::Response<Body> {
    let msg = StatusOnly {
        status: Some(status),
    }
    .encode_to_vec();
    let mut frame = Vec::with_capacity(PREFIX + msg.len());
    frame.push(0);
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);
    let mut trailers = http::HeaderMap::new();
    trailers.insert(Status::GRPC_STATUS, http::HeaderValue::from_static("0"));
    let frames = VecDeque::from([
        Ok(Frame::data(Bytes::from(frame))),
        Ok(Frame::trailers(trailers)),
    ]);
    let mut resp = http::Response::new(Body::new(Replay {
        ahead: frames,
        inner: None,
    }));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    resp
}

/// Frames given up front (a request read ahead, an answer), then, when there is one, the
/// rest of a body.
struct Replay {
    ahead: VecDeque<Result<Frame<Bytes>, Status>>,
    inner: Option<Body>,
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
        match &mut this.inner {
            Some(inner) => Pin::new(inner).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ahead.is_empty() && self.inner.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let ahead: u64 = self
            .ahead
            .iter()
            .filter_map(|f| f.as_ref().ok()?.data_ref().map(|d| d.len() as u64))
            .sum();
        match &self.inner {
            None => SizeHint::with_exact(ahead),
            Some(_) => {
                let mut h = SizeHint::new();
                h.set_lower(ahead);
                h
            }
        }
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

/// A Telemetry request body: handed to tonic message by message, each once it is whole,
/// holding what has arrived of it until then. One that does not fit fails the stream.
struct Metered {
    inner: Body,
    assembler: Assembler,
    /// Trailers, given after the messages before them.
    trailers: Option<Frame<Bytes>>,
    ended: bool,
}

impl Metered {
    fn new(inner: Body, budget: Arc<RequestBudget>, who: Option<SocketAddr>, max: u64) -> Self {
        Metered {
            inner,
            assembler: Assembler::new(&budget, who, max, false),
            trailers: None,
            ended: false,
        }
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
        loop {
            if let Some(m) = this.assembler.ready.pop_front() {
                return Poll::Ready(Some(Ok(Frame::data(m))));
            }
            if this.ended {
                return Poll::Ready(this.trailers.take().map(Ok));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(f))) => match f.into_data() {
                    Ok(d) => {
                        if let Err(over) = this.assembler.push(&d) {
                            this.ended = true;
                            return Poll::Ready(Some(Err(Status::resource_exhausted(
                                over.to_string(),
                            ))));
                        }
                    }
                    Err(f) => {
                        if f.is_trailers() {
                            this.trailers = Some(f);
                            let rest = this.assembler.finish();
                            this.assembler.ready = rest;
                            this.ended = true;
                        }
                    }
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    let rest = this.assembler.finish();
                    this.assembler.ready = rest;
                    this.ended = true;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.assembler.ready.is_empty() && self.trailers.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit: u64) -> Arc<RequestBudget> {
        RequestBudget::new(limit, Arc::new(Metrics::default()))
    }

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0u8; 5 + len as usize];
        m[1..5].copy_from_slice(&len.to_be_bytes());
        m
    }

    #[test]
    fn a_prefix_holds_nothing_and_a_message_holds_what_has_arrived() {
        let budget = budget(1 << 20);
        let mut a = Assembler::new(&budget, None, 1 << 20, true);
        // A prefix declaring 900 KiB, and nothing after it: 5 bytes held (its copy).
        let big = message(900 << 10);
        a.push(&big[..5]).unwrap();
        assert_eq!(budget.held(), 5);
        // What arrives is held as it arrives (the buffer at most doubles, never past the
        // declared length).
        a.push(&big[5..1005]).unwrap();
        assert_eq!(budget.held(), 1005);
        a.push(&big[1005..3000]).unwrap();
        assert!((3000..=6000).contains(&budget.held()), "{}", budget.held());
        a.push(&big[3000..]).unwrap();
        assert_eq!(budget.held(), big.len() as u64, "whole: its exact length");
        // A unary request keeps holding its message until its handling ends.
        let got = a.finish();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref(), &big[..]);
        drop(a);
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_message_that_cannot_fit_is_refused_from_its_prefix() {
        let budget = budget(100);
        let _other = budget.try_reserve(None, 50).unwrap();
        let mut a = Assembler::new(&budget, None, 1 << 20, true);
        let e = a.push(&message(60)[..5]).unwrap_err();
        assert_eq!((e.held, e.request, e.limit), (55, 60, 100));
        // One that fits by its prefix but not as it arrives is refused then.
        let budget = self::budget(100);
        let mut a = Assembler::new(&budget, None, 1 << 20, true);
        let mut b = Assembler::new(&budget, None, 1 << 20, true);
        a.push(&message(60)[..5]).unwrap();
        b.push(&message(60)[..5]).unwrap();
        a.push(&[0; 60]).unwrap();
        let e = b.push(&[0; 60]).unwrap_err();
        assert_eq!(e.limit, 100);
        assert!(budget.held() <= 100);
    }

    #[test]
    fn telemetry_messages_hold_their_bytes_only_until_they_are_whole() {
        let budget = budget(100);
        let mut m = Assembler::new(&budget, None, 1 << 20, false);
        // Whole messages in one frame are handed on and hold nothing.
        let mut frame = message(10);
        frame.extend(message(0));
        frame.extend(message(30));
        m.push(&frame).unwrap();
        assert_eq!(budget.held(), 0);
        assert_eq!(m.ready.len(), 3);
        m.ready.clear();
        // A message whose prefix is split, then whose body spans three frames.
        let big = message(80);
        m.push(&big[..3]).unwrap();
        assert_eq!(budget.held(), 0, "length not known yet");
        m.push(&big[3..40]).unwrap();
        assert!((40..=85).contains(&budget.held()), "{}", budget.held());
        m.push(&big[40..70]).unwrap();
        // Its end and the start of the next one in the same frame.
        let mut tail = big[70..].to_vec();
        let next = message(60);
        tail.extend_from_slice(&next[..20]);
        m.push(&tail).unwrap();
        assert_eq!(m.ready.pop_front().unwrap().as_ref(), &big[..]);
        assert!((20..=65).contains(&budget.held()), "{}", budget.held());
        m.push(&next[20..]).unwrap();
        assert_eq!(budget.held(), 0);
        // One that spans frames and does not fit fails the stream.
        let _other = budget.try_reserve(None, 50).unwrap();
        let e = m.push(&message(60)[..30]).unwrap_err();
        assert_eq!(e.limit, 100);
        // One above the decode limit is handed on as it is (tonic refuses it), not held.
        let budget = self::budget(100);
        let mut m = Assembler::new(&budget, None, 1 << 20, false);
        let mut huge = vec![0u8; 5];
        huge[1..5].copy_from_slice(&(2u32 << 20).to_be_bytes());
        m.push(&huge).unwrap();
        assert!(m.oversized);
        assert_eq!(budget.held(), 0);
        assert_eq!(m.ready.pop_front().unwrap().as_ref(), &huge[..]);
    }

    #[test]
    fn a_refusal_is_a_rocketmq_response_or_resource_exhausted() {
        let over = OverRequestBudget {
            held: 7,
            request: 9,
            limit: 10,
            scope: crate::budget::Scope::Broker,
            budget: 10,
        };
        let r = refusal(false, &over);
        assert_eq!(r.headers()["grpc-status"], "8");
        let r = refusal(true, &over);
        assert_eq!(r.headers()["content-type"], "application/grpc");
        assert!(r.headers().get("grpc-status").is_none(), "in the trailers");
    }
}
