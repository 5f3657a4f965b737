//! Routes: the queues of a topic (QueryRoute, QueryAssignment, the queue a send goes to),
//! and the broker each is on (this one, the group's master in cluster mode, or the groups
//! an etcd placement names).

use super::*;

impl Messaging {
    /// The queues of a topic for routes and assignments; `Err` for an invalid or unknown topic.
    pub(super) async fn queues_of(&self, topic: &str) -> Result<u32, Status> {
        rocklet_core::topic::validate_name(topic).map_err(|e| client_error(&e))?;
        let t = topic.to_string();
        let existing = self
            .core
            .inspect(move |b| b.topic_info(&t).map(|i| i.queues.len() as u32))
            .await
            .map_err(|e| core_failure(&e))?;
        if let Some(n) = existing {
            return Ok(n.max(1));
        }
        if let Some(d) = self.cfg.topics.iter().find(|d| d.name == topic) {
            return Ok(d.queues.unwrap_or(self.cfg.core.default_queues));
        }
        if self.cfg.core.auto_create_topics {
            return Ok(self.cfg.core.default_queues);
        }
        Err(client_error(&ClientError::UnknownTopic(topic.into())))
    }

    pub(super) fn broker_of(&self, endpoints: Option<&pb::Endpoints>) -> pb::Broker {
        if let Some(view) = &self.cluster {
            // The group's master, as etcd names it (this node when it is the master).
            return match view.master() {
                Some(m) => broker_at(
                    self.cfg
                        .cluster
                        .as_ref()
                        .map_or("rocklet".into(), |c| c.broker_name.clone()),
                    m.advertise,
                ),
                None => broker_at("rocklet".into(), self.cfg.listen),
            };
        }
        // Answer with the address the client reached us at, so later RPCs go to it too.
        let endpoints = match endpoints {
            Some(e) if !e.addresses.is_empty() => e.clone(),
            _ => pb::Endpoints {
                scheme: if self.cfg.listen.is_ipv4() {
                    pb::AddressScheme::IPv4
                } else {
                    pb::AddressScheme::IPv6
                } as i32,
                addresses: vec![pb::Address {
                    host: self.cfg.listen.ip().to_string(),
                    port: i32::from(self.cfg.listen.port()),
                }],
            },
        };
        pb::Broker {
            name: "rocklet".into(),
            id: 0,
            endpoints: Some(endpoints),
        }
    }

    /// Cluster mode: the queues of every group hosting `topic` (its placement in etcd),
    /// each on its group's master now (groups without one are left out). Without a
    /// placement, this group's queues (HA_NOT_AVAILABLE when `need_master` and the group has
    /// no master now).
    pub(super) async fn routed(
        &self,
        topic: &str,
        endpoints: Option<&pb::Endpoints>,
        need_master: bool,
    ) -> Result<Vec<pb::MessageQueue>, Status> {
        if let Some(view) = &self.cluster {
            if let Some(d) = view.directory.get() {
                rocklet_core::topic::validate_name(topic).map_err(|e| client_error(&e))?;
                if let Some(groups) = d.route(topic, view.master()).await {
                    let mut out = Vec::new();
                    for g in &groups {
                        if let Some(m) = &g.master {
                            out.extend(self.queues_on(
                                topic,
                                g.queues,
                                &broker_at(g.name.clone(), m.advertise),
                            ));
                        }
                    }
                    if out.is_empty() {
                        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
                        return Err(status(
                            Code::HaNotAvailable,
                            format!("HA_NOT_AVAILABLE: no broker group hosting topic `{topic}` ({}) has a master now (elections are under way); retry", names.join(", ")),
                        ));
                    }
                    return Ok(out);
                }
            }
            if need_master && view.master().is_none() {
                // Cluster mode between masters: no route to give yet (clients retry).
                return Err(status(
                    Code::HaNotAvailable,
                    "HA_NOT_AVAILABLE: the broker group has no master now (an election is under way); retry",
                ));
            }
        }
        let n = self.queues_of(topic).await?;
        Ok(self.message_queues(topic, n, endpoints))
    }

    pub(super) fn message_queues(
        &self,
        topic: &str,
        n: u32,
        endpoints: Option<&pb::Endpoints>,
    ) -> Vec<pb::MessageQueue> {
        self.queues_on(topic, n, &self.broker_of(endpoints))
    }

    /// Queues 0..n of `topic` on `broker`.
    pub(super) fn queues_on(
        &self,
        topic: &str,
        n: u32,
        broker: &pb::Broker,
    ) -> Vec<pb::MessageQueue> {
        let types: Vec<i32> = self
            .cfg
            .accepted_types(topic)
            .into_iter()
            .map(|t| match t {
                TopicMessageType::Normal => pb::MessageType::Normal,
                TopicMessageType::Fifo => pb::MessageType::Fifo,
                TopicMessageType::Delay => pb::MessageType::Delay,
                TopicMessageType::Transaction => pb::MessageType::Transaction,
            } as i32)
            .collect();
        (0..n)
            .map(|id| pb::MessageQueue {
                topic: Some(pb::Resource {
                    resource_namespace: String::new(),
                    name: topic.into(),
                }),
                id: id as i32,
                // Read only while mqadmin wipeWritePerm holds the broker's writes.
                permission: if self.core.writable() {
                    pb::Permission::ReadWrite
                } else {
                    pb::Permission::Read
                } as i32,
                broker: Some(broker.clone()),
                accept_message_types: types.clone(),
            })
            .collect()
    }
}

/// A broker of a route: `name` at `at`.
pub(super) fn broker_at(name: String, at: std::net::SocketAddr) -> pb::Broker {
    pb::Broker {
        name,
        id: 0,
        endpoints: Some(pb::Endpoints {
            scheme: if at.is_ipv4() {
                pb::AddressScheme::IPv4
            } else {
                pb::AddressScheme::IPv6
            } as i32,
            addresses: vec![pb::Address {
                host: at.ip().to_string(),
                port: i32::from(at.port()),
            }],
        }),
    }
}
