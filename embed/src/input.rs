//! Plain inputs that a binding reads from its language's objects with serde (wasm: with
//! serde-wasm-bindgen): one shape, one set of defaults and one set of error texts for a
//! message, a pull, a receive and the options of an end.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use rocklet_core::{Delay, NewMessage, TagFilter};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// The field names a derived `Deserialize` struct asks for (serde hands them to
/// `deserialize_struct`); empty for anything else.
pub fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct Probe<'a>(&'a mut &'static [&'static str]);
    impl<'de> Deserializer<'de> for Probe<'_> {
        type Error = de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("probe"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("probe"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// The one delay among the ways a message may give it (a level, an absolute time, a
/// relative one): `Some(None)` when none is given, `None` when more than one is (the binding
/// says so in its own names).
pub fn one_delay<const N: usize>(given: [Option<Delay>; N]) -> Option<Option<Delay>> {
    let mut given = given.into_iter().flatten();
    let first = given.next();
    given.next().is_none().then_some(first)
}

/// A message body: a string (sent as its UTF-8 bytes) or a `Uint8Array`.
#[derive(Debug)]
pub struct Body(pub Vec<u8>);

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Body;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a Uint8Array")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Body, E> {
                Ok(Body(v.as_bytes().to_vec()))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Body, E> {
                Ok(Body(v.to_vec()))
            }
            fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Body, E> {
                Ok(Body(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// User properties: a plain object of string values, in its key order.
#[derive(Debug, Default)]
pub struct Props(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for Props {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Props;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of string values")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Props, E> {
                Ok(Props::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Props, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, String>()? {
                    out.push((k, v));
                }
                Ok(Props(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A message as a JS object gives it: `{topic, body, tag?, keys?, properties?, queueId?,
/// messageId?, messageGroup?, delayLevel?, deliverAtMs?, delayMs?, bornTimestamp?, flag?}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MessageInput {
    pub topic: String,
    pub body: Body,
    #[serde(default)]
    pub tag: Option<String>,
    #[serde(default)]
    pub keys: Option<Vec<String>>,
    #[serde(default)]
    pub properties: Option<Props>,
    #[serde(default)]
    pub queue_id: Option<u32>,
    #[serde(default)]
    pub message_id: Option<String>,
    #[serde(default)]
    pub message_group: Option<String>,
    /// RocketMQ delay level (1..=N).
    #[serde(default)]
    pub delay_level: Option<u32>,
    /// Absolute delivery time (TIMER_DELIVER_MS).
    #[serde(default)]
    pub deliver_at_ms: Option<u64>,
    /// Delivery after this many ms (TIMER_DELAY_MS).
    #[serde(default)]
    pub delay_ms: Option<u64>,
    #[serde(default)]
    pub born_timestamp: Option<u64>,
    #[serde(default)]
    pub flag: Option<i32>,
}

impl MessageInput {
    /// The core message; more than one delay is refused (the text says so).
    pub fn into_message(self) -> Result<NewMessage, &'static str> {
        let delay = one_delay([
            self.delay_level.map(Delay::Level),
            self.deliver_at_ms.map(Delay::At),
            self.delay_ms.map(Delay::After),
        ])
        .ok_or("give at most one of delayLevel, deliverAtMs, delayMs")?;
        Ok(NewMessage {
            topic: self.topic,
            body: self.body.0,
            tag: self.tag,
            keys: self.keys.unwrap_or_default(),
            properties: self.properties.unwrap_or_default().0,
            queue_id: self.queue_id,
            message_id: self.message_id,
            delay,
            message_group: self.message_group,
            born_timestamp: self.born_timestamp,
            born_host: None,
            flag: self.flag.unwrap_or(0),
        })
    }
}

/// What `pull` takes.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PullInput {
    pub group: String,
    pub topic: String,
    /// One queue; absent = every queue of the topic.
    #[serde(default)]
    pub queue_id: Option<u32>,
    /// From here; absent = the group's committed offset.
    #[serde(default)]
    pub offset: Option<u64>,
    #[serde(default)]
    pub max: Option<u32>,
    /// Tag expression (`*`, `a || b`).
    #[serde(default)]
    pub tags: Option<String>,
    /// Commit the offset after what is returned.
    #[serde(default)]
    pub auto_commit: Option<bool>,
}

/// What `receive` takes.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiveInput {
    pub group: String,
    pub topic: String,
    #[serde(default)]
    pub queue_id: Option<u32>,
    #[serde(default)]
    pub max: Option<u32>,
    pub invisible_ms: u64,
    #[serde(default)]
    pub tags: Option<String>,
}

/// Options of `end`: `{fromCheck?, group?}`.
#[derive(Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EndOptions {
    #[serde(default)]
    pub from_check: Option<bool>,
    #[serde(default)]
    pub group: Option<String>,
}

impl EndOptions {
    /// The group and whether the end answers a check. `takes_from_check`: the call accepts
    /// `fromCheck` (Node's `endTransaction`; its `commit` and `rollback` refuse it).
    pub fn into_parts(
        self,
        takes_from_check: bool,
    ) -> Result<(Option<String>, bool), &'static str> {
        if self.from_check.is_some() && !takes_from_check {
            return Err("options has an unknown option `fromCheck` (known: group)");
        }
        Ok((self.group, self.from_check.unwrap_or(false)))
    }
}

impl PullInput {
    /// The pull, with the defaults of the JS objects (`max` 32, no auto-commit).
    pub fn into_args(self) -> crate::PullArgs {
        crate::PullArgs {
            filter: tag_filter(self.tags.as_deref()),
            group: self.group,
            topic: self.topic,
            queue: self.queue_id,
            offset: self.offset,
            max: self.max.unwrap_or(32),
            auto_commit: self.auto_commit.unwrap_or(false),
        }
    }
}

impl ReceiveInput {
    /// The receive, `max` 32 by default.
    pub fn into_args(self) -> crate::ReceiveArgs {
        crate::ReceiveArgs {
            filter: tag_filter(self.tags.as_deref()),
            group: self.group,
            topic: self.topic,
            queue: self.queue_id,
            max: self.max.unwrap_or(32),
            invisible_ms: self.invisible_ms,
        }
    }
}

/// A tag expression (`*`, `a || b`); none is every tag.
pub fn tag_filter(tags: Option<&str>) -> TagFilter {
    tags.map_or(TagFilter::All, TagFilter::parse)
}

/// Message keys: one string or an array of strings.
#[derive(Debug, Default)]
pub struct Keys(pub Vec<String>);

impl<'de> Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Keys;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Keys, E> {
                Ok(Keys(alloc::vec![v.into()]))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Keys, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = seq.next_element::<String>()? {
                    out.push(k);
                }
                Ok(Keys(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A message as the Node binding takes it: `send`'s options, or (with `topic`, `body` and,
/// for `prepare`, `checkImmunityMs`) a message object. `deliverAt` is the older name of
/// `deliverAtMs`; both stay.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MessageOptions {
    pub topic: Option<String>,
    pub body: Option<Body>,
    pub tag: Option<String>,
    pub keys: Option<Keys>,
    pub properties: Option<Props>,
    pub queue_id: Option<u32>,
    pub delay_level: Option<u32>,
    pub deliver_at_ms: Option<u64>,
    pub deliver_at: Option<u64>,
    pub delay_ms: Option<u64>,
    pub message_id: Option<String>,
    pub message_group: Option<String>,
    pub flag: Option<i32>,
    pub born_timestamp: Option<u64>,
    pub check_immunity_ms: Option<u64>,
}

impl MessageOptions {
    /// The first of `topic`, `body`, `checkImmunityMs` given (what `send`'s options refuse).
    pub fn message_only_field(&self) -> Option<&'static str> {
        [
            (self.topic.is_some(), "topic"),
            (self.body.is_some(), "body"),
            (self.check_immunity_ms.is_some(), "checkImmunityMs"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }

    /// `send`'s options, for the message to `topic` with `body` (given as arguments, so
    /// `topic`, `body` and `checkImmunityMs` are refused here).
    pub fn into_send(self, topic: String, body: Vec<u8>) -> Result<NewMessage, String> {
        if let Some(k) = self.message_only_field() {
            return Err(alloc::format!(
                "options has an unknown option `{k}` (a send gives the topic and body as arguments)"
            ));
        }
        self.into_message(topic, body)
            .map_err(|e| alloc::format!("options: {e}"))
    }

    /// A message object, the argument `what` (`{ topic, body, ...options }`), and its
    /// `checkImmunityMs`: `topic` is the default topic (a batch's), `immunity` whether the
    /// call takes `checkImmunityMs` (prepare).
    pub fn into_object(
        mut self,
        what: &str,
        topic: Option<&str>,
        immunity: bool,
    ) -> Result<(NewMessage, Option<u64>), String> {
        if self.check_immunity_ms.is_some() && !immunity {
            return Err(alloc::format!(
                "{what} has an unknown option `checkImmunityMs` (only prepare takes it)"
            ));
        }
        let Some(topic) = self.topic.take().or(topic.map(String::from)) else {
            return Err(alloc::format!("{what}.topic is required"));
        };
        let Some(body) = self.body.take() else {
            return Err(alloc::format!("{what}.body is required"));
        };
        let immunity = self.check_immunity_ms;
        let m = self
            .into_message(topic, body.0)
            .map_err(|e| alloc::format!("{what}: {e}"))?;
        Ok((m, immunity))
    }

    /// The core message to `topic` with `body`; more than one delay is refused.
    pub fn into_message(self, topic: String, body: Vec<u8>) -> Result<NewMessage, &'static str> {
        let delay = one_delay([
            self.delay_level.map(Delay::Level),
            self.deliver_at_ms.map(Delay::At),
            self.deliver_at.map(Delay::At),
            self.delay_ms.map(Delay::After),
        ])
        .ok_or("give at most one of delayLevel, deliverAtMs (or deliverAt), delayMs")?;
        Ok(NewMessage {
            topic,
            body,
            tag: self.tag,
            keys: self.keys.unwrap_or_default().0,
            properties: self.properties.unwrap_or_default().0,
            queue_id: self.queue_id,
            message_id: self.message_id,
            delay,
            message_group: self.message_group,
            born_timestamp: self.born_timestamp,
            born_host: None,
            flag: self.flag.unwrap_or(0),
        })
    }
}

/// The error of a deserializer over JS values that knows where it is (the Node binding's):
/// the path below the argument (`.properties.a`, `[2].topic`) and a sentence with the texts
/// every binding uses (`must be a string`, `is required`, `has an unknown option`, the
/// whole-number range of [`crate::arg::number`]).
#[derive(Debug, PartialEq, Eq)]
pub struct JsError {
    path: String,
    /// After the argument's name and path: ` must be a string`, `: reason`.
    text: String,
    /// An unknown key and the known ones (the text is made when asked, see [`JsError::text_hiding`]).
    unknown: Option<(String, &'static [&'static str])>,
}

impl JsError {
    /// An error about the value itself: `must be an object`.
    pub fn must_be(what: &str) -> Self {
        JsError {
            path: String::new(),
            text: alloc::format!(" must be {what}"),
            unknown: None,
        }
    }

    /// The same error, one level down: under key `key` of an object.
    #[must_use]
    pub fn in_key(mut self, key: &str) -> Self {
        self.path.insert_str(0, key);
        self.path.insert(0, '.');
        self
    }

    /// The same error, one level down: at index `i` of an array.
    #[must_use]
    pub fn in_index(mut self, i: usize) -> Self {
        self.path.insert_str(0, &alloc::format!("[{i}]"));
        self
    }

    /// The sentence, naming the argument `what` (`options.properties.a must be a string`).
    pub fn text(&self, what: &str) -> String {
        self.text_hiding(what, &[])
    }

    /// [`JsError::text`], leaving the fields `hidden` out of the known ones (`send`'s
    /// options are a message object's fields but `topic`, `body` and `checkImmunityMs`), and
    /// naming an unknown key that is hidden as unknown too.
    pub fn text_hiding(&self, what: &str, hidden: &[&str]) -> String {
        let Some((field, known)) = &self.unknown else {
            return alloc::format!("{what}{}{}", self.path, self.text);
        };
        let known: Vec<&str> = known
            .iter()
            .copied()
            .filter(|k| !hidden.contains(k))
            .collect();
        alloc::format!(
            "{what}{} has an unknown option `{field}` (known: {})",
            self.path,
            known.join(", ")
        )
    }

    fn number(unexp: &de::Unexpected<'_>, exp: &dyn de::Expected) -> Option<Self> {
        let n = match *unexp {
            de::Unexpected::Unsigned(n) => alloc::format!("{n}"),
            de::Unexpected::Signed(n) => alloc::format!("{n}"),
            de::Unexpected::Float(n) => alloc::format!("{n}"),
            _ => String::new(),
        };
        let exp = alloc::format!("{exp}");
        let max: u64 = match exp.as_str() {
            "u32" => u32::MAX.into(),
            "u64" => crate::arg::MAX_SAFE,
            "i32" if !n.is_empty() => {
                return Some(Self::must_be(&alloc::format!("a 32-bit integer, got {n}")))
            }
            "i32" => return Some(Self::must_be("a number")),
            _ => return None,
        };
        Some(if n.is_empty() {
            Self::must_be("a number")
        } else {
            Self::must_be(&alloc::format!("a whole number from 0 to {max}, not {n}"))
        })
    }
}

impl fmt::Display for JsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.text("value"))
    }
}

impl de::StdError for JsError {}

impl de::Error for JsError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        JsError {
            path: String::new(),
            text: alloc::format!(": {msg}"),
            unknown: None,
        }
    }
    fn invalid_type(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::number(&unexp, exp).unwrap_or_else(|| Self::must_be(&alloc::format!("{exp}")))
    }
    fn invalid_value(unexp: de::Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        Self::invalid_type(unexp, exp)
    }
    fn missing_field(field: &'static str) -> Self {
        JsError {
            path: String::new(),
            text: alloc::format!(".{field} is required"),
            unknown: None,
        }
    }
    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        JsError {
            path: String::new(),
            text: String::new(),
            unknown: Some((field.into(), expected)),
        }
    }
}

// ---- Node's options objects (rocklet-node reads them with its deserializer over napi values)

/// `sendBatch` options.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BatchOptions {
    pub queue_id: Option<u32>,
}

/// `pull` options.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PullOptions {
    pub offset: Option<u64>,
    pub max: Option<u32>,
    pub tags: Option<String>,
    pub auto_commit: Option<bool>,
}

/// `receive` options.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReceiveOptions {
    pub invisible_ms: u64,
    pub max: Option<u32>,
    pub queue_id: Option<u32>,
    pub tags: Option<String>,
}

/// The options of a subscription (`subscribe`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SubscribeOptions {
    pub invisible_ms: u64,
    pub tags: Option<String>,
    pub batch: Option<u32>,
}

/// `sendBack` options.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendBackOptions {
    pub delay_level: Option<u32>,
}

impl PullOptions {
    /// The pull of `group` and `topic` (one queue or all): `max` as many as the core hands
    /// out in one call, auto-commit on, by default.
    pub fn into_args(self, group: String, topic: String, queue: Option<u32>) -> crate::PullArgs {
        crate::PullArgs {
            filter: tag_filter(self.tags.as_deref()),
            group,
            topic,
            queue,
            offset: self.offset,
            max: self.max.unwrap_or(u32::MAX),
            auto_commit: self.auto_commit.unwrap_or(true),
        }
    }
}

impl ReceiveOptions {
    /// The receive of `group` and `topic`, `max` as many as the core hands out by default.
    pub fn into_args(self, group: String, topic: String) -> crate::ReceiveArgs {
        crate::ReceiveArgs {
            filter: tag_filter(self.tags.as_deref()),
            group,
            topic,
            queue: self.queue_id,
            max: self.max.unwrap_or(u32::MAX),
            invisible_ms: self.invisible_ms,
        }
    }
}

impl SubscribeOptions {
    /// The subscription of `group` to `topic`, one message at a time by default.
    pub fn into_subscription(self, group: String, topic: String) -> crate::Subscription {
        let filter = tag_filter(self.tags.as_deref());
        crate::Subscription::new(
            group,
            topic,
            self.invisible_ms,
            self.batch.unwrap_or(1),
            filter,
        )
    }
}

#[cfg(test)]
mod js_error_tests {
    use super::*;
    use serde::de::value::MapDeserializer;
    use serde::de::Error as _;

    fn read<T: for<'de> Deserialize<'de>>(entries: &[(&'static str, u64)]) -> Result<T, String> {
        let d = MapDeserializer::<_, JsError>::new(entries.iter().copied());
        T::deserialize(d).map_err(|e| e.text("options"))
    }

    #[test]
    fn texts_name_the_range_the_missing_and_the_unknown() {
        let e = JsError::invalid_type(de::Unexpected::Float(1.5), &"u32").in_key("queueId");
        assert_eq!(
            e.text("options"),
            "options.queueId must be a whole number from 0 to 4294967295, not 1.5"
        );
        let e = JsError::invalid_value(de::Unexpected::Signed(-1), &"u64");
        assert_eq!(
            e.text("target"),
            "target must be a whole number from 0 to 9007199254740991, not -1"
        );
        let e = JsError::invalid_type(de::Unexpected::Float(0.5), &"i32");
        assert_eq!(e.text("flag"), "flag must be a 32-bit integer, got 0.5");
        let e = JsError::invalid_type(de::Unexpected::Str("x"), &"u32");
        assert_eq!(e.text("queues"), "queues must be a number");
        let e = read::<ReceiveOptions>(&[]).unwrap_err();
        assert_eq!(e, "options.invisibleMs is required");
        let e = read::<ReceiveOptions>(&[("colour", 1)]).unwrap_err();
        assert_eq!(
            e,
            "options has an unknown option `colour` (known: invisibleMs, max, queueId, tags)"
        );
        let o = read::<ReceiveOptions>(&[("invisibleMs", 5)]).map(|o| o.invisible_ms);
        assert_eq!(o, Ok(5));
    }

    #[test]
    fn message_objects_and_send_options() {
        let o = |topic: Option<&str>, body: bool, imm: Option<u64>| MessageOptions {
            topic: topic.map(String::from),
            body: body.then(|| Body(b"x".to_vec())),
            check_immunity_ms: imm,
            ..MessageOptions::default()
        };
        let (m, imm) = o(Some("T"), true, Some(5))
            .into_object("message", None, true)
            .unwrap();
        assert_eq!(
            (m.topic.as_str(), &m.body[..], imm),
            ("T", &b"x"[..], Some(5))
        );
        // A batch's topic is the default; its own wins.
        let (m, _) = o(None, true, None)
            .into_object("messages[0]", Some("B"), false)
            .unwrap();
        assert_eq!(m.topic, "B");
        let (m, _) = o(Some("T"), true, None)
            .into_object("messages[0]", Some("B"), false)
            .unwrap();
        assert_eq!(m.topic, "T");
        let e = |r: Result<(NewMessage, Option<u64>), String>| r.unwrap_err();
        assert_eq!(
            e(o(None, true, None).into_object("message", None, true)),
            "message.topic is required"
        );
        assert_eq!(
            e(o(Some("T"), false, None).into_object("message", None, true)),
            "message.body is required"
        );
        assert_eq!(
            e(o(Some("T"), true, Some(1)).into_object("messages[2]", None, false)),
            "messages[2] has an unknown option `checkImmunityMs` (only prepare takes it)"
        );
        let two = MessageOptions {
            delay_ms: Some(1),
            delay_level: Some(1),
            ..o(Some("T"), true, None)
        };
        assert_eq!(
            e(two.into_object("message", None, true)),
            "message: give at most one of delayLevel, deliverAtMs (or deliverAt), delayMs"
        );
        // send: topic and body are arguments.
        let m = MessageOptions::default()
            .into_send("T".into(), b"y".to_vec())
            .unwrap();
        assert_eq!((m.topic.as_str(), &m.body[..]), ("T", &b"y"[..]));
        assert_eq!(
            o(None, true, None)
                .into_send("T".into(), Vec::new())
                .unwrap_err(),
            "options has an unknown option `body` (a send gives the topic and body as arguments)"
        );
    }

    #[test]
    fn from_check_only_where_the_call_takes_it() {
        let o = || EndOptions {
            from_check: Some(true),
            group: Some("P".into()),
        };
        assert_eq!(o().into_parts(true), Ok((Some("P".into()), true)));
        assert_eq!(
            o().into_parts(false),
            Err("options has an unknown option `fromCheck` (known: group)")
        );
        assert_eq!(EndOptions::default().into_parts(false), Ok((None, false)));
    }

    #[test]
    fn at_most_one_delay() {
        assert_eq!(one_delay([None, None, None]), Some(None));
        let d = one_delay([None, Some(Delay::At(5)), None]);
        assert!(matches!(d, Some(Some(Delay::At(5)))), "{d:?}");
        assert!(one_delay([Some(Delay::Level(1)), None, Some(Delay::After(2))]).is_none());
        let two = MessageOptions {
            deliver_at_ms: Some(1),
            deliver_at: Some(1),
            ..MessageOptions::default()
        };
        let e = two.into_message("T".into(), Vec::new()).unwrap_err();
        assert_eq!(
            e,
            "give at most one of delayLevel, deliverAtMs (or deliverAt), delayMs"
        );
    }

    #[test]
    fn paths_and_hidden_fields() {
        let e = de::Error::invalid_type(de::Unexpected::Signed(1), &"a string");
        let e = JsError::in_key(e, "a").in_key("properties").in_index(2);
        assert_eq!(
            e.text("messages"),
            "messages[2].properties.a must be a string"
        );
        let d = MapDeserializer::<_, JsError>::new([("colour", 1u64)].into_iter());
        let e = MessageOptions::deserialize(d).unwrap_err();
        let text = e.text_hiding("options", &["topic", "body", "checkImmunityMs"]);
        assert!(text.starts_with("options has an unknown option `colour` (known: tag, keys,"));
        assert!(
            !text.contains("body") && !text.contains("checkImmunityMs"),
            "{text}"
        );
    }
}
