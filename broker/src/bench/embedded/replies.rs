//! The core's outputs drained and its replies matched to what each client asked: the
//! ledger records every fate.

use rocklet_core::{Output, Reply, Request, Resolution};

use super::{Phase, Run, ACK_ID, BACKLOG_ID, CHECK_ID, LOAD_ID, RECV_ID};
use crate::bench::ledger::Fate;
use crate::bench::{checked_commit, parse_body, us};
use crate::clock::Clock;
use crate::driver::answer;

impl Run<'_> {
    pub(super) fn drain_outputs(&mut self) -> Result<(), String> {
        let mut none = Vec::new();
        self.drain_replies(&mut none)
    }

    pub(super) fn drain_replies(&mut self, phases: &mut [Phase]) -> Result<(), String> {
        while let Some(o) = self.b.poll_output() {
            let now = self.clock.now();
            match o {
                Output::Reply { id, reply } => self.on_reply(id, reply, phases, now),
                Output::Check(c) => {
                    let Some((run, seq)) = parse_body(&c.message.body) else {
                        self.ledger.foreign();
                        continue;
                    };
                    if run != self.run_id {
                        self.ledger.foreign();
                        continue;
                    }
                    if c.check == 1 {
                        if let Some(&d) = self.deadline.get(seq as usize) {
                            let _ = self.rec.check_late.record(now.saturating_sub(d));
                        }
                    }
                    let commit = checked_commit(&self.args.mix, self.backlog, seq);
                    self.ledger.set(
                        seq,
                        if commit {
                            Fate::Committed
                        } else {
                            Fate::RolledBack
                        },
                    );
                    let req = Request::EndTransaction {
                        txn: c.txn,
                        resolution: if commit {
                            Resolution::Commit
                        } else {
                            Resolution::Rollback
                        },
                        group: Some(c.group),
                        from_check: true,
                    };
                    self.b
                        .handle(now, CHECK_ID, req)
                        .map_err(|e| format!("check answer failed: {e}"))?;
                }
                Output::Failed { reason, .. } => return Err(format!("sync failed: {reason}")),
                Output::Available { .. } | Output::Trace(_) => {}
            }
        }
        Ok(())
    }

    fn on_reply(&mut self, id: u64, reply: Reply, phases: &mut [Phase], now: u64) {
        if let Reply::Error(e) = &reply {
            let what = match id {
                RECV_ID => "receive",
                ACK_ID => "ack",
                CHECK_ID => "check answer",
                BACKLOG_ID => "backlog prepare",
                LOAD_ID => "load",
                _ => "request",
            };
            self.err(what, e);
        }
        match id {
            RECV_ID => {
                self.receiving = false;
                let msgs = match answer::received(reply) {
                    Ok(Ok(msgs)) => msgs,
                    Ok(Err(_)) => Vec::new(),
                    Err(e) => {
                        self.err("receive", e);
                        Vec::new()
                    }
                };
                if self.consume_is_op && !msgs.is_empty() {
                    let _ = self.rec.op.record(us(self.recv_t0.elapsed()));
                }
                for m in msgs {
                    match parse_body(&m.message.body) {
                        Some((run, seq)) if run == self.run_id => {
                            if let Some(late) = self.ledger.consumed(seq, now, 0) {
                                let _ = self.rec.delay_late.record(late);
                            }
                            if self.consume_is_op {
                                self.rec.done += 1;
                            }
                        }
                        _ => self.ledger.foreign(),
                    }
                    self.to_ack.push(m.handle);
                }
            }
            ACK_ID | CHECK_ID | BACKLOG_ID | LOAD_ID => {}
            c => {
                let Some(p) = phases.get_mut(c as usize) else {
                    return;
                };
                // The client's mistakes were counted above; an impossible reply is
                // counted here, and either leaves the message's fate unknown.
                match *p {
                    Phase::Sending { seq, t0 } => {
                        match answer::sent(reply) {
                            Ok(Ok(_)) => {
                                self.ledger.set(seq, Fate::Once);
                                let _ = self.rec.op.record(us(t0.elapsed()));
                                self.rec.done += 1;
                            }
                            Ok(Err(_)) => self.ledger.set(seq, Fate::Ambiguous),
                            Err(e) => {
                                self.err("send", e);
                                self.ledger.set(seq, Fate::Ambiguous);
                            }
                        }
                        *p = Phase::Idle;
                    }
                    Phase::Preparing { seq, t0 } => match answer::prepared(reply) {
                        Ok(Ok((_, txn))) => *p = Phase::ToEnd { seq, txn, t0 },
                        Ok(Err(_)) => {
                            self.ledger.set(seq, Fate::Ambiguous);
                            *p = Phase::Idle;
                        }
                        Err(e) => {
                            self.err("prepare", e);
                            self.ledger.set(seq, Fate::Ambiguous);
                            *p = Phase::Idle;
                        }
                    },
                    Phase::Ending { seq, t0, t_end } => {
                        match answer::ended(reply) {
                            Ok(Ok(ended)) => {
                                self.ledger.set(
                                    seq,
                                    if ended.resolution == Resolution::Commit {
                                        Fate::Committed
                                    } else {
                                        Fate::RolledBack
                                    },
                                );
                                let _ = self.rec.end.record(us(t_end.elapsed()));
                                let _ = self.rec.op.record(us(t0.elapsed()));
                                self.rec.done += 1;
                            }
                            Ok(Err(_)) => self.ledger.set(seq, Fate::Ambiguous),
                            Err(e) => {
                                self.err("end", e);
                                self.ledger.set(seq, Fate::Ambiguous);
                            }
                        }
                        *p = Phase::Idle;
                    }
                    Phase::Idle | Phase::ToEnd { .. } => {
                        self.err(
                            "client",
                            format!("a reply while waiting for none: {reply:?}"),
                        );
                    }
                }
            }
        }
    }
}
