//! The first pass: read the config files and the whole commit log, check that the store
//! can be imported, and settle what becomes of each transaction and delayed message. It
//! writes nothing; [`super::write`] follows its [`Plan`].
//!
//! - **User queues** must run from queue offset 0 without a gap (an inner batch of n
//!   messages takes n offsets; half and rolled-back records in a user topic, as RocketMQ
//!   before 4.3 kept them, take none), or their queue offsets could not be kept.
//! - **Transactions.** RocketMQ's halves sit in `RMQ_SYS_TRANS_HALF_TOPIC`; a check puts a
//!   copy back at the end of that queue (with `TRANSACTION_CHECK_TIMES` incremented), and the
//!   checker's progress is the offset of group `CID_RMQ_SYS_TRANS` in `consumerOffset.json`.
//!   END_TRANSACTION writes an op record (tag `d`, body: half queue offsets separated by
//!   `,`) to `RMQ_SYS_TRANS_OP_HALF_TOPIC`, and on commit a copy of the half into the real
//!   topic, whose PREPARED_TRANSACTION_OFFSET names the half. The copies of one transaction
//!   share its UNIQ_KEY: it is committed when a commit copy names one of them, rolled back
//!   when an op removes one and none was committed, pending when its latest copy is not
//!   behind the checker, and was discarded by RocketMQ (check max, file reserved time)
//!   otherwise.
//! - **Delays.** A delay-level record (`SCHEDULE_TOPIC_XXXX`, queue level − 1) is delivered
//!   as a copy into `REAL_TOPIC` that keeps the REAL_TOPIC property; a timer record
//!   (`rmq_sys_wheel_timer`) as a copy that gains TIMER_DEQUEUE_MS, or it is rolled (copied
//!   back into the timer topic with TIMER_ROLL_TIMES) or recalled (a record whose
//!   TIMER_DEL_UNIQKEY is `<topic>+<UNIQ_KEY>`). A delivered copy matches the oldest waiting
//!   record of its UNIQ_KEY and topic. Without such evidence the checkpoints decide as
//!   RocketMQ's own restart would: `delayOffset.json` (per level, the next schedule queue
//!   offset to deliver) and `timercheck` (records below lastTimerQueueOffset whose time is
//!   before lastReadTimeMs were delivered).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use rocklet_core::record::{sys_flag, RecordView};
use rocklet_core::topic;
use rocklet_core::{Config, Millis};

use super::store::Store;
use super::{MoveError, PendingTransaction, Report};

use super::records::{kind, prop, split_inner, system_group, Kind, CHECKER_GROUP};

/// A half message copy in `RMQ_SYS_TRANS_HALF_TOPIC`.
#[derive(Debug)]
struct Half {
    offset: u64,
    queue_id: u32,
    queue_offset: u64,
    checks: u32,
    group: Option<String>,
    real_topic: Option<String>,
    real_qid: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DelayState {
    Waiting,
    Delivered,
    /// Rolled into a later timer record.
    Superseded,
    Recalled,
}

#[derive(Debug)]
struct DelayRec {
    offset: u64,
    /// Delay level; `None` for a timer record.
    level: Option<u32>,
    queue_offset: u64,
    due: Millis,
    real_topic: String,
    has_key: bool,
    state: DelayState,
}

/// What the second pass writes.
#[derive(Debug, Default)]
pub(super) struct Plan {
    /// User topics and the queues each needs.
    pub topics: BTreeMap<String, u32>,
    /// Consumer groups: FIFO (consumeMessageOrderly) or not.
    pub groups: BTreeMap<String, bool>,
    /// (group, topic, queue id, offset).
    pub offsets: Vec<(String, String, u32, u64)>,
    /// Queues whose first kept message is past queue offset 0 (RocketMQ deleted the files
    /// before it): (topic, queue id, first queue offset).
    pub starts: Vec<(String, u32, u64)>,
    /// Live half copies to store as pending transactions.
    pub pending_halves: HashSet<u64>,
    /// Delayed records to send after everything else, with their due time, in log order.
    pub pending_delays: Vec<(u64, Millis)>,
    /// Store time of the first and last record.
    pub first_time: Millis,
    pub last_time: Millis,
    pub report: Report,
}

struct Analysis<'c> {
    cfg: &'c Config,
    plan: Plan,
    /// Next queue offset per user queue.
    next: HashMap<(String, u32), u64>,
    halves: Vec<Half>,
    /// Half indices by transaction (UNIQ_KEY, or the copy's offset without one).
    txns: BTreeMap<String, Vec<usize>>,
    /// (half queue id, half queue offset) removed by op records.
    removed: HashSet<(u32, u64)>,
    /// Half offsets named by commit copies.
    committed: HashSet<u64>,
    delays: Vec<DelayRec>,
    /// Waiting delay records by (UNIQ_KEY, real topic), oldest first.
    waiting: HashMap<(String, String), VecDeque<usize>>,
    /// Delivered copies that matched a record only the checkpoint did not yet count.
    stale_checkpoint: u64,
    /// The first log offset the store still holds.
    log_start: u64,
}

