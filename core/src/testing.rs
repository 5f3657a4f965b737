//! Test support: storage that crashes or fails on cue, and a virtual-time simulator.
//! Not covered by semver.

use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::storage::{MemStorage, Storage};
use crate::{Broker, CheckRequest, Config, Error, Millis, Output, Reply, Request, Resolution};

/// An injected storage failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injected(pub String);

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "injected failure: {}", self.0)
    }
}

impl core::error::Error for Injected {}

/// Storage that keeps two images, as redb's crash tests do: the *live* one every read sees,
/// and the *durable* one a crash leaves behind (what the last sync covered). It can also
/// lose power after N appended bytes, and fail the Nth append or sync.
///
/// A failed sync behaves as Linux's fsync does on a write error: the bytes it could not
/// write are gone for good. The page cache marks them clean, so reads still see them (the
/// live image keeps them) but no later sync writes them: a later sync that succeeds makes
/// everything else durable and leaves zeros where they were.
#[derive(Clone, Debug, Default)]
pub struct CrashStorage {
    live: MemStorage,
    durable: MemStorage,
    /// Appended bytes so far.
    pub appended: u64,
    /// Syncs so far.
    pub syncs: u64,
    /// After this many appended bytes, further bytes are dropped (power cut mid-write).
    pub cut_after_bytes: Option<u64>,
    /// Syncs after this many no longer make anything durable.
    pub freeze_after_syncs: Option<u64>,
    /// Fail appends while this is set (ENOSPC).
    pub fail_appends: bool,
    /// Fail syncs while this is set (EIO).
    pub fail_syncs: bool,
    /// Fail side-file writes while this is set (ENOSPC for the files beside the log only).
    pub fail_side_writes: bool,
    /// Byte ranges a failed sync lost: (segment, from, to). No sync makes them durable.
    lost: Vec<(u64, u64, u64)>,
    /// [`Storage::log_start`]: what reads see, and what a crash leaves (the record is
    /// written durably at once, unless the power was cut before: see `cut_after_bytes`).
    log_start: Option<Vec<u8>>,
    durable_log_start: Option<Vec<u8>>,
    /// [`Storage::checkpoint`], as `log_start`: written durably at once (unless the power
    /// was cut before).
    checkpoint: Option<Vec<u8>>,
    durable_checkpoint: Option<Vec<u8>>,
    /// Bumped by every [`Storage::record_checkpoint`] and [`Storage::remove_checkpoint`]: a
    /// detached checkpoint taken before writes nothing ([`CrashStorage::complete_checkpoint`]).
    checkpoint_gen: u64,
}

/// A sync detached with a checkpoint ([`CrashStorage::detach_checkpoint`]), as
/// `FileStorage::detach_checkpoint`.
#[derive(Clone, Debug)]
pub struct CrashCheckpoint {
    image: MemStorage,
    bytes: Vec<u8>,
    gen: u64,
    /// [`CrashStorage::syncs`] when detached.
    syncs: u64,
}

impl CrashStorage {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
    /// A store whose live and durable images are `mem`.
    #[must_use]
    pub fn from_mem(mut mem: MemStorage) -> Self {
        let start = mem.log_start().unwrap_or_default();
        let checkpoint = mem.checkpoint().unwrap_or_default();
        CrashStorage {
            live: mem.clone(),
            durable: mem,
            log_start: start.clone(),
            durable_log_start: start,
            checkpoint: checkpoint.clone(),
            durable_checkpoint: checkpoint,
            ..Self::default()
        }
    }
    /// What a crash now leaves: the durable image.
    #[must_use]
    pub fn crash(&self) -> MemStorage {
        let mut m = self.durable.clone();
        if let Some(r) = &self.durable_log_start {
            let _ = m.record_log_start(r);
        }
        match &self.durable_checkpoint {
            Some(c) => m.record_checkpoint(c).map(drop).unwrap_or_default(),
            None => m.remove_checkpoint().unwrap_or_default(),
        }
        m
    }
    /// What a process crash (not power loss) leaves: everything written so far.
    #[must_use]
    pub fn live(&self) -> MemStorage {
        let mut m = self.live.clone();
        if let Some(r) = &self.log_start {
            let _ = m.record_log_start(r);
        }
        match &self.checkpoint {
            Some(c) => m.record_checkpoint(c).map(drop).unwrap_or_default(),
            None => m.remove_checkpoint().unwrap_or_default(),
        }
        m
    }
    /// Whether the power was cut ([`CrashStorage::cut_after_bytes`] reached): nothing
    /// written from then on is durable.
    fn power_cut(&self) -> bool {
        self.cut_after_bytes.is_some_and(|c| self.appended > c)
    }
    /// A sync detached now, as `FileStorage::detach_sync`: the image it makes durable when it
    /// completes ([`CrashStorage::complete_sync`]), however much is appended meanwhile.
    #[must_use]
    pub fn detach_sync(&self) -> MemStorage {
        self.live.clone()
    }
    /// A detached sync completes: what its image holds becomes durable. Syncs only add: a
    /// segment the durable image already holds more of (a later sync completed first) stays.
    pub fn complete_sync(&mut self, mut image: MemStorage) {
        self.syncs += 1;
        // Side files: the image's are what the sync wrote.
        for (name, bytes) in image.side_files() {
            self.durable.set_side_file(name, Some(bytes.clone()));
        }
        for base in image.segments().unwrap_or_default() {
            let newer = image.segment(base).unwrap_or_default();
            if self
                .durable
                .segment(base)
                .is_none_or(|d| d.len() < newer.len())
            {
                let bytes = self.without_lost(base, newer);
                self.durable.set_segment(base, bytes);
            }
        }
    }

