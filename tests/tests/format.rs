//! Format vectors: golden record bytes in `tests/vectors/log/*.bin`, each described field by
//! field in the `.json` beside it, and `log/corrupt/*.bin`, which must be rejected cleanly
//! by `record::decode` and cut by recovery.
//!
//! The top-level vectors are format 2, what the broker writes: the `__CRC32#` digits least
//! significant first, as RocketMQ writes them. `log/format1/` holds format 1 (Rocklet 0.1:
//! most significant digit first), which every later release must still read.
//!
//! `ROCKLET_BLESS_LOG=1 cargo test -p rocklet-conformance --test format` writes the files
//! (only do that on a deliberate format change; review the diff).

use std::path::{Path, PathBuf};

use rocklet_core::record::{self, Corruption, Decoded, Header, Host};
use rocklet_core::{Broker, Config, MemStorage, NewMessage, Reply, Request, Resolution};
use serde_json::{json, Value};

fn log_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("vectors")
        .join("log")
}

fn blessing() -> bool {
    std::env::var_os("ROCKLET_BLESS_LOG").is_some()
}

const T0: u64 = 1_700_000_000_000;
const MAX: u32 = 8 << 20;

fn host_text(h: &Host) -> String {
    h.to_string()
}

fn parse_host(s: &str) -> Host {
    if s == "0.0.0.0:0" {
        return Host::Unspecified;
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (ip, port) = rest.split_once("]:").expect("[v6]:port");
        let ip: std::net::Ipv6Addr = ip.parse().expect("v6 address");
        return Host::V6(ip.octets(), port.parse().expect("port"));
    }
    let (ip, port) = s.rsplit_once(':').expect("ip:port");
    let ip: std::net::Ipv4Addr = ip.parse().expect("v4 address");
    Host::V4(ip.octets(), port.parse().expect("port"))
}

/// The decoded fields of a golden file as JSON (format 2 digits).
fn describe(bytes: &[u8]) -> Value {
    describe_as(bytes, false)
}

/// The decoded fields; `msd_first`: the CRC digits of format 1.
fn describe_as(bytes: &[u8], msd_first: bool) -> Value {
    match record::decode(bytes, MAX).expect("golden record decodes") {
        Decoded::Blank { len } => {
            json!({ "kind": "blank", "total_size": len, "magic": "0xCBD43194" })
        }
        Decoded::Incomplete { .. } => panic!("golden record is incomplete"),
        Decoded::Repaired { .. } => panic!("golden record is a repair blank"),
        Decoded::Record(r) => {
            let mut crc_digits: String =
                std::str::from_utf8(&bytes[bytes.len() - 11..bytes.len() - 1])
                    .expect("digits")
                    .into();
            if !msd_first {
                crc_digits = crc_digits.chars().rev().collect();
            }
            json!({
                "kind": "message",
                "total_size": r.total_size,
                "magic": "0xDAA320A7",
                "body_crc": r.body_crc,
                "queue_id": r.header.queue_id,
                "flag": r.header.flag,
                "queue_offset": r.header.queue_offset,
                "phys_offset": r.header.phys_offset,
                "sys_flag": r.header.sys_flag,
                "born_timestamp": r.header.born_timestamp,
                "born_host": host_text(&r.header.born_host),
                "store_timestamp": r.header.store_timestamp,
                "store_host": host_text(&r.header.store_host),
                "reconsume_times": r.header.reconsume_times,
                "prepared_offset": r.header.prepared_offset,
                "body": String::from_utf8(r.body.to_vec()).expect("golden bodies are text"),
                "topic": r.topic,
                "properties": r.props().map(|(k, v)| json!([k, v])).collect::<Vec<_>>(),
                "record_crc": crc_digits.parse::<u64>().expect("ten digits"),
            })
        }
    }
}

