//! Heap bytes per pending transaction beyond the log, measured with a counting allocator.
//!
//! `cargo run --release -p rocklet-core --example pending_memory -- 1000000`
#![allow(unsafe_code)] // the counting allocator

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use rocklet_core::{Broker, Config, MemStorage, NewMessage, Reply, Request};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let mut b = Broker::open(Config::default(), MemStorage::new(), 0).expect("open");
    let body = vec![1u8; 1024];
    // Warm up the interned group and topic so only per-transaction state is counted.
    let prepare = |b: &mut Broker<MemStorage>| {
        let req = Request::Prepare {
            group: "G".into(),
            message: NewMessage::new("T", body.clone()),
            check_immunity_ms: None,
        };
        let Reply::Sent(_) = b.execute(0, req).expect("prepare") else {
            panic!("prepare refused")
        };
    };
    prepare(&mut b);
    let before = LIVE.load(Ordering::Relaxed) as i64 - b.storage().capacity_bytes() as i64;
    for _ in 0..n {
        prepare(&mut b);
    }
    let after = LIVE.load(Ordering::Relaxed) as i64 - b.storage().capacity_bytes() as i64;
    let per = (after - before) as f64 / n as f64;
    println!(
        "pending transactions: {}\nheap beyond the log: {} bytes ({per:.1} bytes per pending transaction)\npending tables: {} bytes ({:.1} per transaction)\nlog: {} bytes",
        b.pending_transaction_count(),
        after - before,
        b.pending_table_bytes(),
        b.pending_table_bytes() as f64 / b.pending_transaction_count() as f64,
        b.storage().total_bytes()
    );
}
