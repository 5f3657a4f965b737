//! The commit-log record: RocketMQ's CommitLog layout, field for field.
//!
//! ```text
//!  offset size  field
//!  ------ ----  -----------------------------------------------------------
//!       0    4  TOTALSIZE        whole record, this field included (big-endian, as every field)
//!       4    4  MAGICCODE        0xDAA320A7 (v1); 0xCBD43194 marks the end-of-segment blank
//!       8    4  BODYCRC          CRC-32 of the body & 0x7FFFFFFF (RocketMQ's UtilAll.crc32)
//!      12    4  QUEUEID
//!      16    4  FLAG             the producer's flag, opaque
//!      20    8  QUEUEOFFSET      position in the consume queue of (TOPIC, QUEUEID)
//!      28    8  PHYSICALOFFSET   position of this record in the log
//!      36    4  SYSFLAG          transaction type, host address families, batch
//!      40    8  BORNTIMESTAMP    ms
//!      48    8  BORNHOST         IPv4 (4) + port (4); 16 + 4 with SYSFLAG bit 0x10
//!      56    8  STORETIMESTAMP   ms
//!      64    8  STOREHOST        IPv4 (4) + port (4); 16 + 4 with SYSFLAG bit 0x20
//!      72    4  RECONSUMETIMES
//!      76    8  PREPARED_TRANSACTION_OFFSET  for op records: the record they refer to
//!      84    4  BODY length, then the body
//!       .    1  TOPIC length, then the topic
//!       .    2  PROPERTIES length, then `key\x01value\x02` pairs; the last pair is always
//!               `__CRC32#\x01dddddddddd\x02`: ten decimal digits of the masked CRC-32 of every
//!               byte of the record before that pair (RocketMQ 5's CRC32 property, as its
//!               `enabledAppendPropCRC` writes it: least significant digit first), so a torn
//!               or flipped byte anywhere in the record is detected, not only in the body.
//! ```
//!
//! Reading, [`decode`] also takes the digits most significant first (Rocklet's format 1,
//! before 0.2) and MESSAGE_MAGIC_CODE_V2 (0xDAA320AB), whose TOPIC length takes two bytes.
//! A record of Rocklet's log always carries the CRC: without it the header would go
//! unchecked. [`decode_rocketmq`], for reading Apache RocketMQ's own stores, also takes
//! records without the property (RocketMQ's default), checked by BODYCRC alone as RocketMQ
//! checks them.
//!
//! A repair on open ([`Broker::open_repairing`](crate::Broker::open_repairing)) lays a
//! *repair blank* over damage it moved out: TOTALSIZE and MAGICCODE 0x524C5250 (`RLRP`),
//! read as a blank whose records before it in an atomic group were kept by the repair.
//!
//! With IPv4 hosts the fixed part is 91 bytes. The end-of-segment blank is only its first
//! eight bytes (TOTALSIZE = the rest of the segment, MAGICCODE = 0xCBD43194); whatever
//! follows in that segment is not read.

use alloc::vec::Vec;
use core::fmt;

use crate::crc;

/// MAGICCODE of a message record (RocketMQ's MESSAGE_MAGIC_CODE, v1).
pub const MESSAGE_MAGIC: u32 = 0xDAA3_20A7;
/// MAGICCODE of a v2 record (RocketMQ's MESSAGE_MAGIC_CODE_V2): a two-byte TOPIC length.
/// Read, never written.
pub const MESSAGE_MAGIC_V2: u32 = 0xDAA3_20AB;
/// MAGICCODE of the filler at the end of a segment (RocketMQ's BLANK_MAGIC_CODE).
pub const BLANK_MAGIC: u32 = 0xCBD4_3194;
/// MAGICCODE of a repair blank (Rocklet's own): skips damage a repair moved to quarantine.
pub const REPAIR_MAGIC: u32 = 0x524C_5250;
/// Smallest blank: TOTALSIZE + MAGICCODE.
pub const BLANK_LEN: usize = 8;
/// The CRC property's key.
pub const CRC_KEY: &str = "__CRC32#";
/// Bytes the CRC property takes at the end of every record.
pub const CRC_RESERVED: usize = CRC_KEY.len() + 1 + 10 + 1;
/// Fixed bytes of a record with IPv4 hosts, all length fields included.
pub const FIXED_LEN_V4: usize = 91;
/// The fixed fields before the body with IPv4 hosts (BODY length the last).
const HEAD_LEN_V4: usize = FIXED_LEN_V4 - 3;
/// Room for the fields before the body with IPv6 hosts (the longest, 112 bytes, a whole
/// number of 16-byte blocks) or fewer bytes and the zeros before them.
const HEAD_MAX: usize = HEAD_LEN_V4 + 2 * 12;

