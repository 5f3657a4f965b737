//! The one set of HTTP/1.1 limits (`rocklet_broker::http`) on each of the three web
//! listeners: the metrics, the console and the playground. Each test runs against all three
//! at once: an oversize head, too many headers, an oversize body, a head that trickles in or
//! never comes, and more connections than the listener serves at once.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::TestBroker;
use rocklet_broker::http::{
    IDLE_TIMEOUT, MAX_BODY, MAX_CONNECTIONS, MAX_HEAD, MAX_HEADERS, READ_TIMEOUT,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A broker with the metrics and the console on, and a playground server beside it:
/// (broker, [(name, address)]).
async fn servers() -> (TestBroker, Vec<(&'static str, SocketAddr)>) {
    let b = TestBroker::start_with(|c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
        c.console_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let running = b.broker.as_ref().unwrap();
    let (metrics, console) = (running.metrics_addr.unwrap(), running.console_addr.unwrap());
    // `playground::bind` refuses when the files were not built in; the server itself
    // serves what there is (nothing: 404), under the same limits.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let playground = l.local_addr().unwrap();
    tokio::spawn(rocklet_broker::playground::serve(l));
    (
        b,
        vec![
            ("metrics", metrics),
            ("console", console),
            ("playground", playground),
        ],
    )
}

/// Reads a response to its end: its status.
async fn status_of(s: &mut TcpStream) -> u16 {
    let mut out = Vec::new();
    tokio::time::timeout(READ_TIMEOUT * 2, s.read_to_end(&mut out))
        .await
        .expect("the listener answers and closes")
        .unwrap();
    let head = String::from_utf8_lossy(&out);
    assert!(head.starts_with("HTTP/1.1 "), "{head}");
    head[9..12].parse().unwrap()
}

/// Sends `req` at once and answers the status.
async fn send(addr: SocketAddr, req: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // The server may answer (and close) before it has read everything.
    let _ = s.write_all(req).await;
    status_of(&mut s).await
}

fn get(addr: SocketAddr, extra: &str) -> String {
    format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{extra}\r\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversize_heads_and_bodies_are_refused_by_every_listener() {
    let (_b, servers) = servers().await;
    for (name, addr) in servers {
        // A head within the limit is served (200 metrics, 200 console page, 404 playground:
        // no files built into a test binary, or 200 when they are).
        let ok = send(addr, get(addr, "").as_bytes()).await;
        assert!(matches!(ok, 200 | 404), "{name}: {ok}");
        // One byte over, the Host first (the metrics used to read 4 KiB of it and answer).
        let pad = "a".repeat(MAX_HEAD);
        let big = get(addr, &format!("X-Pad: {pad}\r\n"));
        assert_eq!(
            send(addr, big.as_bytes()).await,
            431,
            "{name}: oversize head"
        );
        // A head (up to its blank line) of exactly the limit is served; one byte more is
        // refused (the console used to take 16 KiB).
        let padded = |head_len: usize| {
            let pad = "a".repeat(head_len + 4 - get(addr, "X-Pad: \r\n").len());
            let req = get(addr, &format!("X-Pad: {pad}\r\n"));
            assert_eq!(req.len() - 4, head_len);
            req
        };
        let at = send(addr, padded(MAX_HEAD).as_bytes()).await;
        assert!(matches!(at, 200 | 404), "{name}: head of MAX_HEAD: {at}");
        let over = send(addr, padded(MAX_HEAD + 1).as_bytes()).await;
        assert_eq!(over, 431, "{name}: head of MAX_HEAD + 1");
        // Too many headers in a short head.
        let many: String = (0..MAX_HEADERS).map(|i| format!("X-{i}: y\r\n")).collect();
        let many = get(addr, &many);
        assert!(many.len() < MAX_HEAD);
        assert_eq!(send(addr, many.as_bytes()).await, 431, "{name}: headers");
        // A body over the limit is refused by its Content-Length, before it is read.
        let post = format!(
            "POST /api/resolve HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert_eq!(send(addr, post.as_bytes()).await, 413, "{name}: body");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_or_silent_requests_are_cut_by_every_listener() {
    let (_b, servers) = servers().await;
    let mut tasks = Vec::new();
    for (name, addr) in servers {
        // A head that trickles in, a byte each second (each read well within the idle
        // timeout), is cut when the whole request's time is up.
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let start = Instant::now();
            let req = get(addr, "");
            let (mut rd, mut wr) = s.split();
            let trickle = async {
                for b in req.as_bytes()[..req.len() - 2].iter() {
                    if wr.write_all(&[*b]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                // Never finished: the response must have come first.
                std::future::pending::<()>().await;
            };
            let mut out = Vec::new();
            tokio::select! {
                () = trickle => unreachable!(),
                r = tokio::time::timeout(READ_TIMEOUT * 2, rd.read_to_end(&mut out)) => {
                    r.expect("cut within twice the read timeout").unwrap();
                }
            }
            let took = start.elapsed();
            let head = String::from_utf8_lossy(&out);
            assert!(head.starts_with("HTTP/1.1 408"), "{name}: {head}");
            assert!(
                took >= READ_TIMEOUT - Duration::from_millis(500),
                "{name}: {took:?}"
            );
        }));
        // A connection that sends nothing is cut after the idle timeout.
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            let start = Instant::now();
            assert_eq!(status_of(&mut s).await, 408, "{name}: silent");
            let took = start.elapsed();
            assert!(
                took >= IDLE_TIMEOUT - Duration::from_millis(500) && took < READ_TIMEOUT,
                "{name}: {took:?}"
            );
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn more_connections_than_a_listener_serves_are_refused() {
    let (_b, servers) = servers().await;
    for (name, addr) in servers {
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(TcpStream::connect(addr).await.unwrap());
        }
        // Accepted in order: every slot is taken before the next connection is accepted.
        let mut extra = TcpStream::connect(addr).await.unwrap();
        let _ = extra.write_all(get(addr, "").as_bytes()).await;
        assert_eq!(status_of(&mut extra).await, 503, "{name}: one too many");
        drop(held);
        // The slots come back as the connections close.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let st = send(addr, get(addr, "").as_bytes()).await;
            if st != 503 {
                assert!(matches!(st, 200 | 404), "{name}: {st}");
                break;
            }
            assert!(Instant::now() < deadline, "{name}: slots not given back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn the_metrics_refuse_a_foreign_origin_as_the_console_does() {
    let (_b, servers) = servers().await;
    let (_, metrics) = servers[0];
    let own = format!("http://{metrics}");
    let ok = send(
        metrics,
        get(metrics, &format!("Origin: {own}\r\n")).as_bytes(),
    )
    .await;
    assert_eq!(ok, 200);
    let foreign = get(
        metrics,
        &format!("Origin: http://evil.example:{}\r\n", metrics.port()),
    );
    assert_eq!(send(metrics, foreign.as_bytes()).await, 403);
    let null = get(metrics, "Origin: null\r\n");
    assert_eq!(send(metrics, null.as_bytes()).await, 403);
}
