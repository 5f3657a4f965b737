//! rocklet-python: the Rocklet engine embedded in Python (`rocklet._rocklet`).
//!
//! Thin by design (../shared/STYLE.md §5): `broker.rs` holds the wrapper types and the host
//! clock driver, `convert.rs` every conversion, `error.rs` the mapping to the
//! exception hierarchy (Python's, like the cold value types: `rocklet/_errors.py`, `_types.py`). Every
//! decision about messages, transactions and time is the core's.

use pyo3::prelude::*;

mod broker;
mod convert;
mod error;
mod types;

/// The native module: `Broker` and friends, and the exception hierarchy.
#[pymodule]
fn _rocklet(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<broker::PyBroker>()?;
    m.add_class::<broker::PyTransaction>()?;
    m.add_class::<broker::PySubscription>()?;
    m.add_class::<types::PyMessage>()?;
    m.add_class::<types::PySendResult>()?;
    error::register(m)?;
    convert::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
