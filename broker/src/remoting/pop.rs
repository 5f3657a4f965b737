//! The receipt of RocketMQ 4/5 remoting pop consumers (POP_MESSAGE, ACK_MESSAGE,
//! CHANGE_MESSAGE_INVISIBLETIME) and how it maps onto the core's receipt handle.
//!
//! A popping client never sees a receipt handle. It builds one string per message, the
//! `extraInfo`, from the pop response header and the message, and sends it back in acks and
//! invisible-time changes:
//!
//! ```text
//!  extraInfo = ck popTime invisibleTime reviveQid retry brokerName queueId queueOffset
//!              (separated by one space)
//!
//!  field          from (pop response)                   from (change-invisible response)
//!  ck             startOffsetInfo of the message's queue the message's queue offset
//!  popTime        header popTime                        header popTime
//!  invisibleTime  header invisibleTime                  header invisibleTime
//!  reviveQid      header reviveQid                      header reviveQid
//!  retry          0: the topic itself (1, 2: pop retry topics, which rocklet never uses)
//!  brokerName     the client's name of the broker
//!  queueId, queueOffset  the message's (msgOffsetInfo)
//! ```
//!
//! The core's handle is (topic, queue, queue offset, generation), the generation naming the
//! delivery (a redelivery or an invisible-time change makes a new one; only a redelivery
//! makes old handles stale). A pop names one generation per queue, so the pop response carries it as the
//! queue's start offset (`startOffsetInfo`) with reviveQid 0, and `ck` brings it back.
//!
//! After a change of invisible time the client rebuilds extraInfo with `ck` = the queue
//! offset: only popTime, invisibleTime and reviveQid come from the broker. So that answer's
//! reviveQid is a token (from 1) of [`Renewals`], a bounded table holding the new
//! generation ([`MAX_RENEWALS`] tokens; the long expired and then the oldest go first).

use std::collections::BTreeMap;

use rocklet_core::{Millis, ReceiptHandle};

/// The `retry` field of a message popped from its own topic.
pub const NORMAL_TOPIC: &str = "0";
/// The reviveQid of an orderly pop's answer (Apache's `KeyBuilder.POP_ORDER_REVIVE_QUEUE`):
/// its receipts are a pop's (`ck` the generation), never a renewal token.
pub const ORDER_REVIVE_QID: u32 = 999;
/// Renewed receipts remembered at most (the oldest go first).
pub const MAX_RENEWALS: usize = 1 << 16;
/// When the table is full, renewed receipts whose message became visible again at least
/// this long ago are forgotten first (a forgotten token is refused; one still remembered
/// for a message delivered again since is refused by the core as stale).
pub const RENEWAL_LINGER_MS: Millis = 60_000;

/// A parsed `extraInfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtraInfo {
    pub ck: u64,
    pub pop_time: u64,
    pub invisible_ms: u64,
    pub revive_qid: i64,
    pub queue_id: u32,
    pub queue_offset: Option<u64>,
}

/// Parses `extraInfo` (7 fields, or 8 with the queue offset).
pub fn parse_extra_info(s: &str) -> Result<ExtraInfo, String> {
    let f: Vec<&str> = s.split(' ').collect();
    if !(7..=8).contains(&f.len()) {
        return Err(format!(
            "extraInfo `{s}` has {} fields, not 7 or 8 (ck popTime invisibleTime reviveQid retry brokerName queueId [queueOffset])",
            f.len()
        ));
    }
    fn num<T: std::str::FromStr>(s: &str, f: &str, what: &str) -> Result<T, String> {
        f.parse()
            .map_err(|_| format!("extraInfo `{s}`: {what} `{f}` is not a valid number"))
    }
    if f[4] != NORMAL_TOPIC {
        return Err(format!(
            "extraInfo `{s}` names a pop retry topic ({}); rocklet redelivers in the topic itself and pops none",
            f[4]
        ));
    }
    Ok(ExtraInfo {
        ck: num(s, f[0], "ck offset")?,
        pop_time: num(s, f[1], "popTime")?,
        invisible_ms: num(s, f[2], "invisibleTime")?,
        revive_qid: num(s, f[3], "reviveQid")?,
        queue_id: num(s, f[6], "queueId")?,
        queue_offset: match f.get(7) {
            Some(o) => Some(num(s, o, "queue offset")?),
            None => None,
        },
    })
}

