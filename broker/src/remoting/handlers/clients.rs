//! Clients, routes and queue locks: GET_ROUTEINFO_BY_TOPIC, HEART_BEAT, UNREGISTER_CLIENT,
//! LOCK_BATCH_MQ / UNLOCK_BATCH_MQ and GET_CONSUMER_LIST_BY_GROUP.

use std::sync::Arc;

use rocklet_core::CheckRequest;
use tokio::sync::mpsc;
use tracing::debug;

use super::*;
use crate::remoting::clients::{self, ConsumerInfo};
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::status;
use crate::remoting::conn::{lock, notify_ids_changed, Conn, Ctx};
use crate::remoting::locks::{QueueKey, MAX_CLIENT_ID_LEN, MAX_QUEUES_PER_REQUEST};
use crate::remoting::reply::*;

/// The topic's order conf (the name server's ORDER_TOPIC_CONFIG entry: a v4 producer with
/// one builds its queue list from it), as this node's core keeps it; `None` unless
/// `order_message_enable` (Apache's name server's `orderMessageEnable`) is on.
async fn order_conf(ctx: &Ctx, topic: &str) -> Result<Option<String>, crate::driver::CoreFailure> {
    if !ctx.cfg.order_message_enable {
        return Ok(None);
    }
    let t = topic.to_string();
    ctx.core
        .inspect(move |b| b.topic_order(&t).and_then(|o| o.conf))
        .await
}

/// GET_ROUTEINFO_BY_TOPIC: one broker (this one) holding every queue of the topic, with
/// its order conf when it has one and `order_message_enable` is on (`orderTopicConf`,
/// else `null` as Apache's).
pub(crate) async fn route(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let topic = required(req, "topic")?;
    // Cluster mode with a placement in etcd: one broker per hosting group, at its master.
    if let Some(view) = &ctx.cluster {
        if let Some(d) = view.directory.get() {
            if let Some(groups) = d.route(topic, view.master()).await {
                let conf = order_conf(ctx, topic)
                    .await
                    .map_err(|e| core_failure(req, &e))?;
                return placed_route(ctx, req, topic, &d.group, &groups, conf);
            }
        }
    }
    // Cluster mode: the master's remoting address as etcd has it, whichever node answers.
    let master = match &ctx.cluster {
        Some(view) => match view.master() {
            Some(m) => m.remoting.or(ctx.broker_addr),
            None => {
                return Err(fail(
                    req,
                    status::SYSTEM_ERROR,
                    "the broker group has no master now (an election is under way); retry",
                ))
            }
        },
        None => ctx.broker_addr,
    };
    let Some(addr) = master else {
        return Err(fail(
            req,
            status::TOPIC_NOT_EXIST,
            "the remoting broker listener is off: no route",
        ));
    };
    let conf = order_conf(ctx, topic)
        .await
        .map_err(|e| core_failure(req, &e))?;
    let n = match queues_of(ctx, topic).await {
        Ok(Some(n)) => n,
        Ok(None) => {
            return Err(fail(
                req,
                status::TOPIC_NOT_EXIST,
                format!("No topic route info in name server for the topic: {topic}"),
            ))
        }
        Err(e) => return Err(core_failure(req, &e)),
    };
    let body = serde_json::json!({
        "orderTopicConf": conf,
        "queueDatas": [{
            "brokerName": BROKER_NAME,
            "readQueueNums": n,
            "writeQueueNums": n,
            "perm": perm(ctx),
            "topicSysFlag": 0,
            "topicSynFlag": 0,
        }],
        "brokerDatas": [{
            "cluster": BROKER_NAME,
            "brokerName": BROKER_NAME,
            "brokerAddrs": { "0": addr.to_string() },
            "enableActingMaster": false,
        }],
        "filterServerTable": {},
    });
    let mut r = ok(req);
    r.body = serde_json::to_vec(&body).unwrap_or_default();
    Ok(r)
}

