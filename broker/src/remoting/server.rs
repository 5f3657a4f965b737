//! The TCP side of RocketMQ 4 remoting: the broker listener and the name-server listener,
//! one task per connection reading frames, one writer task per connection, one task per
//! request (so a long-polling pull does not hold up the connection). Memory per connection
//! is bounded: at most [`MAX_IN_FLIGHT`] requests are handled at once, and no request is
//! read while more than [`MAX_QUEUED_BYTES`] of responses wait for the peer to read them.
//!
//! When the peer closes, every request already read still runs to its end (a oneway
//! END_TRANSACTION sent just before closing commits); long polls (pulls, pops) end at once.
//!
//! Broker-wide, a frame holds its bytes under the [request budget](crate::budget) (and the
//! shares of its connection and client address): its header's length before the header is
//! read (waiting for room: the header names the request, so nothing can be answered without
//! it), its body as the body arrives (what the body declares must only fit in the room left
//! when the header is read); a body that does not fit is skipped as it arrives and answered
//! `SYSTEM_BUSY`. The bytes are held until the request's handling ends (a long-polling pull
//! holds its header).
//!
//! TLS (`[tls]`, both listeners, as RocketMQ's remoting server): the first byte of a
//! connection tells a TLS handshake from plaintext; `enforcing` refuses plaintext, and
//! `permissive` serves both on one port. The handshake must end within
//! `request_read_timeout_ms`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tracing::debug;

use super::codec::{self, RemotingCommand};
use super::conn::{self, Conn, Ctx};
use super::handlers;
use super::reply;
use super::stats::RemotingStats;
use crate::auth::tls::MaybeTls;
use crate::budget::HeldBytes;

/// Requests of one connection handled at the same time; more wait (the reader stops reading).
const MAX_IN_FLIGHT: usize = 256;
/// While more than this many response bytes wait to be written to a connection (its peer
/// does not read them), no further request of it is read. A connection thus holds at most
/// this plus [`MAX_IN_FLIGHT`] responses of memory, however long the peer keeps sending.
pub const MAX_QUEUED_BYTES: usize = 8 << 20;
/// A remoting body is read (and held under the budget) this much at a time.
const BODY_CHUNK: usize = 64 << 10;
/// Remoting connection ids live above gRPC's (which count up from 1).
const CONN_BASE: u64 = 1 << 62;

/// The running remoting listeners.
#[derive(Debug)]
pub struct RemotingServer {
    /// Where the broker role listens (the real port when the config said 0).
    pub addr: Option<SocketAddr>,
    /// Where the name-server role listens.
    pub namesrv_addr: Option<SocketAddr>,
    /// Requests by code and their errors ([`RemotingStats::render`] for the metrics page).
    pub stats: Arc<RemotingStats>,
    tasks: Vec<JoinHandle<()>>,
}

/// The remoting listeners, bound but not yet serving: the broker role's address is the store
/// host the core writes in every record, so it is known before the core opens.
#[derive(Debug)]
pub struct Listeners {
    broker: Option<TcpListener>,
    namesrv: Option<TcpListener>,
}

impl Listeners {
    /// Binds both listeners (either may be off).
    pub async fn bind(
        remoting: Option<SocketAddr>,
        namesrv: Option<SocketAddr>,
    ) -> Result<Self, String> {
        let broker = match remoting {
            Some(a) => Some(
                TcpListener::bind(a)
                    .await
                    .map_err(|e| format!("cannot listen for remoting on {a}: {e}"))?,
            ),
            None => None,
        };
        let namesrv = match namesrv {
            Some(a) => Some(
                TcpListener::bind(a)
                    .await
                    .map_err(|e| format!("cannot listen as name server on {a}: {e}"))?,
            ),
            None => None,
        };
        Ok(Listeners { broker, namesrv })
    }

    /// Where the broker role listens (the real port when the config said 0).
    #[must_use]
    pub fn broker_addr(&self) -> Option<SocketAddr> {
        self.broker.as_ref().and_then(|l| l.local_addr().ok())
    }
}

impl RemotingServer {
    /// Binds both listeners (either may be off) and starts accepting.
    pub async fn start(
        remoting: Option<SocketAddr>,
        namesrv: Option<SocketAddr>,
        ctx: Ctx,
    ) -> Result<Self, String> {
        Ok(Self::serve(Listeners::bind(remoting, namesrv).await?, ctx))
    }