    /// A sync detached now that writes `draft` as the checkpoint once it succeeded, as
    /// `FileStorage::detach_checkpoint`.
    #[must_use]
    pub fn detach_checkpoint(&self, draft: crate::CheckpointDraft) -> CrashCheckpoint {
        CrashCheckpoint {
            image: self.live.clone(),
            bytes: draft.encode(),
            gen: self.checkpoint_gen,
            syncs: self.syncs,
        }
    }

    /// A detached checkpoint's sync completes, then its checkpoint is written, as
    /// `DetachedSync::run` does: unless a checkpoint was recorded or removed since it was
    /// detached (then it writes nothing and this returns `false`). An fsync makes durable
    /// what its file holds when it runs: the bytes written before it was detached, and with
    /// `covers_later` those written since too (side files rewritten in place after the
    /// snapshot included). A file removed since is not brought back; writes after a power
    /// cut reach nothing, the checkpoint included. (A sync that completed after it was
    /// detached already made later bytes durable: an fsync never takes them back.)
    pub fn complete_checkpoint(&mut self, job: CrashCheckpoint, covers_later: bool) -> bool {
        let mut image = if covers_later || self.syncs != job.syncs {
            self.live.clone()
        } else {
            job.image
        };
        let live_side: Vec<String> = self.live.side_files().keys().cloned().collect();
        let live_segments = self.live.segments().unwrap_or_default();
        let mut kept = MemStorage::new();
        for base in image.segments().unwrap_or_default() {
            if live_segments.contains(&base) {
                kept.set_segment(base, image.segment(base).unwrap_or_default().to_vec());
            }
        }
        if !self.power_cut() {
            for name in &live_side {
                if let Some(bytes) = image.side_files().get(name) {
                    kept.set_side_file(name, Some(bytes.clone()));
                }
            }
        }
        self.complete_sync(kept);
        if job.gen != self.checkpoint_gen {
            return false;
        }
        self.checkpoint = Some(job.bytes.clone());
        if !self.power_cut() {
            self.durable_checkpoint = Some(job.bytes);
        }
        true
    }

    /// A detached checkpoint's sync fails: as [`CrashStorage::fail_sync`], and its
    /// checkpoint is never written.
    pub fn fail_checkpoint(&mut self, job: CrashCheckpoint) {
        self.fail_sync(job.image);
    }

    /// A detached sync fails: what its image holds beyond the durable image is lost (see the
    /// type's doc).
    pub fn fail_sync(&mut self, mut image: MemStorage) {
        for base in image.segments().unwrap_or_default() {
            let durable = self.durable.segment(base).map_or(0, |d| d.len() as u64);
            let len = image.segment(base).map_or(0, |d| d.len() as u64);
            if len > durable {
                self.lost.push((base, durable, len));
            }
        }
    }

    /// Byte ranges a failed sync lost, as (segment, from, to).
    #[must_use]
    pub fn lost(&self) -> &[(u64, u64, u64)] {
        &self.lost
    }

    /// A segment's bytes as a sync writes them: zeros where a failed sync lost bytes.
    fn without_lost(&self, base: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        for &(b, from, to) in &self.lost {
            if b == base {
                let to = (to as usize).min(out.len());
                let from = (from as usize).min(to);
                out[from..to].fill(0);
            }
        }
        out
    }
}

