//! Replication: a master hands out its log's bytes; a replica writes the same bytes at the
//! same offsets and applies them as recovery does, deciding nothing itself; epochs mark
//! who was master from where, so a replica that rejoins can cut what a new master never had.
//!
//! The host does the rest (who is master, streaming, acknowledgements): a master reads
//! [`Broker::replication_chunk`] from each replica's end and reports with
//! [`Broker::replicated_to`] what enough replicas hold; under
//! [`Config::replicated_acks`](crate::Config::replicated_acks) replies and visibility wait
//! for it as they wait for a local sync. A replica takes chunks with
//! [`Broker::apply_replicated`], syncs them, and becomes master with [`Broker::promote`].

use super::*;
use crate::record::BLANK_LEN;

/// What a broker does with its log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Takes requests, fires timers, writes records.
    Master,
    /// Writes only what its master wrote; refuses requests and fires no timers.
    Replica,
}

/// Why replicated bytes were not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplicationError {
    /// The broker is not a replica.
    NotReplica,
    /// The bytes start elsewhere than this log's end.
    Gap { end: u64, got: u64 },
    /// The bytes are not whole, valid records at their offsets.
    Invalid { offset: u64, reason: String },
}

impl fmt::Display for ReplicationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplicationError::NotReplica => f.write_str("this broker is not a replica"),
            ReplicationError::Gap { end, got } => {
                write!(f, "bytes from offset {got}, but this log ends at {end}")
            }
            ReplicationError::Invalid { offset, reason } => {
                write!(f, "replicated bytes at offset {offset}: {reason}")
            }
        }
    }
}

impl<S: Storage> Broker<S> {
    /// Opens a replica over `storage` (recovering it as [`Broker::open`] does).
    pub fn open_replica(cfg: Config, storage: S, now: Millis) -> Res<Self, S> {
        let mut b = Self::open(cfg, storage, now)?;
        b.role = Role::Replica;
        Ok(b)
    }

    /// What this broker does with its log.
    #[must_use]
    pub fn role(&self) -> Role {
        self.role
    }

    /// Everything below this log offset is durable as the broker promises it: synced here
    /// and, on a master under [`Config::replicated_acks`](crate::Config::replicated_acks),
    /// held by enough replicas too. A replica's is what it synced. What a backup waits for.
    #[must_use]
    pub fn log_durable(&self) -> u64 {
        let synced = self.log.synced();
        if self.cfg.replicated_acks && self.role == Role::Master {
            synced.min(self.replicated)
        } else {
            synced
        }
    }

    /// Epochs this log has seen: (epoch, offset of its first record), oldest first. A
    /// master writes one when it takes over ([`Broker::promote`]).
    #[must_use]
    pub fn epochs(&self) -> &[(u64, u64)] {
        &self.epochs
    }

    /// For a master: the log's bytes from `from` on (a replica's end), at most about `max`
    /// bytes of whole records (an atomic group whole), or `None` when the replica has it all.
    pub fn replication_chunk(&mut self, from: u64, max: usize) -> Res<Option<Vec<u8>>, S> {
        self.log.read_raw(from, max).map_err(Error::Storage)
    }

    /// For a master: replicas enough for an acknowledgement hold the log below `upto`.
    /// Under [`Config::replicated_acks`](crate::Config::replicated_acks), replies and
    /// visibility wait for it (and for the local sync the flush mode asks for).
    pub fn replicated_to(&mut self, upto: u64) {
        if self.failed.is_some() {
            return;
        }
        let upto = upto.min(self.log.end());
        if upto > self.replicated {
            self.replicated = upto;
            self.release(self.release_point());
        }
    }

