//! The core thread as a host sees it: a panic there stops the broker (an embedder sees
//! `Fatal::Panic`, requests fail instead of hanging, the `rocklet` process exits non-zero and
//! a restart recovers), and writes are never queued behind a flood of slow inspections.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rocklet_broker::driver::{Fatal, DEBUG_PANIC_ENV};
use rocklet_broker::pb::v2 as pb;
use rocklet_core::FlushMode;

#[tokio::test]
async fn an_embedder_sees_a_core_panic_and_requests_fail_instead_of_hanging() {
    let mut b = TestBroker::start_with(|c| c.core.flush = FlushMode::Sync).await;
    send_ok(
        &mut b.client,
        msg("Before", b"x", pb::MessageType::Normal, "P0"),
    )
    .await;
    let running = b.broker.as_ref().unwrap();
    assert_eq!(running.fatal(), None);
    let core = running.core.clone();
    // The closure runs on the core thread (as admin and route lookups do).
    let r = core
        .inspect(|_| -> u32 { panic!("injected by the test") })
        .await;
    assert!(r.is_err(), "the inspection gets no answer: {r:?}");
    let f = tokio::time::timeout(Duration::from_secs(5), running.wait_fatal())
        .await
        .expect("the panic is reported within 5 s");
    assert!(
        matches!(&f, Fatal::Panic(m) if m.contains("injected by the test")),
        "{f:?}"
    );
    assert_eq!(running.fatal(), Some(f));
    // A request after it is answered with an error at once, not left hanging.
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        send(
            &mut b.client,
            vec![msg("After", b"y", pb::MessageType::Normal, "P1")],
        ),
    )
    .await
    .expect("answered within 5 s");
    let s = r.status.unwrap();
    assert_ne!(s.code, OK, "{s:?}");
    tokio::time::timeout(Duration::from_secs(10), b.stop())
        .await
        .expect("a broker whose core thread panicked still stops");
}