/// `startOffsetInfo` and `msgOffsetInfo` of a pop response, from the messages' handles in
/// the order popped: per queue `0 <queue> <generation>` and `0 <queue> <offset>,<offset>…`,
/// queues joined by `;`.
#[must_use]
pub fn offset_infos(handles: &[&ReceiptHandle]) -> (String, String) {
    let mut queues: Vec<(u32, u64, Vec<u64>)> = Vec::new();
    for h in handles {
        match queues.iter_mut().find(|q| q.0 == h.queue_id) {
            Some(q) => q.2.push(h.queue_offset),
            None => queues.push((h.queue_id, h.generation, vec![h.queue_offset])),
        }
    }
    let start = queues
        .iter()
        .map(|(q, g, _)| format!("{NORMAL_TOPIC} {q} {g}"))
        .collect::<Vec<_>>()
        .join(";");
    let msgs = queues
        .iter()
        .map(|(q, _, offs)| {
            let o: Vec<String> = offs.iter().map(u64::to_string).collect();
            format!("{NORMAL_TOPIC} {q} {}", o.join(","))
        })
        .collect::<Vec<_>>()
        .join(";");
    (start, msgs)
}

#[derive(Clone, Debug)]
struct Renewal {
    group: String,
    handle: ReceiptHandle,
    forget_at: Millis,
}

/// Generations of deliveries whose invisible time was changed over remoting, by token.
#[derive(Debug)]
pub struct Renewals {
    by_token: BTreeMap<u32, Renewal>,
    next: u32,
}

impl Default for Renewals {
    fn default() -> Self {
        Renewals {
            by_token: BTreeMap::new(),
            next: 1,
        }
    }
}

impl Renewals {
    /// Remembers `handle` (visible again at `visible_at`) and returns its token (≥ 1, fits
    /// an i32 reviveQid).
    pub fn insert(
        &mut self,
        now: Millis,
        group: &str,
        handle: ReceiptHandle,
        visible_at: Millis,
    ) -> u32 {
        if self.by_token.len() >= MAX_RENEWALS {
            // Full: forget what is long past, then the oldest, down to 3/4 (so the next
            // quarter of inserts costs no sweep).
            self.by_token.retain(|_, r| r.forget_at > now);
            while self.by_token.len() > MAX_RENEWALS / 4 * 3 {
                self.by_token.pop_first();
            }
        }
        let token = self.next;
        self.next = match self.next + 1 {
            ORDER_REVIVE_QID => ORDER_REVIVE_QID + 1,
            n if n > i32::MAX as u32 => 1,
            n => n,
        };
        self.by_token.insert(
            token,
            Renewal {
                group: group.to_string(),
                handle,
                forget_at: visible_at.saturating_add(RENEWAL_LINGER_MS),
            },
        );
        token
    }

    /// The core handle a renewed receipt names, if `token` is remembered for this group,
    /// topic, queue and offset.
    #[must_use]
    pub fn get(
        &self,
        token: u32,
        group: &str,
        topic: &str,
        queue_id: u32,
        queue_offset: u64,
    ) -> Option<ReceiptHandle> {
        self.by_token
            .get(&token)
            .filter(|r| {
                r.group == group
                    && r.handle.topic == topic
                    && r.handle.queue_id == queue_id
                    && r.handle.queue_offset == queue_offset
            })
            .map(|r| r.handle.clone())
    }

    /// Forgets a token (its message was acked).
    pub fn remove(&mut self, token: u32) {
        self.by_token.remove(&token);
    }

