//! `rocklet import`: synthetic Apache RocketMQ stores (records laid out as RocketMQ's
//! CommitLog writes them, config files as its fastjson writes them) imported and checked
//! through the core's public API. The same against stores Apache RocketMQ 5.5.0 itself
//! wrote runs in tests/ci/import.sh.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use rocklet_broker::import::{self, MoveError, Options, Report};
use rocklet_core::record::{self, sys_flag, Header, Host};
use rocklet_core::{Broker, Config, FileStorage, Output, Reply, Request, TagFilter};

const T0: u64 = 1_700_000_000_000;

/// A RocketMQ store being written: files of `file_size` bytes, a blank at the end of each
/// full one, queue offsets assigned per queue as RocketMQ's CommitLog assigns them.
struct Rmq {
    root: PathBuf,
    file_size: usize,
    files: Vec<Vec<u8>>,
    /// Write position in the last file.
    pos: usize,
    next: HashMap<(String, u32), u64>,
    /// Write records without the `__CRC32#` property (RocketMQ's default).
    crc: bool,
}

#[derive(Clone, Default)]
struct Rec<'a> {
    topic: &'a str,
    queue_id: u32,
    body: Vec<u8>,
    props: Vec<(&'a str, String)>,
    sys_flag: u32,
    store_ts: u64,
    prepared: u64,
    /// Queue offsets this record takes (an inner batch takes its message count).
    takes: u64,
    /// MESSAGE_MAGIC_CODE_V2 (two-byte topic length).
    v2: bool,
    /// Its queue offset, when not the next one.
    queue_offset: Option<u64>,
}

impl<'a> Rec<'a> {
    fn new(topic: &'a str, queue_id: u32, body: &[u8], store_ts: u64) -> Self {
        Rec {
            topic,
            queue_id,
            body: body.to_vec(),
            store_ts,
            takes: 1,
            ..Rec::default()
        }
    }
    fn prop(mut self, k: &'a str, v: impl ToString) -> Self {
        self.props.push((k, v.to_string()));
        self
    }
}

impl Rmq {
    fn new(root: &Path, file_size: usize) -> Self {
        Rmq {
            root: root.to_path_buf(),
            file_size,
            files: vec![vec![0; file_size]],
            pos: 0,
            next: HashMap::new(),
            crc: true,
        }
    }

    fn offset(&self) -> u64 {
        ((self.files.len() - 1) * self.file_size + self.pos) as u64
    }

    /// Appends a record; returns (log offset, queue offset).
    fn put(&mut self, r: Rec<'_>) -> (u64, u64) {
        let key = (r.topic.to_string(), r.queue_id);
        let qoff = r
            .queue_offset
            .unwrap_or_else(|| *self.next.get(&key).unwrap_or(&0));
        let mut props = Vec::new();
        for (k, v) in &r.props {
            record::push_prop(&mut props, k, v);
        }
        let header = |phys| Header {
            queue_id: r.queue_id,
            flag: 3,
            queue_offset: qoff,
            phys_offset: phys,
            sys_flag: r.sys_flag,
            born_timestamp: r.store_ts - 5,
            born_host: Host::V4([10, 0, 0, 9], 40000),
            store_timestamp: r.store_ts,
            store_host: Host::V4([10, 0, 0, 1], 10911),
            reconsume_times: 0,
            prepared_offset: r.prepared,
        };
        let encode = |phys| {
            let mut b = Vec::new();
            record::encode(&mut b, &header(phys), &r.body, r.topic, &props).unwrap();
            if !self.crc || r.v2 {
                b = strip_crc(b, r.body.len(), r.topic.len());
            }
            if r.v2 {
                b = to_v2(b, r.body.len());
            }
            b
        };
        let len = encode(0).len();
        if self.pos + len + record::BLANK_LEN > self.file_size {
            let rest = self.file_size - self.pos;
            let mut blank = Vec::new();
            record::encode_blank(&mut blank, rest as u32);
            let f = self.files.last_mut().unwrap();
            f[self.pos..self.pos + 8].copy_from_slice(&blank);
            self.files.push(vec![0; self.file_size]);
            self.pos = 0;
        }
        let off = self.offset();
        let bytes = encode(off);
        let f = self.files.last_mut().unwrap();
        f[self.pos..self.pos + bytes.len()].copy_from_slice(&bytes);
        self.pos += bytes.len();
        if r.queue_offset.is_none() {
            self.next.insert(key, qoff + r.takes);
        }
        (off, qoff)
    }

    /// Writes the commit log and the config files (JSON as fastjson writes it).
    fn finish(&self, configs: &[(&str, &str)]) {
        let dir = self.root.join("commitlog");
        std::fs::create_dir_all(&dir).unwrap();
        for (i, f) in self.files.iter().enumerate() {
            std::fs::write(dir.join(format!("{:020}", i * self.file_size)), f).unwrap();
        }
        std::fs::create_dir_all(self.root.join("config")).unwrap();
        for (name, text) in configs {
            std::fs::write(self.root.join("config").join(name), text).unwrap();
        }
    }
}

