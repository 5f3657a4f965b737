//! Replication at the core (issue #14): a replica writes its master's bytes at the same
//! offsets and applies them as recovery does; it decides nothing (no timers, no requests)
//! until it is promoted; under `replicated_acks` replies and visibility wait for replicas;
//! epochs let a rejoining replica cut what the new master never had.

use rocklet_conformance::probe;
use rocklet_core::{
    common_prefix, Broker, ClientError, Config, Delay, FlushMode, MemStorage, NewMessage, Output,
    Reply, Request, Resolution, Role, Storage, TagFilter, TxnId,
};

fn cfg() -> Config {
    Config {
        segment_size: 48 << 10,
        max_message_size: 2048,
        max_batch_size: 4096,
        default_queues: 2,
        transaction_timeout_ms: 1_000,
        ..Config::default()
    }
}

fn exec<S: Storage>(b: &mut Broker<S>, now: u64, req: Request) -> Reply {
    b.execute(now, req).unwrap()
}

fn send(b: &mut Broker<MemStorage>, now: u64, topic: &str, body: &str) {
    let m = NewMessage::new(topic, body.as_bytes().to_vec());
    assert!(matches!(
        exec(b, now, Request::Send { messages: vec![m] }),
        Reply::Sent(_)
    ));
}

fn prepare(b: &mut Broker<MemStorage>, now: u64, body: &str) -> TxnId {
    let req = Request::Prepare {
        group: "PG".into(),
        message: NewMessage::new("T", body.as_bytes().to_vec()),
        check_immunity_ms: None,
    };
    match exec(b, now, req) {
        Reply::Sent(r) => r[0].txn.unwrap(),
        other => panic!("{other:?}"),
    }
}

fn end(txn: TxnId, commit: bool) -> Request {
    Request::EndTransaction {
        txn,
        resolution: if commit {
            Resolution::Commit
        } else {
            Resolution::Rollback
        },
        group: Some("PG".into()),
        from_check: false,
    }
}

/// Streams everything the master has to the replica, in chunks of `max` bytes.
fn catch_up(master: &mut Broker<MemStorage>, replica: &mut Broker<MemStorage>, max: usize) {
    while let Some(chunk) = master.replication_chunk(replica.log_end(), max).unwrap() {
        let at = replica.log_end();
        let end = replica
            .apply_replicated(at, &chunk)
            .unwrap()
            .unwrap_or_else(|e| panic!("chunk at {at} refused: {e}"));
        // The log ends after the chunk, or at the next segment when it closed one.
        assert!(end >= at + chunk.len() as u64);
        assert_eq!(end, master.log_end().min(end));
        replica.sync().unwrap();
    }
}

fn segments(b: &mut Broker<MemStorage>) -> Vec<(u64, Vec<u8>)> {
    let mut s = b.storage().clone();
    s.segments()
        .unwrap()
        .into_iter()
        .map(|base| (base, s.segment(base).unwrap().to_vec()))
        .collect()
}

/// A master with every kind of record, across several segments.
fn busy_master() -> Broker<MemStorage> {
    let mut m = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    for i in 0..80 {
        send(&mut m, i, "A", &format!("a{i}-{}", "x".repeat(1500)));
        if i % 5 == 0 {
            let batch = (0..3)
                .map(|j| NewMessage::new("A", format!("batch{i}-{j}").into_bytes()))
                .collect();
            assert!(matches!(
                exec(&mut m, i, Request::Send { messages: batch }),
                Reply::Sent(_)
            ));
        }
        if i % 4 == 0 {
            let t = prepare(&mut m, i, &format!("t{i}"));
            if i % 8 == 0 {
                exec(&mut m, i, end(t, i % 16 == 0));
            }
        }
        if i % 7 == 0 {
            let d =
                NewMessage::new("A", format!("d{i}").into_bytes()).with_delay(Delay::After(500));
            exec(&mut m, i, Request::Send { messages: vec![d] });
        }
    }
    let recv = Request::Receive {
        group: "G".into(),
        topic: "A".into(),
        queue_id: None,
        max: 5,
        invisible_ms: 60_000,
        filter: TagFilter::All,
    };
    let Reply::Received(got) = exec(&mut m, 100, recv) else {
        panic!("receive")
    };
    let ack = Request::Ack {
        group: "G".into(),
        handle: got[0].handle.clone(),
    };
    assert!(matches!(exec(&mut m, 100, ack), Reply::Acked));
    assert!(m.segment_count() > 2, "spans segments");
    m
}

