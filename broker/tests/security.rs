//! Authentication, ACLs, the admin gate and TLS, in process: clients sign their calls as the
//! official v5 clients do (`rocklet_broker::auth::admin::Signer`), v4 requests as
//! `AclClientRPCHook` does; certificates come from a CA made here with rcgen.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use common::{dur, msg, res, test_config, OK};
use rocklet_broker::auth::admin::{ClientOptions, Signer};
use rocklet_broker::auth::sign;
use rocklet_broker::auth::tls::{ClientAuth, Mode, TlsFileConfig};
use rocklet_broker::auth::{AuthFileConfig, EntrySpec, Failure, Protocol, UserSpec};
use rocklet_broker::clock::SystemClock;
use rocklet_broker::config::BrokerConfig;
use rocklet_broker::pb::admin as apb;
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::pb::v2::messaging_service_client::MessagingServiceClient;
use rocklet_broker::remoting::codec::{self, RemotingCommand};
use rocklet_broker::server::{self, RunningBroker};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_stream::StreamExt;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Signed = MessagingServiceClient<InterceptedService<Channel, Signer>>;

const UNAUTHORIZED: i32 = pb::Code::Unauthorized as i32;
const FORBIDDEN: i32 = pb::Code::Forbidden as i32;

fn user(ak: &str, sk: &str, super_user: bool) -> UserSpec {
    UserSpec {
        access_key: ak.into(),
        secret_key: sk.into(),
        super_user,
        session_token: None,
    }
}

fn entry(u: &str, r: &str, actions: &[&str], decision: &str) -> EntrySpec {
    EntrySpec {
        user: u.into(),
        resource: r.into(),
        actions: actions.iter().map(|s| s.to_string()).collect(),
        decision: decision.into(),
        source_ips: vec![],
    }
}

/// root (super); alice: Pub on the topics `pub*` but `pub-secret`, Pub and Sub on `both`,
/// Sub on group G; bob: Pub and Sub on `bob`, Sub on group G.
fn auth_config() -> AuthFileConfig {
    AuthFileConfig {
        users: vec![
            user("root", "root-secret", true),
            user("alice", "alice-secret", false),
            user("bob", "bob-secret", false),
        ],
        acls: vec![
            entry("alice", "Topic:pub*", &["Pub"], "Allow"),
            entry("alice", "Topic:pub-secret", &["Pub"], "Deny"),
            entry("alice", "Topic:both", &["Pub", "Sub"], "Allow"),
            entry("alice", "Group:G", &["Sub"], "Allow"),
            entry("bob", "Topic:bob", &["Pub", "Sub"], "Allow"),
            entry("bob", "Group:G", &["Sub"], "Allow"),
        ],
        ..Default::default()
    }
}

async fn start(dir: &std::path::Path, f: impl FnOnce(&mut BrokerConfig)) -> RunningBroker {
    let mut cfg = test_config(dir);
    cfg.auth = auth_config();
    f(&mut cfg);
    server::start(cfg, Arc::new(SystemClock)).await.unwrap()
}

async fn client(addr: SocketAddr, ak: &str, sk: &str) -> Signed {
    let ch = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let signer = if ak.is_empty() {
        Signer::default()
    } else {
        Signer::new(ak, sk)
    };
    MessagingServiceClient::with_interceptor(ch, signer)
}

async fn send(c: &mut Signed, topic: &str, ty: pb::MessageType) -> pb::SendMessageResponse {
    let id = format!("{:032X}", rand_id());
    c.send_message(pb::SendMessageRequest {
        messages: vec![msg(topic, b"body", ty, &id)],
    })
    .await
    .unwrap()
    .into_inner()
}

fn rand_id() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

fn code(r: &pb::SendMessageResponse) -> (i32, String) {
    let s = r.status.clone().unwrap();
    (s.code, s.message)
}

