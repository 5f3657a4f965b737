//! The replication stream between a master and its replicas, over TCP.
//!
//! Frames, both ways:
//!
//! ```text
//! +----------------+------+-----------------+
//! | len: u32 BE    | kind | payload         |   len = 1 + payload length, at most MAX_FRAME
//! +----------------+------+-----------------+
//! kind 1 HELLO    replica -> master  JSON {node, end, epochs: [[epoch, start offset], ...]}
//! kind 2 WELCOME  master -> replica  JSON {epoch, start}: the replica's log agrees up to
//!                                    `start`; it cuts what lies beyond, then takes chunks
//! kind 3 CHUNK    master -> replica  epoch u64 BE, offset u64 BE, the log's bytes
//! kind 4 ACK      replica -> master  end u64 BE: the replica holds the log below it, synced
//! kind 5 REFUSED  either way         UTF-8 text: why
//! kind 6 BEHIND   master -> replica  UTF-8 text: the replica's log ends below the master's
//!                                    log start (retention retired the bytes it needs)
//! ```
//!
//! The log's records are self-describing and CRC'd: the replica checks every record of a
//! chunk (offsets, CRCs, atomic groups) before writing any ([`rocklet_core::Broker::apply_replicated`]).
//! A chunk from an epoch other than the one welcomed, or below the replica's last epoch, is
//! refused and the connection dropped.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rocklet_core::{common_prefix, AnyStorage, Broker, MemStorage};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

pub use super::machine::next_offset;
use super::machine::{self, ReplicaState, ReplicaTable, Welcomed};
use super::{monotonic_ms, View};
use crate::driver::{CoreBroker, CoreHandle};

pub const HELLO: u8 = 1;
pub const WELCOME: u8 = 2;
pub const CHUNK: u8 = 3;
pub const ACK: u8 = 4;
pub const REFUSED: u8 = 5;
pub const BEHIND: u8 = 6;

/// Bytes of log a chunk carries, about (an atomic group goes whole).
pub const CHUNK_BYTES: usize = 1 << 20;
/// Bytes sent to a replica and not yet acknowledged, at most (then the master waits).
pub const WINDOW_BYTES: u64 = 8 << 20;
/// How long the other side may take to send its first frame.
pub const HANDSHAKE: Duration = Duration::from_secs(5);

/// The largest frame taken: a chunk holds an atomic group whole, so up to the core's largest
/// batch, plus room.
#[must_use]
pub fn max_frame(cfg: &rocklet_core::Config) -> usize {
    (cfg.max_message_size.max(cfg.max_batch_size) as usize)
        .saturating_mul(2)
        .max(CHUNK_BYTES)
        + (1 << 20)
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Hello {
    pub node: u32,
    pub end: u64,
    pub epochs: Vec<(u64, u64)>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Welcome {
    pub epoch: u64,
    pub start: u64,
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    kind: u8,
    payload: &[&[u8]],
) -> std::io::Result<()> {
    let len: usize = 1 + payload.iter().map(|p| p.len()).sum::<usize>();
    let len = u32::try_from(len).map_err(|_| std::io::Error::other("frame too large"))?;
    let mut head = [0u8; 5];
    head[..4].copy_from_slice(&len.to_be_bytes());
    head[4] = kind;
    w.write_all(&head).await?;
    for p in payload {
        w.write_all(p).await?;
    }
    w.flush().await
}

/// Reads one frame (kind, payload), refusing one above `max` bytes.
pub async fn read_frame<R: AsyncReadExt + Unpin>(
    r: &mut R,
    max: usize,
) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head).await?;
    let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len == 0 || len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("replication frame of {len} bytes (at most {max})"),
        ));
    }
    let mut payload = vec![0u8; len - 1];
    r.read_exact(&mut payload).await?;
    Ok((head[4], payload))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)
        .map(|s| u64::from_be_bytes(s.try_into().expect("8 bytes")))
}

/// What the master knows of its replicas; the acker wakes on `changed`.
#[derive(Debug, Default)]
pub struct Replicas {
    pub table: Mutex<ReplicaTable>,
    pub changed: Notify,
}

/// The master's side: serves replicas that connect while this node is master.
pub async fn serve(
    listener: TcpListener,
    core: CoreHandle,
    view: View,
    replicas: Arc<Replicas>,
    max: usize,
) {
    let mut next_conn = 0u64;
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "replication accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        next_conn += 1;
        let conn = next_conn;
        let (core, view, replicas) = (core.clone(), view.clone(), replicas.clone());
        tokio::spawn(async move {
            if let Err(e) = serve_one(sock, conn, &core, &view, &replicas, max).await {
                debug!(%peer, error = %e, "replication connection ended");
            }
        });
    }
}

