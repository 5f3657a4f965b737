//! The operations every binding offers, over an [`Endpoint`]: one place for their defaults
//! and their errors.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use rocklet_core::{
    ClientError, Message, Millis, NewMessage, ReceiptHandle, Received, Reply, Request, Resolution,
    SendResult, Storage, TagFilter, TxnId,
};

use crate::clock::Clock;
use crate::engine::{Engine, EngineFail};
use crate::Fail;

/// Where requests go: a [`Engine`], or a host's own wrapper around one (a lock).
pub trait Endpoint {
    /// What the host fails with.
    type Error;
    /// Runs one request to its reply; `Reply::Error` comes back as [`Fail::Client`].
    fn request(&mut self, req: Request) -> Result<Reply, Fail<Self::Error>>;
    /// How many queues a topic has, `None` when it does not exist.
    fn queue_count(&mut self, topic: &str) -> Result<Option<u32>, Fail<Self::Error>>;
    /// The producer group of a pending transaction.
    fn transaction_group(&mut self, txn: TxnId) -> Result<Option<String>, Fail<Self::Error>>;
}

impl<S: Storage, C: Clock> Endpoint for Engine<S, C> {
    type Error = rocklet_core::Error<S::Error>;
    fn request(&mut self, req: Request) -> Result<Reply, EngineFail<S>> {
        self.execute(req)
    }
    fn queue_count(&mut self, topic: &str) -> Result<Option<u32>, EngineFail<S>> {
        Ok(self.core()?.topic_queue_count(topic))
    }
    fn transaction_group(&mut self, txn: TxnId) -> Result<Option<String>, EngineFail<S>> {
        Engine::transaction_group(self, txn)
    }
}

fn unexpected<H>(r: &Reply) -> Fail<H> {
    Fail::Unexpected(format!("unexpected reply from the core: {r:?}"))
}

/// Sends messages: one, or a batch (one topic, consecutive queue offsets, all or nothing).
pub fn send<E: Endpoint>(
    ep: &mut E,
    messages: Vec<NewMessage>,
) -> Result<Vec<SendResult>, Fail<E::Error>> {
    match ep.request(Request::Send { messages })? {
        Reply::Sent(v) => Ok(v),
        r => Err(unexpected(&r)),
    }
}

fn one<H>(mut v: Vec<SendResult>) -> Result<SendResult, Fail<H>> {
    match v.len() {
        1 => Ok(v.remove(0)),
        _ => Err(unexpected(&Reply::Sent(v))),
    }
}

/// Sends one message.
pub fn send_one<E: Endpoint>(ep: &mut E, m: NewMessage) -> Result<SendResult, Fail<E::Error>> {
    one(send(ep, vec![m])?)
}

/// A prepared transaction: what a `with` block (Python) or a callback (Node) holds.
#[derive(Debug, Clone)]
pub struct Transaction {
    pub txn: TxnId,
    pub group: String,
    /// Where the half message was stored.
    pub sent: SendResult,
}

/// Stores a half message of producer group `group`.
pub fn prepare<E: Endpoint>(
    ep: &mut E,
    group: String,
    message: NewMessage,
    check_immunity_ms: Option<Millis>,
) -> Result<Transaction, Fail<E::Error>> {
    let sent = match ep.request(Request::Prepare {
        group: group.clone(),
        message,
        check_immunity_ms,
    })? {
        Reply::Sent(v) => one(v)?,
        r => return Err(unexpected(&r)),
    };
    let txn = sent
        .txn
        .ok_or_else(|| Fail::Unexpected("a prepare answered no transaction id".into()))?;
    Ok(Transaction { txn, group, sent })
}

impl Transaction {
    /// Ends it in its own group; answers whether it was already ended this way.
    pub fn end<E: Endpoint>(&self, ep: &mut E, r: Resolution) -> Result<bool, Fail<E::Error>> {
        Ok(end(ep, self.txn, r, Some(self.group.clone()), false)?.duplicate)
    }

