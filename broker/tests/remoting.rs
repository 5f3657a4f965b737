//! RocketMQ 4 remoting, in process, with a minimal v4 client written on the broker's own
//! codec: routes from the name-server role, sends (single, batch, JSON and binary headers),
//! transactions with END_TRANSACTION and CHECK_TRANSACTION_STATE, pulls with long polling,
//! offsets, and malformed frames.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::v4::{fields, props, V4};
use common::TestBroker;
use rocklet_broker::metrics::Metrics;
use rocklet_broker::remoting::codec::{self, RemotingCommand, SerializeType};
use rocklet_broker::remoting::conn::Ctx;
use rocklet_broker::remoting::server::RemotingServer;
use rocklet_core::record::{self, Decoded};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start() -> (TestBroker, SocketAddr, SocketAddr) {
    let b = TestBroker::start_with(|c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
        c.namesrv_listen = Some("127.0.0.1:0".parse().unwrap());
        c.max_long_polling_ms = 20_000;
    })
    .await;
    let r = b.broker.as_ref().unwrap();
    let (remoting, namesrv) = (r.remoting_addr.unwrap(), r.namesrv_addr.unwrap());
    (b, remoting, namesrv)
}

/// Topic, body, properties and queue offset of a record.
type Rec = (String, Vec<u8>, BTreeMap<String, String>, u64);

/// Every record in a pull (or check) body.
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
        out.push((
            r.topic.to_string(),
            r.body.to_vec(),
            p,
            r.header.queue_offset,
        ));
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

async fn pull(c: &mut V4, topic: &str, offset: u64, suspend_ms: u64) -> RemotingCommand {
    let off = offset.to_string();
    let suspend = suspend_ms.to_string();
    c.call(
        11,
        &[
            ("consumerGroup", "CG"),
            ("topic", topic),
            ("queueId", "0"),
            ("queueOffset", &off),
            ("maxMsgNums", "32"),
            ("sysFlag", if suspend_ms > 0 { "2" } else { "0" }),
            ("commitOffset", "0"),
            ("suspendTimeoutMillis", &suspend),
            ("subscription", "*"),
        ],
        Vec::new(),
    )
    .await
}

#[tokio::test]
async fn route_send_and_pull_with_json_and_binary_headers() {
    let (b, remoting, namesrv) = start().await;
    for (ser, topic) in [
        (SerializeType::Json, "V4Json"),
        (SerializeType::RocketMq, "V4Binary"),
    ] {
        let mut ns = V4::connect(namesrv, ser).await;
        let r = ns.call(105, &[("topic", topic)], Vec::new()).await;
        assert_eq!(r.code, 0, "{:?}", r.remark);
        let route: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            route["brokerDatas"][0]["brokerAddrs"]["0"],
            remoting.to_string()
        );
        assert_eq!(route["queueDatas"][0]["perm"], 6);

        let mut c = V4::connect(remoting, ser).await;
        let r = send(
            &mut c,
            topic,
            "hello",
            &[
                ("TAGS", "TagA"),
                ("KEYS", "k1 k2"),
                ("UNIQ_KEY", "ID1"),
                ("color", "blue"),
            ],
        )
        .await;
        assert_eq!(r.ext["queueId"], "0");
        assert_eq!(r.ext["queueOffset"], "0");
        assert_eq!(r.ext["msgId"].len(), 32, "offset message id");

        let r = pull(&mut c, topic, 0, 0).await;
        assert_eq!(r.code, 0, "{:?}", r.remark);
        assert_eq!(r.ext["nextBeginOffset"], "1");
        let recs = records(&r.body);
        assert_eq!(recs.len(), 1);
        let (t, body, p, qo) = &recs[0];
        assert_eq!(
            (t.as_str(), body.as_slice(), *qo),
            (topic, &b"hello"[..], 0)
        );
        assert_eq!(p["TAGS"], "TagA");
        assert_eq!(p["KEYS"], "k1 k2");
        assert_eq!(p["UNIQ_KEY"], "ID1");
        assert_eq!(p["color"], "blue");
        assert!(!p.contains_key("WAIT"));

        // Nothing more: NO_NEW_MSG at once without suspend.
        let r = pull(&mut c, topic, 1, 0).await;
        assert_eq!(r.code, 19);
        assert_eq!(r.ext["nextBeginOffset"], "1");
    }
    // An unknown topic with auto-creation off has no route.
    drop(b);
}

