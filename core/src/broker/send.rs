//! Normal and batch sends: validation of a message, its queue, and the write.

use super::*;

/// A message to store, owned ([`NewMessage`]) or borrowed ([`MessageRef`]): the send path
/// reads every field through this, so both take the same code.
pub(super) trait Outgoing {
    fn topic(&self) -> &str;
    fn body(&self) -> &[u8];
    fn tag(&self) -> Option<&str>;
    fn has_keys(&self) -> bool;
    fn keys(&self) -> impl Iterator<Item = &str>;
    fn properties(&self) -> impl Iterator<Item = (&str, &str)>;
    fn queue_id(&self) -> Option<u32>;
    fn message_id(&self) -> Option<&str>;
    fn delay(&self) -> Option<Delay>;
    fn message_group(&self) -> Option<&str>;
    fn born_timestamp(&self) -> Option<Millis>;
    fn born_host(&self) -> Option<Host>;
    fn flag(&self) -> i32;
}

impl Outgoing for NewMessage {
    fn topic(&self) -> &str {
        &self.topic
    }
    fn body(&self) -> &[u8] {
        &self.body
    }
    fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }
    fn has_keys(&self) -> bool {
        !self.keys.is_empty()
    }
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(String::as_str)
    }
    fn properties(&self) -> impl Iterator<Item = (&str, &str)> {
        self.properties
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
    }
    fn queue_id(&self) -> Option<u32> {
        self.queue_id
    }
    fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }
    fn delay(&self) -> Option<Delay> {
        self.delay
    }
    fn message_group(&self) -> Option<&str> {
        self.message_group.as_deref()
    }
    fn born_timestamp(&self) -> Option<Millis> {
        self.born_timestamp
    }
    fn born_host(&self) -> Option<Host> {
        self.born_host
    }
    fn flag(&self) -> i32 {
        self.flag
    }
}

impl Outgoing for MessageRef<'_> {
    fn topic(&self) -> &str {
        self.topic
    }
    fn body(&self) -> &[u8] {
        self.body
    }
    fn tag(&self) -> Option<&str> {
        self.tag
    }
    fn has_keys(&self) -> bool {
        !self.keys.is_empty()
    }
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().copied()
    }
    fn properties(&self) -> impl Iterator<Item = (&str, &str)> {
        self.properties.iter().copied()
    }
    fn queue_id(&self) -> Option<u32> {
        self.queue_id
    }
    fn message_id(&self) -> Option<&str> {
        self.message_id
    }
    fn delay(&self) -> Option<Delay> {
        self.delay
    }
    fn message_group(&self) -> Option<&str> {
        self.message_group
    }
    fn born_timestamp(&self) -> Option<Millis> {
        self.born_timestamp
    }
    fn born_host(&self) -> Option<Host> {
        self.born_host
    }
    fn flag(&self) -> i32 {
        self.flag
    }
}

/// Where a single message went: (queue id, queue offset, log offset).
pub(super) type Placed = (u32, u64, u64);

