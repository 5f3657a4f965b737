//! The cluster's decisions, sans-IO (issue #32 item 2): who may campaign and with which
//! epoch, until when a master holds its lease, which replicas are in the SyncStateSet, what
//! may be released to clients, and whom a handoff goes to. No tokio, no etcd, no clock:
//! time comes in as [`Millis`] of a monotonic clock the host reads, events come in as method
//! calls, and what to do goes out as [`Action`]s. The real node (`cluster/node.rs`,
//! `cluster/replication.rs`) and the deterministic simulation of a whole group (`sim/`,
//! crate `rocklet-sim`, which compiles this very file) drive this same code; neither holds
//! a copy of a rule. So it depends on nothing but `std` and `rocklet_core`.
//!
//! Driving a master, in the order the host does it:
//!
//! - [`Master::new`] once the election transaction succeeded (its lease asked at `sent`).
//! - Each answered lease renewal: [`lease_deadline`] gives the new deadline; the host keeps
//!   the largest (it is read by a watchdog and on the core thread).
//! - Replica events go to the [`ReplicaTable`]: [`ReplicaState::connected`] on a HELLO the
//!   master accepted, [`ReplicaState::acked`] on each ACK, [`ReplicaState::closed`] when the
//!   connection ends.
//! - At each look (at least every 100 ms, and on every ACK): [`Master::tick`] with the log's
//!   end and the deadline. Its actions, in order: [`Action::Fence`] (stop: nothing more may
//!   be released), [`Action::WriteSyncStateSet`] (one etcd transaction on the epoch; answer
//!   with [`Master::set_written`] or fence when it failed because the epoch moved),
//!   [`Action::Release`] (call the core's `replicated_to` — checking [`holds_lease`] again
//!   right before — then [`Master::released`]).
//!
//! The safety argument is the module doc of `cluster/mod.rs`; each rule's own argument is on
//! its function.

use std::collections::BTreeMap;

use rocklet_core::record::{BLANK_LEN, BLANK_MAGIC};

/// Milliseconds of the host's monotonic clock.
pub type Millis = u64;

/// What a group's node decides with: from its config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// This node's id.
    pub me: u32,
    /// Sync replication: replies wait for the SyncStateSet (else they go out at once).
    pub sync: bool,
    /// Members the set must have for a write to be answered (sync), the master included.
    pub min_in_sync: u32,
    /// A member that has not held the whole log for longer leaves the set.
    pub max_lag_ms: Millis,
    /// The lease's TTL.
    pub ttl_ms: Millis,
}

impl Params {
    /// The margin a master keeps before its lease could expire: a quarter TTL, at least
    /// 300 ms. It covers the drift between this node's clock and etcd's while the lease runs
    /// (up to a quarter of the TTL: 25 %) and the time from the deadline check to a reply.
    #[must_use]
    pub fn margin_ms(&self) -> Millis {
        (self.ttl_ms / 4).max(300)
    }
}

/// The deadline a lease renewal (or grant) asked at `sent` and answered with `granted_ms`
/// gives: etcd starts the TTL when it handles the request, after `sent`, so it cannot expire
/// the lease before `sent + granted`; the master stops a margin before that.
#[must_use]
pub fn lease_deadline(p: &Params, sent: Millis, granted_ms: Millis) -> Millis {
    (sent + granted_ms.min(p.ttl_ms)).saturating_sub(p.margin_ms())
}

/// Whether a master whose deadline is `deadline` surely holds its lease at `now`: nothing is
/// released at or past the deadline.
#[must_use]
pub fn holds_lease(now: Millis, deadline: Millis) -> bool {
    now < deadline
}

/// Whether a node that sees no master key may campaign: it is in the SyncStateSet (so it
/// holds every acknowledged record: in sync mode every member acknowledged it, in async mode
/// a member held the whole log within `max_lag_ms`), or the group has none yet; and it is
/// not stopping.
#[must_use]
pub fn may_campaign(set: Option<&[u32]>, me: u32, leaving: bool) -> bool {
    !leaving && set.is_none_or(|s| s.contains(&me))
}

