//! What each RocketMQ 5 RPC needs, as Apache RocketMQ's `DefaultAuthorizationContextBuilder`
//! maps it, and the check the service runs before handling a call.
//!
//! A retry or dead-letter topic (`%RETRY%g`, `%DLQ%g`) belongs to its group: an action on
//! it is needed on `Group:g` instead, whatever the entries grant on topics.
//!
//! | RPC | needs |
//! |---|---|
//! | QueryRoute | Pub or Sub on the topic |
//! | Heartbeat | consumers: Sub on the group; producers: authentication only |
//! | SendMessage | Pub on each topic of the batch; a retry or dead-letter topic is refused for every normal user |
//! | EndTransaction | Pub on the topic (whose `%TXN%` group the core then requires the transaction to be of) |
//! | ReceiveMessage, QueryAssignment | Sub on the group and on the topic |
//! | AckMessage, ForwardMessageToDeadLetterQueue | Sub on the group and on the topic; each receipt handle must be of that topic (`INVALID_RECEIPT_HANDLE` otherwise, with or without authentication), and the core requires its delivery to that group to be in flight |
//! | ChangeInvisibleDuration | Sub on the group (and the topic, when named) |
//! | NotifyClientTermination | Sub on the group, when named |
//! | Telemetry settings | publishing: Pub on each topic; subscription: Sub on the group and each topic |
//!
//! A call that fails authentication is answered `UNAUTHORIZED` (40100), one the ACL refuses
//! `FORBIDDEN` (40300); the official clients raise `UnauthorizedException` and
//! `ForbiddenException` for them (Apache RocketMQ's proxy answers 40100 for both).

use std::net::IpAddr;

use tonic::Request as GrpcRequest;

use super::{Action, Auth, Identity, Need, Protocol, Refusal, Resource};
use crate::pb::v2::{self as pb, Code, Status};

const PUB: &[Action] = &[Action::Pub];
const SUB: &[Action] = &[Action::Sub];
const PUB_OR_SUB: &[Action] = &[Action::Pub, Action::Sub];

fn name(r: Option<&pb::Resource>) -> &str {
    r.map_or("", |r| r.name.as_str())
}

fn sub_group_topic(group: Option<&pb::Resource>, topic: Option<&pb::Resource>) -> Vec<Need> {
    let mut n = vec![Need::new(Resource::group(name(group)), SUB)];
    if !name(topic).is_empty() {
        n.push(Need::topic(name(topic), SUB));
    }
    n
}

/// The needs of a request message.
pub trait Needs {
    fn needs(&self) -> Vec<Need>;

    /// Why a normal user's request is refused whatever its entries grant, if it is.
    fn refused_outright(&self) -> Option<String> {
        None
    }
}

impl Needs for pb::QueryRouteRequest {
    fn needs(&self) -> Vec<Need> {
        vec![Need::topic(name(self.topic.as_ref()), PUB_OR_SUB)]
    }
}

impl Needs for pb::HeartbeatRequest {
    fn needs(&self) -> Vec<Need> {
        match self.client_type() {
            pb::ClientType::PushConsumer
            | pb::ClientType::SimpleConsumer
            | pb::ClientType::PullConsumer => {
                vec![Need::new(Resource::group(name(self.group.as_ref())), SUB)]
            }
            _ => Vec::new(),
        }
    }
}

impl Needs for pb::SendMessageRequest {
    fn needs(&self) -> Vec<Need> {
        let mut topics: Vec<&str> = self
            .messages
            .iter()
            .map(|m| name(m.topic.as_ref()))
            .collect();
        topics.sort_unstable();
        topics.dedup();
        topics.into_iter().map(|t| Need::topic(t, PUB)).collect()
    }

    /// A retry or dead-letter topic: only the broker writes there.
    fn refused_outright(&self) -> Option<String> {
        self.messages.iter().find_map(|m| {
            let t = name(m.topic.as_ref());
            let g = super::acl::owner_group(t)?;
            Some(format!(
                "FORBIDDEN: `{t}` belongs to group `{g}`: only the broker writes to it, never a client's SendMessage"
            ))
        })
    }
}

impl Needs for pb::EndTransactionRequest {
    fn needs(&self) -> Vec<Need> {
        vec![Need::topic(name(self.topic.as_ref()), PUB)]
    }
}

impl Needs for pb::ReceiveMessageRequest {
    fn needs(&self) -> Vec<Need> {
        let topic = self.message_queue.as_ref().and_then(|q| q.topic.as_ref());
        let mut n = sub_group_topic(self.group.as_ref(), topic);
        if name(topic).is_empty() {
            n.push(Need::new(Resource::topic(""), SUB));
        }
        n
    }
}

impl Needs for pb::AckMessageRequest {
    fn needs(&self) -> Vec<Need> {
        sub_group_topic(self.group.as_ref(), self.topic.as_ref())
    }
}

impl Needs for pb::ForwardMessageToDeadLetterQueueRequest {
    fn needs(&self) -> Vec<Need> {
        sub_group_topic(self.group.as_ref(), self.topic.as_ref())
    }
}

impl Needs for pb::QueryAssignmentRequest {
    fn needs(&self) -> Vec<Need> {
        sub_group_topic(self.group.as_ref(), self.topic.as_ref())
    }
}