/// Encodes the record a description describes (the CRC property is added by the encoder).
fn encode_described(d: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    if d["kind"] == "blank" {
        record::encode_blank(&mut out, d["total_size"].as_u64().unwrap() as u32);
        return out;
    }
    let u = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("field {k}"));
    let header = Header {
        queue_id: u("queue_id") as u32,
        flag: d["flag"].as_i64().unwrap() as i32,
        queue_offset: u("queue_offset"),
        phys_offset: u("phys_offset"),
        sys_flag: u("sys_flag") as u32,
        born_timestamp: u("born_timestamp"),
        born_host: parse_host(d["born_host"].as_str().unwrap()),
        store_timestamp: u("store_timestamp"),
        store_host: parse_host(d["store_host"].as_str().unwrap()),
        reconsume_times: u("reconsume_times") as u32,
        prepared_offset: u("prepared_offset"),
    };
    let mut props = Vec::new();
    for p in d["properties"].as_array().unwrap() {
        record::push_prop(&mut props, p[0].as_str().unwrap(), p[1].as_str().unwrap());
    }
    record::encode(
        &mut out,
        &header,
        d["body"].as_str().unwrap().as_bytes(),
        d["topic"].as_str().unwrap(),
        &props,
    )
    .expect("encodes");
    out
}

/// The golden records as the broker writes them: a normal message, a half, its commit op.
fn broker_records() -> Vec<(String, Vec<u8>)> {
    let cfg = Config {
        store_host: rocklet_core::config::StoreHost::V4([10, 0, 0, 2], 10911),
        ..Config::default()
    };
    let mut b = Broker::open(cfg, MemStorage::new(), T0).unwrap();
    let mut m = NewMessage::new("TopicTest", &b"Hello RocketMQ"[..]).with_tag("TagA");
    m.keys = vec!["order-1".into(), "user-7".into()];
    m.properties.push(("color".into(), "red".into()));
    m.queue_id = Some(1);
    m.born_timestamp = Some(T0 - 5);
    m.born_host = Some(Host::V4([192, 168, 1, 20], 52311));
    m.flag = 3;
    assert!(matches!(
        b.execute(T0, Request::Send { messages: vec![m] }).unwrap(),
        Reply::Sent(_)
    ));
    let mut h = NewMessage::new("Orders", &b"pay order 42"[..]).with_tag("pay");
    h.queue_id = Some(2);
    h.born_timestamp = Some(T0);
    h.born_host = Some(Host::V6(
        [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        40000,
    ));
    let txn = match b
        .execute(
            T0 + 1,
            Request::Prepare {
                group: "PG".into(),
                message: h,
                check_immunity_ms: None,
            },
        )
        .unwrap()
    {
        Reply::Sent(r) => r[0].txn.unwrap(),
        other => panic!("{other:?}"),
    };
    let end = Request::EndTransaction {
        txn,
        resolution: Resolution::Commit,
        group: Some("PG".into()),
        from_check: false,
    };
    assert!(matches!(
        b.execute(T0 + 2, end).unwrap(),
        Reply::Ended { .. }
    ));
    let recs = b.raw_records(0, 10).unwrap();
    assert_eq!(recs.len(), 3);
    ["message", "half", "op-commit"]
        .iter()
        .zip(recs)
        .map(|(n, (_, bytes))| ((*n).to_string(), bytes))
        .collect()
}

fn golden() -> Vec<(String, Vec<u8>)> {
    let mut v = broker_records();
    let mut blank = Vec::new();
    record::encode_blank(&mut blank, 4096);
    v.push(("blank".into(), blank));
    v
}

#[test]
fn golden_records_encode_and_decode_byte_for_byte() {
    let dir = log_dir();
    if blessing() {
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in golden() {
            std::fs::write(dir.join(format!("{name}.bin")), &bytes).unwrap();
            let text = serde_json::to_string_pretty(&describe(&bytes)).unwrap() + "\n";
            std::fs::write(dir.join(format!("{name}.json")), text).unwrap();
        }
    }
    let names = bins(&dir);
    assert!(
        names.len() >= 4,
        "expected at least 4 golden records, found {}",
        names.len()
    );
    for bin in names {
        let bytes = std::fs::read(&bin).unwrap();
        let desc: Value =
            serde_json::from_str(&std::fs::read_to_string(bin.with_extension("json")).unwrap())
                .unwrap();
        assert_eq!(
            describe(&bytes),
            desc,
            "{}: decoded fields differ from its .json",
            bin.display()
        );
        assert_eq!(
            encode_described(&desc),
            bytes,
            "{}: encoding its .json does not give its bytes",
            bin.display()
        );
        // RocketMQ layout spot checks, independent of the decoder.
        assert_eq!(
            u32::from_be_bytes(bytes[0..4].try_into().unwrap()) as usize,
            if desc["kind"] == "blank" {
                4096
            } else {
                bytes.len()
            }
        );
        let magic = u32::from_be_bytes(bytes[4..8].try_into().unwrap());
        assert_eq!(
            format!("{magic:#010X}").replace("0X", "0x"),
            desc["magic"].as_str().unwrap()
        );
        if desc["kind"] == "message" {
            let body = desc["body"].as_str().unwrap().as_bytes();
            assert_eq!(
                u32::from_be_bytes(bytes[8..12].try_into().unwrap()),
                crc32_ref(body) & 0x7FFF_FFFF,
                "BODYCRC"
            );
            // Ten digits, least significant first (RocketMQ's MessageDecoder.createCrc32).
            let stored: u64 = std::str::from_utf8(&bytes[bytes.len() - 11..bytes.len() - 1])
                .unwrap()
                .chars()
                .rev()
                .collect::<String>()
                .parse()
                .unwrap();
            assert_eq!(
                stored,
                u64::from(crc32_ref(&bytes[..bytes.len() - 20]) & 0x7FFF_FFFF),
                "record CRC"
            );
            assert!(
                bytes.ends_with(b"\x02") && bytes[bytes.len() - 20..].starts_with(b"__CRC32#\x01")
            );
        }
    }
}

fn bins(dir: &Path) -> Vec<PathBuf> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    names.sort();
    names
}