/// The epoch a campaign asks for: above etcd's and above every epoch this node's log has
/// seen (a log may hold an epoch whose etcd key was lost with an etcd reset).
#[must_use]
pub fn next_epoch(etcd_epoch: u64, log_last_epoch: u64) -> u64 {
    etcd_epoch.max(log_last_epoch) + 1
}

/// One replica as its master sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaState {
    /// The replica holds the log below this, synced.
    pub acked: u64,
    /// When it last held the whole log (acked at or past the log's end then).
    pub caught_up_at: Millis,
    /// A connection serves it now.
    pub connected: bool,
    /// Which connection (a newer one replaces an older).
    pub conn: u64,
    /// The log's end when the master last looked, and when: once the replica acknowledges
    /// that far it held the whole log as of then (`caught_up_at`), so a replica that keeps up
    /// under a steady stream of writes, never quite at the moving end, still counts as caught
    /// up ([`ReplicaState::mark`]).
    pub mark: Option<(u64, Millis)>,
}

/// Every replica a master has heard of, by node id (ordered: decisions never depend on a
/// hash order).
pub type ReplicaTable = BTreeMap<u32, ReplicaState>;

impl ReplicaState {
    /// A replica connected on connection `conn`, holding the log below `start` (what both
    /// histories share): a new entry, or the old one taken over by the new connection.
    pub fn connected(
        table: &mut ReplicaTable,
        node: u32,
        conn: u64,
        start: u64,
        log_end: u64,
        now: Millis,
    ) {
        let e = table.entry(node).or_insert(ReplicaState {
            acked: start,
            caught_up_at: now,
            connected: true,
            conn,
            mark: None,
        });
        e.acked = start;
        e.connected = true;
        e.conn = conn;
        if start >= log_end {
            e.caught_up_at = now;
        }
    }

    /// An ACK on connection `conn`: the replica holds the log below `end`, synced. An ACK of
    /// a replaced connection is ignored; an acknowledged offset never goes back.
    pub fn acked(
        table: &mut ReplicaTable,
        node: u32,
        conn: u64,
        end: u64,
        log_end: u64,
        now: Millis,
    ) {
        if let Some(s) = table.get_mut(&node).filter(|s| s.conn == conn) {
            s.acked = s.acked.max(end);
            if end >= log_end {
                s.caught_up_at = now;
            }
        }
    }

    /// Connection `conn` of `node` ended (a replaced connection's end changes nothing).
    pub fn closed(table: &mut ReplicaTable, node: u32, conn: u64) {
        if let Some(s) = table.get_mut(&node).filter(|s| s.conn == conn) {
            s.connected = false;
        }
    }

    /// Moves `caught_up_at` to the time of the mark it has reached and sets a new mark at
    /// `log_end` (RocketMQ's lastCatchUpTime: caught up with the master's offset as of an
    /// earlier look). Called by the master at each look at its replicas.
    pub fn mark(&mut self, log_end: u64, now: Millis) {
        match self.mark {
            Some((end, at)) if self.acked >= end => {
                self.caught_up_at = self.caught_up_at.max(at);
                self.mark = Some((log_end, now));
            }
            Some(_) => {}
            None => self.mark = Some((log_end, now)),
        }
    }

    /// How long it has not held the whole log, ms: 0 while it holds all of it (`acked` at or
    /// past `log_end`), else since it last did.
    #[must_use]
    pub fn lag_ms(&self, log_end: u64, now: Millis) -> Millis {
        if self.acked >= log_end {
            0
        } else {
            now.saturating_sub(self.caught_up_at)
        }
    }
}

