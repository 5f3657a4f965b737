//! Order topics (issue #33, mqadmin updateTopic -o true) at the core: the flag and conf are
//! durable (a replay, a checkpoint and a retention cut agree), replicated, cleared with the
//! topic, validated; checkpoints and records of where the log starts of older layouts read.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use super::checkpoint::{decode, encode_version, Snapshot};
use super::retention::decode_log_start;
use super::*;
use crate::storage::MemStorage;

const T: &str = "Orders";

fn cfg() -> Config {
    Config {
        segment_size: 48 << 10,
        max_message_size: 1024,
        max_batch_size: 1024,
        auto_create_topics: true,
        ..Config::default()
    }
}

fn order_of(b: &Broker<MemStorage>, name: &str) -> Option<TopicOrder> {
    b.topic_order(name)
}

fn ordered(conf: &str) -> Option<TopicOrder> {
    Some(TopicOrder {
        order: true,
        conf: Some(conf.to_string()),
    })
}

fn send(b: &mut Broker<MemStorage>, topic: &str, n: usize) {
    for i in 0..n {
        let m = NewMessage::new(topic, alloc::format!("{i:04}-{}", "x".repeat(400)));
        let r = b.execute(1, Request::Send { messages: vec![m] }).unwrap();
        assert!(matches!(r, Reply::Sent(_)), "{r:?}");
    }
}

fn reopen(b: Broker<MemStorage>) -> Broker<MemStorage> {
    Broker::open(cfg(), b.into_storage(), 10).unwrap()
}

#[test]
fn the_flag_and_conf_survive_a_replay_a_checkpoint_and_a_retention_cut() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    b.create_topic(T, 8).unwrap().unwrap();
    assert_eq!(order_of(&b, T), Some(TopicOrder::default()));
    b.set_topic_order(T, true).unwrap().unwrap();
    b.set_order_conf(T, Some("rocklet:8")).unwrap().unwrap();
    assert_eq!(order_of(&b, T), ordered("rocklet:8"));
    // Setting one keeps the other.
    b.set_order_conf(T, Some("rocklet:4")).unwrap().unwrap();
    assert_eq!(order_of(&b, T), ordered("rocklet:4"));

    // From the log alone.
    let b = reopen(b);
    assert_eq!(order_of(&b, T), ordered("rocklet:4"));
    // From a checkpoint covering the record (the log below it is not replayed).
    let mut b = b;
    b.checkpoint().unwrap().unwrap();
    let mut b = reopen(b);
    assert_eq!(order_of(&b, T), ordered("rocklet:4"));

    // Retention retires the segments holding the records: the record of where the log
    // starts carries them.
    send(&mut b, T, 400);
    b.sync().unwrap();
    let bases = b.segment_bases().to_vec();
    assert!(bases.len() > 3, "{bases:?}");
    let cut = bases[bases.len() - 2];
    let r = b.retain(10, cut).unwrap();
    assert_eq!(r.start, cut, "{r:?}");
    for base in &r.retired {
        b.storage_mut().remove(*base).unwrap();
    }
    let mut image = b.into_storage();
    image.remove_checkpoint().unwrap();
    let b = Broker::open(cfg(), image, 10).unwrap();
    assert_eq!(b.log_start(), cut);
    assert_eq!(order_of(&b, T), ordered("rocklet:4"));
}

#[test]
fn a_deleted_topic_takes_its_order_with_it_and_its_name_starts_afresh() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    b.create_topic(T, 4).unwrap().unwrap();
    b.set_topic_order(T, true).unwrap().unwrap();
    b.set_order_conf(T, Some("rocklet:4")).unwrap().unwrap();
    b.delete_topic(T).unwrap().unwrap();
    assert_eq!(order_of(&b, T), None);
    let e = b.set_topic_order(T, true).unwrap().unwrap_err();
    assert_eq!(e, ClientError::UnknownTopic(T.into()));
    b.create_topic(T, 4).unwrap().unwrap();
    assert_eq!(order_of(&b, T), Some(TopicOrder::default()));
    // A replay and a checkpoint agree.
    let mut b = reopen(b);
    assert_eq!(order_of(&b, T), Some(TopicOrder::default()));
    b.checkpoint().unwrap().unwrap();
    let b = reopen(b);
    assert_eq!(order_of(&b, T), Some(TopicOrder::default()));
    // The conf deleted on its own (DELETE_KV_CONFIG) leaves the flag.
    let mut b = b;
    b.set_topic_order(T, true).unwrap().unwrap();
    b.set_order_conf(T, Some("rocklet:2")).unwrap().unwrap();
    b.set_order_conf(T, None).unwrap().unwrap();
    let b = reopen(b);
    assert_eq!(
        order_of(&b, T),
        Some(TopicOrder {
            order: true,
            conf: None
        })
    );
}