/// The record without its `__CRC32#` pair: TOTALSIZE and PROPERTIES length shrink.
fn strip_crc(mut b: Vec<u8>, body_len: usize, topic_len: usize) -> Vec<u8> {
    let total = b.len();
    let cut = record::CRC_RESERVED;
    // IPv4 hosts: the BODY length field at 84, then body, TOPIC length (1), topic.
    let at = 84 + 4 + body_len + 1 + topic_len;
    let n = u16::from_be_bytes([b[at], b[at + 1]]) as usize - cut;
    b[at..at + 2].copy_from_slice(&(n as u16).to_be_bytes());
    b.truncate(total - cut);
    let t = b.len() as u32;
    b[0..4].copy_from_slice(&t.to_be_bytes());
    b
}

/// The record as MESSAGE_MAGIC_CODE_V2: its TOPIC length in two bytes.
fn to_v2(mut b: Vec<u8>, body_len: usize) -> Vec<u8> {
    let at = record::FIXED_LEN_V4 - 3 + body_len; // TOPIC length, IPv4 hosts
    let len = b[at];
    b.splice(at..at + 1, [0, len]);
    let t = b.len() as u32;
    b[0..4].copy_from_slice(&t.to_be_bytes());
    b[4..8].copy_from_slice(&record::MESSAGE_MAGIC_V2.to_be_bytes());
    b
}

