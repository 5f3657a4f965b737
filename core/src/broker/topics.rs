//! Topics, queues and groups: their tables, lookups, and reading messages back.

use super::*;

impl<S: Storage> Broker<S> {
    /// Consumer-visible topics and their queues (system topics that hold only the broker's
    /// own records are left out).
    #[must_use]
    pub fn topics(&self) -> Vec<TopicInfo> {
        let mut out: Vec<TopicInfo> = self
            .topics
            .iter()
            .filter(|t| t.kind.is_readable() && !t.deleted)
            .map(|t| TopicInfo {
                name: t.name.clone(),
                queues: t
                    .queues
                    .iter()
                    .map(|&q| {
                        let q = &self.queues[q as usize];
                        (q.queue_id, q.next, q.visible_end())
                    })
                    .collect(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// One consumer-visible topic and its queues, `None` when it does not exist (a lookup by
    /// name: per-request work never grows with the number of topics).
    #[must_use]
    pub fn topic_info(&self, name: &str) -> Option<TopicInfo> {
        let t = &self.topics[*self.topic_ids.get(name)? as usize];
        t.kind.is_readable().then(|| TopicInfo {
            name: t.name.clone(),
            queues: t
                .queues
                .iter()
                .map(|&q| {
                    let q = &self.queues[q as usize];
                    (q.queue_id, q.next, q.visible_end())
                })
                .collect(),
        })
    }

    /// The first queue offset a queue holds (0 unless it was started later with
    /// [`Broker::start_queue_at`]: RocketMQ's min offset); `None` when there is no such queue.
    #[must_use]
    pub fn queue_min_offset(&self, topic: &str, queue_id: u32) -> Option<u64> {
        self.queue_index(topic, queue_id)
            .map(|q| self.queues[q as usize].base)
    }

    /// Starts an empty queue at `offset`, durably: its first message gets that queue
    /// offset, and reads below it find nothing (RocketMQ's min offset, for a store whose
    /// oldest files were deleted). For hosts that restore a store (`rocklet import`).
    /// `Ok(Err(_))`: not a user or retry topic, no such queue, or the queue already holds
    /// messages or was started.
    pub fn start_queue_at(
        &mut self,
        topic_name: &str,
        queue_id: u32,
        offset: u64,
    ) -> Res<Result<(), ClientError>, S> {
        self.check_failed()?;
        if self.role == Role::Replica {
            return Ok(Err(ClientError::NotMaster));
        }
        if let Err(e) = topic::validate_user_topic(topic_name) {
            return Ok(Err(e));
        }
        if queue_id >= MAX_QUEUES {
            return Ok(Err(ClientError::InvalidQueue {
                topic: topic_name.into(),
                queue_id,
                queues: MAX_QUEUES,
            }));
        }
        let Some(q) = self.queue_index(topic_name, queue_id) else {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "queue {queue_id} of `{topic_name}` does not exist: create the topic with its \
                 queues first"
            ))));
        };
        {
            let queue = &self.queues[q as usize];
            if queue.next != 0 || queue.base != 0 {
                return Ok(Err(ClientError::InvalidArgument(format!(
                    "queue {queue_id} of `{topic_name}` already starts at {} and holds {} \
                     messages: only an empty queue can be started at an offset",
                    queue.base,
                    queue.len()
                ))));
            }
        }
        self.write_state(&StateOp::QueueStart {
            topic: topic_name,
            queue_id,
            offset,
        })?;
        Ok(Ok(()))
    }

    /// Queues of a topic, `None` when it does not exist.
    #[must_use]
    pub fn topic_queue_count(&self, name: &str) -> Option<u32> {
        self.topic_ids
            .get(name)
            .map(|&t| self.topics[t as usize].queues.len() as u32)
    }

    /// The consume-queue units of a queue (what RocketMQ's ConsumeQueue file holds) from
    /// queue offset `from` (at least its first, [`Broker::queue_min_offset`]) on, at most
    /// `max`.
    pub fn consume_queue(
        &mut self,
        topic: &str,
        queue_id: u32,
        from: u64,
        max: usize,
    ) -> Res<Vec<CqUnit>, S> {
        let Some(q) = self.queue_index(topic, queue_id) else {
            return Ok(Vec::new());
        };
        let mut at = from.max(self.queues[q as usize].base);
        let mut out = Vec::new();
        while out.len() < max {
            let Some(u) = self.unit_at(q, at)? else {
                break;
            };
            out.push(u);
            at += 1;
        }
        Ok(out)
    }

    /// Visible messages of a queue from `from` on (at most `max`), for tools and test
    /// assertions: reads without a consumer group and changes nothing.
    pub fn browse(
        &mut self,
        topic_name: &str,
        queue_id: u32,
        from: u64,
        max: usize,
    ) -> Res<Vec<Message>, S> {
        let Some(q) = self.queue_index(topic_name, queue_id) else {
            return Ok(Vec::new());
        };
        let visible = self.queues[q as usize].visible_end();
        let mut out = Vec::new();
        let mut at = from.max(self.queues[q as usize].base);
        while at < visible && out.len() < max {
            let Some(unit) = self.unit_at(q, at)? else {
                break;
            };
            if let Some(m) = self.read_message(q, at, unit)? {
                out.push(m);
            }
            at += 1;
        }
        Ok(out)
    }

