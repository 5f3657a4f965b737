//! rocklet-python: the Rocklet engine embedded in Python (`rocklet._rocklet`).
//!
//! Thin by design (../shared/STYLE.md §5): `broker.rs` holds the wrapper types and the host
//! clock driver, `convert.rs` every conversion, `error.rs` the mapping to exceptions. What
//! is idiomatic Python lives in Python (`python/rocklet/`): the exception hierarchy
//! (`_errors.py`), the cold value types (`_types.py`), checker calls, logging, batch items
//! and config values (`_support.py`). Every decision about messages, transactions and time is
//! the core's.

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
    m.add_class::<types::PyReceived>()?;
    error::register(m)?;
    convert::register(m)?;
    // Same methods by a second name (`with broker.transaction(...) as tx`, `tx.transaction_id`).
    for (class, alias, name) in [
        ("Broker", "transaction", "prepare"),
        ("Transaction", "transaction_id", "id"),
    ] {
        let c = m.getattr(class)?;
        c.setattr(alias, c.getattr(name)?)?;
    }
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
