//! Pull consumers: PULL_MESSAGE and LITE_PULL_MESSAGE, offsets, and CONSUMER_SEND_MSG_BACK.

use std::time::Duration;

use rocklet_core::record::sys_flag;
use rocklet_core::ClientError;

use crate::driver::Pulled;

use super::*;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::status;
use crate::remoting::conn::{Conn, Ctx};
use crate::remoting::message::*;
use crate::remoting::reply::*;

/// PULL_MESSAGE, with long polling when the request allows suspending (cut short when the
/// peer goes: nobody would read the answer).
pub(crate) async fn pull(ctx: &Ctx, conn: &Conn, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let queue_id: u32 = number(req, "queueId")?;
    let offset: u64 = number(req, "queueOffset")?;
    let max: u32 = number_or(req, "maxMsgNums", 32u32)?.clamp(1, MAX_PULL);
    let flags: i32 = number_or(req, "sysFlag", 0)?;
    let commit: i64 = number_or(req, "commitOffset", -1i64)?;
    let suspend_ms: u64 = number_or(req, "suspendTimeoutMillis", 0u64)?;
    let filter = request_filter(ctx, req, "expressionType", "subscription")?;
    // While a reset by mqadmin is pending, commits of other offsets are dropped; pulling
    // from its offset takes it (`admin::resets`).
    let commit = u64::try_from(commit)
        .ok()
        .filter(|&c| !lock(&ctx.resets).drops_commit(&group, &topic, queue_id, c));
    lock(&ctx.resets).pulled(&group, &topic, queue_id, offset);
    if flags & PULL_COMMIT_OFFSET != 0 {
        if let Some(c) = commit {
            let r = ctx
                .core
                .commit_offset(group.clone(), topic.clone(), queue_id, c)
                .await;
            if let Err(e) = r {
                return Err(core_failure(req, &e));
            }
        }
    }
    let wait = if flags & PULL_SUSPEND != 0 {
        suspend_ms.min(ctx.cfg.max_long_polling_ms)
    } else {
        0
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait);
    let answer = |code: i32, next: u64, max_offset: u64, body: Vec<u8>| {
        let mut r = RemotingCommand::response_to(req, code, None);
        r.ext.insert("suggestWhichBrokerId".into(), "0".into());
        r.ext.insert("nextBeginOffset".into(), next.to_string());
        r.ext.insert("minOffset".into(), "0".into());
        r.ext.insert("maxOffset".into(), max_offset.to_string());
        r.body = body;
        r
    };
    loop {
        let pulled = ctx
            .core
            .pull(
                group.clone(),
                topic.clone(),
                queue_id,
                offset,
                max,
                filter.clone(),
            )
            .await;
        let (reply, woken) = match pulled {
            Ok(x) => x,
            Err(e) => return Err(core_failure(req, &e)),
        };
        match reply {
            Ok(Pulled {
                messages,
                next_offset,
                max_offset,
            }) => {
                // The core starts a pull below the queue's first offset at it; RocketMQ
                // answers OFFSET_TOO_SMALL as PULL_OFFSET_MOVED, nextBeginOffset the first
                // offset, and the client moves there. (Asked only when the pull skipped.)
                if messages.first().map_or(next_offset, |m| m.queue_offset) > offset {
                    let (t, q) = (topic.clone(), queue_id);
                    let min = ctx
                        .core
                        .inspect(move |b| b.queue_min_offset(&t, q))
                        .await
                        .map_err(|e| core_failure(req, &e))?
                        .unwrap_or(0);
                    if offset < min {
                        let mut r = answer(status::PULL_OFFSET_MOVED, min, max_offset, Vec::new());
                        r.ext.insert("minOffset".into(), min.to_string());
                        return Ok(r);
                    }
                }
                if !messages.is_empty() {
                    if let Some(m) = &ctx.metrics {
                        m.pulled
                            .fetch_add(messages.len() as u64, std::sync::atomic::Ordering::Relaxed);
                    }
                    let mut body = Vec::new();
                    for m in &messages {
                        let sys = m.sys_flag & sys_flag::TRANSACTION_TYPE_MASK;
                        body.extend(encode_message(m, m.offset, sys, &[]));
                    }
                    return Ok(answer(status::SUCCESS, next_offset, max_offset, body));
                }
                if offset > max_offset {
                    return Ok(answer(
                        status::PULL_NOT_FOUND,
                        max_offset,
                        max_offset,
                        Vec::new(),
                    ));
                }
                if next_offset != offset {
                    // Everything in between was filtered out.
                    return Ok(answer(
                        status::PULL_RETRY_IMMEDIATELY,
                        next_offset,
                        max_offset,
                        Vec::new(),
                    ));
                }
                if tokio::time::Instant::now() >= deadline {
                    return Ok(answer(
                        status::PULL_NOT_FOUND,
                        offset,
                        max_offset,
                        Vec::new(),
                    ));
                }
                tokio::select! {
                    _ = woken => {}
                    () = tokio::time::sleep_until(deadline) => {}
                    () = conn.gone() => {
                        return Ok(answer(status::PULL_NOT_FOUND, offset, max_offset, Vec::new()));
                    }
                }
            }
            Err(ClientError::UnknownTopic(_)) => {
                // Nothing was ever sent to it (a retry topic, typically): nothing to pull.
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {}
                    () = conn.gone() => {}
                }
                return Ok(answer(status::PULL_NOT_FOUND, offset, 0, Vec::new()));
            }
            Err(e) => return Err(client_error(req, &e)),
        }
    }
}

