//! Checkpoints: an open from one gives the broker a full replay gives, after any workload
//! and any crash; an open from one reads only the log after it; a damaged or stale one is
//! named and not used.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use proptest::prelude::*;

use crate::testing::{CrashCheckpoint, CrashStorage, Sim};
use crate::*;

/// Small segments (a few dozen messages each), short transaction and delivery times.
fn cfg() -> Config {
    Config {
        segment_size: 48 << 10,
        max_message_size: 1024,
        max_batch_size: 1024,
        transaction_timeout_ms: 2_000,
        transaction_check_interval_ms: 1_500,
        transaction_check_max: 4,
        max_delivery_attempts: 3,
        index_keys: true,
        ..Config::default()
    }
}

/// xorshift64*: the workload of a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len() as u64) as usize]
    }
}

const TOPICS: [&str; 3] = ["T0", "T1", "T2"];
const PRODUCERS: [&str; 2] = ["P0", "P1"];
const CONSUMERS: [&str; 3] = ["C0", "C1", "F"];

/// What a workload left to act on.
#[derive(Default)]
struct World {
    txns: Vec<TxnId>,
    handles: Vec<(String, ReceiptHandle)>,
    checkpoints: Vec<u64>,
    /// Retention ran since the newest checkpoint: its record of where the log starts is
    /// not the one that checkpoint was taken under.
    retained_since: bool,
    /// Retention retired a segment at some point.
    retained: bool,
    /// Consumers ack what they receive at once (nothing stays in flight to hold
    /// retention's cut).
    ack_at_once: bool,
    /// A checkpoint taken and its sync detached, not yet completed (a crash now is a crash
    /// between the phases): the job, the offset it covers, and whether retention ran
    /// since it was taken.
    pending: Option<(CrashCheckpoint, u64, bool)>,
    /// A detached checkpoint's sync failed: the broker is failed, the workload stops.
    failed: bool,
}

fn message(rng: &mut Rng, topic: &str, i: u64) -> NewMessage {
    let mut m = NewMessage::new(
        topic,
        alloc::format!("m{i}-{}", "x".repeat(rng.below(300) as usize)),
    );
    if rng.below(2) == 0 {
        m = m.with_tag(rng.pick(&["a", "b"]));
    }
    if rng.below(2) == 0 {
        m.keys = vec![alloc::format!("k{}", rng.below(20))];
    }
    if rng.below(3) == 0 {
        m.queue_id = Some(rng.below(4) as u32);
    }
    m
}

