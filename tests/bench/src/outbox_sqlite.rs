//! The SQLite transactional outbox, the peer of a Rocklet transaction: each local transaction
//! writes a business row and an outbox row in one SQLite transaction (WAL, `synchronous` FULL
//! or NORMAL); a relay thread reads outbox rows in id order, "publishes" them (checks each
//! sequence number arrives exactly once) and deletes them. Same body size and count as the
//! `rocklet bench txn` run it is compared with.
//!
//! `outbox-sqlite --dir target --count 20000 --size 1024 --threads 4 --sync full`
//! Exit 1 if a message was lost or relayed twice.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rusqlite::{params, Connection, TransactionBehavior};

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn open(path: &std::path::Path, sync: &str) -> Connection {
    let c = Connection::open(path).expect("open the database");
    c.busy_timeout(Duration::from_secs(30))
        .expect("busy timeout");
    c.pragma_update(None, "journal_mode", "WAL").expect("WAL");
    c.pragma_update(None, "synchronous", sync)
        .expect("synchronous");
    c
}

fn main() {
    let dir = std::path::PathBuf::from(arg("--dir", "."));
    let count: u64 = arg("--count", "20000").parse().expect("--count: a number");
    let size: usize = arg("--size", "1024").parse().expect("--size: bytes");
    let threads: u64 = arg("--threads", "1").parse().expect("--threads: a number");
    let sync = arg("--sync", "full").to_uppercase();
    assert!(
        sync == "FULL" || sync == "NORMAL",
        "--sync must be full or normal, not {sync}"
    );
    let path = dir.join(format!("outbox-{}.db", std::process::id()));
    let cleanup = |p: &std::path::Path| {
        for ext in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", p.display()));
        }
    };
    cleanup(&path);
    {
        let c = open(&path, &sync);
        c.execute_batch(
            "CREATE TABLE business(id INTEGER PRIMARY KEY, amount INTEGER NOT NULL, payload BLOB NOT NULL);
             CREATE TABLE outbox(id INTEGER PRIMARY KEY AUTOINCREMENT, seq INTEGER NOT NULL, body BLOB NOT NULL);",
        )
        .expect("schema");
    }
    let next = Arc::new(AtomicU64::new(0));
    let writers_done = Arc::new(AtomicBool::new(false));
    let lat = Arc::new(Mutex::new(Histogram::<u64>::new(3).expect("histogram")));
    let t0 = Instant::now();
    // The relay: read in id order, publish, delete, in one transaction per batch.
    let relay = {
        let path = path.clone();
        let sync = sync.clone();
        let done = writers_done.clone();
        std::thread::spawn(move || {
            let mut c = open(&path, &sync);
            let mut seen = vec![0u8; count as usize];
            let mut relayed = 0u64;
            loop {
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .expect("relay begin");
                let rows: Vec<(i64, u64, usize)> = {
                    let mut st = tx
                        .prepare_cached(
                            "SELECT id, seq, length(body) FROM outbox ORDER BY id LIMIT 256",
                        )
                        .expect("relay select");
                    st.query_map([], |r| {
                        Ok((
                            r.get(0)?,
                            r.get::<_, i64>(1)? as u64,
                            r.get::<_, i64>(2)? as usize,
                        ))
                    })
                    .expect("relay query")
                    .map(|r| r.expect("row"))
                    .collect()
                };
                if let Some(&(last, _, _)) = rows.last() {
                    tx.execute("DELETE FROM outbox WHERE id <= ?1", params![last])
                        .expect("relay delete");
                }
                tx.commit().expect("relay commit");
                for (_, seq, len) in &rows {
                    assert_eq!(*len, size, "outbox row of the wrong size");
                    let s = &mut seen[*seq as usize];
                    *s = s.saturating_add(1);
                    relayed += 1;
                }
                if rows.is_empty() {
                    if done.load(Ordering::Acquire) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            (relayed, seen)
        })
    };
    let mut writers = Vec::new();
    for _ in 0..threads.max(1) {
        let path = path.clone();
        let sync = sync.clone();
        let next = next.clone();
        let lat = lat.clone();
        writers.push(std::thread::spawn(move || {
            let mut c = open(&path, &sync);
            let payload = vec![b'b'; size];
            let mut h = Histogram::<u64>::new(3).expect("histogram");
            loop {
                let seq = next.fetch_add(1, Ordering::Relaxed);
                if seq >= count {
                    break;
                }
                let body = vec![b'o'; size];
                let t = Instant::now();
                let tx = c
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .expect("begin");
                tx.execute(
                    "INSERT INTO business(amount, payload) VALUES (?1, ?2)",
                    params![seq as i64, payload],
                )
                .expect("business row");
                tx.execute(
                    "INSERT INTO outbox(seq, body) VALUES (?1, ?2)",
                    params![seq as i64, body],
                )
                .expect("outbox row");
                tx.commit().expect("commit");
                let _ = h.record(t.elapsed().as_micros() as u64);
            }
            lat.lock().expect("latency").add(&h).expect("merge");
        }));
    }
    for w in writers {
        w.join().expect("writer");
    }
    let write_s = t0.elapsed().as_secs_f64();
    writers_done.store(true, Ordering::Release);
    let (relayed, seen) = relay.join().expect("relay");
    let all_s = t0.elapsed().as_secs_f64();
    cleanup(&path);
    let h = lat.lock().expect("latency");
    let missing = seen.iter().filter(|&&s| s == 0).count();
    let dup = seen.iter().filter(|&&s| s > 1).count();
    let ok = missing == 0 && dup == 0 && relayed == count;
    let rate = count as f64 / write_s;
    println!(
        "SQLite outbox, synchronous={sync}, {threads} writer threads, {count} transactions of {size} B (business row + outbox row): {rate:.0} txn/s, latency p50 {:.3} ms, p99 {:.3} ms, p999 {:.3} ms, max {:.3} ms; relay finished after {all_s:.2} s ({:.0} msg/s end to end)",
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3,
        h.value_at_quantile(0.999) as f64 / 1e3,
        h.max() as f64 / 1e3,
        count as f64 / all_s
    );
    println!(
        "correctness: {} — {relayed} relayed, {missing} missing, {dup} relayed twice",
        if ok { "OK" } else { "FAILED" }
    );
    println!(
        "result: ok={} ops={count} secs={write_s:.3} per_s={rate:.0} e2e_per_s={:.0} p50_ms={:.3} p99_ms={:.3}",
        u8::from(ok),
        count as f64 / all_s,
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3
    );
    if !ok {
        std::process::exit(1);
    }
}
