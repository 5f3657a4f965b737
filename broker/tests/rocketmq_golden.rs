//! Golden checks against stores Apache RocketMQ 5.5.0 wrote with its own code; the stores
//! come from tests/ci/import.sh (`tests/rocketmq/src/Golden.java`, and a broker run by the
//! Java v4 client). Without the variables below these tests say so and pass: run
//! `bash tests/ci/import.sh`.
//!
//! - `ROCKLET_GOLDEN_CRC`, `ROCKLET_GOLDEN_NOCRC`: store roots written by RocketMQ's
//!   CommitLog with `enabledAppendPropCRC` true and false, each beside `<root>.jsonl`, every
//!   record as RocketMQ's MessageDecoder read it. Rocklet's `decode_rocketmq` must read
//!   each the same, field by field; `decode` (strict) must take exactly the records that
//!   carry `__CRC32#`; the importer's scan must find the same records; the import must
//!   inflate, split and skip as documented.
//! - `ROCKLET_IMPORT_STORE` (+ `ROCKLET_IMPORT_DATA`, `ROCKLET_IMPORT_REPORT`): a store the
//!   5.5.0 broker wrote (enabledAppendPropCRC=true) in the import scenario: every record
//!   passes `decode`, and `rocklet import` converts it into `ROCKLET_IMPORT_DATA` with the
//!   scenario's counts (the report goes to `ROCKLET_IMPORT_REPORT` as JSON).

use std::path::{Path, PathBuf};

use rocklet_broker::import::{self, Options, Store};
use rocklet_core::record::{self, Corruption, Decoded, Host};
use rocklet_core::Config;

fn var(name: &str) -> Option<PathBuf> {
    match std::env::var_os(name) {
        Some(v) => Some(PathBuf::from(v)),
        None => {
            eprintln!("{name} is not set: skipped (bash tests/ci/import.sh runs this test)");
            None
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn host(h: Host) -> String {
    match h {
        Host::V4(ip, port) => format!("{}:{port}", hex(&ip)),
        Host::V6(ip, port) => format!("{}:{port}", hex(&ip)),
        Host::Unspecified => "00000000:0".into(),
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The bytes of the record at `offset`, from the file that holds it.
fn record_at(root: &Path, offset: u64, size: usize) -> Vec<u8> {
    let dir = root.join("commitlog");
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_str().unwrap().parse().unwrap(), p))
        .collect();
    files.sort();
    let (base, path) = files.iter().rev().find(|(b, _)| *b <= offset).unwrap();
    let bytes = std::fs::read(path).unwrap();
    let at = (offset - base) as usize;
    bytes[at..at + size].to_vec()
}

fn check_golden(root: &Path, with_crc: bool) {
    let lines = std::fs::read_to_string(root.with_extension("jsonl")).unwrap();
    let mut offsets = Vec::new();
    for line in lines.lines() {
        let j: serde_json::Value = serde_json::from_str(line).unwrap();
        let off = j["offset"].as_u64().unwrap();
        let size = j["size"].as_u64().unwrap() as usize;
        let bytes = record_at(root, off, size);
        let Ok(Decoded::Record(r)) = record::decode_rocketmq(&bytes, 1 << 24) else {
            panic!(
                "decode_rocketmq refused the record at {off}: {:?}",
                record::decode_rocketmq(&bytes, 1 << 24)
            );
        };
        let ctx = format!("record at {off} ({})", j["topic"]);
        assert_eq!(r.total_size as usize, size, "{ctx}");
        assert_eq!(r.topic, j["topic"].as_str().unwrap(), "{ctx}");
        assert_eq!(
            u64::from(r.header.queue_id),
            j["queueId"].as_u64().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            r.header.queue_offset,
            j["queueOffset"].as_u64().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            r.header.phys_offset,
            j["physOffset"].as_u64().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            i64::from(r.header.flag),
            j["flag"].as_i64().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            u64::from(r.header.sys_flag),
            j["sysFlag"].as_u64().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            r.header.born_timestamp,
            j["bornTimestamp"].as_u64().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            r.header.store_timestamp,
            j["storeTimestamp"].as_u64().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            host(r.header.born_host),
            j["bornHost"].as_str().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            host(r.header.store_host),
            j["storeHost"].as_str().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            u64::from(r.header.reconsume_times),
            j["reconsumeTimes"].as_u64().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            r.header.prepared_offset,
            j["preparedOffset"].as_u64().unwrap(),
            "{ctx}"
        );
        assert_eq!(
            i64::from(r.body_crc),
            j["bodyCrc"].as_i64().unwrap(),
            "{ctx}"
        );
        assert_eq!(r.body, unhex(j["body"].as_str().unwrap()), "{ctx}");
        assert_eq!(
            bytes[4..8] == record::MESSAGE_MAGIC_V2.to_be_bytes(),
            j["v2"].as_bool().unwrap(),
            "{ctx}"
        );
        let mut props: serde_json::Map<String, serde_json::Value> =
            j["props"].as_object().unwrap().clone();
        let had_crc = props.remove(record::CRC_KEY).is_some();
        assert_eq!(had_crc, with_crc, "{ctx}");
        let mine: serde_json::Map<String, serde_json::Value> = r
            .props()
            .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.to_string())))
            .collect();
        assert_eq!(mine, props, "{ctx}");
        // The strict decoder takes exactly the records that carry the whole-record CRC.
        match record::decode(&bytes, 1 << 24) {
            Ok(Decoded::Record(_)) => {
                assert!(with_crc, "{ctx}: decode took a record without __CRC32#")
            }
            Err(Corruption::MissingCrc) => assert!(!with_crc, "{ctx}"),
            other => panic!("{ctx}: decode: {other:?}"),
        }
        offsets.push(off);
    }
    // The importer's scan (blanks, file ends, zeros) finds the same records.
    let store = Store::open(root).unwrap();
    let mut seen = Vec::new();
    let end = store
        .scan(|off, _| {
            seen.push(off);
            Ok(())
        })
        .unwrap();
    assert_eq!(seen, offsets);
    assert_eq!(end.cut, None);
    eprintln!(
        "{}: {} records read as RocketMQ's MessageDecoder read them",
        root.display(),
        offsets.len()
    );

    // The import: inflated, inner batch split, the half pending, the long topic skipped.
    let data = tempfile::tempdir().unwrap();
    let report = import::run(&Options {
        from: root.to_path_buf(),
        data_dir: data.path().join("data"),
        core: Config::default(),
    })
    .unwrap();
    assert_eq!(report.normal, 32, "{report}");
    assert_eq!(
        (
            report.inflated,
            report.inner_batches,
            report.inner_batch_messages
        ),
        (1, 1, 3),
        "{report}"
    );
    assert_eq!(report.pending.len(), 1, "{report}");
    assert_eq!(report.pending[0].group, "GoldenTxn");
    assert!(
        report
            .skipped
            .keys()
            .any(|k| k.contains("GoldenLong") && k.contains("longer than 127")),
        "{report}"
    );
    let mut b = rocklet_core::Broker::open(
        Config::default(),
        rocklet_core::FileStorage::open(data.path().join("data")).unwrap(),
        0,
    )
    .unwrap();
    let inner: Vec<Vec<u8>> = b
        .browse("GoldenInner", 0, 0, 10)
        .unwrap()
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(
        inner,
        [
            b"inner-0".to_vec(),
            b"inner-1".to_vec(),
            b"inner-2".to_vec()
        ]
    );
    let z = &b.browse("GoldenTopic", 3, 2, 1).unwrap()[0];
    assert_eq!(z.body.len(), 100 * 1024);
    assert!(z.body.starts_with(b"compressible compressible"));
}

