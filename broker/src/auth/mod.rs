//! Authentication, authorization (RocketMQ 5's ACL 2.0 model) and TLS.
//!
//! - [`sign`]: the signatures the official clients send (gRPC `authorization` header,
//!   remoting `AclClientRPCHook` extFields) and the replay window.
//! - [`acl`]: users, resources, actions, ACL entries and their evaluation.
//! - [`grpc`] and [`remoting`]: what each request needs (resource and actions), checked
//!   before the request is handled.
//! - [`admin`]: the `rocklet.admin.v1.Security` service behind `rocklet admin user|acl`.
//! - [`tls`]: TLS for the listeners (disabled, permissive, enforcing), certificates reloaded.
//! - [`failure`]: why a request was refused and over which protocol (the metrics labels); a
//!   leaf, below [`crate::metrics`], which counts by it (`auth` counts into the metrics, the
//!   metrics never import `auth` beyond it).
//!
//! **When it is on.** Authentication is on exactly when at least one user exists (declared
//! in the config file's `[[auth.users]]`, or added with `rocklet admin user add`). With no
//! user every request is served as before; the broker then refuses to start on a
//! non-loopback address unless `--insecure-no-auth` says so.
//!
//! **Where users live.** Users and entries of the config file are applied at every start and
//! cannot be removed by the admin service (edit the file). Those added by the admin service
//! are kept in `DATA_DIR/auth.json` (mode 0600, replaced atomically), take effect at once
//! and survive restarts. Secrets are stored as given: HMAC-SHA1 signatures need the secret
//! itself, as RocketMQ stores it. The first user must be a super user, and the last super
//! user cannot be removed while normal users remain, so the admin service never locks its
//! operator out.

pub mod acl;
pub mod admin;
pub mod failure;
pub mod grpc;
pub mod remoting;
pub mod sign;
pub mod tls;

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::clock::Clock;
use crate::metrics::Metrics;
pub use acl::{Action, Denied, Entry, EntrySpec, Resource};
pub use failure::{Failure, Protocol};
use sign::{ClientZones, TimeCheck};

/// The cluster name ACLs see (`Cluster` resources), as routes name it.
pub const CLUSTER_NAME: &str = "rocklet";
/// The file of users and entries added through the admin service.
pub const STORE_FILE: &str = "auth.json";
/// Default replay window ([`AuthFileConfig::timestamp_window_s`]).
pub const DEFAULT_TIMESTAMP_WINDOW_S: u64 = 300;

/// What a caller whose signature does not verify is told, whether its access key exists or
/// not: one answer, so nobody learns which keys exist by trying them. The log line and the
/// `reason` label of `rocklet_auth_failures_total` (server side) keep which it was.
pub const BAD_SIGNATURE: &str =
    "unknown access key or bad signature (check the access key and the secret key)";
/// The same for the console's HTTP Basic credentials.
pub const BAD_SECRET: &str =
    "unknown access key or wrong secret key (check the access key and the secret key)";
/// Checked against when the access key is unknown, so the work does not tell either.
const UNKNOWN_KEY_SECRET: &str = "rocklet: no such access key";

/// A user as the config file and the store spell it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    pub access_key: String,
    pub secret_key: String,
    /// Super users may do everything, admin included.
    #[serde(default)]
    pub super_user: bool,
    /// When set, requests must carry it (`x-mq-session-token`, remoting `SecurityToken`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token: Option<String>,
}

impl UserSpec {
    fn validate(&self) -> Result<(), String> {
        let ak = &self.access_key;
        if ak.is_empty()
            || ak.len() > 255
            || ak
                .chars()
                .any(|c| c.is_whitespace() || c == ',' || c == '/' || c == '=')
        {
            return Err(format!(
                "access key `{ak}` must be 1 to 255 characters without spaces, `,`, `/` or `=` (it travels in the authorization header)"
            ));
        }
        if self.secret_key.is_empty() {
            return Err(format!("user `{ak}` has an empty secret key"));
        }
        Ok(())
    }
}

/// The `[auth]` table of the config file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthFileConfig {
    /// A signed date-time must be within this many seconds of the broker's clock (0: no
    /// check). Default [`DEFAULT_TIMESTAMP_WINDOW_S`].
    pub timestamp_window_s: Option<u64>,
    /// The zones the clients' clocks may be in, as offsets like `["+00:00", "+08:00"]`: a
    /// signed date-time is accepted within the window around any of them. Default
    /// `["+00:00"]`: Node clients sign with UTC, and Java, Go, Python and C# clients with
    /// their local time marked `Z`, so list the zones of clients that do not run in UTC.
    /// `["any"]` accepts every zone of the world, which makes the window about 26 hours for
    /// a replayed request.
    pub client_utc_offsets: Option<Vec<String>>,
    pub users: Vec<UserSpec>,
    pub acls: Vec<EntrySpec>,
}