    /// Starts accepting on listeners bound before.
    #[must_use]
    pub fn serve(listeners: Listeners, mut ctx: Ctx) -> Self {
        let addr = listeners.broker_addr();
        let namesrv_addr = listeners.namesrv.as_ref().and_then(|l| l.local_addr().ok());
        ctx.broker_addr = addr;
        ctx.namesrv_addr = namesrv_addr;
        let stats = ctx.stats();
        let ctx = Arc::new(ctx);
        let next = Arc::new(AtomicU64::new(CONN_BASE));
        let mut tasks = Vec::new();
        for l in [listeners.broker, listeners.namesrv].into_iter().flatten() {
            tasks.push(tokio::spawn(accept(l, ctx.clone(), next.clone())));
        }
        RemotingServer {
            addr,
            namesrv_addr,
            stats,
            tasks,
        }
    }

    /// Stops accepting and closes every connection.
    pub fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for RemotingServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn accept(l: TcpListener, ctx: Arc<Ctx>, next: Arc<AtomicU64>) {
    // Connections are tasks of their own; aborting this one must close them too.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            r = l.accept() => match r {
                Ok((s, peer)) => {
                    let permit = match &ctx.conn_limit {
                        Some(limit) => match limit.admit() {
                            Some(p) => Some(p),
                            None => {
                                let id = next.fetch_add(1, Ordering::Relaxed);
                                ctx.close_log.closing(id, peer, &format!("max_connections ({}) reached", limit.max()));
                                continue;
                            }
                        },
                        None => None,
                    };
                    let id = next.fetch_add(1, Ordering::Relaxed);
                    let ctx = ctx.clone();
                    conns.spawn(async move {
                        serve(s, peer, id, ctx).await;
                        drop(permit);
                    });
                }
                // Out of descriptors: pause instead of failing again at once.
                Err(e) => crate::net::accept_failed(&e, "remoting").await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve(stream: TcpStream, peer: SocketAddr, id: u64, ctx: Arc<Ctx>) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(peer);
    let Some((tls, handshake)) = ctx.tls.clone() else {
        let (rd, wr) = stream.into_split();
        return run(BufReader::new(rd), wr, peer, local, id, ctx).await;
    };
    match tokio::time::timeout(handshake, tls.accept(stream, false)).await {
        Ok(Ok(MaybeTls::Plain(tcp))) => {
            let (rd, wr) = tcp.into_split();
            run(BufReader::new(rd), wr, peer, local, id, ctx).await;
        }
        Ok(Ok(MaybeTls::Tls(s))) => {
            let (rd, wr) = tokio::io::split(*s);
            run(BufReader::new(rd), wr, peer, local, id, ctx).await;
        }
        Ok(Err(e)) => {
            ctx.close_log
                .closing(id, peer, &format!("TLS handshake failed ({e})"));
        }
        Err(_) => {
            ctx.over_limit("request_read_timeout_ms");
            ctx.close_log
                .closing(id, peer, "no TLS handshake within request_read_timeout_ms");
        }
    }
}

/// Serves one connection: `rd` buffered (a wait for the next request looks at its first
/// byte without taking it, in TLS or not).
async fn run<R, W>(
    mut rd: BufReader<R>,
    mut wr: W,
    peer: SocketAddr,
    local: SocketAddr,
    id: u64,
    ctx: Arc<Ctx>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let conn = Arc::new(Conn::new(id, peer, local, tx));
    let w = conn.clone();
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            let r = wr.write_all(&frame).await;
            w.written(frame.len());
            if r.is_err() {
                break;
            }
        }
        w.writer_stopped();
    });
    let checks = conn::spawn_check_forwarder(conn.clone());
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    debug!(conn = id, %peer, "remoting connection");
    let idle = Duration::from_millis(ctx.cfg.idle_timeout_ms);
    let read_timeout = Duration::from_millis(ctx.cfg.request_read_timeout_ms);
    'conn: loop {
        // A peer that does not read its responses gets no more of them made.
        if !conn.drained_to(MAX_QUEUED_BYTES).await {
            ctx.close_log.closing(
                id,
                peer,
                "the peer reads no responses (or writing one failed)",
            );
            break;
        }
        // Idle: nothing read or written for idle_timeout_ms while no request is being handled
        // closes it. (Filling the buffer takes nothing out of it: giving up on the wait loses
        // nothing.)
        loop {
            let due = conn.last_active() + idle;
            match tokio::time::timeout_at(due, rd.fill_buf()).await {
                Ok(Err(_)) => break 'conn,
                Ok(Ok([])) => break 'conn,
                Ok(Ok(_)) => break,
                Err(_)
                    if slots.available_permits() == MAX_IN_FLIGHT
                        && conn.last_active() + idle <= tokio::time::Instant::now() =>
                {
                    ctx.over_limit("idle_timeout_ms");
                    ctx.close_log.closing(
                        id,
                        peer,
                        &format!("idle for idle_timeout_ms ({} ms)", ctx.cfg.idle_timeout_ms),
                    );
                    break 'conn;
                }
                // Busy (a long poll) or active since: look again a timeout after the last sign.
                Err(_) if conn.last_active() + idle <= tokio::time::Instant::now() => {
                    conn.active();
                }
                Err(_) => {}
            }
        }
        // A request that began must arrive within request_read_timeout_ms.
        let (cmd, held) =
            match tokio::time::timeout(read_timeout, read_request(&mut rd, &ctx, &conn)).await {
                Ok(Next::Request(cmd, held)) => {
                    conn.active();
                    (cmd, held)
                }
                Ok(Next::Skip) => continue,
                Ok(Next::Close) => break,
                Err(_) => {
                    ctx.over_limit("request_read_timeout_ms");
                    ctx.close_log.closing(
                        id,
                        peer,
                        &format!(
                            "a request did not arrive within request_read_timeout_ms ({} ms)",
                            ctx.cfg.request_read_timeout_ms
                        ),
                    );
                    break;
                }
            };
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let (ctx, conn, checks) = (ctx.clone(), conn.clone(), checks.clone());
        tasks.spawn(async move {
            let oneway = cmd.is_oneway();
            let resp: Option<RemotingCommand> = handlers::handle(&ctx, &conn, &checks, cmd).await;
            if let (Some(r), false) = (resp, oneway) {
                conn.send(&r);
            }
            drop(permit);
            drop(held);
        });
        while tasks.try_join_next().is_some() {}
    }
    debug!(conn = id, "remoting connection closed");
    // Every request read is carried out (v4 clients send END_TRANSACTION and
    // UPDATE_CONSUMER_OFFSET oneway and close at once); only long polls end early, as
    // nobody is left to answer.
    conn.peer_gone();
    while tasks.join_next().await.is_some() {}
    conn::closed(&ctx, &conn);
    drop(checks);
    writer.abort();
}

