//! Connections and file descriptors: a broker started with a low descriptor limit and
//! flooded with idle connections keeps serving a normal client (storage never runs out of
//! descriptors: connections are capped below the limit), and its accept loops do not spin
//! when descriptors run out.

mod common;

use std::time::{Duration, Instant};

use common::limited::Limited;
use common::*;
use rocklet_broker::pb::v2 as pb;

/// With 256 descriptors and 600 idle connections (gRPC and remoting) the broker caps its
/// connections below the limit: a client connected before keeps sending (under sync flush,
/// across segment rolls that open new files), connections above the cap are closed, and the
/// accept loops stay idle (before: they spun, 2.9 s of CPU in 5 s, and sends failed with
/// "Too many open files" from storage).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_beyond_the_descriptor_limit_leave_storage_and_the_cpu_alone() {
    let toml = "[core]\nsegment_size = 262144\nmax_message_size = 65536\nmax_batch_size = 65536\n";
    let Some(b) = Limited::start(256, toml, &["--flush", "sync"]) else {
        return;
    };
    let mut c = connect(b.grpc).await;
    send_ok(&mut c, msg("Fd", b"first", pb::MessageType::Normal, "F0")).await;

    // (A broker that stopped accepting lets its backlog fill: connects then time out.)
    let mut idle = Vec::new();
    let mut failed = 0;
    for i in 0..600 {
        let to = if i % 2 == 0 { b.grpc } else { b.remoting };
        match std::net::TcpStream::connect_timeout(&to, Duration::from_millis(500)) {
            Ok(s) => idle.push(s),
            Err(_) => failed += 1,
        }
        if failed > 4 {
            break;
        }
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let (cpu0, t0) = (b.cpu(), Instant::now());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu = b.cpu() - cpu0;
    let wall = t0.elapsed();
    eprintln!("broker CPU with 600 idle connections and 256 descriptors: {cpu:?} in {wall:?}");
    assert!(
        cpu < Duration::from_millis(600),
        "the broker used {cpu:?} of CPU in {wall:?} doing nothing but holding idle connections"
    );
    // The cap held: connections above it were closed and counted.
    let open = b.metric("rocklet_connections_open");
    let refused = b.metric("rocklet_requests_over_limit_total{limit=\"max_connections\"}");
    eprintln!("{open} connections open, {refused} refused");
    assert!(
        open < 256 - 128,
        "{open} connections open under a 256-descriptor limit"
    );
    assert!(refused > 0, "connections above the cap are refused");

    // The client connected before keeps sending, across segment rolls (~5 new files).
    let body = vec![b'b'; 32 << 10];
    for i in 0..40 {
        let r = send(
            &mut c,
            vec![msg("Fd", &body, pb::MessageType::Normal, &format!("B{i}"))],
        )
        .await;
        let s = r.status.unwrap();
        assert_eq!(s.code, OK, "send {i} failed: {}", s.message);
    }
    let r = receive(&mut c, "Fd", "G", 32, 30_000, 1_000).await;
    assert_eq!(r.status.code, OK, "{}", r.status.message);
    assert!(!r.messages.is_empty());
    // Once the idle connections go, new clients are served again.
    drop(idle);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut fresh = connect(b.grpc).await;
    send_ok(
        &mut fresh,
        msg("Fd", b"after", pb::MessageType::Normal, "A0"),
    )
    .await;
}