async fn receive_status(c: &mut Signed, topic: &str, group: &str) -> (pb::Status, usize) {
    let req = pb::ReceiveMessageRequest {
        group: res(group),
        message_queue: Some(pb::MessageQueue {
            topic: res(topic),
            ..Default::default()
        }),
        batch_size: 16,
        invisible_duration: Some(dur(30_000)),
        long_polling_timeout: Some(dur(500)),
        ..Default::default()
    };
    let mut stream = c.receive_message(req).await.unwrap().into_inner();
    let (mut status, mut n) = (pb::Status::default(), 0);
    while let Some(r) = stream.next().await {
        match r.unwrap().content.unwrap() {
            pb::receive_message_response::Content::Status(s) => status = s,
            pb::receive_message_response::Content::Message(_) => n += 1,
            pb::receive_message_response::Content::DeliveryTimestamp(_) => {}
        }
    }
    (status, n)
}

#[tokio::test]
async fn credentials_are_checked_and_failures_named_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |_| {}).await;
    let mut good = client(b.addr, "alice", "alice-secret").await;
    assert_eq!(
        code(&send(&mut good, "pub-orders", pb::MessageType::Normal).await).0,
        OK
    );
    for (ak, sk, want) in [
        ("", "", "no credentials"),
        ("alice", "wrong", rocklet_broker::auth::BAD_SIGNATURE),
        ("mallory", "x", rocklet_broker::auth::BAD_SIGNATURE),
    ] {
        let mut c = client(b.addr, ak, sk).await;
        let (status, message) = code(&send(&mut c, "orders", pb::MessageType::Normal).await);
        assert_eq!(status, UNAUTHORIZED, "{message}");
        assert!(message.contains(want), "{message}");
        assert!(!message.contains("alice-secret"));
        // Every RPC is refused the same way.
        let r = c
            .query_route(pb::QueryRouteRequest {
                topic: res("orders"),
                endpoints: None,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.status.unwrap().code, UNAUTHORIZED);
    }
    // A stale date-time is refused even with the right secret (replay window, UTC only).
    let mut ch = client(b.addr, "", "").await;
    let mut req = tonic::Request::new(pb::QueryRouteRequest {
        topic: res("orders"),
        endpoints: None,
    });
    let old =
        sign::format_date_time(rocklet_broker::clock::Clock::now(&SystemClock) - 3_600_000 * 15);
    req.metadata_mut()
        .insert(sign::DATE_TIME, old.parse().unwrap());
    req.metadata_mut().insert(
        sign::AUTHORIZATION,
        sign::grpc_authorization("alice", "alice-secret", &old)
            .parse()
            .unwrap(),
    );
    let r = ch
        .query_route(req)
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(r.code, UNAUTHORIZED);
    assert!(r.message.contains("expired timestamp"), "{}", r.message);
    let m = &b.metrics;
    assert_eq!(
        m.auth_failure_count(Protocol::Grpc, Failure::NoCredentials),
        2
    );
    assert_eq!(
        m.auth_failure_count(Protocol::Grpc, Failure::BadSignature),
        2
    );
    assert_eq!(m.auth_failure_count(Protocol::Grpc, Failure::UnknownKey), 2);
    assert_eq!(
        m.auth_failure_count(Protocol::Grpc, Failure::ExpiredTimestamp),
        1
    );
    b.stop().await;
}

