//! The handle on the core thread, the one door into it: typed requests (each reply matched
//! once, in [`answer`]), read-only [`CoreHandle::inspect`], [`CoreHandle::read_log`],
//! [`CoreHandle::change`] (durable before it answers) and [`CoreHandle::with_mut`], and the
//! notices a connection gives about its producers. A request goes: a typed method builds the
//! [`Request`] → a [`Command::Request`] on the channel → the core thread (`driver.rs`)
//! handles it and, after the fsync that covers it, sends the [`Reply`] back → the method
//! types it ([`answer`]).

use super::*;

/// The gRPC side's handle on the core thread. Cheap to clone.
#[derive(Clone, Debug)]
pub struct CoreHandle {
    pub(super) tx: mpsc::Sender<Command>,
    /// Set once when the core thread fails for good.
    pub(super) fatal: watch::Receiver<Option<Fatal>>,
    /// The log's end, published after every round (replication streams from it).
    pub(super) log_end: watch::Receiver<u64>,
    /// The core thread stops (flushing) once every handle is gone.
    pub(super) _alive: Arc<()>,
    /// Commands sent and not yet run (`rocklet_core_commands_waiting`).
    pub(super) waiting: Arc<AtomicU64>,
    /// Whether sends are taken: mqadmin wipeWritePerm clears it and addWritePerm sets it
    /// (held in memory, as Apache's name server holds a wiped route: a restart writes again).
    pub(super) writable: Arc<AtomicBool>,
}

impl CoreHandle {
    /// Why the core thread stopped serving, if it did (see [`Fatal`]).
    #[must_use]
    pub fn fatal(&self) -> Option<Fatal> {
        self.fatal.borrow().clone()
    }

    /// Waits until the core thread fails for good (see [`Fatal`]); never returns when it
    /// stops normally.
    pub async fn wait_fatal(&self) -> Fatal {
        let mut rx = self.fatal.clone();
        loop {
            if let Some(f) = rx.borrow_and_update().clone() {
                return f;
            }
            if rx.changed().await.is_err() {
                // The core thread ended without failing.
                if let Some(f) = rx.borrow().clone() {
                    return f;
                }
                return std::future::pending().await;
            }
        }
    }

    /// Whether sends are taken now (mqadmin wipeWritePerm / addWritePerm).
    #[must_use]
    pub fn writable(&self) -> bool {
        self.writable.load(Ordering::Relaxed)
    }

    /// Takes sends (`true`) or refuses them (`false`) from now on, on every protocol; the
    /// routes show the broker's queues read-only while they are refused. Returns whether
    /// sends were taken before.
    pub fn set_writable(&self, on: bool) -> bool {
        self.writable.swap(on, Ordering::Relaxed)
    }

    /// The log's end, updated after every round of the core thread: a replication stream
    /// waits on it for new bytes.
    #[must_use]
    pub fn log_end_watch(&self) -> watch::Receiver<u64> {
        self.log_end.clone()
    }

