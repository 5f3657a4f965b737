//! The core thread's loop ([`Driver::run`]): commands taken from the channel in two lanes
//! (requests and control first, one group within [`GROUP_BUDGET`], then inspections within
//! [`READ_BUDGET`]), timers, the group fsync handed to the sync thread, and the outputs
//! routed to their callers, producers and long polls.

use super::*;

/// Commands handled in one group at most before it is made durable and its replies go out.
pub const MAX_GROUP: usize = 4096;
/// Time one group of commands may take before it is made durable and its replies go out.
pub const GROUP_BUDGET: Duration = Duration::from_millis(2);
/// Time inspections may take in one round (they yield to any other command after each one).
pub const READ_BUDGET: Duration = Duration::from_millis(5);
/// The loop looks at the clock at least this often.
const MAX_WAIT_MS: Millis = 1_000;
/// The long-poll wake-up map is first swept of ended polls at this many topics.
const WAITERS_SWEEP_MIN: usize = 1024;

/// Commands taken from the channel, by lane.
#[derive(Default)]
struct Queues {
    /// Requests and control commands, in arrival order: served first.
    writes: VecDeque<Command>,
    /// Inspections, in arrival order: served while no write waits.
    reads: VecDeque<InspectFn>,
    /// Every sender is gone.
    disconnected: bool,
}

impl Queues {
    fn push(&mut self, cmd: Command) {
        match cmd {
            Command::Inspect(f) => self.reads.push_back(f),
            cmd => self.writes.push_back(cmd),
        }
    }

    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.reads.is_empty()
    }

    /// Takes what is waiting in the channel (at most [`MAX_GROUP`] commands).
    fn take(&mut self, rx: &mpsc::Receiver<Command>) {
        for _ in 0..MAX_GROUP {
            match rx.try_recv() {
                Ok(cmd) => self.push(cmd),
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.disconnected = true;
                    return;
                }
            }
        }
    }
}

impl Driver {
    pub(super) fn run(mut self, rx: mpsc::Receiver<Command>) {
        let sync_mode = self.broker.config().flush == FlushMode::Sync;
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        let mut q = Queues::default();
        loop {
            if q.is_empty() && !q.disconnected {
                let now = self.clock.now();
                let mut wake = now + MAX_WAIT_MS;
                // Timers and, under async flush, the next scheduled fsync (none once the
                // broker failed: they would be due for ever).
                if let Some(t) = self
                    .broker
                    .poll_timeout()
                    .filter(|_| self.broker.failed().is_none())
                {
                    wake = wake.min(t);
                }
                if wake > now {
                    match rx.recv_timeout(Duration::from_millis(wake - now)) {
                        Ok(cmd) => q.push(cmd),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => q.disconnected = true,
                    }
                }
            }
            q.take(&rx);
            // Requests and control commands first, one group within its budget.
            let mut stop = false;
            let started = Instant::now();
            let mut taken = 0;
            while let Some(cmd) = q.writes.pop_front() {
                taken += 1;
                // Every command but a sync thread's report came through a handle.
                if !matches!(cmd, Command::Synced { .. }) {
                    ran(&self.metrics.core_commands_waiting);
                }
                if let Some(s) = self.command(cmd) {
                    shutdown = Some(s);
                    stop = true;
                    break;
                }
                if taken >= MAX_GROUP || started.elapsed() >= GROUP_BUDGET {
                    break;
                }
            }
            // The sync thread holds a sender too: every handle gone means stop.
            if q.disconnected || self.handles.strong_count() == 0 {
                stop = true;
            }
            let now = self.clock.now();
            // Due timers; under async flush this is also where the core's interval fsync
            // happens (its deadline is part of poll_timeout()).
            let syncs = self.broker.stats().syncs;
            let t = Instant::now();
            if let Err(e) = self.broker.handle_timeout(now) {
                self.storage_error(
                    "timers",
                    &e,
                    self.broker.log_synced()..self.broker.log_end(),
                );
            }
            if self.broker.stats().syncs > syncs {
                self.metrics.fsync_latency.observe(t.elapsed());
            }
            // Group commit: one fsync for every request handled above, off this thread
            // (at the stop, here: it covers everything, including a sync in flight).
            if stop {
                self.sync();
            } else {
                // A checkpoint's sync serves as the group's too.
                self.start_checkpoint();
                if sync_mode {
                    self.start_sync();
                }
            }
            self.drain();
            self.check_failed();
            if stop {
                break;
            }
            // Then inspections: one in any case (so a flood of writes does not starve them),
            // more while no other command waits.
            let started = Instant::now();
            let mut first = true;
            while first || q.writes.is_empty() {
                first = false;
                let Some(f) = q.reads.pop_front() else { break };
                ran(&self.metrics.core_commands_waiting);
                f(&mut self.broker);
                if started.elapsed() >= READ_BUDGET {
                    break;
                }
                q.take(&rx);
            }
            // An inspection may have written (admin resolve runs a request).
            self.drain();
            self.check_failed();
            let end = self.broker.log_end();
            self.log_end.send_if_modified(|v| {
                let changed = *v != end;
                *v = end;
                changed
            });
        }
        // Anything still waiting can no longer be answered: dropping the oneshots says so.
        self.pending.clear();
        // A clean stop is recorded as one (LOG_END): the next start trusts the page cache.
        // A checkpoint first: the next start reads it and nothing of the log.
        if self.broker.failed().is_none() {
            if let Err(e) = self.broker.checkpoint() {
                warn!(error = %e, "recording a checkpoint at the stop failed");
            }
        }
        if self.broker.failed().is_none() {
            if let Err(e) = self.broker.close() {
                let end = self.broker.log_end();
                self.storage_error("closing the log", &e, end..end);
            }
        }
        match self.broker.failed() {
            None => info!(
                log_end = self.broker.log_end(),
                log_synced = self.broker.log_synced(),
                "core stopped; log flushed"
            ),
            Some(why) => warn!(
                log_end = self.broker.log_end(),
                log_synced = self.broker.log_synced(),
                reason = why,
                "core stopped after a storage failure; what is durable is what recovery finds on the next start"
            ),
        }
        if let Some(s) = shutdown {
            let _ = s.send(());
        }
    }

