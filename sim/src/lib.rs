//! A deterministic simulation of a whole cluster-mode broker group (issue #32 item 2), in the
//! manner of FoundationDB's simulation and TigerBeetle's VOPR: one process, one seed, and
//! everything follows from it.
//!
//! - **Three nodes**, each a `rocklet_core::Broker` over `CrashStorage` (a durable image a
//!   power loss leaves, a live one a process kill leaves) and the cluster's decisions —
//!   `broker/src/cluster/machine.rs`, the very file the real node runs, compiled in here as
//!   [`machine`] — driven the way `cluster/node.rs` and `cluster/replication.rs` drive it:
//!   campaign, lease keep-alive and deadline, the SyncStateSet written to etcd before a
//!   release relies on it, replication with HELLO / WELCOME (divergent tails cut) / CHUNK /
//!   ACK, releases (`replicated_to`) checked against the lease right before.
//! - **etcd** ([`Etcd`]): a linearizable KV with revisions, leases expiring on its own clock
//!   and compare-and-swap transactions. A call that is lost after etcd applied it is
//!   reported as failed to the node (outcome unknown), as a timeout is.
//! - **Clients**: a producer (plain sends, delayed sends, transactions that commit, roll back
//!   or wait for the check) routed by the master key, its checker, and a consumer pulling
//!   every queue from the master.
//! - **Faults**, drawn from the seed during the fault phase: process kills and power losses
//!   (then restarts), paused processes (sockets open), replication links stalled (sockets
//!   open, nothing passes) or cut, nodes cut from etcd, etcd down, fsync failures (the node
//!   stops), per-node clock drift within [`DRIFT_PPM`] and wall-clock skew within
//!   [`SKEW_MS`]. A quiet phase follows: everything healed, every node up.
//!
//! After every event that could break one, the invariants ([`Violation`]) are checked; the
//! first broken one ends the run with its seed and the trace of events that led there
//! ([`Outcome::trace`]). Everything is ordered by (time, sequence number) and drawn from one
//! [`Rng`]: the same seed replays exactly.
//!
//! Left out (stated in broker/README.md): handoff, forwarding by replicas (clients always
//! send to the node the master key names, possibly stale), torn writes inside a record
//! (the core's own crash tests cover them), receives (pop) — the consumer pulls.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use rocklet_core::testing::CrashStorage;
use rocklet_core::{
    common_prefix, Broker, CheckRequest, Config, Delay, FlushMode, NewMessage, Output, Reply,
    Request, Resolution, TxnId,
};

#[path = "../../broker/src/cluster/machine.rs"]
pub mod machine;

use machine::{Action, Master, Millis, Params, ReplicaState, ReplicaTable, Welcomed};

/// A step of simulated time.
pub const STEP_MS: Millis = 10;
/// The lease TTL (the broker's default, 2 s).
pub const TTL_MS: Millis = 2_000;
/// `replica_max_lag_ms` (the broker's default).
pub const MAX_LAG_MS: Millis = 2_000;
/// `min_in_sync_replicas` (the broker's default).
pub const MIN_IN_SYNC: u32 = 2;
/// How often a replica looks at etcd, and a master at its replicas at least.
pub const POLL_MS: Millis = 100;
/// How long an etcd call may take before the node gives up on it (`etcd.rs` CALL_TIMEOUT).
pub const CALL_TIMEOUT_MS: Millis = 1_000;
/// Largest rate error of a node's monotonic clock, parts per million (2 %): far inside the
/// quarter TTL the fencing margin leaves.
pub const DRIFT_PPM: i64 = 20_000;
/// Largest offset of a node's wall clock (what its core's timers run on) from true time.
pub const SKEW_MS: Millis = 100;
/// The async loss bound broker/README.md states: `replica_max_lag_ms` + `lease_ttl_s`.
pub const ASYNC_LOSS_BOUND_MS: Millis = MAX_LAG_MS + TTL_MS;
/// While etcd and a majority are healthy (two nodes up, running, reaching etcd and each other,
/// one of them in the SyncStateSet), writes are acknowledged at least this often: a lease
/// to run out (2 s), an election, a stalled member to leave the set (2 s), and room.
pub const LIVENESS_MS: Millis = 6_000;
/// The pairs of nodes (a majority of three).
const PAIRS: [(usize, usize); 3] = [(0, 1), (0, 2), (1, 2)];
/// The producer stops this long before the end of a run (delays, checks, the consumer).
const DRAIN_MS: Millis = 6_000;
/// Bytes of log a replication chunk carries, about.
const CHUNK_BYTES: usize = 16 << 10;
/// Bytes sent to a replica and not acknowledged, at most.
const WINDOW_BYTES: u64 = 64 << 10;
const TOPIC: &str = "t";
const QUEUES: u32 = 4;
const PRODUCER_GROUP: &str = "pg";
const CONSUMER_GROUP: &str = "cg";

