//! Issue #12 ("trust") at the core: each test here failed on the broker before its fix.
//!
//! - a reply never tells of state that is not durable (duplicate END_TRANSACTION);
//! - a send-back takes only a message the group can consume;
//! - group ids never alias, and requests cannot create groups or topics without bound;
//! - a transaction is ended only by its own producer group;
//! - a client's offset is a client error, never a storage failure;
//! - one request's cost is bounded (big batches, tag filters that match nothing).

use rocklet_core::testing::CrashStorage;
use rocklet_core::{
    Broker, ClientError, Config, Delay, FileStorage, FlushMode, MemStorage, NewMessage, Output,
    ReceiptHandle, Reply, Request, Resolution, Storage, TagFilter, TxnId,
};

fn cfg() -> Config {
    Config {
        default_queues: 1,
        ..Config::default()
    }
}

fn exec<S: Storage>(b: &mut Broker<S>, now: u64, req: Request) -> Reply {
    b.execute(now, req).unwrap()
}

fn send<S: Storage>(b: &mut Broker<S>, topic: &str, body: &str) -> u64 {
    let m = NewMessage::new(topic, body.as_bytes().to_vec());
    match exec(b, 0, Request::Send { messages: vec![m] }) {
        Reply::Sent(r) => r[0].offset,
        other => panic!("{other:?}"),
    }
}

fn prepare<S: Storage>(b: &mut Broker<S>, group: &str, topic: &str, body: &str) -> TxnId {
    let req = Request::Prepare {
        group: group.into(),
        message: NewMessage::new(topic, body.as_bytes().to_vec()),
        check_immunity_ms: Some(3_600_000),
    };
    match exec(b, 0, req) {
        Reply::Sent(r) => r[0].txn.unwrap(),
        other => panic!("{other:?}"),
    }
}

fn end(txn: TxnId, resolution: Resolution, group: Option<&str>) -> Request {
    Request::EndTransaction {
        txn,
        resolution,
        group: group.map(String::from),
        from_check: false,
    }
}

fn receive(group: &str, topic: &str, filter: TagFilter) -> Request {
    Request::Receive {
        group: group.into(),
        topic: topic.into(),
        queue_id: None,
        max: 32,
        invisible_ms: 60_000,
        filter,
    }
}

fn received<S: Storage>(
    b: &mut Broker<S>,
    group: &str,
    topic: &str,
) -> Vec<rocklet_core::Received> {
    match exec(b, 0, receive(group, topic, TagFilter::All)) {
        Reply::Received(r) => r,
        other => panic!("{other:?}"),
    }
}

fn send_back(group: &str, offset: u64) -> Request {
    Request::SendBack {
        group: group.into(),
        offset,
        delay_level: None,
    }
}

fn not_consumable(r: &Reply) -> bool {
    matches!(r, Reply::Error(ClientError::NotConsumable(_)))
}

// ---- item 2: replies that depend on unsynced state -------------------------------------------

