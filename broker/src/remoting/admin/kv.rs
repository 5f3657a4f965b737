//! The name server's KV config, as mqadmin uses it for order topics: PUT_KV_CONFIG,
//! GET_KV_CONFIG and DELETE_KV_CONFIG in namespace ORDER_TOPIC_CONFIG, keyed by topic
//! (updateTopic -o true puts `brokerName:queueCount;…`, deleteTopic deletes it, a v4
//! producer's route carries it as `orderTopicConf`). Rocklet keeps the entry on the topic in
//! the core ([`rocklet_core::Broker::set_order_conf`]): durable, replicated, gone with the
//! topic. Other namespaces are refused by name: rocklet keeps no general KV store (nothing
//! in rocklet reads one; Apache's name server keeps it only for tools to read back).

use super::changed;
use crate::ops;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::status;
use crate::remoting::conn::Ctx;
use crate::remoting::reply::{core_failure, fail, ok, required, Answer};
use crate::remoting::BROKER_NAME;

/// The namespace of order topics' confs (Apache's NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG).
pub const ORDER_TOPIC_CONFIG: &str = "ORDER_TOPIC_CONFIG";

/// The request's topic (`key`), when its namespace is ORDER_TOPIC_CONFIG.
fn order_key(req: &RemotingCommand) -> Result<&str, RemotingCommand> {
    let namespace = required(req, "namespace")?;
    if namespace != ORDER_TOPIC_CONFIG {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("KV config namespace `{namespace}` is not kept by rocklet: only {ORDER_TOPIC_CONFIG} (order topics' confs, kept on the topic)"),
        ));
    }
    required(req, "key")
}

/// The broker groups rocklet knows: every group in etcd in cluster mode with a directory,
/// else the one broker of routes, `rocklet`.
async fn brokers(ctx: &Ctx, req: &RemotingCommand) -> Result<Vec<String>, RemotingCommand> {
    match ctx.cluster.as_ref().and_then(|v| v.directory.get()) {
        Some(dir) => Ok(dir
            .groups()
            .await
            .map_err(|e| {
                fail(
                    req,
                    status::SYSTEM_ERROR,
                    format!("cannot list the cluster's broker groups: {e}"),
                )
            })?
            .into_iter()
            .map(|g| g.name)
            .collect()),
        None => Ok(vec![BROKER_NAME.to_string()]),
    }
}

/// PUT_KV_CONFIG: sets the topic's order conf (the topic must exist; each broker named one
/// rocklet knows, each count at most the topic's queues, at most 4 KiB).
pub(super) async fn put(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let topic = order_key(req)?.to_string();
    let value = required(req, "value")?.to_string();
    let known = brokers(ctx, req).await?;
    changed(
        req,
        ops::set_order_conf(&ctx.core, topic, Some(value), known, false).await,
    )
}

/// GET_KV_CONFIG: the topic's order conf in the `value` field, or Apache's answer for none
/// (QUERY_NOT_FOUND, "No config item, Namespace: … Key: …").
pub(super) async fn get(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let topic = order_key(req)?.to_string();
    let t = topic.clone();
    let conf = ctx
        .core
        .inspect(move |b| b.topic_order(&t).and_then(|o| o.conf))
        .await
        .map_err(|e| core_failure(req, &e))?;
    match conf {
        Some(c) => {
            let mut r = ok(req);
            r.ext.insert("value".into(), c);
            Ok(r)
        }
        None => Err(fail(
            req,
            status::QUERY_NOT_FOUND,
            format!("No config item, Namespace: {ORDER_TOPIC_CONFIG} Key: {topic}"),
        )),
    }
}

/// DELETE_KV_CONFIG: deletes the topic's order conf (its `order` flag stays); OK when there
/// is none or no such topic, as Apache answers (deleteTopic asks after the topic is gone).
pub(super) async fn delete(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let topic = order_key(req)?.to_string();
    changed(
        req,
        ops::set_order_conf(&ctx.core, topic, None, Vec::new(), true).await,
    )
}
