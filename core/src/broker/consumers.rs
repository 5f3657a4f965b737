//! Consumers: pull and committed offsets, receive with invisible time, ack, invisible-time
//! changes, redelivery, send-back to retry topics and dead-lettering.

use super::*;

impl<S: Storage> Broker<S> {
    /// A group's committed pull offset in a queue.
    #[must_use]
    pub fn committed_offset(&self, group: &str, topic: &str, queue_id: u32) -> Option<u64> {
        let g = *self.group_ids.get(group)?;
        let q = self.queue_index(topic, queue_id)?;
        self.offsets.get(&(g, q)).copied()
    }

    /// Whether the broker knows the consumer group (declared, or named by a commit, a
    /// receive or a send-back).
    #[must_use]
    pub fn group_known(&self, group: &str) -> bool {
        self.group_ids.contains_key(group)
    }

    /// Every consumer group the broker knows, by name, with whether it is FIFO (bounded by
    /// [`Config::max_groups`]).
    #[must_use]
    pub fn group_list(&self) -> Vec<(String, bool)> {
        let mut out: Vec<(String, bool)> = self
            .groups
            .iter()
            .enumerate()
            .filter(|&(i, g)| self.group_ids.get(&g.name) == Some(&(i as u32)))
            .map(|(_, g)| (g.name.clone(), g.fifo))
            .collect();
        out.sort();
        out
    }

    /// A receiving (pop) group's position in a queue: the first offset it has not acked
    /// (the oldest in flight, else the next to hand out) and the next offset to hand out.
    /// `None` when the group never received from the queue.
    #[must_use]
    pub fn pop_position(&self, group: &str, topic: &str, queue_id: u32) -> Option<(u64, u64)> {
        let g = *self.group_ids.get(group)?;
        let q = self.queue_index(topic, queue_id)?;
        let p = self.pops.get(&(g, q))?;
        let unacked = p.inflight.keys().next().map_or(p.next, |&o| o.min(p.next));
        Some((unacked, p.next))
    }

    /// Messages a consumer group has received and not yet acked in a topic.
    #[must_use]
    pub fn inflight_count(&self, group: &str, topic: &str) -> usize {
        let (Some(&g), Some(&t)) = (self.group_ids.get(group), self.topic_ids.get(topic)) else {
            return 0;
        };
        self.topics[t as usize]
            .queues
            .iter()
            .filter_map(|q| self.pops.get(&(g, *q)))
            .map(|p| p.inflight.len())
            .sum()
    }

    /// Declares a consumer group, durably (RocketMQ's subscription group config, for hosts
    /// that declare groups: a config file, an admin command, `mqadmin updateSubGroup`).
    /// `fifo` (RocketMQ's consumeMessageOrderly): its receives are orderly — a queue's
    /// messages in queue order, never a message of a queue while an earlier batch of that
    /// queue is in flight for the group, and a message whose invisible time runs out (or is
    /// changed to 0, a nack) delivered again before anything after it, until the maximum
    /// attempts send it to `%DLQ%<group>`. `Ok(Err(_))`: the name cannot be used, or no group
    /// fits under [`Config::max_groups`].
    pub fn declare_group(&mut self, name: &str, fifo: bool) -> Res<Result<(), ClientError>, S> {
        self.check_failed()?;
        if self.role == Role::Replica {
            return Ok(Err(ClientError::NotMaster));
        }
        if let Err(e) = topic::validate_group(name).and_then(|()| self.may_create_group(name)) {
            return Ok(Err(e));
        }
        if self
            .group_ids
            .get(name)
            .is_some_and(|&g| self.groups[g as usize].fifo == fifo)
        {
            return Ok(Ok(()));
        }
        self.write_state(&StateOp::Group { name, fifo })?;
        Ok(Ok(()))
    }

