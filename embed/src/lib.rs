//! The embedding layer the Rocklet bindings share (Python, Node, wasm): everything between
//! the sans-IO core and a language's values, written once.
//!
//! - [`Clock`]: where `now` comes from — a [`ManualClock`] that moves only when told, or the
//!   host's clock ([`SystemClock`] with the `std` feature); [`AnyClock`] picks one at run time.
//! - [`Engine`]: one core broker and its clock. It runs requests ([`Engine::execute`], or
//!   [`Engine::submit`] + [`Engine::take_reply`] for hosts that group-commit), drains
//!   `poll_output` after every call into queues of checks, availability notices and trace
//!   events, steps the manual clock timer by timer ([`Engine::step`]) and fires what is due on
//!   the host clock ([`Engine::fire_due`]).
//! - [`Drive`]: advance / run-until-idle — steps the clock and hands out, between steps, the
//!   checks that step produced, so each is answered at its own time. The binding calls its
//!   language's checker (which may call the broker again: nothing is borrowed meanwhile) and
//!   feeds the answer back with [`Engine::answer`] (the core's `Resolution::from_str` reads
//!   what it said).
//! - [`Endpoint`] and the operations over it ([`send`], [`prepare`] and [`Transaction`],
//!   [`end`], [`pull`] across queues, [`receive`], [`ack`], ...), and [`Subscription`]: the
//!   same defaults and the same errors in every language. A host with its own locking (the
//!   Python binding) implements [`Endpoint`] over its lock.
//!
//! - `Shared` (feature `std`): a [`Engine`] behind a mutex for hosts called from many threads
//!   (Python): group commit under sync flush, the host-clock driver loop on a thread it
//!   joins at close, a caught panic that marks the broker broken; the checker registry and
//!   its dispatch (a failing checker answered Unknown), manual drives with each step's checks
//!   answered in between, a subscription that waits, and an [`Endpoint`] that releases the
//!   binding's own lock (`Release`: Python's GIL) around every call.
//! - [`Subscriptions`] and [`Driving`]: open subscriptions by id and a drive run a step at a
//!   time, for a binding whose loops live in its language (Node).
//! - [`open`] (feature `std`): a broker on the core's file or memory storage, on a manual
//!   clock or the system's (what Python and Node open).
//! - [`arg`]: the range checks of whole-number arguments, one text for every binding.
//! - [`config`]: the broker's configuration from JSON values by key, in the host's naming,
//!   errors naming the key.
//! - [`input`] and [`view`]: the plain shapes of what JS objects give (a message, a pull, a
//!   receive) and get (every reply, output and introspection result), as serde types, so
//!   the names, defaults and error texts are decided once.
//!
//! Names: the *host* is what embeds the core (a binding, the broker): a host clock, a host's
//! failure ([`Fail::Host`]). The core's `record::Host` is an address (RocketMQ's born and
//! store hosts); the driven broker here is an [`Engine`]. [`Fail`] is this layer's error; the
//! bindings' own are `PyFail` and `JsFail`, as their brokers are `PyBroker` and `JsBroker`.
//!
//! `#![no_std]` + `alloc`: the wasm binding uses it as it is.

#![no_std]
#![warn(clippy::std_instead_of_core, clippy::alloc_instead_of_core)]

extern crate alloc;
#[cfg(any(feature = "std", test))]
extern crate std;

pub mod arg;
mod clock;
pub mod config;
mod engine;
pub mod input;
#[cfg(feature = "std")]
pub mod open;
mod ops;
#[cfg(feature = "std")]
mod shared;
mod subscription;
pub mod view;

#[cfg(test)]
mod tests;

#[cfg(feature = "std")]
pub use clock::SystemClock;
pub use clock::{AnyClock, Clock, ManualClock};
pub use engine::{Checkers, Drive, Driving, Engine};
pub use ops::{
    ack, change_invisible, commit_offset, end, forward_to_dead_letter, prepare, pull, receive,
    send, send_back, send_one, Ended, Endpoint, PullArgs, Pulled, QueueRead, ReceiveArgs,
    Transaction,
};
#[cfg(feature = "std")]
pub use shared::{
    panic_text, CheckerError, CheckerFailed, NoLock, Release, Shared, SharedEp, SharedFail,
};
pub use subscription::{Subscription, Subscriptions};

use alloc::string::String;
use rocklet_core::ClientError;

