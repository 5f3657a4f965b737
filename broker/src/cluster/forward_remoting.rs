//! Replicas pass RocketMQ 4 remoting writes on to the master, as [`super::forward`] does for
//! gRPC (issue #32).
//!
//! Why: a v4 client keeps the route it read from a name server until its next poll (every
//! 30 s by default), and a refusal does not make it look again: a SERVICE_NOT_AVAILABLE send
//! is retried on "another broker", which in a single group is the same address. After a
//! failover it sends to the old master's address, where the old master comes back as a
//! replica (crash-only, restarted at once on its own addresses). Answering there would make
//! it wait out its poll (issue #32 measured a failover gap of 13–27 s); forwarded, its writes
//! reach the new master once the election is done.
//!
//! Forwarded: SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE, END_TRANSACTION (oneway from
//! the Java client) and CONSUMER_SEND_MSG_BACK, to the master's remoting address from etcd.
//! Each client connection gets a connection of its own to the master, so the master sees
//! the client as if it were connected: a half message sent through it registers its
//! producer group there, and the master's requests on that connection —
//! CHECK_TRANSACTION_STATE for a half the producer left open — come back to the client's
//! connection (with one shared connection a v4 producer talking to a replica for its 30 s
//! route poll got no check, and the master gave its open transactions up). It closes with
//! the client's connection. The command goes on unchanged — ext fields and body, so
//! an ACL signature still verifies and the master authenticates it — under an opaque of the
//! node's connection, with the request's remark set to [`FORWARDED`] (clients send none; a
//! forwarded command is never forwarded again). The answer comes back under the client's
//! opaque. A master that does not answer within [`CALL_TIMEOUT`] is answered
//! SERVICE_NOT_AVAILABLE (the client retries).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::ClusterView;
use crate::remoting::codec::{decode_frame, frame_length, RemotingCommand};
use crate::remoting::codes::code;
use crate::remoting::conn::Conn;

/// The remark a forwarded request carries.
pub const FORWARDED: &str = "x-rocklet-forwarded";

/// How long a forwarded request may take (a sync write waits for the replicas).
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting to the master may take.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Whether a request with this code is a write a replica passes on.
#[must_use]
pub fn forwards(code: i32) -> bool {
    matches!(
        code,
        code::SEND_MESSAGE
            | code::SEND_MESSAGE_V2
            | code::SEND_BATCH_MESSAGE
            | code::END_TRANSACTION
            | code::CONSUMER_SEND_MSG_BACK
    )
}

/// Where `req`, reaching node `me`, goes: `Some(master's remoting address)` when this node is
/// not the master, a master other than this node is known and serves remoting, the request
/// is a write ([`forwards`]) and was not forwarded already.
#[must_use]
pub fn target(view: &ClusterView, me: u32, req: &RemotingCommand) -> Option<SocketAddr> {
    if view.is_master() || !forwards(req.code) || req.remark.as_deref() == Some(FORWARDED) {
        return None;
    }
    view.master()
        .filter(|m| m.node != me)
        .and_then(|m| m.remoting)
}

/// What the reader of an upstream connection shares with its callers.
#[derive(Debug, Default)]
struct Shared {
    pending: Mutex<HashMap<i32, oneshot::Sender<RemotingCommand>>>,
    dead: AtomicBool,
}

/// One client connection's connection to a master's remoting listener: requests go out
/// through a writer task, answers are matched to their callers by opaque, and the master's
/// own requests go to the client. Its tasks end when it is dropped.
#[derive(Debug)]
struct Upstream {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    shared: Arc<Shared>,
    next: AtomicI32,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Upstream {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Upstream {
    async fn open(at: SocketAddr, client: Weak<Conn>) -> Result<Self, String> {
        let s = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(at))
            .await
            .map_err(|_| format!("connecting took over {CONNECT_TIMEOUT:?}"))?
            .map_err(|e| e.to_string())?;
        let _ = s.set_nodelay(true);
        let (mut r, mut w) = s.into_split();
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let shared = Arc::new(Shared::default());
        let writer = tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if w.write_all(&frame).await.is_err() {
                    break;
                }
            }
        });
        let sh = shared.clone();
        let reader = tokio::spawn(async move {
            loop {
                let mut prefix = [0u8; 4];
                if r.read_exact(&mut prefix).await.is_err() {
                    break;
                }
                let Ok(n) = frame_length(prefix) else { break };
                let mut frame = vec![0u8; n];
                if r.read_exact(&mut frame).await.is_err() {
                    break;
                }
                let Ok(mut cmd) = decode_frame(&frame) else {
                    break;
                };
                if !cmd.is_response() {
                    // The master's request (a transaction check): to the client, under an
                    // opaque of its connection.
                    if let Some(c) = client.upgrade() {
                        cmd.opaque = c.next_opaque.fetch_add(1, Ordering::Relaxed);
                        cmd.serialize = *c
                            .serialize
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        c.send(&cmd);
                    }
                    continue;
                }
                let waiter = sh
                    .pending
                    .lock()
                    .ok()
                    .and_then(|mut p| p.remove(&cmd.opaque));
                if let Some(w) = waiter {
                    let _ = w.send(cmd);
                }
            }
            // Callers waiting on this connection get an error (their senders drop).
            sh.dead.store(true, Ordering::SeqCst);
            if let Ok(mut p) = sh.pending.lock() {
                p.clear();
            }
        });
        Ok(Upstream {
            tx,
            shared,
            next: AtomicI32::new(1),
            tasks: [writer, reader],
        })
    }
}