impl AuthFileConfig {
    /// The replay window this config asks for.
    pub fn time_check(&self) -> Result<TimeCheck, String> {
        let window_ms = self
            .timestamp_window_s
            .unwrap_or(DEFAULT_TIMESTAMP_WINDOW_S)
            .saturating_mul(1000) as i64;
        let zones = match &self.client_utc_offsets {
            None => ClientZones::Offsets(vec![0]),
            Some(list) if list.iter().any(|s| s.eq_ignore_ascii_case("any")) => ClientZones::Any,
            Some(list) if list.is_empty() => return Err(
                "invalid config `auth.client_utc_offsets`: list at least one offset, or \"any\""
                    .into(),
            ),
            Some(list) => ClientZones::Offsets(
                list.iter()
                    .map(|s| sign::parse_utc_offset(s))
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("invalid config `auth.client_utc_offsets`: {e}"))?,
            ),
        };
        Ok(TimeCheck { window_ms, zones })
    }
}

/// Who made a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// Authentication is off: everything is allowed.
    Open,
    User {
        name: String,
        super_user: bool,
    },
}

impl Identity {
    /// The access key, for logs (`-` when authentication is off).
    #[must_use]
    pub fn name(&self) -> &str {
        match self {
            Identity::Open => "-",
            Identity::User { name, .. } => name,
        }
    }
}

/// A refused request: what to count and what to tell the client (never a secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub failure: Failure,
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Refusal {
    fn unauthorized(failure: Failure, what: impl fmt::Display) -> Self {
        Refusal {
            failure,
            message: format!("UNAUTHORIZED: {what}"),
        }
    }
}

/// One thing a request needs: any of `actions` on `resource`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Need {
    pub resource: Resource,
    pub actions: &'static [Action],
}

impl Need {
    #[must_use]
    pub fn new(resource: Resource, actions: &'static [Action]) -> Self {
        Need { resource, actions }
    }

    /// `actions` on a topic. A retry or dead-letter topic (`%RETRY%g`, `%DLQ%g`) belongs to
    /// its group: the need is on `Group:g`, whatever the entries grant on topics (a
    /// `Topic:*` grant never reaches another group's retried or dead messages).
    #[must_use]
    pub fn topic(name: &str, actions: &'static [Action]) -> Self {
        match acl::owner_group(name) {
            Some(g) => Need::new(Resource::group(g), actions),
            None => Need::new(Resource::topic(name), actions),
        }
    }
}

#[derive(Clone, Debug)]
struct User {
    spec: UserSpec,
    from_config: bool,
}

#[derive(Clone, Debug, Default)]
struct State {
    users: BTreeMap<String, User>,
    /// Config entries first, then the store's; keyed by (user, resource) within each.
    entries: Vec<(Entry, bool)>,
}

/// What `DATA_DIR/auth.json` holds.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreFile {
    version: u32,
    users: Vec<UserSpec>,
    acls: Vec<EntrySpec>,
}

/// Users and ACL entries, shared by every listener.
#[derive(Debug)]
pub struct Auth {
    state: RwLock<State>,
    store: Option<PathBuf>,
    time: TimeCheck,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
}

impl Auth {
    /// No users, nothing stored: authentication off (tests, embedders).
    #[must_use]
    pub fn disabled() -> Arc<Self> {
        Arc::new(Auth {
            state: RwLock::new(State::default()),
            store: None,
            time: TimeCheck {
                window_ms: 0,
                zones: ClientZones::Any,
            },
            clock: Arc::new(crate::clock::SystemClock),
            metrics: Arc::new(Metrics::default()),
        })
    }