#[test]
fn format_1_records_are_still_read() {
    // Rocklet 0.1 wrote the CRC digits most significant first. They decode to the same
    // fields, and the broker opens a log of them.
    let dir = log_dir().join("format1");
    let names = bins(&dir);
    assert_eq!(names.len(), 4);
    let mut log = Vec::new();
    for bin in names {
        let bytes = std::fs::read(&bin).unwrap();
        let desc: Value =
            serde_json::from_str(&std::fs::read_to_string(bin.with_extension("json")).unwrap())
                .unwrap();
        assert_eq!(describe_as(&bytes, true), desc, "{}", bin.display());
        let now = log_dir().join(bin.file_name().unwrap());
        if desc["kind"] == "message" {
            // The same record in format 2 differs only in the order of the ten digits.
            let two = std::fs::read(&now).unwrap();
            assert_eq!(two.len(), bytes.len());
            let n = bytes.len();
            assert_eq!(two[..n - 11], bytes[..n - 11]);
            let mut digits = bytes[n - 11..n - 1].to_vec();
            digits.reverse();
            assert_eq!(two[n - 11..n - 1], digits[..]);
            log.push((desc["phys_offset"].as_u64().unwrap(), bytes));
        }
    }
    log.sort();
    let mut mem = MemStorage::new();
    mem.set_segment(0, log.into_iter().flat_map(|(_, b)| b).collect());
    let b = Broker::open(Config::default(), mem, T0 + 10).unwrap();
    assert_eq!(b.recovery_report().records, 3);
    assert!(b.recovery_report().cuts.is_empty());
}

