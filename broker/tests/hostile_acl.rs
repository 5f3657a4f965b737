//! Hostile clients against the ACL with authentication on (issue #29, items 1 and 2): a
//! `%RETRY%<g>` or `%DLQ%<g>` topic belongs to group g, and a message is copied between
//! topics (CONSUMER_SEND_MSG_BACK, ForwardMessageToDeadLetterQueue) only when it was
//! delivered to the group and the caller may read its topic. Requests are signed as
//! `AclClientRPCHook` (v4) and the v5 clients sign them; each refusal is checked by code and
//! by the name it gives, and the legitimate retry cycle of a v4 push consumer still works.
//!
//! Users: `alice` has Sub on groups `gA`, `gA2` and `gShared`, Pub and Sub on topic `TA`;
//! `bob` has Sub on groups `gB` and `gShared`, Pub and Sub on topic `TB`; `carol` has Pub and
//! Sub on every topic (`Topic:*`) and Sub on groups `gC` and `gShared`.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use common::v4::{fields, props, V4};
use common::{dur, msg, res, test_config, OK};
use rocklet_broker::auth::admin::Signer;
use rocklet_broker::auth::sign;
use rocklet_broker::auth::{AuthFileConfig, EntrySpec, UserSpec};
use rocklet_broker::clock::SystemClock;
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::pb::v2::messaging_service_client::MessagingServiceClient;
use rocklet_broker::remoting::codec::{RemotingCommand, SerializeType};
use rocklet_broker::server::{self, RunningBroker};
use rocklet_core::record::{self, Decoded};
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Signed = MessagingServiceClient<InterceptedService<Channel, Signer>>;

use rocklet_broker::remoting::codes::status::NO_PERMISSION;
const FORBIDDEN: i32 = pb::Code::Forbidden as i32;
const INVALID_RECEIPT_HANDLE: i32 = pb::Code::InvalidReceiptHandle as i32;

const SEND_V2: i32 = 310;
const PULL: i32 = 11;
const QUERY_OFFSET: i32 = 14;
const HEART_BEAT: i32 = 34;
const SEND_BACK: i32 = 36;
const ROUTE: i32 = 105;
const LITE_PULL: i32 = 361;
const POP: i32 = 200_050;

fn user(ak: &str, super_user: bool) -> UserSpec {
    UserSpec {
        access_key: ak.into(),
        secret_key: format!("{ak}-secret"),
        super_user,
        session_token: None,
    }
}

fn allow(u: &str, r: &str, actions: &[&str]) -> EntrySpec {
    EntrySpec {
        user: u.into(),
        resource: r.into(),
        actions: actions.iter().map(|s| s.to_string()).collect(),
        decision: "Allow".into(),
        source_ips: vec![],
    }
}

async fn start() -> (tempfile::TempDir, RunningBroker) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config(dir.path());
    cfg.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.max_long_polling_ms = 20_000;
    cfg.auth = AuthFileConfig {
        users: vec![
            user("root", true),
            user("alice", false),
            user("bob", false),
            user("carol", false),
        ],
        acls: vec![
            allow("alice", "Group:gA", &["Sub"]),
            allow("alice", "Group:gA2", &["Sub"]),
            allow("alice", "Group:gShared", &["Sub"]),
            allow("alice", "Topic:TA", &["Pub", "Sub"]),
            allow("bob", "Group:gB", &["Sub"]),
            allow("bob", "Group:gShared", &["Sub"]),
            allow("bob", "Topic:TB", &["Pub", "Sub"]),
            allow("carol", "Topic:*", &["Pub", "Sub"]),
            allow("carol", "Group:gC", &["Sub"]),
            allow("carol", "Group:gShared", &["Sub"]),
        ],
        ..Default::default()
    };
    let b = server::start(cfg, Arc::new(SystemClock)).await.unwrap();
    (dir, b)
}

/// A v4 connection signing every request as `user` (secret `<user>-secret`).
struct As {
    c: V4,
    user: &'static str,
}

impl As {
    async fn connect(addr: SocketAddr, user: &'static str) -> Self {
        As {
            c: V4::connect(addr, SerializeType::Json).await,
            user,
        }
    }

