//! Transactions: half messages, END_TRANSACTION, op records and check-back.

use super::*;

/// How soon a check that came due before its half was durable (under the acknowledgement
/// rule) is looked at again.
const UNRELEASED_CHECK_RETRY_MS: Millis = 100;

impl<S: Storage> Broker<S> {
    /// Pending transactions in log order, at most `limit`.
    #[must_use]
    pub fn pending_transactions(&self, limit: usize) -> Vec<PendingTxnInfo> {
        self.txns
            .iter()
            .take(limit)
            .map(|t| {
                let q = &self.queues[t.queue as usize];
                PendingTxnInfo {
                    txn: TxnId(t.offset),
                    group: self.groups[t.group as usize].name.clone(),
                    topic: self.topics[q.topic as usize].name.clone(),
                    queue_id: q.queue_id,
                    checks: u32::from(t.checks),
                    next_check: (t.deadline != PARKED).then_some(t.deadline),
                }
            })
            .collect()
    }

    /// The producer group of a transaction, pending or resolved before; `None` when `txn`
    /// names no half message. For trusted hosts (an operator's tool, an application that
    /// embeds the broker) that end a transaction by its id alone: END_TRANSACTION itself
    /// must name the group.
    pub fn transaction_group(&mut self, txn: TxnId) -> Res<Option<String>, S> {
        if let Some(row) = self.txns.get(txn.0) {
            return Ok(Some(self.groups[row.group as usize].name.clone()));
        }
        Ok(match self.log.read_any(txn.0).map_err(Error::Storage)? {
            Some(r) if r.topic == topic::HALF => r.prop(prop::PGROUP).map(String::from),
            _ => None,
        })
    }

    /// Tells the broker whether a producer of `group` can be checked now. Checks of an
    /// offline group wait (parked) and go out when it comes online. A group the broker does
    /// not know is created only while there is room under [`Config::max_groups`]; past that
    /// it has no transactions to check (a prepare for it is refused too).
    pub fn set_producer_online(&mut self, now: Millis, group: &str, online: bool) {
        self.tick(now);
        if !self.group_ids.contains_key(group) && (!online || self.may_create_group(group).is_err())
        {
            return;
        }
        let g = self.group(group);
        self.groups[g as usize].online = online;
        if online {
            // Due again at the deadline they were parked at (passed already): the deadline
            // their records give them, as replaying the log would (and a checkpoint keeps).
            let parked = core::mem::take(&mut self.groups[g as usize].parked);
            for (off, due) in parked {
                self.txns.update(off, |t| t.deadline = due);
            }
        }
    }

