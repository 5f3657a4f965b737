//! rocklet-wasm (being written)
