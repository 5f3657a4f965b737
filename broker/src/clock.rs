//! The host's clock. The core never reads one: the broker passes it `now` from here, so
//! tests can run the whole broker on a clock they move by hand.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rocklet_core::Millis;

/// Milliseconds since the Unix epoch (RocketMQ's delivery timestamps are absolute times).
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Now, in ms since the Unix epoch.
    fn now_ms(&self) -> Millis;
}

/// The system clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as Millis)
    }
}

/// A clock that only moves when told to (for tests). Clones share the time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock at `ms`.
    #[must_use]
    pub fn new(ms: Millis) -> Self {
        ManualClock(Arc::new(AtomicU64::new(ms)))
    }
    /// Moves the clock forward.
    pub fn advance(&self, ms: Millis) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}
