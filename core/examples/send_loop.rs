//! A plain send loop, for profilers and `tests/bench/run.sh`:
//! `cargo run --release -p rocklet-core --features std --example send_loop -- MODE [COUNT] [MEMORY]`.
//!
//! Memory storage (256 MiB segments), one thread, 1 KiB bodies, no consumer. `MEMORY` is
//! `fresh` (default: the log grows into new pages as it is written, each page faulted in by
//! the kernel inside the timed loop) or `prepared` (the segments the run fills are made
//! resident before the clock starts, [`MemStorage::prepare_segments`], as RocketMQ warms
//! its commit-log files ahead of use). Modes:
//! - `send`: [`Broker::send_ref`], the allocation-free path (borrowed body, receipt);
//! - `txn`: [`Broker::prepare_ref`] + [`Broker::end_transaction`] (commit);
//! - `send-request`, `txn-request`: the same through [`Broker::execute`] with an owned
//!   [`Request`] per message (what a host that builds requests pays).
use rocklet_core::{
    Broker, Config, MemStorage, MessageRef, NewMessage, Reply, Request, Resolution,
};

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "send".into());
    let n: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let memory = std::env::args().nth(3).unwrap_or_else(|| "fresh".into());
    const SEGMENT: usize = 256 << 20;
    let cfg = Config {
        segment_size: SEGMENT as u64,
        ..Config::default()
    };
    let mut storage = MemStorage::new();
    match memory.as_str() {
        "fresh" => {}
        "prepared" => {
            // What the run writes: a 1 KiB message's record is 1,139 bytes, a transaction's
            // half and op records about 1,400 together; one segment more for the rest.
            let per = if mode.starts_with("txn") {
                1_500
            } else {
                1_200
            };
            let segments = (n as usize * per).div_ceil(SEGMENT) + 1;
            storage.prepare_segments(SEGMENT, segments);
        }
        other => {
            eprintln!("unknown memory `{other}`: fresh or prepared");
            std::process::exit(2);
        }
    }
    let mut b = Broker::open(cfg, storage, 0).expect("open");
    let body = vec![7u8; 1024];
    let message = MessageRef::new("T", &body);
    let mut ids = 0usize;
    let cpu0 = cpu_ns();
    let t = std::time::Instant::now();
    match mode.as_str() {
        "send" => {
            for _ in 0..n {
                let r = b.send_ref(1, &message).expect("send").expect("stored");
                // What a host does with the id: format it (on the stack) once.
                ids += r.msg_id().as_str().len();
            }
        }
        "txn" => {
            for _ in 0..n {
                let r = b
                    .prepare_ref(1, "G", &message, None)
                    .expect("prepare")
                    .expect("stored");
                ids += r.msg_id().as_str().len();
                let txn = r.txn.expect("a half message has a transaction");
                let end = b
                    .end_transaction(1, txn, Resolution::Commit, Some("G"), false)
                    .expect("end");
                assert!(matches!(end, Reply::Ended { .. }), "{end:?}");
            }
        }
        "send-request" => {
            for _ in 0..n {
                let reply = b
                    .execute(
                        1,
                        Request::Send {
                            messages: vec![NewMessage::new("T", body.clone())],
                        },
                    )
                    .expect("send");
                let Reply::Sent(r) = reply else {
                    panic!("{reply:?}")
                };
                ids += r[0].msg_id.len();
            }
        }
        "txn-request" => {
            for _ in 0..n {
                let req = Request::Prepare {
                    group: "G".into(),
                    message: NewMessage::new("T", body.clone()),
                    check_immunity_ms: None,
                };
                let reply = b.execute(1, req).expect("prepare");
                let Reply::Sent(r) = reply else {
                    panic!("{reply:?}")
                };
                ids += r[0].msg_id.len();
                let end = Request::EndTransaction {
                    txn: r[0].txn.expect("a half message has a transaction"),
                    resolution: Resolution::Commit,
                    group: Some("G".into()),
                    from_check: false,
                };
                b.execute(1, end).expect("end");
            }
        }
        other => {
            eprintln!("unknown mode `{other}`: send, txn, send-request or txn-request");
            std::process::exit(2);
        }
    }
    let el = t.elapsed();
    // On a shared machine the wall clock includes time other processes had the CPU; the
    // thread's own CPU time (user + kernel: page faults count) is what the loop cost.
    let cpu = match (cpu0, cpu_ns()) {
        (Some(a), Some(b)) => format!(
            ", cpu {:.3}s: {:.0}/s of cpu",
            (b - a) as f64 / 1e9,
            n as f64 * 1e9 / (b - a).max(1) as f64
        ),
        _ => String::new(),
    };
    assert_eq!(
        ids,
        32 * n as usize,
        "every message got an offset message id"
    );
    println!(
        "{mode}: {n} in {el:?}: {:.0}/s ({memory} memory{cpu})",
        n as f64 / el.as_secs_f64(),
    );
}

/// This thread's time on the CPU so far, in ns (Linux's schedstat), if the system says.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}
