//! Deleting a consumer group (issue #33, mqadmin deleteSubGroup) at the core: its
//! declaration, committed offsets and receive positions go, durably (a restart and a
//! checkpoint agree), its in-flight receipts are neither redelivered nor ackable, and the
//! name starts afresh; a producer group with transactions pending is refused.

use rocklet_core::{
    Broker, Config, MemStorage, NewMessage, Received, Reply, Request, Storage, TagFilter,
};

const T: &str = "Orders";
const G: &str = "Shop";

fn cfg() -> Config {
    Config {
        default_queues: 1,
        auto_create_topics: true,
        ..Config::default()
    }
}

fn send(b: &mut Broker<impl Storage>, body: &str) {
    let m = NewMessage::new(T, body.as_bytes().to_vec());
    let r = b.execute(0, Request::Send { messages: vec![m] }).unwrap();
    assert!(matches!(r, Reply::Sent(_)), "{r:?}");
}

fn receive(b: &mut Broker<impl Storage>, now: u64) -> Vec<Received> {
    let req = Request::Receive {
        group: G.into(),
        topic: T.into(),
        queue_id: None,
        max: 8,
        invisible_ms: 1_000,
        filter: TagFilter::All,
    };
    match b.execute(now, req).unwrap() {
        Reply::Received(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_deleted_group_is_gone_with_its_offsets_and_receipts_across_a_restart() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    b.declare_group(G, true).unwrap().unwrap();
    for i in 0..3 {
        send(&mut b, &format!("m{i}"));
    }
    let commit = Request::CommitOffset {
        group: "Puller".into(),
        topic: T.into(),
        queue_id: 0,
        offset: 2,
    };
    b.execute(0, commit).unwrap();
    let held = receive(&mut b, 0);
    assert_eq!(held.len(), 3, "{held:?}");
    assert_eq!(b.pop_position(G, T, 0), Some((0, 3)));

    b.delete_group(G).unwrap().unwrap();
    b.delete_group("Puller").unwrap().unwrap();
    assert!(!b.group_known(G) && !b.group_known("Puller"));
    assert!(b.group_list().iter().all(|(g, _)| g != G && g != "Puller"));
    assert_eq!(b.committed_offset("Puller", T, 0), None);
    assert_eq!(b.pop_position(G, T, 0), None);
    // The receipt held is not acked, and its timer redelivers nothing.
    let ack = Request::Ack {
        group: G.into(),
        handle: held[0].handle.clone(),
    };
    assert!(matches!(b.execute(0, ack).unwrap(), Reply::Error(_)));
    b.handle_timeout(1_001).unwrap();
    assert_eq!(b.pop_position(G, T, 0), None, "nothing redelivered");
    assert!(!b.group_known(G));
    // Deleting what is not there is refused by name.
    let e = b.delete_group(G).unwrap().unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");

    // Durable: a full replay and an open from a checkpoint agree.
    b.checkpoint().unwrap();
    let b = Broker::open(cfg(), b.into_storage(), 10).unwrap();
    assert!(!b.group_known(G) && !b.group_known("Puller"));
    assert!(!b.group_is_fifo(G));
    let mut image = b.into_storage();
    image.remove_checkpoint().unwrap();
    let mut b = Broker::open(cfg(), image, 10).unwrap();
    assert!(!b.group_known(G) && !b.group_known("Puller"));
    assert_eq!(b.pop_position(G, T, 0), None);

    // The name starts afresh: not FIFO, from the first message.
    let again = receive(&mut b, 20);
    assert_eq!(again.len(), 3, "{again:?}");
    assert!(b.group_known(G) && !b.group_is_fifo(G));
}

#[test]
fn a_producer_group_with_transactions_pending_is_not_deleted() {
    let mut b = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    let m = NewMessage::new(T, b"half".to_vec());
    let r = b
        .execute(
            0,
            Request::Prepare {
                group: "Payments".into(),
                message: m,
                check_immunity_ms: None,
            },
        )
        .unwrap();
    assert!(!matches!(r, Reply::Error(_)), "{r:?}");
    let e = b.delete_group("Payments").unwrap().unwrap_err();
    assert!(e.to_string().contains("1 transactions pending"), "{e}");
    assert!(b.group_known("Payments"));
}