#[tokio::test]
async fn batch_offsets_and_consumer_list() {
    let (_b, remoting, _) = start().await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let mut body = Vec::new();
    for i in 0..3 {
        let m = format!("m{i}");
        let p = props(&[("UNIQ_KEY", &format!("U{i}")), ("TAGS", "T")]);
        let total = 4 + 4 + 4 + 4 + 4 + m.len() + 2 + p.len();
        body.extend_from_slice(&(total as u32).to_be_bytes());
        body.extend_from_slice(&[0; 8]);
        body.extend_from_slice(&0i32.to_be_bytes());
        body.extend_from_slice(&(m.len() as u32).to_be_bytes());
        body.extend_from_slice(m.as_bytes());
        body.extend_from_slice(&(p.len() as u16).to_be_bytes());
        body.extend_from_slice(p.as_bytes());
    }
    let r = c
        .call(
            320,
            &[("a", "PG"), ("b", "V4Batch"), ("e", "0"), ("m", "true")],
            body.clone(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(r.ext["msgId"].split(',').count(), 3);
    // A truncated batch is refused with a reason, and nothing is stored.
    let r = c
        .call(
            320,
            &[("a", "PG"), ("b", "V4Batch"), ("e", "0")],
            body[..body.len() - 1].to_vec(),
        )
        .await;
    assert_eq!(r.code, 13, "{:?}", r.remark);
    let r = pull(&mut c, "V4Batch", 0, 0).await;
    let recs = records(&r.body);
    let bodies: Vec<&[u8]> = recs.iter().map(|r| r.1.as_slice()).collect();
    assert_eq!(bodies, [&b"m0"[..], b"m1", b"m2"]);

    // Offsets: nothing committed reads 0; an update reads back; max offset is 3.
    let q = [
        ("consumerGroup", "CG"),
        ("topic", "V4Batch"),
        ("queueId", "0"),
    ];
    let r = c.call(14, &q, Vec::new()).await;
    assert_eq!((r.code, r.ext["offset"].as_str()), (0, "0"));
    let mut u = q.to_vec();
    u.push(("commitOffset", "2"));
    assert_eq!(c.call(15, &u, Vec::new()).await.code, 0);
    let r = c.call(14, &q, Vec::new()).await;
    assert_eq!(r.ext["offset"], "2");
    let r = c
        .call(30, &[("topic", "V4Batch"), ("queueId", "0")], Vec::new())
        .await;
    assert_eq!(r.ext["offset"], "3");

    // Consumers known from heartbeats.
    let hb = serde_json::json!({"clientID": "c1", "consumerDataSet": [{"groupName": "CG"}], "producerDataSet": []});
    assert_eq!(
        c.call(34, &[], serde_json::to_vec(&hb).unwrap()).await.code,
        0
    );
    let r = c.call(38, &[("consumerGroup", "CG")], Vec::new()).await;
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["consumerIdList"], serde_json::json!(["c1"]));
}

#[tokio::test]
async fn transactions_commit_rollback_and_check() {
    let (_b, remoting, _) = start().await;
    let mut p = V4::connect(remoting, SerializeType::Json).await;
    let hb = serde_json::json!({"clientID": "p1", "producerDataSet": [{"groupName": "TxPG"}, {"groupName": "CLIENT_INNER_PRODUCER"}]});
    assert_eq!(
        p.call(34, &[], serde_json::to_vec(&hb).unwrap()).await.code,
        0
    );
    let half = |body: &'static str| {
        (
            body,
            [("TRAN_MSG", "true"), ("PGROUP", "TxPG"), ("UNIQ_KEY", body)],
        )
    };
    let mut offsets = Vec::new();
    for b in ["commit", "rollback", "unknown"] {
        let (body, pr) = half(b);
        let r = send(&mut p, "V4Txn", body, &pr).await;
        let id = r.ext["msgId"].clone();
        // The offset message id ends with the log offset the client reports back.
        let off = u64::from_str_radix(&id[16..], 16).unwrap();
        offsets.push((off, r.ext["queueOffset"].clone()));
    }
    // Nothing visible yet.
    let mut c = V4::connect(remoting, SerializeType::RocketMq).await;
    assert_eq!(pull(&mut c, "V4Txn", 0, 0).await.code, 19);
    for ((off, qo), kind) in offsets.iter().zip(["8", "12", "0"]) {
        let off = off.to_string();
        let r = p
            .call(
                37,
                &[
                    ("producerGroup", "TxPG"),
                    ("tranStateTableOffset", qo),
                    ("commitLogOffset", &off),
                    ("commitOrRollback", kind),
                    ("fromTransactionCheck", "false"),
                ],
                Vec::new(),
            )
            .await;
        assert_eq!(r.code, 0, "{:?}", r.remark);
    }
    let r = pull(&mut c, "V4Txn", 0, 0).await;
    let recs = records(&r.body);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].0, "V4Txn", "committed under its real topic");
    assert_eq!(recs[0].1, b"commit");

    // The unknown one is checked over the producer's connection (300 ms timeout here).
    let deadline = Instant::now() + Duration::from_secs(15);
    let check = loop {
        assert!(Instant::now() < deadline, "no CHECK_TRANSACTION_STATE");
        let m = tokio::time::timeout(Duration::from_secs(15), p.read())
            .await
            .unwrap()
            .unwrap();
        if m.code == 39 && !m.is_response() {
            break m;
        }
    };
    assert!(check.is_oneway());
    assert_eq!(check.ext["commitLogOffset"], offsets[2].0.to_string());
    let recs = records(&check.body);
    assert_eq!(recs[0].1, b"unknown");
    assert_eq!(recs[0].2["PGROUP"], "TxPG");
    assert_eq!(recs[0].2["UNIQ_KEY"], "unknown");
    let mut answer = RemotingCommand::request(
        37,
        fields(&[
            ("producerGroup", "TxPG"),
            ("tranStateTableOffset", &check.ext["tranStateTableOffset"]),
            ("commitLogOffset", &check.ext["commitLogOffset"]),
            ("commitOrRollback", "8"),
            ("fromTransactionCheck", "true"),
        ]),
        Vec::new(),
    );
    answer.flag = codec::FLAG_ONEWAY;
    p.write(&answer).await;
    let r = pull(&mut c, "V4Txn", 1, 10_000).await;
    let recs = records(&r.body);
    assert_eq!(recs.len(), 1, "{r:?}");
    assert_eq!(recs[0].1, b"unknown");
    // The rollback never shows.
    assert_eq!(pull(&mut c, "V4Txn", 2, 0).await.code, 19);
}

#[tokio::test]
async fn pull_long_polls_until_a_message_arrives() {
    let (_b, remoting, _) = start().await;
    let mut a = V4::connect(remoting, SerializeType::Json).await;
    let mut w = V4::connect(remoting, SerializeType::Json).await;
    send(&mut a, "V4Poll", "first", &[]).await;
    let t = Instant::now();
    let waiter = tokio::spawn(async move { pull(&mut w, "V4Poll", 1, 15_000).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(&mut a, "V4Poll", "second", &[]).await;
    let r = waiter.await.unwrap();
    assert_eq!(r.code, 0);
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "woken, not timed out"
    );
    assert_eq!(records(&r.body)[0].1, b"second");
    // With nothing arriving, it answers NO_NEW_MSG when the suspension ends.
    let t = Instant::now();
    let r = pull(&mut a, "V4Poll", 2, 500).await;
    assert_eq!(r.code, 19);
    assert!(t.elapsed() >= Duration::from_millis(450));
}

async fn closed(addr: SocketAddr, bytes: &[u8]) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("the broker closes the connection")
        .unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
}

