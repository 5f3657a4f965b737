//! What official RocketMQ 4 clients and mqadmin rely on beyond plain sends and pulls (issue
//! #15): the store host in records and send results, LITE_PULL_MESSAGE, consumer-id change
//! notices, transaction ids, retry-topic offsets and the admin request codes. A minimal v4
//! client over the broker's own codec; the official Java and Go clients run in
//! tests/ci/fidelity.sh.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::v4::heartbeat_body;
use common::TestBroker;
use rocklet_broker::remoting::codec::{self, RemotingCommand, SerializeType};
use rocklet_broker::remoting::message::offset_msg_id;
use rocklet_core::record::{self, Decoded, Host};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct V4 {
    s: TcpStream,
    opaque: i32,
    /// Requests the broker sent us (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE).
    pushed: Vec<RemotingCommand>,
}

impl V4 {
    async fn connect(addr: SocketAddr) -> Self {
        V4 {
            s: TcpStream::connect(addr).await.unwrap(),
            opaque: 0,
            pushed: Vec::new(),
        }
    }

    async fn read(&mut self) -> Option<RemotingCommand> {
        let mut len = [0u8; 4];
        self.s.read_exact(&mut len).await.ok()?;
        let n = codec::frame_length(len).unwrap();
        let mut buf = vec![0; n];
        self.s.read_exact(&mut buf).await.ok()?;
        Some(codec::decode_frame(&buf).unwrap())
    }

    async fn call(&mut self, code: i32, ext: &[(&str, &str)], body: Vec<u8>) -> RemotingCommand {
        self.opaque += 1;
        let mut c = RemotingCommand::request(code, fields(ext), body);
        c.opaque = self.opaque;
        c.serialize = SerializeType::Json;
        self.s.write_all(&c.encode()).await.unwrap();
        loop {
            let r = tokio::time::timeout(Duration::from_secs(30), self.read())
                .await
                .expect("answer in time")
                .expect("connection open");
            if r.is_response() && r.opaque == self.opaque {
                return r;
            }
            if !r.is_response() {
                self.pushed.push(r);
            }
        }
    }

    /// The next request the broker pushes with this code, within `ms`.
    async fn pushed(&mut self, code: i32, ms: u64) -> Option<RemotingCommand> {
        if let Some(i) = self.pushed.iter().position(|c| c.code == code) {
            return Some(self.pushed.remove(i));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
        loop {
            let r = tokio::time::timeout_at(deadline, self.read())
                .await
                .ok()??;
            if !r.is_response() && r.code == code {
                return Some(r);
            }
        }
    }
}

fn fields(ext: &[(&str, &str)]) -> BTreeMap<String, String> {
    ext.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn props(p: &[(&str, &str)]) -> String {
    p.iter().map(|(k, v)| format!("{k}\u{1}{v}\u{2}")).collect()
}

async fn start() -> (TestBroker, SocketAddr, SocketAddr) {
    start_with(|_| {}).await
}

async fn start_with(
    f: impl FnOnce(&mut rocklet_broker::config::BrokerConfig),
) -> (TestBroker, SocketAddr, SocketAddr) {
    let b = TestBroker::start_with(|c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
        c.namesrv_listen = Some("127.0.0.1:0".parse().unwrap());
        c.max_long_polling_ms = 20_000;
        f(c);
    })
    .await;
    let r = b.broker.as_ref().unwrap();
    let (remoting, namesrv) = (r.remoting_addr.unwrap(), r.namesrv_addr.unwrap());
    (b, remoting, namesrv)
}

/// A decoded record of a pull body: (topic, body, properties, offset message id as Java's
/// MessageDecoder computes it from STOREHOST and the physical offset).
type Rec = (String, Vec<u8>, BTreeMap<String, String>, String);

fn records(mut body: &[u8]) -> Vec<Rec> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let Ok(Decoded::Record(r)) = record::decode(body, 1 << 24) else {
            panic!("undecodable record in a pull body");
        };
        let p = r
            .props()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let id = offset_msg_id(r.header.store_host, r.header.phys_offset);
        out.push((r.topic.to_string(), r.body.to_vec(), p, id));
        body = &body[r.total_size as usize..];
    }
    out
}

