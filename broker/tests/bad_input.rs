//! The rows of docs/bad-input.md that broker/tests/grpc.rs does not already cover: each bad
//! input gets a RocketMQ status naming the problem, nothing of a refused request is stored,
//! and the broker keeps serving (and its memory stays bounded under stream abuse).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rocklet_broker::pb::v2 as pb;

fn status_of(r: &pb::SendMessageResponse) -> pb::Status {
    r.status.clone().unwrap()
}

#[track_caller]
fn assert_status(s: &pb::Status, code: pb::Code, text: &str) {
    assert_eq!(
        s.code, code as i32,
        "expected {code:?} naming `{text}`, got {}: {}",
        s.code, s.message
    );
    assert!(
        s.message.contains(text),
        "`{}` should name `{text}`",
        s.message
    );
}

fn with_props(mut m: pb::Message, props: &[(&str, &str)]) -> pb::Message {
    m.user_properties = props
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect::<HashMap<_, _>>();
    m
}

fn deliver_at(mut m: pb::Message, seconds: i64) -> pb::Message {
    m.system_properties.as_mut().unwrap().delivery_timestamp =
        Some(prost_types::Timestamp { seconds, nanos: 0 });
    m
}

/// Nothing is visible on `topic` for a fresh group.
async fn nothing_stored(c: &mut Client, topic: &str) {
    let r = receive(c, topic, "Inspector", 32, 10_000, 200).await;
    assert!(
        r.messages.is_empty(),
        "a refused request stored {} message(s) on {topic}",
        r.messages.len()
    );
}

#[tokio::test]
async fn bad_batches_are_refused_whole() {
    let mut b = TestBroker::start_with(|c| {
        c.core.max_message_size = 4096;
        c.core.max_batch_size = 8192;
    })
    .await;
    let c = &mut b.client;
    // Oversize batch: each message fits, the batch does not.
    let r = send(
        c,
        (0..3)
            .map(|i| {
                msg(
                    "BigBatch",
                    &[1u8; 4000],
                    pb::MessageType::Normal,
                    &format!("b{i}"),
                )
            })
            .collect(),
    )
    .await;
    assert_status(&status_of(&r), pb::Code::PayloadTooLarge, "BATCH_TOO_LARGE");
    nothing_stored(c, "BigBatch").await;
    // Mixed-topic batch.
    let r = send(
        c,
        vec![
            msg("MixA", b"a", pb::MessageType::Normal, "m1"),
            msg("MixB", b"b", pb::MessageType::Normal, "m2"),
        ],
    )
    .await;
    assert_status(&status_of(&r), pb::Code::BadRequest, "MIXED_BATCH");
    nothing_stored(c, "MixA").await;
    nothing_stored(c, "MixB").await;
    // A delayed message in a batch.
    let later = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 5) as i64;
    let r = send(
        c,
        vec![
            msg("DelayBatch", b"a", pb::MessageType::Normal, "d1"),
            deliver_at(msg("DelayBatch", b"b", pb::MessageType::Delay, "d2"), later),
        ],
    )
    .await;
    assert_status(&status_of(&r), pb::Code::BadRequest, "DELAY_IN_BATCH");
    nothing_stored(c, "DelayBatch").await;
    // A batch with an empty body in it.
    let r = send(
        c,
        vec![
            msg("EmptyInBatch", b"a", pb::MessageType::Normal, "e1"),
            msg("EmptyInBatch", b"", pb::MessageType::Normal, "e2"),
        ],
    )
    .await;
    assert_status(&status_of(&r), pb::Code::MessageBodyEmpty, "EMPTY_BODY");
    nothing_stored(c, "EmptyInBatch").await;
    // Still serving.
    send_ok(c, msg("Fine", b"ok", pb::MessageType::Normal, "ok")).await;
    b.stop().await;
}

