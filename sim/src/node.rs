//! A node: its core, its role (down, replica, master) and how the world drives it — the
//! way `broker/src/cluster/node.rs` and `replication.rs` drive a core and [`machine`].

use super::*;

#[derive(Debug)]
pub(crate) enum Role {
    Down { until: Millis },
    Replica,
    Master(Box<MasterSide>),
}

#[derive(Debug)]
pub(crate) struct MasterSide {
    pub(crate) m: Master,
    pub(crate) table: ReplicaTable,
    /// The lease deadline, monotonic ms.
    pub(crate) deadline: Millis,
    pub(crate) lease: i64,
    pub(crate) keeper_busy: bool,
    pub(crate) next_keepalive: Millis,
    pub(crate) next_check: Millis,
}

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) id: u32,
    pub(crate) core: Option<Broker<CrashStorage>>,
    /// The storage while the node is down.
    pub(crate) disk: Option<CrashStorage>,
    pub(crate) role: Role,
    pub(crate) incarnation: u64,
    /// True time the process (its monotonic clock) started.
    pub(crate) started: Millis,
    pub(crate) drift_ppm: i64,
    pub(crate) skew: i64,
    pub(crate) paused_until: Millis,
    /// The role loop's etcd call is out.
    pub(crate) busy: bool,
    pub(crate) next_look: Millis,
    /// Replica: (master node, epoch) followed and the connection.
    pub(crate) following: Option<(usize, u64, u64)>,
    pub(crate) reconnect_at: Millis,
    /// Core request id → client op.
    pub(crate) pending: BTreeMap<u64, u64>,
    /// The next sync fails (EIO).
    pub(crate) fail_next_sync: bool,
}

impl Node {
    pub(crate) fn mono(&self, now: Millis) -> Millis {
        let e = (now - self.started) as i64;
        (e + e * self.drift_ppm / 1_000_000).max(0) as u64
    }
    pub(crate) fn wall(&self, now: Millis) -> Millis {
        (now as i64 + self.skew).max(0) as u64
    }
    pub(crate) fn params(&self, sync: bool) -> Params {
        Params {
            me: self.id,
            sync,
            min_in_sync: MIN_IN_SYNC,
            max_lag_ms: MAX_LAG_MS,
            ttl_ms: TTL_MS,
        }
    }
}

impl World {
    pub(crate) fn step_node(&mut self, n: usize) -> Res {
        if self.nodes[n].paused_until > self.now {
            return Ok(());
        }
        if let Role::Down { until } = self.nodes[n].role {
            if until <= self.now {
                self.restart(n)?;
            }
            return Ok(());
        }
        let mono = self.nodes[n].mono(self.now);
        let wall = self.nodes[n].wall(self.now);
        if let Role::Master(_) = self.nodes[n].role {
            self.master_step(n, mono, wall)?;
        } else {
            self.replica_step(n, mono)?;
        }
        self.flush(n)
    }

    pub(crate) fn restart(&mut self, n: usize) -> Res {
        let now_wall = self.nodes[n].wall(self.now);
        let disk = self.nodes[n].disk.take().unwrap_or_default();
        match Broker::open_replica(self.cfg.clone(), disk, now_wall) {
            Ok(b) => {
                let node = &mut self.nodes[n];
                node.core = Some(b);
                node.role = Role::Replica;
                node.started = self.now;
                node.next_look = 0;
                node.reconnect_at = 0;
                let id = node.id;
                self.log(|| format!("node {id} up (a replica)"));
                Ok(())
            }
            Err(e) => fail(format!(
                "recovery: node {} cannot reopen its storage after a crash: {e} (only a torn tail may be cut)",
                n + 1
            )),
        }
    }