/// Why a call failed. `H` is what the host fails with (for [`Engine`]: the core's
/// [`rocklet_core::Error`]). Exhaustive on purpose: a binding maps every variant, so a new
/// one fails its build until it is given a class and a code.
#[derive(Debug)]
pub enum Fail<H> {
    /// The caller's mistake, as the core (or this layer, for the same mistake) answers it:
    /// nothing changed.
    Client(ClientError),
    /// The host's own failure (storage, a failed sync, a broker that stopped).
    Host(H),
    /// The broker was closed (the text says how).
    Closed(&'static str),
    /// The call needs the other clock (the text names the call and the clock).
    WrongClock(&'static str),
    /// An argument this layer refuses before the core sees it; the text names it.
    Argument(String),
    /// A reply of another kind than the request's: a bug.
    Unexpected(String),
}

impl<H> From<ClientError> for Fail<H> {
    fn from(e: ClientError) -> Self {
        Fail::Client(e)
    }
}

impl<H: core::fmt::Display> core::fmt::Display for Fail<H> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Fail::Client(e) => write!(f, "{e}"),
            Fail::Host(e) => write!(f, "{e}"),
            Fail::Closed(why) | Fail::WrongClock(why) => f.write_str(why),
            Fail::Argument(why) => write!(f, "invalid argument: {why}"),
            Fail::Unexpected(why) => write!(f, "internal error: {why}"),
        }
    }
}

impl<H> Fail<H> {
    /// The same failure with another host error type.
    pub fn map_host<G>(self, f: impl FnOnce(H) -> G) -> Fail<G> {
        match self {
            Fail::Client(e) => Fail::Client(e),
            Fail::Host(e) => Fail::Host(f(e)),
            Fail::Closed(w) => Fail::Closed(w),
            Fail::WrongClock(w) => Fail::WrongClock(w),
            Fail::Argument(w) => Fail::Argument(w),
            Fail::Unexpected(w) => Fail::Unexpected(w),
        }
    }
}

/// What kind of failure a call met: each binding maps the kinds to its error classes in one
/// table, and [`ErrorKind::code`] is the stable code they all carry (Python, Node, wasm: the
/// one table of codes, also in `tests/vectors/error-codes.json`, which every binding's tests
/// check against what it raises). Exhaustive on purpose, as [`Fail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The caller's mistake; the code is the [`ClientError`]'s own.
    Client,
    /// An argument this layer refused (`INVALID_ARGUMENT`).
    Argument,
    /// A configuration that cannot work (`INVALID_CONFIG`).
    Config,
    /// The storage failed (`STORAGE`).
    Storage,
    /// The log holds damage recovery will not cut by itself (`CORRUPTED`).
    Corrupted,
    /// A record would not fit the format (`ENCODE`).
    Encode,
    /// A sync failed earlier: the broker takes nothing more (`FAILED`).
    Failed,
    /// The broker was closed (`BROKER_CLOSED`).
    Closed,
    /// The call needs the other clock (`WRONG_CLOCK`).
    WrongClock,
    /// A bug (`INTERNAL`).
    Internal,
}

impl ErrorKind {
    /// The kind of a core error.
    pub fn of<E>(e: &rocklet_core::Error<E>) -> Self {
        match e {
            rocklet_core::Error::Storage(_) => ErrorKind::Storage,
            rocklet_core::Error::Config(_) => ErrorKind::Config,
            rocklet_core::Error::Corrupted { .. } => ErrorKind::Corrupted,
            rocklet_core::Error::Encode(_) => ErrorKind::Encode,
            rocklet_core::Error::Failed { .. } => ErrorKind::Failed,
        }
    }

    /// The stable code (for [`ErrorKind::Client`] the client error has its own).
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Client => "CLIENT_ERROR",
            ErrorKind::Argument => "INVALID_ARGUMENT",
            ErrorKind::Config => "INVALID_CONFIG",
            ErrorKind::Storage => "STORAGE",
            ErrorKind::Corrupted => "CORRUPTED",
            ErrorKind::Encode => "ENCODE",
            ErrorKind::Failed => "FAILED",
            ErrorKind::Closed => "BROKER_CLOSED",
            ErrorKind::WrongClock => "WRONG_CLOCK",
            ErrorKind::Internal => "INTERNAL",
        }
    }
}

impl<E> Fail<rocklet_core::Error<E>> {
    /// The kind of this failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Fail::Client(_) => ErrorKind::Client,
            Fail::Host(e) => ErrorKind::of(e),
            Fail::Closed(_) => ErrorKind::Closed,
            Fail::WrongClock(_) => ErrorKind::WrongClock,
            Fail::Argument(_) => ErrorKind::Argument,
            Fail::Unexpected(_) => ErrorKind::Internal,
        }
    }
}
