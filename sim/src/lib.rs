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

use machine::{Action, Master, Millis, Params, ReplicaState, ReplicaTable};

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

// ---------------------------------------------------------------------------------------
// etcd

/// A value in the group's keys (the JSON the broker writes, as data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Epoch(u64),
    Master { node: u32, epoch: u64 },
    Set { epoch: u64, members: Vec<u32> },
}

#[derive(Clone, Debug)]
struct Entry {
    val: Val,
    mod_rev: i64,
    lease: i64,
}

/// The keys of `cluster/mod.rs` this simulation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Epoch,
    Master,
    SyncStateSet,
}

#[derive(Clone, Debug)]
enum Cmp {
    /// The key's mod revision is this (0: absent).
    ModRev(Key, i64),
    ValueIs(Key, Val),
}

#[derive(Clone, Debug)]
enum Op {
    Put(Key, Val, i64),
}

/// A linearizable KV with revisions, leases and transactions.
#[derive(Debug, Default)]
pub struct Etcd {
    rev: i64,
    kv: BTreeMap<Key, Entry>,
    /// Lease id → expiry (true time).
    leases: BTreeMap<i64, Millis>,
    next_lease: i64,
    /// Down until (no call is answered meanwhile; its state and lease clocks go on).
    down_until: Millis,
}

/// Every key of the group at one revision, as a node reads them.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    epoch: (u64, i64),
    master: Option<(u32, u64, i64)>,
    set: (Option<Vec<u32>>, i64),
}