fn zlib(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// An inner batch's body (MessageDecoder.encodeMessages).
fn inner_batch(msgs: &[(&[u8], &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (body, props) in msgs {
        let total = 22 + body.len() + props.len();
        b.extend_from_slice(&(total as u32).to_be_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&5u32.to_be_bytes());
        b.extend_from_slice(&(body.len() as u32).to_be_bytes());
        b.extend_from_slice(body);
        b.extend_from_slice(&(props.len() as u16).to_be_bytes());
        b.extend_from_slice(props.as_bytes());
    }
    b
}

fn opts(from: &Path, to: &Path) -> Options {
    Options {
        from: from.to_path_buf(),
        data_dir: to.to_path_buf(),
        core: Config::default(),
    }
}

fn open(dir: &Path, now: u64) -> Broker<FileStorage> {
    // Another test of this file spawning a process (mkfifo, rocklet) holds a copy of every
    // open descriptor between its fork and exec, the data directory's LOCK included: the
    // lock an import just released can stay held for that moment.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let storage = loop {
        match FileStorage::open(dir) {
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && std::time::Instant::now() < until =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            r => break r.unwrap(),
        }
    };
    Broker::open(Config::default(), storage, now).unwrap()
}

fn bodies(b: &mut Broker<FileStorage>, topic: &str, q: u32) -> Vec<String> {
    b.browse(topic, q, 0, 1000)
        .unwrap()
        .iter()
        .map(|m| String::from_utf8_lossy(&m.body).into_owned())
        .collect()
}

fn refused(r: Result<Report, MoveError>) -> String {
    match r {
        Err(MoveError::Refused(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn normal_messages_keep_queues_offsets_and_consumer_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("store");
    let mut s = Rmq::new(&src, 2048);
    s.crc = false; // RocketMQ's default: no __CRC32# property
    for i in 0..12u64 {
        let q = (i % 3) as u32;
        s.put(
            Rec::new("Orders", q, format!("order-{i}").as_bytes(), T0 + i)
                .prop("TAGS", if i % 2 == 0 { "even" } else { "odd" })
                .prop("KEYS", format!("k{i} shared"))
                .prop("UNIQ_KEY", format!("7F00000100002A9F0000000000{i:06}"))
                .prop("CLUSTER", "DefaultCluster")
                .prop("color", "blue")
                .prop("WAIT", "true"),
        );
    }
    // A message without UNIQ_KEY, one in a retry topic, and records of RocketMQ's own topics.
    s.put(Rec::new("Orders", 0, b"no-id", T0 + 20));
    s.put(
        Rec::new("%RETRY%billing", 0, b"retry-1", T0 + 21)
            .prop("UNIQ_KEY", "R1")
            .prop("RETRY_TOPIC", "Orders"),
    );
    s.put(Rec::new("RMQ_SYS_TRACE_TOPIC", 0, b"trace", T0 + 22));
    s.put(Rec::new("%DLQ%billing", 0, b"dead", T0 + 23).prop("UNIQ_KEY", "D1"));
    assert!(s.files.len() > 1, "the test needs a blank at a file end");
    s.finish(&[
        (
            "topics.json",
            r#"{"topicConfigTable":{"Orders":{"topicName":"Orders","readQueueNums":4,"writeQueueNums":4,"perm":6},"TBW102":{"topicName":"TBW102","readQueueNums":8,"writeQueueNums":8},"%RETRY%billing":{"topicName":"%RETRY%billing","readQueueNums":1,"writeQueueNums":1},"ProdCluster":{"readQueueNums":16},"ProdCluster_REPLY_TOPIC":{"readQueueNums":1},"broker-a":{"readQueueNums":1},"rmq_sys_REVIVE_LOG_ProdCluster":{"readQueueNums":8},"rmq_sys_SYNC_BROKER_MEMBER_broker-a":{"readQueueNums":1},"RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC":{"readQueueNums":1}},"dataVersion":{"counter":3}}"#,
        ),
        (
            "subscriptionGroup.json",
            r#"{"subscriptionGroupTable":{"billing":{"groupName":"billing","consumeMessageOrderly":true},"audit":{"groupName":"audit","consumeMessageOrderly":false},"TOOLS_CONSUMER":{"groupName":"TOOLS_CONSUMER"}}}"#,
        ),
        (
            "consumerOffset.json",
            r#"{"offsetTable":{"Orders@billing":{0:2,1:4,2:1},"%RETRY%billing@billing":{0:1},"%DLQ%billing@billing":{0:0},"Orders@TOOLS_CONSUMER":{0:1}}}"#,
        ),
    ]);
    let before = common::files_under(&src);
    let data = tmp.path().join("data");
    let report = import::run(&opts(&src, &data)).unwrap();
    assert_eq!(
        common::files_under(&src),
        before,
        "the store was written to"
    );

    assert_eq!(report.normal, 14, "{report}");
    assert_eq!(report.retry, 1);
    assert_eq!(report.without_message_id, 1);
    assert_eq!(report.topics, 2);
    assert_eq!(report.groups, 2);
    assert_eq!(report.consumer_offsets, 4);
    let skipped: Vec<_> = report.skipped.keys().cloned().collect();
    assert!(
        skipped.iter().any(|k| k.contains("RMQ_SYS_TRACE_TOPIC")),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|k| k.contains("dead-letter topic %DLQ%billing")),
        "{skipped:?}"
    );
    assert!(
        skipped
            .iter()
            .any(|k| k.contains("consumer offsets of group billing in %DLQ%billing")),
        "{skipped:?}"
    );

    let mut b = open(&data, T0 + 100);
    assert_eq!(b.topic_queue_count("Orders"), Some(4));
    for q in 0..3u32 {
        let msgs = b.browse("Orders", q, 0, 100).unwrap();
        let want: Vec<u64> = (0..12).filter(|i| i % 3 == u64::from(q)).collect();
        for (qoff, (m, i)) in msgs.iter().zip(&want).enumerate() {
            assert_eq!(m.queue_offset, qoff as u64);
            assert_eq!(m.body, format!("order-{i}").as_bytes());
            assert_eq!(m.msg_id, format!("7F00000100002A9F0000000000{i:06}"));
            assert_eq!(
                m.tag.as_deref(),
                Some(if i % 2 == 0 { "even" } else { "odd" })
            );
            assert_eq!(m.keys, vec![format!("k{i}"), "shared".to_string()]);
            assert_eq!(m.property("color"), Some("blue"));
            assert_eq!(m.property("CLUSTER"), Some("DefaultCluster"));
            assert_eq!(m.born_timestamp, T0 + i - 5);
            assert_eq!(m.store_timestamp, T0 + i);
            assert_eq!(m.born_host, Host::V4([10, 0, 0, 9], 40000));
            assert_eq!(m.flag, 3);
        }
    }
    assert_eq!(bodies(&mut b, "Orders", 0).last().unwrap(), "no-id");
    assert_eq!(bodies(&mut b, "%RETRY%billing", 0), ["retry-1"]);
    assert_eq!(b.committed_offset("billing", "Orders", 0), Some(2));
    assert_eq!(b.committed_offset("billing", "Orders", 1), Some(4));
    assert_eq!(b.committed_offset("billing", "%RETRY%billing", 0), Some(1));
    assert!(b.group_is_fifo("billing") && !b.group_is_fifo("audit"));
    // A consumer of the group goes on where it was.
    let r = b
        .execute(
            T0 + 100,
            Request::Pull {
                group: "billing".into(),
                topic: "Orders".into(),
                queue_id: 0,
                offset: None,
                max: 10,
                filter: TagFilter::All,
                auto_commit: false,
            },
        )
        .unwrap();
    let Reply::Pulled { messages, .. } = r else {
        panic!("{r:?}")
    };
    assert_eq!(messages[0].body, b"order-6");
}

#[test]
fn transactions_committed_rolled_back_pending_and_discarded() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("store");
    let mut s = Rmq::new(&src, 1 << 16);
    let half = |uniq: &'static str, checks: Option<u32>, ts: u64| {
        let mut r = Rec::new(
            "RMQ_SYS_TRANS_HALF_TOPIC",
            0,
            format!("txn-{uniq}").as_bytes(),
            ts,
        )
        .prop("TAGS", "t")
        .prop("UNIQ_KEY", uniq)
        .prop("TRAN_MSG", "true")
        .prop("PGROUP", "payments")
        .prop("REAL_TOPIC", "Pay")
        .prop("REAL_QID", 1)
        .prop("note", "x");
        if let Some(c) = checks {
            r = r.prop("TRANSACTION_CHECK_TIMES", c);
        }
        r.sys_flag = sys_flag::TRANSACTION_PREPARED_TYPE;
        r
    };
    s.put(Rec::new("Pay", 1, b"before", T0));
    let (a, _) = s.put(half("A", None, T0 + 1)); // committed
    s.put(half("B", None, T0 + 2)); // rolled back
    s.put(half("D", None, T0 + 3)); // discarded by the checker
    s.put(half("C", None, T0 + 4)); // pending: checked twice, re-put each time
    s.put(half("C", Some(1), T0 + 10));
    s.put(half("C", Some(2), T0 + 20));
    let mut commit = Rec::new("Pay", 1, b"txn-A", T0 + 30)
        .prop("TAGS", "t")
        .prop("UNIQ_KEY", "A")
        .prop("PGROUP", "payments")
        .prop("note", "x");
    commit.sys_flag = sys_flag::TRANSACTION_COMMIT_TYPE;
    commit.prepared = a;
    s.put(commit);
    s.put(Rec::new("RMQ_SYS_TRANS_OP_HALF_TOPIC", 0, b"0,1,", T0 + 31).prop("TAGS", "d"));
    s.put(Rec::new("Pay", 1, b"after", T0 + 32));
    s.finish(&[(
        "consumerOffset.json",
        r#"{"offsetTable":{"RMQ_SYS_TRANS_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:5},"RMQ_SYS_TRANS_OP_HALF_TOPIC@CID_RMQ_SYS_TRANS":{0:1}}}"#,
    )]);
    let data = tmp.path().join("data");
    let report = import::run(&opts(&src, &data)).unwrap();
    assert_eq!(
        (
            report.committed,
            report.rolled_back,
            report.discarded_halves
        ),
        (1, 1, 1),
        "{report}"
    );
    assert_eq!(report.pending.len(), 1);
    assert_eq!(report.pending[0].id, "C");
    assert_eq!(report.pending[0].group, "payments");
    assert_eq!(report.pending[0].checks, 2);

    let mut b = open(&data, T0 + 100);
    // The committed message is at the queue offset its commit copy had; nothing else shows.
    assert_eq!(bodies(&mut b, "Pay", 1), ["before", "txn-A", "after"]);
    let committed = &b.browse("Pay", 1, 1, 1).unwrap()[0];
    assert_eq!(committed.msg_id, "A");
    assert_eq!(committed.property("PGROUP"), Some("payments"));
    assert_eq!(committed.property("note"), Some("x"));
    let pending = b.pending_transactions(10);
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(
        (
            pending[0].group.as_str(),
            pending[0].topic.as_str(),
            pending[0].queue_id
        ),
        ("payments", "Pay", 1)
    );
    // The half carries RocketMQ's check count.
    let half = b
        .raw_records(0, 10_000)
        .unwrap()
        .into_iter()
        .map(|(_, bytes)| bytes)
        .find(|bytes| {
            matches!(record::decode(bytes, 1 << 20), Ok(record::Decoded::Record(r)) if r.topic == "RMQ_SYS_TRANS_HALF_TOPIC" && r.prop("UNIQ_KEY") == Some("C"))
        })
        .unwrap();
    let Ok(record::Decoded::Record(h)) = record::decode(&half, 1 << 20) else {
        unreachable!()
    };
    assert_eq!(h.prop("TRANSACTION_CHECK_TIMES"), Some("2"));
    // A producer of the group is checked, and its commit makes the message visible.
    let now = T0 + 1_000_000;
    b.set_producer_online(now, "payments", true);
    b.handle_timeout(now).unwrap();
    let check = std::iter::from_fn(|| b.poll_output())
        .find_map(|o| match o {
            Output::Check(c) => Some(c),
            _ => None,
        })
        .expect("the pending transaction is checked");
    assert_eq!(check.message.msg_id, "C");
    assert_eq!(check.message.body, b"txn-C");
    let r = b
        .execute(
            now,
            Request::EndTransaction {
                txn: check.txn,
                resolution: rocklet_core::Resolution::Commit,
                group: Some("payments".into()),
                from_check: true,
            },
        )
        .unwrap();
    assert!(matches!(r, Reply::Ended { .. }), "{r:?}");
    assert_eq!(
        bodies(&mut b, "Pay", 1),
        ["before", "txn-A", "after", "txn-C"]
    );
}

#[test]
fn delays_delivered_once_and_pending_keep_their_due_time() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("store");
    let mut s = Rmq::new(&src, 1 << 16);
    let sched = |level: u32, uniq: &'static str, ts: u64| {
        Rec::new(
            "SCHEDULE_TOPIC_XXXX",
            level - 1,
            format!("level-{uniq}").as_bytes(),
            ts,
        )
        .prop("DELAY", level)
        .prop("UNIQ_KEY", uniq)
        .prop("REAL_TOPIC", "Late")
        .prop("REAL_QID", 0)
    };
    let timer = |uniq: &'static str, due: u64, ts: u64| {
        Rec::new(
            "rmq_sys_wheel_timer",
            0,
            format!("timer-{uniq}").as_bytes(),
            ts,
        )
        .prop("TIMER_DELIVER_MS", due + 1000)
        .prop("TIMER_OUT_MS", due)
        .prop("UNIQ_KEY", uniq)
        .prop("REAL_TOPIC", "Late")
        .prop("REAL_QID", 1)
    };
    // Level 1: delivered, its copy is in the log (it keeps REAL_TOPIC, loses DELAY).
    s.put(sched(1, "L1", T0));
    s.put(
        Rec::new("Late", 0, b"level-L1", T0 + 1000)
            .prop("UNIQ_KEY", "L1")
            .prop("REAL_TOPIC", "Late")
            .prop("REAL_QID", 0),
    );
    // Level 3: not delivered. Level 2: delivered per delayOffset.json (no copy with its key:
    // the checkpoint is RocketMQ's word).
    s.put(sched(3, "L3", T0 + 1));
    s.put(sched(2, "L2", T0 + 2));
    // Timers: T1 delivered (copy with TIMER_DEQUEUE_MS), T2 pending, T3 recalled, T4 rolled
    // once and pending as its roll copy, T5 before the checkpoint (delivered by it).
    s.put(timer("T1", T0 + 500, T0 + 3));
    s.put(timer("T2", T0 + 900_000, T0 + 4));
    s.put(timer("T3", T0 + 800_000, T0 + 5));
    s.put(timer("T4", T0 + 5_000_000, T0 + 6));
    s.put(timer("T5", T0 + 100, T0 + 7).prop("KEYS", "x"));
    s.put(
        Rec::new("Late", 1, b"timer-T1", T0 + 600)
            .prop("UNIQ_KEY", "T1")
            .prop("TIMER_DEQUEUE_MS", T0 + 600)
            .prop("TIMER_DELIVER_MS", T0 + 1500),
    );
    s.put(
        Rec::new("rmq_sys_wheel_timer", 0, b"x", T0 + 610)
            .prop("TIMER_DEL_UNIQKEY", "Late+T3")
            .prop("TIMER_OUT_MS", T0 + 800_000),
    );
    s.put(timer("T4", T0 + 5_000_000, T0 + 620).prop("TIMER_ROLL_TIMES", 1));
    s.put(Rec::new("Late", 0, b"normal", T0 + 2000));
    s.finish(&[(
        "delayOffset.json",
        r#"{"offsetTable":{1:1,2:1,3:0},"dataVersion":{}}"#,
    )]);
    let mut ck = vec![0u8; 4096];
    ck[0..8].copy_from_slice(&(T0 + 200).to_be_bytes()); // lastReadTimeMs
    ck[16..24].copy_from_slice(&6u64.to_be_bytes()); // lastTimerQueueOffset
    std::fs::write(src.join("config/timercheck"), ck).unwrap();

    let data = tmp.path().join("data");
    let report = import::run(&opts(&src, &data)).unwrap();
    assert_eq!(report.delivered_delays, 2, "{report}");
    assert_eq!(
        (
            report.pending_level_delays,
            report.pending_timers,
            report.recalled_timers
        ),
        (1, 2, 1),
        "{report}"
    );
    let mut b = open(&data, T0 + 3000);
    // Delivered ones are there once, as RocketMQ delivered them; nothing is delivered again.
    assert_eq!(bodies(&mut b, "Late", 0), ["level-L1", "normal"]);
    assert_eq!(bodies(&mut b, "Late", 1), ["timer-T1"]);
    let copy = &b.browse("Late", 1, 0, 1).unwrap()[0];
    assert_eq!(
        copy.property("TIMER_DEQUEUE_MS"),
        Some((T0 + 600).to_string().as_str())
    );
    assert_eq!(
        copy.property("TIMER_DELIVER_MS"),
        None,
        "a delivered copy is not delayed again"
    );
    let mut due: Vec<(u32, u64)> = b
        .pending_delays(10)
        .iter()
        .map(|d| (d.queue_id, d.due))
        .collect();
    due.sort();
    assert_eq!(
        due,
        [(0, T0 + 1 + 10_000), (1, T0 + 900_000), (1, T0 + 5_000_000)]
    );
    b.handle_timeout(T0 + 20_000).unwrap();
    assert_eq!(
        bodies(&mut b, "Late", 0),
        ["level-L1", "normal", "level-L3"]
    );
    b.handle_timeout(T0 + 900_000).unwrap();
    assert_eq!(bodies(&mut b, "Late", 1), ["timer-T1", "timer-T2"]);
}

