//! FIFO consumer groups (issue #19) at the core: a group declared FIFO receives each queue's
//! messages in queue order, never gets a queue's messages while an earlier batch of that
//! queue is in flight, gets a timed-out or nacked message again before anything after it,
//! and sends it to `%DLQ%<group>` after the maximum attempts — across restarts too.

use rocklet_core::{
    Broker, Config, MemStorage, NewMessage, Received, Reply, Request, Storage, TagFilter,
};

const T: &str = "Orders";
const G: &str = "Fifo";

fn cfg() -> Config {
    Config {
        default_queues: 2,
        max_delivery_attempts: 3,
        ..Config::default()
    }
}

fn open() -> Broker<MemStorage> {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    b.declare_group(G, true).unwrap().unwrap();
    b
}

fn send_to(b: &mut Broker<impl Storage>, queue: u32, body: &str) {
    let mut m = NewMessage::new(T, body.as_bytes().to_vec());
    m.queue_id = Some(queue);
    let r = b.execute(0, Request::Send { messages: vec![m] }).unwrap();
    assert!(matches!(r, Reply::Sent(_)), "{r:?}");
}

fn receive(b: &mut Broker<impl Storage>, now: u64, group: &str, max: u32) -> Vec<Received> {
    let req = Request::Receive {
        group: group.into(),
        topic: T.into(),
        queue_id: None,
        max,
        invisible_ms: 1_000,
        filter: TagFilter::All,
    };
    match b.execute(now, req).unwrap() {
        Reply::Received(r) => r,
        other => panic!("{other:?}"),
    }
}

fn bodies(r: &[Received]) -> Vec<String> {
    r.iter()
        .map(|m| String::from_utf8(m.message.body.clone()).unwrap())
        .collect()
}

fn ack(b: &mut Broker<impl Storage>, now: u64, group: &str, m: &Received) {
    let req = Request::Ack {
        group: group.into(),
        handle: m.handle.clone(),
    };
    assert!(matches!(b.execute(now, req).unwrap(), Reply::Acked));
}

#[test]
fn a_queue_gives_one_batch_at_a_time_in_order() {
    let mut b = open();
    for i in 0..6 {
        send_to(&mut b, 0, &format!("q0-{i}"));
    }
    let first = receive(&mut b, 0, G, 3);
    assert_eq!(bodies(&first), ["q0-0", "q0-1", "q0-2"]);
    // Another consumer of the group: the queue is locked while the batch is in flight.
    assert!(receive(&mut b, 0, G, 3).is_empty());
    ack(&mut b, 0, G, &first[0]);
    ack(&mut b, 0, G, &first[2]);
    assert!(
        receive(&mut b, 0, G, 3).is_empty(),
        "unlocked with q0-1 in flight"
    );
    ack(&mut b, 0, G, &first[1]);
    assert_eq!(bodies(&receive(&mut b, 0, G, 3)), ["q0-3", "q0-4", "q0-5"]);
    // A group that is not FIFO is not held back by any of this.
    assert_eq!(receive(&mut b, 0, "Plain", 10).len(), 6);
}

#[test]
fn other_queues_are_served_while_one_is_locked() {
    let mut b = open();
    send_to(&mut b, 0, "a0");
    send_to(&mut b, 0, "a1");
    send_to(&mut b, 1, "b0");
    send_to(&mut b, 1, "b1");
    let one = receive(&mut b, 0, G, 1);
    let two = receive(&mut b, 0, G, 1);
    let mut got = bodies(&one);
    got.extend(bodies(&two));
    got.sort();
    assert_eq!(got, ["a0", "b0"], "one batch from each queue");
    assert!(receive(&mut b, 0, G, 10).is_empty());
}