/// One random step of a workload.
fn step(sim: &mut Sim<CrashStorage>, rng: &mut Rng, w: &mut World, i: u64) {
    let topic = rng.pick(&TOPICS);
    match rng.below(20) {
        0..=4 => {
            let n = 1 + rng.below(3);
            let messages = (0..n).map(|j| message(rng, topic, i * 10 + j)).collect();
            sim.request(Request::Send { messages }).unwrap();
        }
        5 => {
            let at = sim.now + rng.below(5_000);
            let m = message(rng, topic, i).with_delay(Delay::At(at));
            sim.request(Request::Send { messages: vec![m] }).unwrap();
        }
        6 | 7 => {
            let group = rng.pick(&PRODUCERS);
            let req = Request::Prepare {
                group: group.into(),
                message: message(rng, topic, i),
                check_immunity_ms: None,
            };
            if let Reply::Sent(r) = sim.request(req).unwrap() {
                w.txns.extend(r[0].txn);
            }
        }
        8 if !w.txns.is_empty() => {
            let txn = w.txns.swap_remove(rng.below(w.txns.len() as u64) as usize);
            let resolution = if rng.below(3) == 0 {
                Resolution::Rollback
            } else {
                Resolution::Commit
            };
            sim.request(Request::EndTransaction {
                txn,
                resolution,
                group: None,
                from_check: false,
            })
            .unwrap();
        }
        9 => {
            let group = rng.pick(&PRODUCERS);
            match rng.below(3) {
                0 => sim.remove_checker(group),
                1 => sim.set_checker(group, |_| Resolution::Unknown),
                _ => sim.set_checker(group, |c| {
                    if c.txn.0 % 2 == 0 {
                        Resolution::Commit
                    } else {
                        Resolution::Rollback
                    }
                }),
            }
        }
        10 | 11 => {
            let group = rng.pick(&CONSUMERS);
            let req = Request::Receive {
                group: group.into(),
                topic: topic.into(),
                queue_id: None,
                max: 1 + rng.below(4) as u32,
                invisible_ms: 500 + rng.below(3_000),
                filter: TagFilter::All,
            };
            if let Reply::Received(r) = sim.request(req).unwrap() {
                for x in r {
                    if w.ack_at_once {
                        let group = group.into();
                        let handle = x.handle;
                        sim.request(Request::Ack { group, handle }).unwrap();
                    } else {
                        w.handles.push((String::from(group), x.handle));
                    }
                }
            }
        }
        12 if !w.handles.is_empty() => {
            let (group, handle) = w
                .handles
                .swap_remove(rng.below(w.handles.len() as u64) as usize);
            let req = if rng.below(3) == 0 {
                Request::ChangeInvisible {
                    group,
                    handle,
                    invisible_ms: 1_000,
                }
            } else {
                Request::Ack { group, handle }
            };
            sim.request(req).unwrap();
        }
        13 => {
            let req = Request::Pull {
                group: "puller".into(),
                topic: topic.into(),
                queue_id: rng.below(4) as u32,
                offset: None,
                max: 1 + rng.below(8) as u32,
                filter: TagFilter::All,
                auto_commit: true,
            };
            sim.request(req).unwrap();
        }
        14 => {
            // The FIFO group is deleted now and then (its receipts in flight with it) and
            // declared again: a replay and a checkpoint agree on what is gone.
            if rng.below(5) == 0 {
                let _ = sim.broker.delete_group("F").unwrap();
            }
            let _ = sim.broker.declare_group("F", true).unwrap();
            if rng.below(4) == 0 {
                let _ = sim.broker.create_topic("T2", 6).unwrap();
                // Its order settings now and then (mqadmin updateTopic -o, updateOrderConf).
                let _ = sim.broker.set_topic_order("T2", rng.below(2) == 0).unwrap();
                let conf = ["rocklet:6", "a:1;b:2"][rng.below(2) as usize];
                let _ = sim.broker.set_order_conf("T2", Some(conf)).unwrap();
            }
            // A topic only sent to is deleted (and made again by the next send): a state
            // record (a receive's, an ack's) names its topic by name, which after a delete
            // names the new topic of that name, live and on replay alike, but a timer that
            // fired live does not fire again — a divergence of its own, outside checkpoints.
            // (Not with retention: the record of where the log starts keeps no count of
            // deleted names, so a replay from it names the next queues apart differently.)
            if rng.below(3) == 0 && !w.ack_at_once {
                let _ = sim.broker.delete_topic("D").unwrap();
            } else {
                let m = message(rng, "D", i);
                sim.request(Request::Send { messages: vec![m] }).unwrap();
            }
        }
        15 | 16 => sim.advance(rng.below(2_500)).unwrap(),
        17 => sim.broker.sync().unwrap(),
        18 if rng.below(3) == 0 => {
            // Retention: up to the second newest segment.
            let bases = sim.broker.segment_bases().to_vec();
            if bases.len() > 2 {
                let before = bases[bases.len() - 2];
                let r = sim.broker.retain(sim.now, before).unwrap();
                for base in &r.retired {
                    sim.broker.storage_mut().remove(*base).unwrap();
                }
                if !r.retired.is_empty() {
                    w.retained_since = true;
                    w.retained = true;
                    if let Some(p) = &mut w.pending {
                        p.2 = true;
                    }
                }
                sim.drain().unwrap();
            }
        }
        _ => checkpoint_step(sim, rng, w),
    }
}