    fn post(&self, cmd: Command) -> Result<(), CoreFailure> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.tx.send(cmd).map_err(|_| {
            ran(&self.waiting);
            CoreFailure::Stopped
        })
    }

    /// Runs a request to its untyped reply (under sync flush, after the fsync that covers
    /// it). The protocols use the typed methods below ([`CoreHandle::send`], …), which match
    /// the reply once; this is for tests and tools that look at the reply itself.
    pub async fn request(&self, request: Request) -> Result<Reply, CoreFailure> {
        self.submit(request)?.await
    }

    /// Hands a request to the core thread now and returns its reply to await: several
    /// submitted before the first is awaited are handled in one group (one fsync, one
    /// wake-up of the core thread), without a task each.
    fn submit(
        &self,
        request: Request,
    ) -> Result<impl std::future::Future<Output = Result<Reply, CoreFailure>>, CoreFailure> {
        let (reply, rx) = oneshot::channel();
        self.post(Command::Request {
            request: Box::new(request),
            reply,
            watch: None,
        })?;
        Ok(async move {
            rx.await
                .map_err(|_| CoreFailure::Stopped)?
                .map_err(CoreFailure::Storage)
        })
    }

    /// Runs a receive (or a pull); when it finds nothing, the returned receiver fires once
    /// the topic has a newly visible message.
    async fn watched(
        &self,
        request: Request,
    ) -> Result<(Reply, oneshot::Receiver<()>), CoreFailure> {
        let (reply, rx) = oneshot::channel();
        let (watch, woken) = oneshot::channel();
        self.post(Command::Request {
            request: Box::new(request),
            reply,
            watch: Some(watch),
        })?;
        let reply = rx
            .await
            .map_err(|_| CoreFailure::Stopped)?
            .map_err(CoreFailure::Storage)?;
        Ok((reply, woken))
    }

    /// Stores messages (one, or a batch to one topic): one result per message.
    pub async fn send(&self, messages: Vec<NewMessage>) -> Answer<Vec<SendResult>> {
        answer::sent(self.request(Request::Send { messages }).await?)
    }

    /// Stores the half message of a transaction that producers of `group` are checked
    /// about: its result, and the transaction.
    pub async fn prepare(
        &self,
        group: String,
        message: NewMessage,
        check_immunity_ms: Option<Millis>,
    ) -> Answer<(SendResult, TxnId)> {
        let request = Request::Prepare {
            group,
            message,
            check_immunity_ms,
        };
        answer::prepared(self.request(request).await?)
    }

    /// Ends a transaction (END_TRANSACTION; `from_check`: it answers a check). `group`,
    /// when the protocol carries it, must be the transaction's.
    pub async fn end_transaction(
        &self,
        txn: TxnId,
        resolution: Resolution,
        group: Option<String>,
        from_check: bool,
    ) -> Answer<Ended> {
        let request = Request::EndTransaction {
            txn,
            resolution,
            group,
            from_check,
        };
        answer::ended(self.request(request).await?)
    }

    /// Receives up to `max` messages for `group`, invisible to it for `invisible_ms` (pop).
    /// When it finds none, the returned receiver fires once the topic has a newly visible
    /// message (long polling).
    pub async fn receive(
        &self,
        group: String,
        topic: String,
        queue_id: Option<u32>,
        max: u32,
        invisible_ms: Millis,
        filter: TagFilter,
    ) -> Result<(Result<Vec<Received>, ClientError>, oneshot::Receiver<()>), CoreFailure> {
        let request = Request::Receive {
            group,
            topic,
            queue_id,
            max,
            invisible_ms,
            filter,
        };
        let (reply, woken) = self.watched(request).await?;
        Ok((answer::received(reply)?, woken))
    }

    /// Reads a queue from `offset` without committing it (RocketMQ 4 pull consumers commit
    /// apart, [`CoreHandle::commit_offset`]). When it finds nothing, the returned receiver
    /// fires once the topic has a newly visible message (long polling).
    pub async fn pull(
        &self,
        group: String,
        topic: String,
        queue_id: u32,
        offset: u64,
        max: u32,
        filter: TagFilter,
    ) -> Result<(Result<Pulled, ClientError>, oneshot::Receiver<()>), CoreFailure> {
        let request = Request::Pull {
            group,
            topic,
            queue_id,
            offset: Some(offset),
            max,
            filter,
            auto_commit: false,
        };
        let (reply, woken) = self.watched(request).await?;
        Ok((answer::pulled(reply)?, woken))
    }

    /// Commits `group`'s offset in a queue.
    pub async fn commit_offset(
        &self,
        group: String,
        topic: String,
        queue_id: u32,
        offset: u64,
    ) -> Answer<()> {
        let request = Request::CommitOffset {
            group,
            topic,
            queue_id,
            offset,
        };
        answer::committed(self.request(request).await?)
    }

    /// Acknowledges a received message. The ack is handed to the core thread now and its
    /// answer awaited later: several acks handed over before the first is awaited are
    /// handled in one group (one fsync), without a task each.
    pub fn ack(
        &self,
        group: String,
        handle: ReceiptHandle,
    ) -> impl std::future::Future<Output = Answer<()>> {
        let reply = self.submit(Request::Ack { group, handle });
        async move { answer::acked(reply?.await?) }
    }

    /// Changes how long a received message stays invisible: the handle to use from now on,
    /// and when it becomes visible.
    pub async fn change_invisible(
        &self,
        group: String,
        handle: ReceiptHandle,
        invisible_ms: Millis,
    ) -> Answer<(ReceiptHandle, Millis)> {
        let request = Request::ChangeInvisible {
            group,
            handle,
            invisible_ms,
        };
        answer::invisible_changed(self.request(request).await?)
    }

    /// Gives a received message up to `%DLQ%<group>` at once.
    pub async fn forward_to_dead_letter(&self, group: String, handle: ReceiptHandle) -> Answer<()> {
        let request = Request::ForwardToDeadLetter { group, handle };
        answer::forwarded(self.request(request).await?)
    }

    /// A pull consumer's failed message back to `%RETRY%<group>` (or `%DLQ%<group>` after the
    /// maximum of attempts).
    pub async fn send_back(
        &self,
        group: String,
        offset: u64,
        delay_level: Option<u32>,
    ) -> Answer<()> {
        let request = Request::SendBack {
            group,
            offset,
            delay_level,
        };
        answer::sent_back(self.request(request).await?)
    }

    /// Runs a closure that reads the broker on the core thread and returns its result
    /// (admin, routes, metrics, the console). A change goes through [`CoreHandle::change`]
    /// (durable before it answers) or [`CoreHandle::with_mut`].
    pub async fn inspect<T: Send + 'static>(
        &self,
        f: impl FnOnce(&CoreBroker) -> T + Send + 'static,
    ) -> Result<T, CoreFailure> {
        self.run(Command::Inspect, move |b| f(b)).await
    }

    /// Runs a closure that reads the log on the core thread (records, a replication
    /// chunk, a transaction's group): it changes nothing, but the storage's reads move its
    /// file cursors, so they take the broker by `&mut`.
    pub async fn read_log<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut CoreBroker) -> T + Send + 'static,
    ) -> Result<T, CoreFailure> {
        self.run(Command::Inspect, f).await
    }

    /// Runs a closure that changes the broker in memory on the core thread (a replica
    /// applying its primary's state, a test's switch); what it writes is made durable as
    /// the flush mode says, not before the answer. A change to the tables an answer must not
    /// outrun goes through [`CoreHandle::change`].
    pub async fn with_mut<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut CoreBroker) -> T + Send + 'static,
    ) -> Result<T, CoreFailure> {
        self.run(Command::Inspect, f).await
    }

    /// Records a checkpoint of the core's state: the snapshot on the core thread, its sync
    /// and the write of `CHECKPOINT` on the sync thread (see `driver.rs`, Durability).
    /// Answers once it is written: the offset it covers, `None` when there was nothing to
    /// cover or a checkpoint recorded meanwhile superseded it; `Err` when it could not be
    /// taken or written (a failed sync fails the broker, as any).
    pub async fn checkpoint(&self) -> Result<Result<Option<u64>, String>, CoreFailure> {
        let (tx, rx) = oneshot::channel();
        self.post(Command::Checkpoint(tx))?;
        rx.await.map_err(|_| CoreFailure::Stopped)
    }

    /// Runs `f` on the core thread as the command `wrap` makes of it, and returns its result.
    async fn run<T: Send + 'static>(
        &self,
        wrap: fn(InspectFn) -> Command,
        f: impl FnOnce(&mut CoreBroker) -> T + Send + 'static,
    ) -> Result<T, CoreFailure> {
        let (tx, rx) = oneshot::channel();
        self.post(wrap(Box::new(move |b| {
            let _ = tx.send(f(b));
        })))?;
        rx.await.map_err(|_| CoreFailure::Stopped)
    }

    /// Runs a closure that replaces the broker (as [`CoreHandle::inspect`]), and tells the
    /// new broker which producer groups are online, as the old one knew: producers that
    /// announced themselves before are still connected, and would otherwise look offline to
    /// it (their checks parked) until their connection closes.
    pub async fn reopen<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut CoreBroker) -> T + Send + 'static,
    ) -> Result<T, CoreFailure> {
        self.run(Command::Reopen, f).await
    }

    /// Declares a consumer group ([`Broker::declare_group`]) and makes the declaration
    /// durable before answering, whatever the flush mode: for `rocklet admin group` and, later,
    /// mqadmin's updateSubGroup. `Ok(Err(_))`: the core refused the name.
    pub async fn declare_group(
        &self,
        name: String,
        fifo: bool,
    ) -> Result<Result<(), ClientError>, CoreFailure> {
        self.change(move |b| b.declare_group(&name, fifo)).await
    }

    /// Runs a change to the broker's tables (a topic or group declared or deleted) on the
    /// core thread and makes what it wrote durable before answering, whatever the flush
    /// mode: the answer never names a change a crash could undo. `Ok(Err(_))`: the core
    /// refused it; a failed sync fails the broker (crash-only) and answers `Storage`.
    pub async fn change<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut CoreBroker) -> Result<Result<T, ClientError>, CoreError> + Send + 'static,
    ) -> Result<Result<T, ClientError>, CoreFailure> {
        self.with_mut(move |b| match f(b) {
            Ok(Ok(v)) => b
                .sync()
                .map(|()| Ok(v))
                .map_err(|e| CoreFailure::Storage(e.to_string())),
            Ok(Err(e)) => Ok(Err(e)),
            Err(e) => Err(CoreFailure::Storage(e.to_string())),
        })
        .await?
    }

    /// Declares a producer connection's topics.
    pub fn producer_up(
        &self,
        conn: u64,
        client: String,
        topics: Vec<String>,
        checks: tmpsc::UnboundedSender<CheckRequest>,
    ) {
        let _ = self.post(Command::ProducerUp {
            conn,
            client,
            topics,
            checks,
        });
    }

    /// Declares the producer groups a remoting connection serves (replacing earlier ones).
    pub fn group_producer_up(
        &self,
        conn: u64,
        groups: Vec<String>,
        checks: tmpsc::UnboundedSender<CheckRequest>,
    ) {
        let _ = self.post(Command::GroupProducerUp {
            conn,
            groups,
            checks,
        });
    }

    /// A client is about to send a transactional message to `topic`.
    pub fn producer_sends(&self, client: String, topic: String) {
        let _ = self.post(Command::ProducerSends { client, topic });
    }

    /// A producer connection closed.
    pub fn producer_down(&self, conn: u64) {
        let _ = self.post(Command::ProducerDown { conn });
    }

    /// Wakes the core thread to look at the clock (tests with a manual clock).
    pub fn tick(&self) {
        let _ = self.post(Command::Tick);
    }

    /// Flushes and stops the core thread.
    pub async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.post(Command::Shutdown(tx)).is_ok() {
            let _ = rx.await;
        }
    }
}