async fn serve_one(
    sock: TcpStream,
    conn: u64,
    core: &CoreHandle,
    view: &View,
    replicas: &Arc<Replicas>,
    max: usize,
) -> Result<(), String> {
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    let (kind, payload) = tokio::time::timeout(HANDSHAKE, read_frame(&mut r, max))
        .await
        .map_err(|_| "no HELLO in time".to_string())?
        .map_err(|e| e.to_string())?;
    if kind != HELLO {
        return Err(format!("expected HELLO, got frame kind {kind}"));
    }
    let hello: Hello = serde_json::from_slice(&payload).map_err(|e| format!("bad HELLO: {e}"))?;
    let epoch = view.master_epoch.load(std::sync::atomic::Ordering::SeqCst);
    if epoch == 0 {
        let _ = write_frame(&mut w, REFUSED, &[b"this node is not the master"]).await;
        return Err("HELLO to a node that is not master".into());
    }
    let (m_epochs, m_end, m_start) = core
        .inspect(|b| (b.epochs().to_vec(), b.log_end(), b.log_start()))
        .await
        .map_err(|e| e.to_string())?;
    let start = common_prefix(&hello.epochs, hello.end, &m_epochs, m_end);
    if let Err(why) = machine::servable(start, m_start) {
        warn!(replica = hello.node, start, log_start = m_start, "{why}");
        let _ = write_frame(&mut w, BEHIND, &[why.as_bytes()]).await;
        return Err(why);
    }
    let welcome = serde_json::to_vec(&Welcome { epoch, start }).expect("serializes");
    write_frame(&mut w, WELCOME, &[&welcome])
        .await
        .map_err(|e| e.to_string())?;
    if start < hello.end {
        info!(replica = hello.node, from = hello.end, to = start, "replica's log runs past what this master shares with it: it cuts its tail and reconnects");
        return Ok(());
    }
    info!(
        replica = hello.node,
        start, m_end, epoch, "replica connected"
    );
    {
        let mut t = replicas.table.lock().expect("not poisoned");
        ReplicaState::connected(&mut t, hello.node, conn, start, m_end, monotonic_ms());
    }
    replicas.changed.notify_one();
    let node = hello.node;
    // Acknowledgements, read beside the stream.
    let acked = Arc::new(std::sync::atomic::AtomicU64::new(start));
    let reader = {
        let replicas = replicas.clone();
        let acked = acked.clone();
        let mut end_rx = core.log_end_watch();
        tokio::spawn(async move {
            loop {
                match read_frame(&mut r, 64).await {
                    Ok((ACK, p)) => {
                        let Some(end) = u64_at(&p, 0) else { break };
                        acked.store(end, std::sync::atomic::Ordering::SeqCst);
                        let log_end = *end_rx.borrow_and_update();
                        let mut t = replicas.table.lock().expect("not poisoned");
                        ReplicaState::acked(&mut t, node, conn, end, log_end, monotonic_ms());
                        drop(t);
                        replicas.changed.notify_one();
                    }
                    Ok((REFUSED, p)) => {
                        warn!(replica = node, reason = %String::from_utf8_lossy(&p), "replica refused the stream");
                        break;
                    }
                    _ => break,
                }
            }
        })
    };
    let mut end_rx = core.log_end_watch();
    let mut pos = start;
    let result = loop {
        if view.master_epoch.load(std::sync::atomic::Ordering::SeqCst) != epoch {
            break Err("no longer master".to_string());
        }
        if reader.is_finished() {
            break Err("the replica closed".to_string());
        }
        if pos.saturating_sub(acked.load(std::sync::atomic::Ordering::SeqCst)) > WINDOW_BYTES {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let chunk = core
            .read_log(move |b| b.replication_chunk(pos, CHUNK_BYTES))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        match chunk {
            Some(bytes) => {
                let (e, p) = (epoch.to_be_bytes(), pos.to_be_bytes());
                if let Err(e) = write_frame(&mut w, CHUNK, &[&e, &p, &bytes]).await {
                    break Err(e.to_string());
                }
                pos = next_offset(pos, &bytes);
            }
            None => {
                // Wait for new bytes (or look again now and then: a lost wake-up costs 50 ms).
                let _ = tokio::time::timeout(Duration::from_millis(50), end_rx.changed()).await;
            }
        }
    };
    reader.abort();
    {
        let mut t = replicas.table.lock().expect("not poisoned");
        ReplicaState::closed(&mut t, node, conn);
    }
    replicas.changed.notify_one();
    result
}

/// How a replica's stream ended.
#[derive(Debug)]
pub enum FollowEnd {
    /// The log was cut to what the master shares: connect again.
    Truncated,
    /// The connection failed or was refused.
    Failed(String),
    /// The master no longer holds the log from where this replica's ends (retention
    /// retired it): replication cannot bring it back; a restore from a backup can.
    Behind(String),
}

/// The replica's side: follows the master at `addr` until the stream ends or `stop` fires.
/// `epoch_floor`: the master's epoch as etcd names it; a WELCOME or CHUNK from another
/// epoch is refused.
pub async fn follow(
    addr: SocketAddr,
    node: u32,
    epoch: u64,
    core: &CoreHandle,
    max: usize,
) -> FollowEnd {
    match follow_inner(addr, node, epoch, core, max).await {
        Ok(e) => e,
        Err(e) => FollowEnd::Failed(e),
    }
}

async fn follow_inner(
    addr: SocketAddr,
    node: u32,
    epoch: u64,
    core: &CoreHandle,
    max: usize,
) -> Result<FollowEnd, String> {
    let sock = tokio::time::timeout(HANDSHAKE, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("connecting to {addr} timed out"))?
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    let _ = sock.set_nodelay(true);
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    // What this replica holds is synced before it says so.
    let (epochs, end) = core
        .with_mut(|b| b.sync().map(|()| (b.epochs().to_vec(), b.log_end())))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    machine::may_follow(epoch, epochs.last().map_or(0, |e| e.0))?;
    let hello = serde_json::to_vec(&Hello { node, end, epochs }).expect("serializes");
    write_frame(&mut w, HELLO, &[&hello])
        .await
        .map_err(|e| e.to_string())?;
    let (kind, payload) = tokio::time::timeout(HANDSHAKE, read_frame(&mut r, max))
        .await
        .map_err(|_| "no WELCOME in time".to_string())?
        .map_err(|e| e.to_string())?;
    match kind {
        WELCOME => {}
        REFUSED => return Err(format!("refused: {}", String::from_utf8_lossy(&payload))),
        BEHIND => {
            return Ok(FollowEnd::Behind(
                String::from_utf8_lossy(&payload).into_owned(),
            ))
        }
        k => return Err(format!("expected WELCOME, got frame kind {k}")),
    }
    let welcome: Welcome =
        serde_json::from_slice(&payload).map_err(|e| format!("bad WELCOME: {e}"))?;
    match machine::welcomed(epoch, welcome.epoch, welcome.start, end) {
        Welcomed::Refuse(why) => {
            let _ = write_frame(&mut w, REFUSED, &[b"stale epoch"]).await;
            return Err(why);
        }
        Welcomed::Cut(at) => {
            warn!(
            from = end,
            to = at,
            "this log runs past what the master shares with it: cutting it (under sync replication none of these records was acknowledged; under async replication the last writes before a failover may have been)"
        );
            core.reopen(move |b| truncate_and_reopen(b, at))
                .await
                .map_err(|e| e.to_string())??;
            return Ok(FollowEnd::Truncated);
        }
        Welcomed::Follow => {}
    }
    info!(%addr, epoch, from = end, "following the master");
    let mut batch: Vec<(u64, Vec<u8>)> = Vec::new();
    loop {
        // One chunk (waiting), then whatever else has arrived, applied and synced together.
        let (kind, payload) = read_frame(&mut r, max).await.map_err(|e| e.to_string())?;
        let mut frames = vec![(kind, payload)];
        while frames.len() < 64 && !r.buffer().is_empty() {
            frames.push(read_frame(&mut r, max).await.map_err(|e| e.to_string())?);
        }
        for (kind, payload) in frames {
            if kind != CHUNK {
                return Err(format!("expected CHUNK, got frame kind {kind}"));
            }
            let (Some(e), Some(off)) = (u64_at(&payload, 0), u64_at(&payload, 8)) else {
                return Err("a CHUNK shorter than its header".into());
            };
            if e != epoch {
                let _ = write_frame(&mut w, REFUSED, &[b"stale epoch"]).await;
                return Err(format!("a CHUNK of epoch {e}, following epoch {epoch}"));
            }
            batch.push((off, payload[16..].to_vec()));
        }
        let chunks = std::mem::take(&mut batch);
        let end = core
            .with_mut(move |b| -> Result<u64, String> {
                for (off, bytes) in &chunks {
                    b.apply_replicated(*off, bytes)
                        .map_err(|e| e.to_string())?
                        .map_err(|e| e.to_string())?;
                }
                b.sync().map_err(|e| e.to_string())?;
                Ok(b.log_end())
            })
            .await
            .map_err(|e| e.to_string())??;
        write_frame(&mut w, ACK, &[&end.to_be_bytes()])
            .await
            .map_err(|e| e.to_string())?;
    }
}

/// Cuts the replica's log at `at` and opens it again (a replica, as before).
fn truncate_and_reopen(b: &mut CoreBroker, at: u64) -> Result<(), String> {
    let cfg = b.config().clone();
    let now = b.now();
    let placeholder = Broker::open_replica(cfg.clone(), AnyStorage::Mem(MemStorage::new()), now)
        .map_err(|e| e.to_string())?;
    let old = std::mem::replace(b, placeholder);
    let mut storage = old.into_storage();
    // From here the core holds an empty placeholder: a failure stops the process
    // (crash-only), and the next start recovers what the disk holds.
    let reopened = Broker::truncate_storage(&mut storage, at)
        .map_err(|e| format!("cutting the log at {at}: {e}"))
        .and_then(|()| {
            Broker::open_replica(cfg, storage, now).map_err(|e| format!("reopening the log: {e}"))
        });
    match reopened {
        Ok(r) => {
            *b = r;
            Ok(())
        }
        Err(e) => {
            tracing::error!(error = %e, "cutting the replica's divergent tail failed; stopping (restart: recovery reads what is on disk)");
            std::process::exit(2);
        }
    }
}