    pub(super) fn prepare(
        &mut self,
        group: &str,
        m: NewMessage,
        immunity: Option<Millis>,
    ) -> Res<Result<Reply, ClientError>, S> {
        let (queue_id, _, off) = match self.prepare_single(group, &m, immunity)? {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        Ok(Ok(Reply::Sent(alloc::vec![SendResult {
            msg_id: m.message_id.unwrap_or_else(|| self.offset_msg_id(off)),
            topic: m.topic,
            queue_id,
            queue_offset: 0,
            offset: off,
            txn: Some(TxnId(off)),
        }])))
    }

    /// Stores a half message: (queue id, 0, log offset = transaction id). Allocates nothing
    /// in steady state, as [`Broker::send_single`].
    pub(super) fn prepare_single<M: send::Outgoing>(
        &mut self,
        group: &str,
        m: &M,
        immunity: Option<Millis>,
    ) -> Res<Result<send::Placed, ClientError>, S> {
        if let Err(e) = topic::validate_group(group) {
            return Ok(Err(e));
        }
        if let Err(e) = self.refuse_new() {
            return Ok(Err(e));
        }
        let props = self.props_buf();
        let mut plan = match self.plan(m, false, props) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        if plan.delay_due.is_some() {
            self.recycle_props(plan.props);
            return Ok(Err(ClientError::DelayOnTransaction));
        }
        let immunity_s = immunity.map(|ms| ms.div_ceil(1000));
        if let Err(e) = self
            .may_create_group(group)
            .and_then(|()| self.may_create_topic(m.topic()))
        {
            self.recycle_props(plan.props);
            return Ok(Err(e));
        }
        let t = self.topic_for_send(m.topic());
        let queue_id = match self.pick_queue(t, m) {
            Ok(q) => q,
            Err(e) => {
                self.recycle_props(plan.props);
                return Ok(Err(e));
            }
        };
        record::push_prop(&mut plan.props, prop::TRAN_MSG, "true");
        record::push_prop(&mut plan.props, prop::PGROUP, group);
        record::push_prop(&mut plan.props, prop::REAL_TOPIC, m.topic());
        record::push_prop(
            &mut plan.props,
            prop::REAL_QID,
            itoa(u64::from(queue_id)).as_str(),
        );
        if let Some(s) = immunity_s {
            record::push_prop(
                &mut plan.props,
                prop::CHECK_IMMUNITY_TIME_IN_SECONDS,
                itoa(s).as_str(),
            );
        }
        let spec = Spec::outgoing(
            m,
            topic::HALF,
            0,
            sys_flag::TRANSACTION_PREPARED_TYPE,
            plan.props,
            self.now,
        );
        let written = self.write(core::slice::from_ref(&spec));
        self.recycle_props(spec.props);
        let (off, _) = written?;
        Ok(Ok((queue_id, 0, off)))
    }

    pub(super) fn end_transaction_inner(
        &mut self,
        txn: TxnId,
        resolution: Resolution,
        group: Option<&str>,
        from_check: bool,
    ) -> Res<Result<Reply, ClientError>, S> {
        // A transaction is ended only by its own producer group, whether it is pending or
        // was resolved before (a duplicate answer tells of the resolution too).
        let row = self.txns.get(txn.0).copied();
        // A pending transaction's group is known by name (no copy); a resolved one's is read
        // back from its half.
        let resolved_owner = match row {
            Some(_) => None,
            None => match self.log.read_any(txn.0).map_err(Error::Storage)? {
                Some(r) if r.topic == topic::HALF => {
                    Some(String::from(r.prop(prop::PGROUP).unwrap_or("")))
                }
                // Not a half message: never a transaction.
                _ => return Ok(Err(ClientError::UnknownTransaction(txn))),
            },
        };
        let Some(group) = group.filter(|g| !g.is_empty()) else {
            return Ok(Err(ClientError::ProducerGroupRequired(txn)));
        };
        let owner = match (&row, &resolved_owner) {
            (Some(row), _) => self.groups[row.group as usize].name.as_str(),
            (None, Some(o)) => o.as_str(),
            (None, None) => "",
        };
        if owner != group {
            return Ok(Err(ClientError::WrongProducerGroup {
                txn,
                expected: owner.into(),
                got: group.into(),
            }));
        }
        if row.is_none() {
            // Resolved before.
            let earlier = self
                .resolved
                .iter()
                .rev()
                .find(|(o, _)| *o == txn.0)
                .map(|&(_, c)| c);
            let earlier = match earlier {
                Some(true) => Some(Resolution::Commit),
                Some(false) => Some(Resolution::Rollback),
                None => None,
            };
            if let Some(was) = earlier {
                if was == resolution || resolution == Resolution::Unknown {
                    return Ok(Ok(Reply::Ended {
                        txn,
                        resolution: was,
                        duplicate: true,
                    }));
                }
            }
            return Ok(Err(ClientError::TransactionAlreadyResolved {
                txn,
                resolution: earlier,
            }));
        }
        if from_check {
            self.stats.checks_answered += 1;
        }
        let flag = match resolution {
            Resolution::Unknown => {
                self.stats.unknown_answers += 1;
                if from_check {
                    self.stats.checks_unknown += 1;
                    self.txns.update(txn.0, |t| t.answered = true);
                }
                return Ok(Ok(Reply::Ended {
                    txn,
                    resolution,
                    duplicate: false,
                }));
            }
            Resolution::Commit => sys_flag::TRANSACTION_COMMIT_TYPE,
            Resolution::Rollback => sys_flag::TRANSACTION_ROLLBACK_TYPE,
        };
        self.write_op(txn.0, op::RESOLVED, flag, None)?;
        Ok(Ok(Reply::Ended {
            txn,
            resolution,
            duplicate: false,
        }))
    }

    pub(super) fn write_op(
        &mut self,
        half: u64,
        tag: &str,
        flag: u32,
        checks: Option<u16>,
    ) -> Res<u64, S> {
        let mut props = self.props_buf();
        record::push_prop(&mut props, prop::TAGS, tag);
        if let Some(c) = checks {
            record::push_prop(
                &mut props,
                prop::TRANSACTION_CHECK_TIMES,
                itoa(u64::from(c)).as_str(),
            );
        }
        let body = itoa(half);
        let mut spec = Spec::internal(topic::OP, body.as_str().as_bytes(), props, self.now);
        spec.sys_flag = flag;
        spec.prepared_offset = half;
        let written = self.write(core::slice::from_ref(&spec));
        self.recycle_props(spec.props);
        Ok(written?.0)
    }

    pub(super) fn check(&mut self, row: PendingTxn) -> Res<(), S> {
        let now = self.now;
        // A check tells the producer of the half: not before the half is durable under the
        // acknowledgement rule (synced; replicated, where replies wait for replicas). Its
        // prepare was not acknowledged either; look again shortly.
        if row.record + u64::from(row.size) > self.release_point() {
            let again = now.saturating_add(UNRELEASED_CHECK_RETRY_MS);
            self.txns.update(row.offset, |t| t.deadline = again);
            return Ok(());
        }
        if row.checks > 0 && !row.answered {
            // The check before this one went unanswered (counted once, whatever happens now).
            self.stats.checks_unanswered += 1;
            self.txns.update(row.offset, |t| t.answered = true);
        }
        let Some(r) = self
            .log
            .read(row.record, row.size as usize)
            .map_err(Error::Storage)?
        else {
            // Damaged since it was written: it can never be committed; drop it, do not wedge.
            let rollback = sys_flag::TRANSACTION_ROLLBACK_TYPE;
            self.write_op(row.offset, op::EXPIRED, rollback, None)?;
            return Ok(());
        };
        let stored = r.header.store_timestamp;
        if stored.saturating_add(self.cfg.half_reserve_ms) <= now {
            self.write_op(
                row.offset,
                op::EXPIRED,
                sys_flag::TRANSACTION_ROLLBACK_TYPE,
                None,
            )?;
            return Ok(());
        }
        if u32::from(row.checks) >= self.cfg.transaction_check_max {
            self.write_op(row.offset, op::CHECK_MAX, 0, None)?;
            return Ok(());
        }
        if !self.groups[row.group as usize].online {
            self.txns.update(row.offset, |t| t.deadline = PARKED);
            self.groups[row.group as usize]
                .parked
                .push((row.offset, row.deadline));
            self.trace_txn(TraceKind::CheckParked, row.offset, row.queue, String::new());
            return Ok(());
        }
        let check = u32::from(row.checks) + 1;
        self.write_op(row.offset, op::CHECKED, 0, Some(row.checks + 1))?;
        let unit = CqUnit {
            offset: row.record,
            size: row.size,
            tag_hash: 0,
        };
        let Some(message) = self.read_message(row.queue, 0, unit)? else {
            return Ok(());
        };
        self.stats.checks_sent += 1;
        self.txns.update(row.offset, |t| t.answered = false);
        self.outputs.push_back(Output::Check(CheckRequest {
            group: self.groups[row.group as usize].name.clone(),
            txn: TxnId(row.offset),
            message,
            check,
        }));
        Ok(())
    }

    pub(super) fn forget_parked(&mut self, row: PendingTxn) {
        if row.deadline == PARKED {
            self.groups[row.group as usize]
                .parked
                .retain(|&(o, _)| o != row.offset);
        }
    }
}