impl Etcd {
    fn expire(&mut self, now: Millis) {
        let gone: Vec<i64> = self
            .leases
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in gone {
            self.revoke(id);
        }
    }
    fn revoke(&mut self, id: i64) {
        if self.leases.remove(&id).is_some() {
            let keys: Vec<Key> = self
                .kv
                .iter()
                .filter(|(_, e)| e.lease == id)
                .map(|(&k, _)| k)
                .collect();
            if !keys.is_empty() {
                self.rev += 1;
            }
            for k in keys {
                self.kv.remove(&k);
            }
        }
    }
    fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot::default();
        if let Some(e) = self.kv.get(&Key::Epoch) {
            if let Val::Epoch(n) = e.val {
                s.epoch = (n, e.mod_rev);
            }
        }
        if let Some(e) = self.kv.get(&Key::Master) {
            if let Val::Master { node, epoch } = e.val {
                s.master = Some((node, epoch, e.lease));
            }
        }
        if let Some(e) = self.kv.get(&Key::SyncStateSet) {
            if let Val::Set { members, .. } = &e.val {
                s.set = (Some(members.clone()), e.mod_rev);
            }
        }
        s
    }
    fn apply(&mut self, call: &Call, now: Millis) -> Answer {
        match call {
            Call::Read => Answer::Read(self.snapshot()),
            Call::Grant => {
                self.next_lease += 1;
                self.leases.insert(self.next_lease, now + TTL_MS);
                Answer::Lease(self.next_lease)
            }
            Call::KeepAlive(id) => match self.leases.get_mut(id) {
                Some(at) => {
                    *at = now + TTL_MS;
                    Answer::Ttl(TTL_MS)
                }
                None => Answer::Ttl(0),
            },
            Call::Revoke(id) => {
                self.revoke(*id);
                Answer::Done
            }
            Call::Txn(when, then) => {
                let holds = when.iter().all(|c| match c {
                    Cmp::ModRev(k, rev) => self.kv.get(k).map_or(0, |e| e.mod_rev) == *rev,
                    Cmp::ValueIs(k, v) => self.kv.get(k).is_some_and(|e| e.val == *v),
                });
                // A put on a lease that is gone fails the whole transaction, as in etcd.
                let leases_ok = then
                    .iter()
                    .all(|Op::Put(_, _, l)| *l == 0 || self.leases.contains_key(l));
                if !holds || !leases_ok {
                    return Answer::Txn(false);
                }
                self.rev += 1;
                for Op::Put(k, v, lease) in then {
                    self.kv.insert(
                        *k,
                        Entry {
                            val: v.clone(),
                            mod_rev: self.rev,
                            lease: *lease,
                        },
                    );
                }
                Answer::Txn(true)
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Call {
    Read,
    Grant,
    KeepAlive(i64),
    Revoke(i64),
    Txn(Vec<Cmp>, Vec<Op>),
}

#[derive(Clone, Debug)]
enum Answer {
    Read(Snapshot),
    Lease(i64),
    Ttl(Millis),
    Txn(bool),
    Done,
}

/// Why a node made an etcd call (what to do with the answer).
#[derive(Clone, Debug)]
enum Purpose {
    /// A replica's look at the keys.
    Look,
    /// A campaign's lease, asked at this monotonic time, for this epoch with the read revs.
    Grant {
        sent: Millis,
        epoch: u64,
        epoch_rev: i64,
        set_rev: i64,
    },
    /// The election transaction.
    Elect {
        sent: Millis,
        epoch: u64,
        lease: i64,
    },
    /// The master's look at the master key.
    Check,
    /// A lease renewal asked at this monotonic time.
    KeepAlive { sent: Millis },
    /// The SyncStateSet write.
    WriteSet,
    /// Revoking this node's key of a previous run.
    Revoke,
}

// ---------------------------------------------------------------------------------------
// network

#[derive(Clone, Debug)]
enum Msg {
    /// Replication, replica → master.
    Hello {
        conn: u64,
        node: u32,
        end: u64,
        epochs: Vec<(u64, u64)>,
    },
    Welcome {
        conn: u64,
        epoch: u64,
        start: u64,
    },
    Chunk {
        conn: u64,
        epoch: u64,
        offset: u64,
        bytes: Vec<u8>,
    },
    Ack {
        conn: u64,
        end: u64,
    },
    /// The connection ended (reset, refused, closed).
    Close {
        conn: u64,
    },
    /// A client request to a node.
    Request {
        op: u64,
        request: Request,
    },
    /// A node's answer to a client (`None`: not the master).
    Reply {
        op: u64,
        reply: Option<Reply>,
    },
    /// A transaction check, master → producer.
    Check {
        node: usize,
        check: CheckRequest,
    },
    /// An etcd answer to a node.
    Etcd {
        incarnation: u64,
        purpose: Purpose,
        answer: Result<Answer, ()>,
    },
}

/// Who a message goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum To {
    Node(usize),
    Client,
}

/// A call on its way to etcd.
#[derive(Clone, Debug)]
struct EtcdCall {
    node: usize,
    incarnation: u64,
    purpose: Purpose,
    call: Call,
    /// When the node gives up (true time).
    timeout_at: Millis,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct LinkFault {
    stalled_until: Millis,
    cut_until: Millis,
}

#[derive(Clone, Debug)]
struct Conn {
    master: usize,
    replica: usize,
    /// Where the master sends from next.
    pos: u64,
    epoch: u64,
    welcomed: bool,
    /// Last delivery time, per direction (TCP keeps order): to the master, to the replica.
    last: [Millis; 2],
}

// ---------------------------------------------------------------------------------------
// nodes

#[derive(Debug)]
enum Role {
    Down { until: Millis },
    Replica,
    Master(Box<MasterSide>),
}

#[derive(Debug)]
struct MasterSide {
    m: Master,
    table: ReplicaTable,
    /// The lease deadline, monotonic ms.
    deadline: Millis,
    lease: i64,
    keeper_busy: bool,
    next_keepalive: Millis,
    next_check: Millis,
}

#[derive(Debug)]
struct Node {
    id: u32,
    core: Option<Broker<CrashStorage>>,
    /// The storage while the node is down.
    disk: Option<CrashStorage>,
    role: Role,
    incarnation: u64,
    /// True time the process (its monotonic clock) started.
    started: Millis,
    drift_ppm: i64,
    skew: i64,
    paused_until: Millis,
    /// The role loop's etcd call is out.
    busy: bool,
    next_look: Millis,
    /// Replica: (master node, epoch) followed and the connection.
    following: Option<(usize, u64, u64)>,
    reconnect_at: Millis,
    /// Core request id → client op.
    pending: BTreeMap<u64, u64>,
    /// The next sync fails (EIO).
    fail_next_sync: bool,
}

impl Node {
    fn mono(&self, now: Millis) -> Millis {
        let e = (now - self.started) as i64;
        (e + e * self.drift_ppm / 1_000_000).max(0) as u64
    }
    fn wall(&self, now: Millis) -> Millis {
        (now as i64 + self.skew).max(0) as u64
    }
    fn params(&self, sync: bool) -> Params {
        Params {
            me: self.id,
            sync,
            min_in_sync: MIN_IN_SYNC,
            max_lag_ms: MAX_LAG_MS,
            ttl_ms: TTL_MS,
        }
    }
}

// ---------------------------------------------------------------------------------------
// clients and the ledger

#[derive(Clone, Debug)]
enum OpKind {
    Send {
        key: String,
        deliver_at: Option<Millis>,
    },
    Prepare {
        key: String,
    },
    End {
        key: String,
        resolution: Resolution,
    },
    Pull {
        queue: u32,
    },
}

#[derive(Clone, Debug)]
struct Released {
    key: String,
    offset: u64,
    /// The record's bytes as the releasing master held them.
    bytes: Vec<u8>,
    epoch: u64,
    at: Millis,
}

#[derive(Debug, Default)]
struct Ledger {
    /// Sends a master released (sync: durable on the set), by key.
    released: BTreeMap<String, Released>,
    /// Sends a client saw acknowledged.
    acked: BTreeSet<String>,
    /// Commits a client saw acknowledged.
    commits_acked: BTreeSet<String>,
    /// Transactions meant to roll back (never to be delivered).
    rollback: BTreeSet<String>,
    /// Transactions meant to commit.
    commit: BTreeSet<String>,
    /// Half key → transaction id, once prepared.
    txns: BTreeMap<String, TxnId>,
    /// Delayed sends: key → earliest delivery (true time).
    delayed: BTreeMap<String, Millis>,
    delivered: BTreeSet<String>,
    /// Lost under async within the bound (not required afterwards).
    lost: BTreeSet<String>,
    /// Epoch → the node that released in it.
    epoch_node: BTreeMap<u64, u32>,
    /// Epoch → true time its election transaction was applied.
    elected_at: BTreeMap<u64, Millis>,
    /// Epoch → true time its master last acknowledged a write (it stopped at or after it:
    /// the async bound is stated from there, so a master paused or cut off before it died
    /// gets no credit for the time it was not serving).
    last_ack_in: BTreeMap<u64, Millis>,
    /// Last release of any write.
    last_release: Millis,
}

/// One simulated group.
pub struct World {
    seed: u64,
    opts: Options,
    rng: Rng,
    now: Millis,
    seq: u64,
    etcd: Etcd,
    nodes: Vec<Node>,
    /// (delivery time, sequence) → message.
    queue: BTreeMap<(Millis, u64), (To, Msg)>,
    calls: BTreeMap<(Millis, u64), EtcdCall>,
    conns: BTreeMap<u64, Conn>,
    next_conn: u64,
    links: BTreeMap<(usize, usize), LinkFault>,
    etcd_cut: Vec<Millis>,
    ops: BTreeMap<u64, OpKind>,
    next_op: u64,
    next_key: u64,
    /// Consumer offsets per queue (the consumer's own: a failover under async replication
    /// may leave them past what the new master holds, so the consumer reads every queue again
    /// from 0 before the end).
    offsets: Vec<u64>,
    /// The master key as the clients last read it (every 300 ms).
    route: Option<usize>,
    ledger: Ledger,
    stats: Stats,
    trace: Vec<String>,
    keep_trace: bool,
    cfg: Config,
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

type Res = Result<(), Violation>;

fn fail(msg: impl Into<String>) -> Res {
    Err(Violation(msg.into()))
}

/// The first record of `bytes` (a replication chunk read at its offset).
fn first_record(bytes: &[u8]) -> Vec<u8> {
    let len = bytes
        .get(..4)
        .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize);
    bytes[..len.min(bytes.len())].to_vec()
}

impl World {
    fn new(seed: u64, opts: Options, keep_trace: bool) -> Self {
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
            stats: Stats::default(),
            trace: Vec::new(),
            keep_trace,
            cfg,
        }
    }

    fn log(&mut self, what: impl FnOnce() -> String) {
        let line = format!("{:>6} {}", self.now, what());
        self.trace.push(line);
        if !self.keep_trace && self.trace.len() > 800 {
            self.trace.drain(..400);
        }
    }

    fn delay(&mut self) -> Millis {
        // Mostly 1–5 ms, now and then up to 60 ms (reordering across connections and calls).
        if self.rng.chance(50) {
            self.rng.range(5, 60)
        } else {
            self.rng.range(1, 5)
        }
    }

    fn send(&mut self, to: To, msg: Msg, at: Millis) {
        self.seq += 1;
        self.queue.insert((at, self.seq), (to, msg));
    }

    fn link(&self, a: usize, b: usize) -> LinkFault {
        self.links
            .get(&(a.min(b), a.max(b)))
            .copied()
            .unwrap_or_default()
    }

    /// A replication message on `conn`, towards the master (`up`) or the replica.
    fn send_conn(&mut self, conn: u64, up: bool, msg: Msg) {
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
    fn close_conn(&mut self, conn: u64, why: &str) {
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

    fn call(&mut self, n: usize, purpose: Purpose, call: Call) {
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

    fn etcd_reachable(&self, n: usize) -> bool {
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
        let mut healthy_since = None;
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
            // Liveness: while etcd and a majority are healthy, writes are acknowledged at
            // least every LIVENESS_MS (counted from when that began).
            match (self.healthy_majority(), healthy_since) {
                (Some(_), None) => healthy_since = Some(self.now),
                (None, _) => healthy_since = None,
                (Some(_), Some(_)) => {}
            }
            if let (Some(pair), Some(t0)) = (self.healthy_majority(), healthy_since) {
                let from = self.ledger.last_release.max(t0);
                if self.now + DRAIN_MS < end && self.now > from + LIVENESS_MS {
                    return fail(format!(
                        "liveness: etcd and nodes {} and {} (one of them in the SyncStateSet, their link up) healthy since {t0}, yet no write acknowledged since {from} ({} ms, bound {LIVENESS_MS} ms)",
                        pair.0 + 1,
                        pair.1 + 1,
                        self.now - from
                    ));
                }
            }
            self.now += STEP_MS;
        }
        self.final_checks()
    }

    /// Two nodes up, running and reaching etcd and each other, one of them in the
    /// SyncStateSet (only a member may be elected), with etcd up.
    fn healthy_majority(&self) -> Option<(usize, usize)> {
        if self.etcd.down_until > self.now {
            return None;
        }
        let set = self.etcd.snapshot().set.0;
        let ok = |n: usize| {
            !matches!(self.nodes[n].role, Role::Down { .. })
                && self.nodes[n].paused_until <= self.now
                && self.etcd_cut[n] <= self.now
        };
        for (a, b) in [(0, 1), (0, 2), (1, 2)] {
            let l = self.link(a, b);
            let member = set
                .as_ref()
                .is_none_or(|s| s.contains(&(a as u32 + 1)) || s.contains(&(b as u32 + 1)));
            if ok(a) && ok(b) && l.cut_until <= self.now && l.stalled_until <= self.now && member {
                return Some((a, b));
            }
        }
        None
    }

    fn heal(&mut self) {
        self.log(|| "== quiet phase: every fault healed, every node up".into());
        self.links.clear();
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

    // -----------------------------------------------------------------------------------
    // a node

    fn step_node(&mut self, n: usize) -> Res {
        if self.nodes[n].paused_until > self.now {
            return Ok(());
        }
        if let Role::Down { until } = self.nodes[n].role {
            if until <= self.now {
                self.restart(n)?;
            }
            return Ok(());
        }
        let mono = self.nodes[n].mono(self.now);
        let wall = self.nodes[n].wall(self.now);
        if let Role::Master(_) = self.nodes[n].role {
            self.master_step(n, mono, wall)?;
        } else {
            self.replica_step(n, mono)?;
        }
        self.flush(n)
    }

    fn restart(&mut self, n: usize) -> Res {
        let now_wall = self.nodes[n].wall(self.now);
        let disk = self.nodes[n].disk.take().unwrap_or_default();
        match Broker::open_replica(self.cfg.clone(), disk, now_wall) {
            Ok(b) => {
                let node = &mut self.nodes[n];
                node.core = Some(b);
                node.role = Role::Replica;
                node.started = self.now;
                node.next_look = 0;
                node.reconnect_at = 0;
                let id = node.id;
                self.log(|| format!("node {id} up (a replica)"));
                Ok(())
            }
            Err(e) => fail(format!(
                "recovery: node {} cannot reopen its storage after a crash: {e} (only a torn tail may be cut)",
                n + 1
            )),
        }
    }

    /// Syncs what the core appended (group commit), then hands its outputs out.
    fn flush(&mut self, n: usize) -> Res {
        let node = &mut self.nodes[n];
        let Some(core) = node.core.as_mut() else {
            return Ok(());
        };
        if core.needs_sync() {
            if node.fail_next_sync {
                node.fail_next_sync = false;
                core.storage_mut().fail_syncs = true;
            }
            if let Err(e) = core.sync() {
                self.log(|| format!("node {}: fsync failed ({e}): it stops", n + 1));
                let back = self.now + self.rng.range(500, 3_000);
                self.drain_outputs(n)?;
                if let Some(core) = self.nodes[n].core.as_mut() {
                    core.storage_mut().fail_syncs = false;
                }
                self.crash(n, "fsync failed", true, back);
                return Ok(());
            }
        }
        self.drain_outputs(n)
    }

    fn drain_outputs(&mut self, n: usize) -> Res {
        let epoch = match &self.nodes[n].role {
            Role::Master(ms) => ms.m.epoch,
            _ => 0,
        };
        loop {
            let Some(core) = self.nodes[n].core.as_mut() else {
                return Ok(());
            };
            let Some(out) = core.poll_output() else {
                return Ok(());
            };
            match out {
                Output::Reply { id, reply } => {
                    let Some(op) = self.nodes[n].pending.remove(&id) else {
                        continue;
                    };
                    self.released(n, epoch, op, &reply)?;
                    let d = self.delay();
                    self.send(
                        To::Client,
                        Msg::Reply {
                            op,
                            reply: Some(reply),
                        },
                        self.now + d,
                    );
                }
                Output::Check(check) => {
                    let d = self.delay();
                    self.send(To::Client, Msg::Check { node: n, check }, self.now + d);
                }
                Output::Failed { id, .. } => {
                    self.nodes[n].pending.remove(&id);
                }
                Output::Available { .. } | Output::Trace(_) => {}
            }
        }
    }

    /// A reply leaves master `n` in `epoch`: the checks of what it acknowledges.
    fn released(&mut self, n: usize, epoch: u64, op: u64, reply: &Reply) -> Res {
        let id = n as u32 + 1;
        let write = matches!(
            (self.ops.get(&op), reply),
            (
                Some(OpKind::Send { .. } | OpKind::Prepare { .. } | OpKind::End { .. }),
                Reply::Sent(_) | Reply::Ended { .. }
            )
        );
        if !write {
            return Ok(());
        }
        // No two masters acknowledge in one epoch, nor an old master once a newer is elected.
        match self.ledger.epoch_node.get(&epoch) {
            Some(&other) if other != id => {
                return fail(format!(
                    "two masters: node {id} acknowledged in epoch {epoch}, as node {other} did"
                ))
            }
            _ => {
                self.ledger.epoch_node.insert(epoch, id);
            }
        }
        if let Some((&newer, &at)) = self.ledger.elected_at.range(epoch + 1..).next() {
            if at <= self.now {
                return fail(format!(
                    "fencing: node {id} acknowledged in epoch {epoch} at {}, after epoch {newer} was elected at {at}",
                    self.now
                ));
            }
        }
        self.ledger.last_release = self.now;
        self.ledger.last_ack_in.insert(epoch, self.now);
        if let (Some(OpKind::Send { key, .. }), Reply::Sent(results)) = (self.ops.get(&op), reply) {
            let key = key.clone();
            let offset = results[0].offset;
            self.log(|| format!("node {id} acknowledges {key} at {offset} (epoch {epoch})"));
            let core = self.nodes[n].core.as_mut().expect("up");
            let bytes = match core.replication_chunk(offset, 1) {
                Ok(Some(b)) => first_record(&b),
                _ => {
                    return fail(format!(
                        "node {id} released {key} at {offset} it cannot read"
                    ))
                }
            };
            self.ledger.released.insert(
                key.clone(),
                Released {
                    key,
                    offset,
                    bytes,
                    epoch,
                    at: self.now,
                },
            );
        }
        Ok(())
    }

    fn node_receive(&mut self, n: usize, msg: Msg) -> Res {
        let mono = self.nodes[n].mono(self.now);
        let wall = self.nodes[n].wall(self.now);
        match msg {
            Msg::Etcd {
                incarnation,
                purpose,
                answer,
            } => {
                if incarnation != self.nodes[n].incarnation {
                    return Ok(());
                }
                self.etcd_answer(n, purpose, answer, mono, wall)?;
            }
            Msg::Request { op, request } => {
                let Role::Master(_) = self.nodes[n].role else {
                    self.send(To::Client, Msg::Reply { op, reply: None }, self.now + 1);
                    return Ok(());
                };
                let core = self.nodes[n].core.as_mut().expect("up");
                let id = core.next_request_id();
                match core.handle(wall, id, request) {
                    Ok(()) => {
                        self.nodes[n].pending.insert(id, op);
                    }
                    Err(e) => {
                        return fail(format!("node {}: the core failed a request: {e}", n + 1))
                    }
                }
            }
            Msg::Hello {
                conn,
                node,
                end,
                epochs,
            } => {
                let Role::Master(ms) = &self.nodes[n].role else {
                    self.close_conn(conn, "HELLO to a node that is not master");
                    return Ok(());
                };
                let epoch = ms.m.epoch;
                let core = self.nodes[n].core.as_ref().expect("up");
                let (m_epochs, m_end) = (core.epochs().to_vec(), core.log_end());
                let start = common_prefix(&epochs, end, &m_epochs, m_end);
                self.send_conn(conn, false, Msg::Welcome { conn, epoch, start });
                if start < end {
                    return Ok(());
                }
                if let Role::Master(ms) = &mut self.nodes[n].role {
                    ReplicaState::connected(&mut ms.table, node, conn, start, m_end, mono);
                }
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.pos = start;
                    c.welcomed = true;
                    c.epoch = epoch;
                }
            }
            Msg::Ack { conn, end } => {
                let log_end = self.nodes[n].core.as_ref().map_or(0, Broker::log_end);
                let replica = self.conns.get(&conn).map(|c| c.replica as u32 + 1);
                if let (Role::Master(ms), Some(r)) = (&mut self.nodes[n].role, replica) {
                    ReplicaState::acked(&mut ms.table, r, conn, end, log_end, mono);
                }
            }
            Msg::Close { conn } => {
                if let Role::Master(ms) = &mut self.nodes[n].role {
                    for r in 1..=3 {
                        ReplicaState::closed(&mut ms.table, r, conn);
                    }
                }
                if self.nodes[n].following.is_some_and(|f| f.2 == conn) {
                    self.nodes[n].following = None;
                    self.nodes[n].reconnect_at = self.now + 200;
                }
            }
            Msg::Welcome { conn, epoch, start } => {
                let Some((m, e, c)) = self.nodes[n].following else {
                    return Ok(());
                };
                if c != conn {
                    return Ok(());
                }
                if epoch != e {
                    self.close_conn(conn, "WELCOME from another epoch");
                    return Ok(());
                }
                let end = self.nodes[n].core.as_ref().map_or(0, Broker::log_end);
                if start < end {
                    self.truncate(n, start)?;
                    self.close_conn(conn, "cut its tail: reconnect");
                    self.nodes[n].following = None;
                    self.nodes[n].reconnect_at = self.now;
                    return Ok(());
                }
                let _ = m;
            }
            Msg::Chunk {
                conn,
                epoch,
                offset,
                bytes,
            } => {
                let Some((_, e, c)) = self.nodes[n].following else {
                    return Ok(());
                };
                if c != conn {
                    return Ok(());
                }
                if epoch != e {
                    self.close_conn(conn, "a CHUNK of another epoch");
                    return Ok(());
                }
                let core = self.nodes[n].core.as_mut().expect("up");
                match core.apply_replicated(offset, &bytes) {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        self.close_conn(conn, &format!("refused: {e}"));
                        return Ok(());
                    }
                    Err(e) => return fail(format!("node {}: apply failed: {e}", n + 1)),
                }
                if self.nodes[n].fail_next_sync {
                    self.nodes[n].fail_next_sync = false;
                    let core = self.nodes[n].core.as_mut().expect("up");
                    core.storage_mut().fail_syncs = true;
                }
                let core = self.nodes[n].core.as_mut().expect("up");
                if let Err(e) = core.sync() {
                    core.storage_mut().fail_syncs = false;
                    self.log(|| format!("node {}: fsync failed ({e}): it stops", n + 1));
                    let back = self.now + self.rng.range(500, 3_000);
                    self.crash(n, "fsync failed", true, back);
                    return Ok(());
                }
                let end = core.log_end();
                self.send_conn(conn, true, Msg::Ack { conn, end });
            }
            Msg::Reply { .. } | Msg::Check { .. } => {}
        }
        Ok(())
    }

    /// A replica cuts its log at `at` and opens it again (`replication.rs`
    /// `truncate_and_reopen`).
    fn truncate(&mut self, n: usize, at: u64) -> Res {
        self.stats.truncations += 1;
        let wall = self.nodes[n].wall(self.now);
        let core = self.nodes[n].core.take().expect("up");
        let from = core.log_end();
        let mut storage = core.into_storage();
        if let Err(e) = Broker::truncate_storage(&mut storage, at) {
            return fail(format!("node {}: cutting the log at {at}: {e}", n + 1));
        }
        match Broker::open_replica(self.cfg.clone(), storage, wall) {
            Ok(b) => self.nodes[n].core = Some(b),
            Err(e) => return fail(format!("node {}: reopening after the cut: {e}", n + 1)),
        }
        self.log(|| format!("node {} cut its divergent tail {from} → {at}", n + 1));
        Ok(())
    }

    fn replica_step(&mut self, n: usize, mono: Millis) -> Res {
        let _ = mono;
        // A look at etcd every POLL_MS.
        if !self.nodes[n].busy && self.now >= self.nodes[n].next_look {
            self.nodes[n].busy = true;
            self.nodes[n].next_look = self.now + POLL_MS;
            self.call(n, Purpose::Look, Call::Read);
        }
        // Follow the master the last look named.
        if let Some((m, e, conn)) = self.nodes[n].following {
            if !self.conns.contains_key(&conn) {
                self.nodes[n].following = Some((m, e, 0));
            }
        }
        Ok(())
    }

    /// Opens a replication connection to master `m` of `epoch`.
    fn connect(&mut self, n: usize, m: usize, epoch: u64) -> Res {
        let core = self.nodes[n].core.as_mut().expect("up");
        // What this replica holds is synced before it says so.
        if core.sync().is_err() {
            return Ok(());
        }
        let epochs = core.epochs().to_vec();
        let end = core.log_end();
        if epochs.last().is_some_and(|e| e.0 > epoch) {
            return Ok(());
        }
        if self.link(n, m).cut_until > self.now || matches!(self.nodes[m].role, Role::Down { .. }) {
            self.nodes[n].reconnect_at = self.now + 200;
            return Ok(());
        }
        self.next_conn += 1;
        let conn = self.next_conn;
        self.conns.insert(
            conn,
            Conn {
                master: m,
                replica: n,
                pos: 0,
                epoch,
                welcomed: false,
                last: [0, 0],
            },
        );
        self.nodes[n].following = Some((m, epoch, conn));
        let node = self.nodes[n].id;
        self.send_conn(
            conn,
            true,
            Msg::Hello {
                conn,
                node,
                end,
                epochs,
            },
        );
        Ok(())
    }

    fn etcd_answer(
        &mut self,
        n: usize,
        purpose: Purpose,
        answer: Result<Answer, ()>,
        mono: Millis,
        wall: Millis,
    ) -> Res {
        let me = self.nodes[n].id;
        let params = self.nodes[n].params(self.opts.sync);
        match (purpose, answer) {
            (Purpose::Look, Ok(Answer::Read(s))) => {
                if !matches!(self.nodes[n].role, Role::Replica) {
                    return Ok(());
                }
                match s.master {
                    None => {
                        self.stop_following(n);
                        if machine::may_campaign(s.set.0.as_deref(), me, false) {
                            let log_last = self.nodes[n]
                                .core
                                .as_ref()
                                .and_then(|c| c.epochs().last().map(|e| e.0))
                                .unwrap_or(0);
                            let epoch = machine::next_epoch(s.epoch.0, log_last);
                            self.call(
                                n,
                                Purpose::Grant {
                                    sent: mono,
                                    epoch,
                                    epoch_rev: s.epoch.1,
                                    set_rev: s.set.1,
                                },
                                Call::Grant,
                            );
                            return Ok(());
                        }
                    }
                    Some((node, _, lease)) if node == me => {
                        // A key of this node's previous run: end its lease now.
                        self.call(n, Purpose::Revoke, Call::Revoke(lease));
                        return Ok(());
                    }
                    Some((node, epoch, _)) => {
                        let m = node as usize - 1;
                        let same = self.nodes[n]
                            .following
                            .is_some_and(|f| f.0 == m && f.1 == epoch);
                        if !same {
                            self.stop_following(n);
                            self.nodes[n].following = Some((m, epoch, 0));
                        }
                        if let Some((m, e, 0)) = self.nodes[n].following {
                            if self.now >= self.nodes[n].reconnect_at {
                                self.connect(n, m, e)?;
                            }
                        }
                    }
                }
                self.nodes[n].busy = false;
            }
            (
                Purpose::Grant {
                    sent,
                    epoch,
                    epoch_rev,
                    set_rev,
                },
                Ok(Answer::Lease(lease)),
            ) => {
                let when = vec![
                    Cmp::ModRev(Key::Master, 0),
                    Cmp::ModRev(Key::Epoch, epoch_rev),
                    Cmp::ModRev(Key::SyncStateSet, set_rev),
                ];
                let then = vec![
                    Op::Put(Key::Epoch, Val::Epoch(epoch), 0),
                    Op::Put(Key::Master, Val::Master { node: me, epoch }, lease),
                    Op::Put(
                        Key::SyncStateSet,
                        Val::Set {
                            epoch,
                            members: vec![me],
                        },
                        0,
                    ),
                ];
                self.call(
                    n,
                    Purpose::Elect { sent, epoch, lease },
                    Call::Txn(when, then),
                );
            }
            (Purpose::Elect { sent, epoch, lease }, Ok(Answer::Txn(true))) => {
                self.stop_following(n);
                let core = self.nodes[n].core.as_mut().expect("up");
                match core.promote(wall, epoch) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        self.log(|| format!("node {me}: promote to {epoch} refused: {e}"));
                        self.fence(n, "promote refused");
                        return Ok(());
                    }
                    Err(e) => {
                        self.log(|| format!("node {me}: promote failed: {e}"));
                        let back = self.now + 500;
                        self.crash(n, "promote failed", true, back);
                        return Ok(());
                    }
                }
                core.set_producer_online(wall, PRODUCER_GROUP, true);
                let log_end = core.log_end();
                self.stats.elections += 1;
                self.log(|| format!("node {me} master of epoch {epoch} (log end {log_end})"));
                self.nodes[n].role = Role::Master(Box::new(MasterSide {
                    m: Master::new(params, epoch, log_end),
                    table: ReplicaTable::new(),
                    deadline: machine::lease_deadline(&params, sent, TTL_MS),
                    lease,
                    keeper_busy: false,
                    next_keepalive: mono + TTL_MS / 4,
                    next_check: mono + 500,
                }));
                self.nodes[n].busy = false;
                self.check_new_master(n, epoch)?;
            }
            (
                Purpose::Grant { .. } | Purpose::Elect { .. } | Purpose::Look | Purpose::Revoke,
                _,
            ) => {
                self.nodes[n].busy = false;
            }
            (Purpose::Check, a) => {
                let Role::Master(ms) = &mut self.nodes[n].role else {
                    return Ok(());
                };
                ms.next_check = mono + 500;
                self.nodes[n].busy = false;
                if let Ok(Answer::Read(s)) = a {
                    let epoch = match &self.nodes[n].role {
                        Role::Master(ms) => ms.m.epoch,
                        _ => 0,
                    };
                    if s.master.map(|m| (m.0, m.1)) != Some((me, epoch)) {
                        self.fence(n, "the master key is no longer this node's");
                    }
                }
            }
            (Purpose::KeepAlive { sent }, a) => {
                let Role::Master(ms) = &mut self.nodes[n].role else {
                    return Ok(());
                };
                ms.keeper_busy = false;
                if let Ok(Answer::Ttl(t)) = a {
                    if t > 0 {
                        ms.deadline = ms.deadline.max(machine::lease_deadline(&params, sent, t));
                    }
                }
            }
            (Purpose::WriteSet, a) => {
                let Role::Master(ms) = &mut self.nodes[n].role else {
                    return Ok(());
                };
                let outcome = match a {
                    Ok(Answer::Txn(b)) => Ok(b),
                    _ => Err(()),
                };
                let asked = ms.m.writing.clone();
                if let Some(why) = ms.m.set_written(outcome) {
                    self.fence(n, why.reason());
                } else if outcome == Ok(true) {
                    self.log(|| format!("node {me}: SyncStateSet {asked:?}"));
                }
            }
        }
        Ok(())
    }

    fn stop_following(&mut self, n: usize) {
        if let Some((_, _, conn)) = self.nodes[n].following.take() {
            if conn != 0 {
                self.close_conn(conn, "following another master");
            }
        }
    }

    /// A master stops (crash-only: the process exits; restarted, it is a replica).
    fn fence(&mut self, n: usize, why: &str) {
        self.stats.fenced += 1;
        let back = self.now + self.rng.range(200, 1_500);
        self.crash(n, &format!("fenced: {why}"), false, back);
    }

    fn master_step(&mut self, n: usize, mono: Millis, wall: Millis) -> Res {
        let core = self.nodes[n].core.as_mut().expect("up");
        if let Err(e) = core.handle_timeout(wall) {
            return fail(format!("node {}: timers failed: {e}", n + 1));
        }
        let log_end = core.log_end();
        let reachable_calls = !self.nodes[n].busy;
        let Role::Master(ms) = &mut self.nodes[n].role else {
            return Ok(());
        };
        // The lease keeper and the look at the master key.
        let keepalive = (!ms.keeper_busy && mono >= ms.next_keepalive).then(|| {
            ms.keeper_busy = true;
            ms.next_keepalive = mono + TTL_MS / 4;
            ms.lease
        });
        let check = reachable_calls && mono >= ms.next_check;
        let actions = ms.m.tick(mono, ms.deadline, log_end, &mut ms.table);
        let deadline = ms.deadline;
        let epoch = ms.m.epoch;
        if let Some(lease) = keepalive {
            self.call(n, Purpose::KeepAlive { sent: mono }, Call::KeepAlive(lease));
        }
        if check {
            self.nodes[n].busy = true;
            self.call(n, Purpose::Check, Call::Read);
        }
        for a in actions {
            match a {
                Action::Fence(why) => {
                    self.fence(n, why.reason());
                    return Ok(());
                }
                Action::WriteSyncStateSet(next) => {
                    let me = self.nodes[n].id;
                    self.log(|| format!("node {me}: asks SyncStateSet {next:?}"));
                    let when = vec![Cmp::ValueIs(Key::Epoch, Val::Epoch(epoch))];
                    let then = vec![Op::Put(
                        Key::SyncStateSet,
                        Val::Set {
                            epoch,
                            members: next,
                        },
                        0,
                    )];
                    self.call(n, Purpose::WriteSet, Call::Txn(when, then));
                }
                Action::Release(upto) => {
                    // Checked again right before replies go out.
                    if machine::holds_lease(mono, deadline) {
                        let core = self.nodes[n].core.as_mut().expect("up");
                        core.replicated_to(upto);
                        if let Role::Master(ms) = &mut self.nodes[n].role {
                            ms.m.released(upto);
                        }
                    }
                }
            }
        }
        // Replication: chunks to each welcomed connection, within its window.
        let conns: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.master == n && c.welcomed)
            .map(|(&k, _)| k)
            .collect();
        for conn in conns {
            while let Some(c) = self.conns.get(&conn) {
                let acked = match &self.nodes[n].role {
                    Role::Master(ms) => ms
                        .table
                        .get(&(c.replica as u32 + 1))
                        .filter(|s| s.conn == conn)
                        .map_or(c.pos, |s| s.acked),
                    _ => break,
                };
                if c.pos.saturating_sub(acked) > WINDOW_BYTES {
                    break;
                }
                let (pos, e) = (c.pos, c.epoch);
                let core = self.nodes[n].core.as_mut().expect("up");
                let chunk = match core.replication_chunk(pos, CHUNK_BYTES) {
                    Ok(c) => c,
                    Err(e) => return fail(format!("node {}: reading the log: {e}", n + 1)),
                };
                let Some(bytes) = chunk else { break };
                let next = machine::next_offset(pos, &bytes);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.pos = next;
                }
                self.send_conn(
                    conn,
                    false,
                    Msg::Chunk {
                        conn,
                        epoch: e,
                        offset: pos,
                        bytes,
                    },
                );
            }
        }
        Ok(())
    }

    /// Node `n` became master of `epoch`: nothing acknowledged may be missing from its log
    /// (sync), or only what was acknowledged within the bound before the old master stopped
    /// (async).
    fn check_new_master(&mut self, n: usize, epoch: u64) -> Res {
        let mut missing = Vec::new();
        let core = self.nodes[n].core.as_mut().expect("up");
        for r in self.ledger.released.values() {
            if self.ledger.lost.contains(&r.key) {
                continue;
            }
            let held = match core.replication_chunk(r.offset, 1) {
                Ok(Some(b)) => first_record(&b) == r.bytes,
                _ => false,
            };
            if !held {
                missing.push(r.clone());
            }
        }
        for r in missing {
            if self.opts.sync {
                return fail(format!(
                    "sync loss: {} (offset {}, acknowledged in epoch {} at {}) is not in the log of node {}, master of epoch {epoch}",
                    r.key, r.offset, r.epoch, r.at, n + 1
                ));
            }
            let stopped = self
                .ledger
                .last_ack_in
                .get(&r.epoch)
                .copied()
                .unwrap_or(r.at);
            if r.at + ASYNC_LOSS_BOUND_MS < stopped {
                return fail(format!(
                    "async loss beyond the bound: {} acknowledged at {} in epoch {}, whose master acknowledged until {} ({} ms later, bound {ASYNC_LOSS_BOUND_MS} ms), is not in the log of node {}, master of epoch {epoch}",
                    r.key, r.at, r.epoch, stopped, stopped - r.at, n + 1
                ));
            }
            self.stats.lost_async += 1;
            self.ledger.lost.insert(r.key.clone());
            let key = r.key.clone();
            self.log(|| format!("async: {key} lost within the bound"));
        }
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // clients

    fn issue(&mut self, kind: OpKind) {
        let Some(m) = self.route else { return };
        self.next_op += 1;
        let op = self.next_op;
        let request = match &kind {
            OpKind::Send { key, deliver_at } => {
                let mut msg = NewMessage::new(TOPIC, key.as_bytes().to_vec());
                if let Some(at) = deliver_at {
                    msg = msg.with_delay(Delay::At(*at));
                }
                Request::Send {
                    messages: vec![msg],
                }
            }
            OpKind::Prepare { key } => Request::Prepare {
                group: PRODUCER_GROUP.into(),
                message: NewMessage::new(TOPIC, key.as_bytes().to_vec()),
                check_immunity_ms: None,
            },
            OpKind::End { key, resolution } => {
                let Some(&txn) = self.ledger.txns.get(key) else {
                    return;
                };
                Request::EndTransaction {
                    txn,
                    resolution: *resolution,
                    group: Some(PRODUCER_GROUP.into()),
                    from_check: false,
                }
            }
            OpKind::Pull { queue } => Request::Pull {
                group: CONSUMER_GROUP.into(),
                topic: TOPIC.into(),
                queue_id: *queue,
                offset: Some(self.offsets[*queue as usize]),
                max: 32,
                filter: rocklet_core::TagFilter::All,
                auto_commit: false,
            },
        };
        self.ops.insert(op, kind);
        let d = self.delay();
        self.send(To::Node(m), Msg::Request { op, request }, self.now + d);
    }

    fn client_op(&mut self) {
        self.next_key += 1;
        let r = self.rng.range(0, 99);
        if r < 60 {
            let key = format!("s{}", self.next_key);
            self.issue(OpKind::Send {
                key,
                deliver_at: None,
            });
        } else if r < 70 {
            let key = format!("d{}", self.next_key);
            let at = self.now + self.rng.range(300, 3_000);
            self.ledger.delayed.insert(key.clone(), at);
            self.issue(OpKind::Send {
                key,
                deliver_at: Some(at),
            });
        } else {
            let key = format!("x{}", self.next_key);
            if self.rng.chance(600) {
                self.ledger.commit.insert(key.clone());
            } else {
                self.ledger.rollback.insert(key.clone());
            }
            self.issue(OpKind::Prepare { key });
        }
    }

    fn client_receive(&mut self, msg: Msg) -> Res {
        match msg {
            Msg::Reply { op, reply } => {
                let Some(kind) = self.ops.remove(&op) else {
                    return Ok(());
                };
                let Some(reply) = reply else { return Ok(()) };
                match (kind, reply) {
                    (OpKind::Send { key, .. }, Reply::Sent(_)) => {
                        self.stats.acked += 1;
                        self.ledger.acked.insert(key);
                    }
                    (OpKind::Prepare { key }, Reply::Sent(r)) => {
                        if let Some(txn) = r[0].txn {
                            self.ledger.txns.insert(key.clone(), txn);
                        }
                        // Most are ended by the producer; some wait for the check.
                        if self.rng.chance(800) {
                            let resolution = if self.ledger.commit.contains(&key) {
                                Resolution::Commit
                            } else {
                                Resolution::Rollback
                            };
                            self.issue(OpKind::End { key, resolution });
                        }
                    }
                    (OpKind::End { key, resolution }, Reply::Ended { .. }) => {
                        self.stats.acked += 1;
                        if resolution == Resolution::Commit {
                            self.ledger.commits_acked.insert(key);
                        }
                    }
                    (
                        OpKind::Pull { queue },
                        Reply::Pulled {
                            messages,
                            next_offset,
                            ..
                        },
                    ) => {
                        for m in &messages {
                            let key = String::from_utf8_lossy(&m.body).into_owned();
                            self.delivered(&key)?;
                        }
                        self.offsets[queue as usize] = next_offset;
                    }
                    _ => {}
                }
            }
            Msg::Check { node, check } => {
                // The checker answers what the producer meant.
                let key = String::from_utf8_lossy(&check.message.body).into_owned();
                let resolution = if self.ledger.commit.contains(&key) {
                    Resolution::Commit
                } else if self.ledger.rollback.contains(&key) {
                    Resolution::Rollback
                } else {
                    Resolution::Unknown
                };
                self.next_op += 1;
                let op = self.next_op;
                let d = self.delay();
                let request = Request::EndTransaction {
                    txn: check.txn,
                    resolution,
                    group: Some(check.group),
                    from_check: true,
                };
                self.send(To::Node(node), Msg::Request { op, request }, self.now + d);
            }
            _ => {}
        }
        Ok(())
    }

    fn delivered(&mut self, key: &str) -> Res {
        if self.ledger.rollback.contains(key) {
            return fail(format!("a rolled-back message was delivered: {key}"));
        }
        if let Some(&at) = self.ledger.delayed.get(key) {
            if self.now + SKEW_MS < at {
                return fail(format!(
                    "a delayed message was delivered early: {key} at {}, due at {at}",
                    self.now
                ));
            }
        }
        if self.ledger.delivered.insert(key.to_string()) {
            self.stats.delivered += 1;
        }
        Ok(())
    }

    fn final_checks(&mut self) -> Res {
        // (Under async replication a lost commit is not told from a delivered one: only sends,
        // checked by offset, are required there.)
        let commits = if self.opts.sync {
            &self.ledger.commits_acked
        } else {
            &BTreeSet::new()
        };
        for key in self.ledger.acked.iter().chain(commits) {
            if !self.ledger.delivered.contains(key) && !self.ledger.lost.contains(key) {
                return fail(format!(
                    "an acknowledged message was never delivered: {key} ({} s after the faults ended)",
                    self.opts.quiet_ms / 1000
                ));
            }
        }
        // And the final master's log holds every acknowledged record.
        if let Some(m) = (0..3).find(|&i| matches!(self.nodes[i].role, Role::Master(_))) {
            let epoch = match &self.nodes[m].role {
                Role::Master(ms) => ms.m.epoch,
                _ => 0,
            };
            self.check_new_master(m, epoch)?;
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