#[test]
fn records_without_the_crc_property_are_read_by_their_body_crc() {
    // Apache RocketMQ's default: no __CRC32# pair. BODYCRC vouches for the record when the
    // bytes come from RocketMQ's store (decode_rocketmq); in Rocklet's own log every record
    // carries the CRC, so there it is damage.
    let good = broker_records().remove(0).1;
    let n = good.len();
    let mut plain = good[..n - 20].to_vec();
    let body_len = u32::from_be_bytes(good[84..88].try_into().unwrap()) as usize;
    let topic_len_at = 88 + body_len;
    let props_len_at = topic_len_at + 1 + good[topic_len_at] as usize;
    let pl = props_len(&good) - 20;
    plain[props_len_at..props_len_at + 2].copy_from_slice(&(pl as u16).to_be_bytes());
    let len = plain.len() as u32;
    plain[..4].copy_from_slice(&len.to_be_bytes());
    let Decoded::Record(r) = record::decode_rocketmq(&plain, MAX).unwrap() else {
        panic!("not a record")
    };
    assert_eq!(r.body, b"Hello RocketMQ");
    assert_eq!(r.prop("TAGS"), Some("TagA"));
    let mut bad_body = plain.clone();
    bad_body[90] ^= 1;
    assert_eq!(
        record::decode_rocketmq(&bad_body, MAX),
        Err(Corruption::BodyCrc)
    );
    assert_eq!(record::decode(&plain, MAX), Err(Corruption::MissingCrc));
}

/// PROPERTIES length of an encoded IPv4 record.
fn props_len(rec: &[u8]) -> usize {
    let body_len = u32::from_be_bytes(rec[84..88].try_into().unwrap()) as usize;
    let topic_len_at = 88 + body_len;
    let at = topic_len_at + 1 + rec[topic_len_at] as usize;
    u16::from_be_bytes([rec[at], rec[at + 1]]) as usize
}

#[test]
fn the_broker_still_writes_the_golden_records() {
    for (name, bytes) in golden() {
        let path = log_dir().join(format!("{name}.bin"));
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            bytes, on_disk,
            "{name}: the broker's record differs from the golden bytes (a format change?)"
        );
    }
}

#[test]
fn golden_records_carry_rocketmq_semantics() {
    let half = describe(&std::fs::read(log_dir().join("half.bin")).unwrap());
    assert_eq!(half["topic"], "RMQ_SYS_TRANS_HALF_TOPIC");
    assert_eq!(
        half["sys_flag"].as_u64().unwrap() & 0xC,
        0x4,
        "TRANSACTION_PREPARED_TYPE"
    );
    let props: Vec<(String, String)> = half["properties"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_str().unwrap().into(), p[1].as_str().unwrap().into()))
        .collect();
    for (k, v) in [
        ("TRAN_MSG", "true"),
        ("PGROUP", "PG"),
        ("REAL_TOPIC", "Orders"),
        ("REAL_QID", "2"),
    ] {
        assert!(
            props.contains(&(k.into(), v.into())),
            "half lacks {k}={v}: {props:?}"
        );
    }
    let op = describe(&std::fs::read(log_dir().join("op-commit.bin")).unwrap());
    assert_eq!(op["topic"], "RMQ_SYS_TRANS_OP_HALF_TOPIC");
    assert_eq!(op["prepared_offset"], half["phys_offset"]);
    assert_eq!(
        op["sys_flag"].as_u64().unwrap() & 0xC,
        0x8,
        "TRANSACTION_COMMIT_TYPE"
    );
    assert_eq!(
        op["body"].as_str().unwrap(),
        half["phys_offset"].to_string(),
        "op body names the half's offset"
    );
}

