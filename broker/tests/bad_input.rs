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
    // END for another topic's (so another group's) transaction: by its message id (RocketMQ's
    // form) the other topic has no such half; by its log offset (16 hex digits) it is found
    // and refused as another group's.
    let s = end_txn(
        c,
        "TxB",
        &txn,
        pb::TransactionResolution::Rollback,
        pb::TransactionSource::SourceClient,
    )
    .await;
    assert_status(&s, pb::Code::InvalidTransactionId, "UNKNOWN_TRANSACTION");
    let core = b.broker.as_ref().unwrap().core.clone();
    let offset_id = core.inspect(|b| b.pending_transactions(1)).await.unwrap()[0]
        .txn
        .to_string();
    let c = &mut b.client;
    let s = end_txn(
        c,
        "TxB",
        &offset_id,
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
    let r = receive(c, "Rh", "G", 1, 1_000, 1_000).await;
    let first = handle(&r.messages[0]);
    // Delivered again once its invisible time ran out: the first handle is stale.
    tokio::time::sleep(std::time::Duration::from_millis(1_300)).await;
    let r = receive(c, "Rh", "G", 1, 30_000, 2_000).await;
    let second = handle(&r.messages[0]);
    let s = ack_handle(c, "Rh", "G", &first).await;
    assert_status(&s, pb::Code::InvalidReceiptHandle, "STALE_RECEIPT_HANDLE");
    // A change of invisible time renews the attempt: it gives a new handle, and the one from
    // before it still names the delivery.
    let r3 = c
        .change_invisible_duration(pb::ChangeInvisibleDurationRequest {
            group: res("G"),
            topic: res("Rh"),
            receipt_handle: second.clone(),
            invisible_duration: Some(dur(30_000)),
            message_id: "R1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r3.status.as_ref().unwrap().code, OK);
    let third = r3.receipt_handle;
    assert_ne!(third, second);
    // Forged: well-formed, but no such delivery.
    let mut parts: Vec<String> = third.splitn(4, '.').map(str::to_string).collect();
    parts[2] = "999999".into();
    let forged = parts.join(".");
    let s = ack_handle(c, "Rh", "G", &forged).await;
    assert_status(&s, pb::Code::InvalidReceiptHandle, "INVALID_RECEIPT_HANDLE");
    // Another group's handle.
    let s = ack_handle(c, "Rh", "OtherGroup", &third).await;
    assert_status(&s, pb::Code::InvalidReceiptHandle, "INVALID_RECEIPT_HANDLE");
    // The pre-renewal handle acks it once; acking again, with either handle, is refused.
    assert_eq!(ack_handle(c, "Rh", "G", &second).await.code, OK);
    let s = ack_handle(c, "Rh", "G", &third).await;
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

/// A `rocklet broker` process (its RSS is what the memory tests measure).
struct BrokerProcess {
    child: KillOnDrop,
    addr: std::net::SocketAddr,
    metrics: Option<std::net::SocketAddr>,
    remoting: Option<std::net::SocketAddr>,
    _dir: tempfile::TempDir,
}

impl BrokerProcess {
    /// Starts the binary on free ports with a config file holding `toml` (and metrics served
    /// when `metrics`), and waits for its ready line.
    fn start(toml: &str, metrics: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("rocklet.toml");
        std::fs::write(&config, toml).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocklet"));
        cmd.args(["broker", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--config")
            .arg(&config);
        if metrics {
            cmd.args(["--metrics-listen", "127.0.0.1:0"]);
        }
        let mut child = KillOnDrop(
            cmd.env("RUST_LOG", "info")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        );
        let mut lines = BufReader::new(child.0.stderr.take().unwrap()).lines();
        let after = |line: &str, key: &str| -> Option<String> {
            let i = line.find(key)?;
            Some(
                line[i + key.len()..]
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != ')')
                    .collect(),
            )
        };
        let mut remoting = None;
        let (addr, metrics) = loop {
            let line = lines.next().expect("broker log").unwrap();
            if let Some(r) = after(&line, "remoting=Some(") {
                remoting = r.parse().ok();
            }
            if let Some(a) = after(&line, "addr=") {
                let m = after(&line, "metrics=Some(").map(|m| m.parse().unwrap());
                break (a.parse().unwrap(), m);
            }
        };
        std::thread::spawn(move || for _ in lines {});
        BrokerProcess {
            child,
            addr,
            metrics,
            remoting,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// One metric's value from `/metrics`.
    fn metric(&self, name: &str) -> u64 {
        use std::io::Read as _;
        let addr = self.metrics.expect("metrics served");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no metric {name} in {text}"))
            .trim()
            .parse()
            .unwrap()
    }
}

/// Clients that open many streams, never read what they asked for, or connect and say
/// nothing: the broker keeps serving others promptly and its memory stays bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_and_clients_that_never_read_leave_the_broker_serving() {
    // The default limits: 250 streams per connection stay under max_concurrent_streams (256);
    // the unread receives below hold 32 MiB, under max_inflight_receive_bytes (256 MiB).
    let broker = BrokerProcess::start("", false);
    let (addr, pid) = (broker.addr, broker.pid());
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
    drop(broker);
}

/// A client whose HTTP/2 windows stay at the protocol's initial 64 KiB.
async fn unread_client(addr: std::net::SocketAddr) -> Client {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    pb::messaging_service_client::MessagingServiceClient::new(ch)
}

fn big_receive(topic: &str, group: &str, invisible_ms: u64) -> pb::ReceiveMessageRequest {
    pb::ReceiveMessageRequest {
        invisible_duration: Some(dur(invisible_ms)),
        long_polling_timeout: Some(dur(1_000)),
        ..receive_req(topic, group)
    }
}

/// The first response of a receive (its status), read from a client that reads.
async fn receive_status(c: &mut Client, req: pb::ReceiveMessageRequest) -> pb::Status {
    use tokio_stream::StreamExt as _;
    let mut s = c.receive_message(req).await.unwrap().into_inner();
    match s.next().await.unwrap().unwrap().content.unwrap() {
        pb::receive_message_response::Content::Status(s) => s,
        other => panic!("a receive starts with its status, not {other:?}"),
    }
}

/// Clients that ask for large messages and never read the answers hold at most the receive
/// budget (`max_inflight_receive_bytes`) of broker memory: receives beyond it pop nothing and
/// get TOO_MANY_REQUESTS at once, other calls are served, and once the abusers go and the
/// invisible time passes every message is received exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_receives_stop_at_the_receive_budget_and_lose_nothing() {
    const BUDGET_MIB: u64 = 16;
    const MESSAGES: usize = 100;
    const INVISIBLE_MS: u64 = 2_000;
    let broker = BrokerProcess::start(
        &format!(
            "max_inflight_receive_bytes = {}\n[core]\nmax_message_size = {}\n",
            BUDGET_MIB << 20,
            1 << 20
        ),
        true,
    );
    let (addr, pid) = (broker.addr, broker.pid());
    let mut c = connect(addr).await;
    let body = vec![b'b'; 1 << 20];
    for i in 0..MESSAGES {
        send_ok(
            &mut c,
            msg("Big", &body, pb::MessageType::Normal, &format!("B{i}")),
        )
        .await;
    }
    let baseline = rss_kib(pid);

    // Abusers: 8 connections x 8 receives of up to 32 x 1 MiB, never read, with HTTP/2's
    // initial 64 KiB windows (so no response is ever written out). Without a budget they pop
    // all 100 MiB and hold it for as long as they keep their streams open.
    let mut held = Vec::new();
    let mut channels = Vec::new();
    let mut calls = Vec::new();
    for k in 0..8 {
        let a = unread_client(addr).await;
        for i in 0..8 {
            let mut a = a.clone();
            calls.push(tokio::spawn(async move {
                a.receive_message(big_receive("Big", "G", INVISIBLE_MS))
                    .await
                    .map(|r| r.into_inner())
                    .map_err(|e| format!("abuser {k}/{i}: {e}"))
            }));
        }
        channels.push(a);
    }
    for call in calls {
        held.push(call.await.unwrap().unwrap());
    }
    let popped_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let abused_rss = rss_kib(pid);
    let in_flight = broker.metric("rocklet_receive_bytes_in_flight");
    let refused = broker.metric("rocklet_receives_over_budget_total");
    eprintln!(
        "broker RSS: {baseline} KiB before, {abused_rss} KiB with 64 unread receives of 1 MiB messages; {in_flight} bytes in flight, {refused} receives refused (budget {BUDGET_MIB} MiB)"
    );
    // (a) Memory stays within the budget (plus one response over it, plus a margin).
    // Used up: a pop that would pass the budget pops nothing, so it may stop a message short.
    assert!(
        in_flight + (2 << 20) >= BUDGET_MIB << 20,
        "the abusers should have used up the budget: {in_flight} bytes in flight"
    );
    // A pop reserves max_message_size (1 MiB) per message: one message past the budget at most.
    assert!(
        in_flight < (BUDGET_MIB + 2) << 20,
        "one message past the budget at most: {in_flight} bytes in flight"
    );
    assert!(refused > 0, "receives beyond the budget are refused");
    assert!(
        abused_rss < baseline + (BUDGET_MIB + 48) * 1024,
        "unread receives grew the RSS from {baseline} KiB to {abused_rss} KiB, past the {BUDGET_MIB} MiB budget"
    );

    // (b) A receive while the budget is used up is refused at once, naming the budget. The
    // abusers' pops may stop a message short of it (a pop that would pass it while others
    // hold reservations pops less); a pop with room for none still takes one (never
    // starved): one more unread receive then uses it up.
    let extra = unread_client(addr).await;
    for _ in 0..4 {
        if broker.metric("rocklet_receive_bytes_in_flight") >= BUDGET_MIB << 20 {
            break;
        }
        let mut a = extra.clone();
        held.push(
            a.receive_message(big_receive("Big", "G", INVISIBLE_MS))
                .await
                .unwrap()
                .into_inner(),
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut good = connect(addr).await;
    let t = Instant::now();
    let s = receive_status(&mut good, big_receive("Big", "G", 30_000)).await;
    assert_status(&s, pb::Code::TooManyRequests, "max_inflight_receive_bytes");
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "refused in {:?}",
        t.elapsed()
    );
    // (c) Other calls are served promptly.
    let t = Instant::now();
    send_ok(&mut good, msg("Other", b"x", pb::MessageType::Normal, "O1")).await;
    let route = good
        .query_route(pb::QueryRouteRequest {
            topic: res("Big"),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(route.status.unwrap().code, OK);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "served in {:?}",
        t.elapsed()
    );

    // (d) The abusers go: their responses are released, and what they popped comes back
    // after its invisible time. A consumer that reads gets every message exactly once.
    drop(held);
    drop(channels);
    drop(extra);
    let t = Instant::now();
    while broker.metric("rocklet_receive_bytes_in_flight") > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "responses of gone clients are still counted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(INVISIBLE_MS).saturating_sub(popped_at.elapsed()))
        .await;
    let mut seen = std::collections::HashSet::new();
    let t = Instant::now();
    while seen.len() < MESSAGES {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "only {} of {MESSAGES} messages received after the abusers left",
            seen.len()
        );
        let r = receive(&mut good, "Big", "G", 32, 30_000, 1_000).await;
        assert!(
            r.status.code == OK || r.status.code == pb::Code::MessageNotFound as i32,
            "{}: {}",
            r.status.code,
            r.status.message
        );
        for m in &r.messages {
            let id = m.system_properties.as_ref().unwrap().message_id.clone();
            assert_eq!(m.body.len(), 1 << 20);
            assert!(seen.insert(id.clone()), "{id} received twice");
            assert_eq!(ack(&mut good, "Big", "G", m).await.code, OK);
        }
    }
    let r = receive(&mut good, "Big", "G", 32, 30_000, 300).await;
    assert!(
        r.messages.is_empty(),
        "{} extra deliveries",
        r.messages.len()
    );
    assert_eq!(broker.metric("rocklet_receive_bytes_in_flight"), 0);
}

/// A connection may have at most `max_concurrent_streams` calls open: above it the client
/// queues its calls until one ends, and other connections are served meanwhile.
#[tokio::test]
async fn streams_above_the_per_connection_limit_wait_for_one_to_end() {
    let b = TestBroker::start_with(|c| c.max_concurrent_streams = 4).await;
    let addr = b.addr();
    let busy = connect(addr).await;
    // Four long polls of an empty topic take every stream of the connection for ~1.5 s.
    let mut polls = Vec::new();
    for i in 0..4 {
        let mut c = busy.clone();
        polls.push(tokio::spawn(async move {
            let req = pb::ReceiveMessageRequest {
                long_polling_timeout: Some(dur(1_500)),
                ..receive_req("Empty", &format!("E{i}"))
            };
            receive_status(&mut c, req).await
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A fifth call on that connection waits for a stream.
    let mut c = busy.clone();
    let t = Instant::now();
    let fifth = tokio::spawn(async move {
        send_ok(&mut c, msg("Queued", b"q", pb::MessageType::Normal, "Q1")).await;
        Instant::now()
    });
    // Another connection is served at once.
    let mut other = connect(addr).await;
    send_ok(&mut other, msg("Free", b"f", pb::MessageType::Normal, "F1")).await;
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "another connection waited {:?}",
        t.elapsed()
    );
    let done = fifth.await.unwrap();
    let waited = done.duration_since(t);
    assert!(
        waited >= Duration::from_millis(700),
        "the fifth stream should have waited for a long poll to end, took {waited:?}"
    );
    for p in polls {
        let s = p.await.unwrap();
        assert_eq!(s.code, pb::Code::MessageNotFound as i32, "{}", s.message);
    }
    b.stop().await;
}

/// Kills the broker however the test ends.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A SendMessage carrying more messages than `max_batch_messages` is refused whole at once,
/// naming the limit, before the core sees it (100,000 one-byte messages held the core
/// thread for minutes); a batch at the limit is stored.
#[tokio::test]
async fn a_send_of_more_messages_than_max_batch_messages_is_refused_at_once() {
    let mut b = TestBroker::start().await;
    let c = &mut b.client;
    let huge: Vec<pb::Message> = (0..100_000)
        .map(|i| msg("Huge", b"x", pb::MessageType::Normal, &format!("H{i}")))
        .collect();
    let t = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(30), send(c, huge))
        .await
        .expect("a send of 100,000 messages is answered at once, not after the core worked on it");
    assert_status(
        &status_of(&r),
        pb::Code::PayloadTooLarge,
        "max_batch_messages of 10000",
    );
    assert!(
        status_of(&r).message.starts_with("TOO_MANY_MESSAGES"),
        "{}",
        status_of(&r).message
    );
    assert_eq!(
        r.entries.len(),
        1,
        "one entry for a request refused for its count"
    );
    // The time includes encoding and sending 100,000 messages from a debug-built client on a
    // loaded machine; the core working through them took minutes.
    assert!(
        t.elapsed() < Duration::from_secs(25),
        "refused in {:?}",
        t.elapsed()
    );
    nothing_stored(c, "Huge").await;
    let m = &b.broker.as_ref().unwrap().metrics;
    assert_eq!(m.over_limit_count("max_batch_messages"), 1);
    b.stop().await;

    // A configured limit: a batch at it is stored, one above it is refused.
    let mut b = TestBroker::start_with(|c| c.max_batch_messages = 50).await;
    let c = &mut b.client;
    let batch = |n: usize| -> Vec<pb::Message> {
        (0..n)
            .map(|i| msg("Fifty", b"y", pb::MessageType::Normal, &format!("F{n}-{i}")))
            .collect()
    };
    let r = send(c, batch(51)).await;
    assert_status(
        &status_of(&r),
        pb::Code::PayloadTooLarge,
        "max_batch_messages of 50",
    );
    nothing_stored(c, "Fifty").await;
    let r = send(c, batch(50)).await;
    assert_eq!(status_of(&r).code, OK, "{}", status_of(&r).message);
    assert_eq!(r.entries.len(), 50);
    b.stop().await;
}

/// Request fields that a long poll holds (filter expressions, names) and remoting bodies of
/// requests that carry none are bounded before they cost memory: 16 receives with 5.9 MB
/// tag expressions took the RSS from 8 MB to 1 GB, 96 long-polling pulls with 15 MiB bodies
/// 1.4 GiB. Now each is refused at once, naming the limit, and the RSS barely moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_filters_names_and_unexpected_bodies_are_refused_before_they_cost_memory() {
    use rocklet_broker::remoting::codec::{self, RemotingCommand};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let broker = BrokerProcess::start("", true);
    let (addr, pid) = (broker.addr, broker.pid());
    let remoting = broker.remoting.expect("remoting served");
    let mut c = connect(addr).await;
    send_ok(&mut c, msg("Other", b"x", pb::MessageType::Normal, "O1")).await;
    let baseline = rss_kib(pid);

    // 16 long-polling receives of an empty topic with a 5.9 MB tag expression each.
    let expression = long_tag_expression(5_900_000);
    let mut calls = Vec::new();
    for i in 0..16 {
        let mut c = c.clone();
        let mut req = receive_req("QuietFilter", &format!("FG{i}"));
        req.filter_expression = Some(pb::FilterExpression {
            r#type: pb::FilterType::Tag as i32,
            expression: expression.clone(),
        });
        calls.push(tokio::spawn(async move {
            let t = Instant::now();
            (receive_status(&mut c, req).await, t.elapsed())
        }));
    }
    // 32 long-polling pulls with a 15 MiB body each, on one remoting connection.
    let mut s = tokio::net::TcpStream::connect(remoting).await.unwrap();
    let pull = |opaque: i32, body: Vec<u8>, subscription: &str| {
        let ext = [
            ("consumerGroup", "PullG"),
            ("topic", "QuietPull"),
            ("queueId", "0"),
            ("queueOffset", "0"),
            ("sysFlag", "2"),
            ("suspendTimeoutMillis", "20000"),
            ("subscription", subscription),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut r = RemotingCommand::request(11, ext, body);
        r.opaque = opaque;
        r.encode()
    };
    let fat = vec![b'z'; 15 << 20];
    for i in 1..=32 {
        s.write_all(&pull(i, fat.clone(), "*")).await.unwrap();
    }
    // And one with a long subscription, one heartbeat with a long client id.
    s.write_all(&pull(33, Vec::new(), &long_tag_expression(100_000)))
        .await
        .unwrap();
    let hb = serde_json::json!({"clientID": "c".repeat(300), "consumerDataSet": [], "producerDataSet": []});
    let mut h = RemotingCommand::request(34, Default::default(), serde_json::to_vec(&hb).unwrap());
    h.opaque = 34;
    s.write_all(&h.encode()).await.unwrap();
    let mut answers = std::collections::BTreeMap::new();
    while answers.len() < 34 {
        let mut len = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(20), s.read_exact(&mut len))
            .await
            .expect("every refused request is answered at once, not after its long poll")
            .unwrap();
        let mut buf = vec![0; codec::frame_length(len).unwrap()];
        s.read_exact(&mut buf).await.unwrap();
        let r = codec::decode_frame(&buf).unwrap();
        answers.insert(r.opaque, (r.code, r.remark.unwrap_or_default()));
    }
    for i in 1..=32 {
        let (code, remark) = &answers[&i];
        assert_eq!(*code, 1, "{remark}");
        assert!(remark.contains("PULL_MESSAGE carries no body"), "{remark}");
    }
    assert_eq!(answers[&33].0, 23, "{}", answers[&33].1);
    assert!(
        answers[&33]
            .1
            .contains("max_filter_expression_bytes of 65536"),
        "{}",
        answers[&33].1
    );
    assert_eq!(answers[&34].0, 1, "{}", answers[&34].1);
    assert!(
        answers[&34].1.contains("max_name_bytes of 255"),
        "{}",
        answers[&34].1
    );
    // 16 × 5.9 MB on one connection pass its share of the request budget (1/8 of 256 MiB):
    // the calls that do not fit are refused by it, at once, before the filter is read.
    let mut filtered = 0;
    for call in calls {
        let (st, took) = call.await.unwrap();
        if st.code == pb::Code::TooManyRequests as i32 {
            assert!(
                st.message.contains("one connection may hold"),
                "{}",
                st.message
            );
        } else {
            assert_status(
                &st,
                pb::Code::IllegalFilterExpression,
                "max_filter_expression_bytes of 65536",
            );
            filtered += 1;
        }
        assert!(took < Duration::from_secs(10), "refused after {took:?}");
    }
    assert!(filtered >= 4, "{filtered} of 16 reached the filter limit");
    let after = rss_kib(pid);
    eprintln!("broker RSS: {baseline} KiB before, {after} KiB after 16 receives with 5.9 MB filters and 32 pulls with 15 MiB bodies");
    assert!(
        after < baseline + 96 * 1024,
        "the refused requests grew the RSS from {baseline} KiB to {after} KiB"
    );
    // A name longer than max_name_bytes is refused too.
    let st = receive_status(&mut c, receive_req("QuietFilter", &"g".repeat(300))).await;
    assert_status(&st, pb::Code::BadRequest, "max_name_bytes of 255");
    assert!(
        broker.metric("rocklet_requests_over_limit_total{limit=\"max_filter_expression_bytes\"}")
            > filtered
    );
    assert!(
        broker.metric("rocklet_requests_over_limit_total{limit=\"remoting_request_body\"}") >= 32
    );
    // Still serving.
    send_ok(&mut c, msg("Other", b"y", pb::MessageType::Normal, "O2")).await;
}

/// Connections that say nothing are closed after `idle_timeout_ms`, requests that begin and
/// never finish after `request_read_timeout_ms` (a slowloris stream gets DEADLINE_EXCEEDED),
/// while live clients (which answer the HTTP/2 keepalive pings, or wait on a long poll) are
/// kept however long they are quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_and_slow_peers_are_closed_and_quiet_live_ones_kept() {
    use tokio::io::AsyncWriteExt;
    let b = TestBroker::start_with(|c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
        c.idle_timeout_ms = 800;
        c.request_read_timeout_ms = 600;
        c.http2_keepalive_interval_ms = 200;
        c.http2_keepalive_timeout_ms = 1_000;
    })
    .await;
    let (grpc, remoting) = (b.addr(), b.broker.as_ref().unwrap().remoting_addr.unwrap());
    let m = b.broker.as_ref().unwrap().metrics.clone();
    let mut live = connect(grpc).await;
    send_ok(&mut live, msg("Quiet", b"q", pb::MessageType::Normal, "Q0")).await;

    // Silent TCP connections (no HTTP/2 preface, no remoting frame) are closed.
    let t = Instant::now();
    let mut silent_grpc = tokio::net::TcpStream::connect(grpc).await.unwrap();
    let mut silent_remoting = tokio::net::TcpStream::connect(remoting).await.unwrap();
    assert!(
        closed_within(&mut silent_grpc, Duration::from_secs(5)).await,
        "a silent gRPC connection stays open"
    );
    assert!(
        closed_within(&mut silent_remoting, Duration::from_secs(5)).await,
        "a silent remoting connection stays open"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "closed before the idle timeout: {:?}",
        t.elapsed()
    );
    assert_eq!(m.over_limit_count("idle_timeout_ms"), 2);

    // A remoting frame that starts and never finishes closes its connection.
    let mut slow = tokio::net::TcpStream::connect(remoting).await.unwrap();
    slow.write_all(&100u32.to_be_bytes()).await.unwrap();
    assert!(
        closed_within(&mut slow, Duration::from_secs(5)).await,
        "a half-sent remoting frame holds its connection"
    );
    assert_eq!(m.over_limit_count("request_read_timeout_ms"), 1);

    // A gRPC call whose request never finishes fails with DEADLINE_EXCEEDED, on a connection
    // that answers pings (and so is not idle).
    let tcp = tokio::net::TcpStream::connect(grpc).await.unwrap();
    let (mut h2c, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{grpc}/apache.rocketmq.v2.MessagingService/SendMessage"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (resp, mut body) = h2c.send_request(req, false).unwrap();
    body.send_data(bytes::Bytes::from_static(&[0, 0, 0]), false)
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), resp)
        .await
        .expect("a half-sent request is answered once its read deadline passes")
        .unwrap();
    let (parts, mut rbody) = resp.into_parts();
    let (code, message) = match parts.headers.get("grpc-status") {
        Some(c) => (c.clone(), parts.headers.get("grpc-message").cloned()),
        None => {
            let t = rbody.trailers().await.unwrap().expect("trailers");
            (t["grpc-status"].clone(), t.get("grpc-message").cloned())
        }
    };
    assert_eq!(code, "4", "DEADLINE_EXCEEDED, with {message:?}");
    let message = message
        .map(|m| m.to_str().unwrap().to_string())
        .unwrap_or_default();
    assert!(message.contains("request_read_timeout_ms"), "{message}");
    assert_eq!(m.over_limit_count("request_read_timeout_ms"), 2);

    // Quiet live clients stay: a gRPC client idle for 2 idle timeouts still has its
    // connection (it answered the pings), a remoting pull waits 1.5 s and is answered.
    let mut pulling = tokio::net::TcpStream::connect(remoting).await.unwrap();
    let ext = [
        ("consumerGroup", "QuietG"),
        ("topic", "QuietPull"),
        ("queueId", "0"),
        ("queueOffset", "0"),
        ("sysFlag", "2"),
        ("suspendTimeoutMillis", "1500"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut pull = rocklet_broker::remoting::codec::RemotingCommand::request(11, ext, Vec::new());
    pull.opaque = 1;
    pulling.write_all(&pull.encode()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_900)).await;
    {
        use tokio::io::AsyncReadExt;
        let mut len = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(1), pulling.read_exact(&mut len))
            .await
            .expect("the long poll was answered")
            .expect("on its connection, still open");
    }
    send_ok(&mut live, msg("Quiet", b"q", pb::MessageType::Normal, "Q1")).await;
    assert_eq!(
        m.over_limit_count("idle_timeout_ms"),
        2,
        "a live connection was closed as idle"
    );
    drop(b);
}

/// A gRPC call started on a raw HTTP/2 connection: its headers, then `sent` bytes of a
/// message that declares `declared` bytes, and nothing more (a client that stalls).
async fn stalled_grpc_call(
    h2c: &mut h2::client::SendRequest<bytes::Bytes>,
    addr: std::net::SocketAddr,
    method: &str,
    declared: u32,
    sent: usize,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let req = http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{addr}/apache.rocketmq.v2.MessagingService/{method}"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let mut ready = h2c.clone().ready().await.unwrap();
    let (resp, mut body) = ready.send_request(req, false).unwrap();
    let mut data = vec![0u8; 5 + sent];
    data[1..5].copy_from_slice(&declared.to_be_bytes());
    body.reserve_capacity(data.len());
    body.send_data(bytes::Bytes::from(data), false).unwrap();
    (resp, body)
}

/// The RocketMQ status of a unary gRPC response read off a raw HTTP/2 stream.
async fn raw_status(resp: h2::client::ResponseFuture) -> Result<pb::Status, String> {
    use prost::Message as _;
    let resp = resp.await.map_err(|e| e.to_string())?;
    let mut body = resp.into_body();
    let mut buf = Vec::new();
    while let Some(d) = body.data().await {
        let d = d.map_err(|e| e.to_string())?;
        let _ = body.flow_control().release_capacity(d.len());
        buf.extend_from_slice(&d);
    }
    if buf.len() < 5 {
        return Err(format!("no message in the response ({} bytes)", buf.len()));
    }
    let r = pb::SendMessageResponse::decode(&buf[5..]).map_err(|e| e.to_string())?;
    r.status.ok_or_else(|| "no status".into())
}

/// Many large requests that stall (gRPC sends whose body stops half-way, remoting sends
/// likewise) and long polls with large filters hold at most `max_inflight_request_bytes`
/// between them, and one client address at most its share (all of these come from
/// 127.0.0.1: the largest request, 3,407,872 bytes, above a quarter of the 8 MiB budget): a
/// gRPC call holds what has arrived of it, a remoting frame what it declares, and the ones
/// that would pass the share are refused at once (gRPC `TOO_MANY_REQUESTS`, remoting
/// `SYSTEM_BUSY`). The bytes are released when the request's handling ends (the stall's read
/// deadline, the long poll's end), and then normal requests of any size go through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_and_long_polling_requests_stop_at_the_request_budget() {
    use rocklet_broker::remoting::codec::{self, RemotingCommand};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const BUDGET: u64 = 8 << 20;
    // What one client address may hold: the largest request (2 x 1 MiB + 1 MiB of gRPC
    // message, + 256 KiB of remoting header).
    const SHARE: u64 = (3 << 20) + (256 << 10);
    let broker = BrokerProcess::start(
        &format!(
            "max_inflight_request_bytes = {BUDGET}\nrequest_read_timeout_ms = 6000\n\
             [core]\nmax_message_size = 1048576\nmax_batch_size = 1048576\n"
        ),
        true,
    );
    let (addr, pid) = (broker.addr, broker.pid());
    let remoting = broker.remoting.expect("remoting served");
    let mut c = connect(addr).await;
    send_ok(&mut c, msg("Budget", b"x", pb::MessageType::Normal, "N0")).await;
    let held = |b: &BrokerProcess| b.metric("rocklet_request_bytes_in_flight");
    let refusals = |b: &BrokerProcess| {
        b.metric("rocklet_requests_over_limit_total{limit=\"max_inflight_request_bytes\"}")
    };
    assert_eq!(held(&broker), 0);
    let baseline = rss_kib(pid);

    // (a) gRPC: 64 sends on 8 connections declare 2,097,000 bytes each, send 2,000,000 and
    // stall. One fits in the address's share; the others are answered at once.
    const DECLARED: u32 = 2_097_000;
    let (mut stalls, mut clients, mut answers) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..8 {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut h2c, conn) = h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .handshake::<_, bytes::Bytes>(tcp)
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        for _ in 0..8 {
            let (resp, body) =
                stalled_grpc_call(&mut h2c, addr, "SendMessage", DECLARED, 2_000_000).await;
            answers.push(tokio::spawn(async move {
                tokio::time::timeout(Duration::from_secs(2), raw_status(resp)).await
            }));
            stalls.push(body);
        }
        clients.push(h2c);
    }
    let mut busy = 0;
    let mut pending = 0;
    for a in answers {
        match a.await.unwrap() {
            Ok(Ok(s)) => {
                assert_status(
                    &s,
                    pb::Code::TooManyRequests,
                    "max_inflight_request_bytes of 8388608",
                );
                busy += 1;
            }
            Ok(Err(e)) => panic!("a refused send got {e}"),
            Err(_) => pending += 1,
        }
    }
    let grpc_rss = rss_kib(pid);
    let held_grpc = held(&broker);
    eprintln!(
        "gRPC: {busy} of 64 stalled sends refused, {pending} held ({held_grpc} bytes); RSS {baseline} -> {grpc_rss} KiB"
    );
    assert_eq!(busy + pending, 64);
    assert!(pending >= 1, "{pending} held");
    assert!(
        held_grpc >= u64::from(DECLARED) && held_grpc <= SHARE,
        "{held_grpc} bytes held"
    );
    assert!(
        grpc_rss < baseline + 48 * 1024,
        "64 stalled 2 MB sends grew the RSS from {baseline} to {grpc_rss} KiB"
    );
    // A normal client's sends from the same address fit in what its share has left (the
    // stalls hold what arrived of them, not the budget), also when a body spans many HTTP/2
    // frames; so does a route lookup.
    for (i, size) in [1024, 900 << 10].into_iter().enumerate() {
        let t = Instant::now();
        send_ok(
            &mut c,
            msg(
                "Budget",
                &vec![b'n'; size],
                pb::MessageType::Normal,
                &format!("N1{i}"),
            ),
        )
        .await;
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "served in {:?}",
            t.elapsed()
        );
    }
    let route = c
        .query_route(pb::QueryRouteRequest {
            topic: res("Budget"),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(route.status.unwrap().code, OK);
    // The stalls fail at their read deadline (6 s) and release their bytes; sends go again.
    let t = Instant::now();
    while held(&broker) > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(8),
            "stalled sends still hold {} bytes",
            held(&broker)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop((stalls, clients));
    send_ok(
        &mut c,
        msg("Budget", &[b'n'; 1024], pb::MessageType::Normal, "N1"),
    )
    .await;

    // (b) Remoting: 32 connections send a SEND_MESSAGE_V2 header declaring a 2,500,000-byte
    // body, 1,500,000 of it, and stall. One (or two) fit in the address's share; the others
    // are answered SYSTEM_BUSY at once.
    let mut conns = Vec::new();
    for i in 0..32 {
        let ext = [
            ("a", "PG"),
            ("b", "Budget"),
            ("e", "0"),
            ("f", "0"),
            ("i", ""),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut r = RemotingCommand::request(310, ext, vec![b'r'; 2_500_000]);
        r.opaque = i;
        let frame = r.encode();
        let mut s = tokio::net::TcpStream::connect(remoting).await.unwrap();
        s.write_all(&frame[..frame.len() - 1_000_000])
            .await
            .unwrap();
        conns.push(s);
    }
    let readers: Vec<_> = conns
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let mut len = [0u8; 4];
                let got =
                    tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut len)).await;
                let answer = match got {
                    Err(_) => None,
                    Ok(r) => {
                        r.unwrap();
                        let mut buf = vec![0; codec::frame_length(len).unwrap()];
                        s.read_exact(&mut buf).await.unwrap();
                        let r = codec::decode_frame(&buf).unwrap();
                        Some((r.code, r.remark.unwrap_or_default()))
                    }
                };
                (s, answer)
            })
        })
        .collect();
    let (mut conns, mut busy) = (Vec::new(), 0);
    for r in readers {
        let (s, answer) = r.await.unwrap();
        if let Some((code, remark)) = answer {
            assert_eq!(code, 2, "SYSTEM_BUSY, not {code}: {remark}");
            assert!(
                remark.contains("max_inflight_request_bytes of 8388608"),
                "{remark}"
            );
            busy += 1;
        }
        conns.push(s);
    }
    let remoting_rss = rss_kib(pid);
    let held_remoting = held(&broker);
    eprintln!(
        "remoting: {busy} of 32 stalled sends refused, {held_remoting} bytes held; RSS {baseline} -> {remoting_rss} KiB"
    );
    // A body holds what has arrived of it (its buffer at most doubles), and what it declares
    // must fit when its header is read: one, perhaps two, fit in the share.
    assert!((30..=31).contains(&busy), "{busy} refused");
    assert!(
        held_remoting > 1_500_000 && held_remoting <= SHARE,
        "{held_remoting}"
    );
    assert!(
        remoting_rss < baseline + 48 * 1024,
        "32 stalled remoting sends grew the RSS from {baseline} to {remoting_rss} KiB"
    );
    // A normal remoting send fits in what is left and is stored.
    let mut v4 = tokio::net::TcpStream::connect(remoting).await.unwrap();
    let ext = [
        ("a", "PG"),
        ("b", "Budget"),
        ("e", "0"),
        ("f", "0"),
        ("i", ""),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut r = RemotingCommand::request(310, ext, vec![b'v'; 1024]);
    r.opaque = 99;
    v4.write_all(&r.encode()).await.unwrap();
    let mut len = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(2), v4.read_exact(&mut len))
        .await
        .expect("a small remoting send is answered")
        .unwrap();
    let mut buf = vec![0; codec::frame_length(len).unwrap()];
    v4.read_exact(&mut buf).await.unwrap();
    let r = codec::decode_frame(&buf).unwrap();
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // Their read deadline closes the stalled connections and frees the budget.
    let t = Instant::now();
    while held(&broker) > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(8),
            "stalled remoting sends still hold {} bytes",
            held(&broker)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(conns);

    // (c) Long polls hold their request while they wait: 180 receives with 60 KiB filters
    // on 3 connections; about a share's worth of them wait, the rest are refused at once; once the
    // polls end (8 s: well apart from "at once" on a loaded machine) the bytes are released.
    send_ok(
        &mut c,
        msg("BudgetQuiet", b"q", pb::MessageType::Normal, "Q0"),
    )
    .await;
    let filter = long_tag_expression(60 << 10);
    let mut polls = Vec::new();
    for _ in 0..3 {
        let p = connect(addr).await;
        for i in 0..60 {
            let mut p = p.clone();
            let mut req = receive_req("BudgetQuiet", "BG");
            req.long_polling_timeout = Some(dur(8_000));
            req.filter_expression = Some(pb::FilterExpression {
                r#type: pb::FilterType::Tag as i32,
                expression: format!("{filter}||x{i}"),
            });
            polls.push(tokio::spawn(async move {
                let t = Instant::now();
                (receive_status(&mut p, req).await, t.elapsed())
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let held_polls = held(&broker);
    let (mut waited, mut refused) = (0, 0);
    for p in polls {
        let (s, took) = p.await.unwrap();
        if s.code == pb::Code::TooManyRequests as i32 {
            assert!(
                s.message.contains("max_inflight_request_bytes"),
                "{}",
                s.message
            );
            assert!(took < Duration::from_secs(5), "refused after {took:?}");
            refused += 1;
        } else {
            assert!(
                took >= Duration::from_millis(7_500),
                "{}: {} after {took:?}",
                s.code,
                s.message
            );
            waited += 1;
        }
    }
    eprintln!("long polls: {waited} waited holding {held_polls} bytes, {refused} refused");
    assert!(
        held_polls > SHARE - (128 << 10) && held_polls <= SHARE,
        "{held_polls}"
    );
    assert!(
        refused > 0 && waited > 40,
        "{waited} waited, {refused} refused"
    );
    assert_eq!(
        held(&broker),
        0,
        "every request's bytes are released when it ends"
    );
    assert!(refusals(&broker) >= 64 - pending + 30 + refused);
    send_ok(
        &mut c,
        msg("Budget", &[b'n'; 1024], pb::MessageType::Normal, "N2"),
    )
    .await;
}
