//! Connections: one cap on the connections of every listener together (gRPC, remoting and
//! the name server), kept below the process's file descriptor limit so storage always has
//! descriptors left (segment files, the data directory, the sync thread's duplicated
//! handles), and accept loops that back off when the process or the system is out of
//! descriptors instead of spinning.
//!
//! At start the soft `RLIMIT_NOFILE` is raised to the hard limit ([`raise_fd_limit`]); the
//! cap is then [`BrokerConfig::max_connections`](crate::config::BrokerConfig) or what the
//! limit leaves after the descriptors already open and [`FD_RESERVE`], whichever is lower.
//! A connection accepted above the cap is closed at once (and counted): a client sees the
//! close and retries, and nothing the broker already serves is starved of descriptors.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

use crate::auth::tls::{MaybeTls, Tls};
use crate::metrics::Metrics;

/// Descriptors kept free for everything but connections: storage (at most 8 open segments,
/// their duplicates for a detached fsync, the directory, the lock file), listeners, the
/// runtime's own (epoll, eventfds), metrics scrapes and log output.
pub const FD_RESERVE: u64 = 128;
/// Pause of an accept loop after the process or the system ran out of descriptors
/// (EMFILE / ENFILE): accepting again at once only fails again, as fast as it can.
pub const ACCEPT_BACKOFF_FULL: Duration = Duration::from_millis(100);
/// Pause after any other accept error (a connection reset before it was accepted, …).
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(5);

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit in force
/// afterwards (`None`: unlimited or unknown).
pub fn raise_fd_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let l = getrlimit(Resource::Nofile);
        if l.current != l.maximum {
            let raised = Rlimit {
                current: l.maximum,
                maximum: l.maximum,
            };
            match setrlimit(Resource::Nofile, raised) {
                Ok(()) => return l.maximum,
                Err(e) => {
                    warn!(error = %e, soft = ?l.current, hard = ?l.maximum, "cannot raise RLIMIT_NOFILE to its hard limit");
                }
            }
        }
        l.current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Descriptors this process has open now (Linux: `/proc/self/fd`; elsewhere a guess of 64).
#[must_use]
pub fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count() as u64)
}

/// The connection cap: `configured`, or what `fd_limit` leaves after `open` descriptors and
/// [`FD_RESERVE`], whichever is lower (at least 1).
#[must_use]
pub fn connection_cap(configured: usize, fd_limit: Option<u64>, open: u64) -> usize {
    let by_fds = fd_limit.map_or(u64::MAX, |l| l.saturating_sub(open + FD_RESERVE));
    (configured as u64).min(by_fds).max(1) as usize
}

/// The broker-wide connection cap.
#[derive(Debug)]
pub struct ConnLimit {
    slots: Arc<Semaphore>,
    max: usize,
    metrics: Arc<Metrics>,
}

/// A connection's place under the cap; given back when dropped.
#[derive(Debug)]
pub struct ConnPermit {
    _slot: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        self.metrics
            .connections_open
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl ConnLimit {
    /// At most `max` connections at once.
    #[must_use]
    pub fn new(max: usize, metrics: Arc<Metrics>) -> Self {
        ConnLimit {
            slots: Arc::new(Semaphore::new(max)),
            max,
            metrics,
        }
    }

    /// The cap.
    #[must_use]
    pub fn max(&self) -> usize {
        self.max
    }

    /// A place for a new connection, or `None` (counted) at the cap.
    pub fn admit(&self) -> Option<ConnPermit> {
        match self.slots.clone().try_acquire_owned() {
            Ok(slot) => {
                self.metrics
                    .connections_open
                    .fetch_add(1, Ordering::Relaxed);
                Some(ConnPermit {
                    _slot: slot,
                    metrics: self.metrics.clone(),
                })
            }
            Err(_) => {
                self.metrics.over_limit("max_connections");
                None
            }
        }
    }
}

/// Whether an accept error means no descriptor was left (EMFILE / ENFILE).
#[must_use]
pub fn out_of_descriptors(e: &io::Error) -> bool {
    // 24 EMFILE, 23 ENFILE on Linux and the BSDs.
    matches!(e.raw_os_error(), Some(23 | 24))
}

/// Waits after a failed accept: long enough when out of descriptors that the loop costs no
/// CPU while it lasts.
pub async fn accept_failed(e: &io::Error, listener: &str) {
    if out_of_descriptors(e) {
        warn!(listener, error = %e, "out of file descriptors: not accepting for 100 ms");
        tokio::time::sleep(ACCEPT_BACKOFF_FULL).await;
    } else {
        debug!(listener, error = %e, "accept failed");
        tokio::time::sleep(ACCEPT_BACKOFF).await;
    }
}

/// An accepted gRPC connection holding its place under the cap, closed once nothing at all
/// (no frame, no ping acknowledgement) was read from it for the idle timeout. A live HTTP/2
/// peer answers the broker's keepalive pings, so only a silent or dead one goes (one that
/// never sent its preface, or vanished).
#[derive(Debug)]
pub struct GrpcConn {
    io: MaybeTls,
    _permit: ConnPermit,
    idle: Duration,
    last_read: tokio::time::Instant,
    timer: Pin<Box<tokio::time::Sleep>>,
    metrics: Arc<Metrics>,
}

impl tonic::transport::server::Connected for GrpcConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.tcp().connect_info()
    }
}

