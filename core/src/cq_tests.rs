//! Consume queues on disk: RocketMQ's layout in side files, rebuilt on open, read back
//! through a bounded cache, dropped by retention, memory independent of what is stored.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use crate::broker::{CQ_FILE_UNITS, CQ_UNIT_BYTES, INDEX_DIR, INDEX_ENTRIES, INDEX_SLOTS};
use crate::testing::CrashStorage;
use crate::*;

fn cfg() -> Config {
    Config {
        segment_size: 1 << 20,
        max_message_size: 1024,
        max_batch_size: 1024,
        ..Config::default()
    }
}

fn send<S: Storage>(b: &mut Broker<S>, topic: &str, queue_id: u32, body: &str) -> SendResult {
    let m = NewMessage {
        queue_id: Some(queue_id),
        tag: Some("TagA".into()),
        ..NewMessage::new(topic, body.as_bytes().to_vec())
    };
    match b.execute(0, Request::Send { messages: vec![m] }).unwrap() {
        Reply::Sent(mut r) => r.remove(0),
        other => panic!("send failed: {other:?}"),
    }
}

/// The units a consume-queue file holds, decoded from RocketMQ's 20-byte layout.
fn file_units(bytes: &[u8]) -> Vec<CqUnit> {
    bytes
        .chunks_exact(CQ_UNIT_BYTES as usize)
        .map(|c| CqUnit::from_rocketmq_bytes(c.try_into().unwrap()))
        .collect()
}

const FILE0: &str = "consumequeue/T/1/00000000000000000000";

#[test]
fn consume_queue_files_hold_rocketmqs_20_byte_units_and_a_reopen_rebuilds_them() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    let sent: Vec<SendResult> = (0..700)
        .map(|i| send(&mut b, "T", 1, &alloc::format!("m{i}")))
        .collect();
    b.close().unwrap();
    let mut mem = b.into_storage();
    let bytes = mem.side_file(FILE0).expect("queue 1's file").to_vec();
    assert_eq!(bytes.len(), 700 * 20);
    let units = file_units(&bytes);
    for (u, s) in units.iter().zip(&sent) {
        assert_eq!(u.offset, s.offset, "commit-log offset, 8 bytes BE");
        assert_eq!(u.tag_hash, tag_hash(Some("TagA")), "tag hash, 8 bytes BE");
        assert!(u.size > 0);
    }
    // Byte for byte: offset 8 BE, size 4 BE, tag hash 8 BE.
    assert_eq!(&bytes[..8], &sent[0].offset.to_be_bytes());
    assert_eq!(
        &bytes[12..20],
        &i64::from(tag_hash(Some("TagA"))).to_be_bytes()
    );
    // Damaged or stale files are derived data: an open rebuilds them from the log.
    mem.set_side_file(FILE0, Some(vec![0xee; 100]));
    mem.set_side_file(
        "consumequeue/Gone/0/00000000000000000000",
        Some(vec![1; 20]),
    );
    let mut b = Broker::open(cfg(), mem, 0).unwrap();
    b.close().unwrap();
    let mem = b.into_storage();
    assert_eq!(mem.side_file(FILE0), Some(&bytes[..]));
    assert!(mem
        .side_file("consumequeue/Gone/0/00000000000000000000")
        .is_none());
}

#[test]
fn reads_past_the_cache_come_from_the_files() {
    let small = Config {
        cq_cache_blocks: 1,
        ..cfg()
    };
    let mut b = Broker::open(small, MemStorage::new(), 0).unwrap();
    let sent: Vec<u64> = (0..3_500)
        .map(|i| send(&mut b, "T", 1, &alloc::format!("m{i}")).offset)
        .collect();
    // Every block but the newest units is in the file only; one block is cached.
    let at = |b: &mut Broker<MemStorage>, qoff: u64| {
        let m = b.browse("T", 1, qoff, 1).unwrap();
        (m[0].queue_offset, m[0].offset)
    };
    for qoff in [0, 2_100, 5, 3_400, 1_999, 1_000, 3_499] {
        assert_eq!(at(&mut b, qoff), (qoff, sent[qoff as usize]));
    }
    let all = b.browse("T", 1, 0, 10_000).unwrap();
    let offsets: Vec<u64> = all.iter().map(|m| m.offset).collect();
    assert_eq!(offsets, sent);
    // What is read is what the file holds, not a copy in memory: a unit changed in the file
    // is what the next read past the cache finds.
    let name = "consumequeue/T/1/00000000000000000000";
    let forged = CqUnit {
        offset: sent[1],
        size: 1,
        tag_hash: 0,
    };
    assert_ne!(b.consume_queue("T", 1, 0, 1).unwrap()[0], forged);
    b.storage_mut()
        .side_write(name, 0, &forged.to_rocketmq_bytes())
        .unwrap();
    b.consume_queue("T", 1, 2_000, 1).unwrap(); // the one cached block is another now
    assert_eq!(b.consume_queue("T", 1, 0, 1).unwrap()[0], forged);
    assert_eq!(b.consume_queue("T", 1, 0, 10_000).unwrap().len(), 3_500);
}