#[tokio::test]
async fn acl_pub_without_sub_deny_beats_allow_and_foreign_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |_| {}).await;
    let mut alice = client(b.addr, "alice", "alice-secret").await;
    let mut bob = client(b.addr, "bob", "bob-secret").await;
    // Pub allowed, Sub not.
    assert_eq!(
        code(&send(&mut alice, "pub-only", pb::MessageType::Normal).await).0,
        OK
    );
    let (s, n) = receive_status(&mut alice, "pub-only", "G").await;
    assert_eq!(s.code, FORBIDDEN, "{}", s.message);
    assert!(
        s.message.contains("may not Sub on Topic:pub-only"),
        "{}",
        s.message
    );
    assert_eq!(n, 0);
    // Both allowed on `both`.
    assert_eq!(
        code(&send(&mut alice, "both", pb::MessageType::Normal).await).0,
        OK
    );
    let (s, n) = receive_status(&mut alice, "both", "G").await;
    assert_eq!((s.code, n), (OK, 1), "{}", s.message);
    // The Deny of Topic:pub-secret beats the Allow of Topic:pub*.
    let (c, m) = code(&send(&mut alice, "pub-secret", pb::MessageType::Normal).await);
    assert_eq!(c, FORBIDDEN);
    assert!(m.contains("a Deny entry matches"), "{m}");
    // Bob's transaction on his topic: alice may not end it, whatever topic she names.
    let r = send(&mut bob, "bob", pb::MessageType::Transaction).await;
    assert_eq!(code(&r).0, OK);
    let e = r.entries[0].clone();
    let end = |topic: &str| pb::EndTransactionRequest {
        topic: res(topic),
        message_id: e.message_id.clone(),
        transaction_id: e.transaction_id.clone(),
        resolution: pb::TransactionResolution::Commit as i32,
        source: pb::TransactionSource::SourceClient as i32,
        trace_context: String::new(),
    };
    let s = alice
        .end_transaction(end("bob"))
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(s.code, FORBIDDEN, "{}", s.message);
    let s = alice
        .end_transaction(end("pub-x"))
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(
        s.code,
        pb::Code::InvalidTransactionId as i32,
        "{}",
        s.message
    );
    // Named by its message id (RocketMQ's form), the topic she may use has no such half.
    assert!(s.message.contains("UNKNOWN_TRANSACTION"), "{}", s.message);
    // Bob can.
    let s = bob
        .end_transaction(end("bob"))
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(s.code, OK, "{}", s.message);
    assert!(
        b.metrics
            .auth_failure_count(Protocol::Grpc, Failure::Forbidden)
            >= 3
    );
    b.stop().await;
}

