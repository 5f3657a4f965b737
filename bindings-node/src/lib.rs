//! rocklet-node: the npm package `rocklet`, a thin napi binding of rocklet-core.
//!
//! - [`broker`]: `JsBroker`, exported as the native `Broker`.
//! - [`convert`]: every conversion between JS values and core types.
//! - [`error`]: the `RockletError` class hierarchy and the mapping of every failure to it.
//!
//! The JS wrapper (`index.js`, `index.mjs`) adds async sugar on top: checkers per producer
//! group, `transaction()`, `advance()` / `runUntilIdle()` for the manual clock, the system
//! clock's timer and `subscribe()`.

mod broker;
mod convert;
mod error;

use napi::bindgen_prelude::Object;
use napi::Env;
use napi_derive::napi;

/// The error classes (`RockletError` and its subclasses) of this JS environment.
#[napi]
pub fn error_classes(env: &Env) -> napi::Result<Object<'_>> {
    error::classes(env)
}