#[test]
fn a_timed_out_or_nacked_message_comes_again_before_the_next() {
    let mut b = open();
    for i in 0..4 {
        send_to(&mut b, 0, &format!("m{i}"));
    }
    let first = receive(&mut b, 0, G, 2);
    assert_eq!(bodies(&first), ["m0", "m1"]);
    ack(&mut b, 0, G, &first[0]);
    // m1's invisible time runs out: m1 again, alone, with its attempt raised.
    b.handle_timeout(1_001).unwrap();
    let again = receive(&mut b, 1_001, G, 2);
    assert_eq!(bodies(&again), ["m1"]);
    assert_eq!(again[0].attempt, 2);
    // A nack (invisible time changed to 0): m1 once more, then m2 only after its ack.
    let nack = Request::ChangeInvisible {
        group: G.into(),
        handle: again[0].handle.clone(),
        invisible_ms: 0,
    };
    assert!(matches!(
        b.execute(1_001, nack).unwrap(),
        Reply::InvisibleChanged { .. }
    ));
    b.handle_timeout(1_002).unwrap();
    let third = receive(&mut b, 1_002, G, 2);
    assert_eq!(bodies(&third), ["m1"]);
    assert_eq!(third[0].attempt, 3);
    ack(&mut b, 1_002, G, &third[0]);
    assert_eq!(bodies(&receive(&mut b, 1_002, G, 2)), ["m2", "m3"]);
}

#[test]
fn changing_the_invisible_time_keeps_the_queue_locked() {
    let mut b = open();
    send_to(&mut b, 0, "m0");
    send_to(&mut b, 0, "m1");
    let first = receive(&mut b, 0, G, 1);
    let longer = Request::ChangeInvisible {
        group: G.into(),
        handle: first[0].handle.clone(),
        invisible_ms: 10_000,
    };
    let Reply::InvisibleChanged { handle, .. } = b.execute(500, longer).unwrap() else {
        panic!("change refused")
    };
    b.handle_timeout(5_000).unwrap();
    assert!(
        receive(&mut b, 5_000, G, 1).is_empty(),
        "the lock went with the old time"
    );
    let done = Request::Ack {
        group: G.into(),
        handle,
    };
    assert!(matches!(b.execute(5_000, done).unwrap(), Reply::Acked));
    assert_eq!(bodies(&receive(&mut b, 5_000, G, 1)), ["m1"]);
}

#[test]
fn after_the_last_attempt_the_message_goes_to_the_dlq_and_the_next_follows() {
    let mut b = open();
    send_to(&mut b, 0, "poison");
    send_to(&mut b, 0, "next");
    let mut now = 0;
    for attempt in 1..=3 {
        let r = receive(&mut b, now, G, 1);
        assert_eq!(bodies(&r), ["poison"]);
        assert_eq!(r[0].attempt, attempt);
        now += 1_001;
        b.handle_timeout(now).unwrap();
    }
    let r = receive(&mut b, now, G, 1);
    assert_eq!(bodies(&r), ["next"]);
    let dlq = b.browse(&format!("%DLQ%{G}"), 0, 0, 10).unwrap();
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].body, b"poison");
}

#[test]
fn the_lock_and_the_attempts_come_back_after_a_restart() {
    let mut b = open();
    send_to(&mut b, 0, "m0");
    send_to(&mut b, 0, "m1");
    assert_eq!(bodies(&receive(&mut b, 0, G, 1)), ["m0"]);
    let mut b = Broker::open(cfg(), b.into_storage(), 10).unwrap();
    assert!(b.group_is_fifo(G), "the declaration is in the log");
    assert!(
        receive(&mut b, 10, G, 1).is_empty(),
        "the lock is gone after a restart"
    );
    b.handle_timeout(1_001).unwrap();
    let again = receive(&mut b, 1_001, G, 1);
    assert_eq!(bodies(&again), ["m0"]);
    assert_eq!(again[0].attempt, 2);
    // Declared back to not FIFO: the next receive takes what is there.
    b.declare_group(G, false).unwrap().unwrap();
    let b2 = Broker::open(cfg(), b.into_storage(), 1_002).unwrap();
    assert!(!b2.group_is_fifo(G));
}