pub(super) fn analyze(store: &Store, cfg: &Config) -> Result<Plan, MoveError> {
    let mut a = Analysis {
        cfg,
        plan: Plan::default(),
        next: HashMap::new(),
        halves: Vec::new(),
        txns: BTreeMap::new(),
        removed: HashSet::new(),
        committed: HashSet::new(),
        delays: Vec::new(),
        waiting: HashMap::new(),
        stale_checkpoint: 0,
        log_start: store.first_offset(),
    };
    let mut first = None;
    let end = store.scan(|off, r| {
        first.get_or_insert(r.header.store_timestamp);
        a.plan.last_time = a.plan.last_time.max(r.header.store_timestamp);
        a.record(off, r)
    })?;
    a.plan.first_time = first.unwrap_or(0);
    a.plan.report.records = end.records;
    a.plan.report.bytes = end.end - store.first_offset();
    if let Some((off, bytes, why)) = &end.cut {
        a.plan.report.notes.push(format!(
            "the last commit-log file ends in {bytes} bytes that are not a record, at offset {off} ({why}): left out, as RocketMQ's recovery cuts a torn tail"
        ));
    }
    let offsets = read_offsets(store, &mut a.plan.report)?;
    a.settle_transactions(&offsets);
    a.settle_delays(store)?;
    a.config(store, offsets)?;
    Ok(a.plan)
}