/// Property separators.
pub const NAME_VALUE_SEPARATOR: u8 = 1;
pub const PROPERTY_SEPARATOR: u8 = 2;

/// SYSFLAG bits (RocketMQ's MessageSysFlag).
pub mod sys_flag {
    pub const COMPRESSED: u32 = 0x1;
    pub const MULTI_TAGS: u32 = 0x2;
    pub const TRANSACTION_TYPE_MASK: u32 = 0xC;
    pub const TRANSACTION_NOT_TYPE: u32 = 0;
    pub const TRANSACTION_PREPARED_TYPE: u32 = 0x4;
    pub const TRANSACTION_COMMIT_TYPE: u32 = 0x8;
    pub const TRANSACTION_ROLLBACK_TYPE: u32 = 0xC;
    pub const BORNHOST_V6: u32 = 0x10;
    pub const STOREHOST_V6: u32 = 0x20;
    pub const INNER_BATCH: u32 = 0x80;
}

/// A host address as stored in BORNHOST / STOREHOST.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub enum Host {
    /// IPv4 address and port.
    V4([u8; 4], u16),
    /// IPv6 address and port.
    V6([u8; 16], u16),
    /// 0.0.0.0:0.
    #[default]
    Unspecified,
}

impl Host {
    fn is_v6(&self) -> bool {
        matches!(self, Host::V6(..))
    }
    fn encoded_len(&self) -> usize {
        if self.is_v6() {
            20
        } else {
            8
        }
    }
    fn put(&self, put: &mut impl FnMut(&[u8])) {
        match self {
            Host::V4(ip, port) => {
                put(ip);
                put(&u32::from(*port).to_be_bytes());
            }
            Host::V6(ip, port) => {
                put(ip);
                put(&u32::from(*port).to_be_bytes());
            }
            Host::Unspecified => put(&[0; 8]),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::V4(ip, port) => write!(f, "{}.{}.{}.{}:{port}", ip[0], ip[1], ip[2], ip[3]),
            Host::V6(ip, port) => {
                f.write_str("[")?;
                for (i, pair) in ip.chunks(2).enumerate() {
                    if i > 0 {
                        f.write_str(":")?;
                    }
                    write!(f, "{:x}", u16::from_be_bytes([pair[0], pair[1]]))?;
                }
                write!(f, "]:{port}")
            }
            Host::Unspecified => f.write_str("0.0.0.0:0"),
        }
    }
}

/// The fixed fields of a record, as the encoder takes them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub queue_id: u32,
    pub flag: i32,
    pub queue_offset: u64,
    pub phys_offset: u64,
    pub sys_flag: u32,
    pub born_timestamp: u64,
    pub born_host: Host,
    pub store_timestamp: u64,
    pub store_host: Host,
    pub reconsume_times: u32,
    pub prepared_offset: u64,
}

/// Masked CRC-32, as RocketMQ's `UtilAll.crc32`.
#[must_use]
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes) & 0x7FFF_FFFF
}

/// Length of the record [`encode`] writes for these parts.
#[must_use]
pub fn encoded_len(header: &Header, body_len: usize, topic_len: usize, props_len: usize) -> usize {
    FIXED_LEN_V4 - 16
        + header.born_host.encoded_len()
        + header.store_host.encoded_len()
        + body_len
        + topic_len
        + props_len
        + CRC_RESERVED
}

/// Limits a record must respect to be encodable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The topic is longer than 255 bytes.
    TopicTooLong,
    /// The properties are longer than 32767 bytes.
    PropertiesTooLong,
    /// The record is longer than i32::MAX bytes.
    TooLarge,
}

