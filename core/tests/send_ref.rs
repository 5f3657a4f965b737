//! The direct entry points (`send_ref`, `prepare_ref`, `end_transaction`) do exactly what
//! `execute` does with the same requests: the same log bytes, the same results, the same
//! client errors, the same stats.

use rocklet_core::{
    Broker, ClientError, Config, Delay, MemStorage, MessageRef, NewMessage, Reply, Request,
    Resolution, SendResult, TxnId,
};

fn broker() -> Broker<MemStorage> {
    let cfg = Config {
        segment_size: 1 << 20,
        max_message_size: 64 << 10,
        max_batch_size: 64 << 10,
        ..Config::default()
    };
    Broker::open(cfg, MemStorage::new(), 0).expect("open")
}

fn owned(m: &MessageRef<'_>) -> NewMessage {
    NewMessage {
        topic: m.topic.into(),
        body: m.body.to_vec(),
        tag: m.tag.map(String::from),
        keys: m.keys.iter().map(|k| String::from(*k)).collect(),
        properties: m
            .properties
            .iter()
            .map(|(k, v)| (String::from(*k), String::from(*v)))
            .collect(),
        queue_id: m.queue_id,
        message_id: m.message_id.map(String::from),
        delay: m.delay,
        message_group: m.message_group.map(String::from),
        born_timestamp: m.born_timestamp,
        born_host: m.born_host,
        flag: m.flag,
    }
}

fn sent(reply: Reply) -> Result<SendResult, ClientError> {
    match reply {
        Reply::Sent(mut r) => {
            assert_eq!(r.len(), 1);
            Ok(r.remove(0))
        }
        Reply::Error(e) => Err(e),
        other => panic!("{other:?}"),
    }
}

fn segments(b: &Broker<MemStorage>) -> Vec<Vec<u8>> {
    let size = b.config().segment_size;
    (0..b.segment_count() as u64 + 1)
        .filter_map(|i| b.storage().segment(i * size).map(<[u8]>::to_vec))
        .collect()
}

#[test]
fn direct_entry_points_write_what_execute_writes() {
    let body = [5u8; 700];
    let keys = ["k1", "k2"];
    let props = [("color", "red")];
    let delay_prop = [("DELAY", "3")];
    let reserved = [("UNIQ_KEY", "x")];
    let plain = MessageRef::new("T", &body);
    let messages = [
        plain,
        MessageRef {
            tag: Some("TagA"),
            keys: &keys,
            properties: &props,
            message_id: Some("client-id-1"),
            born_timestamp: Some(77),
            flag: 9,
            ..plain
        },
        MessageRef {
            queue_id: Some(2),
            ..plain
        },
        MessageRef {
            message_group: Some("g1"),
            ..plain
        },
        MessageRef {
            delay: Some(Delay::Level(2)),
            ..plain
        },
        MessageRef {
            properties: &delay_prop,
            ..plain
        },
        MessageRef {
            delay: Some(Delay::After(5_000)),
            ..plain
        },
        // Client mistakes: the same error either way, nothing written.
        MessageRef::new("T", b""),
        MessageRef {
            properties: &reserved,
            ..plain
        },
        MessageRef {
            queue_id: Some(99),
            ..plain
        },
        MessageRef::new("bad topic!", &body),
    ];
    let (mut a, mut b) = (broker(), broker());
    // Enough rounds to roll over segments (1 MiB each).
    for round in 0..300u64 {
        let now = 1_000 + round;
        for m in &messages {
            let via_request = sent(
                a.execute(
                    now,
                    Request::Send {
                        messages: vec![owned(m)],
                    },
                )
                .expect("storage"),
            );
            let direct = b
                .send_ref(now, m)
                .expect("storage")
                .map(|r| r.to_result(m.topic));
            assert_eq!(via_request, direct, "{m:?}");
            if let Ok(r) = &direct {
                let receipt = b.send_ref(now, m).expect("storage").expect("stored");
                a.execute(
                    now,
                    Request::Send {
                        messages: vec![owned(m)],
                    },
                )
                .expect("storage");
                assert_eq!(
                    receipt.msg_id().as_str(),
                    m.message_id.map_or_else(
                        || rocklet_core::offset_msg_id(
                            b.config().store_host.host(),
                            receipt.offset
                        ),
                        String::from
                    )
                );
                assert!(receipt.offset > r.offset);
            }
        }
        // A transaction each way, committed or rolled back, and the mistakes around it.
        let m = &messages[1];
        let via_request = sent(
            a.execute(
                now,
                Request::Prepare {
                    group: "G".into(),
                    message: owned(m),
                    check_immunity_ms: Some(1_500),
                },
            )
            .expect("storage"),
        )
        .expect("prepared");
        let direct = b
            .prepare_ref(now, "G", m, Some(1_500))
            .expect("storage")
            .expect("prepared");
        assert_eq!(via_request, direct.to_result(m.topic));
        let txn = direct.txn.expect("txn");
        let resolution = if round % 3 == 0 {
            Resolution::Rollback
        } else {
            Resolution::Commit
        };
        for (group, resolution) in [
            (None, resolution),
            (Some("other"), resolution),
            (Some("G"), Resolution::Unknown),
            (Some("G"), resolution),
            (Some("G"), resolution),
        ] {
            let via_request = a
                .execute(
                    now,
                    Request::EndTransaction {
                        txn,
                        resolution,
                        group: group.map(String::from),
                        from_check: false,
                    },
                )
                .expect("storage");
            let direct = b
                .end_transaction(now, txn, resolution, group, false)
                .expect("storage");
            assert_eq!(via_request, direct);
        }
        let unknown = TxnId(3);
        assert_eq!(
            a.execute(
                now,
                Request::EndTransaction {
                    txn: unknown,
                    resolution,
                    group: Some("G".into()),
                    from_check: false,
                }
            )
            .expect("storage"),
            b.end_transaction(now, unknown, resolution, Some("G"), false)
                .expect("storage")
        );
    }
    assert!(b.segment_count() > 1, "the run rolled over segments");
    assert_eq!(a.log_end(), b.log_end());
    assert_eq!(segments(&a), segments(&b), "the same log bytes");
    assert_eq!(a.stats(), b.stats());
    assert_eq!(a.pending_delay_count(), b.pending_delay_count());
    assert_eq!(a.topics(), b.topics());
    // And what was written reads back the same after a restart.
    let reopened = Broker::open(b.config().clone(), b.into_storage(), 10_000).expect("reopen");
    assert_eq!(reopened.topics(), a.topics());
}

#[test]
fn prepared_segments_take_no_allocation_and_hold_the_same_bytes() {
    let cfg = Config {
        segment_size: 64 << 10,
        max_message_size: 8 << 10,
        max_batch_size: 8 << 10,
        ..Config::default()
    };
    let mut storage = MemStorage::new();
    storage.prepare_segments(64 << 10, 3);
    assert_eq!(storage.spare_segments(), 3);
    assert!(storage.capacity_bytes() >= 3 * (64 << 10));
    let mut prepared = Broker::open(cfg.clone(), storage, 0).expect("open");
    let mut plain = Broker::open(cfg, MemStorage::new(), 0).expect("open");
    let body = [1u8; 1000];
    for _ in 0..150 {
        let m = MessageRef::new("T", &body);
        prepared.send_ref(1, &m).expect("storage").expect("stored");
        plain.send_ref(1, &m).expect("storage").expect("stored");
    }
    assert_eq!(prepared.segment_count(), 3);
    assert_eq!(prepared.storage().spare_segments(), 0);
    assert_eq!(segments(&prepared), segments(&plain));
}