/// GET_ROUTEINFO_BY_TOPIC for a topic placed on `groups`: queueDatas and brokerDatas of
/// each group whose master serves remoting now (the others are left out).
pub(crate) fn placed_route(
    ctx: &Ctx,
    req: &RemotingCommand,
    topic: &str,
    own: &str,
    groups: &[crate::cluster::directory::RouteGroup],
    order_conf: Option<String>,
) -> Answer {
    let mut queue_datas = Vec::new();
    let mut broker_datas = Vec::new();
    for g in groups {
        let Some(m) = &g.master else { continue };
        let addr = if g.name == own {
            m.remoting.or(ctx.broker_addr)
        } else {
            m.remoting
        };
        let Some(addr) = addr else { continue };
        queue_datas.push(serde_json::json!({
            "brokerName": g.name,
            "readQueueNums": g.queues,
            "writeQueueNums": g.queues,
            // This node's permission for its own group; another group's is its own.
            "perm": if g.name == own { perm(ctx) } else { 6 },
            "topicSysFlag": 0,
            "topicSynFlag": 0,
        }));
        broker_datas.push(serde_json::json!({
            "cluster": BROKER_NAME,
            "brokerName": g.name,
            "brokerAddrs": { "0": addr.to_string() },
            "enableActingMaster": false,
        }));
    }
    if queue_datas.is_empty() {
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!(
                "no broker group hosting topic `{topic}` ({}) has a master serving remoting now (elections may be under way); retry",
                names.join(", ")
            ),
        ));
    }
    let body = serde_json::json!({
        "orderTopicConf": order_conf,
        "queueDatas": queue_datas,
        "brokerDatas": broker_datas,
        "filterServerTable": {},
    });
    let mut r = ok(req);
    r.body = serde_json::to_vec(&body).unwrap_or_default();
    Ok(r)
}

pub(crate) fn set_groups(
    ctx: &Ctx,
    conn: &Conn,
    checks: &mpsc::UnboundedSender<CheckRequest>,
    update: impl FnOnce(&mut Vec<String>) -> bool,
) {
    let mut g = lock(&conn.groups);
    let had = !g.is_empty();
    if !update(&mut g) {
        return;
    }
    if g.is_empty() {
        if had {
            ctx.core.producer_down(conn.id);
        }
    } else {
        ctx.core
            .group_producer_up(conn.id, g.clone(), checks.clone());
    }
}

/// HEART_BEAT: producer groups answer checks through this connection; consumer groups list
/// this client (a new member makes the group's members rebalance, and a group's first
/// member creates its retry topic `%RETRY%<group>`, as Apache's broker does, so offsets of
/// the retry queue can be committed before anything was sent back).
pub(crate) async fn heartbeat(
    ctx: &Ctx,
    conn: &Arc<Conn>,
    checks: &mpsc::UnboundedSender<CheckRequest>,
    req: &RemotingCommand,
) -> Answer {
    let v = json_body(req)?;
    let client = v
        .get("clientID")
        .and_then(|c| c.as_str())
        .unwrap_or_default()
        .to_string();
    let names = |key: &str| -> Vec<String> {
        v.get(key)
            .and_then(|s| s.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.get("groupName").and_then(|g| g.as_str()))
                    .filter(|g| !g.is_empty() && *g != CLIENT_INNER_PRODUCER)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let producers = names("producerDataSet");
    let consumers = names("consumerDataSet");
    let consumer_info = |group: &str| -> ConsumerInfo {
        let data = v
            .get("consumerDataSet")
            .and_then(|s| s.as_array())
            .and_then(|a| {
                a.iter()
                    .find(|c| c.get("groupName").and_then(|g| g.as_str()) == Some(group))
            });
        let text = |k: &str| {
            data.and_then(|d| d.get(k))
                .and_then(|t| t.as_str())
                .unwrap_or_default()
                .to_string()
        };
        ConsumerInfo {
            consume_type: text("consumeType"),
            message_model: text("messageModel"),
            consume_from_where: text("consumeFromWhere"),
            subscriptions: clients::subscriptions(data.and_then(|d| d.get("subscriptionDataSet"))),
        }
    };
    // Names are kept for as long as the connection lives: bounded like every other name.
    let max = ctx.cfg.max_name_bytes;
    if let Some(long) = std::iter::once(&client)
        .chain(&producers)
        .chain(&consumers)
        .find(|n| n.len() > max)
    {
        ctx.over_limit("max_name_bytes");
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!(
                "NAME_TOO_LONG: a name in the heartbeat is {} bytes, more than the broker's max_name_bytes of {max}",
                long.len()
            ),
        ));
    }
    if !client.is_empty() {
        let mut all = lock(&ctx.clients);
        for p in &producers {
            all.producer_heartbeat(p, &client, conn.member(req));
        }
    }
    if !producers.is_empty() {
        set_groups(ctx, conn, checks, |g| {
            let mut changed = false;
            for p in producers {
                if !g.contains(&p) {
                    g.push(p);
                    changed = true;
                }
            }
            changed
        });
    }
    if client.is_empty() {
        return Ok(ok(req));
    }
    let mut joined = Vec::new();
    {
        let mut all = lock(&ctx.clients);
        for c in consumers {
            let info = consumer_info(&c);
            let first = all.consumer_group(&c).is_none();
            if all.consumer_heartbeat(&c, &client, conn.member(req), info) {
                joined.push((c, first));
            }
        }
    }
    for (group, first) in joined {
        if first {
            create_retry_topic(ctx, &group).await;
        }
        notify_ids_changed(ctx, &group);
    }
    Ok(ok(req))
}

