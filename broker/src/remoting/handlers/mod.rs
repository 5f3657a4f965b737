//! RocketMQ 4 requests mapped onto the same core requests the gRPC service uses. Nothing
//! here decides anything about messages: headers are converted, the core answers through
//! the driver's command channel, and the answer is converted back.
//!
//! A request flows: the listener ([`super::server`]) reads a frame and hands it to
//! [`handle`], which checks authentication and the ACL ([`crate::auth::remoting`]) and
//! dispatches on its code to one handler: [`clients`] (routes, heartbeats, locks),
//! [`produce`] (sends, END_TRANSACTION), [`request_reply`] (replies to request messages), [`consume`] (pulls, offsets, send-back), [`pop`]
//! (pop, ack, invisible time), or mqadmin's requests ([`super::admin`]). A handler reads its
//! header fields through [`super::reply`], converts messages with [`super::message`], asks
//! the core through the driver and converts the answer back.

mod clients;
mod consume;
mod pop;
mod produce;
mod request_reply;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rocklet_core::CheckRequest;
use tokio::sync::mpsc;
use tracing::debug;

use super::codec::RemotingCommand;
use super::codes::{code, status};
use super::conn::{lock, Conn, Ctx};
use super::reply::*;
use crate::driver::CoreFailure;
use clients::*;
use consume::*;
use pop::*;
use produce::*;
use request_reply::*;

pub(crate) use super::BROKER_NAME;
/// Producer group the Java client uses for its own internal producer: not a real group.
pub(crate) const CLIENT_INNER_PRODUCER: &str = "CLIENT_INNER_PRODUCER";
/// Pull request flags (`PullSysFlag`).
pub(crate) const PULL_COMMIT_OFFSET: i32 = 0x1;
/// PULL_MESSAGE's `sysFlag` bit asking the broker to hold the pull (long polling).
pub const PULL_SUSPEND: i32 = 0x2;
/// Most messages one pull returns.
pub(crate) const MAX_PULL: u32 = 1024;
/// Most messages one pop returns (RocketMQ's brokers take at most 32 too).
pub(crate) const MAX_POP: u32 = 32;

