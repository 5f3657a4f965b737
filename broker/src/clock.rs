//! The host's clock, defined once in [`rocklet_embed`] (the layer every host shares): the
//! core never reads one, the broker passes it `now` from an `Arc<dyn Clock>` its tasks
//! share, so tests can run the whole broker on a [`ManualClock`] they move by hand.

pub use rocklet_embed::{Clock, ManualClock, SystemClock};