impl Storage for CrashStorage {
    type Error = Injected;
    fn segments(&mut self) -> Result<Vec<u64>, Injected> {
        Ok(self.live.segments().unwrap_or_default())
    }
    fn len(&mut self, base: u64) -> Result<u64, Injected> {
        Ok(self.live.len(base).unwrap_or(0))
    }
    fn read(&mut self, base: u64, pos: u64, buf: &mut [u8]) -> Result<usize, Injected> {
        Ok(self.live.read(base, pos, buf).unwrap_or(0))
    }
    fn write(&mut self, base: u64, pos: u64, data: &[u8]) -> Result<(), Injected> {
        if self.fail_appends {
            return Err(Injected("no space left on device".into()));
        }
        let keep = match self.cut_after_bytes {
            Some(cut) => (cut.saturating_sub(self.appended) as usize).min(data.len()),
            None => data.len(),
        };
        self.appended += data.len() as u64;
        let _ = self.live.write(base, pos, &data[..keep]);
        Ok(())
    }
    fn sync(&mut self) -> Result<(), Injected> {
        if self.fail_syncs {
            let image = self.live.clone();
            self.fail_sync(image);
            return Err(Injected("I/O error on sync".into()));
        }
        self.syncs += 1;
        if self.freeze_after_syncs.is_none_or(|n| self.syncs <= n) {
            let mut durable = MemStorage::new();
            let mut live = self.live.clone();
            for base in live.segments().unwrap_or_default() {
                let bytes = self.without_lost(base, live.segment(base).unwrap_or_default());
                durable.set_segment(base, bytes);
            }
            // Side-file writes after a power cut never reached the disk: the durable image
            // keeps the side files it had.
            let side = if self.power_cut() {
                self.durable.side_files().clone()
            } else {
                live.side_files().clone()
            };
            for (name, bytes) in side {
                durable.set_side_file(&name, Some(bytes));
            }
            self.durable = durable;
        }
        Ok(())
    }
    fn truncate(&mut self, base: u64, len: u64) -> Result<(), Injected> {
        let _ = self.live.truncate(base, len);
        let _ = self.durable.truncate(base, len);
        Ok(())
    }
    fn remove(&mut self, base: u64) -> Result<(), Injected> {
        let _ = self.live.remove(base);
        let _ = self.durable.remove(base);
        Ok(())
    }
    fn quarantine(&mut self, name: &str, data: &[u8]) -> Result<(), Injected> {
        let _ = self.live.quarantine(name, data);
        let _ = self.durable.quarantine(name, data);
        Ok(())
    }
    fn log_start(&mut self) -> Result<Option<Vec<u8>>, Injected> {
        Ok(self.log_start.clone())
    }
    // Side files: written to the live image; a sync makes them durable (before a power cut),
    // a crash leaves what the last sync made durable. Truncations and removals reach the
    // durable image at the next sync too.
    fn side_len(&mut self, name: &str) -> Result<Option<u64>, Injected> {
        Ok(self.live.side_len(name).unwrap_or(None))
    }
    fn side_read(&mut self, name: &str, pos: u64, buf: &mut [u8]) -> Result<usize, Injected> {
        Ok(self.live.side_read(name, pos, buf).unwrap_or(0))
    }
    fn side_write(&mut self, name: &str, pos: u64, data: &[u8]) -> Result<(), Injected> {
        if self.fail_appends || self.fail_side_writes {
            return Err(Injected("no space left on device".into()));
        }
        crate::storage::check_side_name(name).map_err(|why| Injected(why.into()))?;
        let _ = self.live.side_write(name, pos, data);
        Ok(())
    }
    fn side_truncate(&mut self, name: &str, len: u64) -> Result<(), Injected> {
        let _ = self.live.side_truncate(name, len);
        Ok(())
    }
    fn side_remove(&mut self, name: &str) -> Result<(), Injected> {
        let _ = self.live.side_remove(name);
        Ok(())
    }
    fn side_list(&mut self, dir: &str) -> Result<Vec<String>, Injected> {
        Ok(self.live.side_list(dir).unwrap_or_default())
    }
    fn record_log_start(&mut self, record: &[u8]) -> Result<bool, Injected> {
        if self.fail_syncs {
            return Err(Injected("I/O error on sync".into()));
        }
        self.log_start = Some(record.to_vec());
        if !self.power_cut() {
            self.durable_log_start = Some(record.to_vec());
        }
        Ok(true)
    }
    fn checkpoint(&mut self) -> Result<Option<Vec<u8>>, Injected> {
        Ok(self.checkpoint.clone())
    }
    fn record_checkpoint(&mut self, checkpoint: &[u8]) -> Result<bool, Injected> {
        if self.fail_syncs {
            return Err(Injected("I/O error on sync".into()));
        }
        self.checkpoint_gen += 1;
        self.checkpoint = Some(checkpoint.to_vec());
        if !self.power_cut() {
            self.durable_checkpoint = Some(checkpoint.to_vec());
        }
        Ok(true)
    }
    fn remove_checkpoint(&mut self) -> Result<(), Injected> {
        self.checkpoint_gen += 1;
        self.checkpoint = None;
        self.durable_checkpoint = None;
        Ok(())
    }
}

