//! Producers: SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE and END_TRANSACTION.

use rocklet_core::record::sys_flag;
use rocklet_core::{CheckRequest, Resolution, TxnId};
use tokio::sync::mpsc;

use super::*;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::{code, status};
use crate::remoting::compression;
use crate::remoting::conn::{Conn, Ctx};
use crate::remoting::message::*;
use crate::remoting::reply::*;

pub(crate) async fn send(
    ctx: &Ctx,
    conn: &Conn,
    checks: &mpsc::UnboundedSender<CheckRequest>,
    req: &RemotingCommand,
) -> Answer {
    let h = long_names(req);
    // The C++ client marks a batch sent as SEND_MESSAGE with batch = 1.
    let batch =
        req.code == code::SEND_BATCH_MESSAGE || matches!(field(&h, "batch"), Some("true" | "1"));
    let h = &h;
    let topic = required(h, "topic")?.to_string();
    let queue_id: i32 = number_or(h, "queueId", -1)?;
    let queue_id = u32::try_from(queue_id).ok();
    let sys: i32 = number_or(h, "sysFlag", 0)?;
    let sys = sys as u32;
    if batch && compression::is_compressed(sys) {
        // No client compresses a batch (entries carry no sysFlag of their own).
        return Err(fail(
            req,
            status::MESSAGE_ILLEGAL,
            "a batch cannot be compressed as a whole: compress no batch, or send its messages one by one",
        ));
    }
    let born: Option<u64> = number_or(h, "bornTimestamp", 0u64).ok().filter(|b| *b > 0);
    let header_group = field(h, "producerGroup");
    let props = field(h, "properties").unwrap_or_default();
    let head = SendHead {
        topic: &topic,
        queue_id,
        born,
        peer: conn.peer,
        group: header_group,
    };
    let sent = if batch {
        let max = ctx.cfg.max_batch_messages as usize;
        let entries = decode_batch(&req.body, max).map_err(|e| {
            if e.starts_with("TOO_MANY_MESSAGES") {
                ctx.over_limit("max_batch_messages");
            }
            fail(req, status::MESSAGE_ILLEGAL, e)
        })?;
        let mut messages = Vec::with_capacity(entries.len());
        for (flag, body, p) in entries {
            let mut all = parse_properties(props);
            all.extend(parse_properties(&p));
            let i = incoming(head, body, flag, all);
            if i.txn_group.is_some() {
                return Err(fail(
                    req,
                    status::MESSAGE_ILLEGAL,
                    "a transactional message cannot be sent in a batch",
                ));
            }
            messages.push(i.message);
        }
        ctx.core.send(messages).await
    } else {
        let flag: i32 = number_or(h, "flag", 0)?;
        let limit = ctx.cfg.core.max_message_size as usize;
        let body = compression::plain_body(sys, req.body.clone(), limit)
            .map_err(|e| fail(req, status::MESSAGE_ILLEGAL, e.to_string()))?;
        let i = incoming(head, body, flag, parse_properties(props));
        match i.txn_group {
            Some(group) if !group.is_empty() => {
                // This connection can answer checks of its group from now on.
                let g = group.clone();
                set_groups(ctx, conn, checks, |gs| {
                    if gs.contains(&g) {
                        false
                    } else {
                        gs.push(g);
                        true
                    }
                });
                ctx.core
                    .prepare(group, i.message, i.immunity_ms)
                    .await
                    .map(|r| r.map(|(half, _)| vec![half]))
            }
            Some(_) => {
                return Err(fail(
                    req,
                    status::MESSAGE_ILLEGAL,
                    "a transactional message needs a producer group (PGROUP or producerGroup)",
                ))
            }
            None => ctx.core.send(vec![i.message]).await,
        }
    };
    match sent {
        Ok(Ok(results)) => {
            let store = ctx.store_host();
            let ids: Vec<String> = results
                .iter()
                .map(|r| offset_msg_id(store, r.offset))
                .collect();
            let first = &results[0];
            let mut r = ok(req);
            r.ext.insert("msgId".into(), ids.join(","));
            r.ext.insert("queueId".into(), first.queue_id.to_string());
            r.ext
                .insert("queueOffset".into(), first.queue_offset.to_string());
            if first.txn.is_some() {
                // As Apache: the message's UNIQ_KEY, which is also the transaction id clients
                // give checkLocalTransaction (from the checked message's UNIQ_KEY).
                r.ext.insert("transactionId".into(), first.msg_id.clone());
            }
            r.ext.insert("MSG_REGION".into(), "DefaultRegion".into());
            r.ext.insert("TRACE_ON".into(), "false".into());
            Ok(r)
        }
        Ok(Err(e)) => Err(client_error(req, &e)),
        Err(e) => Err(core_failure(req, &e)),
    }
}

/// A send's header with V2's short names (SEND_MESSAGE_V2, SEND_REPLY_MESSAGE_V2, and
/// SEND_BATCH_MESSAGE from Java) under their long names too.
pub(crate) fn long_names(req: &RemotingCommand) -> RemotingCommand {
    let mut h = RemotingCommand {
        ext: req.ext.clone(),
        opaque: req.opaque,
        version: req.version,
        serialize: req.serialize,
        ..Default::default()
    };
    if !matches!(req.code, code::SEND_MESSAGE | code::SEND_REPLY_MESSAGE) {
        for (short, long) in V2_NAMES {
            if let Some(v) = req.ext.get(short) {
                h.ext.insert(long.to_string(), v.clone());
            }
        }
    }
    h
}

/// END_TRANSACTION: commitLogOffset is the transaction (the half message's log offset).
pub(crate) async fn end_transaction(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let offset: u64 = number(req, "commitLogOffset")?;
    let kind: u32 = number(req, "commitOrRollback")?;
    let resolution = match kind {
        sys_flag::TRANSACTION_COMMIT_TYPE => Resolution::Commit,
        sys_flag::TRANSACTION_ROLLBACK_TYPE => Resolution::Rollback,
        sys_flag::TRANSACTION_NOT_TYPE => Resolution::Unknown,
        other => {
            return Err(fail(
                req,
                status::SYSTEM_ERROR,
                format!("commitOrRollback {other} is not 0 (unknown), 8 (commit) or 12 (rollback)"),
            ))
        }
    };
    let from_check = field(req, "fromTransactionCheck") == Some("true");
    let group = field(req, "producerGroup")
        .filter(|g| !g.is_empty())
        .map(String::from);
    let ended = ctx
        .core
        .end_transaction(TxnId(offset), resolution, group, from_check)
        .await;
    match ended {
        Ok(Ok(_)) => Ok(ok(req)),
        Ok(Err(e)) => Err(client_error(req, &e)),
        Err(e) => Err(core_failure(req, &e)),
    }
}
