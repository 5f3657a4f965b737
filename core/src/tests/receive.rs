//! Receiving: deliveries, acks, redelivery and dead letters, transfer caps, group starts.

use super::*;

#[test]
fn receive_ack_and_redelivery() {
    let mut sim = Sim::new(cfg()).unwrap();
    send(&mut sim, "T", "a");
    let recv = |sim: &mut Sim<MemStorage>| {
        let req = Request::Receive {
            group: "C".into(),
            topic: "T".into(),
            queue_id: None,
            max: 10,
            invisible_ms: 1000,
            filter: TagFilter::All,
        };
        match sim.request(req).unwrap() {
            Reply::Received(r) => r,
            other => panic!("{other:?}"),
        }
    };
    let r = recv(&mut sim);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].attempt, 1);
    assert!(recv(&mut sim).is_empty(), "invisible");
    sim.advance(1000).unwrap();
    let r2 = recv(&mut sim);
    assert_eq!(r2.len(), 1);
    assert_eq!(r2[0].attempt, 2);
    // The old handle is stale now.
    let stale = sim
        .request(Request::Ack {
            group: "C".into(),
            handle: r[0].handle.clone(),
        })
        .unwrap();
    assert!(matches!(
        stale,
        Reply::Error(ClientError::StaleReceiptHandle(_))
    ));
    let Reply::InvisibleChanged { handle, .. } = sim
        .request(Request::ChangeInvisible {
            group: "C".into(),
            handle: r2[0].handle.clone(),
            invisible_ms: 5000,
        })
        .unwrap()
    else {
        panic!()
    };
    // A change of invisible time renews the attempt: the handle from before it still names
    // the delivery (a consumer that renews need not track the new handle), and acks it.
    assert_eq!(
        sim.request(Request::Ack {
            group: "C".into(),
            handle: r2[0].handle.clone()
        })
        .unwrap(),
        Reply::Acked
    );
    assert!(matches!(
        sim.request(Request::Ack {
            group: "C".into(),
            handle
        })
        .unwrap(),
        Reply::Error(_)
    ));
    sim.advance(10_000).unwrap();
    assert!(recv(&mut sim).is_empty());
}

#[test]
fn a_renewed_delivery_keeps_its_first_handle_across_a_restart() {
    let mut sim = Sim::new(cfg()).unwrap();
    send(&mut sim, "T", "a");
    let Reply::Received(r) = sim
        .request(Request::Receive {
            group: "C".into(),
            topic: "T".into(),
            queue_id: None,
            max: 1,
            invisible_ms: 1000,
            filter: TagFilter::All,
        })
        .unwrap()
    else {
        panic!()
    };
    let first = r[0].handle.clone();
    for _ in 0..3 {
        assert!(matches!(
            sim.request(Request::ChangeInvisible {
                group: "C".into(),
                handle: first.clone(),
                invisible_ms: 60_000,
            })
            .unwrap(),
            Reply::InvisibleChanged { .. }
        ));
    }
    let now = sim.now;
    let storage = sim.broker.into_storage();
    let mut sim = Sim::with_storage(cfg(), storage, now).unwrap();
    assert_eq!(
        sim.request(Request::Ack {
            group: "C".into(),
            handle: first
        })
        .unwrap(),
        Reply::Acked
    );
}

#[test]
fn redelivery_ends_in_dlq() {
    let mut sim = Sim::new(Config {
        max_delivery_attempts: 3,
        ..cfg()
    })
    .unwrap();
    send(&mut sim, "T", "a");
    for _ in 0..3 {
        let req = Request::Receive {
            group: "C".into(),
            topic: "T".into(),
            queue_id: None,
            max: 10,
            invisible_ms: 1000,
            filter: TagFilter::All,
        };
        let Reply::Received(r) = sim.request(req).unwrap() else {
            panic!()
        };
        assert_eq!(r.len(), 1);
        sim.advance(1000).unwrap();
    }
    assert_eq!(bodies(&mut sim, "%DLQ%C"), vec!["a"]);
    assert_eq!(sim.broker.inflight_count("C", "T"), 0);
}