/// The master's next SyncStateSet, from what it knows of its replicas now.
///
/// A member stays while it keeps up: it held the whole log within `max_lag` (a replica that
/// stopped acknowledging, its connection open or not, goes once that runs out). A replica
/// comes (back) in only when it is connected, holds everything acknowledged so far
/// (`released`) *and* keeps up by the same rule. Without the last condition a stalled member
/// came back at once: its own stalled acknowledgement held `released` where it was, so it
/// always "held everything released", and every write waited on it for the whole stall.
#[must_use]
pub fn next_sync_state_set(
    p: &Params,
    set: &[u32],
    table: &ReplicaTable,
    released: u64,
    log_end: u64,
    now: Millis,
) -> Vec<u32> {
    let keeps_up = |s: &ReplicaState| s.lag_ms(log_end, now) <= p.max_lag_ms;
    let mut next: Vec<u32> = set
        .iter()
        .copied()
        .filter(|&n| n == p.me || table.get(&n).is_some_and(keeps_up))
        .collect();
    for (&n, s) in table {
        if n != p.me && !next.contains(&n) && s.connected && s.acked >= released && keeps_up(s) {
            next.push(n);
        }
    }
    next.sort_unstable();
    next
}

/// What may be released to clients under sync replication: what every member of `set` other
/// than the master holds (all of the log when the master is alone), and nothing while the set
/// is smaller than `min_in_sync`. `None` under async replication (replies do not wait).
#[must_use]
pub fn release_upto(p: &Params, set: &[u32], table: &ReplicaTable, log_end: u64) -> Option<u64> {
    if !p.sync || set.len() < p.min_in_sync as usize {
        return None;
    }
    Some(
        set.iter()
            .filter(|&&n| n != p.me)
            .map(|n| table.get(n).map_or(0, |s| s.acked))
            .min()
            .unwrap_or(log_end),
    )
}

/// The replica a handoff goes to: `to` if it is a member of `set` other than the master, or
/// the member that has acknowledged the most (the lowest id of equals). `Err`: why none.
pub fn handoff_target(
    p: &Params,
    set: &[u32],
    to: Option<u32>,
    table: &ReplicaTable,
) -> Result<u32, String> {
    let acked = |n: u32| table.get(&n).map_or(0, |s| s.acked);
    match to {
        Some(n) if n == p.me => Err(format!("node {n} is the master already")),
        Some(n) if !set.contains(&n) => Err(format!(
            "node {n} is not in the SyncStateSet {set:?}: only an in-sync replica holds every acknowledged write"
        )),
        Some(n) => Ok(n),
        None => set
            .iter()
            .copied()
            .filter(|&n| n != p.me)
            .max_by_key(|&n| (acked(n), std::cmp::Reverse(n)))
            .ok_or_else(|| {
                format!("the SyncStateSet {set:?} has no replica: no other node holds every acknowledged write")
            }),
    }
}

/// Where the log goes on after a replication chunk read at `from`: past its last record, or,
/// when it ends with a segment's end blank, at the next segment (the blank's length says
/// where).
#[must_use]
pub fn next_offset(from: u64, chunk: &[u8]) -> u64 {
    let mut pos = 0usize;
    while pos + BLANK_LEN <= chunk.len() {
        let len = u32::from_be_bytes(chunk[pos..pos + 4].try_into().expect("4 bytes"));
        let magic = u32::from_be_bytes(chunk[pos + 4..pos + 8].try_into().expect("4 bytes"));
        if magic == BLANK_MAGIC {
            return from + pos as u64 + u64::from(len);
        }
        if len == 0 {
            break;
        }
        pos += len as usize;
    }
    from + chunk.len() as u64
}

/// Whether a replica follows a master of `master_epoch` (the master key's): never one below
/// the last epoch its own log has seen (a stale key). `Err`: why not.
pub fn may_follow(master_epoch: u64, log_last_epoch: u64) -> Result<(), String> {
    if master_epoch < log_last_epoch {
        Err(format!(
            "the master's epoch {master_epoch} is below this log's last epoch {log_last_epoch}"
        ))
    } else {
        Ok(())
    }
}

/// What a replica does with its master's WELCOME.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Welcomed {
    /// Refuse the stream (the connection ends): why.
    Refuse(String),
    /// Cut the log at this offset (what both histories share), reopen, connect again: what
    /// lies beyond never reached every set member, so (sync) was never acknowledged.
    Cut(u64),
    /// Take chunks from the log's end.
    Follow,
}

