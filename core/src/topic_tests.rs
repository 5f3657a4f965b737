//! A deleted topic's deliveries: what a group holds of it goes with the topic, at once and
//! after a reopen, whether or not the name is used again.

use alloc::vec;

use crate::testing::Sim;
use crate::*;

fn cfg() -> Config {
    Config {
        max_delivery_attempts: 2,
        ..Config::default()
    }
}

fn send(sim: &mut Sim<MemStorage>, body: &str) {
    let m = NewMessage {
        queue_id: Some(0),
        ..NewMessage::new("T", body)
    };
    match sim.request(Request::Send { messages: vec![m] }).unwrap() {
        Reply::Sent(_) => {}
        other => panic!("send failed: {other:?}"),
    }
}

fn receive(sim: &mut Sim<MemStorage>) -> usize {
    let req = Request::Receive {
        group: "C".into(),
        topic: "T".into(),
        queue_id: Some(0),
        max: 8,
        invisible_ms: 1_000,
        filter: TagFilter::All,
    };
    match sim.request(req).unwrap() {
        Reply::Received(v) => v.len(),
        other => panic!("{other:?}"),
    }
}

/// Messages in the group's dead-letter topic.
fn dead_lettered(b: &Broker<MemStorage>) -> u64 {
    b.topic_info("%DLQ%C")
        .map_or(0, |t| t.queues.iter().map(|&(_, next, _)| next).sum())
}

/// A message on its last delivery when its topic is deleted: its invisible time running out
/// later neither redelivers nor dead-letters it (as RocketMQ's revive skips a check point of
/// a topic that no longer exists) — and a reopen agrees, whether or not a topic of the same
/// name was made meanwhile. (The records of a receive name its topic by name: a reopen once
/// read them as the new topic's, kept the old delivery in flight and dead-lettered it again.)
#[test]
fn a_deleted_topics_deliveries_go_with_it_across_recreate_and_reopen() {
    for recreate in [false, true] {
        let mut sim = Sim::new(cfg()).unwrap();
        sim.broker.create_topic("T", 1).unwrap().unwrap();
        send(&mut sim, "old");
        assert_eq!(receive(&mut sim), 1);
        sim.advance(1_001).unwrap();
        assert_eq!(receive(&mut sim), 1, "the second (last) delivery");
        sim.broker.delete_topic("T").unwrap().unwrap();
        if recreate {
            sim.broker.create_topic("T", 1).unwrap().unwrap();
            send(&mut sim, "new");
        }
        sim.advance(5_000).unwrap();
        assert_eq!(dead_lettered(&sim.broker), 0, "recreate {recreate}");
        let now = sim.now;
        let storage = sim.broker.into_storage();
        let mut sim = Sim::with_storage(cfg(), storage, now).unwrap();
        sim.advance(5_000).unwrap();
        assert_eq!(
            dead_lettered(&sim.broker),
            0,
            "after reopen, recreate {recreate}"
        );
        // The old delivery is nobody's; the new topic's message is the group's to receive.
        assert_eq!(
            sim.broker.topic_queue_count("T"),
            recreate.then_some(1),
            "a reopen does not bring a deleted name back"
        );
        if recreate {
            assert_eq!(receive(&mut sim), 1);
        }
    }
}