impl<S: Storage> Broker<S> {
    pub(super) fn send(&mut self, messages: Vec<NewMessage>) -> Res<Result<Reply, ClientError>, S> {
        if messages.is_empty() {
            return Ok(Err(ClientError::EmptyBatch));
        }
        if let Err(e) = self.refuse_new() {
            return Ok(Err(e));
        }
        if messages.len() == 1 {
            let Some(m) = messages.into_iter().next() else {
                return Ok(Err(ClientError::EmptyBatch));
            };
            let (queue_id, queue_offset, offset) = match self.send_single(&m)? {
                Ok(p) => p,
                Err(e) => return Ok(Err(e)),
            };
            return Ok(Ok(Reply::Sent(alloc::vec![SendResult {
                msg_id: m.message_id.unwrap_or_else(|| self.offset_msg_id(offset)),
                topic: m.topic,
                queue_id,
                queue_offset,
                offset,
                txn: None,
            }])));
        }
        // A batch of two or more from here on.
        let mut plans = Vec::with_capacity(messages.len());
        let mut total = 0usize;
        for m in &messages {
            let props = self.props_buf();
            let plan = match self.plan(m, true, props) {
                Ok(p) => p,
                Err(e) => {
                    for p in plans {
                        self.recycle_plan(p);
                    }
                    return Ok(Err(e));
                }
            };
            total += m.body.len();
            plans.push(plan);
        }
        let refused = self
            .batch_refused(&messages, total)
            .or_else(|| self.may_create_topic(&messages[0].topic).err());
        if let Some(e) = refused {
            for p in plans {
                self.recycle_plan(p);
            }
            return Ok(Err(e));
        }
        // Everything is valid: create the topic and pick queues.
        let t = self.topic_for_send(&messages[0].topic);
        let n = messages.len();
        let now = self.now;
        // A batch goes to one queue, as RocketMQ's: the first message's choice.
        let batch_queue = match self.pick_queue(t, &messages[0]) {
            Ok(q) => q,
            Err(e) => {
                for p in plans {
                    self.recycle_plan(p);
                }
                return Ok(Err(e));
            }
        };
        let mut specs = Vec::with_capacity(n);
        for (i, (m, mut plan)) in messages.iter().zip(plans).enumerate() {
            let (topic, qid) = plan.route(&m.topic, batch_queue);
            if i == 0 {
                record::push_prop(&mut plan.props, BATCH_LEN, itoa(n as u64).as_str());
            }
            specs.push(Spec::outgoing(m, topic, qid, 0, plan.props, now));
        }
        let written = self.write(&specs);
        // Where each record went: one after the other in the log; a batch's messages at
        // consecutive queue offsets of one queue.
        let store_host = self.cfg.store_host.host();
        let mut places = Vec::with_capacity(n);
        if let Ok((mut off, qoff)) = written {
            for (i, spec) in specs.iter().enumerate() {
                let h = Header {
                    born_host: spec.born_host,
                    store_host,
                    ..Header::default()
                };
                let len =
                    record::encoded_len(&h, spec.body.len(), spec.topic.len(), spec.props.len());
                places.push((off, qoff + i as u64));
                off += len as u64;
            }
        }
        for spec in specs {
            self.recycle_props(spec.props);
        }
        written?;
        let results = messages
            .into_iter()
            .zip(places)
            .map(|(m, (off, qoff))| SendResult {
                msg_id: m.message_id.unwrap_or_else(|| self.offset_msg_id(off)),
                topic: m.topic,
                // The message's own queue (a delayed one's record waits in the schedule
                // topic meanwhile).
                queue_id: batch_queue,
                queue_offset: qoff,
                offset: off,
                txn: None,
            })
            .collect();
        Ok(Ok(Reply::Sent(results)))
    }

    /// Stores one message (not a batch): the whole send path, allocating nothing in steady
    /// state (its property buffer comes from the pool, the record is encoded into the
    /// broker's reused buffer).
    pub(super) fn send_single<M: Outgoing>(
        &mut self,
        m: &M,
    ) -> Res<Result<Placed, ClientError>, S> {
        if let Err(e) = self.refuse_new() {
            return Ok(Err(e));
        }
        let props = self.props_buf();
        let mut plan = match self.plan(m, false, props) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        if let Err(e) = self.may_create_topic(m.topic()) {
            self.recycle_plan(plan);
            return Ok(Err(e));
        }
        let t = self.topic_for_send(m.topic());
        let queue_id = match self.pick_queue(t, m) {
            Ok(q) => q,
            Err(e) => {
                self.recycle_plan(plan);
                return Ok(Err(e));
            }
        };
        let (topic, qid) = plan.route(m.topic(), queue_id);
        let spec = Spec::outgoing(m, topic, qid, 0, plan.props, self.now);
        let written = self.write(core::slice::from_ref(&spec));
        self.recycle_props(spec.props);
        let (offset, queue_offset) = written?;
        Ok(Ok((queue_id, queue_offset, offset)))
    }