    async fn call(&mut self, code: i32, ext: &[(&str, &str)], body: Vec<u8>) -> RemotingCommand {
        let mut f: BTreeMap<String, String> = fields(ext);
        f.insert(sign::ACCESS_KEY.into(), self.user.into());
        let mut cmd = RemotingCommand::request(code, f, body);
        let sk = format!("{}-secret", self.user);
        let sig = sign::remoting_signature(&sk, &cmd.ext, cmd.version, &cmd.body);
        cmd.ext.insert(sign::SIGNATURE.into(), sig);
        self.c.opaque += 1;
        cmd.opaque = self.c.opaque;
        self.c.write(&cmd).await;
        loop {
            let r = tokio::time::timeout(std::time::Duration::from_secs(30), self.c.read())
                .await
                .expect("answer in time")
                .expect("connection open");
            if r.is_response() && r.opaque == cmd.opaque {
                return r;
            }
        }
    }

    async fn send(&mut self, topic: &str, body: &str) -> RemotingCommand {
        let p = props(&[("UNIQ_KEY", body)]);
        let ext = [("a", "PG"), ("b", topic), ("e", "0"), ("f", "0"), ("i", &p)];
        self.call(SEND_V2, &ext, body.as_bytes().to_vec()).await
    }

    async fn pull(&mut self, group: &str, topic: &str, suspend_ms: u64) -> RemotingCommand {
        let suspend = suspend_ms.to_string();
        let ext = [
            ("consumerGroup", group),
            ("topic", topic),
            ("queueId", "0"),
            ("queueOffset", "0"),
            ("maxMsgNums", "32"),
            ("sysFlag", if suspend_ms > 0 { "2" } else { "0" }),
            ("commitOffset", "0"),
            ("suspendTimeoutMillis", &suspend),
            ("subscription", "*"),
        ];
        self.call(PULL, &ext, Vec::new()).await
    }

    /// A v4 push consumer's heartbeat: its topic and its own retry topic.
    async fn heartbeat(&mut self, group: &str, topics: &[&str]) -> RemotingCommand {
        let subs: Vec<_> = topics
            .iter()
            .map(|t| serde_json::json!({"topic": t, "subString": "*", "expressionType": "TAG"}))
            .collect();
        let body = serde_json::json!({
            "clientID": format!("{}@hostile-acl", self.user),
            "producerDataSet": [],
            "consumerDataSet": [{
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": subs,
                "unitMode": false,
            }],
        });
        self.call(HEART_BEAT, &[], serde_json::to_vec(&body).unwrap())
            .await
    }

    async fn send_back(&mut self, group: &str, offset: u64) -> RemotingCommand {
        let off = offset.to_string();
        let ext = [
            ("offset", off.as_str()),
            ("group", group),
            ("delayLevel", "1"),
            ("maxReconsumeTimes", "16"),
        ];
        self.call(SEND_BACK, &ext, Vec::new()).await
    }
}

/// Body, log offset (PHYSICALOFFSET, what a v4 client sends back) and properties of each
/// record of a pull.
fn records(r: &RemotingCommand) -> Vec<(String, u64, BTreeMap<String, String>)> {
    assert_eq!(r.code, 0, "pull refused: {:?}", r.remark);
    let mut body = &r.body[..];
    let mut out = Vec::new();
    while !body.is_empty() {
        let Ok(Decoded::Record(rec)) = record::decode(body, 1 << 24) else {
            panic!("undecodable record in a pull body");
        };
        let p = rec
            .props()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        out.push((
            String::from_utf8_lossy(rec.body).into_owned(),
            rec.header.phys_offset,
            p,
        ));
        body = &body[rec.total_size as usize..];
    }
    out
}

fn refused(r: &RemotingCommand, names: &str) {
    assert_eq!(r.code, NO_PERMISSION, "not refused: {:?}", r.remark);
    let remark = r.remark.as_deref().unwrap_or("");
    assert!(remark.contains(names), "{remark:?} does not name {names}");
}

