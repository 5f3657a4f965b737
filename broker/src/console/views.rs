//! The console's read-only API: the overview, topics, pending transactions, a message and
//! its story, delayed messages, dead-letter topics; each a page from a cursor.

use rocklet_core::broker::prop;
use rocklet_core::types::OffsetMsgId;
use rocklet_core::{record, topic, Message, Millis, PendingTxnInfo, TxnId};
use serde_json::{json, Value};

use super::story;
use crate::driver::CoreBroker;
use crate::http::HttpRequest;

use super::{dlq_topic, ApiError, Console, BODY_PREVIEW, DEFAULT_LIMIT, MAX_FOUND, MAX_LIMIT};

impl Console {
    pub(super) async fn overview(&self) -> Result<Value, ApiError> {
        let (stats, halves, delays, log_end, topics, cfg) = self
            .inspect(|b| {
                let c = b.config();
                (
                    b.stats(),
                    b.pending_transaction_count(),
                    b.pending_delay_count(),
                    b.log_end(),
                    b.topic_slots(),
                    (
                        c.transaction_timeout_ms,
                        c.transaction_check_interval_ms,
                        c.transaction_check_max,
                    ),
                )
            })
            .await?;
        let now = self.clock.now();
        let series = self.series.samples();
        let step_ms = self.series.step_ms();
        let cluster = match self.cluster.get() {
            Some(link) => link.json().await,
            None => Value::Null,
        };
        Ok(json!({
            "now": now,
            "uptime_ms": now.saturating_sub(self.started),
            "half_backlog": halves,
            "delay_backlog": delays,
            "log_end_bytes": log_end,
            "topic_slots": topics,
            "stories": self.stories.len(),
            "stats": {
                "messages_stored": stats.messages_stored,
                "halves_stored": stats.halves_stored,
                "committed": stats.committed,
                "rolled_back": stats.rolled_back,
                "checks_sent": stats.checks_sent,
                "checks_answered": stats.checks_answered,
                "check_max_reached": stats.check_max_reached,
                "received": stats.received,
                "acked": stats.acked,
                "redelivered": stats.redelivered,
                "dead_lettered": stats.dead_lettered,
                "delayed_stored": stats.delayed_stored,
                "delayed_delivered": stats.delayed_delivered,
                "end_transactions": self.metrics.end_transaction_latency.count(),
            },
            "transaction_timeout_ms": cfg.0,
            "transaction_check_interval_ms": cfg.1,
            "transaction_check_max": cfg.2,
            "step_ms": step_ms,
            "cluster": cluster,
            "alerts": super::alerts::active(&series, step_ms),
            "thresholds": super::alerts::RULES
                .iter()
                .map(|r| (r.alert, r.threshold))
                .collect::<std::collections::BTreeMap<_, _>>(),
            "series": series,
        }))
    }

