//! The operator console against a page of another site (issue 29, item 6): with
//! authentication off (the loopback default), a DNS-rebinding page reaches the console under
//! its own name, so the browser sends `Host: evil.example:PORT` (and `Origin:
//! http://evil.example:PORT` on a POST). The console answers only requests that name it — its
//! own address, `localhost` on loopback, or a name of `console_allowed_hosts` — and actions
//! whose `Origin`, when present, is one of those. Everything else is refused by name before
//! any route runs, so a pending transaction stays pending.

mod common;

use std::net::SocketAddr;

use common::TestBroker;
use rocklet_core::{NewMessage, Reply, Request};
use serde_json::{json, Value};

async fn console_with(f: impl FnOnce(&mut rocklet_broker::config::BrokerConfig)) -> TestBroker {
    TestBroker::start_with(|c| {
        c.console_listen = Some("127.0.0.1:0".parse().unwrap());
        c.console_sample_ms = 100;
        f(c);
    })
    .await
}

fn console_addr(b: &TestBroker) -> SocketAddr {
    b.broker.as_ref().unwrap().console_addr.expect("console on")
}

/// One HTTP/1.1 exchange with exactly these headers: (status, body as text).
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String) {
    let (status, _, body) = common::web::exchange(addr, method, path, headers, body).await;
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn prepare(b: &TestBroker) -> String {
    let r = b
        .broker
        .as_ref()
        .unwrap()
        .core
        .request(Request::Prepare {
            group: "G".into(),
            message: NewMessage::new("orders", "half"),
            check_immunity_ms: None,
        })
        .await
        .unwrap();
    match r {
        Reply::Sent(r) => r[0].txn.unwrap().to_string(),
        other => panic!("{other:?}"),
    }
}

async fn pending(b: &TestBroker) -> usize {
    b.broker
        .as_ref()
        .unwrap()
        .core
        .inspect(|b| b.pending_transaction_count())
        .await
        .unwrap()
}

fn rollback(txn: &str) -> Value {
    json!({"resolution": "rollback", "transactions": [txn]})
}

#[tokio::test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
async fn a_foreign_host_is_refused_and_the_transaction_stays_pending() {
    let b = console_with(|_| {}).await;
    let a = console_addr(&b);
    let txn = prepare(&b).await;
    assert_eq!(pending(&b).await, 1);
    let evil = format!("evil.example:{}", a.port());
    let evil_origin = format!("http://{evil}");

    // A rebinding page reads nothing...
    let (status, text) = http(a, "GET", "/api/pending", &[("Host", &evil)], None).await;
    assert_eq!(status, 421, "{text}");
    assert!(text.contains(&format!("Host `{evil}`")), "{text}");
    assert!(text.contains("console_allowed_hosts"), "{text}");
    assert!(!text.contains(&txn), "no data in the refusal: {text}");
    let (status, _) = http(a, "GET", "/", &[("Host", &evil)], None).await;
    assert_eq!(status, 421, "not even the page");
    // ...and rolls nothing back, even with the console's header (same-origin for it).
    let (status, text) = http(
        a,
        "POST",
        "/api/resolve",
        &[
            ("Host", &evil),
            ("Origin", &evil_origin),
            ("X-Rocklet-Console", "1"),
        ],
        Some(&rollback(&txn)),
    )
    .await;
    assert_eq!(status, 421, "{text}");
    assert_eq!(pending(&b).await, 1, "the transaction is still pending");

    // A request with no Host at all is no HTTP/1.1 request.
    let (status, text) = http(a, "GET", "/api/pending", &[], None).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("no Host header"), "{text}");

    // The console's own address and, on loopback, localhost are served.
    let own = a.to_string();
    let (status, text) = http(a, "GET", "/api/pending", &[("Host", &own)], None).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(&txn), "{text}");
    let local = format!("localhost:{}", a.port());
    let (status, _) = http(a, "GET", "/", &[("Host", &local)], None).await;
    assert_eq!(status, 200);
    // The right name on another port is another site.
    let other_port = format!("127.0.0.1:{}", a.port().wrapping_add(1));
    let (status, _) = http(a, "GET", "/", &[("Host", &other_port)], None).await;
    assert_eq!(status, 421);
    b.stop().await;
}