    /// Detaches a sync of everything appended to the sync thread, unless one is in flight.
    fn start_sync(&mut self) {
        if self.sync_in_flight || self.broker.failed().is_some() {
            return;
        }
        let Some(upto) = self.broker.sync_target() else {
            return;
        };
        match self.broker.storage_mut().detach_sync() {
            Ok(Some(job)) => match self.sync_tx.send((upto, job)) {
                Ok(()) => self.sync_in_flight = true,
                Err(_) => self.sync(),
            },
            // Memory storage (nothing to fsync), or nothing the files still owe.
            Ok(None) => self.sync(),
            Err(e) => {
                // Nothing was synced yet: syncing here reports a failure properly.
                warn!(error = %e, "cannot start a detached fsync; syncing on the core thread");
                self.sync();
            }
        }
    }

    /// Takes the checkpoint asked for, unless a sync is in flight (then after it): the
    /// snapshot here, its sync and write detached to the sync thread.
    fn start_checkpoint(&mut self) {
        if self.sync_in_flight || self.checkpoint_wanted.is_none() {
            return;
        }
        let reply = self.checkpoint_wanted.take().expect("checked");
        if self.broker.failed().is_some() {
            let _ = reply.send(Err("the broker failed: no checkpoint".into()));
            return;
        }
        let t = Instant::now();
        let draft = match self.broker.begin_checkpoint() {
            Ok(Some(d)) => d,
            Ok(None) => {
                let _ = reply.send(Ok(None));
                return;
            }
            Err(e) => {
                let _ = reply.send(Err(e.to_string()));
                return;
            }
        };
        let covers = draft.covers();
        match self.broker.storage_mut().detach_checkpoint(draft) {
            Ok(Some(job)) => match self.sync_tx.send((covers, job)) {
                Ok(()) => {
                    self.sync_in_flight = true;
                    self.checkpoint_in_flight = Some((covers, reply));
                }
                Err(_) => {
                    let _ = reply.send(Err("the sync thread stopped".into()));
                }
            },
            // Memory: recorded at once, nothing to sync.
            Ok(None) => {
                let _ = reply.send(Ok(Some(covers)));
            }
            Err(e) => {
                let _ = reply.send(Err(format!("cannot start a checkpoint's sync: {e}")));
            }
        }
        let pause = t.elapsed();
        self.metrics.checkpoint_pause.observe(pause);
        debug!(
            covers,
            pause_us = pause.as_micros() as u64,
            "checkpoint taken; its sync detached"
        );
    }

