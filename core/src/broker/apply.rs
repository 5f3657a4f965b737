//! Writing records and applying them to the in-memory state: the one path every write
//! and recovery take (the log is the state).

use super::*;

impl<S: Storage> Broker<S> {
    pub(super) fn write_state(&mut self, op: &StateOp<'_>) -> Res<u64, S> {
        let body =
            postcard::to_extend(op, self.props_buf()).expect("postcard to a Vec cannot fail");
        let topic = match op {
            StateOp::Offset { .. } => topic::OFFSETS,
            StateOp::Topic { .. }
            | StateOp::Group { .. }
            | StateOp::Epoch { .. }
            | StateOp::TopicDeleted { .. }
            | StateOp::GroupDeleted { .. }
            | StateOp::TopicOrder { .. }
            | StateOp::QueueStart { .. } => topic::TOPICS,
            StateOp::Ck { .. } | StateOp::Ack { .. } => topic::REVIVE,
        };
        let spec = Spec::internal(topic, &body, Vec::new(), self.now);
        let written = self.write(core::slice::from_ref(&spec));
        self.recycle_props(body);
        Ok(written?.0)
    }

    /// Encodes records as one contiguous append, then applies each exactly as recovery
    /// would: the log is the state. Returns the (log offset, queue offset) of the first
    /// record; the others follow it in the log, each at the end of the one before
    /// ([`record::encoded_len`]), and a batch's queue offsets follow the first's.
    pub(super) fn write(&mut self, specs: &[Spec<'_>]) -> Res<(u64, u64), S> {
        if let [spec] = specs {
            return self.write_one(spec);
        }
        let store_host = self.cfg.store_host.host();
        let len_of = |s: &Spec<'_>| {
            let h = Header {
                born_host: s.born_host,
                store_host,
                ..Header::default()
            };
            record::encoded_len(&h, s.body.len(), s.topic.len(), s.props.len())
        };
        let total: usize = specs.iter().map(len_of).sum();
        let at = match self.log.place(total) {
            Ok(at) => at,
            Err(e) => return Err(self.append_failed(storage_err(e))),
        };
        let mut buf = core::mem::take(&mut self.buf);
        buf.clear();
        let mut first = (at, 0);
        let mut phys = at;
        // Records placed so far per queue (a write touches one or two queues): each record's
        // queue offset in one pass, however large the batch.
        let mut per_queue: Vec<(u32, u64)> = Vec::new();

        for (i, s) in specs.iter().enumerate() {
            let t = self.topic(s.topic, s.queue_id + 1);
            let q = self.queue_of(t, s.queue_id);
            let earlier = if specs.len() == 1 {
                0
            } else {
                match per_queue.iter_mut().find(|(pq, _)| *pq == q) {
                    Some((_, n)) => {
                        *n += 1;
                        *n - 1
                    }
                    None => {
                        per_queue.push((q, 1));
                        0
                    }
                }
            };
            let queue_offset = self.queues[q as usize].next + earlier;
            if i == 0 {
                first.1 = queue_offset;
            }
            let header = Header {
                queue_id: s.queue_id,
                flag: s.flag,
                queue_offset,
                phys_offset: phys,
                sys_flag: s.sys_flag,
                born_timestamp: s.born_timestamp,
                born_host: s.born_host,
                store_timestamp: self.now,
                store_host,
                reconsume_times: s.reconsume_times,
                prepared_offset: s.prepared_offset,
            };
            let n = record::encode(&mut buf, &header, s.body, s.topic, &s.props)
                .map_err(Error::Encode)?;
            phys += n as u64;
        }
        if let Err(e) = self.log.append(at, &buf) {
            self.buf = buf;
            return Err(self.append_failed(Error::Storage(e)));
        }
        if self.cfg.flush == FlushMode::Async && self.flush_due.is_none() {
            self.flush_due = Some(self.now.saturating_add(self.cfg.flush_interval_ms));
        }
        let mut pos = 0;
        let mut off = at;
        while pos < buf.len() {
            let Ok(Decoded::Record(r)) = record::decode_trusted(&buf[pos..]) else {
                break;
            };
            let len = r.total_size as usize;
            self.apply(off, &r);
            pos += len;
            off += len as u64;
        }
        self.buf = buf;
        Ok(first)
    }

