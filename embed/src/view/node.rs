//! The views as the Node binding (rocklet-node) hands them out.
//!
//! napi's serde serializer writes `None` as `null` and a u64 above u32::MAX as a BigInt; the
//! Node API leaves absent values out and uses plain numbers. [`Plain`] serializes any view
//! that way, and the few shapes where Node differs (a `Buffer` body only, a received message
//! flat, a check with its time, no extra fields) are below.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use rocklet_core::{CheckRequest, CqUnit, Message, PendingTxnInfo, TraceEvent};
use serde::ser::{self, SerializeMap, Serializer};
use serde::Serialize;

use super::{pulled_with, trace_out, Bytes, Pairs};
use crate::ops::Pulled;

/// Serializes a view with every integer above 32 bits as an f64 (milliseconds and offsets
/// stay far below 2^53) and every `None` struct field left out.
#[derive(Debug)]
pub struct Plain<'a, T: ?Sized>(pub &'a T);

impl<T: Serialize + ?Sized> Serialize for Plain<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(PlainSer(s))
    }
}

struct PlainSer<S>(S);

macro_rules! forward {
    ($($f:ident($t:ty)),*) => {$(
        fn $f(self, v: $t) -> Result<S::Ok, S::Error> { self.0.$f(v) }
    )*};
}

impl<S: Serializer> Serializer for PlainSer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = PlainSer<S::SerializeSeq>;
    type SerializeTuple = PlainSer<S::SerializeTuple>;
    type SerializeTupleStruct = PlainSer<S::SerializeTupleStruct>;
    type SerializeTupleVariant = PlainSer<S::SerializeTupleVariant>;
    type SerializeMap = PlainSer<S::SerializeMap>;
    type SerializeStruct = PlainSer<S::SerializeStruct>;
    type SerializeStructVariant = PlainSer<S::SerializeStructVariant>;
    forward!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str)
    );
    #[allow(clippy::cast_precision_loss)]
    fn serialize_i64(self, v: i64) -> Result<S::Ok, S::Error> {
        self.0.serialize_f64(v as f64)
    }
    #[allow(clippy::cast_precision_loss)]
    fn serialize_u64(self, v: u64) -> Result<S::Ok, S::Error> {
        self.0.serialize_f64(v as f64)
    }
    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_none()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&Plain(v))
    }
    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit()
    }
    fn serialize_unit_variant(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_unit_variant(name, i, variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &Plain(v))
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0
            .serialize_newtype_variant(name, i, variant, &Plain(v))
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        self.0.serialize_seq(len).map(PlainSer)
    }
    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        self.0.serialize_tuple(len).map(PlainSer)
    }
    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        self.0.serialize_tuple_struct(name, len).map(PlainSer)
    }
    fn serialize_tuple_variant(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        self.0
            .serialize_tuple_variant(name, i, variant, len)
            .map(PlainSer)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        self.0.serialize_map(len).map(PlainSer)
    }
    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        self.0.serialize_struct(name, len).map(PlainSer)
    }
    fn serialize_struct_variant(
        self,
        name: &'static str,
        i: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        self.0
            .serialize_struct_variant(name, i, variant, len)
            .map(PlainSer)
    }
    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! plain_compound {
    ($($tr:ident :: $f:ident),*) => {$(
        impl<S: ser::$tr> ser::$tr for PlainSer<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            fn $f<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), S::Error> {
                self.0.$f(&Plain(v))
            }
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )*};
}
plain_compound!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl<S: SerializeMap> SerializeMap for PlainSer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), S::Error> {
        self.0.serialize_key(&Plain(k))
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), S::Error> {
        self.0.serialize_value(&Plain(v))
    }
    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

macro_rules! plain_struct {
    ($($tr:ident),*) => {$(
        impl<S: ser::$tr> ser::$tr for PlainSer<S> {
            type Ok = S::Ok;
            type Error = S::Error;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                v: &T,
            ) -> Result<(), S::Error> {
                if v.serialize(IsNone) == Ok(true) {
                    self.0.skip_field(key)
                } else {
                    self.0.serialize_field(key, &Plain(v))
                }
            }
            fn end(self) -> Result<S::Ok, S::Error> {
                self.0.end()
            }
        }
    )*};
}
plain_struct!(SerializeStruct, SerializeStructVariant);

/// Answers whether a value serializes as `None` (anything compound stops at once: `Err`).
struct IsNone;

macro_rules! not_none {
    ($($f:ident($t:ty)),*) => {$(
        fn $f(self, _: $t) -> Result<bool, fmt::Error> { Ok(false) }
    )*};
}