#[test]
fn a_duplicate_or_conflicting_end_waits_for_the_resolution_to_be_durable() {
    let cfg = Config {
        flush: FlushMode::Sync,
        ..cfg()
    };
    let mut b = Broker::open(cfg.clone(), CrashStorage::new(), 0).unwrap();
    let txn = prepare(&mut b, "PG", "T", "half");
    // Two COMMITs on two connections at once, and a late ROLLBACK: the first writes the op
    // record; the others only read the state it made.
    b.handle(0, 1, end(txn, Resolution::Commit, Some("PG")))
        .unwrap();
    b.handle(0, 2, end(txn, Resolution::Commit, Some("PG")))
        .unwrap();
    b.handle(0, 3, end(txn, Resolution::Rollback, Some("PG")))
        .unwrap();
    b.handle(0, 4, receive("G", "T", TagFilter::All)).unwrap();
    let early: Vec<Output> = std::iter::from_fn(|| b.poll_output()).collect();
    assert!(
        early.is_empty(),
        "replies left before the op record was durable: {early:?}"
    );
    // A power cut now: the transaction is still pending, and no client was told otherwise.
    let crashed = Broker::open(cfg, CrashStorage::from_mem(b.storage().crash()), 0).unwrap();
    assert_eq!(crashed.pending_transaction_count(), 1);
    b.sync().unwrap();
    let ids: Vec<u64> = std::iter::from_fn(|| b.poll_output())
        .filter_map(|o| match o {
            Output::Reply { id, .. } => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(ids, vec![1, 2, 3, 4]);
}

// ---- item 5: send-back ---------------------------------------------------------------------

#[test]
fn send_back_takes_only_a_message_the_group_can_consume() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    let pending = prepare(&mut b, "PG", "T", "secret-pending");
    let rolled = prepare(&mut b, "PG", "T", "secret-rolled-back");
    let committed = prepare(&mut b, "PG", "T", "committed");
    exec(&mut b, 0, end(rolled, Resolution::Rollback, Some("PG")));
    exec(&mut b, 0, end(committed, Resolution::Commit, Some("PG")));
    let delayed = match exec(
        &mut b,
        0,
        Request::Send {
            messages: vec![NewMessage::new("T", &b"later"[..]).with_delay(Delay::After(60_000))],
        },
    ) {
        Reply::Sent(r) => r[0].offset,
        other => panic!("{other:?}"),
    };
    let plain = send(&mut b, "T", "plain");
    let op_record = b.log_end() - 1; // inside the last record: no record starts there
    for (what, offset) in [
        ("a pending half", pending.0),
        ("a rolled-back half", rolled.0),
        ("a delay not yet due", delayed),
        ("not a record start", op_record),
        ("past the log", u64::MAX),
    ] {
        let r = exec(&mut b, 0, send_back("G", offset));
        assert!(not_consumable(&r), "{what}: {r:?}");
    }
    assert!(matches!(
        exec(&mut b, 0, send_back("G", committed.0)),
        Reply::Sent(_)
    ));
    assert!(matches!(
        exec(&mut b, 0, send_back("G", plain)),
        Reply::Sent(_)
    ));
    // Once delivered, the delayed message can be sent back too.
    b.handle_timeout(60_001).unwrap();
    assert!(matches!(
        exec(&mut b, 60_001, send_back("G", delayed)),
        Reply::Sent(_)
    ));
    // Nothing uncommitted reached a retry topic: deliver the retries and look.
    b.handle_timeout(10_000_000).unwrap();
    let bodies: Vec<Vec<u8>> = b
        .topics()
        .iter()
        .filter(|t| t.name.starts_with("%RETRY%"))
        .flat_map(|t| b.browse(&t.name, 0, 0, 100).unwrap())
        .map(|m| m.body)
        .collect();
    assert_eq!(bodies.len(), 3, "{bodies:?}");
    assert!(!bodies.iter().any(|x| x.starts_with(b"secret")));
    // Another group's retry message is not this group's.
    let retry_msg = b.browse("%RETRY%G", 0, 0, 1).unwrap().remove(0);
    assert!(not_consumable(&exec(
        &mut b,
        0,
        send_back("Other", retry_msg.offset)
    )));
    assert!(matches!(
        exec(&mut b, 0, send_back("G", retry_msg.offset)),
        Reply::Sent(_)
    ));
}

// ---- item 6: groups ------------------------------------------------------------------------

#[test]
fn group_ids_never_alias() {
    // Under 16-bit ids, group 65,536 + k shared group k's offsets, in-flight receipts and
    // timers.
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    send(&mut b, "T", "m");
    let first = received(&mut b, "g0", "T");
    assert_eq!(first.len(), 1);
    for i in 1..=65_536u32 {
        let r = exec(
            &mut b,
            0,
            Request::CommitOffset {
                group: format!("g{i}"),
                topic: "T".into(),
                queue_id: 0,
                offset: 0,
            },
        );
        assert!(matches!(r, Reply::OffsetCommitted), "{r:?}");
    }
    // The 65,537th group sees the message g0 holds in flight, and cannot ack g0's handle.
    let alias = received(&mut b, "g65536", "T");
    assert_eq!(
        alias.len(),
        1,
        "group 65536 shares group 0's in-flight state"
    );
    let ack = Request::Ack {
        group: "g65536".into(),
        handle: first[0].handle.clone(),
    };
    assert!(matches!(exec(&mut b, 0, ack), Reply::Error(_)));
    let ack = Request::Ack {
        group: "g0".into(),
        handle: first[0].handle.clone(),
    };
    assert!(matches!(exec(&mut b, 0, ack), Reply::Acked));
}

#[test]
fn requests_create_no_group_or_topic_past_the_limits() {
    let cfg = Config {
        max_groups: 3,
        max_topics: 12,
        ..cfg()
    };
    let mut b = Broker::open(cfg, MemStorage::new(), 0).unwrap();
    // Receives and pulls on a topic that does not exist create nothing at all.
    for i in 0..100 {
        assert!(matches!(
            exec(&mut b, 0, receive(&format!("ghost{i}"), "Missing", TagFilter::All)),
            Reply::Received(r) if r.is_empty()
        ));
    }
    send(&mut b, "T", "m");
    // Reads of an existing topic create no group either.
    for i in 0..100 {
        let pull = Request::Pull {
            group: format!("reader{i}"),
            topic: "T".into(),
            queue_id: 0,
            offset: None,
            max: 1,
            filter: TagFilter::All,
            auto_commit: false,
        };
        assert!(matches!(exec(&mut b, 0, pull), Reply::Pulled { .. }));
    }
    // Three groups fit; a fourth is refused by name, and the three go on working.
    for g in ["a", "b", "c"] {
        assert_eq!(received(&mut b, g, "T").len(), 1, "{g}");
    }
    let r = exec(&mut b, 0, receive("d", "T", TagFilter::All));
    assert!(
        matches!(r, Reply::Error(ClientError::TooManyGroups { max: 3 })),
        "{r:?}"
    );
    let prepare_new = Request::Prepare {
        group: "new-producer".into(),
        message: NewMessage::new("T", &b"x"[..]),
        check_immunity_ms: None,
    };
    assert!(matches!(
        exec(&mut b, 0, prepare_new),
        Reply::Error(ClientError::TooManyGroups { .. })
    ));
    // Topics: new names stop at the limit; existing ones take sends.
    let mut refused = None;
    for i in 0..20 {
        let m = NewMessage::new(format!("Auto{i}"), &b"x"[..]);
        if let Reply::Error(e) = exec(&mut b, 0, Request::Send { messages: vec![m] }) {
            refused = Some((i, e));
            break;
        }
    }
    let (at, e) = refused.expect("topics past max_topics were created");
    assert!(matches!(e, ClientError::TooManyTopics { max: 12 }), "{e:?}");
    assert!(at > 0);
    send(&mut b, "T", "still");
}

// ---- item 7: who may end a transaction -----------------------------------------------------

#[test]
fn only_its_own_producer_group_ends_a_transaction() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    let txn = prepare(&mut b, "Owner", "T", "x");
    let r = exec(&mut b, 0, end(txn, Resolution::Commit, None));
    assert!(
        matches!(r, Reply::Error(ClientError::ProducerGroupRequired(_))),
        "{r:?}"
    );
    let r = exec(&mut b, 0, end(txn, Resolution::Commit, Some("")));
    assert!(
        matches!(r, Reply::Error(ClientError::ProducerGroupRequired(_))),
        "{r:?}"
    );
    let r = exec(&mut b, 0, end(txn, Resolution::Rollback, Some("Thief")));
    assert!(
        matches!(r, Reply::Error(ClientError::WrongProducerGroup { .. })),
        "{r:?}"
    );
    assert_eq!(
        b.pending_transaction_count(),
        1,
        "a foreign END changed the transaction"
    );
    assert!(matches!(
        exec(&mut b, 0, end(txn, Resolution::Commit, Some("Owner"))),
        Reply::Ended {
            duplicate: false,
            ..
        }
    ));
    // Resolved: a foreign group learns nothing, not even the resolution.
    let r = exec(&mut b, 0, end(txn, Resolution::Commit, Some("Thief")));
    assert!(
        matches!(r, Reply::Error(ClientError::WrongProducerGroup { .. })),
        "{r:?}"
    );
    assert!(matches!(
        exec(&mut b, 0, end(txn, Resolution::Commit, Some("Owner"))),
        Reply::Ended {
            duplicate: true,
            ..
        }
    ));
}

