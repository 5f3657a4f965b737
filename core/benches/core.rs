//! Core throughput and backlog-cost benchmarks (in-memory storage, one thread).
//!
//! `cargo bench -p rocklet-core --features testing` — figures go to docs/benchmarks.md.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rocklet_core::record::{self, Decoded, Header, Host};
use rocklet_core::{
    Broker, Config, MemStorage, MessageRef, NewMessage, Reply, Request, Resolution, TagFilter,
    TxnId,
};

const BODY: usize = 1024;
/// Messages per broker before a fresh one is opened (bounds the benchmark's memory).
const CHUNK: u64 = 200_000;

fn cfg() -> Config {
    Config {
        segment_size: 256 << 20,
        ..Config::default()
    }
}

fn broker() -> Broker<MemStorage> {
    Broker::open(cfg(), MemStorage::new(), 0).expect("open")
}

fn send_one(b: &mut Broker<MemStorage>, body: &[u8]) {
    let r = b
        .execute(
            1,
            Request::Send {
                messages: vec![NewMessage::new("BenchTopic", body.to_vec())],
            },
        )
        .unwrap();
    debug_assert!(matches!(r, Reply::Sent(_)));
    black_box(r);
}

fn txn_one(b: &mut Broker<MemStorage>, body: &[u8]) {
    let req = Request::Prepare {
        group: "BenchGroup".into(),
        message: NewMessage::new("BenchTopic", body.to_vec()),
        check_immunity_ms: None,
    };
    let Reply::Sent(r) = b.execute(1, req).unwrap() else {
        panic!("prepare failed")
    };
    let txn = r[0].txn.expect("txn");
    let end = Request::EndTransaction {
        txn,
        resolution: Resolution::Commit,
        group: Some("BenchGroup".into()),
        from_check: false,
    };
    black_box(b.execute(1, end).unwrap());
}

/// The allocation-free path: a borrowed message, a receipt.
fn send_ref_one(b: &mut Broker<MemStorage>, body: &[u8]) {
    let r = b
        .send_ref(1, &MessageRef::new("BenchTopic", body))
        .unwrap()
        .unwrap();
    black_box(r.msg_id().as_str().len());
}

fn txn_ref_one(b: &mut Broker<MemStorage>, body: &[u8]) {
    let m = MessageRef::new("BenchTopic", body);
    let r = b.prepare_ref(1, "BenchGroup", &m, None).unwrap().unwrap();
    let txn = r.txn.expect("txn");
    black_box(
        b.end_transaction(1, txn, Resolution::Commit, Some("BenchGroup"), false)
            .unwrap(),
    );
}

/// Runs `f` `iters` times over brokers of at most CHUNK messages each, timing only `f`.
fn chunked(iters: u64, mut f: impl FnMut(&mut Broker<MemStorage>)) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(CHUNK);
        let mut b = broker();
        let t = Instant::now();
        for _ in 0..n {
            f(&mut b);
        }
        total += t.elapsed();
        drop(b);
        left -= n;
    }
    total
}

fn throughput(c: &mut Criterion) {
    let body = vec![7u8; BODY];
    let mut g = c.benchmark_group("core");
    g.throughput(Throughput::Elements(1));
    g.bench_function("send_1KiB", |bch| {
        bch.iter_custom(|iters| chunked(iters, |b| send_one(b, &body)))
    });
    g.bench_function("txn_prepare_commit_1KiB", |bch| {
        bch.iter_custom(|iters| chunked(iters, |b| txn_one(b, &body)))
    });
    g.bench_function("send_ref_1KiB", |bch| {
        bch.iter_custom(|iters| chunked(iters, |b| send_ref_one(b, &body)))
    });
    g.bench_function("txn_ref_prepare_commit_1KiB", |bch| {
        bch.iter_custom(|iters| chunked(iters, |b| txn_ref_one(b, &body)))
    });
    g.bench_function("consume_pull32_1KiB", |bch| {
        bch.iter_custom(|iters| {
            let mut b = Broker::open(
                Config {
                    default_queues: 1,
                    ..cfg()
                },
                MemStorage::new(),
                0,
            )
            .unwrap();
            let n = iters.min(CHUNK);
            for _ in 0..n {
                send_one(&mut b, &body);
            }
            let t = Instant::now();
            let mut got = 0u64;
            let mut offset = 0u64;
            while got < iters {
                if offset >= n {
                    offset = 0;
                }
                let req = Request::Pull {
                    group: "BenchConsumer".into(),
                    topic: "BenchTopic".into(),
                    queue_id: 0,
                    offset: Some(offset),
                    max: 32,
                    filter: TagFilter::All,
                    auto_commit: false,
                };
                let Reply::Pulled {
                    messages,
                    next_offset,
                    ..
                } = b.execute(1, req).unwrap()
                else {
                    panic!()
                };
                got += messages.len() as u64;
                offset = next_offset;
                black_box(messages);
            }
            t.elapsed()
        })
    });
    g.finish();
}

