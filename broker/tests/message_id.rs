//! One message id, built in one place (`rocklet_core::types::OffsetMsgId`): a broker whose
//! store host is IPv6 names a message without a client id by RocketMQ's 56-digit offset
//! message id on every path — the send result, the stored message the core reads back, the
//! record remoting consumers decode it from — and the console finds it by that id.

mod common;

use std::net::SocketAddr;

use common::TestBroker;
use rocklet_broker::remoting::message::{encode_message, offset_msg_id};
use rocklet_core::config::StoreHost;
use rocklet_core::record::{self, Decoded, Host};
use rocklet_core::{NewMessage, Reply, Request};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// 2001:db8::1, port 10911.
const V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// GET `path` from the console: (status, JSON body).
async fn get(addr: SocketAddr, path: &str) -> (u16, Value) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8_lossy(&raw);
    let status = text[9..12].parse().unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn an_ipv6_store_host_gives_one_message_id_everywhere_and_the_console_finds_it() {
    let b = TestBroker::start_with(|c| {
        c.core.store_host = StoreHost::V6(V6, 10911);
        c.console_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let core = b.broker.as_ref().unwrap().core.clone();
    let sent = match core
        .request(Request::Send {
            messages: vec![NewMessage::new("Ids", "no client id")],
        })
        .await
        .unwrap()
    {
        Reply::Sent(r) => r.into_iter().next().unwrap(),
        other => panic!("{other:?}"),
    };
    // RocketMQ's layout, spelled out: 16 bytes of address, 4 of port, 8 of log offset.
    let want = format!(
        "20010DB8000000000000000000000001{:08X}{:016X}",
        10911, sent.offset
    );
    assert_eq!(sent.msg_id, want, "the send result");
    assert_eq!(offset_msg_id(Host::V6(V6, 10911), sent.offset), want);

    // The stored message, as the core reads it back (browse, console, gRPC receive).
    let (q, qo) = (sent.queue_id, sent.queue_offset);
    let stored = core
        .read_log(move |c| c.browse("Ids", q, qo, 1))
        .await
        .unwrap()
        .unwrap()
        .remove(0);
    assert_eq!(stored.msg_id, want, "the stored message");
    assert_eq!(stored.store_host, Host::V6(V6, 10911));
    // The record remoting consumers get: they compute the id from its STOREHOST and offset.
    let rec = encode_message(&stored, stored.offset, 0, &[]);
    let Ok(Decoded::Record(r)) = record::decode_rocketmq(&rec, u32::MAX) else {
        panic!("the encoded record does not decode");
    };
    assert_eq!(
        offset_msg_id(r.header.store_host, r.header.phys_offset),
        want,
        "the record remoting consumers decode"
    );

    // The console finds it by that id, in either case, and says so.
    let a = b.broker.as_ref().unwrap().console_addr.unwrap();
    for id in [want.clone(), want.to_ascii_lowercase()] {
        let (status, v) = get(a, &format!("/api/message?topic=Ids&id={id}")).await;
        assert_eq!(status, 200, "{v}");
        let items = v["items"].as_array().expect("items");
        assert_eq!(items.len(), 1, "{id}: {v}");
        assert_eq!(items[0]["message"]["message_id"], want.as_str());
    }
    // Another broker's id for the same offset is not this message.
    let v4 = offset_msg_id(Host::V4([10, 0, 0, 1], 10911), sent.offset);
    let (_, v) = get(a, &format!("/api/message?topic=Ids&id={v4}")).await;
    assert_eq!(v["items"].as_array().map(Vec::len), Some(0), "{v}");
    b.stop().await;
}

#[test]
fn an_ipv6_remoting_listener_is_an_ipv6_store_host() {
    use rocklet_broker::server::store_host;
    let configured = StoreHost::V4([192, 168, 1, 5], 10911);
    let at = |a: &str| store_host(a.parse().unwrap(), configured);
    assert_eq!(
        at("[2001:db8::1]:10911"),
        StoreHost::V6(V6, 10911),
        "a global IPv6 address"
    );
    let mut loopback = [0; 16];
    loopback[15] = 1;
    assert_eq!(at("[::1]:9"), StoreHost::V6(loopback, 9));
    assert_eq!(
        at("[::ffff:10.0.0.7]:9"),
        StoreHost::V4([10, 0, 0, 7], 9),
        "IPv4-mapped"
    );
    assert_eq!(
        at("[::]:9"),
        StoreHost::V4([192, 168, 1, 5], 9),
        "every address"
    );
    assert_eq!(at("10.0.0.8:9"), StoreHost::V4([10, 0, 0, 8], 9));
}

#[tokio::test]
async fn remoting_query_by_unique_key_finds_a_message_by_its_offset_message_id() {
    use common::v4::{props, V4};
    use rocklet_broker::remoting::codec::SerializeType;
    let b = TestBroker::start_with(|c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let addr = b.broker.as_ref().unwrap().remoting_addr.unwrap();
    let mut c = V4::connect(addr, SerializeType::Json).await;
    // SEND_MESSAGE_V2 with a client id: the result names the offset message id, which
    // queryMsgById (mqadmin) looks up by unique key when it cannot view it directly.
    let p = props(&[("UNIQ_KEY", "client-id-1")]);
    let r = c
        .call(
            310,
            &[("a", "PG"), ("b", "QueryT"), ("e", "0"), ("i", &p)],
            b"queried".to_vec(),
        )
        .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    let id = r.ext["msgId"].clone();
    assert_eq!(id.len(), 32, "{id}");
    let query = |key: String| {
        vec![
            ("topic".to_string(), "QueryT".to_string()),
            ("key".into(), key),
            ("maxNum".into(), "64".into()),
            ("beginTimestamp".into(), "0".into()),
            ("endTimestamp".into(), "9223372036854775807".into()),
            ("_UNIQUE_KEY_QUERY".into(), "true".into()),
        ]
    };
    for key in [id.clone(), id.to_ascii_lowercase(), "client-id-1".into()] {
        let h = query(key.clone());
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let r = c.call(12, &h, Vec::new()).await;
        assert_eq!(r.code, 0, "{key}: {:?}", r.remark);
        let Ok(Decoded::Record(rec)) = record::decode(&r.body, 1 << 24) else {
            panic!("{key}: no record in the answer");
        };
        assert_eq!(rec.body, b"queried");
        assert_eq!(
            offset_msg_id(rec.header.store_host, rec.header.phys_offset),
            id
        );
    }
    // The same offset under another store host is not this broker's message.
    let (_, at) = rocklet_core::types::OffsetMsgId::parse(&id).unwrap();
    let other = offset_msg_id(Host::V4([10, 9, 8, 7], 1), at);
    let h = query(other);
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = c.call(12, &h, Vec::new()).await;
    assert_eq!(r.code, 22, "{:?}", r.remark);
    b.stop().await;
}
