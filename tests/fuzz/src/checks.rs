//! The decoder and recovery fuzz targets, as plain functions of the input bytes that panic
//! when an invariant breaks. Depends on rocklet-core only: the conformance crate's
//! `tests/regressions.rs` includes this file and replays `tests/vectors/regressions/`.
//!
//! Random bytes almost never carry a valid CRC, so the targets that want to reach past the
//! CRC checks *repair* records first ([`fix_record`]): lengths clamped into range, then the
//! body CRC and the record CRC written, so the fuzzer explores what a record holds rather
//! than fighting the checksums.

use rocklet_core::record::{self, Decoded, Header, Host, Props, CRC_KEY, CRC_RESERVED};
use rocklet_core::{Broker, Config, MemStorage, NewMessage, Reply, Request};

/// Largest record the decoder targets accept.
const MAX_RECORD: u32 = 1 << 20;

/// Reads the fuzz input as a stream of small values; past the end it yields zeros.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { rest: bytes }
    }
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
    pub fn u8(&mut self) -> u8 {
        match self.rest.split_first() {
            Some((&b, rest)) => {
                self.rest = rest;
                b
            }
            None => 0,
        }
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        let mut x = [0; 8];
        for b in &mut x {
            *b = self.u8();
        }
        u64::from_be_bytes(x)
    }
    /// Up to `n` bytes.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = b;
        a
    }
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Makes `buf` (the whole record, at log offset `phys`) pass the length and CRC checks where
/// it can: TOTALSIZE, MAGICCODE, PHYSICALOFFSET, BODY / TOPIC lengths clamped, PROPERTIES
/// length, body CRC and the trailing CRC property. Content (flags, hosts, topic bytes,
/// property bytes) stays as the fuzzer made it. Does nothing to buffers too short or long.
pub fn fix_record(buf: &mut [u8], phys: Option<u64>) {
    let len = buf.len();
    if len < record::FIXED_LEN_V4 + CRC_RESERVED || len > MAX_RECORD as usize {
        return;
    }
    buf[0..4].copy_from_slice(&(len as u32).to_be_bytes());
    buf[4..8].copy_from_slice(&record::MESSAGE_MAGIC.to_be_bytes());
    if let Some(p) = phys {
        buf[28..36].copy_from_slice(&p.to_be_bytes());
    }
    let sys = be32(buf, 36);
    let hb = if sys & record::sys_flag::BORNHOST_V6 != 0 {
        20
    } else {
        8
    };
    let hs = if sys & record::sys_flag::STOREHOST_V6 != 0 {
        20
    } else {
        8
    };
    let fixed = record::FIXED_LEN_V4 - 16 + hb + hs;
    if len < fixed + CRC_RESERVED {
        return;
    }
    let at = 48 + hb + 8 + hs;
    let body_len_at = at + 12;
    let body_at = at + 16;
    // Room for body + topic: everything but the fixed part and the CRC pair.
    let room = len - fixed - CRC_RESERVED;
    let mut body_len = be32(buf, body_len_at) as usize;
    if body_len > room {
        body_len %= room + 1;
    }
    buf[body_len_at..body_at].copy_from_slice(&(body_len as u32).to_be_bytes());
    let topic_len_at = body_at + body_len;
    let mut topic_len = buf[topic_len_at] as usize;
    let topic_room = room - body_len;
    if topic_len > topic_room {
        topic_len %= topic_room + 1;
    }
    buf[topic_len_at] = topic_len as u8;
    let props_len_at = topic_len_at + 1 + topic_len;
    let props_len = len - props_len_at - 2;
    if props_len > i16::MAX as usize {
        return;
    }
    buf[props_len_at..props_len_at + 2].copy_from_slice(&(props_len as u16).to_be_bytes());
    let body_crc = record::crc32(&buf[body_at..body_at + body_len]);
    buf[8..12].copy_from_slice(&body_crc.to_be_bytes());
    let crc_at = len - CRC_RESERVED;
    let crc = record::crc32(&buf[..crc_at]);
    let mut pair = [0u8; CRC_RESERVED];
    pair[..CRC_KEY.len()].copy_from_slice(CRC_KEY.as_bytes());
    pair[CRC_KEY.len()] = record::NAME_VALUE_SEPARATOR;
    // Least significant digit first, as RocketMQ and the encoder write them.
    let mut v = crc;
    for d in &mut pair[CRC_KEY.len() + 1..CRC_RESERVED - 1] {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
    pair[CRC_RESERVED - 1] = record::PROPERTY_SEPARATOR;
    buf[crc_at..].copy_from_slice(&pair);
}

/// `record_decode`: the first byte picks raw bytes (odd: no repair) or a repaired record.
/// `decode` never panics; a decoded record re-encodes to exactly the bytes it came from;
/// `decode_trusted` agrees with `decode` on verified bytes.
pub fn record_decode(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut buf = rest.to_vec();
    if mode & 1 == 0 {
        fix_record(&mut buf, None);
    }
    let _ = record::decode_trusted(&buf);
    match record::decode(&buf, MAX_RECORD) {
        Ok(Decoded::Record(r)) => {
            let total = r.total_size as usize;
            assert!(total <= buf.len());
            let mut out = Vec::new();
            record::encode(&mut out, &r.header, r.body, r.topic, r.properties)
                .expect("a decoded record is encodable");
            if out != buf[..total] {
                // Only a record in another form than the encoder's re-encodes differently:
                // MESSAGE_MAGIC_CODE_V2, no CRC pair (RocketMQ's default), or the digits of
                // Rocklet's format 1 (most significant first). Its fields are the same.
                let own = &buf[..total];
                let magic = u32::from_be_bytes([own[4], own[5], own[6], own[7]]);
                let crc_at = total - CRC_RESERVED;
                let lsd_ok = own[crc_at..].starts_with(CRC_KEY.as_bytes())
                    && own[crc_at + CRC_KEY.len() + 1..total - 1]
                        .iter()
                        .rev()
                        .fold(0u64, |v, d| v * 10 + u64::from(d.wrapping_sub(b'0')))
                        == u64::from(record::crc32(&own[..crc_at]));
                assert!(
                    magic == record::MESSAGE_MAGIC_V2 || !lsd_ok,
                    "re-encoding {r:?} does not reproduce its bytes: first difference at byte {:?}",
                    out.iter().zip(own).position(|(a, b)| a != b)
                );
                match record::decode(&out, MAX_RECORD) {
                    Ok(Decoded::Record(again)) => {
                        assert_eq!(again.header, r.header);
                        assert_eq!(
                            (again.body, again.topic, again.properties),
                            (r.body, r.topic, r.properties)
                        );
                    }
                    other => panic!("a re-encoded record does not decode: {other:?}"),
                }
            }
            match record::decode_trusted(&buf) {
                Ok(Decoded::Record(t)) => assert_eq!(t, r),
                other => panic!("decode_trusted disagrees with decode: {other:?}"),
            }
        }
        Ok(Decoded::Blank { len } | Decoded::Repaired { len }) => {
            assert!(len as usize >= record::BLANK_LEN)
        }
        Ok(Decoded::Incomplete { needed }) => {
            if let Some(n) = needed {
                assert!(n > buf.len(), "incomplete, yet {n} <= {} bytes", buf.len());
            }
        }
        Err(_) => {}
    }
}

/// `props_decode`: `validate_props` and `Props` never panic and agree: a valid string is
/// consumed whole by the iterator and serializes back to itself; a string the iterator
/// consumes whole with non-empty keys and no separator inside a value is valid.
pub fn props_decode(data: &[u8]) {
    let valid = record::validate_props(data);
    let pairs: Vec<(&str, &str)> = Props::new(data).collect();
    let mut again = Vec::new();
    for (k, v) in &pairs {
        record::push_prop(&mut again, k, v);
    }
    let consumed_all = again.len() == data.len();
    if valid {
        assert!(
            consumed_all,
            "valid properties, iteration stopped early: {pairs:?}"
        );
        assert_eq!(again, data, "valid properties do not serialize back");
    }
    let well_formed = pairs
        .iter()
        .all(|(k, v)| !k.is_empty() && !v.as_bytes().contains(&record::NAME_VALUE_SEPARATOR));
    if consumed_all && well_formed {
        assert!(valid, "iteration accepts {pairs:?} but validation does not");
    }
}

fn test_config() -> Config {
    Config {
        segment_size: 1 << 16,
        max_message_size: 1024,
        max_batch_size: 4096,
        default_queues: 2,
        ..Config::default()
    }
}

/// `batch_decode`: the input describes a run of records (some opening atomic groups with
/// `__BATCH_LEN`, as a batch append writes them) followed by damage (truncation, bit flips,
/// overwritten runs). Recovery over a segment holding them never panics; what it keeps is
/// a prefix of the records, byte for byte; every group is kept whole or not at all; every
/// group that ends before the first damaged byte is kept.
pub fn batch_decode(data: &[u8]) {
    let mut r = Reader::new(data);
    let n = 1 + usize::from(r.u8() % 12);
    let mut seg = Vec::new();
    // (offset, end, batch_len)
    let mut recs: Vec<(u64, u64, Option<u32>)> = Vec::new();
    for i in 0..n {
        let flags = r.u8();
        let mut props = Vec::new();
        let mut batch = None;
        if flags & 1 != 0 {
            let v = r.u8();
            let text = match flags >> 6 {
                0 | 1 => {
                    batch = Some(u32::from(v % 6));
                    format!("{}", v % 6)
                }
                2 => format!("{}", u64::from(v) << 32),
                _ => format!("-{v}"),
            };
            record::push_prop(&mut props, "__BATCH_LEN", &text);
        }
        if flags & 2 != 0 {
            record::push_prop(&mut props, "TAGS", "tag");
        }
        let body_len = usize::from(r.u8() % 32);
        let body = r.bytes(body_len);
        let header = Header {
            queue_id: u32::from(flags >> 2 & 1),
            queue_offset: i as u64,
            phys_offset: seg.len() as u64,
            born_timestamp: 1_000,
            born_host: Host::V4([127, 0, 0, 1], 4000),
            store_timestamp: 1_000 + i as u64,
            store_host: Host::V4([127, 0, 0, 1], 10911),
            ..Header::default()
        };
        let start = seg.len() as u64;
        record::encode(&mut seg, &header, body, "T", &props).expect("encodable");
        recs.push((start, seg.len() as u64, batch));
    }
    // Groups, as recovery forms them: a record with __BATCH_LEN = k > 1 opens a group of
    // itself and the next k - 1 records. (first record index, last record index) or torn.
    let mut groups: Vec<(usize, Option<usize>)> = Vec::new();
    let mut i = 0;
    while i < recs.len() {
        let k = recs[i].2.filter(|&k| k > 1).unwrap_or(1) as usize;
        let last = i + k - 1;
        groups.push((i, (last < recs.len()).then_some(last)));
        i += k;
    }
    let original = seg.clone();
    for _ in 0..(r.u8() % 4) {
        let pos = usize::from(r.u16()) % (seg.len() + 1);
        match r.u8() % 3 {
            0 => seg.truncate(pos),
            1 if pos < seg.len() => seg[pos] ^= 1 << (r.u8() % 8),
            _ => {
                let n = usize::from(r.u8() % 16);
                for (j, &b) in r.bytes(n).iter().enumerate() {
                    if let Some(x) = seg.get_mut(pos + j) {
                        *x = b;
                    }
                }
            }
        }
    }
    let damaged_at = original
        .iter()
        .zip(&seg)
        .position(|(a, b)| a != b)
        .unwrap_or(seg.len().min(original.len())) as u64;

    let mut mem = MemStorage::new();
    mem.set_segment(0, seg);
    let b = match Broker::open(test_config(), mem.clone(), 10_000) {
        Ok(b) => b,
        Err(rocklet_core::Error::Corrupted { offset, .. }) => {
            // Damage followed by valid records: refused. A repair keeps every record that
            // survived, each at its place and byte for byte, and every one before the damage.
            assert!(offset >= damaged_at.min(offset), "refused at {offset}");
            let mut b = Broker::open_repairing(test_config(), mem, 10_000)
                .expect("memory storage cannot fail");
            let kept = b
                .raw_records(0, usize::MAX)
                .expect("memory storage cannot fail");
            for (off, bytes) in &kept {
                let Some(&(s, e, _)) = recs.iter().find(|r| r.0 == *off) else {
                    panic!("repair kept a record at {off}, where none was written");
                };
                assert!(
                    bytes[..] == original[s as usize..e as usize],
                    "repaired record at {off} differs from what was written"
                );
            }
            for &(s, e, _) in &recs {
                if e <= damaged_at {
                    assert!(
                        kept.iter().any(|k| k.0 == s),
                        "repair lost the intact record at {s}"
                    );
                }
            }
            assert_eq!(b.recovery_report().records, kept.len() as u64);
            after_open_send_and_reopen(b);
            return;
        }
        Err(e) => panic!("memory storage cannot fail: {e}"),
    };
    let mut b = b;
    let kept = b
        .raw_records(0, usize::MAX)
        .expect("memory storage cannot fail");
    assert!(
        kept.len() <= recs.len(),
        "more records recovered than written"
    );
    for (j, (off, bytes)) in kept.iter().enumerate() {
        let (s, e, _) = recs[j];
        assert_eq!(*off, s, "recovered record {j} is not at its place");
        assert!(
            bytes[..] == original[s as usize..e as usize],
            "recovered record {j} differs from what was written"
        );
    }
    assert_eq!(b.recovery_report().records, kept.len() as u64);
    for &(first, last) in &groups {
        let whole = last.is_some_and(|l| l < kept.len());
        let some = first < kept.len();
        assert!(
            whole || !some,
            "group of records {first}..={last:?} recovered in part ({} kept)",
            kept.len()
        );
        if let Some(l) = last {
            if recs[l].1 <= damaged_at {
                assert!(
                    whole,
                    "intact group {first}..={l} before the damage was cut"
                );
            }
        }
    }
    after_open_send_and_reopen(b);
}

/// `log_recovery`: the input is one or two segments built from chunks, each raw bytes, a
/// repaired record (see [`fix_record`]) at its real offset, or an end-of-segment blank.
/// `Broker::open` never panics nor fails over memory; the broker then takes a send, and a
/// reopen sees the same topics and pending counts.
pub fn log_recovery(data: &[u8]) {
    let (cfg, mem) = log_recovery_storage(data);
    let b = match Broker::open(cfg.clone(), mem.clone(), 5_000) {
        Ok(b) => b,
        Err(rocklet_core::Error::Corrupted { offset, reason }) => {
            // Refused: damage that is not a torn tail. A repair must then open it, keep the
            // segments' valid records, and leave a log that opens cleanly.
            assert!(
                !reason.is_empty(),
                "corruption at {offset} without a reason"
            );
            let b = Broker::open_repairing(cfg, mem, 5_000)
                .unwrap_or_else(|e| panic!("repair of a log refused at {offset} failed: {e}"));
            assert!(
                !b.recovery_report().quarantined.is_empty(),
                "refused at {offset} ({reason}), but the repair found nothing to move"
            );
            b
        }
        Err(e) => panic!("memory storage cannot fail: {e}"),
    };
    after_open_send_and_reopen(b);
}

/// The configuration and segments a `log_recovery` input describes.
pub fn log_recovery_storage(data: &[u8]) -> (Config, MemStorage) {
    let mut r = Reader::new(data);
    let cfg = test_config();
    let flags = r.u8();
    let second_base = match flags & 3 {
        0 => None,
        1 => Some(cfg.segment_size),
        2 => Some(cfg.segment_size * (1 + u64::from(r.u8() % 4))),
        _ => Some(u64::from(r.u16())),
    };
    let mut mem = MemStorage::new();
    let bases: Vec<u64> = core::iter::once(0).chain(second_base).collect();
    for (si, &base) in bases.iter().enumerate() {
        let mut seg: Vec<u8> = Vec::new();
        let chunks = if si + 1 == bases.len() {
            64
        } else {
            1 + r.u8() % 8
        };
        for _ in 0..chunks {
            if r.is_empty() {
                break;
            }
            let c = r.u8();
            let len = usize::from(r.u16() % 2048);
            match c % 4 {
                0 => seg.extend_from_slice(r.bytes(len)),
                3 => record::encode_blank(&mut seg, u32::from(r.u16())),
                _ => {
                    let at = seg.len();
                    seg.extend_from_slice(r.bytes(len));
                    let phys = base + at as u64;
                    fix_record(&mut seg[at..], Some(phys));
                }
            }
        }
        mem.set_segment(base, seg);
    }
    (cfg, mem)
}

/// After a recovery: a send is stored, and a reopen sees what this broker sees.
fn after_open_send_and_reopen(mut b: Broker<MemStorage>) {
    let now = b.now().max(5_000);
    let reply = b
        .execute(
            now,
            Request::Send {
                messages: vec![NewMessage::new("FuzzSend", b"after recovery".to_vec())],
            },
        )
        .expect("memory storage cannot fail");
    assert!(
        matches!(reply, Reply::Sent(_)),
        "send after recovery: {reply:?}"
    );
    while b.poll_output().is_some() {}
    b.sync().expect("memory storage cannot fail");
    let topics = b.topics();
    let txns = b.pending_transaction_count();
    let delays = b.pending_delay_count();
    let end = b.log_end();
    let cfg = b.config().clone();
    let b2 = Broker::open(cfg, b.into_storage(), now).expect("memory storage cannot fail");
    assert!(
        b2.recovery_report().cuts.is_empty() && b2.recovery_report().quarantined.is_empty(),
        "a second open cuts again: {:?}",
        b2.recovery_report()
    );
    assert_eq!(b2.log_end(), end, "log end moved on reopen");
    assert_eq!(b2.topics(), topics, "topics differ after reopen");
    assert_eq!(
        b2.pending_transaction_count(),
        txns,
        "pending transactions differ"
    );
    assert_eq!(b2.pending_delay_count(), delays, "pending delays differ");
}
