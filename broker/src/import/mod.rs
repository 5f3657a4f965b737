//! `rocklet import --from-rocketmq <storePathRootDir> --data-dir <new>`: an Apache RocketMQ
//! 4.x/5.x store becomes a Rocklet data directory holding what its consumers and producers
//! would find in it.
//!
//! The store is only read ([`store`]); the data directory is written through the core's
//! public requests, as a host replays what happened, at each record's own store time:
//!
//! - two passes over the commit log: the first ([`analyze`]) checks that every user queue
//!   runs from queue offset 0 without a gap and settles what each transaction and delayed
//!   message became; the second ([`write`]) stores each user message at its place, so it gets
//!   the same queue offset it had, and consumer offsets stay valid;
//! - a commit copy (the record RocketMQ writes into the real topic on commit) becomes a
//!   half message committed at once, at the copy's place; a half with no op record and no
//!   commit copy, still ahead of RocketMQ's checker, becomes a pending transaction of its
//!   producer group, carrying its check count (`TRANSACTION_CHECK_TIMES`); rolled-back
//!   halves and halves RocketMQ discarded are not written;
//! - a delayed message (delay level in `SCHEDULE_TOPIC_XXXX`, or timer in
//!   `rmq_sys_wheel_timer`) that was delivered — its delivered copy is in the log, or the
//!   checkpoint (`delayOffset.json`, `timercheck`) is past it — is imported as that copy only;
//!   one not yet delivered is sent after every stored record with its due time (store time +
//!   its level's delay, or `TIMER_OUT_MS`);
//! - compressed bodies are inflated, inner batches split into their messages;
//! - topics (`topics.json`), consumer groups (`subscriptionGroup.json`) and consumer
//!   offsets (`consumerOffset.json`) follow.
//!
//! Whatever cannot be carried over is either skipped and counted with its reason (a whole
//! topic the core cannot hold, RocketMQ's own system topics) or refuses the import before
//! anything is written (a queue that no longer starts at 0, a damaged log); a record the
//! core refuses while writing stops it and the new directory is removed.

mod analyze;
mod records;
pub mod store;
mod write;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use rocklet_core::Config;

pub use store::{lenient_json, Store, TimerCheckpoint};

/// What to import, and with which core configuration (the one the broker will run with:
/// segment size, largest message, delay levels).
#[derive(Debug, Clone)]
pub struct Options {
    /// RocketMQ's storePathRootDir (holding `commitlog/` and `config/`).
    pub from: PathBuf,
    /// The new Rocklet data directory: must not exist, or be empty.
    pub data_dir: PathBuf,
    /// The core configuration of the broker that will open the data directory.
    pub core: Config,
}

/// Why an import (or an export, [`crate::export`]: one error for moving a store either way)
/// did not happen. Its text follows the word `import` or `export` (`import refused: …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MoveError {
    /// The source or target cannot be used as they are (the message names what and where);
    /// nothing was written.
    Refused(String),
    /// Reading the source or writing the target failed.
    Io(String),
}

impl MoveError {
    pub(crate) fn refused(why: impl Into<String>) -> Self {
        MoveError::Refused(why.into())
    }
    pub(crate) fn io(path: &Path, e: std::io::Error) -> Self {
        MoveError::Io(format!("{}: {e}", path.display()))
    }
}

impl fmt::Display for MoveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoveError::Refused(why) => write!(f, "refused: {why}"),
            MoveError::Io(why) => write!(f, "failed: {why}"),
        }
    }
}

impl std::error::Error for MoveError {}

/// A pending transaction as imported (or exported, [`crate::export`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PendingTransaction {
    /// The producer's transaction id (UNIQ_KEY), or `@<offset>` without one.
    pub id: String,
    pub group: String,
    pub topic: String,
    /// Checks the source broker sent so far (TRANSACTION_CHECK_TIMES of its latest half).
    pub checks: u32,
}

/// What the import did, counted by kind; `skipped` gives every reason something was left
/// out, with how many.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Commit-log records read.
    pub records: u64,
    /// Bytes of commit log read.
    pub bytes: u64,
    /// User topics created (with their queue counts).
    pub topics: u64,
    /// Consumer groups declared.
    pub groups: u64,
    /// Consumer offsets committed.
    pub consumer_offsets: u64,
    /// Messages stored as sent (each message of an inner batch counts).
    pub normal: u64,
    /// Of these, in retry topics (`%RETRY%<group>`).
    pub retry: u64,
    /// Of these, delayed messages RocketMQ had delivered (their delivered copies).
    pub delivered_delays: u64,
    /// Inner-batch records split, and the messages they held.
    pub inner_batches: u64,
    pub inner_batch_messages: u64,
    /// Compressed bodies inflated.
    pub inflated: u64,
    /// Transactions committed (from RocketMQ's commit copies).
    pub committed: u64,
    /// Transactions rolled back: not written, they stay invisible.
    pub rolled_back: u64,
    /// Half messages RocketMQ's checker had given up on (transactionCheckMax or the file
    /// reserved time): not written.
    pub discarded_halves: u64,
    /// Pending transactions, with their check counts.
    pub pending: Vec<PendingTransaction>,
    /// Delayed messages not delivered yet: by delay level, by timer.
    pub pending_level_delays: u64,
    pub pending_timers: u64,
    /// Timer messages a producer recalled (TIMER_DEL_UNIQKEY) before they were due.
    pub recalled_timers: u64,
    /// Messages without UNIQ_KEY: their message id (RocketMQ's offset message id) changes.
    pub without_message_id: u64,
    /// Left out, by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Things an operator should know (a stale checkpoint, a cut tail…).
    pub notes: Vec<String>,
}

