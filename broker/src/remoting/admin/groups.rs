//! mqadmin's requests about consumer groups across the broker: getConsumerConfig
//! (GET_ALL_SUBSCRIPTIONGROUP_CONFIG, GET_SUBSCRIPTIONGROUP_CONFIG), brokerConsumeStats
//! (GET_BROKER_CONSUME_STATS), deleteSubGroup (DELETE_SUBSCRIPTIONGROUP) and consumerStatus
//! (GET_CONSUMER_RUNNING_INFO, relayed to the client).

use serde_json::json;

use super::{changed, group_topics, offset_table, with_body};
use crate::ops;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::code;
use crate::remoting::codes::status;
use crate::remoting::conn::{lock, Ctx};
use crate::remoting::reply::{core_failure, fail, field, ok, required, Answer};

/// A SubscriptionGroupConfig with what Rocklet keeps of a group ([`group_config`]).
fn config_json(ctx: &Ctx, group: &str, fifo: bool) -> serde_json::Value {
    json!({
        "groupName": group,
        "consumeEnable": true,
        "consumeMessageOrderly": fifo,
        "retryQueueNums": 1,
        "retryMaxTimes": ctx.cfg.core.max_delivery_attempts.saturating_sub(1),
        "brokerId": 0,
        "notifyConsumerIdsChangedEnable": true,
        "groupSysFlag": 0,
    })
}

/// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (getConsumerConfig asks it of every broker, then picks
/// its group): every group the broker knows ([`group_config`]), at most `max_groups`.
pub(super) async fn all_group_configs(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let groups = ctx
        .core
        .inspect(|b| b.group_list())
        .await
        .map_err(|e| core_failure(req, &e))?;
    let table: serde_json::Map<String, serde_json::Value> = groups
        .iter()
        .map(|(g, fifo)| (g.clone(), config_json(ctx, g, *fifo)))
        .collect();
    // RocketMQ's DataVersion: Rocklet keeps no version of its group table; one that never
    // changes would claim nothing changed, so it is left out.
    Ok(with_body(
        req,
        json!({ "subscriptionGroupTable": table }).to_string(),
    ))
}

/// GET_SUBSCRIPTIONGROUP_CONFIG: the group's SubscriptionGroupConfig
/// with what Rocklet keeps of it: its name, whether it is orderly (FIFO), its retries (the
/// broker's `max_delivery_attempts` - 1, as RocketMQ 5 counts `retryMaxTimes`), one retry
/// queue, consumption enabled and members told of changes. What Rocklet has no notion of
/// (broadcast, consume-timeout, the slow-consumption broker) is left out.
/// SUBSCRIPTION_GROUP_NOT_EXIST for a group the broker does not know.
pub(super) async fn group_config(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "group")?.to_string();
    let g = group.clone();
    let (known, fifo) = ctx
        .core
        .inspect(move |b| (b.group_known(&g), b.group_is_fifo(&g)))
        .await
        .map_err(|e| core_failure(req, &e))?;
    if !known {
        return Err(fail(
            req,
            status::SUBSCRIPTION_GROUP_NOT_EXIST,
            format!("subscription group `{group}` does not exist on this broker"),
        ));
    }
    Ok(with_body(req, config_json(ctx, &group, fifo).to_string()))
}

/// GET_BROKER_CONSUME_STATS (brokerConsumeStats): for every group with offsets or receive
/// positions on the broker, its ConsumeStats per topic it consumes (as consumerProgress
/// shows them), and the totals of messages not consumed and in flight. One walk of the
/// broker's offsets and receive positions for the groups ([`rocklet_core::Broker::group_lags`]),
/// then per group and queue what consumerProgress reads.
pub(super) async fn broker_consume_stats(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let groups: Vec<String> = ctx
        .core
        .inspect(|b| {
            let topics = b.topics();
            let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
            let mut g: Vec<String> = b.group_lags(&names).into_iter().map(|l| l.group).collect();
            g.sort();
            g.dedup();
            g
        })
        .await
        .map_err(|e| core_failure(req, &e))?;
    let (mut total, mut inflight) = (0u64, 0u64);
    let mut list = Vec::with_capacity(groups.len());
    for g in &groups {
        let topics = group_topics(ctx, g).await;
        let mut stats = Vec::with_capacity(topics.len());
        for t in topics {
            let table = offset_table(ctx, req, g, std::slice::from_ref(&t)).await?;
            total += table.diff;
            inflight += table.inflight;
            stats.push(format!("{{\"offsetTable\":{}}}", table.map));
        }
        list.push(format!(
            "{{{}:[{}]}}",
            serde_json::Value::String(g.clone()),
            stats.join(",")
        ));
    }
    let addr = ctx.broker_addr.map(|a| a.to_string()).unwrap_or_default();
    Ok(with_body(
        req,
        format!(
            "{{\"brokerAddr\":{},\"consumeStatsList\":[{}],\"totalDiff\":{total},\"totalInflightDiff\":{inflight}}}",
            serde_json::Value::String(addr),
            list.join(",")
        ),
    ))
}