/// Creates `%RETRY%<group>` with one queue (Apache's retryQueueNums) unless it exists. A
/// name that cannot be a topic or no room under max_topics leaves it to the first send-back,
/// which answers the reason.
pub(crate) async fn create_retry_topic(ctx: &Ctx, group: &str) {
    let topic = rocklet_core::topic::retry(group);
    let t = topic.clone();
    let r = ctx
        .core
        .with_mut(move |b| {
            if b.topic_queue_count(&t).is_some() {
                return Ok(Ok(()));
            }
            b.create_topic(&t, 1).map_err(|e| e.to_string())
        })
        .await;
    match r {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => debug!(%topic, error = %e, "retry topic not created"),
        Ok(Err(e)) => debug!(%topic, error = %e, "retry topic not created: storage"),
        Err(e) => debug!(%topic, error = %e, "retry topic not created"),
    }
}

/// UNREGISTER_CLIENT: the client leaves its producer and consumer groups.
pub(crate) fn unregister(
    ctx: &Ctx,
    conn: &Conn,
    checks: &mpsc::UnboundedSender<CheckRequest>,
    req: &RemotingCommand,
) -> Answer {
    if let Some(p) = field(req, "producerGroup").filter(|p| !p.is_empty()) {
        set_groups(ctx, conn, checks, |g| {
            let before = g.len();
            g.retain(|x| x != p);
            g.len() != before
        });
    }
    if let (Some(p), Some(client)) = (field(req, "producerGroup"), field(req, "clientID")) {
        lock(&ctx.clients).unregister_producer(p, client);
    }
    if let (Some(c), Some(client)) = (field(req, "consumerGroup"), field(req, "clientID")) {
        if lock(&ctx.clients).unregister_consumer(c, client) {
            notify_ids_changed(ctx, c);
        }
        lock(&ctx.locks).release_client(c, client);
    }
    Ok(ok(req))
}

/// The body of LOCK_BATCH_MQ / UNLOCK_BATCH_MQ: `{consumerGroup, clientId, mqSet: [{topic,
/// brokerName, queueId}]}` (`onlyThisBroker` is irrelevant with one broker).
pub(crate) struct LockBody {
    group: String,
    client: String,
    queues: Vec<QueueKey>,
}