/// splitmix64: small, fast, and the same on every platform.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    #[must_use]
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// In `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.next_u64() % 1000 < per_mille
    }
}

/// What a run simulates.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Sync replication (else async).
    pub sync: bool,
    /// Length of the fault phase, ms.
    pub fault_ms: Millis,
    /// Length of the quiet phase that follows (everything healed), ms.
    pub quiet_ms: Millis,
    /// Faults started per 10 s, on average, during the fault phase, at most: each seed draws
    /// its own rate up to this (calm seeds let one long fault play out alone; busy ones pile
    /// faults up).
    pub faults_per_10s: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sync: true,
            fault_ms: 20_000,
            quiet_ms: 20_000,
            faults_per_10s: 20,
        }
    }
}

/// An invariant that did not hold: what, and the guarantee it backs (broker/README.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation(pub String);

/// How a run ended.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub violation: Option<Violation>,
    /// Every event, in order (kept whole only when asked for; else the last 400).
    pub trace: Vec<String>,
    pub stats: Stats,
}

/// Counts of one run, to see that a sweep exercised something.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub acked: u64,
    pub delivered: u64,
    pub elections: u64,
    pub crashes: u64,
    pub fenced: u64,
    pub truncations: u64,
    pub lost_async: u64,
    pub faults: u64,
}

mod clients;
mod etcd;
mod net;
mod node;

use clients::*;
use etcd::*;
use net::*;
use node::*;