/// A checkpoint: on the core's thread alone (as at a clean stop), or in two phases as a
/// server takes one — the snapshot now, its sync detached, and only when that sync
/// completes (a later step: requests, time and retention run meanwhile, writing to the
/// log and the side files) the checkpoint written. A detached sync may fail: the broker is
/// failed (crash-only) and the checkpoint never written.
fn checkpoint_step(sim: &mut Sim<CrashStorage>, rng: &mut Rng, w: &mut World) {
    let pending = w.pending.is_some();
    if !pending || rng.below(6) == 0 {
        // With one pending, this one supersedes it: it writes nothing when it completes.
        if !pending && rng.below(3) != 0 {
            if let Some(draft) = sim.broker.begin_checkpoint().unwrap() {
                let covers = draft.covers();
                let job = sim.broker.storage().detach_checkpoint(draft);
                w.pending = Some((job, covers, false));
            }
            return;
        }
        if let Some(c) = sim.broker.checkpoint().unwrap() {
            w.checkpoints.push(c);
            w.retained_since = false;
        }
        return;
    }
    let (job, covers, retained) = w.pending.take().expect("pending");
    if rng.below(8) == 0 {
        sim.broker.storage_mut().fail_checkpoint(job);
        sim.broker.sync_failed("injected: fsync failed");
        w.failed = true;
        return;
    }
    let later = rng.below(2) == 0;
    if sim.broker.storage_mut().complete_checkpoint(job, later) {
        w.checkpoints.push(covers);
        w.retained_since = retained;
    }
    sim.broker.synced_to(covers);
}

/// Two digests are equal; else the first lines where they differ.
fn same<T: PartialEq + core::fmt::Debug>(a: &T, b: &T, what: &str) {
    if a == b {
        return;
    }
    let (a, b) = (alloc::format!("{a:#?}"), alloc::format!("{b:#?}"));
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let i = la
        .iter()
        .zip(&lb)
        .position(|(x, y)| x != y)
        .unwrap_or(la.len().min(lb.len()));
    let from = i.saturating_sub(12);
    panic!(
        "{what}: checkpoint open differs from full replay at line {i}:\n--- checkpoint\n{}\n--- full replay\n{}",
        la[from..(i + 24).min(la.len())].join("\n"),
        lb[from..(i + 24).min(lb.len())].join("\n")
    );
}

/// Opens `image` twice — as it is, and without its checkpoint (a full replay) — and checks
/// both give the same broker, now and after time runs on with every producer answering.
/// Returns the offset the first open started from.
fn same_both_ways(image: &MemStorage, now: Millis) -> Option<u64> {
    let mut full_image = image.clone();
    full_image.remove_checkpoint().unwrap();
    let mut a = Sim::with_storage(cfg(), CrashStorage::from_mem(image.clone()), now).unwrap();
    let mut b = Sim::with_storage(cfg(), CrashStorage::from_mem(full_image), now).unwrap();
    let from = a.broker.recovery_report().checkpoint;
    assert_eq!(a.broker.recovery_report().checkpoint_unused, None);
    assert_eq!(b.broker.recovery_report().checkpoint, None);
    let digest = |sim: &mut Sim<CrashStorage>| sim.broker.digest();
    // What is due at the time of the open first (a receive does that too): a delivery
    // whose invisible time ran out before the crash is ready again in the checkpoint, and
    // again once its timer fires on a full replay.
    a.advance(0).unwrap();
    b.advance(0).unwrap();
    same(&digest(&mut a), &digest(&mut b), "right after the open");
    assert_eq!(
        a.broker.recovery_report().cuts,
        b.broker.recovery_report().cuts
    );
    // The same follow-up on both: what each still owes comes out the same.
    for sim in [&mut a, &mut b] {
        for g in PRODUCERS {
            sim.set_checker(g, |_| Resolution::Commit);
        }
        sim.advance(20_000).unwrap();
        for topic in TOPICS {
            for group in CONSUMERS {
                sim.request(Request::Receive {
                    group: group.into(),
                    topic: topic.into(),
                    queue_id: None,
                    max: 32,
                    invisible_ms: 60_000,
                    filter: TagFilter::All,
                })
                .unwrap();
            }
        }
        sim.broker.sync().unwrap();
    }
    assert_eq!(a.checks, b.checks, "checks after the open");
    assert_eq!(a.events, b.events, "events after the open");
    same(&digest(&mut a), &digest(&mut b), "after the follow-up");
    // The side files too, byte for byte, once a clean stop wrote every tail: what the
    // checkpoint did not cover was cut from them, nothing stale stays after their ends.
    a.broker.close().unwrap();
    b.broker.close().unwrap();
    let side = |sim: &Sim<CrashStorage>| sim.broker.storage().live().side_files().clone();
    let (sa, sb) = (side(&a), side(&b));
    assert_eq!(
        sa.keys().collect::<Vec<_>>(),
        sb.keys().collect::<Vec<_>>(),
        "side files"
    );
    for (name, bytes) in &sa {
        assert!(bytes == &sb[name], "side file {name} differs");
    }
    from
}

