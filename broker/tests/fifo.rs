//! FIFO consumer groups over gRPC (issue #19): declaring them (config file, admin), the
//! settings consumers get, the queue lock seen by two consumers, long polls woken when a
//! queue unlocks, and the deliveries held for push consumers (auto renew) while they work.

mod common;

use std::time::{Duration, Instant};

use common::*;
use rocklet_broker::config::GroupDecl;
use rocklet_broker::pb::v2 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

const FIFO: &str = "FifoGroup";

fn fifo_group(cfg: &mut rocklet_broker::config::BrokerConfig) {
    cfg.groups.push(GroupDecl {
        name: FIFO.into(),
        fifo: true,
    });
}

/// A consumer's telemetry stream as client `client` of `group`; the settings answered.
struct Consumer {
    _tx: mpsc::Sender<pb::TelemetryCommand>,
    _inbound: tonic::Streaming<pb::TelemetryCommand>,
    settings: pb::Settings,
}

async fn consumer(c: &mut Client, client: &str, group: &str) -> Consumer {
    let (tx, rx) = mpsc::channel(4);
    let settings = pb::Settings {
        client_type: Some(pb::ClientType::PushConsumer as i32),
        pub_sub: Some(pb::settings::PubSub::Subscription(pb::Subscription {
            group: res(group),
            ..Default::default()
        })),
        ..Default::default()
    };
    tx.send(pb::TelemetryCommand {
        status: None,
        command: Some(pb::telemetry_command::Command::Settings(settings)),
    })
    .await
    .unwrap();
    let mut req = tonic::Request::new(ReceiverStream::new(rx));
    req.metadata_mut()
        .insert("x-mq-client-id", client.parse().unwrap());
    let mut inbound = c.telemetry(req).await.unwrap().into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), inbound.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let Some(pb::telemetry_command::Command::Settings(settings)) = first.command else {
        panic!("{first:?}")
    };
    Consumer {
        _tx: tx,
        _inbound: inbound,
        settings,
    }
}

fn is_fifo(s: &pb::Settings) -> bool {
    match &s.pub_sub {
        Some(pb::settings::PubSub::Subscription(sub)) => sub.fifo == Some(true),
        other => panic!("{other:?}"),
    }
}

fn fifo_msg(topic: &str, group: &str, body: &str) -> pb::Message {
    let mut m = msg(topic, body.as_bytes(), pb::MessageType::Fifo, body);
    m.system_properties.as_mut().unwrap().message_group = Some(group.into());
    m
}

fn bodies(r: &Received) -> Vec<String> {
    r.messages
        .iter()
        .map(|m| String::from_utf8(m.body.clone()).unwrap())
        .collect()
}

/// A push consumer's receive: `auto_renew`, no invisible duration, as client `client`.
async fn push_receive(
    c: &mut Client,
    client: &str,
    topic: &str,
    group: &str,
    max: i32,
    poll_ms: u64,
) -> Received {
    let mut req = tonic::Request::new(pb::ReceiveMessageRequest {
        group: res(group),
        message_queue: Some(pb::MessageQueue {
            topic: res(topic),
            ..Default::default()
        }),
        filter_expression: None,
        batch_size: max,
        invisible_duration: None,
        auto_renew: true,
        long_polling_timeout: Some(dur(poll_ms)),
        attempt_id: Some("a".into()),
    });
    req.metadata_mut()
        .insert("x-mq-client-id", client.parse().unwrap());
    let mut stream = c.receive_message(req).await.unwrap().into_inner();
    let mut out = Received {
        status: pb::Status::default(),
        messages: Vec::new(),
    };
    while let Some(r) = stream.next().await {
        match r.unwrap().content.unwrap() {
            pb::receive_message_response::Content::Status(s) => out.status = s,
            pb::receive_message_response::Content::Message(m) => out.messages.push(m),
            pb::receive_message_response::Content::DeliveryTimestamp(_) => {}
        }
    }
    out
}

#[tokio::test]
async fn a_group_declared_fifo_in_the_config_is_fifo_in_its_settings() {
    let mut b = TestBroker::start_with(fifo_group).await;
    let c = consumer(&mut b.client, "c1", FIFO).await;
    assert!(is_fifo(&c.settings), "{:?}", c.settings);
    let other = consumer(&mut b.client, "c2", "PlainGroup").await;
    assert!(!is_fifo(&other.settings), "{:?}", other.settings);
    b.stop().await;
}

