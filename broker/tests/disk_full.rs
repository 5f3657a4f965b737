//! The disk-full threshold (issue 31): past `disk_space_warning_level_ratio` new messages
//! are refused by name on both protocols, while what is stored is still served.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::v4::{props, V4};
use common::*;
use rocklet_broker::clock::SystemClock;
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::remoting::codec::SerializeType;
use rocklet_broker::server;

/// SEND_MESSAGE_V2 of one message to `topic`; the answer's code and remark.
async fn v4_send(c: &mut V4, topic: &str) -> (i32, String) {
    let r = c
        .call(
            310,
            &[
                ("a", "PG"),
                ("b", topic),
                ("e", "0"),
                ("f", "0"),
                ("i", &props(&[])),
            ],
            b"v4".to_vec(),
        )
        .await;
    (r.code, r.remark.unwrap_or_default())
}

#[tokio::test]
async fn past_the_warning_level_new_messages_are_refused_by_name_and_reads_go_on() {
    // Messages stored while there is room.
    let b =
        TestBroker::start_with(|c| c.remoting_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let mut client = b.client.clone();
    send_ok(
        &mut client,
        msg("Full", b"stored", pb::MessageType::Normal, "ID-STORED"),
    )
    .await;
    let mut c = V4::connect(
        b.broker.as_ref().unwrap().remoting_addr.unwrap(),
        SerializeType::Json,
    )
    .await;
    assert_eq!(v4_send(&mut c, "Full").await.0, 0);
    let dir = b.stop().await;

    // The same data directory with a level any file system in use is past.
    let mut cfg = test_config(dir.path());
    cfg.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    cfg.disk_space_warning_level_ratio = 1e-9;
    let broker = server::start(cfg, Arc::new(SystemClock)).await.unwrap();
    let mut client = connect(broker.addr).await;
    let mut c = V4::connect(broker.remoting_addr.unwrap(), SerializeType::Json).await;

    // gRPC: INTERNAL_SERVER_ERROR as Apache's proxy answers a store that is not writable,
    // with the reason. The guard measures once a second, the first time at start.
    let until = Instant::now() + Duration::from_secs(10);
    // Sends taken before the guard's first measurement are stored (and read below).
    let mut taken = 0;
    let status = loop {
        let r = send(
            &mut client,
            vec![msg("Full", b"new", pb::MessageType::Normal, "ID-NEW")],
        )
        .await;
        let s = r.status.unwrap();
        if s.code != OK {
            break s;
        }
        taken += 1;
        assert!(Instant::now() < until, "sends still taken after 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(status.code, pb::Code::InternalServerError as i32);
    assert!(
        status.message.starts_with("DISK_FULL: ")
            && status.message.contains("disk_space_warning_level_ratio"),
        "{}",
        status.message
    );
    // A transaction's half message is a new message too.
    let half = send(
        &mut client,
        vec![msg(
            "Full",
            b"half",
            pb::MessageType::Transaction,
            "ID-HALF",
        )],
    )
    .await;
    assert!(half.status.unwrap().message.starts_with("DISK_FULL: "));

    // Remoting: SERVICE_NOT_AVAILABLE, as Apache's broker answers a put on a full disk (v4
    // producers retry it on another broker).
    let (code, remark) = v4_send(&mut c, "Full").await;
    assert_eq!(code, 14, "{remark}");
    assert!(remark.starts_with("DISK_FULL: "), "{remark}");

    // Reads go on: both stored messages are received and acked.
    let got = receive_all(&mut client, "Full", "Reader").await;
    let mut bodies: Vec<_> = got.iter().map(|m| m.body.clone()).collect();
    bodies.sort();
    let mut want = vec![b"new".to_vec(); taken];
    want.extend([b"stored".to_vec(), b"v4".to_vec()]);
    assert_eq!(bodies, want);

    // The gauge an alert can watch.
    let metrics = broker.metrics_addr.unwrap();
    let host = metrics.to_string();
    let (status, _, body) =
        common::web::exchange(metrics, "GET", "/metrics", &[("Host", &host)], None).await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.lines().any(|l| l == "rocklet_disk_writes_refused 1"),
        "no rocklet_disk_writes_refused 1 in the metrics"
    );
    broker.stop().await;
}
