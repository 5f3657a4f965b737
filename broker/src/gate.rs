//! What every gRPC call passes before tonic decodes it: a deadline for its request to
//! arrive. A call whose request (every RPC but Telemetry has one request message, read to
//! its end before the handler runs) has not fully arrived within
//! [`BrokerConfig::request_read_timeout_ms`](crate::config::BrokerConfig) fails with
//! `DEADLINE_EXCEEDED` naming the limit, and its stream and buffers are freed: a client that
//! opens streams and trickles (or never sends) their bodies holds nothing for longer.
//! Telemetry is a bidirectional stream that stays open by design and is not bounded here.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tonic::body::Body;
use tonic::Status;

use crate::metrics::Metrics;

/// The RPC exempt from the read deadline (a long-lived bidirectional stream).
pub const TELEMETRY_PATH: &str = "/apache.rocketmq.v2.MessagingService/Telemetry";

/// The layer for `tonic::transport::Server::layer`.
#[derive(Debug, Clone)]
pub struct GateLayer {
    read_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl GateLayer {
    /// Requests must arrive within `read_timeout`.
    #[must_use]
    pub fn new(read_timeout: Duration, metrics: Arc<Metrics>) -> Self {
        GateLayer {
            read_timeout,
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

impl<S> tower_service::Service<http::Request<Body>> for Gate<S>
where
    S: tower_service::Service<http::Request<Body>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if req.uri().path() == TELEMETRY_PATH {
            return self.inner.call(req);
        }
        let (timeout, metrics) = (self.layer.read_timeout, self.layer.metrics.clone());
        self.inner
            .call(req.map(|b| Body::new(Deadline::new(b, timeout, metrics))))
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