/// Appends one record to `out`. `props` is the serialized property string
/// (`key\x01value\x02`…) without the CRC pair, which is added here.
pub fn encode(
    out: &mut Vec<u8>,
    header: &Header,
    body: &[u8],
    topic: &str,
    props: &[u8],
) -> Result<usize, EncodeError> {
    encode_viewed(out, header, body, topic, props).map(|v| v.total_size as usize)
}

/// [`encode`], returning the record as [`decode`] would read it back, borrowing the parts
/// it was encoded from (so the writer need not decode what it just wrote).
pub(crate) fn encode_viewed<'a>(
    out: &mut Vec<u8>,
    header: &Header,
    body: &'a [u8],
    topic: &'a str,
    props: &'a [u8],
) -> Result<RecordView<'a>, EncodeError> {
    if topic.len() > u8::MAX as usize {
        return Err(EncodeError::TopicTooLong);
    }
    let props_len = props.len() + CRC_RESERVED;
    if props_len > i16::MAX as usize {
        return Err(EncodeError::PropertiesTooLong);
    }
    let total = encoded_len(header, body.len(), topic.len(), props.len());
    if total > i32::MAX as usize {
        return Err(EncodeError::TooLarge);
    }
    let start = out.len();
    out.reserve(total);
    let mut sys_flag = header.sys_flag & !(sys_flag::BORNHOST_V6 | sys_flag::STOREHOST_V6);
    if header.born_host.is_v6() {
        sys_flag |= sys_flag::BORNHOST_V6;
    }
    if header.store_host.is_v6() {
        sys_flag |= sys_flag::STOREHOST_V6;
    }
    let body_crc = crc32fast::hash(body);
    // The fixed fields, up to the body, in one array: one copy into `out`, and the record CRC
    // takes them from here. They go after zeros that round them up to a whole number of
    // 16-byte blocks (88 bytes with IPv4 hosts: 8 zeros), which crc32fast hashes fastest.
    let head_len =
        HEAD_LEN_V4 - 16 + header.born_host.encoded_len() + header.store_host.encoded_len();
    let pad = head_len.next_multiple_of(16) - head_len;
    let mut head = [0u8; HEAD_MAX];
    let mut at = pad;
    let mut put = |bytes: &[u8]| {
        head[at..at + bytes.len()].copy_from_slice(bytes);
        at += bytes.len();
    };
    put(&(total as u32).to_be_bytes());
    put(&MESSAGE_MAGIC.to_be_bytes());
    put(&(body_crc & 0x7FFF_FFFF).to_be_bytes());
    put(&header.queue_id.to_be_bytes());
    put(&header.flag.to_be_bytes());
    put(&header.queue_offset.to_be_bytes());
    put(&header.phys_offset.to_be_bytes());
    put(&sys_flag.to_be_bytes());
    put(&header.born_timestamp.to_be_bytes());
    header.born_host.put(&mut put);
    put(&header.store_timestamp.to_be_bytes());
    header.store_host.put(&mut put);
    put(&header.reconsume_times.to_be_bytes());
    put(&header.prepared_offset.to_be_bytes());
    put(&(body.len() as u32).to_be_bytes());
    debug_assert_eq!(at, pad + head_len);
    let head = &head[..pad + head_len];
    out.extend_from_slice(&head[pad..]);
    out.extend_from_slice(body);
    out.push(topic.len() as u8);
    out.extend_from_slice(topic.as_bytes());
    out.extend_from_slice(&(props_len as u16).to_be_bytes());
    out.extend_from_slice(props);
    // The record CRC covers the body again: not a second pass over it, but the head's CRC
    // (the head holds BODYCRC, so it follows the body's) combined with the body's, carried
    // over the tail. body.len() <= total <= i32::MAX, checked above. Every part is hashed
    // from where it came from, never read back from `out`: bytes just stored into a line of
    // the segment that is not yet in the cache cannot be loaded before the line arrives.
    let mut crc = crc::combine(crc::hash_padded(head, pad), body_crc, body.len() as u32);
    crc = crc::update(crc, &[topic.len() as u8]);
    crc = crc::update(crc, topic.as_bytes());
    crc = crc::update(crc, &(props_len as u16).to_be_bytes());
    let crc = crc::update(crc, props) & 0x7FFF_FFFF;
    out.extend_from_slice(CRC_KEY.as_bytes());
    out.push(NAME_VALUE_SEPARATOR);
    push_decimal10(out, crc);
    out.push(PROPERTY_SEPARATOR);
    debug_assert_eq!(out.len() - start, total);
    // Decoding reads 0.0.0.0:0 as the unspecified host.
    let read_back = |h: Host| match h {
        Host::V4([0, 0, 0, 0], 0) => Host::Unspecified,
        h => h,
    };
    Ok(RecordView {
        total_size: total as u32,
        body_crc: body_crc & 0x7FFF_FFFF,
        header: Header {
            sys_flag,
            born_host: read_back(header.born_host),
            store_host: read_back(header.store_host),
            ..*header
        },
        body,
        topic,
        properties: props,
    })
}

