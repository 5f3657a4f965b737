//! # rocklet-wasm
//!
//! The rocklet core compiled to WebAssembly behind wasm-bindgen, for browsers and Node.
//!
//! Thin by design (STYLE.md §5): memory storage only, no clock of its own (the page owns
//! time: it calls `advanceTo(ms)` / `stepToNextEvent()`), no timers, no defaults. Every
//! conversion between JS values and core types is in [`convert`], every error mapping in
//! [`error`]; the wrapper in [`broker`] is exported to JS as `Broker`.
//!
//! ```js
//! import init, { Broker } from './pkg/rocklet_wasm.js';
//! await init();
//! const b = new Broker({ trace: true });
//! b.setProducerOnline('G', true);
//! const { txn } = b.prepare('G', { topic: 'Orders', body: 'order 1' });
//! b.stepToNextEvent();                  // transaction_timeout_ms later: a check
//! for (const out of b.drain()) if (out.type === 'check') b.end(out.txn, 'commit', { fromCheck: true });
//! ```

extern crate alloc;

pub mod broker;
pub mod convert;
pub mod error;

pub use broker::WasmBroker;

use wasm_bindgen::prelude::*;

/// Decodes one commit-log record (RocketMQ layout) field by field, with each field's byte
/// offset; throws `CORRUPTED` if the bytes are not a valid record.
#[wasm_bindgen(js_name = decodeRecord, unchecked_return_type = "DecodedRecord")]
pub fn decode_record(bytes: &[u8]) -> Result<JsValue, JsValue> {
    convert::decoded_record(0, bytes)
}

/// RocketMQ's reserved topic names as the core spells them, for pages that label lanes.
#[wasm_bindgen(js_name = systemTopics, unchecked_return_type = "Record<string, string>")]
pub fn system_topics() -> Result<JsValue, JsValue> {
    convert::to_js(&rocklet_embed::view::system_topics())
}