    /// What the end of the block does: nothing when this object already ended it, else
    /// commit when the block succeeded and roll back when it failed.
    pub fn on_exit(ended: Option<Resolution>, ok: bool) -> Option<Resolution> {
        match (ended, ok) {
            (Some(_), _) => None,
            (None, true) => Some(Resolution::Commit),
            (None, false) => Some(Resolution::Rollback),
        }
    }
}

/// How END_TRANSACTION came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub txn: TxnId,
    pub resolution: Resolution,
    /// It was already resolved this way (a harmless duplicate).
    pub duplicate: bool,
}

/// Ends a transaction. Without a `group`, the transaction's own (the application owns the
/// broker); `from_check` answers a check.
pub fn end<E: Endpoint>(
    ep: &mut E,
    txn: TxnId,
    resolution: Resolution,
    group: Option<String>,
    from_check: bool,
) -> Result<Ended, Fail<E::Error>> {
    let group = match group {
        Some(g) => Some(g),
        None => ep.transaction_group(txn)?,
    };
    match ep.request(Request::EndTransaction {
        txn,
        resolution,
        group,
        from_check,
    })? {
        Reply::Ended {
            txn,
            resolution,
            duplicate,
        } => Ok(Ended {
            txn,
            resolution,
            duplicate,
        }),
        r => Err(unexpected(&r)),
    }
}

/// A pull: every queue of the topic in order unless `queue` names one.
#[derive(Debug, Clone)]
pub struct PullArgs {
    pub group: String,
    pub topic: String,
    pub queue: Option<u32>,
    /// Where to start (default: the group's committed offset); needs a `queue`.
    pub offset: Option<u64>,
    /// At most this many messages in all.
    pub max: u32,
    pub filter: TagFilter,
    /// Commit the group's offset past what is returned.
    pub auto_commit: bool,
}

/// Where a pull left one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueRead {
    pub queue_id: u32,
    /// The offset to read from next.
    pub next_offset: u64,
    /// The queue's end (visible messages).
    pub max_offset: u64,
}

/// What a pull read.
#[derive(Debug, Clone)]
pub struct Pulled {
    pub messages: Vec<Message>,
    /// Each queue read, in order.
    pub queues: Vec<QueueRead>,
}

/// `UnknownTopic` for a topic that does not exist. Asked after the core answered: a bad topic
/// or group name is the core's error first; and a topic a concurrent send created meanwhile
/// exists (what the request got is handed out, never dropped).
fn must_exist<E: Endpoint>(ep: &mut E, topic: &str, got: bool) -> Result<(), Fail<E::Error>> {
    if got || ep.queue_count(topic)?.is_some() {
        return Ok(());
    }
    Err(Fail::Client(ClientError::UnknownTopic(topic.into())))
}

/// Pulls: one queue when `queue` is given, else every queue of the topic in order until
/// `max` messages. A topic that does not exist is `UnknownTopic` (a typo must not read as
/// "no messages").
pub fn pull<E: Endpoint>(ep: &mut E, a: PullArgs) -> Result<Pulled, Fail<E::Error>> {
    let count = ep.queue_count(&a.topic)?;
    let queues: Vec<u32> = match a.queue {
        Some(q) => vec![q],
        None if a.offset.is_some() => {
            return Err(Fail::Argument(
                "offset needs a queue: an offset is a position in one queue".into(),
            ))
        }
        // A missing topic still goes to the core once: it judges the names.
        None => (0..count.unwrap_or(1)).collect(),
    };
    let mut out = Pulled {
        messages: Vec::new(),
        queues: Vec::new(),
    };
    for queue_id in queues {
        let got = u32::try_from(out.messages.len()).unwrap_or(u32::MAX);
        let left = a.max.saturating_sub(got);
        if left == 0 && !out.queues.is_empty() {
            break;
        }
        match ep.request(Request::Pull {
            group: a.group.clone(),
            topic: a.topic.clone(),
            queue_id,
            offset: a.offset,
            max: left,
            filter: a.filter.clone(),
            auto_commit: a.auto_commit,
        })? {
            Reply::Pulled {
                messages,
                next_offset,
                max_offset,
            } => {
                out.messages.extend(messages);
                out.queues.push(QueueRead {
                    queue_id,
                    next_offset,
                    max_offset,
                });
            }
            r => return Err(unexpected(&r)),
        }
    }
    must_exist(ep, &a.topic, !out.messages.is_empty())?;
    Ok(out)
}

