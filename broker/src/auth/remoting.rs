//! What each RocketMQ 4 remoting request needs, as Apache RocketMQ's
//! `DefaultAuthorizationContextBuilder` maps it (header field names as the v4 clients send
//! them), checked before the request is handled. A refusal is answered `NO_PERMISSION` (16),
//! the code RocketMQ's broker answers for both failed authentication and the ACL; v4
//! clients raise it as `MQBrokerException` with the remark.
//!
//! A retry or dead-letter topic (`%RETRY%g`, `%DLQ%g`) belongs to its group: wherever a
//! request needs an action on such a topic, it needs it on `Group:g` instead, whatever the
//! entries grant on topics (`Topic:*` included) and whichever group the request names.
//!
//! | request | needs |
//! |---|---|
//! | GET_ROUTEINFO_BY_TOPIC | Pub, Sub or Get on the topic (a retry or dead-letter topic: Sub or Get on its group); none on the name-server listener, which RocketMQ's name server never authenticates |
//! | SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE | Pub on the topic; to a retry or dead-letter topic refused for every normal user (the broker writes there, by send-back) |
//! | END_TRANSACTION | Pub on the topic named, and on the topic the transaction really is of |
//! | PULL_MESSAGE, LITE_PULL_MESSAGE, POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME | Sub on the group and the topic |
//! | QUERY_CONSUMER_OFFSET | Sub or Get on the group and the topic |
//! | UPDATE_CONSUMER_OFFSET | Sub or Update on the group and the topic |
//! | GET_MAX_OFFSET, GET_MIN_OFFSET | Get on the topic |
//! | HEART_BEAT, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ | Sub on each consumer group and its topics |
//! | UNREGISTER_CLIENT | Sub on the consumer group, when named |
//! | CHECK_CLIENT_CONFIG | Sub on the group and the subscription's topic (body) |
//! | GET_CONSUMER_LIST_BY_GROUP | Sub or Get on the group |
//! | CONSUMER_SEND_MSG_BACK | Sub on the group; the record at the offset must be a message delivered to the group (in its own retry or dead-letter topic, or in a topic the group consumes: a connected client subscribes to it or the group committed an offset in it), and Sub on the topic its content came from (`RETRY_TOPIC` of a retried message) |
//! | mqadmin: UPDATE_AND_CREATE_TOPIC | Create or Update on the topic |
//! | mqadmin: DELETE_TOPIC_IN_BROKER, DELETE_TOPIC_IN_NAMESRV | Delete on the topic |
//! | mqadmin: GET_TOPIC_CONFIG, GET_TOPIC_STATS_INFO, SEARCH_OFFSET_BY_TIMESTAMP, QUERY_TOPIC_CONSUME_BY_WHO, QUERY_MESSAGE | Get on the topic |
//! | mqadmin: VIEW_MESSAGE_BY_ID | Get on the topic of the record at the offset (a retried or dead message: on its group and on the topic it came from) |
//! | mqadmin: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP | Create or Update on the group |
//! | mqadmin: GET_CONSUME_STATS | Get on the group (and the topic, when named) |
//! | mqadmin: GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST, GET_CONSUMER_RUNNING_INFO | Get on the group |
//! | mqadmin: DELETE_SUBSCRIPTIONGROUP | Delete on the group |
//! | mqadmin: INVOKE_BROKER_TO_RESET_OFFSET | Update on the group, Get on the topic |
//! | mqadmin: GET_BROKER_CLUSTER_INFO, GET_BROKER_RUNTIME_INFO | Get on the cluster |
//! | mqadmin: GET_ALL_TOPIC_LIST_FROM_NAMESERVER | List on the cluster |
//! | any other request | a super user (rocklet refuses it as unsupported anyway) |

use std::collections::BTreeMap;

use rocklet_core::broker::prop;
use rocklet_core::record;

use super::acl::owner_group;
use super::{Action, Auth, Failure, Identity, Need, Protocol, Refusal, Resource};
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::code;
pub use crate::remoting::codes::status::NO_PERMISSION;
use crate::remoting::conn::{Conn, Ctx};

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