/// A WELCOME from `welcome_epoch` naming `start` as shared, to a replica following the master
/// of `epoch` whose log ends at `end`.
#[must_use]
pub fn welcomed(epoch: u64, welcome_epoch: u64, start: u64, end: u64) -> Welcomed {
    if welcome_epoch != epoch {
        Welcomed::Refuse(format!(
            "WELCOME from epoch {welcome_epoch}, but the master of record has epoch {epoch}"
        ))
    } else if start < end {
        Welcomed::Cut(start)
    } else {
        Welcomed::Follow
    }
}

/// Whether a master whose log starts at `log_start` can serve a replica that shares its log
/// up to `shared`: the bytes from there must still be held. A replica away longer than the
/// master kept its oldest segments (or new and empty once the master's log no longer starts
/// at 0) cannot catch up by replication, and is told so, naming both offsets.
pub fn servable(shared: u64, log_start: u64) -> Result<(), String> {
    if shared >= log_start {
        return Ok(());
    }
    Err(format!(
        "this replica's log agrees with the master's up to offset {shared}, below the master's log start {log_start} (retention retired the segments between): it cannot catch up by replication; restore it from a backup of the master (rocklet admin backup --to DIR on the master, then rocklet admin restore --from DIR --to <the replica's data dir>) and start it again"
    ))
}

/// Why a master stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fenced {
    /// Its deadline passed: another master may be elected once the lease expires.
    LeaseDeadline,
    /// A transaction on its epoch failed: the epoch moved on, a newer master exists.
    EpochMoved,
}

impl Fenced {
    /// For the log.
    #[must_use]
    pub fn reason(self) -> &'static str {
        match self {
            Fenced::LeaseDeadline => {
                "the lease was not renewed in time: another master may be elected once it expires"
            }
            Fenced::EpochMoved => "the epoch moved on: a newer master exists",
        }
    }
}

/// What a master's host must do, from [`Master::tick`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Stop releasing and exit.
    Fence(Fenced),
    /// Write this SyncStateSet to etcd, *if* the epoch is still this master's, before
    /// anything is released without the members it drops; answer with
    /// [`Master::set_written`].
    WriteSyncStateSet(Vec<u32>),
    /// Release replies up to this log offset (the core's `replicated_to`), checking the lease
    /// again right before; answer with [`Master::released`].
    Release(u64),
}

/// A master's decisions over one epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Master {
    pub p: Params,
    pub epoch: u64,
    /// The SyncStateSet etcd holds (written, or the election's `{me}`).
    pub set: Vec<u32>,
    /// A set asked for and not yet answered: no other is asked meanwhile.
    pub writing: Option<Vec<u32>>,
    /// Released to clients up to here (the core's `replicated_to`).
    pub released: u64,
    /// Handing over: nothing is released (see `hand_over` in `cluster/node/handoff.rs`).
    pub handing_over: bool,
}

impl Master {
    /// A master of `epoch` whose log ends at `log_end` (all of it released: promote marks
    /// what it holds as replicated), with the election's set `{me}`.
    #[must_use]
    pub fn new(p: Params, epoch: u64, log_end: u64) -> Self {
        Master {
            p,
            epoch,
            set: vec![p.me],
            writing: None,
            released: log_end,
            handing_over: false,
        }
    }