#[tokio::test]
async fn telemetry_settings_are_authorized() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |_| {}).await;
    for (ak, sk, want) in [
        ("alice", "alice-secret", FORBIDDEN),
        ("nobody", "x", UNAUTHORIZED),
        ("bob", "bob-secret", OK),
    ] {
        let mut c = client(b.addr, ak, sk).await;
        let settings = pb::TelemetryCommand {
            status: None,
            command: Some(pb::telemetry_command::Command::Settings(pb::Settings {
                client_type: Some(pb::ClientType::SimpleConsumer as i32),
                pub_sub: Some(pb::settings::PubSub::Subscription(pb::Subscription {
                    group: res("G"),
                    subscriptions: vec![pb::SubscriptionEntry {
                        topic: res("bob"),
                        expression: None,
                    }],
                    ..Default::default()
                })),
                ..Default::default()
            })),
        };
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tx.send(settings).await.unwrap();
        let mut out = c
            .telemetry(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let first = tokio::time::timeout(Duration::from_secs(5), out.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(first.status.unwrap().code, want, "{ak}");
    }
    b.stop().await;
}

#[tokio::test]
async fn admin_needs_a_super_user_and_changes_apply_at_once_and_persist() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |c| {
        c.admin_listen = Some("127.0.0.1:0".parse().unwrap())
    })
    .await;
    let admin_addr = b.admin_addr.unwrap();
    // The admin services are not on the data port any more.
    let ch = rocklet_broker::auth::admin::channel(&b.addr.to_string(), &ClientOptions::default())
        .await
        .unwrap();
    let e = rocklet_broker::pb::admin::admin_client::AdminClient::new(ch)
        .list_topics(apb::ListTopicsRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unimplemented);
    let admin = |ak: &str, sk: &str| {
        let (ak, sk) = (ak.to_string(), sk.to_string());
        async move {
            let ch = rocklet_broker::auth::admin::channel(
                &admin_addr.to_string(),
                &ClientOptions::default(),
            )
            .await
            .unwrap();
            let s = if ak.is_empty() {
                Signer::default()
            } else {
                Signer::new(&ak, &sk)
            };
            (
                rocklet_broker::pb::admin::admin_client::AdminClient::with_interceptor(
                    ch.clone(),
                    s.clone(),
                ),
                rocklet_broker::pb::admin::security_client::SecurityClient::with_interceptor(ch, s),
            )
        }
    };
    let (mut anon, _) = admin("", "").await;
    let e = anon
        .list_topics(apb::ListTopicsRequest {})
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    assert!(e.message().contains("no credentials"), "{}", e.message());
    let (mut normal, mut normal_sec) = admin("alice", "alice-secret").await;
    let e = normal
        .list_pending(apb::ListPendingRequest { limit: 0 })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    assert!(normal_sec
        .list_users(apb::ListUsersRequest {})
        .await
        .is_err());
    let (mut root, mut sec) = admin("root", "root-secret").await;
    root.list_topics(apb::ListTopicsRequest {}).await.unwrap();
    // A new user and entry work at once.
    sec.put_user(apb::PutUserRequest {
        user: Some(apb::User {
            access_key: "carol".into(),
            secret_key: "carol-secret".into(),
            ..Default::default()
        }),
    })
    .await
    .unwrap();
    let mut carol = client(b.addr, "carol", "carol-secret").await;
    assert_eq!(
        code(&send(&mut carol, "c", pb::MessageType::Normal).await).0,
        FORBIDDEN
    );
    sec.put_acl(apb::PutAclRequest {
        entry: Some(apb::AclEntry {
            user: "carol".into(),
            resource: "Topic:c".into(),
            actions: vec!["Pub".into()],
            decision: "Allow".into(),
            ..Default::default()
        }),
    })
    .await
    .unwrap();
    assert_eq!(
        code(&send(&mut carol, "c", pb::MessageType::Normal).await).0,
        OK
    );
    let users = sec
        .list_users(apb::ListUsersRequest {})
        .await
        .unwrap()
        .into_inner()
        .users;
    assert!(users.iter().all(|u| u.secret_key.is_empty()));
    assert!(users
        .iter()
        .any(|u| u.access_key == "carol" && !u.from_config));
    let e = sec
        .remove_user(apb::RemoveUserRequest {
            access_key: "alice".into(),
        })
        .await
        .unwrap_err();
    assert!(e.message().contains("config file"), "{}", e.message());
    b.stop().await;
    // After a restart carol and her entry are still there.
    let b = start(dir.path(), |_| {}).await;
    let mut carol = client(b.addr, "carol", "carol-secret").await;
    assert_eq!(
        code(&send(&mut carol, "c", pb::MessageType::Normal).await).0,
        OK
    );
    b.stop().await;
}

#[tokio::test]
async fn an_open_broker_on_a_non_loopback_address_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = test_config(dir.path());
    cfg.listen = "0.0.0.0:0".parse().unwrap();
    let e = server::start(cfg.clone(), Arc::new(SystemClock))
        .await
        .unwrap_err();
    // Sockets are bound before anything else: the refusal names the address bound.
    assert!(
        e.contains("refusing to listen on 0.0.0.0:") && e.contains("with authentication off"),
        "{e}"
    );
    assert!(e.contains("--insecure-no-auth"), "{e}");
    // Users, or the explicit flag, let it start (it binds only loopback-reachable ports in
    // this test: nothing connects from elsewhere).
    cfg.listen = "127.0.0.1:0".parse().unwrap();
    cfg.remoting_listen = Some("0.0.0.0:0".parse().unwrap());
    assert!(server::start(cfg.clone(), Arc::new(SystemClock))
        .await
        .unwrap_err()
        .contains("refusing to listen on 0.0.0.0:"));
    cfg.insecure_no_auth = true;
    server::start(cfg, Arc::new(SystemClock))
        .await
        .unwrap()
        .stop()
        .await;
}

// ---- remoting -----------------------------------------------------------------------------

async fn remoting_call(addr: SocketAddr, cmd: RemotingCommand) -> RemotingCommand {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&cmd.encode()).await.unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await.unwrap();
    let n = codec::frame_length(len).unwrap();
    let mut buf = vec![0; n];
    s.read_exact(&mut buf).await.unwrap();
    codec::decode_frame(&buf).unwrap()
}

