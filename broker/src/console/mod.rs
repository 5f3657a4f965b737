//! The operator console (`--console-listen HOST:PORT`, off by default): a web page built
//! into the binary (broker/console/: plain HTML, JS and CSS, no build step, nothing from a
//! CDN) and the small JSON API it reads, served over HTTP/1.1 on its own listener (TLS when
//! `[tls]` is on, as the other listeners).
//!
//! - Names: a request is answered only when its `Host` names the console (the address the
//!   connection reached, `localhost` on loopback, or an entry of `console_allowed_hosts`) and
//!   its `Origin`, when present, too ([`crate::http::hosts`]): a page of another site that reaches the
//!   console through DNS rebinding is refused (421, 403) before anything else, with
//!   authentication off as on.
//! - Access: with authentication on, every request needs HTTP Basic credentials of a super
//!   user (access key and secret key), as the admin service does; actions (`POST`) also need
//!   the `X-Rocklet-Console` header, which a page of another site cannot send without a CORS
//!   preflight this server never answers. Browsers send `Origin` with every such `POST`, so
//!   an action from a browser is always checked against it; one without `Origin` comes from
//!   a program, not a page.
//! - Bounded: every listing is a page of at most [`MAX_LIMIT`] rows from a cursor the
//!   previous page handed out (the core's `*_after` reads), so no request costs in
//!   proportion to the topics or pending transactions the broker holds; heads, bodies,
//!   connections and the time a request takes to arrive are bounded by the limits of
//!   [`crate::http`], which serves it.
//! - Actions (commit / roll back transactions, resend dead letters) are written to the log
//!   as audit records (`target: rocklet::audit`), naming the operator and the peer.
//!
//! The API (JSON; `after` is the `next` cursor of the previous page, `limit` a page size):
//!
//! | method | path | what |
//! |---|---|---|
//! | GET | `/api/overview` | counters, backlogs and the last hour's [`series`] |
//! | GET | `/api/topics?after&limit` or `?name=` | topics, queues, consumer groups with lag |
//! | GET | `/api/pending?after&limit` | pending transactions: age, checks, next check, group |
//! | POST | `/api/resolve` `{resolution, transactions:[id]}` | commit or roll back |
//! | GET | `/api/message?topic&key` / `?topic&id` / `?topic&queue&offset` | a message and its story |
//! | GET | `/api/delays?after&limit` | delayed messages and when they are due |
//! | GET | `/api/dlq?after&limit` | dead-letter topics |
//! | GET | `/api/dlq/messages?topic&after&limit` | a dead-letter topic's messages |
//! | POST | `/api/dlq/resend` `{topic, offsets:[queue offset]}` | resend to the original topic |

pub mod series;
pub mod story;

use std::net::SocketAddr;
use std::sync::Arc;

use rocklet_core::broker::prop;
use rocklet_core::types::OffsetMsgId;
use rocklet_core::{record, topic, Message, Millis, NewMessage, PendingTxnInfo, Resolution, TxnId};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tracing::{info, warn};

use crate::auth::tls::Tls;
use crate::auth::{Auth, Identity, Protocol};
use crate::clock::Clock;
use crate::driver::{CoreBroker, CoreHandle};
use crate::metrics::Metrics;

use self::series::Series;
use self::story::Stories;
use crate::http::hosts::AllowedHosts;
use crate::http::{self, Handler, HttpRequest, Response};

/// Default and largest page.
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 200;
/// Most transactions or messages one action names.
pub const MAX_ACTION_ITEMS: usize = 200;
/// Most messages a search answers.
pub const MAX_FOUND: usize = 16;
/// Bytes of a body shown.
const BODY_PREVIEW: usize = 1024;
/// Default sampling step of the time series.
pub const DEFAULT_SAMPLE_MS: Millis = 10_000;

const INDEX_HTML: &str = include_str!("../../console/index.html");
const CONSOLE_JS: &str = include_str!("../../console/console.js");
const CONSOLE_CSS: &str = include_str!("../../console/console.css");

