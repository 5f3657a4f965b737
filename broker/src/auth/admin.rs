//! The admin side of authentication: the gate in front of the admin services (a super user
//! once authentication is on), the `rocklet.admin.v1.Security` service behind
//! `rocklet admin user|acl`, and the credentials and TLS the `rocklet admin` client uses.
//!
//! `rocklet admin` signs its calls as the v5 clients do (`authorization` and
//! `x-mq-date-time`), with `--access-key`/`--secret-key` or `ROCKLET_ACCESS_KEY`/
//! `ROCKLET_SECRET_KEY`; `--tls-ca FILE` (`ROCKLET_TLS_CA`) or an `https://` broker address
//! makes it use TLS.

use std::sync::{Arc, OnceLock};

use tonic::service::Interceptor;
use tonic::{Request as GrpcRequest, Response, Status as GrpcStatus};
use tracing::info;

use super::{grpc, Auth, EntrySpec, Protocol, UserSpec};
use crate::pb::admin as pb;
use crate::pb::admin::security_server::Security;

/// Admits a call to the admin services: authenticated, and a super user (or authentication
/// off). Refusals are gRPC `UNAUTHENTICATED` / `PERMISSION_DENIED` naming the problem.
#[derive(Debug, Clone)]
pub struct AdminGate {
    auth: Arc<Auth>,
}

impl AdminGate {
    #[must_use]
    pub fn new(auth: Arc<Auth>) -> Self {
        AdminGate { auth }
    }
}

impl Interceptor for AdminGate {
    fn call(&mut self, req: GrpcRequest<()>) -> Result<GrpcRequest<()>, GrpcStatus> {
        if !self.auth.enabled() {
            return Ok(req);
        }
        let id = grpc::authenticate(&self.auth, &req, Protocol::Admin)
            .map_err(|r| GrpcStatus::unauthenticated(r.message))?;
        self.auth.require_super(&id).map_err(|r| {
            self.auth
                .refused(Protocol::Admin, &r, id.name(), grpc::peer(&req));
            GrpcStatus::permission_denied(r.message)
        })?;
        Ok(req)
    }
}

/// The user and ACL service.
#[derive(Debug, Clone)]
pub struct SecurityService {
    auth: Arc<Auth>,
}

impl SecurityService {
    #[must_use]
    pub fn new(auth: Arc<Auth>) -> Self {
        SecurityService { auth }
    }
}

fn refused(e: String) -> GrpcStatus {
    GrpcStatus::failed_precondition(e)
}

#[tonic::async_trait]
impl Security for SecurityService {
    async fn put_user(
        &self,
        request: GrpcRequest<pb::PutUserRequest>,
    ) -> Result<Response<pb::PutUserResponse>, GrpcStatus> {
        let u = request
            .into_inner()
            .user
            .ok_or_else(|| GrpcStatus::invalid_argument("no user"))?;
        let spec = UserSpec {
            access_key: u.access_key,
            secret_key: u.secret_key,
            super_user: u.super_user,
            session_token: Some(u.session_token).filter(|t| !t.is_empty()),
        };
        let ak = spec.access_key.clone();
        let sup = spec.super_user;
        let auth = self.auth.clone();
        let replaced = tokio::task::spawn_blocking(move || auth.put_user(spec))
            .await
            .map_err(|e| GrpcStatus::internal(e.to_string()))?
            .map_err(refused)?;
        info!(access_key = %ak, super_user = sup, replaced, "user added by the admin service");
        Ok(Response::new(pb::PutUserResponse { replaced }))
    }

    async fn remove_user(
        &self,
        request: GrpcRequest<pb::RemoveUserRequest>,
    ) -> Result<Response<pb::RemoveUserResponse>, GrpcStatus> {
        let ak = request.into_inner().access_key;
        let auth = self.auth.clone();
        let a = ak.clone();
        tokio::task::spawn_blocking(move || auth.remove_user(&a))
            .await
            .map_err(|e| GrpcStatus::internal(e.to_string()))?
            .map_err(refused)?;
        info!(access_key = %ak, "user removed by the admin service");
        Ok(Response::new(pb::RemoveUserResponse {}))
    }

    async fn list_users(
        &self,
        _: GrpcRequest<pb::ListUsersRequest>,
    ) -> Result<Response<pb::ListUsersResponse>, GrpcStatus> {
        let users = self
            .auth
            .users()
            .into_iter()
            .map(|(u, from_config)| pb::User {
                access_key: u.access_key,
                secret_key: String::new(),
                super_user: u.super_user,
                session_token: u.session_token.unwrap_or_default(),
                from_config,
            })
            .collect();
        Ok(Response::new(pb::ListUsersResponse { users }))
    }