#[tokio::test]
async fn malformed_frames_close_the_connection_and_the_broker_keeps_serving() {
    let (_b, remoting, namesrv) = start().await;
    // Length below the header-length field, huge, and the maximum u32.
    closed(remoting, &3u32.to_be_bytes()).await;
    closed(remoting, &((codec::MAX_FRAME + 1) as u32).to_be_bytes()).await;
    closed(namesrv, &u32::MAX.to_be_bytes()).await;
    // Header length beyond the frame.
    let mut f = 6u32.to_be_bytes().to_vec();
    f.extend_from_slice(&1000u32.to_be_bytes());
    f.extend_from_slice(b"{}");
    closed(remoting, &f).await;
    // Truncated binary header; undecodable JSON; unknown serialization type.
    for (ty, h) in [(1u32, &b"\x00\x0a\x00"[..]), (0, b"{\"code\":"), (7, b"{}")] {
        let mut f = ((4 + h.len()) as u32).to_be_bytes().to_vec();
        f.extend_from_slice(&((ty << 24) | h.len() as u32).to_be_bytes());
        f.extend_from_slice(h);
        closed(remoting, &f).await;
    }
    // A header above remoting_max_header_bytes (256 KiB) closes before it is read.
    let mut f = (4 + (300u32 << 10)).to_be_bytes().to_vec();
    f.extend_from_slice(&(300u32 << 10).to_be_bytes());
    closed(remoting, &f).await;
    // A declared 16 MiB frame that never comes: the connection just waits, then closes
    // when the client goes (nothing is allocated up front).
    {
        let mut s = TcpStream::connect(remoting).await.unwrap();
        s.write_all(&(codec::MAX_FRAME as u32).to_be_bytes())
            .await
            .unwrap();
        s.write_all(&[0; 16]).await.unwrap();
    }
    // Unknown request codes get an answer naming them.
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let r = c.call(9999, &[], Vec::new()).await;
    assert_eq!(r.code, 3);
    assert!(r.remark.unwrap().contains("9999"));
    // Missing and malformed header fields are answered, not fatal.
    let r = c.call(11, &[("topic", "T")], Vec::new()).await;
    assert_eq!(r.code, 1);
    assert!(r.remark.unwrap().contains("consumerGroup"));
    let r = c
        .call(
            37,
            &[("commitLogOffset", "x"), ("commitOrRollback", "8")],
            Vec::new(),
        )
        .await;
    assert!(r.remark.unwrap().contains("commitLogOffset"));
    let r = c.call(34, &[], b"not json".to_vec()).await;
    assert_eq!(r.code, 1);
    // Still serving.
    send(&mut c, "V4StillUp", "ok", &[]).await;
}

#[tokio::test]
async fn consumer_send_back_goes_to_the_retry_topic() {
    let (_b, remoting, _) = start().await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    send(&mut c, "V4Back", "again", &[("UNIQ_KEY", "B1")]).await;
    let r = pull(&mut c, "V4Back", 0, 0).await;
    let id = {
        // The log offset of the pulled record is its PHYSICALOFFSET.
        let Ok(Decoded::Record(rec)) = record::decode(&r.body, 1 << 24) else {
            panic!("no record")
        };
        rec.header.phys_offset.to_string()
    };
    let r = c
        .call(
            36,
            &[
                ("offset", &id),
                ("group", "CG"),
                ("delayLevel", "1"),
                ("originMsgId", "B1"),
                ("originTopic", "V4Back"),
                ("maxReconsumeTimes", "16"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // Level 1 is 1 s: the retry topic gets it then (long poll).
    let r = pull(&mut c, "%RETRY%CG", 0, 10_000).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let recs = records(&r.body);
    assert_eq!(recs[0].1, b"again");
    assert_eq!(
        recs[0].2.get("RETRY_TOPIC").map(String::as_str),
        Some("V4Back")
    );
}

type Frames = tokio::sync::mpsc::UnboundedReceiver<RemotingCommand>;

/// The connection's incoming frames on a channel (cancel-safe to wait on), and its write half.
fn split(c: V4) -> (tokio::net::tcp::OwnedWriteHalf, Frames) {
    let (mut r, w) = c.s.into_split();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let mut len = [0u8; 4];
            if r.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut buf = vec![0; codec::frame_length(len).unwrap()];
            if r.read_exact(&mut buf).await.is_err() {
                return;
            }
            if tx.send(codec::decode_frame(&buf).unwrap()).is_err() {
                return;
            }
        }
    });
    (w, rx)
}

/// Waits for a CHECK_TRANSACTION_STATE on either connection; which one got it.
async fn next_check(a: &mut Frames, b: &mut Frames) -> (usize, RemotingCommand) {
    tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            tokio::select! {
                Some(m) = a.recv() => if m.code == 39 { return (0, m) },
                Some(m) = b.recv() => if m.code == 39 { return (1, m) },
            }
        }
    })
    .await
    .expect("a check in time")
}

#[tokio::test]
async fn an_unanswered_check_goes_to_another_connection_of_the_group() {
    let (_b, remoting, _) = start().await;
    let mut a = V4::connect(remoting, SerializeType::Json).await;
    let mut b = V4::connect(remoting, SerializeType::RocketMq).await;
    for (c, id) in [(&mut a, "pa"), (&mut b, "pb")] {
        let hb = serde_json::json!({"clientID": id, "producerDataSet": [{"groupName": "AltPG"}]});
        assert_eq!(
            c.call(34, &[], serde_json::to_vec(&hb).unwrap()).await.code,
            0
        );
    }
    // A producer of another group is never asked.
    let mut other = V4::connect(remoting, SerializeType::Json).await;
    let hb = serde_json::json!({"clientID": "po", "producerDataSet": [{"groupName": "OtherPG"}]});
    assert_eq!(
        other
            .call(34, &[], serde_json::to_vec(&hb).unwrap())
            .await
            .code,
        0
    );
    send(
        &mut a,
        "V4Alt",
        "pending",
        &[("TRAN_MSG", "true"), ("PGROUP", "AltPG")],
    )
    .await;
    let (mut wa, mut ra) = split(a);
    let (mut wb, mut rb) = split(b);
    // The first check is left unanswered; the next goes to the other connection.
    let (first, c1) = next_check(&mut ra, &mut rb).await;
    let (second, c2) = next_check(&mut ra, &mut rb).await;
    assert_ne!(first, second, "the check moved to the other connection");
    assert_eq!(c1.ext["commitLogOffset"], c2.ext["commitLogOffset"]);
    // The second one answers rollback: no more checks, nothing delivered.
    let mut answer = RemotingCommand::request(
        37,
        fields(&[
            ("producerGroup", "AltPG"),
            ("commitLogOffset", &c2.ext["commitLogOffset"]),
            ("commitOrRollback", "12"),
            ("fromTransactionCheck", "true"),
        ]),
        Vec::new(),
    );
    answer.flag = codec::FLAG_ONEWAY;
    answer.serialize = if second == 0 {
        SerializeType::Json
    } else {
        SerializeType::RocketMq
    };
    let w = if second == 0 { &mut wa } else { &mut wb };
    w.write_all(&answer.encode()).await.unwrap();
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    for q in 0..4 {
        let off = "0";
        let qs = q.to_string();
        let r = c
            .call(
                11,
                &[
                    ("consumerGroup", "CG"),
                    ("topic", "V4Alt"),
                    ("queueId", &qs),
                    ("queueOffset", off),
                    ("maxMsgNums", "32"),
                    ("sysFlag", "0"),
                ],
                Vec::new(),
            )
            .await;
        assert_ne!(r.code, 0, "rolled back, never delivered");
    }
    let quiet = tokio::time::timeout(Duration::from_millis(1500), other.read()).await;
    assert!(
        quiet.is_err(),
        "another group's producer got a check: {quiet:?}"
    );
}