#[tokio::test]
async fn bad_delays_are_refused() {
    let mut b = TestBroker::start().await;
    let c = &mut b.client;
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let cases: Vec<(pb::Message, pb::Code, &str)> = vec![
        // A delay on a transactional message.
        (
            deliver_at(
                msg("TxDelay", b"x", pb::MessageType::Transaction, "t1"),
                now_s + 5,
            ),
            pb::Code::MessagePropertyConflictWithType,
            "DELAY_ON_TRANSACTION",
        ),
        // Delivery times before 1970 and more than 100 years away.
        (
            deliver_at(msg("Dly", b"x", pb::MessageType::Delay, "n1"), -5),
            pb::Code::IllegalDeliveryTime,
            "INVALID_DELAY",
        ),
        (
            deliver_at(
                msg("Dly", b"x", pb::MessageType::Delay, "h1"),
                now_s + 200 * 365 * 86_400,
            ),
            pb::Code::IllegalDeliveryTime,
            "more than 100 years",
        ),
        // RocketMQ 4 style delay properties: level, absolute time, relative time.
        (
            with_props(
                msg("Dly", b"x", pb::MessageType::Normal, "l1"),
                &[("DELAY", "abc")],
            ),
            pb::Code::IllegalDeliveryTime,
            "is not a number",
        ),
        (
            with_props(
                msg("Dly", b"x", pb::MessageType::Normal, "l2"),
                &[("DELAY", "-3")],
            ),
            pb::Code::IllegalDeliveryTime,
            "delay level -3 is negative",
        ),
        (
            with_props(
                msg("Dly", b"x", pb::MessageType::Normal, "l3"),
                &[("TIMER_DELIVER_MS", "-1")],
            ),
            pb::Code::IllegalDeliveryTime,
            "delivery time -1 is negative",
        ),
        (
            with_props(
                msg("Dly", b"x", pb::MessageType::Normal, "l4"),
                &[("TIMER_DELAY_SEC", "99999999999999")],
            ),
            pb::Code::IllegalDeliveryTime,
            "more than 100 years",
        ),
        (
            with_props(
                msg("Dly", b"x", pb::MessageType::Normal, "l5"),
                &[("DELAY", "2"), ("TIMER_DELAY_MS", "10")],
            ),
            pb::Code::IllegalDeliveryTime,
            "more than one delay",
        ),
    ];
    for (m, code, text) in cases {
        let r = send(c, vec![m]).await;
        assert_status(&status_of(&r), code, text);
    }
    nothing_stored(c, "TxDelay").await;
    nothing_stored(c, "Dly").await;
    // A level above the table is clamped to the longest level, as RocketMQ does: stored, and
    // not delivered early.
    send_ok(
        c,
        with_props(
            msg("DlyClamp", b"x", pb::MessageType::Normal, "c1"),
            &[("DELAY", "99")],
        ),
    )
    .await;
    nothing_stored(c, "DlyClamp").await;
    b.stop().await;
}

#[tokio::test]
async fn bad_properties_are_refused() {
    let mut b = TestBroker::start().await;
    let c = &mut b.client;
    let big = "v".repeat(40_000);
    let r = send(
        c,
        vec![with_props(
            msg("Props", b"x", pb::MessageType::Normal, "p1"),
            &[("big", &big)],
        )],
    )
    .await;
    assert_status(
        &status_of(&r),
        pb::Code::MessagePropertiesTooLarge,
        "PROPERTIES_TOO_LARGE",
    );
    let r = send(
        c,
        vec![with_props(
            msg("Props", b"x", pb::MessageType::Normal, "p2"),
            &[("TRAN_MSG", "true")],
        )],
    )
    .await;
    assert_status(
        &status_of(&r),
        pb::Code::IllegalMessagePropertyKey,
        "INVALID_PROPERTY",
    );
    nothing_stored(c, "Props").await;
    send_ok(c, msg("Props", b"x", pb::MessageType::Normal, "p3")).await;
    b.stop().await;
}

