//! The simulation under `cargo test`: a short sweep of both replication modes, and replay —
//! a seed gives the same history every time (what makes a failing seed worth printing). The
//! CI sweep (`tests/ci/cluster.sh`) and the long form run the release binary
//! (`cargo run -p rocklet-sim --release -- --seeds N`): see broker/README.md.

use rocklet_sim::{report, run, Options};

fn sweep(opts: Options, seeds: std::ops::Range<u64>) {
    for seed in seeds {
        let o = run(seed, opts, false);
        assert!(o.violation.is_none(), "{}", report(&o));
        assert!(o.stats.elections > 0, "seed {seed}: no master ever elected");
    }
}

#[test]
fn sync_replication_keeps_every_invariant() {
    sweep(Options::default(), 0..8);
}

#[test]
fn async_replication_keeps_every_invariant() {
    sweep(
        Options {
            sync: false,
            ..Options::default()
        },
        0..8,
    );
}

#[test]
fn a_seed_replays_exactly() {
    for seed in [3, 91] {
        let a = run(seed, Options::default(), true);
        let b = run(seed, Options::default(), true);
        assert_eq!(a.stats, b.stats);
        assert_eq!(a.trace, b.trace);
        assert!(a.stats.acked > 0 && a.trace.len() > 10, "{:?}", a.stats);
    }
}
