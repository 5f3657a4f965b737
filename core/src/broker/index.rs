//! The message index: finds messages by key (KEYS) or message id (UNIQ_KEY) within a topic,
//! as RocketMQ's IndexFile does — fixed-size files of hash slots, each the head of a chain
//! of entries in arrival order, through the storage's side files (`index/<20-digit file
//! number>`), rebuilt from the log on open. A lookup walks at most [`MAX_CHAIN`] entries,
//! newest file first, and reads the records to weed out hash collisions, so its cost
//! never grows with the log; memory holds the newest file's slots and its entries not yet
//! written, whatever the log holds.

use super::*;

/// Entries a lookup looks at, at most.
pub const MAX_CHAIN: usize = 4096;
/// Hash slots of one index file (4 bytes each, at its start): 2 MiB. (Core's own tests use
/// small files, to fill several.)
pub const INDEX_SLOTS: u32 = if cfg!(test) { 1 << 8 } else { 1 << 19 };
/// Entries of one index file (16 bytes each, after the slots: hash 4, previous entry of
/// the chain + 1 (0: none) 4, log offset 8, all big-endian): 32 MiB.
pub const INDEX_ENTRIES: u32 = if cfg!(test) { 1 << 10 } else { 1 << 21 };
/// The directory under the storage's side files that holds the index.
pub const INDEX_DIR: &str = "index";
pub(super) const ENTRY_BYTES: u64 = 16;
pub(super) const SLOTS_BYTES: u64 = INDEX_SLOTS as u64 * 4;
/// Entries held before they are written (one write for them all).
const PENDING: usize = 512;
/// Entries held at most while the newest file cannot be written (a full disk): 1 MiB.
const PENDING_MAX: usize = 65_536;

/// The index (see the module doc).
#[derive(Default)]
pub(super) struct KeyIndex {
    /// Every file, oldest first: (file number, newest log offset in it).
    pub(super) files: Vec<(u64, u64)>,
    /// The newest file's slots: an entry number + 1 (0: empty). Written to its file when it
    /// is full (sealed); empty until the first entry.
    pub(super) slots: Vec<u32>,
    /// Entries in the newest file.
    pub(super) count: u32,
    /// The newest file's entries not yet written: numbers `count - pending.len()..count`.
    pub(super) pending: Vec<(u32, u32, u64)>,
    /// Encoded entries, and a file's name (reused).
    buf: Vec<u8>,
    name: String,
}