    /// Why a batch as a whole cannot be stored, if it cannot.
    fn batch_refused(&self, messages: &[NewMessage], total: usize) -> Option<ClientError> {
        let first = &messages[0];
        if let Some(m) = messages.iter().find(|m| m.topic != first.topic) {
            return Some(ClientError::MixedBatch(format!(
                "topic `{}` differs from `{}`",
                m.topic, first.topic
            )));
        }
        // RocketMQ's Message.isWaitStoreMsgOK: absent means true, else Boolean.parseBoolean.
        let wait = |m: &NewMessage| {
            m.properties
                .iter()
                .find(|(k, _)| k == prop::WAIT)
                .is_none_or(|(_, v)| v.eq_ignore_ascii_case("true"))
        };
        if messages.iter().any(|m| wait(m) != wait(first)) {
            return Some(ClientError::MixedBatch(
                "the WAIT (wait-store) flag differs".into(),
            ));
        }
        if topic::is_retry(&first.topic) {
            return Some(ClientError::BatchToRetryTopic);
        }
        if total > self.cfg.max_batch_size as usize {
            return Some(ClientError::BatchTooLarge {
                size: total,
                max: self.cfg.max_batch_size,
            });
        }
        None
    }

    fn recycle_plan(&mut self, plan: Plan) {
        self.recycle_props(plan.props);
    }

    pub(super) fn pick_queue<M: Outgoing>(&mut self, t: u32, m: &M) -> Result<u32, ClientError> {
        let topic = &mut self.topics[t as usize];
        let n = topic.queues.len() as u32;
        if let Some(q) = m.queue_id() {
            if q >= n {
                return Err(ClientError::InvalidQueue {
                    topic: topic.name.clone(),
                    queue_id: q,
                    queues: n,
                });
            }
            return Ok(q);
        }
        if let Some(g) = m.message_group() {
            return Ok((tag_hash(Some(g)) as u32) % n);
        }
        topic.round_robin = topic.round_robin.wrapping_add(1);
        Ok(topic.round_robin % n)
    }

