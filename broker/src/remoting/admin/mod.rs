//! The request codes behind `mqadmin` (Apache's AdminBrokerProcessor and the name server's
//! cluster and topic lists), mapped onto the core's tables: nothing here decides anything
//! about messages. One broker, `rocklet`, in one cluster, `rocklet`.
//!
//! Served: UPDATE_AND_CREATE_TOPIC (17), GET_TOPIC_CONFIG (351), GET_TOPIC_STATS_INFO (202),
//! GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), GET_BROKER_CLUSTER_INFO (106),
//! GET_BROKER_RUNTIME_INFO (28), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
//! GET_CONSUME_STATS (208), GET_CONSUMER_CONNECTION_LIST (203),
//! GET_PRODUCER_CONNECTION_LIST (204), QUERY_TOPIC_CONSUME_BY_WHO (300), VIEW_MESSAGE_BY_ID
//! (33), QUERY_MESSAGE (12: queryMsgByKey and queryMsgByUniqueKey, from the core's key
//! index), SEARCH_OFFSET_BY_TIMESTAMP (29), INVOKE_BROKER_TO_RESET_OFFSET (222),
//! DELETE_TOPIC_IN_BROKER (215), DELETE_TOPIC_IN_NAMESRV (216), the name server's KV config
//! for order topics (PUT_KV_CONFIG 100, GET_KV_CONFIG 101, DELETE_KV_CONFIG 102: [`kv`]) and
//! the codes of
//! [`broker`] and [`groups`] (DELETE_SUBSCRIPTIONGROUP and GET_CONSUMER_RUNNING_INFO among
//! them). Every other admin code is
//! refused naming it ([`super::codes::unserved_name`]).
//!
//! Changes (topics and groups created or deleted) are durable before they are answered,
//! whatever the flush mode ([`crate::driver::CoreHandle::change`]).
//!
//! Costs: per request, lookups by name and at most one record read per queue (last
//! timestamps), a binary search over a queue for a time (O(log n) reads), a walk of the
//! topic table for a group's topics (in memory, bounded by `max_topics`), or a key lookup
//! (at most [`MAX_QUERY`] messages read, of at most 4,096 index entries walked).
//!
//! Bodies are RocketMQ's fastjson: maps keyed by a MessageQueue are written with the object
//! itself as the key (`{{"brokerName":…,"queueId":0,"topic":…}:{…}}`), which fastjson reads.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use rocklet_core::topic;
use rocklet_core::TopicInfo;
use serde_json::{json, Value};

use super::clients::Member;
use super::codec::RemotingCommand;
use super::codes::{code, status};
use super::conn::{lock, Ctx};
use super::reply::{core_failure, fail, field, json_body, number, number_or, ok, required, Answer};
use super::BROKER_NAME;
use crate::ops::{self, OpError};
use query::{offset_at, query_cq, query_message, search_offset, view_message};

mod broker;
mod groups;
mod kv;
mod query;
pub mod resets;