#[test]
fn record_forms_compressed_inner_batch_v2_and_without_crc() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("store");
    let mut s = Rmq::new(&src, 1 << 20);
    let big: Vec<u8> = (0..100 * 1024).map(|i| b"rocketmq "[i % 9]).collect();
    let mut c = Rec::new("Forms", 0, &zlib(&big), T0).prop("UNIQ_KEY", "Z1");
    c.sys_flag = sys_flag::COMPRESSED | (3 << 8);
    s.put(c);
    let mut batch = Rec::new(
        "Forms",
        0,
        &inner_batch(&[
            (b"b1", "UNIQ_KEY\x01I1\x02TAGS\x01x\x02"),
            (b"b2", "UNIQ_KEY\x01I2\x02"),
            (b"b3", ""),
        ]),
        T0 + 1,
    )
    .prop("INNER_NUM", 3)
    .prop("UNIQ_KEY", "BATCH");
    batch.sys_flag = sys_flag::INNER_BATCH | 0x40;
    batch.takes = 3;
    s.put(batch);
    let mut v2 = Rec::new("Forms", 0, b"v2", T0 + 2).prop("UNIQ_KEY", "V2");
    v2.v2 = true;
    s.put(v2);
    s.crc = false;
    s.put(Rec::new("Forms", 0, b"plain", T0 + 3).prop("UNIQ_KEY", "P"));
    let long = "L".repeat(130);
    let mut lv2 = Rec::new(&long, 0, b"long", T0 + 4);
    lv2.v2 = true;
    s.put(lv2);
    s.finish(&[]);
    let data = tmp.path().join("data");
    let report = import::run(&opts(&src, &data)).unwrap();
    assert_eq!(
        (
            report.inflated,
            report.inner_batches,
            report.inner_batch_messages
        ),
        (1, 1, 3),
        "{report}"
    );
    assert!(
        report
            .skipped
            .keys()
            .any(|k| k.contains(&long) && k.contains("longer than 127")),
        "{report}"
    );
    let mut b = open(&data, T0 + 100);
    let msgs = b.browse("Forms", 0, 0, 100).unwrap();
    let got: Vec<(u64, &str, usize)> = msgs
        .iter()
        .map(|m| (m.queue_offset, m.msg_id.as_str(), m.body.len()))
        .collect();
    assert_eq!(
        got[..4],
        [
            (0, "Z1", big.len()),
            (1, "I1", 2),
            (2, "I2", 2),
            (3, got[3].1, 2)
        ]
    );
    assert_eq!(got[4..], [(4, "V2", 2), (5, "P", 5)]);
    assert_eq!(msgs[0].body, big);
    assert_eq!(msgs[1].tag.as_deref(), Some("x"));
    assert_eq!(msgs[0].sys_flag & sys_flag::COMPRESSED, 0);
}

