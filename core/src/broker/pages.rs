//! Paged reads for tools that show the broker (the operator console): each call costs at
//! most a page, whatever the number of topics or pending records, and hands back the
//! cursor of the next page.

use super::*;

/// Most items one page holds; a larger `limit` is cut to it.
pub const MAX_PAGE: usize = 1000;

/// Rows a page call looks at, at most, per item it may return: resolved rows not yet
/// compacted away and topics that are not listed are skipped within this budget, and a
/// page cut short by it still names where the next one starts.
const SCAN_PER_ITEM: usize = 4;

/// One page of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Where the next page starts (pass it as `after`); `None`: this was the last page.
    pub next: Option<u64>,
}

/// A consumer group's place in one queue ([`Broker::group_lags`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupLag {
    pub group: String,
    pub topic: String,
    pub queue_id: u32,
    /// The committed pull offset, or (receives) the next queue offset to hand out.
    pub consumed: u64,
    /// Received and not yet acked (receives only).
    pub inflight: u64,
    /// Visible messages not yet consumed: after `consumed`, plus those in flight.
    pub behind: u64,
    /// Receives (pop) rather than pulls with committed offsets.
    pub pop: bool,
}

fn budget(limit: usize) -> (usize, usize) {
    let limit = limit.clamp(1, MAX_PAGE);
    (limit, limit * SCAN_PER_ITEM + 64)
}

impl<S: Storage> Broker<S> {
    /// Pending transactions after `after` (a transaction id: its half's log offset), in log
    /// order (oldest first), at most `limit` (cut to [`MAX_PAGE`]).
    #[must_use]
    pub fn pending_transactions_after(
        &self,
        after: Option<TxnId>,
        limit: usize,
    ) -> Page<PendingTxnInfo> {
        let (limit, mut scan) = budget(limit);
        let mut items = Vec::new();
        let mut last = None;
        let mut rows = self.txns.rows_after(after.map(|t| t.0)).peekable();
        for t in rows.by_ref() {
            last = Some(t.offset);
            scan -= 1;
            if !t.is_dead() {
                items.push(self.txn_info(t));
            }
            if items.len() == limit || scan == 0 {
                break;
            }
        }
        // Resolved rows right after the page are passed over too (within the budget), so
        // a page ending before only those says it is the last.
        while scan > 0 && rows.peek().is_some_and(|r| r.is_dead()) {
            last = rows.next().map(|r| r.offset);
            scan -= 1;
        }
        let next = rows.peek().and(last);
        Page { items, next }
    }

    /// One pending transaction, `None` when `txn` is not pending.
    #[must_use]
    pub fn pending_transaction(&self, txn: TxnId) -> Option<PendingTxnInfo> {
        self.txns.get(txn.0).map(|t| self.txn_info(t))
    }

    fn txn_info(&self, t: &PendingTxn) -> PendingTxnInfo {
        let q = &self.queues[t.queue as usize];
        PendingTxnInfo {
            txn: TxnId(t.offset),
            group: self.groups[t.group as usize].name.clone(),
            topic: self.topics[q.topic as usize].name.clone(),
            queue_id: q.queue_id,
            checks: u32::from(t.checks),
            next_check: (t.deadline != PARKED).then_some(t.deadline),
        }
    }

    /// Delayed messages not yet delivered after log offset `after`, in log order, at most
    /// `limit` (cut to [`MAX_PAGE`]).
    #[must_use]
    pub fn pending_delays_after(&self, after: Option<u64>, limit: usize) -> Page<PendingDelayInfo> {
        let (limit, mut scan) = budget(limit);
        let mut items = Vec::new();
        let mut last = None;
        let mut rows = self.delays.rows_after(after).peekable();
        for d in rows.by_ref() {
            last = Some(d.offset);
            scan -= 1;
            if !d.is_dead() {
                let q = &self.queues[d.queue as usize];
                items.push(PendingDelayInfo {
                    offset: d.offset,
                    topic: self.topics[q.topic as usize].name.clone(),
                    queue_id: q.queue_id,
                    due: d.due,
                });
            }
            if items.len() == limit || scan == 0 {
                break;
            }
        }
        // Resolved rows right after the page are passed over too (within the budget), so
        // a page ending before only those says it is the last.
        while scan > 0 && rows.peek().is_some_and(|r| r.is_dead()) {
            last = rows.next().map(|r| r.offset);
            scan -= 1;
        }
        let next = rows.peek().and(last);
        Page { items, next }
    }