/// Handles an admin request; `None` when the code is no admin request rocklet knows.
pub async fn handle(ctx: &Ctx, req: &RemotingCommand) -> Option<Answer> {
    Some(match req.code {
        code::UPDATE_AND_CREATE_TOPIC => update_topic(ctx, req).await,
        code::GET_TOPIC_CONFIG => topic_config(ctx, req).await,
        code::GET_TOPIC_STATS_INFO => topic_stats(ctx, req).await,
        code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => topic_list(ctx, req).await,
        code::GET_BROKER_CLUSTER_INFO => broker::cluster_info(ctx, req).await,
        code::WIPE_WRITE_PERM_OF_BROKER => broker::write_perm(ctx, req, false).await,
        code::ADD_WRITE_PERM_OF_BROKER => broker::write_perm(ctx, req, true).await,
        code::GET_BROKER_CONFIG => broker::broker_config(ctx, req),
        code::UPDATE_BROKER_CONFIG => broker::update_broker_config(ctx, req),
        code::GET_NAMESRV_CONFIG => broker::namesrv_config(ctx, req),
        code::GET_SUBSCRIPTIONGROUP_CONFIG => groups::group_config(ctx, req).await,
        code::GET_ALL_SUBSCRIPTIONGROUP_CONFIG => groups::all_group_configs(ctx, req).await,
        code::GET_BROKER_CONSUME_STATS => groups::broker_consume_stats(ctx, req).await,
        code::DELETE_SUBSCRIPTIONGROUP => groups::delete_group(ctx, req).await,
        code::GET_CONSUMER_RUNNING_INFO => groups::running_info(ctx, req).await,
        code::QUERY_CONSUME_QUEUE => query_cq(ctx, req).await,
        code::GET_BROKER_RUNTIME_INFO => runtime_info(ctx, req).await,
        code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => update_group(ctx, req).await,
        code::GET_CONSUME_STATS => consume_stats(ctx, req).await,
        code::GET_CONSUMER_CONNECTION_LIST => consumer_connections(ctx, req),
        code::GET_PRODUCER_CONNECTION_LIST => producer_connections(ctx, req),
        code::QUERY_TOPIC_CONSUME_BY_WHO => consumed_by(ctx, req).await,
        code::VIEW_MESSAGE_BY_ID => view_message(ctx, req).await,
        code::SEARCH_OFFSET_BY_TIMESTAMP => search_offset(ctx, req).await,
        code::INVOKE_BROKER_TO_RESET_OFFSET => reset_offset(ctx, req).await,
        code::DELETE_TOPIC_IN_BROKER => delete_topic(ctx, req, false).await,
        code::DELETE_TOPIC_IN_NAMESRV => delete_topic(ctx, req, true).await,
        code::QUERY_MESSAGE => query_message(ctx, req).await,
        code::PUT_KV_CONFIG => kv::put(ctx, req).await,
        code::GET_KV_CONFIG => kv::get(ctx, req).await,
        code::DELETE_KV_CONFIG => kv::delete(ctx, req).await,
        _ => return None,
    })
}

/// A MessageQueue as fastjson writes it (also as a map key).
fn mq(topic: &str, queue_id: u32) -> String {
    json!({ "brokerName": BROKER_NAME, "queueId": queue_id, "topic": topic }).to_string()
}

/// A fastjson map keyed by MessageQueue objects: `{{mq}:{value},…}`.
fn mq_map(entries: &[(String, u32, Value)]) -> String {
    let mut s = String::from("{");
    for (i, (t, q, v)) in entries.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{}:{}", mq(t, *q), v);
    }
    s.push('}');
    s
}

pub(super) fn with_body(req: &RemotingCommand, body: impl Into<Vec<u8>>) -> RemotingCommand {
    let mut r = ok(req);
    r.body = body.into();
    r
}

pub(super) async fn topic_info(
    ctx: &Ctx,
    req: &RemotingCommand,
    name: &str,
) -> Result<TopicInfo, RemotingCommand> {
    let n = name.to_string();
    match ctx.core.inspect(move |b| b.topic_info(&n)).await {
        Ok(Some(t)) => Ok(t),
        Ok(None) => Err(fail(
            req,
            status::TOPIC_NOT_EXIST,
            format!("topic `{name}` does not exist on this broker"),
        )),
        Err(e) => Err(core_failure(req, &e)),
    }
}

/// UPDATE_AND_CREATE_TOPIC (mqadmin updateTopic): creates the topic, or grows it, and sets
/// its `order` flag as sent (durably, [`rocklet_core::Broker::set_topic_order`]). The core
/// has one queue count per topic, read and write permission always and every message type
/// on an auto-created or updated topic, so what cannot be kept is refused by name.
async fn update_topic(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let name = required(req, "topic")?.to_string();
    let read: u32 = number_or(req, "readQueueNums", ctx.cfg.core.default_queues)?;
    let write: u32 = number_or(req, "writeQueueNums", read)?;
    let perm: u32 = number_or(req, "perm", 6)?;
    if read != write {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("readQueueNums {read} and writeQueueNums {write} differ: rocklet topics have one queue count"),
        ));
    }
    let order = match field(req, "order") {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(v) => {
            return Err(fail(
                req,
                status::SYSTEM_ERROR,
                format!("order `{v}` is neither true nor false"),
            ))
        }
    };
    if perm != 6 {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("perm {perm} is not supported: rocklet topics are readable and writable (6)"),
        ));
    }
    if let Some(a) = field(req, "attributes").filter(|a| !a.trim().is_empty()) {
        // `+message.type=FIFO` and the like: rocklet topics take every message type.
        for attr in a.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let key = attr
                .trim_start_matches(['+', '-'])
                .split('=')
                .next()
                .unwrap_or("");
            if key != "message.type" {
                return Err(fail(
                    req,
                    status::SYSTEM_ERROR,
                    format!("topic attribute `{key}` is not supported by rocklet (message.type is accepted: every type is)"),
                ));
            }
        }
    }
    let r = match order {
        // updateTopic sends the topic config's `order` (Apache keeps it on the topic; -o
        // true then puts the order conf to the name server: PUT_KV_CONFIG, [`kv`]).
        Some(order) => ops::create_topic_with_order(&ctx.core, name, read, order).await,
        None => ops::create_topic(&ctx.core, name, read).await,
    };
    changed(req, r)
}