#[test]
fn stores_that_cannot_be_imported_are_refused_and_nothing_is_left() {
    let tmp = tempfile::tempdir().unwrap();
    let store = |name: &str, build: &dyn Fn(&mut Rmq)| {
        let src = tmp.path().join(name);
        let mut s = Rmq::new(&src, 4096);
        build(&mut s);
        s.finish(&[]);
        src
    };
    let run = |src: &Path| {
        let data = src.with_extension("data");
        let r = import::run(&opts(src, &data));
        assert!(!data.exists(), "{} was left behind", data.display());
        r
    };
    // A queue that starts past 0 although the commit log starts at 0: records are missing.
    let src = store("late-start", &|s| {
        let mut r = Rec::new("T", 0, b"x", T0);
        r.queue_offset = Some(5);
        s.put(r);
    });
    assert!(refused(run(&src))
        .contains("queue T:0 starts at queue offset 5 (log offset 0), not 0, although"));
    // A gap inside a queue.
    let src = store("gap", &|s| {
        s.put(Rec::new("T", 0, b"x", T0));
        let mut r = Rec::new("T", 0, b"y", T0);
        r.queue_offset = Some(3);
        s.put(r);
    });
    assert!(refused(run(&src)).contains("jumps from queue offset 1 to 3"));
    // Damage in a file that is not the last.
    let src = store("damaged", &|s| {
        for i in 0..60 {
            s.put(Rec::new("T", 0, format!("m{i}").as_bytes(), T0));
        }
    });
    let f = src.join("commitlog/00000000000000000000");
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[200] ^= 0xFF;
    std::fs::write(&f, bytes).unwrap();
    assert!(refused(run(&src)).contains("the commit log is damaged at offset"));
    // A missing file in the middle.
    let src = store("missing", &|s| {
        for i in 0..200 {
            s.put(Rec::new("T", 0, format!("m{i}").as_bytes(), T0));
        }
    });
    std::fs::remove_file(src.join("commitlog/00000000000000004096")).unwrap();
    assert!(refused(run(&src)).contains("not contiguous"));
    // A compressed body that is not zlib, and LZ4.
    let src = store("lz4", &|s| {
        let mut r = Rec::new("T", 0, b"xxxxxxxx", T0);
        r.sys_flag = sys_flag::COMPRESSED | (1 << 8);
        s.put(r);
    });
    assert!(refused(run(&src)).contains("LZ4"));
    // No commit log at all; a data directory that is not empty, or inside the store.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    assert!(refused(run(&empty)).contains("has no commit log"));
    let ok = store("ok", &|s| {
        s.put(Rec::new("T", 0, b"x", T0));
    });
    let busy = tmp.path().join("busy");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("keep"), b"mine").unwrap();
    assert!(refused(import::run(&opts(&ok, &busy))).contains("is not empty"));
    assert_eq!(std::fs::read(busy.join("keep")).unwrap(), b"mine");
    assert!(refused(import::run(&opts(&ok, &ok.join("inside")))).contains("overlap"));
    assert!(!ok.join("inside").exists());
    // Another program's file in commitlog/; a config file that is not JSON; too many queues.
    let src = store("stray", &|s| {
        s.put(Rec::new("T", 0, b"x", T0));
    });
    std::fs::write(src.join("commitlog/notes.txt"), b"x").unwrap();
    assert!(refused(run(&src)).contains("notes.txt is not a commit-log file"));
    let src = store("bad-json", &|s| {
        s.put(Rec::new("T", 0, b"x", T0));
    });
    std::fs::write(
        src.join("config/consumerOffset.json"),
        b"{\"offsetTable\": [",
    )
    .unwrap();
    assert!(refused(run(&src)).contains("consumerOffset.json is not RocketMQ's JSON"));
    let src = store("wide", &|s| {
        s.put(Rec::new("T", 0, b"x", T0));
    });
    std::fs::write(
        src.join("config/topics.json"),
        br#"{"topicConfigTable":{"T":{"readQueueNums":2048,"writeQueueNums":16}}}"#,
    )
    .unwrap();
    assert!(refused(run(&src)).contains("topic T needs 2048 queues"));
    // A record the core refuses stops the import: an empty body.
    let src = store("empty-body", &|s| {
        s.put(Rec::new("T", 0, b"", T0));
    });
    let why = refused(run(&src));
    assert!(
        why.contains("log offset 0 (T:0 queue offset 0)") && why.contains("EMPTY_BODY"),
        "{why}"
    );
}