fn zlib(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

async fn send_raw(c: &mut V4, topic: &str, sys_flag: u32, body: Vec<u8>) -> RemotingCommand {
    let sys = sys_flag.to_string();
    c.call(
        310,
        &[
            ("a", "PG"),
            ("b", topic),
            ("e", "0"),
            ("f", &sys),
            ("i", ""),
        ],
        body,
    )
    .await
}

#[tokio::test]
async fn compressed_bodies_are_stored_plain_and_bombs_are_refused() {
    let (_b, remoting, _) = start().await;
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    // 10 KiB and 100 KiB, as v4 clients send them above 4 KiB: zlib with COMPRESSED (bit
    // 0), with and without the 4.9+/5.x ZLIB type bits (3 << 8).
    let plain: Vec<Vec<u8>> = [10 * 1024, 100 * 1024]
        .iter()
        .map(|n| (0..*n).map(|i: usize| (i * 7 % 253) as u8).collect())
        .collect();
    let r = send_raw(&mut c, "V4Zip", 1, zlib(&plain[0])).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = send_raw(&mut c, "V4Zip", 1 | (3 << 8), zlib(&plain[1])).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = pull(&mut c, "V4Zip", 0, 0).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let got: Vec<Vec<u8>> = records(&r.body).into_iter().map(|r| r.1).collect();
    assert_eq!(got, plain, "pulled bodies are the plain bytes");
    // The pulled records carry no COMPRESSED flag (consumers would inflate them again).
    let Ok(Decoded::Record(rec)) = record::decode(&r.body, 1 << 24) else {
        panic!("undecodable record");
    };
    assert_eq!(rec.header.sys_flag & 1, 0);

    // A zip bomb: 8 MiB of zeros in ~8 KiB, past the 4 MiB max message size.
    let r = send_raw(&mut c, "V4Zip", 1, zlib(&vec![0; 8 << 20])).await;
    assert_eq!(r.code, 13, "MESSAGE_ILLEGAL");
    let remark = r.remark.unwrap();
    assert!(remark.contains("4194304 bytes"), "{remark}");
    // Malformed zlib data, truncated data, and LZ4 (not inflated here) are named.
    let r = send_raw(&mut c, "V4Zip", 1, b"not zlib".to_vec()).await;
    assert_eq!(r.code, 13);
    assert!(r.remark.unwrap().contains("not valid zlib"));
    let z = zlib(&plain[0]);
    let r = send_raw(&mut c, "V4Zip", 1, z[..z.len() / 2].to_vec()).await;
    assert_eq!(r.code, 13);
    assert!(r.remark.unwrap().contains("not valid zlib"));
    let r = send_raw(&mut c, "V4Zip", 1 | (1 << 8), vec![1, 2, 3]).await;
    assert_eq!(r.code, 13);
    assert!(r.remark.unwrap().contains("LZ4"));
    // None of them was stored; the broker still serves.
    let r = pull(&mut c, "V4Zip", 2, 0).await;
    assert_eq!(r.code, 19, "nothing after the two good messages");
    send(&mut c, "V4Zip", "after", &[]).await;
}

/// A remoting listener over an in-memory core, core and remoting both on `clock`.
async fn start_on(
    clock: rocklet_broker::clock::ManualClock,
) -> (RemotingServer, SocketAddr, Arc<Metrics>) {
    use rocklet_broker::clock::Clock;
    let dir = std::env::temp_dir();
    let mut cfg = common::test_config(&dir);
    cfg.core.notify_available = true;
    let core = rocklet_core::Broker::open(
        cfg.core.clone(),
        rocklet_core::AnyStorage::Mem(rocklet_core::MemStorage::new()),
        clock.now(),
    )
    .unwrap();
    let clock: Arc<dyn Clock> = Arc::new(clock);
    let metrics = Arc::new(Metrics::default());
    let (core, _thread) =
        rocklet_broker::driver::spawn(core, clock.clone(), metrics.clone()).unwrap();
    let ctx = Ctx::new(core, Arc::new(cfg))
        .with_clock(clock)
        .with_metrics(metrics.clone());
    let s = RemotingServer::start(Some("127.0.0.1:0".parse().unwrap()), None, ctx)
        .await
        .unwrap();
    let addr = s.addr.unwrap();
    (s, addr, metrics)
}

fn lock_body(group: &str, client: &str, queues: &[u32]) -> Vec<u8> {
    let set: Vec<serde_json::Value> = queues
        .iter()
        .map(|q| serde_json::json!({"topic": "V4Lock", "brokerName": "rocklet", "queueId": q}))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "consumerGroup": group, "clientId": client, "onlyThisBroker": true, "mqSet": set,
    }))
    .unwrap()
}