#[tokio::test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
async fn an_action_from_a_foreign_origin_is_refused() {
    let b = console_with(|_| {}).await;
    let a = console_addr(&b);
    let own = a.to_string();
    let txn = prepare(&b).await;
    for origin in [
        format!("http://evil.example:{}", a.port()),
        "http://evil.example".to_string(),
        "null".to_string(),
        format!("http://127.0.0.1:{}", a.port().wrapping_add(1)),
    ] {
        let (status, text) = http(
            a,
            "POST",
            "/api/resolve",
            &[
                ("Host", &own),
                ("Origin", &origin),
                ("X-Rocklet-Console", "1"),
            ],
            Some(&rollback(&txn)),
        )
        .await;
        assert_eq!(status, 403, "{origin}: {text}");
        assert!(text.contains(&format!("Origin `{origin}`")), "{text}");
        assert_eq!(pending(&b).await, 1, "{origin}: still pending");
    }
    // The console page's own origin may act.
    let (status, text) = http(
        a,
        "POST",
        "/api/resolve",
        &[
            ("Host", &own),
            ("Origin", &format!("http://{own}")),
            ("X-Rocklet-Console", "1"),
        ],
        Some(&rollback(&txn)),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(pending(&b).await, 0);
    b.stop().await;
}

#[tokio::test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
async fn names_in_console_allowed_hosts_are_served() {
    let b = console_with(|c| {
        c.console_allowed_hosts =
            vec!["console.example.internal".into(), "ops.example:8443".into()];
    })
    .await;
    let a = console_addr(&b);
    for (host, want) in [
        (format!("console.example.internal:{}", a.port()), 200),
        ("CONSOLE.example.internal".to_string(), 200),
        ("ops.example:8443".to_string(), 200),
        (format!("ops.example:{}", a.port()), 421),
        (format!("evil.example:{}", a.port()), 421),
    ] {
        let (status, text) = http(a, "GET", "/api/overview", &[("Host", &host)], None).await;
        assert_eq!(status, want, "{host}: {text}");
    }
    let (status, _) = http(
        a,
        "GET",
        "/api/overview",
        &[
            ("Host", "ops.example:8443"),
            ("Origin", "https://ops.example:8443"),
        ],
        None,
    )
    .await;
    assert_eq!(status, 200, "the origin of a configured name");
    b.stop().await;
}

#[test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
fn a_bad_console_allowed_hosts_entry_is_named() {
    for bad in ["http://x.example", "x.example/path", "", "x.example:99999"] {
        let c = rocklet_broker::config::BrokerConfig {
            console_allowed_hosts: vec![bad.to_string()],
            ..Default::default()
        };
        let e = c.validate().unwrap_err();
        assert!(e.contains("console_allowed_hosts"), "{bad}: {e}");
    }
}

#[tokio::test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
async fn metrics_answer_only_their_own_names() {
    let b = TestBroker::start_with(|c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let m = b.broker.as_ref().unwrap().metrics_addr.expect("metrics on");
    let own = m.to_string();
    let (status, text) = http(m, "GET", "/metrics", &[("Host", &own)], None).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("rocklet_"), "{text}");
    let evil = format!("evil.example:{}", m.port());
    let (status, text) = http(m, "GET", "/metrics", &[("Host", &evil)], None).await;
    assert_eq!(status, 421, "{text}");
    assert!(text.contains("metrics_allowed_hosts"), "{text}");
    assert!(!text.contains("rocklet_"), "no data: {text}");
    b.stop().await;
}

#[tokio::test]
#[ignore = "a hostile client; run by tests/ci/hostile.sh"]
async fn with_authentication_on_a_foreign_name_is_refused_even_with_credentials() {
    use base64::Engine as _;
    let b = console_with(|c| {
        c.auth.users = vec![rocklet_broker::auth::UserSpec {
            access_key: "root".into(),
            secret_key: "s3cret".into(),
            super_user: true,
            session_token: None,
        }];
    })
    .await;
    let a = console_addr(&b);
    let own = a.to_string();
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("root:s3cret")
    );
    let txn = prepare(&b).await;
    let evil = format!("evil.example:{}", a.port());
    let (status, text) = http(
        a,
        "GET",
        "/api/pending",
        &[("Host", &evil), ("Authorization", &basic)],
        None,
    )
    .await;
    assert_eq!(status, 421, "{text}");
    let (status, text) = http(
        a,
        "POST",
        "/api/resolve",
        &[
            ("Host", &own),
            ("Origin", &format!("http://{evil}")),
            ("Authorization", &basic),
            ("X-Rocklet-Console", "1"),
        ],
        Some(&rollback(&txn)),
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert_eq!(pending(&b).await, 1, "still pending");
    let (status, text) = http(
        a,
        "GET",
        "/api/pending",
        &[("Host", &own), ("Authorization", &basic)],
        None,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    b.stop().await;
}
