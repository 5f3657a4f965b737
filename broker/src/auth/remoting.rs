//! What each RocketMQ 4 remoting request needs, as Apache RocketMQ's
//! `DefaultAuthorizationContextBuilder` maps it (header field names as the v4 clients send
//! them), checked before the request is handled. A refusal is answered `NO_PERMISSION` (16),
//! the code RocketMQ's broker answers for both failed authentication and the ACL; v4
//! clients raise it as `MQBrokerException` with the remark.
//!
//! | request | needs |
//! |---|---|
//! | GET_ROUTEINFO_BY_TOPIC | Pub, Sub or Get on the topic (a retry topic: Sub or Get on its group); none on the name-server listener, which RocketMQ's name server never authenticates |
//! | SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE | Pub on the topic (a retry topic: Sub on the group) |
//! | END_TRANSACTION | Pub on the topic named, and on the topic the transaction really is of |
//! | PULL_MESSAGE, POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME | Sub on the group and the topic |
//! | QUERY_CONSUMER_OFFSET | Sub or Get on the group and the topic |
//! | UPDATE_CONSUMER_OFFSET | Sub or Update on the group and the topic |
//! | GET_MAX_OFFSET, GET_MIN_OFFSET | Get on the topic |
//! | HEART_BEAT, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ | Sub on each consumer group and its topics |
//! | UNREGISTER_CLIENT | Sub on the consumer group, when named |
//! | GET_CONSUMER_LIST_BY_GROUP | Sub or Get on the group |
//! | CONSUMER_SEND_MSG_BACK | Sub on the group |
//! | LITE_PULL_MESSAGE | Sub on the group and the topic |
//! | mqadmin: UPDATE_AND_CREATE_TOPIC | Create or Update on the topic |
//! | mqadmin: DELETE_TOPIC_IN_BROKER, DELETE_TOPIC_IN_NAMESRV | Delete on the topic |
//! | mqadmin: GET_TOPIC_CONFIG, GET_TOPIC_STATS_INFO, SEARCH_OFFSET_BY_TIMESTAMP, QUERY_TOPIC_CONSUME_BY_WHO, QUERY_MESSAGE | Get on the topic |
//! | mqadmin: VIEW_MESSAGE_BY_ID | Get on the topic of the record at the offset |
//! | mqadmin: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP | Create or Update on the group |
//! | mqadmin: GET_CONSUME_STATS | Get on the group (and the topic, when named) |
//! | mqadmin: GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST | Get on the group |
//! | mqadmin: INVOKE_BROKER_TO_RESET_OFFSET | Update on the group, Get on the topic |
//! | mqadmin: GET_BROKER_CLUSTER_INFO, GET_BROKER_RUNTIME_INFO | Get on the cluster |
//! | mqadmin: GET_ALL_TOPIC_LIST_FROM_NAMESERVER | List on the cluster |
//! | any other request | a super user (rocklet refuses it as unsupported anyway) |

use std::collections::BTreeMap;

use rocklet_core::broker::prop;
use rocklet_core::record;

use super::acl::RETRY_PREFIX;
use super::{Action, Auth, Identity, Need, Protocol, Refusal, Resource};
use crate::remoting::admin::code as admin;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::handlers::{code, Conn, Ctx};

/// RocketMQ's `ResponseCode.NO_PERMISSION`.
pub const NO_PERMISSION: i32 = 16;

const PUB: &[Action] = &[Action::Pub];
const SUB: &[Action] = &[Action::Sub];
const GET: &[Action] = &[Action::Get];
const SUB_GET: &[Action] = &[Action::Sub, Action::Get];
const SUB_UPDATE: &[Action] = &[Action::Sub, Action::Update];
const ROUTE: &[Action] = &[Action::Pub, Action::Sub, Action::Get];
const CREATE_UPDATE: &[Action] = &[Action::Create, Action::Update];
const UPDATE: &[Action] = &[Action::Update];
const DELETE: &[Action] = &[Action::Delete];
const LIST: &[Action] = &[Action::List];

fn field<'a>(ext: &'a BTreeMap<String, String>, k: &str) -> &'a str {
    ext.get(k).map_or("", String::as_str)
}

fn is_retry(topic: &str) -> bool {
    topic.starts_with(RETRY_PREFIX)
}

/// Sub (or `actions`) on the group, and on the topic unless it is a retry topic.
fn group_topic(group: &str, topic: &str, actions: &'static [Action]) -> Vec<Need> {
    let mut n = Vec::with_capacity(2);
    if !is_retry(topic) {
        n.push(Need::new(Resource::topic(topic), actions));
    }
    n.push(Need::new(Resource::group(group), actions));
    n
}

