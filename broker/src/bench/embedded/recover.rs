//! `rocklet bench recover`: a file log filled, left as a killed process leaves it, reopened
//! against the clock.

use std::path::Path;
use std::time::Instant;

use rocklet_core::{Config, FlushMode, NewMessage, Request};

use super::{config, open, MonotonicClock};
use crate::bench::{body, us, BenchArgs, Outcomes, Recorder};
use crate::clock::Clock;
use crate::driver::answer;

/// Fills a file log with `count` messages (batches of 64), leaves it like a killed process
/// would (no close), then times reopening it.
pub(super) fn recover(args: &BenchArgs, dir: &Path) -> Result<Outcomes, String> {
    let clock = MonotonicClock::new();
    let cfg = Config {
        flush: FlushMode::Async,
        ..config(args)
    };
    let mut b = open(cfg.clone(), Some(dir), clock.now())?;
    let run_id = 1;
    let topic = args.topic();
    let mut seq = 0;
    let t_fill = Instant::now();
    while seq < args.count {
        let k = (args.count - seq).min(64);
        let messages = (seq..seq + k)
            .map(|s| NewMessage::new(topic.clone(), body(run_id, s, args.size)))
            .collect();
        let reply = b
            .execute(clock.now(), Request::Send { messages })
            .map_err(|e| format!("fill failed: {e}"))?;
        match answer::sent(reply) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(format!("fill refused: {}: {e}", e.code())),
            Err(e) => return Err(format!("fill failed: {e}")),
        }
        seq += k;
    }
    b.sync().map_err(|e| format!("sync failed: {e}"))?;
    let fill = t_fill.elapsed();
    let bytes = b.log_end();
    // The core has no close or checkpoint: dropping it leaves what kill -9 leaves after the
    // last sync (the files as written, in the page cache), and releases the LOCK.
    drop(b);
    let t = Instant::now();
    let b = open(cfg, Some(dir), clock.now())?;
    let elapsed = t.elapsed();
    let report = format!("{:?}", b.recovery_report());
    let gib = bytes as f64 / f64::from(1u32 << 30);
    let rate = gib / elapsed.as_secs_f64().max(1e-9);
    let mut rec = Recorder::default();
    let _ = rec.op.record(us(elapsed));
    rec.done = args.count;
    Ok(Outcomes {
        rec,
        elapsed,
        consumed: 0,
        fsyncs: None,
        log_bytes: Some(bytes),
        verdict: crate::bench::Verdict::default(),
        notes: vec![
            format!(
                "recovery: reopened a {:.1} MiB log ({} messages, written in {:.2} s) in {:.3} s: {rate:.2} GiB/s scanned",
                bytes as f64 / f64::from(1 << 20),
                args.count,
                fill.as_secs_f64(),
                elapsed.as_secs_f64()
            ),
            format!("recovery report: {report}"),
        ],
        fields: vec![
            ("log_bytes".into(), bytes.to_string()),
            ("recover_s".into(), format!("{:.4}", elapsed.as_secs_f64())),
            ("gib_per_s".into(), format!("{rate:.3}")),
        ],
        cpu: None,
    })
}