fn run(seed: u64, steps: u64, power_cut: bool, ack_at_once: bool) {
    let mut rng = Rng(seed | 1);
    let mut sim = Sim::with_storage(cfg(), CrashStorage::new(), 1_000).unwrap();
    let mut w = World {
        ack_at_once,
        ..World::default()
    };
    for i in 0..steps {
        step(&mut sim, &mut rng, &mut w, i);
        if w.failed {
            break;
        }
    }
    let durable = sim.broker.log_synced();
    let image = if power_cut {
        sim.broker.storage().crash()
    } else {
        sim.broker.storage().live()
    };
    if !w.retained {
        let from = same_both_ways(&image, sim.now);
        // The newest checkpoint taken is the one used (it is durable when taken).
        assert_eq!(from, w.checkpoints.last().copied());
        assert!(from.is_none_or(|c| c <= durable));
        return;
    }
    let mut a = Sim::with_storage(cfg(), CrashStorage::from_mem(image), sim.now).unwrap();
    let r = a.broker.recovery_report().clone();
    if w.retained_since && !w.checkpoints.is_empty() {
        // Retention ran after the newest checkpoint: it is not used, and the open says why.
        assert_eq!(r.checkpoint, None);
        assert!(r.checkpoint_unused.unwrap().contains("LOG_START"));
        return;
    }
    assert_eq!(r.checkpoint, w.checkpoints.last().copied());
    assert!(r.checkpoint.is_none_or(|c| c <= durable));
    if power_cut || r.checkpoint.is_none() || w.failed {
        return;
    }
    // Taken after retention, it gives the broker the run had. (A full replay from where
    // retention left the log start is no reference here: it rebuilds neither the recent
    // resolutions, nor the index of retired records, nor the internal queues' positions,
    // nor which retained records were made visible by a retired op. The user queues it
    // numbers as the run did: after_retention_a_full_replay_numbers_the_queues_as_the_run.)
    for g in PRODUCERS {
        sim.remove_checker(g);
    }
    sim.advance(0).unwrap();
    a.advance(0).unwrap();
    sim.broker.sync().unwrap();
    a.broker.sync().unwrap();
    let (mut da, mut dl) = (a.broker.digest(), sim.broker.digest());
    // A run counts its requests too; an open counts what it replays.
    da.forget_stats();
    dl.forget_stats();
    same(&da, &dl, "checkpoint after retention, against the run");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn an_open_from_a_checkpoint_gives_the_broker_a_full_replay_gives(
        seed in any::<u64>(),
        steps in 20u64..400,
        power_cut in any::<bool>(),
    ) {
        run(seed, steps, power_cut, false);
    }

    /// The same with retention running: consumers ack at once (a delivery in flight holds
    /// the cut), and the log is longer.
    #[test]
    fn with_retention_too(
        seed in any::<u64>(),
        steps in 300u64..1200,
        power_cut in any::<bool>(),
    ) {
        run(seed, steps, power_cut, true);
    }
}

/// Sends `n` messages of about 400 bytes to T0.
fn fill<S: Storage>(sim: &mut Sim<S>, n: usize) {
    for i in 0..n {
        let m = NewMessage::new("T0", alloc::format!("{i}-{}", "y".repeat(400)));
        sim.request(Request::Send { messages: vec![m] }).unwrap();
    }
}

#[test]
fn an_open_from_a_checkpoint_replays_only_the_log_after_it() {
    let mut sim = Sim::with_storage(cfg(), CrashStorage::new(), 0).unwrap();
    fill(&mut sim, 300);
    let c = sim.broker.checkpoint().unwrap().unwrap();
    assert_eq!(c, sim.broker.log_end());
    fill(&mut sim, 7);
    sim.broker.sync().unwrap();
    let image = sim.broker.storage().crash();
    let b = Broker::open(cfg(), CrashStorage::from_mem(image.clone()), 0).unwrap();
    let r = b.recovery_report();
    assert_eq!((r.checkpoint, r.records), (Some(c), 7), "{r:?}");
    assert!(r.bytes_scanned < 16 << 10, "{r:?}");
    // A full replay reads all of it.
    let mut full = image;
    full.remove_checkpoint().unwrap();
    let b = Broker::open(cfg(), CrashStorage::from_mem(full), 0).unwrap();
    assert_eq!(b.recovery_report().records, 307);
}