/// bob's consumer of TB fails a message: it is sent back and comes again in %RETRY%gB.
/// Returns the log offsets of the message in TB and in %RETRY%gB.
async fn bob_retries_a_message(bob: &mut As) -> (u64, u64) {
    assert_eq!(bob.heartbeat("gB", &["TB", "%RETRY%gB"]).await.code, 0);
    assert_eq!(bob.send("TB", "bob-secret-order").await.code, 0);
    let got = records(&bob.pull("gB", "TB", 0).await);
    let r = bob.send_back("gB", got[0].1).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let retried = records(&bob.pull("gB", "%RETRY%gB", 10_000).await);
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].0, "bob-secret-order");
    (got[0].1, retried[0].1)
}

/// Item 1: reading `%RETRY%gB` or `%DLQ%gB` needs Sub on gB, and no client's SEND writes
/// there.
#[tokio::test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
async fn a_retry_topic_is_read_only_by_its_group_and_written_only_by_the_broker() {
    let (_dir, b) = start().await;
    let addr = b.remoting_addr.unwrap();
    let mut alice = As::connect(addr, "alice").await;
    let mut bob = As::connect(addr, "bob").await;
    let mut carol = As::connect(addr, "carol").await;
    bob_retries_a_message(&mut bob).await;

    // alice reads nothing of %RETRY%gB, whichever group she names.
    for group in ["gA", "gB"] {
        refused(&alice.pull(group, "%RETRY%gB", 0).await, "Group:gB");
        let lite = [
            ("consumerGroup", group),
            ("topic", "%RETRY%gB"),
            ("queueId", "0"),
            ("queueOffset", "0"),
            ("maxMsgNums", "32"),
            ("sysFlag", "0"),
        ];
        refused(&alice.call(LITE_PULL, &lite, Vec::new()).await, "Group:gB");
        let pop = [
            ("consumerGroup", group),
            ("topic", "%RETRY%gB"),
            ("queueId", "-1"),
            ("maxMsgNums", "32"),
            ("invisibleTime", "60000"),
        ];
        refused(&alice.call(POP, &pop, Vec::new()).await, "Group:gB");
        let q = [
            ("consumerGroup", group),
            ("topic", "%RETRY%gB"),
            ("queueId", "0"),
        ];
        refused(&alice.call(QUERY_OFFSET, &q, Vec::new()).await, "Group:gB");
    }
    refused(&alice.pull("gA", "%DLQ%gB", 0).await, "Group:gB");
    refused(
        &alice.heartbeat("gA", &["TA", "%RETRY%gB"]).await,
        "Group:gB",
    );
    refused(
        &alice
            .call(ROUTE, &[("topic", "%RETRY%gB")], Vec::new())
            .await,
        "Group:gB",
    );
    // A grant on every topic does not reach a group's retry or dead-letter topic.
    refused(&carol.pull("gC", "%RETRY%gB", 0).await, "Group:gB");
    refused(&carol.pull("gC", "%DLQ%gB", 0).await, "Group:gB");

    // Nobody's plain SEND lands in a retry topic, not even the owner's or with Topic:*.
    refused(
        &alice.send("%RETRY%gB", "injected").await,
        "belongs to group `gB`",
    );
    refused(
        &carol.send("%RETRY%gB", "injected").await,
        "belongs to group `gB`",
    );
    refused(
        &alice.send("%RETRY%gA", "forged").await,
        "belongs to group `gA`",
    );
    refused(
        &bob.send("%RETRY%gB", "forged").await,
        "belongs to group `gB`",
    );
    let retried = records(&bob.pull("gB", "%RETRY%gB", 0).await);
    assert_eq!(retried.len(), 1, "nothing injected: {retried:?}");
    b.stop().await;
}