    /// Syncs what the core appended (group commit), then hands its outputs out.
    pub(crate) fn flush(&mut self, n: usize) -> Res {
        let node = &mut self.nodes[n];
        let Some(core) = node.core.as_mut() else {
            return Ok(());
        };
        if core.needs_sync() {
            if node.fail_next_sync {
                node.fail_next_sync = false;
                core.storage_mut().fail_syncs = true;
            }
            if let Err(e) = core.sync() {
                self.log(|| format!("node {}: fsync failed ({e}): it stops", n + 1));
                let back = self.now + self.rng.range(500, 3_000);
                self.drain_outputs(n)?;
                if let Some(core) = self.nodes[n].core.as_mut() {
                    core.storage_mut().fail_syncs = false;
                }
                self.last_kill = self.now;
                self.crash(n, "fsync failed", true, back);
                return Ok(());
            }
        }
        self.drain_outputs(n)
    }

    pub(crate) fn drain_outputs(&mut self, n: usize) -> Res {
        let epoch = match &self.nodes[n].role {
            Role::Master(ms) => ms.m.epoch,
            _ => 0,
        };
        loop {
            let Some(core) = self.nodes[n].core.as_mut() else {
                return Ok(());
            };
            let Some(out) = core.poll_output() else {
                return Ok(());
            };
            match out {
                Output::Reply { id, reply } => {
                    let Some(op) = self.nodes[n].pending.remove(&id) else {
                        continue;
                    };
                    self.released(n, epoch, op, &reply)?;
                    let d = self.delay();
                    self.send(
                        To::Client,
                        Msg::Reply {
                            op,
                            reply: Some(reply),
                        },
                        self.now + d,
                    );
                }
                Output::Check(check) => {
                    let d = self.delay();
                    self.send(To::Client, Msg::Check { node: n, check }, self.now + d);
                }
                Output::Failed { id, .. } => {
                    self.nodes[n].pending.remove(&id);
                }
                Output::Available { .. } | Output::Trace(_) => {}
            }
        }
    }

    /// A reply leaves master `n` in `epoch`: the checks of what it acknowledges.
    pub(crate) fn released(&mut self, n: usize, epoch: u64, op: u64, reply: &Reply) -> Res {
        let id = n as u32 + 1;
        let write = matches!(
            (self.ops.get(&op), reply),
            (
                Some(OpKind::Send { .. } | OpKind::Prepare { .. } | OpKind::End { .. }),
                Reply::Sent(_) | Reply::Ended { .. }
            )
        );
        if !write {
            return Ok(());
        }
        // No two masters acknowledge in one epoch, nor an old master once a newer is elected.
        match self.ledger.epoch_node.get(&epoch) {
            Some(&other) if other != id => {
                return fail(format!(
                    "two masters: node {id} acknowledged in epoch {epoch}, as node {other} did"
                ))
            }
            _ => {
                self.ledger.epoch_node.insert(epoch, id);
            }
        }
        if let Some((&newer, &at)) = self.ledger.elected_at.range(epoch + 1..).next() {
            if at <= self.now {
                return fail(format!(
                    "fencing: node {id} acknowledged in epoch {epoch} at {}, after epoch {newer} was elected at {at}",
                    self.now
                ));
            }
        }
        self.ledger.last_release = self.now;
        self.ledger.last_ack_in.insert(epoch, self.now);
        if let (Some(OpKind::Send { key, .. }), Reply::Sent(results)) = (self.ops.get(&op), reply) {
            let key = key.clone();
            let offset = results[0].offset;
            self.log(|| format!("node {id} acknowledges {key} at {offset} (epoch {epoch})"));
            let core = self.nodes[n].core.as_mut().expect("up");
            let bytes = match core.replication_chunk(offset, 1) {
                Ok(Some(b)) => first_record(&b),
                _ => {
                    return fail(format!(
                        "node {id} released {key} at {offset} it cannot read"
                    ))
                }
            };
            self.ledger.released.insert(
                key.clone(),
                Released {
                    key,
                    offset,
                    bytes,
                    epoch,
                    at: self.now,
                },
            );
        }
        Ok(())
    }

