//! The operator console (`--console-listen HOST:PORT`, off by default): a web page built
//! into the binary (broker/console/: plain HTML, JS and CSS, no build step, nothing from a
//! CDN) and the small JSON API it reads, served over HTTP/1.1 on its own listener (TLS when
//! `[tls]` is on, as the other listeners).
//!
//! The folder: `mod.rs` (the listener, the name and access checks, routing), `views.rs` (the
//! read-only API below), `actions.rs` (resolve, resend), `series.rs` (the overview's time
//! series), `alerts.rs` (the alert rules that would fire now, over that series), `cluster.rs` (the
//! broker group as this node sees it; actions on a replica carried out by the master), `story.rs` (a message's story). A request flows: [`crate::http`] reads it →
//! `Console::route` (names, then access) → `get` (`views.rs`) or `post` (`actions.rs`) → JSON.
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
//! | GET | `/api/overview` | counters, backlogs, the last hour's [`series`], the [`alerts`] pending or firing and their thresholds |
//! | GET | `/api/topics?after&limit` or `?name=` | topics, queues, consumer groups with lag |
//! | GET | `/api/pending?after&limit` | pending transactions: age, checks, next check, group |
//! | POST | `/api/resolve` `{resolution, transactions:[id]}` | commit or roll back |
//! | GET | `/api/message?topic&key` / `?topic&id` / `?topic&queue&offset` | a message and its story |
//! | GET | `/api/delays?after&limit` | delayed messages and when they are due |
//! | GET | `/api/dlq?after&limit` | dead-letter topics |
//! | GET | `/api/dlq/messages?topic&after&limit` | a dead-letter topic's messages |
//! | POST | `/api/dlq/resend` `{topic, offsets:[queue offset]}` | resend to the original topic |

mod actions;
pub mod alerts;
pub mod cluster;
pub mod series;
pub mod story;
mod views;

use std::net::SocketAddr;
use std::sync::Arc;

use rocklet_core::{topic, Millis};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tracing::info;

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
    /// Cluster mode: the node's broker group ([`Console::set_cluster`]).
    cluster: std::sync::OnceLock<cluster::ClusterLink>,
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
            cluster: std::sync::OnceLock::new(),
        })
    }

    /// Cluster mode: the overview shows the broker group, and actions on a replica are
    /// carried out by the master. Set once, before serving.
    pub fn set_cluster(&self, link: cluster::ClusterLink) {
        let _ = self.cluster.set(link);
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
        let (who, credentials) = match self.check_access(req, peer) {
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
                let operator = Operator {
                    name: who.name(),
                    peer,
                    credentials: credentials.as_ref(),
                };
                json_result(self.post(path, &body, &operator).await)
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

    /// The operator's identity, and (authentication on) the credentials they gave.
    fn check_access(
        &self,
        req: &HttpRequest,
        peer: SocketAddr,
    ) -> Result<(Identity, Option<(String, String)>), Response> {
        if !self.auth.enabled() {
            return Ok((Identity::Open, None));
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
        Ok((id, Some((ak, sk))))
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

    async fn post(&self, path: &str, body: &Value, op: &Operator<'_>) -> Result<Value, ApiError> {
        match path {
            "/api/resolve" => self.resolve(body, op).await,
            "/api/dlq/resend" => self.resend(body, op.name, op.peer).await,
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

/// Who takes an action, from where, with what credentials (authentication on).
pub(super) struct Operator<'a> {
    pub(super) name: &'a str,
    pub(super) peer: SocketAddr,
    pub(super) credentials: Option<&'a (String, String)>,
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
