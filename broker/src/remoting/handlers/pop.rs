//! Pop consumers: POP_MESSAGE, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME.

use std::time::Duration;

use rocklet_core::record::sys_flag;
use rocklet_core::ClientError;
use tracing::debug;

use super::*;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::status;
use crate::remoting::conn::{lock, Conn, Ctx};
use crate::remoting::message::*;
use crate::remoting::pop::{self};
use crate::remoting::reply::*;

/// The answer of a pop that found `msgs`: the records as pulls carry them (reconsume times
/// = delivery attempt - 1), and in the header what clients build each extraInfo from. An
/// orderly pop's answer has reviveQid [`pop::ORDER_REVIVE_QID`] (Apache's
/// `POP_ORDER_REVIVE_QUEUE`, which tells clients the message was popped orderly) and each
/// message's reconsume times in `orderCountInfo` too (`0 qo<queue>%<offset> <times>`).
pub(crate) fn popped(
    req: &RemotingCommand,
    msgs: &[rocklet_core::Received],
    invisible_ms: u64,
    order: bool,
) -> RemotingCommand {
    let pop_time = msgs[0].visible_at.saturating_sub(invisible_ms);
    let handles: Vec<&rocklet_core::ReceiptHandle> = msgs.iter().map(|r| &r.handle).collect();
    let (start, offsets) = pop::offset_infos(&handles);
    let mut body = Vec::new();
    for r in msgs {
        let mut m = r.message.clone();
        m.reconsume_times = r.attempt.saturating_sub(1);
        let sys = m.sys_flag & sys_flag::TRANSACTION_TYPE_MASK;
        body.extend(encode_message(&m, m.offset, sys, &[]));
    }
    let mut resp = ok(req);
    resp.ext.insert("popTime".into(), pop_time.to_string());
    resp.ext
        .insert("invisibleTime".into(), invisible_ms.to_string());
    let revive_qid = if order { pop::ORDER_REVIVE_QID } else { 0 };
    resp.ext.insert("reviveQid".into(), revive_qid.to_string());
    if order {
        let counts: Vec<String> = msgs
            .iter()
            .map(|r| {
                format!(
                    "{} qo{}%{} {}",
                    pop::NORMAL_TOPIC,
                    r.handle.queue_id,
                    r.handle.queue_offset,
                    r.attempt.saturating_sub(1)
                )
            })
            .collect();
        resp.ext.insert("orderCountInfo".into(), counts.join(";"));
    }
    resp.ext.insert("restNum".into(), "0".into());
    resp.ext.insert("startOffsetInfo".into(), start);
    resp.ext.insert("msgOffsetInfo".into(), offsets);
    resp.body = body;
    resp
}

/// POP_MESSAGE: the core's Receive (messages invisible to the group for `invisibleTime`),
/// long polling up to `pollTime` when nothing is ready (cut short when the peer goes).
pub(crate) async fn pop_message(ctx: &Ctx, conn: &Conn, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let queue_id: i32 = number_or(req, "queueId", -1)?;
    let queue_id = u32::try_from(queue_id).ok();
    let max: u32 = number_or(req, "maxMsgNums", 32u32)?.clamp(1, MAX_POP);
    let invisible_ms: u64 = number(req, "invisibleTime")?;
    if invisible_ms == 0 {
        return Err(fail(
            req,
            status::MESSAGE_ILLEGAL,
            "invisibleTime must be above 0 ms",
        ));
    }
    // Orderly pop (Apache's PopMessageProcessor with order = true: a queue hands out nothing
    // more while a batch of it is in flight for the group, and a message not acked in time
    // comes again before anything after it): the core's FIFO group does exactly that, so
    // the group is declared FIFO (durably, as `mqadmin updateSubGroup -o true` would) on its
    // first orderly pop. Its later pops, orderly or not, are then orderly too.
    let order = field(req, "order") == Some("true");
    if order {
        let g = group.clone();
        let fifo = ctx
            .core
            .inspect(move |b| b.group_is_fifo(&g))
            .await
            .map_err(|e| core_failure(req, &e))?;
        if !fifo {
            match ctx.core.declare_group(group.clone(), true).await {
                Ok(Ok(())) => debug!(%group, "declared FIFO on its first orderly pop"),
                Ok(Err(e)) => return Err(client_error(req, &e)),
                Err(e) => return Err(core_failure(req, &e)),
            }
        }
    }
    let filter = request_filter(ctx, req, "expType", "exp")?;
    let poll_ms: u64 = number_or(req, "pollTime", 0u64)?;
    let deadline = tokio::time::Instant::now()
        + Duration::from_millis(poll_ms.min(ctx.cfg.max_long_polling_ms));
    let not_found = |ctx: &Ctx| {
        let mut r = RemotingCommand::response_to(req, status::PULL_NOT_FOUND, None);
        r.ext.insert("popTime".into(), ctx.clock.now().to_string());
        r.ext
            .insert("invisibleTime".into(), invisible_ms.to_string());
        r.ext.insert("reviveQid".into(), "0".into());
        r.ext.insert("restNum".into(), "0".into());
        r
    };
    loop {
        let (reply, woken) = ctx
            .core
            .receive(
                group.clone(),
                topic.clone(),
                queue_id,
                max,
                invisible_ms,
                filter.clone(),
            )
            .await
            .map_err(|e| core_failure(req, &e))?;
        match reply {
            Ok(msgs) if !msgs.is_empty() => return Ok(popped(req, &msgs, invisible_ms, order)),
            Ok(_) => {}
            Err(ClientError::UnknownTopic(_)) => {
                // Nothing was ever sent to it: nothing to pop (yet).
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {}
                    () = conn.gone() => {}
                }
                return Ok(not_found(ctx));
            }
            Err(e) => return Err(client_error(req, &e)),
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(not_found(ctx));
        }
        tokio::select! {
            _ = woken => {}
            () = tokio::time::sleep_until(deadline) => {}
            () = conn.gone() => return Ok(not_found(ctx)),
        }
    }
}