/// Ten decimal digits, least significant first (RocketMQ's `MessageDecoder.createCrc32`).
fn push_decimal10(out: &mut Vec<u8>, mut v: u32) {
    let mut digits = [b'0'; 10];
    for d in &mut digits {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out.extend_from_slice(&digits);
}

/// Appends the end-of-segment blank for `remaining` bytes.
pub fn encode_blank(out: &mut Vec<u8>, remaining: u32) {
    out.extend_from_slice(&remaining.to_be_bytes());
    out.extend_from_slice(&BLANK_MAGIC.to_be_bytes());
}

/// Appends a repair blank over `len` bytes (see the module doc).
pub fn encode_repair_blank(out: &mut Vec<u8>, len: u32) {
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&REPAIR_MAGIC.to_be_bytes());
}

/// Why bytes are not a valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corruption {
    BadMagic(u32),
    BadTotalSize(u32),
    BadLengths,
    BodyCrc,
    RecordCrc,
    MissingCrc,
    BadProperties,
    BadTopic,
    PhysOffsetMismatch {
        stored: u64,
        actual: u64,
    },
    /// A host port above 65535.
    BadPort(u32),
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Corruption::BadMagic(m) => write!(f, "unknown magic code {m:#010x}"),
            Corruption::BadTotalSize(s) => write!(f, "impossible total size {s}"),
            Corruption::BadLengths => f.write_str("field lengths do not add up to the total size"),
            Corruption::BodyCrc => f.write_str("body CRC mismatch"),
            Corruption::RecordCrc => f.write_str("record CRC mismatch"),
            Corruption::MissingCrc => f.write_str("record CRC property missing"),
            Corruption::BadProperties => f.write_str("malformed properties"),
            Corruption::BadTopic => f.write_str("topic is not valid UTF-8"),
            Corruption::BadPort(p) => write!(f, "host port {p} is above 65535"),
            Corruption::PhysOffsetMismatch { stored, actual } => {
                write!(
                    f,
                    "record says it is at offset {stored} but was read at {actual}"
                )
            }
        }
    }
}

/// What the bytes at a position hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded<'a> {
    /// A whole, valid record.
    Record(RecordView<'a>),
    /// The end-of-segment blank of `len` bytes; the segment holds nothing more.
    Blank { len: u32 },
    /// A repair blank of `len` bytes: the log goes on after it, or the segment ends there
    /// when it reaches the segment's end.
    Repaired { len: u32 },
    /// The bytes end before the record does (a torn tail, or a read that was too short).
    /// `needed` is the record's length where it is known.
    Incomplete { needed: Option<usize> },
}

/// A decoded record, borrowing from the bytes it was decoded from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub total_size: u32,
    pub body_crc: u32,
    pub header: Header,
    pub body: &'a [u8],
    pub topic: &'a str,
    /// The properties without the CRC pair.
    pub properties: &'a [u8],
}

impl fmt::Debug for RecordView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordView")
            .field("total_size", &self.total_size)
            .field("topic", &self.topic)
            .field("header", &self.header)
            .field("body_len", &self.body.len())
            .finish()
    }
}