/// DELETE_SUBSCRIPTIONGROUP (deleteSubGroup): deletes the group durably
/// ([`rocklet_core::Broker::delete_group`]): its declaration, committed offsets and receive
/// positions, whatever `cleanOffset` says (Rocklet keeps no group config apart from them:
/// Apache keeps the offsets unless `-r true`), so getConsumerConfig then finds no such
/// group. Receipts its clients hold are no longer redelivered and their acks are refused; a
/// client still connected that commits or receives again starts the group afresh (Apache's
/// broker re-creates a deleted group on the next heartbeat too). A group the broker does
/// not know is answered OK, as Apache answers. Refused by name: a producer group online or
/// with transactions pending. Its retry and dead-letter topics stay (mqadmin -c asks to
/// delete them next: DELETE_TOPIC_IN_BROKER refuses those names, saying so).
pub(super) async fn delete_group(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "groupName")?.to_string();
    if field(req, "cleanOffset").is_some_and(|v| v != "true" && v != "false") {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            "cleanOffset is neither true nor false",
        ));
    }
    let r = ops::delete_group(&ctx.core, group.clone(), true).await;
    if r.is_ok() {
        tracing::info!(group = %group, "consumer group deleted (mqadmin deleteSubGroup)");
    }
    changed(req, r)
}

/// How long a relayed GET_CONSUMER_RUNNING_INFO waits for the client (Apache's broker waits
/// 10 s too; mqadmin waits three times its own timeout for the broker).
pub const RUNNING_INFO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// GET_CONSUMER_RUNNING_INFO (consumerStatus asks it for each client consumerConnection
/// lists): as Apache's broker, the request goes on to the client's own connection and its
/// answer (code, remark and ConsumerRunningInfo body, at most
/// [`crate::remoting::conn::MAX_ANSWER_BODY`] bytes) comes back as the answer: what the
/// client says of itself (its subscriptions, queues, offsets and thread pool), nothing the
/// broker makes up. A client of the group not connected over remoting is refused naming
/// it, as Apache answers (RocketMQ 5 gRPC clients have no running info to ask for: Apache's
/// proxy asks them only for a thread dump); one that does not answer within
/// [`RUNNING_INFO_TIMEOUT`] too.
pub(super) async fn running_info(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let client = required(req, "clientId")?.to_string();
    let jstack = field(req, "jstackEnable").unwrap_or("false");
    if jstack != "true" && jstack != "false" {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            "jstackEnable is neither true nor false",
        ));
    }
    let link = lock(&ctx.clients)
        .consumer_group(&group)
        .and_then(|g| g.members.get(&client))
        .and_then(|m| m.link.upgrade());
    let Some(conn) = link else {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("The Consumer <{group}> <{client}> not online (no client of that id in the group is connected over remoting; RocketMQ 5 gRPC clients keep no running info to relay)"),
        ));
    };
    let mut ext = std::collections::BTreeMap::new();
    ext.insert("consumerGroup".to_string(), group.clone());
    ext.insert("clientId".to_string(), client.clone());
    ext.insert("jstackEnable".to_string(), jstack.to_string());
    let ask = RemotingCommand::request(code::GET_CONSUMER_RUNNING_INFO, ext, Vec::new());
    let Some(answer) = conn.call_for_body(ask, RUNNING_INFO_TIMEOUT).await else {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!(
                "invoke consumer <{group}> <{client}>: no answer within {} s (or it disconnected)",
                RUNNING_INFO_TIMEOUT.as_secs()
            ),
        ));
    };
    let mut r = ok(req);
    r.code = answer.code;
    r.remark = answer.remark;
    r.body = answer.body;
    if r.code == status::SUCCESS {
        Ok(r)
    } else {
        Err(r)
    }
}
