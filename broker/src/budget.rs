//! The broker-wide budget of request bytes held
//! ([`BrokerConfig::max_inflight_request_bytes`](crate::config::BrokerConfig)).
//!
//! Every limit per request (message and batch sizes, filters, names, headers) and per
//! connection (streams, unread answers) still lets many clients together make the broker
//! hold any amount: 10,000 connections each trickling a 9 MiB send hold 90 GB. A request
//! therefore holds ([`HeldBytes`]) the bytes the broker keeps of it, from when they arrive
//! until its handling ends (answered, or the long poll that waited on it over): a gRPC call
//! what has arrived of its message (a length prefix declaring 4 MiB, and nothing after it,
//! holds nothing: what it declares is only checked against the room left, see
//! [`RequestBudget::fits`]), a remoting frame its header and body lengths. A request that
//! would take the bytes held past the limit is refused, its body left unread: gRPC
//! `TOO_MANY_REQUESTS`, remoting `SYSTEM_BUSY`; RocketMQ clients back off and retry.
//!
//! One client must not take the whole budget from the others, so two shares bound what one
//! holder may hold of it: one client address (all its connections together) at most
//! [`PEER_SHARE`] of the limit, one connection at most [`CONNECTION_SHARE`] (each at least
//! the largest request, so any request can still be taken). A request past its share is
//! refused the same way, the refusal naming the share.
//!
//! The config keeps the limit at or above the largest request (see
//! [`BrokerConfig::validate`](crate::config::BrokerConfig::validate)), so any request can be
//! taken once the others are done.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::metrics::Metrics;

/// The limit's name in the config, in refusals and in
/// `rocklet_requests_over_limit_total{limit=…}`.
pub const LIMIT_NAME: &str = crate::metrics::REQUEST_BUDGET;
/// One client address may hold at most 1/`PEER_SHARE` of the budget.
pub const PEER_SHARE: u64 = 4;
/// One connection may hold at most 1/`CONNECTION_SHARE` of the budget.
pub const CONNECTION_SHARE: u64 = 8;

/// Who holds bytes: the connection a request came on (its peer's address and port), or
/// nobody in particular (`None`: only the broker-wide limit applies).
pub type Holder = Option<SocketAddr>;

/// The budget, shared by every listener.
#[derive(Debug)]
pub struct RequestBudget {
    limit: u64,
    per_peer: u64,
    per_connection: u64,
    /// What is held, in total and by holder.
    state: Mutex<Held>,
    /// The total, for readers that take no lock.
    held: AtomicU64,
    /// Wakes [`RequestBudget::reserve`] when bytes are released.
    freed: Notify,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct Held {
    total: u64,
    /// Only holders that hold something have an entry.
    peers: HashMap<IpAddr, u64>,
    connections: HashMap<SocketAddr, u64>,
}

/// Which limit a refused request would have gone past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The broker-wide limit.
    Broker,
    /// The share of one client address.
    Peer(IpAddr),
    /// The share of one connection.
    Connection,
}

/// A request refused because the bytes held would go past the budget or a share of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverRequestBudget {
    /// Bytes held (by the holder, for a share) when this one came.
    pub held: u64,
    /// What this request needs (more).
    pub request: u64,
    /// The limit gone past: the budget, or the share.
    pub limit: u64,
    pub scope: Scope,
    /// The whole budget (`max_inflight_request_bytes`).
    pub budget: u64,
}

impl std::fmt::Display for OverRequestBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (held, request, limit, budget) = (self.held, self.request, self.limit, self.budget);
        match self.scope {
            Scope::Broker => write!(
                f,
                "TOO_MANY_REQUESTS: the broker holds {held} bytes of requests from its clients, and this one of {request} bytes would take them past its {LIMIT_NAME} of {limit}; retry later (the request was not handled), or raise `{LIMIT_NAME}` in the broker's config file"
            ),
            Scope::Peer(ip) => write!(
                f,
                "TOO_MANY_REQUESTS: the broker holds {held} bytes of requests from {ip}, and this one of {request} bytes would take them past the {limit} bytes one client address may hold (1/{PEER_SHARE} of its {LIMIT_NAME} of {budget}); retry later (the request was not handled), once this client's other requests are done"
            ),
            Scope::Connection => write!(
                f,
                "TOO_MANY_REQUESTS: the broker holds {held} bytes of requests from this connection, and this one of {request} bytes would take them past the {limit} bytes one connection may hold (1/{CONNECTION_SHARE} of its {LIMIT_NAME} of {budget}); retry later (the request was not handled), once this connection's other requests are done"
            ),
        }
    }
}