/// Item 2: CONSUMER_SEND_MSG_BACK copies only a message delivered to the group, of a topic
/// the caller may read. A sweep of log offsets is refused offset by offset, by name, and
/// copies nothing.
#[tokio::test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
async fn send_back_of_a_message_not_delivered_to_the_group_is_refused() {
    let (_dir, b) = start().await;
    let addr = b.remoting_addr.unwrap();
    let mut alice = As::connect(addr, "alice").await;
    let mut bob = As::connect(addr, "bob").await;
    let mut carol = As::connect(addr, "carol").await;
    let (bob_offset, bob_retry_offset) = bob_retries_a_message(&mut bob).await;
    assert_eq!(alice.heartbeat("gA", &["TA", "%RETRY%gA"]).await.code, 0);

    refused(&alice.send_back("gA", bob_offset).await, "`TB`");
    refused(&alice.send_back("gA", bob_retry_offset).await, "%RETRY%gB");
    for off in [0, 1, 7, bob_offset + 1, 1 << 40] {
        if off != bob_offset && off != bob_retry_offset {
            refused(&alice.send_back("gA", off).await, "offset");
        }
    }
    // gShared consumes TB (bob's client subscribes to it), but alice may not read TB.
    assert_eq!(bob.heartbeat("gShared", &["TB"]).await.code, 0);
    refused(&alice.send_back("gShared", bob_offset).await, "Topic:TB");
    // carol may read TB, but her group does not consume it.
    refused(&carol.send_back("gC", bob_offset).await, "`TB`");
    // bob may not send back into a group that is not his.
    refused(&bob.send_back("gA", bob_offset).await, "Group:gA");
    // Nothing landed in %RETRY%gA (a copy would be due after 1 s; the long poll waits 3 s).
    let r = alice.pull("gA", "%RETRY%gA", 3_000).await;
    assert_ne!(
        r.code,
        0,
        "a foreign message reached %RETRY%gA: {:?}",
        records(&r)
    );
    b.stop().await;
}

/// The v4 push consumer's retry cycle with authentication on: heartbeat (its topic and its
/// own retry topic), pull, send back the delivered message, route and pull %RETRY%gA, send
/// that back again.
#[tokio::test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
async fn the_v4_retry_cycle_of_a_group_still_works_with_auth_on() {
    let (_dir, b) = start().await;
    let mut alice = As::connect(b.remoting_addr.unwrap(), "alice").await;
    assert_eq!(alice.heartbeat("gA", &["TA", "%RETRY%gA"]).await.code, 0);
    assert_eq!(alice.send("TA", "alice-order").await.code, 0);
    let got = records(&alice.pull("gA", "TA", 0).await);
    assert_eq!(got[0].0, "alice-order");
    let r = alice.send_back("gA", got[0].1).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // gA2 (alice may Sub on it) consumes nothing of TA: not a delivery of it.
    refused(&alice.send_back("gA2", got[0].1).await, "`TA`");
    let route = alice
        .call(ROUTE, &[("topic", "%RETRY%gA")], Vec::new())
        .await;
    assert_eq!(route.code, 0, "{:?}", route.remark);
    let mine = records(&alice.pull("gA", "%RETRY%gA", 10_000).await);
    assert_eq!(mine.len(), 1, "only alice's own message: {mine:?}");
    assert_eq!(mine[0].0, "alice-order");
    assert_eq!(mine[0].2.get("RETRY_TOPIC").map(String::as_str), Some("TA"));
    let r = alice.send_back("gA", mine[0].1).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    b.stop().await;
}

async fn grpc(addr: SocketAddr, user: &str) -> Signed {
    let ch = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    MessagingServiceClient::with_interceptor(ch, Signer::new(user, &format!("{user}-secret")))
}

async fn receive(c: &mut Signed, topic: &str, group: &str) -> (pb::Status, Vec<pb::Message>) {
    let req = pb::ReceiveMessageRequest {
        group: res(group),
        message_queue: Some(pb::MessageQueue {
            topic: res(topic),
            ..Default::default()
        }),
        filter_expression: Some(pb::FilterExpression {
            r#type: pb::FilterType::Tag as i32,
            expression: "*".into(),
        }),
        batch_size: 16,
        invisible_duration: Some(dur(60_000)),
        long_polling_timeout: Some(dur(3_000)),
        ..Default::default()
    };
    let mut stream = c.receive_message(req).await.unwrap().into_inner();
    let (mut status, mut got) = (pb::Status::default(), Vec::new());
    while let Some(r) = stream.next().await {
        match r.unwrap().content.unwrap() {
            pb::receive_message_response::Content::Status(s) => status = s,
            pb::receive_message_response::Content::Message(m) => got.push(m),
            pb::receive_message_response::Content::DeliveryTimestamp(_) => {}
        }
    }
    (status, got)
}

