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

pub(super) struct Queue {
    pub(super) topic: u32,
    pub(super) queue_id: u32,
    /// Queue offset of `units[0]` (a queue brought over from RocketMQ starts where its
    /// oldest kept message was: [`Broker::start_queue_at`]).
    pub(super) base: u64,
    pub(super) units: Vec<CqUnit>,
    /// Next queue offset (internal topics keep only this).
    pub(super) next: u64,
    /// Units consumers may see (below the durable point under sync flush).
    pub(super) visible: usize,
    pub(super) notify: bool,
}

impl Queue {
    /// The unit at a queue offset, if the queue holds it.
    pub(super) fn unit(&self, queue_offset: u64) -> Option<CqUnit> {
        let i = usize::try_from(queue_offset.checked_sub(self.base)?).ok()?;
        self.units.get(i).copied()
    }
    /// The queue offset consumers may read up to (exclusive).
    pub(super) fn visible_end(&self) -> u64 {
        self.base + self.visible as u64
    }
    /// The queue offset after the last unit held.
    pub(super) fn stored_end(&self) -> u64 {
        self.base + self.units.len() as u64
    }
}
