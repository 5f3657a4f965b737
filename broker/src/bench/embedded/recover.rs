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
/// would (no close), then times reopening it. With `--checkpoint-every`, a checkpoint is
/// recorded each time the log grew by that much while filling (the broker's schedule): the
/// reopen must replay exactly the records written after the newest one. Each message has a
/// key, so the index is filled as a broker's (whose clients give every message an id).
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
    // The newest checkpoint: (the offset it covers, messages sent by then), and its cost.
    let mut checkpoint: Option<(u64, u64)> = None;
    let mut checkpoints = 0u32;
    let mut checkpoint_time = std::time::Duration::ZERO;
    // The core thread's part of each (the snapshot copied), the longest of them.
    let (mut pause_time, mut pause_max) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
    while seq < args.count {
        if let Some(every) = args.checkpoint_every {
            let last = checkpoint.map_or(0, |c| c.0);
            if b.log_end() - last >= every {
                // As the broker takes one: the snapshot copied on the core thread, then its
                // sync, encoding and the write of CHECKPOINT (run here, timed apart: a server runs them on its
                // sync thread while the core thread goes on).
                let t = Instant::now();
                let draft = b
                    .begin_checkpoint()
                    .map_err(|e| format!("checkpoint failed: {e}"))?
                    .ok_or("nothing to checkpoint")?;
                let covers = draft.covers();
                let job = b
                    .storage_mut()
                    .detach_checkpoint(draft)
                    .map_err(|e| format!("checkpoint failed: {e}"))?;
                let pause = t.elapsed();
                pause_time += pause;
                pause_max = pause_max.max(pause);
                if let Some(job) = job {
                    let written = job.run();
                    b.storage_mut().detached_done(&job, written.is_ok());
                    match written.map_err(|e| format!("checkpoint sync failed: {e}"))? {
                        rocklet_core::CheckpointWrite::Written => {}
                        other => return Err(format!("checkpoint not written: {other:?}")),
                    }
                }
                b.synced_to(covers);
                checkpoint_time += t.elapsed();
                checkpoints += 1;
                checkpoint = Some((covers, seq));
            }
        }
        let k = (args.count - seq).min(64);
        let messages = (seq..seq + k)
            .map(|s| {
                // A key each, as a client's message id gives: the index (and its 2 MiB of
                // slots, which every checkpoint encodes) is filled as in a broker.
                let mut m = NewMessage::new(topic.clone(), body(run_id, s, args.size));
                m.keys = vec![format!("k{s}")];
                m
            })
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
    // No close: dropping it leaves what kill -9 leaves after the last sync (the files as
    // written, in the page cache), and releases the LOCK.
    drop(b);
    let t = Instant::now();
    let b = open(cfg, Some(dir), clock.now())?;
    let elapsed = t.elapsed();
    let r = b.recovery_report();
    let report = format!("{r:?}");
    let mut notes = Vec::new();
    if args.checkpoint_every.is_some() {
        // One record per message: what was sent after the newest checkpoint, nothing more.
        let want = checkpoint.map_or(args.count, |c| args.count - c.1);
        if r.checkpoint != checkpoint.map(|c| c.0) || r.records != want {
            return Err(format!(
                "the reopen replayed {} records from {:?}; expected {want} from the checkpoint \
                 at {:?} ({})",
                r.records,
                r.checkpoint,
                checkpoint.map(|c| c.0),
                r.checkpoint_unused.as_deref().unwrap_or("used")
            ));
        }
        notes.push(format!(
            "checkpoints: {checkpoints} while filling ({:.1} ms each on average, of which the \
             core thread's part (the state copied) {:.2} ms on average, {:.2} ms at most; \
             the rest, the sync, encoding and write, runs on the sync thread); the reopen read the \
             one at log offset {} and replayed {} records ({:.1} MiB of log) after it",
            checkpoint_time.as_secs_f64() * 1e3 / f64::from(checkpoints.max(1)),
            pause_time.as_secs_f64() * 1e3 / f64::from(checkpoints.max(1)),
            pause_max.as_secs_f64() * 1e3,
            checkpoint.map_or(0, |c| c.0),
            r.records,
            (bytes - checkpoint.map_or(0, |c| c.0)) as f64 / f64::from(1 << 20)
        ));
    }
    let replayed = r.records;
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
        notes: [
            vec![
                format!(
                    "recovery: reopened a {:.1} MiB log ({} messages, written in {:.2} s) in {:.3} s: {rate:.2} GiB/s scanned",
                    bytes as f64 / f64::from(1 << 20),
                    args.count,
                    fill.as_secs_f64(),
                    elapsed.as_secs_f64()
                ),
                format!("recovery report: {report}"),
            ],
            notes,
        ]
        .concat(),
        fields: vec![
            ("log_bytes".into(), bytes.to_string()),
            ("recover_s".into(), format!("{:.4}", elapsed.as_secs_f64())),
            ("gib_per_s".into(), format!("{rate:.3}")),
            ("replayed_records".into(), replayed.to_string()),
        ],
        cpu: None,
    })
}