    pub(super) async fn topics(&self, req: &HttpRequest) -> Result<Value, ApiError> {
        let (after, limit) = paging(req)?;
        let name = req.param("name").map(String::from);
        let (page, lags, mins) = self
            .inspect(move |b| {
                let page = match name {
                    Some(n) => rocklet_core::Page {
                        items: b.topic_info(&n).into_iter().collect(),
                        next: None,
                    },
                    None => b.topics_after(after, limit),
                };
                let names: Vec<&str> = page.items.iter().map(|t| t.name.as_str()).collect();
                let lags = b.group_lags(&names);
                let mins: Vec<Vec<u64>> = page
                    .items
                    .iter()
                    .map(|t| {
                        t.queues
                            .iter()
                            .map(|q| b.queue_min_offset(&t.name, q.0).unwrap_or(0))
                            .collect()
                    })
                    .collect();
                (page, lags, mins)
            })
            .await?;
        let items: Vec<Value> = page
            .items
            .iter()
            .zip(mins)
            .map(|(t, mins)| {
                let queues: Vec<Value> = t
                    .queues
                    .iter()
                    .zip(mins.iter().copied())
                    .map(|(&(id, next, visible), min)| {
                        json!({"queue_id": id, "min_offset": min, "next_offset": next, "visible_end": visible,
                               "messages": visible.saturating_sub(min)})
                    })
                    .collect();
                let messages: u64 = t
                    .queues
                    .iter()
                    .map(|q| q.2)
                    .sum::<u64>();
                let mut groups: Vec<Value> = Vec::new();
                // A group that reads some queue of the topic is behind in every one: where it
                // has no state yet it starts at the queue's first message (as the core does).
                let mut by_group: std::collections::BTreeMap<(&str, bool), (u64, u64)> =
                    std::collections::BTreeMap::new();
                let mine: Vec<_> = lags.iter().filter(|l| l.topic == t.name).collect();
                for l in &mine {
                    by_group.entry((l.group.as_str(), l.pop)).or_default();
                }
                for (&(g, pop), e) in by_group.iter_mut() {
                    for (&(id, _, visible), min) in t.queues.iter().zip(mins.iter()) {
                        match mine.iter().find(|l| l.group == g && l.pop == pop && l.queue_id == id) {
                            Some(l) => {
                                e.0 += l.behind;
                                e.1 += l.inflight;
                            }
                            None => e.0 += visible.saturating_sub(*min),
                        }
                    }
                }
                for ((g, pop), (behind, inflight)) in by_group {
                    groups.push(json!({"group": g, "mode": if pop { "receive" } else { "pull" },
                                       "lag": behind, "inflight": inflight}));
                }
                json!({"name": t.name, "kind": kind_of(&t.name), "queues": queues, "messages": messages, "groups": groups})
            })
            .collect();
        Ok(json!({"items": items, "next": page.next}))
    }

    pub(super) async fn pending(&self, req: &HttpRequest) -> Result<Value, ApiError> {
        let (after, limit) = paging(req)?;
        let (total, page) = self
            .read_log(move |b| {
                let total = b.pending_transaction_count();
                let page = b.pending_transactions_after(after.map(TxnId), limit);
                let rows: Vec<(PendingTxnInfo, Option<RecordFacts>)> = page
                    .items
                    .into_iter()
                    .map(|p| {
                        let facts = record_facts(b, p.txn.0);
                        (p, facts)
                    })
                    .collect();
                (total, (rows, page.next))
            })
            .await?;
        let now = self.clock.now();
        let items: Vec<Value> = page
            .0
            .into_iter()
            .map(|(p, f)| {
                let f = f.unwrap_or_default();
                json!({
                    "transaction_id": p.txn.to_string(),
                    "producer_group": p.group,
                    "topic": p.topic,
                    "queue_id": p.queue_id,
                    "checks": p.checks,
                    "age_ms": f.stored.map(|s| now.saturating_sub(s)),
                    "next_check_in_ms": p.next_check.map(|t| t as i64 - now as i64),
                    "state": if p.next_check.is_some() { "waiting" } else { "parked" },
                    "message_id": f.msg_id,
                    "keys": f.keys,
                    "tag": f.tag,
                })
            })
            .collect();
        Ok(json!({"total": total, "items": items, "next": page.1}))
    }