/// The answer to an operator action ([`crate::ops`]): OK, its refusal, or the core's failure.
fn changed(req: &RemotingCommand, r: Result<(), OpError>) -> Answer {
    match r {
        Ok(()) => Ok(ok(req)),
        Err(e @ (OpError::Refused(_) | OpError::Unreadable(_))) => {
            Err(fail(req, status::SYSTEM_ERROR, e.to_string()))
        }
        Err(OpError::Failed(e)) => Err(core_failure(req, &e)),
    }
}

fn topic_config_json(t: &TopicInfo, order: bool) -> Value {
    json!({
        "topicName": t.name,
        "readQueueNums": t.queues.len(),
        "writeQueueNums": t.queues.len(),
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": order,
        "attributes": {},
    })
}

/// GET_TOPIC_CONFIG: the topic's config (TopicConfigAndQueueMapping, no static mapping).
async fn topic_config(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let name = required(req, "topic")?;
    let t = topic_info(ctx, req, name).await?;
    let n = name.to_string();
    let order = ctx
        .core
        .inspect(move |b| b.topic_order(&n).is_some_and(|o| o.order))
        .await
        .map_err(|e| core_failure(req, &e))?;
    Ok(with_body(req, topic_config_json(&t, order).to_string()))
}

/// Store time of the message at `offset` of a queue (`None`: nothing readable there).
pub(super) async fn store_time(ctx: &Ctx, topic: &str, queue_id: u32, offset: u64) -> Option<u64> {
    let t = topic.to_string();
    ctx.core
        .read_log(move |b| {
            b.browse(&t, queue_id, offset, 1)
                .ok()
                .and_then(|m| m.first().map(|m| m.store_timestamp))
        })
        .await
        .ok()
        .flatten()
}

/// GET_TOPIC_STATS_INFO (topicStatus): per queue its first and next offsets and the store
/// time of its last message (left out for an empty queue, and the topic's put TPS, which
/// Rocklet does not measure per topic, too: not reported as 0).
async fn topic_stats(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let t = topic_info(ctx, req, required(req, "topic")?).await?;
    let mut entries = Vec::with_capacity(t.queues.len());
    for &(q, next, _) in &t.queues {
        let n = t.name.clone();
        let min = ctx
            .core
            .inspect(move |b| b.queue_min_offset(&n, q))
            .await
            .map_err(|e| core_failure(req, &e))?
            .unwrap_or(0);
        let mut s = json!({ "minOffset": min, "maxOffset": next });
        if next > 0 {
            if let Some(at) = store_time(ctx, &t.name, q, next - 1).await {
                s["lastUpdateTimestamp"] = json!(at);
            }
        }
        entries.push((t.name.clone(), q, s));
    }
    Ok(with_body(
        req,
        format!("{{\"offsetTable\":{}}}", mq_map(&entries)),
    ))
}

/// GET_ALL_TOPIC_LIST_FROM_NAMESERVER (topicList): every consumer-visible topic.
async fn topic_list(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let names: Vec<String> = ctx
        .core
        .inspect(|b| b.topics().into_iter().map(|t| t.name).collect())
        .await
        .map_err(|e| core_failure(req, &e))?;
    Ok(with_body(req, json!({ "topicList": names }).to_string()))
}

