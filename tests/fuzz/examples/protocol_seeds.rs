//! Writes seed inputs for the protocol targets: real request sequences a client sends
//! (heartbeat, sends single / V2 / batch / transactional, END_TRANSACTION, pulls, offsets,
//! send back; gRPC sends, receives, acks, transactions, FIFO, delays, routes).
//! `cargo run --example protocol_seeds -- <dir>` makes `<dir>/<target>/<name>`.
use std::collections::BTreeMap;
use std::path::Path;

use prost::Message as _;
use rocklet_broker::grpc::convert::{duration, timestamp};
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::remoting::codec::{RemotingCommand, SerializeType};
use rocklet_broker::remoting::codes::code;
use rocklet_fuzz::grpc::{record, Rpc, PATCH};
use rocklet_fuzz::host::START_MS;
use rocklet_fuzz::remoting::answers;

fn cmd(code: i32, ext: &[(&str, &str)], body: &[u8], ser: SerializeType) -> Vec<u8> {
    let ext: BTreeMap<String, String> = ext
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    let mut c = RemotingCommand::request(code, ext, body.to_vec());
    c.serialize = ser;
    c.encode()
}

fn props(p: &[(&str, &str)]) -> String {
    p.iter().map(|(k, v)| format!("{k}\u{1}{v}\u{2}")).collect()
}

fn batch(bodies: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bodies {
        let p = props(&[("KEYS", "k")]);
        let total = 20 + b.len() + 2 + p.len();
        out.extend_from_slice(&(total as u32).to_be_bytes());
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&(b.len() as u32).to_be_bytes());
        out.extend_from_slice(b);
        out.extend_from_slice(&(p.len() as u16).to_be_bytes());
        out.extend_from_slice(p.as_bytes());
    }
    out
}

fn pull(topic: &str, queue: &str, offset: &str, ser: SerializeType) -> Vec<u8> {
    cmd(
        code::PULL_MESSAGE,
        &[
            ("consumerGroup", "CG"),
            ("topic", topic),
            ("queueId", queue),
            ("queueOffset", offset),
            ("maxMsgNums", "32"),
            ("sysFlag", "3"),
            ("commitOffset", "0"),
            ("suspendTimeoutMillis", "15000"),
            ("subscription", "*"),
        ],
        b"",
        ser,
    )
}

