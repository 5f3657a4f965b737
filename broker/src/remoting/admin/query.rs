//! mqadmin's message lookups: queryMsgById (VIEW_MESSAGE_BY_ID), queryMsgByKey and
//! queryMsgByUniqueKey (QUERY_MESSAGE), offsets by time (SEARCH_OFFSET_BY_TIMESTAMP) and
//! consume-queue entries (queryCq: QUERY_CONSUME_QUEUE).

use rocklet_core::record::sys_flag;
use rocklet_core::types::OffsetMsgId;
use rocklet_core::TopicInfo;
use serde_json::json;

use super::{store_time, topic_info, with_body};
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::status;
use crate::remoting::conn::Ctx;
use crate::remoting::message::encode_message;
use crate::remoting::reply::{core_failure, fail, field, number, number_or, ok, required, Answer};

/// Most messages one QUERY_MESSAGE answers (RocketMQ's `maxMsgsNumBatch`, 64; mqadmin asks
/// for 64).
pub const MAX_QUERY: usize = 64;
/// Messages a queryMsgByUniqueKey asks for (RocketMQ's `defaultQueryMaxNum`).
const UNIQUE_QUERY_MAX: usize = 32;

/// VIEW_MESSAGE_BY_ID (queryMsgById): the record at a log offset, as stored.
pub(super) async fn view_message(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let offset: u64 = number(req, "offset")?;
    let r = ctx
        .core
        .read_log(move |b| b.raw_records(offset, 1).map_err(|e| e.to_string()))
        .await
        .map_err(|e| core_failure(req, &e))?;
    match r {
        Ok(recs) => match recs.into_iter().next() {
            Some((at, bytes)) if at == offset => Ok(with_body(req, bytes)),
            _ => Err(fail(
                req,
                status::SYSTEM_ERROR,
                format!("no message at log offset {offset}"),
            )),
        },
        Err(e) => Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!("no message at log offset {offset}: {e}"),
        )),
    }
}

/// QUERY_MESSAGE (queryMsgByKey; queryMsgByUniqueKey with `_UNIQUE_KEY_QUERY`): the visible
/// messages of the topic with the key (KEYS) or message id (UNIQ_KEY), stored between
/// `beginTimestamp` and `endTimestamp`, newest first, at most `maxNum` (bounded by
/// [`MAX_QUERY`]); QUERY_NOT_FOUND when there are none, as Apache answers. The body holds
/// the records as pulls carry them; the client keeps those that name the key.
pub(super) async fn query_message(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let topic = required(req, "topic")?.to_string();
    let key = required(req, "key")?.to_string();
    let unique = field(req, "_UNIQUE_KEY_QUERY") == Some("true");
    let max = if unique {
        UNIQUE_QUERY_MAX
    } else {
        let n: i64 = number(req, "maxNum")?;
        usize::try_from(n.max(1))
            .unwrap_or(MAX_QUERY)
            .min(MAX_QUERY)
    };
    let begin: i64 = number_or(req, "beginTimestamp", 0)?;
    let end: i64 = number_or(req, "endTimestamp", i64::MAX)?;
    let stored = u64::try_from(begin).unwrap_or(0)..=u64::try_from(end).unwrap_or(0);
    let t = topic.clone();
    let r = ctx
        .core
        .read_log(move |b| {
            let mut found = b
                .messages_by_key_stored(&t, &key, max, stored)
                .map_err(|e| e.to_string())?;
            // By unique key, an offset message id finds its record too (what a message
            // without UNIQ_KEY goes by, and what send results name), in either form.
            if unique && found.is_empty() {
                if let Some((_, off)) = OffsetMsgId::parse(&key) {
                    found.extend(b.message_at(off).map_err(|e| e.to_string())?.filter(|m| {
                        m.topic == t
                            && OffsetMsgId::new(m.store_host, m.offset)
                                .as_str()
                                .eq_ignore_ascii_case(&key)
                    }));
                }
            }
            Ok::<_, String>((found, b.log_end()))
        })
        .await
        .map_err(|e| core_failure(req, &e))?;
    let (found, log_end) = r.map_err(|e| {
        fail(
            req,
            status::SYSTEM_ERROR,
            format!("reading the messages of key lookup in `{topic}`: {e}"),
        )
    })?;
    let mut resp = if found.is_empty() {
        fail(
            req,
            status::QUERY_NOT_FOUND,
            "can not find message, maybe time range not correct",
        )
    } else {
        let mut body = Vec::new();
        for m in &found {
            let sys = m.sys_flag & sys_flag::TRANSACTION_TYPE_MASK;
            body.extend(encode_message(m, m.offset, sys, &[]));
        }
        with_body(req, body)
    };
    // The index is current: it is updated as each message is written.
    let newest = found.iter().map(|m| m.store_timestamp).max().unwrap_or(0);
    resp.ext
        .insert("indexLastUpdateTimestamp".into(), newest.to_string());
    resp.ext
        .insert("indexLastUpdatePhyoffset".into(), log_end.to_string());
    if found.is_empty() {
        return Err(resp);
    }
    Ok(resp)
}