    /// One look at the replicas: marks their progress, then what to do (see [`Action`]).
    pub fn tick(
        &mut self,
        now: Millis,
        deadline: Millis,
        log_end: u64,
        table: &mut ReplicaTable,
    ) -> Vec<Action> {
        if !holds_lease(now, deadline) {
            return vec![Action::Fence(Fenced::LeaseDeadline)];
        }
        for s in table.values_mut() {
            s.mark(log_end, now);
        }
        let mut out = Vec::new();
        if self.writing.is_none() {
            let next = next_sync_state_set(&self.p, &self.set, table, self.released, log_end, now);
            if next != self.set {
                self.writing = Some(next.clone());
                out.push(Action::WriteSyncStateSet(next));
            }
        }
        // While a set is being written either may be the one etcd holds: releases wait for
        // the members of both (a replica coming in holds what was released, not more).
        if !self.handing_over {
            let upto = match &self.writing {
                Some(w) => release_upto(&self.p, w, table, log_end)
                    .zip(release_upto(&self.p, &self.set, table, log_end))
                    .map(|(a, b)| a.min(b)),
                None => release_upto(&self.p, &self.set, table, log_end),
            };
            if let Some(upto) = upto {
                if upto > self.released {
                    out.push(Action::Release(upto));
                }
            }
        }
        out
    }

    /// etcd's answer to [`Action::WriteSyncStateSet`]: `Ok(true)` written, `Ok(false)` the
    /// epoch moved on (fence), `Err(())` unknown (etcd unreachable: keep the old set, ask
    /// again at the next look).
    pub fn set_written(&mut self, outcome: Result<bool, ()>) -> Option<Fenced> {
        let asked = self.writing.take();
        match (outcome, asked) {
            (Ok(true), Some(next)) => {
                self.set = next;
                None
            }
            (Ok(false), _) => Some(Fenced::EpochMoved),
            _ => None,
        }
    }