async fn send(c: &mut V4, topic: &str, body: &str, p: &[(&str, &str)]) -> RemotingCommand {
    let p = props(p);
    let r = c
        .call(
            310,
            &[("a", "PG"), ("b", topic), ("e", "0"), ("f", "0"), ("i", &p)],
            body.as_bytes().to_vec(),
        )
        .await;
    assert_eq!(r.code, 0, "send refused: {:?}", r.remark);
    r
}

async fn pull_code(
    c: &mut V4,
    code: i32,
    group: &str,
    topic: &str,
    offset: u64,
) -> RemotingCommand {
    let off = offset.to_string();
    c.call(
        code,
        &[
            ("consumerGroup", group),
            ("topic", topic),
            ("queueId", "0"),
            ("queueOffset", &off),
            ("maxMsgNums", "32"),
            ("sysFlag", "0"),
            ("commitOffset", "0"),
            ("suspendTimeoutMillis", "0"),
            ("subscription", "*"),
        ],
        Vec::new(),
    )
    .await
}

#[tokio::test]
async fn send_results_name_the_store_host_consumers_see() {
    let (b, remoting, _) = start().await;
    let mut c = V4::connect(remoting).await;
    let sent = send(&mut c, "StoreHost", "hello", &[("UNIQ_KEY", "U1")]).await;
    let r = pull_code(&mut c, 11, "CG", "StoreHost", 0).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let recs = records(&r.body);
    assert_eq!(recs.len(), 1);
    // The record's STOREHOST is the remoting listener (a free port here, not 10911).
    let Ok(Decoded::Record(rec)) = record::decode(&r.body, 1 << 24) else {
        panic!("undecodable record");
    };
    let std::net::SocketAddr::V4(a) = remoting else {
        panic!("IPv4 listener")
    };
    assert_eq!(
        rec.header.store_host,
        Host::V4(a.ip().octets(), a.port()),
        "STOREHOST is the advertised remoting address"
    );
    assert_eq!(sent.ext["msgId"], recs[0].3, "send result's offsetMsgId");
    b.stop().await;
}