#[tokio::test]
async fn duplicate_conflicting_and_foreign_ends_of_a_transaction() {
    let mut b = TestBroker::start().await;
    let c = &mut b.client;
    let half = send_ok(c, msg("TxA", b"a", pb::MessageType::Transaction, "A1")).await;
    let txn = half.transaction_id.clone();
    // END for another topic's (so another group's) transaction.
    let s = end_txn(
        c,
        "TxB",
        &txn,
        pb::TransactionResolution::Rollback,
        pb::TransactionSource::SourceClient,
    )
    .await;
    assert_status(&s, pb::Code::InvalidTransactionId, "WRONG_PRODUCER_GROUP");
    assert!(s.message.contains("%TXN%TxA"), "{}", s.message);
    // The owner commits; a duplicate commit is answered OK (idempotent) and stores nothing.
    for _ in 0..2 {
        let s = end_txn(
            c,
            "TxA",
            &txn,
            pb::TransactionResolution::Commit,
            pb::TransactionSource::SourceClient,
        )
        .await;
        assert_eq!(s.code, OK, "{}", s.message);
    }
    // A late, conflicting rollback is refused.
    let s = end_txn(
        c,
        "TxA",
        &txn,
        pb::TransactionResolution::Rollback,
        pb::TransactionSource::SourceServerCheck,
    )
    .await;
    assert_status(
        &s,
        pb::Code::InvalidTransactionId,
        "TRANSACTION_ALREADY_RESOLVED",
    );
    // Delivered exactly once.
    let r = receive(c, "TxA", "G", 32, 10_000, 500).await;
    assert_eq!(r.messages.len(), 1);
    assert_eq!(ack(c, "TxA", "G", &r.messages[0]).await.code, OK);
    let r = receive(c, "TxA", "G", 32, 10_000, 300).await;
    assert!(r.messages.is_empty(), "no duplicate after a duplicate END");
    b.stop().await;
}