/// FNV-1a over `topic#key`.
fn key_hash(topic: &str, key: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in topic
        .bytes()
        .chain(core::iter::once(b'#'))
        .chain(key.bytes())
    {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

fn slot(hash: u32) -> u32 {
    hash & (INDEX_SLOTS - 1)
}

pub(super) fn file_name(n: u64) -> String {
    let mut s = String::new();
    name_into(&mut s, n);
    s
}

/// [`file_name`] into `s` (no allocation once it is long enough).
fn name_into(s: &mut String, n: u64) {
    use core::fmt::Write as _;
    s.clear();
    let _ = write!(s, "{INDEX_DIR}/{n:020}");
}

fn encode_entry(out: &mut Vec<u8>, (hash, prev, offset): (u32, u32, u64)) {
    out.extend_from_slice(&hash.to_be_bytes());
    out.extend_from_slice(&prev.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl KeyIndex {
    fn insert<S: Storage>(
        &mut self,
        storage: &mut S,
        topic: &str,
        key: &str,
        offset: u64,
    ) -> Result<(), S::Error> {
        if self.files.is_empty() || self.count >= INDEX_ENTRIES {
            self.seal(storage)?;
        }
        let hash = key_hash(topic, key);
        let s = slot(hash) as usize;
        self.pending.push((hash, self.slots[s], offset));
        self.count += 1;
        self.slots[s] = self.count;
        if let Some(f) = self.files.last_mut() {
            f.1 = f.1.max(offset);
        }
        // Full: to the file. After a failed write, tried again each PENDING more entries.
        if self.pending.len().is_multiple_of(PENDING) {
            // A failed write (a full disk) keeps the entries for the next try; past
            // PENDING_MAX of them the error goes up (and the broker fails).
            if let Err(e) = self.flush(storage) {
                if self.pending.len() >= PENDING_MAX {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Writes the pending entries to the newest file.
    pub(super) fn flush<S: Storage>(&mut self, storage: &mut S) -> Result<(), S::Error> {
        let Some(&(n, _)) = self.files.last() else {
            return Ok(());
        };
        if self.pending.is_empty() {
            return Ok(());
        }
        let first = self.count - self.pending.len() as u32;
        self.buf.clear();
        for &e in &self.pending {
            encode_entry(&mut self.buf, e);
        }
        let pos = SLOTS_BYTES + u64::from(first) * ENTRY_BYTES;
        name_into(&mut self.name, n);
        storage.side_write(&self.name, pos, &self.buf)?;
        self.pending.clear();
        Ok(())
    }

    /// Seals the newest file (its entries and slots written) and starts the next.
    fn seal<S: Storage>(&mut self, storage: &mut S) -> Result<(), S::Error> {
        if let Some(&(n, _)) = self.files.last() {
            self.flush(storage)?;
            self.buf.clear();
            for &h in &self.slots {
                self.buf.extend_from_slice(&h.to_be_bytes());
            }
            storage.side_write(&file_name(n), 0, &self.buf)?;
            self.buf = Vec::new();
        }
        let next = self.files.last().map_or(0, |f| f.0 + 1);
        self.files.push((next, 0));
        self.slots.clear();
        self.slots.resize(INDEX_SLOTS as usize, 0);
        self.count = 0;
        Ok(())
    }

    /// Log offsets that may hold `key` in `topic`, newest first, at most [`MAX_CHAIN`]
    /// entries looked at.
    fn candidates<S: Storage>(
        &mut self,
        storage: &mut S,
        topic: &str,
        key: &str,
    ) -> Result<Vec<u64>, S::Error> {
        let hash = key_hash(topic, key);
        let s = slot(hash);
        let mut out = Vec::new();
        let mut walked = 0;
        let flushed = self.count - self.pending.len() as u32;
        for (i, &(n, _)) in self.files.iter().enumerate().rev() {
            let name = file_name(n);
            let newest = i + 1 == self.files.len();
            let mut next = if newest {
                self.slots[s as usize]
            } else {
                let mut b = [0u8; 4];
                if storage.side_read(&name, u64::from(s) * 4, &mut b)? < 4 {
                    continue;
                }
                be32(&b)
            };
            while next != 0 && walked < MAX_CHAIN {
                walked += 1;
                let e = if newest && next > flushed {
                    self.pending[(next - 1 - flushed) as usize]
                } else {
                    let mut b = [0u8; ENTRY_BYTES as usize];
                    let pos = SLOTS_BYTES + u64::from(next - 1) * ENTRY_BYTES;
                    if storage.side_read(&name, pos, &mut b)? < b.len() {
                        break;
                    }
                    let mut o = [0u8; 8];
                    o.copy_from_slice(&b[8..]);
                    (be32(&b), be32(&b[4..]), u64::from_be_bytes(o))
                };
                // A chain only ever points to older entries: anything else is damage.
                if e.1 >= next {
                    break;
                }
                next = e.1;
                if e.0 == hash {
                    out.push(e.2);
                }
            }
            if walked >= MAX_CHAIN {
                break;
            }
        }
        Ok(out)
    }

    /// Removes the files whose newest entry is below `start` (retention moved the log's
    /// start there); never the newest file.
    fn retire<S: Storage>(&mut self, storage: &mut S, start: u64) -> Result<(), S::Error> {
        while self.files.len() > 1 && self.files[0].1 < start {
            storage.side_remove(&file_name(self.files[0].0))?;
            self.files.remove(0);
        }
        Ok(())
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.files.capacity() * 16
            + self.slots.capacity() * 4
            + self.pending.capacity() * 16
            + self.buf.capacity()
            + self.name.capacity()
    }
}

impl<S: Storage> Broker<S> {
    /// Indexes a message record's keys (its KEYS property) and message id (UNIQ_KEY) under
    /// its consumer topic (REAL_TOPIC for a half or delayed record, else its own).
    pub(super) fn index_keys(
        &mut self,
        off: u64,
        topic_name: &str,
        keys: Option<&str>,
        uniq_key: Option<&str>,
    ) {
        if !self.cfg.index_keys || self.failed.is_some() {
            return;
        }
        let keys = keys
            .into_iter()
            .flat_map(|v| v.split(' '))
            .filter(|k| !k.is_empty());
        for key in keys.chain(uniq_key) {
            if let Err(e) = self
                .index
                .insert(&mut self.log.storage, topic_name, key, off)
            {
                return self.queue_failed("writing the message index", Error::Storage(e));
            }
        }
    }

    /// On open, before the log is replayed: the index files are derived from the log and
    /// rebuilt from it, so whatever is there goes.
    pub(super) fn clear_index(&mut self) -> Res<(), S> {
        for name in self
            .log
            .storage
            .side_list(INDEX_DIR)
            .map_err(Error::Storage)?
        {
            self.log
                .storage
                .side_remove(&name)
                .map_err(Error::Storage)?;
        }
        Ok(())
    }

    /// Retention moved the log's start: index files wholly below it go.
    pub(super) fn retire_index(&mut self, start: u64) -> Res<(), S> {
        self.index
            .retire(&mut self.log.storage, start)
            .map_err(Error::Storage)
    }

    /// Visible messages of `topic` whose key (KEYS) or message id (UNIQ_KEY) is `key`,
    /// newest first, at most `max` (RocketMQ's queryMsgByKey / queryMsgByUniqueKey). A half
    /// message counts once it is committed, a delayed one once delivered.
    pub fn messages_by_key(&mut self, topic: &str, key: &str, max: usize) -> Res<Vec<Message>, S> {
        self.messages_by_key_stored(topic, key, max, 0..=Millis::MAX)
    }

    /// [`Broker::messages_by_key`] for messages stored within `stored` (RocketMQ's
    /// queryMessage begin and end timestamps); others do not count towards `max`.
    pub fn messages_by_key_stored(
        &mut self,
        topic: &str,
        key: &str,
        max: usize,
        stored: core::ops::RangeInclusive<Millis>,
    ) -> Res<Vec<Message>, S> {
        let offsets = self
            .index
            .candidates(&mut self.log.storage, topic, key)
            .map_err(Error::Storage)?;
        let mut out = Vec::new();
        for off in offsets {
            if out.len() >= max {
                break;
            }
            let Some((q, qoff)) = self.visible_place(off)? else {
                continue;
            };
            let Some(unit) = self.unit_at(q, qoff)? else {
                continue;
            };
            let Some(m) = self.read_message(q, qoff, unit)? else {
                continue;
            };
            let named = m.msg_id == key || m.keys.iter().any(|k| k == key);
            if named && m.topic == topic && stored.contains(&m.store_timestamp) {
                out.push(m);
            }
        }
        Ok(out)
    }

    /// The transaction whose half message of `topic` has message id (UNIQ_KEY) `msg_id`,
    /// pending or resolved, newest first: how a transaction id in RocketMQ's form (the
    /// message id, as Apache's broker and proxy give producers and checkers) finds its half.
    /// The index finds it (at most [`MAX_CHAIN`] entries walked, one record read per
    /// candidate); with the index off, the pending transactions' halves are read instead
    /// (one record each), so only a pending one is found.
    pub fn transaction_by_message_id(
        &mut self,
        topic: &str,
        msg_id: &str,
    ) -> Res<Option<TxnId>, S> {
        let offsets: Vec<u64> = if self.cfg.index_keys {
            self.index
                .candidates(&mut self.log.storage, topic, msg_id)
                .map_err(Error::Storage)?
        } else {
            self.txns.iter().map(|t| t.record).collect()
        };
        for off in offsets {
            let Some(r) = self.log.read_any(off).map_err(Error::Storage)? else {
                continue;
            };
            let [real_topic, uniq, carried] =
                r.props_of([prop::REAL_TOPIC, prop::UNIQ_KEY, prop::CARRIED]);
            if r.topic == topic::HALF && real_topic == Some(topic) && uniq == Some(msg_id) {
                // A half retention carried forward keeps its first offset as its id.
                let first = carried
                    .and_then(|v| v.parse::<u64>().ok())
                    .filter(|&k| k < off);
                return Ok(Some(TxnId(first.unwrap_or(off))));
            }
        }
        Ok(None)
    }

    /// Where the message whose record is at `offset` sits in a consumer queue, if it is
    /// visible there.
    pub(super) fn visible_place(&mut self, offset: u64) -> Res<Option<(u32, u64)>, S> {
        let located = match self.log.read_any(offset).map_err(Error::Storage)? {
            None => None,
            Some(r) => match topic::classify(r.topic) {
                k if k.is_readable() => Some((
                    String::from(r.topic),
                    r.header.queue_id,
                    Some(r.header.queue_offset),
                )),
                TopicKind::Half | TopicKind::Schedule => {
                    match (r.prop(prop::REAL_TOPIC), r.prop(prop::REAL_QID)) {
                        (Some(t), Some(qid)) => {
                            qid.parse().ok().map(|qid| (String::from(t), qid, None))
                        }
                        _ => None,
                    }
                }
                _ => None,
            },
        };
        let Some((topic_name, queue_id, queue_offset)) = located else {
            return Ok(None);
        };
        let place = match queue_offset {
            Some(qoff) => self.queue_index(&topic_name, queue_id).map(|q| (q, qoff)),
            None => self.moved.get(offset),
        };
        let Some((q, qoff)) = place else {
            return Ok(None);
        };
        if qoff >= self.queues[q as usize].visible_end() {
            return Ok(None);
        }
        let unit = self.unit_at(q, qoff)?;
        Ok(unit.filter(|u| u.offset == offset).map(|_| (q, qoff)))
    }
}
