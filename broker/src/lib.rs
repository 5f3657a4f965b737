//! rocklet-broker (being written)