    /// A detached sync finished.
    fn synced(
        &mut self,
        upto: u64,
        job: &DetachedSync,
        result: std::io::Result<CheckpointWrite>,
        took: Duration,
    ) {
        self.sync_in_flight = false;
        let waiter = if job.has_checkpoint() {
            self.checkpoint_in_flight.take()
        } else {
            None
        };
        match result {
            Ok(written) => {
                self.broker.storage_mut().detached_done(job, true);
                self.broker.synced_to(upto);
                self.metrics.fsync_latency.observe(took);
                if let Some((covers, reply)) = waiter {
                    let answer = match written {
                        CheckpointWrite::Written => Ok(Some(covers)),
                        CheckpointWrite::None | CheckpointWrite::Superseded => Ok(None),
                        CheckpointWrite::Failed(e) => Err(format!(
                            "writing the checkpoint at log offset {covers} failed: {e} (the previous one stays)"
                        )),
                    };
                    let _ = reply.send(answer);
                }
            }
            Err(e) => {
                if let Some((covers, reply)) = waiter {
                    let _ = reply.send(Err(format!(
                        "the sync before the checkpoint at log offset {covers} failed: {e} (not written)"
                    )));
                }
                self.broker.storage_mut().detached_done(job, false);
                let range = self.broker.log_synced()..upto;
                let reason = format!(
                    "fsync of log offsets {}..{} failed: {e}",
                    range.start, range.end
                );
                // Never retried: the core fails every reply that waited on it.
                self.broker.sync_failed(&reason);
                self.fatal_storage("fsync", range, &e, reason);
            }
        }
    }

    fn sync(&mut self) {
        let needed = self.broker.needs_sync();
        let range = self.broker.log_synced()..self.broker.log_end();
        let t = Instant::now();
        match self.broker.sync() {
            Ok(()) => {
                if needed {
                    self.metrics.fsync_latency.observe(t.elapsed());
                }
            }
            Err(e) => self.storage_error("fsync", &e, range),
        }
    }

    /// A core call failed: fatal when the core is failed now or the device refused a write
    /// ([`device_failed`]), else (a full disk under a timer's append, say) logged and served
    /// on.
    fn storage_error(
        &mut self,
        what: &str,
        e: &Error<std::io::Error>,
        range: std::ops::Range<u64>,
    ) {
        match e {
            // Failed before: reported then.
            Error::Failed { .. } => {}
            Error::Storage(io) if self.broker.failed().is_some() || device_failed(io) => {
                if self.broker.failed().is_none() {
                    self.broker.sync_failed(&format!("{what} failed: {io}"));
                }
                let reason = self.broker.failed().unwrap_or_default().to_string();
                self.fatal_storage(what, range, io, reason);
            }
            e => error!(error = %e, "{what} failed"),
        }
    }

    /// Raises [`Fatal`] once the core reports itself failed (whatever the path).
    fn check_failed(&mut self) {
        if self.fatal.borrow().is_some() {
            return;
        }
        if let Some(why) = self.broker.failed().map(str::to_string) {
            self.record_failure();
            error!(data_dir = %self.data_dir(), reason = %why, "the broker failed; it acknowledges nothing more and stops (restart it: recovery reads what is on disk)");
            self.fatal.send_replace(Some(Fatal::Storage(why)));
        }
    }

    /// One ERROR naming the segment files, the log offsets that were not made durable and
    /// the errno; then [`Fatal`] for the host.
    fn fatal_storage(
        &mut self,
        what: &str,
        range: std::ops::Range<u64>,
        e: &std::io::Error,
        reason: String,
    ) {
        if self.fatal.borrow().is_some() {
            return;
        }
        self.record_failure();
        let files = self.segments_of(range.clone());
        error!(
            data_dir = %self.data_dir(),
            files = %files,
            offsets = %format!("{}..{}", range.start, range.end),
            errno = e.raw_os_error().unwrap_or(0),
            error = %e,
            "{what} failed: nothing it covered is acknowledged (no retry: a failed fsync may have dropped the data); the broker stops, restart it so recovery reads what is on disk"
        );
        self.fatal.send_replace(Some(Fatal::Storage(reason)));
    }

    /// Tells the next start where what this run made durable ends
    /// ([`rocklet_core::FileStorage::record_failure`]): recovery cuts everything after it, which nothing
    /// acknowledged, however much of it reached the disk out of order.
    fn record_failure(&mut self) {
        let durable = self.broker.log_synced();
        if let AnyStorage::File(f) = self.broker.storage_mut() {
            if let Err(e) = f.record_failure(durable) {
                warn!(data_dir = %f.dir().display(), durable, error = %e, "cannot record where the durable log ends; the next start judges the tail by its bytes alone");
            }
        }
    }

    fn data_dir(&self) -> String {
        match self.broker.storage() {
            AnyStorage::File(f) => f.dir().display().to_string(),
            AnyStorage::Mem(_) => "(memory)".to_string(),
        }
    }

