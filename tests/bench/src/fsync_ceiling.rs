//! The disk's fsync ceiling: append `--size` bytes and `fdatasync`, in a loop, for
//! `--seconds`. Prints fsyncs/s and latency percentiles; a sync-flush broker can answer at most
//! (fsyncs/s × requests per fsync) requests per second.
//!
//! `fsync-ceiling --dir target --seconds 3 --size 4096`

use std::fs::OpenOptions;
use std::io::Write;
use std::time::{Duration, Instant};

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn main() {
    let dir = std::path::PathBuf::from(arg("--dir", "."));
    let secs: f64 = arg("--seconds", "3").parse().expect("--seconds: a number");
    let size: usize = arg("--size", "4096")
        .parse()
        .expect("--size: a number of bytes");
    let path = dir.join(format!("fsync-ceiling-{}.tmp", std::process::id()));
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
    let block = vec![0x5au8; size];
    let mut h = hdrhistogram::Histogram::<u64>::new(3).expect("histogram");
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < Duration::from_secs_f64(secs) {
        let t = Instant::now();
        f.write_all(&block).expect("write");
        f.sync_data().expect("fdatasync");
        let _ = h.record(t.elapsed().as_micros() as u64);
        n += 1;
    }
    let el = t0.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    let rate = n as f64 / el;
    println!(
        "{n} appends of {size} B + fdatasync in {el:.2} s: {rate:.0} fsyncs/s, latency p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3,
        h.max() as f64 / 1e3
    );
    println!(
        "result: fsyncs={n} secs={el:.3} per_s={rate:.0} p50_ms={:.3} p99_ms={:.3}",
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3
    );
}