#[test]
fn a_torn_tail_after_the_checkpoint_is_cut_as_ever() {
    let mut sim = Sim::with_storage(cfg(), CrashStorage::new(), 0).unwrap();
    fill(&mut sim, 50);
    let c = sim.broker.checkpoint().unwrap().unwrap();
    fill(&mut sim, 3);
    sim.broker.sync().unwrap();
    let end = sim.broker.log_end();
    // Half a record at the end.
    let mut image = sim.broker.storage().crash();
    let base = *image.segments().unwrap().last().unwrap();
    let mut seg = image.segment(base).unwrap().to_vec();
    seg.extend_from_slice(&[0, 0, 1, 200, 0xAA, 0xBB]);
    image.set_segment(base, seg);
    let b = Broker::open(cfg(), CrashStorage::from_mem(image), 0).unwrap();
    let r = b.recovery_report();
    assert_eq!(r.checkpoint, Some(c));
    assert_eq!((r.cuts.len(), b.log_end()), (1, end), "{r:?}");
}

#[test]
fn a_missing_segment_below_the_checkpoint_is_refused_as_without_one() {
    let mut sim = Sim::with_storage(cfg(), CrashStorage::new(), 0).unwrap();
    fill(&mut sim, 500);
    sim.broker.checkpoint().unwrap().unwrap();
    fill(&mut sim, 3);
    sim.broker.sync().unwrap();
    let mut image = sim.broker.storage().crash();
    let segs = image.segments().unwrap();
    assert!(segs.len() > 3);
    image.remove(segs[1]).unwrap();
    let e = Broker::open(cfg(), CrashStorage::from_mem(image.clone()), 0).unwrap_err();
    assert!(
        alloc::format!("{e}").contains(&alloc::format!("{:020}", segs[1])),
        "{e}"
    );
    // A repair replays everything (and fills the gap).
    let b = Broker::open_repairing(cfg(), CrashStorage::from_mem(image), 0).unwrap();
    let r = b.recovery_report();
    assert_eq!(r.checkpoint, None);
    assert_eq!(r.quarantined.len(), 1);
}

#[test]
fn a_damaged_or_stale_checkpoint_is_named_and_the_whole_log_replayed() {
    let mut sim = Sim::with_storage(cfg(), CrashStorage::new(), 0).unwrap();
    fill(&mut sim, 100);
    sim.broker.checkpoint().unwrap().unwrap();
    fill(&mut sim, 5);
    sim.broker.sync().unwrap();
    let image = sim.broker.storage().crash();
    let good = image.clone().checkpoint().unwrap().unwrap();
    let open_with = |ckpt: Vec<u8>| {
        let mut m = image.clone();
        m.record_checkpoint(&ckpt).unwrap();
        let b = Broker::open(cfg(), CrashStorage::from_mem(m), 0).unwrap();
        assert_eq!(b.recovery_report().checkpoint, None);
        assert_eq!(b.recovery_report().records, 105);
        b.recovery_report().checkpoint_unused.clone().unwrap()
    };
    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert!(open_with(flipped).contains("CRC"));
    assert!(open_with(good[..good.len() - 3].to_vec()).contains("torn"));
    let mut v9 = good.clone();
    v9[8] = 9;
    assert!(open_with(v9).contains("version 9"));
    assert!(open_with(b"nonsense".to_vec()).contains("not a checkpoint"));
    // A consume-queue file shorter than the checkpoint says.
    let mut m = image.clone();
    let name = m
        .side_files()
        .keys()
        .find(|k| k.starts_with("consumequeue/T0/"))
        .cloned()
        .unwrap();
    m.set_side_file(&name, Some(vec![0; 20]));
    let b = Broker::open(cfg(), CrashStorage::from_mem(m), 0).unwrap();
    let why = b.recovery_report().checkpoint_unused.clone().unwrap();
    assert!(why.contains(&name), "{why}");
    assert_eq!(
        b.topic_info("T0")
            .unwrap()
            .queues
            .iter()
            .map(|q| q.1)
            .sum::<u64>(),
        105
    );
}