impl RequestBudget {
    /// A budget of `limit` bytes, without shares (one holder may take all of it).
    #[must_use]
    pub fn new(limit: u64, metrics: Arc<Metrics>) -> Arc<Self> {
        Self::with_shares(limit, limit, limit, metrics)
    }

    /// A budget of `limit` bytes of which one client address may hold [`PEER_SHARE`] and
    /// one connection [`CONNECTION_SHARE`], each at least `largest` (the largest request).
    #[must_use]
    pub fn shared(limit: u64, largest: u64, metrics: Arc<Metrics>) -> Arc<Self> {
        let share = |n: u64| (limit / n).max(largest).min(limit);
        Self::with_shares(limit, share(PEER_SHARE), share(CONNECTION_SHARE), metrics)
    }

    fn with_shares(
        limit: u64,
        per_peer: u64,
        per_connection: u64,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(RequestBudget {
            limit,
            per_peer,
            per_connection,
            state: Mutex::new(Held::default()),
            held: AtomicU64::new(0),
            freed: Notify::new(),
            metrics,
        })
    }

    /// The limit.
    #[must_use]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// What one client address and one connection may hold.
    #[must_use]
    pub fn shares(&self) -> (u64, u64) {
        (self.per_peer, self.per_connection)
    }

    /// Bytes held now.
    #[must_use]
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Bytes held now by one client address (0 when it holds nothing).
    #[must_use]
    pub fn held_by_peer(&self, ip: IpAddr) -> u64 {
        self.lock().peers.get(&ip).copied().unwrap_or(0)
    }