impl AsyncRead for GrpcConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.last_read = tokio::time::Instant::now();
                }
                Poll::Ready(r)
            }
            Poll::Pending => loop {
                // The timer is moved on only when it fires (not at every read).
                match this.timer.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(()) => {
                        let due = this.last_read + this.idle;
                        if tokio::time::Instant::now() >= due {
                            this.metrics.over_limit("idle_timeout_ms");
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "nothing read for idle_timeout_ms",
                            )));
                        }
                        this.timer.as_mut().reset(due);
                    }
                }
            },
        }
    }
}

impl AsyncWrite for GrpcConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The gRPC listener's accept loop: connections under the cap, with TCP_NODELAY (small
/// replies must not wait for Nagle's algorithm), handed to tonic through the returned
/// channel; the loop ends when tonic drops the receiver (shutdown). With `tls`, each
/// connection's first byte decides (in a task of its own, within `handshake` time) whether
/// it is a TLS handshake, plaintext that the mode lets through, or refused.
pub fn grpc_incoming(
    listener: TcpListener,
    limit: Arc<ConnLimit>,
    idle: Duration,
    metrics: Arc<Metrics>,
    tls: Option<(Arc<Tls>, Duration)>,
) -> mpsc::Receiver<io::Result<GrpcConn>> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                r = listener.accept() => r,
                () = tx.closed() => return,
            };
            match stream {
                Ok((io, peer)) => {
                    let Some(permit) = limit.admit() else {
                        debug!(%peer, max = limit.max(), "gRPC connection refused: max_connections reached");
                        continue;
                    };
                    if let Err(e) = io.set_nodelay(true) {
                        warn!("cannot set TCP_NODELAY: {e}");
                    }
                    let m = metrics.clone();
                    let conn = move |io| {
                        let now = tokio::time::Instant::now();
                        GrpcConn {
                            io,
                            _permit: permit,
                            idle,
                            last_read: now,
                            timer: Box::pin(tokio::time::sleep_until(now + idle)),
                            metrics: m,
                        }
                    };
                    let Some((tls, handshake)) = &tls else {
                        if tx.send(Ok(conn(MaybeTls::Plain(io)))).await.is_err() {
                            return;
                        }
                        continue;
                    };
                    let (tls, handshake, tx) = (tls.clone(), *handshake, tx.clone());
                    tokio::spawn(async move {
                        match tokio::time::timeout(handshake, tls.accept(io, true)).await {
                            Ok(Ok(io)) => {
                                let _ = tx.send(Ok(conn(io))).await;
                            }
                            Ok(Err(e)) if e.kind() == io::ErrorKind::PermissionDenied => {
                                info!(%peer, "plaintext gRPC connection refused: the listener's TLS mode is enforcing");
                            }
                            Ok(Err(e)) => {
                                debug!(%peer, error = %e, "gRPC connection closed before TLS was established")
                            }
                            Err(_) => {
                                debug!(%peer, "gRPC connection closed: no TLS handshake in time")
                            }
                        }
                    });
                }
                Err(e) => accept_failed(&e, "grpc").await,
            }
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_the_reserve_and_never_exceeds_the_config() {
        assert_eq!(connection_cap(10_000, Some(1024), 20), 1024 - 20 - 128);
        assert_eq!(connection_cap(100, Some(1 << 20), 20), 100);
        assert_eq!(connection_cap(100, None, 20), 100);
        assert_eq!(connection_cap(100, Some(64), 20), 1, "at least one");
    }

    #[test]
    fn permits_are_given_back_and_refusals_counted() {
        let m = Arc::new(Metrics::default());
        let l = ConnLimit::new(2, m.clone());
        let a = l.admit().unwrap();
        let _b = l.admit().unwrap();
        assert!(l.admit().is_none());
        assert_eq!(m.connections_open.load(Ordering::Relaxed), 2);
        assert_eq!(m.over_limit_count("max_connections"), 1);
        drop(a);
        assert_eq!(m.connections_open.load(Ordering::Relaxed), 1);
        assert!(l.admit().is_some());
    }

    #[test]
    fn emfile_and_enfile_are_out_of_descriptors() {
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(24)));
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(23)));
        assert!(!out_of_descriptors(&io::Error::from_raw_os_error(104)));
    }
}
