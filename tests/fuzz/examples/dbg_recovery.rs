use rocklet_core::{Broker, Storage};
fn main() {
    let data = std::fs::read(std::env::args().nth(1).unwrap()).unwrap();
    let (cfg, mut mem) = rocklet_fuzz::checks::log_recovery_storage(&data);
    for base in mem.segments().unwrap() {
        println!("segment {base}: {} bytes", mem.len(base).unwrap());
    }
    let t = std::time::Instant::now();
    let b = Broker::open(cfg, mem, 5_000).unwrap();
    println!(
        "open {:?}: {:?} end {} segs {}",
        t.elapsed(),
        b.recovery_report(),
        b.log_end(),
        b.segment_count()
    );
    let ts = b.topics();
    println!(
        "topics {} queues {}",
        ts.len(),
        ts.iter().map(|t| t.queues.len()).sum::<usize>()
    );
    for t in &ts {
        println!("  {:?} {}", t.name, t.queues.len());
    }
    println!(
        "txns {} delays {} now {}",
        b.pending_transaction_count(),
        b.pending_delay_count(),
        b.now()
    );
    let t = std::time::Instant::now();
    rocklet_fuzz::checks::log_recovery(&data);
    println!("whole check {:?}", t.elapsed());
}