/// What the console serves from.
#[derive(Debug)]
pub struct Console {
    core: CoreHandle,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    auth: Arc<Auth>,
    series: Arc<Series>,
    stories: Arc<Stories>,
    started: Millis,
    hosts: AllowedHosts,
}

/// A running console.
#[derive(Debug)]
pub struct RunningConsole {
    /// Where it is served.
    pub addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
    sampler: tokio::task::JoinHandle<()>,
}

impl RunningConsole {
    /// Stops serving and sampling.
    pub fn stop(self) {
        self.accept.abort();
        self.sampler.abort();
    }
}

impl Console {
    /// A console over a running core thread. The core must have been opened with
    /// `Config::trace` on for message stories; `metrics.stories` is set here. `hosts`: the
    /// names it answers to besides its own address (`console_allowed_hosts`).
    #[must_use]
    pub fn new(
        core: CoreHandle,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
        auth: Arc<Auth>,
        sample_ms: Millis,
        hosts: AllowedHosts,
    ) -> Arc<Self> {
        let stories = metrics.stories.get_or_init(Arc::default).clone();
        Arc::new(Console {
            started: clock.now(),
            core,
            clock,
            metrics,
            auth,
            series: Arc::new(Series::new(sample_ms)),
            stories,
            hosts,
        })
    }

    /// Serves on `listener` and samples the series until stopped.
    pub fn serve(self: &Arc<Self>, listener: TcpListener, tls: Option<Arc<Tls>>) -> RunningConsole {
        let addr = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let sampler = tokio::spawn(series::run(
            self.series.clone(),
            self.core.clone(),
            self.metrics.clone(),
            self.clock.clone(),
        ));
        let accept = tokio::spawn(http::serve(listener, self.clone(), tls));
        RunningConsole {
            addr,
            accept,
            sampler,
        }
    }

