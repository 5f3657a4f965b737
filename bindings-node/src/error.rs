//! Every error a JS caller can see, mapped in one place.
//!
//! JS gets instances of a small class hierarchy, all with a stable `code` string, taken from
//! the one table of codes of every binding ([`ErrorKind::code`], checked against
//! `tests/vectors/error-codes.json`):
//!
//! ```text
//! RockletError                 code: INTERNAL (a bug: a caught panic, a failed napi call),
//! │                                  ENCODE (a record would not fit the log format)
//! ├── ClientError              code: ClientError::code() of the core (INVALID_TOPIC, …),
//! │                                  or INVALID_ARGUMENT for a JS value of the wrong shape
//! ├── ConfigError              code: INVALID_CONFIG, `option` names the camelCase option
//! ├── StorageError             code: STORAGE, `kind` is the io::ErrorKind
//! ├── CorruptedError           code: CORRUPTED, `offset` is the log offset (`repair: true` opens it)
//! └── StateError               code: BROKER_CLOSED | WRONG_CLOCK | FAILED (a sync failed: the
//!                                    broker takes nothing more; close it and open the path again)
//! ```
//!
//! The classes are created once per JS environment (worker) from the source below and kept
//! in the environment's instance data; `errorClasses()` hands them to the JS wrapper, which
//! re-exports them, so `err instanceof ClientError` works across the package.

use std::io;

use napi::bindgen_prelude::*;
use napi::{Env, JsValue};
use rocklet_core::{ClientError, ConfigError};

use rocklet_embed::view::camel_case;
use rocklet_embed::ErrorKind;

/// What went wrong, before it becomes a JS error (which needs an `Env`).
#[derive(Debug)]
pub(crate) enum JsFail {
    /// A client's mistake, as the core reports it.
    Client(ClientError),
    /// A JS value of the wrong type or shape (the binding's own `INVALID_ARGUMENT`).
    Argument(String),
    /// A configuration value that cannot work (`option` is the camelCase name).
    Config {
        option: String,
        reason: String,
    },
    Storage(io::Error),
    Corrupted {
        offset: u64,
        reason: String,
    },
    /// The broker was closed (or poisoned by a caught panic).
    Closed(&'static str),
    /// A manual-clock call on a system-clock broker, or the reverse.
    WrongClock(&'static str),
    /// A sync failed: the broker takes nothing more (the reason).
    Failed(String),
    /// A record would not fit the log format.
    Encode(String),
    /// A bug: a caught panic, a failed napi call, an unexpected reply.
    Internal(String),
}

pub(crate) type Res<T> = std::result::Result<T, JsFail>;

pub(crate) fn arg(msg: impl Into<String>) -> JsFail {
    JsFail::Argument(msg.into())
}

impl From<rocklet_core::Error<io::Error>> for JsFail {
    fn from(e: rocklet_core::Error<io::Error>) -> Self {
        match e {
            rocklet_core::Error::Storage(e) => JsFail::Storage(e),
            rocklet_core::Error::Config(ConfigError { field, reason }) => JsFail::Config {
                option: camel_case(field),
                reason,
            },
            rocklet_core::Error::Corrupted { offset, reason } => {
                JsFail::Corrupted { offset, reason }
            }
            rocklet_core::Error::Failed { reason } => JsFail::Failed(reason),
            e @ rocklet_core::Error::Encode(_) => JsFail::Encode(e.to_string()),
        }
    }
}

impl From<rocklet_embed::Fail<rocklet_core::Error<io::Error>>> for JsFail {
    fn from(e: rocklet_embed::Fail<rocklet_core::Error<io::Error>>) -> Self {
        match e {
            rocklet_embed::Fail::Client(e) => JsFail::Client(e),
            rocklet_embed::Fail::Host(e) => e.into(),
            rocklet_embed::Fail::Closed(why) => JsFail::Closed(why),
            rocklet_embed::Fail::WrongClock(why) => JsFail::WrongClock(why),
            rocklet_embed::Fail::Argument(why) => JsFail::Argument(why),
            rocklet_embed::Fail::Unexpected(why) => JsFail::Internal(why),
        }
    }
}

impl From<rocklet_embed::open::OpenFail> for JsFail {
    fn from(e: rocklet_embed::open::OpenFail) -> Self {
        match e {
            rocklet_embed::open::OpenFail::Storage(e) => JsFail::Storage(e),
            rocklet_embed::open::OpenFail::Core(e) => e.into(),
        }
    }
}

impl From<napi::Error> for JsFail {
    fn from(e: napi::Error) -> Self {
        JsFail::Internal(format!("napi: {} ({})", e.reason, e.status.as_ref()))
    }
}

const CLASSES_JS: &str = r#"(() => {
  class RockletError extends Error {
    constructor(message, code) {
      super(message);
      this.code = code;
    }
  }
  class ClientError extends RockletError {}
  class ConfigError extends RockletError {}
  class StorageError extends RockletError {}
  class CorruptedError extends RockletError {}
  class StateError extends RockletError {}
  const all = { RockletError, ClientError, ConfigError, StorageError, CorruptedError, StateError };
  for (const [name, cls] of Object.entries(all)) {
    Object.defineProperty(cls.prototype, 'name', { value: name, writable: true, configurable: true });
  }
  return all;
})()"#;