    /// Consumer-visible topics (as [`Broker::topics`] lists them) in the order they were
    /// created, from the one after position `after` on, at most `limit` (cut to
    /// [`MAX_PAGE`]). `next` is a position in that order, not a count of topics.
    #[must_use]
    pub fn topics_after(&self, after: Option<u64>, limit: usize) -> Page<TopicInfo> {
        let (limit, mut scan) = budget(limit);
        let from = after.map_or(0, |a| (a as usize).saturating_add(1));
        let mut items = Vec::new();
        let mut last = None;
        let mut i = from;
        while i < self.topics.len() {
            let t = &self.topics[i];
            last = Some(i as u64);
            scan -= 1;
            if t.kind.is_readable() && !t.deleted {
                items.push(TopicInfo {
                    name: t.name.clone(),
                    queues: t
                        .queues
                        .iter()
                        .map(|&q| {
                            let q = &self.queues[q as usize];
                            (q.queue_id, q.next, q.visible_end())
                        })
                        .collect(),
                });
            }
            i += 1;
            if items.len() == limit || scan == 0 {
                break;
            }
        }
        let next = (i < self.topics.len()).then_some(()).and(last);
        Page { items, next }
    }

    /// How far each consumer group is in the queues of `topics`: one row per group and
    /// queue that has a committed pull offset or receives (pop) state. One pass over the
    /// broker's offsets and pop states, whatever the number of topics asked for.
    #[must_use]
    pub fn group_lags(&self, topics: &[&str]) -> Vec<GroupLag> {
        let mut wanted: HashMap<u32, ()> = HashMap::new();
        for name in topics {
            if let Some(&t) = self.topic_ids.get(*name) {
                for &q in &self.topics[t as usize].queues {
                    wanted.insert(q, ());
                }
            }
        }
        let row = |g: u32, q: u32, consumed: u64, inflight: u64, pop: bool| {
            let queue = &self.queues[q as usize];
            GroupLag {
                group: self.groups[g as usize].name.clone(),
                topic: self.topics[queue.topic as usize].name.clone(),
                queue_id: queue.queue_id,
                consumed,
                inflight,
                behind: queue.visible_end().saturating_sub(consumed) + inflight,
                pop,
            }
        };
        let mut out: Vec<GroupLag> = self
            .offsets
            .iter()
            .filter(|((_, q), _)| wanted.contains_key(q))
            .map(|(&(g, q), &off)| row(g, q, off, 0, false))
            .chain(
                self.pops
                    .iter()
                    .filter(|((_, q), _)| wanted.contains_key(q))
                    .map(|(&(g, q), p)| row(g, q, p.next, p.inflight.len() as u64, true)),
            )
            .collect();
        out.sort_by(|a, b| {
            (&a.topic, &a.group, a.queue_id, a.pop).cmp(&(&b.topic, &b.group, b.queue_id, b.pop))
        });
        out
    }

    /// Dead-letter topics (`%DLQ%<group>`) that exist, by consumer group in the order the
    /// groups became known, after group position `after`, at most `limit` (cut to
    /// [`MAX_PAGE`]). A lookup per group: never a walk over every topic.
    #[must_use]
    pub fn dead_letter_topics_after(&self, after: Option<u64>, limit: usize) -> Page<TopicInfo> {
        let (limit, mut scan) = budget(limit);
        let from = after.map_or(0, |a| (a as usize).saturating_add(1));
        let mut items = Vec::new();
        let mut last = None;
        let mut i = from;
        while i < self.groups.len() {
            last = Some(i as u64);
            scan -= 1;
            if let Some(t) = self.topic_info(&topic::dlq(&self.groups[i].name)) {
                if !self.topics[self.topic_ids[t.name.as_str()] as usize].deleted {
                    items.push(t);
                }
            }
            i += 1;
            if items.len() == limit || scan == 0 {
                break;
            }
        }
        let next = (i < self.groups.len()).then_some(()).and(last);
        Page { items, next }
    }