/// A plain bitwise CRC-32 (IEEE), independent of the crate's.
fn crc32_ref(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

// ---- corrupt vectors ------------------------------------------------------------------------

/// Rewrites the trailing CRC digits (least significant first) so only the damage under test
/// remains.
fn fix_crc(b: &mut [u8]) {
    let n = b.len();
    let crc = record::crc32(&b[..n - 20]);
    let digits: String = format!("{crc:010}").chars().rev().collect();
    b[n - 11..n - 1].copy_from_slice(digits.as_bytes());
}

fn be32_set(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// (file name, bytes, what decode must say).
fn corrupt_cases() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let good = broker_records().remove(0).1;
    let n = good.len();
    // IPv4 hosts: body length at 84, body at 88.
    let body_len = u32::from_be_bytes(good[84..88].try_into().unwrap()) as usize;
    let topic_len_at = 88 + body_len;
    let mut v = Vec::new();
    let mut b = good.clone();
    b[90] ^= 0x10;
    v.push(("body-bit-flip", b, "RecordCrc"));
    let mut b = good.clone();
    b[25] ^= 0x01;
    v.push(("header-bit-flip", b, "RecordCrc"));
    let mut b = good.clone();
    b[n - 3] ^= 0x04;
    v.push(("crc-digit-flip", b, "any"));
    let mut b = good.clone();
    b[n - 5] = if b[n - 5] == b'9' { b'0' } else { b[n - 5] + 1 };
    v.push(("bad-crc", b, "RecordCrc"));
    v.push(("truncated-half", good[..n / 2].to_vec(), "Incomplete"));
    v.push(("truncated-last-byte", good[..n - 1].to_vec(), "Incomplete"));
    v.push(("truncated-header", good[..6].to_vec(), "Incomplete"));
    let mut b = good.clone();
    be32_set(&mut b, 4, 0xDAA3_20A8);
    v.push(("bad-magic", b, "BadMagic"));
    let mut b = good.clone();
    be32_set(&mut b, 0, 0x7FFF_FFFF);
    v.push(("huge-totalsize", b, "BadTotalSize"));
    let mut b = good.clone();
    be32_set(&mut b, 0, u32::MAX);
    v.push(("max-totalsize", b, "BadTotalSize"));
    let mut b = good.clone();
    be32_set(&mut b, 0, 20);
    v.push(("tiny-totalsize", b, "BadTotalSize"));
    let mut b = good.clone();
    be32_set(&mut b, 0, n as u32 - 1);
    b.pop();
    v.push(("totalsize-one-short", b, "any"));
    let mut b = good.clone();
    be32_set(&mut b, 84, body_len as u32 + 1000);
    fix_crc(&mut b);
    v.push(("bad-body-length", b, "BadLengths"));
    let mut b = good.clone();
    be32_set(&mut b, 84, u32::MAX);
    fix_crc(&mut b);
    v.push(("huge-body-length", b, "BadLengths"));
    let mut b = good.clone();
    b[topic_len_at] = 200;
    fix_crc(&mut b);
    v.push(("bad-topic-length", b, "BadLengths"));
    let mut b = good.clone();
    let props_len_at = topic_len_at + 1 + b[topic_len_at] as usize;
    let pl = u16::from_be_bytes([b[props_len_at], b[props_len_at + 1]]);
    b[props_len_at..props_len_at + 2].copy_from_slice(&(pl - 1).to_be_bytes());
    fix_crc(&mut b);
    v.push(("bad-properties-length", b, "BadLengths"));
    let mut b = good.clone();
    let body_crc = u32::from_be_bytes(b[8..12].try_into().unwrap());
    be32_set(&mut b, 8, body_crc ^ 1);
    fix_crc(&mut b);
    v.push(("bad-body-crc", b, "BodyCrc"));
    let mut b = good.clone();
    b[topic_len_at + 1] = 0xFF;
    fix_crc(&mut b);
    v.push(("topic-not-utf8", b, "BadTopic"));
    // Properties that are not `key\x01value\x02` pairs, under valid CRCs.
    let header = Header {
        born_host: Host::V4([1, 2, 3, 4], 5),
        store_host: Host::V4([5, 6, 7, 8], 9),
        ..Header::default()
    };
    for (name, props) in [
        ("bad-properties-no-separator", &b"TAGS\x01a"[..]),
        ("bad-properties-empty-key", &b"\x01v\x02"[..]),
        ("bad-properties-two-values", &b"a\x01b\x01c\x02"[..]),
        ("bad-properties-not-utf8", &b"k\x01\xFF\xFE\x02"[..]),
    ] {
        let mut b = Vec::new();
        record::encode(&mut b, &header, b"body", "T", props).unwrap();
        v.push((name, b, "BadProperties"));
    }
    // Lengths consistent but no CRC pair at the end.
    let mut b = good.clone();
    let crc_at = n - 20;
    b[crc_at..crc_at + 8].copy_from_slice(b"__CRC33#");
    v.push(("missing-crc", b, "MissingCrc"));
    let mut b = Vec::new();
    record::encode_blank(&mut b, 4);
    v.push(("blank-too-small", b, "BadTotalSize"));
    v
}

fn classify(r: Result<Decoded<'_>, Corruption>) -> String {
    match r {
        Ok(Decoded::Record(_)) => "Record".into(),
        Ok(Decoded::Blank { .. } | Decoded::Repaired { .. }) => "Blank".into(),
        Ok(Decoded::Incomplete { .. }) => "Incomplete".into(),
        Err(c) => format!("{c:?}")
            .split(['(', ' ', '{'])
            .next()
            .unwrap()
            .to_string(),
    }
}

#[test]
fn corrupt_records_are_rejected_by_decode() {
    let dir = log_dir().join("corrupt");
    let cases = corrupt_cases();
    if blessing() {
        std::fs::create_dir_all(&dir).unwrap();
        let mut index = serde_json::Map::new();
        for (name, bytes, expect) in &cases {
            std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
            index.insert(format!("{name}.bin"), json!(expect));
        }
        std::fs::write(
            dir.join("expected.json"),
            serde_json::to_string_pretty(&index).unwrap() + "\n",
        )
        .unwrap();
    }
    let index: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 15,
        "expected the corrupt corpus, found {} files",
        files.len()
    );
    for path in &files {
        let name = path.file_name().unwrap().to_str().unwrap();
        let bytes = std::fs::read(path).unwrap();
        let got = classify(record::decode(&bytes, MAX));
        assert!(
            got != "Record" && got != "Blank",
            "{name}: decoded as {got}, must be rejected"
        );
        let want = index
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("{name} is not in expected.json"));
        if want != "any" {
            assert_eq!(got, want, "{name}: wrong rejection");
        }
    }
    // The generated cases and the files agree (nobody edited a file by hand).
    for (name, bytes, _) in &cases {
        assert_eq!(
            &std::fs::read(dir.join(format!("{name}.bin"))).unwrap(),
            bytes,
            "{name}.bin differs from its recipe"
        );
    }
}

