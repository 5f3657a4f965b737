//! The second pass: a [`Broker`] over a new [`FileStorage`] (segments preallocated, as the
//! broker writes them) gets, at each record's store time, the requests that reproduce it:
//!
//! | RocketMQ record                                   | Rocklet request                                   |
//! |---------------------------------------------------|---------------------------------------------------|
//! | message in a user or `%RETRY%` topic              | `Send` to its queue (an inner batch: one batch)   |
//! | commit copy (TRANSACTION_COMMIT_TYPE, with PGROUP) | `Prepare` + `EndTransaction(Commit)` at its place |
//! | live half of a pending transaction                | `Prepare` for its producer group                  |
//! | delayed, not yet delivered                        | `Send` with `Delay::At(due)`, after every record  |
//! | consumer offset                                   | `CommitOffset`, last                              |
//!
//! Each message keeps its body (inflated), flag, tag, keys, UNIQ_KEY (its message id), born
//! time and host, sharding key and user properties. Left out are the properties that are
//! RocketMQ's bookkeeping or that the core sets or reads as instructions itself:
//! REAL_TOPIC, REAL_QID, TRAN_MSG, PGROUP and CHECK_IMMUNITY_TIME_IN_SECONDS (the requests'
//! own fields), TRAN_PREPARED_QUEUE_OFFSET, TIMER_OUT_MS, INNER_NUM, INNER_BASE, and the delay
//! properties DELAY, TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS (a delivered copy
//! must not be delayed again). After each user message the queue's next offset is checked
//! against the record's: a mismatch stops the import.

use rocklet_core::record::{self, sys_flag, Decoded, Host, RecordView};
use rocklet_core::{
    Broker, Config, Delay, FileStorage, FlushMode, Millis, NewMessage, Request, Resolution,
};

use super::analyze::{refused_record, Plan};
use super::records::{self, prop, Kind};
use super::store::Store;
use super::{MoveError, Options, Report};
use crate::driver::{answer, CoreFailure};
use crate::remoting::compression;

/// The body of a record as sent: inflated when it is compressed, at most the largest
/// message or batch of `cfg`.
pub(super) fn plain_body(r: &RecordView<'_>, cfg: &Config) -> Result<Vec<u8>, String> {
    let limit = cfg.max_message_size.max(cfg.max_batch_size) as usize;
    compression::plain_body(r.header.sys_flag, r.body.to_vec(), limit).map_err(|e| e.to_string())
}

/// Fields of a record that are not a [`NewMessage`]'s.
#[derive(Default)]
struct Extra {
    group: Option<String>,
    immunity_s: Option<u64>,
    has_id: bool,
}

/// The message a record (or one message of an inner batch) is sent as.
fn message(
    topic: &str,
    queue_id: u32,
    body: Vec<u8>,
    flag: i32,
    props: &[u8],
    r: &RecordView<'_>,
) -> (NewMessage, Extra) {
    let mut m = NewMessage {
        topic: topic.to_string(),
        body,
        queue_id: Some(queue_id),
        born_timestamp: Some(r.header.born_timestamp),
        born_host: (r.header.born_host != Host::Unspecified).then_some(r.header.born_host),
        flag,
        ..NewMessage::default()
    };
    let mut extra = Extra::default();
    for (k, v) in record::Props::new(props) {
        match k {
            prop::TAGS => m.tag = (!v.is_empty()).then(|| v.to_string()),
            prop::KEYS => {
                m.keys = v
                    .split(' ')
                    .filter(|k| !k.is_empty())
                    .map(String::from)
                    .collect();
            }
            prop::UNIQ_KEY => {
                m.message_id = Some(v.to_string());
                extra.has_id = true;
            }
            prop::SHARDING_KEY => m.message_group = Some(v.to_string()),
            prop::PGROUP => extra.group = Some(v.to_string()),
            prop::CHECK_IMMUNITY => extra.immunity_s = v.trim().parse().ok(),
            prop::REAL_TOPIC
            | prop::REAL_QID
            | prop::TRAN_MSG
            | prop::PREPARED_QUEUE_OFFSET
            | prop::TIMER_OUT_MS
            | prop::INNER_NUM
            | prop::INNER_BASE
            | prop::DELAY
            | prop::TIMER_DELIVER_MS
            | prop::TIMER_DELAY_SEC
            | prop::TIMER_DELAY_MS
            | record::CRC_KEY => {}
            k => m.properties.push((k.to_string(), v.to_string())),
        }
    }
    (m, extra)
}