/// The needs without repeats, in their first order.
fn dedup(n: Vec<Need>) -> Vec<Need> {
    let mut out: Vec<Need> = Vec::with_capacity(n.len());
    for x in n {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// Sub (or `actions`) on the topic (a retry or dead-letter topic: on the group it belongs
/// to) and on the group.
fn group_topic(group: &str, topic: &str, actions: &'static [Action]) -> Vec<Need> {
    dedup(vec![
        Need::topic(topic, actions),
        Need::new(Resource::group(group), actions),
    ])
}

/// Consumer groups and their topics of a HEART_BEAT or (UN)LOCK_BATCH_MQ body.
fn body_needs(req: &RemotingCommand) -> Vec<Need> {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&req.body) else {
        return Vec::new();
    };
    let mut n = Vec::new();
    let topic = |n: &mut Vec<Need>, t: &str| {
        if !t.is_empty() {
            n.push(Need::topic(t, SUB));
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
    dedup(n)
}

/// What a request needs, from its header and body (without the transaction lookup).
#[must_use]
pub fn needs(req: &RemotingCommand) -> Vec<Need> {
    let e = &req.ext;
    match req.code {
        code::GET_ROUTEINFO_BY_TOPIC => {
            let t = field(e, "topic");
            match owner_group(t) {
                Some(g) => vec![Need::new(Resource::group(g), SUB_GET)],
                None => vec![Need::new(Resource::topic(t), ROUTE)],
            }
        }
        code::SEND_MESSAGE
        | code::SEND_MESSAGE_V2
        | code::SEND_BATCH_MESSAGE
        | code::SEND_REPLY_MESSAGE
        | code::SEND_REPLY_MESSAGE_V2 => {
            // A retry or dead-letter topic: Pub on its group, which no entry grants but `*`
            // (and `check` refuses a normal user's plain SEND there first).
            vec![Need::topic(send_topic(req), PUB)]
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
        code::GET_MAX_OFFSET | code::GET_MIN_OFFSET => topic_need(e, GET),
        code::HEART_BEAT | code::LOCK_BATCH_MQ | code::UNLOCK_BATCH_MQ => body_needs(req),
        code::CHECK_CLIENT_CONFIG => {
            let v = serde_json::from_slice::<serde_json::Value>(&req.body).unwrap_or_default();
            let text = |v: Option<&serde_json::Value>| {
                v.and_then(|s| s.as_str()).unwrap_or_default().to_string()
            };
            let topic = text(v.get("subscriptionData").and_then(|s| s.get("topic")));
            group_topic(&text(v.get("group")), &topic, SUB)
        }
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
        code::UPDATE_AND_CREATE_TOPIC => topic_need(e, CREATE_UPDATE),
        code::DELETE_TOPIC_IN_BROKER | code::DELETE_TOPIC_IN_NAMESRV => topic_need(e, DELETE),
        code::GET_TOPIC_CONFIG
        | code::GET_TOPIC_STATS_INFO
        | code::SEARCH_OFFSET_BY_TIMESTAMP
        | code::QUERY_TOPIC_CONSUME_BY_WHO
        | code::QUERY_MESSAGE => topic_need(e, GET),
        // The record's topic is looked up in `check`.
        code::VIEW_MESSAGE_BY_ID => Vec::new(),
        code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => {
            let g = serde_json::from_slice::<serde_json::Value>(&req.body)
                .ok()
                .and_then(|v| v.get("groupName")?.as_str().map(String::from))
                .unwrap_or_default();
            vec![Need::new(Resource::group(&g), CREATE_UPDATE)]
        }
        code::GET_CONSUME_STATS => {
            let mut n = vec![Need::new(Resource::group(field(e, "consumerGroup")), GET)];
            if !field(e, "topic").is_empty() {
                n.extend(topic_need(e, GET));
            }
            n
        }
        code::GET_CONSUMER_CONNECTION_LIST => {
            vec![Need::new(Resource::group(field(e, "consumerGroup")), GET)]
        }
        code::GET_PRODUCER_CONNECTION_LIST => {
            vec![Need::new(Resource::group(field(e, "producerGroup")), GET)]
        }
        code::GET_CONSUMER_RUNNING_INFO => {
            vec![Need::new(Resource::group(field(e, "consumerGroup")), GET)]
        }
        code::DELETE_SUBSCRIPTIONGROUP => {
            vec![Need::new(Resource::group(field(e, "groupName")), DELETE)]
        }
        code::INVOKE_BROKER_TO_RESET_OFFSET => {
            let mut n = vec![Need::new(Resource::group(field(e, "group")), UPDATE)];
            n.extend(topic_need(e, GET));
            n
        }
        code::GET_BROKER_CLUSTER_INFO | code::GET_BROKER_RUNTIME_INFO => {
            vec![Need::new(Resource::cluster(), GET)]
        }
        code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => vec![Need::new(Resource::cluster(), LIST)],
        // Everything else rocklet refuses as unsupported; a super user learns that, others
        // are refused first (no request is let through unmapped).
        _ => vec![Need::new(Resource::cluster(), &[Action::All])],
    }
}

fn topic_need(e: &BTreeMap<String, String>, actions: &'static [Action]) -> Vec<Need> {
    vec![Need::topic(field(e, "topic"), actions)]
}

/// The topic a SEND_MESSAGE(_V2) or SEND_BATCH_MESSAGE names.
fn send_topic(req: &RemotingCommand) -> &str {
    if matches!(req.code, code::SEND_MESSAGE | code::SEND_REPLY_MESSAGE) {
        field(&req.ext, "topic")
    } else {
        field(&req.ext, "b")
    }
}

/// Why a normal user's request is refused whatever its entries grant, if it is: a plain
/// SEND to a retry or dead-letter topic. Writing there is the broker's own business
/// (CONSUMER_SEND_MSG_BACK copies a message the group was delivered); a client's SEND could
/// inject a message another group's consumers take for a retry of theirs. (The v4 Java
/// client sends there when its send-back fails, and its orderly consumer for a message past
/// `maxReconsumeTimes`; refused, each consumes the message again locally.)
#[must_use]
pub fn refused_outright(req: &RemotingCommand) -> Option<String> {
    if !matches!(
        req.code,
        code::SEND_MESSAGE | code::SEND_MESSAGE_V2 | code::SEND_BATCH_MESSAGE
    ) {
        return None;
    }
    let t = send_topic(req);
    let g = owner_group(t)?;
    Some(format!(
        "FORBIDDEN: `{t}` belongs to group `{g}`: only the broker writes to it \
         (CONSUMER_SEND_MSG_BACK of a message the group was delivered), never a client's SEND"
    ))
}

/// The real topic of a transaction's half message (`None`: no such half).
async fn transaction_topic(ctx: &Ctx, offset: u64) -> Option<String> {
    ctx.core
        .read_log(move |b| {
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

/// The record at a log offset, as consumers see it: the topic of its queue, and for a
/// message in a retry or dead-letter topic the topic it came from (`RETRY_TOPIC`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub topic: String,
    pub original: Option<String>,
}

impl Placed {
    /// The topic its content came from: the original of a retried or dead message, else
    /// its own.
    #[must_use]
    pub fn source(&self) -> &str {
        match (&self.original, owner_group(&self.topic)) {
            (Some(o), Some(_)) => o,
            _ => &self.topic,
        }
    }

    /// Reading it needs: its topic (a retry or dead-letter topic: its group), and the topic
    /// its content came from.
    fn needs(&self, actions: &'static [Action]) -> Vec<Need> {
        dedup(vec![
            Need::topic(&self.topic, actions),
            Need::topic(self.source(), actions),
        ])
    }
}

/// The record at a log offset (`None`: no record starts there).
async fn record_at(ctx: &Ctx, offset: u64) -> Option<Placed> {
    ctx.core
        .read_log(move |b| {
            let records = b.raw_records(offset, 1).ok()?;
            let (at, bytes) = records.into_iter().next()?;
            if at != offset {
                return None;
            }
            match record::decode_trusted(&bytes) {
                Ok(record::Decoded::Record(r)) => Some(Placed {
                    topic: r
                        .prop(prop::REAL_TOPIC)
                        .map_or_else(|| String::from(r.topic), String::from),
                    original: r.prop(prop::RETRY_TOPIC).map(String::from),
                }),
                _ => None,
            }
        })
        .await
        .ok()
        .flatten()
}

/// Whether consumer group `group` consumes `topic`: a connected client of it subscribes to
/// it, or it has committed an offset in one of its queues.
async fn consumes(ctx: &Ctx, group: &str, topic: &str) -> bool {
    let subscribed = ctx
        .clients
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .consumer_group(group)
        .is_some_and(|g| g.info.subscriptions.iter().any(|s| s.topic == topic));
    if subscribed {
        return true;
    }
    let (g, t) = (group.to_string(), topic.to_string());
    ctx.core
        .inspect(move |b| {
            b.topic_queue_count(&t)
                .is_some_and(|n| (0..n).any(|q| b.committed_offset(&g, &t, q).is_some()))
        })
        .await
        .unwrap_or(false)
}

/// What a CONSUMER_SEND_MSG_BACK of the record at `offset` by `group` needs beyond Sub on
/// the group, or why it is refused: the record must be a message delivered to the group (in
/// its own retry or dead-letter topic, or in a topic it consumes), and the caller needs Sub
/// on the topic its content came from. Without this a user with Sub on its own group could
/// copy any message of the log into its retry topic and read it there.
pub async fn send_back_needs(ctx: &Ctx, group: &str, offset: u64) -> Result<Vec<Need>, String> {
    let Some(r) = record_at(ctx, offset).await else {
        return Err(format!(
            "FORBIDDEN: CONSUMER_SEND_MSG_BACK: no message starts at offset {offset}"
        ));
    };
    let delivered = match owner_group(&r.topic) {
        Some(owner) => owner == group,
        None => consumes(ctx, group, &r.topic).await,
    };
    if !delivered {
        return Err(format!(
            "FORBIDDEN: CONSUMER_SEND_MSG_BACK: the message at offset {offset} is in topic `{}`, which group `{group}` does not consume; only a message delivered to the group may be sent back",
            r.topic
        ));
    }
    Ok(r.needs(SUB))
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
    let normal = matches!(
        id,
        Identity::User {
            super_user: false,
            ..
        }
    );
    let refuse = |message: String| {
        let r = Refusal {
            failure: Failure::Forbidden,
            message,
        };
        auth.refused(Protocol::Remoting, &r, id.name(), ip);
        refusal(req, &r)
    };
    if normal {
        if let Some(why) = refused_outright(req) {
            return Err(refuse(why));
        }
    }
    let mut n = needs(req);
    if req.code == code::VIEW_MESSAGE_BY_ID {
        if let Some(offset) = req.ext.get("offset").and_then(|o| o.trim().parse().ok()) {
            if let Some(r) = record_at(ctx, offset).await {
                n.extend(r.needs(GET));
            }
        }
    }
    let authorize = |n: &[Need]| {
        auth.authorize(&id, ip, n).map_err(|r| {
            auth.refused(Protocol::Remoting, &r, id.name(), ip);
            refusal(req, &r)
        })
    };
    if req.code == code::CONSUMER_SEND_MSG_BACK && normal {
        // Sub on the group first; then the record. An offset that is no number is refused
        // by the handler before anything is copied.
        authorize(&n)?;
        if let Some(offset) = req.ext.get("offset").and_then(|o| o.trim().parse().ok()) {
            let group = field(&req.ext, "group");
            n = send_back_needs(ctx, group, offset).await.map_err(refuse)?;
        }
    }
    if req.code == code::END_TRANSACTION && normal {
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
    authorize(&n)
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
    fn a_retry_or_dead_letter_topic_needs_its_own_group() {
        // Another group's retry topic: Sub on that group, whichever group the request names.
        for code in [
            code::PULL_MESSAGE,
            code::LITE_PULL_MESSAGE,
            code::POP_MESSAGE,
            code::ACK_MESSAGE,
            code::CHANGE_MESSAGE_INVISIBLETIME,
        ] {
            for t in ["%RETRY%gB", "%DLQ%gB"] {
                let n = needs(&req(code, &[("consumerGroup", "gA"), ("topic", t)], ""));
                assert_eq!(
                    n,
                    vec![
                        Need::new(Resource::group("gB"), SUB),
                        Need::new(Resource::group("gA"), SUB)
                    ],
                    "{code} {t}"
                );
            }
        }
        let n = needs(&req(
            code::QUERY_CONSUMER_OFFSET,
            &[("consumerGroup", "gA"), ("topic", "%RETRY%gB")],
            "",
        ));
        assert!(
            n.contains(&Need::new(Resource::group("gB"), SUB_GET)),
            "{n:?}"
        );
        // The group's own: one need.
        let n = needs(&req(
            code::PULL_MESSAGE,
            &[("consumerGroup", "gA"), ("topic", "%RETRY%gA")],
            "",
        ));
        assert_eq!(n, vec![Need::new(Resource::group("gA"), SUB)]);
        // A heartbeat subscribing to another group's retry topic.
        let hb = r#"{"clientID":"c","consumerDataSet":[{"groupName":"gA","subscriptionDataSet":[{"topic":"%RETRY%gB"}]}]}"#;
        let n = needs(&req(code::HEART_BEAT, &[], hb));
        assert!(n.contains(&Need::new(Resource::group("gB"), SUB)), "{n:?}");
        // Routes and offsets of a dead-letter topic.
        let n = needs(&req(
            code::GET_ROUTEINFO_BY_TOPIC,
            &[("topic", "%DLQ%gB")],
            "",
        ));
        assert_eq!(n, vec![Need::new(Resource::group("gB"), SUB_GET)]);
        let n = needs(&req(code::GET_MAX_OFFSET, &[("topic", "%RETRY%gB")], ""));
        assert_eq!(n, vec![Need::new(Resource::group("gB"), GET)]);
    }

    #[test]
    fn a_clients_send_to_a_retry_or_dead_letter_topic_is_refused_outright() {
        for (code, ext) in [
            (
                code::SEND_MESSAGE_V2,
                [("a", "CLIENT_INNER_PRODUCER"), ("b", "%RETRY%g")],
            ),
            (
                code::SEND_MESSAGE,
                [("producerGroup", "pg"), ("topic", "%RETRY%g")],
            ),
            (code::SEND_BATCH_MESSAGE, [("a", "pg"), ("b", "%DLQ%g")]),
        ] {
            let why = refused_outright(&req(code, &ext, "")).expect("refused");
            assert!(why.contains("belongs to group `g`"), "{why}");
        }
        assert_eq!(
            refused_outright(&req(code::SEND_MESSAGE_V2, &[("a", "pg"), ("b", "T")], "")),
            None
        );
        // Reading is not writing.
        assert_eq!(
            refused_outright(&req(
                code::PULL_MESSAGE,
                &[("consumerGroup", "g"), ("topic", "%RETRY%g")],
                ""
            )),
            None
        );
    }

    #[test]
    fn a_placed_records_content_comes_from_its_original_topic() {
        let retried = Placed {
            topic: "%RETRY%g".into(),
            original: Some("T".into()),
        };
        assert_eq!(retried.source(), "T");
        assert_eq!(
            retried.needs(SUB),
            vec![
                Need::new(Resource::group("g"), SUB),
                Need::new(Resource::topic("T"), SUB)
            ]
        );
        // A RETRY_TOPIC property on a message of a plain topic is the producer's word.
        let plain = Placed {
            topic: "T".into(),
            original: Some("Secret".into()),
        };
        assert_eq!(plain.source(), "T");
        assert_eq!(plain.needs(GET), vec![Need::new(Resource::topic("T"), GET)]);
    }

    #[test]
    fn admin_requests_need_their_resources_and_nothing_passes_unmapped() {
        let t = |code| needs(&req(code, &[("topic", "T")], ""));
        assert_eq!(
            t(code::DELETE_TOPIC_IN_BROKER),
            vec![Need::new(Resource::topic("T"), DELETE)]
        );
        assert_eq!(
            t(code::UPDATE_AND_CREATE_TOPIC),
            vec![Need::new(Resource::topic("T"), CREATE_UPDATE)]
        );
        assert_eq!(
            t(code::QUERY_MESSAGE),
            vec![Need::new(Resource::topic("T"), GET)]
        );
        let n = needs(&req(
            code::INVOKE_BROKER_TO_RESET_OFFSET,
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
            code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            &[],
            r#"{"groupName":"g"}"#,
        ));
        assert_eq!(n, vec![Need::new(Resource::group("g"), CREATE_UPDATE)]);
        let n = needs(&req(
            code::DELETE_SUBSCRIPTIONGROUP,
            &[("groupName", "g")],
            "",
        ));
        assert_eq!(n, vec![Need::new(Resource::group("g"), DELETE)]);
        let n = needs(&req(
            code::GET_CONSUMER_RUNNING_INFO,
            &[("consumerGroup", "g"), ("clientId", "c")],
            "",
        ));
        assert_eq!(n, vec![Need::new(Resource::group("g"), GET)]);
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