pub(crate) fn lock_body(req: &RemotingCommand) -> Result<LockBody, RemotingCommand> {
    let v = json_body(req)?;
    let bad = |what: String| fail(req, status::SYSTEM_ERROR, what);
    let text = |key: &str| -> Result<String, RemotingCommand> {
        match v.get(key).and_then(|g| g.as_str()) {
            Some(s) if !s.is_empty() => Ok(s.to_string()),
            _ => Err(bad(format!("the body lacks `{key}`"))),
        }
    };
    let group = text("consumerGroup")?;
    rocklet_core::topic::validate_group(&group)
        .map_err(|e| bad(format!("`consumerGroup`: {e}")))?;
    let client = text("clientId")?;
    if client.len() > MAX_CLIENT_ID_LEN {
        return Err(bad(format!(
            "`clientId` is {} bytes, longer than {MAX_CLIENT_ID_LEN}",
            client.len()
        )));
    }
    let set = match v.get("mqSet") {
        None | Some(serde_json::Value::Null) => &Vec::new(),
        Some(serde_json::Value::Array(a)) => a,
        Some(_) => return Err(bad("`mqSet` is not an array".into())),
    };
    if set.len() > MAX_QUEUES_PER_REQUEST {
        return Err(bad(format!(
            "`mqSet` names {} queues, at most {MAX_QUEUES_PER_REQUEST} are taken",
            set.len()
        )));
    }
    let mut queues = Vec::with_capacity(set.len());
    for (i, q) in set.iter().enumerate() {
        let topic = q.get("topic").and_then(|t| t.as_str()).unwrap_or_default();
        if topic.is_empty() {
            return Err(bad(format!("`mqSet[{i}]` lacks `topic`")));
        }
        rocklet_core::topic::validate_name(topic)
            .map_err(|e| bad(format!("`mqSet[{i}].topic`: {e}")))?;
        let id = match q.get("queueId") {
            Some(serde_json::Value::Number(n)) => n.as_u64(),
            Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
            _ => None,
        };
        let Some(queue_id) = id.and_then(|n| u32::try_from(n).ok()) else {
            return Err(bad(format!(
                "`mqSet[{i}].queueId` is not a queue number: {:?}",
                q.get("queueId")
            )));
        };
        queues.push(QueueKey {
            topic: topic.to_string(),
            queue_id,
        });
    }
    Ok(LockBody {
        group,
        client,
        queues,
    })
}

/// LOCK_BATCH_MQ: locks (or renews) the queues for the client; the answer lists the queues
/// it holds (`lockOKMQSet`), the others are held by another client of the group.
pub(crate) fn lock_batch(ctx: &Ctx, conn: &Conn, req: &RemotingCommand) -> Answer {
    let b = lock_body(req)?;
    let now = ctx.clock.now();
    let held = lock(&ctx.locks).lock(now, &b.group, &b.client, conn.id, &b.queues);
    let set: Vec<serde_json::Value> = held
        .iter()
        .map(|q| {
            serde_json::json!({
                "topic": q.topic,
                "brokerName": BROKER_NAME,
                "queueId": q.queue_id,
            })
        })
        .collect();
    let mut r = ok(req);
    r.body = serde_json::to_vec(&serde_json::json!({ "lockOKMQSet": set })).unwrap_or_default();
    Ok(r)
}

/// UNLOCK_BATCH_MQ: releases the client's locks on the queues (others' locks stay).
pub(crate) fn unlock_batch(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let b = lock_body(req)?;
    lock(&ctx.locks).unlock(&b.group, &b.client, &b.queues);
    Ok(ok(req))
}

/// GET_CONSUMER_LIST_BY_GROUP: the clients whose heartbeats named the group.
pub(crate) fn consumer_list(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?;
    let ids: Vec<String> = lock(&ctx.clients)
        .consumer_group(group)
        .map(|g| g.members.keys().cloned().collect())
        .unwrap_or_default();
    if ids.is_empty() {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("no consumer of group {group} is connected"),
        ));
    }
    let mut r = ok(req);
    r.body = serde_json::to_vec(&serde_json::json!({ "consumerIdList": ids })).unwrap_or_default();
    Ok(r)
}