struct Writer<'a> {
    broker: Broker<FileStorage>,
    cfg: &'a Config,
    plan: &'a Plan,
    report: Report,
}

type Res<T> = Result<T, MoveError>;

fn storage_err(e: impl std::fmt::Display, opts: &Options) -> MoveError {
    MoveError::Io(format!("writing {}: {e}", opts.data_dir.display()))
}

pub(super) fn write(store: &Store, mut plan: Plan, opts: &Options) -> Res<Report> {
    let mut cfg = opts.core.clone();
    cfg.flush = FlushMode::Async;
    // Replayed time jumps: one sync at the end instead of one per flush interval of it.
    cfg.flush_interval_ms = Millis::MAX / 4;
    cfg.notify_available = false;
    cfg.trace = false;
    cfg.auto_create_topics = true;
    let storage = FileStorage::open(&opts.data_dir)
        .map_err(|e| MoveError::io(&opts.data_dir, e))?
        .preallocate(cfg.segment_size);
    let broker =
        Broker::open(cfg.clone(), storage, plan.first_time).map_err(|e| storage_err(e, opts))?;
    let report = std::mem::take(&mut plan.report);
    let mut w = Writer {
        broker,
        cfg: &opts.core,
        plan: &plan,
        report,
    };
    w.declare(opts)?;
    store.scan(|off, r| w.record(off, r, opts))?;
    let now = plan.last_time;
    for &(off, due) in &plan.pending_delays {
        let bytes = store.read_record(off)?;
        let max = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        let Ok(Decoded::Record(r)) = record::decode_rocketmq(&bytes, max) else {
            return Err(MoveError::refused(format!(
                "the record at log offset {off} no longer decodes on a second read (the store changed during the import?)"
            )));
        };
        w.delayed(off, &r, due, now, opts)?;
    }
    for (group, t, qid, offset) in &plan.offsets {
        let req = Request::CommitOffset {
            group: group.clone(),
            topic: t.clone(),
            queue_id: *qid,
            offset: *offset,
        };
        let reply = w
            .broker
            .execute(now, req)
            .map_err(|e| storage_err(e, opts))?;
        match answer::committed(reply).map_err(core_failure)? {
            Ok(()) => w.report.consumer_offsets += 1,
            Err(e) => {
                return Err(MoveError::refused(format!(
                    "the consumer offset {offset} of group {group} in {t}:{qid} cannot be imported: {}: {e}",
                    e.code()
                )))
            }
        }
    }
    w.broker.sync().map_err(|e| storage_err(e, opts))?;
    Ok(w.report)
}

/// The core answered something impossible ([`CoreFailure::Unexpected`]).
fn core_failure(e: CoreFailure) -> MoveError {
    MoveError::Io(e.to_string())
}