/// What `AclClientRPCHook` does to a request.
fn signed(code: i32, ext: &[(&str, &str)], body: &[u8], ak: &str, sk: &str) -> RemotingCommand {
    let mut fields: std::collections::BTreeMap<String, String> = ext
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if !ak.is_empty() {
        fields.insert(sign::ACCESS_KEY.into(), ak.into());
        let mut c = RemotingCommand::request(code, fields.clone(), body.to_vec());
        let sig = sign::remoting_signature(sk, &c.ext, c.version, body);
        c.ext.insert(sign::SIGNATURE.into(), sig);
        return c;
    }
    RemotingCommand::request(code, fields, body.to_vec())
}

#[tokio::test]
async fn remoting_requests_are_signed_and_authorized() {
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |c| {
        c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
        c.namesrv_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let (addr, ns) = (b.remoting_addr.unwrap(), b.namesrv_addr.unwrap());
    let send_ext = [
        ("a", "PG"),
        ("b", "pub-orders"),
        ("e", "0"),
        ("f", "0"),
        ("g", "0"),
        ("h", "0"),
        ("i", ""),
    ];
    let r = remoting_call(
        addr,
        signed(310, &send_ext, b"hello", "alice", "alice-secret"),
    )
    .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    for (ak, sk, want) in [
        ("", "", "no AccessKey"),
        ("alice", "bad", "bad signature"),
        ("eve", "x", "unknown access key"),
    ] {
        let r = remoting_call(addr, signed(310, &send_ext, b"hello", ak, sk)).await;
        assert_eq!(r.code, 16, "NO_PERMISSION");
        assert!(
            r.remark.as_deref().unwrap_or("").contains(want),
            "{:?}",
            r.remark
        );
    }
    // The body is signed too.
    let mut c = signed(310, &send_ext, b"hello", "alice", "alice-secret");
    c.body = b"HELLO".to_vec();
    assert_eq!(remoting_call(addr, c).await.code, 16);
    // Pull needs Sub on the topic: alice has none on `pub-orders`.
    let pull = [
        ("consumerGroup", "G"),
        ("topic", "pub-orders"),
        ("queueId", "0"),
        ("queueOffset", "0"),
        ("maxMsgNums", "1"),
        ("sysFlag", "0"),
    ];
    let r = remoting_call(addr, signed(11, &pull, b"", "alice", "alice-secret")).await;
    assert_eq!(r.code, 16);
    assert!(
        r.remark
            .as_deref()
            .unwrap()
            .contains("may not Sub on Topic:pub-orders"),
        "{:?}",
        r.remark
    );
    // Routes from the name-server role need no credentials (as RocketMQ's name server).
    let r = remoting_call(
        ns,
        RemotingCommand::request(
            105,
            [("topic".to_string(), "orders".to_string())].into(),
            vec![],
        ),
    )
    .await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // A transaction of bob's: alice may not end it even naming a topic she may publish to.
    let txn_props = "TRAN_MSG\u{1}true\u{2}PGROUP\u{1}PG_BOB\u{2}";
    let prep = [
        ("a", "PG_BOB"),
        ("b", "bob"),
        ("e", "0"),
        ("f", "4"),
        ("g", "0"),
        ("h", "0"),
        ("i", txn_props),
    ];
    let r = remoting_call(addr, signed(310, &prep, b"half", "bob", "bob-secret")).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    // The offset message id ends with the log offset a v4 client reports back.
    let txn = u64::from_str_radix(&r.ext["msgId"][16..], 16)
        .unwrap()
        .to_string();
    let end = |topic: &'static str| {
        [
            ("producerGroup", "PG_BOB"),
            ("topic", topic),
            ("commitLogOffset", txn.as_str()),
            ("commitOrRollback", "8"),
            ("tranStateTableOffset", "0"),
        ]
    };
    let r = remoting_call(
        addr,
        signed(37, &end("pub-x"), b"", "alice", "alice-secret"),
    )
    .await;
    assert_eq!(r.code, 16, "{:?}", r.remark);
    assert!(
        r.remark.as_deref().unwrap().contains("Topic:bob"),
        "{:?}",
        r.remark
    );
    let r = remoting_call(addr, signed(37, &end("orders"), b"", "bob", "bob-secret")).await;
    assert_eq!(r.code, 16, "bob may not publish to `orders` either");
    let r = remoting_call(addr, signed(37, &end("bob"), b"", "bob", "bob-secret")).await;
    assert_eq!(r.code, 0, "{:?}", r.remark);
    assert_eq!(
        b.metrics
            .auth_failure_count(Protocol::Remoting, Failure::BadSignature),
        2
    );
    b.stop().await;
}