#[test]
fn a_crash_after_unsynced_consume_queue_writes_loses_nothing_acknowledged() {
    let sync = Config {
        flush: FlushMode::Sync,
        ..cfg()
    };
    let mut b = Broker::open(sync.clone(), CrashStorage::new(), 0).unwrap();
    let mut acked = Vec::new();
    for i in 0..600 {
        let m = NewMessage {
            queue_id: Some(1),
            ..NewMessage::new("T", alloc::format!("m{i}").into_bytes())
        };
        let id = i;
        b.handle(0, id, Request::Send { messages: vec![m] })
            .unwrap();
        if i % 50 == 49 {
            b.sync().unwrap();
        }
        while let Some(out) = b.poll_output() {
            if let Output::Reply {
                id: got,
                reply: Reply::Sent(r),
            } = out
            {
                assert!(got <= id);
                acked.push(r[0].offset);
            }
        }
    }
    // 600 sent, the last sync after the 600th: then more, written to the log and the
    // consume-queue file (a tail flush), never synced.
    for i in 0..300 {
        let m = NewMessage {
            queue_id: Some(1),
            ..NewMessage::new("T", alloc::format!("late{i}").into_bytes())
        };
        b.handle(0, 1_000 + i, Request::Send { messages: vec![m] })
            .unwrap();
    }
    let live = b.storage().live();
    let crashed = b.storage().crash();
    let file = "consumequeue/T/1/00000000000000000000";
    assert!(
        live.side_file(file).unwrap().len() > crashed.side_file(file).map_or(0, <[u8]>::len),
        "unsynced consume-queue writes exist and a crash drops them"
    );
    assert_eq!(acked.len(), 600);
    let mut b = Broker::open(sync, CrashStorage::from_mem(crashed), 0).unwrap();
    let got: Vec<u64> = b
        .browse("T", 1, 0, 10_000)
        .unwrap()
        .iter()
        .map(|m| m.offset)
        .collect();
    assert_eq!(got, acked, "every acknowledged message, in its queue");
}

#[test]
fn a_consume_queue_file_that_cannot_be_written_keeps_its_units_until_it_can() {
    let mut b = Broker::open(cfg(), CrashStorage::new(), 0).unwrap();
    let mut sent: Vec<u64> = (0..300)
        .map(|i| send(&mut b, "T", 1, &alloc::format!("m{i}")).offset)
        .collect();
    // A full disk for the side files only (the log's segment has room): sends go on, the
    // units wait in memory and are read from there.
    b.storage_mut().fail_side_writes = true;
    sent.extend((0..1_000).map(|i| send(&mut b, "T", 1, &alloc::format!("f{i}")).offset));
    assert!(b.failed().is_none());
    let read = |b: &mut Broker<CrashStorage>| -> Vec<u64> {
        b.consume_queue("T", 1, 0, 100_000)
            .unwrap()
            .iter()
            .map(|u| u.offset)
            .collect()
    };
    assert_eq!(read(&mut b), sent);
    // Room again: the next try (within 256 more units) writes them all.
    b.storage_mut().fail_side_writes = false;
    sent.extend((0..256).map(|i| send(&mut b, "T", 1, &alloc::format!("a{i}")).offset));
    let file = b.storage().live();
    let file = file
        .side_file("consumequeue/T/1/00000000000000000000")
        .unwrap();
    assert!(file.len() >= 1_300 * 20, "{}", file.len());
    assert_eq!(read(&mut b), sent);
    // A disk that stays full: past CQ_TAIL_MAX units held, the broker fails by name.
    b.storage_mut().fail_side_writes = true;
    let mut i = 0;
    while b.failed().is_none() {
        send(&mut b, "T", 1, "x");
        i += 1;
        assert!(i <= 70_000, "never failed");
    }
    assert!(
        b.failed().unwrap().contains("consume queue"),
        "{:?}",
        b.failed()
    );
}