    /// The segment files that hold log offsets in `range`.
    fn segments_of(&mut self, range: std::ops::Range<u64>) -> String {
        let dir = self.data_dir();
        let Ok(bases) = self.broker.storage_mut().segments() else {
            return format!("{dir}/?");
        };
        let mut names = Vec::new();
        for (i, &base) in bases.iter().enumerate() {
            let next = bases.get(i + 1).copied().unwrap_or(u64::MAX);
            if base < range.end.max(range.start + 1) && next > range.start {
                names.push(format!("{dir}/{base:020}"));
            }
        }
        names.join(",")
    }

    /// Handles one command; `Some` when it is the shutdown.
    fn command(&mut self, cmd: Command) -> Option<oneshot::Sender<()>> {
        let now = self.clock.now();
        match cmd {
            Command::Request {
                request,
                reply,
                watch,
            } => {
                self.next_id += 1;
                let id = self.next_id;
                let watch = match (&*request, watch) {
                    (Request::Receive { topic, .. } | Request::Pull { topic, .. }, Some(w)) => {
                        Some((topic.clone(), w))
                    }
                    _ => None,
                };
                if let (Some(t), Request::Send { messages }) = (&self.panic_topic, &*request) {
                    if messages.iter().any(|m| &m.topic == t) {
                        panic!("{DEBUG_PANIC_ENV}: a send to `{t}` (debug builds only)");
                    }
                }
                self.pending.insert(id, Pending { reply, watch });
                if let Err(e) = self.broker.handle(now, id, *request) {
                    match &e {
                        // The broker failed earlier: every request is refused.
                        Error::Failed { .. } => {}
                        // A failed append that left a partial record fails the core; so
                        // does (by the host's choice) one the device refused.
                        Error::Storage(io)
                            if self.broker.failed().is_some() || device_failed(io) =>
                        {
                            if self.broker.failed().is_none() {
                                self.broker.sync_failed(&format!("an append failed: {io}"));
                            }
                            let reason = self.broker.failed().unwrap_or_default().to_string();
                            let at = self.broker.log_end();
                            self.fatal_storage("append", at..at + 1, io, reason);
                        }
                        e => error!(error = %e, "request failed in storage; not applied"),
                    }
                    if let Some(p) = self.pending.remove(&id) {
                        let _ = p.reply.send(Err(e.to_string()));
                    }
                }
            }
            Command::ProducerUp {
                conn,
                client,
                topics,
                checks,
            } => {
                debug!(conn, ?topics, "producer online");
                self.producers.insert(
                    conn,
                    Producer {
                        client,
                        topics,
                        groups: Vec::new(),
                        checks,
                    },
                );
                self.update_online(now);
            }
            Command::GroupProducerUp {
                conn,
                groups,
                checks,
            } => {
                debug!(conn, ?groups, "remoting producer online");
                self.producers.insert(
                    conn,
                    Producer {
                        client: String::new(),
                        topics: Vec::new(),
                        groups,
                        checks,
                    },
                );
                self.update_online(now);
            }
            Command::ProducerSends { client, topic } => {
                let mut changed = false;
                for p in self.producers.values_mut() {
                    if p.client == client && !p.topics.contains(&topic) {
                        p.topics.push(topic.clone());
                        changed = true;
                    }
                }
                if changed {
                    self.update_online(now);
                }
            }
            Command::ProducerDown { conn } => {
                if self.producers.remove(&conn).is_some() {
                    debug!(conn, "producer offline");
                    self.update_online(now);
                }
            }
            Command::Inspect(f) => f(&mut self.broker),
            Command::Reopen(f) => {
                f(&mut self.broker);
                for g in &self.online {
                    self.broker.set_producer_online(now, g, true);
                }
            }
            Command::Tick => {}
            Command::Checkpoint(reply) => {
                // One at a time: a second ask while one waits records nothing of its own.
                if self.checkpoint_wanted.is_some() || self.checkpoint_in_flight.is_some() {
                    let _ = reply.send(Ok(None));
                } else {
                    self.checkpoint_wanted = Some(reply);
                }
            }
            Command::Synced {
                upto,
                job,
                result,
                took,
            } => self.synced(upto, &job, result, took),
            Command::Shutdown(s) => return Some(s),
        }
        None
    }

