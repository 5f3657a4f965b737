//! Every conversion between JS values and core types, in one place.
//!
//! JS → core: plain objects read with serde-wasm-bindgen into the embedding layer's inputs
//! (`rocklet_embed::input`), unknown keys refused. Core → JS: the embedding layer's views
//! (`rocklet_embed::view`), serialized as plain objects (camelCase keys, `null` for absent
//! values, `Uint8Array` for bytes, numbers for milliseconds and offsets).

use alloc::string::String;

use alloc::vec::Vec;
use rocklet_core::{ClientError, Config, NewMessage, ReceiptHandle, Resolution, TxnId};
use rocklet_embed::input::{EndOptions, MessageInput, PullInput, ReceiveInput};
use rocklet_embed::view;
use serde::{de, Deserialize, Serialize};
use wasm_bindgen::{JsCast, JsValue};

use crate::error;

// ---- helpers ------------------------------------------------------------------------------

/// Serializes a mirror struct as a plain JS object.
pub fn to_js<T: Serialize + ?Sized>(value: &T) -> Result<JsValue, JsValue> {
    let ser = serde_wasm_bindgen::Serializer::new()
        .serialize_maps_as_objects(true)
        .serialize_missing_as_null(true);
    value.serialize(&ser).map_err(|e| {
        error::js_error(
            rocklet_embed::ErrorKind::Internal.code(),
            &alloc::format!("cannot convert to JS: {e}"),
        )
    })
}

fn from_js<T: de::DeserializeOwned>(what: &str, value: JsValue) -> Result<T, JsValue> {
    known_keys::<T>(&value).map_err(|e| error::argument(what, e))?;
    serde_wasm_bindgen::from_value(value).map_err(|e| error::argument(what, e))
}

/// serde-wasm-bindgen reads only the fields a struct declares, so a misspelt key would be
/// silently ignored: refuse keys of a plain object (or of each object of an array) that the
/// target struct does not have.
fn known_keys<'de, T: Deserialize<'de>>(value: &JsValue) -> Result<(), String> {
    let check = |fields: &[&str], v: &JsValue| -> Result<(), String> {
        if fields.is_empty() || !v.is_object() || js_sys::Array::is_array(v) {
            return Ok(());
        }
        for key in js_sys::Object::keys::<JsValue>(v.unchecked_ref()).iter() {
            let key = key.as_string().unwrap_or_default();
            if !fields.contains(&key.as_str()) {
                return Err(alloc::format!(
                    "unknown field `{key}`, expected one of {}",
                    fields.join(", ")
                ));
            }
        }
        Ok(())
    };
    check(rocklet_embed::input::field_names::<T>(), value)
}

/// Milliseconds (or an offset) from a JS number: finite, whole, not negative.
pub fn millis(what: &str, v: f64) -> Result<u64, JsValue> {
    rocklet_embed::arg::number(what, v, u64::MAX).map_err(|e| {
        error::js_error(
            rocklet_embed::ErrorKind::Argument.code(),
            &alloc::format!("invalid argument: {e}"),
        )
    })
}

/// A u64 for JS (milliseconds and offsets stay far below 2^53).
#[allow(clippy::cast_precision_loss)]
pub fn number(v: u64) -> f64 {
    v as f64
}

/// A transaction id from its 16 hex digits (`MALFORMED_TRANSACTION_ID` otherwise).
pub fn txn_id(s: &str) -> Result<TxnId, JsValue> {
    s.parse().map_err(|e: ClientError| error::client(&e))
}

/// `commit`, `rollback` or `unknown`.
pub fn resolution(s: &str) -> Result<Resolution, JsValue> {
    s.parse().map_err(|e: ClientError| error::client(&e))
}

/// A receipt handle from its string form.
pub fn handle(s: &str) -> Result<ReceiptHandle, JsValue> {
    s.parse().map_err(|e: ClientError| error::client(&e))
}

// ---- inputs -------------------------------------------------------------------------------

/// The broker configuration: a JSON string or a plain object with the core `Config`'s
/// snake_case fields; absent fields keep the core's defaults (RocketMQ's).
pub fn config(value: JsValue) -> Result<Config, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(Config::default());
    }
    let value = match value.as_string() {
        Some(json) => js_sys::JSON::parse(&json)
            .map_err(|_| error::config("the config string is not JSON"))?,
        None => value,
    };
    known_keys::<Config>(&value).map_err(error::config)?;
    serde_wasm_bindgen::from_value(value).map_err(error::config)
}

/// `{topic, body, tag?, keys?, properties?, queueId?, messageId?, messageGroup?, delayLevel?,
/// deliverAtMs?, delayMs?, bornTimestamp?, flag?}`.
pub fn message(value: JsValue) -> Result<NewMessage, JsValue> {
    from_js::<MessageInput>("message", value)?
        .into_message()
        .map_err(|e| error::argument("message", e))
}

/// An array of messages.
pub fn messages(value: JsValue) -> Result<Vec<NewMessage>, JsValue> {
    if !js_sys::Array::is_array(&value) {
        return Err(error::argument("messages", "expected an array of messages"));
    }
    js_sys::Array::from(&value).iter().map(message).collect()
}

/// `{group, topic, queueId?, offset?, max?, tags?, autoCommit?}`.
pub fn pull_args(value: JsValue) -> Result<rocklet_embed::PullArgs, JsValue> {
    Ok(from_js::<PullInput>("pull", value)?.into_args())
}

/// `{group, topic, invisibleMs, queueId?, max?, tags?}`.
pub fn receive_args(value: JsValue) -> Result<rocklet_embed::ReceiveArgs, JsValue> {
    Ok(from_js::<ReceiveInput>("receive", value)?.into_args())
}

/// Options of `end`: `{fromCheck?, group?}`.
pub fn end_options(value: JsValue) -> Result<EndOptions, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(EndOptions::default());
    }
    from_js("end options", value)
}

/// A commit-log record decoded field by field (`CORRUPTED` when the bytes are not one).
pub fn decoded_record(offset: u64, bytes: &[u8]) -> Result<JsValue, JsValue> {
    let r = view::decoded_record(offset, bytes)
        .map_err(|e| error::js_error(rocklet_embed::ErrorKind::Corrupted.code(), &e))?;
    to_js(&r)
}
