//! Consume queues: units (RocketMQ's 20-byte ConsumeQueue entry) and where moved records
//! sit in their queue.

use super::*;

/// Record offset → (queue, queue offset) of messages whose record is not in their queue's
/// topic. They come mostly in log order (a transaction commits soon after its prepare), so
/// those go to the end of a sorted `Vec` (no hashing, no random access, growth by
/// doubling); the others, in a `BTreeMap`.
#[derive(Default)]
pub(super) struct Moved {
    pub(super) ascending: Vec<(u64, u32, u64)>,
    pub(super) rest: BTreeMap<u64, (u32, u64)>,
}

impl Moved {
    pub(super) fn insert(&mut self, offset: u64, place: (u32, u64)) {
        match self.ascending.last() {
            Some(&(last, ..)) if offset <= last => {
                match self.ascending.binary_search_by_key(&offset, |e| e.0) {
                    Ok(i) => self.ascending[i] = (offset, place.0, place.1),
                    Err(_) => {
                        self.rest.insert(offset, place);
                    }
                }
            }
            _ => self.ascending.push((offset, place.0, place.1)),
        }
    }

    pub(super) fn get(&self, offset: u64) -> Option<(u32, u64)> {
        match self.ascending.binary_search_by_key(&offset, |e| e.0) {
            Ok(i) => Some((self.ascending[i].1, self.ascending[i].2)),
            Err(_) => self.rest.get(&offset).copied(),
        }
    }
}

/// One unit of a consume queue. RocketMQ stores it in 20 bytes
/// (physical offset 8, size 4, tag hash 8); see [`CqUnit::to_rocketmq_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqUnit {
    pub offset: u64,
    pub size: u32,
    pub tag_hash: i32,
}

impl CqUnit {
    /// The unit as RocketMQ's ConsumeQueue file holds it.
    #[must_use]
    pub fn to_rocketmq_bytes(&self) -> [u8; 20] {
        let mut b = [0; 20];
        b[..8].copy_from_slice(&self.offset.to_be_bytes());
        b[8..12].copy_from_slice(&self.size.to_be_bytes());
        b[12..].copy_from_slice(&i64::from(self.tag_hash).to_be_bytes());
        b
    }
}

/// Java's `String.hashCode`, RocketMQ's tag code.
#[must_use]
pub fn tag_hash(tag: Option<&str>) -> i32 {
    let Some(tag) = tag else { return 0 };
    let mut h: i32 = 0;
    for u in tag.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(i32::from(u));
    }
    h
}

/// Bytes of one unit in a consume-queue file.
pub const CQ_UNIT_BYTES: u64 = 20;
/// Units in one consume-queue file: 300,000 (6,000,000 bytes, RocketMQ's default
/// mappedFileSizeConsumeQueue). The file holding queue offset `o` is named by the byte
/// offset of its first unit, `(o / CQ_FILE_UNITS) * CQ_FILE_UNITS * 20`, in 20 digits, as
/// RocketMQ names them; units below a queue's first offset read as zeros.
pub const CQ_FILE_UNITS: u64 = 300_000;
/// Units a queue holds in memory before they go to its file (see [`Queue`]).
pub(super) const CQ_TAIL_UNITS: usize = 256;
/// Units a queue holds in memory at most while its file cannot be written (a full disk):
/// 1 MiB. Past it the broker fails.
pub(super) const CQ_TAIL_MAX: usize = 65_536;
/// Units in one block of the read cache (a block never spans two files).
pub(super) const CQ_BLOCK_UNITS: u64 = 1_000;
/// The directory under the storage's side files that holds the consume queues.
pub const CQ_DIR: &str = "consumequeue";

impl CqUnit {
    /// A unit from RocketMQ's 20-byte layout (the tag hash's high half is dropped: RocketMQ
    /// writes a sign-extended `int`, and the core only writes such).
    #[must_use]
    pub fn from_rocketmq_bytes(b: &[u8; 20]) -> Self {
        let mut o = [0; 8];
        o.copy_from_slice(&b[..8]);
        let mut n = [0; 4];
        n.copy_from_slice(&b[8..12]);
        let mut t = [0; 8];
        t.copy_from_slice(&b[12..]);
        CqUnit {
            offset: u64::from_be_bytes(o),
            size: u32::from_be_bytes(n),
            tag_hash: i64::from_be_bytes(t) as i32,
        }
    }
}

