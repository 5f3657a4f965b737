//! The operator console's JSON API against an in-process broker: the time series, paged
//! listings, a manual resolve with its audit, message stories, dead letters resent, delays,
//! and access (a super user when authentication is on).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::TestBroker;
use rocklet_broker::auth::UserSpec;
use rocklet_core::{Delay, NewMessage, Reply, Request, TagFilter};
use serde_json::{json, Value};

async fn console() -> TestBroker {
    console_with(|_| {}).await
}

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

/// One HTTP/1.1 exchange naming the console's own address as `Host`: (status, head, body).
async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> (u16, String, Vec<u8>) {
    let host = addr.to_string();
    let mut all = vec![("Host", host.as_str())];
    all.extend_from_slice(headers);
    common::web::exchange(addr, method, path, &all, body).await
}

async fn get(addr: SocketAddr, path: &str) -> (u16, Value) {
    let (status, _, body) = http(addr, "GET", path, &[], None).await;
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

async fn post(addr: SocketAddr, path: &str, body: Value) -> (u16, Value) {
    let (status, _, body) = http(
        addr,
        "POST",
        path,
        &[("X-Rocklet-Console", "1")],
        Some(&body),
    )
    .await;
    (status, serde_json::from_slice(&body).unwrap())
}

async fn prepare(b: &TestBroker, topic: &str, key: &str) -> String {
    let mut m = NewMessage::new(topic, format!("body of {key}"));
    m.keys = vec![key.into()];
    let r = b
        .broker
        .as_ref()
        .unwrap()
        .core
        .request(Request::Prepare {
            group: "G".into(),
            message: m,
            check_immunity_ms: None,
        })
        .await
        .unwrap();
    match r {
        Reply::Sent(r) => r[0].txn.unwrap().to_string(),
        other => panic!("{other:?}"),
    }
}

async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..100 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn the_console_is_off_by_default_and_serves_its_page_when_on() {
    let b = TestBroker::start().await;
    assert_eq!(b.broker.as_ref().unwrap().console_addr, None);
    b.stop().await;

    let b = console().await;
    let a = console_addr(&b);
    let (status, head, body) = http(a, "GET", "/", &[], None).await;
    assert_eq!(status, 200);
    assert!(head.contains("text/html"), "{head}");
    assert!(String::from_utf8_lossy(&body).contains("/console.js"));
    let (status, _, js) = http(a, "GET", "/console.js", &[], None).await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&js).contains("/api/pending"));
    let (status, _, body) = http(a, "GET", "/favicon.ico", &[], None).await;
    assert_eq!((status, body.len()), (204, 0));
    let (status, v) = get(a, "/api/nothing").await;
    assert_eq!(status, 404);
    assert!(v["error"].as_str().unwrap().contains("/api/nothing"));
    b.stop().await;
}

#[tokio::test]
async fn an_open_console_on_a_public_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = common::test_config(dir.path());
    cfg.console_listen = Some("0.0.0.0:0".parse().unwrap());
    let e =
        rocklet_broker::server::start(cfg, std::sync::Arc::new(rocklet_broker::clock::SystemClock))
            .await
            .unwrap_err();
    assert!(e.contains("refusing to listen on 0.0.0.0:"), "{e}");
}