#[test]
fn a_torn_tail_in_the_last_file_is_cut_as_rocketmq_recovery_cuts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("store");
    let mut s = Rmq::new(&src, 4096);
    s.put(Rec::new("T", 0, b"kept", T0));
    let (off, _) = s.put(Rec::new("T", 0, b"torn", T0 + 1));
    s.finish(&[]);
    let f = src.join("commitlog/00000000000000000000");
    let mut bytes = std::fs::read(&f).unwrap();
    bytes[off as usize + 30] ^= 1;
    std::fs::write(&f, bytes).unwrap();
    let data = tmp.path().join("data");
    let report = import::run(&opts(&src, &data)).unwrap();
    assert_eq!(report.normal, 1);
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains(&format!("at offset {off}"))),
        "{report}"
    );
    let mut b = open(&data, T0);
    assert_eq!(bodies(&mut b, "T", 0), ["kept"]);
}

#[test]
fn a_store_whose_oldest_files_rocketmq_deleted_keeps_its_queue_offsets() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("store");
    let mut s = Rmq::new(&src, 1024);
    for i in 0..40u64 {
        s.put(Rec::new("T", 0, format!("m{i}").as_bytes(), T0 + i));
    }
    assert!(s.files.len() > 2, "the test needs several files");
    s.finish(&[("consumerOffset.json", r#"{"offsetTable":{"T@g":{0:30}}}"#)]);
    // fileReservedTime: RocketMQ deleted the oldest file.
    std::fs::remove_file(src.join("commitlog/00000000000000000000")).unwrap();
    let data = tmp.path().join("data");
    import::run(&opts(&src, &data)).unwrap();
    let mut b = open(&data, T0 + 100);
    let first = b.queue_min_offset("T", 0).unwrap();
    assert!(
        first > 0,
        "the queue starts where its oldest kept message is"
    );
    let got = bodies(&mut b, "T", 0);
    let want: Vec<String> = (first..40).map(|i| format!("m{i}")).collect();
    assert_eq!(
        got, want,
        "every kept message, at its RocketMQ queue offset"
    );
    let m = b.browse("T", 0, first, 1).unwrap();
    assert_eq!(m[0].queue_offset, first);
    assert_eq!(b.committed_offset("g", "T", 0), Some(30));
}

/// Sets the modification time of the directory `dir` to 2001-09-09, so that any entry
/// created or removed in it shows (a fresh mtime, whatever the clock's granularity).
fn age(dir: &Path) -> std::time::SystemTime {
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
    std::fs::File::open(dir).unwrap().set_modified(old).unwrap();
    std::fs::metadata(dir).unwrap().modified().unwrap()
}

#[test]
fn a_data_dir_inside_the_store_is_refused_before_anything_is_written_there() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("store");
    let mut s = Rmq::new(&src, 4096);
    s.put(Rec::new("T", 0, b"x", T0));
    s.finish(&[]);
    std::os::unix::fs::symlink(src.join("config"), tmp.path().join("link")).unwrap();
    for inside in [
        src.join("inside"),
        src.join("config/new/deeper"),
        // The same, spelled through `..` and through a link.
        tmp.path().join("elsewhere/../store/inside"),
        tmp.path().join("link/new"),
    ] {
        let (root, config) = (age(&src), age(&src.join("config")));
        let r = import::run(&opts(&src, &inside));
        assert!(!inside.exists(), "{}", inside.display());
        // Not even created and removed again: the store's directories never changed.
        assert_eq!(std::fs::metadata(&src).unwrap().modified().unwrap(), root);
        assert_eq!(
            std::fs::metadata(src.join("config"))
                .unwrap()
                .modified()
                .unwrap(),
            config
        );
        let why = refused(r);
        assert!(
            why.contains("overlap") && why.contains("is inside the store"),
            "{}: {why}",
            inside.display()
        );
    }
    assert!(!tmp.path().join("elsewhere").exists());
    // The reverse: the store inside the data directory (here the data directory is empty
    // apart from the store, and still refused for holding it).
    let why = refused(import::run(&opts(&src, tmp.path())));
    assert!(
        why.contains("overlap") && why.contains("holding it"),
        "{why}"
    );
    let why = refused(import::run(&opts(&src, &src)));
    assert!(why.contains("overlap"), "{why}");
}

/// Runs `f` on another thread; panics if it has not returned within 10 s (the thread is
/// left behind: what it waits on never comes).
fn within_10s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what}: still blocked after 10 s"))
}

