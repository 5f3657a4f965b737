//! The broker-wide budget of ReceiveMessage response bytes in flight: reserved before a pop,
//! charged with the response's size, released when its stream is dropped.

use super::*;

/// The broker-wide budget of ReceiveMessage response bytes in flight
/// ([`BrokerConfig::max_inflight_receive_bytes`]).
///
/// A receive first [reserves](ReceiveBudget::reserve) room for the messages it may pop (the
/// largest message size each, so receives popping at the same time cannot together overshoot
/// the budget by more than one response), then turns the reservation into a [`Charge`] of the
/// response's real size, held by the response stream until it is dropped. A receive that
/// starts while the charged bytes are at or above the limit is refused; one response may go
/// past the limit, so a message larger than what is left is still delivered.
#[derive(Debug)]
pub struct ReceiveBudget {
    limit: u64,
    /// Reserved per message a pop may return.
    per_message: u64,
    /// The most one pop returns, whatever its count (plus [`PROTO_PER_MESSAGE`] each).
    per_pop: u64,
    state: Mutex<BudgetState>,
    /// Wakes receives waiting for room while other pops are in progress.
    freed: Notify,
    metrics: Arc<Metrics>,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// Bytes of responses built and not yet dropped.
    charged: u64,
    /// Bytes reserved by pops in progress.
    reserved: u64,
}

/// A receive refused because the budget is used up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    pub in_flight: u64,
    pub limit: u64,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TOO_MANY_REQUESTS: {} bytes of ReceiveMessage responses are waiting for their clients to read them, at or above the broker's max_inflight_receive_bytes of {}; retry later (nothing was received), or raise `max_inflight_receive_bytes` in the broker's config file",
            self.in_flight, self.limit
        )
    }
}

impl ReceiveBudget {
    /// A budget of `limit` bytes, reserving `per_message` for each message a pop may return
    /// and at most `per_pop` (plus a little encoding room per message) for one pop.
    #[must_use]
    pub fn new(limit: u64, per_message: u64, per_pop: u64, metrics: Arc<Metrics>) -> Self {
        ReceiveBudget {
            limit,
            per_message: per_message.max(1),
            per_pop,
            state: Mutex::new(BudgetState::default()),
            freed: Notify::new(),
            metrics,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        // The state is two counters updated under the lock: still right after a panic.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Bytes of responses in flight.
    #[must_use]
    pub fn in_flight(&self) -> u64 {
        self.state().charged
    }

    /// Room to pop up to `max` messages: `Err` when the charged bytes are at or above the
    /// limit. The reservation may allow fewer messages than `max` (at least one) when other
    /// pops hold the rest; with no room for one, it waits until a pop in progress ends.
    pub async fn reserve(self: &Arc<Self>, max: u32) -> Result<Reservation, OverBudget> {
        loop {
            let freed = self.freed.notified();
            {
                let mut s = self.state();
                if s.charged >= self.limit {
                    return Err(OverBudget {
                        in_flight: s.charged,
                        limit: self.limit,
                    });
                }
                let room = self
                    .limit
                    .saturating_sub(s.charged.saturating_add(s.reserved));
                let want = max.max(1);
                let fits = if self.bytes_for(want) <= room {
                    want
                } else {
                    (room / self.per_message).min(u64::from(want)) as u32
                };
                // With no other pop in progress, one message always goes (never starved).
                let count = if fits == 0 && s.reserved == 0 {
                    1
                } else {
                    fits
                };
                if count > 0 {
                    let bytes = self.bytes_for(count);
                    s.reserved += bytes;
                    return Ok(Reservation {
                        budget: self.clone(),
                        bytes,
                        count,
                    });
                }
            }
            freed.await;
        }
    }

    /// Room a pop of up to `count` messages needs.
    fn bytes_for(&self, count: u32) -> u64 {
        let count = u64::from(count);
        (count * self.per_message).min(self.per_pop.saturating_add(count * PROTO_PER_MESSAGE))
    }

    fn publish(&self, s: &BudgetState) {
        self.metrics
            .receive_bytes_in_flight
            .store(s.charged, Ordering::Relaxed);
    }
}

/// Room reserved for one pop; released when dropped unless [charged](Reservation::charge).
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<ReceiveBudget>,
    bytes: u64,
    count: u32,
}

impl Reservation {
    /// How many messages the pop may return.
    #[must_use]
    pub fn count(&self) -> u32 {
        self.count
    }

