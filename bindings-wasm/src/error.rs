//! Every error the binding throws: a JS `Error` named `RockletError` with a stable `code`.
//!
//! - a client's mistake ([`ClientError`]) keeps the core's code (`UNKNOWN_TRANSACTION`, …);
//! - a failure of the broker itself ([`Error`]) gets `STORAGE`, `INVALID_CONFIG`, `CORRUPTED`,
//!   `ENCODE` or `FAILED` (a sync failed earlier: the broker takes nothing more);
//! - a JS value the binding cannot read gets `INVALID_ARGUMENT` (the core's code for that).
//!
//! Every code but a client error's is [`ErrorKind::code`]: the one table of the three
//! bindings (`tests/vectors/error-codes.json`).

use core::fmt::Display;

use rocklet_core::{ClientError, Error};
use rocklet_embed::ErrorKind;
use wasm_bindgen::JsValue;

/// `new Error(message)` with `name = "RockletError"` and `code`.
pub fn js_error(code: &str, message: &str) -> JsValue {
    let e = js_sys::Error::new(message);
    e.set_name("RockletError");
    // Setting a property on a fresh Error object cannot fail.
    let _ = js_sys::Reflect::set(&e, &JsValue::from_str("code"), &JsValue::from_str(code));
    e.into()
}

/// A client's mistake, with the core's stable code.
pub fn client(e: &ClientError) -> JsValue {
    js_error(e.code(), &e.to_string())
}

/// A failure of the broker (not the client's).
pub fn core<E: Display>(e: &Error<E>) -> JsValue {
    js_error(ErrorKind::of(e).code(), &e.to_string())
}

/// A JS argument the binding cannot read.
pub fn argument(what: &str, why: impl Display) -> JsValue {
    js_error(
        ErrorKind::Argument.code(),
        &alloc::format!("invalid argument: {what}: {why}"),
    )
}

/// A configuration the binding cannot read (before the core could validate it).
pub fn config(why: impl Display) -> JsValue {
    js_error(
        ErrorKind::Config.code(),
        &alloc::format!("invalid config: {why}"),
    )
}

/// A failure of a call through the embedding layer (exhaustive: a new kind of failure needs
/// its code here).
pub fn fail<E: Display>(e: rocklet_embed::Fail<Error<E>>) -> JsValue {
    let kind = e.kind();
    match e {
        rocklet_embed::Fail::Client(c) => client(&c),
        rocklet_embed::Fail::Host(e) => core(&e),
        rocklet_embed::Fail::Argument(w) => js_error(kind.code(), &w),
        rocklet_embed::Fail::Closed(w) | rocklet_embed::Fail::WrongClock(w) => {
            js_error(kind.code(), w)
        }
        rocklet_embed::Fail::Unexpected(w) => {
            js_error(kind.code(), &alloc::format!("internal error: {w}"))
        }
    }
}