impl Needs for pb::ChangeInvisibleDurationRequest {
    fn needs(&self) -> Vec<Need> {
        sub_group_topic(self.group.as_ref(), self.topic.as_ref())
    }
}

impl Needs for pb::NotifyClientTerminationRequest {
    fn needs(&self) -> Vec<Need> {
        match self.group.as_ref() {
            Some(g) if !g.name.is_empty() => vec![Need::new(Resource::group(&g.name), SUB)],
            _ => Vec::new(),
        }
    }
}

impl Needs for pb::Settings {
    fn needs(&self) -> Vec<Need> {
        match &self.pub_sub {
            Some(pb::settings::PubSub::Publishing(p)) => {
                p.topics.iter().map(|t| Need::topic(&t.name, PUB)).collect()
            }
            Some(pb::settings::PubSub::Subscription(s)) => {
                let mut n = vec![Need::new(Resource::group(name(s.group.as_ref())), SUB)];
                for e in &s.subscriptions {
                    n.push(Need::topic(name(e.topic.as_ref()), SUB));
                }
                n
            }
            None => Vec::new(),
        }
    }
}

/// The status a refusal is answered with.
#[must_use]
pub fn status(r: &Refusal) -> Status {
    let code = if r.failure == super::Failure::Forbidden {
        Code::Forbidden
    } else {
        Code::Unauthorized
    };
    Status {
        code: code as i32,
        message: r.message.clone(),
    }
}

/// The peer's address of a call.
#[must_use]
pub fn peer<T>(req: &GrpcRequest<T>) -> Option<IpAddr> {
    req.remote_addr().map(|a| a.ip())
}

/// Authenticates a call from its metadata.
pub fn authenticate<T>(
    auth: &Auth,
    req: &GrpcRequest<T>,
    proto: Protocol,
) -> Result<Identity, Refusal> {
    authenticate_with(auth, req.metadata().as_ref(), peer(req), proto)
}

/// Authenticates a call from its HTTP/2 headers alone, before any of its body is read (the
/// [gate](crate::gate)): a call refused here holds nothing.
pub fn authenticate_headers(
    auth: &Auth,
    headers: &http::HeaderMap,
    peer: Option<IpAddr>,
) -> Result<Identity, Refusal> {
    authenticate_with(auth, headers, peer, Protocol::Grpc)
}

fn authenticate_with(
    auth: &Auth,
    headers: &http::HeaderMap,
    peer: Option<IpAddr>,
    proto: Protocol,
) -> Result<Identity, Refusal> {
    let get = |h: &str| headers.get(h).and_then(|v| v.to_str().ok());
    auth.authenticate_headers(|h| get(h).map(String::from))
        .inspect_err(|r| {
            let who = get(super::sign::AUTHORIZATION)
                .and_then(|a| super::sign::parse_authorization(a).ok())
                .map(|a| a.access_key)
                .unwrap_or_default();
            auth.refused(proto, r, &who, peer);
        })
}

/// Authenticates a call and checks what its message needs; `Err` is the status to answer.
pub fn check<T: Needs>(auth: &Auth, req: &GrpcRequest<T>) -> Result<Identity, Status> {
    if !auth.enabled() {
        return Ok(Identity::Open);
    }
    let id = authenticate(auth, req, Protocol::Grpc).map_err(|r| status(&r))?;
    let normal = matches!(
        id,
        Identity::User {
            super_user: false,
            ..
        }
    );
    if let Some(message) = req.get_ref().refused_outright().filter(|_| normal) {
        let r = Refusal {
            failure: super::Failure::Forbidden,
            message,
        };
        auth.refused(Protocol::Grpc, &r, id.name(), peer(req));
        return Err(status(&r));
    }
    authorize(auth, &id, peer(req), &req.get_ref().needs())?;
    Ok(id)
}

/// Checks `needs` for an authenticated identity; `Err` is the status to answer.
pub fn authorize(
    auth: &Auth,
    id: &Identity,
    ip: Option<IpAddr>,
    needs: &[Need],
) -> Result<(), Status> {
    auth.authorize(id, ip, needs).map_err(|r| {
        auth.refused(Protocol::Grpc, &r, id.name(), ip);
        status(&r)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(topic: &str) -> pb::Message {
        pb::Message {
            topic: Some(pb::Resource {
                name: topic.into(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn res(name: &str) -> Option<pb::Resource> {
        Some(pb::Resource {
            name: name.into(),
            ..Default::default()
        })
    }

    #[test]
    fn retry_and_dead_letter_topics_are_their_groups_and_never_sent_to() {
        let r = pb::ReceiveMessageRequest {
            group: res("gC"),
            message_queue: Some(pb::MessageQueue {
                topic: res("%RETRY%gB"),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            r.needs(),
            vec![
                Need::new(Resource::group("gC"), SUB),
                Need::new(Resource::group("gB"), SUB)
            ]
        );
        let send = pb::SendMessageRequest {
            messages: vec![msg("T"), msg("%DLQ%gB")],
        };
        let why = send.refused_outright().expect("refused");
        assert!(why.contains("`%DLQ%gB` belongs to group `gB`"), "{why}");
        let send = pb::SendMessageRequest {
            messages: vec![msg("T")],
        };
        assert_eq!(send.refused_outright(), None);
        assert_eq!(send.needs(), vec![Need::new(Resource::topic("T"), PUB)]);
    }
}
