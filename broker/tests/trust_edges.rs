//! The edges of trust (issue 29, items 7, 10 and 11), each a property tested as stated:
//!
//! - the replay window of a v5 signature is what the README promises, `timestamp_window_s`
//!   (300 s) around each of `auth.client_utc_offsets` (default: UTC only), not every zone
//!   of the world: a date-time two hours off is refused by name;
//! - TLS `permissive` with `client_auth = "required"` (which would still serve plaintext
//!   clients, certificate-less) is refused at start, naming both settings;
//! - the metrics listener obeys the rule of every listener: no non-loopback address while
//!   authentication is off;
//! - an unauthenticated caller cannot tell an unknown access key from a wrong secret: both
//!   get one answer, on gRPC, remoting and the console.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{res, test_config};
use rocklet_broker::auth::sign;
use rocklet_broker::auth::{AuthFileConfig, UserSpec};
use rocklet_broker::clock::{Clock, SystemClock};
use rocklet_broker::config::{BrokerConfig, FileConfig};
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::pb::v2::messaging_service_client::MessagingServiceClient;
use rocklet_broker::remoting::codec::{self, RemotingCommand};
use rocklet_broker::server::{self, RunningBroker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const UNAUTHORIZED: i32 = pb::Code::Unauthorized as i32;

fn users() -> AuthFileConfig {
    AuthFileConfig {
        users: vec![UserSpec {
            access_key: "alice".into(),
            secret_key: "alice-secret".into(),
            super_user: true,
            session_token: None,
        }],
        ..Default::default()
    }
}

async fn start(dir: &std::path::Path, f: impl FnOnce(&mut BrokerConfig)) -> RunningBroker {
    let mut cfg = test_config(dir);
    cfg.auth = users();
    f(&mut cfg);
    server::start(cfg, Arc::new(SystemClock)).await.unwrap()
}

/// A QueryRoute signed as the official v5 clients sign (`yyyyMMdd'T'HHmmss'Z'`, HMAC-SHA1
/// of it in hex) with this date-time: (code, message).
async fn query_route_at(addr: SocketAddr, ak: &str, sk: &str, date_time: &str) -> (i32, String) {
    let mut c = MessagingServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut req = tonic::Request::new(pb::QueryRouteRequest {
        topic: res("orders"),
        endpoints: None,
    });
    req.metadata_mut()
        .insert(sign::DATE_TIME, date_time.parse().unwrap());
    req.metadata_mut().insert(
        sign::AUTHORIZATION,
        sign::grpc_authorization(ak, sk, date_time).parse().unwrap(),
    );
    let s = c
        .query_route(req)
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    (s.code, s.message)
}

const HOUR_MS: u64 = 3_600_000;

#[tokio::test]
async fn a_date_time_two_hours_off_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |_| {}).await;
    let now = SystemClock.now();
    // The official clients' format, the broker's UTC clock.
    let right = sign::format_date_time(now);
    assert_eq!(right.len(), 16, "yyyyMMddTHHmmssZ: {right}");
    let (code, msg) = query_route_at(b.addr, "alice", "alice-secret", &right).await;
    assert_ne!(code, UNAUTHORIZED, "{msg}");
    for off in [now + 2 * HOUR_MS, now - 2 * HOUR_MS, now + 8 * HOUR_MS] {
        let dt = sign::format_date_time(off);
        let (code, msg) = query_route_at(b.addr, "alice", "alice-secret", &dt).await;
        assert_eq!(code, UNAUTHORIZED, "{dt}: {msg}");
        assert!(msg.contains("expired timestamp"), "{msg}");
        assert!(msg.contains("outside the replay window of 300 s"), "{msg}");
        assert!(
            msg.contains("auth.client_utc_offsets"),
            "says what to do: {msg}"
        );
    }
    b.stop().await;

    // A zone listed is accepted, the window still 300 s around it.
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |c| {
        c.auth.client_utc_offsets = Some(vec!["+00:00".into(), "+08:00".into()]);
    })
    .await;
    let east = sign::format_date_time(now + 8 * HOUR_MS + 60_000);
    let (code, msg) = query_route_at(b.addr, "alice", "alice-secret", &east).await;
    assert_ne!(code, UNAUTHORIZED, "{msg}");
    let off = sign::format_date_time(now + 2 * HOUR_MS);
    let (code, msg) = query_route_at(b.addr, "alice", "alice-secret", &off).await;
    assert_eq!(code, UNAUTHORIZED, "{msg}");
    b.stop().await;
}