    /// [`Broker::write`] of one record: encoded straight into the storage's buffer when it
    /// has one (memory), and applied from the parts it was encoded from, not decoded back.
    fn write_one(&mut self, s: &Spec<'_>) -> Res<(u64, u64), S> {
        let store_host = self.store_host();
        let h = Header {
            born_host: s.born_host,
            store_host,
            ..Header::default()
        };
        let total = record::encoded_len(&h, s.body.len(), s.topic.len(), s.props.len());
        let at = match self.log.place(total) {
            Ok(at) => at,
            Err(e) => return Err(self.append_failed(storage_err(e))),
        };
        let t = self.topic(s.topic, s.queue_id + 1);
        let q = self.queue_of(t, s.queue_id);
        let queue_offset = self.queues[q as usize].next;
        let header = Header {
            queue_id: s.queue_id,
            flag: s.flag,
            queue_offset,
            phys_offset: at,
            sys_flag: s.sys_flag,
            born_timestamp: s.born_timestamp,
            born_host: s.born_host,
            store_timestamp: self.now,
            store_host,
            reconsume_times: s.reconsume_times,
            prepared_offset: s.prepared_offset,
        };
        let encode =
            |out: &mut Vec<u8>| record::encode_viewed(out, &header, s.body, s.topic, &s.props);
        let view = match self.log.append_with(at, encode) {
            Some(r) => r.map_err(Error::Encode)?,
            None => {
                let mut buf = core::mem::take(&mut self.buf);
                buf.clear();
                let r = encode(&mut buf);
                let appended = match r {
                    Ok(_) => self.log.append(at, &buf),
                    Err(_) => Ok(()),
                };
                self.buf = buf;
                let view = r.map_err(Error::Encode)?;
                if let Err(e) = appended {
                    return Err(self.append_failed(Error::Storage(e)));
                }
                view
            }
        };
        if self.cfg.flush == FlushMode::Async && self.flush_due.is_none() {
            self.flush_due = Some(self.now.saturating_add(self.cfg.flush_interval_ms));
        }
        #[cfg(debug_assertions)]
        if let Ok(Some(stored)) = self.log.read(at, total) {
            // What the log holds reads back as exactly what is applied (a test storage may
            // drop writes past a simulated crash: then there is nothing to compare).
            debug_assert_eq!(stored, view, "record at {at}");
        }
        self.apply_in(at, &view, Some(q));
        Ok((at, queue_offset))
    }

