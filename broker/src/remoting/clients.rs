//! The clients that heartbeat this broker (RocketMQ's ConsumerManager and ProducerManager):
//! consumer groups with their members and subscriptions, producer groups with theirs. It is
//! connection state: a member stays until it unregisters or its connection closes, and a
//! restart starts with none (clients heartbeat every 30 s).
//!
//! A consumer group whose members change (a new client id, an unregister, a closed
//! connection) is told so at once: every member's connection gets
//! NOTIFY_CONSUMER_IDS_CHANGED (the caller sends it, see [`Clients::members`]), so the group
//! rebalances now instead of on its clients' 20 s timer, as Apache's broker does.
//!
//! Bounded: names are at most `max_name_bytes` (the heartbeat checks them), at most
//! [`MAX_SUBSCRIPTIONS`] subscriptions are kept per group, each expression cut at
//! [`MAX_EXPRESSION`] bytes (they are shown by admin requests, never evaluated from here).

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Weak;

use super::conn::Conn;

/// Subscriptions kept per consumer group (the latest heartbeat's).
pub const MAX_SUBSCRIPTIONS: usize = 256;
/// Bytes of a subscription expression kept (for display).
pub const MAX_EXPRESSION: usize = 1024;

/// One client in a group: where it is connected from and what it runs.
#[derive(Clone, Debug)]
pub struct Member {
    /// The connection it heartbeats over.
    pub conn: u64,
    /// That connection, for notifications (gone once it closed).
    pub link: Weak<Conn>,
    pub addr: SocketAddr,
    /// The client's `language` and `version` header fields (`JAVA`, 499…).
    pub language: String,
    pub version: i32,
}

/// A subscription of a consumer group: a topic and its expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    pub topic: String,
    pub expression: String,
    /// `TAG` or `SQL92`.
    pub expression_type: String,
}

/// What a consumer group's heartbeat says about it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsumerInfo {
    /// `CONSUME_PASSIVELY` (push) or `CONSUME_ACTIVELY` (pull, lite pull).
    pub consume_type: String,
    /// `CLUSTERING` or `BROADCASTING`.
    pub message_model: String,
    pub consume_from_where: String,
    pub subscriptions: Vec<Subscription>,
}

/// A consumer group's members (by client id) and the latest heartbeat's information.
#[derive(Clone, Debug, Default)]
pub struct ConsumerGroup {
    pub members: BTreeMap<String, Member>,
    pub info: ConsumerInfo,
}

/// Consumer and producer groups of the connected clients.
#[derive(Debug, Default)]
pub struct Clients {
    consumers: HashMap<String, ConsumerGroup>,
    producers: HashMap<String, BTreeMap<String, Member>>,
}

impl Clients {
    /// A consumer heartbeat of `client` in `group`; `true` when the client id is new to the
    /// group (its members changed). A known client id on another connection (a reconnect)
    /// moves there without changing the members.
    pub fn consumer_heartbeat(
        &mut self,
        group: &str,
        client: &str,
        member: Member,
        info: ConsumerInfo,
    ) -> bool {
        let g = self.consumers.entry(group.to_string()).or_default();
        g.info = info;
        g.members.insert(client.to_string(), member).is_none()
    }

    /// A producer heartbeat of `client` in `group`.
    pub fn producer_heartbeat(&mut self, group: &str, client: &str, member: Member) {
        self.producers
            .entry(group.to_string())
            .or_default()
            .insert(client.to_string(), member);
    }

    /// `client` leaves consumer `group`; `true` when it was a member.
    pub fn unregister_consumer(&mut self, group: &str, client: &str) -> bool {
        let Some(g) = self.consumers.get_mut(group) else {
            return false;
        };
        let was = g.members.remove(client).is_some();
        if g.members.is_empty() {
            self.consumers.remove(group);
        }
        was
    }

    /// `client` leaves producer `group`.
    pub fn unregister_producer(&mut self, group: &str, client: &str) {
        if let Some(g) = self.producers.get_mut(group) {
            g.remove(client);
            if g.is_empty() {
                self.producers.remove(group);
            }
        }
    }

    /// Connection `conn` closed: its members leave every group. Returns the consumer groups
    /// that still have members and lost one (they are to be notified).
    pub fn conn_closed(&mut self, conn: u64) -> Vec<String> {
        let mut changed = Vec::new();
        self.consumers.retain(|name, g| {
            let before = g.members.len();
            g.members.retain(|_, m| m.conn != conn);
            if g.members.len() != before && !g.members.is_empty() {
                changed.push(name.clone());
            }
            !g.members.is_empty()
        });
        self.producers.retain(|_, g| {
            g.retain(|_, m| m.conn != conn);
            !g.is_empty()
        });
        changed
    }

