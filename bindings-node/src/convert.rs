//! Every conversion between JS values and core types.
//!
//! In: [`Js`], a serde deserializer over napi values, reads each argument into the embedding
//! layer's inputs (`rocklet_embed::input`) or a small options struct below; its errors
//! (`input::JsError`) name the argument and the path in it (`options.properties.a must be a
//! string`) and become `ClientError`s with code `INVALID_ARGUMENT`. `undefined` and `null`
//! count as absent, in options objects too. Out: the embedding layer's views
//! (`rocklet_embed::view`), written by napi's serde serializer through `view::Plain` (plain
//! numbers, absent values left out, bytes as `Buffer`s).

use napi::bindgen_prelude::*;
use napi::{Env, JsValue, ValueType};
use napi_derive::napi;
use std::collections::HashMap;

use rocklet_core::{Config, NewMessage, Received, SendResult};
use rocklet_embed::config::{self, ConfigFail, Naming};
use rocklet_embed::input::{Body, JsError, MessageOptions};
use rocklet_embed::view::{camel_case, Plain};
use serde::de::{self, DeserializeOwned, DeserializeSeed, IntoDeserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::error::{arg, JsFail, Res};

// ---- JS values as a serde deserializer ------------------------------------------------------

/// A JS value (`None`: an argument not given, read as `undefined`).
struct Js<'e>(Option<Unknown<'e>>);

type R<T> = std::result::Result<T, JsError>;

impl<'e> Js<'e> {
    fn kind(&self) -> R<ValueType> {
        self.0
            .map_or(Ok(ValueType::Undefined), |v| v.get_type())
            .js()
    }

    /// A plain object: not an array, a `Buffer` or a typed array.
    fn object(&self) -> R<Option<Object<'e>>> {
        let Some(v) = self.0.filter(|_| self.kind() == Ok(ValueType::Object)) else {
            return Ok(None);
        };
        let plain = !(v.is_array().js()? || v.is_buffer().js()? || v.is_typedarray().js()?);
        plain.then(|| Object::from_unknown(v)).transpose().js()
    }

    /// An object (absent: no keys) into a map visitor; anything else is refused.
    fn map<'de, V: Visitor<'de>>(self, v: V) -> R<V::Value> {
        match self.kind()? {
            ValueType::Undefined | ValueType::Null => v.visit_map(Map::new(None)?),
            _ => match self.object()? {
                Some(o) => v.visit_map(Map::new(Some(o))?),
                None => Err(JsError::must_be("an object")),
            },
        }
    }
}

/// A napi call's failure inside the deserializer.
trait OrFail<T> {
    fn js(self) -> R<T>;
}

impl<T> OrFail<T> for napi::Result<T> {
    fn js(self) -> R<T> {
        self.map_err(|e| de::Error::custom(format!("napi: {}", e.reason)))
    }
}

impl<'de> de::Deserializer<'de> for Js<'_> {
    type Error = JsError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> R<V::Value> {
        let kind = self.kind()?;
        let Some(x) = self.0 else {
            return v.visit_unit();
        };
        match kind {
            ValueType::Undefined | ValueType::Null => v.visit_unit(),
            ValueType::Boolean => v.visit_bool(bool::from_unknown(x).js()?),
            ValueType::Number => {
                let n = f64::from_unknown(x).js()?;
                let whole = n.fract() == 0.0 && n.abs() <= rocklet_embed::arg::MAX_SAFE as f64;
                match (whole, n >= 0.0) {
                    (true, true) => v.visit_u64(n as u64),
                    (true, false) => v.visit_i64(n as i64),
                    _ => v.visit_f64(n),
                }
            }
            ValueType::String => v.visit_string(String::from_unknown(x).js()?),
            ValueType::Object if x.is_buffer().js()? => {
                v.visit_bytes(&BufferSlice::from_unknown(x).js()?)
            }
            ValueType::Object if x.is_typedarray().js()? => {
                match Uint8ArraySlice::from_unknown(x) {
                    Ok(s) => v.visit_bytes(&s),
                    Err(_) => Err(JsError::must_be("a Uint8Array, not another typed array")),
                }
            }
            ValueType::Object if x.is_array().js()? => {
                let a = Array::from_unknown(x).js()?;
                v.visit_seq(Seq { a, i: 0 })
            }
            ValueType::Object => self.map(v),
            _ => Err(de::Error::invalid_type(
                de::Unexpected::Other("a function or a symbol"),
                &v,
            )),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> R<V::Value> {
        match self.kind()? {
            ValueType::Undefined | ValueType::Null => v.visit_none(),
            _ => v.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        _: &'static [&'static str],
        v: V,
    ) -> R<V::Value> {
        self.map(v)
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> R<V::Value> {
        self.map(v)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct enum identifier ignored_any
    }
}

/// An object's keys and values; keys holding `undefined` or `null` are skipped.
struct Map<'e> {
    obj: Option<Object<'e>>,
    keys: std::vec::IntoIter<String>,
    value: Option<(String, Unknown<'e>)>,
}

impl<'e> Map<'e> {
    fn new(obj: Option<Object<'e>>) -> R<Self> {
        let keys = obj.as_ref().map(Object::keys).transpose().js()?;
        Ok(Map {
            obj,
            keys: keys.unwrap_or_default().into_iter(),
            value: None,
        })
    }
}

impl<'de> de::MapAccess<'de> for Map<'_> {
    type Error = JsError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> R<Option<K::Value>> {
        let Some(obj) = &self.obj else {
            return Ok(None);
        };
        for k in self.keys.by_ref() {
            let Some(v) = obj.get::<Unknown<'_>>(&k).js()? else {
                continue;
            };
            if matches!(v.get_type().js()?, ValueType::Undefined | ValueType::Null) {
                continue;
            }
            let key = seed.deserialize(k.as_str().into_deserializer())?;
            self.value = Some((k, v));
            return Ok(Some(key));
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> R<V::Value> {
        let (k, v) = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a value before its key"))?;
        seed.deserialize(Js(Some(v))).map_err(|e| e.in_key(&k))
    }
}

struct Seq<'e> {
    a: Array<'e>,
    i: u32,
}

impl<'de> de::SeqAccess<'de> for Seq<'_> {
    type Error = JsError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> R<Option<T::Value>> {
        if self.i >= self.a.len() {
            return Ok(None);
        }
        let i = self.i;
        self.i += 1;
        let v = self.a.get::<Unknown<'_>>(i).js()?;
        seed.deserialize(Js(v))
            .map(Some)
            .map_err(|e| e.in_index(i as usize))
    }
}