/// A consume queue. Its units live in files beside the log (`consumequeue/<topic>/<queue
/// id>/<20-digit byte offset>`, RocketMQ's layout, through [`Storage`]'s side files),
/// rebuilt from the log on every open; memory holds only what is bounded: offsets, counts,
/// and the newest units not yet written (at most [`CQ_TAIL_UNITS`]). Reads below the tail
/// go through the broker's block cache ([`CqCache`]).
pub(super) struct Queue {
    pub(super) topic: u32,
    pub(super) queue_id: u32,
    /// Queue offset of the first unit held (a queue brought over from RocketMQ starts where
    /// its oldest kept message was: [`Broker::start_queue_at`]; retention moves it up).
    pub(super) base: u64,
    /// Queue offset after the last unit held.
    pub(super) end: u64,
    /// The newest units, not yet in the file: queue offsets `end - tail.len()..end`.
    pub(super) tail: Vec<CqUnit>,
    /// Next queue offset (internal topics keep only this).
    pub(super) next: u64,
    /// Units consumers may see, from `base` (below the durable point under sync flush).
    pub(super) visible: u64,
    pub(super) notify: bool,
    /// `consumequeue/<topic>/<queue id>`.
    pub(super) dir: String,
}

impl Queue {
    pub(super) fn new(topic: u32, name: &str, queue_id: u32) -> Self {
        Queue {
            topic,
            queue_id,
            base: 0,
            end: 0,
            tail: Vec::new(),
            next: 0,
            visible: 0,
            notify: false,
            dir: alloc::format!("{CQ_DIR}/{name}/{queue_id}"),
        }
    }
    /// An empty queue starts at `offset`: its first unit will be there.
    pub(super) fn start_at(&mut self, offset: u64) {
        debug_assert!(self.tail.is_empty() && self.base == self.end);
        self.base = offset;
        self.end = offset;
        self.next = offset;
    }
    /// Whether the queue holds a unit at this queue offset.
    pub(super) fn holds(&self, queue_offset: u64) -> bool {
        (self.base..self.end).contains(&queue_offset)
    }
    /// The queue offset consumers may read up to (exclusive).
    pub(super) fn visible_end(&self) -> u64 {
        self.base + self.visible
    }
    /// The queue offset after the last unit held.
    pub(super) fn stored_end(&self) -> u64 {
        self.end
    }
    /// Units held.
    pub(super) fn len(&self) -> u64 {
        self.end - self.base
    }
    /// Queue offset of the first unit of the tail (everything below it is in the file).
    pub(super) fn flushed_end(&self) -> u64 {
        self.end - self.tail.len() as u64
    }
    /// The side file holding queue offset `o`, and the unit's position in it.
    pub(super) fn file_of(&self, o: u64) -> (String, u64) {
        let mut name = String::new();
        let pos = self.file_of_into(o, &mut name);
        (name, pos)
    }
    /// [`Queue::file_of`], the name written into `name` (cleared first; no allocation once
    /// it is long enough).
    fn file_of_into(&self, o: u64, name: &mut String) -> u64 {
        use core::fmt::Write as _;
        let first = o / CQ_FILE_UNITS * CQ_FILE_UNITS;
        name.clear();
        let _ = write!(name, "{}/{:020}", self.dir, first * CQ_UNIT_BYTES);
        (o - first) * CQ_UNIT_BYTES
    }
}

/// Blocks of units read from consume-queue files, at most a configured number
/// ([`Config::cq_cache_blocks`]), the oldest filled replaced first.
pub(super) struct CqCache {
    /// (queue, queue offset of the block's first unit, its units as read).
    blocks: Vec<(u32, u64, Vec<CqUnit>)>,
    cap: usize,
    next: usize,
    /// The block of the last hit (reads are mostly sequential).
    last: usize,
}

