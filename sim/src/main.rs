//! `rocklet-sim`: runs seeds of the cluster simulation (see the crate doc).
//!
//! ```text
//! cargo run -p rocklet-sim --release -- --seeds 1000000 [--from 0] [--async]   a sweep
//! cargo run -p rocklet-sim --release -- --seed 1234 [--async]                  one seed, with its history
//! ```
//!
//! A sweep prints each failing seed's violation and history and exits 1 if any failed; at
//! the end, the count, the time and seeds/s.

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use rocklet_sim::{report, run, Options};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut opts = Options::default();
    let (mut from, mut seeds, mut one) = (0u64, 1_000u64, None);
    let mut i = 0;
    while i < args.len() {
        let value = |i: usize| -> Option<u64> { args.get(i + 1).and_then(|v| v.parse().ok()) };
        match args[i].as_str() {
            "--async" => opts.sync = false,
            "--from" => from = value(i).unwrap_or(from),
            "--seeds" => seeds = value(i).unwrap_or(seeds),
            "--seed" => one = value(i),
            other => {
                eprintln!("unknown argument `{other}`: --seeds N [--from S] | --seed S, [--async]");
                return ExitCode::from(2);
            }
        }
        i += if args[i] == "--async" { 1 } else { 2 };
    }
    // Output may go to a pipe that closes early (`| head`): nothing to do about it then.
    let mut out = std::io::stdout().lock();
    if let Some(seed) = one {
        let o = run(seed, opts, true);
        let _ = write!(out, "{}", report(&o));
        if o.violation.is_none() {
            let _ = writeln!(out, "history:");
            for l in &o.trace {
                let _ = writeln!(out, "  {l}");
            }
            return ExitCode::SUCCESS;
        }
        return ExitCode::FAILURE;
    }
    let t0 = Instant::now();
    let mut failed = 0u64;
    for seed in from..from + seeds {
        let o = run(seed, opts, false);
        if o.violation.is_some() {
            failed += 1;
            let _ = write!(out, "{}", report(&o));
            let _ = out.flush();
        }
        if (seed - from + 1) % 1_000 == 0 {
            let s = t0.elapsed().as_secs_f64();
            eprintln!(
                "{} seeds, {failed} failed, {:.0} s, {:.1} seeds/s",
                seed - from + 1,
                s,
                (seed - from + 1) as f64 / s
            );
        }
    }
    let s = t0.elapsed().as_secs_f64();
    let _ = writeln!(
        out,
        "{} mode: seeds {from}..{}: {failed} failed, {s:.1} s, {:.1} seeds/s",
        if opts.sync { "sync" } else { "async" },
        from + seeds,
        seeds as f64 / s
    );
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