/// A receive (RocketMQ 5 pop).
#[derive(Debug, Clone)]
pub struct ReceiveArgs {
    pub group: String,
    pub topic: String,
    /// One queue, or every queue (`None`).
    pub queue: Option<u32>,
    pub max: u32,
    /// How long what is received stays invisible to the group unless acked.
    pub invisible_ms: Millis,
    pub filter: TagFilter,
}

/// Receives messages; a topic that does not exist is `UnknownTopic`.
pub fn receive<E: Endpoint>(ep: &mut E, a: ReceiveArgs) -> Result<Vec<Received>, Fail<E::Error>> {
    let topic = a.topic.clone();
    match ep.request(Request::Receive {
        group: a.group,
        topic: a.topic,
        queue_id: a.queue,
        max: a.max,
        invisible_ms: a.invisible_ms,
        filter: a.filter,
    })? {
        Reply::Received(v) => {
            must_exist(ep, &topic, !v.is_empty())?;
            Ok(v)
        }
        r => Err(unexpected(&r)),
    }
}

/// Acknowledges a received message.
pub fn ack<E: Endpoint>(
    ep: &mut E,
    group: String,
    handle: ReceiptHandle,
) -> Result<(), Fail<E::Error>> {
    match ep.request(Request::Ack { group, handle })? {
        Reply::Acked => Ok(()),
        r => Err(unexpected(&r)),
    }
}

/// Changes how long a received message stays invisible: the new handle and when it shows.
pub fn change_invisible<E: Endpoint>(
    ep: &mut E,
    group: String,
    handle: ReceiptHandle,
    invisible_ms: Millis,
) -> Result<(ReceiptHandle, Millis), Fail<E::Error>> {
    match ep.request(Request::ChangeInvisible {
        group,
        handle,
        invisible_ms,
    })? {
        Reply::InvisibleChanged { handle, visible_at } => Ok((handle, visible_at)),
        r => Err(unexpected(&r)),
    }
}

/// Gives a received message up: to `%DLQ%<group>` at once.
pub fn forward_to_dead_letter<E: Endpoint>(
    ep: &mut E,
    group: String,
    handle: ReceiptHandle,
) -> Result<(), Fail<E::Error>> {
    match ep.request(Request::ForwardToDeadLetter { group, handle })? {
        Reply::Forwarded => Ok(()),
        r => Err(unexpected(&r)),
    }
}

/// A pulled message (by log offset) the consumer failed: to `%RETRY%<group>` or the DLQ.
pub fn send_back<E: Endpoint>(
    ep: &mut E,
    group: String,
    offset: u64,
    delay_level: Option<u32>,
) -> Result<SendResult, Fail<E::Error>> {
    match ep.request(Request::SendBack {
        group,
        offset,
        delay_level,
    })? {
        Reply::Sent(v) => one(v),
        r => Err(unexpected(&r)),
    }
}

/// Commits a group's offset in a queue.
pub fn commit_offset<E: Endpoint>(
    ep: &mut E,
    group: String,
    topic: String,
    queue_id: u32,
    offset: u64,
) -> Result<(), Fail<E::Error>> {
    match ep.request(Request::CommitOffset {
        group,
        topic,
        queue_id,
        offset,
    })? {
        Reply::OffsetCommitted => Ok(()),
        r => Err(unexpected(&r)),
    }
}