impl CqCache {
    pub(super) fn new(cap: usize) -> Self {
        CqCache {
            blocks: Vec::new(),
            cap: cap.max(1),
            next: 0,
            last: 0,
        }
    }
    fn find(&mut self, q: u32, o: u64) -> Option<&mut CqUnit> {
        let hit = |b: &(u32, u64, Vec<CqUnit>)| b.0 == q && o >= b.1 && o - b.1 < b.2.len() as u64;
        let i = if self.blocks.get(self.last).is_some_and(hit) {
            self.last
        } else {
            self.last = self.blocks.iter().position(hit)?;
            self.last
        };
        let b = &mut self.blocks[i];
        Some(&mut b.2[(o - b.1) as usize])
    }
    fn insert(&mut self, q: u32, first: u64, units: Vec<CqUnit>) {
        // A block read again (more of it is in the file now) replaces its shorter copy.
        if let Some(i) = self.blocks.iter().position(|b| b.0 == q && b.1 == first) {
            self.blocks[i].2 = units;
            self.last = i;
        } else if self.blocks.len() < self.cap {
            self.blocks.push((q, first, units));
            self.last = self.blocks.len() - 1;
        } else {
            self.blocks[self.next] = (q, first, units);
            self.last = self.next;
            self.next = (self.next + 1) % self.cap;
        }
    }
    /// Forgets a queue's blocks (its units were rebuilt or dropped).
    pub(super) fn forget(&mut self, q: u32) {
        for b in &mut self.blocks {
            if b.0 == q {
                b.2.clear();
            }
        }
    }
    pub(super) fn heap_bytes(&self) -> usize {
        self.blocks.capacity() * core::mem::size_of::<(u32, u64, Vec<CqUnit>)>()
            + self
                .blocks
                .iter()
                .map(|b| b.2.capacity() * core::mem::size_of::<CqUnit>())
                .sum::<usize>()
    }
}

impl<S: Storage> Broker<S> {
    /// The unit at a queue offset, if the queue holds it: from the tail, the cache or the
    /// queue's file.
    pub(super) fn unit_at(&mut self, q: u32, queue_offset: u64) -> Res<Option<CqUnit>, S> {
        let Some(queue) = self.queues.get(q as usize) else {
            return Ok(None);
        };
        if !queue.holds(queue_offset) {
            return Ok(None);
        }
        let flushed = queue.flushed_end();
        if queue_offset >= flushed {
            return Ok(Some(queue.tail[(queue_offset - flushed) as usize]));
        }
        if let Some(u) = self.cq_cache.find(q, queue_offset) {
            return Ok(Some(*u));
        }
        // A block from the file: from its first unit the queue holds to its last flushed.
        let block = queue_offset / CQ_BLOCK_UNITS * CQ_BLOCK_UNITS;
        let from = block.max(queue.base);
        let to = (block + CQ_BLOCK_UNITS).min(flushed);
        let (name, pos) = queue.file_of(from);
        let mut bytes = alloc::vec![0u8; ((to - from) * CQ_UNIT_BYTES) as usize];
        let n = self
            .log
            .storage
            .side_read(&name, pos, &mut bytes)
            .map_err(Error::Storage)?;
        if n < bytes.len() {
            return Err(Error::Corrupted {
                offset: 0,
                reason: alloc::format!(
                    "consume queue file {name} holds {} bytes from {pos}, {} expected (it \
                     was written by this run: the storage lost it)",
                    n,
                    bytes.len()
                ),
            });
        }
        let units: Vec<CqUnit> = bytes
            .chunks_exact(CQ_UNIT_BYTES as usize)
            .map(|c| {
                let mut b = [0; 20];
                b.copy_from_slice(c);
                CqUnit::from_rocketmq_bytes(&b)
            })
            .collect();
        let unit = units[(queue_offset - from) as usize];
        self.cq_cache.insert(q, from, units);
        Ok(Some(unit))
    }

    /// Appends a unit to a queue: to its tail, which goes to the file when full.
    pub(super) fn store_unit(&mut self, q: u32, unit: CqUnit) {
        let queue = &mut self.queues[q as usize];
        if queue.tail.capacity() == 0 {
            queue.tail.reserve_exact(CQ_TAIL_UNITS);
        }
        queue.tail.push(unit);
        queue.end += 1;
        // Full: to the file. After a failed write, tried again each CQ_TAIL_UNITS more units.
        if queue.tail.len().is_multiple_of(CQ_TAIL_UNITS) {
            self.flush_tail(q);
        }
    }