impl<'a> RecordView<'a> {
    /// The properties as (key, value) pairs.
    pub fn props(&self) -> Props<'a> {
        Props {
            rest: self.properties,
        }
    }
    /// The value of one property (the first pair with that key).
    pub fn prop(&self, key: &str) -> Option<&'a str> {
        let [v] = self.props_of([key]);
        v
    }
    /// The values of several properties in one pass: for each key what [`RecordView::prop`]
    /// gives (the first pair with that key).
    ///
    /// Keys are compared as bytes and only the values returned are checked for UTF-8: the
    /// properties of a view are valid already (validated when the bytes were first decoded,
    /// or encoded by this process from `&str`s), so checking every pair again, as [`Props`]
    /// does, buys nothing here. A matching value that is not UTF-8 ends the scan there.
    pub fn props_of<const N: usize>(&self, keys: [&str; N]) -> [Option<&'a str>; N] {
        let mut out = [None; N];
        let mut rest = self.properties;
        while let Some((k, v, next)) = split_pair(rest) {
            for (slot, key) in out.iter_mut().zip(keys) {
                if slot.is_none() && key.as_bytes() == k {
                    match core::str::from_utf8(v) {
                        Ok(v) => *slot = Some(v),
                        Err(_) => return out,
                    }
                }
            }
            rest = next;
        }
        out
    }
}

/// The first `key\x01value\x02` pair of `bytes` as (key, value, the bytes after it), `None`
/// when there is none or it is malformed (no separator before the pair's end).
fn split_pair(bytes: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    // One pass over the pair: the first separator of either kind must be the key's.
    let sep = bytes
        .iter()
        .position(|&b| b == NAME_VALUE_SEPARATOR || b == PROPERTY_SEPARATOR)?;
    if bytes[sep] != NAME_VALUE_SEPARATOR {
        return None;
    }
    let value = &bytes[sep + 1..];
    let end = value.iter().position(|&b| b == PROPERTY_SEPARATOR)?;
    Some((&bytes[..sep], &value[..end], &value[end + 1..]))
}

/// Iterator over `key\x01value\x02` pairs. Stops at the first malformed pair;
/// records are validated when decoded, so this never happens for a [`RecordView`].
#[derive(Clone, Debug)]
pub struct Props<'a> {
    rest: &'a [u8],
}

impl<'a> Props<'a> {
    /// Pairs of an already serialized property string.
    pub fn new(bytes: &'a [u8]) -> Self {
        Props { rest: bytes }
    }
}

impl<'a> Iterator for Props<'a> {
    type Item = (&'a str, &'a str);
    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let sep = self.rest.iter().position(|&b| b == NAME_VALUE_SEPARATOR)?;
        let end = self.rest.iter().position(|&b| b == PROPERTY_SEPARATOR)?;
        if end < sep {
            return None;
        }
        // One check for the pair: split at the ASCII separator, both halves are UTF-8 when
        // the pair is.
        let pair = core::str::from_utf8(&self.rest[..end]).ok()?;
        let (key, value) = (&pair[..sep], &pair[sep + 1..]);
        self.rest = &self.rest[end + 1..];
        Some((key, value))
    }
}

/// Checks a serialized property string: UTF-8 pairs, each `key\x01value\x02`, keys non-empty.
pub fn validate_props(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some(end) = rest.iter().position(|&b| b == PROPERTY_SEPARATOR) else {
            return false;
        };
        let pair = &rest[..end];
        let Some(sep) = pair.iter().position(|&b| b == NAME_VALUE_SEPARATOR) else {
            return false;
        };
        if sep == 0 || pair[sep + 1..].contains(&NAME_VALUE_SEPARATOR) {
            return false;
        }
        if core::str::from_utf8(pair).is_err() {
            return false;
        }
        rest = &rest[end + 1..];
    }
    true
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

fn host(b: &[u8], at: usize, v6: bool) -> Result<(Host, usize), Corruption> {
    let (ip_len, port_at) = if v6 { (16, at + 16) } else { (4, at + 4) };
    let port = be32(b, port_at);
    let port = u16::try_from(port).map_err(|_| Corruption::BadPort(port))?;
    if v6 {
        let mut ip = [0; 16];
        ip.copy_from_slice(&b[at..at + ip_len]);
        Ok((Host::V6(ip, port), at + 20))
    } else {
        let mut ip = [0; 4];
        ip.copy_from_slice(&b[at..at + ip_len]);
        if ip == [0; 4] && port == 0 {
            Ok((Host::Unspecified, at + 8))
        } else {
            Ok((Host::V4(ip, port), at + 8))
        }
    }
}