struct Classes(ObjectRef<false>);

/// The error classes of this JS environment, created on first use.
pub(crate) fn classes(env: &Env) -> napi::Result<Object<'_>> {
    if let Some(c) = env.get_instance_data::<Classes>()? {
        return c.0.get_value(env);
    }
    let obj: Object<'_> = env.run_script(CLASSES_JS)?;
    env.set_instance_data(Classes(obj.create_ref()?), (), |_| {})?;
    Ok(obj)
}

/// The JS class of each kind of failure (exhaustive: a new kind needs its class).
fn class(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Client | ErrorKind::Argument => "ClientError",
        ErrorKind::Config => "ConfigError",
        ErrorKind::Storage => "StorageError",
        ErrorKind::Corrupted => "CorruptedError",
        ErrorKind::Closed | ErrorKind::WrongClock | ErrorKind::Failed => "StateError",
        ErrorKind::Encode | ErrorKind::Internal => "RockletError",
    }
}

impl JsFail {
    /// The kind of this failure (its code, but for a client error, and its class).
    fn kind(&self) -> ErrorKind {
        match self {
            JsFail::Client(_) => ErrorKind::Client,
            JsFail::Argument(_) => ErrorKind::Argument,
            JsFail::Config { .. } => ErrorKind::Config,
            JsFail::Storage(_) => ErrorKind::Storage,
            JsFail::Corrupted { .. } => ErrorKind::Corrupted,
            JsFail::Closed(_) => ErrorKind::Closed,
            JsFail::WrongClock(_) => ErrorKind::WrongClock,
            JsFail::Failed(_) => ErrorKind::Failed,
            JsFail::Encode(_) => ErrorKind::Encode,
            JsFail::Internal(_) => ErrorKind::Internal,
        }
    }

    /// The JS error: class name, code and message.
    fn parts(&self) -> (&'static str, &'static str, String) {
        let kind = self.kind();
        let message = match self {
            JsFail::Client(e) => return (class(kind), e.code(), e.to_string()),
            JsFail::Argument(m) => format!("invalid argument: {m}"),
            JsFail::Config { option, reason } => format!("invalid option `{option}`: {reason}"),
            JsFail::Storage(e) => format!("storage failed: {e}"),
            JsFail::Corrupted { offset, reason } => format!(
                "corrupt log at offset {offset}: {reason}; new Broker({{ path, repair: true }}) \
                 opens it, keeping every valid record and moving the damaged bytes to \
                 quarantine/ in the data directory"
            ),
            JsFail::Closed(why) | JsFail::WrongClock(why) => (*why).into(),
            JsFail::Failed(reason) => format!(
                "the broker stopped after a failed sync ({reason}); close it and open its \
                 path again: recovery keeps what is durable"
            ),
            JsFail::Encode(m) => m.clone(),
            JsFail::Internal(m) => format!("internal error: {m}"),
        };
        (class(kind), kind.code(), message)
    }

    fn build<'e>(&self, env: &'e Env) -> napi::Result<Unknown<'e>> {
        let (class, code, message) = self.parts();
        let classes = classes(env)?;
        let ctor: Function<'_, FnArgs<(String, String)>, Unknown<'_>> = classes
            .get(class)?
            .ok_or_else(|| napi::Error::from_reason("error class missing"))?;
        let err = ctor.new_instance(FnArgs::from((message, code.to_string())))?;
        let mut obj = Object::from_unknown(err)?;
        match self {
            JsFail::Config { option, .. } => obj.set("option", option.as_str())?,
            JsFail::Storage(e) => obj.set("kind", format!("{:?}", e.kind()))?,
            JsFail::Corrupted { offset, .. } => obj.set("offset", *offset as f64)?,
            _ => {}
        }
        Ok(obj.to_unknown())
    }

    /// The error to return from a napi method: it throws the class instance.
    pub(crate) fn into_js(self, env: &Env) -> napi::Error {
        match self.build(env) {
            Ok(v) => napi::Error::from(v),
            Err(e) => napi::Error::from_reason(format!(
                "{} (and building the error failed: {e})",
                self.parts().2
            )),
        }
    }
}