/// A pull or receive returns at most `max_transfer_bytes` of stored messages (the first one
/// always, however large), as RocketMQ's maxTransferBytesOnMessageInMemory.
#[test]
fn pulls_and_receives_stop_at_the_transfer_cap() {
    let mut sim = Sim::new(Config {
        default_queues: 1,
        max_transfer_bytes: 25_000,
        ..cfg()
    })
    .unwrap();
    for i in 0..4 {
        let body = alloc::format!("{i}{}", "x".repeat(10_000));
        send(&mut sim, "Big", &body);
    }
    send(&mut sim, "Big", &"y".repeat(40_000));
    let pull = |sim: &mut Sim<MemStorage>| match sim
        .request(Request::Pull {
            group: "P".into(),
            topic: "Big".into(),
            queue_id: 0,
            offset: None,
            max: 32,
            filter: TagFilter::All,
            auto_commit: true,
        })
        .unwrap()
    {
        Reply::Pulled {
            messages,
            next_offset,
            ..
        } => (messages.len(), next_offset),
        other => panic!("pull: {other:?}"),
    };
    assert_eq!(
        pull(&mut sim),
        (2, 2),
        "two ~10 KB records fit in 25 000 bytes"
    );
    assert_eq!(pull(&mut sim), (2, 4));
    assert_eq!(
        pull(&mut sim),
        (1, 5),
        "one record above the cap still goes, alone"
    );
    let receive = |sim: &mut Sim<MemStorage>| match sim
        .request(Request::Receive {
            group: "R".into(),
            topic: "Big".into(),
            queue_id: None,
            max: 32,
            invisible_ms: 60_000,
            filter: TagFilter::All,
        })
        .unwrap()
    {
        Reply::Received(r) => r.len(),
        other => panic!("receive: {other:?}"),
    };
    assert_eq!(receive(&mut sim), 2);
    assert_eq!(receive(&mut sim), 2);
    assert_eq!(receive(&mut sim), 1);
    assert_eq!(receive(&mut sim), 0);
    // Redeliveries are capped the same way.
    sim.advance(60_001).unwrap();
    assert_eq!(receive(&mut sim), 2);
}

/// The first message of `topic`'s queue 0 (pulled from offset 0).
fn first_message(sim: &mut Sim<impl Storage>, topic: &str) -> Message {
    let req = Request::Pull {
        group: "reader".into(),
        topic: topic.into(),
        queue_id: 0,
        offset: Some(0),
        max: 1,
        filter: TagFilter::All,
        auto_commit: false,
    };
    match sim.request(req).unwrap() {
        Reply::Pulled { mut messages, .. } if !messages.is_empty() => messages.remove(0),
        other => panic!("nothing in {topic}: {other:?}"),
    }
}

/// A producer's `RETRY_TOPIC` property names no topic of the broker's: a copy into a retry or
/// dead-letter topic names the topic the message was really in, or a consumer of the retry
/// topic (and a console resend of the dead letter) would take it for a message of `Secret`.
#[test]
fn a_copy_names_the_topic_the_message_was_in_not_a_producers_retry_topic_property() {
    let mut sim = Sim::new(Config {
        max_delivery_attempts: 1,
        ..cfg()
    })
    .unwrap();
    let mut m = NewMessage::new("T", "forged");
    m.properties = vec![(
        String::from(broker::prop::RETRY_TOPIC),
        String::from("Secret"),
    )];
    let sent = match sim.request(Request::Send { messages: vec![m] }).unwrap() {
        Reply::Sent(mut r) => r.remove(0),
        other => panic!("{other:?}"),
    };
    // CONSUMER_SEND_MSG_BACK: into %RETRY%C, due after level 1 (1 s).
    let r = sim
        .request(Request::SendBack {
            group: "C".into(),
            offset: sent.offset,
            delay_level: Some(1),
        })
        .unwrap();
    assert!(matches!(r, Reply::Sent(_)), "{r:?}");
    sim.advance(2_000).unwrap();
    let retried = first_message(&mut sim, "%RETRY%C");
    assert_eq!(retried.property(broker::prop::RETRY_TOPIC), Some("T"));
    // A retried message sent back again keeps the topic it came from.
    let r = sim
        .request(Request::SendBack {
            group: "C".into(),
            offset: retried.offset,
            delay_level: Some(1),
        })
        .unwrap();
    assert!(matches!(r, Reply::Sent(_)), "{r:?}");
    // Dead-lettered after its last delivery: %DLQ%D names T too.
    let req = Request::Receive {
        group: "D".into(),
        topic: "T".into(),
        queue_id: None,
        max: 1,
        invisible_ms: 1000,
        filter: TagFilter::All,
    };
    let Reply::Received(r) = sim.request(req).unwrap() else {
        panic!()
    };
    assert_eq!(r.len(), 1);
    sim.advance(1000).unwrap();
    let dead = first_message(&mut sim, "%DLQ%D");
    assert_eq!(dead.property(broker::prop::RETRY_TOPIC), Some("T"));
}