// ---- TLS ----------------------------------------------------------------------------------

struct Pki {
    dir: tempfile::TempDir,
    ca_pem: String,
}

impl Pki {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "rocklet test CA");
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let leaf = |name: &str| {
            let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
            p.subject_alt_names
                .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
            p.distinguished_name.push(rcgen::DnType::CommonName, name);
            let k = rcgen::KeyPair::generate().unwrap();
            let c = p.signed_by(&k, &ca_cert, &ca_key).unwrap();
            (c.pem(), k.serialize_pem())
        };
        let (cert, key) = leaf("rocklet");
        std::fs::write(dir.path().join("server.pem"), cert).unwrap();
        std::fs::write(dir.path().join("server.key"), key).unwrap();
        let (cert, key) = leaf("client");
        std::fs::write(dir.path().join("client.pem"), cert).unwrap();
        std::fs::write(dir.path().join("client.key"), key).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        Pki {
            dir,
            ca_pem: ca_cert.pem(),
        }
    }

    fn path(&self, f: &str) -> std::path::PathBuf {
        self.dir.path().join(f)
    }

    fn config(&self, mode: Mode) -> TlsFileConfig {
        TlsFileConfig {
            mode: Some(mode),
            cert: Some(self.path("server.pem")),
            key: Some(self.path("server.key")),
            reload_interval_ms: Some(200),
            ..Default::default()
        }
    }
}

async fn tls_channel(
    addr: SocketAddr,
    pki: &Pki,
    identity: bool,
) -> Result<Channel, tonic::transport::Error> {
    let mut t = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(&pki.ca_pem))
        .domain_name("localhost");
    if identity {
        t = t.identity(tonic::transport::Identity::from_pem(
            std::fs::read(pki.path("client.pem")).unwrap(),
            std::fs::read(pki.path("client.key")).unwrap(),
        ));
    }
    Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(t)
        .unwrap()
        .connect()
        .await
}

async fn route_ok(ch: Channel) -> bool {
    let mut c = MessagingServiceClient::with_interceptor(ch, Signer::new("root", "root-secret"));
    let r = c
        .query_route(pb::QueryRouteRequest {
            topic: res("t"),
            endpoints: None,
        })
        .await;
    matches!(r, Ok(r) if r.get_ref().status.as_ref().is_some_and(|s| s.code == OK))
}