#[test]
fn retention_drops_the_consume_queue_files_below_a_queues_new_first_offset() {
    let small = Config {
        segment_size: 48 << 10,
        ..cfg()
    };
    let mut b = Broker::open(small.clone(), MemStorage::new(), 0).unwrap();
    b.create_topic("T", 2).unwrap().unwrap();
    // Near the end of the first file: the queue's units span two files.
    let start = CQ_FILE_UNITS - 100;
    b.start_queue_at("T", 1, start).unwrap().unwrap();
    let body = "x".repeat(200);
    for _ in 0..400 {
        send(&mut b, "T", 1, &body);
    }
    b.sync().unwrap();
    let second = alloc::format!("consumequeue/T/1/{:020}", CQ_FILE_UNITS * CQ_UNIT_BYTES);
    let files = |b: &mut Broker<MemStorage>| -> Vec<String> {
        b.storage_mut().side_list("consumequeue/T/1").unwrap()
    };
    assert_eq!(files(&mut b), vec![String::from(FILE0), second.clone()]);
    // Retire segments up to one whose first message is past the first file.
    let cut = b.segment_bases()[b.segment_bases().len() - 2];
    let r = b.retain(0, cut).unwrap();
    assert!(r.start > 0, "{r:?}");
    let first = b.queue_min_offset("T", 1).unwrap();
    assert!(first > CQ_FILE_UNITS, "first retained offset {first}");
    assert_eq!(files(&mut b), vec![second.clone()], "the first file went");
    // What is left reads as before, and a reopen rebuilds only the retained part.
    let before = b.browse("T", 1, 0, 1_000).unwrap();
    assert_eq!(before[0].queue_offset, first);
    b.close().unwrap();
    let mut b = Broker::open(small, b.into_storage(), 0).unwrap();
    b.close().unwrap();
    assert_eq!(files(&mut b), vec![second]);
    let after = b.browse("T", 1, 0, 1_000).unwrap();
    assert_eq!(after, before);
}

#[test]
fn consume_queue_memory_does_not_grow_with_messages_stored() {
    let cfg = Config {
        cq_cache_blocks: 8,
        ..cfg()
    };
    let mut b = Broker::open(cfg.clone(), MemStorage::new(), 0).unwrap();
    for q in 0..4 {
        for i in 0..2_000 {
            send(&mut b, "T", q, &alloc::format!("m{i}"));
        }
    }
    // Reads fill the cache to its bound (two blocks a queue).
    for q in 0..4 {
        b.browse("T", q, 0, 2_000).unwrap();
    }
    let early = b.queue_bytes();
    for round in 0..10 {
        for q in 0..4 {
            for i in 0..2_000 {
                send(&mut b, "T", q, &alloc::format!("r{round} m{i}"));
            }
            b.browse("T", q, 0, 10_000).unwrap();
        }
    }
    assert_eq!(b.stats().messages_stored, 88_000);
    // The bound: a full cache, each queue's tail, the queues' fixed part. On main's
    // in-memory queues the 88,000 units alone were 1.4 MB.
    let cache = cfg.cq_cache_blocks as usize * 1_000 * core::mem::size_of::<CqUnit>();
    let bound = cache + (32 << 10);
    let late = b.queue_bytes();
    assert!(
        early <= bound && late <= bound,
        "11x the messages: {early} then {late} bytes, bound {bound}"
    );
}

// ---- the key index --------------------------------------------------------------------

fn send_keyed<S: Storage>(b: &mut Broker<S>, topic: &str, key: &str, body: &str) -> SendResult {
    let m = NewMessage {
        queue_id: Some(0),
        keys: vec![key.into(), "shared".into()],
        message_id: Some(alloc::format!("ID-{key}")),
        ..NewMessage::new(topic, body.as_bytes().to_vec())
    };
    match b.execute(0, Request::Send { messages: vec![m] }).unwrap() {
        Reply::Sent(mut r) => r.remove(0),
        other => panic!("send failed: {other:?}"),
    }
}

fn index_files(b: &mut Broker<impl Storage>) -> Vec<String> {
    b.storage_mut().side_list(INDEX_DIR).unwrap()
}