impl Analysis<'_> {
    fn record(&mut self, off: u64, r: &RecordView<'_>) -> Result<(), MoveError> {
        match kind(r.topic) {
            Kind::User => self.user(off, r),
            Kind::Half => {
                let key = r
                    .prop(prop::UNIQ_KEY)
                    .map_or_else(|| format!("@{off}"), String::from);
                self.txns.entry(key).or_default().push(self.halves.len());
                self.halves.push(Half {
                    offset: off,
                    queue_id: r.header.queue_id,
                    queue_offset: r.header.queue_offset,
                    checks: r
                        .prop(prop::CHECK_TIMES)
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(0),
                    group: r.prop(prop::PGROUP).map(String::from),
                    real_topic: r.prop(prop::REAL_TOPIC).map(String::from),
                    real_qid: r.prop(prop::REAL_QID).and_then(|q| q.parse().ok()),
                });
                Ok(())
            }
            Kind::Op => {
                if r.prop(prop::TAGS) != Some("d") {
                    self.plan.report.skip(format!(
                        "op records with tag {:?} (RocketMQ writes only \"d\")",
                        r.prop(prop::TAGS).unwrap_or("")
                    ));
                    return Ok(());
                }
                let body = String::from_utf8_lossy(r.body);
                for o in body.split(',').filter(|s| !s.trim().is_empty()) {
                    match o.trim().parse::<u64>() {
                        Ok(q) => {
                            self.removed.insert((r.header.queue_id, q));
                        }
                        Err(_) => self
                            .plan
                            .report
                            .skip("op record entries that are not a queue offset"),
                    }
                }
                Ok(())
            }
            Kind::Schedule => {
                let level = r.header.queue_id + 1;
                let n = self.cfg.delay_levels.len() as u32;
                let delay = self.cfg.delay_levels[(level.min(n) - 1) as usize];
                self.delay(
                    off,
                    r,
                    Some(level),
                    r.header.store_timestamp.saturating_add(delay),
                );
                Ok(())
            }
            Kind::Timer => {
                if let Some(target) = r.prop(prop::TIMER_DEL_UNIQKEY) {
                    // `<topic>+<UNIQ_KEY>`: recalls the oldest waiting timer of that message.
                    if let Some((t, key)) = target.split_once('+') {
                        if let Some(i) = self
                            .waiting
                            .get_mut(&(key.to_string(), t.to_string()))
                            .and_then(VecDeque::pop_front)
                        {
                            self.delays[i].state = DelayState::Recalled;
                            self.plan.report.recalled_timers += 1;
                        }
                    }
                    return Ok(());
                }
                let Some(due) = r.prop(prop::TIMER_OUT_MS).and_then(|s| s.parse().ok()) else {
                    self.plan
                        .report
                        .skip(format!("records of {} without TIMER_OUT_MS", r.topic));
                    return Ok(());
                };
                if r.prop(prop::TIMER_ROLL_TIMES).is_some() {
                    // A roll: the wheel put the message back for later; this copy replaces it.
                    if let Some(key) = r.prop(prop::UNIQ_KEY) {
                        let real = r.prop(prop::REAL_TOPIC).unwrap_or("");
                        if let Some(i) = self
                            .waiting
                            .get_mut(&(key.to_string(), real.to_string()))
                            .and_then(VecDeque::pop_front)
                        {
                            self.delays[i].state = DelayState::Superseded;
                        }
                    }
                }
                self.delay(off, r, None, due);
                Ok(())
            }
            Kind::Skip(why) => {
                self.plan.report.skip(why);
                Ok(())
            }
        }
    }

    fn delay(&mut self, off: u64, r: &RecordView<'_>, level: Option<u32>, due: Millis) {
        let (Some(real), Some(qid)) = (
            r.prop(prop::REAL_TOPIC),
            r.prop(prop::REAL_QID).and_then(|q| q.parse::<u32>().ok()),
        ) else {
            self.plan.report.skip(format!(
                "records of {} without REAL_TOPIC and REAL_QID",
                r.topic
            ));
            return;
        };
        let i = self.delays.len();
        let key = r.prop(prop::UNIQ_KEY);
        self.delays.push(DelayRec {
            offset: off,
            level,
            queue_offset: r.header.queue_offset,
            due,
            real_topic: real.to_string(),
            has_key: key.is_some(),
            state: DelayState::Waiting,
        });
        if kind(real) == Kind::User {
            self.need_queue(real, qid);
        }
        if let Some(key) = key {
            self.waiting
                .entry((key.to_string(), real.to_string()))
                .or_default()
                .push_back(i);
        }
    }

    fn need_queue(&mut self, t: &str, qid: u32) {
        need_queue(&mut self.plan.topics, t, qid);
    }

    fn user(&mut self, off: u64, r: &RecordView<'_>) -> Result<(), MoveError> {
        let t = r.topic;
        let qid = r.header.queue_id;
        let tx = r.header.sys_flag & sys_flag::TRANSACTION_TYPE_MASK;
        if tx == sys_flag::TRANSACTION_PREPARED_TYPE || tx == sys_flag::TRANSACTION_ROLLBACK_TYPE {
            // RocketMQ before 4.3 kept halves in the real topic; they take no queue offset.
            self.plan.report.skip(format!(
                "half or rolled-back records in user topic {t} (RocketMQ before 4.3): never visible"
            ));
            return Ok(());
        }
        let n = if r.header.sys_flag & sys_flag::INNER_BATCH != 0 {
            let body = super::write::plain_body(r, self.cfg)
                .map_err(|why| refused_record(off, r, &why))?;
            let inner = split_inner(&body).map_err(|why| refused_record(off, r, &why))?;
            if let Some(num) = r
                .prop(prop::INNER_NUM)
                .and_then(|s| s.parse::<usize>().ok())
            {
                if num != inner.len() {
                    return Err(refused_record(
                        off,
                        r,
                        &format!(
                            "INNER_NUM says {num} messages, the body holds {}",
                            inner.len()
                        ),
                    ));
                }
            }
            inner.len() as u64
        } else {
            if r.header.sys_flag & sys_flag::COMPRESSED != 0 {
                super::write::plain_body(r, self.cfg)
                    .map_err(|why| refused_record(off, r, &why))?;
            }
            1
        };
        let key = (t.to_string(), qid);
        let first = !self.next.contains_key(&key);
        if first && r.header.queue_offset != 0 && self.log_start > 0 {
            // RocketMQ deleted the files that held its first messages (fileReservedTime): the
            // queue starts where its oldest kept message is, so offsets stay RocketMQ's.
            self.plan
                .starts
                .push((t.to_string(), qid, r.header.queue_offset));
            self.next.insert(key.clone(), r.header.queue_offset);
        }
        let next = self.next.entry(key).or_insert(0);
        if *next != r.header.queue_offset {
            return Err(MoveError::refused(if first {
                format!(
                    "queue {t}:{qid} starts at queue offset {} (log offset {off}), not 0, although the commit log starts at offset 0: records are missing, so its queue offsets could not be kept",
                    r.header.queue_offset
                )
            } else {
                format!(
                    "queue {t}:{qid} jumps from queue offset {} to {} at log offset {off}: records are missing, so its queue offsets could not be kept",
                    *next, r.header.queue_offset
                )
            }));
        }
        *next += n;
        self.need_queue(t, qid);
        if tx == sys_flag::TRANSACTION_COMMIT_TYPE {
            self.committed.insert(r.header.prepared_offset);
        }
        if r.prop(prop::MULTI_DISPATCH).is_some() {
            self.plan.report.skip(
                "LMQ dispatches (INNER_MULTI_DISPATCH) of messages imported in their own topic",
            );
        }
        // A delivered copy of a delayed message.
        if r.prop(prop::REAL_TOPIC).is_some() || r.prop(prop::TIMER_DEQUEUE_MS).is_some() {
            if let Some(key) = r.prop(prop::UNIQ_KEY) {
                if let Some(i) = self
                    .waiting
                    .get_mut(&(key.to_string(), t.to_string()))
                    .and_then(VecDeque::pop_front)
                {
                    self.delays[i].state = DelayState::Delivered;
                }
            }
        }
        Ok(())
    }

    fn settle_transactions(&mut self, offsets: &Offsets) {
        for (key, copies) in &self.txns {
            let copies: Vec<&Half> = copies.iter().map(|&i| &self.halves[i]).collect();
            if copies.iter().any(|h| self.committed.contains(&h.offset)) {
                continue; // counted with its commit copy
            }
            if copies
                .iter()
                .any(|h| self.removed.contains(&(h.queue_id, h.queue_offset)))
            {
                self.plan.report.rolled_back += 1;
                continue;
            }
            let live = copies
                .iter()
                .max_by_key(|h| h.queue_offset)
                .expect("a transaction has a copy");
            let checked_to = offsets
                .get(&(CHECKER_GROUP.to_string(), topic::HALF.to_string()))
                .and_then(|q| q.get(&live.queue_id))
                .copied()
                .unwrap_or(0);
            if live.queue_offset < checked_to {
                self.plan.report.discarded_halves += 1;
                continue;
            }
            let (Some(group), Some(real), Some(qid)) =
                (&live.group, &live.real_topic, live.real_qid)
            else {
                self.plan
                    .report
                    .skip("pending half messages without PGROUP, REAL_TOPIC or REAL_QID");
                continue;
            };
            if let Kind::Skip(why) = kind(real) {
                self.plan
                    .report
                    .skip(format!("pending half messages: {why}"));
                continue;
            }
            if topic::validate_group(group).is_err() {
                self.plan.report.skip(format!(
                    "pending half messages of producer group {group:?}: not a valid group name"
                ));
                continue;
            }
            let (offset, checks, group, real) =
                (live.offset, live.checks, group.clone(), real.clone());
            self.plan.pending_halves.insert(offset);
            need_queue(&mut self.plan.topics, &real, qid);
            self.plan.report.pending.push(PendingTransaction {
                id: key.clone(),
                group,
                topic: real,
                checks,
            });
        }
    }

    fn settle_delays(&mut self, store: &Store) -> Result<(), MoveError> {
        let levels: HashMap<u32, u64> = match store.config_json("delayOffset.json")? {
            Some((v, _)) => v["offsetTable"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_u64()?)))
                        .collect()
                })
                .unwrap_or_default(),
            None => HashMap::new(),
        };
        let timer = store.timer_checkpoint()?;
        let mut without_evidence = 0u64;
        for d in &mut self.delays {
            let by_checkpoint = match d.level {
                Some(l) => levels.get(&l).is_some_and(|&next| d.queue_offset < next),
                None => timer.is_some_and(|c| {
                    d.queue_offset < c.last_timer_queue_offset && d.due < c.last_read_time_ms
                }),
            };
            match d.state {
                DelayState::Waiting if by_checkpoint => {
                    d.state = DelayState::Delivered;
                    if d.has_key {
                        without_evidence += 1;
                    }
                }
                DelayState::Delivered if !by_checkpoint => self.stale_checkpoint += 1,
                _ => {}
            }
            if d.state != DelayState::Waiting {
                continue;
            }
            if let Kind::Skip(why) = kind(&d.real_topic) {
                self.plan
                    .report
                    .skip(format!("delayed messages not yet delivered: {why}"));
                continue;
            }
            self.plan.pending_delays.push((d.offset, d.due));
            if d.level.is_some() {
                self.plan.report.pending_level_delays += 1;
            } else {
                self.plan.report.pending_timers += 1;
            }
        }
        if self.stale_checkpoint > 0 {
            self.plan.report.notes.push(format!(
                "{} delayed messages were delivered after the last checkpoint (delayOffset.json / timercheck): their delivered copies are in the log, so they are not delivered again",
                self.stale_checkpoint
            ));
        }
        if without_evidence > 0 {
            self.plan.report.notes.push(format!(
                "{without_evidence} delayed messages count as delivered by the checkpoint although their delivered copy is not in the log"
            ));
        }
        Ok(())
    }

    fn config(&mut self, store: &Store, offsets: Offsets) -> Result<(), MoveError> {
        if let Some((v, path)) = store.config_json("topics.json")? {
            let table = v["topicConfigTable"].as_object().ok_or_else(|| {
                MoveError::refused(format!("{} has no topicConfigTable", path.display()))
            })?;
            // The topics a broker creates for itself (TopicConfigManager): its cluster's and
            // its own name, the cluster's reply topic; their names are in the revive and
            // broker-member topics it creates too.
            let own: Vec<String> = table
                .keys()
                .filter_map(|k| {
                    k.strip_prefix("rmq_sys_REVIVE_LOG_")
                        .map(|c| [c.to_string(), format!("{c}_REPLY_TOPIC")])
                        .or_else(|| {
                            k.strip_prefix("rmq_sys_SYNC_BROKER_MEMBER_")
                                .map(|b| [b.to_string(), b.to_string()])
                        })
                })
                .flatten()
                .collect();
            for (name, t) in table {
                if kind(name) != Kind::User {
                    continue;
                }
                if own.contains(name) {
                    self.plan.report.skip(
                        "topics RocketMQ created for itself (its cluster's and broker's names, the reply topic): not created",
                    );
                    continue;
                }
                let q = ["readQueueNums", "writeQueueNums"]
                    .iter()
                    .filter_map(|k| t[k].as_u64())
                    .max()
                    .unwrap_or(1);
                let q = u32::try_from(q).unwrap_or(u32::MAX).max(1);
                let e = self.plan.topics.entry(name.clone()).or_insert(0);
                *e = (*e).max(q);
            }
        } else {
            self.plan
                .report
                .notes
                .push("no config/topics.json: topics get the queues their records name".into());
        }
        if let Some((v, path)) = store.config_json("subscriptionGroup.json")? {
            let table = v["subscriptionGroupTable"].as_object().ok_or_else(|| {
                MoveError::refused(format!("{} has no subscriptionGroupTable", path.display()))
            })?;
            for (name, g) in table {
                if system_group(name) {
                    continue;
                }
                if let Err(e) = topic::validate_group(name) {
                    self.plan
                        .report
                        .skip(format!("consumer group {name:?}: {e}"));
                    continue;
                }
                let fifo = g["consumeMessageOrderly"].as_bool().unwrap_or(false);
                self.plan.groups.insert(name.clone(), fifo);
            }
        }
        for ((group, t), queues) in offsets {
            if system_group(&group) {
                continue;
            }
            if topic::validate_group(&group).is_err() {
                self.plan.report.skip(format!(
                    "consumer offsets of group {group:?}: not a valid group name"
                ));
                continue;
            }
            if let Kind::Skip(why) = kind(&t) {
                self.plan
                    .report
                    .skip(format!("consumer offsets of group {group} in {t}: {why}"));
                continue;
            }
            for (qid, off) in queues {
                self.need_queue(&t, qid);
                self.plan.offsets.push((group.clone(), t.clone(), qid, off));
            }
        }
        for (t, &q) in &self.plan.topics {
            if q > rocklet_core::broker::MAX_QUEUES {
                return Err(MoveError::refused(format!(
                    "topic {t} needs {q} queues, more than the {} a Rocklet topic may have",
                    rocklet_core::broker::MAX_QUEUES
                )));
            }
        }
        Ok(())
    }
}