impl Serializer for IsNone {
    type Ok = bool;
    type Error = fmt::Error;
    type SerializeSeq = ser::Impossible<bool, fmt::Error>;
    type SerializeTuple = ser::Impossible<bool, fmt::Error>;
    type SerializeTupleStruct = ser::Impossible<bool, fmt::Error>;
    type SerializeTupleVariant = ser::Impossible<bool, fmt::Error>;
    type SerializeMap = ser::Impossible<bool, fmt::Error>;
    type SerializeStruct = ser::Impossible<bool, fmt::Error>;
    type SerializeStructVariant = ser::Impossible<bool, fmt::Error>;
    not_none!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_unit_struct(&'static str)
    );
    fn serialize_none(self) -> Result<bool, fmt::Error> {
        Ok(true)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Result<bool, fmt::Error> {
        Ok(false)
    }
    fn serialize_unit(self) -> Result<bool, fmt::Error> {
        Ok(false)
    }
    fn serialize_unit_variant(self, _: &str, _: u32, _: &str) -> Result<bool, fmt::Error> {
        Ok(false)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &str,
        _: &T,
    ) -> Result<bool, fmt::Error> {
        Ok(false)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &str,
        _: u32,
        _: &str,
        _: &T,
    ) -> Result<bool, fmt::Error> {
        Ok(false)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_tuple_struct(
        self,
        _: &str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_tuple_variant(
        self,
        _: &str,
        _: u32,
        _: &str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_struct(self, _: &str, _: usize) -> Result<Self::SerializeStruct, fmt::Error> {
        Err(fmt::Error)
    }
    fn serialize_struct_variant(
        self,
        _: &str,
        _: u32,
        _: &str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, fmt::Error> {
        Err(fmt::Error)
    }
}

/// A message as Node consumers see it (pull, checks): the body as bytes (a `Buffer`).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NodeMessage<'a> {
    topic: &'a str,
    queue_id: u32,
    queue_offset: u64,
    offset: u64,
    msg_id: &'a str,
    tag: Option<&'a str>,
    keys: &'a [String],
    properties: Pairs<'a>,
    body: Bytes<&'a [u8]>,
    born_timestamp: u64,
    store_timestamp: u64,
    reconsume_times: u32,
    flag: i32,
    sys_flag: u32,
    born_host: String,
    store_host: String,
}

fn node_message_out(m: &Message) -> NodeMessage<'_> {
    NodeMessage {
        topic: &m.topic,
        queue_id: m.queue_id,
        queue_offset: m.queue_offset,
        offset: m.offset,
        msg_id: &m.msg_id,
        tag: m.tag.as_deref(),
        keys: &m.keys,
        properties: Pairs(&m.properties),
        body: Bytes(&m.body),
        born_timestamp: m.born_timestamp,
        store_timestamp: m.store_timestamp,
        reconsume_times: m.reconsume_times,
        flag: m.flag,
        sys_flag: m.sys_flag,
        born_host: m.born_host.to_string(),
        store_host: m.store_host.to_string(),
    }
}

/// A pull, its messages with `Buffer` bodies (Node).
pub fn node_pulled(p: &Pulled, one_queue: bool) -> impl Serialize + '_ {
    pulled_with(p, one_queue, node_message_out)
}

/// The checks of a drive step or the outputs, each with the broker time it was sent (Node).
pub fn node_checks(cs: &[(CheckRequest, u64)]) -> impl Serialize + '_ {
    #[derive(Serialize)]
    struct Check<'a> {
        group: &'a str,
        txn: String,
        check: u32,
        at: u64,
        message: NodeMessage<'a>,
    }
    cs.iter()
        .map(|(c, at)| Check {
            group: &c.group,
            txn: c.txn.to_string(),
            check: c.check,
            at: *at,
            message: node_message_out(&c.message),
        })
        .collect::<Vec<_>>()
}

/// Pending transactions without the offset field (Node).
pub fn node_pending_transactions(ps: &[PendingTxnInfo]) -> impl Serialize + '_ {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Pending<'a> {
        txn: String,
        group: &'a str,
        topic: &'a str,
        queue_id: u32,
        checks: u32,
        next_check: Option<u64>,
    }
    ps.iter()
        .map(|p| Pending {
            txn: p.txn.to_string(),
            group: &p.group,
            topic: &p.topic,
            queue_id: p.queue_id,
            checks: p.checks,
            next_check: p.next_check,
        })
        .collect::<Vec<_>>()
}

/// Consume-queue units without their bytes (Node).
pub fn node_consume_queue(units: &[CqUnit]) -> impl Serialize + '_ {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Unit {
        offset: u64,
        size: u32,
        tag_hash: i32,
    }
    units
        .iter()
        .map(|u| Unit {
            offset: u.offset,
            size: u.size,
            tag_hash: u.tag_hash,
        })
        .collect::<Vec<_>>()
}

/// Trace events in order.
pub fn traces(ts: &[TraceEvent]) -> impl Serialize + '_ {
    ts.iter().map(trace_out).collect::<Vec<_>>()
}

#[cfg(test)]
mod plain_tests {
    use rocklet_core::SendResult;

    use super::*;
    use crate::view::send_result;

    #[test]
    fn plain_writes_big_integers_as_floats_and_leaves_none_out() {
        let r = SendResult {
            msg_id: "M".into(),
            topic: "T".into(),
            queue_id: 1,
            queue_offset: 1 << 40,
            offset: 7,
            txn: None,
        };
        let v = serde_json::to_value(Plain(&send_result(&r))).unwrap();
        assert_eq!(v["queueOffset"].as_f64(), Some((1u64 << 40) as f64));
        assert!(v["queueOffset"].is_f64());
        assert!(v.get("txn").is_none(), "{v}");
        // Without Plain the same view keeps the null (wasm's shape).
        let v = serde_json::to_value(send_result(&r)).unwrap();
        assert!(v["txn"].is_null() && v.get("txn").is_some());
    }
}
