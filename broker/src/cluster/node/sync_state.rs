//! The SyncStateSet rule: which replicas a master counts on for acknowledgements.

use super::*;

/// How long a replica has not held the whole log, ms: 0 while it holds all of it (`acked` at
/// or past `log_end`), else since it last did.
pub(super) fn replica_lag_ms(acked: u64, caught_up_at: Instant, log_end: u64, now: Instant) -> u64 {
    if acked >= log_end {
        0
    } else {
        now.saturating_duration_since(caught_up_at).as_millis() as u64
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
pub(super) fn next_sync_state_set(
    set: &[u32],
    me: u32,
    table: &std::collections::HashMap<u32, replication::ReplicaState>,
    released: u64,
    log_end: u64,
    now: Instant,
    max_lag: Duration,
) -> Vec<u32> {
    let max_lag = max_lag.as_millis() as u64;
    let keeps_up = |s: &replication::ReplicaState| {
        replica_lag_ms(s.acked, s.caught_up_at, log_end, now) <= max_lag
    };
    let mut next: Vec<u32> = set
        .iter()
        .copied()
        .filter(|&n| n == me || table.get(&n).is_some_and(keeps_up))
        .collect();
    let mut ids: Vec<u32> = table.keys().copied().collect();
    ids.sort_unstable();
    for n in ids {
        let s = &table[&n];
        if n != me && !next.contains(&n) && s.connected && s.acked >= released && keeps_up(s) {
            next.push(n);
        }
    }
    next.sort_unstable();
    next
}

#[cfg(test)]
mod sync_state_set_tests {
    use std::collections::HashMap;

    use super::*;
    use replication::ReplicaState;

    pub(super) fn replica(acked: u64, caught_up_ago: Duration, now: Instant) -> ReplicaState {
        ReplicaState {
            acked,
            caught_up_at: now - caught_up_ago,
            connected: true,
            conn: 1,
            mark: None,
        }
    }

    const LAG: Duration = Duration::from_millis(3000);

    #[test]
    pub(super) fn a_stalled_member_with_its_connection_open_leaves_and_stays_out() {
        let now = Instant::now();
        // Node 2 stopped acknowledging at 1,000 four seconds ago (its socket still open);
        // node 3 is current. `released` is stuck at node 2's 1,000.
        let table = HashMap::from([
            (2, replica(1_000, Duration::from_secs(4), now)),
            (3, replica(50_000, Duration::ZERO, now)),
        ]);
        let next = next_sync_state_set(&[1, 2, 3], 1, &table, 1_000, 50_000, now, LAG);
        assert_eq!(next, [1, 3], "node 2 must leave and not come straight back");
        // Once out it stays out while it is behind, even holding everything released.
        let next = next_sync_state_set(&[1, 3], 1, &table, 1_000, 50_000, now, LAG);
        assert_eq!(next, [1, 3]);
    }

    #[test]
    pub(super) fn a_replica_that_keeps_up_with_a_moving_end_stays_caught_up() {
        let t0 = Instant::now();
        let mut r = replica(0, Duration::ZERO, t0);
        // Every look the log has grown by 1,000 and the replica holds what the previous look
        // saw: never the end itself, always caught up as of the look before.
        for i in 1..=100u64 {
            let now = t0 + Duration::from_millis(100 * i);
            r.acked = 1_000 * (i - 1);
            r.mark(1_000 * i, now);
            let lag = replica_lag_ms(r.acked, r.caught_up_at, 1_000 * i, now);
            assert!(lag <= 200, "look {i}: lag {lag} ms");
        }
        // It stops acknowledging: its lag grows with the time since.
        let stop = t0 + Duration::from_millis(10_000);
        for i in 1..=40u64 {
            r.mark(100_000 + i, stop + Duration::from_millis(100 * i));
        }
        let now = stop + Duration::from_millis(4_000);
        assert!(replica_lag_ms(r.acked, r.caught_up_at, 100_040, now) > 3_000);
    }

    #[test]
    pub(super) fn a_replica_that_caught_up_comes_back_and_a_lagging_one_within_the_bound_stays() {
        let now = Instant::now();
        let table = HashMap::from([
            // Caught up just now.
            (2, replica(60_000, Duration::ZERO, now)),
            // Behind, but it held the whole log 1 s ago: within the 3 s bound.
            (3, replica(55_000, Duration::from_secs(1), now)),
        ]);
        let next = next_sync_state_set(&[1, 3], 1, &table, 50_000, 60_000, now, LAG);
        assert_eq!(next, [1, 2, 3]);
        // One that does not hold everything acknowledged does not come in.
        let table = HashMap::from([(2, replica(40_000, Duration::ZERO, now))]);
        assert_eq!(
            next_sync_state_set(&[1], 1, &table, 50_000, 60_000, now, LAG),
            [1]
        );
        // Nor one whose connection is gone.
        let mut gone = replica(60_000, Duration::ZERO, now);
        gone.connected = false;
        let table = HashMap::from([(2, gone)]);
        assert_eq!(
            next_sync_state_set(&[1], 1, &table, 50_000, 60_000, now, LAG),
            [1]
        );
    }
}