/// Reads argument `what` (absent: `undefined`) as a `T`.
pub(crate) fn read<T: DeserializeOwned>(what: &str, v: Option<Unknown<'_>>) -> Res<T> {
    T::deserialize(Js(v)).map_err(|e| arg(e.text(what)))
}

/// A string argument parsed by the core (a transaction id, a resolution, a receipt handle).
pub(crate) fn parsed<T: std::str::FromStr<Err = rocklet_core::ClientError>>(
    what: &str,
    v: Unknown<'_>,
) -> Res<T> {
    read::<String>(what, Some(v))?
        .parse()
        .map_err(JsFail::Client)
}

/// A view as a JS value: plain numbers, absent values left out.
pub(crate) fn out<'e, T: Serialize>(env: &'e Env, v: T) -> Res<Unknown<'e>> {
    Ok(env.to_js_value(&Plain(&v))?)
}

// ---- broker options -----------------------------------------------------------------------

/// The binding's own broker options; every other key is a `Config` field (camelCase).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct BrokerOptions {
    pub(crate) path: Option<String>,
    clock: Option<String>,
    pub(crate) now: Option<u64>,
    /// Open a damaged log, moving the damage to quarantine (`Broker::open_repairing`).
    #[serde(default)]
    pub(crate) repair: bool,
    notify_available: Option<de::IgnoredAny>,
    #[serde(skip)]
    pub(crate) config: Config,
}

impl BrokerOptions {
    pub(crate) fn manual(&self) -> bool {
        self.clock.as_deref() == Some("manual")
    }
}

/// `{ path?, clock?, now?, repair?, ...Config fields in camelCase }`: the embedding layer's
/// config parser reads the Config fields (the core's defaults for the rest).
pub(crate) fn broker_options(v: Option<Unknown<'_>>) -> Res<BrokerOptions> {
    let mut o: BrokerOptions = read("options", v)?;
    if let Some(c) = o
        .clock
        .as_deref()
        .filter(|c| !["system", "manual"].contains(c))
    {
        return Err(arg(format!(
            "options.clock must be 'system' or 'manual', got '{c}'"
        )));
    }
    if o.notify_available.is_some() {
        return Err(arg(
            "options.notifyAvailable is set by the binding (subscribe waits on it)",
        ));
    }
    if o.now.is_some() && !o.manual() {
        return Err(arg(
            "options.now sets the start of a manual clock: give clock: 'manual' too",
        ));
    }
    let extra = ["path", "clock", "now", "repair"];
    let entries = read::<serde_json::Map<String, serde_json::Value>>("options", v)?
        .into_iter()
        .filter(|(k, _)| !extra.contains(&k.as_str()));
    // The host does long polling (subscribe): it needs availability notices.
    let base = Config {
        notify_available: true,
        ..Config::default()
    };
    o.config = config::config(&base, entries, Naming::Camel, &extra, &["notify_available"])
        .map_err(|e| match e {
            ConfigFail::Unknown { .. } => arg(e.to_string()),
            ConfigFail::Invalid { key, reason } => JsFail::Config {
                option: key,
                reason,
            },
        })?;
    Ok(o)
}

/// The effective configuration, camelCase, for `broker.config()`.
pub(crate) fn config_out(cfg: &Config) -> Res<serde_json::Value> {
    let v = serde_json::to_value(cfg).map_err(|e| JsFail::Internal(e.to_string()))?;
    let serde_json::Value::Object(m) = v else {
        return Ok(v);
    };
    Ok(serde_json::Value::Object(
        m.into_iter().map(|(k, v)| (camel_case(&k), v)).collect(),
    ))
}