// ---- item 8: client offsets are client errors ----------------------------------------------

#[test]
fn offsets_past_the_log_are_client_errors_not_storage_failures() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = Broker::open(cfg(), FileStorage::open(dir.path()).unwrap(), 0).unwrap();
    send(&mut b, "T", "m");
    for txn in [u64::MAX, 1 << 63, b.log_end(), b.log_end() + 1] {
        let r = b
            .execute(0, end(TxnId(txn), Resolution::Commit, Some("PG")))
            .unwrap_or_else(|e| panic!("END_TRANSACTION {txn:#x}: a storage failure: {e}"));
        assert!(
            matches!(r, Reply::Error(ClientError::UnknownTransaction(_))),
            "{txn:#x}: {r:?}"
        );
        let r = b
            .execute(0, send_back("G", txn))
            .unwrap_or_else(|e| panic!("send-back {txn:#x}: a storage failure: {e}"));
        assert!(not_consumable(&r), "{txn:#x}: {r:?}");
    }
}

// ---- items 9 and 10: the cost of one request -----------------------------------------------

#[test]
fn a_batch_of_fifty_thousand_messages_is_stored_in_one_pass() {
    // The per-queue count of a write was quadratic in the batch: 100,000 messages held the
    // broker for minutes.
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    let messages: Vec<NewMessage> = (0..50_000)
        .map(|_| NewMessage::new("Big", &b"x"[..]))
        .collect();
    let Reply::Sent(r) = exec(&mut b, 0, Request::Send { messages }) else {
        panic!("batch refused")
    };
    assert_eq!(r.len(), 50_000);
    assert!(r
        .iter()
        .enumerate()
        .all(|(i, s)| s.queue_offset == i as u64));
}