/// A request's answer from the core: `Ok(Err(_))` is the client's mistake (nothing changed),
/// `Err(_)` the core could not answer (or answered something impossible).
pub type Answer<T> = Result<Result<T, ClientError>, CoreFailure>;

/// An END_TRANSACTION applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ended {
    pub txn: TxnId,
    pub resolution: Resolution,
    /// It was already resolved this way; nothing changed.
    pub duplicate: bool,
}

/// A pull's messages, and the offset to pull from next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pulled {
    pub messages: Vec<Message>,
    pub next_offset: u64,
    pub max_offset: u64,
}

/// The core's [`Reply`] to each kind of [`Request`], matched once: the typed methods of
/// [`CoreHandle`] use these, and so do the hosts that run a [`Broker`] themselves (the
/// importer, the embedded bench). A reply of another request is a broker bug; it is named
/// here, in one place, as [`CoreFailure::Unexpected`].
pub mod answer {
    use rocklet_core::{Reply, SendResult, TxnId};

    use super::{Answer, CoreFailure, Ended, Pulled};

    /// `Reply::Error` as the client's mistake, `pick`'s reply as the answer, any other reply
    /// as [`CoreFailure::Unexpected`].
    fn typed<T>(
        request: &str,
        reply: Reply,
        pick: impl FnOnce(Reply) -> Result<T, Reply>,
    ) -> Answer<T> {
        match reply {
            Reply::Error(e) => Ok(Err(e)),
            reply => pick(reply)
                .map(Ok)
                .map_err(|r| CoreFailure::Unexpected(format!("{r:?} to {request}"))),
        }
    }

