//! Commit-log records, field by field (the playground's and the bindings' record decoder).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use rocklet_core::record::{self, Decoded, RecordView};
use serde::Serialize;

use super::Bytes;

/// A field value: a number or a text.
#[derive(Serialize)]
#[serde(untagged)]
enum Value {
    U(u64),
    I(i64),
    S(String),
}

/// One field of a record: its RocketMQ name, where it is and how long, what it holds.
#[derive(Serialize)]
struct Field {
    name: &'static str,
    at: usize,
    len: usize,
    value: Value,
}

#[derive(Serialize)]
struct Property<'a> {
    key: &'a str,
    value: &'a str,
    at: usize,
    len: usize,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutRecord<'a> {
    offset: u64,
    size: usize,
    topic: &'a str,
    /// SYSFLAG's transaction type: `not`, `prepared`, `commit` or `rollback`.
    transaction_type: &'static str,
    body: String,
    properties: Vec<Property<'a>>,
    fields: Vec<Field>,
    bytes: Bytes<&'a [u8]>,
}

fn transaction_type(sys: u32) -> &'static str {
    match sys & record::sys_flag::TRANSACTION_TYPE_MASK {
        record::sys_flag::TRANSACTION_PREPARED_TYPE => "prepared",
        record::sys_flag::TRANSACTION_COMMIT_TYPE => "commit",
        record::sys_flag::TRANSACTION_ROLLBACK_TYPE => "rollback",
        _ => "not",
    }
}

/// Lays the decoded record out as its fields, in the order and sizes of the layout drawn in
/// `rocklet_core::record` (RocketMQ's CommitLog): every length comes from the decoded view.
fn fields<'a>(r: &RecordView<'a>) -> (Vec<Field>, Vec<Property<'a>>) {
    let h = &r.header;
    let v6 = |bit| if h.sys_flag & bit != 0 { 20 } else { 8 };
    let mut out = Vec::with_capacity(24);
    let mut at = 0;
    let mut push = |out: &mut Vec<Field>, name, len, value| {
        out.push(Field {
            name,
            at,
            len,
            value,
        });
        at += len;
        at
    };
    push(&mut out, "TOTALSIZE", 4, Value::U(r.total_size.into()));
    push(
        &mut out,
        "MAGICCODE",
        4,
        Value::S(format!("0x{:08X}", record::MESSAGE_MAGIC)),
    );
    push(&mut out, "BODYCRC", 4, Value::U(r.body_crc.into()));
    push(&mut out, "QUEUEID", 4, Value::U(h.queue_id.into()));
    push(&mut out, "FLAG", 4, Value::I(h.flag.into()));
    push(&mut out, "QUEUEOFFSET", 8, Value::U(h.queue_offset));
    push(&mut out, "PHYSICALOFFSET", 8, Value::U(h.phys_offset));
    push(
        &mut out,
        "SYSFLAG",
        4,
        Value::S(format!(
            "0x{:X} ({})",
            h.sys_flag,
            transaction_type(h.sys_flag)
        )),
    );
    push(&mut out, "BORNTIMESTAMP", 8, Value::U(h.born_timestamp));
    push(
        &mut out,
        "BORNHOST",
        v6(record::sys_flag::BORNHOST_V6),
        Value::S(h.born_host.to_string()),
    );
    push(&mut out, "STORETIMESTAMP", 8, Value::U(h.store_timestamp));
    push(
        &mut out,
        "STOREHOST",
        v6(record::sys_flag::STOREHOST_V6),
        Value::S(h.store_host.to_string()),
    );
    push(
        &mut out,
        "RECONSUMETIMES",
        4,
        Value::U(h.reconsume_times.into()),
    );
    push(
        &mut out,
        "PREPARED_TRANSACTION_OFFSET",
        8,
        Value::U(h.prepared_offset),
    );
    push(&mut out, "BODYLENGTH", 4, Value::U(r.body.len() as u64));
    push(
        &mut out,
        "BODY",
        r.body.len(),
        Value::S(String::from_utf8_lossy(r.body).into_owned()),
    );
    push(&mut out, "TOPICLENGTH", 1, Value::U(r.topic.len() as u64));
    push(&mut out, "TOPIC", r.topic.len(), Value::S(r.topic.into()));
    let props_len = r.properties.len() + record::CRC_RESERVED;
    let props_at = push(&mut out, "PROPERTIESLENGTH", 2, Value::U(props_len as u64));
    push(
        &mut out,
        "PROPERTIES",
        r.properties.len(),
        Value::S(format!("{} pairs", r.props().count())),
    );
    push(
        &mut out,
        "PROPERTIES (__CRC32#)",
        record::CRC_RESERVED,
        Value::S("CRC-32 of every byte before it".into()),
    );
    let mut props = Vec::new();
    let mut p = props_at;
    for (key, value) in r.props() {
        let len = key.len() + value.len() + 2;
        props.push(Property {
            key,
            value,
            at: p,
            len,
        });
        p += len;
    }
    (out, props)
}

/// A record at a log offset, decoded (with its CRCs verified) field by field; the error
/// (bytes that are not a valid record) says why, naming the offset.
pub fn decoded_record(offset: u64, bytes: &[u8]) -> Result<impl Serialize + '_, String> {
    let corrupt = |why: &dyn fmt::Display| format!("record at {offset}: {why}");
    let view = match record::decode(bytes, u32::MAX) {
        Ok(Decoded::Record(v)) => v,
        Ok(Decoded::Blank { len }) => {
            return Err(corrupt(&format!("an end-of-segment blank of {len} bytes")))
        }
        Ok(Decoded::Repaired { len }) => {
            return Err(corrupt(&format!("a repair blank over {len} damaged bytes")))
        }
        Ok(Decoded::Incomplete { .. }) => {
            return Err(corrupt(&"the bytes end before the record does"))
        }
        Err(e) => return Err(corrupt(&e)),
    };
    let (fields, properties) = fields(&view);
    Ok(OutRecord {
        offset,
        size: view.total_size as usize,
        topic: view.topic,
        transaction_type: transaction_type(view.header.sys_flag),
        body: String::from_utf8_lossy(view.body).into_owned(),
        properties,
        fields,
        bytes: Bytes(&bytes[..view.total_size as usize]),
    })
}