fn mkfifo(path: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {}", path.display());
}

#[test]
fn store_files_that_are_fifos_devices_or_too_large_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let store = |name: &str| {
        let src = tmp.path().join(name);
        let mut s = Rmq::new(&src, 4096);
        s.put(Rec::new("T", 0, b"x", T0));
        s.finish(&[]);
        src
    };
    let run = |src: PathBuf, what: &'static str| {
        let data = src.with_extension("data");
        let why = within_10s(what, {
            let data = data.clone();
            move || refused(import::run(&opts(&src, &data)))
        });
        assert!(!data.exists(), "{what}: {} was left behind", data.display());
        why
    };
    // A FIFO as a config file, as the timer checkpoint, as a commit-log file: opening one
    // for reading blocks until a writer comes.
    for name in ["topics.json", "consumerOffset.json", "timercheck"] {
        let src = store(name);
        mkfifo(&src.join("config").join(name));
        let why = run(src, name);
        assert!(
            why.contains(name) && why.contains("FIFO") && why.contains("not a regular file"),
            "{name}: {why}"
        );
    }
    let src = store("fifo-segment");
    mkfifo(&src.join("commitlog/00000000000000004096"));
    let why = run(src, "a FIFO commit-log file");
    assert!(
        why.contains("00000000000000004096 is not a regular file"),
        "{why}"
    );
    // A device that never ends, in place of a config file.
    let src = store("device");
    std::os::unix::fs::symlink("/dev/zero", src.join("config/subscriptionGroup.json")).unwrap();
    let why = run(src, "/dev/zero");
    assert!(
        why.contains("subscriptionGroup.json") && why.contains("a character device"),
        "{why}"
    );
    // A config file above the bound (sparse: nothing is written, nothing is read).
    let src = store("huge");
    let f = std::fs::File::create(src.join("config/consumerOffset.json")).unwrap();
    f.set_len(import::store::MAX_CONFIG_JSON_BYTES + 1).unwrap();
    let why = run(src, "a huge config file");
    assert!(
        why.contains("consumerOffset.json") && why.contains("above the"),
        "{why}"
    );
}