/// One simulated group.
pub struct World {
    pub(crate) seed: u64,
    pub(crate) opts: Options,
    pub(crate) rng: Rng,
    pub(crate) now: Millis,
    pub(crate) seq: u64,
    pub(crate) etcd: Etcd,
    pub(crate) nodes: Vec<Node>,
    /// (delivery time, sequence) → message.
    pub(crate) queue: BTreeMap<(Millis, u64), (To, Msg)>,
    pub(crate) calls: BTreeMap<(Millis, u64), EtcdCall>,
    pub(crate) conns: BTreeMap<u64, Conn>,
    pub(crate) next_conn: u64,
    pub(crate) links: BTreeMap<(usize, usize), LinkFault>,
    pub(crate) etcd_cut: Vec<Millis>,
    pub(crate) ops: BTreeMap<u64, OpKind>,
    pub(crate) next_op: u64,
    pub(crate) next_key: u64,
    /// Consumer offsets per queue (the consumer's own: a failover under async replication
    /// may leave them past what the new master holds, so the consumer reads every queue again
    /// from 0 before the end).
    pub(crate) offsets: Vec<u64>,
    /// The master key as the clients last read it (every 300 ms).
    pub(crate) route: Option<usize>,
    pub(crate) ledger: Ledger,
    /// When a fault last killed a node (a kill, a power loss, a failed fsync).
    pub(crate) last_kill: Millis,
    pub(crate) stats: Stats,
    pub(crate) trace: Vec<String>,
    pub(crate) keep_trace: bool,
    pub(crate) cfg: Config,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("seed", &self.seed)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

/// Runs one seed.
#[must_use]
pub fn run(seed: u64, opts: Options, keep_trace: bool) -> Outcome {
    let mut w = World::new(seed, opts, keep_trace);
    let violation = w.run().err();
    Outcome {
        seed,
        violation,
        trace: w.trace,
        stats: w.stats,
    }
}

pub(crate) type Res = Result<(), Violation>;

pub(crate) fn fail(msg: impl Into<String>) -> Res {
    Err(Violation(msg.into()))
}

/// The first record of `bytes` (a replication chunk read at its offset).
pub(crate) fn first_record(bytes: &[u8]) -> Vec<u8> {
    let len = bytes
        .get(..4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
    bytes[..len.min(bytes.len())].to_vec()
}

impl World {
    pub(crate) fn new(seed: u64, opts: Options, keep_trace: bool) -> Self {
        let mut rng = Rng::new(seed);
        let cfg = Config {
            segment_size: 64 << 10,
            max_message_size: 4 << 10,
            max_batch_size: 4 << 10,
            flush: FlushMode::Sync,
            replicated_acks: opts.sync,
            transaction_timeout_ms: 1_000,
            transaction_check_interval_ms: 1_000,
            index_keys: false,
            default_queues: QUEUES,
            ..Config::default()
        };
        let mut nodes = Vec::new();
        for id in 1..=3u32 {
            let drift_ppm = rng.range(0, 2 * DRIFT_PPM as u64) as i64 - DRIFT_PPM;
            let skew = rng.range(0, 2 * SKEW_MS) as i64 - SKEW_MS as i64;
            nodes.push(Node {
                id,
                core: None,
                disk: Some(CrashStorage::new()),
                role: Role::Down { until: 0 },
                incarnation: 0,
                started: 0,
                drift_ppm,
                skew,
                paused_until: 0,
                busy: false,
                next_look: 0,
                following: None,
                reconnect_at: 0,
                pending: BTreeMap::new(),
                fail_next_sync: false,
            });
        }
        World {
            seed,
            opts,
            rng,
            now: 0,
            seq: 0,
            etcd: Etcd::default(),
            nodes,
            queue: BTreeMap::new(),
            calls: BTreeMap::new(),
            conns: BTreeMap::new(),
            next_conn: 0,
            links: BTreeMap::new(),
            etcd_cut: vec![0; 3],
            ops: BTreeMap::new(),
            next_op: 0,
            next_key: 0,
            route: None,
            offsets: vec![0; QUEUES as usize],
            ledger: Ledger::default(),
            last_kill: 0,
            stats: Stats::default(),
            trace: Vec::new(),
            keep_trace,
            cfg,
        }
    }

    pub(crate) fn log(&mut self, what: impl FnOnce() -> String) {
        let line = format!("{:>6} {}", self.now, what());
        self.trace.push(line);
        if !self.keep_trace && self.trace.len() > 800 {
            self.trace.drain(..400);
        }
    }

    pub(crate) fn delay(&mut self) -> Millis {
        // Mostly 1–5 ms, now and then up to 60 ms (reordering across connections and calls).
        if self.rng.chance(50) {
            self.rng.range(5, 60)
        } else {
            self.rng.range(1, 5)
        }
    }

    pub(crate) fn send(&mut self, to: To, msg: Msg, at: Millis) {
        self.seq += 1;
        self.queue.insert((at, self.seq), (to, msg));
    }

    pub(crate) fn link(&self, a: usize, b: usize) -> LinkFault {
        self.links
            .get(&(a.min(b), a.max(b)))
            .copied()
            .unwrap_or_default()
    }

    /// A replication message on `conn`, towards the master (`up`) or the replica.
    pub(crate) fn send_conn(&mut self, conn: u64, up: bool, msg: Msg) {
        let d = self.delay();
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let (a, b) = (c.master, c.replica);
        let f = self.link(a, b);
        if f.cut_until > self.now {
            self.close_conn(conn, "link cut");
            return;
        }
        let dir = usize::from(!up);
        let at = (self.now + d).max(f.stalled_until).max(c.last[dir]);
        let to = if up { a } else { b };
        if let Some(c) = self.conns.get_mut(&conn) {
            c.last[dir] = at;
        }
        self.send(To::Node(to), msg, at);
    }

    /// Ends a connection: both ends hear of it (a reset).
    pub(crate) fn close_conn(&mut self, conn: u64, why: &str) {
        if let Some(c) = self.conns.remove(&conn) {
            self.log(|| {
                format!(
                    "conn {conn} ({}→{}) closed: {why}",
                    c.replica + 1,
                    c.master + 1
                )
            });
            let d = self.delay();
            self.send(To::Node(c.master), Msg::Close { conn }, self.now + d);
            self.send(To::Node(c.replica), Msg::Close { conn }, self.now + d);
        }
    }

    pub(crate) fn call(&mut self, n: usize, purpose: Purpose, call: Call) {
        let d = self.delay();
        let node = &self.nodes[n];
        self.seq += 1;
        self.calls.insert(
            (self.now + d, self.seq),
            EtcdCall {
                node: n,
                incarnation: node.incarnation,
                purpose,
                call,
                timeout_at: self.now + CALL_TIMEOUT_MS,
            },
        );
    }

    pub(crate) fn etcd_reachable(&self, n: usize) -> bool {
        self.etcd_cut[n] <= self.now && self.etcd.down_until <= self.now
    }

    // -----------------------------------------------------------------------------------
    // the run

    fn run(&mut self) -> Res {
        let end_faults = self.opts.fault_ms;
        let end = end_faults + self.opts.quiet_ms;
        let mut next_op = 0;
        let mut next_pull = 0;
        let mut next_route = 0;
        let mut healthy_since = [None; 3];
        let rate = self.rng.range(1, self.opts.faults_per_10s.max(1));
        while self.now < end {
            // Faults, then the quiet phase heals everything.
            if self.now < end_faults {
                if self.rng.chance(rate * STEP_MS / 10) {
                    self.fault()?;
                }
            } else if self.now == end_faults {
                self.heal();
            }
            self.etcd.expire(self.now);
            self.deliver_calls()?;
            self.deliver_msgs()?;
            for n in 0..3 {
                self.step_node(n)?;
            }
            if self.now >= next_route {
                next_route = self.now + 300;
                self.route = self.etcd.snapshot().master.map(|m| m.0 as usize - 1);
            }
            // The producer stops DRAIN_MS before the end: what it sent last is delivered.
            if self.now >= next_op && self.now + DRAIN_MS < end {
                next_op = self.now + self.rng.range(20, 80);
                self.client_op();
            }
            if self.now == end - DRAIN_MS / 2 {
                self.offsets = vec![0; QUEUES as usize];
            }
            if self.now >= next_pull {
                next_pull = self.now + 200;
                for q in 0..QUEUES {
                    self.issue(OpKind::Pull { queue: q });
                }
            }
            // Liveness: while etcd and the same two nodes stay healthy, and no node is killed
            // (the third may stall, pause, or lose etcd or its links), writes are acknowledged
            // at least every LIVENESS_MS (counted from when that began).
            for (i, pair) in PAIRS.into_iter().enumerate() {
                if !self.healthy(pair) {
                    healthy_since[i] = None;
                    continue;
                }
                let t0 = *healthy_since[i].get_or_insert(self.now);
                let from = self.ledger.last_release.max(t0).max(self.last_kill);
                if self.now + DRAIN_MS < end && self.now > from + LIVENESS_MS {
                    return fail(format!(
                        "liveness: etcd and nodes {} and {} (one of them in the SyncStateSet, their link up) healthy since {t0}, no node killed since {}, yet no write acknowledged since {from} ({} ms, bound {LIVENESS_MS} ms)",
                        pair.0 + 1,
                        pair.1 + 1,
                        self.last_kill,
                        self.now - from
                    ));
                }
            }
            self.now += STEP_MS;
        }
        self.final_checks()
    }

    /// Whether both nodes are up, running and reaching etcd and each other, one of them in
    /// the SyncStateSet (only a member may be elected), with etcd up.
    fn healthy(&self, (a, b): (usize, usize)) -> bool {
        if self.etcd.down_until > self.now {
            return false;
        }
        let set = self.etcd.snapshot().set.0;
        let ok = |n: usize| {
            !matches!(self.nodes[n].role, Role::Down { .. })
                && self.nodes[n].paused_until <= self.now
                && self.etcd_cut[n] <= self.now
        };
        let l = self.link(a, b);
        let member = set
            .as_ref()
            .is_none_or(|s| s.contains(&(a as u32 + 1)) || s.contains(&(b as u32 + 1)));
        ok(a) && ok(b) && l.cut_until <= self.now && l.stalled_until <= self.now && member
    }

    fn heal(&mut self) {
        self.log(|| "== quiet phase: every fault healed, every node up".into());
        self.links.clear();
        // What stalled links held passes now, in the order it was sent (the same time, and
        // sequence numbers in the old order).
        let held: Vec<(Millis, u64)> = self
            .queue
            .range((self.now + 100, 0)..)
            .map(|(&k, _)| k)
            .collect();
        for k in held {
            if let Some((to, msg)) = self.queue.remove(&k) {
                self.send(to, msg, self.now + 1);
            }
        }
        for c in self.conns.values_mut() {
            c.last = [self.now + 1; 2];
        }
        self.etcd_cut = vec![0; 3];
        self.etcd.down_until = 0;
        for n in 0..3 {
            self.nodes[n].paused_until = 0;
            self.nodes[n].fail_next_sync = false;
            if let Role::Down { until } = &mut self.nodes[n].role {
                *until = self.now;
            }
        }
    }

    fn fault(&mut self) -> Res {
        self.stats.faults += 1;
        let n = self.rng.range(0, 2) as usize;
        let id = n + 1;
        match self.rng.range(0, 7) {
            0 => {
                let power = self.rng.chance(500);
                let back = self.now + self.rng.range(300, 5_000);
                self.last_kill = self.now;
                self.crash(n, if power { "power loss" } else { "killed" }, power, back);
            }
            1 => {
                let ms = self.rng.range(200, 10_000);
                self.nodes[n].paused_until = self.now.max(self.nodes[n].paused_until) + ms;
                self.log(|| format!("fault: node {id} paused {ms} ms"));
            }
            2 | 3 => {
                let m = (n + 1 + self.rng.range(0, 1) as usize) % 3;
                let ms = self.rng.range(500, 12_000);
                let key = (n.min(m), n.max(m));
                let f = self.links.entry(key).or_default();
                if self.rng.chance(500) {
                    f.stalled_until = self.now + ms;
                    self.log(|| format!("fault: link {}–{} stalled {ms} ms", n + 1, m + 1));
                } else {
                    f.cut_until = self.now + ms;
                    self.log(|| format!("fault: link {}–{} cut {ms} ms", n + 1, m + 1));
                    let gone: Vec<u64> = self
                        .conns
                        .iter()
                        .filter(|(_, c)| (c.master.min(c.replica), c.master.max(c.replica)) == key)
                        .map(|(&k, _)| k)
                        .collect();
                    for c in gone {
                        self.close_conn(c, "link cut");
                    }
                }
            }
            4 => {
                let ms = self.rng.range(500, 6_000);
                self.etcd_cut[n] = self.now + ms;
                self.log(|| format!("fault: node {id} cut from etcd {ms} ms"));
            }
            5 => {
                if self.rng.chance(300) {
                    let ms = self.rng.range(300, 3_000);
                    self.etcd.down_until = self.now + ms;
                    self.log(|| format!("fault: etcd down {ms} ms"));
                } else {
                    self.nodes[n].fail_next_sync = true;
                    self.log(|| format!("fault: node {id}'s next fsync fails"));
                }
            }
            _ => {
                // A kill of the master, the fault that matters most.
                if let Some(m) = (0..3).find(|&i| matches!(self.nodes[i].role, Role::Master(_))) {
                    let back = self.now + self.rng.range(300, 4_000);
                    let power = self.rng.chance(300);
                    self.last_kill = self.now;
                    self.crash(m, "master killed", power, back);
                }
            }
        }
        Ok(())
    }

    /// The node stops: its process state goes; its disk keeps the live image (a kill) or the
    /// durable one (a power loss).
    fn crash(&mut self, n: usize, why: &str, power: bool, back: Millis) {
        let node = &mut self.nodes[n];
        if matches!(node.role, Role::Down { .. }) {
            return;
        }
        self.stats.crashes += 1;
        let storage = node.core.take().map(Broker::into_storage);
        let disk = storage.map(|s| {
            let image = if power { s.crash() } else { s.live() };
            CrashStorage::from_mem(image)
        });
        node.disk = disk;
        node.role = Role::Down { until: back };
        node.incarnation += 1;
        node.pending.clear();
        node.following = None;
        node.busy = false;
        let id = node.id;
        self.log(|| format!("node {id} down ({why}) until {back}"));
        let gone: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.master == n || c.replica == n)
            .map(|(&k, _)| k)
            .collect();
        for c in gone {
            self.close_conn(c, "node down");
        }
    }

    fn deliver_calls(&mut self) -> Res {
        while let Some(entry) = self.calls.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let c = entry.remove();
            let answer = if self.etcd_reachable(c.node) {
                let a = self.etcd.apply(&c.call, self.now);
                if let (Call::Txn(..), Answer::Txn(true), Purpose::Elect { epoch, .. }) =
                    (&c.call, &a, &c.purpose)
                {
                    self.ledger.elected_at.insert(*epoch, self.now);
                    let id = c.node + 1;
                    let e = *epoch;
                    self.log(|| format!("etcd: node {id} elected in epoch {e}"));
                }
                // The answer comes back unless the link is cut by then (then: unknown).
                let d = self.delay();
                if self.etcd_cut[c.node] > self.now + d {
                    Err(())
                } else {
                    Ok((a, self.now + d))
                }
            } else {
                Err(())
            };
            let (answer, at) = match answer {
                Ok((a, at)) => (Ok(a), at),
                Err(()) => (Err(()), c.timeout_at.max(self.now)),
            };
            self.send(
                To::Node(c.node),
                Msg::Etcd {
                    incarnation: c.incarnation,
                    purpose: c.purpose,
                    answer,
                },
                at,
            );
        }
        Ok(())
    }