fn receive_bodies(sim: &mut Sim<impl Storage>, group: &str, topic: &str) -> Vec<String> {
    match sim
        .request(Request::Receive {
            group: group.into(),
            topic: topic.into(),
            queue_id: None,
            max: 64,
            invisible_ms: 60_000,
            filter: TagFilter::All,
        })
        .unwrap()
    {
        Reply::Received(r) => {
            let mut b: Vec<String> = r
                .iter()
                .map(|m| String::from_utf8_lossy(&m.message.body).into_owned())
                .collect();
            b.sort();
            b
        }
        other => panic!("receive failed: {other:?}"),
    }
}

#[test]
fn a_group_started_at_the_end_gets_only_later_messages_across_a_restart_and_a_checkpoint() {
    let mut sim = Sim::new(cfg()).unwrap();
    for b in ["n1", "n2", "n3"] {
        send(&mut sim, "T", b);
    }
    let queues = sim.broker.topic_queue_count("T").unwrap();
    assert_eq!(
        sim.broker.start_group_at_end("Tail", "T").unwrap(),
        Ok(queues)
    );
    // Started already: a second call (a tail run again) keeps the group where it is.
    assert_eq!(sim.broker.start_group_at_end("Tail", "T").unwrap(), Ok(0));
    // A topic not created yet: nothing to start, nothing created.
    assert_eq!(
        sim.broker.start_group_at_end("Tail", "Later").unwrap(),
        Ok(0)
    );
    assert!(sim.broker.topic_queue_count("Later").is_none());
    // The start is in the log: a restart keeps it, and the messages after it come.
    let now = sim.now;
    let storage = sim.broker.into_storage();
    let mut sim = Sim::with_storage(cfg(), storage, now).unwrap();
    send(&mut sim, "T", "m1");
    assert_eq!(receive_bodies(&mut sim, "Tail", "T"), ["m1"]);
    // From a checkpoint as well.
    send(&mut sim, "T", "m2");
    sim.broker.checkpoint().unwrap();
    let now = sim.now;
    let storage = sim.broker.into_storage();
    let mut sim = Sim::with_storage(cfg(), storage, now).unwrap();
    assert_eq!(receive_bodies(&mut sim, "Tail", "T"), ["m2"]);
    // A group never started reads from the first message, as before.
    assert_eq!(
        receive_bodies(&mut sim, "Other", "T"),
        ["m1", "m2", "n1", "n2", "n3"]
    );
}

#[test]
fn a_group_with_a_position_is_not_moved_to_the_end() {
    let mut sim = Sim::new(cfg()).unwrap();
    let a = send(&mut sim, "T", "a");
    assert_eq!(receive_bodies(&mut sim, "C", "T"), ["a"]);
    let b = send(&mut sim, "T", "b");
    // Only the queues the group never received from start at their end; the one "a" came
    // from keeps the group's position, so "b" still comes if it went there too.
    let queues = sim.broker.topic_queue_count("T").unwrap();
    assert!(queues > 1);
    assert_eq!(
        sim.broker.start_group_at_end("C", "T").unwrap(),
        Ok(queues - 1)
    );
    let expect: &[&str] = if a.queue_id == b.queue_id {
        &["b"]
    } else {
        &[]
    };
    assert_eq!(receive_bodies(&mut sim, "C", "T"), expect);
    assert!(matches!(
        sim.broker.start_group_at_end("bad group!", "T").unwrap(),
        Err(ClientError::InvalidGroup(_))
    ));
}