fn need_queue(topics: &mut BTreeMap<String, u32>, t: &str, qid: u32) {
    let q = topics.entry(t.to_string()).or_insert(0);
    *q = (*q).max(qid.saturating_add(1));
}

/// Committed offsets by (group, topic), per queue.
type Offsets = BTreeMap<(String, String), BTreeMap<u32, u64>>;

fn read_offsets(store: &Store, report: &mut Report) -> Result<Offsets, MoveError> {
    let mut out = Offsets::new();
    let Some((v, path)) = store.config_json("consumerOffset.json")? else {
        report
            .notes
            .push("no config/consumerOffset.json: no consumer offsets to import".into());
        return Ok(out);
    };
    let table = v["offsetTable"]
        .as_object()
        .ok_or_else(|| MoveError::refused(format!("{} has no offsetTable", path.display())))?;
    if let Some(pulls) = v["pullOffsetTable"].as_object().filter(|m| !m.is_empty()) {
        report.notes.push(format!(
            "{} entries of pullOffsetTable (RocketMQ 5's pull positions, not committed consumer offsets) are not imported",
            pulls.len()
        ));
    }
    for (key, queues) in table {
        let Some((t, group)) = key.split_once('@') else {
            report.skip(format!("consumer offsets under {key:?} (not topic@group)"));
            continue;
        };
        let Some(queues) = queues.as_object() else {
            continue;
        };
        let e = out.entry((group.to_string(), t.to_string())).or_default();
        for (qid, off) in queues {
            match (qid.parse::<u32>(), off.as_i64()) {
                (Ok(q), Some(o)) if o >= 0 => {
                    e.insert(q, o as u64);
                }
                _ => report.skip(format!(
                    "consumer offsets of {key} that are not queue: offset"
                )),
            }
        }
    }
    Ok(out)
}