    /// Tells the core which transaction groups have a live producer.
    fn update_online(&mut self, now: Millis) {
        let groups: HashSet<String> = self
            .producers
            .values()
            .flat_map(|p| {
                p.topics
                    .iter()
                    .map(|t| txn_group(t))
                    .chain(p.groups.iter().cloned())
            })
            .collect();
        for g in groups.difference(&self.online) {
            self.broker.set_producer_online(now, g, true);
        }
        for g in self.online.difference(&groups) {
            self.broker.set_producer_online(now, g, false);
        }
        self.online = groups;
        self.metrics
            .producers_online
            .store(self.producers.len() as u64, Ordering::Relaxed);
    }

    fn drain(&mut self) {
        while let Some(out) = self.broker.poll_output() {
            match out {
                Output::Reply { id, reply } => {
                    let Some(p) = self.pending.remove(&id) else {
                        continue;
                    };
                    let empty = match &reply {
                        Reply::Received(msgs) => msgs.is_empty(),
                        Reply::Pulled { messages, .. } => messages.is_empty(),
                        _ => false,
                    };
                    if let (true, Some((topic, w))) = (empty, p.watch) {
                        self.watch(topic, w);
                    }
                    let _ = p.reply.send(Ok(reply));
                }
                Output::Failed { id, reason } => {
                    if let Some(p) = self.pending.remove(&id) {
                        let _ = p.reply.send(Err(reason));
                    }
                }
                Output::Check(check) => self.route_check(check),
                Output::Available { topic, .. } => self.wake(&topic),
                Output::Trace(t) => {
                    if let Some(s) = self.metrics.stories.get() {
                        s.record(&t);
                    }
                    debug!(kind = t.kind.as_str(), offset = t.offset, topic = %t.topic, detail = %t.detail, "trace")
                }
            }
        }
    }

    /// Registers a long poll's wake-up for `topic`. A poll that ends (answered at its
    /// deadline, or its client gone) drops its receiver; what it left behind is swept here
    /// whenever the map has doubled since the last sweep, so the map is bounded by the polls
    /// waiting (a receive on a topic that never gets a message, or does not exist, leaves
    /// nothing behind once it ends) at an amortized constant cost per poll.
    fn watch(&mut self, topic: String, w: oneshot::Sender<()>) {
        let list = self.waiters.entry(topic).or_default();
        list.retain(|w| !w.is_closed());
        list.push(w);
        if self.waiters.len()
            >= self
                .waiters_swept_at
                .saturating_mul(2)
                .max(WAITERS_SWEEP_MIN)
        {
            self.waiters.retain(|_, list| {
                list.retain(|w| !w.is_closed());
                !list.is_empty()
            });
            self.waiters.shrink_to(self.waiters.len() * 2);
            self.waiters_swept_at = self.waiters.len();
        }
        self.metrics
            .long_poll_topics
            .store(self.waiters.len() as u64, Ordering::Relaxed);
    }

    /// Wakes the long polls waiting on `topic` (each receives again; one that finds nothing
    /// waits anew).
    fn wake(&mut self, topic: &str) {
        if let Some(list) = self.waiters.remove(topic) {
            for w in list {
                let _ = w.send(());
            }
            self.metrics
                .long_poll_topics
                .store(self.waiters.len() as u64, Ordering::Relaxed);
        }
    }

    /// Sends a transaction check to one live producer that can answer it: a gRPC producer
    /// that declared the topic (group `%TXN%<topic>`), or a remoting connection of the group.
    fn route_check(&mut self, check: CheckRequest) {
        let topic = check.message.topic.clone();
        let by_topic = check.group == txn_group(&topic);
        let mut conns: Vec<u64> = self
            .producers
            .iter()
            .filter(|(_, p)| {
                (by_topic && p.topics.contains(&topic)) || p.groups.contains(&check.group)
            })
            .map(|(c, _)| *c)
            .collect();
        conns.sort_unstable();
        let n = conns.len();
        let mut check = Some(check);
        for i in 0..n {
            let conn = conns[(self.round_robin + i) % n];
            let c = check.take().expect("present until sent");
            match self.producers[&conn].checks.send(c) {
                Ok(()) => {
                    self.round_robin = self.round_robin.wrapping_add(1);
                    self.metrics.checks_pushed.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(tmpsc::error::SendError(c)) => {
                    check = Some(c);
                    self.producers.remove(&conn);
                }
            }
        }
        if n > 0 {
            let now = self.clock.now();
            self.update_online(now);
        }
        self.metrics
            .checks_unroutable
            .fetch_add(1, Ordering::Relaxed);
        if let Some(c) = check {
            warn!(txn = %c.txn, topic = %topic, check = c.check, "no producer of the topic is connected; the check is repeated after the check interval");
        }
    }
}