/// Consumer groups and their topics of a HEART_BEAT or (UN)LOCK_BATCH_MQ body.
fn body_needs(req: &RemotingCommand) -> Vec<Need> {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&req.body) else {
        return Vec::new();
    };
    let mut n = Vec::new();
    let topic = |n: &mut Vec<Need>, t: &str| {
        if !t.is_empty() && !is_retry(t) {
            n.push(Need::new(Resource::topic(t), SUB));
        }
    };
    if req.code == code::HEART_BEAT {
        for c in v
            .get("consumerDataSet")
            .and_then(|s| s.as_array())
            .into_iter()
            .flatten()
        {
            let g = c
                .get("groupName")
                .and_then(|g| g.as_str())
                .unwrap_or_default();
            n.push(Need::new(Resource::group(g), SUB));
            for s in c
                .get("subscriptionDataSet")
                .and_then(|s| s.as_array())
                .into_iter()
                .flatten()
            {
                topic(
                    &mut n,
                    s.get("topic").and_then(|t| t.as_str()).unwrap_or_default(),
                );
            }
        }
    } else {
        let g = v
            .get("consumerGroup")
            .and_then(|g| g.as_str())
            .unwrap_or_default();
        n.push(Need::new(Resource::group(g), SUB));
        for q in v
            .get("mqSet")
            .and_then(|s| s.as_array())
            .into_iter()
            .flatten()
        {
            topic(
                &mut n,
                q.get("topic").and_then(|t| t.as_str()).unwrap_or_default(),
            );
        }
    }
    n
}

/// What a request needs, from its header and body (without the transaction lookup).
#[must_use]
pub fn needs(req: &RemotingCommand) -> Vec<Need> {
    let e = &req.ext;
    match req.code {
        code::GET_ROUTEINFO_BY_TOPIC => {
            let t = field(e, "topic");
            if is_retry(t) {
                vec![Need::new(Resource::group(t), SUB_GET)]
            } else {
                vec![Need::new(Resource::topic(t), ROUTE)]
            }
        }
        code::SEND_MESSAGE | code::SEND_MESSAGE_V2 | code::SEND_BATCH_MESSAGE => {
            let (g, t) = if req.code == code::SEND_MESSAGE {
                (field(e, "producerGroup"), field(e, "topic"))
            } else {
                (field(e, "a"), field(e, "b"))
            };
            if is_retry(t) {
                let g = if g.is_empty() { t } else { g };
                vec![Need::new(Resource::group(g), SUB)]
            } else {
                vec![Need::new(Resource::topic(t), PUB)]
            }
        }
        code::END_TRANSACTION => match field(e, "topic") {
            "" => Vec::new(),
            t => vec![Need::new(Resource::topic(t), PUB)],
        },
        code::CONSUMER_SEND_MSG_BACK => vec![Need::new(Resource::group(field(e, "group")), SUB)],
        code::PULL_MESSAGE
        | code::LITE_PULL_MESSAGE
        | code::POP_MESSAGE
        | code::ACK_MESSAGE
        | code::CHANGE_MESSAGE_INVISIBLETIME => {
            group_topic(field(e, "consumerGroup"), field(e, "topic"), SUB)
        }
        code::QUERY_CONSUMER_OFFSET => {
            group_topic(field(e, "consumerGroup"), field(e, "topic"), SUB_GET)
        }
        code::UPDATE_CONSUMER_OFFSET => {
            group_topic(field(e, "consumerGroup"), field(e, "topic"), SUB_UPDATE)
        }
        code::GET_MAX_OFFSET | code::GET_MIN_OFFSET => {
            vec![Need::new(Resource::topic(field(e, "topic")), GET)]
        }
        code::HEART_BEAT | code::LOCK_BATCH_MQ | code::UNLOCK_BATCH_MQ => body_needs(req),
        code::UNREGISTER_CLIENT => match field(e, "consumerGroup") {
            "" => Vec::new(),
            g => vec![Need::new(Resource::group(g), SUB)],
        },
        code::GET_CONSUMER_LIST_BY_GROUP => {
            vec![Need::new(
                Resource::group(field(e, "consumerGroup")),
                SUB_GET,
            )]
        }
        admin::UPDATE_AND_CREATE_TOPIC => topic_need(e, CREATE_UPDATE),
        admin::DELETE_TOPIC_IN_BROKER | admin::DELETE_TOPIC_IN_NAMESRV => topic_need(e, DELETE),
        admin::GET_TOPIC_CONFIG
        | admin::GET_TOPIC_STATS_INFO
        | admin::SEARCH_OFFSET_BY_TIMESTAMP
        | admin::QUERY_TOPIC_CONSUME_BY_WHO
        | admin::QUERY_MESSAGE => topic_need(e, GET),
        // The record's topic is looked up in `check`.
        admin::VIEW_MESSAGE_BY_ID => Vec::new(),
        admin::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => {
            let g = serde_json::from_slice::<serde_json::Value>(&req.body)
                .ok()
                .and_then(|v| v.get("groupName")?.as_str().map(String::from))
                .unwrap_or_default();
            vec![Need::new(Resource::group(&g), CREATE_UPDATE)]
        }
        admin::GET_CONSUME_STATS => {
            let mut n = vec![Need::new(Resource::group(field(e, "consumerGroup")), GET)];
            if !field(e, "topic").is_empty() {
                n.extend(topic_need(e, GET));
            }
            n
        }
        admin::GET_CONSUMER_CONNECTION_LIST => {
            vec![Need::new(Resource::group(field(e, "consumerGroup")), GET)]
        }
        admin::GET_PRODUCER_CONNECTION_LIST => {
            vec![Need::new(Resource::group(field(e, "producerGroup")), GET)]
        }
        admin::INVOKE_BROKER_TO_RESET_OFFSET => {
            let mut n = vec![Need::new(Resource::group(field(e, "group")), UPDATE)];
            n.extend(topic_need(e, GET));
            n
        }
        admin::GET_BROKER_CLUSTER_INFO | admin::GET_BROKER_RUNTIME_INFO => {
            vec![Need::new(Resource::cluster(), GET)]
        }
        admin::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => vec![Need::new(Resource::cluster(), LIST)],
        // Everything else rocklet refuses as unsupported; a super user learns that, others
        // are refused first (no request is let through unmapped).
        _ => vec![Need::new(Resource::cluster(), &[Action::All])],
    }
}