/// Decodes the record at the start of `bytes`. `max_size` bounds TOTALSIZE so a
/// corrupt length can never ask for an unbounded read. The record must carry the CRC
/// property (every record of Rocklet's log does).
pub fn decode(bytes: &[u8], max_size: u32) -> Result<Decoded<'_>, Corruption> {
    decode_inner(bytes, max_size, true, true)
}

/// [`decode`] for records Apache RocketMQ wrote: one without the CRC property (RocketMQ's
/// default) is checked by BODYCRC alone, as RocketMQ checks it.
pub fn decode_rocketmq(bytes: &[u8], max_size: u32) -> Result<Decoded<'_>, Corruption> {
    decode_inner(bytes, max_size, true, false)
}

/// Decodes a record this process just encoded or already verified: the CRCs are not
/// checked again (lengths still are).
pub fn decode_trusted(bytes: &[u8]) -> Result<Decoded<'_>, Corruption> {
    decode_inner(bytes, u32::MAX, false, false)
}

fn decode_inner(
    bytes: &[u8],
    max_size: u32,
    verify: bool,
    require_crc: bool,
) -> Result<Decoded<'_>, Corruption> {
    if bytes.len() < BLANK_LEN {
        return Ok(Decoded::Incomplete { needed: None });
    }
    let total = be32(bytes, 0);
    let magic = be32(bytes, 4);
    match magic {
        BLANK_MAGIC | REPAIR_MAGIC => {
            if (total as usize) < BLANK_LEN {
                return Err(Corruption::BadTotalSize(total));
            }
            return Ok(if magic == BLANK_MAGIC {
                Decoded::Blank { len: total }
            } else {
                Decoded::Repaired { len: total }
            });
        }
        MESSAGE_MAGIC | MESSAGE_MAGIC_V2 => {}
        other => return Err(Corruption::BadMagic(other)),
    }
    let topic_len_bytes = if magic == MESSAGE_MAGIC_V2 { 2 } else { 1 };
    if (total as usize) < FIXED_LEN_V4 || total > max_size {
        return Err(Corruption::BadTotalSize(total));
    }
    let total_us = total as usize;
    if bytes.len() < total_us {
        return Ok(Decoded::Incomplete {
            needed: Some(total_us),
        });
    }
    let b = &bytes[..total_us];
    let sys = be32(b, 36);
    let fixed = FIXED_LEN_V4
        + if sys & sys_flag::BORNHOST_V6 != 0 {
            12
        } else {
            0
        }
        + if sys & sys_flag::STOREHOST_V6 != 0 {
            12
        } else {
            0
        };
    if total_us < fixed + topic_len_bytes - 1 {
        return Err(Corruption::BadTotalSize(total));
    }
    let (born_host, at) = host(b, 48, sys & sys_flag::BORNHOST_V6 != 0)?;
    let store_timestamp = be64(b, at);
    let (store_host, at) = host(b, at + 8, sys & sys_flag::STOREHOST_V6 != 0)?;
    let reconsume_times = be32(b, at);
    let prepared_offset = be64(b, at + 4);
    let body_len = be32(b, at + 12) as usize;
    let body_at = at + 16;
    // fixed counts the three length fields; what is left must hold body, topic and props.
    if body_len > total_us - fixed {
        return Err(Corruption::BadLengths);
    }
    let topic_len_at = body_at + body_len;
    if topic_len_at + topic_len_bytes > total_us {
        return Err(Corruption::BadLengths);
    }
    let topic_len = if topic_len_bytes == 2 {
        usize::from(u16::from_be_bytes([b[topic_len_at], b[topic_len_at + 1]]))
    } else {
        usize::from(b[topic_len_at])
    };
    let topic_at = topic_len_at + topic_len_bytes;
    if topic_at + topic_len + 2 > total_us {
        return Err(Corruption::BadLengths);
    }
    let props_len_at = topic_at + topic_len;
    let props_len = u16::from_be_bytes([b[props_len_at], b[props_len_at + 1]]) as usize;
    let props_at = props_len_at + 2;
    if props_at + props_len != total_us {
        return Err(Corruption::BadLengths);
    }
    // The CRC pair, when the record carries one, is the last `key\x01value\x02` pair.
    let crc_at = total_us - CRC_RESERVED;
    let crc_pair = props_len >= CRC_RESERVED
        && &b[crc_at..crc_at + CRC_KEY.len()] == CRC_KEY.as_bytes()
        && b[crc_at + CRC_KEY.len()] == NAME_VALUE_SEPARATOR
        && b[total_us - 1] == PROPERTY_SEPARATOR;
    let properties_end = if crc_pair { crc_at } else { total_us };
    if crc_pair {
        let digits = &b[crc_at + CRC_KEY.len() + 1..total_us - 1];
        if !digits.iter().all(u8::is_ascii_digit) {
            return Err(Corruption::MissingCrc);
        }
        if verify {
            // Least significant digit first (RocketMQ, and Rocklet from format 2), or most
            // significant first (Rocklet's format 1).
            let lsd_first = digits
                .iter()
                .rev()
                .fold(0u64, |v, d| v * 10 + u64::from(d - b'0'));
            let msd_first = digits
                .iter()
                .fold(0u64, |v, d| v * 10 + u64::from(d - b'0'));
            let actual = u64::from(crc32(&b[..crc_at]));
            if lsd_first != actual && msd_first != actual {
                return Err(Corruption::RecordCrc);
            }
        }
    } else if require_crc {
        return Err(Corruption::MissingCrc);
    } else if verify && last_key_is_a_damaged_crc_key(&b[props_at..total_us]) {
        // Without the pair, BODYCRC alone vouches for the record (as RocketMQ checks its
        // own); a CRC key one byte off is damage to a record that had one, not such a record.
        return Err(Corruption::MissingCrc);
    }
    let body = &b[body_at..body_at + body_len];
    let body_crc = be32(b, 8);
    if verify && body_crc != crc32(body) {
        return Err(Corruption::BodyCrc);
    }
    let topic = core::str::from_utf8(&b[topic_at..topic_at + topic_len])
        .map_err(|_| Corruption::BadTopic)?;
    let properties = &b[props_at..properties_end];
    if verify && !validate_props(properties) {
        return Err(Corruption::BadProperties);
    }
    Ok(Decoded::Record(RecordView {
        total_size: total,
        body_crc,
        header: Header {
            queue_id: be32(b, 12),
            flag: be32(b, 16) as i32,
            queue_offset: be64(b, 20),
            phys_offset: be64(b, 28),
            sys_flag: sys,
            born_timestamp: be64(b, 40),
            born_host,
            store_timestamp,
            store_host,
            reconsume_times,
            prepared_offset,
        },
        body,
        topic,
        properties,
    }))
}

/// Whether the last pair of a property string has a key of the CRC key's length that
/// differs from it in exactly one byte (a flipped bit in a record that carried the CRC).
fn last_key_is_a_damaged_crc_key(props: &[u8]) -> bool {
    let Some(body) = props.strip_suffix(&[PROPERTY_SEPARATOR]) else {
        return false;
    };
    let start = body
        .iter()
        .rposition(|&b| b == PROPERTY_SEPARATOR)
        .map_or(0, |p| p + 1);
    let pair = &body[start..];
    let Some(sep) = pair.iter().position(|&b| b == NAME_VALUE_SEPARATOR) else {
        return false;
    };
    let key = &pair[..sep];
    key.len() == CRC_KEY.len()
        && key
            .iter()
            .zip(CRC_KEY.as_bytes())
            .filter(|(a, b)| a != b)
            .count()
            == 1
}

/// Appends `key\x01value\x02` to a property string.
pub fn push_prop(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    out.push(NAME_VALUE_SEPARATOR);
    out.extend_from_slice(value.as_bytes());
    out.push(PROPERTY_SEPARATOR);
}

#[cfg(test)]
mod tests;
