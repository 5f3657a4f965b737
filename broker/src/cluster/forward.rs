//! Replicas pass clients' writes on to the master (the role RocketMQ 5's proxy plays in
//! front of a broker group).
//!
//! Why: a route names the master, and official clients keep a route until their next
//! refresh (the Python client 5.1.2 every 30 s, and never because of an error:
//! `client_route_manager.py` runs its refresh 10 s after start, then every 30 s), so after a
//! failover they send to the old master's address for up to 30 s. A killed master is
//! restarted on its own address (crash-only: a supervisor does it) and comes back as a
//! replica; from then on what the client sends there reaches the new master through it:
//! SendMessage, EndTransaction, and the Telemetry stream (so the producer counts online with
//! the new master, and its transaction checks reach it). Failover for such a client is the
//! restart plus the election, not the route refresh.
//!
//! (A route naming every node in one `Endpoints` would let gRPC's pick-first channel move by
//! itself, but the Python client then sends `:authority` as the comma-joined list, which
//! HTTP/2 servers built on `h2` reset as a protocol error.)
//!
//! A forwarded request carries [`FORWARDED`] and is never forwarded again (two nodes each
//! believing the other master, briefly, answer rather than loop). The client's metadata goes
//! along unchanged, so the master authenticates the request itself.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio_stream::{Stream, StreamExt};
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status, Streaming};

use super::ClusterView;
use crate::pb::v2 as pb;
use crate::pb::v2::messaging_service_client::MessagingServiceClient;

/// The header a forwarded request carries.
pub const FORWARDED: &str = "x-rocklet-forwarded";

/// How long a forwarded unary call may take (a sync write waits for the replicas).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Channels to masters, by address (lazy: connected on first use, reconnected by tonic).
#[derive(Debug, Default)]
pub struct Forwarder {
    channels: Mutex<HashMap<SocketAddr, Channel>>,
}

impl Forwarder {
    fn client(&self, at: SocketAddr) -> Result<MessagingServiceClient<Channel>, Status> {
        let mut map = self
            .channels
            .lock()
            .map_err(|_| Status::internal("forwarder lock poisoned"))?;
        if let Some(c) = map.get(&at) {
            return Ok(MessagingServiceClient::new(c.clone()));
        }
        let ch = Endpoint::from_shared(format!("http://{at}"))
            .map_err(|e| Status::internal(format!("master address {at}: {e}")))?
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true)
            .connect_lazy();
        map.insert(at, ch.clone());
        Ok(MessagingServiceClient::new(ch))
    }
}

/// Where a request that reached node `me` goes: `Some(master)` when this node is not the
/// master, a master other than this node is known, and the request was not forwarded already.
#[must_use]
pub fn target(view: &ClusterView, me: u32, md: &MetadataMap) -> Option<SocketAddr> {
    if view.is_master() || md.contains_key(FORWARDED) {
        return None;
    }
    view.master().filter(|m| m.node != me).map(|m| m.advertise)
}

fn onward<T>(md: MetadataMap, body: T) -> Request<T> {
    let mut r = Request::new(body);
    *r.metadata_mut() = md;
    r.metadata_mut()
        .insert(FORWARDED, MetadataValue::from_static("1"));
    r
}

fn unavailable(at: SocketAddr, e: &Status) -> Status {
    Status::unavailable(format!(
        "the broker group's master {at} did not answer a forwarded request ({}: {}); retry",
        e.code(),
        e.message()
    ))
}

async fn timed<T>(
    at: SocketAddr,
    f: impl std::future::Future<Output = Result<Response<T>, Status>>,
) -> Result<Response<T>, Status> {
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(unavailable(at, &e)),
        Err(_) => Err(Status::unavailable(format!(
            "the broker group's master {at} did not answer a forwarded request within {CALL_TIMEOUT:?}; retry"
        ))),
    }
}

/// SendMessage, answered by the master at `at`.
pub async fn send_message(
    view: &ClusterView,
    at: SocketAddr,
    req: Request<pb::SendMessageRequest>,
) -> Result<Response<pb::SendMessageResponse>, Status> {
    let (md, _, body) = req.into_parts();
    let mut c = view.forward.client(at)?;
    timed(at, c.send_message(onward(md, body))).await
}

/// EndTransaction, answered by the master at `at`.
pub async fn end_transaction(
    view: &ClusterView,
    at: SocketAddr,
    req: Request<pb::EndTransactionRequest>,
) -> Result<Response<pb::EndTransactionResponse>, Status> {
    let (md, _, body) = req.into_parts();
    let mut c = view.forward.client(at)?;
    timed(at, c.end_transaction(onward(md, body))).await
}

/// The Telemetry stream, held with the master at `at`: the client's settings go there (so the
/// master counts the producer online and checks its transactions through this stream), and
/// whatever the master sends comes back. When either side ends, both end; the client opens
/// a new stream, which goes to the master of that moment.
pub async fn telemetry(
    view: &ClusterView,
    at: SocketAddr,
    req: Request<Streaming<pb::TelemetryCommand>>,
) -> Result<
    Response<std::pin::Pin<Box<dyn Stream<Item = Result<pb::TelemetryCommand, Status>> + Send>>>,
    Status,
> {
    let (md, _, inbound) = req.into_parts();
    let mut c = view.forward.client(at)?;
    let up = inbound.map_while(Result::ok);
    let down = match tokio::time::timeout(CALL_TIMEOUT, c.telemetry(onward(md, up))).await {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(e)) => return Err(unavailable(at, &e)),
        Err(_) => {
            return Err(Status::unavailable(format!(
                "the broker group's master {at} did not open a forwarded telemetry stream within {CALL_TIMEOUT:?}; retry"
            )))
        }
    };
    Ok(Response::new(Box::pin(down)))
}