    /// A Send's: one result per message (never none).
    pub fn sent(reply: Reply) -> Answer<Vec<SendResult>> {
        typed("Send", reply, |r| match r {
            Reply::Sent(results) if !results.is_empty() => Ok(results),
            r => Err(r),
        })
    }

    /// A Prepare's: the half message's result, and its transaction.
    pub fn prepared(reply: Reply) -> Answer<(SendResult, TxnId)> {
        typed("Prepare", reply, |r| match r {
            Reply::Sent(mut results) if results.len() == 1 => match results[0].txn {
                Some(txn) => Ok((results.remove(0), txn)),
                None => Err(Reply::Sent(results)),
            },
            r => Err(r),
        })
    }

    /// An EndTransaction's.
    pub fn ended(reply: Reply) -> Answer<Ended> {
        typed("EndTransaction", reply, |r| match r {
            Reply::Ended {
                txn,
                resolution,
                duplicate,
            } => Ok(Ended {
                txn,
                resolution,
                duplicate,
            }),
            r => Err(r),
        })
    }

    /// A Receive's (maybe none).
    pub fn received(reply: Reply) -> Answer<Vec<rocklet_core::Received>> {
        typed("Receive", reply, |r| match r {
            Reply::Received(msgs) => Ok(msgs),
            r => Err(r),
        })
    }