/// GET_BROKER_RUNTIME_INFO (brokerStatus, clusterList): the broker's counters as RocketMQ's
/// KVTable names them. Measured: the disk ratio and capacity of the data directory's file
/// system, the log's offsets and its oldest store time ([`crate::disk`]), and put and get TPS
/// over 10 s, 60 s and 600 s ([`crate::rates`]); what rocklet does not measure (thread-pool
/// queues, the page-cache lock, today's and yesterday's morning totals, TPS without the
/// metrics sampler) is left out, not reported as 0.
async fn runtime_info(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let r = ctx
        .core
        .inspect(|b| {
            (
                b.stats(),
                b.log_end(),
                b.pending_transaction_count(),
                b.pending_delay_count(),
                b.now(),
            )
        })
        .await
        .map_err(|e| core_failure(req, &e))?;
    let (stats, log_end, halves, delays, now) = r;
    let (disk, rates) = match &ctx.metrics {
        Some(m) => {
            let pulled = m.pulled.load(std::sync::atomic::Ordering::Relaxed);
            let c = crate::rates::Counts {
                put: stats.messages_stored,
                get: stats.received + pulled,
            };
            let rates = m.rates.per_second(std::time::Instant::now(), c);
            (m.disk.read(&ctx.core).await, Some(rates))
        }
        // A context without the broker's metrics has no sampler: no rate is known.
        None => (
            crate::disk::DiskGauge::default().read(&ctx.core).await,
            None,
        ),
    };
    let disk = disk.map_err(|e| core_failure(req, &e))?;
    let mut t = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        t.insert(k.to_string(), v);
    };
    put(
        "brokerVersionDesc",
        format!("rocklet {}", env!("CARGO_PKG_VERSION")),
    );
    put("brokerVersion", "499".into());
    put("brokerActive", "true".into());
    put("msgPutTotalTodayNow", stats.messages_stored.to_string());
    put("msgGetTotalTodayNow", stats.received.to_string());
    if let Some(rates) = rates {
        let gets = crate::rates::kv(rates.map(|r| r.1));
        put("putTps", crate::rates::kv(rates.map(|r| r.0)));
        // Every message read is handed out: found and transferred are the same.
        put("getFoundTps", gets.clone());
        put("getTransferredTps", gets);
    }
    put("commitLogMaxOffset", log_end.to_string());
    put(
        "commitLogMinOffset",
        disk.oldest_base.unwrap_or(log_end).to_string(),
    );
    put("commitLogDiskRatio", disk.commit_log_disk_ratio());
    if let Some(f) = disk.fs {
        put(
            "commitLogDirCapacity",
            format!(
                "Total : {}, Free : {}.",
                crate::disk::human_bytes(f.total),
                crate::disk::human_bytes(f.free)
            ),
        );
    }
    // RocketMQ's -1: no message in the log.
    put(
        "earliestMessageTimeStamp",
        disk.oldest_store_ms
            .map_or_else(|| "-1".to_string(), |t| t.to_string()),
    );
    put("halfMessagesPending", halves.to_string());
    put("delayMessagesPending", delays.to_string());
    put("transactionsCommitted", stats.committed.to_string());
    put("transactionsRolledBack", stats.rolled_back.to_string());
    // Apache's timer log: mqadmin clusterList parses these five (Long, Float) and prints a
    // stack trace when one is missing. Rocklet has no timer log to read behind or congest
    // (its delayed messages wait in the core's deadline table: `delayMessagesPending`), so
    // those are 0 by construction; its timer TPS are not measured: NaN, which parses and
    // shows as not known.
    put("timerReadBehind", "0".into());
    put("timerOffsetBehind", "0".into());
    put("timerCongestNum", "0".into());
    put("timerEnqueueTps", "NaN".into());
    put("timerDequeueTps", "NaN".into());
    put("brokerNow", now.to_string());
    put(
        "flushMode",
        format!("{:?}", ctx.cfg.core.flush).to_uppercase(),
    );
    Ok(with_body(req, json!({ "table": t }).to_string()))
}

/// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (updateSubGroup): declares the group in the log;
/// `consumeMessageOrderly` (`-o true`) makes it a FIFO group. Of the rest of
/// SubscriptionGroupConfig only the name is kept (retries are the broker's
/// max_delivery_attempts, consumption is always enabled).
async fn update_group(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let v = json_body(req)?;
    let name = v
        .get("groupName")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if name.is_empty() {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            "the body lacks `groupName`",
        ));
    }
    let fifo = v.get("consumeMessageOrderly").and_then(Value::as_bool) == Some(true);
    changed(req, ops::declare_group(&ctx.core, name, fifo).await)
}

/// The topics a group consumes: its connected members' subscriptions, the topics it has
/// committed offsets in or received from (RocketMQ 5 gRPC consumers and pop consumers),
/// and its retry topic if it exists.
pub(super) async fn group_topics(ctx: &Ctx, group: &str) -> Vec<TopicInfo> {
    let subscribed: Vec<String> = lock(&ctx.clients)
        .consumer_group(group)
        .map(|g| {
            g.info
                .subscriptions
                .iter()
                .map(|s| s.topic.clone())
                .collect()
        })
        .unwrap_or_default();
    let g = group.to_string();
    ctx.core
        .inspect(move |b| {
            let retry = topic::retry(&g);
            b.topics()
                .into_iter()
                .filter(|t| {
                    t.name == retry
                        || subscribed.contains(&t.name)
                        || t.queues.iter().any(|q| {
                            b.committed_offset(&g, &t.name, q.0).is_some()
                                || b.pop_position(&g, &t.name, q.0).is_some()
                        })
                })
                .collect()
        })
        .await
        .unwrap_or_default()
}

/// GET_CONSUME_STATS (consumerProgress): per queue of the group's topics (or of `topic`)
/// the broker's and the group's offsets, and when the last consumed message was stored.
/// A pulling group's consumer offset is its committed one; a receiving group's (RocketMQ 5
/// gRPC, pop) is the first offset it has not acked, and its pull offset the next it hands
/// out (mqadmin shows the difference as in flight). A queue the group never consumed from
/// has offset 0, as Apache answers; what Rocklet does not know is left out: the store time
/// when nothing was consumed, and the consume TPS (not measured per group).
async fn consume_stats(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topics = match field(req, "topic").filter(|t| !t.is_empty()) {
        Some(t) => vec![topic_info(ctx, req, t).await?],
        None => group_topics(ctx, &group).await,
    };
    let table = offset_table(ctx, req, &group, &topics).await?;
    Ok(with_body(req, format!("{{\"offsetTable\":{}}}", table.map)))
}

/// A group's offsets in some topics, as GET_CONSUME_STATS's offsetTable writes them.
pub(super) struct OffsetTable {
    /// The fastjson map of MessageQueue to OffsetWrapper.
    pub map: String,
    /// Messages not yet consumed (broker offset - consumer offset), over every queue.
    pub diff: u64,
    /// Messages handed out and not acked (pull offset - consumer offset).
    pub inflight: u64,
}

/// Per queue of `topics`, the broker's and `group`'s offsets ([`consume_stats`]).
pub(super) async fn offset_table(
    ctx: &Ctx,
    req: &RemotingCommand,
    group: &str,
    topics: &[TopicInfo],
) -> Result<OffsetTable, RemotingCommand> {
    let mut entries = Vec::new();
    let (mut diff, mut inflight) = (0, 0);
    for t in topics {
        for &(q, next, _) in &t.queues {
            let (g, n) = (group.to_string(), t.name.clone());
            let (committed, pop) = ctx
                .core
                .inspect(move |b| (b.committed_offset(&g, &n, q), b.pop_position(&g, &n, q)))
                .await
                .map_err(|e| core_failure(req, &e))?;
            let (consumed, pulled) = match (committed, pop) {
                (Some(c), _) => (c, c),
                (None, Some((unacked, next))) => (unacked, next),
                (None, None) => (0, 0),
            };
            diff += next.saturating_sub(consumed);
            inflight += pulled.saturating_sub(consumed);
            let mut w = json!({
                "brokerOffset": next,
                "consumerOffset": consumed,
                "pullOffset": pulled,
            });
            if consumed > 0 {
                if let Some(at) = store_time(ctx, &t.name, q, consumed - 1).await {
                    w["lastTimestamp"] = json!(at);
                }
            }
            entries.push((t.name.clone(), q, w));
        }
    }
    Ok(OffsetTable {
        map: mq_map(&entries),
        diff,
        inflight,
    })
}