#[tokio::test]
async fn the_admin_declares_a_group_fifo_durably() {
    let mut b = TestBroker::start().await;
    let addr = b.addr().to_string();
    let out = rocklet_broker::admin::client::group(&addr, "Orders", None)
        .await
        .unwrap();
    assert!(out.contains("not FIFO"), "{out}");
    let out = rocklet_broker::admin::client::group(&addr, "Orders", Some(true))
        .await
        .unwrap();
    assert!(out.contains("declared: FIFO"), "{out}");
    assert!(is_fifo(
        &consumer(&mut b.client, "c1", "Orders").await.settings
    ));
    let err = rocklet_broker::admin::client::group(&addr, "no spaces", Some(true))
        .await
        .unwrap_err();
    assert!(err.contains("INVALID_GROUP"), "{err}");
    // Recorded in the log: FIFO after a restart, and declared back to not FIFO.
    let mut b = restart(b.stop().await).await;
    let addr = b.addr().to_string();
    assert!(is_fifo(
        &consumer(&mut b.client, "c1", "Orders").await.settings
    ));
    let out = rocklet_broker::admin::client::group(&addr, "Orders", Some(false))
        .await
        .unwrap();
    assert!(out.contains("declared: not FIFO"), "{out}");
    assert!(!is_fifo(
        &consumer(&mut b.client, "c1", "Orders").await.settings
    ));
    b.stop().await;
}

/// A broker on the data directory of one that stopped.
async fn restart(dir: tempfile::TempDir) -> TestBroker {
    let broker = rocklet_broker::server::start(
        test_config(dir.path()),
        std::sync::Arc::new(rocklet_broker::clock::SystemClock),
    )
    .await
    .unwrap();
    let client = connect(broker.addr).await;
    TestBroker {
        broker: Some(broker),
        dir,
        client,
    }
}

#[tokio::test]
async fn a_second_consumer_gets_nothing_from_a_queue_the_first_holds() {
    let mut b = TestBroker::start_with(fifo_group).await;
    for i in 0..4 {
        let mut m = fifo_msg("FifoTopic", "order-1", &format!("m{i}"));
        m.system_properties.as_mut().unwrap().queue_id = 0;
        send_ok(&mut b.client, m).await;
    }
    let first = receive(&mut b.client, "FifoTopic", FIFO, 2, 30_000, 1_000).await;
    assert_eq!(bodies(&first), ["m0", "m1"]);
    let mut second = connect(b.addr()).await;
    let r = receive(&mut second, "FifoTopic", FIFO, 2, 30_000, 300).await;
    assert!(r.messages.is_empty(), "{:?}", bodies(&r));
    assert_eq!(
        ack(&mut b.client, "FifoTopic", FIFO, &first.messages[0])
            .await
            .code,
        OK
    );
    let r = receive(&mut second, "FifoTopic", FIFO, 2, 30_000, 300).await;
    assert!(
        r.messages.is_empty(),
        "m1 is still in flight: {:?}",
        bodies(&r)
    );
    assert_eq!(
        ack(&mut b.client, "FifoTopic", FIFO, &first.messages[1])
            .await
            .code,
        OK
    );
    let r = receive(&mut second, "FifoTopic", FIFO, 2, 30_000, 1_000).await;
    assert_eq!(bodies(&r), ["m2", "m3"]);
    b.stop().await;
}

