//! The fast send path allocates nothing per message: a counting global allocator watches
//! every send of a steady-state loop into memory storage.
//!
//! What may still allocate is amortized growth of what the log and the state keep for
//! every message (the memory segment's bytes, each consume queue's units, the table of
//! committed halves), each a `Vec` or map that doubles: a few dozen growths over the whole
//! run, never one per message. The test counts the sends that allocated at all and bounds
//! them far below one per message; the same loop through `execute` and an owned `Request`
//! allocates several times on every send (checked too, so the counter is known to count).
mod common;

use common::allocations;

use std::hint::black_box;

use rocklet_core::{
    Broker, Config, MemStorage, MessageRef, NewMessage, Reply, Request, Resolution,
};

const WARM_UP: usize = 2_000;
const SENDS: usize = 20_000;
/// Sends (of `SENDS`) that may allocate at all: growth of the segment and the queues.
const GROWTHS: usize = 64;

fn broker() -> Broker<MemStorage> {
    let cfg = Config {
        segment_size: 256 << 20,
        ..Config::default()
    };
    Broker::open(cfg, MemStorage::new(), 0).expect("open")
}

/// Runs `f` `SENDS` times after a warm-up; returns (sends that allocated, allocations).
fn watch(mut f: impl FnMut()) -> (usize, u64) {
    for _ in 0..WARM_UP {
        f();
    }
    let (mut allocating, mut total) = (0, 0);
    for _ in 0..SENDS {
        let before = allocations();
        f();
        let n = allocations() - before;
        if n > 0 {
            allocating += 1;
            total += n;
        }
    }
    (allocating, total)
}

#[test]
fn send_ref_allocates_nothing_per_message() {
    let mut b = broker();
    let body = [7u8; 1024];
    let keys = ["order-1", "k2"];
    let props = [("origin", "test")];
    let plain = MessageRef::new("T", &body);
    let (allocating, total) = watch(|| {
        let r = b.send_ref(1, &plain).expect("storage").expect("stored");
        // Formatting the id is part of the path: on the stack.
        black_box(r.msg_id().as_str().len());
    });
    assert!(
        allocating <= GROWTHS,
        "{allocating} of {SENDS} sends allocated ({total} allocations)"
    );
    // A message with a tag, keys and a property takes the same path (the key index grows
    // by doubling too).
    let rich = MessageRef {
        tag: Some("TagA"),
        keys: &keys,
        properties: &props,
        ..plain
    };
    let (allocating, total) = watch(|| {
        let r = b.send_ref(1, &rich).expect("storage").expect("stored");
        black_box(r.msg_id().as_str().len());
    });
    assert!(
        allocating <= GROWTHS,
        "{allocating} of {SENDS} sends with tag, keys and a property allocated ({total})"
    );
    assert_eq!(b.stats().messages_stored, 2 * (WARM_UP + SENDS) as u64);
}

#[test]
fn prepare_ref_and_end_allocate_nothing_per_transaction() {
    let mut b = broker();
    let body = [7u8; 1024];
    let m = MessageRef::new("T", &body);
    let (allocating, total) = watch(|| {
        let r = b
            .prepare_ref(1, "G", &m, None)
            .expect("storage")
            .expect("stored");
        let txn = r.txn.expect("txn");
        let end = b
            .end_transaction(1, txn, Resolution::Commit, Some("G"), false)
            .expect("storage");
        assert!(
            matches!(
                end,
                Reply::Ended {
                    duplicate: false,
                    ..
                }
            ),
            "{end:?}"
        );
    });
    assert!(
        allocating <= GROWTHS,
        "{allocating} of {SENDS} transactions allocated ({total} allocations)"
    );
    assert_eq!(b.stats().committed, (WARM_UP + SENDS) as u64);
    assert_eq!(b.pending_transaction_count(), 0);
}

#[test]
fn the_request_path_allocates_per_message() {
    // The counter counts: an owned request and its reply cost allocations on every send.
    let mut b = broker();
    let body = vec![7u8; 1024];
    let (allocating, total) = watch(|| {
        let r = b
            .execute(
                1,
                Request::Send {
                    messages: vec![NewMessage::new("T", body.clone())],
                },
            )
            .expect("storage");
        assert!(matches!(r, Reply::Sent(_)));
    });
    assert_eq!(allocating, SENDS);
    assert!(total >= 3 * SENDS as u64, "{total}");
}