fn topic_need(e: &BTreeMap<String, String>, actions: &'static [Action]) -> Vec<Need> {
    vec![Need::new(Resource::topic(field(e, "topic")), actions)]
}

/// The real topic of a transaction's half message (`None`: no such half).
async fn transaction_topic(ctx: &Ctx, offset: u64) -> Option<String> {
    ctx.core
        .inspect(move |b| {
            let records = b.raw_records(offset, 1).ok()?;
            let (_, bytes) = records.into_iter().next()?;
            match record::decode_trusted(&bytes) {
                Ok(record::Decoded::Record(r)) => r.prop(prop::REAL_TOPIC).map(String::from),
                _ => None,
            }
        })
        .await
        .ok()
        .flatten()
}

fn refusal(req: &RemotingCommand, r: &Refusal) -> RemotingCommand {
    RemotingCommand::response_to(req, NO_PERMISSION, Some(r.message.clone()))
}

/// The topic of the record at a log offset, as consumers see it (`None`: no record there).
async fn record_topic(ctx: &Ctx, offset: u64) -> Option<String> {
    ctx.core
        .inspect(move |b| {
            let records = b.raw_records(offset, 1).ok()?;
            let (at, bytes) = records.into_iter().next()?;
            if at != offset {
                return None;
            }
            match record::decode_trusted(&bytes) {
                Ok(record::Decoded::Record(r)) => Some(
                    r.prop(prop::REAL_TOPIC)
                        .map_or_else(|| String::from(r.topic), String::from),
                ),
                _ => None,
            }
        })
        .await
        .ok()
        .flatten()
}