    /// Raw records from `offset` on (at most `max`), each as (offset, bytes): for tools that
    /// show the log. Blanks are skipped.
    pub fn raw_records(&mut self, mut offset: u64, max: usize) -> Res<Vec<(u64, Vec<u8>)>, S> {
        let mut out = Vec::new();
        while out.len() < max && offset < self.log.end() {
            match self.log.read_any(offset).map_err(Error::Storage)? {
                Some(r) => {
                    let len = r.total_size as u64;
                    let mut bytes = Vec::with_capacity(len as usize);
                    record::encode(&mut bytes, &r.header, r.body, r.topic, r.properties)
                        .map_err(Error::Encode)?;
                    out.push((offset, bytes));
                    offset += len;
                }
                None => match self.log.skip_from(offset).map_err(Error::Storage)? {
                    Some(next) if next > offset => offset = next,
                    _ => break,
                },
            }
        }
        Ok(out)
    }

    /// Creates a topic (or grows it to `queues` queues), durably. For hosts that declare
    /// topics. `Ok(Err(_))`: the name or count cannot be used.
    pub fn create_topic(&mut self, name: &str, queues: u32) -> Res<Result<(), ClientError>, S> {
        self.check_failed()?;
        if self.role == Role::Replica {
            return Ok(Err(ClientError::NotMaster));
        }
        if let Err(e) = topic::validate_user_topic(name) {
            return Ok(Err(e));
        }
        if queues == 0 || queues > MAX_QUEUES {
            return Ok(Err(ClientError::InvalidArgument(format!(
                "{queues} queues is not within 1..=1024"
            ))));
        }
        if let Err(e) = self.may_create_topic(name) {
            return Ok(Err(e));
        }
        self.ensure_topic(name, queues)?;
        Ok(Ok(()))
    }

    /// Whether a client request may name topic `name`: it exists, or one more fits under
    /// [`Config::max_topics`].
    pub(super) fn may_create_topic(&self, name: &str) -> Result<(), ClientError> {
        if self.find_topic(name).is_some() || self.topics.len() < self.cfg.max_topics as usize {
            Ok(())
        } else {
            Err(ClientError::TooManyTopics {
                max: self.cfg.max_topics,
            })
        }
    }

    /// Whether a client request may name group `name`: it exists, or one more fits under
    /// [`Config::max_groups`]. (Recovery applies whatever the log holds.)
    pub(super) fn may_create_group(&self, name: &str) -> Result<(), ClientError> {
        if self.group_ids.contains_key(name) || self.groups.len() < self.cfg.max_groups as usize {
            Ok(())
        } else {
            Err(ClientError::TooManyGroups {
                max: self.cfg.max_groups,
            })
        }
    }

    /// The user topic `name` with at least `queues` queues, creating or growing it with a
    /// record in the log, so a restart gives it the same queues.
    pub(super) fn ensure_topic(&mut self, name: &str, queues: u32) -> Res<u32, S> {
        if let Some(&t) = self.topic_ids.get(name) {
            if self.topics[t as usize].queues.len() as u32 >= queues {
                return Ok(t);
            }
        }
        self.write_state(&StateOp::Topic { name, queues })?;
        Ok(self.topic(name, queues))
    }

    /// The topic a send or prepare goes to: as it is when it exists (a declared topic keeps
    /// its queues), else auto-created with `default_queues`.
    pub(super) fn topic_for_send(&mut self, name: &str) -> u32 {
        match self.find_topic(name) {
            Some(t) => t,
            None => self.topic(name, self.cfg.default_queues),
        }
    }

    /// The topic named `name`, if it exists: one of the few writes last named first (string
    /// compares; a send names its topic four times, a transaction moves between three
    /// topics), else by hash.
    pub(super) fn find_topic(&self, name: &str) -> Option<u32> {
        for &r in &self.recent_topics {
            if let Some(t) = self.topics.get(r as usize) {
                if !t.deleted && t.name == name {
                    return Some(r);
                }
            }
        }
        self.topic_ids.get(name).copied()
    }

