//! Replicas pass clients' writes on to the master (the role RocketMQ 5's proxy plays in
//! front of a broker group).
//!
//! Why: a route names the master, and official clients keep a route until their next
//! refresh (the Python client 5.1.2 every 30 s, and never because of an error:
//! `client_route_manager.py` runs its refresh 10 s after start, then every 30 s), so after a
//! failover they send to the old master's address for up to 30 s. A killed master is
//! restarted on its own address (crash-only: a supervisor does it) and comes back as a
//! replica; from then on what the client sends there reaches the new master through it:
//! SendMessage, EndTransaction, the Telemetry stream (so the producer counts online with
//! the new master, and its transaction checks reach it), and a consumer's ReceiveMessage,
//! AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue (a receipt the
//! old master handed out is acked on the new one). Failover for such a client is the
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

use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
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

/// The unary calls a replica passes on: each is answered by the master at `at`, within
/// [`CALL_TIMEOUT`].
macro_rules! unary {
    ($($(#[$doc:meta])* $name:ident($req:ty) -> $resp:ty;)*) => {$(
        $(#[$doc])*
        pub async fn $name(
            view: &ClusterView,
            at: SocketAddr,
            req: Request<$req>,
        ) -> Result<Response<$resp>, Status> {
            let (md, _, body) = req.into_parts();
            let mut c = view.forward.client(at)?;
            timed(at, c.$name(onward(md, body))).await
        }
    )*};
}

unary! {
    /// SendMessage.
    send_message(pb::SendMessageRequest) -> pb::SendMessageResponse;
    /// EndTransaction.
    end_transaction(pb::EndTransactionRequest) -> pb::EndTransactionResponse;
    /// AckMessage (a receipt the old master handed out is valid on the new one: receipts
    /// are in the replicated log).
    ack_message(pb::AckMessageRequest) -> pb::AckMessageResponse;
    /// ChangeInvisibleDuration.
    change_invisible_duration(pb::ChangeInvisibleDurationRequest)
        -> pb::ChangeInvisibleDurationResponse;
    /// ForwardMessageToDeadLetterQueue.
    forward_message_to_dead_letter_queue(pb::ForwardMessageToDeadLetterQueueRequest)
        -> pb::ForwardMessageToDeadLetterQueueResponse;
}

/// The longest long poll a forwarded receive waits out (the master bounds its own).
const MAX_LONG_POLL: Duration = Duration::from_secs(60);

/// A forwarded receive's stream.
pub type ReceiveStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<pb::ReceiveMessageResponse, Status>> + Send>>;

/// ReceiveMessage, served by the master at `at`: its stream is passed on as it comes, one
/// response at a time (HTTP/2 flow control on both legs, so this node holds at most what is
/// in flight, not the batch). The master answers after its long poll, so the call may take
/// that long plus the 5 s a unary call may take.
pub async fn receive_message(
    view: &ClusterView,
    at: SocketAddr,
    req: Request<pb::ReceiveMessageRequest>,
) -> Result<Response<ReceiveStream>, Status> {
    let (md, _, body) = req.into_parts();
    let poll = body
        .long_polling_timeout
        .as_ref()
        .and_then(|d| Duration::try_from(*d).ok())
        // None: the master's default long poll, which is below this bound too.
        .unwrap_or(MAX_LONG_POLL)
        .min(MAX_LONG_POLL);
    let mut c = view.forward.client(at)?;
    let limit = poll + CALL_TIMEOUT;
    let opened = match tokio::time::timeout(limit, c.receive_message(onward(md, body))).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(unavailable(at, &e)),
        Err(_) => {
            let why = format!(
                "the broker group's master {at} did not answer a forwarded receive within {limit:?}; retry"
            );
            return Err(Status::unavailable(why));
        }
    };
    let stream = opened
        .into_inner()
        .map(move |r| r.map_err(|e| unavailable(at, &e)));
    Ok(Response::new(Box::pin(stream)))
}

/// The Telemetry stream, held with the master at `at` for the client: the client's settings
/// go there (so the master counts the producer online and checks its transactions through
/// this stream), and whatever the master sends comes back. When the master goes, the stream
/// to the client stays open: it is attached to the next master with the client's last
/// settings sent again (the Python client opens a new stream only when a settings write
/// fails, every 300 s). It ends when the client ends it, or when this node becomes the master
/// (the client then opens a new one, which this node serves itself).
pub async fn telemetry(
    view: &super::View,
    me: u32,
    at: SocketAddr,
    req: Request<Streaming<pb::TelemetryCommand>>,
) -> Result<
    Response<std::pin::Pin<Box<dyn Stream<Item = Result<pb::TelemetryCommand, Status>> + Send>>>,
    Status,
> {
    let (md, _, mut inbound) = req.into_parts();
    let (tx, rx) = mpsc::unbounded_channel::<Result<pb::TelemetryCommand, Status>>();
    let view = view.clone();
    tokio::spawn(async move {
        let mut settings: Option<pb::TelemetryCommand> = None;
        let mut at = at;
        loop {
            let (up_tx, up_rx) = mpsc::unbounded_channel::<pb::TelemetryCommand>();
            if let Some(s) = &settings {
                let _ = up_tx.send(s.clone());
            }
            let opened = match view.forward.client(at) {
                Ok(mut c) => {
                    let up = onward(md.clone(), UnboundedReceiverStream::new(up_rx));
                    tokio::time::timeout(CALL_TIMEOUT, c.telemetry(up)).await
                }
                Err(e) => Ok(Err(e)),
            };
            if let Ok(Ok(r)) = opened {
                let mut down = r.into_inner();
                loop {
                    tokio::select! {
                        m = inbound.next() => match m {
                            Some(Ok(cmd)) => {
                                if matches!(cmd.command, Some(pb::telemetry_command::Command::Settings(_))) {
                                    settings = Some(cmd.clone());
                                }
                                if up_tx.send(cmd).is_err() {
                                    break;
                                }
                            }
                            // The client is gone.
                            _ => return,
                        },
                        d = down.next() => match d {
                            Some(Ok(cmd)) => {
                                if tx.send(Ok(cmd)).is_err() {
                                    return;
                                }
                            }
                            // The master is gone (or ended the stream): attach to the next.
                            _ => break,
                        },
                    }
                }
            }
            // The next master (polled as the node learns it from etcd).
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if tx.is_closed() {
                    return;
                }
                if let Some(next) = target(&view, me, &MetadataMap::new()) {
                    at = next;
                    break;
                }
                if view.is_master() {
                    let _ = tx.send(Err(Status::unavailable(
                        "this node is the broker group's master now; open the telemetry stream again",
                    )));
                    return;
                }
            }
        }
    });
    Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::cluster::MasterInfo;

    fn view(master: u32) -> ClusterView {
        let v = ClusterView::default();
        *v.master.write().unwrap() = Some(MasterInfo {
            node: master,
            epoch: 4,
            advertise: "127.0.0.1:9001".parse().unwrap(),
            replication: "127.0.0.1:9002".parse().unwrap(),
            remoting: None,
        });
        v
    }

    #[test]
    fn a_replica_forwards_to_the_master_once() {
        let v = view(2);
        let md = MetadataMap::new();
        assert_eq!(target(&v, 1, &md), Some("127.0.0.1:9001".parse().unwrap()));
        // Already forwarded: answered here, never passed on again.
        let r = onward(md, ());
        assert_eq!(target(&v, 1, r.metadata()), None);
    }

    #[test]
    fn the_master_and_a_node_named_by_a_stale_key_answer_themselves() {
        let md = MetadataMap::new();
        // The master key names this node (a key of its previous run): no loop to itself.
        assert_eq!(target(&view(1), 1, &md), None);
        let v = view(2);
        v.master_epoch.store(5, Ordering::SeqCst);
        assert_eq!(target(&v, 1, &md), None);
        // No master known: nothing to forward to.
        assert_eq!(target(&ClusterView::default(), 1, &md), None);
    }
}
