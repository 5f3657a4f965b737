//! Truthful disk numbers (issue 31 item 5): the metrics endpoint reports the data
//! directory's file-system usage, the log's retained bytes and its oldest store time, and
//! GET_BROKER_RUNTIME_INFO (mqadmin brokerStatus) reports the real commitLogDiskRatio,
//! earliestMessageTimeStamp and put/get TPS instead of fixed zeros.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::v4::{props, V4};
use common::TestBroker;
use rocklet_broker::remoting::codec::SerializeType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// GET_BROKER_RUNTIME_INFO's KVTable.
async fn runtime_info(c: &mut V4) -> BTreeMap<String, String> {
    let r = c.call(28, &[], Vec::new()).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["table"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

/// The first of a `"r10 r60 r600"` TPS value.
fn first_rate(t: &BTreeMap<String, String>, key: &str) -> f64 {
    let v = &t[key];
    let parts: Vec<f64> = v.split(' ').map(|x| x.parse().unwrap()).collect();
    assert_eq!(parts.len(), 3, "{key} = {v:?}: three rates");
    parts[0]
}

async fn scrape(addr: SocketAddr) -> String {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    sock.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    sock.read_to_string(&mut text).await.unwrap();
    text
}

/// The value of an unlabelled sample, `None` when absent.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Polls `f` until it yields, for at most 10 s (the disk numbers are cached for 2 s).
async fn within<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut f: impl FnMut() -> F,
) -> T {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < until, "{what}: not within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn metrics_and_broker_status_report_the_disk_and_the_rates() {
    let b = TestBroker::start_with(|c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let running = b.broker.as_ref().unwrap();
    let (remoting, metrics_addr) = (
        running.remoting_addr.unwrap(),
        running.metrics_addr.unwrap(),
    );
    // The rates need a sample from before the sends.
    let m = running.metrics.clone();
    within("the first rate sample", || {
        let m = m.clone();
        async move { (!m.rates.is_empty()).then_some(()) }
    })
    .await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let before = runtime_info(&mut c).await;
    assert_eq!(first_rate(&before, "putTps"), 0.0, "nothing sent yet");

    const N: usize = 40;
    const BODY: usize = 1000;
    let body = vec![b'd'; BODY];
    for _ in 0..N {
        let r = c
            .call(
                310,
                &[
                    ("a", "PG"),
                    ("b", "DiskNumbers"),
                    ("e", "0"),
                    ("f", "0"),
                    ("i", &props(&[])),
                ],
                body.clone(),
            )
            .await;
        assert_eq!(r.code, 0, "send refused: {:?}", r.remark);
    }
    let pulled = c
        .call(
            11,
            &[
                ("consumerGroup", "CG"),
                ("topic", "DiskNumbers"),
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
    assert_eq!(pulled.code, 0, "{:?}", pulled.remark);

    // brokerStatus: the disk ratio of a real file system, rates that rose with the sends
    // and the pull, and the store time of the log's first record.
    let until = Instant::now() + Duration::from_secs(10);
    let t = loop {
        let t = runtime_info(&mut c).await;
        if t["earliestMessageTimeStamp"] != "-1" {
            break t;
        }
        assert!(
            Instant::now() < until,
            "earliestMessageTimeStamp: still -1 after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ratio: f64 = t["commitLogDiskRatio"].parse().unwrap();
    assert!(ratio > 0.0 && ratio <= 1.0, "commitLogDiskRatio {ratio}");
    assert!(
        t["commitLogDirCapacity"].starts_with("Total : ")
            && t["commitLogDirCapacity"].contains(", Free : "),
        "{:?}",
        t["commitLogDirCapacity"]
    );
    let put = first_rate(&t, "putTps");
    assert!(put > 0.0, "putTps {:?} after {N} sends", t["putTps"]);
    let get = first_rate(&t, "getTransferredTps");
    assert!(
        get > 0.0,
        "getTransferredTps {:?} after a pull",
        t["getTransferredTps"]
    );
    let earliest: u64 = t["earliestMessageTimeStamp"].parse().unwrap();
    let now = rocklet_broker::bench::epoch_ms();
    assert!(
        earliest > now - 600_000 && earliest <= now,
        "earliestMessageTimeStamp {earliest}, now {now}"
    );
    let max: u64 = t["commitLogMaxOffset"].parse().unwrap();
    let min: u64 = t["commitLogMinOffset"].parse().unwrap();
    assert!(max - min >= (N * BODY) as u64, "offsets {min}..{max}");

    // The metrics endpoint: the same numbers, once the 2 s cache has caught up with the sends.
    let text = within("retained bytes covering the sends", || async move {
        let text = scrape(metrics_addr).await;
        let retained = sample(&text, "rocklet_log_retained_bytes")?;
        let end = sample(&text, "rocklet_log_end_bytes")?;
        (retained >= (N * BODY) as f64 && retained == end).then_some(text)
    })
    .await;
    let used = sample(&text, "rocklet_disk_used_ratio").expect("rocklet_disk_used_ratio");
    assert!(used > 0.0 && used < 1.0, "rocklet_disk_used_ratio {used}");
    assert!(sample(&text, "rocklet_disk_available_bytes").unwrap() > 0.0);
    assert_eq!(sample(&text, "rocklet_log_segments"), Some(1.0));
    let oldest = sample(&text, "rocklet_log_oldest_message_timestamp_ms").unwrap() as u64;
    assert_eq!(oldest, earliest, "one oldest store time");
    assert!(sample(&text, "rocklet_pulled_total").unwrap() >= 1.0);
    b.stop().await;
}