/// Upstream connections to masters, by client connection and master address (opened on
/// first use, again after one ends; dropped when the client's connection closes).
#[derive(Debug, Default)]
pub struct RemotingForwarder {
    conns: Mutex<HashMap<(u64, SocketAddr), Arc<Upstream>>>,
}

impl RemotingForwarder {
    async fn upstream(&self, client: &Arc<Conn>, at: SocketAddr) -> Result<Arc<Upstream>, String> {
        let key = (client.id, at);
        let live = self
            .conns
            .lock()
            .map_err(|_| "forwarder lock poisoned".to_string())?
            .get(&key)
            .filter(|u| !u.shared.dead.load(Ordering::SeqCst))
            .cloned();
        if let Some(u) = live {
            return Ok(u);
        }
        let u = Arc::new(Upstream::open(at, Arc::downgrade(client)).await?);
        let mut map = self
            .conns
            .lock()
            .map_err(|_| "forwarder lock poisoned".to_string())?;
        // A connection that closed meanwhile keeps nothing open.
        if !client.gone.load(Ordering::Acquire) {
            map.insert(key, u.clone());
        }
        Ok(u)
    }

    /// The client connection `id` closed: its upstream connections close too.
    pub fn closed(&self, id: u64) {
        if let Ok(mut map) = self.conns.lock() {
            map.retain(|(c, _), _| *c != id);
        }
    }

    /// Passes `req`, from the client on `client`, on to the master at `at`: its answer
    /// under the client's opaque (`None` for a oneway request), or `Err` saying why there
    /// is none.
    pub async fn forward(
        &self,
        client: &Arc<Conn>,
        at: SocketAddr,
        req: &RemotingCommand,
    ) -> Result<Option<RemotingCommand>, String> {
        let u = self.upstream(client, at).await?;
        let mut onward = req.clone();
        onward.opaque = u.next.fetch_add(1, Ordering::Relaxed);
        onward.remark = Some(FORWARDED.into());
        let wait = if req.is_oneway() {
            None
        } else {
            let (tx, rx) = oneshot::channel();
            u.shared
                .pending
                .lock()
                .map_err(|_| "forwarder lock poisoned".to_string())?
                .insert(onward.opaque, tx);
            Some(rx)
        };
        if u.tx.send(onward.encode()).is_err() {
            u.shared.dead.store(true, Ordering::SeqCst);
            return Err("the connection to the master ended".into());
        }
        let Some(rx) = wait else {
            return Ok(None);
        };
        match tokio::time::timeout(CALL_TIMEOUT, rx).await {
            Ok(Ok(mut resp)) => {
                resp.opaque = req.opaque;
                Ok(Some(resp))
            }
            Ok(Err(_)) => Err("the connection to the master ended".into()),
            Err(_) => {
                if let Ok(mut p) = u.shared.pending.lock() {
                    p.remove(&onward.opaque);
                }
                Err(format!("no answer within {CALL_TIMEOUT:?}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::MasterInfo;
    use std::collections::BTreeMap;

    fn view(master: Option<u32>, remoting: Option<SocketAddr>) -> ClusterView {
        let v = ClusterView::default();
        *v.master.write().unwrap() = master.map(|node| MasterInfo {
            node,
            epoch: 3,
            advertise: "127.0.0.1:1".parse().unwrap(),
            replication: "127.0.0.1:2".parse().unwrap(),
            remoting,
        });
        v
    }

    #[test]
    fn a_replica_forwards_writes_once_to_a_master_serving_remoting() {
        let at: SocketAddr = "127.0.0.1:9876".parse().unwrap();
        let send = RemotingCommand::request(code::SEND_MESSAGE_V2, BTreeMap::new(), b"x".to_vec());
        assert_eq!(target(&view(Some(2), Some(at)), 1, &send), Some(at));
        // Not a write; not twice; not to itself; not to a master without remoting; not when
        // no master is known; not on the master.
        let route = RemotingCommand::request(code::GET_ROUTEINFO_BY_TOPIC, BTreeMap::new(), vec![]);
        assert_eq!(target(&view(Some(2), Some(at)), 1, &route), None);
        let mut again = send.clone();
        again.remark = Some(FORWARDED.into());
        assert_eq!(target(&view(Some(2), Some(at)), 1, &again), None);
        assert_eq!(target(&view(Some(1), Some(at)), 1, &send), None);
        assert_eq!(target(&view(Some(2), None), 1, &send), None);
        assert_eq!(target(&view(None, None), 1, &send), None);
        let master = view(Some(2), Some(at));
        master.master_epoch.store(3, Ordering::SeqCst);
        assert_eq!(target(&master, 1, &send), None);
    }
}