    async fn put_acl(
        &self,
        request: GrpcRequest<pb::PutAclRequest>,
    ) -> Result<Response<pb::PutAclResponse>, GrpcStatus> {
        let e = request
            .into_inner()
            .entry
            .ok_or_else(|| GrpcStatus::invalid_argument("no entry"))?;
        let spec = EntrySpec {
            user: e.user,
            resource: e.resource,
            actions: e.actions,
            decision: if e.decision.is_empty() {
                "Allow".into()
            } else {
                e.decision
            },
            source_ips: e.source_ips,
        };
        let auth = self.auth.clone();
        let s = spec.clone();
        let replaced = tokio::task::spawn_blocking(move || auth.put_entry(&s))
            .await
            .map_err(|e| GrpcStatus::internal(e.to_string()))?
            .map_err(refused)?;
        info!(user = %spec.user, resource = %spec.resource, actions = ?spec.actions, decision = %spec.decision, replaced, "ACL entry set by the admin service");
        Ok(Response::new(pb::PutAclResponse { replaced }))
    }

    async fn remove_acl(
        &self,
        request: GrpcRequest<pb::RemoveAclRequest>,
    ) -> Result<Response<pb::RemoveAclResponse>, GrpcStatus> {
        let r = request.into_inner();
        let auth = self.auth.clone();
        let (u, res) = (r.user.clone(), r.resource.clone());
        tokio::task::spawn_blocking(move || auth.remove_entry(&u, &res))
            .await
            .map_err(|e| GrpcStatus::internal(e.to_string()))?
            .map_err(refused)?;
        info!(user = %r.user, resource = %r.resource, "ACL entry removed by the admin service");
        Ok(Response::new(pb::RemoveAclResponse {}))
    }

    async fn list_acls(
        &self,
        request: GrpcRequest<pb::ListAclsRequest>,
    ) -> Result<Response<pb::ListAclsResponse>, GrpcStatus> {
        let user = request.into_inner().user;
        let entries = self
            .auth
            .entries()
            .into_iter()
            .filter(|(e, _)| user.is_empty() || e.user == user)
            .map(|(e, from_config)| {
                let s = EntrySpec::of(&e);
                pb::AclEntry {
                    user: s.user,
                    resource: s.resource,
                    actions: s.actions,
                    decision: s.decision,
                    source_ips: s.source_ips,
                    from_config,
                }
            })
            .collect();
        Ok(Response::new(pb::ListAclsResponse { entries }))
    }
}

/// How `rocklet admin` (and the bench) reach a broker: credentials and TLS.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
    /// CA certificate (PEM) to verify the broker with; TLS when set.
    pub tls_ca: Option<std::path::PathBuf>,
    /// Name the broker's certificate must have (default: the host of the address).
    pub tls_domain: Option<String>,
}

static CLIENT: OnceLock<ClientOptions> = OnceLock::new();

/// Sets the options of this process's admin calls (once, before the first call).
pub fn set_client_options(o: ClientOptions) {
    let _ = CLIENT.set(o);
}

fn client_options() -> &'static ClientOptions {
    CLIENT.get_or_init(|| ClientOptions {
        access_key: std::env::var("ROCKLET_ACCESS_KEY")
            .ok()
            .filter(|s| !s.is_empty()),
        secret_key: std::env::var("ROCKLET_SECRET_KEY")
            .ok()
            .filter(|s| !s.is_empty()),
        tls_ca: std::env::var_os("ROCKLET_TLS_CA").map(Into::into),
        tls_domain: None,
    })
}

/// Signs each call as the v5 clients do.
#[derive(Debug, Clone, Default)]
pub struct Signer {
    creds: Option<(String, String)>,
}

impl Signer {
    #[must_use]
    pub fn new(access_key: &str, secret_key: &str) -> Self {
        Signer {
            creds: Some((access_key.into(), secret_key.into())),
        }
    }

    /// Adds `x-mq-date-time` and `authorization` to a call's metadata.
    pub fn sign(&self, md: &mut tonic::metadata::MetadataMap) {
        let Some((ak, sk)) = &self.creds else { return };
        let now = crate::clock::Clock::now(&crate::clock::SystemClock);
        let dt = super::sign::format_date_time(now);
        let auth = super::sign::grpc_authorization(ak, sk, &dt);
        if let (Ok(dt), Ok(auth)) = (dt.parse(), auth.parse()) {
            md.insert(super::sign::DATE_TIME, dt);
            md.insert(super::sign::AUTHORIZATION, auth);
        }
    }
}

impl Interceptor for Signer {
    fn call(&mut self, mut req: GrpcRequest<()>) -> Result<GrpcRequest<()>, GrpcStatus> {
        self.sign(req.metadata_mut());
        Ok(req)
    }
}