#[test]
fn the_key_index_lives_in_files_and_finds_keys_and_ids_across_them() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    // Three entries a message (two keys and its id): several files of INDEX_ENTRIES.
    let n = INDEX_ENTRIES as usize * 2;
    let sent: Vec<SendResult> = (0..n)
        .map(|i| {
            send_keyed(
                &mut b,
                "T",
                &alloc::format!("k{i}"),
                &alloc::format!("m{i}"),
            )
        })
        .collect();
    let files = index_files(&mut b);
    assert!(files.len() >= 5, "{files:?}");
    assert_eq!(files[0], "index/00000000000000000000");
    // The oldest, a middle one and the newest (still pending, not yet written).
    for i in [0, n / 2, n - 1] {
        let found = b.messages_by_key("T", &alloc::format!("k{i}"), 10).unwrap();
        assert_eq!(found.len(), 1, "k{i}");
        assert_eq!(found[0].offset, sent[i].offset);
        let by_id = b.messages_by_key("T", &sent[i].msg_id, 10).unwrap();
        assert_eq!(by_id.len(), 1);
        assert_eq!(by_id[0].offset, sent[i].offset);
    }
    assert!(
        b.messages_by_key("U", "k1", 10).unwrap().is_empty(),
        "another topic"
    );
    // A key every message has: newest first, across files, at most `max`.
    let shared = b.messages_by_key("T", "shared", 5).unwrap();
    let offsets: Vec<u64> = shared.iter().map(|m| m.offset).collect();
    let newest: Vec<u64> = sent.iter().rev().take(5).map(|s| s.offset).collect();
    assert_eq!(offsets, newest);
    // A sealed file holds its slots and its entries in the layout the module doc gives.
    let f = b.storage().side_file(&files[0]).unwrap();
    assert_eq!(
        f.len() as u64,
        u64::from(INDEX_SLOTS) * 4 + u64::from(INDEX_ENTRIES) * 16
    );
    let at = INDEX_SLOTS as usize * 4;
    assert_eq!(
        &f[at + 4..at + 8],
        &0u32.to_be_bytes(),
        "the first entry ends its chain"
    );
    assert_eq!(&f[at + 8..at + 16], &sent[0].offset.to_be_bytes());
    // A reopen rebuilds the files from the log, the same.
    let before: Vec<(String, Vec<u8>)> = files
        .iter()
        .take(files.len() - 1)
        .map(|n| (n.clone(), b.storage().side_file(n).unwrap().to_vec()))
        .collect();
    let mut mem = b.into_storage();
    mem.set_side_file(&files[1], Some(vec![0xff; 64]));
    let mut b = Broker::open(cfg(), mem, 0).unwrap();
    for (name, bytes) in &before {
        assert_eq!(b.storage().side_file(name), Some(&bytes[..]), "{name}");
    }
    let found = b
        .messages_by_key("T", &alloc::format!("k{}", n / 2), 10)
        .unwrap();
    assert_eq!(found[0].offset, sent[n / 2].offset);
}

#[test]
fn key_index_memory_does_not_grow_with_messages_stored() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    for i in 0..INDEX_ENTRIES {
        send_keyed(&mut b, "T", &alloc::format!("k{i}"), "m");
    }
    let early = b.index_bytes();
    for i in 0..INDEX_ENTRIES * 6 {
        send_keyed(&mut b, "T", &alloc::format!("r{i}"), "m");
    }
    let late = b.index_bytes();
    // The newest file's slots, the entries not yet written (and their encoding), the files'
    // list (16 bytes a file). On main every entry was 16 bytes in memory: 21 *
    // INDEX_ENTRIES entries here.
    let bound = INDEX_SLOTS as usize * 4 + (32 << 10);
    assert!(
        early <= bound && late <= bound,
        "7x the messages: {early} then {late} bytes of index, bound {bound}"
    );
}

#[test]
fn retention_removes_index_files_wholly_below_the_log_start() {
    let small = Config {
        segment_size: 48 << 10,
        ..cfg()
    };
    let mut b = Broker::open(small.clone(), MemStorage::new(), 0).unwrap();
    let body = "x".repeat(200);
    let n = INDEX_ENTRIES as usize;
    let sent: Vec<SendResult> = (0..n)
        .map(|i| send_keyed(&mut b, "T", &alloc::format!("k{i}"), &body))
        .collect();
    b.sync().unwrap();
    let files = index_files(&mut b);
    assert!(files.len() >= 3, "{files:?}");
    let cut = b.segment_bases()[b.segment_bases().len() - 2];
    let r = b.retain(0, cut).unwrap();
    assert!(r.start > 0, "{r:?}");
    let left = index_files(&mut b);
    assert!(left.len() < files.len(), "{left:?} of {files:?}");
    assert_eq!(left.last(), files.last(), "the newest file stays");
    // What is retained is still found; what went is not.
    let last = n - 1;
    let found = b
        .messages_by_key("T", &alloc::format!("k{last}"), 1)
        .unwrap();
    assert_eq!(found[0].offset, sent[last].offset);
    assert!(b.messages_by_key("T", "k0", 1).unwrap().is_empty());
    // Every file left holds an entry at or after the log start: the newest in the oldest
    // one left is at or after it.
    let oldest_left = b.storage().side_file(&left[0]).unwrap().to_vec();
    let at = INDEX_SLOTS as usize * 4;
    let newest = oldest_left[at..]
        .chunks_exact(16)
        .map(|e| u64::from_be_bytes(e[8..16].try_into().unwrap()))
        .max()
        .unwrap();
    assert!(newest >= r.start, "{newest} < {}", r.start);
}