    pub(super) async fn message(&self, req: &HttpRequest) -> Result<Value, ApiError> {
        let topic_name = req
            .param("topic")
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ApiError(400, "`topic` is required".into()))?
            .to_string();
        enum By {
            Key(String),
            Place(u32, u64),
        }
        let by = if let Some(k) = req
            .param("key")
            .or(req.param("id"))
            .filter(|k| !k.is_empty())
        {
            By::Key(k.to_string())
        } else if let (Some(q), Some(o)) = (req.param("queue"), req.param("offset")) {
            By::Place(num(q, "queue")? as u32, num(o, "offset")?)
        } else {
            return Err(ApiError(
                400,
                "name a message: `key`, `id`, or `queue` and `offset`".into(),
            ));
        };
        let t = topic_name.clone();
        let found = self
            .read_log(move |b| -> Result<Vec<Found>, String> {
                let msgs = match by {
                    By::Key(k) => {
                        let mut found = b
                            .messages_by_key(&t, &k, MAX_FOUND)
                            .map_err(|e| e.to_string())?;
                        // An offset message id (what a message with no client id goes by,
                        // and what remoting send results name): its log offset is in it,
                        // and the record there must be this broker's record of that id.
                        if found.is_empty() {
                            if let Some((_, off)) = OffsetMsgId::parse(&k) {
                                found.extend(b.message_at(off).map_err(|e| e.to_string())?.filter(
                                    |m| {
                                        m.topic == t
                                            && OffsetMsgId::new(m.store_host, m.offset)
                                                .as_str()
                                                .eq_ignore_ascii_case(&k)
                                    },
                                ));
                            }
                        }
                        found
                    }
                    By::Place(q, o) => b
                        .browse(&t, q, o, 1)
                        .map_err(|e| e.to_string())?
                        .into_iter()
                        .filter(|m| m.queue_offset == o)
                        .collect(),
                };
                let mut out = Vec::new();
                for m in msgs {
                    let facts = record_facts(b, m.offset);
                    let lags = b.group_lags(&[m.topic.as_str()]);
                    let pending = b.pending_transaction(TxnId(m.offset));
                    out.push(Found {
                        lags,
                        facts,
                        pending,
                        dlq: Vec::new(),
                        message: m,
                    });
                }
                Ok(out)
            })
            .await?
            .map_err(|e| ApiError(500, e))?;
        let mut items = Vec::new();
        for mut f in found {
            // Dead-letter copies: in the DLQ of every group that received it.
            let mut groups: Vec<String> = f.lags.iter().map(|l| l.group.clone()).collect();
            let story = self.stories.of(f.message.offset);
            for e in &story {
                if matches!(e.kind, "received" | "redelivered" | "acked") {
                    if let Some(g) = e.detail.split(' ').next().filter(|g| !g.is_empty()) {
                        groups.push(g.to_string());
                    }
                }
            }
            groups.sort();
            groups.dedup();
            groups.truncate(16);
            let id = f.message.msg_id.clone();
            let mut names = vec![id.clone()];
            names.extend(f.message.keys.iter().take(4).cloned());
            f.dlq = self
                .read_log(move |b| {
                    let mut out: Vec<Message> = Vec::new();
                    // Its copies: sent back for retry (%RETRY%<group>) or dead-lettered.
                    let places = groups.iter().flat_map(|g| [topic::retry(g), topic::dlq(g)]);
                    for place in places {
                        for n in &names {
                            let Ok(ms) = b.messages_by_key(&place, n, 4) else {
                                continue;
                            };
                            for d in ms {
                                let same = d.msg_id == id
                                    || d.property(prop::ORIGIN_MESSAGE_ID) == Some(id.as_str());
                                if same && !out.iter().any(|o| o.offset == d.offset) {
                                    out.push(d);
                                }
                            }
                        }
                    }
                    out
                })
                .await?;
            items.push(self.found_json(f, story));
        }
        Ok(json!({"items": items}))
    }

    fn found_json(&self, f: Found, story: Vec<story::Event>) -> Value {
        let m = &f.message;
        let facts = f.facts.unwrap_or_default();
        let mut events: Vec<Value> = Vec::new();
        // From the log itself (kept across restarts): where the record lives, unless the
        // trace saw it come in.
        let traced_in = story
            .iter()
            .any(|e| matches!(e.kind, "stored" | "half_stored" | "delay_stored"));
        match facts.record_topic.as_deref() {
            _ if traced_in => {}
            Some(topic::HALF) => events.push(json!({"at": m.store_timestamp, "kind": "half_stored",
                "detail": "prepared as a half message (RMQ_SYS_TRANS_HALF_TOPIC), per the log", "source": "log"})),
            Some(topic::SCHEDULE) => events.push(json!({"at": m.store_timestamp, "kind": "delay_stored",
                "detail": "stored as a delayed message (SCHEDULE_TOPIC_XXXX), per the log", "source": "log"})),
            _ => events.push(json!({"at": m.store_timestamp, "kind": "stored",
                "detail": "stored, per the log", "source": "log"})),
        }
        for e in &story {
            events.push(json!({"at": e.at, "kind": e.kind, "topic": e.topic, "detail": e.detail, "source": "trace"}));
        }
        let groups: Vec<Value> = f
            .lags
            .iter()
            .filter(|l| l.queue_id == m.queue_id)
            .map(|l| {
                json!({"group": l.group, "mode": if l.pop { "receive" } else { "pull" },
                       "position": l.consumed, "past_it": l.consumed > m.queue_offset})
            })
            .collect();
        let copy = |d: &Message| {
            let s = self.stories.of(d.offset);
            json!({"topic": d.topic, "queue_offset": d.queue_offset, "offset": d.offset,
                   "stored": d.store_timestamp, "reconsume_times": d.reconsume_times,
                   "story": s.iter().map(|e| json!({"at": e.at, "kind": e.kind, "detail": e.detail})).collect::<Vec<_>>()})
        };
        let (dead, retried): (Vec<&Message>, Vec<&Message>) = f
            .dlq
            .iter()
            .partition(|d| d.topic.starts_with(topic::DLQ_PREFIX));
        let retries: Vec<Value> = retried.into_iter().map(copy).collect();
        let dlq: Vec<Value> = dead
            .into_iter()
            .map(|d| {
                let s = self.stories.of(d.offset);
                json!({"topic": d.topic, "queue_offset": d.queue_offset, "offset": d.offset,
                       "stored": d.store_timestamp, "reconsume_times": d.reconsume_times,
                       "story": s.iter().map(|e| json!({"at": e.at, "kind": e.kind, "detail": e.detail})).collect::<Vec<_>>()})
            })
            .collect();
        json!({
            "message": message_json(m),
            "record_topic": facts.record_topic,
            "pending": f.pending.map(|p| json!({"checks": p.checks, "next_check": p.next_check, "producer_group": p.group})),
            "story": events,
            "groups": groups,
            "dead_letters": dlq,
            "retries": retries,
            "story_complete": !story.is_empty(),
        })
    }

    pub(super) async fn delays(&self, req: &HttpRequest) -> Result<Value, ApiError> {
        let (after, limit) = paging(req)?;
        let (total, rows, next) = self
            .read_log(move |b| {
                let page = b.pending_delays_after(after, limit);
                let rows: Vec<_> = page
                    .items
                    .into_iter()
                    .map(|d| {
                        let f = record_facts(b, d.offset);
                        (d, f)
                    })
                    .collect();
                (b.pending_delay_count(), rows, page.next)
            })
            .await?;
        let now = self.clock.now();
        let mut items: Vec<Value> = rows
            .into_iter()
            .map(|(d, f)| {
                let f = f.unwrap_or_default();
                json!({"offset": d.offset, "topic": d.topic, "queue_id": d.queue_id, "due": d.due,
                       "due_in_ms": d.due as i64 - now as i64, "stored": f.stored,
                       "message_id": f.msg_id, "keys": f.keys, "tag": f.tag})
            })
            .collect();
        // This page by due time (pages follow the log).
        items.sort_by_key(|v| v["due"].as_u64());
        Ok(json!({"total": total, "items": items, "next": next}))
    }

    pub(super) async fn dlq(&self, req: &HttpRequest) -> Result<Value, ApiError> {
        let (after, limit) = paging(req)?;
        let page = self
            .inspect(move |b| b.dead_letter_topics_after(after, limit))
            .await?;
        let items: Vec<Value> = page
            .items
            .iter()
            .map(|t| {
                let group = t.name.strip_prefix(topic::DLQ_PREFIX).unwrap_or(&t.name);
                let messages: u64 = t.queues.iter().map(|q| q.2).sum();
                json!({"topic": t.name, "group": group, "messages": messages})
            })
            .collect();
        Ok(json!({"items": items, "next": page.next}))
    }

    pub(super) async fn dlq_messages(&self, req: &HttpRequest) -> Result<Value, ApiError> {
        let t = dlq_topic(req.param("topic"))?;
        let (after, limit) = paging(req)?;
        let from = after.map_or(0, |a| a + 1);
        let msgs = self
            .read_log(move |b| b.browse(&t, 0, from, limit + 1))
            .await?
            .map_err(|e| ApiError(500, e.to_string()))?;
        let more = msgs.len() > limit;
        let msgs = &msgs[..msgs.len().min(limit)];
        let next = if more {
            msgs.last().map(|m| m.queue_offset)
        } else {
            None
        };
        let items: Vec<Value> = msgs
            .iter()
            .map(|m| {
                let mut v = message_json(m);
                v["original_topic"] = json!(m.property(prop::RETRY_TOPIC));
                v["original_message_id"] = json!(m.property(prop::ORIGIN_MESSAGE_ID));
                v
            })
            .collect();
        Ok(json!({"items": items, "next": next}))
    }
}