fn connection(client: &str, m: &Member) -> Value {
    json!({
        "clientId": client,
        "clientAddr": m.addr.to_string(),
        "language": if m.language.is_empty() { "JAVA" } else { m.language.as_str() },
        "version": m.version,
    })
}

fn or<'a>(v: &'a str, default: &'a str) -> &'a str {
    if v.is_empty() {
        default
    } else {
        v
    }
}

/// GET_CONSUMER_CONNECTION_LIST (consumerConnection): the group's connected clients and
/// their subscriptions; status::CONSUMER_NOT_ONLINE when none is connected, as Apache answers.
fn consumer_connections(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?;
    let clients = lock(&ctx.clients);
    let Some(g) = clients.consumer_group(group) else {
        return Err(fail(
            req,
            status::CONSUMER_NOT_ONLINE,
            format!("the consumer group[{group}] not online"),
        ));
    };
    let connections: Vec<Value> = g.members.iter().map(|(c, m)| connection(c, m)).collect();
    let subscriptions: serde_json::Map<String, Value> = g
        .info
        .subscriptions
        .iter()
        .map(|s| {
            (
                s.topic.clone(),
                json!({
                    "topic": s.topic,
                    "subString": s.expression,
                    "expressionType": s.expression_type,
                    "tagsSet": [],
                    "codeSet": [],
                    "subVersion": 0,
                    "classFilterMode": false,
                }),
            )
        })
        .collect();
    let body = json!({
        "connectionSet": connections,
        "subscriptionTable": subscriptions,
        "consumeType": or(&g.info.consume_type, "CONSUME_PASSIVELY"),
        "messageModel": or(&g.info.message_model, "CLUSTERING"),
        "consumeFromWhere": or(&g.info.consume_from_where, "CONSUME_FROM_LAST_OFFSET"),
    });
    Ok(with_body(req, body.to_string()))
}

/// GET_PRODUCER_CONNECTION_LIST (producerConnection): the group's connected producers.
fn producer_connections(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "producerGroup")?;
    let clients = lock(&ctx.clients);
    let Some(g) = clients.producer_group(group) else {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("the producer group[{group}] not exist"),
        ));
    };
    let connections: Vec<Value> = g.iter().map(|(c, m)| connection(c, m)).collect();
    Ok(with_body(
        req,
        json!({ "connectionSet": connections }).to_string(),
    ))
}

/// QUERY_TOPIC_CONSUME_BY_WHO: the groups that consume the topic, online (connected
/// clients subscribed to it) or not (committed offsets in its queues).
async fn consumed_by(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let name = required(req, "topic")?.to_string();
    let n = name.clone();
    let mut groups = ctx
        .core
        .inspect(move |b| b.groups_of_topic(&n))
        .await
        .map_err(|e| core_failure(req, &e))?;
    groups.extend(
        lock(&ctx.clients)
            .consumer_groups()
            .filter(|(_, g)| g.info.subscriptions.iter().any(|s| s.topic == name))
            .map(|(n, _)| n.clone()),
    );
    groups.sort();
    groups.dedup();
    Ok(with_body(req, json!({ "groupList": groups }).to_string()))
}

/// DELETE_TOPIC_IN_BROKER and DELETE_TOPIC_IN_NAMESRV (mqadmin deleteTopic sends both, the
/// broker's first): the topic is deleted durably (its records stay in the log, its name
/// starts afresh). The name server's is answered OK when the broker's already deleted it.
///
/// A group's retry and dead-letter topics (`%RETRY%g`, `%DLQ%g`, which deleteSubGroup -c
/// asks to delete after the group) are kept, refused saying so: their messages stay
/// readable (a dead letter is a message a user may need).
async fn delete_topic(ctx: &Ctx, req: &RemotingCommand, namesrv: bool) -> Answer {
    let name = required(req, "topic")?.to_string();
    if name.starts_with(topic::RETRY_PREFIX) || name.starts_with(topic::DLQ_PREFIX) {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("rocklet keeps a group's retry and dead-letter topics: `{name}` is not deleted (its messages stay readable; deleteSubGroup deletes the group's offsets)"),
        ));
    }
    changed(req, ops::delete_topic(&ctx.core, name, namesrv).await)
}