#[test]
fn recovery_cuts_every_corrupt_record() {
    let dir = log_dir().join("corrupt");
    let good = broker_records().remove(0).1;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "bin") {
            continue;
        }
        let name = path.display().to_string();
        let bad = std::fs::read(&path).unwrap();
        // Alone in the log, and after a valid record: never a panic, the damage is cut,
        // everything before it kept, and the broker works afterwards.
        for prefix in [&[][..], &good[..]] {
            let mut seg = prefix.to_vec();
            seg.extend_from_slice(&bad);
            let mut mem = MemStorage::new();
            mem.set_segment(0, seg);
            let mut b = Broker::open(Config::default(), mem, T0)
                .unwrap_or_else(|e| panic!("{name}: open failed: {e}"));
            assert_eq!(
                b.log_end(),
                prefix.len() as u64,
                "{name}: not cut right after the valid prefix"
            );
            assert_eq!(
                b.recovery_report().records,
                u64::from(!prefix.is_empty()),
                "{name}"
            );
            assert!(
                !b.recovery_report().cuts.is_empty(),
                "{name}: no cut reported"
            );
            assert_eq!(
                b.storage().segment(0).unwrap(),
                prefix,
                "{name}: damaged bytes left in the segment"
            );
            let visible = b
                .topics()
                .iter()
                .map(|t| t.queues.iter().map(|q| q.2).sum::<u64>())
                .sum::<u64>();
            assert_eq!(visible, u64::from(!prefix.is_empty()), "{name}");
            let r = b
                .execute(
                    T0 + 1,
                    Request::Send {
                        messages: vec![NewMessage::new("After", &b"x"[..])],
                    },
                )
                .unwrap();
            assert!(matches!(r, Reply::Sent(_)), "{name}: {r:?}");
            let b = Broker::open(Config::default(), b.into_storage(), T0 + 2).unwrap();
            assert!(
                b.recovery_report().cuts.is_empty(),
                "{name}: the log written after the cut is not clean"
            );
            assert_eq!(
                b.recovery_report().records,
                1 + u64::from(!prefix.is_empty()),
                "{name}"
            );
        }
    }
}