/// A refusal naming the record.
pub(super) fn refused_record(off: u64, r: &RecordView<'_>, why: &str) -> MoveError {
    MoveError::refused(format!(
        "the message at log offset {off} ({}:{} queue offset {}) cannot be imported: {why}",
        r.topic, r.header.queue_id, r.header.queue_offset
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_batches_split() {
        let mut b = Vec::new();
        for (i, (body, props)) in [(&b"one"[..], &b"TAGS\x01a\x02"[..]), (b"two!", b"")]
            .iter()
            .enumerate()
        {
            let total = 22 + body.len() + props.len();
            b.extend_from_slice(&(total as u32).to_be_bytes());
            b.extend_from_slice(&[0; 8]);
            b.extend_from_slice(&(i as u32 + 7).to_be_bytes());
            b.extend_from_slice(&(body.len() as u32).to_be_bytes());
            b.extend_from_slice(body);
            b.extend_from_slice(&(props.len() as u16).to_be_bytes());
            b.extend_from_slice(props);
        }
        let inner = split_inner(&b).unwrap();
        assert_eq!(inner.len(), 2);
        assert_eq!(
            (inner[0].flag, inner[0].body, inner[0].props),
            (7, &b"one"[..], &b"TAGS\x01a\x02"[..])
        );
        assert_eq!((inner[1].flag, inner[1].body), (8, &b"two!"[..]));
        assert!(split_inner(&b[..b.len() - 1]).is_err());
        assert!(split_inner(&[]).is_err());
    }

    #[test]
    fn kinds() {
        assert_eq!(kind("TopicTest"), Kind::User);
        assert_eq!(kind("%RETRY%g"), Kind::User);
        assert_eq!(kind(topic::HALF), Kind::Half);
        assert!(matches!(kind("%DLQ%g"), Kind::Skip(_)));
        assert!(matches!(kind("RMQ_SYS_TRACE_TOPIC"), Kind::Skip(_)));
        assert!(matches!(kind(&"x".repeat(130)), Kind::Skip(_)));
        assert!(system_group("CID_RMQ_SYS_TRANS") && system_group("TOOLS_CONSUMER"));
        assert!(!system_group("my-group"));
    }
}