/// The core handle an ACK_MESSAGE or CHANGE_MESSAGE_INVISIBLETIME names (see [`pop`]), and
/// the renewal token it came from, if any.
pub(crate) fn receipt(
    ctx: &Ctx,
    req: &RemotingCommand,
    group: &str,
    topic: &str,
) -> Result<(rocklet_core::ReceiptHandle, Option<u32>), RemotingCommand> {
    let extra = pop::parse_extra_info(required(req, "extraInfo")?)
        .map_err(|e| fail(req, status::MESSAGE_ILLEGAL, e))?;
    let queue_offset = match extra.queue_offset {
        Some(o) => o,
        None => number(req, "offset")?,
    };
    // 0: a pop's receipt; ORDER_REVIVE_QID: an orderly pop's (same form); else a renewal.
    if extra.revive_qid == 0 || extra.revive_qid == i64::from(pop::ORDER_REVIVE_QID) {
        let handle = rocklet_core::ReceiptHandle {
            topic: topic.to_string(),
            queue_id: extra.queue_id,
            queue_offset,
            generation: extra.ck,
        };
        return Ok((handle, None));
    }
    let token = u32::try_from(extra.revive_qid).ok();
    let renewed =
        token.and_then(|t| lock(&ctx.renewals).get(t, group, topic, extra.queue_id, queue_offset));
    match (renewed, token) {
        (Some(h), Some(t)) => Ok((h, Some(t))),
        _ => Err(client_error(
            req,
            &ClientError::InvalidReceiptHandle(format!(
                "extraInfo names reviveQid {}, which is no invisible-time change of group {group} on {topic} queue {} offset {queue_offset} this broker remembers (it restarted, or the change is long past)",
                extra.revive_qid, extra.queue_id
            )),
        )),
    }
}

/// ACK_MESSAGE: the core's Ack of the delivery extraInfo names.
pub(crate) async fn ack_message(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let (handle, token) = receipt(ctx, req, &group, &topic)?;
    match ctx.core.ack(group, handle).await {
        Ok(Ok(())) => {
            if let Some(t) = token {
                lock(&ctx.renewals).remove(t);
            }
            Ok(ok(req))
        }
        Ok(Err(e)) => Err(client_error(req, &e)),
        Err(e) => Err(core_failure(req, &e)),
    }
}

/// CHANGE_MESSAGE_INVISIBLETIME: the core's ChangeInvisible; the answer's reviveQid is the
/// token the client's next extraInfo will carry.
pub(crate) async fn change_invisible(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let group = required(req, "consumerGroup")?.to_string();
    let topic = required(req, "topic")?.to_string();
    let invisible_ms: u64 = number(req, "invisibleTime")?;
    let (handle, old) = receipt(ctx, req, &group, &topic)?;
    match ctx
        .core
        .change_invisible(group.clone(), handle, invisible_ms)
        .await
    {
        Ok(Ok((handle, visible_at))) => {
            let token = {
                let mut r = lock(&ctx.renewals);
                if let Some(t) = old {
                    r.remove(t);
                }
                r.insert(ctx.clock.now(), &group, handle, visible_at)
            };
            let mut resp = ok(req);
            resp.ext.insert(
                "popTime".into(),
                visible_at.saturating_sub(invisible_ms).to_string(),
            );
            resp.ext
                .insert("invisibleTime".into(), invisible_ms.to_string());
            resp.ext.insert("reviveQid".into(), token.to_string());
            Ok(resp)
        }
        Ok(Err(e)) => Err(client_error(req, &e)),
        Err(e) => Err(core_failure(req, &e)),
    }
}
