//! Receives on topics that do not exist leave nothing behind (issue #29, item 8). A
//! ReceiveMessage that finds nothing registers a wake-up for its topic on the core thread
//! (a message sent to the topic wakes the long poll); before the fix an ended poll's entry
//! stayed in that map for good, so receives on random unknown topic names grew the broker by
//! about 350 bytes each (~35 MB per 100k). Property: 20,000 receives on distinct unknown
//! topics and groups leave the map (`rocklet_long_poll_topics`) bounded by the polls still
//! waiting, not by the topics ever polled — and a long poll on a topic still wakes when a
//! message comes.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use rocklet_broker::pb::v2 as pb;

const RECEIVES: usize = 20_000;
const CLIENTS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receives_on_unknown_topics_leave_nothing_behind() {
    let b = TestBroker::start().await;
    let metrics = b.broker.as_ref().unwrap().metrics.clone();
    let topics = || metrics.long_poll_topics.load(Ordering::Relaxed);
    let t = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..CLIENTS {
        let mut c = connect(b.addr()).await;
        tasks.push(tokio::spawn(async move {
            for i in (w..RECEIVES).step_by(CLIENTS) {
                // A long poll of 0: it ends at once, as a poll on a quiet topic ends at its
                // deadline (the same entry is left behind either way).
                let r = receive(
                    &mut c,
                    &format!("Unknown-{i}"),
                    &format!("G-{i}"),
                    1,
                    30_000,
                    0,
                )
                .await;
                assert_eq!(
                    r.status.code,
                    pb::Code::MessageNotFound as i32,
                    "{}",
                    r.status.message
                );
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let left = topics();
    eprintln!(
        "{RECEIVES} receives on unknown topics in {:?}: {left} topics with wake-ups kept",
        t.elapsed()
    );
    assert!(
        left <= 2048,
        "{RECEIVES} ended receives on unknown topics left {left} wake-up entries behind"
    );

    // A long poll still wakes when its topic gets a message.
    let mut c = connect(b.addr()).await;
    let waiting = tokio::spawn(async move {
        let t = Instant::now();
        let r = receive(&mut c, "Later", "GL", 1, 30_000, 10_000).await;
        (r, t.elapsed())
    });
    while metrics.long_polls_waiting.load(Ordering::Relaxed) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut p = connect(b.addr()).await;
    send_ok(&mut p, msg("Later", b"x", pb::MessageType::Normal, "L1")).await;
    let (r, took) = waiting.await.unwrap();
    assert_eq!(r.messages.len(), 1, "{:?}", r.status);
    assert!(took < Duration::from_secs(5), "woken after {took:?}");
    b.stop().await;
}

/// The same through RocketMQ 4 remoting: long-polling PULLs and POPs on distinct unknown
/// topics and groups register the same wake-ups, and leave the map bounded the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remoting_pulls_and_pops_on_unknown_topics_leave_nothing_behind() {
    use common::v4::V4;
    use rocklet_broker::remoting::codec::SerializeType;
    const EACH: usize = 2_500;
    let b =
        TestBroker::start_with(|c| c.remoting_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let running = b.broker.as_ref().unwrap();
    let metrics = running.metrics.clone();
    let remoting = running.remoting_addr.unwrap();
    let t = Instant::now();
    let pulls = tokio::spawn(async move {
        let mut c = V4::connect(remoting, SerializeType::Json).await;
        for i in 0..EACH {
            let (topic, group) = (format!("UnknownPull-{i}"), format!("PG-{i}"));
            let r = c
                .call(
                    11,
                    &[
                        ("consumerGroup", &group),
                        ("topic", &topic),
                        ("queueId", "0"),
                        ("queueOffset", "0"),
                        ("maxMsgNums", "32"),
                        // A suspended (long-polling) pull of 1 ms.
                        ("sysFlag", "2"),
                        ("commitOffset", "0"),
                        ("suspendTimeoutMillis", "1"),
                        ("subscription", "*"),
                    ],
                    Vec::new(),
                )
                .await;
            assert_ne!(r.code, 0, "nothing to pull from {topic}: {:?}", r.remark);
        }
    });
    let pops = tokio::spawn(async move {
        let mut c = V4::connect(remoting, SerializeType::Json).await;
        for i in 0..EACH {
            let (topic, group) = (format!("UnknownPop-{i}"), format!("OG-{i}"));
            let r = c
                .call(
                    200_050,
                    &[
                        ("consumerGroup", &group),
                        ("topic", &topic),
                        ("queueId", "-1"),
                        ("maxMsgNums", "1"),
                        ("invisibleTime", "30000"),
                        ("pollTime", "1"),
                        ("bornTime", "0"),
                        ("initMode", "0"),
                        ("expType", "TAG"),
                        ("exp", "*"),
                        ("order", "false"),
                    ],
                    Vec::new(),
                )
                .await;
            assert_ne!(r.code, 0, "nothing to pop from {topic}: {:?}", r.remark);
        }
    });
    pulls.await.unwrap();
    pops.await.unwrap();
    let left = metrics.long_poll_topics.load(Ordering::Relaxed);
    eprintln!(
        "{EACH} pulls and {EACH} pops on unknown topics in {:?}: {left} topics with wake-ups kept",
        t.elapsed()
    );
    assert!(
        left <= 2048,
        "{} ended pulls and pops on unknown topics left {left} wake-up entries behind",
        2 * EACH
    );
    b.stop().await;
}