struct Found {
    message: Message,
    facts: Option<RecordFacts>,
    lags: Vec<rocklet_core::GroupLag>,
    pending: Option<PendingTxnInfo>,
    dlq: Vec<Message>,
}

/// What the record at a log offset says.
#[derive(Default, Debug)]
struct RecordFacts {
    stored: Option<Millis>,
    record_topic: Option<String>,
    msg_id: Option<String>,
    keys: Vec<String>,
    tag: Option<String>,
}

fn record_facts(b: &mut CoreBroker, offset: u64) -> Option<RecordFacts> {
    let (_, bytes) = b.raw_records(offset, 1).ok()?.into_iter().next()?;
    match record::decode_trusted(&bytes) {
        Ok(record::Decoded::Record(r)) => Some(RecordFacts {
            stored: Some(r.header.store_timestamp),
            record_topic: Some(r.topic.to_string()),
            msg_id: r.prop(prop::UNIQ_KEY).map(String::from),
            keys: r
                .prop(prop::KEYS)
                .map(|k| {
                    k.split(' ')
                        .filter(|k| !k.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
            tag: r.prop(prop::TAGS).map(String::from),
        }),
        _ => None,
    }
}

fn message_json(m: &Message) -> Value {
    let preview = &m.body[..m.body.len().min(BODY_PREVIEW)];
    json!({
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "offset": m.offset,
        "message_id": m.msg_id,
        "tag": m.tag,
        "keys": m.keys,
        "properties": m.properties,
        "body": String::from_utf8_lossy(preview),
        "body_bytes": m.body.len(),
        "born": m.born_timestamp,
        "stored": m.store_timestamp,
        "reconsume_times": m.reconsume_times,
        "transactional": m.sys_flag & record::sys_flag::TRANSACTION_TYPE_MASK == record::sys_flag::TRANSACTION_COMMIT_TYPE,
    })
}

fn kind_of(name: &str) -> &'static str {
    if name.starts_with(topic::DLQ_PREFIX) {
        "dead-letter"
    } else if name.starts_with("%RETRY%") {
        "retry"
    } else if topic::is_system(name) {
        "system"
    } else {
        "user"
    }
}

fn num(v: &str, name: &str) -> Result<u64, ApiError> {
    v.parse().map_err(|_| {
        ApiError(
            400,
            format!("`{name}` must be a non-negative integer, not {v:?}"),
        )
    })
}

fn paging(req: &HttpRequest) -> Result<(Option<u64>, usize), ApiError> {
    let after = match req.param("after").filter(|a| !a.is_empty()) {
        Some(a) => Some(num(a, "after")?),
        None => None,
    };
    let limit = match req.param("limit").filter(|a| !a.is_empty()) {
        Some(l) => {
            let l = num(l, "limit")? as usize;
            if l == 0 || l > MAX_LIMIT {
                return Err(ApiError(
                    400,
                    format!("`limit` must be 1 to {MAX_LIMIT}, not {l}"),
                ));
            }
            l
        }
        None => DEFAULT_LIMIT,
    };
    Ok((after, limit))
}