    /// Starts receiving group `group` at the end of each queue of `topic` it has never
    /// received from (RocketMQ's ConsumeInitMode.MAX for a pop group the broker has never
    /// seen), durably: a receive record with no deliveries puts the group's next offset at
    /// the queue's visible end, so a restart keeps the start. Queues the group has a position
    /// in keep it. Returns how many queues were started; 0 for a topic that does not exist
    /// (its queues, once created, hold nothing older than this call).
    pub fn start_group_at_end(
        &mut self,
        group: &str,
        topic_name: &str,
    ) -> Res<Result<u32, ClientError>, S> {
        self.check_failed()?;
        if self.role == Role::Replica {
            return Ok(Err(ClientError::NotMaster));
        }
        if let Err(e) =
            topic::validate_group(group).and_then(|()| topic::validate_readable_topic(topic_name))
        {
            return Ok(Err(e));
        }
        let Some(&t) = self.topic_ids.get(topic_name) else {
            return Ok(Ok(0));
        };
        let g = self.group_ids.get(group).copied();
        let fresh: Vec<(u32, u64)> = self.topics[t as usize]
            .queues
            .iter()
            .filter(|&&q| g.is_none_or(|g| !self.pops.contains_key(&(g, q))))
            .map(|&q| {
                let queue = &self.queues[q as usize];
                (queue.queue_id, queue.visible_end())
            })
            .collect();
        if fresh.is_empty() {
            return Ok(Ok(0));
        }
        if let Err(e) = self.may_create_group(group) {
            return Ok(Err(e));
        }
        for &(queue_id, next) in &fresh {
            self.write_state(&StateOp::Ck {
                group,
                topic: topic_name,
                queue_id,
                until: self.now,
                next,
                entries: Vec::new(),
            })?;
        }
        Ok(Ok(fresh.len() as u32))
    }