    /// The config's users and entries, then what `data_dir/auth.json` holds.
    pub fn open(
        cfg: &AuthFileConfig,
        data_dir: Option<&Path>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Self>, String> {
        let time = cfg.time_check()?;
        let mut state = State::default();
        for u in &cfg.users {
            u.validate()
                .map_err(|e| format!("invalid config `auth.users`: {e}"))?;
            if state.users.contains_key(&u.access_key) {
                return Err(format!(
                    "invalid config `auth.users`: `{}` is declared twice",
                    u.access_key
                ));
            }
            state.users.insert(
                u.access_key.clone(),
                User {
                    spec: u.clone(),
                    from_config: true,
                },
            );
        }
        for s in &cfg.acls {
            let e = s
                .parse()
                .map_err(|e| format!("invalid config `auth.acls`: {e}"))?;
            put_entry(&mut state.entries, e, true);
        }
        let store = data_dir.map(|d| d.join(STORE_FILE));
        if let Some(path) = &store {
            match std::fs::read(path) {
                Ok(bytes) => {
                    let f: StoreFile = serde_json::from_slice(&bytes)
                        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    for u in f.users {
                        u.validate()
                            .map_err(|e| format!("{}: {e}", path.display()))?;
                        state.users.entry(u.access_key.clone()).or_insert(User {
                            spec: u,
                            from_config: false,
                        });
                    }
                    for s in &f.acls {
                        let e = s.parse().map_err(|e| format!("{}: {e}", path.display()))?;
                        put_entry(&mut state.entries, e, false);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
            }
        }
        for (e, _) in &state.entries {
            if !state.users.contains_key(&e.user) {
                warn!(user = %e.user, resource = %e.resource, "an ACL entry names a user that does not exist");
            }
        }
        let supers = state.users.values().filter(|u| u.spec.super_user).count();
        if !state.users.is_empty() {
            info!(
                users = state.users.len(),
                super_users = supers,
                acl_entries = state.entries.len(),
                "authentication on"
            );
            if supers == 0 {
                warn!("authentication is on but no user is a super user: nobody can use the admin service");
            }
        }
        Ok(Arc::new(Auth {
            state: RwLock::new(state),
            store,
            time,
            clock,
            metrics,
        }))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether authentication is on (some user exists).
    #[must_use]
    pub fn enabled(&self) -> bool {
        !self.read().users.is_empty()
    }

    /// Counts and logs a refusal (never its secret: there is none in it).
    pub fn refused(&self, proto: Protocol, r: &Refusal, who: &str, peer: Option<IpAddr>) {
        self.metrics.auth_failure(proto, r.failure);
        info!(protocol = proto.label(), reason = r.failure.label(), access_key = who, peer = ?peer, message = %r.message, "request refused by authentication or ACL");
    }

    /// Checks a signature of `content` made with the secret of `access_key`, and the session
    /// token the user may require.
    fn verify(
        &self,
        access_key: &str,
        content: &[u8],
        signature: &[u8],
        token: Option<&str>,
    ) -> Result<Identity, Refusal> {
        let state = self.read();
        let Some(user) = state.users.get(access_key) else {
            // The same work as for a known key, so the time does not tell either.
            let _ = sign::verify(UNKNOWN_KEY_SECRET, content, signature);
            return Err(Refusal::unauthorized(Failure::UnknownKey, BAD_SIGNATURE));
        };
        if !sign::verify(&user.spec.secret_key, content, signature) {
            return Err(Refusal::unauthorized(Failure::BadSignature, BAD_SIGNATURE));
        }
        if let Some(want) = &user.spec.session_token {
            let ok = token.is_some_and(|t| constant_time_eq(t.as_bytes(), want.as_bytes()));
            if !ok {
                return Err(Refusal::unauthorized(
                    Failure::BadSessionToken,
                    format_args!("missing or wrong session token for access key `{access_key}`"),
                ));
            }
        }
        Ok(Identity::User {
            name: access_key.into(),
            super_user: user.spec.super_user,
        })
    }

    /// Authenticates an access key and secret key presented as such (the operator
    /// console's HTTP Basic credentials): the secret is compared in constant time; a user
    /// that requires a session token cannot sign in this way.
    pub fn authenticate_secret(
        &self,
        access_key: &str,
        secret_key: &str,
    ) -> Result<Identity, Refusal> {
        if !self.enabled() {
            return Ok(Identity::Open);
        }
        let state = self.read();
        let Some(user) = state.users.get(access_key) else {
            let _ = constant_time_eq(UNKNOWN_KEY_SECRET.as_bytes(), secret_key.as_bytes());
            return Err(Refusal::unauthorized(Failure::UnknownKey, BAD_SECRET));
        };
        if !constant_time_eq(user.spec.secret_key.as_bytes(), secret_key.as_bytes()) {
            return Err(Refusal::unauthorized(Failure::BadSignature, BAD_SECRET));
        }
        if user.spec.session_token.is_some() {
            return Err(Refusal::unauthorized(
                Failure::BadSessionToken,
                format_args!("access key `{access_key}` requires a session token, which the console cannot carry"),
            ));
        }
        Ok(Identity::User {
            name: access_key.into(),
            super_user: user.spec.super_user,
        })
    }

    /// Authenticates a v5 call from its metadata (`authorization`, `x-mq-date-time`,
    /// `x-mq-session-token`).
    pub fn authenticate_headers(
        &self,
        header: impl Fn(&str) -> Option<String>,
    ) -> Result<Identity, Refusal> {
        if !self.enabled() {
            return Ok(Identity::Open);
        }
        let no_creds = || {
            Refusal::unauthorized(
                Failure::NoCredentials,
                "the request carries no credentials (an access key and secret key are required)",
            )
        };
        let Some(auth) = header(sign::AUTHORIZATION) else {
            return Err(no_creds());
        };
        let a = sign::parse_authorization(&auth)
            .map_err(|e| Refusal::unauthorized(Failure::Malformed, e))?;
        if a.access_key.is_empty() {
            return Err(no_creds());
        }
        let Some(date_time) = header(sign::DATE_TIME) else {
            return Err(Refusal::unauthorized(
                Failure::Malformed,
                "the request has an authorization header but no x-mq-date-time",
            ));
        };
        let id = self.verify(
            &a.access_key,
            date_time.as_bytes(),
            &a.signature,
            header(sign::SESSION_TOKEN).as_deref(),
        )?;
        let signed = sign::parse_date_time(&date_time).ok_or_else(|| {
            Refusal::unauthorized(
                Failure::Malformed,
                format_args!("x-mq-date-time `{date_time}` is not yyyyMMddTHHmmssZ"),
            )
        })?;
        self.time
            .check(signed, self.clock.now() as i64)
            .map_err(|e| Refusal::unauthorized(Failure::ExpiredTimestamp, e))?;
        Ok(id)
    }

    /// Authenticates a remoting request from its extFields and body.
    pub fn authenticate_remoting(
        &self,
        ext: &BTreeMap<String, String>,
        version: i32,
        body: &[u8],
    ) -> Result<Identity, Refusal> {
        if !self.enabled() {
            return Ok(Identity::Open);
        }
        let Some(ak) = ext.get(sign::ACCESS_KEY).filter(|a| !a.is_empty()) else {
            return Err(Refusal::unauthorized(
                Failure::NoCredentials,
                "the request carries no AccessKey (use AclClientRPCHook with an access key and secret key)",
            ));
        };
        let Some(sig) = ext
            .get(sign::SIGNATURE)
            .and_then(|s| sign::decode_base64(s))
        else {
            return Err(Refusal::unauthorized(
                Failure::Malformed,
                format_args!("the request of access key `{ak}` has no Base64 Signature"),
            ));
        };
        self.verify(
            ak,
            &sign::remoting_content(ext, version, body),
            &sig,
            ext.get(sign::SECURITY_TOKEN).map(String::as_str),
        )
    }

    /// Checks every need of a request against the ACL.
    pub fn authorize(
        &self,
        id: &Identity,
        ip: Option<IpAddr>,
        needs: &[Need],
    ) -> Result<(), Refusal> {
        let Identity::User {
            name,
            super_user: false,
        } = id
        else {
            return Ok(());
        };
        let state = self.read();
        for n in needs {
            acl::check(
                name,
                state.entries.iter().map(|(e, _)| e),
                &n.resource,
                n.actions,
                ip,
            )
            .map_err(|d| Refusal {
                failure: Failure::Forbidden,
                message: d.to_string(),
            })?;
        }
        Ok(())
    }

    /// Admin calls need a super user when authentication is on.
    pub fn require_super(&self, id: &Identity) -> Result<(), Refusal> {
        match id {
            Identity::Open
            | Identity::User {
                super_user: true, ..
            } => Ok(()),
            Identity::User { name, .. } => Err(Refusal {
                failure: Failure::Forbidden,
                message: format!(
                    "FORBIDDEN: user `{name}` is not a super user; the admin service needs one"
                ),
            }),
        }
    }

    /// The users: (spec without its secret, from the config file).
    #[must_use]
    pub fn users(&self) -> Vec<(UserSpec, bool)> {
        self.read()
            .users
            .values()
            .map(|u| {
                let mut s = u.spec.clone();
                s.secret_key = String::new();
                s.session_token = s.session_token.map(|_| "***".into());
                (s, u.from_config)
            })
            .collect()
    }

    /// The ACL entries: (entry, from the config file).
    #[must_use]
    pub fn entries(&self) -> Vec<(Entry, bool)> {
        self.read().entries.clone()
    }

    /// Adds a user or replaces one the admin service added; persisted before it applies.
    pub fn put_user(&self, u: UserSpec) -> Result<bool, String> {
        u.validate()?;
        self.change(|s| {
            if let Some(old) = s.users.get(&u.access_key) {
                if old.from_config {
                    return Err(format!("user `{}` is declared in the config file; change it there", u.access_key));
                }
                if old.spec.super_user && !u.super_user && last_super(s, &u.access_key) {
                    return Err(format!("`{}` is the last super user; add another super user first", u.access_key));
                }
            } else if !u.super_user && !s.users.values().any(|x| x.spec.super_user) {
                return Err("the first user must be a super user (--super): authentication turns on with the first user, and the admin service needs a super user".into());
            }
            let replaced = s
                .users
                .insert(
                    u.access_key.clone(),
                    User {
                        spec: u,
                        from_config: false,
                    },
                )
                .is_some();
            Ok(replaced)
        })
    }

    /// Removes a user the admin service added, with its entries.
    pub fn remove_user(&self, access_key: &str) -> Result<(), String> {
        self.change(|s| {
            match s.users.get(access_key) {
                None => return Err(format!("no user `{access_key}`")),
                Some(u) if u.from_config => {
                    return Err(format!("user `{access_key}` is declared in the config file; remove it there"))
                }
                Some(u) if u.spec.super_user && last_super(s, access_key) && s.users.len() > 1 => {
                    return Err(format!("`{access_key}` is the last super user while other users remain; remove them or add another super user first"))
                }
                Some(_) => {}
            }
            s.users.remove(access_key);
            s.entries.retain(|(e, cfg)| *cfg || e.user != access_key);
            Ok(())
        })
    }

    /// Adds an entry, or replaces the admin-added one of the same user and resource.
    pub fn put_entry(&self, spec: &EntrySpec) -> Result<bool, String> {
        let e = spec.parse()?;
        self.change(|s| {
            if !s.users.contains_key(&e.user) {
                return Err(format!("no user `{}`", e.user));
            }
            if s.entries
                .iter()
                .any(|(x, cfg)| *cfg && x.user == e.user && x.resource == e.resource)
            {
                return Err(format!(
                    "the entry of `{}` on `{}` is declared in the config file; change it there",
                    e.user, e.resource
                ));
            }
            Ok(put_entry(&mut s.entries, e, false))
        })
    }

    /// Removes the admin-added entry of a user on a resource.
    pub fn remove_entry(&self, user: &str, resource: &str) -> Result<(), String> {
        let pattern: acl::Pattern = resource.parse()?;
        self.change(|s| {
            let before = s.entries.len();
            s.entries
                .retain(|(x, cfg)| *cfg || !(x.user == user && x.resource == pattern));
            if s.entries.len() == before {
                return Err(format!(
                    "no entry of `{user}` on `{pattern}` was added by the admin service"
                ));
            }
            Ok(())
        })
    }

    /// Applies `f` to a copy of the state, persists the admin part, then swaps it in.
    fn change<T>(&self, f: impl FnOnce(&mut State) -> Result<T, String>) -> Result<T, String> {
        let mut guard = self
            .state
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = guard.clone();
        let out = f(&mut next)?;
        if let Some(path) = &self.store {
            save(path, &next)?;
        }
        *guard = next;
        Ok(out)
    }
}

/// Equality whose time depends on the lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn last_super(s: &State, except: &str) -> bool {
    !s.users
        .values()
        .any(|u| u.spec.super_user && u.spec.access_key != except)
}

/// Inserts or replaces the entry of the same user and resource and origin; `true` when
/// one was replaced.
fn put_entry(entries: &mut Vec<(Entry, bool)>, e: Entry, from_config: bool) -> bool {
    if let Some(slot) = entries
        .iter_mut()
        .find(|(x, cfg)| *cfg == from_config && x.user == e.user && x.resource == e.resource)
    {
        slot.0 = e;
        true
    } else {
        entries.push((e, from_config));
        false
    }
}

/// Writes the admin-added users and entries: a temporary file (mode 0600), fsync, rename
/// over the old one, fsync of the directory.
fn save(path: &Path, s: &State) -> Result<(), String> {
    use std::io::Write as _;
    let f = StoreFile {
        version: 1,
        users: s
            .users
            .values()
            .filter(|u| !u.from_config)
            .map(|u| u.spec.clone())
            .collect(),
        acls: s
            .entries
            .iter()
            .filter(|(_, cfg)| !cfg)
            .map(|(e, _)| EntrySpec::of(e))
            .collect(),
    };
    let bytes = serde_json::to_vec_pretty(&f).map_err(|e| e.to_string())?;
    let tmp = path.with_extension("json.tmp");
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut file = opts.open(&tmp).map_err(fail)?;
    file.write_all(&bytes).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(fail)?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