// ---- messages in ----------------------------------------------------------------------------

/// A message body: a `Buffer`, any `Uint8Array`, or a string (sent as UTF-8).
fn body(what: &str, v: Unknown<'_>) -> Res<Vec<u8>> {
    if v.is_buffer()? {
        return Ok(BufferSlice::from_unknown(v)?.to_vec()); // the common case, in one call
    }
    Body::deserialize(Js(Some(v)))
        .map(|b| b.0)
        .map_err(|_| arg(format!("{what} must be a Buffer, a Uint8Array or a string")))
}

/// `send(topic, body, opts)`.
pub(crate) fn new_message(
    topic: String,
    body_v: Unknown<'_>,
    opts: Option<Unknown<'_>>,
) -> Res<NewMessage> {
    let body = body("body", body_v)?;
    let hidden = ["topic", "body", "checkImmunityMs"];
    let o = MessageOptions::deserialize(Js(opts))
        .map_err(|e| arg(e.text_hiding("options", &hidden)))?;
    o.into_send(topic, body).map_err(arg)
}

/// A message object `{ topic, body, ...options }` (in a batch, `topic` defaults to the
/// batch's and a bare body is accepted too) and its `checkImmunityMs` (`immunity`: prepare).
pub(crate) fn message_object(
    what: &str,
    v: Unknown<'_>,
    topic: Option<&str>,
    immunity: bool,
) -> Res<(NewMessage, Option<u64>)> {
    if topic.is_some() && (v.is_typedarray()? || v.get_type()? == ValueType::String) {
        let m = NewMessage::new(topic.unwrap_or_default(), body(what, v)?);
        return Ok((m, None));
    }
    if v.get_type()? != ValueType::Object || v.is_array()? {
        return Err(arg(format!("{what} must be an object with a body")));
    }
    let o: MessageOptions = read(what, Some(v))?;
    o.into_object(what, topic, immunity).map_err(arg)
}

// ---- values out -----------------------------------------------------------------------------

/// A stored message, as `send`, `sendBatch`, `prepare` and `sendBack` answer it. The
/// producer's hot path, so a napi object (its keys are static C strings) rather than a view
/// through [`out`] (napi's serde serializer allocates a C string for every key).
#[napi(object)]
#[derive(Debug)]
pub struct JsSendResult {
    pub msg_id: String,
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: f64,
    /// Log offset of the record.
    pub offset: f64,
    /// The transaction of a half message (16 hex digits).
    pub txn: Option<String>,
}

#[allow(clippy::cast_precision_loss)] // offsets stay far below 2^53
pub(crate) fn send_result(r: SendResult) -> JsSendResult {
    JsSendResult {
        msg_id: r.msg_id,
        topic: r.topic,
        queue_id: r.queue_id,
        queue_offset: r.queue_offset as f64,
        offset: r.offset as f64,
        txn: r.txn.map(|t| t.to_string()),
    }
}

/// A queue that got a visible message.
#[napi(object)]
#[derive(Debug)]
pub struct JsAvailable {
    pub topic: String,
    pub queue_id: u32,
}

/// A received message, flat: the message's fields and its delivery (`handle`, `attempt`,
/// `visibleAt`). The consumer's hot path, so a napi object too (see [`JsSendResult`]).
#[napi(object)]
pub struct JsReceived {
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: f64,
    pub offset: f64,
    pub msg_id: String,
    pub tag: Option<String>,
    pub keys: Vec<String>,
    pub properties: HashMap<String, String>,
    pub body: Buffer,
    pub born_timestamp: f64,
    pub store_timestamp: f64,
    pub reconsume_times: u32,
    pub flag: i32,
    pub sys_flag: u32,
    pub born_host: String,
    pub store_host: String,
    /// Receipt handle for `ack` / `changeInvisible`.
    pub handle: String,
    /// Delivery attempt, from 1.
    pub attempt: u32,
    /// When it becomes visible again unless acked.
    pub visible_at: f64,
}

impl std::fmt::Debug for JsReceived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsReceived")
            .field("msg_id", &self.msg_id)
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

#[allow(clippy::cast_precision_loss)] // offsets and milliseconds stay far below 2^53
pub(crate) fn received(r: Received) -> JsReceived {
    let m = r.message;
    JsReceived {
        topic: m.topic,
        queue_id: m.queue_id,
        queue_offset: m.queue_offset as f64,
        offset: m.offset as f64,
        msg_id: m.msg_id,
        tag: m.tag,
        keys: m.keys,
        properties: m.properties.into_iter().collect(),
        body: m.body.into(),
        born_timestamp: m.born_timestamp as f64,
        store_timestamp: m.store_timestamp as f64,
        reconsume_times: m.reconsume_times,
        flag: m.flag,
        sys_flag: m.sys_flag,
        born_host: m.born_host.to_string(),
        store_host: m.store_host.to_string(),
        handle: r.handle.to_string(),
        attempt: r.attempt,
        visible_at: r.visible_at as f64,
    }
}