    /// Answers one parsed request that reached the console at `local`: the names it
    /// carries ([`hosts`]), authentication, then the route.
    pub async fn route(&self, req: &HttpRequest, peer: SocketAddr, local: SocketAddr) -> Response {
        if let Err(r) = self.check_names(req, peer, local) {
            return r;
        }
        let who = match self.check_access(req, peer) {
            Ok(w) => w,
            Err(r) => return r,
        };
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/" | "/index.html") => asset("text/html; charset=utf-8", INDEX_HTML),
            ("GET", "/console.js") => asset("text/javascript; charset=utf-8", CONSOLE_JS),
            ("GET", "/console.css") => asset("text/css; charset=utf-8", CONSOLE_CSS),
            // Browsers ask for it; there is none.
            ("GET", "/favicon.ico") => Response::new(204, "image/x-icon", Vec::new()),
            ("GET", path) if path.starts_with("/api/") => {
                self.metrics.request("Admin");
                json_result(self.get(path, req).await)
            }
            ("POST", path) if path.starts_with("/api/") => {
                self.metrics.request("Admin");
                if req.header("x-rocklet-console").is_none() {
                    return json_error(
                        403,
                        "actions need the X-Rocklet-Console header (sent by the console page)",
                    );
                }
                let body: Value = match serde_json::from_slice(&req.body) {
                    Ok(v) => v,
                    Err(e) => return json_error(400, &format!("the body is not JSON: {e}")),
                };
                json_result(self.post(path, &body, who.name(), peer).await)
            }
            ("GET" | "POST", _) => json_error(404, &format!("no page {}", req.path)),
            _ => json_error(405, &format!("method {} is not served", req.method)),
        }
    }

    /// `Host`, and `Origin` when present, must name this console.
    fn check_names(
        &self,
        req: &HttpRequest,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Result<(), Response> {
        self.hosts.check(req, local).map_err(|(status, msg)| {
            info!(%peer, host = ?req.header("host"), origin = ?req.header("origin"), method = %req.method, path = %req.path, "console request refused: its Host or Origin names another site");
            json_error(status, &msg)
        })
    }

    fn check_access(&self, req: &HttpRequest, peer: SocketAddr) -> Result<Identity, Response> {
        if !self.auth.enabled() {
            return Ok(Identity::Open);
        }
        let challenge = |msg: &str| {
            let mut r = json_error(401, msg);
            r.headers.push((
                "WWW-Authenticate",
                "Basic realm=\"rocklet console\", charset=\"UTF-8\"".into(),
            ));
            r
        };
        let Some((ak, sk)) = req.header("authorization").and_then(basic_credentials) else {
            return Err(challenge(
                "the console needs a super user's access key and secret key (HTTP Basic)",
            ));
        };
        let id = match self.auth.authenticate_secret(&ak, &sk) {
            Ok(id) => id,
            Err(r) => {
                self.auth.refused(Protocol::Admin, &r, &ak, Some(peer.ip()));
                return Err(challenge(&r.message));
            }
        };
        self.auth.require_super(&id).map_err(|r| {
            self.auth
                .refused(Protocol::Admin, &r, id.name(), Some(peer.ip()));
            json_error(403, &r.message)
        })?;
        Ok(id)
    }

    async fn get(&self, path: &str, req: &HttpRequest) -> Result<Value, ApiError> {
        match path {
            "/api/overview" => self.overview().await,
            "/api/topics" => self.topics(req).await,
            "/api/pending" => self.pending(req).await,
            "/api/message" => self.message(req).await,
            "/api/delays" => self.delays(req).await,
            "/api/dlq" => self.dlq(req).await,
            "/api/dlq/messages" => self.dlq_messages(req).await,
            _ => Err(ApiError(404, format!("no API {path}"))),
        }
    }

    async fn post(
        &self,
        path: &str,
        body: &Value,
        who: &str,
        peer: SocketAddr,
    ) -> Result<Value, ApiError> {
        match path {
            "/api/resolve" => self.resolve(body, who, peer).await,
            "/api/dlq/resend" => self.resend(body, who, peer).await,
            _ => Err(ApiError(404, format!("no API {path}"))),
        }
    }

    async fn inspect<T: Send + 'static>(
        &self,
        f: impl FnOnce(&CoreBroker) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        self.core
            .inspect(f)
            .await
            .map_err(|e| ApiError(503, e.to_string()))
    }

    /// As [`Self::inspect`], for a closure that reads the log ([`CoreHandle::read_log`]).
    async fn read_log<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut CoreBroker) -> T + Send + 'static,
    ) -> Result<T, ApiError> {
        self.core
            .read_log(f)
            .await
            .map_err(|e| ApiError(503, e.to_string()))
    }

    async fn overview(&self) -> Result<Value, ApiError> {
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
            "step_ms": self.series.step_ms(),
            "series": self.series.samples(),
        }))
    }

    async fn topics(&self, req: &HttpRequest) -> Result<Value, ApiError> {
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

    async fn pending(&self, req: &HttpRequest) -> Result<Value, ApiError> {
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

    async fn resolve(&self, body: &Value, who: &str, peer: SocketAddr) -> Result<Value, ApiError> {
        let resolution = match body.get("resolution").and_then(Value::as_str) {
            Some("commit") => Resolution::Commit,
            Some("rollback") => Resolution::Rollback,
            other => {
                return Err(ApiError(
                    400,
                    format!("`resolution` must be \"commit\" or \"rollback\", not {other:?}"),
                ))
            }
        };
        let ids = string_list(body, "transactions")?;
        let mut results = Vec::new();
        for id in ids {
            let r = self.resolve_one(&id, resolution).await;
            match &r {
                Ok(duplicate) => info!(
                    target: "rocklet::audit",
                    action = "resolve",
                    transaction = %id,
                    resolution = resolution.as_str(),
                    duplicate,
                    operator = who,
                    %peer,
                    "transaction resolved by an operator from the console"
                ),
                Err(e) => warn!(
                    target: "rocklet::audit",
                    action = "resolve",
                    transaction = %id,
                    resolution = resolution.as_str(),
                    operator = who,
                    %peer,
                    error = %e,
                    "an operator's resolve from the console failed"
                ),
            }
            if let (Ok(false), Ok(txn)) = (&r, id.parse::<TxnId>()) {
                self.stories.note(
                    txn.0,
                    self.clock.now(),
                    "operator_resolved",
                    format!("{} by {who} from the console", resolution.as_str()),
                );
            }
            results.push(match r {
                Ok(duplicate) => json!({"transaction_id": id, "ok": true, "duplicate": duplicate}),
                Err(e) => json!({"transaction_id": id, "ok": false, "error": e}),
            });
        }
        Ok(json!({"resolution": resolution.as_str(), "results": results}))
    }

    async fn resolve_one(&self, id: &str, resolution: Resolution) -> Result<bool, String> {
        let txn: TxnId = id.parse().map_err(|e| format!("{e}"))?;
        crate::ops::resolve(&self.core, txn, resolution)
            .await
            .map_err(|e| e.to_string())
    }

    async fn message(&self, req: &HttpRequest) -> Result<Value, ApiError> {
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

    async fn delays(&self, req: &HttpRequest) -> Result<Value, ApiError> {
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

    async fn dlq(&self, req: &HttpRequest) -> Result<Value, ApiError> {
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

    async fn dlq_messages(&self, req: &HttpRequest) -> Result<Value, ApiError> {
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

    async fn resend(&self, body: &Value, who: &str, peer: SocketAddr) -> Result<Value, ApiError> {
        let t = dlq_topic(body.get("topic").and_then(Value::as_str))?;
        let offsets: Vec<u64> = match body.get("offsets").and_then(Value::as_array) {
            Some(a) if a.len() <= MAX_ACTION_ITEMS => a
                .iter()
                .map(|v| {
                    v.as_u64().ok_or_else(|| {
                        ApiError(400, format!("`offsets`: {v} is not a queue offset"))
                    })
                })
                .collect::<Result<_, _>>()?,
            Some(a) => {
                return Err(ApiError(
                    400,
                    format!(
                        "`offsets` names {} messages; at most {MAX_ACTION_ITEMS} per action",
                        a.len()
                    ),
                ))
            }
            None => {
                return Err(ApiError(
                    400,
                    "`offsets` (a list of queue offsets) is required".into(),
                ))
            }
        };
        let mut results = Vec::new();
        for off in offsets {
            let r = self.resend_one(&t, off).await;
            match &r {
                Ok((to, id)) => {
                    info!(target: "rocklet::audit", action = "resend", dlq = %t, queue_offset = off,
                    to = %to, message_id = %id, operator = who, %peer,
                    "dead letter resent to its original topic by an operator from the console")
                }
                Err(e) => {
                    warn!(target: "rocklet::audit", action = "resend", dlq = %t, queue_offset = off,
                    operator = who, %peer, error = %e, "an operator's resend from the console failed")
                }
            }
            results.push(match r {
                Ok((to, id)) => {
                    json!({"queue_offset": off, "ok": true, "topic": to, "message_id": id})
                }
                Err(e) => json!({"queue_offset": off, "ok": false, "error": e}),
            });
        }
        Ok(json!({"results": results}))
    }

    async fn resend_one(&self, dlq: &str, off: u64) -> Result<(String, String), String> {
        let t = dlq.to_string();
        let m = self
            .core
            .read_log(move |b| b.browse(&t, 0, off, 1).map_err(|e| e.to_string()))
            .await
            .map_err(|e| e.to_string())??
            .into_iter()
            .find(|m| m.queue_offset == off)
            .ok_or_else(|| format!("no message at queue offset {off} of {dlq}"))?;
        let to = m
            .property(prop::RETRY_TOPIC)
            .ok_or_else(|| {
                format!("the message at {off} of {dlq} names no original topic (RETRY_TOPIC)")
            })?
            .to_string();
        let id = m
            .property(prop::ORIGIN_MESSAGE_ID)
            .unwrap_or(m.msg_id.as_str())
            .to_string();
        let mut out = NewMessage::new(to.clone(), m.body.clone());
        out.tag = m.tag.clone();
        out.keys = m.keys.clone();
        out.flag = m.flag;
        out.born_timestamp = Some(m.born_timestamp);
        out.message_id = Some(id.clone());
        out.properties = m
            .properties
            .iter()
            .filter(|(k, _)| {
                ![
                    prop::RETRY_TOPIC,
                    prop::ORIGIN_MESSAGE_ID,
                    prop::RECONSUME_TIME,
                    prop::UNIQ_KEY,
                ]
                .contains(&k.as_str())
                    && !prop::RESERVED.contains(&k.as_str())
            })
            .cloned()
            .collect();
        match self.core.send(vec![out]).await.map_err(|e| e.to_string())? {
            Ok(_) => Ok((to, id)),
            Err(e) => Err(format!("{}: {e}", e.code())),
        }
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

fn dlq_topic(t: Option<&str>) -> Result<String, ApiError> {
    match t {
        Some(t) if t.starts_with(topic::DLQ_PREFIX) => Ok(t.to_string()),
        Some(t) => Err(ApiError(
            400,
            format!("`topic` {t:?} is not a dead-letter topic (%DLQ%<group>)"),
        )),
        None => Err(ApiError(
            400,
            "`topic` (a %DLQ%<group> topic) is required".into(),
        )),
    }
}

fn string_list(body: &Value, field: &str) -> Result<Vec<String>, ApiError> {
    let Some(a) = body.get(field).and_then(Value::as_array) else {
        return Err(ApiError(400, format!("`{field}` (a list) is required")));
    };
    if a.is_empty() || a.len() > MAX_ACTION_ITEMS {
        return Err(ApiError(
            400,
            format!(
                "`{field}` names {}; 1 to {MAX_ACTION_ITEMS} per action",
                a.len()
            ),
        ));
    }
    a.iter()
        .map(|v| {
            v.as_str()
                .map(String::from)
                .ok_or_else(|| ApiError(400, format!("`{field}`: {v} is not a string")))
        })
        .collect()
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

impl Handler for Console {
    const NAME: &'static str = "console";
    const HEADERS: &'static [(&'static str, &'static str)] = &[
        ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"),
        ("X-Frame-Options", "DENY"),
        (
            "Content-Security-Policy",
            "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
        ),
    ];

    async fn respond(&self, req: HttpRequest, peer: SocketAddr, local: SocketAddr) -> Response {
        self.route(&req, peer, local).await
    }

    fn refusal(&self, status: u16, msg: &str) -> Response {
        json_error(status, msg)
    }
}

/// An API error: HTTP status and message.
#[derive(Debug)]
pub struct ApiError(pub u16, pub String);

fn json_result(r: Result<Value, ApiError>) -> Response {
    match r {
        Ok(v) => json_response(200, &v),
        Err(ApiError(status, msg)) => json_error(status, &msg),
    }
}

fn asset(content_type: &'static str, body: &str) -> Response {
    Response::new(200, content_type, body.as_bytes())
}

fn json_response(status: u16, v: &Value) -> Response {
    Response::new(
        status,
        "application/json",
        serde_json::to_vec(v).unwrap_or_default(),
    )
}

fn json_error(status: u16, msg: &str) -> Response {
    json_response(status, &json!({"error": msg}))
}

fn basic_credentials(h: &str) -> Option<(String, String)> {
    use base64::Engine as _;
    let b64 = h
        .strip_prefix("Basic ")
        .or_else(|| h.strip_prefix("basic "))?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (ak, sk) = s.split_once(':')?;
    Some((ak.to_string(), sk.to_string()))
}

/// Binds the console's listener.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen for the console on {addr}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_read() {
        assert_eq!(
            basic_credentials("Basic YWRtaW46czNjcjN0"),
            Some(("admin".into(), "s3cr3t".into()))
        );
        assert_eq!(basic_credentials("Bearer x"), None);
    }
}