async fn ack(c: &mut Signed, topic: &str, group: &str, handle: &str) -> pb::Status {
    c.ack_message(pb::AckMessageRequest {
        group: res(group),
        topic: res(topic),
        entries: vec![pb::AckMessageEntry {
            message_id: String::new(),
            receipt_handle: handle.into(),
        }],
    })
    .await
    .unwrap()
    .into_inner()
    .status
    .unwrap()
}

async fn forward(c: &mut Signed, topic: &str, group: &str, handle: &str) -> pb::Status {
    c.forward_message_to_dead_letter_queue(pb::ForwardMessageToDeadLetterQueueRequest {
        group: res(group),
        topic: res(topic),
        receipt_handle: handle.into(),
        message_id: String::new(),
        delivery_attempt: 1,
        max_delivery_attempts: 16,
    })
    .await
    .unwrap()
    .into_inner()
    .status
    .unwrap()
}

#[tokio::test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
async fn grpc_dead_lettering_copies_only_a_delivery_of_the_topic_the_caller_names() {
    let (_dir, b) = start().await;
    let mut bob = grpc(b.addr, "bob").await;
    let mut carol = grpc(b.addr, "carol").await;

    // bob receives a message of TB in the group he shares with carol.
    let id = "0A0000000000000000000000000000B1";
    let r = bob
        .send_message(pb::SendMessageRequest {
            messages: vec![msg("TB", b"bob-only", pb::MessageType::Normal, id)],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, OK);
    let (s, got) = receive(&mut bob, "TB", "gShared").await;
    assert_eq!(got.len(), 1, "{s:?}");
    let handle = common::handle(&got[0]);

    // carol, with Sub on gShared and on every topic but TB's delivery not hers to name,
    // forwards it under a topic she may read, or none: refused by name.
    for topic in ["TC", ""] {
        let s = forward(&mut carol, topic, "gShared", &handle).await;
        assert_eq!(s.code, INVALID_RECEIPT_HANDLE, "{s:?}");
        assert!(s.message.contains("topic `TB`"), "{s:?}");
    }
    // Nothing reached gShared's dead-letter topic; bob's delivery is intact.
    let s = ack(&mut bob, "TB", "gShared", &handle).await;
    assert_eq!(s.code, OK, "{s:?}");

    // bob's own dead-lettering still works.
    let id = "0A0000000000000000000000000000B2";
    let r = bob
        .send_message(pb::SendMessageRequest {
            messages: vec![msg("TB", b"bob-dead", pb::MessageType::Normal, id)],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.status.unwrap().code, OK);
    let (s, got) = receive(&mut bob, "TB", "gShared").await;
    assert_eq!(got.len(), 1, "{s:?}");
    let s = forward(&mut bob, "TB", "gShared", &common::handle(&got[0])).await;
    assert_eq!(s.code, OK, "{s:?}");
    b.stop().await;
}

/// Item 1 on gRPC: retry and dead-letter topics belong to their group, whatever `Topic:*`
/// grants.
#[tokio::test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
async fn grpc_retry_and_dead_letter_topics_are_their_groups() {
    let (_dir, b) = start().await;
    let mut carol = grpc(b.addr, "carol").await;
    // Retry and dead-letter topics belong to their group, whatever Topic:* grants.
    for topic in ["%RETRY%gB", "%DLQ%gB"] {
        let (s, got) = receive(&mut carol, topic, "gC").await;
        assert_eq!(s.code, FORBIDDEN, "{s:?}");
        assert!(s.message.contains("Group:gB"), "{s:?}");
        assert!(got.is_empty());
    }
    let r = carol
        .send_message(pb::SendMessageRequest {
            messages: vec![msg(
                "%RETRY%gB",
                b"injected",
                pb::MessageType::Normal,
                "0A0000000000000000000000000000C1",
            )],
        })
        .await
        .unwrap()
        .into_inner();
    let s = r.status.unwrap();
    assert_eq!(s.code, FORBIDDEN, "{s:?}");
    assert!(s.message.contains("belongs to group `gB`"), "{s:?}");

    b.stop().await;
}
