//! Writes seed inputs for the recovery and record targets from a real broker log (sends,
//! a batch, delays, transactions committed / rolled back / checked, receive and ack):
//! `cargo run --example seeds -- <dir>` makes `<dir>/<target>/<name>`. tests/ci/fuzz.sh
//! passes `tests/fuzz/seeds/` (written by this) to every run; rerun it when the log format
//! changes.
use std::path::Path;

use rocklet_core::testing::Sim;
use rocklet_core::{Config, Delay, MemStorage, NewMessage, Reply, Request, Resolution, TagFilter};

fn log() -> Vec<(u64, Vec<u8>)> {
    let cfg = Config {
        segment_size: 1 << 16,
        max_message_size: 1024,
        max_batch_size: 4096,
        default_queues: 2,
        ..Config::default()
    };
    let mut sim = Sim::new(cfg).expect("open");
    let send = |sim: &mut Sim<MemStorage>, m: Vec<NewMessage>| {
        let r = sim.request(Request::Send { messages: m }).expect("send");
        assert!(matches!(r, Reply::Sent(_)), "{r:?}");
    };
    send(
        &mut sim,
        vec![NewMessage::new("T0", b"plain".to_vec()).with_tag("a")],
    );
    send(
        &mut sim,
        (0..3)
            .map(|i| NewMessage::new("T0", vec![b'b', i]))
            .collect(),
    );
    send(
        &mut sim,
        vec![NewMessage::new("T1", b"lvl".to_vec()).with_delay(Delay::Level(2))],
    );
    send(
        &mut sim,
        vec![NewMessage::new("T1", b"after".to_vec()).with_delay(Delay::After(500))],
    );
    let mut txns = Vec::new();
    for i in 0..3u8 {
        let r = sim
            .request(Request::Prepare {
                group: "PG".into(),
                message: NewMessage::new("T0", vec![b'h', i]),
                check_immunity_ms: None,
            })
            .expect("prepare");
        let Reply::Sent(v) = r else { panic!("{r:?}") };
        txns.push(v[0].txn.expect("txn"));
    }
    for (txn, res) in txns.iter().zip([Resolution::Commit, Resolution::Rollback]) {
        let req = Request::EndTransaction {
            txn: *txn,
            resolution: res,
            group: Some("PG".into()),
            from_check: false,
        };
        sim.request(req).expect("end");
    }
    sim.set_checker("PG", |_| Resolution::Commit);
    sim.advance(60_000).expect("advance");
    let r = sim
        .request(Request::Receive {
            group: "C".into(),
            topic: "T0".into(),
            queue_id: None,
            max: 2,
            invisible_ms: 5_000,
            filter: TagFilter::All,
        })
        .expect("receive");
    if let Reply::Received(list) = r {
        if let Some(first) = list.first() {
            sim.request(Request::Ack {
                group: "C".into(),
                handle: first.handle.clone(),
            })
            .expect("ack");
        }
    }
    sim.advance(10_000).expect("advance");
    sim.broker.raw_records(0, usize::MAX).expect("records")
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: seeds <dir>");
    let dir = Path::new(&dir);
    let records = log();
    let write = |target: &str, name: &str, data: &[u8]| {
        let d = dir.join(target);
        std::fs::create_dir_all(&d).expect("mkdir");
        std::fs::write(d.join(name), data).expect("write");
    };
    // log_recovery: the whole log as repaired-record chunks in one segment, and split over
    // two segments (the second at the segment size).
    let chunked = |recs: &[(u64, Vec<u8>)]| {
        let mut out = Vec::new();
        for (_, r) in recs {
            out.push(1);
            out.extend_from_slice(&(r.len() as u16).to_be_bytes());
            out.extend_from_slice(r);
        }
        out
    };
    let mut one = vec![0];
    one.extend(chunked(&records));
    write("log_recovery", "real-log", &one);
    // Flags 1: a second segment at the segment size; then 1 + 5 chunks in the first.
    let mut two = vec![1, 5];
    two.extend(chunked(&records[..6]));
    two.extend(chunked(&records[6..]));
    write("log_recovery", "real-log-two-segments", &two);
    for (i, (_, r)) in records.iter().enumerate() {
        let mut one = vec![1];
        one.extend_from_slice(r);
        write("record_decode", &format!("record-{i}"), &one);
    }
    eprintln!("{} records seeded into {}", records.len(), dir.display());
}
