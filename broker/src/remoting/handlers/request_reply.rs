//! Request/reply messages (RocketMQ's `DefaultMQProducer.request()`): the request is an
//! ordinary send carrying CORRELATION_ID, REPLY_TO_CLIENT and TTL (the broker adds CLUSTER,
//! [`crate::remoting::message::incoming`]); the consumer answers with
//! `MessageUtil.createReplyMessage`, sent as SEND_REPLY_MESSAGE(_V2) to the reply topic
//! `<cluster>_REPLY_TOPIC`, and the broker pushes it (PUSH_REPLY_MESSAGE_TO_CLIENT) to the
//! connection of the client REPLY_TO_CLIENT names, as its producer heartbeats registered it.
//!
//! A reply is not stored: the replier hears SUCCESS only once the requester's client took the
//! reply, and an error naming why otherwise (no such client connected, its answer not in
//! time); it then retries or gives up as its send does.

use std::time::Duration;

use rocklet_core::record;

use super::*;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::{code, status};
use crate::remoting::conn::{Conn, Ctx};
use crate::remoting::message::{parse_properties, REPLY_TO_CLIENT};
use crate::remoting::reply::*;

/// The reply topic's suffix (`MixAll.REPLY_TOPIC_POSTFIX`): `<cluster>_REPLY_TOPIC`.
pub(crate) const REPLY_TOPIC_SUFFIX: &str = "_REPLY_TOPIC";
/// The property a pushed reply carries with the time of the push.
const PUSH_REPLY_TIME: &str = "PUSH_REPLY_TIME";
/// How long the requester's client may take to take a pushed reply (the v4 client's default
/// send timeout: the replier stops waiting for its own answer then).
pub(crate) const PUSH_REPLY_TIMEOUT: Duration = Duration::from_secs(3);

/// This broker's reply topic (one queue, never stored: replies are pushed).
#[must_use]
pub(crate) fn reply_topic() -> String {
    format!("{BROKER_NAME}{REPLY_TOPIC_SUFFIX}")
}

/// SEND_REPLY_MESSAGE(_V2): pushes the reply to the requester's connection.
pub(crate) async fn send_reply(ctx: &Ctx, conn: &Conn, req: &RemotingCommand) -> Answer {
    let h = &super::produce::long_names(req);
    let topic = required(h, "topic")?;
    let queue_id: i32 = number_or(h, "queueId", 0)?;
    let props = parse_properties(field(h, "properties").unwrap_or_default());
    let Some(client) = props
        .iter()
        .find(|(k, _)| k == REPLY_TO_CLIENT)
        .map(|(_, v)| v.clone())
    else {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("reply message properties[{REPLY_TO_CLIENT}] is null: send replies made by MessageUtil.createReplyMessage"),
        ));
    };
    let target = lock(&ctx.clients)
        .producer_conn(&client)
        .and_then(|w| w.upgrade());
    let Some(target) = target else {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("push reply message fail, channel of <{client}> not found (the requester is not connected to this broker)"),
        ));
    };
    let now = ctx.clock.now();
    let mut encoded = Vec::new();
    for (k, v) in props.iter().filter(|(k, _)| k != PUSH_REPLY_TIME) {
        record::push_prop(&mut encoded, k, v);
    }
    record::push_prop(&mut encoded, PUSH_REPLY_TIME, &now.to_string());
    let mut ext = std::collections::BTreeMap::new();
    let copy = |ext: &mut std::collections::BTreeMap<String, String>, k: &str, default: &str| {
        ext.insert(k.to_string(), field(h, k).unwrap_or(default).to_string());
    };
    copy(&mut ext, "producerGroup", "");
    copy(&mut ext, "defaultTopic", "TBW102");
    copy(&mut ext, "defaultTopicQueueNums", "4");
    copy(&mut ext, "sysFlag", "0");
    copy(&mut ext, "bornTimestamp", "0");
    copy(&mut ext, "flag", "0");
    copy(&mut ext, "reconsumeTimes", "0");
    copy(&mut ext, "unitMode", "false");
    ext.insert("topic".into(), topic.to_string());
    ext.insert("queueId".into(), queue_id.to_string());
    ext.insert(
        "properties".into(),
        String::from_utf8_lossy(&encoded).into_owned(),
    );
    ext.insert("bornHost".into(), conn.peer.to_string());
    ext.insert("storeHost".into(), ctx.store_host().to_string());
    ext.insert("storeTimestamp".into(), now.to_string());
    let push = RemotingCommand::request(code::PUSH_REPLY_MESSAGE_TO_CLIENT, ext, req.body.clone());
    match target.call(push, PUSH_REPLY_TIMEOUT).await {
        Some(a) if a.code == status::SUCCESS => {
            // As Apache: nothing was stored, the ids say so.
            let mut r = ok(req);
            r.ext.insert("msgId".into(), "0".into());
            r.ext.insert("queueId".into(), queue_id.to_string());
            r.ext.insert("queueOffset".into(), "0".into());
            r.ext.insert("MSG_REGION".into(), "DefaultRegion".into());
            r.ext.insert("TRACE_ON".into(), "false".into());
            Ok(r)
        }
        Some(a) => Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!(
                "push reply message to {client} fail: its client answered {} ({})",
                a.code,
                a.remark.unwrap_or_default()
            ),
        )),
        None => Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!(
                "push reply message to {client} fail: no answer within {} ms (or it disconnected)",
                PUSH_REPLY_TIMEOUT.as_millis()
            ),
        )),
    }
}