pub(crate) async fn query_offset(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let queue_id: u32 = number(req, "queueId")?;
    let committed = ctx
        .core
        .inspect(move |b| {
            b.queue_min_offset(&topic, queue_id)
                .map(|min| (b.committed_offset(&group, &topic, queue_id), min))
        })
        .await
        .map_err(|e| core_failure(req, &e))?;
    let offset = match committed {
        Some((Some(c), _)) => c,
        // Nothing committed while the queue still starts at 0: 0, as RocketMQ answers while
        // the first messages are still in the log.
        Some((None, 0)) | None => 0,
        // Nothing committed and the queue's oldest messages are gone: RocketMQ's
        // QUERY_NOT_FOUND; the client starts where its ConsumeFromWhere says.
        Some((None, min)) => {
            return Err(fail(
                req,
                status::QUERY_NOT_FOUND,
                format!(
                    "no offset committed for this group on the queue, whose first offset is \
                     {min} (its oldest messages were retired): start where ConsumeFromWhere says"
                ),
            ))
        }
    };
    let mut r = ok(req);
    r.ext.insert("offset".into(), offset.to_string());
    Ok(r)
}

pub(crate) async fn update_offset(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let queue_id: u32 = number(req, "queueId")?;
    let offset: u64 = number(req, "commitOffset")?;
    if lock(&ctx.resets).drops_commit(&group, &topic, queue_id, offset) {
        // Answered OK and dropped, as Apache's broker does while a reset is pending.
        return Ok(ok(req));
    }
    match ctx
        .core
        .commit_offset(group, topic, queue_id, offset)
        .await
    {
        Ok(Ok(())) => Ok(ok(req)),
        // The core's UnknownTopic says auto-create is off; for a commit the reason is that
        // offsets are kept only for queues that exist (auto-create or not).
        Ok(Err(ClientError::UnknownTopic(t))) => Err(fail(
            req,
            status::TOPIC_NOT_EXIST,
            format!("UNKNOWN_TOPIC: topic `{t}` does not exist: offsets are kept only for queues of existing topics"),
        )),
        Ok(Err(e)) => Err(client_error(req, &e)),
        Err(e) => Err(core_failure(req, &e)),
    }
}

pub(crate) async fn max_offset(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let topic = required(req, "topic")?.to_string();
    let queue_id: u32 = number(req, "queueId")?;
    let next = ctx
        .core
        .inspect(move |b| {
            b.topic_info(&topic)
                .and_then(|t| t.queues.iter().find(|q| q.0 == queue_id).map(|q| q.1))
        })
        .await
        .map_err(|e| core_failure(req, &e))?;
    let mut r = ok(req);
    r.ext.insert("offset".into(), next.unwrap_or(0).to_string());
    Ok(r)
}

/// GET_MIN_OFFSET: the queue's first offset (0 unless the queue was started later, as an
/// imported RocketMQ store's queue is).
pub(crate) async fn min_offset(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let topic = required(req, "topic")?.to_string();
    let queue_id: u32 = number_or(req, "queueId", 0)?;
    let min = ctx
        .core
        .inspect(move |b| b.queue_min_offset(&topic, queue_id))
        .await
        .map_err(|e| core_failure(req, &e))?
        .unwrap_or(0);
    let mut r = ok(req);
    r.ext.insert("offset".into(), min.to_string());
    Ok(r)
}

/// CONSUMER_SEND_MSG_BACK: the message at `offset` goes to the group's retry topic (or DLQ).
pub(crate) async fn send_back(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let offset: u64 = number(req, "offset")?;
    let group = required(req, "group")?.to_string();
    let level: i32 = number_or(req, "delayLevel", 0)?;
    let delay_level = u32::try_from(level).ok().filter(|l| *l > 0);
    match ctx.core.send_back(group, offset, delay_level).await {
        Ok(Ok(())) => Ok(ok(req)),
        Ok(Err(e)) => Err(client_error(req, &e)),
        Err(e) => Err(core_failure(req, &e)),
    }
}

/// CHECK_CLIENT_CONFIG: whether this broker serves a subscription (the v4 push consumer asks
/// at start for each non-TAG one): Apache's answers, the filter parsed as a pull would parse it.
pub(crate) fn check_client_config(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let body = json_body(req)?;
    let sub = body.get("subscriptionData");
    let text = |k: &str| sub.and_then(|s| s.get(k)).and_then(|v| v.as_str());
    let expr = filter_len_ok(
        ctx,
        req,
        "subscriptionData.subString",
        text("subString").unwrap_or("*"),
    )?;
    parse_filter(
        ctx,
        req,
        text("expressionType"),
        expr,
        "subscriptionData.subString",
    )?;
    Ok(ok(req))
}