    /// Tokens remembered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.by_token.len()
    }

    /// Whether none is remembered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_token.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(q: u32, off: u64, g: u64) -> ReceiptHandle {
        ReceiptHandle {
            topic: "T".into(),
            queue_id: q,
            queue_offset: off,
            generation: g,
        }
    }

    #[test]
    fn extra_info_parses_as_clients_build_it() {
        let e = parse_extra_info("4096 1700000000000 30000 0 0 rocklet 2 17").unwrap();
        assert_eq!(
            e,
            ExtraInfo {
                ck: 4096,
                pop_time: 1_700_000_000_000,
                invisible_ms: 30_000,
                revive_qid: 0,
                queue_id: 2,
                queue_offset: Some(17),
            }
        );
        let e = parse_extra_info("1 2 3 4 0 b 5").unwrap();
        assert_eq!(e.queue_offset, None);
        for bad in [
            "",
            "1 2 3",
            "1 2 3 4 0 b 5 6 7",
            "x 2 3 4 0 b 5 6",
            "1 2 3 4 0 b -5 6",
            "1 2 3 4 0 b 5 y",
            "1 2 3 4 1 b 5 6",
        ] {
            let e = parse_extra_info(bad).unwrap_err();
            assert!(e.contains("extraInfo"), "{bad}: {e}");
        }
        assert!(parse_extra_info("1 2 3 4 2 b 5 6")
            .unwrap_err()
            .contains("retry topic"));
    }

    #[test]
    fn offset_infos_group_by_queue_in_pop_order() {
        let (a, b, c) = (h(1, 5, 100), h(1, 6, 100), h(0, 9, 200));
        let (start, msgs) = offset_infos(&[&a, &c, &b]);
        assert_eq!(start, "0 1 100;0 0 200");
        assert_eq!(msgs, "0 1 5,6;0 0 9");
        assert_eq!(offset_infos(&[]), (String::new(), String::new()));
    }

    #[test]
    fn renewals_are_found_by_token_and_bounded() {
        let mut r = Renewals::default();
        let t = r.insert(0, "G", h(1, 5, 300), 1_000);
        assert_eq!(t, 1);
        assert_eq!(r.get(t, "G", "T", 1, 5), Some(h(1, 5, 300)));
        // Another group, queue or offset does not match.
        assert_eq!(r.get(t, "H", "T", 1, 5), None);
        assert_eq!(r.get(t, "G", "T", 2, 5), None);
        assert_eq!(r.get(t, "G", "T", 1, 6), None);
        assert_eq!(r.get(t, "G", "U", 1, 5), None);
        r.remove(t);
        assert!(r.is_empty());
        // At most MAX_RENEWALS: when full, the long expired go first, then the oldest.
        let mut r = Renewals::default();
        let young = r.insert(0, "G", h(1, 5, 300), 10_000_000);
        for i in 0..MAX_RENEWALS as u64 - 1 {
            r.insert(0, "G", h(0, i, i), 1_000);
        }
        assert_eq!(r.len(), MAX_RENEWALS);
        let t = r.insert(1_000 + RENEWAL_LINGER_MS, "G", h(0, 7, 7), 2_000_000);
        assert_eq!(r.len(), 2, "all expired ones forgotten at once");
        assert!(r.get(young, "G", "T", 1, 5).is_some());
        assert!(r.get(t, "G", "T", 0, 7).is_some());
        let mut r = Renewals::default();
        for i in 0..MAX_RENEWALS as u64 + 10 {
            r.insert(0, "G", h(0, i, i), 1_000);
        }
        assert_eq!(r.len(), MAX_RENEWALS / 4 * 3 + 10);
        assert!(r.get(1, "G", "T", 0, 0).is_none());
        // Token ORDER_REVIVE_QID was skipped: the last is one further.
        let last = MAX_RENEWALS as u32 + 11;
        assert!(r.get(last, "G", "T", 0, u64::from(last) - 2).is_some());
        let mut r = Renewals {
            next: ORDER_REVIVE_QID - 1,
            ..Renewals::default()
        };
        assert_eq!(r.insert(0, "G", h(0, 0, 0), 1), ORDER_REVIVE_QID - 1);
        assert_eq!(r.insert(0, "G", h(0, 1, 1), 1), ORDER_REVIVE_QID + 1);
        // Tokens stay positive i32s.
        let mut r = Renewals {
            next: i32::MAX as u32,
            ..Renewals::default()
        };
        assert_eq!(r.insert(0, "G", h(0, 0, 0), 1), i32::MAX as u32);
        assert_eq!(r.insert(0, "G", h(0, 1, 1), 1), 1);
    }
}