#[test]
fn rocketmq_written_records_read_by_rocklet() {
    let (Some(crc), Some(nocrc)) = (var("ROCKLET_GOLDEN_CRC"), var("ROCKLET_GOLDEN_NOCRC")) else {
        return;
    };
    check_golden(&crc, true);
    check_golden(&nocrc, false);
}

#[test]
fn apache_broker_store_imports() {
    let (Some(store), Some(report)) = (var("ROCKLET_IMPORT_STORE"), var("ROCKLET_IMPORT_REPORT"))
    else {
        return;
    };
    // Written with enabledAppendPropCRC=true: the strict decoder takes every record the
    // importer's scan read.
    let scanned = Store::open(&store)
        .unwrap()
        .scan(|_, _| Ok(()))
        .unwrap()
        .records;
    let mut n = 0;
    for entry in std::fs::read_dir(store.join("commitlog")).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        let mut at = 0;
        while at + 8 <= bytes.len() {
            match record::decode(&bytes[at..], 1 << 24) {
                Ok(Decoded::Record(r)) => {
                    at += r.total_size as usize;
                    n += 1;
                }
                Ok(Decoded::Blank { .. }) | Err(Corruption::BadMagic(0)) => break,
                other => panic!("decode at {at}: {other:?}"),
            }
        }
    }
    assert_eq!(n, scanned);
    eprintln!(
        "{}: the {n} records the 5.5.0 broker wrote pass record::decode",
        store.display()
    );
    // `rocklet import --json` of it: the counts of ImportScenario.java `produce`.
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let count = |k: &str| r[k].as_u64().unwrap();
    assert_eq!(count("committed"), 2, "{r:#}");
    assert_eq!(count("rolled_back"), 1, "{r:#}");
    let pending = r["pending"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{r:#}");
    assert_eq!(pending[0]["group"], "ImpTxnGroup");
    assert!(
        pending[0]["checks"].as_u64().unwrap() >= 1,
        "checked before the stop: {r:#}"
    );
    assert_eq!(count("pending_level_delays"), 1, "{r:#}");
    assert_eq!(count("pending_timers"), 1, "{r:#}");
    assert_eq!(count("delivered_delays"), 2, "{r:#}");
    assert_eq!(count("inflated"), 1, "{r:#}");
    // 40 normal, 10 of the batch, 1 compressed, 4 after the delays, 2 delivered delays.
    assert_eq!(count("normal"), 57, "{r:#}");
    assert_eq!(count("consumer_offsets"), 4, "{r:#}");
    eprintln!("import report: {r:#}");
}