/// A checker: answers a check request.
pub type Checker = Box<dyn FnMut(&CheckRequest) -> Resolution>;

/// Virtual time around a broker, quinn `Pair`-style: jump to `poll_timeout`, drain outputs,
/// answer checks with the registered checkers.
pub struct Sim<S: Storage> {
    /// The broker.
    pub broker: Broker<S>,
    /// Current virtual time.
    pub now: Millis,
    checkers: BTreeMap<String, Checker>,
    /// Every check the simulator answered, in order.
    pub checks: Vec<CheckRequest>,
    /// Outputs other than replies and checks, in order.
    pub events: Vec<Output>,
}

impl<S: Storage> fmt::Debug for Sim<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sim")
            .field("now", &self.now)
            .field("broker", &self.broker)
            .finish_non_exhaustive()
    }
}

impl Sim<MemStorage> {
    /// A simulator over memory storage.
    pub fn new(cfg: Config) -> Result<Self, Error<crate::storage::Infallible>> {
        Sim::with_storage(cfg, MemStorage::new(), 0)
    }
}

impl<S: Storage> Sim<S> {
    /// A simulator over the given storage, starting at `now`.
    pub fn with_storage(cfg: Config, storage: S, now: Millis) -> Result<Self, Error<S::Error>> {
        Ok(Sim {
            broker: Broker::open(cfg, storage, now)?,
            now,
            checkers: BTreeMap::new(),
            checks: Vec::new(),
            events: Vec::new(),
        })
    }

    /// Registers a checker for a producer group (the group comes online).
    pub fn set_checker(
        &mut self,
        group: &str,
        checker: impl FnMut(&CheckRequest) -> Resolution + 'static,
    ) {
        self.checkers.insert(group.into(), Box::new(checker));
        self.broker.set_producer_online(self.now, group, true);
    }

    /// Removes a group's checker (the producer goes away).
    pub fn remove_checker(&mut self, group: &str) {
        self.checkers.remove(group);
        self.broker.set_producer_online(self.now, group, false);
    }

    /// Runs a request to its reply at the current time, then answers any checks it caused.
    pub fn request(&mut self, request: Request) -> Result<Reply, Error<S::Error>> {
        let reply = self.broker.execute(self.now, request)?;
        self.drain()?;
        Ok(reply)
    }

    /// Advances virtual time to `to`, firing every timer on the way at its own time.
    pub fn advance_to(&mut self, to: Millis) -> Result<(), Error<S::Error>> {
        loop {
            self.drain()?;
            match self.broker.poll_timeout() {
                Some(t) if t <= to => {
                    self.now = self.now.max(t);
                    self.broker.handle_timeout(self.now)?;
                }
                _ => break,
            }
        }
        self.now = self.now.max(to);
        self.broker.handle_timeout(self.now)?;
        self.drain()
    }

    /// Advances by `ms`.
    pub fn advance(&mut self, ms: Millis) -> Result<(), Error<S::Error>> {
        self.advance_to(self.now + ms)
    }

    /// Answers checks and records other outputs until none are left.
    pub fn drain(&mut self) -> Result<(), Error<S::Error>> {
        while let Some(out) = self.broker.poll_output() {
            match out {
                Output::Check(c) => {
                    let answer = match self.checkers.get_mut(&c.group) {
                        Some(f) => f(&c),
                        None => Resolution::Unknown,
                    };
                    let txn = c.txn;
                    let group = c.group.clone();
                    self.checks.push(c);
                    let req = Request::EndTransaction {
                        txn,
                        resolution: answer,
                        group: Some(group),
                        from_check: true,
                    };
                    self.broker.execute(self.now, req)?;
                }
                Output::Reply { .. } => {}
                other => self.events.push(other),
            }
        }
        Ok(())
    }
}