    /// Turns the reservation into a charge of the response's real size.
    #[must_use]
    pub fn charge(mut self, bytes: u64) -> Charge {
        let budget = self.budget.clone();
        {
            let mut s = budget.state();
            s.reserved -= std::mem::take(&mut self.bytes);
            s.charged += bytes;
            budget.publish(&s);
        }
        budget.freed.notify_waiters();
        Charge { budget, bytes }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.state().reserved -= self.bytes;
            self.budget.freed.notify_waiters();
        }
    }
}

/// Bytes of one response in flight; released when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<ReceiveBudget>,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        {
            let mut s = self.budget.state();
            s.charged -= self.bytes;
            self.budget.publish(&s);
        }
        self.budget.freed.notify_waiters();
    }
}

/// A response stream holding its budget charge until tonic drops it.
pub(super) struct Charged<S> {
    pub(super) inner: S,
    pub(super) _charge: Option<Charge>,
}

impl<S: Stream + Unpin> Stream for Charged<S> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        Pin::new(&mut self.get_mut().inner).poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(limit: u64, per_message: u64) -> (Arc<ReceiveBudget>, Arc<Metrics>) {
        let m = Arc::new(Metrics::default());
        (
            Arc::new(ReceiveBudget::new(limit, per_message, u64::MAX, m.clone())),
            m,
        )
    }

    /// With the core's transfer cap, a pop of many messages reserves what one pop can
    /// return, not the largest message times the count: concurrent receives of a batch
    /// size of 32 are not serialized by a budget of a few responses.
    #[tokio::test]
    async fn a_pop_reserves_at_most_what_the_transfer_cap_lets_it_return() {
        let m = Arc::new(Metrics::default());
        let mib = 1u64 << 20;
        let b = Arc::new(ReceiveBudget::new(64 * mib, 4 * mib, 4 * mib, m));
        let mut held = Vec::new();
        for _ in 0..15 {
            let r = b.reserve(32).await.unwrap();
            assert_eq!(r.count(), 32);
            held.push(r);
        }
        // 15 x (4 MiB + 32 KiB) reserved (by the largest message alone, one pop of 32 would
        // have reserved 130 MiB and the budget would have allowed none at once).
        assert_eq!(b.state().reserved, 15 * ((4 * mib) + 32 * 1024));
        drop(held);
        assert_eq!(b.state().reserved, 0);
    }

    #[tokio::test]
    async fn charges_count_until_dropped_and_a_receive_over_budget_is_refused() {
        let (b, m) = budget(100, 10);
        let r = b.reserve(32).await.unwrap();
        assert_eq!(r.count(), 10, "room for 100 bytes of 10-byte messages");
        let c1 = r.charge(60);
        assert_eq!(b.in_flight(), 60);
        assert_eq!(m.receive_bytes_in_flight.load(Ordering::Relaxed), 60);
        // 40 bytes left: 4 messages; the response may still come out larger (90 bytes).
        let r = b.reserve(32).await.unwrap();
        assert_eq!(r.count(), 4);
        let c2 = r.charge(90);
        assert_eq!(b.in_flight(), 150);
        let e = b.reserve(1).await.unwrap_err();
        assert_eq!(
            e,
            OverBudget {
                in_flight: 150,
                limit: 100
            }
        );
        let text = e.to_string();
        assert!(text.starts_with("TOO_MANY_REQUESTS"), "{text}");
        assert!(text.contains("max_inflight_receive_bytes"), "{text}");
        drop(c1);
        assert_eq!(b.in_flight(), 90);
        assert_eq!(m.receive_bytes_in_flight.load(Ordering::Relaxed), 90);
        assert_eq!(b.reserve(32).await.unwrap().count(), 1);
        drop(c2);
        assert_eq!(b.in_flight(), 0);
        assert_eq!(m.receive_bytes_in_flight.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_message_larger_than_the_budget_still_goes_and_pops_in_progress_are_waited_for() {
        let (b, _) = budget(5, 8);
        // No room for one 8-byte message, but nothing else is popping: one goes.
        let first = b.reserve(32).await.unwrap();
        assert_eq!(first.count(), 1);
        // A second pop waits for the first rather than overshooting the budget with it.
        let b2 = b.clone();
        let mut second = tokio::spawn(async move { b2.reserve(32).await.map(|r| r.count()) });
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut second)
                .await
                .is_err(),
            "the second pop must wait while the first holds the room"
        );
        // The first pop found nothing: its reservation goes back and the second proceeds.
        drop(first);
        let got = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("woken when the reservation was released")
            .unwrap();
        assert_eq!(got, Ok(1));
        // A charged response over the limit refuses the next receive.
        let c = b.reserve(1).await.unwrap().charge(8);
        assert!(b.reserve(1).await.is_err());
        drop(c);
        assert!(b.reserve(1).await.is_ok());
    }
}
