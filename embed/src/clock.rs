//! Where `now` comes from: the one clock of every host (the bindings through [`crate::Engine`],
//! the broker as `Arc<dyn Clock>` shared by its tasks). The core never reads one; its host
//! passes it `now` from here, so tests and simulations can run on a clock moved by hand.

use alloc::sync::Arc;
use core::sync::atomic::{AtomicU64, Ordering};

use rocklet_core::Millis;

/// A clock: a manual one moves only when told ([`Clock::move_to`], [`ManualClock::advance`]);
/// a host clock reads real time and refuses to be moved. Shared by reference across threads
/// (the broker's tasks hold an `Arc<dyn Clock>`), so a manual clock moves through `&self`.
pub trait Clock: core::fmt::Debug + Send + Sync {
    /// The reading, in ms (since the Unix epoch for the system clock: RocketMQ's delivery
    /// timestamps are absolute times).
    fn now(&self) -> Millis;
    /// Moves a manual clock forward to `t` (never backwards) and answers `true`; a host
    /// clock answers `false` and stays as it is.
    fn move_to(&self, t: Millis) -> bool {
        let _ = t;
        false
    }
    /// Whether time moves only by [`Clock::move_to`].
    fn is_manual(&self) -> bool {
        false
    }
}

/// Time that moves only when told (tests, simulations, the wasm playground). Clones share
/// the time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock at `ms`.
    #[must_use]
    pub fn new(ms: Millis) -> Self {
        ManualClock(Arc::new(AtomicU64::new(ms)))
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: Millis) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
    fn move_to(&self, t: Millis) -> bool {
        self.0.fetch_max(t, Ordering::SeqCst);
        true
    }
    fn is_manual(&self) -> bool {
        true
    }
}

/// The system's wall clock (ms since the Unix epoch).
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

#[cfg(feature = "std")]
impl Clock for SystemClock {
    fn now(&self) -> Millis {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

/// A manual clock or a host clock `H`, chosen when the broker opens.
#[derive(Clone, Debug)]
pub enum AnyClock<H> {
    Manual(ManualClock),
    Host(H),
}

impl<H: Clock> Clock for AnyClock<H> {
    fn now(&self) -> Millis {
        match self {
            AnyClock::Manual(c) => c.now(),
            AnyClock::Host(c) => c.now(),
        }
    }
    fn move_to(&self, t: Millis) -> bool {
        match self {
            AnyClock::Manual(c) => c.move_to(t),
            AnyClock::Host(c) => c.move_to(t),
        }
    }
    fn is_manual(&self) -> bool {
        match self {
            AnyClock::Manual(c) => c.is_manual(),
            AnyClock::Host(c) => c.is_manual(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_forward_only_and_clones_share_it() {
        let c = ManualClock::new(10);
        let d = c.clone();
        assert!(c.move_to(50));
        assert!(c.move_to(20), "a manual clock accepts the move, and stays");
        d.advance(5);
        assert_eq!((c.now(), d.now()), (55, 55));
    }
}