    /// Client addresses and connections holding bytes now (the size of what the budget
    /// keeps per holder).
    #[must_use]
    pub fn holders(&self) -> (usize, usize) {
        let s = self.lock();
        (s.peers.len(), s.connections.len())
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        // A panic while holding it left plain counters behind: still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `bytes` more would fit for `who` (`alone`: also when `who`, or nobody, holds
    /// nothing at the level gone past); `Err` names the level and what is held there.
    fn check(
        &self,
        s: &Held,
        who: Holder,
        bytes: u64,
        alone: bool,
    ) -> Result<(), OverRequestBudget> {
        let over = |held: u64, limit: u64, scope| {
            let past = held.checked_add(bytes).is_none_or(|n| n > limit);
            (past && !(alone && held == 0)).then_some(OverRequestBudget {
                held,
                request: bytes,
                limit,
                scope,
                budget: self.limit,
            })
        };
        if let Some(c) = who {
            let conn = s.connections.get(&c).copied().unwrap_or(0);
            if let Some(o) = over(conn, self.per_connection, Scope::Connection) {
                return Err(o);
            }
            let peer = s.peers.get(&c.ip()).copied().unwrap_or(0);
            if let Some(o) = over(peer, self.per_peer, Scope::Peer(c.ip())) {
                return Err(o);
            }
        }
        match over(s.total, self.limit, Scope::Broker) {
            Some(o) => Err(o),
            None => Ok(()),
        }
    }

    /// Adds `bytes` for `who` when they fit (see [`RequestBudget::check`]).
    fn add(&self, who: Holder, bytes: u64, alone: bool) -> Result<(), OverRequestBudget> {
        if bytes == 0 {
            return Ok(());
        }
        let mut s = self.lock();
        self.check(&s, who, bytes, alone)?;
        s.total += bytes;
        if let Some(c) = who {
            *s.connections.entry(c).or_default() += bytes;
            *s.peers.entry(c.ip()).or_default() += bytes;
        }
        self.held.store(s.total, Ordering::Relaxed);
        drop(s);
        self.metrics
            .request_bytes_in_flight
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    fn release(&self, who: Holder, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut s = self.lock();
        s.total -= bytes;
        if let Some(c) = who {
            let less = |n: &mut u64| {
                *n -= bytes;
                *n > 0
            };
            if !s.connections.get_mut(&c).is_some_and(less) {
                s.connections.remove(&c);
            }
            if !s.peers.get_mut(&c.ip()).is_some_and(less) {
                s.peers.remove(&c.ip());
            }
        }
        self.held.store(s.total, Ordering::Relaxed);
        drop(s);
        self.metrics
            .request_bytes_in_flight
            .fetch_sub(bytes, Ordering::Relaxed);
        self.freed.notify_waiters();
    }

    /// Whether `bytes` more would fit for `who` now, holding nothing: a request whose
    /// declared size cannot fit is refused before it is read (counted under [`LIMIT_NAME`]).
    pub fn fits(&self, who: Holder, bytes: u64) -> Result<(), OverRequestBudget> {
        let s = self.lock();
        let r = self.check(&s, who, bytes, false);
        drop(s);
        r.map_err(|o| self.refused(o))
    }

    /// A holding of nothing yet for `who`, to [grow](HeldBytes::grow) as bytes arrive.
    #[must_use]
    pub fn nothing(self: &Arc<Self>, who: Holder) -> HeldBytes {
        HeldBytes {
            budget: self.clone(),
            who,
            bytes: 0,
        }
    }

    /// Holds `bytes` for a request of `who`, or refuses it (counted under [`LIMIT_NAME`])
    /// when the bytes held would go past the limit or `who`'s share.
    pub fn try_reserve(
        self: &Arc<Self>,
        who: Holder,
        bytes: u64,
    ) -> Result<HeldBytes, OverRequestBudget> {
        self.add(who, bytes, false).map_err(|o| self.refused(o))?;
        Ok(HeldBytes {
            budget: self.clone(),
            who,
            bytes,
        })
    }

    /// Holds `bytes` for `who`, waiting until they fit (for what must be read before a
    /// request can be answered at all: a remoting frame's header holds its opaque). Bytes
    /// above a limit are taken once nothing else is held at that level.
    pub async fn reserve(self: &Arc<Self>, who: Holder, bytes: u64) -> HeldBytes {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so a release between the look and the wait wakes it.
            freed.as_mut().enable();
            if self.add(who, bytes, true).is_ok() {
                return HeldBytes {
                    budget: self.clone(),
                    who,
                    bytes,
                };
            }
            freed.await;
        }
    }

    fn refused(&self, o: OverRequestBudget) -> OverRequestBudget {
        self.metrics.over_limit(LIMIT_NAME);
        o
    }
}

/// Bytes a request holds under the budget; released when dropped.
#[derive(Debug)]
pub struct HeldBytes {
    budget: Arc<RequestBudget>,
    who: Holder,
    bytes: u64,
}

impl HeldBytes {
    /// Holds `more` bytes too (a remoting body once its header was read, a gRPC message's
    /// next bytes as they arrive), or refuses them (counted) and keeps what it held.
    pub fn grow(&mut self, more: u64) -> Result<(), OverRequestBudget> {
        match self.budget.add(self.who, more, false) {
            Ok(()) => {
                self.bytes += more;
                Ok(())
            }
            Err(mut o) => {
                o.request = self.bytes + more;
                o.held -= self.bytes.min(o.held);
                Err(self.budget.refused(o))
            }
        }
    }

    /// Gives `less` of its bytes back (a Telemetry message handed on).
    pub fn shrink(&mut self, less: u64) {
        let less = less.min(self.bytes);
        self.bytes -= less;
        self.budget.release(self.who, less);
    }

    /// Bytes held.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        self.budget.release(self.who, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit: u64) -> (Arc<RequestBudget>, Arc<Metrics>) {
        let m = Arc::new(Metrics::default());
        (RequestBudget::new(limit, m.clone()), m)
    }