/// Handles one request; `None` when nothing is to be answered.
pub async fn handle(
    ctx: &Ctx,
    conn: &Arc<Conn>,
    checks: &mpsc::UnboundedSender<CheckRequest>,
    req: RemotingCommand,
) -> Option<RemotingCommand> {
    *lock(&conn.serialize) = req.serialize;
    tracing::trace!(
        conn = conn.id,
        code = req.code,
        body = req.body.len(),
        "remoting request"
    );
    if let Err(refusal) = crate::auth::remoting::check(ctx, conn, &req).await {
        ctx.stats.count(req.code, false);
        return Some(refusal);
    }
    // Cluster mode: a write reaching a replica goes to the master (`cluster::forward_remoting`).
    if let Some(view) = &ctx.cluster {
        let me = ctx.cfg.cluster.as_ref().map_or(0, |c| c.node_id);
        if crate::cluster::forward_remoting::forwards(req.code) {
            // A master handing over: the write goes to the new master once it is known.
            view.handoff.settled().await;
        }
        if let Some(at) = crate::cluster::forward_remoting::target(view, me, &req) {
            let check_answer = req.code == code::END_TRANSACTION
                && field(&req, "fromTransactionCheck") == Some("true");
            if !check_answer {
                view.handoff.forwarded();
            }
            let resp = match view.forward_remoting.forward(conn, at, &req).await {
                Ok(r) => r,
                Err(e) => Some(fail(
                    &req,
                    status::SERVICE_NOT_AVAILABLE,
                    format!("NOT_MASTER: the broker group's master {at} did not answer a forwarded request ({e}); retry"),
                )),
            };
            let ok = resp.as_ref().is_none_or(|r| r.code == status::SUCCESS);
            ctx.stats.count(req.code, ok);
            return resp;
        }
    }
    let r = match req.code {
        code::GET_ROUTEINFO_BY_TOPIC => route(ctx, &req).await,
        code::HEART_BEAT => heartbeat(ctx, conn, checks, &req).await,
        code::UNREGISTER_CLIENT => unregister(ctx, conn, checks, &req),
        // mqadmin wipeWritePerm: refused as Apache's broker refuses a send while its
        // permission lacks write (NO_PERMISSION, which producers retry on another broker).
        code::SEND_MESSAGE | code::SEND_MESSAGE_V2 | code::SEND_BATCH_MESSAGE
            if !ctx.core.writable() =>
        {
            Err(fail(
                &req,
                status::NO_PERMISSION,
                format!("the broker[{BROKER_NAME}] sending message is forbidden: its write permission was wiped (mqadmin wipeWritePerm; addWritePerm restores it)"),
            ))
        }
        code::SEND_MESSAGE | code::SEND_MESSAGE_V2 | code::SEND_BATCH_MESSAGE => {
            send(ctx, conn, checks, &req).await
        }
        code::SEND_REPLY_MESSAGE | code::SEND_REPLY_MESSAGE_V2 => send_reply(ctx, conn, &req).await,
        code::END_TRANSACTION => end_transaction(ctx, &req).await,
        // The Java DefaultLitePullConsumer's pulls: Apache's PullMessageProcessor serves both.
        code::PULL_MESSAGE | code::LITE_PULL_MESSAGE => pull(ctx, conn, &req).await,
        code::QUERY_CONSUMER_OFFSET => query_offset(ctx, &req).await,
        code::UPDATE_CONSUMER_OFFSET => update_offset(ctx, &req).await,
        code::GET_MAX_OFFSET => max_offset(ctx, &req).await,
        code::GET_MIN_OFFSET => min_offset(ctx, &req).await,
        code::GET_CONSUMER_LIST_BY_GROUP => consumer_list(ctx, &req),
        code::CONSUMER_SEND_MSG_BACK => send_back(ctx, &req).await,
        code::CHECK_CLIENT_CONFIG => check_client_config(ctx, &req),
        code::LOCK_BATCH_MQ => lock_batch(ctx, conn, &req),
        code::UNLOCK_BATCH_MQ => unlock_batch(ctx, &req),
        code::POP_MESSAGE => pop_message(ctx, conn, &req).await,
        code::ACK_MESSAGE => ack_message(ctx, &req).await,
        code::CHANGE_MESSAGE_INVISIBLETIME => change_invisible(ctx, &req).await,
        other => match super::admin::handle(ctx, &req).await {
            Some(r) => r,
            None => Err(fail(
                &req,
                status::REQUEST_CODE_NOT_SUPPORTED,
                match super::codes::unserved_name(other) {
                    Some(name) => {
                        format!("request code {other} ({name}) is not supported by rocklet")
                    }
                    None => format!("request code {other} is not supported by rocklet"),
                },
            )),
        },
    };
    let resp = r.unwrap_or_else(|e| e);
    let ok = resp.code == status::SUCCESS;
    ctx.stats.count(req.code, ok);
    if !ok {
        if let Some(m) = &ctx.metrics {
            m.request_errors.fetch_add(1, Ordering::Relaxed);
        }
        debug!(code = req.code, name = super::stats::code_name(req.code), status = resp.code, remark = ?resp.remark, "remoting request refused");
    }
    Some(resp)
}

/// RocketMQ's `perm` of this broker's queues in a route: read and write (6), or read only
/// (4) while its write permission is wiped (mqadmin wipeWritePerm).
pub(crate) fn perm(ctx: &Ctx) -> u32 {
    if ctx.core.writable() {
        6
    } else {
        4
    }
}

pub(crate) async fn queues_of(ctx: &Ctx, topic: &str) -> Result<Option<u32>, CoreFailure> {
    let t = topic.to_string();
    let existing = ctx.core.inspect(move |b| b.topic_queue_count(&t)).await?;
    if let Some(n) = existing {
        return Ok(Some(n.max(1)));
    }
    if let Some(d) = ctx.cfg.topics.iter().find(|d| d.name == topic) {
        return Ok(Some(d.queues.unwrap_or(ctx.cfg.core.default_queues)));
    }
    if topic.starts_with("%RETRY%") || topic.starts_with("%DLQ%") || topic == reply_topic() {
        return Ok(Some(1));
    }
    if ctx.cfg.core.auto_create_topics && rocklet_core::topic::validate_name(topic).is_ok() {
        return Ok(Some(ctx.cfg.core.default_queues));
    }
    Ok(None)
}