    /// A buffer for a record's properties, from the pool (see [`Broker::recycle_props`]).
    pub(super) fn props_buf(&mut self) -> Vec<u8> {
        self.props_pool
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(128))
    }

    /// Gives a property buffer back to the pool: the send path allocates none per message.
    pub(super) fn recycle_props(&mut self, mut props: Vec<u8>) {
        if self.props_pool.len() < 64 && props.capacity() <= 64 << 10 {
            props.clear();
            self.props_pool.push(props);
        }
    }

    /// A failed append normally leaves the log as it was, and the broker goes on (a full
    /// disk, say). One that left bytes behind fails the broker like a failed sync: the next
    /// record would land after bytes recovery cannot read.
    pub(super) fn append_failed(&mut self, e: Error<S::Error>) -> Error<S::Error> {
        if self.log.torn() {
            self.fail(alloc::format!(
                "an append failed and left a partial record: {e}"
            ));
        }
        e
    }

    /// Applies one record to the in-memory state. Used by recovery and by every write.
    pub(super) fn apply(&mut self, off: u64, r: &RecordView<'_>) {
        self.apply_in(off, r, None);
    }

    /// [`Broker::apply`]; `own_queue`: the queue of the record's own topic and queue id when
    /// the caller has just looked it up (a write), so it is not looked up by name again.
    fn apply_in(&mut self, off: u64, r: &RecordView<'_>, own_queue: Option<u32>) {
        if r.header.queue_id >= MAX_QUEUES {
            // Never written by this broker: a record with a valid CRC but no place here.
            return;
        }
        let now = r.header.store_timestamp;
        self.applied_at = self.applied_at.max(now);
        if self.recovering {
            self.now = self.now.max(now);
        }
        match topic::classify(r.topic) {
            TopicKind::User | TopicKind::Retry | TopicKind::DeadLetter | TopicKind::CheckMax => {
                let q = self.own_queue(own_queue, r);
                let [real_topic, tags, keys, uniq] =
                    r.props_of([prop::REAL_TOPIC, prop::TAGS, prop::KEYS, prop::UNIQ_KEY]);
                self.index_keys(off, real_topic.unwrap_or(r.topic), keys, uniq);
                self.push_unit(
                    q,
                    CqUnit {
                        offset: off,
                        size: r.total_size,
                        tag_hash: tag_hash(tags),
                    },
                );
                self.stats.messages_stored += 1;
                if topic::classify(r.topic) == TopicKind::DeadLetter {
                    self.trace(TraceKind::DeadLettered, off, r.topic, String::new());
                } else {
                    self.trace(TraceKind::Stored, off, r.topic, String::new());
                }
            }
            TopicKind::Half => {
                let q = self.own_queue(own_queue, r);
                self.count_internal(q, r);
                if let Some(key) = r.prop(prop::CARRIED_UNIT) {
                    // A committed message's record carried forward: read through its unit.
                    self.move_carried_unit(off, r, key);
                    return;
                }
                // Every property this needs, in one pass.
                let [real_topic, real_qid, pgroup, immunity, tags, check_times, keys, uniq] = r
                    .props_of([
                        prop::REAL_TOPIC,
                        prop::REAL_QID,
                        prop::PGROUP,
                        prop::CHECK_IMMUNITY_TIME_IN_SECONDS,
                        prop::TAGS,
                        prop::TRANSACTION_CHECK_TIMES,
                        prop::KEYS,
                        prop::UNIQ_KEY,
                    ]);
                let Some(q) = self.real_queue(off, real_topic, real_qid, keys, uniq) else {
                    return;
                };
                if let Some(key) = carried_from(r, off) {
                    // Retention carried a pending half forward: the transaction keeps its id.
                    // Still pending (the record it carries is still read): it moves here; else
                    // (replay from after the retired segments) it is pending again, with the
                    // checks it had.
                    let size = r.total_size;
                    if self
                        .txns
                        .update(key, |t| {
                            t.record = off;
                            t.size = size;
                        })
                        .is_none()
                    {
                        let group = self.group(pgroup.unwrap_or(""));
                        let deadline = now.saturating_add(self.cfg.transaction_check_interval_ms);
                        self.txns.insert(PendingTxn {
                            offset: key,
                            record: off,
                            deadline,
                            size: r.total_size,
                            queue: q,
                            tag_hash: tag_hash(tags),
                            checks: check_times.and_then(|c| c.parse::<u16>().ok()).unwrap_or(0),
                            group,
                            answered: true,
                        });
                    }
                    return;
                }
                let group = self.group(pgroup.unwrap_or(""));
                let immunity = immunity
                    .and_then(|s| s.parse::<u64>().ok())
                    .map_or(0, |s| s.saturating_mul(1000));
                let deadline = now.saturating_add(self.cfg.transaction_timeout_ms.max(immunity));
                if self.txns.get(off).is_none() {
                    self.txns.insert(PendingTxn {
                        offset: off,
                        record: off,
                        deadline,
                        size: r.total_size,
                        queue: q,
                        tag_hash: tag_hash(tags),
                        // A half brought over from RocketMQ keeps the checks it had there.
                        checks: check_times.and_then(|c| c.parse::<u16>().ok()).unwrap_or(0),
                        group,
                        // No check of this run is outstanding.
                        answered: true,
                    });
                }
                self.stats.halves_stored += 1;
                self.trace_txn(TraceKind::HalfStored, off, q, String::new());
            }
            TopicKind::Op => {
                let q = self.own_queue(own_queue, r);
                self.count_internal(q, r);
                let half = r.header.prepared_offset;
                let tag = r.prop(prop::TAGS).unwrap_or("");
                match tag {
                    op::RESOLVED => {
                        let Some(row) = self.txns.remove(half) else {
                            let commit = r.header.sys_flag & sys_flag::TRANSACTION_TYPE_MASK
                                == sys_flag::TRANSACTION_COMMIT_TYPE;
                            if commit {
                                self.push_carried_unit(half);
                            }
                            return;
                        };
                        self.remember_carried_key(row.record, row.offset);
                        self.forget_parked(row);
                        let commit = r.header.sys_flag & sys_flag::TRANSACTION_TYPE_MASK
                            == sys_flag::TRANSACTION_COMMIT_TYPE;
                        if self.resolved.is_full() {
                            self.resolved.pop_front();
                        }
                        let _ = self.resolved.push_back((half, commit));
                        if commit {
                            self.push_moved(
                                row.queue,
                                CqUnit {
                                    offset: row.record,
                                    size: row.size,
                                    tag_hash: row.tag_hash,
                                },
                            );
                            self.stats.committed += 1;
                            // The committed message is now in its user topic, as a send's is.
                            self.stats.messages_stored += 1;
                            self.trace_txn(TraceKind::Committed, half, row.queue, String::new());
                        } else {
                            self.stats.rolled_back += 1;
                            self.trace_txn(TraceKind::RolledBack, half, row.queue, String::new());
                        }
                    }
                    op::CHECKED => {
                        let checks = r
                            .prop(prop::TRANSACTION_CHECK_TIMES)
                            .and_then(|c| c.parse::<u16>().ok());
                        let interval = self.cfg.transaction_check_interval_ms;
                        let updated = self.txns.update(half, |t| {
                            t.checks = checks.unwrap_or(t.checks.saturating_add(1));
                            t.deadline = now.saturating_add(interval);
                        });
                        if let Some(row) = updated {
                            self.trace_txn(
                                TraceKind::CheckSent,
                                half,
                                row.queue,
                                format!("check {}", row.checks),
                            );
                        }
                    }
                    op::CHECK_MAX => {
                        let Some(row) = self.txns.remove(half) else {
                            self.push_carried_unit(half);
                            return;
                        };
                        self.remember_carried_key(row.record, row.offset);
                        self.forget_parked(row);
                        let t = self.topic(topic::CHECK_MAX, 1);
                        let q = self.queue_of(t, 0);
                        self.push_moved(
                            q,
                            CqUnit {
                                offset: row.record,
                                size: row.size,
                                tag_hash: row.tag_hash,
                            },
                        );
                        self.stats.check_max_reached += 1;
                        self.trace_txn(TraceKind::CheckMaxReached, half, row.queue, String::new());
                    }
                    op::EXPIRED => {
                        let Some(row) = self.txns.remove(half) else {
                            return;
                        };
                        self.forget_parked(row);
                        self.stats.halves_expired += 1;
                        self.trace_txn(TraceKind::HalfExpired, half, row.queue, String::new());
                    }
                    _ => {}
                }
            }
            TopicKind::Schedule => {
                let q = self.own_queue(own_queue, r);
                self.count_internal(q, r);
                if let Some(key) = r.prop(prop::CARRIED_UNIT) {
                    // A delivered message's record carried forward: read through its unit.
                    self.move_carried_unit(off, r, key);
                    return;
                }
                let [real_topic, real_qid, due, tags, keys, uniq] = r.props_of([
                    prop::REAL_TOPIC,
                    prop::REAL_QID,
                    prop::TIMER_OUT_MS,
                    prop::TAGS,
                    prop::KEYS,
                    prop::UNIQ_KEY,
                ]);
                let Some(q) = self.real_queue(off, real_topic, real_qid, keys, uniq) else {
                    return;
                };
                let due = due.and_then(|s| s.parse::<u64>().ok()).unwrap_or(now);
                if let Some(key) = carried_from(r, off) {
                    // Retention carried an undelivered delay forward: same key, same due time.
                    let size = r.total_size;
                    if self
                        .delays
                        .update(key, |d| {
                            d.record = off;
                            d.size = size;
                        })
                        .is_none()
                    {
                        self.delays.insert(PendingDelay {
                            offset: key,
                            record: off,
                            due,
                            size: r.total_size,
                            queue: q,
                            tag_hash: tag_hash(tags),
                        });
                    }
                    return;
                }
                if self.delays.get(off).is_none() {
                    self.delays.insert(PendingDelay {
                        offset: off,
                        record: off,
                        due,
                        size: r.total_size,
                        queue: q,
                        tag_hash: tag_hash(tags),
                    });
                }
                self.stats.delayed_stored += 1;
                self.trace_txn(TraceKind::DelayStored, off, q, format!("due {due}"));
            }
            TopicKind::DelayOp => {
                let q = self.own_queue(own_queue, r);
                self.count_internal(q, r);
                let Some(row) = self.delays.remove(r.header.prepared_offset) else {
                    self.push_carried_unit(r.header.prepared_offset);
                    return;
                };
                self.remember_carried_key(row.record, row.offset);
                self.push_moved(
                    row.queue,
                    CqUnit {
                        offset: row.record,
                        size: row.size,
                        tag_hash: row.tag_hash,
                    },
                );
                self.stats.delayed_delivered += 1;
                self.stats.messages_stored += 1;
                self.trace_txn(TraceKind::Delivered, row.offset, row.queue, String::new());
            }
            TopicKind::State => {
                let q = self.own_queue(own_queue, r);
                self.count_internal(q, r);
                if let Ok(op) = postcard::from_bytes::<StateOp<'_>>(r.body) {
                    self.apply_state(off, now, op);
                }
            }
        }
    }

    pub(super) fn apply_state(&mut self, off: u64, now: Millis, op: StateOp<'_>) {
        let out_of_range = match &op {
            StateOp::Offset { queue_id, .. }
            | StateOp::Ck { queue_id, .. }
            | StateOp::Ack { queue_id, .. }
            | StateOp::QueueStart { queue_id, .. } => *queue_id >= MAX_QUEUES,
            StateOp::Topic { queues, .. } => *queues > MAX_QUEUES,
            StateOp::Group { .. }
            | StateOp::Epoch { .. }
            | StateOp::TopicDeleted { .. }
            | StateOp::GroupDeleted { .. }
            | StateOp::TopicOrder { .. } => false,
        };
        if out_of_range {
            // Never written by this broker: a state record with a valid CRC but no place here.
            return;
        }
        match op {
            StateOp::QueueStart {
                topic: name,
                queue_id,
                offset,
            } => {
                if topic::validate_user_topic(name).is_err() {
                    return;
                }
                let t = self.topic(name, queue_id + 1);
                let q = self.queue_of(t, queue_id);
                let queue = &mut self.queues[q as usize];
                // Only an empty queue moves (start_queue_at checks; a forged record does not).
                if queue.next == 0 && queue.base == 0 {
                    queue.start_at(offset);
                }
            }
            StateOp::TopicDeleted { name } => {
                // The queues stay (pending halves and delays may still name them), unreachable:
                // a topic of this name made later starts afresh.
                if topic::classify(name) == TopicKind::User {
                    if let Some(t) = self.topic_ids.remove(name) {
                        self.topics[t as usize].deleted = true;
                        *self.deleted_names.entry(name.into()).or_default() += 1;
                        // Its deliveries go with it (RocketMQ's revive skips a check point
                        // whose topic is gone): none is redelivered or dead-lettered later,
                        // and no later record can name them (records name topics by name).
                        let queues = &self.topics[t as usize].queues;
                        self.pops.retain(|&(_, q), _| !queues.contains(&q));
                        self.prune_pop_timers();
                    }
                }
            }
            StateOp::TopicOrder { name, order, conf } => self.apply_topic_order(name, order, conf),
            StateOp::GroupDeleted { name } => {
                // Its entry stays (pending transactions may name it: deletion refuses a group
                // they name, but the index is kept stable), unreachable by name: a group of
                // this name made later starts afresh, with no offsets and nothing in flight.
                if let Some(g) = self.group_ids.remove(name) {
                    self.offsets.retain(|&(og, _), _| og != g);
                    self.pops.retain(|&(pg, _), _| pg != g);
                    self.pop_cursor.retain(|&(pg, _), _| pg != g);
                    self.pop_timers.retain(|Reverse(t)| t.1 != g);
                    self.groups[g as usize].fifo = false;
                }
            }
            StateOp::Epoch { epoch } => {
                if self.epochs.last().is_none_or(|&(last, _)| epoch > last) {
                    self.epochs.push((epoch, off));
                }
            }
            StateOp::Group { name, fifo } => {
                if topic::validate_group(name).is_ok() {
                    let g = self.group(name);
                    self.groups[g as usize].fifo = fifo;
                }
            }
            StateOp::Topic { name, queues } => {
                if topic::validate_user_topic(name).is_ok() {
                    self.topic_with(name, queues, false);
                }
            }
            StateOp::Offset {
                group,
                topic: t,
                queue_id,
                offset,
            } => {
                let g = self.group(group);
                let t = self.topic(t, queue_id + 1);
                let q = self.queue_of(t, queue_id);
                self.offsets.insert((g, q), offset);
                self.trace_txn(
                    TraceKind::OffsetCommitted,
                    off,
                    q,
                    format!("{group} -> {offset}"),
                );
            }
            StateOp::Ck {
                group,
                topic: t,
                queue_id,
                until,
                next,
                entries,
            } => {
                let Some(t) = self.topic_of_state(t, queue_id) else {
                    return;
                };
                let g = self.group(group);
                let q = self.queue_of(t, queue_id);
                // A record naming messages past the queue's end (a damaged or forged log) is
                // ignored: deliveries exist only for stored messages.
                let queue = &self.queues[q as usize];
                let (base, stored) = (queue.base, queue.stored_end());
                if next > stored || entries.iter().any(|&(qoff, _)| qoff >= stored) {
                    return;
                }
                // An entry below the queue's first retained message went with its segment:
                // retention retires nothing out on receive, so it was acknowledged (or its
                // group moved past it) before that run. The record's other entries stand.
                let entries: Vec<(u64, u32)> = entries
                    .into_iter()
                    .filter(|&(qoff, _)| qoff >= base)
                    .collect();
                let pq = self.pops.entry((g, q)).or_default();
                pq.next = pq.next.max(next);
                for &(qoff, attempt) in &entries {
                    pq.ready.remove(&qoff);
                    // A change of invisible time renews the attempt; a receive starts one.
                    let since = match pq.inflight.get(&qoff) {
                        Some(i) if i.attempt == attempt => i.since,
                        _ => off,
                    };
                    pq.inflight.insert(
                        qoff,
                        Inflight {
                            attempt,
                            generation: off,
                            since,
                        },
                    );
                    self.pop_timers.push(Reverse((until, g, q, qoff, off)));
                }
                for &(qoff, attempt) in &entries {
                    let kind = if attempt > 1 {
                        TraceKind::Redelivered
                    } else {
                        TraceKind::Received
                    };
                    let unit_off = self.traced_unit_offset(q, qoff, off);
                    self.trace_txn(
                        kind,
                        unit_off,
                        q,
                        format!("{group} attempt {attempt} until {until}"),
                    );
                }
                let _ = now;
                self.prune_pop_timers();
            }
            StateOp::Ack {
                group,
                topic: t,
                queue_id,
                queue_offset,
                generation,
            } => {
                // Nothing is in flight in a topic that does not exist (or no longer does).
                let Some(t) = self.find_topic(t) else {
                    return;
                };
                if self.topics[t as usize].queues.len() as u32 <= queue_id {
                    return;
                }
                let g = self.group(group);
                let q = self.queue_of(t, queue_id);
                let fifo = self.groups[g as usize].fifo;
                if let Some(pq) = self.pops.get_mut(&(g, q)) {
                    if pq
                        .inflight
                        .get(&queue_offset)
                        .is_some_and(|i| i.named_by(generation))
                    {
                        pq.inflight.remove(&queue_offset);
                        pq.ready.remove(&queue_offset);
                        let unlocked = fifo && pq.inflight.is_empty();
                        self.stats.acked += 1;
                        if unlocked {
                            // A FIFO queue's batch is done: its next messages may go out.
                            self.mark_notify(q);
                        }
                        let unit_off = self.traced_unit_offset(q, queue_offset, off);
                        self.trace_txn(TraceKind::Acked, unit_off, q, String::from(group));
                    }
                }
                self.prune_pop_timers();
            }
        }
    }

    /// The topic a receive's record names, `None` for a deleted one: written before this
    /// rule, such a record (of a delivery of a deleted topic) must not bring the name back.
    fn topic_of_state(&mut self, name: &str, queue_id: u32) -> Option<u32> {
        if self.find_topic(name).is_none() && self.deleted_names.contains_key(name) {
            return None;
        }
        Some(self.topic(name, queue_id + 1))
    }

    /// The consumer queue a half or delayed record (at `off`) names by its REAL_TOPIC and
    /// REAL_QID; its keys are indexed under that topic.
    pub(super) fn real_queue(
        &mut self,
        off: u64,
        topic: Option<&str>,
        qid: Option<&str>,
        keys: Option<&str>,
        uniq: Option<&str>,
    ) -> Option<u32> {
        let name = topic?;
        let qid: u32 = qid?.parse().ok()?;
        if qid >= MAX_QUEUES {
            return None;
        }
        let t = self.topic(name, qid + 1);
        let q = self.queue_of(t, qid);
        self.index_keys(off, name, keys, uniq);
        Some(q)
    }

    /// [`Broker::push_unit`] for a message whose record is not in the queue's own topic (a
    /// committed half, a delivered delay, a half whose checks ran out): remembers where it
    /// went, so a send-back naming its offset can be checked.
    pub(super) fn push_moved(&mut self, q: u32, unit: CqUnit) {
        let queue_offset = self.queues[q as usize].next;
        self.moved.insert(unit.offset, (q, queue_offset));
        self.push_unit(q, unit);
    }

    /// Replaying from where the log starts: the op that committed (or delivered) the
    /// message of `key`, whose first record was retired, puts its carried-forward record in
    /// its queue, where it was ([`Broker::retain`]).
    fn push_carried_unit(&mut self, key: u64) {
        if !self.recovering {
            return;
        }
        if let Some(&(q, unit)) = self.carried_units.get(&key) {
            // Put in already from the record of where the log starts (it headed its queue).
            if self.moved.get(unit.offset).is_some_and(|(mq, _)| mq == q) {
                return;
            }
            self.push_moved(q, unit);
        }
    }

    /// A record retention wrote at `off` for the message of transaction or delay `key`
    /// whose unit read the record at `prepared_offset`: the unit reads it from now on.
    /// Nothing when no unit reads that record (replaying from where the log starts, the
    /// unit came from [`Broker::carried_units`] already).
    fn move_carried_unit(&mut self, off: u64, r: &RecordView<'_>, key: &str) {
        let (Ok(key), from) = (key.parse::<u64>(), r.header.prepared_offset) else {
            return;
        };
        let Some((q, qo)) = self.moved.get(from) else {
            return;
        };
        // Replaying, the unit is in the tail or the file this run wrote.
        let old = match self.unit_at(q, qo) {
            Ok(Some(u)) if u.offset == from => u,
            Ok(_) => return,
            Err(e) => return self.queue_failed("reading a consume queue unit", e),
        };
        let unit = CqUnit {
            offset: off,
            size: r.total_size,
            tag_hash: old.tag_hash,
        };
        if let Err(e) = self.replace_unit(q, qo, unit) {
            return self.queue_failed("rewriting a consume queue unit", e);
        }
        self.moved.insert(off, (q, qo));
        self.carried_units.insert(key, (q, unit));
    }

    /// A carried-forward half or delay (record ≠ key) was committed or delivered: its key,
    /// for a later retention run that carries its record again.
    fn remember_carried_key(&mut self, record: u64, key: u64) {
        if record != key {
            self.carried_keys.insert(record, key);
        }
    }

    /// Counts a record of an internal topic in its queue. Replaying a log whose oldest
    /// segments retention retired, the queue goes on where the record says it was (what
    /// came before it is gone): its next offset is the one the record was written at + 1.
    fn count_internal(&mut self, q: u32, r: &RecordView<'_>) {
        let trimmed = self.recovering && self.log.start() > 0;
        let queue = &mut self.queues[q as usize];
        if trimmed {
            queue.next = queue.next.max(r.header.queue_offset);
        }
        queue.next += 1;
    }

    pub(super) fn push_unit(&mut self, q: u32, unit: CqUnit) {
        self.store_unit(q, unit);
        self.queues[q as usize].next += 1;
        if self.recovering {
            return;
        }
        if self.holds_visibility() {
            self.unsynced.push_back((self.log.end(), q));
        } else {
            let queue = &mut self.queues[q as usize];
            queue.visible = queue.len();
            self.mark_notify(q);
        }
    }

    pub(super) fn mark_notify(&mut self, q: u32) {
        if !self.cfg.notify_available || self.recovering {
            return;
        }
        let queue = &mut self.queues[q as usize];
        if !queue.notify {
            queue.notify = true;
            self.notify.push(q);
        }
    }

    /// The queue of `r`'s own topic and queue id (created if need be): `known` when the
    /// caller has it.
    fn own_queue(&mut self, known: Option<u32>, r: &RecordView<'_>) -> u32 {
        match known {
            Some(q) => q,
            None => {
                let t = self.topic(r.topic, r.header.queue_id + 1);
                self.queue_of(t, r.header.queue_id)
            }
        }
    }

    pub(super) fn trace(&mut self, kind: TraceKind, offset: u64, topic_name: &str, detail: String) {
        if self.cfg.trace && !self.recovering {
            self.outputs.push_back(Output::Trace(TraceEvent {
                at: self.now,
                kind,
                offset,
                topic: topic_name.into(),
                detail,
            }));
        }
    }

    /// For a trace event: the log offset of the message at a queue offset (`or` when tracing
    /// is off, or its unit cannot be read: the event then names the record at `or`).
    fn traced_unit_offset(&mut self, q: u32, queue_offset: u64, or: u64) -> u64 {
        if !self.cfg.trace || self.recovering {
            return or;
        }
        match self.unit_at(q, queue_offset) {
            Ok(Some(u)) => u.offset,
            _ => or,
        }
    }

    pub(super) fn trace_txn(&mut self, kind: TraceKind, offset: u64, q: u32, detail: String) {
        if self.cfg.trace && !self.recovering {
            let name = self.topics[self.queues[q as usize].topic as usize]
                .name
                .clone();
            self.trace(kind, offset, &name, detail);
        }
    }
}

/// The key a record retention carried forward answers to ([`prop::CARRIED`]); `None` for
/// a record that carries nothing (or names no earlier record: never written by this broker).
fn carried_from(r: &RecordView<'_>, off: u64) -> Option<u64> {
    r.prop(prop::CARRIED)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&k| k < off)
}