/// `rocklet import` with `args`; its exit status and stderr (killed after 10 s).
fn import_cmd(args: &[&std::ffi::OsStr]) -> (bool, String) {
    use std::io::Read;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rocklet"))
        .arg("import")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("rocklet import {args:?}: still running after 10 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.success(), err)
}

#[test]
fn a_config_file_that_is_a_device_or_a_fifo_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("store");
    let mut s = Rmq::new(&src, 4096);
    s.put(Rec::new("T", 0, b"x", T0));
    s.finish(&[]);
    let data = tmp.path().join("data");
    let fifo = tmp.path().join("config.toml");
    mkfifo(&fifo);
    for (config, what) in [
        (Path::new("/dev/zero"), "a character device"),
        (fifo.as_path(), "a FIFO"),
        (tmp.path(), "a directory"),
    ] {
        let (ok, err) = import_cmd(&[
            "--from-rocketmq".as_ref(),
            src.as_os_str(),
            "--data-dir".as_ref(),
            data.as_os_str(),
            "--config".as_ref(),
            config.as_os_str(),
        ]);
        assert!(!ok, "{}: imported", config.display());
        assert!(
            err.contains(&format!("cannot read config file {}", config.display()))
                && err.contains(what),
            "{}: {err}",
            config.display()
        );
        assert!(!data.exists());
    }
    // A config file above the bound.
    let big = tmp.path().join("big.toml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(rocklet_broker::config::MAX_CONFIG_FILE_BYTES + 1)
        .unwrap();
    let (ok, err) = import_cmd(&[
        "--from-rocketmq".as_ref(),
        src.as_os_str(),
        "--data-dir".as_ref(),
        data.as_os_str(),
        "--config".as_ref(),
        big.as_os_str(),
    ]);
    assert!(!ok && err.contains("above the"), "{err}");
}

#[test]
fn damage_followed_by_valid_records_is_not_a_torn_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("store");
    let mut s = Rmq::new(&src, 4096);
    s.put(Rec::new("T", 0, b"kept", T0));
    let (bad, _) = s.put(Rec::new("T", 0, b"damaged", T0 + 1));
    let (next, _) = s.put(Rec::new("T", 0, b"valid after the damage", T0 + 2));
    s.put(Rec::new("T", 0, b"and one more", T0 + 3));
    s.finish(&[]);
    let f = src.join("commitlog/00000000000000000000");
    let bytes = std::fs::read(&f).unwrap();
    // Damage of both kinds: a flipped byte (a CRC or offset mismatch), and a length that
    // runs past the end of the file (read as a record cut short).
    for (at, flip) in [(bad as usize + 30, [1u8, 0]), (bad as usize, [0x7F, 0])] {
        let mut b = bytes.clone();
        b[at] ^= flip[0];
        std::fs::write(&f, &b).unwrap();
        let data = tmp.path().join("data");
        let why = refused(import::run(&opts(&src, &data)));
        assert!(
            why.contains(&format!("damaged at offset {bad}"))
                && why.contains(&format!("a valid record follows at offset {next}"))
                && why.contains("00000000000000000000")
                && why.contains("not a torn tail"),
            "{why}"
        );
        assert!(!data.exists());
    }
}