    /// Writes a queue's tail to its file(s). A failed write (a full disk) leaves what it did
    /// not write in the tail, tried again when it is [`CQ_TAIL_UNITS`] longer; past
    /// [`CQ_TAIL_MAX`] units
    /// the broker fails (the log holds every message, and the next open rebuilds the file).
    pub(super) fn flush_tail(&mut self, q: u32) {
        let queue = &self.queues[q as usize];
        if queue.tail.is_empty() || self.failed.is_some() {
            return;
        }
        let mut at = queue.flushed_end();
        let mut i = 0;
        let mut failed = None;
        while i < queue.tail.len() {
            let in_file = (CQ_FILE_UNITS - at % CQ_FILE_UNITS) as usize;
            let n = in_file.min(queue.tail.len() - i);
            self.cq_buf.clear();
            for u in &queue.tail[i..i + n] {
                self.cq_buf.extend_from_slice(&u.to_rocketmq_bytes());
            }
            let pos = queue.file_of_into(at, &mut self.cq_name);
            if let Err(e) = self
                .log
                .storage
                .side_write(&self.cq_name, pos, &self.cq_buf)
            {
                failed = Some(e);
                break;
            }
            i += n;
            at += n as u64;
        }
        let tail = &mut self.queues[q as usize].tail;
        tail.drain(..i);
        if let Some(e) = failed {
            if tail.len() >= CQ_TAIL_MAX {
                let what = alloc::format!("writing consume queue file {}", self.cq_name);
                self.queue_failed(&what, Error::Storage(e));
            }
        }
    }

    /// A consume-queue read or write failed where no error can be returned (applying a
    /// record): the broker fails (see [`Broker::failed`]); an open returns the error.
    pub(super) fn queue_failed(&mut self, what: &str, e: Error<S::Error>) {
        self.fail(alloc::format!("{what} failed: {e}"));
        if self.side_error.is_none() {
            self.side_error = Some(e);
        }
    }

    /// Writes every queue's tail to its file (a clean stop leaves whole files).
    pub(super) fn flush_tails(&mut self) {
        for q in 0..self.queues.len() as u32 {
            self.flush_tail(q);
        }
    }

    /// Replaces the unit at a queue offset the queue holds (retention carried its record).
    pub(super) fn replace_unit(&mut self, q: u32, queue_offset: u64, unit: CqUnit) -> Res<(), S> {
        let queue = &mut self.queues[q as usize];
        let flushed = queue.flushed_end();
        if queue_offset >= flushed {
            queue.tail[(queue_offset - flushed) as usize] = unit;
            return Ok(());
        }
        let (name, pos) = queue.file_of(queue_offset);
        self.log
            .storage
            .side_write(&name, pos, &unit.to_rocketmq_bytes())
            .map_err(Error::Storage)?;
        if let Some(u) = self.cq_cache.find(q, queue_offset) {
            *u = unit;
        }
        Ok(())
    }

    /// A queue now starts at `first` (retention): the units below it go, and with them every
    /// file that holds none of the rest (whole files only).
    pub(super) fn drop_units_below(&mut self, q: u32, first: u64) -> Res<(), S> {
        let queue = &mut self.queues[q as usize];
        let first = first.min(queue.end);
        if first <= queue.base {
            return Ok(());
        }
        let flushed = queue.flushed_end();
        if first > flushed {
            queue.tail.drain(..(first - flushed) as usize);
        }
        let dropped = first - queue.base;
        queue.visible = queue.visible.saturating_sub(dropped);
        queue.base = first;
        queue.next = queue.next.max(first);
        let dir = queue.dir.clone();
        let keep_from = first / CQ_FILE_UNITS * CQ_FILE_UNITS * CQ_UNIT_BYTES;
        for name in self.log.storage.side_list(&dir).map_err(Error::Storage)? {
            let Some(file) = name.rsplit('/').next() else {
                continue;
            };
            if file.parse::<u64>().is_ok_and(|at| at < keep_from) {
                self.log
                    .storage
                    .side_remove(&name)
                    .map_err(Error::Storage)?;
            }
        }
        self.cq_cache.forget(q);
        Ok(())
    }

    /// On open, before the log is replayed: the consume-queue files are data derived from the
    /// log, rebuilt from it, so whatever is there goes.
    pub(super) fn clear_consume_queues(&mut self) -> Res<(), S> {
        for name in self.log.storage.side_list(CQ_DIR).map_err(Error::Storage)? {
            self.log
                .storage
                .side_remove(&name)
                .map_err(Error::Storage)?;
        }
        Ok(())
    }

    /// Bytes of memory the consume queues hold: their tails and directory names, and the
    /// read cache. Bounded by the number of queues and [`Config::cq_cache_blocks`], not by
    /// the messages stored.
    #[must_use]
    pub fn queue_bytes(&self) -> usize {
        self.queues.capacity() * core::mem::size_of::<Queue>()
            + self
                .queues
                .iter()
                .map(|q| q.tail.capacity() * core::mem::size_of::<CqUnit>() + q.dir.capacity())
                .sum::<usize>()
            + self.cq_cache.heap_bytes()
            + self.cq_buf.capacity()
            + self.cq_name.capacity()
    }
}