/// Reads and drops `n` bytes; `false` when the connection ended first.
async fn skip(rd: &mut (impl tokio::io::AsyncRead + Unpin), n: usize) -> bool {
    let mut limited = rd.take(n as u64);
    matches!(tokio::io::copy(&mut limited, &mut tokio::io::sink()).await, Ok(k) if k == n as u64)
}

/// What reading the next frame gave.
enum Next {
    /// A request, and the bytes it holds under the budget until it is handled.
    Request(RemotingCommand, Option<HeldBytes>),
    /// A response, or a request refused unread: nothing to handle.
    Skip,
    /// The connection is finished (closed, or a malformed frame).
    Close,
}

/// Reads one frame: the header first (what the request is decides how much body it may
/// carry, and a body it may not carry is skipped as it arrives instead of being held).
async fn read_request(rd: &mut (impl AsyncBufRead + Unpin), ctx: &Ctx, conn: &Conn) -> Next {
    let mut prefix = [0u8; 4];
    if rd.read_exact(&mut prefix).await.is_err() {
        return Next::Close;
    }
    let n = match codec::frame_length(prefix) {
        Ok(n) => n,
        Err(e) => {
            ctx.close_log
                .closing(conn.id, conn.peer, &format!("bad frame ({e})"));
            return Next::Close;
        }
    };
    let mut field = [0u8; 4];
    if rd.read_exact(&mut field).await.is_err() {
        return Next::Close;
    }
    let (ty, header_len) = match codec::header_length(field, n) {
        Ok(x) => x,
        Err(e) => {
            ctx.close_log
                .closing(conn.id, conn.peer, &format!("bad frame ({e})"));
            return Next::Close;
        }
    };
    if header_len > ctx.cfg.remoting_max_header_bytes {
        ctx.over_limit("remoting_max_header_bytes");
        ctx.close_log.closing(
            conn.id,
            conn.peer,
            &format!(
                "header of {header_len} bytes above remoting_max_header_bytes ({})",
                ctx.cfg.remoting_max_header_bytes
            ),
        );
        return Next::Close;
    }
    // What the header holds, until the request is handled; the body's bytes join it below.
    let mut held = match &ctx.request_budget {
        Some(b) => Some(b.reserve(Some(conn.peer), header_len as u64).await),
        None => None,
    };
    let mut header = vec![0u8; header_len];
    if rd.read_exact(&mut header).await.is_err() {
        return Next::Close;
    }
    let mut cmd = match codec::decode_header(ty, &header) {
        Ok(c) => c,
        Err(e) => {
            ctx.close_log
                .closing(conn.id, conn.peer, &format!("bad frame ({e})"));
            return Next::Close;
        }
    };
    drop(header);
    let body_len = n - 4 - header_len;
    let refusal = if cmd.is_response() {
        None
    } else {
        // What the body declares holds nothing yet; it must only fit in the room left.
        reply::body_refusal(ctx, &cmd, body_len).or_else(|| {
            let b = ctx.request_budget.as_ref()?;
            let over = b.fits(Some(conn.peer), body_len as u64).err()?;
            Some(reply::busy(&cmd, &over))
        })
    };
    if cmd.is_response() || refusal.is_some() {
        // A refusal is answered at once (a client stalling in its body still hears it), and
        // the body skipped as it arrives. An answer to a request of ours goes (header only)
        // to what waits for it (PUSH_REPLY_MESSAGE_TO_CLIENT); CHECK_TRANSACTION_STATE is
        // oneway, nothing waits for it.
        drop(held);
        if let Some(r) = refusal {
            reply::refused(ctx, conn, &cmd, r);
        } else if body_len > 0 && conn.wants_body(cmd.opaque) {
            // The answer to a relayed GET_CONSUMER_RUNNING_INFO: its body is what is relayed,
            // at most MAX_ANSWER_BODY bytes, held under the request budget while it is read.
            let held = match &ctx.request_budget {
                Some(b) => b.try_reserve(Some(conn.peer), body_len as u64).map(Some),
                None => Ok(None),
            };
            let too_big = body_len > super::conn::MAX_ANSWER_BODY;
            if too_big || held.is_err() {
                cmd.code = super::codes::status::SYSTEM_ERROR;
                cmd.remark =
                    Some(format!(
                    "the client's answer of {body_len} bytes is {} (at most {} bytes are relayed)",
                    if too_big { "too large" } else { "over the broker's request budget now" },
                    super::conn::MAX_ANSWER_BODY
                ));
                conn.answered(cmd);
            } else {
                let mut body = vec![0u8; body_len];
                if rd.read_exact(&mut body).await.is_err() {
                    return Next::Close;
                }
                cmd.body = body;
                conn.answered(cmd);
                drop(held);
                return Next::Skip;
            }
        } else {
            conn.answered(cmd);
        }
        return if skip(rd, body_len).await {
            Next::Skip
        } else {
            Next::Close
        };
    }
    // Grows only as bytes arrive, holding what the buffer grows by before it is read into
    // (at most twice what arrived, never more than the declared length): a declared length
    // costs nothing until it is sent. A body that stops fitting is answered `SYSTEM_BUSY`
    // and the rest of it skipped.
    let mut body = Vec::new();
    while body.len() < body_len {
        let n = (body_len - body.len()).min(BODY_CHUNK);
        let (len, cap) = (body.len(), body.capacity());
        if len + n > cap {
            let want = (len + n).max((cap * 2).min(body_len));
            if let Some(over) = held
                .as_mut()
                .and_then(|h| h.grow((want - cap) as u64).err())
            {
                drop(held);
                drop(body);
                reply::refused(ctx, conn, &cmd, reply::busy(&cmd, &over));
                return if skip(rd, body_len - len).await {
                    Next::Skip
                } else {
                    Next::Close
                };
            }
            body.reserve_exact(want - len);
        }
        match (&mut *rd).take(n as u64).read_to_end(&mut body).await {
            Ok(got) if got == n => {}
            _ => return Next::Close,
        }
    }
    cmd.body = body;
    Next::Request(cmd, held)
}