    /// The visible message whose record is at log offset `offset` (what an offset message id
    /// names: [`offset_msg_id`]), `None` when no consumer queue shows one there.
    pub fn message_at(&mut self, offset: u64) -> Res<Option<Message>, S> {
        let Some((q, qoff)) = self.visible_place(offset)? else {
            return Ok(None);
        };
        let Some(unit) = self.unit_at(q, qoff)? else {
            return Ok(None);
        };
        self.read_message(q, qoff, unit)
    }

    /// Topics the broker holds, every kind and deleted ones included (the positions
    /// [`Broker::topics_after`] pages over).
    #[must_use]
    pub fn topic_slots(&self) -> usize {
        self.topics.len()
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::String;
    use alloc::vec;
    use alloc::vec::Vec;

    use crate::testing::Sim;
    use crate::*;

    fn sim() -> Sim<MemStorage> {
        Sim::new(Config {
            segment_size: 8 << 20,
            ..Config::default()
        })
        .unwrap()
    }

    fn prepare(sim: &mut Sim<MemStorage>, topic: &str) -> TxnId {
        let req = Request::Prepare {
            group: "G".into(),
            message: NewMessage::new(topic, "x"),
            check_immunity_ms: None,
        };
        match sim.request(req).unwrap() {
            Reply::Sent(r) => r[0].txn.unwrap(),
            other => panic!("prepare failed: {other:?}"),
        }
    }

    #[test]
    fn pending_pages_cover_every_transaction_once_and_skip_resolved_ones() {
        let mut s = sim();
        let txns: Vec<TxnId> = (0..25).map(|_| prepare(&mut s, "T")).collect();
        // Resolve every third: they must not show, and the rest must each show once.
        for t in txns.iter().step_by(3) {
            let r = s
                .request(Request::EndTransaction {
                    txn: *t,
                    resolution: Resolution::Rollback,
                    group: Some("G".into()),
                    from_check: false,
                })
                .unwrap();
            assert!(matches!(r, Reply::Ended { .. }), "{r:?}");
        }
        let want: Vec<TxnId> = txns
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 3 != 0)
            .map(|(_, t)| *t)
            .collect();
        let mut got = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let p = s.broker.pending_transactions_after(after, 4);
            assert!(p.items.len() <= 4);
            pages += 1;
            got.extend(p.items.iter().map(|i| i.txn));
            match p.next {
                Some(n) => after = Some(TxnId(n)),
                None => break,
            }
        }
        assert_eq!(got, want);
        assert_eq!(pages, want.len().div_ceil(4));
        assert_eq!(
            s.broker.pending_transaction(want[0]).map(|p| p.txn),
            Some(want[0])
        );
        assert_eq!(s.broker.pending_transaction(txns[0]), None);
        // A limit above the page size is cut to it; zero still gives one.
        assert_eq!(s.broker.pending_transactions_after(None, 0).items.len(), 1);
    }

    #[test]
    fn a_page_over_resolved_rows_stops_at_its_scan_budget_and_says_where_to_go_on() {
        let mut s = sim();
        let txns: Vec<TxnId> = (0..600).map(|_| prepare(&mut s, "T")).collect();
        // 250 resolved behind a live first row: they stay in the table (no compaction
        // below half dead), so a page after the first must skip them within its budget.
        for t in &txns[1..=250] {
            s.request(Request::EndTransaction {
                txn: *t,
                resolution: Resolution::Commit,
                group: Some("G".into()),
                from_check: false,
            })
            .unwrap();
        }
        let first = s.broker.pending_transactions_after(Some(txns[0]), 1);
        assert!(
            first.items.is_empty(),
            "the budget (68 rows) ends inside the resolved run"
        );
        let mut next = first.next;
        let mut pages = 1;
        let found = loop {
            let p = s
                .broker
                .pending_transactions_after(Some(TxnId(next.expect("a cursor"))), 1);
            pages += 1;
            if let Some(i) = p.items.first() {
                break i.txn;
            }
            next = p.next;
        };
        assert_eq!(found, txns[251]);
        assert_eq!(
            pages, 4,
            "250 resolved rows at 68 a page, then the live one"
        );
    }

    #[test]
    fn topic_pages_list_user_topics_in_creation_order() {
        let mut s = sim();
        for i in 0..10 {
            s.broker
                .create_topic(&alloc::format!("t{i}"), 2)
                .unwrap()
                .unwrap();
        }
        // A half creates internal topics: they are not listed.
        prepare(&mut s, "t3");
        let mut names = Vec::new();
        let mut after = None;
        loop {
            let p = s.broker.topics_after(after, 3);
            assert!(p.items.len() <= 3);
            names.extend(p.items.into_iter().map(|t| t.name));
            match p.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let want: Vec<String> = (0..10).map(|i| alloc::format!("t{i}")).collect();
        assert_eq!(names, want);
        let all: Vec<String> = s.broker.topics().into_iter().map(|t| t.name).collect();
        assert_eq!(all, want);
    }

    #[test]
    fn group_lags_count_what_a_receiving_group_has_not_acked() {
        let mut s = sim();
        s.broker.create_topic("L", 1).unwrap().unwrap();
        for _ in 0..5 {
            s.request(Request::Send {
                messages: vec![NewMessage::new("L", "x")],
            })
            .unwrap();
        }
        assert!(s.broker.group_lags(&["L"]).is_empty());
        let r = s
            .request(Request::Receive {
                group: "C".into(),
                topic: "L".into(),
                queue_id: None,
                max: 2,
                invisible_ms: 60_000,
                filter: TagFilter::All,
            })
            .unwrap();
        let Reply::Received(got) = r else {
            panic!("{r:?}")
        };
        assert_eq!(got.len(), 2);
        let lags = s.broker.group_lags(&["L", "nope"]);
        assert_eq!(lags.len(), 1, "{lags:?}");
        assert_eq!(
            (lags[0].consumed, lags[0].inflight, lags[0].behind),
            (2, 2, 5)
        );
        s.request(Request::Ack {
            group: "C".into(),
            handle: got[0].handle.clone(),
        })
        .unwrap();
        assert_eq!(s.broker.group_lags(&["L"])[0].behind, 4);
        assert!(s.broker.dead_letter_topics_after(None, 10).items.is_empty());
        s.request(Request::ForwardToDeadLetter {
            group: "C".into(),
            handle: got[1].handle.clone(),
        })
        .unwrap();
        let dlq = s.broker.dead_letter_topics_after(None, 10);
        assert_eq!(dlq.next, None);
        assert_eq!(dlq.items.len(), 1);
        assert_eq!(dlq.items[0].name, "%DLQ%C");
        assert_eq!(dlq.items[0].queues[0].2, 1, "one message in it");
    }

    #[test]
    fn a_message_is_found_at_its_log_offset_once_visible() {
        let mut s = sim();
        let sent = match s
            .request(Request::Send {
                messages: vec![NewMessage::new("M", "x")],
            })
            .unwrap()
        {
            Reply::Sent(r) => r[0].clone(),
            other => panic!("{other:?}"),
        };
        let txn = prepare(&mut s, "M");
        let m = s.broker.message_at(sent.offset).unwrap().unwrap();
        assert_eq!(m.topic, "M");
        assert_eq!(
            s.broker.message_at(txn.0).unwrap(),
            None,
            "a pending half is not visible"
        );
        s.request(Request::EndTransaction {
            txn,
            resolution: Resolution::Commit,
            group: Some("G".into()),
            from_check: false,
        })
        .unwrap();
        assert_eq!(s.broker.message_at(txn.0).unwrap().unwrap().offset, txn.0);
    }

    #[test]
    fn delay_pages_follow_log_order() {
        let mut s = sim();
        for level in [3u32, 1, 2] {
            let mut m = NewMessage::new("D", "x");
            m.delay = Some(Delay::Level(level));
            s.request(Request::Send { messages: vec![m] }).unwrap();
        }
        let p1 = s.broker.pending_delays_after(None, 2);
        assert_eq!(p1.items.len(), 2);
        let p2 = s.broker.pending_delays_after(p1.next, 2);
        assert_eq!(p2.items.len(), 1);
        assert_eq!(p2.next, None);
        let all = s.broker.pending_delays(10);
        let paged: Vec<_> = p1.items.into_iter().chain(p2.items).collect();
        assert_eq!(paged, all);
    }
}