    pub(crate) fn node_receive(&mut self, n: usize, msg: Msg) -> Res {
        let mono = self.nodes[n].mono(self.now);
        let wall = self.nodes[n].wall(self.now);
        match msg {
            Msg::Etcd {
                incarnation,
                purpose,
                answer,
            } => {
                if incarnation != self.nodes[n].incarnation {
                    return Ok(());
                }
                self.etcd_answer(n, purpose, answer, mono, wall)?;
            }
            Msg::Request { op, request } => {
                let Role::Master(_) = self.nodes[n].role else {
                    self.send(To::Client, Msg::Reply { op, reply: None }, self.now + 1);
                    return Ok(());
                };
                let core = self.nodes[n].core.as_mut().expect("up");
                let id = core.next_request_id();
                match core.handle(wall, id, request) {
                    Ok(()) => {
                        self.nodes[n].pending.insert(id, op);
                    }
                    Err(e) => {
                        return fail(format!("node {}: the core failed a request: {e}", n + 1))
                    }
                }
            }
            Msg::Hello {
                conn,
                node,
                end,
                epochs,
            } => {
                let Role::Master(ms) = &self.nodes[n].role else {
                    self.close_conn(conn, "HELLO to a node that is not master");
                    return Ok(());
                };
                let epoch = ms.m.epoch;
                let core = self.nodes[n].core.as_ref().expect("up");
                let (m_epochs, m_end) = (core.epochs().to_vec(), core.log_end());
                let start = common_prefix(&epochs, end, &m_epochs, m_end);
                self.send_conn(conn, false, Msg::Welcome { conn, epoch, start });
                if start < end {
                    return Ok(());
                }
                if let Role::Master(ms) = &mut self.nodes[n].role {
                    ReplicaState::connected(&mut ms.table, node, conn, start, m_end, mono);
                }
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.pos = start;
                    c.welcomed = true;
                    c.epoch = epoch;
                }
            }
            Msg::Ack { conn, end } => {
                let log_end = self.nodes[n].core.as_ref().map_or(0, Broker::log_end);
                let replica = self.conns.get(&conn).map(|c| c.replica as u32 + 1);
                if let (Role::Master(ms), Some(r)) = (&mut self.nodes[n].role, replica) {
                    ReplicaState::acked(&mut ms.table, r, conn, end, log_end, mono);
                }
            }
            Msg::Close { conn } => {
                if let Role::Master(ms) = &mut self.nodes[n].role {
                    for r in 1..=3 {
                        ReplicaState::closed(&mut ms.table, r, conn);
                    }
                }
                if self.nodes[n].following.is_some_and(|f| f.2 == conn) {
                    self.nodes[n].following = None;
                    self.nodes[n].reconnect_at = self.now + 200;
                }
            }
            Msg::Welcome { conn, epoch, start } => {
                let Some((m, e, c)) = self.nodes[n].following else {
                    return Ok(());
                };
                if c != conn {
                    return Ok(());
                }
                let end = self.nodes[n].core.as_ref().map_or(0, Broker::log_end);
                match machine::welcomed(e, epoch, start, end) {
                    Welcomed::Refuse(why) => {
                        self.close_conn(conn, &why);
                        return Ok(());
                    }
                    Welcomed::Cut(at) => {
                        self.truncate(n, at)?;
                        self.close_conn(conn, "cut its tail: reconnect");
                        self.nodes[n].following = None;
                        self.nodes[n].reconnect_at = self.now;
                        return Ok(());
                    }
                    Welcomed::Follow => {}
                }
                let _ = m;
            }
            Msg::Chunk {
                conn,
                epoch,
                offset,
                bytes,
            } => {
                let Some((_, e, c)) = self.nodes[n].following else {
                    return Ok(());
                };
                if c != conn {
                    return Ok(());
                }
                if epoch != e {
                    self.close_conn(conn, "a CHUNK of another epoch");
                    return Ok(());
                }
                let core = self.nodes[n].core.as_mut().expect("up");
                match core.apply_replicated(offset, &bytes) {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        self.close_conn(conn, &format!("refused: {e}"));
                        return Ok(());
                    }
                    Err(e) => return fail(format!("node {}: apply failed: {e}", n + 1)),
                }
                if self.nodes[n].fail_next_sync {
                    self.nodes[n].fail_next_sync = false;
                    let core = self.nodes[n].core.as_mut().expect("up");
                    core.storage_mut().fail_syncs = true;
                }
                let core = self.nodes[n].core.as_mut().expect("up");
                if let Err(e) = core.sync() {
                    core.storage_mut().fail_syncs = false;
                    self.log(|| format!("node {}: fsync failed ({e}): it stops", n + 1));
                    let back = self.now + self.rng.range(500, 3_000);
                    self.last_kill = self.now;
                    self.crash(n, "fsync failed", true, back);
                    return Ok(());
                }
                let end = core.log_end();
                self.send_conn(conn, true, Msg::Ack { conn, end });
            }
            Msg::Reply { .. } | Msg::Check { .. } => {}
        }
        Ok(())
    }

    /// A replica cuts its log at `at` and opens it again (`replication.rs`
    /// `truncate_and_reopen`).
    pub(crate) fn truncate(&mut self, n: usize, at: u64) -> Res {
        self.stats.truncations += 1;
        let wall = self.nodes[n].wall(self.now);
        let core = self.nodes[n].core.take().expect("up");
        let from = core.log_end();
        let mut storage = core.into_storage();
        if let Err(e) = Broker::truncate_storage(&mut storage, at) {
            return fail(format!("node {}: cutting the log at {at}: {e}", n + 1));
        }
        match Broker::open_replica(self.cfg.clone(), storage, wall) {
            Ok(b) => self.nodes[n].core = Some(b),
            Err(e) => return fail(format!("node {}: reopening after the cut: {e}", n + 1)),
        }
        self.log(|| format!("node {} cut its divergent tail {from} → {at}", n + 1));
        Ok(())
    }

    pub(crate) fn replica_step(&mut self, n: usize, mono: Millis) -> Res {
        let _ = mono;
        // A look at etcd every POLL_MS.
        if !self.nodes[n].busy && self.now >= self.nodes[n].next_look {
            self.nodes[n].busy = true;
            self.nodes[n].next_look = self.now + POLL_MS;
            self.call(n, Purpose::Look, Call::Read);
        }
        // Follow the master the last look named.
        if let Some((m, e, conn)) = self.nodes[n].following {
            if !self.conns.contains_key(&conn) {
                self.nodes[n].following = Some((m, e, 0));
            }
        }
        Ok(())
    }

    /// Opens a replication connection to master `m` of `epoch`.
    pub(crate) fn connect(&mut self, n: usize, m: usize, epoch: u64) -> Res {
        let core = self.nodes[n].core.as_mut().expect("up");
        // What this replica holds is synced before it says so.
        if core.sync().is_err() {
            return Ok(());
        }
        let epochs = core.epochs().to_vec();
        let end = core.log_end();
        if machine::may_follow(epoch, epochs.last().map_or(0, |e| e.0)).is_err() {
            return Ok(());
        }
        if self.link(n, m).cut_until > self.now || matches!(self.nodes[m].role, Role::Down { .. }) {
            self.nodes[n].reconnect_at = self.now + 200;
            return Ok(());
        }
        self.next_conn += 1;
        let conn = self.next_conn;
        self.conns.insert(
            conn,
            Conn {
                master: m,
                replica: n,
                pos: 0,
                epoch,
                welcomed: false,
                last: [0, 0],
            },
        );
        self.nodes[n].following = Some((m, epoch, conn));
        let node = self.nodes[n].id;
        self.send_conn(
            conn,
            true,
            Msg::Hello {
                conn,
                node,
                end,
                epochs,
            },
        );
        Ok(())
    }

    pub(crate) fn etcd_answer(
        &mut self,
        n: usize,
        purpose: Purpose,
        answer: Result<Answer, ()>,
        mono: Millis,
        wall: Millis,
    ) -> Res {
        let me = self.nodes[n].id;
        let params = self.nodes[n].params(self.opts.sync);
        match (purpose, answer) {
            (Purpose::Look, Ok(Answer::Read(s))) => {
                if !matches!(self.nodes[n].role, Role::Replica) {
                    return Ok(());
                }
                match s.master {
                    None => {
                        self.stop_following(n);
                        if machine::may_campaign(s.set.0.as_deref(), me, false) {
                            let log_last = self.nodes[n]
                                .core
                                .as_ref()
                                .and_then(|c| c.epochs().last().map(|e| e.0))
                                .unwrap_or(0);
                            let epoch = machine::next_epoch(s.epoch.0, log_last);
                            self.call(
                                n,
                                Purpose::Grant {
                                    sent: mono,
                                    epoch,
                                    epoch_rev: s.epoch.1,
                                    set_rev: s.set.1,
                                },
                                Call::Grant,
                            );
                            return Ok(());
                        }
                    }
                    Some((node, _, lease)) if node == me => {
                        // A key of this node's previous run: end its lease now.
                        self.call(n, Purpose::Revoke, Call::Revoke(lease));
                        return Ok(());
                    }
                    Some((node, epoch, _)) => {
                        let m = node as usize - 1;
                        let same = self.nodes[n]
                            .following
                            .is_some_and(|f| f.0 == m && f.1 == epoch);
                        if !same {
                            self.stop_following(n);
                            self.nodes[n].following = Some((m, epoch, 0));
                        }
                        if let Some((m, e, 0)) = self.nodes[n].following {
                            if self.now >= self.nodes[n].reconnect_at {
                                self.connect(n, m, e)?;
                            }
                        }
                    }
                }
                self.nodes[n].busy = false;
            }
            (
                Purpose::Grant {
                    sent,
                    epoch,
                    epoch_rev,
                    set_rev,
                },
                Ok(Answer::Lease(lease)),
            ) => {
                let when = vec![
                    Cmp::ModRev(Key::Master, 0),
                    Cmp::ModRev(Key::Epoch, epoch_rev),
                    Cmp::ModRev(Key::SyncStateSet, set_rev),
                ];
                let then = vec![
                    Op::Put(Key::Epoch, Val::Epoch(epoch), 0),
                    Op::Put(Key::Master, Val::Master { node: me, epoch }, lease),
                    Op::Put(
                        Key::SyncStateSet,
                        Val::Set {
                            epoch,
                            members: vec![me],
                        },
                        0,
                    ),
                ];
                self.call(
                    n,
                    Purpose::Elect { sent, epoch, lease },
                    Call::Txn(when, then),
                );
            }
            (Purpose::Elect { sent, epoch, lease }, Ok(Answer::Txn(true))) => {
                self.stop_following(n);
                let core = self.nodes[n].core.as_mut().expect("up");
                match core.promote(wall, epoch) {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        self.log(|| format!("node {me}: promote to {epoch} refused: {e}"));
                        self.fence(n, "promote refused");
                        return Ok(());
                    }
                    Err(e) => {
                        self.log(|| format!("node {me}: promote failed: {e}"));
                        let back = self.now + 500;
                        self.crash(n, "promote failed", true, back);
                        return Ok(());
                    }
                }
                core.set_producer_online(wall, PRODUCER_GROUP, true);
                let log_end = core.log_end();
                self.stats.elections += 1;
                self.log(|| format!("node {me} master of epoch {epoch} (log end {log_end})"));
                self.nodes[n].role = Role::Master(Box::new(MasterSide {
                    m: Master::new(params, epoch, log_end),
                    table: ReplicaTable::new(),
                    deadline: machine::lease_deadline(&params, sent, TTL_MS),
                    lease,
                    keeper_busy: false,
                    next_keepalive: mono + TTL_MS / 4,
                    next_check: mono + 500,
                }));
                self.nodes[n].busy = false;
                self.check_new_master(n, epoch)?;
            }
            (
                Purpose::Grant { .. } | Purpose::Elect { .. } | Purpose::Look | Purpose::Revoke,
                _,
            ) => {
                self.nodes[n].busy = false;
            }
            (Purpose::Check, a) => {
                let Role::Master(ms) = &mut self.nodes[n].role else {
                    return Ok(());
                };
                ms.next_check = mono + 500;
                self.nodes[n].busy = false;
                if let Ok(Answer::Read(s)) = a {
                    let epoch = match &self.nodes[n].role {
                        Role::Master(ms) => ms.m.epoch,
                        _ => 0,
                    };
                    if s.master.map(|m| (m.0, m.1)) != Some((me, epoch)) {
                        self.fence(n, "the master key is no longer this node's");
                    }
                }
            }
            (Purpose::KeepAlive { sent }, a) => {
                let Role::Master(ms) = &mut self.nodes[n].role else {
                    return Ok(());
                };
                ms.keeper_busy = false;
                if let Ok(Answer::Ttl(t)) = a {
                    if t > 0 {
                        ms.deadline = ms.deadline.max(machine::lease_deadline(&params, sent, t));
                    }
                }
            }
            (Purpose::WriteSet, a) => {
                let Role::Master(ms) = &mut self.nodes[n].role else {
                    return Ok(());
                };
                let outcome = match a {
                    Ok(Answer::Txn(b)) => Ok(b),
                    _ => Err(()),
                };
                let asked = ms.m.writing.clone();
                if let Some(why) = ms.m.set_written(outcome) {
                    self.fence(n, why.reason());
                } else if outcome == Ok(true) {
                    self.log(|| format!("node {me}: SyncStateSet {asked:?}"));
                }
            }
        }
        Ok(())
    }

    pub(crate) fn stop_following(&mut self, n: usize) {
        if let Some((_, _, conn)) = self.nodes[n].following.take() {
            if conn != 0 {
                self.close_conn(conn, "following another master");
            }
        }
    }

    /// A master stops (crash-only: the process exits; restarted, it is a replica).
    pub(crate) fn fence(&mut self, n: usize, why: &str) {
        self.stats.fenced += 1;
        let back = self.now + self.rng.range(200, 1_500);
        self.crash(n, &format!("fenced: {why}"), false, back);
    }

    pub(crate) fn master_step(&mut self, n: usize, mono: Millis, wall: Millis) -> Res {
        let core = self.nodes[n].core.as_mut().expect("up");
        if let Err(e) = core.handle_timeout(wall) {
            return fail(format!("node {}: timers failed: {e}", n + 1));
        }
        let log_end = core.log_end();
        let reachable_calls = !self.nodes[n].busy;
        let Role::Master(ms) = &mut self.nodes[n].role else {
            return Ok(());
        };
        // The lease keeper and the look at the master key.
        let keepalive = (!ms.keeper_busy && mono >= ms.next_keepalive).then(|| {
            ms.keeper_busy = true;
            ms.next_keepalive = mono + TTL_MS / 4;
            ms.lease
        });
        let check = reachable_calls && mono >= ms.next_check;
        let actions = ms.m.tick(mono, ms.deadline, log_end, &mut ms.table);
        let deadline = ms.deadline;
        let epoch = ms.m.epoch;
        if let Some(lease) = keepalive {
            self.call(n, Purpose::KeepAlive { sent: mono }, Call::KeepAlive(lease));
        }
        if check {
            self.nodes[n].busy = true;
            self.call(n, Purpose::Check, Call::Read);
        }
        for a in actions {
            match a {
                Action::Fence(why) => {
                    self.fence(n, why.reason());
                    return Ok(());
                }
                Action::WriteSyncStateSet(next) => {
                    let me = self.nodes[n].id;
                    self.log(|| format!("node {me}: asks SyncStateSet {next:?}"));
                    let when = vec![Cmp::ValueIs(Key::Epoch, Val::Epoch(epoch))];
                    let then = vec![Op::Put(
                        Key::SyncStateSet,
                        Val::Set {
                            epoch,
                            members: next,
                        },
                        0,
                    )];
                    self.call(n, Purpose::WriteSet, Call::Txn(when, then));
                }
                Action::Release(upto) => {
                    // Checked again right before replies go out.
                    if machine::holds_lease(mono, deadline) {
                        let core = self.nodes[n].core.as_mut().expect("up");
                        core.replicated_to(upto);
                        if let Role::Master(ms) = &mut self.nodes[n].role {
                            ms.m.released(upto);
                        }
                    }
                }
            }
        }
        // Replication: chunks to each welcomed connection, within its window.
        let conns: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.master == n && c.welcomed)
            .map(|(&k, _)| k)
            .collect();
        for conn in conns {
            while let Some(c) = self.conns.get(&conn) {
                let acked = match &self.nodes[n].role {
                    Role::Master(ms) => ms
                        .table
                        .get(&(c.replica as u32 + 1))
                        .filter(|s| s.conn == conn)
                        .map_or(c.pos, |s| s.acked),
                    _ => break,
                };
                if c.pos.saturating_sub(acked) > WINDOW_BYTES {
                    break;
                }
                let (pos, e) = (c.pos, c.epoch);
                let core = self.nodes[n].core.as_mut().expect("up");
                let chunk = match core.replication_chunk(pos, CHUNK_BYTES) {
                    Ok(c) => c,
                    Err(e) => return fail(format!("node {}: reading the log: {e}", n + 1)),
                };
                let Some(bytes) = chunk else { break };
                let next = machine::next_offset(pos, &bytes);
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.pos = next;
                }
                self.send_conn(
                    conn,
                    false,
                    Msg::Chunk {
                        conn,
                        epoch: e,
                        offset: pos,
                        bytes,
                    },
                );
            }
        }
        Ok(())
    }

    /// Node `n` became master of `epoch`: nothing acknowledged may be missing from its log
    /// (sync), or only what was acknowledged within the bound before the old master stopped
    /// (async).
    pub(crate) fn check_new_master(&mut self, n: usize, epoch: u64) -> Res {
        let mut missing = Vec::new();
        let core = self.nodes[n].core.as_mut().expect("up");
        for r in self.ledger.released.values() {
            if self.ledger.lost.contains(&r.key) {
                continue;
            }
            let held = match core.replication_chunk(r.offset, 1) {
                Ok(Some(b)) => first_record(&b) == r.bytes,
                _ => false,
            };
            if !held {
                missing.push(r.clone());
            }
        }
        for r in missing {
            if self.opts.sync {
                return fail(format!(
                    "sync loss: {} (offset {}, acknowledged in epoch {} at {}) is not in the log of node {}, master of epoch {epoch}",
                    r.key, r.offset, r.epoch, r.at, n + 1
                ));
            }
            let stopped = self
                .ledger
                .last_ack_in
                .get(&r.epoch)
                .copied()
                .unwrap_or(r.at);
            if r.at + ASYNC_LOSS_BOUND_MS < stopped {
                return fail(format!(
                    "async loss beyond the bound: {} acknowledged at {} in epoch {}, whose master acknowledged until {} ({} ms later, bound {ASYNC_LOSS_BOUND_MS} ms), is not in the log of node {}, master of epoch {epoch}",
                    r.key, r.at, r.epoch, stopped, stopped - r.at, n + 1
                ));
            }
            self.stats.lost_async += 1;
            self.ledger.lost.insert(r.key.clone());
            let key = r.key.clone();
            self.log(|| format!("async: {key} lost within the bound"));
        }
        Ok(())
    }
}