/// Authenticates and authorizes a request; `Err` is the answer to send instead of handling it.
pub async fn check(ctx: &Ctx, conn: &Conn, req: &RemotingCommand) -> Result<(), RemotingCommand> {
    let auth: &Auth = &ctx.auth;
    if !auth.enabled() {
        return Ok(());
    }
    let namesrv = ctx.broker_addr.map(|a| a.port()) != Some(conn.local().port());
    if namesrv && req.code == code::GET_ROUTEINFO_BY_TOPIC {
        return Ok(());
    }
    let ip = Some(conn.peer.ip());
    let who = field(&req.ext, super::sign::ACCESS_KEY).to_string();
    let id = auth
        .authenticate_remoting(&req.ext, req.version, &req.body)
        .map_err(|r| {
            auth.refused(Protocol::Remoting, &r, &who, ip);
            refusal(req, &r)
        })?;
    let mut n = needs(req);
    if req.code == admin::VIEW_MESSAGE_BY_ID {
        if let Some(offset) = req.ext.get("offset").and_then(|o| o.trim().parse().ok()) {
            if let Some(t) = record_topic(ctx, offset).await {
                n.push(Need::new(Resource::topic(&t), GET));
            }
        }
    }
    if req.code == code::END_TRANSACTION
        && matches!(
            id,
            Identity::User {
                super_user: false,
                ..
            }
        )
    {
        // The topic header is the client's word: the transaction's own topic decides.
        if let Some(offset) = req
            .ext
            .get("commitLogOffset")
            .and_then(|o| o.trim().parse().ok())
        {
            if let Some(t) = transaction_topic(ctx, offset).await {
                n.push(Need::new(Resource::topic(&t), PUB));
            }
        }
    }
    auth.authorize(&id, ip, &n).map_err(|r| {
        auth.refused(Protocol::Remoting, &r, id.name(), ip);
        refusal(req, &r)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(code: i32, ext: &[(&str, &str)], body: &str) -> RemotingCommand {
        RemotingCommand {
            code,
            ext: ext
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn requests_map_to_rocketmq_resources() {
        let n = needs(&req(code::SEND_MESSAGE_V2, &[("a", "pg"), ("b", "T")], ""));
        assert_eq!(n, vec![Need::new(Resource::topic("T"), PUB)]);
        let n = needs(&req(
            code::SEND_MESSAGE_V2,
            &[("a", "cg"), ("b", "%RETRY%cg")],
            "",
        ));
        assert_eq!(n, vec![Need::new(Resource::group("cg"), SUB)]);
        let n = needs(&req(
            code::PULL_MESSAGE,
            &[("consumerGroup", "g"), ("topic", "T")],
            "",
        ));
        assert_eq!(
            n,
            vec![
                Need::new(Resource::topic("T"), SUB),
                Need::new(Resource::group("g"), SUB)
            ]
        );
        let n = needs(&req(
            code::UPDATE_CONSUMER_OFFSET,
            &[("consumerGroup", "g"), ("topic", "%RETRY%g")],
            "",
        ));
        assert_eq!(n, vec![Need::new(Resource::group("g"), SUB_UPDATE)]);
        let hb = r#"{"clientID":"c","producerDataSet":[{"groupName":"p"}],"consumerDataSet":[{"groupName":"g","subscriptionDataSet":[{"topic":"T"},{"topic":"%RETRY%g"}]}]}"#;
        let n = needs(&req(code::HEART_BEAT, &[], hb));
        assert_eq!(
            n,
            vec![
                Need::new(Resource::group("g"), SUB),
                Need::new(Resource::topic("T"), SUB)
            ]
        );
        let n = needs(&req(code::GET_ROUTEINFO_BY_TOPIC, &[("topic", "T")], ""));
        assert_eq!(n, vec![Need::new(Resource::topic("T"), ROUTE)]);
        let n = needs(&req(
            code::END_TRANSACTION,
            &[("topic", "T"), ("producerGroup", "pg")],
            "",
        ));
        assert_eq!(n, vec![Need::new(Resource::topic("T"), PUB)]);
    }

    #[test]
    fn admin_requests_need_their_resources_and_nothing_passes_unmapped() {
        let t = |code| needs(&req(code, &[("topic", "T")], ""));
        assert_eq!(
            t(admin::DELETE_TOPIC_IN_BROKER),
            vec![Need::new(Resource::topic("T"), DELETE)]
        );
        assert_eq!(
            t(admin::UPDATE_AND_CREATE_TOPIC),
            vec![Need::new(Resource::topic("T"), CREATE_UPDATE)]
        );
        assert_eq!(
            t(admin::QUERY_MESSAGE),
            vec![Need::new(Resource::topic("T"), GET)]
        );
        let n = needs(&req(
            admin::INVOKE_BROKER_TO_RESET_OFFSET,
            &[("topic", "T"), ("group", "g")],
            "",
        ));
        assert_eq!(
            n,
            vec![
                Need::new(Resource::group("g"), UPDATE),
                Need::new(Resource::topic("T"), GET)
            ]
        );
        let n = needs(&req(
            admin::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            &[],
            r#"{"groupName":"g"}"#,
        ));
        assert_eq!(n, vec![Need::new(Resource::group("g"), CREATE_UPDATE)]);
        let n = needs(&req(
            code::LITE_PULL_MESSAGE,
            &[("consumerGroup", "g"), ("topic", "T")],
            "",
        ));
        assert_eq!(n.len(), 2, "{n:?}");
        // A code rocklet does not serve: only a super user gets as far as its refusal.
        assert_eq!(
            needs(&req(25, &[], "")),
            vec![Need::new(Resource::cluster(), &[Action::All])]
        );
    }
}
