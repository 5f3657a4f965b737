//! Helpers for the broker's integration tests: an in-process broker on an ephemeral port
//! with a temporary data directory, and a gRPC client.
#![allow(dead_code)]

pub mod limited;
pub mod v4;
pub mod web;

use std::sync::Arc;
use std::time::Duration;

use rocklet_broker::clock::{Clock, SystemClock};
use rocklet_broker::config::BrokerConfig;
use rocklet_broker::pb::v2 as pb;
use rocklet_broker::pb::v2::messaging_service_client::MessagingServiceClient;
use rocklet_broker::server::{self, RunningBroker};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::Channel;

pub type Client = MessagingServiceClient<Channel>;

/// A broker with a fast transaction timeout and check interval.
pub fn test_config(dir: &std::path::Path) -> BrokerConfig {
    let mut cfg = BrokerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        ..BrokerConfig::default()
    };
    cfg.core.segment_size = 1 << 24;
    cfg.core.flush_interval_ms = 50;
    cfg.core.transaction_timeout_ms = 300;
    cfg.core.transaction_check_interval_ms = 500;
    // Tests run on machines whose disks may be fuller than the default 90 %: refuse new
    // messages only on a full disk (tests/disk_full.rs sets its own level).
    cfg.disk_space_warning_level_ratio = 1.0;
    // Nor does retention delete by disk usage (tests/retention.rs sets its own).
    cfg.retention.disk_max_used_space_ratio = 1.0;
    cfg.retention.disk_space_clean_forcibly_ratio = 1.0;
    cfg
}

pub struct TestBroker {
    pub broker: Option<RunningBroker>,
    pub dir: tempfile::TempDir,
    pub client: Client,
}

impl TestBroker {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(f: impl FnOnce(&mut BrokerConfig)) -> Self {
        Self::start_clock(f, Arc::new(SystemClock)).await
    }

    pub async fn start_clock(f: impl FnOnce(&mut BrokerConfig), clock: Arc<dyn Clock>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = test_config(dir.path());
        f(&mut cfg);
        let broker = server::start(cfg, clock).await.unwrap();
        let client = connect(broker.addr).await;
        TestBroker {
            broker: Some(broker),
            dir,
            client,
        }
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.broker.as_ref().unwrap().addr
    }

    pub async fn stop(mut self) -> tempfile::TempDir {
        if let Some(b) = self.broker.take() {
            b.stop().await;
        }
        self.dir
    }
}