/// LOCK_BATCH_MQ: the queue ids the answer says the client holds.
async fn lock(c: &mut V4, group: &str, client: &str, queues: &[u32]) -> Vec<u32> {
    let r = c.call(41, &[], lock_body(group, client, queues)).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let mut ids: Vec<u32> = v["lockOKMQSet"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            assert_eq!(q["topic"], "V4Lock");
            assert_eq!(q["brokerName"], "rocklet");
            q["queueId"].as_u64().unwrap() as u32
        })
        .collect();
    ids.sort_unstable();
    ids
}

async fn unlock(c: &mut V4, group: &str, client: &str, queues: &[u32]) {
    let r = c.call(42, &[], lock_body(group, client, queues)).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
}

#[tokio::test]
async fn queue_locks_contention_expiry_unlock_and_release() {
    let clock = rocklet_broker::clock::ManualClock::new(1_000_000);
    let (_s, addr, metrics) = start_on(clock.clone()).await;
    let mut a = V4::connect(addr, SerializeType::Json).await;
    let mut b = V4::connect(addr, SerializeType::RocketMq).await;
    assert_eq!(lock(&mut a, "G", "A", &[0, 1]).await, [0, 1]);
    // Contention: b gets only what a does not hold; another group is independent.
    assert_eq!(lock(&mut b, "G", "B", &[1, 2]).await, [2]);
    assert_eq!(lock(&mut b, "G2", "B", &[0, 1]).await, [0, 1]);
    // a renews queue 0 at +30 s; queue 1 is left to expire.
    clock.advance(30_000);
    assert_eq!(lock(&mut a, "G", "A", &[0]).await, [0]);
    clock.advance(30_000);
    assert_eq!(
        lock(&mut b, "G", "B", &[0, 1]).await,
        Vec::<u32>::new(),
        "60 s: not yet expired"
    );
    clock.advance(1);
    assert_eq!(
        lock(&mut b, "G", "B", &[0, 1]).await,
        [1],
        "queue 1 expired, 0 was renewed"
    );
    assert_eq!(
        lock(&mut a, "G", "A", &[0, 1]).await,
        [0],
        "b holds queue 1 now"
    );
    // Unlock: only the holder's unlock counts.
    unlock(&mut b, "G", "B", &[0]).await;
    assert_eq!(lock(&mut b, "G", "B", &[0]).await, Vec::<u32>::new());
    unlock(&mut a, "G", "A", &[0]).await;
    assert_eq!(lock(&mut b, "G", "B", &[0]).await, [0]);
    // Unregistering releases the client's locks in that group (B renews its G2 locks first).
    assert_eq!(lock(&mut b, "G2", "B", &[0, 1]).await, [0, 1]);
    let r = b
        .call(35, &[("clientID", "B"), ("consumerGroup", "G")], Vec::new())
        .await;
    assert_eq!(r.code, 0);
    assert_eq!(lock(&mut a, "G", "A", &[0, 1, 2]).await, [0, 1, 2]);
    assert_eq!(
        lock(&mut a, "G2", "A", &[0]).await,
        Vec::<u32>::new(),
        "G2 still B's"
    );
    // Closing the connection releases what was locked over it.
    drop(a);
    let mut c = V4::connect(addr, SerializeType::Json).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if lock(&mut c, "G", "C", &[0, 1, 2]).await == [0, 1, 2] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "locks of a closed connection were not released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Malformed bodies are answered naming the problem.
    for (body, what) in [
        (&b"not json"[..], "not valid JSON"),
        (br#"{"clientId":"X","mqSet":[]}"#, "consumerGroup"),
        (
            br#"{"consumerGroup":"G","clientId":"X","mqSet":3}"#,
            "mqSet",
        ),
        (
            br#"{"consumerGroup":"G","clientId":"X","mqSet":[{"topic":"T","queueId":-1}]}"#,
            "queueId",
        ),
        (
            br#"{"consumerGroup":"G","clientId":"X","mqSet":[{"queueId":1}]}"#,
            "topic",
        ),
        (
            br#"{"consumerGroup":"G","clientId":"X","mqSet":[{"topic":"a b","queueId":1}]}"#,
            "mqSet[0].topic",
        ),
    ] {
        let r = c.call(41, &[], body.to_vec()).await;
        assert_eq!(r.code, 1, "{what}");
        let remark = r.remark.unwrap();
        assert!(remark.contains(what), "{remark}");
    }
    // Those six refusals count in the broker's request errors.
    assert_eq!(
        metrics
            .request_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        6
    );
}

/// POP_MESSAGE; on SUCCESS, each record's (queue offset, reconsume times, body, extraInfo
/// built as the Java client builds it from the response header).
async fn pop(
    c: &mut V4,
    topic: &str,
    max: u32,
    invisible_ms: u64,
    poll_ms: u64,
) -> (RemotingCommand, Vec<(u64, u32, Vec<u8>, String)>) {
    pop_as(c, topic, max, invisible_ms, poll_ms, false).await
}

/// [`pop`], orderly when `order` (the Java client's header `order`).
async fn pop_as(
    c: &mut V4,
    topic: &str,
    max: u32,
    invisible_ms: u64,
    poll_ms: u64,
    order: bool,
) -> (RemotingCommand, Vec<(u64, u32, Vec<u8>, String)>) {
    let (max, inv, poll) = (
        max.to_string(),
        invisible_ms.to_string(),
        poll_ms.to_string(),
    );
    let r = c
        .call(
            200_050,
            &[
                ("consumerGroup", "PopG"),
                ("topic", topic),
                ("queueId", "-1"),
                ("maxMsgNums", &max),
                ("invisibleTime", &inv),
                ("pollTime", &poll),
                ("bornTime", "0"),
                ("initMode", "0"),
                ("expType", "TAG"),
                ("exp", "*"),
                ("order", if order { "true" } else { "false" }),
            ],
            Vec::new(),
        )
        .await;
    for k in ["popTime", "invisibleTime", "reviveQid", "restNum"] {
        assert!(
            r.ext.contains_key(k),
            "response header lacks {k}: {:?}",
            r.ext
        );
    }
    if r.code != 0 {
        return (r, Vec::new());
    }
    // startOffsetInfo: "0 <queue> <ck>;…"; msgOffsetInfo: "0 <queue> <offset>,…;…".
    let start: BTreeMap<u32, u64> = r.ext["startOffsetInfo"]
        .split(';')
        .map(|e| {
            let f: Vec<&str> = e.split(' ').collect();
            assert_eq!(f[0], "0");
            (f[1].parse().unwrap(), f[2].parse().unwrap())
        })
        .collect();
    let offsets: BTreeMap<u32, Vec<u64>> = r.ext["msgOffsetInfo"]
        .split(';')
        .map(|e| {
            let f: Vec<&str> = e.split(' ').collect();
            let o = f[2].split(',').map(|o| o.parse().unwrap()).collect();
            (f[1].parse().unwrap(), o)
        })
        .collect();
    let mut out = Vec::new();
    let mut body = &r.body[..];
    while !body.is_empty() {
        let Ok(Decoded::Record(rec)) = record::decode(body, 1 << 24) else {
            panic!("undecodable record in a pop body");
        };
        let (q, off) = (rec.header.queue_id, rec.header.queue_offset);
        assert!(offsets[&q].contains(&off));
        let extra = format!(
            "{} {} {} {} 0 rocklet {q} {off}",
            start[&q], r.ext["popTime"], r.ext["invisibleTime"], r.ext["reviveQid"]
        );
        out.push((off, rec.header.reconsume_times, rec.body.to_vec(), extra));
        body = &body[rec.total_size as usize..];
    }
    (r, out)
}

async fn ack(c: &mut V4, topic: &str, extra: &str) -> RemotingCommand {
    let off = extra.rsplit(' ').next().unwrap().to_string();
    c.call(
        200_051,
        &[
            ("consumerGroup", "PopG"),
            ("topic", topic),
            ("queueId", "0"),
            ("extraInfo", extra),
            ("offset", &off),
        ],
        Vec::new(),
    )
    .await
}

/// CHANGE_MESSAGE_INVISIBLETIME; the extraInfo the Java client then builds.
async fn change(
    c: &mut V4,
    topic: &str,
    extra: &str,
    invisible_ms: u64,
) -> (RemotingCommand, String) {
    let off = extra.rsplit(' ').next().unwrap().to_string();
    let inv = invisible_ms.to_string();
    let r = c
        .call(
            200_053,
            &[
                ("consumerGroup", "PopG"),
                ("topic", topic),
                ("queueId", "0"),
                ("extraInfo", extra),
                ("offset", &off),
                ("invisibleTime", &inv),
            ],
            Vec::new(),
        )
        .await;
    if r.code != 0 {
        return (r, String::new());
    }
    let next = format!(
        "{off} {} {} {} 0 rocklet 0 {off}",
        r.ext["popTime"], r.ext["invisibleTime"], r.ext["reviveQid"]
    );
    (r, next)
}

/// v4 orderly pop (issue 34; Apache's PopMessageProcessor with order = true): a queue gives
/// nothing more while a batch of it is in flight, a message not acked in time comes again
/// (reconsumed, counted in orderCountInfo) before anything after it, and the answers carry
/// reviveQid 999, whose receipts ack.
#[tokio::test]
async fn orderly_pop_holds_a_queue_until_its_batch_is_acked() {
    let clock = rocklet_broker::clock::ManualClock::new(1_000_000);
    let (_s, addr, _) = start_on(clock.clone()).await;
    let mut c = V4::connect(addr, SerializeType::Json).await;
    for i in 0..3 {
        send(&mut c, "V4PopOrder", &format!("o{i}"), &[]).await;
    }
    let (r, got) = pop_as(&mut c, "V4PopOrder", 1, 10_000, 0, true).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(r.ext["reviveQid"], "999");
    assert_eq!(r.ext["orderCountInfo"], "0 qo0%0 0");
    assert_eq!((got.len(), got[0].0, &got[0].2[..]), (1, 0, &b"o0"[..]));
    // o0 in flight: the queue gives nothing, orderly or not.
    for order in [true, false] {
        let (r, _) = pop_as(&mut c, "V4PopOrder", 3, 10_000, 0, order).await;
        assert_eq!(r.code, 19, "order {order}: {:?}", r.remark);
    }
    let r = ack(&mut c, "V4PopOrder", &got[0].3).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // Then o1, not acked in time: it comes again, reconsumed once, before o2.
    let (r, got) = pop_as(&mut c, "V4PopOrder", 1, 10_000, 0, true).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!((got[0].0, got[0].1), (1, 0));
    clock.advance(11_000);
    let (r, again) = pop_as(&mut c, "V4PopOrder", 3, 10_000, 0, true).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(r.ext["orderCountInfo"], "0 qo0%1 1");
    let offs: Vec<(u64, u32)> = again.iter().map(|g| (g.0, g.1)).collect();
    assert_eq!(offs, [(1, 1)], "o1 again, alone");
    let r = ack(&mut c, "V4PopOrder", &again[0].3).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let (r, last) = pop_as(&mut c, "V4PopOrder", 3, 10_000, 0, true).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!((last.len(), &last[0].2[..]), (1, &b"o2"[..]));
}

#[tokio::test]
async fn pop_ack_and_change_invisible_time() {
    let clock = rocklet_broker::clock::ManualClock::new(1_000_000);
    let (s, addr, _) = start_on(clock.clone()).await;
    let mut c = V4::connect(addr, SerializeType::Json).await;
    for i in 0..3 {
        send(&mut c, "V4Pop", &format!("p{i}"), &[("TAGS", "t")]).await;
    }
    let (r, got) = pop(&mut c, "V4Pop", 3, 30_000, 0).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(r.ext["popTime"], "1000000");
    assert_eq!(r.ext["invisibleTime"], "30000");
    let offs: Vec<(u64, u32, &[u8])> = got.iter().map(|g| (g.0, g.1, &g.2[..])).collect();
    assert_eq!(offs, [(0, 0, &b"p0"[..]), (1, 0, b"p1"), (2, 0, b"p2")]);
    // Invisible now: another pop finds nothing.
    let (r, _) = pop(&mut c, "V4Pop", 3, 30_000, 0).await;
    assert_eq!(r.code, 19);

    // Ack; a second ack of the same receipt is refused.
    let r = ack(&mut c, "V4Pop", &got[0].3).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = ack(&mut c, "V4Pop", &got[0].3).await;
    assert_ne!(r.code, 0);
    assert!(r.remark.unwrap().contains("INVALID_RECEIPT_HANDLE"));

    // Change the invisible time of p1: the delivery is renewed, and the receipt from before
    // the change still acks it (once: the renewed one is refused after).
    let (r, renewed) = change(&mut c, "V4Pop", &got[1].3, 10_000).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(r.ext["popTime"], "1000000");
    assert_ne!(r.ext["reviveQid"], "0");
    let r = ack(&mut c, "V4Pop", &got[1].3).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let r = ack(&mut c, "V4Pop", &renewed).await;
    assert!(r.remark.unwrap().contains("INVALID_RECEIPT_HANDLE"));

    // p2 to 5 s, twice (a renewed receipt renews again); 6 s later it is popped again, as
    // a second attempt, and the renewed receipt is stale.
    let (r, renewed) = change(&mut c, "V4Pop", &got[2].3, 20_000).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let (r, renewed) = change(&mut c, "V4Pop", &renewed, 5_000).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    clock.advance(6_000);
    let (r, again) = pop(&mut c, "V4Pop", 3, 30_000, 0).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(r.ext["popTime"], "1006000");
    assert_eq!(
        (again.len(), again[0].0, again[0].1),
        (1, 2, 1),
        "p2, reconsumed once"
    );
    let r = ack(&mut c, "V4Pop", &renewed).await;
    assert!(r.remark.unwrap().contains("STALE_RECEIPT_HANDLE"));
    let r = ack(&mut c, "V4Pop", &again[0].3).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);

    // Long polling: nothing for pollTime, then a message sent meanwhile ends the wait.
    let t = Instant::now();
    let (r, _) = pop(&mut c, "V4Pop", 3, 30_000, 300).await;
    assert_eq!(r.code, 19);
    assert!(t.elapsed() >= Duration::from_millis(250));
    let mut p = V4::connect(addr, SerializeType::Json).await;
    let waiting = tokio::spawn(async move {
        let t = Instant::now();
        let (r, got) = pop(&mut c, "V4Pop", 3, 30_000, 10_000).await;
        (r.code, got.len(), t.elapsed(), c)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    send(&mut p, "V4Pop", "late", &[]).await;
    let (code, n, waited, mut c) = waiting.await.unwrap();
    assert_eq!((code, n), (0, 1));
    assert!(
        waited < Duration::from_secs(5),
        "woken by the send, not the timeout"
    );

    // At most 32 messages per pop, as RocketMQ's brokers answer.
    for i in 0..40 {
        send(&mut p, "V4PopMany", &format!("m{i}"), &[]).await;
    }
    let (r, many) = pop(&mut c, "V4PopMany", 100, 30_000, 0).await;
    assert_eq!((r.code, many.len()), (0, 32));
    // Counted by code name, refusals as errors (6 pops: 4 found, 2 not; 3 changes).
    let (pops, pop_errors) = s.stats.get("POP_MESSAGE");
    assert_eq!(
        (pops, pop_errors),
        (6, 2),
        "PULL_NOT_FOUND counts as not SUCCESS"
    );
    assert_eq!(s.stats.get("CHANGE_MESSAGE_INVISIBLETIME"), (3, 0));
    let (acks, ack_errors) = s.stats.get("ACK_MESSAGE");
    assert_eq!((acks, ack_errors), (6, 3));
    // Bad requests are answered naming the problem.
    for (extra, code, what) in [
        ("garbage", 13, "fields"),
        ("1 2 3 0 0 rocklet 0 x", 13, "queue offset"),
        ("1 2 3 0 1 rocklet 0 0", 13, "retry topic"),
        ("0 2 3 777 0 rocklet 0 0", 1, "reviveQid 777"),
        ("99999 2 3 0 0 rocklet 0 0", 1, "INVALID_RECEIPT_HANDLE"),
    ] {
        let r = ack(&mut c, "V4Pop", extra).await;
        assert_eq!(r.code, code, "{extra}: {:?}", r.remark);
        let remark = r.remark.unwrap();
        assert!(remark.contains(what), "{extra}: {remark}");
    }
    let r = c
        .call(
            200_050,
            &[
                ("consumerGroup", "PopG"),
                ("topic", "V4Pop"),
                ("invisibleTime", "1000"),
                ("expType", "XPATH"),
                ("exp", "a > 1"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 13);
    assert!(r.remark.unwrap().contains("XPATH"));
    let r = c
        .call(
            200_050,
            &[
                ("consumerGroup", "PopG"),
                ("topic", "V4Pop"),
                ("invisibleTime", "0"),
            ],
            Vec::new(),
        )
        .await;
    assert_eq!(r.code, 13);
    assert!(r.remark.unwrap().contains("invisibleTime"));
}

#[tokio::test]
async fn a_peer_that_never_reads_is_not_read_until_it_does() {
    let (s, addr, _) = start_on(rocklet_broker::clock::ManualClock::new(1_000_000)).await;
    let mut c = V4::connect(addr, SerializeType::Json).await;
    send(&mut c, "V4Slow", &"x".repeat(32 << 10), &[]).await;
    // 3,000 pulls answered with a 32 KiB message each (~96 MiB), none of them read.
    const N: i32 = 3_000;
    let (mut rd, mut wr) = c.s.into_split();
    let writer = tokio::spawn(async move {
        for i in 1..=N {
            let mut req = RemotingCommand::request(
                11,
                fields(&[
                    ("consumerGroup", "SlowG"),
                    ("topic", "V4Slow"),
                    ("queueId", "0"),
                    ("queueOffset", "0"),
                    ("maxMsgNums", "1"),
                    ("sysFlag", "0"),
                    ("commitOffset", "0"),
                    ("suspendTimeoutMillis", "0"),
                    ("subscription", "*"),
                ]),
                Vec::new(),
            );
            req.opaque = i;
            wr.write_all(&req.encode()).await.unwrap();
        }
        wr
    });
    // The broker stops reading once the unread answers pass its limit.
    let mut handled = 0;
    let mut last_change = Instant::now();
    while last_change.elapsed() < Duration::from_millis(700) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = s.stats.get("PULL_MESSAGE").0;
        if now != handled {
            handled = now;
            last_change = Instant::now();
        }
    }
    assert!(
        handled < u64::from(N as u32) / 2,
        "{handled} of {N} pulls were read and answered while the peer read nothing"
    );
    // Others are served meanwhile.
    let mut other = V4::connect(addr, SerializeType::Json).await;
    send(&mut other, "V4Slow", "still serving", &[]).await;
    // Once the peer reads, every request is answered, none lost.
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.len() < N as usize {
        let mut len = [0u8; 4];
        tokio::time::timeout_at(deadline.into(), rd.read_exact(&mut len))
            .await
            .expect("all answers in time")
            .unwrap();
        let mut buf = vec![0; codec::frame_length(len).unwrap()];
        rd.read_exact(&mut buf).await.unwrap();
        let r = codec::decode_frame(&buf).unwrap();
        assert_eq!(r.code, 0, "{:?}", r.remark);
        assert!(r.body.len() > 32 << 10);
        assert!(seen.insert(r.opaque), "one answer per request");
    }
    writer.await.unwrap();
    assert_eq!(s.stats.get("PULL_MESSAGE").0, u64::from(N as u32));
}

/// The broker's metrics endpoint counts remoting requests by code name, with their errors.
#[tokio::test]
async fn remoting_requests_show_in_the_metrics() {
    let b = TestBroker::start_with(|c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let remoting = b.broker.as_ref().unwrap().remoting_addr.unwrap();
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    send(&mut c, "V4Metrics", "m", &[]).await;
    let r = c.call(999_999, &[], Vec::new()).await;
    assert_ne!(r.code, 0, "an unknown code is refused");
    let addr = b.broker.as_ref().unwrap().metrics_addr.unwrap();
    let mut sock = TcpStream::connect(addr).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    sock.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut text = String::new();
    sock.read_to_string(&mut text).await.unwrap();
    for needle in [
        "rocklet_remoting_requests_total{code=\"SEND_MESSAGE_V2\"} 1",
        "rocklet_remoting_request_errors_total{code=\"SEND_MESSAGE_V2\"} 0",
        "rocklet_remoting_requests_total{code=\"OTHER\"} 1",
        "rocklet_remoting_request_errors_total{code=\"OTHER\"} 1",
    ] {
        assert!(text.contains(needle), "missing `{needle}` in\n{text}");
    }
    b.stop().await;
}

/// v4 clients send END_TRANSACTION and UPDATE_CONSUMER_OFFSET oneway and close the
/// connection right after (at shutdown): every request fully read is carried out, even
/// though its connection is gone by the time it runs.
#[tokio::test]
async fn oneway_requests_are_carried_out_after_their_connection_closes() {
    let (_b, remoting, _) = start().await;
    let mut p = V4::connect(remoting, SerializeType::Json).await;
    let mut offsets = Vec::new();
    for i in 0..5 {
        let id = format!("T{i}");
        let r = send(
            &mut p,
            "V4OnewayTxn",
            &id,
            &[
                ("TRAN_MSG", "true"),
                ("PGROUP", "OnewayPG"),
                ("UNIQ_KEY", &id),
            ],
        )
        .await;
        let off = u64::from_str_radix(&r.ext["msgId"][16..], 16).unwrap();
        offsets.push((off, r.ext["queueOffset"].clone()));
    }
    send(&mut p, "V4OnewayOffset", "o", &[]).await;
    // One write: five oneway commits and a oneway offset update, then the socket closes.
    let mut bytes = Vec::new();
    for (i, (off, qo)) in offsets.iter().enumerate() {
        let mut c = RemotingCommand::request(
            37,
            fields(&[
                ("producerGroup", "OnewayPG"),
                ("tranStateTableOffset", qo),
                ("commitLogOffset", &off.to_string()),
                ("commitOrRollback", "8"),
                ("fromTransactionCheck", "false"),
            ]),
            Vec::new(),
        );
        c.flag = codec::FLAG_ONEWAY;
        c.opaque = 100 + i as i32;
        bytes.extend(c.encode());
    }
    let mut c = RemotingCommand::request(
        15,
        fields(&[
            ("consumerGroup", "OnewayCG"),
            ("topic", "V4OnewayOffset"),
            ("queueId", "0"),
            ("commitOffset", "1"),
        ]),
        Vec::new(),
    );
    c.flag = codec::FLAG_ONEWAY;
    c.opaque = 200;
    bytes.extend(c.encode());
    {
        let mut s = TcpStream::connect(remoting).await.unwrap();
        s.write_all(&bytes).await.unwrap();
    }
    // Every transaction committed, the offset stored.
    let mut c = V4::connect(remoting, SerializeType::Json).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while got.len() < 5 {
        assert!(
            Instant::now() < deadline,
            "only {got:?} of 5 oneway commits were carried out after the connection closed"
        );
        let r = pull(&mut c, "V4OnewayTxn", got.len() as u64, 500).await;
        got.extend(records(&r.body).into_iter().map(|r| r.1));
    }
    assert_eq!(got, [b"T0", b"T1", b"T2", b"T3", b"T4"]);
    let q = [
        ("consumerGroup", "OnewayCG"),
        ("topic", "V4OnewayOffset"),
        ("queueId", "0"),
    ];
    let r = c.call(14, &q, Vec::new()).await;
    assert_eq!(
        (r.code, r.ext["offset"].as_str()),
        (0, "1"),
        "the oneway offset update was stored"
    );
    // Long polls are not waited for: a connection closing with a 20 s pull pending is
    // cleaned up at once (its queue lock is free for another client).
    let mut a = V4::connect(remoting, SerializeType::Json).await;
    assert_eq!(lock(&mut a, "LockG", "holder", &[0]).await, [0]);
    let mut poll = RemotingCommand::request(
        11,
        fields(&[
            ("consumerGroup", "LockG"),
            ("topic", "V4Lock"),
            ("queueId", "0"),
            ("queueOffset", "0"),
            ("sysFlag", "2"),
            ("suspendTimeoutMillis", "20000"),
        ]),
        Vec::new(),
    );
    poll.opaque = 99;
    a.write(&poll).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(a);
    let t = Instant::now();
    let mut b = V4::connect(remoting, SerializeType::Json).await;
    while lock(&mut b, "LockG", "other", &[0]).await.is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the closed connection's long poll held up its clean-up"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