#[test]
fn a_replica_holds_its_masters_bytes_and_rebuilds_its_state() {
    for chunk in [1, 700, 1 << 20] {
        let mut master = busy_master();
        let mut replica = Broker::open_replica(cfg(), MemStorage::new(), 0).unwrap();
        assert_eq!(replica.role(), Role::Replica);
        catch_up(&mut master, &mut replica, chunk);
        assert_eq!(replica.log_end(), master.log_end(), "chunk {chunk}");
        assert_eq!(
            segments(&mut replica),
            segments(&mut master),
            "chunk {chunk}: bytes differ"
        );
        // Its state is what a restart of the master rebuilds.
        assert_eq!(
            replica.pending_transaction_count(),
            master.pending_transaction_count()
        );
        assert_eq!(replica.pending_delay_count(), master.pending_delay_count());
        replica.promote(200, 1).unwrap().unwrap();
        let mut restarted = Broker::open(cfg(), master.into_storage(), 200).unwrap();
        assert_eq!(
            probe::observed(&mut replica, 200),
            probe::observed(&mut restarted, 200),
            "chunk {chunk}"
        );
        assert_eq!(replica.epochs(), &[(1, restarted.log_end())]);
    }
}

#[test]
fn a_replica_refuses_requests_and_fires_no_timers_until_promoted() {
    let mut master = Broker::open(cfg(), MemStorage::new(), 0).unwrap();
    master.set_producer_online(0, "PG", true);
    let d = NewMessage::new("A", &b"due at 500"[..]).with_delay(Delay::After(500));
    exec(&mut master, 0, Request::Send { messages: vec![d] });
    let txn = prepare(&mut master, 0, "pending");
    let mut replica = Broker::open_replica(cfg(), MemStorage::new(), 0).unwrap();
    catch_up(&mut master, &mut replica, 1 << 20);
    let end = replica.log_end();
    replica.handle_timeout(10_000).unwrap();
    assert!(replica.poll_timeout().is_none());
    assert!(
        replica.poll_output().is_none(),
        "a replica checked or delivered"
    );
    assert_eq!(
        replica.log_end(),
        end,
        "a replica wrote a record of its own"
    );
    let r = exec(
        &mut replica,
        10_000,
        Request::Send {
            messages: vec![NewMessage::new("A", &b"x"[..])],
        },
    );
    assert!(matches!(r, Reply::Error(ClientError::NotMaster)), "{r:?}");
    assert!(
        replica.apply_replicated(0, b"x").unwrap().is_err(),
        "a gap must be refused"
    );
    // Promoted: it delivers the delay once and checks the transaction.
    replica.set_producer_online(10_000, "PG", true);
    replica.promote(10_000, 1).unwrap().unwrap();
    replica.handle_timeout(10_001).unwrap();
    let outs: Vec<Output> = std::iter::from_fn(|| replica.poll_output()).collect();
    assert!(
        outs.iter()
            .any(|o| matches!(o, Output::Check(c) if c.txn == txn)),
        "{outs:?}"
    );
    assert_eq!(replica.pending_delay_count(), 0);
    let seen = probe::visible(&mut replica, 10_001);
    assert_eq!(seen["A"], vec![b"due at 500".to_vec()]);
    assert!(
        replica.promote(10_002, 2).unwrap().is_err(),
        "already master"
    );
    // A master's chunks are refused by a master.
    assert!(matches!(
        master.apply_replicated(master.log_end(), b""),
        Ok(Err(rocklet_core::ReplicationError::NotReplica))
    ));
}

#[test]
fn with_replicated_acks_replies_and_visibility_wait_for_the_replicas() {
    let cfg = Config {
        replicated_acks: true,
        flush: FlushMode::Async,
        ..cfg()
    };
    let mut master = Broker::open(cfg.clone(), MemStorage::new(), 0).unwrap();
    master
        .handle(
            0,
            7,
            Request::Send {
                messages: vec![NewMessage::new("A", &b"m"[..])],
            },
        )
        .unwrap();
    assert!(
        master.poll_output().is_none(),
        "acknowledged before any replica held it"
    );
    assert!(
        probe::visible(&mut master, 0).is_empty(),
        "visible before replicated"
    );
    let mut replica = Broker::open_replica(cfg.clone(), MemStorage::new(), 0).unwrap();
    catch_up(&mut master, &mut replica, 1 << 20);
    master.replicated_to(replica.log_end() - 1);
    assert!(
        master.poll_output().is_none(),
        "released before its last byte was held"
    );
    master.replicated_to(replica.log_end());
    assert!(matches!(
        master.poll_output(),
        Some(Output::Reply { id: 7, .. })
    ));
    assert_eq!(probe::visible(&mut master, 0)["A"], vec![b"m".to_vec()]);
}