/// INVOKE_BROKER_TO_RESET_OFFSET (resetOffsetByTime): as Apache 5.5's broker (its
/// `useServerSideResetOffset`, on by default), the offsets of the time (`timestamp` -1: the
/// queues' ends) are committed on the broker at once, whether a client of the group is
/// connected or not; an offset after the group's is kept only with `isForce`. The group's
/// connected clients are then told (RESET_CONSUMER_CLIENT_OFFSET), and their commits of
/// their old offsets are dropped until they pull from the new ones ([`resets`]).
async fn reset_offset(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let name = required(req, "topic")?.to_string();
    let group = required(req, "group")?.to_string();
    let ts: i64 = number(req, "timestamp")?;
    let force = field(req, "isForce") != Some("false");
    let t = topic_info(ctx, req, &name).await?;
    let online = !lock(&ctx.clients).members(&group).is_empty();
    let mut entries = Vec::with_capacity(t.queues.len());
    for &(q, next, _) in &t.queues {
        let at = match u64::try_from(ts) {
            Ok(ts) => offset_at(ctx, &t, q, ts).await.unwrap_or(next),
            Err(_) => next,
        };
        let (g, n) = (group.clone(), name.clone());
        let committed = ctx
            .core
            .inspect(move |b| b.committed_offset(&g, &n, q))
            .await
            .map_err(|e| core_failure(req, &e))?
            .unwrap_or(0);
        let offset = if force || at < committed {
            at
        } else {
            committed
        };
        entries.push((name.clone(), q, json!(offset)));
    }
    // The group's offsets are reset here at once (consumerProgress shows them right after)
    // and, while clients are connected, held against their commits of their old offsets
    // until they pull from the new ones ([`resets`]); then the clients are told.
    if online {
        let mut pending = lock(&ctx.resets);
        if !pending.room_for(entries.len()) {
            return Err(fail(
                req,
                status::SYSTEM_BUSY,
                format!(
                    "{} offset resets are pending (at most {}): retry once the groups have taken theirs",
                    pending.len(),
                    resets::MAX_PENDING_RESETS
                ),
            ));
        }
        for (_, q, offset) in &entries {
            pending.set(&group, &name, *q, offset.as_u64().unwrap_or(0));
        }
    }
    for (_, q, offset) in &entries {
        let offset = offset.as_u64().unwrap_or(0);
        match ctx
            .core
            .commit_offset(group.clone(), name.clone(), *q, offset)
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(fail(
                    req,
                    status::SYSTEM_ERROR,
                    format!(
                    "resetting group `{group}` in queue {q} of `{name}` to offset {offset}: {e}"
                ),
                ))
            }
            Err(e) => return Err(core_failure(req, &e)),
        }
    }
    let body = format!("{{\"offsetTable\":{}}}", mq_map(&entries));
    let mut ext = BTreeMap::new();
    ext.insert("topic".to_string(), name.clone());
    ext.insert("group".to_string(), group.clone());
    ext.insert("timestamp".to_string(), ts.to_string());
    ext.insert("isForce".to_string(), force.to_string());
    let members = lock(&ctx.clients).members(&group);
    for m in members.iter().filter_map(std::sync::Weak::upgrade) {
        m.push(RemotingCommand::request(
            code::RESET_CONSUMER_CLIENT_OFFSET,
            ext.clone(),
            body.clone().into_bytes(),
        ));
    }
    Ok(with_body(req, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_queue_maps_are_written_as_fastjson_reads_them() {
        let m = mq_map(&[
            ("T".into(), 0, json!({"maxOffset": 1})),
            ("T".into(), 1, json!(5)),
        ]);
        assert_eq!(
            m,
            r#"{{"brokerName":"rocklet","queueId":0,"topic":"T"}:{"maxOffset":1},{"brokerName":"rocklet","queueId":1,"topic":"T"}:5}"#
        );
        assert_eq!(mq_map(&[]), "{}");
    }
}