#[tokio::test]
async fn lite_pull_message_is_served_as_pull_message() {
    let (b, remoting, _) = start().await;
    let mut c = V4::connect(remoting).await;
    send(&mut c, "LitePull", "one", &[]).await;
    send(&mut c, "LitePull", "two", &[]).await;
    // DefaultLitePullConsumer sends LITE_PULL_MESSAGE (361) with the lite flag (0x10).
    let r = c
        .call(
            361,
            &[
                ("consumerGroup", "LiteGroup"),
                ("topic", "LitePull"),
                ("queueId", "0"),
                ("queueOffset", "0"),
                ("maxMsgNums", "32"),
                ("sysFlag", "16"),
                ("commitOffset", "0"),
                ("suspendTimeoutMillis", "20000"),
                ("subscription", "*"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(r.ext["nextBeginOffset"], "2");
    let bodies: Vec<Vec<u8>> = records(&r.body).into_iter().map(|r| r.1).collect();
    assert_eq!(bodies, [b"one".to_vec(), b"two".to_vec()]);
    b.stop().await;
}

#[tokio::test]
async fn transaction_id_of_the_send_result_is_the_checked_one() {
    let (b, remoting, _) = start().await;
    let mut c = V4::connect(remoting).await;
    let r = send(
        &mut c,
        "TxnIds",
        "half",
        &[
            ("TRAN_MSG", "true"),
            ("PGROUP", "TxnPG"),
            ("UNIQ_KEY", "7F0000010001ABCD"),
        ],
    )
    .await;
    // As Apache: the send result's transactionId is the message's UNIQ_KEY ...
    assert_eq!(r.ext["transactionId"], "7F0000010001ABCD");
    // ... which is what CHECK_TRANSACTION_STATE names, in its header and as the body's
    // UNIQ_KEY (where clients take checkLocalTransaction's transaction id from).
    let check = c.pushed(39, 10_000).await.expect("a check");
    assert_eq!(check.ext["transactionId"], "7F0000010001ABCD");
    let recs = records(&check.body);
    assert_eq!(recs[0].2["UNIQ_KEY"], "7F0000010001ABCD");
    // END_TRANSACTION still names the half by its offset.
    let offset = check.ext["commitLogOffset"].clone();
    let r = c
        .call(
            37,
            &[
                ("producerGroup", "TxnPG"),
                ("tranStateTableOffset", "0"),
                ("commitLogOffset", &offset),
                ("commitOrRollback", "8"),
                ("fromTransactionCheck", "true"),
                ("msgId", "7F0000010001ABCD"),
                ("transactionId", "7F0000010001ABCD"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = pull_code(&mut c, 11, "TxnCG", "TxnIds", 0).await;
    assert_eq!(records(&r.body).len(), 1, "committed");
    b.stop().await;
}

#[tokio::test]
async fn members_are_told_when_their_consumer_group_changes() {
    let (b, remoting, _) = start().await;
    let mut a = V4::connect(remoting).await;
    let r = a
        .call(34, &[], heartbeat_body("client-a", "NotifyG", "NotifyT"))
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // Its own arrival changed the group too.
    let n = a
        .pushed(40, 2_000)
        .await
        .expect("notified of its own joining");
    assert_eq!(n.ext["consumerGroup"], "NotifyG");
    assert!(n.is_oneway());
    // Another heartbeat of the same client changes nothing.
    a.call(34, &[], heartbeat_body("client-a", "NotifyG", "NotifyT"))
        .await;
    assert!(a.pushed(40, 300).await.is_none(), "no change, no notice");

    // A second member joins: both are told.
    let mut c = V4::connect(remoting).await;
    c.call(34, &[], heartbeat_body("client-c", "NotifyG", "NotifyT"))
        .await;
    let n = a.pushed(40, 2_000).await.expect("the first member is told");
    assert_eq!(n.ext["consumerGroup"], "NotifyG");
    assert!(c.pushed(40, 2_000).await.is_some());
    let r = a
        .call(38, &[("consumerGroup", "NotifyG")], Vec::new())
        .await;
    let ids: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        ids["consumerIdList"],
        serde_json::json!(["client-a", "client-c"])
    );

    // Its connection closes: the one left is told.
    drop(c);
    assert!(
        a.pushed(40, 2_000).await.is_some(),
        "told of the closed connection"
    );
    // And of an unregister (another member, then it leaves).
    let mut d = V4::connect(remoting).await;
    d.call(34, &[], heartbeat_body("client-d", "NotifyG", "NotifyT"))
        .await;
    assert!(a.pushed(40, 2_000).await.is_some());
    let r = d
        .call(
            35,
            &[("clientID", "client-d"), ("consumerGroup", "NotifyG")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 0);
    assert!(
        a.pushed(40, 2_000).await.is_some(),
        "told of the unregister"
    );
    b.stop().await;
}

#[tokio::test]
async fn retry_topic_offsets_commit_once_the_group_heartbeats() {
    let (b, remoting, _) = start().await;
    let mut c = V4::connect(remoting).await;
    // A push consumer's first heartbeat creates its group's retry topic (as Apache's
    // broker does), so the offsets it persists for %RETRY%<group> are kept.
    let r = c
        .call(34, &[], heartbeat_body("client-r", "RetryG", "RetryT"))
        .await;
    assert_eq!(r.code, 0);
    let r = c
        .call(
            15,
            &[
                ("consumerGroup", "RetryG"),
                ("topic", "%RETRY%RetryG"),
                ("queueId", "0"),
                ("commitOffset", "0"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = c
        .call(
            14,
            &[
                ("consumerGroup", "RetryG"),
                ("topic", "%RETRY%RetryG"),
                ("queueId", "0"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!((r.code, r.ext["offset"].as_str()), (0, "0"));
    // The route names one queue.
    let r = c.call(105, &[("topic", "%RETRY%RetryG")], Vec::new()).await;
    let route: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(route["queueDatas"][0]["readQueueNums"], 1);
    // A topic that does not exist is refused with the reason (not "auto-create is off").
    let r = c
        .call(
            15,
            &[
                ("consumerGroup", "RetryG"),
                ("topic", "NeverSent"),
                ("queueId", "0"),
                ("commitOffset", "0"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 17, "{:?}", r.remark);
    let remark = r.remark.unwrap_or_default();
    assert!(!remark.contains("auto-create"), "{remark}");
    assert!(remark.contains("NeverSent"), "{remark}");
    b.stop().await;
}

#[tokio::test]
async fn admin_requests_are_served_or_refused_by_name() {
    let (b, remoting, namesrv) = start().await;
    let mut c = V4::connect(remoting).await;
    // updateSubGroup -o true declares a FIFO group in the core.
    let body = serde_json::to_vec(&serde_json::json!({
        "groupName": "AdminFifo", "consumeMessageOrderly": true, "consumeEnable": true,
    }))
    .unwrap();
    let r = c.call(200, &[], body).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let core = b.broker.as_ref().unwrap().core.clone();
    assert!(core
        .inspect(|b| b.group_is_fifo("AdminFifo"))
        .await
        .unwrap());
    // updateTopic creates with the queues asked, grows, never shrinks.
    let r = c
        .call(
            17,
            &[
                ("topic", "AdminT"),
                ("readQueueNums", "8"),
                ("writeQueueNums", "8"),
                ("perm", "6"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = c
        .call(
            17,
            &[
                ("topic", "AdminT"),
                ("readQueueNums", "2"),
                ("writeQueueNums", "2"),
            ],
            Vec::new(),
        )
        .await;
    assert!(r.remark.unwrap().contains("cannot remove queues"));
    // SEARCH_OFFSET_BY_TIMESTAMP: the first message stored at or after the time.
    let mut first_offset = String::new();
    for i in 0..3 {
        let p = props(&[("UNIQ_KEY", &format!("S{i}"))]);
        let r = c
            .call(
                310,
                &[("a", "PG"), ("b", "AdminT"), ("e", "0"), ("i", &p)],
                vec![b'x'],
            )
            .await;
        assert_eq!(r.code, 0);
        if i == 0 {
            let id = &r.ext["msgId"];
            first_offset = u64::from_str_radix(&id[16..], 16).unwrap().to_string();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = c.call(33, &[("offset", &first_offset)], Vec::new()).await;
    // VIEW_MESSAGE_BY_ID at a record's offset gives the record.
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let first = records(&r.body);
    assert_eq!(first[0].0, "AdminT");
    let Ok(Decoded::Record(rec)) = record::decode(&r.body, 1 << 24) else {
        panic!("record")
    };
    let t1 = rec.header.store_timestamp;
    for (ts, want) in [(0, "0"), (t1, "0"), (t1 + 1, "1"), (u64::MAX / 2, "3")] {
        let ts_s = ts.to_string();
        let ext = [
            ("topic", "AdminT"),
            ("queueId", "0"),
            ("timestamp", ts_s.as_str()),
        ];
        let r = c.call(29, &ext, Vec::new()).await;
        assert_eq!(
            (r.code, r.ext["offset"].as_str()),
            (0, want),
            "timestamp {ts}"
        );
    }
    // INVOKE_BROKER_TO_RESET_OFFSET: reset on the broker, group online or not (Apache 5.5's
    // server-side reset); online, the members also get RESET_CONSUMER_CLIENT_OFFSET.
    let reset = [
        ("topic", "AdminT"),
        ("group", "AdminG"),
        ("timestamp", "0"),
        ("isForce", "true"),
    ];
    let r = c.call(222, &reset, Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(
        core.inspect(|b| b.committed_offset("AdminG", "AdminT", 0))
            .await
            .unwrap(),
        Some(0),
        "reset with no client online"
    );
    c.call(34, &[], heartbeat_body("client-g", "AdminG", "AdminT"))
        .await;
    let r = c.call(222, &reset, Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let pushed = c
        .pushed(220, 2_000)
        .await
        .expect("clients told the offsets");
    let body = String::from_utf8(pushed.body).unwrap();
    assert!(
        body.contains(r#"{"brokerName":"rocklet","queueId":0,"topic":"AdminT"}:0"#),
        "{body}"
    );
    // QUERY_MESSAGE: by message id (queryMsgByUniqueKey) and by key (queryMsgByKey), within
    // the store times asked for; none found is QUERY_NOT_FOUND.
    let p = props(&[("UNIQ_KEY", "K0"), ("KEYS", "order-1 order-2")]);
    let r = c
        .call(
            310,
            &[("a", "PG"), ("b", "AdminT"), ("e", "0"), ("i", &p)],
            b"keyed".to_vec(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let query = |key: &'static str, begin: &'static str, unique: bool| {
        let mut h = vec![
            ("topic", "AdminT"),
            ("key", key),
            ("maxNum", "64"),
            ("beginTimestamp", begin),
            ("endTimestamp", "9223372036854775807"),
        ];
        if unique {
            h.push(("_UNIQUE_KEY_QUERY", "true"));
        }
        h
    };
    let r = c.call(12, &query("S1", "0", true), Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let got = records(&r.body);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0.as_str(), &got[0].1[..]), ("AdminT", &b"x"[..]));
    assert!(r.ext.contains_key("indexLastUpdateTimestamp"));
    assert!(r.ext.contains_key("indexLastUpdatePhyoffset"));
    let r = c.call(12, &query("order-2", "0", false), Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(records(&r.body)[0].1, b"keyed");
    let r = c.call(12, &query("order-3", "0", false), Vec::new()).await;
    assert_eq!(r.code, 22, "{:?}", r.remark);
    let r = c
        .call(
            12,
            &query("order-2", "9223372036854775806", false),
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 22, "stored before the window: {:?}", r.remark);
    // QUERY_TOPIC_CONSUME_BY_WHO names offline groups with offsets in the topic too.
    let r = c
        .call(
            15,
            &[
                ("consumerGroup", "OfflineG"),
                ("topic", "AdminT"),
                ("queueId", "0"),
                ("commitOffset", "1"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = c.call(300, &[("topic", "AdminT")], Vec::new()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["groupList"], serde_json::json!(["AdminG", "OfflineG"]));
    // deleteTopic: the broker's request deletes it, the name server's is then answered OK;
    // a second broker request names the missing topic. Other topics stay.
    let r = c.call(17, &[("topic", "AdminKept")], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = c.call(215, &[("topic", "AdminT")], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = c.call(216, &[("topic", "AdminT")], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = c.call(351, &[("topic", "AdminT")], Vec::new()).await;
    assert_eq!(r.code, 17, "{:?}", r.remark);
    let r = c.call(215, &[("topic", "AdminT")], Vec::new()).await;
    assert_eq!(r.code, 1);
    assert!(r.remark.unwrap().contains("UNKNOWN_TOPIC"));
    let r = c
        .call(215, &[("topic", "RMQ_SYS_TRANS_HALF_TOPIC")], Vec::new())
        .await;
    assert_eq!(r.code, 1, "system topics are not deleted: {:?}", r.remark);
    // Refused by name: codes rocklet does not serve.
    let r = c.call(18, &[], Vec::new()).await;
    assert_eq!(r.code, 3);
    assert!(r.remark.unwrap().contains("(UPDATE_AND_CREATE_TOPIC_LIST)"));
    // The name server lists the cluster and the topics.
    let mut ns = V4::connect(namesrv).await;
    let r = ns.call(106, &[], Vec::new()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        v["brokerAddrTable"]["rocklet"]["brokerAddrs"]["0"],
        remoting.to_string()
    );
    let r = ns.call(206, &[], Vec::new()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let topics = v["topicList"].as_array().unwrap();
    assert!(
        topics.contains(&serde_json::json!("AdminKept")),
        "{topics:?}"
    );
    assert!(!topics.contains(&serde_json::json!("AdminT")), "deleted");
    b.stop().await;
}
