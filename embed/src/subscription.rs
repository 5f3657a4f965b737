//! [`Subscription`]: messages of a topic as they arrive, for one consumer group, with the
//! ack rule every binding follows; [`Subscriptions`]: open ones by id, for a host whose loop
//! lives in its language.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::string::String;
use alloc::vec::Vec;

use rocklet_core::{ClientError, Millis, ReceiptHandle, Received, TagFilter};

use crate::ops::{ack, receive, Endpoint, ReceiveArgs};
use crate::Fail;

/// A subscription's state. The ack rule: a message is acked when the consumer asks for the
/// next one (the loop moved on, so the body finished); leaving the loop (break, an
/// exception) leaves the current message un-acked, and it comes back after `invisible_ms`.
/// Acking it in the body is fine too: the automatic ack of a message already acked (or
/// whose invisible time changed) is no error.
///
/// A subscription may start before its topic exists: until a send creates it, it waits
/// like an empty topic (a pull or receive on a missing topic is `UnknownTopic`).
#[derive(Debug)]
pub struct Subscription {
    pub group: String,
    pub topic: String,
    pub invisible_ms: Millis,
    /// Messages received in one go.
    pub batch: u32,
    pub filter: TagFilter,
    buffer: VecDeque<Received>,
    last: Option<ReceiptHandle>,
}

impl Subscription {
    pub fn new(
        group: String,
        topic: String,
        invisible_ms: Millis,
        batch: u32,
        filter: TagFilter,
    ) -> Self {
        Subscription {
            group,
            topic,
            invisible_ms,
            batch: batch.max(1),
            filter,
            buffer: VecDeque::new(),
            last: None,
        }
    }

    /// Acks the message handed out last, if any (the consumer moved on).
    pub fn ack_last<E: Endpoint>(&mut self, ep: &mut E) -> Result<(), Fail<E::Error>> {
        let Some(handle) = self.last.take() else {
            return Ok(());
        };
        match ack(ep, self.group.clone(), handle) {
            Err(Fail::Client(
                ClientError::InvalidReceiptHandle(_) | ClientError::StaleReceiptHandle(_),
            )) => Ok(()),
            r => r,
        }
    }

    /// The next message: acks the previous one, then hands out a buffered message or
    /// receives a batch. `None`: nothing visible now; the host waits for a change (a send,
    /// a delivery, time) and asks again.
    pub fn next<E: Endpoint>(&mut self, ep: &mut E) -> Result<Option<Received>, Fail<E::Error>> {
        self.ack_last(ep)?;
        if self.buffer.is_empty() {
            let got = match receive(
                ep,
                ReceiveArgs {
                    group: self.group.clone(),
                    topic: self.topic.clone(),
                    queue: None,
                    max: self.batch,
                    invisible_ms: self.invisible_ms,
                    filter: self.filter.clone(),
                },
            ) {
                Err(Fail::Client(ClientError::UnknownTopic(_))) => Vec::new(),
                r => r?,
            };
            self.buffer.extend(got);
        }
        let r = self.buffer.pop_front();
        self.last = r.as_ref().map(|r| r.handle.clone());
        Ok(r)
    }

    /// The consumer left the loop: the current message stays un-acked.
    pub fn stop(&mut self) {
        self.last = None;
    }
}

/// Open subscriptions by id, for a host whose loop lives in its language and asks for each
/// message by id (Node's async iterators).
#[derive(Debug, Default)]
pub struct Subscriptions {
    open: BTreeMap<u32, Subscription>,
    next_id: u32,
}

impl Subscriptions {
    /// Keeps `sub` open; answers its id.
    pub fn open(&mut self, sub: Subscription) -> u32 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.open.insert(id, sub);
        id
    }

    /// The next message of subscription `id` ([`Subscription::next`]); an id not open (never
    /// opened, or stopped) is [`Fail::Argument`].
    pub fn next<E: Endpoint>(
        &mut self,
        id: u32,
        ep: &mut E,
    ) -> Result<Option<Received>, Fail<E::Error>> {
        match self.open.get_mut(&id) {
            Some(sub) => sub.next(ep),
            None => Err(Fail::Argument(alloc::format!("no open subscription {id}"))),
        }
    }

    /// Ends subscription `id`; its current message stays un-acked.
    pub fn stop(&mut self, id: u32) {
        if let Some(mut s) = self.open.remove(&id) {
            s.stop();
        }
    }

    /// Ends every subscription (closing).
    pub fn clear(&mut self) {
        self.open.clear();
    }
}