#[test]
fn a_tag_filter_that_matches_nothing_scans_a_bounded_number_of_units() {
    let cfg = Config {
        max_scan_units: 100,
        notify_available: true,
        ..cfg()
    };
    let mut b = Broker::open(cfg, MemStorage::new(), 0).unwrap();
    let many: Vec<NewMessage> = (0..1_000)
        .map(|_| NewMessage::new("Tags", &b"a"[..]).with_tag("A"))
        .collect();
    exec(&mut b, 0, Request::Send { messages: many });
    exec(
        &mut b,
        0,
        Request::Send {
            messages: vec![NewMessage::new("Tags", &b"b"[..]).with_tag("B")],
        },
    );
    while b.poll_output().is_some() {}
    let only_b = TagFilter::Tags(vec!["B".into()]);
    // Pull: at most 100 units, then the offset to go on from.
    let pull = Request::Pull {
        group: "P".into(),
        topic: "Tags".into(),
        queue_id: 0,
        offset: Some(0),
        max: 32,
        filter: only_b.clone(),
        auto_commit: false,
    };
    match exec(&mut b, 0, pull) {
        Reply::Pulled {
            messages,
            next_offset,
            max_offset,
        } => {
            assert!(messages.is_empty());
            assert_eq!((next_offset, max_offset), (100, 1_001));
        }
        other => panic!("{other:?}"),
    }
    // Receive: each call scans at most 100 units and marks the queue available, so a long
    // poll comes back at once for the rest; the B message comes on the 11th.
    let mut calls = 0;
    let found = loop {
        calls += 1;
        assert!(calls <= 20, "the receive never got to the end");
        b.handle(0, calls, receive("R", "Tags", only_b.clone()))
            .unwrap();
        let outs: Vec<Output> = std::iter::from_fn(|| b.poll_output()).collect();
        let got = outs.iter().find_map(|o| match o {
            Output::Reply {
                reply: Reply::Received(r),
                ..
            } => Some(r.clone()),
            _ => None,
        });
        let got = got.expect("a reply");
        if !got.is_empty() {
            break got;
        }
        assert!(
            matches!(outs.last(), Some(Output::Available { topic, .. }) if topic == "Tags"),
            "an early stop must wake a long poll after its reply: {outs:?}"
        );
    };
    assert_eq!(calls, 11);
    assert_eq!(found[0].message.body, b"b");
    let h: &ReceiptHandle = &found[0].handle;
    assert_eq!(h.queue_offset, 1_000);
}

// ---- issue #15: an offset that did not change is not written again -------------------------

#[test]
fn an_unchanged_offset_commit_writes_nothing() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    send(&mut b, "T", "m");
    let commit = |offset| Request::CommitOffset {
        group: "G".into(),
        topic: "T".into(),
        queue_id: 0,
        offset,
    };
    assert!(matches!(exec(&mut b, 0, commit(1)), Reply::OffsetCommitted));
    let end = b.log_end();
    for _ in 0..10 {
        assert!(matches!(exec(&mut b, 0, commit(1)), Reply::OffsetCommitted));
    }
    assert_eq!(b.log_end(), end, "unchanged offsets were written again");
    assert!(matches!(exec(&mut b, 0, commit(0)), Reply::OffsetCommitted));
    assert!(b.log_end() > end, "a changed offset must be written");
    assert_eq!(b.committed_offset("G", "T", 0), Some(0));
}