    /// Consumer groups with a committed offset in a queue of `topic`, by name (for admin
    /// tools: who consumes a topic, online or not).
    #[must_use]
    pub fn groups_of_topic(&self, topic: &str) -> Vec<String> {
        let Some(&t) = self.topic_ids.get(topic) else {
            return Vec::new();
        };
        let queues = &self.topics[t as usize].queues;
        let mut out: Vec<String> = self
            .offsets
            .keys()
            .filter(|(_, q)| queues.contains(q))
            .map(|(g, _)| self.groups[*g as usize].name.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Deletes a user topic, durably (RocketMQ's deleteTopic): from then on routes, sends
    /// (until it is created again), pulls, receives and offsets do not see it. Its records
    /// stay in the log; the name may be used again, starting afresh. `Ok(Err(_))`: no such
    /// user topic.
    pub fn delete_topic(&mut self, name: &str) -> Res<Result<(), ClientError>, S> {
        self.check_failed()?;
        if self.role == Role::Replica {
            return Ok(Err(ClientError::NotMaster));
        }
        if let Err(e) = topic::validate_user_topic(name) {
            return Ok(Err(e));
        }
        if !self.topic_ids.contains_key(name) {
            return Ok(Err(ClientError::UnknownTopic(name.into())));
        }
        self.write_state(&StateOp::TopicDeleted { name })?;
        Ok(Ok(()))
    }

    pub(super) fn topic(&mut self, name: &str, min_queues: u32) -> u32 {
        self.topic_with(name, min_queues, true)
    }

    /// [`Broker::topic`]; `auto`: a user topic recovery meets first in a record (not in a
    /// `Topic` state record) was auto-created, with `default_queues` queues — a record of
    /// queue 0 must not make it a topic of one queue.
    pub(super) fn topic_with(&mut self, name: &str, mut min_queues: u32, auto: bool) -> u32 {
        let t = match self.find_topic(name) {
            Some(t) => t,
            None => {
                if auto && self.recovering && topic::classify(name) == TopicKind::User {
                    min_queues = min_queues.max(self.cfg.default_queues);
                }
                let t = self.topics.len() as u32;
                self.topics.push(Topic {
                    name: name.into(),
                    kind: topic::classify(name),
                    queues: Vec::new(),
                    round_robin: 0,
                    deleted: false,
                    order: false,
                    order_conf: String::new(),
                });
                self.topic_ids.insert(name.into(), t);
                t
            }
        };
        while (self.topics[t as usize].queues.len() as u32) < min_queues {
            let queue_id = self.topics[t as usize].queues.len() as u32;
            let q = self.queues.len() as u32;
            let name = &self.topics[t as usize].name;
            let queue = match self.deleted_names.get(name) {
                None => Queue::new(t, name, queue_id),
                Some(n) => Queue::new(t, &format!("{name}~{n}"), queue_id),
            };
            self.queues.push(queue);
            self.topics[t as usize].queues.push(q);
        }
        if !self.recent_topics.contains(&t) {
            self.recent_topics[self.recent_next as usize] = t;
            self.recent_next = (self.recent_next + 1) % RECENT_TOPICS as u8;
        }
        t
    }

    pub(super) fn queue_of(&self, t: u32, queue_id: u32) -> u32 {
        self.topics[t as usize].queues[queue_id as usize]
    }

    pub(super) fn queue_index(&self, topic_name: &str, queue_id: u32) -> Option<u32> {
        let t = *self.topic_ids.get(topic_name)?;
        self.topics[t as usize]
            .queues
            .get(queue_id as usize)
            .copied()
    }

    /// A readable queue, `None` when the topic does not exist (yet).
    pub(super) fn readable_queue(
        &self,
        topic_name: &str,
        queue_id: u32,
    ) -> Result<Option<u32>, ClientError> {
        topic::validate_readable_topic(topic_name)?;
        let Some(&t) = self.topic_ids.get(topic_name) else {
            return Ok(None);
        };
        let topic = &self.topics[t as usize];
        match topic.queues.get(queue_id as usize) {
            Some(&q) => Ok(Some(q)),
            None => Err(ClientError::InvalidQueue {
                topic: topic_name.into(),
                queue_id,
                queues: topic.queues.len() as u32,
            }),
        }
    }

    pub(super) fn group(&mut self, name: &str) -> u32 {
        if let Some(&g) = self.group_ids.get(name) {
            return g;
        }
        let g = self.groups.len() as u32;
        self.groups.push(Group {
            name: name.into(),
            online: false,
            parked: Vec::new(),
            fifo: false,
        });
        self.group_ids.insert(name.into(), g);
        g
    }

    pub(super) fn read_message(
        &mut self,
        q: u32,
        queue_offset: u64,
        unit: CqUnit,
    ) -> Res<Option<Message>, S> {
        let queue = &self.queues[q as usize];
        let (topic_name, queue_id) = (&self.topics[queue.topic as usize].name, queue.queue_id);
        let Some(r) = self
            .log
            .read(unit.offset, unit.size as usize)
            .map_err(Error::Storage)?
        else {
            return Ok(None);
        };
        let mut m = message_from(&r, unit.offset, r.header.store_host);
        if topic::classify(r.topic) == TopicKind::Half {
            // A committed half: consumers see it as RocketMQ's committed copy, of commit type.
            m.sys_flag =
                (m.sys_flag & !sys_flag::TRANSACTION_TYPE_MASK) | sys_flag::TRANSACTION_COMMIT_TYPE;
        }
        m.topic.clone_from(topic_name);
        m.queue_id = queue_id;
        m.queue_offset = queue_offset;
        Ok(Some(m))
    }

    pub(super) fn offset_msg_id(&self, offset: u64) -> String {
        offset_msg_id(self.cfg.store_host.host(), offset)
    }
}