#[tokio::test]
async fn a_long_poll_is_woken_when_the_queue_it_waits_on_unlocks() {
    let mut b = TestBroker::start_with(fifo_group).await;
    send_ok(&mut b.client, fifo_msg("WakeTopic", "g", "m0")).await;
    send_ok(&mut b.client, fifo_msg("WakeTopic", "g", "m1")).await;
    send_ok(&mut b.client, fifo_msg("WakeTopic", "g", "m2")).await;
    let first = receive(&mut b.client, "WakeTopic", FIFO, 1, 30_000, 1_000).await;
    assert_eq!(bodies(&first), ["m0"]);
    let mut second = connect(b.addr()).await;
    let waiting = tokio::spawn(async move {
        let t = Instant::now();
        let r = receive(&mut second, "WakeTopic", FIFO, 1, 30_000, 10_000).await;
        (r, t.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        ack(&mut b.client, "WakeTopic", FIFO, &first.messages[0])
            .await
            .code,
        OK
    );
    let (r, took) = waiting.await.unwrap();
    assert_eq!(bodies(&r), ["m1"]);
    assert!(
        took < Duration::from_secs(3),
        "woken after {took:?}, not at the ack"
    );
    // Dead-lettering unlocks it too.
    let mut third = connect(b.addr()).await;
    let waiting = tokio::spawn(async move {
        let t = Instant::now();
        let r = receive(&mut third, "WakeTopic", FIFO, 1, 30_000, 10_000).await;
        (r, t.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let f = b
        .client
        .forward_message_to_dead_letter_queue(pb::ForwardMessageToDeadLetterQueueRequest {
            group: res(FIFO),
            topic: res("WakeTopic"),
            receipt_handle: handle(&r.messages[0]),
            message_id: "m1".into(),
            delivery_attempt: 16,
            max_delivery_attempts: 16,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(f.status.unwrap().code, OK);
    let (r, took) = waiting.await.unwrap();
    assert_eq!(bodies(&r), ["m2"]);
    assert!(took < Duration::from_secs(3), "woken after {took:?}");
    let dlq = receive(
        &mut b.client,
        &format!("%DLQ%{FIFO}"),
        "Ops",
        4,
        30_000,
        1_000,
    )
    .await;
    assert_eq!(bodies(&dlq), ["m1"]);
    b.stop().await;
}

#[tokio::test]
async fn a_push_consumer_holds_its_batch_past_the_invisible_time_and_acks_with_its_handles() {
    let mut b = TestBroker::start_with(|cfg| {
        fifo_group(cfg);
        cfg.core.default_invisible_ms = 1_500;
    })
    .await;
    for i in 0..3 {
        send_ok(&mut b.client, fifo_msg("RenewTopic", "g", &format!("m{i}"))).await;
    }
    let _telemetry = consumer(&mut b.client, "slow", FIFO).await;
    let got = push_receive(&mut b.client, "slow", "RenewTopic", FIFO, 2, 1_000).await;
    assert_eq!(bodies(&got), ["m0", "m1"]);
    // Three invisible times later, still held: another consumer gets nothing.
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let mut other = connect(b.addr()).await;
    let r = receive(&mut other, "RenewTopic", FIFO, 2, 30_000, 300).await;
    assert!(
        r.messages.is_empty(),
        "redelivered while held: {:?}",
        bodies(&r)
    );
    // The consumer acks with the handles it was given.
    for m in &got.messages {
        let s = ack(&mut b.client, "RenewTopic", FIFO, m).await;
        assert_eq!(s.code, OK, "{}", s.message);
    }
    let r = receive(&mut other, "RenewTopic", FIFO, 2, 30_000, 1_000).await;
    assert_eq!(bodies(&r), ["m2"]);
    assert_eq!(attempt(&r.messages[0]), 1);
    assert_eq!(
        b.broker
            .as_ref()
            .unwrap()
            .core
            .inspect(|b| b.stats().redelivered)
            .await
            .unwrap(),
        0
    );
    b.stop().await;
}

#[tokio::test]
async fn what_a_departed_consumer_held_goes_to_the_next_at_once() {
    let mut b = TestBroker::start_with(fifo_group).await;
    send_ok(&mut b.client, fifo_msg("GoneTopic", "g", "m0")).await;
    send_ok(&mut b.client, fifo_msg("GoneTopic", "g", "m1")).await;
    // Its telemetry stream closes (the process died): m0 is the next consumer's at once,
    // not after the 30 s invisible time.
    let telemetry = consumer(&mut b.client, "dies", FIFO).await;
    let got = push_receive(&mut b.client, "dies", "GoneTopic", FIFO, 1, 1_000).await;
    assert_eq!(bodies(&got), ["m0"]);
    drop(telemetry);
    let mut next = connect(b.addr()).await;
    let t = Instant::now();
    let r = receive(&mut next, "GoneTopic", FIFO, 1, 30_000, 5_000).await;
    assert_eq!(bodies(&r), ["m0"]);
    assert_eq!(attempt(&r.messages[0]), 2);
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());
    assert_eq!(
        ack(&mut next, "GoneTopic", FIFO, &r.messages[0]).await.code,
        OK
    );
    // NotifyClientTermination does the same.
    let _telemetry = consumer(&mut b.client, "leaves", FIFO).await;
    let got = push_receive(&mut b.client, "leaves", "GoneTopic", FIFO, 1, 1_000).await;
    assert_eq!(bodies(&got), ["m1"]);
    let mut bye = tonic::Request::new(pb::NotifyClientTerminationRequest { group: res(FIFO) });
    bye.metadata_mut()
        .insert("x-mq-client-id", "leaves".parse().unwrap());
    b.client.notify_client_termination(bye).await.unwrap();
    let r = receive(&mut next, "GoneTopic", FIFO, 1, 30_000, 5_000).await;
    assert_eq!(bodies(&r), ["m1"]);
    assert_eq!(attempt(&r.messages[0]), 2);
    b.stop().await;
}
