//! The broker over the wire: every RPC the official clients use, against an in-process
//! broker on an ephemeral port.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rocklet_broker::clock::ManualClock;
use rocklet_broker::config::{TopicDecl, TopicMessageType};
use rocklet_broker::pb::v2 as pb;
use rocklet_core::FlushMode;

#[tokio::test]
async fn route_lists_queues_and_every_message_type() {
    let mut b = TestBroker::start().await;
    let endpoints = pb::Endpoints {
        scheme: pb::AddressScheme::IPv4 as i32,
        addresses: vec![pb::Address {
            host: "127.0.0.1".into(),
            port: i32::from(b.addr().port()),
        }],
    };
    let r = b
        .client
        .query_route(pb::QueryRouteRequest {
            topic: res("RouteTopic"),
            endpoints: Some(endpoints.clone()),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, OK);
    assert_eq!(r.message_queues.len(), 4);
    let q = &r.message_queues[0];
    assert_eq!(q.permission, pb::Permission::ReadWrite as i32);
    assert_eq!(q.broker.as_ref().unwrap().id, 0);
    assert_eq!(
        q.broker.as_ref().unwrap().endpoints.as_ref(),
        Some(&endpoints)
    );
    for t in [
        pb::MessageType::Normal,
        pb::MessageType::Fifo,
        pb::MessageType::Delay,
        pb::MessageType::Transaction,
    ] {
        assert!(
            q.accept_message_types.contains(&(t as i32)),
            "{t:?} missing"
        );
    }
    b.stop().await;
}

#[tokio::test]
async fn send_receive_ack() {
    let mut b = TestBroker::start().await;
    let e = send_ok(
        &mut b.client,
        msg("Orders", b"hello", pb::MessageType::Normal, "ID-1"),
    )
    .await;
    assert_eq!(e.message_id, "ID-1");
    let r = receive(&mut b.client, "Orders", "G", 16, 10_000, 1_000).await;
    assert_eq!(r.status.code, OK, "{}", r.status.message);
    assert_eq!(r.messages.len(), 1);
    let m = &r.messages[0];
    assert_eq!(m.body, b"hello");
    let sp = m.system_properties.as_ref().unwrap();
    assert_eq!(sp.message_id, "ID-1");
    assert_eq!(sp.delivery_attempt, Some(1));
    assert_eq!(
        sp.body_digest.as_ref().unwrap().checksum,
        "5D41402ABC4B2A76B9719D911017C592"
    );
    assert_eq!(sp.message_type, pb::MessageType::Normal as i32);
    assert_eq!(ack(&mut b.client, "Orders", "G", m).await.code, OK);
    // Acked: not delivered again, even after its invisible time.
    let r = receive(&mut b.client, "Orders", "G", 16, 10_000, 300).await;
    assert_eq!(r.status.code, pb::Code::MessageNotFound as i32);
    // Acking twice names the problem.
    let s = ack(&mut b.client, "Orders", "G", m).await;
    assert_eq!(s.code, pb::Code::InvalidReceiptHandle as i32);
    assert!(
        s.message.contains("INVALID_RECEIPT_HANDLE"),
        "{}",
        s.message
    );
    b.stop().await;
}

#[tokio::test]
async fn batch_send_stores_every_message() {
    let mut b = TestBroker::start().await;
    let batch: Vec<_> = (0..5)
        .map(|i| {
            msg(
                "BatchTopic",
                format!("m{i}").as_bytes(),
                pb::MessageType::Normal,
                &format!("B{i}"),
            )
        })
        .collect();
    let r = send(&mut b.client, batch).await;
    assert_eq!(r.status.unwrap().code, OK);
    assert_eq!(r.entries.len(), 5);
    let ids: Vec<_> = r.entries.iter().map(|e| e.message_id.clone()).collect();
    assert_eq!(ids, ["B0", "B1", "B2", "B3", "B4"]);
    let got = receive(&mut b.client, "BatchTopic", "G", 32, 10_000, 1_000).await;
    let mut bodies: Vec<_> = got
        .messages
        .iter()
        .map(|m| String::from_utf8(m.body.clone()).unwrap())
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3", "m4"]);
    b.stop().await;
}

#[tokio::test]
async fn fifo_message_keeps_its_group() {
    let mut b = TestBroker::start().await;
    let mut m = msg("FifoTopic", b"f", pb::MessageType::Fifo, "F1");
    m.system_properties.as_mut().unwrap().message_group = Some("order-42".into());
    send_ok(&mut b.client, m).await;
    let got = receive(&mut b.client, "FifoTopic", "G", 1, 10_000, 1_000).await;
    let sp = got.messages[0].system_properties.as_ref().unwrap();
    assert_eq!(sp.message_group.as_deref(), Some("order-42"));
    assert_eq!(sp.message_type, pb::MessageType::Fifo as i32);
    b.stop().await;
}

/// The broker picks the queue of a gRPC send, as Apache's proxy does (the official Python
/// client leaves `queue_id` unset, i.e. 0): round robin over the topic's queues, and by the
/// message group for FIFO messages, so one group stays in one queue.
#[tokio::test]
async fn sends_spread_over_the_queues_and_a_message_group_stays_in_one() {
    let mut b = TestBroker::start_with(|c| {
        c.topics = vec![TopicDecl {
            name: "Spread".into(),
            queues: Some(8),
            message_types: None,
        }];
    })
    .await;
    for i in 0..40 {
        let m = msg("Spread", b"n", pb::MessageType::Normal, &format!("N{i}"));
        send_ok(&mut b.client, m).await;
    }
    for (group, n) in [("order-1", 10), ("order-2", 10)] {
        for i in 0..n {
            let mut m = msg(
                "Spread",
                group.as_bytes(),
                pb::MessageType::Fifo,
                &format!("{group}-{i}"),
            );
            m.system_properties.as_mut().unwrap().message_group = Some(group.into());
            send_ok(&mut b.client, m).await;
        }
    }
    let got = receive_all(&mut b.client, "Spread", "G").await;
    assert_eq!(got.len(), 60);
    let mut per_queue = std::collections::BTreeMap::<i32, usize>::new();
    let mut group_queues =
        std::collections::BTreeMap::<String, std::collections::BTreeSet<i32>>::new();
    for m in &got {
        let sp = m.system_properties.as_ref().unwrap();
        match &sp.message_group {
            Some(g) => {
                group_queues
                    .entry(g.clone())
                    .or_default()
                    .insert(sp.queue_id);
            }
            None => *per_queue.entry(sp.queue_id).or_default() += 1,
        }
    }
    assert_eq!(
        per_queue.values().copied().collect::<Vec<_>>(),
        vec![5; 8],
        "40 sends over 8 queues: {per_queue:?}"
    );
    for (g, queues) in &group_queues {
        assert_eq!(queues.len(), 1, "group {g} in queues {queues:?}");
    }
    b.stop().await;
}

#[tokio::test]
async fn transaction_commit_and_rollback() {
    let mut b = TestBroker::start().await;
    let _producer = Telemetry::producer(&mut b.client, &["TxTopic"]).await;
    let c = send_ok(
        &mut b.client,
        msg("TxTopic", b"commit-me", pb::MessageType::Transaction, "C1"),
    )
    .await;
    let r = send_ok(
        &mut b.client,
        msg("TxTopic", b"roll-me", pb::MessageType::Transaction, "R1"),
    )
    .await;
    assert_eq!(c.transaction_id, "C1", "RocketMQ's form: the message id");
    // Invisible before the commit.
    let none = receive(&mut b.client, "TxTopic", "G", 16, 10_000, 100).await;
    assert!(none.messages.is_empty());
    let s = end_txn(
        &mut b.client,
        "TxTopic",
        &c.transaction_id,
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceClient,
    )
    .await;
    assert_eq!(s.code, OK, "{}", s.message);
    let s = end_txn(
        &mut b.client,
        "TxTopic",
        &r.transaction_id,
        pb::TransactionResolution::Rollback,
        pb::TransactionSource::SourceClient,
    )
    .await;
    assert_eq!(s.code, OK, "{}", s.message);
    let got = receive(&mut b.client, "TxTopic", "G", 16, 10_000, 1_000).await;
    assert_eq!(got.messages.len(), 1);
    assert_eq!(got.messages[0].body, b"commit-me");
    assert_eq!(
        got.messages[0]
            .system_properties
            .as_ref()
            .unwrap()
            .message_type,
        pb::MessageType::Transaction as i32
    );
    // The rolled back one never comes, even well past the check timeout.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let more = receive(&mut b.client, "TxTopic", "G2", 16, 10_000, 200).await;
    assert_eq!(
        more.messages.len(),
        1,
        "only the committed message is in the topic"
    );
    assert_eq!(more.messages[0].body, b"commit-me");
    b.stop().await;
}

#[tokio::test]
async fn unknown_transaction_is_checked_and_committed_by_the_checker() {
    let mut b = TestBroker::start().await;
    let mut producer = Telemetry::producer(&mut b.client, &["CheckTopic"]).await;
    let e = send_ok(
        &mut b.client,
        msg("CheckTopic", b"maybe", pb::MessageType::Transaction, "U1"),
    )
    .await;
    let s = end_txn(
        &mut b.client,
        "CheckTopic",
        &e.transaction_id,
        pb::TransactionResolution::Unspecified,
        pb::TransactionSource::SourceClient,
    )
    .await;
    assert_eq!(s.code, OK, "UNKNOWN leaves it pending: {}", s.message);
    let check = producer
        .next_check(Duration::from_secs(5))
        .await
        .expect("a check arrives");
    assert_eq!(check.transaction_id, e.transaction_id);
    let m = check.message.unwrap();
    assert_eq!(m.body, b"maybe");
    assert_eq!(m.topic.unwrap().name, "CheckTopic");
    assert!(
        m.system_properties.unwrap().body_digest.is_some(),
        "Node needs body_digest"
    );
    // Nothing visible until the checker answers.
    assert!(receive(&mut b.client, "CheckTopic", "G", 16, 10_000, 100)
        .await
        .messages
        .is_empty());
    let s = end_txn(
        &mut b.client,
        "CheckTopic",
        &e.transaction_id,
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceServerCheck,
    )
    .await;
    assert_eq!(s.code, OK, "{}", s.message);
    let got = receive(&mut b.client, "CheckTopic", "G", 16, 10_000, 1_000).await;
    assert_eq!(got.messages.len(), 1);
    assert_eq!(got.messages[0].body, b"maybe");
    b.stop().await;
}

/// Transaction ids in RocketMQ's form (issue 34): the send result's and the check's are the
/// half's message id, as Apache's proxy gives them, and an EndTransaction naming it finds the
/// half (through the message index) after a restart too, from the producer or the checker.
#[tokio::test]
async fn transaction_ids_are_message_ids_and_find_the_half_after_a_restart() {
    let b = TestBroker::start().await;
    let mut client = b.client.clone();
    let ids = [
        "01AABBCCDDEEFF0011223344556677889A",
        "01AABBCCDDEEFF0011223344556677889B",
    ];
    for (i, id) in ids.iter().enumerate() {
        let body = format!("tx-{i}");
        let r = send_ok(
            &mut client,
            msg("TxIds", body.as_bytes(), pb::MessageType::Transaction, id),
        )
        .await;
        assert_eq!(r.transaction_id, *id);
        assert_eq!(r.message_id, *id);
    }
    // An id no half has: refused, naming it.
    let s = end_txn(
        &mut client,
        "TxIds",
        "01FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF",
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceClient,
    )
    .await;
    assert_eq!(
        s.code,
        pb::Code::InvalidTransactionId as i32,
        "{}",
        s.message
    );
    assert!(
        s.message.contains("01FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF"),
        "{}",
        s.message
    );
    let dir = b.stop().await;
    let broker = rocklet_broker::server::start(
        test_config(dir.path()),
        Arc::new(rocklet_broker::clock::SystemClock),
    )
    .await
    .unwrap();
    let mut client = connect(broker.addr).await;
    // The producer ends the first after the restart.
    let s = end_txn(
        &mut client,
        "TxIds",
        ids[0],
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceClient,
    )
    .await;
    assert_eq!(s.code, OK, "{}", s.message);
    // The second is checked, by its message id, and the checker's answer finds it.
    let mut producer = Telemetry::producer(&mut client, &["TxIds"]).await;
    let check = producer
        .next_check(Duration::from_secs(5))
        .await
        .expect("a check arrives");
    assert_eq!(check.transaction_id, ids[1]);
    let s = end_txn(
        &mut client,
        "TxIds",
        &check.transaction_id,
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceServerCheck,
    )
    .await;
    assert_eq!(s.code, OK, "{}", s.message);
    let got = receive_all(&mut client, "TxIds", "G").await;
    let mut bodies: Vec<_> = got.iter().map(|m| m.body.clone()).collect();
    bodies.sort();
    assert_eq!(bodies, vec![b"tx-0".to_vec(), b"tx-1".to_vec()]);
    broker.stop().await;
    drop(dir);
}

#[tokio::test]
async fn checks_wait_for_a_producer_without_using_attempts() {
    let mut b = TestBroker::start().await;
    let e = send_ok(
        &mut b.client,
        msg("WaitTopic", b"w", pb::MessageType::Transaction, "W1"),
    )
    .await;
    // Well past the timeout and several check intervals, with no producer connected.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let core = b.broker.as_ref().unwrap().core.clone();
    let pending = core.inspect(|b| b.pending_transactions(10)).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        pending[0].checks, 0,
        "no attempt used while no producer is online"
    );
    assert_eq!(pending[0].next_check, None, "parked");
    let mut producer = Telemetry::producer(&mut b.client, &["WaitTopic"]).await;
    let check = producer
        .next_check(Duration::from_secs(3))
        .await
        .expect("checked once a producer connects");
    assert_eq!(check.transaction_id, e.transaction_id);
    b.stop().await;
}