    /// Validates a message and serializes its properties.
    pub(super) fn plan<M: Outgoing>(
        &self,
        m: &M,
        in_batch: bool,
        mut props: Vec<u8>,
    ) -> Result<Plan, ClientError> {
        props.clear();
        topic::validate_user_topic(m.topic())?;
        if !self.cfg.auto_create_topics && self.find_topic(m.topic()).is_none() {
            return Err(ClientError::UnknownTopic(m.topic().into()));
        }
        if m.body().is_empty() {
            return Err(ClientError::EmptyBody);
        }
        if m.body().len() > self.cfg.max_message_size as usize {
            return Err(ClientError::MessageTooLarge {
                size: m.body().len(),
                max: self.cfg.max_message_size,
            });
        }
        let mut delay = m.delay();
        let mut delay_sources = u32::from(delay.is_some());
        let check_text = |what: &str, s: &str| -> Result<(), ClientError> {
            if s.bytes()
                .any(|b| b == record::NAME_VALUE_SEPARATOR || b == record::PROPERTY_SEPARATOR)
            {
                return Err(ClientError::InvalidProperty(format!(
                    "{what} contains a control character \\x01 or \\x02"
                )));
            }
            Ok(())
        };
        if let Some(tag) = m.tag() {
            check_text("tag", tag)?;
            if tag.contains("||") {
                return Err(ClientError::InvalidProperty(format!(
                    "tag `{tag}` contains `||`"
                )));
            }
            if !tag.is_empty() {
                record::push_prop(&mut props, prop::TAGS, tag);
            }
        }
        if m.has_keys() {
            // `KEYS\x01k1 k2\x02`, written in place.
            props.extend_from_slice(prop::KEYS.as_bytes());
            props.push(record::NAME_VALUE_SEPARATOR);
            for (i, k) in m.keys().enumerate() {
                check_text("key", k)?;
                if i > 0 {
                    props.push(b' ');
                }
                props.extend_from_slice(k.as_bytes());
            }
            props.push(record::PROPERTY_SEPARATOR);
        }
        if let Some(id) = m.message_id() {
            check_text("message id", id)?;
            if id.is_empty() || id.len() > 128 {
                return Err(ClientError::InvalidProperty(
                    "message id must be 1..=128 bytes".into(),
                ));
            }
            record::push_prop(&mut props, prop::UNIQ_KEY, id);
        }
        if let Some(g) = m.message_group() {
            check_text("message group", g)?;
            record::push_prop(&mut props, prop::SHARDING_KEY, g);
        }
        for (k, v) in m.properties() {
            if k.is_empty() {
                return Err(ClientError::InvalidProperty("empty property name".into()));
            }
            check_text("property name", k)?;
            check_text("property value", v)?;
            if prop::RESERVED.contains(&k) || k == prop::TAGS || k == prop::KEYS {
                return Err(ClientError::InvalidProperty(format!(
                    "`{k}` is set by the broker or a field, not a property"
                )));
            }
            let parse = |v: &str| {
                v.trim()
                    .parse::<i64>()
                    .map_err(|_| ClientError::InvalidDelay(format!("{k}=`{v}` is not a number")))
            };
            match k {
                prop::DELAY => {
                    let l = parse(v)?;
                    if l < 0 {
                        return Err(ClientError::InvalidDelay(format!(
                            "delay level {l} is negative"
                        )));
                    }
                    delay = Some(Delay::Level(u32::try_from(l).unwrap_or(u32::MAX)));
                    delay_sources += 1;
                    continue;
                }
                prop::TIMER_DELIVER_MS => {
                    let at = parse(v)?;
                    if at < 0 {
                        return Err(ClientError::InvalidDelay(format!(
                            "delivery time {at} is negative"
                        )));
                    }
                    delay = Some(Delay::At(at as u64));
                    delay_sources += 1;
                    continue;
                }
                prop::TIMER_DELAY_SEC | prop::TIMER_DELAY_MS => {
                    let d = parse(v)?;
                    if d < 0 {
                        return Err(ClientError::InvalidDelay(format!("{k}={d} is negative")));
                    }
                    let ms = if k == prop::TIMER_DELAY_SEC {
                        (d as u64).saturating_mul(1000)
                    } else {
                        d as u64
                    };
                    delay = Some(Delay::After(ms));
                    delay_sources += 1;
                    continue;
                }
                _ => {}
            }
            record::push_prop(&mut props, k, v);
        }
        if delay_sources > 1 {
            return Err(ClientError::InvalidDelay(
                "more than one delay given".into(),
            ));
        }
        let (mut delay_due, mut level) = (None, None);
        match delay {
            None | Some(Delay::Level(0)) => {}
            Some(Delay::Level(l)) => {
                let l = l.min(self.cfg.delay_levels.len() as u32);
                record::push_prop(&mut props, prop::DELAY, itoa(u64::from(l)).as_str());
                delay_due = Some(
                    self.now
                        .saturating_add(self.cfg.delay_levels[l as usize - 1]),
                );
                level = Some(l);
            }
            Some(Delay::At(at)) => {
                const MAX_DELAY: Millis = 100 * 365 * 86_400_000;
                if at > self.now.saturating_add(MAX_DELAY) {
                    return Err(ClientError::InvalidDelay(format!(
                        "delivery time {at} is more than 100 years away"
                    )));
                }
                record::push_prop(&mut props, prop::TIMER_DELIVER_MS, itoa(at).as_str());
                delay_due = Some(at.max(self.now));
            }
            Some(Delay::After(ms)) => {
                const MAX_DELAY: Millis = 100 * 365 * 86_400_000;
                if ms > MAX_DELAY {
                    return Err(ClientError::InvalidDelay(format!(
                        "delay of {ms} ms is more than 100 years"
                    )));
                }
                let at = self.now.saturating_add(ms);
                record::push_prop(&mut props, prop::TIMER_DELIVER_MS, itoa(at).as_str());
                delay_due = Some(at);
            }
        }
        if in_batch && delay_due.is_some() {
            return Err(ClientError::DelayInBatch);
        }
        // Leave room for the broker's own properties.
        if props.len() + 512 > i16::MAX as usize {
            return Err(ClientError::PropertiesTooLarge(props.len()));
        }
        Ok(Plan {
            props,
            delay_due,
            level,
        })
    }
}