impl Writer<'_> {
    fn declare(&mut self, opts: &Options) -> Res<()> {
        for (t, &q) in &self.plan.topics {
            self.broker
                .create_topic(t, q)
                .map_err(|e| storage_err(e, opts))?
                .map_err(|e| {
                    MoveError::refused(format!(
                        "topic {t} ({q} queues) cannot be created: {}: {e}",
                        e.code()
                    ))
                })?;
            self.report.topics += 1;
        }
        for (t, q, offset) in &self.plan.starts {
            self.broker
                .start_queue_at(t, *q, *offset)
                .map_err(|e| storage_err(e, opts))?
                .map_err(|e| {
                    MoveError::refused(format!(
                        "queue {t}:{q} cannot start at queue offset {offset}: {}: {e}",
                        e.code()
                    ))
                })?;
        }
        for (g, &fifo) in &self.plan.groups {
            self.broker
                .declare_group(g, fifo)
                .map_err(|e| storage_err(e, opts))?
                .map_err(|e| {
                    MoveError::refused(format!(
                        "consumer group {g} cannot be declared: {}: {e}",
                        e.code()
                    ))
                })?;
            self.report.groups += 1;
        }
        Ok(())
    }

    fn record(&mut self, off: u64, r: &RecordView<'_>, opts: &Options) -> Res<()> {
        match records::kind(r.topic) {
            Kind::User => self.user(off, r, opts),
            Kind::Half if self.plan.pending_halves.contains(&off) => {
                self.pending_half(off, r, opts)
            }
            _ => Ok(()),
        }
    }

    fn user(&mut self, off: u64, r: &RecordView<'_>, opts: &Options) -> Res<()> {
        let now = r.header.store_timestamp;
        let tx = r.header.sys_flag & sys_flag::TRANSACTION_TYPE_MASK;
        if tx == sys_flag::TRANSACTION_PREPARED_TYPE || tx == sys_flag::TRANSACTION_ROLLBACK_TYPE {
            return Ok(());
        }
        let body = plain_body(r, self.cfg).map_err(|why| refused_record(off, r, &why))?;
        if r.header.sys_flag & sys_flag::COMPRESSED != 0 {
            self.report.inflated += 1;
        }
        let (t, qid) = (r.topic, r.header.queue_id);
        if r.header.sys_flag & sys_flag::INNER_BATCH != 0 {
            let inner = records::split_inner(&body).map_err(|why| refused_record(off, r, &why))?;
            let mut messages = Vec::with_capacity(inner.len());
            for i in &inner {
                let (m, extra) = message(t, qid, i.body.to_vec(), i.flag, i.props, r);
                self.count(&m, &extra);
                messages.push(m);
            }
            self.report.inner_batches += 1;
            self.report.inner_batch_messages += inner.len() as u64;
            return self.send(off, r, now, messages, opts);
        }
        let (m, extra) = message(t, qid, body, r.header.flag, r.properties, r);
        match &extra.group {
            Some(group)
                if tx == sys_flag::TRANSACTION_COMMIT_TYPE
                    && rocklet_core::topic::validate_group(group).is_ok() =>
            {
                let group = group.clone();
                if !extra.has_id {
                    self.report.without_message_id += 1;
                }
                let txn = self.prepare(off, r, now, group.clone(), m, extra.immunity_s, opts)?;
                let req = Request::EndTransaction {
                    txn,
                    resolution: Resolution::Commit,
                    group: Some(group),
                    from_check: false,
                };
                let reply = self
                    .broker
                    .execute(now, req)
                    .map_err(|e| storage_err(e, opts))?;
                if let Err(e) = answer::ended(reply).map_err(core_failure)? {
                    return Err(refused_record(off, r, &format!("{}: {e}", e.code())));
                }
                self.report.committed += 1;
                self.check_place(off, r, 1)
            }
            _ => {
                self.count(&m, &extra);
                if r.prop(prop::REAL_TOPIC).is_some() || r.prop(prop::TIMER_DEQUEUE_MS).is_some() {
                    self.report.delivered_delays += 1;
                }
                self.send(off, r, now, vec![m], opts)
            }
        }
    }

    fn count(&mut self, m: &NewMessage, extra: &Extra) {
        self.report.normal += 1;
        if rocklet_core::topic::is_retry(&m.topic) {
            self.report.retry += 1;
        }
        if !extra.has_id {
            self.report.without_message_id += 1;
        }
    }

    fn send(
        &mut self,
        off: u64,
        r: &RecordView<'_>,
        now: Millis,
        messages: Vec<NewMessage>,
        opts: &Options,
    ) -> Res<()> {
        let n = messages.len() as u64;
        let reply = self
            .broker
            .execute(now, Request::Send { messages })
            .map_err(|e| storage_err(e, opts))?;
        match answer::sent(reply).map_err(core_failure)? {
            Ok(results) => {
                if results.first().map(|s| s.queue_offset) != Some(r.header.queue_offset) {
                    return Err(MoveError::Io(format!(
                        "the message at log offset {off} was stored at queue offset {:?} of {}:{}, not {}",
                        results.first().map(|s| s.queue_offset),
                        r.topic,
                        r.header.queue_id,
                        r.header.queue_offset
                    )));
                }
                Ok(())
            }
            Err(e) => Err(refused_record(off, r, &format!("{}: {e}", e.code()))),
        }
        .and_then(|()| self.check_place(off, r, n))
    }

    /// The record's queue now ends right after its messages, at the offsets it had.
    fn check_place(&self, off: u64, r: &RecordView<'_>, n: u64) -> Res<()> {
        let next = self.broker.topic_info(r.topic).and_then(|t| {
            t.queues
                .iter()
                .find(|q| q.0 == r.header.queue_id)
                .map(|q| q.1)
        });
        if next != Some(r.header.queue_offset + n) {
            return Err(MoveError::Io(format!(
                "after the message at log offset {off}, queue {}:{} ends at {next:?}, not {}",
                r.topic,
                r.header.queue_id,
                r.header.queue_offset + n
            )));
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &mut self,
        off: u64,
        r: &RecordView<'_>,
        now: Millis,
        group: String,
        message: NewMessage,
        immunity_s: Option<u64>,
        opts: &Options,
    ) -> Res<rocklet_core::TxnId> {
        let req = Request::Prepare {
            group,
            message,
            check_immunity_ms: immunity_s.map(|s| s.saturating_mul(1000)),
        };
        let reply = self
            .broker
            .execute(now, req)
            .map_err(|e| storage_err(e, opts))?;
        match answer::prepared(reply).map_err(core_failure)? {
            Ok((_, txn)) => Ok(txn),
            Err(e) => Err(refused_record(off, r, &format!("{}: {e}", e.code()))),
        }
    }

    fn pending_half(&mut self, off: u64, r: &RecordView<'_>, opts: &Options) -> Res<()> {
        let (Some(real), Some(qid)) = (
            r.prop(prop::REAL_TOPIC),
            r.prop(prop::REAL_QID).and_then(|q| q.parse::<u32>().ok()),
        ) else {
            return Ok(());
        };
        let body = plain_body(r, self.cfg).map_err(|why| refused_record(off, r, &why))?;
        // TRANSACTION_CHECK_TIMES, the checks RocketMQ made, is a property of the half and
        // stays one (RocketMQ's checker counts on from it).
        let (m, extra) = message(real, qid, body, r.header.flag, r.properties, r);
        let Some(group) = extra.group else {
            return Ok(());
        };
        if !extra.has_id {
            self.report.without_message_id += 1;
        }
        self.prepare(
            off,
            r,
            r.header.store_timestamp,
            group,
            m,
            extra.immunity_s,
            opts,
        )?;
        Ok(())
    }

    fn delayed(
        &mut self,
        off: u64,
        r: &RecordView<'_>,
        due: Millis,
        now: Millis,
        opts: &Options,
    ) -> Res<()> {
        let (Some(real), Some(qid)) = (
            r.prop(prop::REAL_TOPIC),
            r.prop(prop::REAL_QID).and_then(|q| q.parse::<u32>().ok()),
        ) else {
            return Ok(());
        };
        let body = plain_body(r, self.cfg).map_err(|why| refused_record(off, r, &why))?;
        let (mut m, extra) = message(real, qid, body, r.header.flag, r.properties, r);
        if !extra.has_id {
            self.report.without_message_id += 1;
        }
        m.delay = Some(Delay::At(due));
        let reply = self
            .broker
            .execute(now, Request::Send { messages: vec![m] })
            .map_err(|e| storage_err(e, opts))?;
        match answer::sent(reply).map_err(core_failure)? {
            Ok(_) => Ok(()),
            Err(e) => Err(refused_record(off, r, &format!("{}: {e}", e.code()))),
        }
    }
}