    #[test]
    fn bytes_are_held_until_dropped_and_a_request_past_the_limit_is_refused() {
        let (b, m) = budget(100);
        let a = b.try_reserve(None, 60).unwrap();
        let mut c = b.try_reserve(None, 40).unwrap();
        assert_eq!(b.held(), 100);
        assert_eq!(m.request_bytes_in_flight.load(Ordering::Relaxed), 100);
        let over = b.try_reserve(None, 1).unwrap_err();
        assert_eq!(
            over,
            OverRequestBudget {
                held: 100,
                request: 1,
                limit: 100,
                scope: Scope::Broker,
                budget: 100,
            }
        );
        let text = over.to_string();
        assert!(text.starts_with("TOO_MANY_REQUESTS"), "{text}");
        assert!(text.contains("max_inflight_request_bytes of 100"), "{text}");
        assert_eq!(m.over_limit_count(LIMIT_NAME), 1);
        assert!(
            b.fits(None, 1).is_err(),
            "a look that does not fit is refused"
        );
        assert_eq!(m.over_limit_count(LIMIT_NAME), 2);
        drop(a);
        assert_eq!(b.held(), 40);
        c.grow(50).unwrap();
        assert_eq!(c.bytes(), 90);
        let e = c.grow(11).unwrap_err();
        assert_eq!(e.request, 101, "the refusal names the whole request");
        assert_eq!(e.held, 0, "and what the others hold");
        assert_eq!(c.bytes(), 90, "a refused growth keeps what was held");
        c.shrink(30);
        assert_eq!((c.bytes(), b.held()), (60, 60));
        assert_eq!(m.over_limit_count(LIMIT_NAME), 3);
        drop(c);
        assert_eq!(b.held(), 0);
        assert_eq!(m.request_bytes_in_flight.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn one_connection_and_one_address_hold_at_most_their_share() {
        let m = Arc::new(Metrics::default());
        // 800 bytes: an address may hold 200, a connection 100 (the largest request: 60).
        let b = RequestBudget::shared(800, 60, m.clone());
        assert_eq!(b.shares(), (200, 100));
        let conn = |ip: [u8; 4], port| Some(SocketAddr::from((ip, port)));
        let (a1, a2, a3) = (
            conn([10, 0, 0, 1], 1),
            conn([10, 0, 0, 1], 2),
            conn([10, 0, 0, 1], 3),
        );
        let mut h = vec![b.try_reserve(a1, 100).unwrap()];
        let e = b.try_reserve(a1, 1).unwrap_err();
        assert_eq!((e.scope, e.held, e.limit), (Scope::Connection, 100, 100));
        assert!(
            e.to_string()
                .contains("one connection may hold (1/8 of its max_inflight_request_bytes of 800)"),
            "{e}"
        );
        h.push(b.try_reserve(a2, 100).unwrap());
        let e = b.try_reserve(a3, 1).unwrap_err();
        let ip: IpAddr = [10, 0, 0, 1].into();
        assert_eq!((e.scope, e.held, e.limit), (Scope::Peer(ip), 200, 200));
        assert!(e.to_string().contains("from 10.0.0.1"), "{e}");
        assert_eq!(b.held_by_peer(ip), 200);
        // Others are served: the address's share is not the broker's.
        for ip in [[10, 0, 0, 2], [10, 0, 0, 3]] {
            for port in 1..=2 {
                h.push(b.try_reserve(conn(ip, port), 100).unwrap());
            }
        }
        h.push(b.try_reserve(conn([10, 0, 0, 5], 1), 100).unwrap());
        h.push(b.try_reserve(None, 100).unwrap());
        assert_eq!(b.held(), 800);
        let e = b.try_reserve(conn([10, 0, 0, 4], 1), 1).unwrap_err();
        assert_eq!(e.scope, Scope::Broker);
        assert_eq!(b.holders(), (4, 7));
        drop(h);
        assert_eq!(
            (b.held(), b.holders()),
            (0, (0, 0)),
            "nothing kept per holder"
        );
        // Shares never go below the largest request, nor above the budget.
        assert_eq!(RequestBudget::shared(100, 60, m.clone()).shares(), (60, 60));
        assert_eq!(RequestBudget::shared(100, 200, m).shares(), (100, 100));
    }

    #[tokio::test]
    async fn reserve_waits_for_room_and_takes_an_oversized_request_alone() {
        let (b, m) = budget(100);
        let a = b.try_reserve(None, 90).unwrap();
        let b2 = b.clone();
        let waiting = tokio::spawn(async move { b2.reserve(None, 20).await.bytes() });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "20 bytes do not fit next to 90");
        drop(a);
        assert_eq!(waiting.await.unwrap(), 20);
        assert_eq!(b.held(), 0);
        // Larger than the whole budget: taken once nothing else is held, never refused.
        let big = b.reserve(None, 500).await;
        assert_eq!(b.held(), 500);
        assert!(b.try_reserve(None, 1).is_err());
        drop(big);
        assert_eq!(b.held(), 0);
        assert_eq!(m.request_bytes_in_flight.load(Ordering::Relaxed), 0);
    }
}
