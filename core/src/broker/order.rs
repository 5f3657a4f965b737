//! Order topics (RocketMQ's `updateTopic -o true`): a user topic's `order` flag (its topic
//! config's) and its order conf (the name server's ORDER_TOPIC_CONFIG entry,
//! `brokerName:queueCount;…`, from which a v4 producer builds the topic's queue list). Both
//! are kept in one state record ([`StateOp::TopicOrder`], the last wins), carried by the
//! checkpoint and by the record of where the log starts; a topic's deletion clears them (a
//! topic made again under the name starts without).

use super::*;

/// Longest order conf accepted, in bytes.
pub const MAX_ORDER_CONF: usize = 4096;

/// A topic's order settings ([`Broker::topic_order`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopicOrder {
    /// The topic config's `order` flag (updateTopic -o true).
    pub order: bool,
    /// Its order conf (`brokerName:queueCount;…`), `None` when none was put.
    pub conf: Option<String>,
}

/// The entries of order conf `conf` (`brokerName:queueCount;…`): each broker name once, each
/// count at least 1 and at most [`MAX_QUEUES`], at most [`MAX_ORDER_CONF`] bytes in all.
/// `Err` names what is wrong.
pub fn parse_order_conf(conf: &str) -> Result<Vec<(&str, u32)>, ClientError> {
    let bad = |what: String| Err(ClientError::InvalidArgument(what));
    if conf.len() > MAX_ORDER_CONF {
        return bad(format!(
            "the order conf is {} bytes; at most {MAX_ORDER_CONF} are kept",
            conf.len()
        ));
    }
    let mut out: Vec<(&str, u32)> = Vec::new();
    for entry in conf.split(';') {
        let Some((name, count)) = entry.split_once(':') else {
            return bad(format!(
                "order conf entry `{entry}` is not brokerName:queueCount"
            ));
        };
        let name_ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.%|".contains(&b));
        if !name_ok {
            return bad(format!(
                "order conf entry `{entry}`: `{name}` is not a broker name"
            ));
        }
        let n = match count.parse::<u32>() {
            Ok(n) if (1..=MAX_QUEUES).contains(&n) => n,
            _ => {
                return bad(format!(
                    "order conf entry `{entry}`: the queue count `{count}` is not within 1..={MAX_QUEUES}"
                ))
            }
        };
        if out.iter().any(|e| e.0 == name) {
            return bad(format!("order conf names broker `{name}` twice"));
        }
        out.push((name, n));
    }
    Ok(out)
}

impl<S: Storage> Broker<S> {
    /// User topic `name`'s order settings; `None` when there is no such topic.
    #[must_use]
    pub fn topic_order(&self, name: &str) -> Option<TopicOrder> {
        let t = &self.topics[*self.topic_ids.get(name)? as usize];
        (t.kind == TopicKind::User).then(|| TopicOrder {
            order: t.order,
            conf: (!t.order_conf.is_empty()).then(|| t.order_conf.clone()),
        })
    }

    /// Sets user topic `name`'s order flag (its conf stays), durably. `Ok(Err(_))`: no such
    /// user topic, or a replica.
    pub fn set_topic_order(&mut self, name: &str, order: bool) -> Res<Result<(), ClientError>, S> {
        let t = match self.order_target(name) {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        let conf = self.topics[t as usize].order_conf.clone();
        self.write_order(t, name, order, &conf)
    }

    /// Puts (`Some`) or deletes (`None`) user topic `name`'s order conf (its flag stays),
    /// durably. `Ok(Err(_))`: no such user topic, a replica, or a conf
    /// [`parse_order_conf`] refuses or naming more queues than the topic has. Which broker
    /// names exist is the host's to check.
    pub fn set_order_conf(
        &mut self,
        name: &str,
        conf: Option<&str>,
    ) -> Res<Result<(), ClientError>, S> {
        let t = match self.order_target(name) {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(c) = conf {
            let have = self.topics[t as usize].queues.len() as u32;
            match parse_order_conf(c) {
                Err(e) => return Ok(Err(e)),
                Ok(entries) => {
                    if let Some((b, n)) = entries.iter().find(|e| e.1 > have) {
                        return Ok(Err(ClientError::InvalidArgument(format!(
                            "order conf names {n} queues on broker `{b}`; topic `{name}` has {have}"
                        ))));
                    }
                }
            }
        }
        let order = self.topics[t as usize].order;
        self.write_order(t, name, order, conf.unwrap_or(""))
    }

    fn order_target(&self, name: &str) -> Result<u32, ClientError> {
        if self.role == Role::Replica {
            return Err(ClientError::NotMaster);
        }
        topic::validate_user_topic(name)?;
        self.topic_ids
            .get(name)
            .copied()
            .ok_or_else(|| ClientError::UnknownTopic(name.into()))
    }

    fn write_order(
        &mut self,
        t: u32,
        name: &str,
        order: bool,
        conf: &str,
    ) -> Res<Result<(), ClientError>, S> {
        self.check_failed()?;
        let topic = &self.topics[t as usize];
        if topic.order != order || topic.order_conf != conf {
            self.write_state(&StateOp::TopicOrder { name, order, conf })?;
        }
        Ok(Ok(()))
    }

    /// Applies a [`StateOp::TopicOrder`] (and what a checkpoint or the record of where the
    /// log starts carries): to the topic of that name, if it is a user topic that exists.
    pub(super) fn apply_topic_order(&mut self, name: &str, order: bool, conf: &str) {
        if conf.len() > MAX_ORDER_CONF {
            return;
        }
        if let Some(&t) = self.topic_ids.get(name) {
            let topic = &mut self.topics[t as usize];
            if topic.kind == TopicKind::User {
                topic.order = order;
                topic.order_conf.clear();
                topic.order_conf.push_str(conf);
            }
        }
    }

    /// The order settings to carry: (topic, order, conf) of each user topic that has any.
    pub(super) fn order_rows(&self) -> Vec<(String, bool, String)> {
        let mut out: Vec<(String, bool, String)> = self
            .topics
            .iter()
            .filter(|t| !t.deleted && (t.order || !t.order_conf.is_empty()))
            .map(|t| (t.name.clone(), t.order, t.order_conf.clone()))
            .collect();
        out.sort_unstable();
        out
    }
}