#[test]
fn a_replica_cutting_its_log_below_a_checkpoint_drops_it() {
    let mut sim = Sim::with_storage(cfg(), CrashStorage::new(), 0).unwrap();
    fill(&mut sim, 40);
    let cut = sim.broker.log_end();
    fill(&mut sim, 40);
    let c = sim.broker.checkpoint().unwrap().unwrap();
    let mut image = sim.broker.storage().crash();
    Broker::<MemStorage>::truncate_storage(&mut image, cut).unwrap();
    assert!(
        image.checkpoint().unwrap().is_none(),
        "checkpoint at {c} above the cut {cut}"
    );
    let b = Broker::open(cfg(), CrashStorage::from_mem(image), 0).unwrap();
    assert_eq!((b.log_end(), b.recovery_report().checkpoint), (cut, None));
    // One at or below the cut stays.
    let mut sim = Sim::with_storage(cfg(), CrashStorage::new(), 0).unwrap();
    fill(&mut sim, 40);
    let c = sim.broker.checkpoint().unwrap().unwrap();
    fill(&mut sim, 40);
    sim.broker.sync().unwrap();
    let mut image = sim.broker.storage().crash();
    Broker::<MemStorage>::truncate_storage(&mut image, c + 1).unwrap_or_default();
    let b = Broker::open(cfg(), CrashStorage::from_mem(image), 0);
    // Cut inside a record: the torn tail goes; the checkpoint is used.
    let b = b.unwrap();
    assert_eq!(b.recovery_report().checkpoint, Some(c));
}

/// On files: a kill -9 (no close) after a checkpoint; the start reads `CHECKPOINT` and the
/// log after it, and the file is replaced whole by the next one.
#[cfg(feature = "std")]
#[test]
fn on_files_a_start_after_kill_9_reads_the_checkpoint_and_the_log_after_it() {
    let dir = crate::tests::temp_dir("checkpoint-files");
    let cfg = cfg();
    let mut b = Broker::open(cfg.clone(), FileStorage::open(&dir).unwrap(), 0).unwrap();
    let send = |b: &mut Broker<FileStorage>, i: usize| {
        let m = NewMessage::new("T0", alloc::format!("{i}-{}", "z".repeat(300)));
        b.execute(1, Request::Send { messages: vec![m] }).unwrap();
    };
    for i in 0..200 {
        send(&mut b, i);
    }
    let first = b.checkpoint().unwrap().unwrap();
    for i in 200..300 {
        send(&mut b, i);
    }
    let c = b.checkpoint().unwrap().unwrap();
    assert!(c > first);
    for i in 300..305 {
        send(&mut b, i);
    }
    b.sync().unwrap();
    drop(b);
    assert!(dir.join(CHECKPOINT_FILE).exists());
    assert!(!dir.join("CHECKPOINT.tmp").exists());
    let b = Broker::open(cfg.clone(), FileStorage::open(&dir).unwrap(), 0).unwrap();
    let r = b.recovery_report();
    assert_eq!((r.checkpoint, r.records), (Some(c), 5), "{r:?}");
    let stored: u64 = b.topic_info("T0").unwrap().queues.iter().map(|q| q.1).sum();
    assert_eq!(stored, 305);
    let _ = std::fs::remove_dir_all(&dir);
}

/// After retention, a full replay (no checkpoint) numbers the user queues as the run did.
/// Failed before `queue_starts` looked past a moved message carried by an earlier run: the
/// scan stopped at it, the sent messages behind it stayed in the queue with their records
/// retired, and a reopen numbered the queue's later messages from lower offsets.
#[test]
fn after_retention_a_full_replay_numbers_the_queues_as_the_run() {
    for (seed, steps) in [
        (3_879_567_651_186_208, 524),
        (7, 900),
        (11, 1200),
        (23, 700),
    ] {
        let mut rng = Rng(seed | 1);
        let mut sim = Sim::with_storage(cfg(), CrashStorage::new(), 1_000).unwrap();
        let mut w = World {
            ack_at_once: true,
            ..World::default()
        };
        for i in 0..steps {
            step(&mut sim, &mut rng, &mut w, i);
            if w.failed {
                break;
            }
        }
        if !w.failed {
            sim.broker.sync().unwrap();
        }
        let mut image = sim.broker.storage().live();
        image.remove_checkpoint().unwrap();
        let mut b = Sim::with_storage(cfg(), CrashStorage::from_mem(image), sim.now).unwrap();
        let (dl, db) = (sim.broker.digest(), b.broker.digest());
        assert_eq!(
            dl.queues_of("T"),
            db.queues_of("T"),
            "seed {seed}, {steps} steps (retention ran: {})",
            w.retained
        );
    }
}