    /// A Pull's.
    pub fn pulled(reply: Reply) -> Answer<Pulled> {
        typed("Pull", reply, |r| match r {
            Reply::Pulled {
                messages,
                next_offset,
                max_offset,
            } => Ok(Pulled {
                messages,
                next_offset,
                max_offset,
            }),
            r => Err(r),
        })
    }

    /// A CommitOffset's.
    pub fn committed(reply: Reply) -> Answer<()> {
        typed("CommitOffset", reply, |r| match r {
            Reply::OffsetCommitted => Ok(()),
            r => Err(r),
        })
    }

    /// An Ack's.
    pub fn acked(reply: Reply) -> Answer<()> {
        typed("Ack", reply, |r| match r {
            Reply::Acked => Ok(()),
            r => Err(r),
        })
    }

    /// A ChangeInvisible's: the new handle, and when it becomes visible.
    pub fn invisible_changed(
        reply: Reply,
    ) -> Answer<(rocklet_core::ReceiptHandle, rocklet_core::Millis)> {
        typed("ChangeInvisible", reply, |r| match r {
            Reply::InvisibleChanged { handle, visible_at } => Ok((handle, visible_at)),
            r => Err(r),
        })
    }

    /// A ForwardToDeadLetter's.
    pub fn forwarded(reply: Reply) -> Answer<()> {
        typed("ForwardToDeadLetter", reply, |r| match r {
            Reply::Forwarded => Ok(()),
            r => Err(r),
        })
    }

    /// A SendBack's: stored in the retry topic, or forwarded to the dead-letter queue.
    pub fn sent_back(reply: Reply) -> Answer<()> {
        typed("SendBack", reply, |r| match r {
            Reply::Sent(_) | Reply::Forwarded => Ok(()),
            r => Err(r),
        })
    }
}

#[cfg(test)]
mod tests {
    use rocklet_core::{Reply, Resolution, SendResult, TxnId};

    use super::answer;
    use super::{CoreFailure, Ended};

    fn result(txn: Option<TxnId>) -> SendResult {
        SendResult {
            msg_id: "id".into(),
            topic: "T".into(),
            queue_id: 0,
            queue_offset: 0,
            offset: 0,
            txn,
        }
    }

    /// Each reply is matched once: its own answer, the client's mistake, or an impossible
    /// reply named with the request it answered.
    #[test]
    fn replies_are_typed_once() {
        assert_eq!(
            answer::sent(Reply::Sent(vec![result(None)])),
            Ok(Ok(vec![result(None)]))
        );
        assert_eq!(
            answer::acked(Reply::Error(rocklet_core::ClientError::EmptyBody)),
            Ok(Err(rocklet_core::ClientError::EmptyBody))
        );
        let ended = Reply::Ended {
            txn: TxnId(9),
            resolution: Resolution::Commit,
            duplicate: true,
        };
        assert_eq!(
            answer::ended(ended),
            Ok(Ok(Ended {
                txn: TxnId(9),
                resolution: Resolution::Commit,
                duplicate: true
            }))
        );
        assert_eq!(
            answer::ended(Reply::Acked),
            Err(CoreFailure::Unexpected("Acked to EndTransaction".into()))
        );
        assert_eq!(
            answer::sent_back(Reply::Forwarded),
            Ok(Ok(())),
            "a message past its attempts goes to the dead-letter queue"
        );
        // No entry for a send, or a half message without its transaction, is no answer.
        assert!(matches!(
            answer::sent(Reply::Sent(Vec::new())),
            Err(CoreFailure::Unexpected(_))
        ));
        assert!(matches!(
            answer::prepared(Reply::Sent(vec![result(None)])),
            Err(CoreFailure::Unexpected(_))
        ));
        assert_eq!(
            answer::prepared(Reply::Sent(vec![result(Some(TxnId(4)))])),
            Ok(Ok((result(Some(TxnId(4))), TxnId(4))))
        );
        assert_eq!(
            CoreFailure::Unexpected("Acked to Send".into()).to_string(),
            "unexpected reply from the core: Acked to Send"
        );
    }
}