#[test]
fn bad_confs_are_refused_naming_the_problem_and_nothing_changes() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    b.create_topic(T, 4).unwrap().unwrap();
    let end = b.log.end();
    let long = alloc::format!("{}:1", "b".repeat(MAX_ORDER_CONF));
    let cases: [(&str, &str); 8] = [
        ("", "is not brokerName:queueCount"),
        ("rocklet", "is not brokerName:queueCount"),
        ("rocklet:0", "not within 1..=1024"),
        ("rocklet:x", "not within 1..=1024"),
        (":4", "is not a broker name"),
        ("a b:4", "is not a broker name"),
        ("rocklet:2;rocklet:2", "names broker `rocklet` twice"),
        ("rocklet:5", "topic `Orders` has 4"),
    ];
    for (conf, want) in cases {
        let e = b.set_order_conf(T, Some(conf)).unwrap().unwrap_err();
        assert!(e.to_string().contains(want), "{conf}: {e}");
    }
    let e = b.set_order_conf(T, Some(&long)).unwrap().unwrap_err();
    assert!(e.to_string().contains("at most 4096"), "{e}");
    let e = b.set_order_conf("%RETRY%g", Some("rocklet:1")).unwrap();
    assert!(e.is_err(), "{e:?}");
    let e = b.set_order_conf("Nope", Some("rocklet:1")).unwrap();
    assert_eq!(e, Err(ClientError::UnknownTopic("Nope".into())));
    assert_eq!(b.log.end(), end, "nothing written");
    assert_eq!(order_of(&b, T), Some(TopicOrder::default()));
    assert_eq!(
        parse_order_conf("a:1;b-2:3").unwrap(),
        vec![("a", 1), ("b-2", 3)]
    );
}

#[test]
fn a_replica_gets_the_order_through_the_log_and_refuses_to_set_it() {
    let mut m = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    m.create_topic(T, 4).unwrap().unwrap();
    m.set_topic_order(T, true).unwrap().unwrap();
    m.set_order_conf(T, Some("g1:4")).unwrap().unwrap();
    let mut r = Broker::open_replica(cfg(), MemStorage::new(), 0).unwrap();
    while let Some(chunk) = m.replication_chunk(r.log.end(), 1 << 20).unwrap() {
        let at = r.log.end();
        r.apply_replicated(at, &chunk).unwrap().unwrap();
    }
    assert_eq!(order_of(&r, T), ordered("g1:4"));
    assert_eq!(
        r.set_topic_order(T, false).unwrap(),
        Err(ClientError::NotMaster)
    );
    assert_eq!(
        r.set_order_conf(T, None).unwrap(),
        Err(ClientError::NotMaster)
    );
}

#[test]
fn a_version_1_checkpoint_and_a_version_2_log_start_still_read() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    b.create_topic(T, 4).unwrap().unwrap();
    b.set_topic_order(T, true).unwrap().unwrap();
    b.set_order_conf(T, Some("rocklet:4")).unwrap().unwrap();
    let snap = b.snapshot(None);
    assert_eq!(snap.orders, vec![(T.into(), true, "rocklet:4".into())]);
    // Version 1 (as builds before order topics wrote it): the same, with no orders.
    let v1 = encode_version(&snap, 1);
    assert_eq!(v1[8], 1);
    let old = decode(&v1).unwrap();
    assert!(old.orders.is_empty());
    assert_eq!(
        Snapshot {
            orders: snap.orders.clone(),
            ..old
        },
        snap
    );
    // Version 2 reads back whole; an unknown version is named.
    assert_eq!(decode(&encode_version(&snap, 2)).unwrap(), snap);
    let e = decode(&encode_version(&snap, 3)).unwrap_err();
    assert!(e.contains("version 3"), "{e}");
    // A broker opens from a version 1 checkpoint (what it covers is not replayed: a build
    // before order topics wrote no order records).
    let mut image = b.into_storage();
    image.record_checkpoint(&v1).unwrap();
    let b = Broker::open(cfg(), image, 10).unwrap();
    assert_eq!(b.topic_queue_count(T), Some(4));

    // LOG_START version 2: version 3's fields but the orders, as builds before wrote it.
    let v2 = postcard::to_allocvec(&(
        2u32,
        1024u64,
        vec![(String::from(T), 4u32)],
        vec![(String::from("G"), true)],
        Vec::<(String, String, u32, u64)>::new(),
        Vec::<(String, u32, u64)>::new(),
        vec![(1u64, 0u64)],
        Vec::<(u64, String, u32, u64, u32, i32, u64)>::new(),
        3u64,
        4u64,
        vec![(String::from("G"), String::from(T), 0u32, 7u64)],
    ))
    .unwrap();
    let r = decode_log_start(&v2).unwrap();
    assert_eq!((r.version, r.start, r.pops.len()), (2, 1024, 1));
    assert!(r.orders.is_empty());
    let e = decode_log_start(&postcard::to_allocvec(&(9u32, 0u64)).unwrap())
        .err()
        .unwrap();
    assert!(e.contains("versions 1 to 3"), "{e}");
}