/// On files, in two phases: nothing is written when the draft is taken or its sync
/// detached; the detached job syncs and then writes `CHECKPOINT`, which a start uses. A
/// checkpoint recorded or removed by the storage's owner after the detach supersedes it: the
/// job then writes nothing (a clean stop's checkpoint, a replica cutting its log).
#[cfg(feature = "std")]
#[test]
fn on_files_a_detached_checkpoint_is_written_after_its_sync_unless_superseded() {
    let dir = crate::tests::temp_dir("checkpoint-detached");
    let cfg = cfg();
    let mut b = Broker::open(cfg.clone(), FileStorage::open(&dir).unwrap(), 0).unwrap();
    let send = |b: &mut Broker<FileStorage>, i: usize| {
        let m = NewMessage::new("T0", alloc::format!("{i}-{}", "z".repeat(300)));
        b.execute(1, Request::Send { messages: vec![m] }).unwrap();
    };
    for i in 0..100 {
        send(&mut b, i);
    }
    let draft = b.begin_checkpoint().unwrap().unwrap();
    let covers = draft.covers();
    let job = b.storage_mut().detach_checkpoint(draft).unwrap();
    assert!(job.has_checkpoint());
    assert!(
        !dir.join(CHECKPOINT_FILE).exists(),
        "written before its sync"
    );
    // The core goes on meanwhile.
    for i in 100..110 {
        send(&mut b, i);
    }
    assert!(matches!(job.run().unwrap(), CheckpointWrite::Written));
    b.storage_mut().detached_done(&job, true);
    b.synced_to(covers);
    assert!(b.log_synced() >= covers);
    let written = std::fs::read(dir.join(CHECKPOINT_FILE)).unwrap();
    assert_eq!(crate::broker::checkpoint_covers(&written), Some(covers));

    // Superseded by a checkpoint recorded on the owner's thread, and by a removal.
    let stale = b.begin_checkpoint().unwrap().unwrap();
    let job = b.storage_mut().detach_checkpoint(stale).unwrap();
    let newer = b.checkpoint().unwrap().unwrap();
    assert!(matches!(job.run().unwrap(), CheckpointWrite::Superseded));
    let on_disk = std::fs::read(dir.join(CHECKPOINT_FILE)).unwrap();
    assert_eq!(crate::broker::checkpoint_covers(&on_disk), Some(newer));
    send(&mut b, 110);
    let stale = b.begin_checkpoint().unwrap().unwrap();
    let job = b.storage_mut().detach_checkpoint(stale).unwrap();
    b.storage_mut().remove_checkpoint().unwrap();
    assert!(matches!(job.run().unwrap(), CheckpointWrite::Superseded));
    assert!(!dir.join(CHECKPOINT_FILE).exists());
    drop(b);

    // A start reads a detached one as any other.
    let mut b = Broker::open(cfg.clone(), FileStorage::open(&dir).unwrap(), 0).unwrap();
    for i in 111..120 {
        send(&mut b, i);
    }
    let draft = b.begin_checkpoint().unwrap().unwrap();
    let covers = draft.covers();
    let job = b.storage_mut().detach_checkpoint(draft).unwrap();
    send(&mut b, 120);
    assert!(matches!(job.run().unwrap(), CheckpointWrite::Written));
    b.storage_mut().detached_done(&job, true);
    b.sync().unwrap();
    drop(b);
    let b = Broker::open(cfg, FileStorage::open(&dir).unwrap(), 0).unwrap();
    let r = b.recovery_report();
    assert_eq!((r.checkpoint, r.records), (Some(covers), 1), "{r:?}");
    let stored: u64 = b.topic_info("T0").unwrap().queues.iter().map(|q| q.1).sum();
    assert_eq!(stored, 121);
    let _ = std::fs::remove_dir_all(&dir);
}