// ---- issue #15: topics as RocketMQ's admin tools manage them -------------------------------

#[test]
fn a_send_keeps_a_declared_topics_queues() {
    let mut b = Broker::open(Config::default(), MemStorage::new(), 0).unwrap();
    b.create_topic("Two", 2).unwrap().unwrap();
    send(&mut b, "Two", "m");
    assert_eq!(
        b.topic_queue_count("Two"),
        Some(2),
        "a send grew a declared topic"
    );
    let half = Request::Prepare {
        group: "PG".into(),
        message: NewMessage::new("Two", &b"h"[..]),
        check_immunity_ms: None,
    };
    exec(&mut b, 0, half);
    assert_eq!(b.topic_queue_count("Two"), Some(2));
    let b = Broker::open(Config::default(), b.into_storage(), 1).unwrap();
    assert_eq!(b.topic_queue_count("Two"), Some(2));
}

#[test]
fn a_deleted_topic_is_gone_and_its_name_starts_afresh() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    send(&mut b, "Gone", "old");
    let commit = Request::CommitOffset {
        group: "G".into(),
        topic: "Gone".into(),
        queue_id: 0,
        offset: 1,
    };
    exec(&mut b, 0, commit);
    assert_eq!(b.groups_of_topic("Gone"), vec!["G".to_string()]);
    b.delete_topic("Gone").unwrap().unwrap();
    assert!(b.topic_info("Gone").is_none());
    assert!(!b.topics().iter().any(|t| t.name == "Gone"));
    assert!(b.groups_of_topic("Gone").is_empty());
    assert!(matches!(
        b.delete_topic("Gone").unwrap(),
        Err(ClientError::UnknownTopic(_))
    ));
    assert!(matches!(
        exec(&mut b, 0, receive("G", "Gone", TagFilter::All)),
        Reply::Received(r) if r.is_empty()
    ));
    send(&mut b, "Gone", "new");
    let check = |b: &mut Broker<MemStorage>| {
        let t = b.topic_info("Gone").expect("made again");
        assert_eq!(t.queues[0].1, 1, "the new topic starts at offset 0");
        let got = b.browse("Gone", 0, 0, 10).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body, b"new");
        assert_eq!(b.committed_offset("G", "Gone", 0), None);
    };
    check(&mut b);
    // The same after a restart: the deletion is in the log.
    let mut b = Broker::open(cfg(), b.into_storage(), 1).unwrap();
    check(&mut b);
}

#[test]
fn messages_are_found_by_key_and_message_id_once_visible() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    let mut m = NewMessage::new("Orders", &b"order 42"[..]);
    m.keys = vec!["order-42".into(), "user-7".into()];
    m.message_id = Some("MSGID-42".into());
    exec(&mut b, 0, Request::Send { messages: vec![m] });
    for i in 0..2000 {
        let mut m = NewMessage::new("Orders", format!("other {i}").into_bytes());
        m.keys = vec![format!("order-{}", i + 1000)];
        exec(&mut b, 0, Request::Send { messages: vec![m] });
    }
    let body = |v: Vec<rocklet_core::Message>| v.into_iter().map(|m| m.body).collect::<Vec<_>>();
    assert_eq!(
        body(b.messages_by_key("Orders", "order-42", 10).unwrap()),
        vec![b"order 42".to_vec()]
    );
    assert_eq!(
        body(b.messages_by_key("Orders", "user-7", 10).unwrap()),
        vec![b"order 42".to_vec()]
    );
    assert_eq!(
        body(b.messages_by_key("Orders", "MSGID-42", 10).unwrap()),
        vec![b"order 42".to_vec()]
    );
    assert!(
        b.messages_by_key("Other", "order-42", 10)
            .unwrap()
            .is_empty(),
        "another topic"
    );
    assert!(b.messages_by_key("Orders", "nope", 10).unwrap().is_empty());
    // A half is found once committed, never while pending or once rolled back.
    let mut h = NewMessage::new("Orders", &b"paid"[..]);
    h.keys = vec!["pay-1".into()];
    let txn = match exec(
        &mut b,
        0,
        Request::Prepare {
            group: "PG".into(),
            message: h,
            check_immunity_ms: Some(3_600_000),
        },
    ) {
        Reply::Sent(r) => r[0].txn.unwrap(),
        other => panic!("{other:?}"),
    };
    assert!(
        b.messages_by_key("Orders", "pay-1", 10).unwrap().is_empty(),
        "a pending half was found"
    );
    exec(&mut b, 0, end(txn, Resolution::Commit, Some("PG")));
    assert_eq!(
        body(b.messages_by_key("Orders", "pay-1", 10).unwrap()),
        vec![b"paid".to_vec()]
    );
    // Rebuilt on open.
    let mut b = Broker::open(cfg(), b.into_storage(), 1).unwrap();
    assert_eq!(
        body(b.messages_by_key("Orders", "order-42", 10).unwrap()),
        vec![b"order 42".to_vec()]
    );
    assert!(b.index_bytes() > 0);
    let off = Broker::open(
        Config {
            index_keys: false,
            ..cfg()
        },
        b.into_storage(),
        2,
    )
    .unwrap();
    assert_eq!(off.index_bytes(), 0);
}