impl Report {
    pub(crate) fn skip(&mut self, reason: impl Into<String>) {
        *self.skipped.entry(reason.into()).or_default() += 1;
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "read {} records ({} bytes) of the commit log",
            self.records, self.bytes
        )?;
        writeln!(
            f,
            "topics {}, consumer groups {}, consumer offsets {}",
            self.topics, self.groups, self.consumer_offsets
        )?;
        writeln!(
            f,
            "messages {} (retry {}, delivered delays {}, from {} inner batches {}, inflated {}, without UNIQ_KEY {})",
            self.normal,
            self.retry,
            self.delivered_delays,
            self.inner_batches,
            self.inner_batch_messages,
            self.inflated,
            self.without_message_id
        )?;
        writeln!(
            f,
            "transactions: committed {}, rolled back {} (not written), discarded by RocketMQ {} (not written), pending {}",
            self.committed,
            self.rolled_back,
            self.discarded_halves,
            self.pending.len()
        )?;
        for p in &self.pending {
            writeln!(
                f,
                "  pending {} of group {} to {}: {} checks so far",
                p.id, p.group, p.topic, p.checks
            )?;
        }
        writeln!(
            f,
            "delayed, not yet delivered: by level {}, by timer {} (recalled {})",
            self.pending_level_delays, self.pending_timers, self.recalled_timers
        )?;
        for (why, n) in &self.skipped {
            writeln!(f, "skipped {n}: {why}")?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

/// Imports the store at `opts.from` into a new data directory at `opts.data_dir`. On any
/// error nothing is left behind: the directory is removed if this call created it (or
/// emptied again if it existed empty).
pub fn run(opts: &Options) -> Result<Report, MoveError> {
    let from = opts
        .from
        .canonicalize()
        .map_err(|e| MoveError::io(&opts.from, e))?;
    let created = prepare_data_dir(&opts.data_dir, &from)?;
    let result = (|| {
        let store = Store::open(&from)?;
        let plan = analyze::analyze(&store, &opts.core)?;
        write::write(&store, plan, opts)
    })();
    if result.is_err() {
        clean_data_dir(&opts.data_dir, created);
    }
    result
}

/// Checks that `dir` is new or empty and neither inside the store nor holding it; creates
/// it. Returns whether it was created. Every check comes before anything is created: a
/// data directory inside the store is refused without writing there.
fn prepare_data_dir(dir: &Path, from: &Path) -> Result<bool, MoveError> {
    let canon = resolve(dir).map_err(|e| MoveError::io(dir, e))?;
    if canon.starts_with(from) || from.starts_with(&canon) {
        return Err(MoveError::refused(format!(
            "the data directory {} and the store {} overlap ({} is {}): the import never writes into the store, nor puts the store inside its data directory",
            dir.display(),
            from.display(),
            dir.display(),
            if canon.starts_with(from) {
                "inside the store"
            } else {
                "the store or a directory holding it"
            }
        )));
    }
    new_target(
        dir,
        "the import writes a new data directory and never adds to one",
    )
}

/// Makes the directory an import or export writes, `dir`, refusing one that is not empty
/// (`why` says what the move never does); whether it was created (so a failure removes it,
/// [`clean_data_dir`]).
pub(crate) fn new_target(dir: &Path, why: &str) -> Result<bool, MoveError> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(MoveError::refused(format!(
                    "{} is not empty: {why}",
                    dir.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(MoveError::io(dir, e)),
    }
    let created = !dir.exists();
    std::fs::create_dir_all(dir).map_err(|e| MoveError::io(dir, e))?;
    Ok(created)
}

/// `path` as an absolute path without symbolic links, `.` or `..`, whether or not it
/// exists yet: its deepest existing ancestor canonicalized, then the rest (which, not
/// existing, holds no link).
pub(crate) fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    let mut base = abs.as_path();
    let mut rest = Vec::new();
    let mut out = loop {
        match base.canonicalize() {
            Ok(c) => break c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                rest.push(base.file_name().map(std::ffi::OsStr::to_os_string));
                base = match base.parent() {
                    Some(p) => p,
                    None => return Err(e),
                };
            }
            Err(e) => return Err(e),
        }
    };
    // `absolute` keeps `..`; `file_name` is `None` for it (and for a trailing `.`, which
    // `absolute` already dropped).
    for name in rest.into_iter().rev() {
        match name {
            Some(n) => out.push(n),
            None => {
                out.pop();
            }
        }
    }
    Ok(out)
}

pub(crate) fn clean_data_dir(dir: &Path, created: bool) {
    if created {
        let _ = std::fs::remove_dir_all(dir);
    } else if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
        }
    }
}