    /// The host released up to `upto`.
    pub fn released(&mut self, upto: u64) {
        self.released = self.released.max(upto);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Params = Params {
        me: 1,
        sync: true,
        min_in_sync: 2,
        max_lag_ms: 3_000,
        ttl_ms: 2_000,
    };

    fn replica(acked: u64, caught_up_ago: Millis, now: Millis) -> ReplicaState {
        ReplicaState {
            acked,
            caught_up_at: now - caught_up_ago,
            connected: true,
            conn: 1,
            mark: None,
        }
    }

    #[test]
    fn a_stalled_member_with_its_connection_open_leaves_and_stays_out() {
        let now = 100_000;
        // Node 2 stopped acknowledging at 1,000 four seconds ago (its socket still open);
        // node 3 is current. `released` is stuck at node 2's 1,000.
        let table = ReplicaTable::from([
            (2, replica(1_000, 4_000, now)),
            (3, replica(50_000, 0, now)),
        ]);
        let next = next_sync_state_set(&P, &[1, 2, 3], &table, 1_000, 50_000, now);
        assert_eq!(next, [1, 3], "node 2 must leave and not come straight back");
        // Once out it stays out while it is behind, even holding everything released.
        let next = next_sync_state_set(&P, &[1, 3], &table, 1_000, 50_000, now);
        assert_eq!(next, [1, 3]);
    }

    #[test]
    fn a_replica_that_keeps_up_with_a_moving_end_stays_caught_up() {
        let t0 = 100_000;
        let mut r = replica(0, 0, t0);
        // Every look the log has grown by 1,000 and the replica holds what the previous look
        // saw: never the end itself, always caught up as of the look before.
        for i in 1..=100u64 {
            let now = t0 + 100 * i;
            r.acked = 1_000 * (i - 1);
            r.mark(1_000 * i, now);
            let lag = r.lag_ms(1_000 * i, now);
            assert!(lag <= 200, "look {i}: lag {lag} ms");
        }
        // It stops acknowledging: its lag grows with the time since.
        let stop = t0 + 10_000;
        for i in 1..=40u64 {
            r.mark(100_000 + i, stop + 100 * i);
        }
        assert!(r.lag_ms(100_040, stop + 4_000) > 3_000);
    }

    #[test]
    fn a_replica_that_caught_up_comes_back_and_a_lagging_one_within_the_bound_stays() {
        let now = 100_000;
        let table = ReplicaTable::from([
            // Caught up just now.
            (2, replica(60_000, 0, now)),
            // Behind, but it held the whole log 1 s ago: within the 3 s bound.
            (3, replica(55_000, 1_000, now)),
        ]);
        let next = next_sync_state_set(&P, &[1, 3], &table, 50_000, 60_000, now);
        assert_eq!(next, [1, 2, 3]);
        // One that does not hold everything acknowledged does not come in.
        let table = ReplicaTable::from([(2, replica(40_000, 0, now))]);
        assert_eq!(
            next_sync_state_set(&P, &[1], &table, 50_000, 60_000, now),
            [1]
        );
        // Nor one whose connection is gone.
        let mut gone = replica(60_000, 0, now);
        gone.connected = false;
        let table = ReplicaTable::from([(2, gone)]);
        assert_eq!(
            next_sync_state_set(&P, &[1], &table, 50_000, 60_000, now),
            [1]
        );
    }

    #[test]
    fn nothing_is_released_past_the_deadline_nor_below_min_in_sync_nor_in_async() {
        let mut table = ReplicaTable::from([(2, replica(500, 0, 1_000))]);
        let mut m = Master::new(P, 3, 100);
        // Alone in the set: below min_in_sync (2), nothing released; node 2 is asked in.
        assert_eq!(
            m.tick(1_000, 2_000, 500, &mut table),
            [Action::WriteSyncStateSet(vec![1, 2])]
        );
        assert_eq!(m.set_written(Ok(true)), None);
        assert_eq!(
            m.tick(1_100, 2_000, 600, &mut table),
            [Action::Release(500)]
        );
        m.released(500);
        // At the deadline: fenced, nothing else.
        assert_eq!(
            m.tick(2_000, 2_000, 600, &mut table),
            [Action::Fence(Fenced::LeaseDeadline)]
        );
        let mut a = Master::new(Params { sync: false, ..P }, 3, 100);
        a.set = vec![1, 2];
        assert!(a.tick(1_100, 2_000, 600, &mut table).is_empty());
    }

    #[test]
    fn campaign_and_lease_rules() {
        assert!(may_campaign(None, 1, false));
        assert!(may_campaign(Some(&[1, 2]), 1, false));
        assert!(!may_campaign(Some(&[2]), 1, false));
        assert!(!may_campaign(None, 1, true));
        assert_eq!(next_epoch(4, 6), 7);
        // Granted 2 s asked at 10 s: 500 ms margin.
        assert_eq!(lease_deadline(&P, 10_000, 2_000), 11_500);
        // More than the TTL granted counts as the TTL.
        assert_eq!(lease_deadline(&P, 10_000, 60_000), 11_500);
        assert!(holds_lease(11_499, 11_500) && !holds_lease(11_500, 11_500));
    }

    #[test]
    fn a_replica_refuses_a_stale_master_and_cuts_only_a_divergent_tail() {
        assert!(may_follow(4, 5).is_err());
        // A replica below the master's log start is told so, naming both offsets.
        assert_eq!(servable(0, 0), Ok(()));
        assert_eq!(servable(4096, 4096), Ok(()));
        let why = servable(0, 4096).unwrap_err();
        assert!(
            why.contains("offset 0") && why.contains("log start 4096"),
            "{why}"
        );
        assert_eq!(may_follow(5, 5), Ok(()));
        assert!(matches!(welcomed(5, 4, 100, 100), Welcomed::Refuse(_)));
        assert_eq!(welcomed(5, 5, 80, 100), Welcomed::Cut(80));
        assert_eq!(welcomed(5, 5, 100, 100), Welcomed::Follow);
    }

    #[test]
    fn handoff_goes_to_the_most_advanced_member() {
        let table = ReplicaTable::from([(2, replica(500, 0, 1_000)), (3, replica(700, 0, 1_000))]);
        assert_eq!(handoff_target(&P, &[1, 2, 3], None, &table), Ok(3));
        assert_eq!(handoff_target(&P, &[1, 2, 3], Some(2), &table), Ok(2));
        assert!(handoff_target(&P, &[1, 2], Some(3), &table).is_err());
        assert!(handoff_target(&P, &[1], None, &table).is_err());
    }
}
