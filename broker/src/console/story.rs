//! What happened to each message, from the core's trace events ([`rocklet_core::TraceEvent`],
//! on while the console is on): stored, half stored, checks, commit or rollback, deliveries,
//! acks, redeliveries, dead-lettering, keyed by the log offset of the record that holds the
//! message (a committed half keeps its half's offset).
//!
//! Bounded: the newest [`MAX_MESSAGES`] messages, [`MAX_EVENTS`] events each; older ones
//! are forgotten first. It holds what happened since the broker started (recovery replays
//! no events).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use rocklet_core::{Millis, TraceEvent, TraceKind};

/// Messages whose story is kept.
pub const MAX_MESSAGES: usize = 50_000;
/// Events kept per message (the first ones, then the last ones: the middle is dropped).
pub const MAX_EVENTS: usize = 64;

/// One event of a message's story.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub at: Millis,
    pub kind: &'static str,
    pub topic: String,
    pub detail: String,
}

#[derive(Default)]
struct Inner {
    by_offset: HashMap<u64, Vec<Event>>,
    order: VecDeque<u64>,
    /// Events dropped for a full story.
    dropped: u64,
}

/// The stories of recent messages.
#[derive(Default)]
pub struct Stories {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Stories {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stories").finish_non_exhaustive()
    }
}

impl Stories {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records one trace event (called on the core thread).
    pub fn record(&self, t: &TraceEvent) {
        // An offset commit names a state record, not a message.
        if t.kind == TraceKind::OffsetCommitted {
            return;
        }
        self.record_event(
            t.offset,
            Event {
                at: t.at,
                kind: t.kind.as_str(),
                topic: t.topic.clone(),
                detail: t.detail.clone(),
            },
        );
    }

    fn record_event(&self, offset: u64, e: Event) {
        let mut s = self.lock();
        let inner = &mut *s;
        let events = match inner.by_offset.get_mut(&offset) {
            Some(e) => e,
            None => {
                if inner.order.len() >= MAX_MESSAGES {
                    if let Some(old) = inner.order.pop_front() {
                        inner.by_offset.remove(&old);
                    }
                }
                inner.order.push_back(offset);
                inner.by_offset.entry(offset).or_default()
            }
        };
        if events.len() >= MAX_EVENTS {
            // Keep the beginning (how it came in) and the most recent.
            events.remove(MAX_EVENTS / 2);
            inner.dropped += 1;
        }
        events.push(e);
    }

    /// Adds an event of the broker's own (an operator's action) to a message's story.
    pub fn note(&self, offset: u64, at: Millis, kind: &'static str, detail: String) {
        self.record_event(
            offset,
            Event {
                at,
                kind,
                topic: String::new(),
                detail,
            },
        );
    }

    /// The story of the message whose record is at `offset` (empty when unknown).
    #[must_use]
    pub fn of(&self, offset: u64) -> Vec<Event> {
        self.lock()
            .by_offset
            .get(&offset)
            .cloned()
            .unwrap_or_default()
    }

    /// Messages with a story.
    #[must_use]
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// Whether no story is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(offset: u64, kind: TraceKind, at: Millis) -> TraceEvent {
        TraceEvent {
            at,
            kind,
            offset,
            topic: "T".into(),
            detail: String::new(),
        }
    }

    #[test]
    fn keeps_the_newest_messages_and_caps_each_story() {
        let s = Stories::default();
        for i in 0..(MAX_MESSAGES as u64 + 10) {
            s.record(&ev(i, TraceKind::Stored, i));
        }
        assert_eq!(s.len(), MAX_MESSAGES);
        assert!(s.of(0).is_empty(), "the oldest is forgotten");
        assert_eq!(s.of(MAX_MESSAGES as u64 + 9).len(), 1);
        let last = MAX_MESSAGES as u64 + 9;
        for i in 0..200 {
            s.record(&ev(last, TraceKind::Received, 1000 + i));
        }
        let story = s.of(last);
        assert_eq!(story.len(), MAX_EVENTS);
        assert_eq!(story[0].kind, "stored", "the beginning stays");
        assert_eq!(story.last().unwrap().at, 1199, "the newest stays");
        s.record(&ev(7, TraceKind::OffsetCommitted, 1));
        assert!(s.of(7).is_empty());
    }
}
