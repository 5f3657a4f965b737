//! The message index: finds messages by key (KEYS) or message id (UNIQ_KEY) within a topic,
//! as RocketMQ's IndexFile does — a hash table of slots, each the head of a chain of
//! entries in arrival order, 16 bytes an entry, rebuilt from the log on open. A lookup
//! walks at most [`MAX_CHAIN`] entries and reads the records to weed out hash collisions,
//! so its cost never grows with the log.

use super::*;

/// Entries a lookup looks at, at most.
pub const MAX_CHAIN: usize = 4096;

/// The index (see the module doc).
#[derive(Default)]
pub(super) struct KeyIndex {
    /// Head of each slot's chain: an entry index + 1 (0: empty). Grows with the entries.
    slots: Vec<u32>,
    /// (log offset, previous entry of the chain + 1, hash), newest last.
    entries: Vec<(u64, u32, u32)>,
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

impl KeyIndex {
    fn slot(&self, hash: u32) -> usize {
        hash as usize & (self.slots.len() - 1)
    }

    fn insert(&mut self, topic: &str, key: &str, offset: u64) {
        if self.entries.len() >= u32::MAX as usize - 1 {
            return;
        }
        if self.entries.len() >= self.slots.len() * 2 {
            self.grow();
        }
        let hash = key_hash(topic, key);
        let s = self.slot(hash);
        self.entries.push((offset, self.slots[s], hash));
        self.slots[s] = self.entries.len() as u32;
    }

    /// Doubles the slots (from 4,096) and relinks every chain, oldest first.
    fn grow(&mut self) {
        let n = (self.slots.len() * 2).max(1 << 12);
        self.slots = alloc::vec![0; n];
        for i in 0..self.entries.len() {
            let s = self.slot(self.entries[i].2);
            self.entries[i].1 = self.slots[s];
            self.slots[s] = i as u32 + 1;
        }
    }

    /// Log offsets that may hold `key` in `topic`, newest first.
    fn candidates(&self, topic: &str, key: &str) -> impl Iterator<Item = u64> + '_ {
        let hash = key_hash(topic, key);
        let mut next = if self.slots.is_empty() {
            0
        } else {
            self.slots[self.slot(hash)]
        };
        core::iter::from_fn(move || {
            while next != 0 {
                let (offset, prev, h) = self.entries[next as usize - 1];
                next = prev;
                if h == hash {
                    return Some(offset);
                }
            }
            None
        })
        .take(MAX_CHAIN)
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * 4 + self.entries.capacity() * 16
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
        if !self.cfg.index_keys {
            return;
        }
        for key in keys.into_iter().flat_map(|v| v.split(' ')) {
            if !key.is_empty() {
                self.index.insert(topic_name, key, off);
            }
        }
        if let Some(id) = uniq_key {
            self.index.insert(topic_name, id, off);
        }
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
        let offsets: Vec<u64> = self.index.candidates(topic, key).collect();
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