    /// A consumer group, when a client of it is connected.
    #[must_use]
    pub fn consumer_group(&self, group: &str) -> Option<&ConsumerGroup> {
        self.consumers.get(group)
    }

    /// The members of a producer group.
    #[must_use]
    pub fn producer_group(&self, group: &str) -> Option<&BTreeMap<String, Member>> {
        self.producers.get(group)
    }

    /// The connection of producer client `client` (in any group), as its heartbeats named
    /// it: where a reply to its request message goes (Apache's `ProducerManager.findChannel`).
    #[must_use]
    pub fn producer_conn(&self, client: &str) -> Option<Weak<Conn>> {
        self.producers
            .values()
            .find_map(|g| g.get(client))
            .map(|m| m.link.clone())
    }

    /// The connections of a consumer group's members (to notify), without repeats.
    #[must_use]
    pub fn members(&self, group: &str) -> Vec<Weak<Conn>> {
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for m in self
            .consumers
            .get(group)
            .into_iter()
            .flat_map(|g| g.members.values())
        {
            if !seen.contains(&m.conn) {
                seen.push(m.conn);
                out.push(m.link.clone());
            }
        }
        out
    }

    /// Every consumer group with a connected client, by name.
    pub fn consumer_groups(&self) -> impl Iterator<Item = (&String, &ConsumerGroup)> {
        self.consumers.iter()
    }
}

/// A heartbeat's subscription list as kept: at most [`MAX_SUBSCRIPTIONS`], expressions cut
/// at [`MAX_EXPRESSION`] bytes (on a character boundary).
#[must_use]
pub fn subscriptions(v: Option<&serde_json::Value>) -> Vec<Subscription> {
    let Some(list) = v.and_then(|s| s.as_array()) else {
        return Vec::new();
    };
    let text = |s: &serde_json::Value, k: &str| -> String {
        let t = s.get(k).and_then(|t| t.as_str()).unwrap_or_default();
        let mut end = t.len().min(MAX_EXPRESSION);
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t[..end].to_string()
    };
    list.iter()
        .take(MAX_SUBSCRIPTIONS)
        .map(|s| Subscription {
            topic: text(s, "topic"),
            expression: text(s, "subString"),
            expression_type: match text(s, "expressionType") {
                t if t.is_empty() => "TAG".to_string(),
                t => t,
            },
        })
        .filter(|s| !s.topic.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(conn: u64) -> Member {
        Member {
            conn,
            link: Weak::new(),
            addr: "127.0.0.1:1".parse().unwrap(),
            language: "JAVA".into(),
            version: 499,
        }
    }

    #[test]
    fn members_change_on_new_ids_unregisters_and_closed_connections_only() {
        let mut c = Clients::default();
        let info = ConsumerInfo::default();
        assert!(c.consumer_heartbeat("G", "a", member(1), info.clone()));
        assert!(!c.consumer_heartbeat("G", "a", member(1), info.clone()));
        assert!(c.consumer_heartbeat("G", "b", member(2), info.clone()));
        // A reconnect of a known id is no change, and its old connection closing neither.
        assert!(!c.consumer_heartbeat("G", "a", member(3), info.clone()));
        assert!(c.conn_closed(1).is_empty());
        assert_eq!(c.members("G").len(), 2);
        assert_eq!(c.conn_closed(2), ["G"]);
        assert!(!c.unregister_consumer("G", "b"));
        assert!(c.unregister_consumer("G", "a"));
        assert!(c.consumer_group("G").is_none());
        c.producer_heartbeat("P", "a", member(4));
        assert_eq!(c.producer_group("P").unwrap().len(), 1);
        assert!(c.conn_closed(4).is_empty());
        assert!(c.producer_group("P").is_none());
    }

    #[test]
    fn subscriptions_are_bounded() {
        let subs: Vec<serde_json::Value> = (0..MAX_SUBSCRIPTIONS + 5)
            .map(|i| serde_json::json!({"topic": format!("T{i}"), "subString": "é".repeat(MAX_EXPRESSION)}))
            .collect();
        let v = serde_json::Value::Array(subs);
        let got = subscriptions(Some(&v));
        assert_eq!(got.len(), MAX_SUBSCRIPTIONS);
        assert!(got[0].expression.len() <= MAX_EXPRESSION);
        assert_eq!(got[0].expression_type, "TAG");
    }
}