    /// For a replica: writes bytes its master wrote at `offset` (this log's end), then
    /// applies them as recovery would. Call [`Broker::sync`] to make them durable before
    /// telling the master they are held. `Ok(Err(_))`: not taken, nothing changed.
    pub fn apply_replicated(
        &mut self,
        offset: u64,
        bytes: &[u8],
    ) -> Res<Result<u64, ReplicationError>, S> {
        self.check_failed()?;
        if self.role != Role::Replica {
            return Ok(Err(ReplicationError::NotReplica));
        }
        if offset != self.log.end() {
            return Ok(Err(ReplicationError::Gap {
                end: self.log.end(),
                got: offset,
            }));
        }
        // Check every record before writing any: whole, valid, each at its own offset, and
        // every atomic group complete.
        let mut records = Vec::new();
        let mut next_segment = None;
        let mut pos = 0usize;
        let mut group_left = 0u32;
        let bad = |at: usize, reason: String| {
            Ok(Err(ReplicationError::Invalid {
                offset: offset + at as u64,
                reason,
            }))
        };
        while pos < bytes.len() {
            if next_segment.is_some() {
                return bad(pos, "bytes after the segment's end blank".into());
            }
            let at = offset + pos as u64;
            match record::decode(&bytes[pos..], self.log.max_record()) {
                Ok(Decoded::Record(r)) => {
                    if r.header.phys_offset != at {
                        return bad(
                            pos,
                            format!("the record says it is at {}", r.header.phys_offset),
                        );
                    }
                    if group_left > 0 {
                        group_left -= 1;
                    } else if let Some(n) = r.prop(BATCH_LEN).and_then(|v| v.parse::<u32>().ok()) {
                        group_left = n.saturating_sub(1);
                    }
                    records.push((at, pos, r.total_size as usize));
                    pos += r.total_size as usize;
                }
                Ok(Decoded::Blank { len }) => {
                    if group_left > 0 {
                        return bad(pos, "a segment ends inside an atomic group".into());
                    }
                    next_segment = Some(at + u64::from(len));
                    pos += BLANK_LEN;
                }
                Ok(Decoded::Repaired { .. }) => {
                    return bad(pos, "a repair blank (repair the master's log first)".into());
                }
                Ok(Decoded::Incomplete { .. }) => return bad(pos, "a record is torn".into()),
                Err(e) => return bad(pos, alloc::format!("{e}")),
            }
        }
        if group_left > 0 {
            return bad(pos, "an atomic group is incomplete".into());
        }
        if let Err(e) = self.log.write_replicated(offset, bytes, next_segment) {
            return Err(self.append_failed(Error::Storage(e)));
        }
        // The same path as recovery: the state a restart would rebuild.
        self.recovering = true;
        for (at, start, len) in records {
            if let Ok(Decoded::Record(r)) = record::decode_trusted(&bytes[start..start + len]) {
                self.apply(at, &r);
            }
        }
        self.recovering = false;
        Ok(Ok(self.log.end()))
    }

    /// A replica becomes the master: it writes epoch `epoch` (above every epoch its log has
    /// seen) at its log's end, makes what it holds visible, and from now on takes requests
    /// and fires timers — checks of the transactions still pending, deliveries of delays,
    /// redeliveries — from the state its log holds. `Ok(Err(_))`: the epoch is not above the
    /// last one, or the broker is already master.
    pub fn promote(&mut self, now: Millis, epoch: u64) -> Res<Result<(), ClientError>, S> {
        self.check_failed()?;
        if self.role != Role::Replica {
            return Ok(Err(ClientError::InvalidArgument(
                "already the master".into(),
            )));
        }
        if let Some(&(last, _)) = self.epochs.last() {
            if epoch <= last {
                return Ok(Err(ClientError::InvalidArgument(format!(
                    "epoch {epoch} is not above the log's last epoch {last}"
                ))));
            }
        }
        self.tick(now);
        self.role = Role::Master;
        for q in &mut self.queues {
            q.visible = q.len();
        }
        self.replicated = self.log.end();
        self.write_state(&StateOp::Epoch { epoch })?;
        self.sync()?;
        Ok(Ok(()))
    }

    /// Cuts `storage` at `offset`, for a replica that rejoins with records its new master
    /// never had (see [`common_prefix`]); open it again afterwards.
    pub fn truncate_storage(storage: &mut S, offset: u64) -> Result<(), S::Error> {
        crate::log::truncate_storage(storage, offset)
    }
}

/// Where two logs stop agreeing, from their epochs ([`Broker::epochs`]) and ends: the end
/// of the last epoch both started at the same offset, capped by either log's end. A replica
/// whose log runs past this point cuts it there ([`Broker::truncate_storage`]) before it
/// follows the master: what lies beyond was never replicated, so never acknowledged.
#[must_use]
pub fn common_prefix(
    local: &[(u64, u64)],
    local_end: u64,
    master: &[(u64, u64)],
    master_end: u64,
) -> u64 {
    let epoch_end = |h: &[(u64, u64)], i: usize, end: u64| h.get(i + 1).map_or(end, |e| e.1);
    // The last epoch (number and start) both histories share.
    let mut shared = None;
    for (i, e) in local.iter().enumerate() {
        if let Some(j) = master.iter().position(|m| m == e) {
            shared = Some((i, j));
        }
    }
    match shared {
        Some((i, j)) => epoch_end(local, i, local_end).min(epoch_end(master, j, master_end)),
        // No epoch in common: they agree up to the first epoch either started.
        None => {
            let first = |h: &[(u64, u64)], end: u64| h.first().map_or(end, |e| e.1);
            first(local, local_end)
                .min(first(master, master_end))
                .min(local_end)
                .min(master_end)
        }
    }
}