    fn deliver_msgs(&mut self) -> Res {
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > self.now {
                break;
            }
            let (to, msg) = entry.remove();
            match to {
                To::Client => self.client_receive(msg)?,
                To::Node(n) => {
                    // A connection's bytes reach only the process that holds it.
                    let conn = match &msg {
                        Msg::Hello { conn, .. }
                        | Msg::Welcome { conn, .. }
                        | Msg::Chunk { conn, .. }
                        | Msg::Ack { conn, .. } => Some(*conn),
                        _ => None,
                    };
                    if conn.is_some_and(|c| !self.conns.contains_key(&c)) {
                        continue;
                    }
                    let node = &self.nodes[n];
                    if node.paused_until > self.now {
                        // Held until the process runs again (its sockets stay open).
                        let at = self.now + STEP_MS;
                        self.send(to, msg, at);
                        continue;
                    }
                    if matches!(node.role, Role::Down { .. }) {
                        if let Msg::Request { op, .. } = msg {
                            self.send(To::Client, Msg::Reply { op, reply: None }, self.now + 1);
                        }
                        continue;
                    }
                    self.node_receive(n, msg)?;
                }
            }
        }
        Ok(())
    }
}

/// The trace of a failed run, ready to print.
#[must_use]
pub fn report(o: &Outcome) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "seed {}: {:?}", o.seed, o.stats);
    if let Some(v) = &o.violation {
        let _ = writeln!(s, "VIOLATION: {}", v.0);
        let _ = writeln!(s, "history (true ms, event):");
        for l in &o.trace {
            let _ = writeln!(s, "  {l}");
        }
    }
    s
}
