//! The clients (a producer with transactions and its checker, a consumer) and the ledger of
//! what was acknowledged, released and delivered, with the checks that read it.

use super::*;

#[derive(Clone, Debug)]
pub(crate) enum OpKind {
    Send {
        key: String,
        deliver_at: Option<Millis>,
    },
    Prepare {
        key: String,
    },
    End {
        key: String,
        resolution: Resolution,
    },
    Pull {
        queue: u32,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct Released {
    pub(crate) key: String,
    pub(crate) offset: u64,
    /// The record's bytes as the releasing master held them.
    pub(crate) bytes: Vec<u8>,
    pub(crate) epoch: u64,
    pub(crate) at: Millis,
}

#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// Sends a master released (sync: durable on the set), by key.
    pub(crate) released: BTreeMap<String, Released>,
    /// Sends a client saw acknowledged.
    pub(crate) acked: BTreeSet<String>,
    /// Commits a client saw acknowledged.
    pub(crate) commits_acked: BTreeSet<String>,
    /// Transactions meant to roll back (never to be delivered).
    pub(crate) rollback: BTreeSet<String>,
    /// Transactions meant to commit.
    pub(crate) commit: BTreeSet<String>,
    /// Half key → transaction id, once prepared.
    pub(crate) txns: BTreeMap<String, TxnId>,
    /// Delayed sends: key → earliest delivery (true time).
    pub(crate) delayed: BTreeMap<String, Millis>,
    pub(crate) delivered: BTreeSet<String>,
    /// Lost under async within the bound (not required afterwards).
    pub(crate) lost: BTreeSet<String>,
    /// Epoch → the node that released in it.
    pub(crate) epoch_node: BTreeMap<u64, u32>,
    /// Epoch → true time its election transaction was applied.
    pub(crate) elected_at: BTreeMap<u64, Millis>,
    /// Epoch → true time its master last acknowledged a write (it stopped at or after it:
    /// the async bound is stated from there, so a master paused or cut off before it died
    /// gets no credit for the time it was not serving).
    pub(crate) last_ack_in: BTreeMap<u64, Millis>,
    /// Last release of any write.
    pub(crate) last_release: Millis,
}

impl World {
    pub(crate) fn issue(&mut self, kind: OpKind) {
        let Some(m) = self.route else { return };
        self.next_op += 1;
        let op = self.next_op;
        let request = match &kind {
            OpKind::Send { key, deliver_at } => {
                let mut msg = NewMessage::new(TOPIC, key.as_bytes().to_vec());
                if let Some(at) = deliver_at {
                    msg = msg.with_delay(Delay::At(*at));
                }
                Request::Send {
                    messages: vec![msg],
                }
            }
            OpKind::Prepare { key } => Request::Prepare {
                group: PRODUCER_GROUP.into(),
                message: NewMessage::new(TOPIC, key.as_bytes().to_vec()),
                check_immunity_ms: None,
            },
            OpKind::End { key, resolution } => {
                let Some(&txn) = self.ledger.txns.get(key) else {
                    return;
                };
                Request::EndTransaction {
                    txn,
                    resolution: *resolution,
                    group: Some(PRODUCER_GROUP.into()),
                    from_check: false,
                }
            }
            OpKind::Pull { queue } => Request::Pull {
                group: CONSUMER_GROUP.into(),
                topic: TOPIC.into(),
                queue_id: *queue,
                offset: Some(self.offsets[*queue as usize]),
                max: 32,
                filter: rocklet_core::TagFilter::All,
                auto_commit: false,
            },
        };
        self.ops.insert(op, kind);
        let d = self.delay();
        self.send(To::Node(m), Msg::Request { op, request }, self.now + d);
    }

    pub(crate) fn client_op(&mut self) {
        self.next_key += 1;
        let r = self.rng.range(0, 99);
        if r < 60 {
            let key = format!("s{}", self.next_key);
            self.issue(OpKind::Send {
                key,
                deliver_at: None,
            });
        } else if r < 70 {
            let key = format!("d{}", self.next_key);
            let at = self.now + self.rng.range(300, 3_000);
            self.ledger.delayed.insert(key.clone(), at);
            self.issue(OpKind::Send {
                key,
                deliver_at: Some(at),
            });
        } else {
            let key = format!("x{}", self.next_key);
            if self.rng.chance(600) {
                self.ledger.commit.insert(key.clone());
            } else {
                self.ledger.rollback.insert(key.clone());
            }
            self.issue(OpKind::Prepare { key });
        }
    }