fn remoting() -> Vec<(&'static str, Vec<u8>)> {
    let j = SerializeType::Json;
    let b = SerializeType::RocketMq;
    let heartbeat = br#"{"clientID":"127.0.0.1@1","producerDataSet":[{"groupName":"PG"}],"consumerDataSet":[{"groupName":"CG","consumeType":"CONSUME_PASSIVELY","subscriptionDataSet":[{"topic":"T0","subString":"*"}]}]}"#;
    let mut out = Vec::new();
    // Produce and consume, JSON headers.
    let mut s = cmd(code::HEART_BEAT, &[], heartbeat, j);
    let p = props(&[
        ("TAGS", "a"),
        ("KEYS", "k1 k2"),
        ("UNIQ_KEY", "U1"),
        ("WAIT", "true"),
    ]);
    s.extend(cmd(
        code::SEND_MESSAGE_V2,
        &[("a", "PG"), ("b", "T0"), ("e", "0"), ("f", "0"), ("i", &p)],
        b"hello",
        j,
    ));
    s.extend(cmd(
        code::SEND_MESSAGE,
        &[
            ("producerGroup", "PG"),
            ("topic", "T0"),
            ("queueId", "1"),
            ("sysFlag", "0"),
            ("bornTimestamp", "1700000000000"),
            ("flag", "0"),
            ("properties", ""),
        ],
        b"v1",
        j,
    ));
    s.extend(pull("T0", "0", "0", j));
    s.extend(cmd(
        code::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", "CG"),
            ("topic", "T0"),
            ("queueId", "0"),
            ("commitOffset", "1"),
        ],
        b"",
        j,
    ));
    s.extend(cmd(
        code::QUERY_CONSUMER_OFFSET,
        &[("consumerGroup", "CG"), ("topic", "T0"), ("queueId", "0")],
        b"",
        j,
    ));
    s.extend(cmd(
        code::GET_MAX_OFFSET,
        &[("topic", "T0"), ("queueId", "0")],
        b"",
        j,
    ));
    s.extend(cmd(
        code::GET_MIN_OFFSET,
        &[("topic", "T0"), ("queueId", "0")],
        b"",
        j,
    ));
    s.extend(cmd(
        code::GET_CONSUMER_LIST_BY_GROUP,
        &[("consumerGroup", "CG")],
        b"",
        j,
    ));
    s.extend(cmd(
        code::GET_ROUTEINFO_BY_TOPIC,
        &[("topic", "T0")],
        b"",
        j,
    ));
    out.push(("produce_consume_json", s));

    // Batch and send back, binary headers.
    let mut s = cmd(
        code::SEND_BATCH_MESSAGE,
        &[
            ("a", "PG"),
            ("b", "T1"),
            ("e", "1"),
            ("f", "0"),
            ("i", ""),
            ("m", "true"),
        ],
        &batch(&[b"one", b"two", b"three"]),
        b,
    );
    s.extend(pull("T1", "1", "0", b));
    let first = answers(&s);
    let msg_id = first
        .first()
        .and_then(|r| r.ext.get("msgId"))
        .expect("a batch answer")
        .split(',')
        .next()
        .expect("an id")
        .to_string();
    let offset = u64::from_str_radix(&msg_id[msg_id.len() - 16..], 16).expect("hex offset");
    s.extend(cmd(
        code::CONSUMER_SEND_MSG_BACK,
        &[
            ("offset", &offset.to_string()),
            ("group", "CG"),
            ("delayLevel", "0"),
            ("originTopic", "T1"),
            ("maxReconsumeTimes", "16"),
        ],
        b"",
        b,
    ));
    s.extend(pull("%RETRY%CG", "0", "0", b));
    s.extend(cmd(
        code::UNREGISTER_CLIENT,
        &[
            ("clientID", "127.0.0.1@1"),
            ("producerGroup", "PG"),
            ("consumerGroup", "CG"),
        ],
        b"",
        b,
    ));
    out.push(("batch_send_back_binary", s));

    // A transaction committed, one rolled back, one left to the check; delays.
    let half = |body: &[u8]| {
        let p = props(&[("TRAN_MSG", "true"), ("PGROUP", "PG"), ("UNIQ_KEY", "H")]);
        cmd(
            code::SEND_MESSAGE_V2,
            &[("a", "PG"), ("b", "T0"), ("e", "0"), ("f", "4"), ("i", &p)],
            body,
            j,
        )
    };
    let mut s = cmd(code::HEART_BEAT, &[], heartbeat, j);
    s.extend(half(b"h1"));
    s.extend(half(b"h2"));
    s.extend(half(b"h3"));
    let txns: Vec<u64> = answers(&s)
        .iter()
        .filter_map(|r| r.ext.get("transactionId"))
        .map(|t| u64::from_str_radix(t, 16).expect("hex txn"))
        .collect();
    assert_eq!(txns.len(), 3, "three halves prepared");
    for (t, kind) in txns.iter().zip(["8", "12"]) {
        s.extend(cmd(
            code::END_TRANSACTION,
            &[
                ("producerGroup", "PG"),
                ("commitLogOffset", &t.to_string()),
                ("commitOrRollback", kind),
                ("fromTransactionCheck", "false"),
            ],
            b"",
            j,
        ));
    }
    let p = props(&[("DELAY", "1")]);
    s.extend(cmd(
        code::SEND_MESSAGE_V2,
        &[("a", "PG"), ("b", "T1"), ("e", "0"), ("i", &p)],
        b"delayed",
        j,
    ));
    let p = props(&[("TIMER_DELAY_MS", "500")]);
    s.extend(cmd(
        code::SEND_MESSAGE_V2,
        &[("a", "PG"), ("b", "T1"), ("e", "0"), ("i", &p)],
        b"timer",
        j,
    ));
    s.extend(pull("T0", "0", "0", j));
    out.push(("transactions_delays", s));
    out
}

fn res(name: &str) -> Option<pb::Resource> {
    Some(pb::Resource {
        resource_namespace: String::new(),
        name: name.into(),
    })
}

fn message(topic: &str, queue: i32, body: &[u8], ty: pb::MessageType) -> pb::Message {
    pb::Message {
        topic: res(topic),
        user_properties: [("k".to_string(), "v".to_string())].into(),
        system_properties: Some(pb::SystemProperties {
            tag: Some("a".into()),
            keys: vec!["key".into()],
            message_id: "01AABBCC".into(),
            message_type: ty as i32,
            born_timestamp: Some(timestamp(START_MS)),
            born_host: "10.0.0.1".into(),
            queue_id: queue,
            ..Default::default()
        }),
        body: body.to_vec(),
    }
}

fn receive(topic: &str, batch: i32) -> Vec<u8> {
    pb::ReceiveMessageRequest {
        group: res("CG"),
        message_queue: Some(pb::MessageQueue {
            topic: res(topic),
            ..Default::default()
        }),
        filter_expression: Some(pb::FilterExpression {
            r#type: pb::FilterType::Tag as i32,
            expression: "*".into(),
        }),
        batch_size: batch,
        invisible_duration: Some(duration(30_000)),
        auto_renew: false,
        long_polling_timeout: Some(duration(20_000)),
        attempt_id: None,
    }
    .encode_to_vec()
}