/// A broker with `pending` unresolved halves (small bodies) of an online group.
fn with_backlog(pending: u64) -> (Broker<MemStorage>, Vec<TxnId>) {
    let mut b = Broker::open(
        Config {
            segment_size: 1 << 30,
            ..Config::default()
        },
        MemStorage::new(),
        0,
    )
    .unwrap();
    b.set_producer_online(0, "BenchGroup", true);
    let mut txns = Vec::with_capacity(pending as usize);
    for _ in 0..pending {
        let req = Request::Prepare {
            group: "BenchGroup".into(),
            message: NewMessage::new("BenchTopic", &b"pending"[..]),
            check_immunity_ms: None,
        };
        let Reply::Sent(r) = b.execute(0, req).unwrap() else {
            panic!()
        };
        txns.push(r[0].txn.unwrap());
    }
    (b, txns)
}

fn backlog(c: &mut Criterion) {
    let body = vec![7u8; BODY];
    let mut g = c.benchmark_group("backlog");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1));
    for pending in [0u64, 1_000_000] {
        let (mut b, _) = with_backlog(pending);
        // New transactions resolved while `pending` others wait (deadlines far in the future).
        g.bench_with_input(
            BenchmarkId::new("end_transaction", pending),
            &pending,
            |bch, _| {
                bch.iter(|| txn_one(&mut b, &body));
            },
        );
        drop(b);
    }
    for pending in [1_000u64, 1_000_000] {
        // Firing due checks: each iteration checks the next due half.
        g.bench_with_input(
            BenchmarkId::new("next_check", pending),
            &pending,
            |bch, &pending| {
                bch.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut left = iters;
                    while left > 0 {
                        let (mut b, _) = with_backlog(pending);
                        let n = left.min(pending);
                        // Everything is due at 6 s; fire n checks one at a time by stepping the
                        // checks' deadlines apart is not possible, so fire all and count n.
                        let t = Instant::now();
                        b.handle_timeout(6_000).unwrap();
                        let mut fired = 0;
                        while let Some(o) = b.poll_output() {
                            fired += 1;
                            black_box(o);
                        }
                        total += t.elapsed().mul_f64(n as f64 / fired.max(1) as f64);
                        left -= n;
                    }
                    total
                })
            },
        );
    }
    g.finish();
}

/// One 1 KiB record encoded into a reused buffer, and decoded with its CRCs checked: the
/// record codec alone, without the broker around it.
fn record_codec(c: &mut Criterion) {
    let body = vec![7u8; BODY];
    let header = Header {
        queue_id: 1,
        queue_offset: 5,
        phys_offset: 77,
        born_timestamp: 1_700_000_000_000,
        born_host: Host::V4([127, 0, 0, 1], 1234),
        store_timestamp: 1_700_000_000_001,
        store_host: Host::V4([10, 0, 0, 1], 10911),
        ..Header::default()
    };
    let mut rec = Vec::new();
    record::encode(&mut rec, &header, &body, "T", b"").unwrap();
    let mut out = Vec::with_capacity(2 * BODY);
    let mut g = c.benchmark_group("record");
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode_1KiB", |bch| {
        bch.iter(|| {
            out.clear();
            record::encode(&mut out, &header, black_box(&body), "T", b"").unwrap();
            black_box(&out);
        })
    });
    g.bench_function("decode_1KiB", |bch| {
        bch.iter(|| {
            let Ok(Decoded::Record(r)) = record::decode(black_box(&rec), u32::MAX) else {
                panic!("the encoded record decodes")
            };
            black_box(r.body_crc);
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = throughput, backlog, record_codec
}
criterion_main!(benches);