/// The first queue offset whose message was stored at or after `ts` (the queue's end when
/// none is), by binary search: O(log n) record reads. Store times only grow along a queue.
pub(super) async fn offset_at(ctx: &Ctx, t: &TopicInfo, queue_id: u32, ts: u64) -> Option<u64> {
    let &(_, next, _) = t.queues.iter().find(|q| q.0 == queue_id)?;
    let (mut lo, mut hi) = (0u64, next);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match store_time(ctx, &t.name, queue_id, mid).await {
            Some(at) if at >= ts => hi = mid,
            _ => lo = mid + 1,
        }
    }
    Some(lo)
}

/// SEARCH_OFFSET_BY_TIMESTAMP: the queue offset of the first message stored at or after the
/// time.
pub(super) async fn search_offset(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let name = required(req, "topic")?.to_string();
    let queue_id: u32 = number(req, "queueId")?;
    let ts: u64 = number(req, "timestamp")?;
    let t = topic_info(ctx, req, &name).await?;
    let Some(offset) = offset_at(ctx, &t, queue_id, ts).await else {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!(
                "queue {queue_id} does not exist in topic `{name}` ({} queues)",
                t.queues.len()
            ),
        ));
    };
    let mut r = ok(req);
    r.ext.insert("offset".into(), offset.to_string());
    Ok(r)
}

/// Most consume-queue entries one QUERY_CONSUME_QUEUE shows (mqadmin queryCq asks for 10 by
/// default).
pub const MAX_CQ_ENTRIES: u64 = 64;

/// Java's `String.hashCode`, which RocketMQ's consume queue keeps as a message's tag code.
#[must_use]
pub fn java_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// QUERY_CONSUME_QUEUE (queryCq): the consume-queue entries of a queue from `index`, at most
/// `count` (bounded by [`MAX_CQ_ENTRIES`]): each visible message's log offset, record size
/// and tag code, with the queue's first and next index. Rocklet keeps no consume-queue
/// extension or bloom filter (`extendDataJson`, `bitMap` left out) and does not evaluate a
/// group's filter here (`eval`, `msg` left out).
pub(super) async fn query_cq(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let name = required(req, "topic")?.to_string();
    let queue_id: u32 = number(req, "queueId")?;
    let index: u64 = number(req, "index")?;
    let count: u64 = number_or(req, "count", 10u64)?;
    let t = topic_info(ctx, req, &name).await?;
    let Some(&(_, next, _)) = t.queues.iter().find(|q| q.0 == queue_id) else {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            format!(
                "queue {queue_id} does not exist in topic `{name}` ({} queues)",
                t.queues.len()
            ),
        ));
    };
    let max = count.clamp(1, MAX_CQ_ENTRIES) as usize;
    let n = name.clone();
    let r = ctx
        .core
        .read_log(move |b| {
            let min = b.queue_min_offset(&n, queue_id).unwrap_or(0);
            let mut rows = Vec::new();
            for m in b
                .browse(&n, queue_id, index, max)
                .map_err(|e| e.to_string())?
            {
                let size = b
                    .raw_records(m.offset, 1)
                    .map_err(|e| e.to_string())?
                    .first()
                    .filter(|(at, _)| *at == m.offset)
                    .map_or(0, |(_, bytes)| bytes.len());
                rows.push(json!({
                    "physicOffset": m.offset,
                    "physicSize": size,
                    "tagsCode": m.tag.as_deref().map_or(0, java_hash),
                }));
            }
            Ok::<_, String>((min, rows))
        })
        .await
        .map_err(|e| core_failure(req, &e))?;
    let (min, rows) = r.map_err(|e| {
        fail(
            req,
            status::SYSTEM_ERROR,
            format!("reading queue {queue_id} of `{name}`: {e}"),
        )
    })?;
    // RocketMQ's maxQueueIndex is the queue's next offset.
    let body = json!({
        "queueData": rows,
        "maxQueueIndex": next,
        "minQueueIndex": min,
    });
    Ok(with_body(req, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_codes_are_javas_string_hash() {
        // "TagA".hashCode() and "".hashCode() in Java; a non-ASCII tag hashes its UTF-16.
        assert_eq!(java_hash("TagA"), 2_598_919);
        assert_eq!(java_hash(""), 0);
        assert_eq!(java_hash("é"), 233);
        assert_eq!(java_hash("a-much-longer-tag-name-that-overflows"), {
            let mut h = 0i32;
            for c in "a-much-longer-tag-name-that-overflows".bytes() {
                h = h.wrapping_mul(31).wrapping_add(i32::from(c));
            }
            h
        });
    }
}