#[test]
fn a_replica_refuses_at_once_after_applying_replicated_bytes() {
    // Cluster mode's core config: replies wait for replicas. A replica's log runs ahead of
    // what it knows is replicated; its refusals must not wait for that (a v4 client's send
    // to a restarted old master hung for its whole 3 s timeout).
    let cfg = Config {
        replicated_acks: true,
        flush: FlushMode::Async,
        ..cfg()
    };
    let mut master = Broker::open_replica(cfg.clone(), MemStorage::new(), 0).unwrap();
    master.promote(0, 1).unwrap().unwrap();
    master
        .handle(
            1,
            1,
            Request::Send {
                messages: vec![NewMessage::new("A", &b"m"[..])],
            },
        )
        .unwrap();
    let mut replica = Broker::open_replica(cfg, MemStorage::new(), 0).unwrap();
    catch_up(&mut master, &mut replica, 1 << 20);
    assert!(replica.log_end() > 0);
    replica
        .handle(
            2,
            9,
            Request::Send {
                messages: vec![NewMessage::new("A", &b"x"[..])],
            },
        )
        .unwrap();
    assert!(
        matches!(
            replica.poll_output(),
            Some(Output::Reply {
                id: 9,
                reply: Reply::Error(ClientError::NotMaster)
            })
        ),
        "the replica held its refusal"
    );
}

#[test]
fn a_rejoining_replica_cuts_what_the_new_master_never_had() {
    // A is master (epoch 1) with B following. A writes m2 that B never gets, and dies.
    let mut a = Broker::open_replica(cfg(), MemStorage::new(), 0).unwrap();
    a.promote(0, 1).unwrap().unwrap();
    send(&mut a, 1, "A", "m1");
    let mut b = Broker::open_replica(cfg(), MemStorage::new(), 0).unwrap();
    catch_up(&mut a, &mut b, 1 << 20);
    send(&mut a, 2, "A", "m2 (never replicated)");
    // B takes over in epoch 2 and writes m3.
    b.promote(10, 2).unwrap().unwrap();
    send(&mut b, 11, "A", "m3");
    // A comes back: it keeps what both logs share and follows B.
    let cut = common_prefix(a.epochs(), a.log_end(), b.epochs(), b.log_end());
    assert_eq!(cut, b.epochs()[1].1, "the cut is where epoch 2 began");
    assert!(cut < a.log_end());
    let mut storage = a.into_storage();
    Broker::truncate_storage(&mut storage, cut).unwrap();
    let mut a = Broker::open_replica(cfg(), storage, 20).unwrap();
    assert_eq!(a.log_end(), cut);
    catch_up(&mut b, &mut a, 300);
    assert_eq!(segments(&mut a), segments(&mut b));
    a.promote(30, 3).unwrap().unwrap();
    let mut bodies = probe::visible(&mut a, 30).remove("A").unwrap();
    bodies.sort();
    assert_eq!(bodies, vec![b"m1".to_vec(), b"m3".to_vec()]);
    assert_eq!(
        a.epochs().iter().map(|e| e.0).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
}

#[test]
fn common_prefix_of_epoch_histories() {
    // Same history: the shorter log's end.
    assert_eq!(common_prefix(&[(1, 0)], 500, &[(1, 0)], 900), 500);
    // The replica missed epoch 2's start: it keeps epoch 1 up to where epoch 2 began.
    assert_eq!(common_prefix(&[(1, 0)], 700, &[(1, 0), (2, 600)], 900), 600);
    // It also had an epoch 2 of its own that the master's history lacks.
    assert_eq!(
        common_prefix(&[(1, 0), (2, 650)], 800, &[(1, 0), (3, 600)], 900),
        600
    );
    // Nothing in common.
    assert_eq!(common_prefix(&[], 300, &[(1, 0)], 900), 0);
    assert_eq!(common_prefix(&[], 300, &[], 900), 300);
}

/// A check-back tells the producer of its half: under `replicated_acks` not before the
/// replicas hold it (issue 32: halves were checked, and committed by the checker, while a
/// stalled replica held back their acknowledgement).
#[test]
fn a_half_is_not_checked_back_before_the_replicas_hold_it() {
    let cfg = Config {
        replicated_acks: true,
        flush: FlushMode::Async,
        ..cfg()
    };
    let mut master = Broker::open(cfg.clone(), MemStorage::new(), 0).unwrap();
    master.set_producer_online(0, "PG", true);
    let prepare = Request::Prepare {
        group: "PG".into(),
        message: NewMessage::new("T", &b"half"[..]),
        check_immunity_ms: None,
    };
    master.handle(0, 1, prepare).unwrap();
    let checks = |b: &mut Broker<MemStorage>| {
        let mut n = 0;
        while let Some(o) = b.poll_output() {
            if matches!(o, Output::Check(_)) {
                n += 1;
            }
        }
        n
    };
    // Long past the transaction timeout (1 s), nothing replicated: no check.
    for now in (1_000..=10_000).step_by(100) {
        master.handle_timeout(now).unwrap();
        assert_eq!(
            checks(&mut master),
            0,
            "checked at {now} ms before any replica held it"
        );
    }
    // The replica holds it: the check goes out within the retry interval.
    let mut replica = Broker::open_replica(cfg, MemStorage::new(), 0).unwrap();
    catch_up(&mut master, &mut replica, 1 << 20);
    master.replicated_to(replica.log_end());
    let mut sent = 0;
    for now in (10_000..=10_200).step_by(50) {
        master.handle_timeout(now).unwrap();
        sent += checks(&mut master);
    }
    assert_eq!(sent, 1);
}