#[tokio::test]
async fn a_core_panic_exits_the_process_non_zero_and_a_restart_recovers() {
    // The hook that makes the core thread panic exists in debug builds only (the test binary
    // and `rocklet` share the profile).
    if !cfg!(debug_assertions) {
        eprintln!("SKIPPED: {DEBUG_PANIC_ENV} is read by debug builds only");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let mut p = BrokerProc::start_env(&data, &["--flush", "sync"], &[(DEBUG_PANIC_ENV, "Boom")]);
    let mut c = connect(p.addr).await;
    send_ok(&mut c, msg("Fine", b"kept", pb::MessageType::Normal, "F1")).await;
    let sent_at = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        c.send_message(pb::SendMessageRequest {
            messages: vec![msg("Boom", b"boom", pb::MessageType::Normal, "B1")],
        }),
    )
    .await
    .expect("the send that panicked the core is answered (an error or a closed connection)");
    if let Ok(r) = r {
        assert_ne!(r.into_inner().status.unwrap().code, OK);
    }
    let status = p.wait_exit(Duration::from_secs(15)).unwrap_or_else(|| {
        panic!(
            "the broker still runs 15 s after a core panic:\n{}",
            p.log()
        )
    });
    assert!(!status.success(), "exit status {status:?}");
    assert_eq!(status.code(), Some(1), "{status:?}");
    let log = p.log();
    assert!(log.contains("the core thread panicked"), "{log}");
    assert!(
        sent_at.elapsed() < Duration::from_secs(10),
        "exited promptly: {:?}",
        sent_at.elapsed()
    );
    drop(p);
    // A supervisor restarts it: recovery runs and the acknowledged message is there.
    let p = BrokerProc::start(&data, &["--flush", "sync"]);
    assert!(p.log().contains("log recovered"), "{}", p.log());
    let mut c = connect(p.addr).await;
    assert_eq!(drain_ids(&mut c, "Fine", "G").await, vec!["F1".to_string()]);
    let (status, _) = p.term();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_not_queued_behind_slow_inspections() {
    let mut b = TestBroker::start_with(|c| c.core.flush = FlushMode::Sync).await;
    send_ok(
        &mut b.client,
        msg("Fast", b"warm", pb::MessageType::Normal, "W0"),
    )
    .await;
    let core = b.broker.as_ref().unwrap().core.clone();
    // Four callers issue slow inspections (2 ms each on the core thread) back to back, as a
    // storm of admin, route and metrics calls would, for at most 60 s.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut flood = Vec::new();
    for _ in 0..4 {
        let (core, stop, done) = (core.clone(), stop.clone(), done.clone());
        flood.push(tokio::spawn(async move {
            let t = Instant::now();
            while !stop.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(60) {
                if core
                    .inspect(|_| std::thread::sleep(Duration::from_millis(2)))
                    .await
                    .is_err()
                {
                    return;
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = done.load(Ordering::Relaxed);
    // A normal client's sends stay fast: each waits for at most the inspection running when
    // it arrives, plus its fsync. (With every queued command handled before any reply, a
    // group of up to 4,096 inspections — 8 s — held each send.)
    let mut took = Vec::new();
    let t = Instant::now();
    for i in 0..20 {
        let s = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(10),
            send(
                &mut b.client,
                vec![msg("Fast", b"x", pb::MessageType::Normal, &format!("S{i}"))],
            ),
        )
        .await;
        took.push(s.elapsed());
        match r {
            Ok(r) => assert_eq!(r.status.unwrap().code, OK),
            Err(_) => break,
        }
        if t.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    let during = done.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    took.sort();
    let max = *took.last().unwrap();
    let median = took[took.len() / 2];
    eprintln!(
        "{} sends during {during} slow inspections: median {median:?}, max {max:?}",
        took.len()
    );
    assert!(
        during >= 20,
        "the flood ran while the sends did ({during} inspections)"
    );
    assert_eq!(took.len(), 20, "every send answered within 10 s: {took:?}");
    assert!(
        max < Duration::from_millis(1000),
        "a send waited behind the inspections: median {median:?}, max {max:?}"
    );
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspections_are_not_starved_by_a_flood_of_writes() {
    // Async flush: the writes are answered at once, so 64 requesters of 64-message batches
    // keep more work queued on the core thread than one group's budget for the whole flood
    // (at most 4 s).
    let b = TestBroker::start_with(|c| c.core.flush = FlushMode::Async).await;
    let core = b.broker.as_ref().unwrap().core.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let mut flood = Vec::new();
    for _ in 0..64 {
        let (core, stop, sent) = (core.clone(), stop.clone(), sent.clone());
        flood.push(tokio::spawn(async move {
            let t = Instant::now();
            while !stop.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(4) {
                let batch = (0..64)
                    .map(|_| rocklet_core::NewMessage::new("Flood", vec![b'f'; 32]))
                    .collect();
                let r = core
                    .request(rocklet_core::Request::Send { messages: batch })
                    .await;
                if r.is_err() {
                    return;
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A metrics scrape, an admin listing or a route lookup still gets its turn.
    let mut took = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        tokio::time::timeout(Duration::from_secs(20), core.inspect(|b| b.log_end()))
            .await
            .expect("answered within 20 s")
            .unwrap();
        took.push(t.elapsed());
    }
    let during = sent.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.await.unwrap();
    }
    let max = *took.iter().max().unwrap();
    eprintln!("10 inspections during a flood of {during} batches: max {max:?}");
    assert!(during > 100, "the flood ran ({during} batches)");
    assert!(
        max < Duration::from_millis(1000),
        "an inspection waited behind the writes: {took:?}"
    );
    b.stop().await;
}

#[tokio::test]
async fn producers_online_before_a_reopen_are_online_after_it() {
    // A replica that cuts a divergent tail reopens its core (`cluster::replication`); the
    // producers connected before are still connected. Without the driver telling the new
    // core, it took them for offline and parked their checks until they reconnected.
    use rocklet_broker::clock::{Clock, ManualClock};
    use rocklet_broker::metrics::Metrics;
    use rocklet_core::{AnyStorage, Broker, MemStorage, NewMessage, Reply, Request};

    let clock = ManualClock::new(1_000);
    let cfg = rocklet_core::Config {
        transaction_timeout_ms: 1_000,
        transaction_check_interval_ms: 1_000,
        ..rocklet_core::Config::default()
    };
    let core = Broker::open(cfg.clone(), AnyStorage::Mem(MemStorage::new()), 1_000).unwrap();
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let (core, _thread) =
        rocklet_broker::driver::spawn(core, shared, Arc::new(Metrics::default())).unwrap();
    let (checks, mut checked) = tokio::sync::mpsc::unbounded_channel();
    core.group_producer_up(1, vec!["PG".into()], checks);
    let half = Request::Prepare {
        group: "PG".into(),
        message: NewMessage::new("T", &b"open"[..]),
        check_immunity_ms: None,
    };
    assert!(matches!(core.request(half).await, Ok(Reply::Sent(_))));
    // The log opened again from its own storage, as `truncate_and_reopen` does.
    let now = clock.now();
    core.reopen(move |b| {
        let old = std::mem::replace(
            b,
            Broker::open(cfg.clone(), AnyStorage::Mem(MemStorage::new()), now).unwrap(),
        );
        *b = Broker::open(cfg, old.into_storage(), now).unwrap();
    })
    .await
    .unwrap();
    clock.advance(5_000);
    core.tick();
    let c = tokio::time::timeout(Duration::from_secs(5), checked.recv())
        .await
        .expect("the open transaction is checked: its producer is still online")
        .unwrap();
    assert_eq!(c.group, "PG");
}
