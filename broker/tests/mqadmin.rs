//! mqadmin's operator commands against the broker over the wire (issue #33, item 2):
//! wipeWritePerm / addWritePerm stop and restore writes on both protocols, resetOffsetByTime
//! on an online group resets on the broker at once, and consumerProgress shows RocketMQ 5
//! (gRPC) groups. Apache RocketMQ 5.5.0's mqadmin runs the same commands against rocklet
//! and against Apache in tests/ci/fidelity.sh.

mod common;

use std::net::SocketAddr;

use common::v4::{heartbeat_body, props, V4};
use common::*;
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::remoting::codec::{RemotingCommand, SerializeType};

async fn start() -> (TestBroker, SocketAddr, SocketAddr) {
    let b = TestBroker::start_with(|c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
        c.namesrv_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let r = b.broker.as_ref().unwrap();
    let (remoting, namesrv) = (r.remoting_addr.unwrap(), r.namesrv_addr.unwrap());
    (b, remoting, namesrv)
}

async fn v4_send(c: &mut V4, topic: &str, body: &str) -> RemotingCommand {
    let p = props(&[]);
    c.call(
        310,
        &[("a", "PG"), ("b", topic), ("e", "0"), ("f", "0"), ("i", &p)],
        body.as_bytes().to_vec(),
    )
    .await
}

/// `perm` of the route's queue data (GET_ROUTEINFO_BY_TOPIC at the name server).
async fn route_perm(ns: &mut V4, topic: &str) -> i64 {
    let r = ns.call(105, &[("topic", topic)], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["queueDatas"][0]["perm"].as_i64().unwrap()
}

async fn grpc_perm(c: &mut Client, topic: &str) -> i32 {
    let r = c
        .query_route(pb::QueryRouteRequest {
            topic: res(topic),
            endpoints: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, OK);
    r.message_queues[0].permission
}

/// A single-queue topic made with mqadmin updateTopic.
async fn one_queue_topic(c: &mut V4, topic: &str) {
    let r = c
        .call(
            17,
            &[
                ("topic", topic),
                ("readQueueNums", "1"),
                ("writeQueueNums", "1"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
}

#[tokio::test]
async fn wipe_write_perm_stops_sends_and_add_write_perm_restores_them() {
    let (mut b, remoting, namesrv) = start().await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let mut ns = V4::connect(namesrv, SerializeType::Json).await;
    assert_eq!(v4_send(&mut c, "PermT", "before").await.code, 0);
    assert_eq!(route_perm(&mut ns, "PermT").await, 6);

    // Another broker's name: nothing of this one changes (Apache counts 0 topics).
    let r = ns
        .call(205, &[("brokerName", "elsewhere")], Vec::new())
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(r.ext["wipeTopicCount"], "0");
    assert_eq!(v4_send(&mut c, "PermT", "other broker").await.code, 0);

    let r = ns.call(205, &[("brokerName", "rocklet")], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_ne!(r.ext["wipeTopicCount"], "0");
    // Routes show the queues read-only; sends are refused with NO_PERMISSION (v4 producers
    // retry another broker) and FORBIDDEN (gRPC).
    assert_eq!(route_perm(&mut ns, "PermT").await, 4);
    assert_eq!(
        grpc_perm(&mut b.client, "PermT").await,
        pb::Permission::Read as i32
    );
    let r = v4_send(&mut c, "PermT", "wiped").await;
    assert_eq!(r.code, 16, "{:?}", r.remark);
    assert!(r.remark.unwrap().contains("wipeWritePerm"));
    let s = send(
        &mut b.client,
        vec![msg("PermT", b"wiped", pb::MessageType::Normal, "W1")],
    )
    .await;
    assert_eq!(
        s.status.unwrap().code,
        pb::Code::Forbidden as i32,
        "gRPC send while wiped"
    );
    // Reads go on.
    let r = c
        .call(30, &[("topic", "PermT"), ("queueId", "0")], Vec::new())
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);

    let r = ns.call(327, &[("brokerName", "rocklet")], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_ne!(r.ext["addTopicCount"], "0");
    assert_eq!(route_perm(&mut ns, "PermT").await, 6);
    assert_eq!(
        grpc_perm(&mut b.client, "PermT").await,
        pb::Permission::ReadWrite as i32
    );
    assert_eq!(v4_send(&mut c, "PermT", "after").await.code, 0);
    send_ok(
        &mut b.client,
        msg("PermT", b"after", pb::MessageType::Normal, "W2"),
    )
    .await;
    b.stop().await;
}

/// GET_CONSUME_STATS of `group` (all its topics) as text: its body keys queues by
/// MessageQueue objects, which is no JSON.
async fn consume_stats(c: &mut V4, group: &str) -> String {
    consume_stats_of(c, group, "").await
}

/// The same for one topic (none: all the group's).
async fn consume_stats_of(c: &mut V4, group: &str, topic: &str) -> String {
    let mut ext = vec![("consumerGroup", group)];
    if !topic.is_empty() {
        ext.push(("topic", topic));
    }
    let r = c.call(208, &ext, Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    String::from_utf8(r.body).unwrap()
}

async fn commit(c: &mut V4, group: &str, topic: &str, offset: u64) {
    let o = offset.to_string();
    let r = c
        .call(
            15,
            &[
                ("consumerGroup", group),
                ("topic", topic),
                ("queueId", "0"),
                ("commitOffset", &o),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
}

#[tokio::test]
async fn reset_offset_of_an_online_group_is_on_the_broker_at_once() {
    let (b, remoting, _) = start().await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    one_queue_topic(&mut c, "ResetT").await;
    for i in 0..4 {
        assert_eq!(v4_send(&mut c, "ResetT", &format!("m{i}")).await.code, 0);
    }
    commit(&mut c, "ResetG", "ResetT", 4).await;
    let r = c
        .call(34, &[], heartbeat_body("client-r", "ResetG", "ResetT"))
        .await;
    assert_eq!(r.code, 0);
    assert!(consume_stats_of(&mut c, "ResetG", "ResetT")
        .await
        .contains(r#""consumerOffset":4"#));
    let reset = [
        ("topic", "ResetT"),
        ("group", "ResetG"),
        ("timestamp", "0"),
        ("isForce", "true"),
    ];
    let r = c.call(222, &reset, Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // At once: consumerProgress shows the new offset.
    let s = consume_stats_of(&mut c, "ResetG", "ResetT").await;
    assert!(s.contains(r#""consumerOffset":0"#), "{s}");
    // The client, not yet told, commits its old offset: dropped (answered OK), as Apache's
    // broker drops it while the reset is pending.
    commit(&mut c, "ResetG", "ResetT", 4).await;
    let s = consume_stats_of(&mut c, "ResetG", "ResetT").await;
    assert!(s.contains(r#""consumerOffset":0"#), "{s}");
    // It pulls from the reset offset: the reset is taken, its commits count again.
    let r = c
        .call(
            11,
            &[
                ("consumerGroup", "ResetG"),
                ("topic", "ResetT"),
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
    assert_eq!(r.code, 0, "{:?}", r.remark);
    commit(&mut c, "ResetG", "ResetT", 2).await;
    let s = consume_stats_of(&mut c, "ResetG", "ResetT").await;
    assert!(s.contains(r#""consumerOffset":2"#), "{s}");
    b.stop().await;
}

#[tokio::test]
async fn consumer_progress_shows_grpc_groups() {
    let (mut b, remoting, _) = start().await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    one_queue_topic(&mut c, "ProgT").await;
    for i in 0..3 {
        send_ok(
            &mut b.client,
            msg("ProgT", b"p", pb::MessageType::Normal, &format!("P{i}")),
        )
        .await;
    }
    // Nothing consumed yet: the group has no topic (Apache: no offset table, mqadmin says so).
    let s = consume_stats(&mut c, "ProgG").await;
    assert!(!s.contains("ProgT"), "{s}");
    // A RocketMQ 5 consumer receives two and acks the second: the first is in flight.
    let got = receive(&mut b.client, "ProgT", "ProgG", 2, 60_000, 500).await;
    assert_eq!(got.messages.len(), 2);
    assert_eq!(
        ack(&mut b.client, "ProgT", "ProgG", &got.messages[1])
            .await
            .code,
        OK
    );
    let s = consume_stats(&mut c, "ProgG").await;
    assert!(s.contains(r#""topic":"ProgT""#), "{s}");
    assert!(s.contains(r#""brokerOffset":3"#), "{s}");
    assert!(
        s.contains(r#""consumerOffset":0"#),
        "the first not acked: {s}"
    );
    assert!(s.contains(r#""pullOffset":2"#), "the next handed out: {s}");
    // Nothing consumed up to the consumer offset: no store time to show, and no TPS is
    // measured per group: left out, not reported as 0.
    assert!(!s.contains("lastTimestamp"), "{s}");
    assert!(!s.contains("consumeTps"), "{s}");
    // Acked: the consumer offset moves on, with the store time of the last consumed.
    assert_eq!(
        ack(&mut b.client, "ProgT", "ProgG", &got.messages[0])
            .await
            .code,
        OK
    );
    let s = consume_stats(&mut c, "ProgG").await;
    assert!(s.contains(r#""consumerOffset":2"#), "{s}");
    assert!(s.contains("lastTimestamp"), "{s}");
    b.stop().await;
}

/// GET_BROKER_CONFIG as Java Properties: key → value.
async fn broker_config(c: &mut V4) -> std::collections::BTreeMap<String, String> {
    let r = c.call(26, &[], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    String::from_utf8(r.body)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn broker_config_is_shown_in_apaches_names_and_brokerpermission_changes_live() {
    let (b, remoting, namesrv) = start().await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let conf = broker_config(&mut c).await;
    assert_eq!(conf["brokerClusterName"], "rocklet");
    assert_eq!(conf["brokerName"], "rocklet");
    assert_eq!(conf["brokerPermission"], "6");
    assert_eq!(conf["listenPort"], remoting.port().to_string());
    assert_eq!(conf["namesrvAddr"], namesrv.to_string());
    assert!(conf.contains_key("flushDiskType"), "{conf:?}");
    assert_eq!(conf["messageDelayLevel"].split(' ').next(), Some("1s"));
    // brokerPermission changes live (the same switch as wipeWritePerm).
    let r = c.call(25, &[], b"brokerPermission=4\n".to_vec()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(broker_config(&mut c).await["brokerPermission"], "4");
    assert_eq!(v4_send(&mut c, "ConfT", "drained").await.code, 16);
    // Any other key is refused by name, and nothing of the request is applied.
    let r = c
        .call(
            25,
            &[],
            b"brokerPermission=6\nflushDiskType=SYNC_FLUSH\n".to_vec(),
        )
        .await;
    assert_eq!(r.code, 1);
    let remark = r.remark.unwrap();
    assert!(remark.contains("`flushDiskType`"), "{remark}");
    assert_eq!(broker_config(&mut c).await["brokerPermission"], "4");
    let r = c.call(25, &[], b"brokerPermission=5\n".to_vec()).await;
    assert_eq!(r.code, 1, "{:?}", r.remark);
    let r = c.call(25, &[], b"brokerPermission=6\n".to_vec()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(v4_send(&mut c, "ConfT", "again").await.code, 0);
    // The name server's config.
    let mut ns = V4::connect(namesrv, SerializeType::Json).await;
    let r = ns.call(319, &[], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let text = String::from_utf8(r.body).unwrap();
    assert!(
        text.contains(&format!("listenPort={}", namesrv.port())),
        "{text}"
    );
    b.stop().await;
}

#[tokio::test]
async fn group_configs_and_the_brokers_consume_stats() {
    let (b, remoting, _) = start().await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let body = serde_json::to_vec(&serde_json::json!({
        "groupName": "CfgFifo", "consumeMessageOrderly": true,
    }))
    .unwrap();
    assert_eq!(c.call(200, &[], body).await.code, 0);
    one_queue_topic(&mut c, "CfgT").await;
    for i in 0..3 {
        assert_eq!(v4_send(&mut c, "CfgT", &format!("c{i}")).await.code, 0);
    }
    commit(&mut c, "CfgPull", "CfgT", 1).await;
    // One group's config, and every group's.
    let r = c.call(352, &[("group", "CfgFifo")], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["groupName"], "CfgFifo");
    assert_eq!(v["consumeMessageOrderly"], true);
    let r = c.call(352, &[("group", "NoSuchGroup")], Vec::new()).await;
    assert_eq!(r.code, 26, "{:?}", r.remark);
    let r = c.call(201, &[], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let table = v["subscriptionGroupTable"].as_object().unwrap();
    assert_eq!(table["CfgFifo"]["consumeMessageOrderly"], true);
    assert_eq!(table["CfgPull"]["consumeMessageOrderly"], false);
    // brokerConsumeStats: the pulling group 2 behind in CfgT.
    let r = c.call(317, &[("isOrder", "false")], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let s = String::from_utf8(r.body).unwrap();
    assert!(s.contains(r#""totalDiff":2"#), "{s}");
    assert!(s.contains(r#"{"CfgPull":[{"offsetTable":{{"brokerName":"rocklet","queueId":0,"topic":"CfgT"}:{"brokerOffset":3,"consumerOffset":1"#), "{s}");
    b.stop().await;
}

#[tokio::test]
async fn query_cq_shows_the_consume_queue_entries() {
    let (b, remoting, _) = start().await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    one_queue_topic(&mut c, "CqT").await;
    let p = props(&[("TAGS", "TagA")]);
    for body in ["one", "two", "three"] {
        let r = c
            .call(
                310,
                &[("a", "PG"), ("b", "CqT"), ("e", "0"), ("f", "0"), ("i", &p)],
                body.as_bytes().to_vec(),
            )
            .await;
        assert_eq!(r.code, 0, "{:?}", r.remark);
    }
    let ask = [
        ("topic", "CqT"),
        ("queueId", "0"),
        ("index", "1"),
        ("count", "5"),
    ];
    let r = c.call(321, &ask, Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        (v["minQueueIndex"].as_u64(), v["maxQueueIndex"].as_u64()),
        (Some(0), Some(3))
    );
    let rows = v["queueData"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "from index 1: {v}");
    // Java's "TagA".hashCode(), as RocketMQ's consume queue keeps it.
    assert_eq!(rows[0]["tagsCode"], 2_598_919);
    assert!(rows[0]["physicSize"].as_u64().unwrap() > 0);
    assert!(rows[1]["physicOffset"].as_u64() > rows[0]["physicOffset"].as_u64());
    let r = c
        .call(
            321,
            &[("topic", "CqT"), ("queueId", "7"), ("index", "0")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 1);
    assert!(r.remark.unwrap().contains("queue 7 does not exist"));
    b.stop().await;
}

/// The broker again on the data directory of one stopped ([`TestBroker::stop`]).
async fn restart(dir: &std::path::Path) -> (rocklet_broker::server::RunningBroker, SocketAddr) {
    let mut cfg = test_config(dir);
    cfg.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
    let b =
        rocklet_broker::server::start(cfg, std::sync::Arc::new(rocklet_broker::clock::SystemClock))
            .await
            .unwrap();
    let remoting = b.remoting_addr.unwrap();
    (b, remoting)
}

#[tokio::test]
async fn delete_sub_group_deletes_the_group_and_its_offsets_durably() {
    let (b, remoting, _) = start().await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let body = serde_json::to_vec(&serde_json::json!({
        "groupName": "DelG", "consumeMessageOrderly": true,
    }))
    .unwrap();
    assert_eq!(c.call(200, &[], body).await.code, 0);
    one_queue_topic(&mut c, "DelT").await;
    for i in 0..3 {
        assert_eq!(v4_send(&mut c, "DelT", &format!("d{i}")).await.code, 0);
    }
    commit(&mut c, "DelG", "DelT", 2).await;
    assert!(consume_stats(&mut c, "DelG")
        .await
        .contains(r#""consumerOffset":2"#));
    assert_eq!(c.call(352, &[("group", "DelG")], Vec::new()).await.code, 0);

    let r = c
        .call(
            207,
            &[("groupName", "DelG"), ("cleanOffset", "false")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // getConsumerConfig finds no such group; the broker's group table lacks it; its offsets
    // are gone (a queue the group never consumed from shows 0, as Apache answers).
    assert_eq!(c.call(352, &[("group", "DelG")], Vec::new()).await.code, 26);
    let r = c.call(201, &[], Vec::new()).await;
    assert!(!String::from_utf8(r.body).unwrap().contains("DelG"));
    let s = consume_stats_of(&mut c, "DelG", "DelT").await;
    assert!(s.contains(r#""consumerOffset":0"#), "{s}");
    // Deleting it again is answered OK, as Apache answers; a bad name is refused by name.
    let r = c.call(207, &[("groupName", "DelG")], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = c.call(207, &[("groupName", "bad name!")], Vec::new()).await;
    assert_eq!(r.code, 1);
    assert!(r.remark.unwrap().contains("bad name!"));
    // Its dead-letter topic is kept, saying so (deleteSubGroup -c asks to delete it next).
    let r = c.call(215, &[("topic", "%DLQ%DelG")], Vec::new()).await;
    assert_eq!(r.code, 1);
    assert!(r
        .remark
        .unwrap()
        .contains("keeps a group's retry and dead-letter topics"));

    // Durable: after a restart the group is still gone.
    let dir = b.stop().await;
    let (b, remoting) = restart(dir.path()).await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let r = c.call(352, &[("group", "DelG")], Vec::new()).await;
    assert_eq!(r.code, 26, "{:?}", r.remark);
    let s = consume_stats_of(&mut c, "DelG", "DelT").await;
    assert!(s.contains(r#""consumerOffset":0"#), "{s}");
    b.stop().await;
    drop(dir);
}

#[tokio::test]
async fn consumer_status_asks_the_client_through_the_broker() {
    let (b, remoting, _) = start().await;
    let mut member = V4::connect(remoting, SerializeType::Json).await;
    let r = member
        .call(34, &[], heartbeat_body("client-s", "StatusG", "StatusT"))
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // The client answers the broker's GET_CONSUMER_RUNNING_INFO with its running info
    // (a body larger than a read buffer), then a second one with an error of its own.
    let info = serde_json::json!({
        "properties": {"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "PROP_THREADPOOL_CORE_SIZE": "20"},
        "subscriptionSet": [{"topic": "StatusT", "subString": "*"}],
        "mqTable": {},
        "statusTable": {},
        "jstack": "x".repeat(100_000),
    })
    .to_string();
    let body = info.clone();
    let client = tokio::spawn(async move {
        let mut asked = Vec::new();
        for answer_code in [0, 1] {
            let req = loop {
                let r = member.read().await.unwrap();
                if r.code == 307 && !r.is_response() {
                    break r;
                }
            };
            asked.push(req.ext.clone());
            let mut a = RemotingCommand::response_to(
                &req,
                answer_code,
                (answer_code != 0).then(|| "busy here".to_string()),
            );
            if answer_code == 0 {
                a.body = body.clone().into_bytes();
            }
            member.write(&a).await;
        }
        asked
    });
    let mut admin = V4::connect(remoting, SerializeType::Json).await;
    let ask = [
        ("consumerGroup", "StatusG"),
        ("clientId", "client-s"),
        ("jstackEnable", "true"),
    ];
    let r = admin.call(307, &ask, Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(
        String::from_utf8(r.body).unwrap(),
        info,
        "relayed as the client wrote it"
    );
    let r = admin.call(307, &ask, Vec::new()).await;
    assert_eq!((r.code, r.remark.as_deref()), (1, Some("busy here")));
    let asked = client.await.unwrap();
    assert_eq!(asked[0]["clientId"], "client-s");
    assert_eq!(asked[0]["jstackEnable"], "true");
    // A client the group does not have connected is refused naming it, as Apache answers.
    let r = admin
        .call(
            307,
            &[("consumerGroup", "StatusG"), ("clientId", "elsewhere")],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 1);
    assert!(r
        .remark
        .unwrap()
        .contains("<StatusG> <elsewhere> not online"));
    b.stop().await;
}

/// KV config call (PUT_KV_CONFIG 100, GET_KV_CONFIG 101, DELETE_KV_CONFIG 102).
async fn kv(
    c: &mut V4,
    code: i32,
    namespace: &str,
    key: &str,
    value: Option<&str>,
) -> RemotingCommand {
    let mut ext = vec![("namespace", namespace), ("key", key)];
    ext.extend(value.map(|v| ("value", v)));
    c.call(code, &ext, Vec::new()).await
}

/// `orderTopicConf` of the topic's route and `order` of its topic config.
async fn order_of(c: &mut V4, topic: &str) -> (serde_json::Value, serde_json::Value) {
    let r = c.call(105, &[("topic", topic)], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let route: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let r = c.call(351, &[("topic", topic)], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let config: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    (route["orderTopicConf"].clone(), config["order"].clone())
}

/// mqadmin updateTopic -o true as it goes on the wire: UPDATE_AND_CREATE_TOPIC with
/// `order=true`, then PUT_KV_CONFIG of `brokerName:queues` in ORDER_TOPIC_CONFIG. The route
/// carries the conf (with `order_message_enable`), the topic config the flag, both kept
/// across a restart; DELETE_KV_CONFIG and the topic's deletion take them; bad confs are
/// refused by name.
#[tokio::test]
async fn an_order_topic_keeps_its_flag_and_conf_durably() {
    let b = TestBroker::start_with(|c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
        c.namesrv_listen = Some("127.0.0.1:0".parse().unwrap());
        c.order_message_enable = true;
    })
    .await;
    let r = b.broker.as_ref().unwrap();
    let (remoting, namesrv) = (r.remoting_addr.unwrap(), r.namesrv_addr.unwrap());
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let mut ns = V4::connect(namesrv, SerializeType::Json).await;
    const NS: &str = "ORDER_TOPIC_CONFIG";
    let make = |order: &'static str| {
        [
            ("topic", "OrderT"),
            ("readQueueNums", "4"),
            ("writeQueueNums", "4"),
            ("order", order),
        ]
    };
    let r = c.call(17, &make("true"), Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // Before the conf is put: the flag, no conf (Apache's "not found" answer).
    assert_eq!(
        order_of(&mut ns, "OrderT").await,
        (serde_json::Value::Null, true.into())
    );
    let r = kv(&mut ns, 101, NS, "OrderT", None).await;
    assert_eq!(r.code, 22);
    assert_eq!(
        r.remark.as_deref(),
        Some("No config item, Namespace: ORDER_TOPIC_CONFIG Key: OrderT")
    );
    let r = kv(&mut ns, 100, NS, "OrderT", Some("rocklet:4")).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = kv(&mut ns, 101, NS, "OrderT", None).await;
    assert_eq!(
        (r.code, r.ext.get("value").map(String::as_str)),
        (0, Some("rocklet:4"))
    );
    assert_eq!(
        order_of(&mut ns, "OrderT").await,
        ("rocklet:4".into(), true.into())
    );

    // Refused by name, nothing changed.
    for (ns_name, key, value, want) in [
        (
            NS,
            "OrderT",
            "elsewhere:4",
            "broker `elsewhere`, which rocklet does not know",
        ),
        (NS, "OrderT", "rocklet:9", "topic `OrderT` has 4"),
        (NS, "OrderT", "rocklet", "is not brokerName:queueCount"),
        (NS, "NoSuchT", "rocklet:1", "NoSuchT"),
        (
            "OTHER_NS",
            "k",
            "v",
            "namespace `OTHER_NS` is not kept by rocklet",
        ),
    ] {
        let r = kv(&mut ns, 100, ns_name, key, Some(value)).await;
        assert_eq!(r.code, 1, "{value}");
        let remark = r.remark.unwrap();
        assert!(remark.contains(want), "{value}: {remark}");
    }
    assert_eq!(
        order_of(&mut ns, "OrderT").await,
        ("rocklet:4".into(), true.into())
    );

    // A send to its last queue (a v4 producer builds its queue list from the conf).
    let p = props(&[]);
    let r = c
        .call(
            310,
            &[
                ("a", "PG"),
                ("b", "OrderT"),
                ("e", "3"),
                ("f", "0"),
                ("i", &p),
            ],
            b"in order".to_vec(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);

    // Durable. Restarted with order_message_enable off (the default, as Apache's name
    // server's orderMessageEnable): the conf is kept, routes leave it out.
    drop((c, ns));
    let dir = b.stop().await;
    let (b, remoting) = restart(dir.path()).await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    assert_eq!(
        order_of(&mut c, "OrderT").await,
        (serde_json::Value::Null, true.into())
    );
    let r = kv(&mut c, 101, NS, "OrderT", None).await;
    assert_eq!(
        (r.code, r.ext.get("value").map(String::as_str)),
        (0, Some("rocklet:4"))
    );
    // updateTopic without -o sends order=false: the flag goes, the conf stays (as Apache's).
    let r = c.call(17, &make("false"), Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(
        order_of(&mut c, "OrderT").await,
        (serde_json::Value::Null, false.into())
    );
    let r = kv(&mut c, 101, NS, "OrderT", None).await;
    assert_eq!(r.ext.get("value").map(String::as_str), Some("rocklet:4"));
    let r = c.call(17, &make("maybe"), Vec::new()).await;
    assert!(r.remark.unwrap().contains("order `maybe`"));

    // deleteTopic: the topic, then its conf; a topic made again under the name has neither.
    assert_eq!(
        c.call(215, &[("topic", "OrderT")], Vec::new()).await.code,
        0
    );
    let r = kv(&mut c, 102, NS, "OrderT", None).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = c.call(17, &make("false"), Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(
        order_of(&mut c, "OrderT").await,
        (serde_json::Value::Null, false.into())
    );
    assert_eq!(kv(&mut c, 101, NS, "OrderT", None).await.code, 22);
    b.stop().await;
    drop(dir);
}
