//! Log retention on a file-backed broker process: segments go 0.36 s after they are
//! sealed (`file_reserved_time_hours = 0.0001`, every hour a `delete_when` hour), the
//! broker is killed
//! with SIGKILL while it retires them, and nothing owed is lost: the pending half is still
//! pending under its id and gets checked, the delayed message is delivered once, the
//! newest acknowledged messages are all there, once.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::v4::V4;
use common::*;
use rocklet_broker::clock::SystemClock;
use rocklet_broker::config::RetentionConfig;
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::remoting::codec::SerializeType;

const BIN: &str = env!("CARGO_BIN_EXE_rocklet");

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn segments(dir: &Path) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().ok()?;
            (name.len() == 20).then(|| name.parse().ok()).flatten()
        })
        .collect();
    out.sort_unstable();
    out
}

#[tokio::test]
async fn kill9_while_retention_retires_segments_loses_nothing_owed() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let hours: Vec<String> = (0..24).map(|h| format!("{h:02}")).collect();
    let core = "[core]\nflush = \"sync\"\nsegment_size = 65536\nmax_message_size = 8192\n\
                max_batch_size = 8192\ntransaction_timeout_ms = 300\n\
                transaction_check_interval_ms = 500\n";
    // Segments go 0.36 s after they are sealed, at any hour.
    let cfg = tmp.path().join("rocklet.toml");
    std::fs::write(
        &cfg,
        format!(
            "file_reserved_time_hours = 0.0001\ndelete_when = \"{}\"\n\
             retention_check_interval_ms = 20\ndisk_space_warning_level_ratio = 1.0\ndisk_max_used_space_ratio = 1.0\n\
             disk_space_clean_forcibly_ratio = 1.0\n{core}",
            hours.join(";")
        ),
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    // For the checks at the end: the default 72 hours, so nothing more goes meanwhile.
    let keep = tmp.path().join("keep.toml");
    std::fs::write(
        &keep,
        format!("disk_space_warning_level_ratio = 1.0\ndisk_max_used_space_ratio = 1.0\ndisk_space_clean_forcibly_ratio = 1.0\n{core}"),
    )
    .unwrap();
    let keep = keep.to_str().unwrap();

    let mut p = BrokerProc::start(&data, &["--config", cfg]);
    let mut c = connect(p.addr).await;
    // Owed from the first segment on: a half nobody can check yet, a delayed message.
    let half = send_ok(
        &mut c,
        msg("Halves", b"half", pb::MessageType::Transaction, "H1"),
    )
    .await;
    let due = wall_ms() + 6_000;
    let mut d = msg("Delayed", b"later", pb::MessageType::Delay, "D1");
    d.system_properties.as_mut().unwrap().delivery_timestamp = Some(prost_types::Timestamp {
        seconds: (due / 1000) as i64,
        nanos: ((due % 1000) * 1_000_000) as i32,
    });
    send_ok(&mut c, d).await;

    // Rounds of sends (3 KB each: ~20 a segment) while retention retires what was sealed;
    // each round ends in SIGKILL part-way through, then a restart.
    let mut acked = Vec::new();
    let mut retired_seen = false;
    let rounds = 4;
    for round in 0..rounds {
        // At least 1.5 s of sends a round: segments sealed in it expire (0.36 s) and go while
        // it runs, so the kill lands among deletions.
        let t0 = std::time::Instant::now();
        let mut i = 0;
        while i < 60 + round * 17 || t0.elapsed() < Duration::from_millis(1500) {
            i += 1;
            let id = format!("F{round}-{i}");
            send_ok(
                &mut c,
                msg("Filler", &vec![b'f'; 3000], pb::MessageType::Normal, &id),
            )
            .await;
            acked.push(id);
        }
        retired_seen |= segments(&data).first().is_some_and(|&b| b > 0);
        p.kill9();
        let last = round + 1 == rounds;
        p = BrokerProc::start(&data, &["--config", if last { keep } else { cfg }]);
        assert!(
            !p.log().contains("missing"),
            "a restart after a deletion took retired segments for missing ones:\n{}",
            p.log()
        );
        c = connect(p.addr).await;
    }
    // Retention ran: the oldest segments are gone and the log starts later.
    let segs = segments(&data);
    assert!(
        retired_seen || segs[0] > 0,
        "no segment was retired: {segs:?}"
    );
    assert!(data.join("LOG_START").exists());

    // The half is still pending under the id its producer holds, and gets checked.
    let out = Command::new(BIN)
        .args(["admin", "--broker", &p.addr.to_string(), "pending"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // The producer holds the message id (RocketMQ's form); the admin lists the log offset
    // (and no message id for a half retention carried forward: it reads the first record).
    assert_eq!(half.transaction_id, "H1");
    assert!(
        text.contains("%TXN%Halves") && text.contains("1 pending transaction(s)"),
        "{text}"
    );
    let mut producer = Telemetry::producer(&mut c, &["Halves"]).await;
    let check = producer
        .next_check(Duration::from_secs(5))
        .await
        .expect("checked after retention and restarts");
    assert_eq!(check.transaction_id, half.transaction_id);
    let s = end_txn(
        &mut c,
        "Halves",
        &half.transaction_id,
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceServerCheck,
    )
    .await;
    assert_eq!(s.code, OK, "{}", s.message);
    assert_eq!(
        drain_ids(&mut c, "Halves", "G").await,
        vec!["H1".to_string()]
    );
    drop(producer);

    // The delay fires once, not before its time.
    let early = drain_ids(&mut c, "Delayed", "G").await;
    if wall_ms() < due {
        assert!(early.is_empty(), "delivered early: {early:?}");
    }
    while wall_ms() < due + 1_000 {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut got = early;
    got.extend(drain_ids(&mut c, "Delayed", "G").await);
    assert_eq!(got, vec!["D1".to_string()]);

    // A new group reads from the queues' first retained offsets: once each, and the newest
    // acknowledged messages (in segments that were never sealed long) are all there.
    let read = drain_ids(&mut c, "Filler", "Late").await;
    let unique: HashSet<_> = read.iter().cloned().collect();
    assert_eq!(unique.len(), read.len(), "a message came twice");
    for id in acked.iter().rev().take(10) {
        assert!(unique.contains(id), "{id} was lost");
    }
    assert!(
        read.len() < acked.len(),
        "nothing was retired ({} read)",
        read.len()
    );
    let (status, log) = p.term();
    assert!(status.success(), "{status:?}\n{log}");
}

/// After a forced run retired the oldest segments: a v4 pull below a queue's new first
/// offset is PULL_OFFSET_MOVED to it, GET_MIN_OFFSET says it, QUERY_CONSUMER_OFFSET for a
/// group with nothing committed is QUERY_NOT_FOUND, a v5 receive starts at it, and the
/// metrics and disk numbers follow the log's new start.
#[tokio::test]
async fn consumers_below_the_new_first_offset_get_rocketmq_s_answers() {
    let mut b = TestBroker::start_with(|c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
        c.core.segment_size = 65536;
        c.core.max_message_size = 8192;
        c.core.max_batch_size = 8192;
        c.topics = vec![rocklet_broker::config::TopicDecl {
            name: "Old".into(),
            queues: Some(1),
            message_types: None,
        }];
    })
    .await;
    let r = b.broker.as_ref().unwrap();
    let (remoting, core, metrics) = (r.remoting_addr.unwrap(), r.core.clone(), r.metrics.clone());
    let mut sent = 0u64;
    for i in 0..100 {
        let m = msg(
            "Old",
            &vec![b'o'; 3000],
            pb::MessageType::Normal,
            &format!("O{i}"),
        );
        send_ok(&mut b.client, m).await;
        sent += 1;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cfg = RetentionConfig {
        file_reserved_time_hours: 0.0,
        disk_max_used_space_ratio: 1.0,
        disk_space_clean_forcibly_ratio: 1.0,
        ..RetentionConfig::default()
    };
    let ran = rocklet_broker::retention::run_once(&core, &SystemClock, &metrics, &cfg, true)
        .await
        .unwrap();
    assert!(ran.retired.len() >= 2, "{ran:?}");
    let dir = b.dir.path().to_path_buf();
    assert!(ran
        .retired
        .iter()
        .all(|x| !dir.join(format!("{x:020}")).exists()));
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let topic_queue = [("topic", "Old"), ("queueId", "0")];
    let r = c.call(31, &topic_queue, Vec::new()).await;
    assert_eq!(r.code, 0);
    let min: u64 = r.ext["offset"].parse().unwrap();
    assert!(min > 0);
    let r = c
        .call(
            11,
            &[
                ("consumerGroup", "CG"),
                ("topic", "Old"),
                ("queueId", "0"),
                ("queueOffset", "0"),
                ("maxMsgNums", "32"),
                ("sysFlag", "0"),
                ("commitOffset", "0"),
                ("suspendTimeoutMillis", "0"),
                ("subscription", "*"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 21, "PULL_OFFSET_MOVED: {:?}", r.remark);
    assert_eq!(r.ext["nextBeginOffset"], min.to_string());
    assert_eq!(r.ext["minOffset"], min.to_string());
    let r = c
        .call(
            14,
            &[
                ("consumerGroup", "Nobody"),
                ("topic", "Old"),
                ("queueId", "0"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 22, "QUERY_NOT_FOUND: {:?}", r.remark);
    // A v5 receive by a new group starts at the first retained message.
    let got = drain_ids(&mut b.client, "Old", "Fresh").await;
    assert_eq!(got.len() as u64, sent - min);
    assert_eq!(got[0], format!("O{min}"));
    // Metrics and disk numbers follow.
    let text = rocklet_broker::metrics::render::render(&core, &metrics).await;
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split(' ').nth(1))
            .unwrap_or_else(|| panic!("{name} missing"))
            .to_string()
    };
    assert_eq!(
        line("rocklet_log_segments_deleted_total "),
        ran.retired.len().to_string()
    );
    let start = core.inspect(|b| b.log_start()).await.unwrap();
    assert_eq!(start, ran.start);
    tokio::time::sleep(rocklet_broker::disk::MAX_AGE).await;
    let d = metrics.disk.read(&core).await.unwrap();
    assert_eq!(d.oldest_base, Some(start));
    b.stop().await;
}

/// Committed and delivered messages a queue keeps after its first retained offset are
/// carried forward when their record goes. A group that acked them before the run must not
/// get them again after a restart, and a new group gets each once.
#[tokio::test]
async fn carried_delivered_delays_are_not_delivered_again_after_a_restart() {
    let setup = |c: &mut rocklet_broker::config::BrokerConfig| {
        c.core.segment_size = 65536;
        c.core.max_message_size = 8192;
        c.core.max_batch_size = 8192;
        c.topics = vec![rocklet_broker::config::TopicDecl {
            name: "Dl".into(),
            queues: Some(1),
            message_types: None,
        }];
    };
    let mut b = TestBroker::start_with(setup).await;
    let due = wall_ms() + 1_500;
    for i in 0..5 {
        let mut d = msg("Dl", b"later", pb::MessageType::Delay, &format!("D{i}"));
        d.system_properties.as_mut().unwrap().delivery_timestamp = Some(prost_types::Timestamp {
            seconds: (due / 1000) as i64,
            nanos: ((due % 1000) * 1_000_000) as i32,
        });
        send_ok(&mut b.client, d).await;
    }
    for i in 0..100 {
        let m = msg(
            "Fill",
            &vec![b'f'; 3000],
            pb::MessageType::Normal,
            &format!("F{i}"),
        );
        send_ok(&mut b.client, m).await;
    }
    send_ok(
        &mut b.client,
        msg("Dl", b"now", pb::MessageType::Normal, "N0"),
    )
    .await;
    while wall_ms() < due + 500 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut first = drain_ids(&mut b.client, "Dl", "G").await;
    first.sort();
    assert_eq!(first, ["D0", "D1", "D2", "D3", "D4", "N0"]);
    let r = b.broker.as_ref().unwrap();
    let cfg = RetentionConfig {
        file_reserved_time_hours: 0.0,
        disk_max_used_space_ratio: 1.0,
        disk_space_clean_forcibly_ratio: 1.0,
        ..RetentionConfig::default()
    };
    let ran = rocklet_broker::retention::run_once(&r.core, &SystemClock, &r.metrics, &cfg, true)
        .await
        .unwrap();
    assert!(ran.retired.len() >= 2 && ran.carried >= 5, "{ran:?}");
    assert!(drain_ids(&mut b.client, "Dl", "G").await.is_empty());
    let dir = b.stop().await;
    let mut c = rocklet_broker::config::BrokerConfig::default();
    c = {
        let mut t = test_config(dir.path());
        setup(&mut t);
        let _ = &mut c;
        t
    };
    let r = rocklet_broker::server::start(c, std::sync::Arc::new(SystemClock))
        .await
        .unwrap();
    let mut client = connect(r.addr).await;
    let again = drain_ids(&mut client, "Dl", "G").await;
    let mut fresh = drain_ids(&mut client, "Dl", "Fresh").await;
    fresh.sort();
    r.stop().await;
    assert!(
        again.is_empty(),
        "acked before the restart, delivered again: {again:?}"
    );
    assert_eq!(fresh, ["D0", "D1", "D2", "D3", "D4", "N0"]);
}