#[tokio::test]
async fn stale_forged_and_foreign_receipt_handles_are_refused() {
    let mut b = TestBroker::start().await;
    let c = &mut b.client;
    send_ok(c, msg("Rh", b"x", pb::MessageType::Normal, "R1")).await;
    let r = receive(c, "Rh", "G", 1, 30_000, 1_000).await;
    let first = handle(&r.messages[0]);
    // A new handle makes the old one stale.
    let r2 = c
        .change_invisible_duration(pb::ChangeInvisibleDurationRequest {
            group: res("G"),
            topic: res("Rh"),
            receipt_handle: first.clone(),
            invisible_duration: Some(dur(30_000)),
            message_id: "R1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r2.status.as_ref().unwrap().code, OK);
    let second = r2.receipt_handle;
    let s = ack_handle(c, "Rh", "G", &first).await;
    assert_status(&s, pb::Code::InvalidReceiptHandle, "STALE_RECEIPT_HANDLE");
    // Forged: well-formed, but no such delivery.
    let mut parts: Vec<String> = second.splitn(4, '.').map(str::to_string).collect();
    parts[2] = "999999".into();
    let forged = parts.join(".");
    let s = ack_handle(c, "Rh", "G", &forged).await;
    assert_status(&s, pb::Code::InvalidReceiptHandle, "INVALID_RECEIPT_HANDLE");
    // Another group's handle.
    let s = ack_handle(c, "Rh", "OtherGroup", &second).await;
    assert_status(&s, pb::Code::InvalidReceiptHandle, "INVALID_RECEIPT_HANDLE");
    // The real one works once; acking again is refused.
    assert_eq!(ack_handle(c, "Rh", "G", &second).await.code, OK);
    let s = ack_handle(c, "Rh", "G", &second).await;
    assert_status(&s, pb::Code::InvalidReceiptHandle, "already acked");
    b.stop().await;
}

fn receive_req(topic: &str, group: &str) -> pb::ReceiveMessageRequest {
    pb::ReceiveMessageRequest {
        group: res(group),
        message_queue: Some(pb::MessageQueue {
            topic: res(topic),
            ..Default::default()
        }),
        batch_size: 32,
        invisible_duration: Some(dur(60_000)),
        long_polling_timeout: Some(dur(20_000)),
        ..Default::default()
    }
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Clients that open many streams, never read what they asked for, or connect and say
/// nothing: the broker keeps serving others promptly and its memory stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_and_clients_that_never_read_leave_the_broker_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_rocklet"))
            .args(["broker", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(tmp.path().join("data"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
    let addr: std::net::SocketAddr = loop {
        let line = lines.next().expect("broker log").unwrap();
        if let Some(i) = line.find("addr=") {
            let a: String = line[i + 5..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            break a.parse().unwrap();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let pid = child.0.id();
    let mut c = connect(addr).await;
    // Something to receive, 64 KiB messages.
    for i in 0..32 {
        send_ok(
            &mut c,
            msg(
                "Flood",
                &vec![b'f'; 65_536],
                pb::MessageType::Normal,
                &format!("F{i}"),
            ),
        )
        .await;
    }
    let baseline = rss_kib(pid);

    // 1. Connections that say nothing, and one that sends half a preface and stops reading.
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(std::net::TcpStream::connect(addr).unwrap());
    }
    let mut half = std::net::TcpStream::connect(addr).unwrap();
    half.write_all(b"PRI * HTTP/2.0\r\n").unwrap();
    // 2. Clients that open many streams on one connection each and never read them:
    //    telemetry streams and long polls of an empty topic (4 x 250 streams).
    // The calls are spawned: a receive's response comes only once it found messages or its
    // long poll ended.
    let mut abusers: Vec<tokio::task::JoinHandle<Box<dyn std::any::Any + Send>>> = Vec::new();
    for k in 0..4 {
        let a = connect(addr).await;
        for i in 0..250 {
            let mut a = a.clone();
            abusers.push(tokio::spawn(async move {
                if (i + k) % 2 == 0 {
                    let (tx, rx) = tokio::sync::mpsc::channel(1);
                    tx.send(pb::TelemetryCommand {
                        status: None,
                        command: Some(pb::telemetry_command::Command::Settings(pb::Settings {
                            client_type: Some(pb::ClientType::Producer as i32),
                            ..Default::default()
                        })),
                    })
                    .await
                    .unwrap();
                    let s = a
                        .telemetry(tokio_stream::wrappers::ReceiverStream::new(rx))
                        .await;
                    Box::new((tx, s)) as Box<dyn std::any::Any + Send>
                } else {
                    let s = a
                        .receive_message(receive_req("Quiet", &format!("Q{k}-{i}")))
                        .await;
                    Box::new(s) as Box<dyn std::any::Any + Send>
                }
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let streams_rss = rss_kib(pid);
    // 3. Receives of large messages that are never read (HTTP/2 flow control then stops the
    //    broker's sends): what they popped stays in memory until the client goes, no more.
    let unread: u64 = 16;
    let a = connect(addr).await;
    for i in 0..unread {
        let mut a = a.clone();
        abusers.push(tokio::spawn(async move {
            let s = a
                .receive_message(receive_req("Flood", &format!("F{i}")))
                .await;
            Box::new(s) as Box<dyn std::any::Any + Send>
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let held_kib = unread * 32 * 64;
    let unread_rss = rss_kib(pid);

    // 3. Everyone else is served promptly.
    let t = Instant::now();
    let mut fresh = connect(addr).await;
    for i in 0..20 {
        send_ok(
            &mut fresh,
            msg("Polite", b"p", pb::MessageType::Normal, &format!("P{i}")),
        )
        .await;
    }
    let r = receive(&mut fresh, "Polite", "G", 32, 30_000, 1_000).await;
    assert_eq!(r.messages.len(), 20);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "served in {:?}",
        t.elapsed()
    );
    eprintln!(
        "broker RSS: {baseline} KiB before, {streams_rss} KiB with 200 idle connections and 1000 unread streams, {unread_rss} KiB with {unread} unread receives holding {held_kib} KiB of messages"
    );
    assert!(
        streams_rss < baseline + 64 * 1024,
        "1000 idle streams grew the RSS from {baseline} KiB to {streams_rss} KiB"
    );
    assert!(
        unread_rss < streams_rss + 2 * held_kib + 32 * 1024,
        "{unread} unread receives holding {held_kib} KiB grew the RSS from {streams_rss} KiB to {unread_rss} KiB"
    );
    for a in abusers {
        a.abort();
    }
    drop(idle);
    drop(half);
    // Still serving after the abusers leave.
    send_ok(
        &mut fresh,
        msg("Polite", b"p", pb::MessageType::Normal, "after"),
    )
    .await;
    drop(child);
}

/// Kills the broker however the test ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
