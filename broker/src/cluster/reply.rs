//! The master names itself in every gRPC reply: response headers [`EPOCH`] (its epoch as
//! master) and [`NODE`] (its node id), set only while this node is master. A replica's own
//! replies carry neither; a write a replica forwards comes back with the master's headers
//! unchanged ([`super::forward`]). Clients may ignore them; tests read them to check that no
//! two nodes ever acknowledged in the same epoch.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use http::HeaderValue;
use tonic::body::Body;

use super::View;

/// Response header: the epoch in which the answering master serves.
pub const EPOCH: &str = "x-rocklet-epoch";
/// Response header: the answering master's node id.
pub const NODE: &str = "x-rocklet-node";

/// Adds [`EPOCH`] and [`NODE`] to every response while this node is master; does nothing
/// outside cluster mode (`view` is `None`).
#[derive(Debug, Clone)]
pub struct EpochLayer {
    view: Option<View>,
    node: u32,
}

impl EpochLayer {
    #[must_use]
    pub fn new(view: Option<View>, node: u32) -> Self {
        EpochLayer { view, node }
    }
}

impl<S> tower_layer::Layer<S> for EpochLayer {
    type Service = EpochHeaders<S>;

    fn layer(&self, inner: S) -> EpochHeaders<S> {
        EpochHeaders {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`EpochLayer`] wraps.
#[derive(Debug, Clone)]
pub struct EpochHeaders<S> {
    inner: S,
    layer: EpochLayer,
}

type Answer<E> = Pin<Box<dyn std::future::Future<Output = Result<http::Response<Body>, E>> + Send>>;

impl<S> tower_service::Service<http::Request<Body>> for EpochHeaders<S>
where
    S: tower_service::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Answer<S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let Some(view) = self.layer.view.clone() else {
            return Box::pin(self.inner.call(req));
        };
        // A master keeps one epoch for its whole run (it exits when fenced), so a reply it
        // released was released in that epoch. Read when the request comes and when the
        // reply leaves: master at the start means that epoch (fencing zeroes it just before
        // the exit, after the last reply was released); else whatever it is at the end (a
        // replica elected meanwhile).
        let start = view.master_epoch.load(Ordering::SeqCst);
        let fut = self.inner.call(req);
        let node = self.layer.node;
        Box::pin(async move {
            let mut resp = fut.await?;
            let epoch = if start > 0 {
                start
            } else {
                view.master_epoch.load(Ordering::SeqCst)
            };
            if epoch > 0 {
                let h = resp.headers_mut();
                h.insert(EPOCH, HeaderValue::from(epoch));
                h.insert(NODE, HeaderValue::from(node));
            }
            Ok(resp)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::future::Ready;
    use tower_layer::Layer;
    use tower_service::Service;

    /// Answers every request with an empty 200, or with the headers a forwarded reply
    /// brought back; with a view, it fences that node (epoch 0) while answering.
    #[derive(Clone)]
    struct Answer(Option<(u64, u32)>, Option<View>);

    impl Service<http::Request<Body>> for Answer {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = Ready<Result<http::Response<Body>, Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: http::Request<Body>) -> Self::Future {
            if let Some(v) = &self.1 {
                v.master_epoch.store(0, Ordering::SeqCst);
            }
            let mut r = http::Response::new(Body::empty());
            if let Some((e, n)) = self.0 {
                r.headers_mut().insert(EPOCH, HeaderValue::from(e));
                r.headers_mut().insert(NODE, HeaderValue::from(n));
            }
            std::future::ready(Ok(r))
        }
    }

    async fn headers(layer: EpochLayer, inner: Answer) -> (Option<String>, Option<String>) {
        let mut s = layer.layer(inner);
        let r = s
            .call(http::Request::new(Body::empty()))
            .await
            .expect("infallible");
        let get = |k: &str| {
            r.headers()
                .get(k)
                .map(|v| v.to_str().expect("ascii").to_string())
        };
        (get(EPOCH), get(NODE))
    }

    #[tokio::test]
    async fn a_master_names_its_epoch_and_node() {
        let view = View::default();
        view.master_epoch.store(7, Ordering::SeqCst);
        let got = headers(EpochLayer::new(Some(view), 2), Answer(None, None)).await;
        assert_eq!(got, (Some("7".into()), Some("2".into())));
    }

    #[tokio::test]
    async fn a_reply_released_before_fencing_keeps_its_epoch() {
        let view = View::default();
        view.master_epoch.store(4, Ordering::SeqCst);
        let got = headers(
            EpochLayer::new(Some(view.clone()), 1),
            Answer(None, Some(view)),
        )
        .await;
        assert_eq!(got, (Some("4".into()), Some("1".into())));
    }

    #[tokio::test]
    async fn a_replica_adds_nothing_and_keeps_a_forwarded_masters_headers() {
        let view = View::default();
        let own = headers(EpochLayer::new(Some(view.clone()), 1), Answer(None, None)).await;
        assert_eq!(own, (None, None));
        let forwarded = headers(EpochLayer::new(Some(view), 1), Answer(Some((9, 3)), None)).await;
        assert_eq!(forwarded, (Some("9".into()), Some("3".into())));
    }

    #[tokio::test]
    async fn outside_cluster_mode_nothing_is_added() {
        let got = headers(EpochLayer::new(None, 0), Answer(None, None)).await;
        assert_eq!(got, (None, None));
    }
}