#[tokio::test]
async fn change_invisible_duration_gives_a_new_handle() {
    let mut b = TestBroker::start().await;
    send_ok(
        &mut b.client,
        msg("CidTopic", b"x", pb::MessageType::Normal, "X1"),
    )
    .await;
    let got = receive(&mut b.client, "CidTopic", "G", 1, 10_000, 1_000).await;
    let old = handle(&got.messages[0]);
    let r = b
        .client
        .change_invisible_duration(pb::ChangeInvisibleDurationRequest {
            group: res("G"),
            topic: res("CidTopic"),
            receipt_handle: old.clone(),
            invisible_duration: Some(dur(20_000)),
            message_id: "X1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, OK);
    assert_ne!(r.receipt_handle, old);
    // Either handle names the renewed delivery: the new one acks it, and the old one is then
    // refused as already acked (not as stale).
    assert_eq!(
        ack_handle(&mut b.client, "CidTopic", "G", &r.receipt_handle)
            .await
            .code,
        OK
    );
    let again = ack_handle(&mut b.client, "CidTopic", "G", &old).await;
    assert_eq!(again.code, pb::Code::InvalidReceiptHandle as i32);
    assert!(again.message.contains("already acked"), "{}", again.message);
    b.stop().await;
}

#[tokio::test]
async fn redelivered_after_invisible_time_with_attempt_two() {
    let mut b = TestBroker::start().await;
    send_ok(
        &mut b.client,
        msg("RedoTopic", b"again", pb::MessageType::Normal, "A1"),
    )
    .await;
    let first = receive(&mut b.client, "RedoTopic", "G", 1, 500, 1_000).await;
    assert_eq!(attempt(&first.messages[0]), 1);
    // The long poll wakes when the invisible time runs out.
    let t = Instant::now();
    let second = receive(&mut b.client, "RedoTopic", "G", 1, 10_000, 5_000).await;
    assert_eq!(second.messages.len(), 1);
    assert_eq!(attempt(&second.messages[0]), 2);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "woken by the redelivery, not the poll timeout"
    );
    assert_eq!(
        ack(&mut b.client, "RedoTopic", "G", &second.messages[0])
            .await
            .code,
        OK
    );
    b.stop().await;
}

#[tokio::test]
async fn delayed_message_is_never_early() {
    let mut b = TestBroker::start().await;
    let now = rocklet_broker::clock::Clock::now(&rocklet_broker::clock::SystemClock);
    let at = now + 1_500;
    let mut m = msg("DelayTopic", b"later", pb::MessageType::Delay, "D1");
    m.system_properties.as_mut().unwrap().delivery_timestamp =
        Some(rocklet_broker::grpc::convert::timestamp(at));
    send_ok(&mut b.client, m).await;
    let got = receive(&mut b.client, "DelayTopic", "G", 1, 10_000, 5_000).await;
    let received_at = rocklet_broker::clock::Clock::now(&rocklet_broker::clock::SystemClock);
    assert_eq!(got.messages.len(), 1);
    assert!(received_at >= at, "delivered {} ms early", at - received_at);
    assert!(
        received_at < at + 1_500,
        "long poll woke late: {} ms",
        received_at - at
    );
    let sp = got.messages[0].system_properties.as_ref().unwrap();
    assert_eq!(sp.message_type, pb::MessageType::Delay as i32);
    // rocklet_messages_stored_total counts a delayed message when it is delivered.
    let stats = b
        .broker
        .as_ref()
        .unwrap()
        .core
        .inspect(|b| b.stats())
        .await
        .unwrap();
    assert_eq!((stats.delayed_stored, stats.delayed_delivered), (1, 1));
    assert_eq!(stats.messages_stored, 1);
    b.stop().await;
}

#[tokio::test]
async fn long_poll_wakes_on_a_send() {
    let mut b = TestBroker::start().await;
    let mut c2 = connect(b.addr()).await;
    let t = Instant::now();
    let waiter =
        tokio::spawn(async move { receive(&mut c2, "PollTopic", "G", 1, 10_000, 10_000).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    send_ok(
        &mut b.client,
        msg("PollTopic", b"wake", pb::MessageType::Normal, "P1"),
    )
    .await;
    let got = waiter.await.unwrap();
    assert_eq!(got.messages.len(), 1);
    assert!(t.elapsed() < Duration::from_secs(3));
    b.stop().await;
}

#[tokio::test]
async fn long_poll_answers_before_the_client_deadline() {
    let mut b = TestBroker::start().await;
    let mut req = tonic::Request::new(pb::ReceiveMessageRequest {
        group: res("G"),
        message_queue: Some(pb::MessageQueue {
            topic: res("EmptyTopic"),
            ..Default::default()
        }),
        filter_expression: None,
        batch_size: 1,
        invisible_duration: Some(dur(10_000)),
        auto_renew: false,
        long_polling_timeout: Some(dur(30_000)),
        attempt_id: None,
    });
    req.set_timeout(Duration::from_secs(2));
    let t = Instant::now();
    let mut stream = b
        .client
        .receive_message(req)
        .await
        .expect("answered, not DEADLINE_EXCEEDED")
        .into_inner();
    let first = tokio_stream::StreamExt::next(&mut stream)
        .await
        .unwrap()
        .unwrap();
    match first.content {
        Some(pb::receive_message_response::Content::Status(s)) => {
            assert_eq!(s.code, pb::Code::MessageNotFound as i32)
        }
        other => panic!("expected a status, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(2));
    b.stop().await;
}

#[tokio::test]
async fn bad_input_is_named_and_the_broker_keeps_serving() {
    let mut b = TestBroker::start_with(|c| c.core.max_message_size = 1024).await;
    let cases: Vec<(pb::Message, pb::Code, &str)> = vec![
        (
            msg("Big", &vec![7u8; 2048], pb::MessageType::Normal, "1"),
            pb::Code::MessageBodyTooLarge,
            "MESSAGE_TOO_LARGE",
        ),
        (
            msg("bad topic!", b"x", pb::MessageType::Normal, "2"),
            pb::Code::IllegalTopic,
            "INVALID_TOPIC",
        ),
        (
            msg(
                "RMQ_SYS_TRANS_HALF_TOPIC",
                b"x",
                pb::MessageType::Normal,
                "3",
            ),
            pb::Code::IllegalTopic,
            "RESERVED_TOPIC",
        ),
        (
            msg("Empty", b"", pb::MessageType::Normal, "4"),
            pb::Code::MessageBodyEmpty,
            "EMPTY_BODY",
        ),
        (
            pb::Message {
                topic: None,
                ..msg("x", b"x", pb::MessageType::Normal, "5")
            },
            pb::Code::BadRequest,
            "messages[0].topic",
        ),
        (
            pb::Message {
                system_properties: None,
                ..msg("x", b"x", pb::MessageType::Normal, "6")
            },
            pb::Code::BadRequest,
            "system_properties",
        ),
    ];
    for (m, code, text) in cases {
        let r = send(&mut b.client, vec![m]).await;
        let s = r.status.unwrap();
        assert_eq!(s.code, code as i32, "{text}: {}", s.message);
        assert!(
            s.message.contains(text),
            "`{}` should name {text}",
            s.message
        );
        assert_eq!(
            r.entries.len(),
            1,
            "one entry per message, with the failure"
        );
    }
    let r = send(&mut b.client, vec![]).await;
    assert_eq!(r.status.unwrap().code, pb::Code::BadRequest as i32);
    // Unknown and malformed transaction ids.
    let s = end_txn(
        &mut b.client,
        "T",
        "00000000000000FF",
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceClient,
    )
    .await;
    assert_eq!(s.code, pb::Code::InvalidTransactionId as i32);
    assert!(
        s.message.contains("UNKNOWN_TRANSACTION") && s.message.contains("00000000000000FF"),
        "{}",
        s.message
    );
    let s = end_txn(
        &mut b.client,
        "T",
        "not-a-txn",
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceClient,
    )
    .await;
    // A transaction id is a message id (RocketMQ's form): one no half has is unknown.
    assert_eq!(s.code, pb::Code::InvalidTransactionId as i32);
    assert!(
        s.message.contains("UNKNOWN_TRANSACTION") && s.message.contains("not-a-txn"),
        "{}",
        s.message
    );
    for bad in [String::new(), "x".repeat(129)] {
        let s = end_txn(
            &mut b.client,
            "T",
            &bad,
            pb::TransactionResolution::Commit,
            pb::TransactionSource::SourceClient,
        )
        .await;
        assert_eq!(s.code, pb::Code::InvalidTransactionId as i32);
        assert!(
            s.message.contains("MALFORMED_TRANSACTION_ID"),
            "{}",
            s.message
        );
    }
    // A batch holding a transactional message.
    let r = send(
        &mut b.client,
        vec![
            msg("T", b"a", pb::MessageType::Transaction, "7"),
            msg("T", b"b", pb::MessageType::Transaction, "8"),
        ],
    )
    .await;
    assert!(r.status.unwrap().message.contains("batch"));
    // Receipt handles that are not.
    let s = ack_handle(&mut b.client, "T", "G", "garbage").await;
    assert_eq!(s.code, pb::Code::InvalidReceiptHandle as i32);
    // Receive without a group, and with SQL.
    let r = b
        .client
        .receive_message(pb::ReceiveMessageRequest {
            group: None,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let first = tokio_stream::StreamExt::collect::<Vec<_>>(r).await;
    match &first[0].as_ref().unwrap().content {
        Some(pb::receive_message_response::Content::Status(s)) => {
            assert_eq!(s.code, pb::Code::BadRequest as i32);
            assert!(s.message.contains("group"), "{}", s.message);
        }
        other => panic!("{other:?}"),
    }
    // A body larger than any gRPC frame the broker accepts: a gRPC status, not a crash.
    let huge = msg("Huge", &vec![1u8; 10 << 20], pb::MessageType::Normal, "9");
    let e = b
        .client
        .send_message(pb::SendMessageRequest {
            messages: vec![huge],
        })
        .await
        .unwrap_err();
    assert!(
        e.message().contains("message length too large") || e.message().contains("too large"),
        "{e:?}"
    );
    // Still serving, and nothing acknowledged was lost.
    send_ok(
        &mut b.client,
        msg("Fine", b"ok", pb::MessageType::Normal, "10"),
    )
    .await;
    assert_eq!(
        receive(&mut b.client, "Fine", "G", 4, 10_000, 1_000)
            .await
            .messages
            .len(),
        1
    );
    b.stop().await;
}

#[tokio::test]
async fn declared_topics_without_auto_create() {
    let mut b = TestBroker::start_with(|c| {
        c.core.auto_create_topics = false;
        c.topics = vec![TopicDecl {
            name: "OnlyTx".into(),
            queues: Some(2),
            message_types: Some(vec![TopicMessageType::Transaction]),
        }];
    })
    .await;
    let r = b
        .client
        .query_route(pb::QueryRouteRequest {
            topic: res("OnlyTx"),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.message_queues.len(), 2);
    assert_eq!(
        r.message_queues[0].accept_message_types,
        vec![pb::MessageType::Transaction as i32]
    );
    let r = b
        .client
        .query_route(pb::QueryRouteRequest {
            topic: res("Nope"),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, pb::Code::TopicNotFound as i32);
    let r = send(
        &mut b.client,
        vec![msg("Nope", b"x", pb::MessageType::Normal, "1")],
    )
    .await;
    let s = r.status.unwrap();
    assert_eq!(s.code, pb::Code::TopicNotFound as i32);
    assert!(s.message.contains("UNKNOWN_TOPIC"), "{}", s.message);
    // Wrong message type for the topic.
    let r = send(
        &mut b.client,
        vec![msg("OnlyTx", b"x", pb::MessageType::Normal, "2")],
    )
    .await;
    let s = r.status.unwrap();
    assert_eq!(s.code, pb::Code::MessagePropertyConflictWithType as i32);
    assert!(
        s.message.contains("accepts TRANSACTION") && s.message.contains("not NORMAL"),
        "{}",
        s.message
    );
    let e = send_ok(
        &mut b.client,
        msg("OnlyTx", b"x", pb::MessageType::Transaction, "3"),
    )
    .await;
    assert!(!e.transaction_id.is_empty());
    b.stop().await;
}

#[tokio::test]
async fn second_broker_on_the_same_directory_is_refused() {
    let b = TestBroker::start().await;
    let cfg = test_config(b.dir.path());
    let err = rocklet_broker::server::start(cfg, Arc::new(rocklet_broker::clock::SystemClock))
        .await
        .unwrap_err();
    assert!(
        err.contains("in use by another process") && err.contains("another rocklet broker"),
        "{err}"
    );
    b.stop().await;
}

#[tokio::test]
async fn sync_flush_commits_concurrent_sends_in_groups() {
    let b = TestBroker::start_with(|c| c.core.flush = FlushMode::Sync).await;
    let addr = b.addr();
    let mut tasks = Vec::new();
    for i in 0..8 {
        tasks.push(tokio::spawn(async move {
            let mut c = connect(addr).await;
            for j in 0..25 {
                send_ok(
                    &mut c,
                    msg(
                        "SyncTopic",
                        format!("{i}-{j}").as_bytes(),
                        pb::MessageType::Normal,
                        &format!("S{i}-{j}"),
                    ),
                )
                .await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let core = b.broker.as_ref().unwrap().core.clone();
    let (stats, end, synced) = core
        .inspect(|b| (b.stats(), b.log_end(), b.log_synced()))
        .await
        .unwrap();
    assert_eq!(stats.messages_stored, 200);
    assert_eq!(synced, end, "every acknowledged byte is durable");
    assert!(
        stats.syncs < 200,
        "group commit: {} fsyncs for 200 sends",
        stats.syncs
    );
    assert!(b.broker.as_ref().unwrap().metrics.fsync_latency.count() > 0);
    b.stop().await;
}

#[tokio::test]
async fn manual_clock_drives_the_transaction_timeout() {
    let clock = ManualClock::new(1_700_000_000_000);
    let mut b = TestBroker::start_clock(|_| {}, Arc::new(clock.clone())).await;
    let mut producer = Telemetry::producer(&mut b.client, &["ClockTopic"]).await;
    let e = send_ok(
        &mut b.client,
        msg("ClockTopic", b"c", pb::MessageType::Transaction, "K1"),
    )
    .await;
    // Real time passes but the broker's clock does not: no check.
    assert!(producer
        .next_check(Duration::from_millis(700))
        .await
        .is_none());
    clock.advance(301);
    b.broker.as_ref().unwrap().core.tick();
    let check = producer
        .next_check(Duration::from_secs(3))
        .await
        .expect("due once the clock moved");
    assert_eq!(check.transaction_id, e.transaction_id);
    b.stop().await;
}

#[tokio::test]
async fn admin_lists_and_resolves_pending_transactions() {
    let mut b = TestBroker::start().await;
    let e = send_ok(
        &mut b.client,
        msg("AdminTopic", b"stuck", pb::MessageType::Transaction, "M1"),
    )
    .await;
    assert_eq!(e.transaction_id, "M1");
    // The admin names a transaction by its log offset (16 hex digits), as it lists it.
    let core = b.broker.as_ref().unwrap().core.clone();
    let txn = core.inspect(|b| b.pending_transactions(1)).await.unwrap()[0]
        .txn
        .to_string();
    let addr = b.addr().to_string();
    let topics = rocklet_broker::admin::client::topics(&addr).await.unwrap();
    assert!(topics.contains("AdminTopic"), "{topics}");
    let pending = rocklet_broker::admin::client::pending(&addr, 100)
        .await
        .unwrap();
    assert!(
        pending.contains(&txn) && pending.contains("%TXN%AdminTopic") && pending.contains("M1"),
        "{pending}"
    );
    assert!(pending.contains("1 pending"), "{pending}");
    let out = rocklet_broker::admin::client::resolve(&addr, &txn, "commit")
        .await
        .unwrap();
    assert!(out.contains("commit applied"), "{out}");
    let pending = rocklet_broker::admin::client::pending(&addr, 100)
        .await
        .unwrap();
    assert!(pending.contains("0 pending"), "{pending}");
    let err = rocklet_broker::admin::client::resolve(&addr, &txn, "rollback")
        .await
        .unwrap_err();
    assert!(err.contains("TRANSACTION_ALREADY_RESOLVED"), "{err}");
    let got = receive(&mut b.client, "AdminTopic", "G", 1, 10_000, 1_000).await;
    assert_eq!(got.messages[0].body, b"stuck");
    b.stop().await;
}

#[tokio::test]
async fn metrics_are_served_as_prometheus_text() {
    let mut b =
        TestBroker::start_with(|c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let e = send_ok(
        &mut b.client,
        msg("MetricTopic", b"m", pb::MessageType::Transaction, "Q1"),
    )
    .await;
    end_txn(
        &mut b.client,
        "MetricTopic",
        &e.transaction_id,
        pb::TransactionResolution::Commit,
        pb::TransactionSource::SourceClient,
    )
    .await;
    // A rolled-back one: prepared, never readable.
    let r = send_ok(
        &mut b.client,
        msg("MetricTopic", b"r", pb::MessageType::Transaction, "Q2"),
    )
    .await;
    end_txn(
        &mut b.client,
        "MetricTopic",
        &r.transaction_id,
        pb::TransactionResolution::Rollback,
        pb::TransactionSource::SourceClient,
    )
    .await;
    let addr = b.broker.as_ref().unwrap().metrics_addr.unwrap();
    let mut sock = tokio::net::TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    sock.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    sock.read_to_string(&mut text).await.unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    for needle in [
        "rocklet_transactions_committed_total 1",
        "rocklet_transactions_rolled_back_total 1",
        "rocklet_transactions_prepared_total 2",
        // The committed message became readable in its topic (as its help text says); the
        // rolled-back one did not.
        "rocklet_messages_stored_total 1",
        "rocklet_half_backlog 0",
        "rocklet_delay_backlog 0",
        "rocklet_end_transaction_seconds_count 2",
        "rocklet_requests_total{rpc=\"SendMessage\"} 2",
        "rocklet_fsync_seconds_bucket",
        "rocklet_transaction_checks_sent_total 0",
    ] {
        assert!(text.contains(needle), "missing `{needle}` in\n{text}");
    }
    b.stop().await;
}

#[tokio::test]
async fn assignment_heartbeat_and_termination() {
    let mut b = TestBroker::start().await;
    let r = b
        .client
        .query_assignment(pb::QueryAssignmentRequest {
            topic: res("AssignTopic"),
            group: res("G"),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, OK);
    assert_eq!(r.assignments.len(), 4);
    let q = r.assignments[0].message_queue.as_ref().unwrap();
    assert_eq!(q.permission, pb::Permission::ReadWrite as i32);
    let addr = &q
        .broker
        .as_ref()
        .unwrap()
        .endpoints
        .as_ref()
        .unwrap()
        .addresses[0];
    assert_eq!(
        addr.port,
        i32::from(b.addr().port()),
        "assignments point at this broker"
    );
    let r = b
        .client
        .query_assignment(pb::QueryAssignmentRequest {
            topic: res("bad topic"),
            group: res("G"),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, pb::Code::IllegalTopic as i32);
    let h = b
        .client
        .heartbeat(pb::HeartbeatRequest {
            group: res("G"),
            client_type: pb::ClientType::SimpleConsumer as i32,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(h.status.unwrap().code, OK);
    let n = b
        .client
        .notify_client_termination(pb::NotifyClientTerminationRequest { group: res("G") })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(n.status.unwrap().code, OK);
    b.stop().await;
}

#[tokio::test]
async fn forward_to_dead_letter_queue() {
    let mut b = TestBroker::start().await;
    send_ok(
        &mut b.client,
        msg("DlqTopic", b"poison", pb::MessageType::Normal, "P1"),
    )
    .await;
    let got = receive(&mut b.client, "DlqTopic", "G", 1, 10_000, 1_000).await;
    let r = b
        .client
        .forward_message_to_dead_letter_queue(pb::ForwardMessageToDeadLetterQueueRequest {
            group: res("G"),
            topic: res("DlqTopic"),
            receipt_handle: handle(&got.messages[0]),
            message_id: "P1".into(),
            delivery_attempt: 1,
            max_delivery_attempts: 1,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, OK);
    let dlq = receive(&mut b.client, "%DLQ%G", "Ops", 1, 10_000, 1_000).await;
    assert_eq!(dlq.messages.len(), 1);
    assert_eq!(dlq.messages[0].body, b"poison");
    // Gone from the original topic: not redelivered.
    assert!(receive(&mut b.client, "DlqTopic", "G", 1, 10_000, 300)
        .await
        .messages
        .is_empty());
    b.stop().await;
}

#[tokio::test]
async fn telemetry_answers_settings_twice_and_stays_open() {
    let mut b = TestBroker::start().await;
    let mut t = Telemetry::producer(&mut b.client, &["SetTopic"]).await;
    let again = tokio::time::timeout(
        Duration::from_secs(3),
        tokio_stream::StreamExt::next(&mut t.inbound),
    )
    .await
    .expect("settings sent again")
    .unwrap()
    .unwrap();
    let Some(pb::telemetry_command::Command::Settings(s)) = again.command else {
        panic!("{again:?}")
    };
    let Some(pb::settings::PubSub::Publishing(p)) = s.pub_sub else {
        panic!("publishing settings")
    };
    assert_eq!(p.max_body_size, 4 << 20);
    let policy = s.backoff_policy.unwrap();
    assert!(
        matches!(
            policy.strategy,
            Some(pb::retry_policy::Strategy::ExponentialBackoff(_))
        ),
        "Node needs exponential_backoff"
    );
    // The stream stays open: nothing more arrives, and it does not end.
    let more = tokio::time::timeout(
        Duration::from_millis(1500),
        tokio_stream::StreamExt::next(&mut t.inbound),
    )
    .await;
    assert!(more.is_err(), "stream ended or sent more: {more:?}");
    b.stop().await;
}

#[tokio::test]
async fn a_producer_that_did_not_declare_the_topic_is_checked_after_sending_to_it() {
    let mut b = TestBroker::start().await;
    let mut producer = Telemetry::producer_as(&mut b.client, "late-declarer", &[]).await;
    let mut req = tonic::Request::new(pb::SendMessageRequest {
        messages: vec![msg("LateTopic", b"l", pb::MessageType::Transaction, "L1")],
    });
    req.metadata_mut()
        .insert("x-mq-client-id", "late-declarer".parse().unwrap());
    let r = b.client.send_message(req).await.unwrap().into_inner();
    assert_eq!(r.status.unwrap().code, OK);
    let txn = r.entries[0].transaction_id.clone();
    let check = producer
        .next_check(Duration::from_secs(5))
        .await
        .expect("checked");
    assert_eq!(check.transaction_id, txn);
    b.stop().await;
}

/// Sends raw bytes as a request body: what a broken client or a fuzzer sends.
#[derive(Debug, Clone, Copy)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        prost::bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let n = prost::bytes::Buf::remaining(src);
        Ok(Some(prost::bytes::Buf::copy_to_bytes(src, n).to_vec()))
    }
}

#[tokio::test]
async fn undecodable_requests_get_a_grpc_status_and_the_broker_keeps_serving() {
    let mut b = TestBroker::start().await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", b.addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut raw = tonic::client::Grpc::new(channel);
    for (path, body) in [
        (
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            vec![0xff, 0xff, 0xff],
        ),
        (
            "/apache.rocketmq.v2.MessagingService/EndTransaction",
            vec![0x0a, 0x10, 0x01],
        ),
        (
            "/apache.rocketmq.v2.MessagingService/AckMessage",
            vec![0x1a, 0x05, 0x0a, 0x7f],
        ),
    ] {
        raw.ready().await.unwrap();
        let e = raw
            .unary::<Vec<u8>, Vec<u8>, _>(
                tonic::Request::new(body),
                path.parse().unwrap(),
                RawCodec,
            )
            .await
            .unwrap_err();
        assert!(
            e.message().to_lowercase().contains("decode"),
            "{path}: {e:?}"
        );
    }
    // An RPC the broker does not serve.
    raw.ready().await.unwrap();
    let e = raw
        .unary::<Vec<u8>, Vec<u8>, _>(
            tonic::Request::new(Vec::new()),
            "/apache.rocketmq.v2.MessagingService/PullMessage"
                .parse()
                .unwrap(),
            RawCodec,
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented);
    send_ok(
        &mut b.client,
        msg("StillUp", b"ok", pb::MessageType::Normal, "S1"),
    )
    .await;
    b.stop().await;
}

#[tokio::test]
async fn async_flush_syncs_within_the_interval() {
    let mut b = TestBroker::start_with(|c| c.core.flush_interval_ms = 100).await;
    send_ok(
        &mut b.client,
        msg("AsyncTopic", b"a", pb::MessageType::Normal, "A1"),
    )
    .await;
    let core = b.broker.as_ref().unwrap().core.clone();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (end, synced, syncs) = core
        .inspect(|b| (b.log_end(), b.log_synced(), b.stats().syncs))
        .await
        .unwrap();
    assert!(end > 0);
    assert_eq!(
        synced, end,
        "fsynced by the interval, with no request asking"
    );
    assert!(syncs >= 1);
    b.stop().await;
}
