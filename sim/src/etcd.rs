//! The etcd model: a linearizable KV with revisions, leases that expire on its own clock,
//! and compare-and-swap transactions; and the calls a node makes.

use super::*;

/// A value in the group's keys (the JSON the broker writes, as data).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    Epoch(u64),
    Master { node: u32, epoch: u64 },
    Set { epoch: u64, members: Vec<u32> },
}

#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) val: Val,
    pub(crate) mod_rev: i64,
    pub(crate) lease: i64,
}

/// The keys of `cluster/mod.rs` this simulation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Epoch,
    Master,
    SyncStateSet,
}

#[derive(Clone, Debug)]
pub(crate) enum Cmp {
    /// The key's mod revision is this (0: absent).
    ModRev(Key, i64),
    ValueIs(Key, Val),
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Put(Key, Val, i64),
}

/// A linearizable KV with revisions, leases and transactions.
#[derive(Debug, Default)]
pub struct Etcd {
    pub(crate) rev: i64,
    pub(crate) kv: BTreeMap<Key, Entry>,
    /// Lease id → expiry (true time).
    pub(crate) leases: BTreeMap<i64, Millis>,
    pub(crate) next_lease: i64,
    /// Down until (no call is answered meanwhile; its state and lease clocks go on).
    pub(crate) down_until: Millis,
}

/// Every key of the group at one revision, as a node reads them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Snapshot {
    pub(crate) epoch: (u64, i64),
    pub(crate) master: Option<(u32, u64, i64)>,
    pub(crate) set: (Option<Vec<u32>>, i64),
}

impl Etcd {
    pub(crate) fn expire(&mut self, now: Millis) {
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
    pub(crate) fn revoke(&mut self, id: i64) {
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
    pub(crate) fn snapshot(&self) -> Snapshot {
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
    pub(crate) fn apply(&mut self, call: &Call, now: Millis) -> Answer {
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
pub(crate) enum Call {
    Read,
    Grant,
    KeepAlive(i64),
    Revoke(i64),
    Txn(Vec<Cmp>, Vec<Op>),
}

#[derive(Clone, Debug)]
pub(crate) enum Answer {
    Read(Snapshot),
    Lease(i64),
    Ttl(Millis),
    Txn(bool),
    Done,
}

/// Why a node made an etcd call (what to do with the answer).
#[derive(Clone, Debug)]
pub(crate) enum Purpose {
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