/// A channel to `addr` (`HOST:PORT`, `http://…` or `https://…`) with `o`'s TLS.
pub async fn channel(addr: &str, o: &ClientOptions) -> Result<tonic::transport::Channel, String> {
    let tls = o.tls_ca.is_some() || addr.starts_with("https://");
    let url = if addr.contains("://") {
        addr.to_string()
    } else if tls {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    };
    let mut ep = tonic::transport::Endpoint::from_shared(url.clone())
        .map_err(|e| format!("bad broker address {url}: {e}"))?;
    if tls {
        let mut t = tonic::transport::ClientTlsConfig::new();
        if let Some(ca) = &o.tls_ca {
            let pem =
                std::fs::read(ca).map_err(|e| format!("cannot read {}: {e}", ca.display()))?;
            t = t.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        if let Some(d) = &o.tls_domain {
            t = t.domain_name(d.clone());
        }
        ep = ep.tls_config(t).map_err(|e| format!("TLS: {e}"))?;
    }
    ep.connect()
        .await
        .map_err(|e| format!("cannot reach the broker at {url}: {e}"))
}

/// The signer of this process's admin calls.
#[must_use]
pub fn signer() -> Signer {
    let o = client_options();
    match (&o.access_key, &o.secret_key) {
        (Some(a), Some(s)) => Signer::new(a, s),
        _ => Signer::default(),
    }
}

/// An admin client of this process, signed and with its TLS.
pub async fn admin_client(
    addr: &str,
) -> Result<
    crate::pb::admin::admin_client::AdminClient<
        tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Signer>,
    >,
    String,
> {
    let ch = channel(addr, client_options()).await?;
    Ok(crate::pb::admin::admin_client::AdminClient::with_interceptor(ch, signer()))
}

/// The client side of `rocklet admin user|acl`.
pub mod client {
    use std::fmt::Write as _;

    use super::{channel, client_options, signer};
    use crate::pb::admin as pb;
    use crate::pb::admin::security_client::SecurityClient;

    fn status(e: tonic::Status) -> String {
        format!("{} ({:?})", e.message(), e.code())
    }

    async fn connect(
        addr: &str,
    ) -> Result<
        SecurityClient<
            tonic::service::interceptor::InterceptedService<
                tonic::transport::Channel,
                super::Signer,
            >,
        >,
        String,
    > {
        Ok(SecurityClient::with_interceptor(
            channel(addr, client_options()).await?,
            signer(),
        ))
    }

    /// `rocklet admin user add`.
    pub async fn user_add(addr: &str, user: pb::User) -> Result<String, String> {
        let ak = user.access_key.clone();
        let r = connect(addr)
            .await?
            .put_user(pb::PutUserRequest { user: Some(user) })
            .await
            .map_err(status)?
            .into_inner();
        Ok(format!(
            "user {ak} {}\n",
            if r.replaced { "replaced" } else { "added" }
        ))
    }

    /// `rocklet admin user remove`.
    pub async fn user_remove(addr: &str, access_key: &str) -> Result<String, String> {
        connect(addr)
            .await?
            .remove_user(pb::RemoveUserRequest {
                access_key: access_key.into(),
            })
            .await
            .map_err(status)?;
        Ok(format!("user {access_key} removed\n"))
    }

    /// `rocklet admin user list`.
    pub async fn user_list(addr: &str) -> Result<String, String> {
        let r = connect(addr)
            .await?
            .list_users(pb::ListUsersRequest {})
            .await
            .map_err(status)?
            .into_inner();
        let mut out = format!(
            "{:<32} {:<6} {:<6} {}\n",
            "ACCESS_KEY", "TYPE", "TOKEN", "SOURCE"
        );
        for u in r.users {
            let _ = writeln!(
                out,
                "{:<32} {:<6} {:<6} {}",
                u.access_key,
                if u.super_user { "super" } else { "normal" },
                if u.session_token.is_empty() {
                    "-"
                } else {
                    "yes"
                },
                if u.from_config { "config" } else { "admin" }
            );
        }
        Ok(out)
    }

    /// `rocklet admin acl add`.
    pub async fn acl_add(addr: &str, entry: pb::AclEntry) -> Result<String, String> {
        let what = format!("{} {} on {}", entry.decision, entry.user, entry.resource);
        let r = connect(addr)
            .await?
            .put_acl(pb::PutAclRequest { entry: Some(entry) })
            .await
            .map_err(status)?
            .into_inner();
        Ok(format!(
            "ACL entry {what} {}\n",
            if r.replaced { "replaced" } else { "added" }
        ))
    }

    /// `rocklet admin acl remove`.
    pub async fn acl_remove(addr: &str, user: &str, resource: &str) -> Result<String, String> {
        connect(addr)
            .await?
            .remove_acl(pb::RemoveAclRequest {
                user: user.into(),
                resource: resource.into(),
            })
            .await
            .map_err(status)?;
        Ok(format!("ACL entry of {user} on {resource} removed\n"))
    }

    /// `rocklet admin acl list`.
    pub async fn acl_list(addr: &str, user: &str) -> Result<String, String> {
        let r = connect(addr)
            .await?
            .list_acls(pb::ListAclsRequest { user: user.into() })
            .await
            .map_err(status)?
            .into_inner();
        let mut out = format!(
            "{:<24} {:<32} {:<24} {:<8} {:<20} {}\n",
            "USER", "RESOURCE", "ACTIONS", "DECISION", "SOURCE_IPS", "SOURCE"
        );
        for e in r.entries {
            let _ = writeln!(
                out,
                "{:<24} {:<32} {:<24} {:<8} {:<20} {}",
                e.user,
                e.resource,
                e.actions.join(","),
                e.decision,
                if e.source_ips.is_empty() {
                    "*".to_string()
                } else {
                    e.source_ips.join(",")
                },
                if e.from_config { "config" } else { "admin" }
            );
        }
        Ok(out)
    }
}