pub async fn connect(addr: std::net::SocketAddr) -> Client {
    MessagingServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

pub fn res(name: &str) -> Option<pb::Resource> {
    Some(pb::Resource {
        resource_namespace: String::new(),
        name: name.into(),
    })
}

pub fn dur(ms: u64) -> prost_types::Duration {
    prost_types::Duration {
        seconds: (ms / 1000) as i64,
        nanos: ((ms % 1000) * 1_000_000) as i32,
    }
}

pub fn msg(topic: &str, body: &[u8], ty: pb::MessageType, id: &str) -> pb::Message {
    pb::Message {
        topic: res(topic),
        user_properties: Default::default(),
        system_properties: Some(pb::SystemProperties {
            message_id: id.into(),
            message_type: ty as i32,
            body_encoding: pb::Encoding::Identity as i32,
            born_host: "127.0.0.1".into(),
            ..Default::default()
        }),
        body: body.to_vec(),
    }
}

pub const OK: i32 = pb::Code::Ok as i32;

pub async fn send(c: &mut Client, messages: Vec<pb::Message>) -> pb::SendMessageResponse {
    c.send_message(pb::SendMessageRequest { messages })
        .await
        .unwrap()
        .into_inner()
}

/// Sends one message and asserts it was stored; returns its entry.
pub async fn send_ok(c: &mut Client, m: pb::Message) -> pb::SendResultEntry {
    let r = send(c, vec![m]).await;
    let s = r.status.unwrap();
    assert_eq!(s.code, OK, "send failed: {}", s.message);
    r.entries.into_iter().next().unwrap()
}

pub struct Received {
    pub status: pb::Status,
    pub messages: Vec<pb::Message>,
}

/// A ReceiveMessage request for every tag of `topic`, up to `max` messages.
pub fn receive_request(
    topic: &str,
    group: &str,
    max: i32,
    invisible_ms: u64,
    poll_ms: u64,
) -> pb::ReceiveMessageRequest {
    pb::ReceiveMessageRequest {
        group: res(group),
        message_queue: Some(pb::MessageQueue {
            topic: res(topic),
            ..Default::default()
        }),
        filter_expression: Some(pb::FilterExpression {
            r#type: pb::FilterType::Tag as i32,
            expression: "*".into(),
        }),
        batch_size: max,
        invisible_duration: Some(dur(invisible_ms)),
        auto_renew: false,
        long_polling_timeout: Some(dur(poll_ms)),
        attempt_id: None,
    }
}

pub async fn receive(
    c: &mut Client,
    topic: &str,
    group: &str,
    max: i32,
    invisible_ms: u64,
    poll_ms: u64,
) -> Received {
    let req = receive_request(topic, group, max, invisible_ms, poll_ms);
    let mut stream = c.receive_message(req).await.unwrap().into_inner();
    let mut out = Received {
        status: pb::Status::default(),
        messages: Vec::new(),
    };
    while let Some(r) = stream.next().await {
        match r.unwrap().content.unwrap() {
            pb::receive_message_response::Content::Status(s) => out.status = s,
            pb::receive_message_response::Content::Message(m) => out.messages.push(m),
            pb::receive_message_response::Content::DeliveryTimestamp(_) => {}
        }
    }
    out
}

/// Everything `group` can receive of `topic`, each message acked as it comes; done after
/// three empty long polls of 500 ms in a row.
pub async fn receive_all(c: &mut Client, topic: &str, group: &str) -> Vec<pb::Message> {
    let mut all = Vec::new();
    let mut empty = 0;
    while empty < 3 {
        let got = receive(c, topic, group, 32, 60_000, 500).await.messages;
        if got.is_empty() {
            empty += 1;
            continue;
        }
        empty = 0;
        for m in &got {
            assert_eq!(ack(c, topic, group, m).await.code, OK);
        }
        all.extend(got);
    }
    all
}

pub fn handle(m: &pb::Message) -> String {
    m.system_properties
        .as_ref()
        .unwrap()
        .receipt_handle
        .clone()
        .unwrap()
}

pub fn attempt(m: &pb::Message) -> i32 {
    m.system_properties
        .as_ref()
        .unwrap()
        .delivery_attempt
        .unwrap()
}

pub async fn ack(c: &mut Client, topic: &str, group: &str, m: &pb::Message) -> pb::Status {
    ack_handle(c, topic, group, &handle(m)).await
}

pub async fn ack_handle(c: &mut Client, topic: &str, group: &str, h: &str) -> pb::Status {
    let r = c
        .ack_message(pb::AckMessageRequest {
            group: res(group),
            topic: res(topic),
            entries: vec![pb::AckMessageEntry {
                message_id: String::new(),
                receipt_handle: h.into(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    r.status.unwrap()
}

pub async fn end_txn(
    c: &mut Client,
    topic: &str,
    txn: &str,
    resolution: pb::TransactionResolution,
    source: pb::TransactionSource,
) -> pb::Status {
    c.end_transaction(pb::EndTransactionRequest {
        topic: res(topic),
        message_id: String::new(),
        transaction_id: txn.into(),
        resolution: resolution as i32,
        source: source as i32,
        trace_context: String::new(),
    })
    .await
    .unwrap()
    .into_inner()
    .status
    .unwrap()
}

/// A producer's telemetry stream: sends settings declaring `topics`, then yields what the
/// broker pushes.
pub struct Telemetry {
    pub tx: mpsc::Sender<pb::TelemetryCommand>,
    pub inbound: tonic::Streaming<pb::TelemetryCommand>,
}

impl Telemetry {
    pub async fn producer(c: &mut Client, topics: &[&str]) -> Telemetry {
        Self::producer_as(c, "test-producer", topics).await
    }

    pub async fn producer_as(c: &mut Client, client: &str, topics: &[&str]) -> Telemetry {
        let (tx, rx) = mpsc::channel(16);
        let settings = pb::Settings {
            client_type: Some(pb::ClientType::Producer as i32),
            pub_sub: Some(pb::settings::PubSub::Publishing(pb::Publishing {
                topics: topics.iter().map(|t| res(t).unwrap()).collect(),
                ..Default::default()
            })),
            ..Default::default()
        };
        tx.send(pb::TelemetryCommand {
            status: None,
            command: Some(pb::telemetry_command::Command::Settings(settings)),
        })
        .await
        .unwrap();
        let mut req = tonic::Request::new(ReceiverStream::new(rx));
        req.metadata_mut()
            .insert("x-mq-client-id", client.parse().unwrap());
        let mut inbound = c.telemetry(req).await.unwrap().into_inner();
        // The settings reply.
        let first = tokio::time::timeout(Duration::from_secs(5), inbound.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(matches!(
            first.command,
            Some(pb::telemetry_command::Command::Settings(_))
        ));
        Telemetry { tx, inbound }
    }

    /// The next transaction check within `within`.
    pub async fn next_check(
        &mut self,
        within: Duration,
    ) -> Option<pb::RecoverOrphanedTransactionCommand> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let next = tokio::time::timeout_at(deadline, self.inbound.next())
                .await
                .ok()??
                .ok()?;
            if let Some(pb::telemetry_command::Command::RecoverOrphanedTransactionCommand(c)) =
                next.command
            {
                return Some(c);
            }
        }
    }
}

/// The `rocklet` binary as a child process on an ephemeral port, its log captured (the first
/// MiB). Killed when dropped, so no broker outlives a failed test.
pub struct BrokerProc {
    child: std::process::Child,
    log: Arc<std::sync::Mutex<String>>,
    pub addr: std::net::SocketAddr,
}

impl BrokerProc {
    /// Starts `rocklet broker --data-dir <dir> <extra>` and waits until it serves.
    pub fn start(dir: &std::path::Path, extra: &[&str]) -> Self {
        match Self::try_start(dir, extra) {
            Ok(p) => p,
            Err(log) => panic!("broker did not start:\n{log}"),
        }
    }

    /// As [`BrokerProc::start`]; `Err` holds the log of a broker that did not serve.
    pub fn try_start(dir: &std::path::Path, extra: &[&str]) -> Result<Self, String> {
        Self::try_start_env(dir, extra, &[])
    }

    /// As [`BrokerProc::start`], with environment variables set for the broker.
    pub fn start_env(dir: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        match Self::try_start_env(dir, extra, env) {
            Ok(p) => p,
            Err(log) => panic!("broker did not start:\n{log}"),
        }
    }

    /// As [`BrokerProc::try_start`], with environment variables set for the broker.
    pub fn try_start_env(
        dir: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Self, String> {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        // An ephemeral port unless the caller names one (a node restarted on its address).
        let listen: &[&str] = if extra.contains(&"--listen") {
            &[]
        } else {
            &["--listen", "127.0.0.1:0"]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_rocklet"))
            .arg("broker")
            .args(listen)
            .arg("--data-dir")
            .arg(dir)
            .args(extra)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("addr=") {
                    let a: String = line[i + 5..]
                        .chars()
                        .take_while(|c| !c.is_whitespace())
                        .collect();
                    let _ = tx.send(a);
                }
                let mut g = l.lock().unwrap();
                if g.len() < 1 << 20 {
                    g.push_str(&line);
                    g.push('\n');
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => Ok(BrokerProc {
                child,
                log,
                addr: a.parse().unwrap(),
            }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                std::thread::sleep(Duration::from_millis(100));
                Err(log.lock().unwrap().clone())
            }
        }
    }

    /// What the broker logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// SIGSTOP: the broker stops where it is, as at a power cut (nothing more leaves it).
    pub fn freeze(&self) {
        let _ = std::process::Command::new("kill")
            .args(["-STOP", &self.child.id().to_string()])
            .status();
    }

    /// SIGCONT: a frozen broker goes on.
    pub fn thaw(&self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
    }

    /// SIGKILL, and wait for it (a broker that has exited already is fine).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        self.child.wait().unwrap();
    }

    /// The exit status once the broker exits by itself within `within`, polled every 20 ms;
    /// `None` while it still runs.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                // Let the log reader take the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return Some(s);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM; the exit status and the log.
    pub fn term(mut self) -> (std::process::ExitStatus, String) {
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
        let status = self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        (status, self.log())
    }
}

impl Drop for BrokerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Receives from `topic` as `group` until nothing is left, acking everything; the message
/// ids in the order received.
pub async fn drain_ids(c: &mut Client, topic: &str, group: &str) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let r = receive(c, topic, group, 32, 60_000, 300).await;
        if r.messages.is_empty() {
            return ids;
        }
        for m in &r.messages {
            ids.push(m.system_properties.as_ref().unwrap().message_id.clone());
            assert_eq!(ack(c, topic, group, m).await.code, OK);
        }
    }
}

/// Whether the broker closes `s` within `within` (reads end, or the connection is reset).
pub async fn closed_within(s: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 256];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {} // the server's HTTP/2 settings, then nothing
        }
    }
}

/// A tag expression of `n` bytes made of many short tags (what the parsed filter costs most).
pub fn long_tag_expression(n: usize) -> String {
    let mut e = String::with_capacity(n + 16);
    let mut i = 0u64;
    while e.len() < n {
        if i > 0 {
            e.push_str("||");
        }
        e.push_str(&format!("t{i}"));
        i += 1;
    }
    e
}

/// Every file under `dir` with its bytes, by path (to check a run left a directory unchanged).
pub fn files_under(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}
