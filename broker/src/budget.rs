//! The broker-wide budget of request bytes held
//! ([`BrokerConfig::max_inflight_request_bytes`](crate::config::BrokerConfig)).
//!
//! Every limit per request (message and batch sizes, filters, names, headers) and per
//! connection (streams, unread answers) still lets many clients together make the broker
//! hold any amount: 10,000 connections each trickling a 9 MiB send hold 90 GB. A request
//! therefore [reserves](RequestBudget::try_reserve) the bytes it declares as soon as they are
//! known — a gRPC call its message length (the 5-byte prefix of its body), a remoting frame
//! its header and body lengths — and holds them ([`HeldBytes`]) until its handling ends
//! (answered, or the long poll that waited on it over). A request that would take the bytes
//! held past the limit is refused before its body is read: gRPC `TOO_MANY_REQUESTS`,
//! remoting `SYSTEM_BUSY`; RocketMQ clients back off and retry.
//!
//! The config keeps the limit at or above the largest request (see
//! [`BrokerConfig::validate`](crate::config::BrokerConfig::validate)), so any request can be
//! taken once the others are done.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use crate::metrics::Metrics;

/// The limit's name in the config, in refusals and in
/// `rocklet_requests_over_limit_total{limit=…}`.
pub const LIMIT_NAME: &str = "max_inflight_request_bytes";

/// The budget, shared by every listener.
#[derive(Debug)]
pub struct RequestBudget {
    limit: u64,
    held: AtomicU64,
    /// Wakes [`RequestBudget::reserve`] when bytes are released.
    freed: Notify,
    metrics: Arc<Metrics>,
}

/// A request refused because the bytes held would go past the budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverRequestBudget {
    /// Bytes held by other requests when this one came.
    pub held: u64,
    /// What this request declared.
    pub request: u64,
    pub limit: u64,
}

impl std::fmt::Display for OverRequestBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TOO_MANY_REQUESTS: the broker holds {} bytes of requests from its clients, and this one of {} bytes would take them past its {LIMIT_NAME} of {}; retry later (the request was not handled), or raise `{LIMIT_NAME}` in the broker's config file",
            self.held, self.request, self.limit
        )
    }
}

impl RequestBudget {
    /// A budget of `limit` bytes.
    #[must_use]
    pub fn new(limit: u64, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(RequestBudget {
            limit,
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

    /// Bytes held now.
    #[must_use]
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Adds `bytes` when they fit under the limit (or, with `alone`, when nothing else is
    /// held); `Err` (held now) when they do not.
    fn add(&self, bytes: u64, alone: bool) -> Result<(), u64> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes)
                    .filter(|&n| n <= self.limit || (alone && held == 0))
            })
            .map(|_| {
                self.metrics
                    .request_bytes_in_flight
                    .fetch_add(bytes, Ordering::Relaxed);
            })
    }

    fn release(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.held.fetch_sub(bytes, Ordering::AcqRel);
        self.metrics
            .request_bytes_in_flight
            .fetch_sub(bytes, Ordering::Relaxed);
        self.freed.notify_waiters();
    }

    /// Holds `bytes` for a request, or refuses it (counted under [`LIMIT_NAME`]) when the
    /// bytes held would go past the limit.
    pub fn try_reserve(self: &Arc<Self>, bytes: u64) -> Result<HeldBytes, OverRequestBudget> {
        match self.add(bytes, false) {
            Ok(()) => Ok(HeldBytes {
                budget: self.clone(),
                bytes,
            }),
            Err(held) => Err(self.refuse(held, bytes)),
        }
    }

    /// Holds `bytes`, waiting until they fit (for what must be read before a request can be
    /// answered at all: a remoting frame's header holds its opaque). Bytes above the limit
    /// are taken once nothing else is held.
    pub async fn reserve(self: &Arc<Self>, bytes: u64) -> HeldBytes {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            // Registered before looking, so a release between the look and the wait wakes it.
            freed.as_mut().enable();
            if self.add(bytes, true).is_ok() {
                return HeldBytes {
                    budget: self.clone(),
                    bytes,
                };
            }
            freed.await;
        }
    }

    fn refuse(&self, held: u64, request: u64) -> OverRequestBudget {
        self.metrics.over_limit(LIMIT_NAME);
        OverRequestBudget {
            held,
            request,
            limit: self.limit,
        }
    }
}

/// Bytes a request holds under the budget; released when dropped.
#[derive(Debug)]
pub struct HeldBytes {
    budget: Arc<RequestBudget>,
    bytes: u64,
}

impl HeldBytes {
    /// Holds `more` bytes too (a remoting body once its header was read), or refuses them
    /// (counted) and keeps what it held.
    pub fn grow(&mut self, more: u64) -> Result<(), OverRequestBudget> {
        match self.budget.add(more, false) {
            Ok(()) => {
                self.bytes += more;
                Ok(())
            }
            Err(held) => Err(self.budget.refuse(held, self.bytes + more)),
        }
    }

    /// Bytes held.
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
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
        let a = b.try_reserve(60).unwrap();
        let mut c = b.try_reserve(40).unwrap();
        assert_eq!(b.held(), 100);
        assert_eq!(m.request_bytes_in_flight.load(Ordering::Relaxed), 100);
        let over = b.try_reserve(1).unwrap_err();
        assert_eq!(
            over,
            OverRequestBudget {
                held: 100,
                request: 1,
                limit: 100
            }
        );
        let text = over.to_string();
        assert!(text.starts_with("TOO_MANY_REQUESTS"), "{text}");
        assert!(text.contains("max_inflight_request_bytes of 100"), "{text}");
        assert_eq!(m.over_limit_count(LIMIT_NAME), 1);
        drop(a);
        assert_eq!(b.held(), 40);
        c.grow(50).unwrap();
        assert_eq!(c.bytes(), 90);
        let e = c.grow(11).unwrap_err();
        assert_eq!(e.request, 101, "the refusal names the whole request");
        assert_eq!(c.bytes(), 90, "a refused growth keeps what was held");
        assert_eq!(m.over_limit_count(LIMIT_NAME), 2);
        drop(c);
        assert_eq!(b.held(), 0);
        assert_eq!(m.request_bytes_in_flight.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn reserve_waits_for_room_and_takes_an_oversized_request_alone() {
        let (b, m) = budget(100);
        let a = b.try_reserve(90).unwrap();
        let b2 = b.clone();
        let waiting = tokio::spawn(async move { b2.reserve(20).await.bytes() });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "20 bytes do not fit next to 90");
        drop(a);
        assert_eq!(waiting.await.unwrap(), 20);
        assert_eq!(b.held(), 0);
        // Larger than the whole budget: taken once nothing else is held, never refused.
        let big = b.reserve(500).await;
        assert_eq!(b.held(), 500);
        assert!(b.try_reserve(1).is_err());
        drop(big);
        assert_eq!(b.held(), 0);
        assert_eq!(m.request_bytes_in_flight.load(Ordering::Relaxed), 0);
    }
}
