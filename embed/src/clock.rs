//! Where `now` comes from.

use rocklet_core::Millis;

/// A clock: a manual one moves only when the host says so ([`Clock::move_to`]); a host
/// clock reads real time and refuses to be moved.
pub trait Clock: core::fmt::Debug {
    /// The reading, in ms.
    fn now(&self) -> Millis;
    /// Moves a manual clock forward to `t` (never backwards) and answers `true`; a host
    /// clock answers `false` and stays as it is.
    fn move_to(&mut self, t: Millis) -> bool;
    /// Whether time moves only by [`Clock::move_to`].
    fn is_manual(&self) -> bool;
}

/// Time that moves only when told (tests, simulations, the wasm playground).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ManualClock(pub Millis);

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0
    }
    fn move_to(&mut self, t: Millis) -> bool {
        self.0 = self.0.max(t);
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
    fn move_to(&mut self, _t: Millis) -> bool {
        false
    }
    fn is_manual(&self) -> bool {
        false
    }
}

/// A manual clock or a host clock `H`, chosen when the broker opens.
#[derive(Clone, Copy, Debug)]
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
    fn move_to(&mut self, t: Millis) -> bool {
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