    pub(crate) fn client_receive(&mut self, msg: Msg) -> Res {
        match msg {
            Msg::Reply { op, reply } => {
                let Some(kind) = self.ops.remove(&op) else {
                    return Ok(());
                };
                let Some(reply) = reply else { return Ok(()) };
                match (kind, reply) {
                    (OpKind::Send { key, .. }, Reply::Sent(_)) => {
                        self.stats.acked += 1;
                        self.ledger.acked.insert(key);
                    }
                    (OpKind::Prepare { key }, Reply::Sent(r)) => {
                        if let Some(txn) = r[0].txn {
                            self.ledger.txns.insert(key.clone(), txn);
                        }
                        // Most are ended by the producer; some wait for the check.
                        if self.rng.chance(800) {
                            let resolution = if self.ledger.commit.contains(&key) {
                                Resolution::Commit
                            } else {
                                Resolution::Rollback
                            };
                            self.issue(OpKind::End { key, resolution });
                        }
                    }
                    (OpKind::End { key, resolution }, Reply::Ended { .. }) => {
                        self.stats.acked += 1;
                        if resolution == Resolution::Commit {
                            self.ledger.commits_acked.insert(key);
                        }
                    }
                    (
                        OpKind::Pull { queue },
                        Reply::Pulled {
                            messages,
                            next_offset,
                            ..
                        },
                    ) => {
                        for m in &messages {
                            let key = String::from_utf8_lossy(&m.body).into_owned();
                            self.delivered(&key)?;
                        }
                        self.offsets[queue as usize] = next_offset;
                    }
                    _ => {}
                }
            }
            Msg::Check { node, check } => {
                // The checker answers what the producer meant.
                let key = String::from_utf8_lossy(&check.message.body).into_owned();
                let resolution = if self.ledger.commit.contains(&key) {
                    Resolution::Commit
                } else if self.ledger.rollback.contains(&key) {
                    Resolution::Rollback
                } else {
                    Resolution::Unknown
                };
                self.next_op += 1;
                let op = self.next_op;
                let d = self.delay();
                let request = Request::EndTransaction {
                    txn: check.txn,
                    resolution,
                    group: Some(check.group),
                    from_check: true,
                };
                self.send(To::Node(node), Msg::Request { op, request }, self.now + d);
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn delivered(&mut self, key: &str) -> Res {
        if self.ledger.rollback.contains(key) {
            return fail(format!("a rolled-back message was delivered: {key}"));
        }
        if let Some(&at) = self.ledger.delayed.get(key) {
            if self.now + SKEW_MS < at {
                return fail(format!(
                    "a delayed message was delivered early: {key} at {}, due at {at}",
                    self.now
                ));
            }
        }
        if self.ledger.delivered.insert(key.to_string()) {
            self.stats.delivered += 1;
        }
        Ok(())
    }

    pub(crate) fn final_checks(&mut self) -> Res {
        // (Under async replication a lost commit is not told from a delivered one: only sends,
        // checked by offset, are required there.)
        let commits = if self.opts.sync {
            &self.ledger.commits_acked
        } else {
            &BTreeSet::new()
        };
        for key in self.ledger.acked.iter().chain(commits) {
            if !self.ledger.delivered.contains(key) && !self.ledger.lost.contains(key) {
                return fail(format!(
                    "an acknowledged message was never delivered: {key} ({} s after the faults ended)",
                    self.opts.quiet_ms / 1000
                ));
            }
        }
        // And the final master's log holds every acknowledged record.
        if let Some(m) = (0..3).find(|&i| matches!(self.nodes[i].role, Role::Master(_))) {
            let epoch = match &self.nodes[m].role {
                Role::Master(ms) => ms.m.epoch,
                _ => 0,
            };
            self.check_new_master(m, epoch)?;
        }
        Ok(())
    }
}
