//! What is durable: syncs (the host's, the core's own timers'), replies and visibility held
//! until a sync covers them, a failed sync that fails the broker, and a clean close.

use super::*;

impl<S: Storage> Broker<S> {
    /// For hosts that sync off the thread that drives the broker: the log offset a sync
    /// started now must make durable, or `None` when everything is. Start the sync (e.g.
    /// `FileStorage::detach_sync` and its `run` on another thread), keep handling requests
    /// meanwhile, and report it with [`Broker::synced_to`].
    #[must_use]
    pub fn sync_target(&self) -> Option<u64> {
        self.needs_sync().then(|| self.log.end())
    }

    /// Records that the storage is durable below `upto` (a target from
    /// [`Broker::sync_target`] whose sync the host completed): releases the replies held for
    /// writes that end at or below it and makes their messages visible. Later writes stay
    /// held until a sync covers them. [`Broker::sync`] is the same for everything, run here.
    pub fn synced_to(&mut self, upto: u64) {
        let upto = upto.min(self.log.end());
        if upto <= self.log.synced() {
            return;
        }
        if self.failed.is_some() {
            return;
        }
        self.log.mark_synced(upto);
        self.stats.syncs += 1;
        if !self.needs_sync() {
            self.flush_due = None;
        }
        self.release(self.release_point());
    }

    /// Records that a sync the host ran (see [`Broker::sync_target`]) failed. The broker is
    /// failed from then on, as after a failed [`Broker::sync`]: see [`Broker::failed`].
    pub fn sync_failed(&mut self, reason: &str) {
        self.fail(String::from(reason));
    }

    /// Why the broker stopped taking requests, if it did: a sync failed. On Linux a failed
    /// fsync can mark the pages it could not write as clean, so a later sync that succeeds
    /// proves nothing about them; the broker never treats one as if the first had not failed.
    /// Every reply that waited for a sync came out as [`Output::Failed`], and every call that
    /// could change state returns [`Error::Failed`]. Drop the broker and open the storage
    /// again: recovery keeps what is really durable.
    #[must_use]
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    pub(super) fn fail(&mut self, reason: String) {
        if self.failed.is_some() {
            return;
        }
        for (_, id, _) in core::mem::take(&mut self.held) {
            self.outputs.push_back(Output::Failed {
                id,
                reason: reason.clone(),
            });
        }
        self.unsynced.clear();
        self.rescans.clear();
        self.flush_due = None;
        self.failed = Some(reason);
    }

    pub(super) fn check_failed(&self) -> Res<(), S> {
        match &self.failed {
            Some(reason) => Err(Error::Failed {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Makes everything appended durable; releases held replies and makes their messages
    /// visible. When the storage's sync fails the broker is failed for good (see
    /// [`Broker::failed`]) and this returns the storage's error.
    pub fn sync(&mut self) -> Res<(), S> {
        self.check_failed()?;
        if self.log.synced() < self.log.end() {
            if let Err(e) = self.log.sync() {
                self.fail(alloc::format!("sync failed: {e}"));
                return Err(Error::Storage(e));
            }
            self.stats.syncs += 1;
        }
        self.flush_due = None;
        self.release(self.release_point());
        Ok(())
    }

    /// A clean stop: syncs everything and has the storage record where the log ends and that
    /// it was closed cleanly ([`Storage::record_log_end`]), so the next open knows no write
    /// of this run failed unseen. Append nothing after it; open the storage again to go on.
    pub fn close(&mut self) -> Res<(), S> {
        self.flush_tails();
        // The index's pending entries too (a failed write keeps them: the next open
        // rebuilds or cuts the file as it does after a crash).
        let _ = self.index.flush(&mut self.log.storage);
        if let Some(e) = self.side_error.take() {
            return Err(e);
        }
        self.sync()?;
        if let Err(e) = self.log.close() {
            self.fail(alloc::format!("closing the log failed: {e}"));
            return Err(Error::Storage(e));
        }
        Ok(())
    }

    /// Where replies and visibility may go: what the flush mode needs synced locally, and,
    /// under [`Config::replicated_acks`], what enough replicas hold.
    pub(super) fn release_point(&self) -> u64 {
        let local = match self.cfg.flush {
            FlushMode::Sync => self.log.synced(),
            FlushMode::Async => self.log.end(),
        };
        if self.cfg.replicated_acks {
            local.min(self.replicated)
        } else {
            local
        }
    }

    /// Whether what a write makes visible waits for a sync or replication first.
    pub(super) fn holds_visibility(&self) -> bool {
        self.cfg.flush == FlushMode::Sync || self.cfg.replicated_acks
    }

    /// Under sync flush: what writes ending at or below `upto` held back — their units in
    /// the consume queues, their replies — becomes visible and goes out.
    pub(super) fn release(&mut self, upto: u64) {
        while let Some(&(end, q)) = self.unsynced.front() {
            if end > upto {
                break;
            }
            self.unsynced.pop_front();
            let queue = &mut self.queues[q as usize];
            if queue.visible < queue.len() {
                queue.visible += 1;
                self.mark_notify(q);
            }
        }
        while self.held.front().is_some_and(|h| h.0 <= upto) {
            if let Some((_, id, reply)) = self.held.pop_front() {
                self.outputs.push_back(Output::Reply { id, reply });
            }
        }
        while self.rescans.front().is_some_and(|r| r.0 <= upto) {
            if let Some((_, q)) = self.rescans.pop_front() {
                self.mark_notify(q);
            }
        }
    }
}