fn grpc() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    let send = |m: Vec<pb::Message>| pb::SendMessageRequest { messages: m }.encode_to_vec();
    let ack = pb::AckMessageRequest {
        group: res("CG"),
        topic: res("T0"),
        entries: vec![pb::AckMessageEntry {
            message_id: "01AABBCC".into(),
            receipt_handle: "x".into(),
        }],
    }
    .encode_to_vec();

    // Send, receive, ack.
    let mut s = record(
        Rpc::Route,
        0,
        &pb::QueryRouteRequest {
            topic: res("T0"),
            endpoints: None,
        }
        .encode_to_vec(),
    );
    s.extend(record(
        Rpc::Send,
        0x40,
        &send(vec![message("T0", 0, b"hello", pb::MessageType::Normal)]),
    ));
    s.extend(record(
        Rpc::Send,
        0,
        &send(vec![
            message("T0", 1, b"b1", pb::MessageType::Normal),
            message("T0", 1, b"b2", pb::MessageType::Normal),
        ]),
    ));
    s.extend(record(Rpc::Receive, 0x20 | 10, &receive("T0", 32)));
    s.extend(record(Rpc::Ack, PATCH, &ack));
    s.extend(record(
        Rpc::Heartbeat,
        0,
        &pb::HeartbeatRequest {
            group: res("CG"),
            client_type: 2,
        }
        .encode_to_vec(),
    ));
    out.push(("send_receive_ack", s));

    // Transactions: commit one, the other is checked after its timeout.
    let mut s = record(
        Rpc::Send,
        0x40,
        &send(vec![message(
            "T1",
            0,
            b"half",
            pb::MessageType::Transaction,
        )]),
    );
    s.extend(record(
        Rpc::Send,
        0x40,
        &send(vec![message(
            "T1",
            0,
            b"half2",
            pb::MessageType::Transaction,
        )]),
    ));
    let end = pb::EndTransactionRequest {
        topic: res("T1"),
        message_id: "01AABBCC".into(),
        transaction_id: "0000000000000000".into(),
        resolution: pb::TransactionResolution::Commit as i32,
        source: pb::TransactionSource::SourceClient as i32,
        trace_context: String::new(),
    }
    .encode_to_vec();
    s.extend(record(Rpc::End, PATCH, &end));
    s.extend(record(Rpc::Advance, 0, &300u16.to_le_bytes()));
    s.extend(record(Rpc::Receive, 0, &receive("T1", 4)));
    out.push(("transaction", s));

    // FIFO, change invisible, forward to DLQ, delays, assignment, termination.
    let mut fifo = message("T2", 0, b"f1", pb::MessageType::Fifo);
    if let Some(sp) = fifo.system_properties.as_mut() {
        sp.message_group = Some("g".into());
    }
    let mut delayed = message("T2", 1, b"later", pb::MessageType::Delay);
    if let Some(sp) = delayed.system_properties.as_mut() {
        sp.delivery_timestamp = Some(timestamp(START_MS + 1_000));
    }
    let mut s = record(Rpc::Send, 0, &send(vec![fifo.clone()]));
    s.extend(record(Rpc::Send, 0, &send(vec![fifo])));
    s.extend(record(Rpc::Send, 0, &send(vec![delayed])));
    s.extend(record(Rpc::Receive, 0, &receive("T2", 1)));
    let change = pb::ChangeInvisibleDurationRequest {
        group: res("CG"),
        topic: res("T2"),
        receipt_handle: "x".into(),
        invisible_duration: Some(duration(1_000)),
        message_id: "01AABBCC".into(),
    }
    .encode_to_vec();
    s.extend(record(Rpc::ChangeInvisible, PATCH, &change));
    s.extend(record(Rpc::Advance, 0, &200u16.to_le_bytes()));
    s.extend(record(Rpc::Receive, 0, &receive("T2", 8)));
    let fwd = pb::ForwardMessageToDeadLetterQueueRequest {
        group: res("CG"),
        topic: res("T2"),
        receipt_handle: "x".into(),
        message_id: "01AABBCC".into(),
        delivery_attempt: 1,
        max_delivery_attempts: 16,
    }
    .encode_to_vec();
    s.extend(record(Rpc::Forward, PATCH | 1, &fwd));
    s.extend(record(
        Rpc::Assignment,
        0,
        &pb::QueryAssignmentRequest {
            topic: res("T2"),
            group: res("CG"),
            endpoints: None,
        }
        .encode_to_vec(),
    ));
    s.extend(record(
        Rpc::Terminate,
        0x40,
        &pb::NotifyClientTerminationRequest { group: res("CG") }.encode_to_vec(),
    ));
    out.push(("fifo_invisible_dlq_delay", s));
    out
}

fn main() {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "seeds".into());
    let dir = Path::new(&dir);
    for (target, seeds) in [("remoting_frames", remoting()), ("grpc_requests", grpc())] {
        let d = dir.join(target);
        std::fs::create_dir_all(&d).expect("seed directory");
        for (name, bytes) in seeds {
            std::fs::write(d.join(name), bytes).expect("seed written");
        }
    }
}