#[tokio::test]
async fn the_overview_samples_the_backlog_and_pending_pages_cover_every_transaction() {
    let b = console().await;
    let a = console_addr(&b);
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(prepare(&b, "Orders", &format!("k{i}")).await);
    }
    // The series sees the backlog (one sample per 100 ms here).
    until("a sample with the backlog", async || {
        let (_, o) = get(a, "/api/overview").await;
        let last = o["series"].as_array()?.last()?.clone();
        (last["half_backlog"] == 5).then_some(())
    })
    .await;
    let (_, o) = get(a, "/api/overview").await;
    assert_eq!(o["half_backlog"], 5);
    assert_eq!(o["step_ms"], 100);

    // Pages of 2: every transaction once, oldest first.
    let mut seen = Vec::new();
    let mut after = String::new();
    loop {
        let (status, p) = get(a, &format!("/api/pending?limit=2{after}")).await;
        assert_eq!(status, 200, "{p}");
        assert_eq!(p["total"], 5);
        let items = p["items"].as_array().unwrap();
        assert!(items.len() <= 2);
        for t in items {
            seen.push(t["transaction_id"].as_str().unwrap().to_string());
            assert_eq!(t["producer_group"], "G");
            assert_eq!(t["topic"], "Orders");
            assert!(t["age_ms"].as_u64().is_some(), "{t}");
        }
        match p["next"].as_u64() {
            Some(n) => after = format!("&after={n}"),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    // No producer of G is online: once the first check is due it parks.
    until("parked transactions", async || {
        let (_, p) = get(a, "/api/pending?limit=5").await;
        p["items"]
            .as_array()?
            .iter()
            .all(|t| t["state"] == "parked")
            .then_some(())
    })
    .await;
    for bad in ["limit=0", "limit=201", "after=x"] {
        let (status, v) = get(a, &format!("/api/pending?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {v}");
    }
    b.stop().await;
}

#[tokio::test]
async fn a_manual_commit_is_audited_and_the_message_tells_its_story() {
    let b = console().await;
    let a = console_addr(&b);
    let txn = prepare(&b, "Pay", "order-42").await;
    let other = prepare(&b, "Pay", "order-43").await;

    // Actions need the console's header and a resolution.
    let (status, _, _) = http(
        a,
        "POST",
        "/api/resolve",
        &[],
        Some(&json!({"resolution": "commit", "transactions": [txn]})),
    )
    .await;
    assert_eq!(status, 403);
    let (status, v) = post(
        a,
        "/api/resolve",
        json!({"resolution": "maybe", "transactions": [txn]}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    let many: Vec<String> = (0..201).map(|_| txn.clone()).collect();
    let (status, v) = post(
        a,
        "/api/resolve",
        json!({"resolution": "commit", "transactions": many}),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("1 to 200 per action"),
        "{v}"
    );

    let (status, v) = post(
        a,
        "/api/resolve",
        json!({"resolution": "commit", "transactions": [txn, "00000000ffffffff", "zz"]}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let r = v["results"].as_array().unwrap();
    assert_eq!(r[0]["ok"], true, "{v}");
    assert_eq!(r[0]["duplicate"], false);
    assert_eq!(r[1]["ok"], false);
    assert!(
        r[1]["error"]
            .as_str()
            .unwrap()
            .contains("UNKNOWN_TRANSACTION"),
        "{v}"
    );
    assert_eq!(r[2]["ok"], false);
    let (_, p) = get(a, "/api/pending").await;
    assert_eq!(p["total"], 1);
    assert_eq!(p["items"][0]["transaction_id"], other.as_str());

    // A consumer receives and acks it.
    let core = b.broker.as_ref().unwrap().core.clone();
    let got = until("the committed message", async || {
        match core
            .request(Request::Receive {
                group: "Workers".into(),
                topic: "Pay".into(),
                queue_id: None,
                max: 8,
                invisible_ms: 30_000,
                filter: TagFilter::All,
            })
            .await
            .unwrap()
        {
            Reply::Received(v) if !v.is_empty() => Some(v),
            _ => None,
        }
    })
    .await;
    assert_eq!(got.len(), 1);
    core.request(Request::Ack {
        group: "Workers".into(),
        handle: got[0].handle.clone(),
    })
    .await
    .unwrap();

    let story = until("the whole story", async || {
        let (status, v) = get(a, "/api/message?topic=Pay&key=order-42").await;
        assert_eq!(status, 200, "{v}");
        let f = v["items"].as_array()?.first()?.clone();
        let kinds: Vec<String> = f["story"]
            .as_array()?
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_string())
            .collect();
        kinds.contains(&"acked".to_string()).then_some((f, kinds))
    })
    .await;
    let (f, kinds) = story;
    for k in [
        "half_stored",
        "operator_resolved",
        "committed",
        "received",
        "acked",
    ] {
        assert!(kinds.iter().any(|x| x == k), "{k} in {kinds:?}");
    }
    assert_eq!(f["message"]["keys"][0], "order-42");
    assert_eq!(f["message"]["transactional"], true);
    assert_eq!(f["record_topic"], "RMQ_SYS_TRANS_HALF_TOPIC");
    assert_eq!(f["groups"][0]["group"], "Workers");
    // Found by message id and by queue offset too.
    let id = f["message"]["message_id"].as_str().unwrap();
    let (_, v) = get(a, &format!("/api/message?topic=Pay&id={id}")).await;
    assert_eq!(v["items"].as_array().unwrap().len(), 1);
    let (q, o) = (
        f["message"]["queue_id"].clone(),
        f["message"]["queue_offset"].clone(),
    );
    let (_, v) = get(a, &format!("/api/message?topic=Pay&queue={q}&offset={o}")).await;
    assert_eq!(v["items"][0]["message"]["message_id"], id);
    let (status, _) = get(a, "/api/message?key=order-42").await;
    assert_eq!(status, 400, "a topic is required");

    // Committing again changes nothing and says so; rolling it back now is refused.
    let (_, v) = post(
        a,
        "/api/resolve",
        json!({"resolution": "commit", "transactions": [txn]}),
    )
    .await;
    assert_eq!(v["results"][0]["ok"], true, "{v}");
    assert_eq!(v["results"][0]["duplicate"], true, "{v}");
    let (_, v) = post(
        a,
        "/api/resolve",
        json!({"resolution": "rollback", "transactions": [txn]}),
    )
    .await;
    assert_eq!(v["results"][0]["ok"], false, "{v}");
    assert!(
        v["results"][0]["error"]
            .as_str()
            .unwrap()
            .contains("TRANSACTION_ALREADY_RESOLVED"),
        "{v}"
    );
    b.stop().await;
}

#[tokio::test]
async fn dead_letters_are_listed_and_resent_to_their_original_topic() {
    let b = console().await;
    let a = console_addr(&b);
    let core = b.broker.as_ref().unwrap().core.clone();
    let mut m = NewMessage::new("Mail", "hello");
    m.keys = vec!["mail-1".into()];
    core.request(Request::Send { messages: vec![m] })
        .await
        .unwrap();
    let got = match core
        .request(Request::Receive {
            group: "Mailer".into(),
            topic: "Mail".into(),
            queue_id: None,
            max: 1,
            invisible_ms: 30_000,
            filter: TagFilter::All,
        })
        .await
        .unwrap()
    {
        Reply::Received(v) => v,
        other => panic!("{other:?}"),
    };
    core.request(Request::ForwardToDeadLetter {
        group: "Mailer".into(),
        handle: got[0].handle.clone(),
    })
    .await
    .unwrap();

    // A pull group sends a copy back for retry: the story names it too.
    let sent = match core
        .request(Request::Send {
            messages: vec![{
                let mut m = NewMessage::new("Notes", "again");
                m.keys = vec!["note-1".into()];
                m
            }],
        })
        .await
        .unwrap()
    {
        Reply::Sent(r) => r[0].clone(),
        other => panic!("{other:?}"),
    };
    let r = core
        .request(Request::SendBack {
            group: "Puller".into(),
            offset: sent.offset,
            delay_level: Some(0),
        })
        .await
        .unwrap();
    assert!(!matches!(r, Reply::Error(_)), "{r:?}");
    let r = core
        .request(Request::CommitOffset {
            group: "Puller".into(),
            topic: "Notes".into(),
            queue_id: sent.queue_id,
            offset: sent.queue_offset + 1,
        })
        .await
        .unwrap();
    assert!(!matches!(r, Reply::Error(_)), "{r:?}");
    let v = until("the retry copy", async || {
        let (_, v) = get(a, "/api/message?topic=Notes&key=note-1").await;
        (!v["items"][0]["retries"].as_array()?.is_empty()).then_some(v)
    })
    .await;
    assert_eq!(v["items"][0]["retries"][0]["topic"], "%RETRY%Puller", "{v}");

    let (_, d) = get(a, "/api/dlq").await;
    assert_eq!(d["items"][0]["topic"], "%DLQ%Mailer", "{d}");
    assert_eq!(d["items"][0]["messages"], 1);
    let (status, msgs) = get(a, "/api/dlq/messages?topic=%25DLQ%25Mailer").await;
    assert_eq!(status, 200, "{msgs}");
    assert_eq!(msgs["items"][0]["original_topic"], "Mail");
    let off = msgs["items"][0]["queue_offset"].as_u64().unwrap();

    // The original's story names the dead-letter copy.
    let (_, v) = get(a, "/api/message?topic=Mail&key=mail-1").await;
    assert_eq!(
        v["items"][0]["dead_letters"][0]["topic"], "%DLQ%Mailer",
        "{v}"
    );

    let (status, _) = post(
        a,
        "/api/dlq/resend",
        json!({"topic": "Mail", "offsets": [off]}),
    )
    .await;
    assert_eq!(status, 400, "only a dead-letter topic");
    let (status, r) = post(
        a,
        "/api/dlq/resend",
        json!({"topic": "%DLQ%Mailer", "offsets": [off, 99]}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["results"][0]["ok"], true, "{r}");
    assert_eq!(r["results"][0]["topic"], "Mail");
    assert_eq!(r["results"][1]["ok"], false);

    // Mail now holds two messages; the group that received one is behind by the resent one.
    let t = until("the resent message", async || {
        let (_, t) = get(a, "/api/topics?name=Mail").await;
        (t["items"][0]["messages"] == 2).then_some(t)
    })
    .await;
    let groups = t["items"][0]["groups"].as_array().unwrap();
    assert_eq!(groups[0]["group"], "Mailer", "{t}");
    assert_eq!(groups[0]["lag"], 1, "{t}");
    let (_, v) = get(a, "/api/message?topic=Mail&key=mail-1").await;
    assert_eq!(
        v["items"].as_array().unwrap().len(),
        2,
        "the original and the resent copy: {v}"
    );
    b.stop().await;
}

#[tokio::test]
async fn topics_and_delays_are_paged() {
    let b = console().await;
    let a = console_addr(&b);
    let core = b.broker.as_ref().unwrap().core.clone();
    for i in 0..7 {
        core.change(move |br| br.create_topic(&format!("t{i}"), 1))
            .await
            .unwrap()
            .unwrap();
    }
    let mut names = Vec::new();
    let mut after = String::new();
    loop {
        let (_, p) = get(a, &format!("/api/topics?limit=3{after}")).await;
        for t in p["items"].as_array().unwrap() {
            names.push(t["name"].as_str().unwrap().to_string());
        }
        match p["next"].as_u64() {
            Some(n) => after = format!("&after={n}"),
            None => break,
        }
    }
    assert_eq!(names, (0..7).map(|i| format!("t{i}")).collect::<Vec<_>>());

    for (i, level) in [5u32, 4].into_iter().enumerate() {
        let mut m = NewMessage::new("Later", "x");
        m.keys = vec![format!("d{i}")];
        m.delay = Some(Delay::Level(level));
        core.request(Request::Send { messages: vec![m] })
            .await
            .unwrap();
    }
    let (_, d) = get(a, "/api/delays").await;
    assert_eq!(d["total"], 2, "{d}");
    let items = d["items"].as_array().unwrap();
    // The page is shown by due time: level 4 (30 s) before level 5 (1 min).
    assert_eq!(items[0]["keys"][0], "d1", "{d}");
    assert!(items[0]["due"].as_u64() <= items[1]["due"].as_u64());
    b.stop().await;
}

#[tokio::test]
async fn with_authentication_on_the_console_needs_a_super_user() {
    let b = console_with(|c| {
        c.auth.users = vec![
            UserSpec {
                access_key: "root".into(),
                secret_key: "s3cret".into(),
                super_user: true,
                session_token: None,
            },
            UserSpec {
                access_key: "app".into(),
                secret_key: "app-secret".into(),
                super_user: false,
                session_token: None,
            },
        ];
    })
    .await;
    let a = console_addr(&b);
    use base64::Engine as _;
    let basic = |ak: &str, sk: &str| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{ak}:{sk}"))
        )
    };
    let (status, head, _) = http(a, "GET", "/", &[], None).await;
    assert_eq!(status, 401);
    assert!(head.contains("WWW-Authenticate: Basic"), "{head}");
    let (status, _, _) = http(
        a,
        "GET",
        "/api/overview",
        &[("Authorization", &basic("root", "nope"))],
        None,
    )
    .await;
    assert_eq!(status, 401);
    let (status, _, body) = http(
        a,
        "GET",
        "/api/overview",
        &[("Authorization", &basic("app", "app-secret"))],
        None,
    )
    .await;
    assert_eq!(status, 403);
    assert!(String::from_utf8_lossy(&body).contains("not a super user"));
    let (status, _, _) = http(
        a,
        "GET",
        "/api/overview",
        &[("Authorization", &basic("root", "s3cret"))],
        None,
    )
    .await;
    assert_eq!(status, 200);
    b.stop().await;
}

/// The first paint's calls on a big broker (docs/benchmarks.md): 10,000 topics and 1,000,000
/// pending transactions, each call timed over fresh connections as the page makes them.
///   cargo test --release -p rocklet-broker --test console -- --ignored --nocapture first_paint
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: builds a broker with 1M pending transactions (about 1 GB of log)"]
async fn first_paint_on_10k_topics_and_1m_pending_transactions() {
    // Smaller with CONSOLE_BENCH_PENDING (tests/bench/run.sh's QUICK mode), in steps of 10k.
    const TOPICS: usize = 10_000;
    let pending: usize = std::env::var("CONSOLE_BENCH_PENDING")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
        .max(20_000)
        / 10_000
        * 10_000;
    let b = console_with(|c| {
        c.core.segment_size = 1 << 30;
        // Checks stay in the future: the core thread only serves the console meanwhile.
        c.core.transaction_timeout_ms = 3_600_000;
        c.core.max_topics = 20_000;
    })
    .await;
    let a = console_addr(&b);
    let core = b.broker.as_ref().unwrap().core.clone();
    let t0 = std::time::Instant::now();
    for chunk in 0..(pending / 10_000) {
        core.with_mut(move |br| {
            let now = br.now();
            for i in 0..10_000 {
                let n = chunk * 10_000 + i;
                let mut m = NewMessage::new(format!("t{}", n % TOPICS), "x".repeat(64));
                m.keys = vec![format!("k{n}")];
                let r = br
                    .execute(
                        now,
                        Request::Prepare {
                            group: "G".into(),
                            message: m,
                            check_immunity_ms: None,
                        },
                    )
                    .unwrap();
                assert!(matches!(r, Reply::Sent(_)), "{r:?}");
            }
        })
        .await
        .unwrap();
    }
    // One committed, so the search finds a message among them.
    let committed = core
        .inspect(|br| {
            br.pending_transactions_after(Some(rocklet_core::TxnId(0)), 1)
                .items[0]
                .txn
        })
        .await
        .unwrap();
    let r = core
        .request(Request::EndTransaction {
            txn: committed,
            resolution: rocklet_core::Resolution::Commit,
            group: Some("G".into()),
            from_check: false,
        })
        .await
        .unwrap();
    assert!(matches!(r, Reply::Ended { .. }), "{r:?}");
    let (halves, topics, deep) = core
        .inspect(move |br| {
            (
                br.pending_transaction_count(),
                br.topics().len(),
                br.pending_transactions(pending * 9 / 10)
                    .last()
                    .map(|p| p.txn.0),
            )
        })
        .await
        .unwrap();
    assert_eq!((halves, topics), (pending - 1, TOPICS));
    println!(
        "built {TOPICS} topics and {} pending transactions in {:.1} s",
        pending - 1,
        t0.elapsed().as_secs_f64()
    );
    let deep = deep.unwrap();
    let calls: Vec<(&str, String)> = vec![
        ("page /", "/".into()),
        ("/console.css", "/console.css".into()),
        ("/console.js", "/console.js".into()),
        ("/api/overview (first paint)", "/api/overview".into()),
        ("/api/topics?limit=50", "/api/topics?limit=50".into()),
        ("/api/topics?limit=200", "/api/topics?limit=200".into()),
        ("/api/pending?limit=50", "/api/pending?limit=50".into()),
        ("/api/pending?limit=200", "/api/pending?limit=200".into()),
        (
            "/api/pending?after=<the 90th percentile>&limit=50",
            format!("/api/pending?after={deep}&limit=50"),
        ),
        ("/api/delays?limit=50", "/api/delays?limit=50".into()),
        ("/api/dlq?limit=50", "/api/dlq?limit=50".into()),
        (
            "/api/message?topic=t1&key=k1 (found)",
            "/api/message?topic=t1&key=k1".into(),
        ),
    ];
    println!("| call | bytes | median ms | max ms |\n|---|---:|---:|---:|");
    let mut paint = Vec::new();
    for (name, path) in &calls {
        let mut ms = Vec::new();
        let mut bytes = 0;
        for _ in 0..21 {
            let t = std::time::Instant::now();
            let (status, _, body) = http(a, "GET", path, &[], None).await;
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
            bytes = body.len();
        }
        ms.sort_by(f64::total_cmp);
        if name.starts_with("page") || name.starts_with("/console") || name.contains("first paint")
        {
            paint.push(ms[10]);
        }
        println!("| `{name}` | {bytes} | {:.2} | {:.2} |", ms[10], ms[20]);
    }
    // The overview's first paint: the page, its two assets, then /api/overview (the browser
    // fetches the assets in parallel; summed here, as if one after another).
    let total: f64 = paint.iter().sum();
    println!("first paint, its 4 calls one after another (medians): {total:.2} ms");
    b.stop().await;
}
