//! Fuzz targets of rocklet-core (run with cargo-fuzz; see `tests/ci/fuzz.sh`).
//!
//! - [`checks`]: the decoder and recovery targets, over plain bytes. The file has no
//!   dependency but rocklet-core, so the conformance crate's `regressions` test includes it
//!   (`#[path]`) and replays `tests/vectors/regressions/<target>/*` through the same code.
//! - [`model`]: the step-sequence target against a small reference model.
//! - [`remoting`] and [`grpc`]: the protocol targets, through the broker's request handlers
//!   against an in-memory broker per input ([`host`]).
pub mod checks;
pub mod grpc;
pub mod host;
pub mod model;
pub mod remoting;