#[tokio::test]
async fn tls_enforcing_permissive_reload_and_client_certificates() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |c| c.tls = pki.config(Mode::Enforcing)).await;
    assert!(route_ok(tls_channel(b.addr, &pki, false).await.unwrap()).await);
    // Plaintext is refused: the client sees the broker's GOAWAY or the close, never an answer.
    let plain = client(b.addr, "root", "root-secret").await;
    let mut plain = plain;
    let r = plain
        .query_route(pb::QueryRouteRequest {
            topic: res("t"),
            endpoints: None,
        })
        .await;
    assert!(r.is_err(), "{r:?}");
    // A new certificate (another CA) is picked up without a restart; the old CA no longer works.
    let other = Pki::new();
    std::fs::copy(other.path("server.pem"), pki.path("server.pem")).unwrap();
    std::fs::copy(other.path("server.key"), pki.path("server.key")).unwrap();
    let mut switched = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if tls_channel(b.addr, &other, false).await.is_ok() {
            switched = true;
            break;
        }
    }
    assert!(switched, "the reloaded certificate is served");
    assert!(tls_channel(b.addr, &pki, false).await.is_err());
    b.stop().await;

    // Client certificates required: enforcing (permissive would still serve plaintext
    // clients, which present none, so that pair is refused at start: tests/trust_edges.rs).
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |c| {
        c.tls = pki.config(Mode::Enforcing);
        c.tls.client_ca = Some(pki.path("ca.pem"));
        c.tls.client_auth = Some(ClientAuth::Required);
    })
    .await;
    assert!(route_ok(tls_channel(b.addr, &pki, true).await.unwrap()).await);
    let no_cert = tls_channel(b.addr, &pki, false).await;
    assert!(
        match no_cert {
            Err(_) => true,
            Ok(ch) => !route_ok(ch).await,
        },
        "TLS without a client certificate is refused"
    );
    b.stop().await;

    // Permissive: TLS and plaintext on one port; client certificates optional.
    let pki = Pki::new();
    let dir = tempfile::tempdir().unwrap();
    let b = start(dir.path(), |c| {
        c.tls = pki.config(Mode::Permissive);
        c.tls.client_ca = Some(pki.path("ca.pem"));
        c.tls.client_auth = Some(ClientAuth::Optional);
    })
    .await;
    assert!(route_ok(tls_channel(b.addr, &pki, true).await.unwrap()).await);
    assert!(route_ok(tls_channel(b.addr, &pki, false).await.unwrap()).await);
    let ch = Channel::from_shared(format!("http://{}", b.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert!(route_ok(ch).await, "plaintext on the same port");
    b.stop().await;
}

/// A remoting request over TLS trusting `pki`'s CA; `Err` when the handshake or the call fails.
async fn remoting_tls_call(
    addr: SocketAddr,
    pki: &Pki,
    cmd: RemotingCommand,
) -> std::io::Result<RemotingCommand> {
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    let mut pem = pki.ca_pem.as_bytes();
    for c in rustls_pemfile_certs(&mut pem) {
        roots.add(c).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(name, tcp)
        .await?;
    s.write_all(&cmd.encode()).await?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).await?;
    let n = codec::frame_length(len).unwrap();
    let mut buf = vec![0; n];
    s.read_exact(&mut buf).await?;
    Ok(codec::decode_frame(&buf).unwrap())
}

/// The certificates of a PEM file.
fn rustls_pemfile_certs(
    pem: &mut &[u8],
) -> Vec<tokio_rustls::rustls::pki_types::CertificateDer<'static>> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    tokio_rustls::rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .map(Result::unwrap)
        .collect()
}

/// Whether a plaintext remoting request gets no answer (the connection is closed).
async fn remoting_plain_refused(addr: SocketAddr, cmd: RemotingCommand) -> bool {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = s.write_all(&cmd.encode()).await;
    let mut len = [0u8; 4];
    matches!(
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut len)).await,
        Ok(Err(_))
    )
}

#[tokio::test]
async fn remoting_and_name_server_speak_tls_enforcing_and_permissive() {
    let route = || {
        signed(
            105,
            &[("topic", "pub-orders")],
            b"",
            "alice",
            "alice-secret",
        )
    };
    for mode in [Mode::Enforcing, Mode::Permissive] {
        let pki = Pki::new();
        let dir = tempfile::tempdir().unwrap();
        let b = start(dir.path(), |c| {
            c.tls = pki.config(mode);
            c.remoting_listen = Some("127.0.0.1:0".parse().unwrap());
            c.namesrv_listen = Some("127.0.0.1:0".parse().unwrap());
        })
        .await;
        for addr in [b.remoting_addr.unwrap(), b.namesrv_addr.unwrap()] {
            let r = remoting_tls_call(addr, &pki, route()).await.unwrap();
            assert_eq!(r.code, 0, "{mode:?} {addr}: {:?}", r.remark);
            let other = Pki::new();
            assert!(
                remoting_tls_call(addr, &other, route()).await.is_err(),
                "a client trusting another CA"
            );
            if mode == Mode::Enforcing {
                assert!(remoting_plain_refused(addr, route()).await, "{addr}");
            } else {
                assert_eq!(remoting_call(addr, route()).await.code, 0);
            }
        }
        b.stop().await;
    }
}