    /// Deletes a consumer group, durably (RocketMQ's deleteSubGroup, with its offsets): its
    /// declaration (FIFO or not), committed offsets and receive positions go, receipts it
    /// holds in flight are no longer redelivered and their acks are refused as unknown, and
    /// from then on it is not known ([`Broker::group_known`]); a later commit, receive or
    /// declaration under the name starts afresh. Its records stay in the log, and so do its
    /// retry and dead-letter topics. Its slot counts toward [`Config::max_groups`] until a
    /// restart from a log that no longer holds it, as a deleted topic's does. `Ok(Err(_))`: no
    /// such group, or a producer group online or with transactions pending (their checks go
    /// to it: resolve them first).
    pub fn delete_group(&mut self, name: &str) -> Res<Result<(), ClientError>, S> {
        self.check_failed()?;
        if self.role == Role::Replica {
            return Ok(Err(ClientError::NotMaster));
        }
        if let Err(e) = topic::validate_group(name) {
            return Ok(Err(e));
        }
        let Some(&g) = self.group_ids.get(name) else {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "consumer group `{name}` does not exist"
            ))));
        };
        if self.groups[g as usize].online {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "a producer of group `{name}` is online: its transactions are checked through it"
            ))));
        }
        let pending = self.txns.iter().filter(|t| t.group == g).count();
        if pending > 0 {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "group `{name}` has {pending} transactions pending as their producer group: resolve them before deleting it"
            ))));
        }
        self.write_state(&StateOp::GroupDeleted { name })?;
        Ok(Ok(()))
    }

    /// Whether `group` was declared FIFO ([`Broker::declare_group`]).
    #[must_use]
    pub fn group_is_fifo(&self, group: &str) -> bool {
        self.group_ids
            .get(group)
            .is_some_and(|&g| self.groups[g as usize].fifo)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn pull(
        &mut self,
        group: &str,
        topic_name: &str,
        queue_id: u32,
        offset: Option<u64>,
        max: u32,
        filter: &TagFilter,
        auto_commit: bool,
    ) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = topic::validate_group(group) {
            return Ok(Err(e));
        }
        let q = match self.readable_queue(topic_name, queue_id) {
            Ok(Some(q)) => q,
            Ok(None) => {
                return Ok(Ok(Reply::Pulled {
                    messages: Vec::new(),
                    next_offset: 0,
                    max_offset: 0,
                }))
            }
            Err(e) => return Ok(Err(e)),
        };
        // A read creates no group: only a committed offset (a record) does.
        let committed = self
            .group_ids
            .get(group)
            .and_then(|g| self.offsets.get(&(*g, q)))
            .copied();
        let base = self.queues[q as usize].base;
        // Below the queue's first offset (RocketMQ: OFFSET_TOO_SMALL): from its first message.
        let start = offset.unwrap_or(committed.unwrap_or(0)).max(base);
        let visible = self.queues[q as usize].visible_end();
        let mut messages = Vec::new();
        let mut at = start.min(visible);
        let cap = u64::from(self.cfg.max_transfer_bytes);
        let mut bytes = 0u64;
        let max = max.clamp(1, 1024);
        // Units looked at, matching or not: a filter that matches little stops here and the
        // reply says where to go on (`next_offset`), as RocketMQ's bounded pull does.
        let scan_limit = u64::from(self.cfg.max_scan_units.max(max));
        let mut scanned = 0u64;
        while at < visible && messages.len() < max as usize && scanned < scan_limit {
            scanned += 1;
            let Some(unit) = self.unit_at(q, at)? else {
                break;
            };
            if let TagFilter::Tags(tags) = filter {
                if !tags.iter().any(|t| tag_hash(Some(t)) == unit.tag_hash) {
                    at += 1;
                    continue;
                }
            }
            if let Some(m) = self.read_message(q, at, unit)? {
                if filter.matches_message(&m) {
                    // Past the transfer cap: this message starts the next pull.
                    if !messages.is_empty() && bytes + u64::from(unit.size) > cap {
                        break;
                    }
                    bytes += u64::from(unit.size);
                    messages.push(m);
                }
            }
            at += 1;
        }
        if auto_commit && at != start {
            if let Err(e) = self.may_create_group(group) {
                return Ok(Err(e));
            }
            self.write_state(&StateOp::Offset {
                group,
                topic: topic_name,
                queue_id,
                offset: at,
            })?;
        }
        Ok(Ok(Reply::Pulled {
            messages,
            next_offset: at,
            max_offset: visible,
        }))
    }

    pub(super) fn commit_offset(
        &mut self,
        group: &str,
        topic_name: &str,
        queue_id: u32,
        offset: u64,
    ) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = topic::validate_group(group) {
            return Ok(Err(e));
        }
        // An offset is kept for a queue that exists: committing one must not create a topic
        // (it would get `queue_id + 1` queues, not the configured count).
        match self.readable_queue(topic_name, queue_id) {
            Ok(Some(_)) => {}
            Ok(None) => return Ok(Err(ClientError::UnknownTopic(topic_name.into()))),
            Err(e) => return Ok(Err(e)),
        }
        // Clients persist offsets on a timer (the Go client every 5 s): an offset that did
        // not change is not written again.
        let q = self.queue_index(topic_name, queue_id);
        let unchanged = self
            .group_ids
            .get(group)
            .zip(q)
            .and_then(|(g, q)| self.offsets.get(&(*g, q)))
            == Some(&offset);
        if unchanged {
            return Ok(Ok(Reply::OffsetCommitted));
        }
        if let Err(e) = self.may_create_group(group) {
            return Ok(Err(e));
        }
        self.write_state(&StateOp::Offset {
            group,
            topic: topic_name,
            queue_id,
            offset,
        })?;
        Ok(Ok(Reply::OffsetCommitted))
    }

    pub(super) fn receive(
        &mut self,
        group: &str,
        topic_name: &str,
        queue_id: Option<u32>,
        max: u32,
        invisible_ms: Millis,
        filter: &TagFilter,
    ) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = topic::validate_group(group) {
            return Ok(Err(e));
        }
        if invisible_ms == 0 || invisible_ms > self.cfg.max_invisible_ms {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "invisible duration {invisible_ms} ms is not within 1..={} ms",
                self.cfg.max_invisible_ms
            ))));
        }
        let queues: Vec<u32> = match queue_id {
            Some(qid) => match self.readable_queue(topic_name, qid) {
                Ok(Some(q)) => alloc::vec![q],
                Ok(None) => Vec::new(),
                Err(e) => return Ok(Err(e)),
            },
            None => {
                if let Err(e) = topic::validate_readable_topic(topic_name) {
                    return Ok(Err(e));
                }
                match self.topic_ids.get(topic_name) {
                    Some(&t) => self.topics[t as usize].queues.clone(),
                    None => Vec::new(),
                }
            }
        };
        // Nothing to look at (a topic not created yet): nothing is created, not even the group.
        if queues.is_empty() {
            return Ok(Ok(Reply::Received(Vec::new())));
        }
        let g = self.group_ids.get(group).copied();
        let max = max.clamp(1, 1024) as usize;
        let cap = u64::from(self.cfg.max_transfer_bytes);
        // Bytes taken so far; a message that would go past `cap` ends the receive (the first
        // one always goes).
        let mut bytes = 0u64;
        let mut full = false;
        // Units looked at, across the queues: a filter that matches little stops here, and
        // the queue is marked available so a long poll comes back for the rest at once.
        let scan_limit = u64::from(self.cfg.max_scan_units).max(max as u64);
        let mut scanned = 0u64;
        let until = self.now + invisible_ms;
        let mut out = Vec::new();
        let n = queues.len() as u32;
        let cursor = g.map_or(0, |g| *self.pop_cursor.get(&(g, queues[0])).unwrap_or(&0));
        let fifo = g.is_some_and(|g| self.groups[g as usize].fifo);
        let empty = PopQueue::default();
        for i in 0..queues.len() {
            if out.len() >= max || full || scanned >= scan_limit {
                break;
            }
            let q = queues[((cursor + i as u32) % n) as usize];
            let mut entries: Vec<(u64, u32)> = Vec::new();
            let pq = g.and_then(|g| self.pops.get(&(g, q))).unwrap_or(&empty);
            // FIFO: a queue with a batch in flight is locked for the group; one whose batch
            // timed out (or was nacked) gives that batch again, in order, and nothing after it.
            if fifo && pq.inflight.keys().any(|k| !pq.ready.contains(k)) {
                continue;
            }
            let redeliver_only = fifo && !pq.ready.is_empty();
            // Expired deliveries first, then new messages.
            let ready: Vec<(u64, u32)> = pq
                .ready
                .iter()
                .take(max - out.len())
                .map(|&qoff| (qoff, pq.inflight.get(&qoff).map_or(1, |i| i.attempt + 1)))
                .collect();
            let pq_next = pq.next;
            for (qoff, attempt) in ready {
                let size = self.unit_at(q, qoff)?.map_or(0, |u| u64::from(u.size));
                if out.len() + entries.len() > 0 && bytes + size > cap {
                    full = true;
                    break;
                }
                bytes += size;
                entries.push((qoff, attempt));
            }
            let queue = &self.queues[q as usize];
            let old_next = pq_next.max(queue.base);
            let mut next = old_next;
            let visible = queue.visible_end();
            let mut msgs = Vec::new();
            for &(qoff, _) in &entries {
                // In-flight entries only ever name existing units (apply_state checks).
                let Some(unit) = self.unit_at(q, qoff)? else {
                    msgs.push(None);
                    continue;
                };
                msgs.push(self.read_message(q, qoff, unit)?);
            }
            while !redeliver_only && !full && next < visible && entries.len() + out.len() < max {
                if scanned >= scan_limit {
                    self.rescan(q);
                    break;
                }
                scanned += 1;
                let Some(unit) = self.unit_at(q, next)? else {
                    break;
                };
                // The tag hash in the consume queue rules most messages out unread.
                if let TagFilter::Tags(tags) = filter {
                    if !tags.iter().any(|t| tag_hash(Some(t)) == unit.tag_hash) {
                        next += 1;
                        continue;
                    }
                }
                let m = self.read_message(q, next, unit)?;
                if let Some(m) = m {
                    if filter.matches_message(&m) {
                        let size = u64::from(unit.size);
                        if entries.len() + out.len() > 0 && bytes + size > cap {
                            full = true;
                            break;
                        }
                        bytes += size;
                        entries.push((next, 1));
                        msgs.push(Some(m));
                    }
                }
                next += 1;
            }
            if entries.is_empty() && next == old_next {
                continue;
            }
            // Something to record: the group exists from here on (the record creates it).
            if let Err(e) = self.may_create_group(group) {
                return Ok(Err(e));
            }
            let qid = self.queues[q as usize].queue_id;
            let generation = self.write_state(&StateOp::Ck {
                group,
                topic: topic_name,
                queue_id: qid,
                until,
                next,
                entries: entries.clone(),
            })?;
            for ((qoff, attempt), m) in entries.into_iter().zip(msgs) {
                let Some(message) = m else { continue };
                if attempt > 1 {
                    self.stats.redelivered += 1;
                }
                self.stats.received += 1;
                out.push(Received {
                    message,
                    handle: ReceiptHandle {
                        topic: topic_name.into(),
                        queue_id: qid,
                        queue_offset: qoff,
                        generation,
                    },
                    attempt,
                    visible_at: until,
                });
            }
        }
        if let Some(&g) = self.group_ids.get(group) {
            self.pop_cursor.insert((g, queues[0]), (cursor + 1) % n);
        }
        Ok(Ok(Reply::Received(out)))
    }

    pub(super) fn find_inflight(
        &self,
        group: &str,
        h: &ReceiptHandle,
    ) -> Result<(u32, u32, Inflight), ClientError> {
        let bad = |why: &str| ClientError::InvalidReceiptHandle(format!("{h}: {why}"));
        let g = *self
            .group_ids
            .get(group)
            .ok_or_else(|| bad("the group has received nothing"))?;
        let q = self
            .queue_index(&h.topic, h.queue_id)
            .ok_or_else(|| bad("no such topic or queue"))?;
        let inflight = self
            .pops
            .get(&(g, q))
            .and_then(|p| p.inflight.get(&h.queue_offset))
            .ok_or_else(|| bad("no delivery of this message is in flight (already acked?)"))?;
        if !inflight.named_by(h.generation) {
            return Err(ClientError::StaleReceiptHandle(format!(
                "{h}: the message was delivered again since"
            )));
        }
        Ok((g, q, *inflight))
    }

    pub(super) fn ack(
        &mut self,
        group: &str,
        h: &ReceiptHandle,
    ) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = self.find_inflight(group, h) {
            return Ok(Err(e));
        }
        self.write_state(&StateOp::Ack {
            group,
            topic: &h.topic,
            queue_id: h.queue_id,
            queue_offset: h.queue_offset,
            generation: h.generation,
        })?;
        Ok(Ok(Reply::Acked))
    }

    pub(super) fn change_invisible(
        &mut self,
        group: &str,
        h: &ReceiptHandle,
        ms: Millis,
    ) -> Res<Result<Reply, ClientError>, S> {
        if ms > self.cfg.max_invisible_ms {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "invisible duration {ms} ms is above the maximum of {} ms",
                self.cfg.max_invisible_ms
            ))));
        }
        let (g, q, inflight) = match self.find_inflight(group, h) {
            Ok(x) => x,
            Err(e) => return Ok(Err(e)),
        };
        let next = self.pops.get(&(g, q)).map_or(0, |p| p.next);
        let until = self.now + ms;
        let generation = self.write_state(&StateOp::Ck {
            group,
            topic: &h.topic,
            queue_id: h.queue_id,
            until,
            next,
            entries: alloc::vec![(h.queue_offset, inflight.attempt)],
        })?;
        Ok(Ok(Reply::InvisibleChanged {
            handle: ReceiptHandle {
                generation,
                ..h.clone()
            },
            visible_at: until,
        }))
    }

    pub(super) fn forward_to_dlq(
        &mut self,
        group: &str,
        h: &ReceiptHandle,
    ) -> Res<Result<Reply, ClientError>, S> {
        let (g, q, inflight) = match self.find_inflight(group, h) {
            Ok(x) => x,
            Err(e) => return Ok(Err(e)),
        };
        self.dead_letter(g, q, h.queue_offset, inflight.generation)?;
        Ok(Ok(Reply::Forwarded))
    }

    pub(super) fn send_back(
        &mut self,
        group: &str,
        offset: u64,
        level: Option<u32>,
    ) -> Res<Result<Reply, ClientError>, S> {
        if let Err(e) = topic::validate_group(group) {
            return Ok(Err(e));
        }
        if let Err(e) = self.refuse_new() {
            return Ok(Err(e));
        }
        let dest_retry = topic::retry(group);
        let dest_dlq = topic::dlq(group);
        let checks = match self.consumable_at(group, offset)? {
            Ok(()) => self
                .may_create_group(group)
                .and_then(|()| self.may_create_topic(&dest_retry))
                .and_then(|()| self.may_create_topic(&dest_dlq)),
            Err(e) => Err(e),
        };
        if let Err(e) = checks {
            return Ok(Err(e));
        }
        let Some(r) = self.log.read_any(offset).map_err(Error::Storage)? else {
            return Ok(Err(ClientError::NotConsumable(format!(
                "no message at offset {offset}"
            ))));
        };
        let topic_name: String = r.prop(prop::REAL_TOPIC).unwrap_or(r.topic).into();
        // Only a copy's own RETRY_TOPIC is the broker's word; on a message of a plain topic
        // it is a producer's, and the copy names the topic the message was in.
        let is_copy = copied_topic(&topic_name);
        let reconsume = r.header.reconsume_times + 1;
        let body = r.body.to_vec();
        let mut props = Vec::new();
        let mut has_retry_topic = false;
        let mut origin_id = None;
        for (k, v) in r.props() {
            if prop::INTERNAL.contains(&k) || k == prop::DELAY || k == prop::RECONSUME_TIME {
                continue;
            }
            if k == prop::RETRY_TOPIC {
                if !is_copy || has_retry_topic {
                    continue;
                }
                has_retry_topic = true;
            }
            if k == prop::UNIQ_KEY {
                origin_id = Some(String::from(v));
            }
            record::push_prop(&mut props, k, v);
        }
        let (flag, born, born_host) = (r.header.flag, r.header.born_timestamp, r.header.born_host);
        if !has_retry_topic {
            record::push_prop(&mut props, prop::RETRY_TOPIC, &topic_name);
        }
        let origin = origin_id.unwrap_or_else(|| self.offset_msg_id(offset));
        record::push_prop(&mut props, prop::ORIGIN_MESSAGE_ID, &origin);
        let level = level.unwrap_or(3 + reconsume - 1);
        let dead = reconsume > self.cfg.max_delivery_attempts;
        let mut dest = if dead { dest_dlq } else { dest_retry };
        let t = self.topic(&dest, 1);
        dest = self.topics[t as usize].name.clone();
        let (stored_topic, qid) = if dead {
            (dest.as_str(), 0)
        } else {
            let lv = level.clamp(1, self.cfg.delay_levels.len() as u32);
            let due = self.now + self.cfg.delay_levels[lv as usize - 1];
            record::push_prop(&mut props, prop::DELAY, itoa(u64::from(lv)).as_str());
            record::push_prop(&mut props, prop::REAL_TOPIC, &dest);
            record::push_prop(&mut props, prop::REAL_QID, "0");
            record::push_prop(&mut props, prop::TIMER_OUT_MS, itoa(due).as_str());
            (topic::SCHEDULE, lv - 1)
        };
        let mut spec = Spec::internal(stored_topic, &body, props, born);
        spec.queue_id = qid;
        spec.flag = flag;
        spec.born_host = born_host;
        spec.reconsume_times = reconsume;
        let (off, qoff) = self.write(core::slice::from_ref(&spec))?;
        if dead {
            self.stats.dead_lettered += 1;
        }
        Ok(Ok(Reply::Sent(alloc::vec![SendResult {
            msg_id: origin,
            topic: dest,
            queue_id: 0,
            queue_offset: qoff,
            offset: off,
            txn: None
        }])))
    }

    /// Whether the record at `offset` is a message `group` can consume: visible in a queue
    /// of a consumer topic (a committed transaction, a delivered delay, a plain message), and
    /// not in another group's retry or dead-letter topic. A pending or rolled-back half, a
    /// delay not yet due, or a broker record is not: a send-back of one would hand its body
    /// to the caller.
    fn consumable_at(&mut self, group: &str, offset: u64) -> Res<Result<(), ClientError>, S> {
        let not = |why: String| Ok(Err(ClientError::NotConsumable(why)));
        let Some((q, _)) = self.visible_place(offset)? else {
            return not(format!(
                "offset {offset} is not a visible message (a pending or rolled-back transaction, a delay not yet delivered, or no message at all)"
            ));
        };
        let queue_topic = &self.topics[self.queues[q as usize].topic as usize].name;
        let own = match topic::classify(queue_topic) {
            TopicKind::Retry => *queue_topic == topic::retry(group),
            TopicKind::DeadLetter => *queue_topic == topic::dlq(group),
            _ => true,
        };
        if !own {
            return not(format!(
                "offset {offset} is in `{queue_topic}`, another group's"
            ));
        }
        Ok(Ok(()))
    }

    pub(super) fn expire_inflight(&mut self, g: u32, q: u32, qoff: u64, gen: u64) -> Res<(), S> {
        let Some(inflight) = self
            .pops
            .get(&(g, q))
            .and_then(|p| p.inflight.get(&qoff))
            .copied()
        else {
            return Ok(());
        };
        if inflight.generation != gen {
            return Ok(());
        }
        if inflight.attempt >= self.cfg.max_delivery_attempts {
            return self.dead_letter(g, q, qoff, gen);
        }
        if let Some(p) = self.pops.get_mut(&(g, q)) {
            p.ready.insert(qoff);
        }
        self.mark_notify(q);
        Ok(())
    }

    /// Copies a received message to `%DLQ%<group>` and retires its delivery, in one atomic
    /// group of two records.
    pub(super) fn dead_letter(&mut self, g: u32, q: u32, qoff: u64, gen: u64) -> Res<(), S> {
        let Some(unit) = self.unit_at(q, qoff)? else {
            return Ok(());
        };
        let group = self.groups[g as usize].name.clone();
        let topic_name = self.topics[self.queues[q as usize].topic as usize]
            .name
            .clone();
        let queue_id = self.queues[q as usize].queue_id;
        let Some(r) = self
            .log
            .read(unit.offset, unit.size as usize)
            .map_err(Error::Storage)?
        else {
            // Damaged since it was written: retire the delivery rather than wedge the timer.
            let state = StateOp::Ack {
                group: &group,
                topic: &topic_name,
                queue_id,
                queue_offset: qoff,
                generation: gen,
            };
            self.write_state(&state)?;
            return Ok(());
        };
        let body = r.body.to_vec();
        let (flag, born, born_host, reconsume) = (
            r.header.flag,
            r.header.born_timestamp,
            r.header.born_host,
            r.header.reconsume_times,
        );
        let mut props = Vec::new();
        let mut origin = None;
        // As in `send_back`: a copy keeps its RETRY_TOPIC, any other message names its topic.
        let is_copy = copied_topic(&topic_name);
        let mut has_retry_topic = false;
        for (k, v) in r.props() {
            if prop::INTERNAL.contains(&k) {
                continue;
            }
            if k == prop::UNIQ_KEY {
                origin = Some(String::from(v));
            }
            if k == prop::RETRY_TOPIC {
                if !is_copy || has_retry_topic {
                    continue;
                }
                has_retry_topic = true;
            }
            record::push_prop(&mut props, k, v);
        }
        let origin = origin.unwrap_or_else(|| self.offset_msg_id(unit.offset));
        record::push_prop(&mut props, prop::ORIGIN_MESSAGE_ID, &origin);
        if !has_retry_topic {
            record::push_prop(&mut props, prop::RETRY_TOPIC, &topic_name);
        }
        record::push_prop(&mut props, BATCH_LEN, "2");
        let dlq = topic::dlq(&group);
        self.topic(&dlq, 1);
        let mut dead = Spec::internal(&dlq, &body, props, born);
        dead.flag = flag;
        dead.born_host = born_host;
        dead.reconsume_times = reconsume;
        let state = postcard::to_allocvec(&StateOp::Ack {
            group: &group,
            topic: &topic_name,
            queue_id,
            queue_offset: qoff,
            generation: gen,
        })
        .expect("postcard to a Vec cannot fail");
        let retire = Spec::internal(topic::REVIVE, &state, Vec::new(), self.now);
        self.write(&[dead, retire])?;
        self.stats.dead_lettered += 1;
        Ok(())
    }

    /// Drops pop timers whose delivery was acked or superseded, so `poll_timeout` is real.
    pub(super) fn prune_pop_timers(&mut self) {
        while let Some(&Reverse((_, g, q, qoff, gen))) = self.pop_timers.peek() {
            let live = self
                .pops
                .get(&(g, q))
                .and_then(|p| p.inflight.get(&qoff))
                .is_some_and(|i| i.generation == gen);
            if live {
                break;
            }
            self.pop_timers.pop();
        }
    }
}

/// Whether messages of `topic` are copies the broker made (a retry or dead-letter topic),
/// whose `RETRY_TOPIC` the broker wrote.
fn copied_topic(topic: &str) -> bool {
    matches!(
        topic::classify(topic),
        TopicKind::Retry | TopicKind::DeadLetter
    )
}