#[test]
fn a_key_lookup_keeps_to_the_store_times_asked_for() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    for t in [1_000u64, 2_000, 3_000] {
        let mut m = NewMessage::new("Orders", format!("at {t}").into_bytes());
        m.keys = vec!["k".into()];
        exec(&mut b, t, Request::Send { messages: vec![m] });
    }
    let bodies = |v: Vec<rocklet_core::Message>| {
        v.into_iter()
            .map(|m| String::from_utf8(m.body).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        bodies(b.messages_by_key("Orders", "k", 10).unwrap()),
        ["at 3000", "at 2000", "at 1000"]
    );
    // Out-of-window messages do not use up `max`.
    assert_eq!(
        bodies(
            b.messages_by_key_stored("Orders", "k", 1, 1_000..=2_500)
                .unwrap()
        ),
        ["at 2000"]
    );
    assert!(b
        .messages_by_key_stored("Orders", "k", 10, 3_001..=9_000)
        .unwrap()
        .is_empty());
}

#[test]
fn a_queue_started_at_an_offset_serves_from_there_and_keeps_it_across_restarts() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    b.create_topic("Old", 2).unwrap().unwrap();
    b.start_queue_at("Old", 1, 1_000).unwrap().unwrap();
    assert!(b.start_queue_at("Old", 1, 5).unwrap().is_err(), "only once");
    assert!(
        b.start_queue_at("Missing", 0, 5).unwrap().is_err(),
        "the topic is created first"
    );
    let mut m = NewMessage::new("Old", &b"first kept"[..]);
    m.queue_id = Some(1);
    let Reply::Sent(r) = exec(&mut b, 0, Request::Send { messages: vec![m] }) else {
        panic!()
    };
    assert_eq!(r[0].queue_offset, 1_000);
    assert!(
        b.start_queue_at("Old", 0, 7).is_ok(),
        "the other, empty queue may still start"
    );
    let check = |b: &mut Broker<MemStorage>| {
        assert_eq!(b.queue_min_offset("Old", 1), Some(1_000));
        let t = b.topic_info("Old").unwrap();
        assert_eq!(t.queues[1], (1, 1_001, 1_001));
        // A pull below the first offset starts at it (RocketMQ: OFFSET_TOO_SMALL).
        let pull = Request::Pull {
            group: "P".into(),
            topic: "Old".into(),
            queue_id: 1,
            offset: Some(0),
            max: 32,
            filter: TagFilter::All,
            auto_commit: false,
        };
        match exec(b, 0, pull) {
            Reply::Pulled {
                messages,
                next_offset,
                max_offset,
            } => {
                assert_eq!(messages.len(), 1);
                assert_eq!(messages[0].queue_offset, 1_000);
                assert_eq!((next_offset, max_offset), (1_001, 1_001));
            }
            other => panic!("{other:?}"),
        }
        let got = b.browse("Old", 1, 0, 10).unwrap();
        assert_eq!(got[0].body, b"first kept");
    };
    check(&mut b);
    let Reply::Received(r) = exec(&mut b, 0, receive("G", "Old", TagFilter::All)) else {
        panic!()
    };
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].message.queue_offset, 1_000);
    let h = r[0].handle.clone();
    let mut b = Broker::open(cfg(), b.into_storage(), 1).unwrap();
    check(&mut b);
    assert_eq!(b.queue_min_offset("Old", 0), Some(7));
    // The delivery made before the restart is acked after it.
    assert_eq!(
        exec(
            &mut b,
            1,
            Request::Ack {
                group: "G".into(),
                handle: h
            }
        ),
        Reply::Acked
    );
}