#[tokio::test]
async fn permissive_tls_with_required_client_certificates_is_refused_at_start() {
    let toml = r#"
        [tls]
        mode = "permissive"
        cert = "server.pem"
        key = "server.key"
        client_ca = "clients.pem"
        client_auth = "required"
    "#;
    let c = BrokerConfig::from_file(FileConfig::parse(toml).unwrap());
    let e = c.validate().unwrap_err();
    assert!(
        e.contains("tls.mode") && e.contains("permissive") && e.contains("tls.client_auth"),
        "{e}"
    );
    assert!(e.contains("plaintext"), "says why: {e}");
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config(dir.path());
    cfg.tls = c.tls.clone();
    let Err(e) = server::start(cfg, Arc::new(SystemClock)).await else {
        panic!("started with permissive TLS and required client certificates");
    };
    assert!(
        e.contains("tls.mode") && e.contains("tls.client_auth"),
        "{e}"
    );
    // Enforcing with required certificates, and permissive with optional ones, stay valid.
    for ok in [
        toml.replace("permissive", "enforcing"),
        toml.replace("\"required\"", "\"optional\""),
    ] {
        let c = BrokerConfig::from_file(FileConfig::parse(&ok).unwrap());
        c.validate().unwrap();
    }
}

#[tokio::test]
async fn metrics_on_a_public_address_without_users_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config(dir.path());
    cfg.metrics_listen = Some("0.0.0.0:0".parse().unwrap());
    let Err(e) = server::start(cfg.clone(), Arc::new(SystemClock)).await else {
        panic!("started an open metrics listener on 0.0.0.0");
    };
    assert!(e.contains("refusing to listen on 0.0.0.0:0"), "{e}");
    assert!(e.contains("--insecure-no-auth"), "{e}");
    // With users, or on purpose, it starts.
    let mut with_users = cfg.clone();
    with_users.auth = users();
    server::start(with_users, Arc::new(SystemClock))
        .await
        .unwrap()
        .stop()
        .await;
    cfg.insecure_no_auth = true;
    server::start(cfg, Arc::new(SystemClock))
        .await
        .unwrap()
        .stop()
        .await;
}

async fn remoting_call(addr: SocketAddr, cmd: RemotingCommand) -> RemotingCommand {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&cmd.encode()).await.unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let mut buf = vec![0; codec::frame_length(len).unwrap()];
    s.read_exact(&mut buf).await.unwrap();
    codec::decode_frame(&buf).unwrap()
}

/// A SEND_MESSAGE signed as `AclClientRPCHook` signs it.
fn signed_send(ak: &str, sk: &str) -> RemotingCommand {
    let fields = [
        ("a", "PG"),
        ("b", "orders"),
        ("e", "0"),
        ("f", "0"),
        ("g", "0"),
        ("h", "0"),
        ("i", ""),
        (sign::ACCESS_KEY, ak),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut c = RemotingCommand::request(310, fields, b"body".to_vec());
    let sig = sign::remoting_signature(sk, &c.ext, c.version, b"body");
    c.ext.insert(sign::SIGNATURE.into(), sig);
    c
}

async fn console_status(addr: SocketAddr, ak: &str, sk: &str) -> (u16, String) {
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{ak}:{sk}"));
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET /api/overview HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic {basic}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (text[9..12].parse().unwrap(), body)
}

#[tokio::test]
async fn an_unknown_access_key_and_a_wrong_secret_get_one_answer() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
        c.console_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let now = sign::format_date_time(SystemClock.now());

    // gRPC.
    let (c1, wrong_secret) = query_route_at(b.addr, "alice", "not-the-secret", &now).await;
    let (c2, unknown) = query_route_at(b.addr, "mallory", "x", &now).await;
    assert_eq!((c1, c2), (UNAUTHORIZED, UNAUTHORIZED));
    assert_eq!(wrong_secret, unknown, "one answer for both");
    assert!(!unknown.contains("mallory"), "{unknown}");
    assert!(!wrong_secret.contains("alice"), "{wrong_secret}");

    // Remoting.
    let r = b.remoting_addr.unwrap();
    let a = remoting_call(r, signed_send("alice", "not-the-secret")).await;
    let m = remoting_call(r, signed_send("mallory", "x")).await;
    assert_eq!((a.code, m.code), (16, 16));
    assert_eq!(a.remark, m.remark, "one answer for both");
    assert!(!a.remark.as_deref().unwrap_or("").contains("alice"));

    // The console's Basic credentials.
    let con = b.console_addr.unwrap();
    let (s1, wrong) = console_status(con, "alice", "not-the-secret").await;
    let (s2, unknown) = console_status(con, "mallory", "x").await;
    assert_eq!((s1, s2), (401, 401));
    assert_eq!(wrong, unknown, "one answer for both");
    assert!(!wrong.contains("alice"), "{wrong}");
    // The right secret still passes.
    assert_eq!(console_status(con, "alice", "alice-secret").await.0, 200);
    b.stop().await;
}
