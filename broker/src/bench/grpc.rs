//! `rocklet bench` over RocketMQ 5 gRPC: a plain client (route-free sends, telemetry settings,
//! transaction checks answered on the telemetry stream, simple-consumer receive + ack), so it
//! runs against any RocketMQ 5 endpoint.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint};

use super::ledger::{Fate, Ledger};
use super::{
    body, checked_commit, epoch_ms, parse_body, spread, us, BenchArgs, CpuMark, Live, Mode,
    Outcome, Outcomes, Recorder, RunCpu, Target,
};
use crate::client;
use crate::clock::SystemClock;
use crate::config::{BrokerConfig, GroupDecl};
use crate::pb::v2 as pb;
use crate::pb::v2::messaging_service_client::MessagingServiceClient;
use crate::server;

type Client = MessagingServiceClient<
    tonic::service::interceptor::InterceptedService<Channel, crate::auth::admin::Signer>,
>;

const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const LONG_POLL: Duration = Duration::from_millis(1000);
const RECV_BATCH: i32 = 32;
/// Invisible time of received messages: longer than any run, so no redelivery.
const INVISIBLE: Duration = Duration::from_secs(600);
/// Slack for clock granularity when judging "delivered early" (ms).
const EARLY_TOLERANCE_MS: u64 = 2;

/// A request with the headers RocketMQ 5 proxies expect ([`client::req`]), and a request id.
fn req<T>(msg: T, client_id: &str, timeout: Duration) -> tonic::Request<T> {
    let mut r = client::req(msg, client_id, timeout);
    if let Ok(v) = format!("{:016x}", spread(epoch_ms())).parse() {
        r.metadata_mut().insert("x-mq-request-id", v);
    }
    r
}

fn ok(s: Option<&pb::Status>) -> Result<(), String> {
    match s {
        Some(s) if s.code == pb::Code::Ok as i32 => Ok(()),
        Some(s) => Err(format!("status {}: {}", s.code, s.message)),
        None => Err("reply without a status".into()),
    }
}

struct Shared {
    args: BenchArgs,
    topic: String,
    run_id: u32,
    client_id: String,
    consumer_id: String,
    access: pb::Endpoints,
    ledger: Mutex<Ledger>,
    rec: Mutex<Recorder>,
    /// Check deadlines (epoch ms) by sequence number.
    deadline: Mutex<Vec<u64>>,
    backlog: u64,
    next: AtomicU64,
    /// When the first paced operation started (`--rate`).
    pace_start: std::sync::OnceLock<Instant>,
    stop_consumers: AtomicBool,
    checks_answered: AtomicU64,
}

impl Shared {
    fn error(&self, e: impl Into<String>) {
        self.rec.lock().expect("recorder").error(e);
    }
}

/// A connection of its own, signing every call when the bench has credentials and over TLS
/// when it has a CA (as an official client configured with both would).
async fn connect(sh: &Shared, url: &str) -> Result<Client, String> {
    let mut ep = Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("bad endpoint {url}: {e}"))?
        .tcp_nodelay(true);
    if let Some(tls) = &sh.args.tls {
        let pem =
            std::fs::read(&tls.ca).map_err(|e| format!("cannot read {}: {e}", tls.ca.display()))?;
        let cfg = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(pem))
            .domain_name(tls.domain.clone());
        ep = ep.tls_config(cfg).map_err(|e| format!("TLS: {e}"))?;
    }
    let ch = ep
        .connect()
        .await
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
    let signer = match &sh.args.credentials {
        Some((ak, sk)) => crate::auth::admin::Signer::new(ak, sk),
        None => crate::auth::admin::Signer::default(),
    };
    Ok(MessagingServiceClient::with_interceptor(ch, signer).max_decoding_message_size(64 << 20))
}

fn endpoints(hostport: &str) -> pb::Endpoints {
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "8081"));
    pb::Endpoints {
        scheme: if host.parse::<std::net::Ipv4Addr>().is_ok() {
            pb::AddressScheme::IPv4 as i32
        } else {
            pb::AddressScheme::DomainName as i32
        },
        addresses: vec![pb::Address {
            host: host.into(),
            port: port.parse().unwrap_or(8081),
        }],
    }
}

/// Runs the gRPC bench (in-process broker or `--endpoint`).
pub async fn run(args: &BenchArgs) -> Result<Outcomes, String> {
    let mut scratch = None;
    let (hostport, broker) = match &args.target {
        Target::Endpoint(e) => (e.clone(), None),
        Target::InProcess => {
            let dir = std::env::temp_dir().join(format!("rocklet-bench-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let mut cfg = BrokerConfig {
                listen: "127.0.0.1:0".parse().expect("valid address"),
                data_dir: dir.clone(),
                ..BrokerConfig::default()
            };
            cfg.core.flush = args.flush;
            cfg.core.segment_size = 1 << 28;
            cfg.core.transaction_timeout_ms = args.check_after_ms;
            if args.fifo {
                cfg.groups.push(GroupDecl {
                    name: args.group.clone(),
                    fifo: true,
                });
            }
            if let Some((ak, sk)) = &args.credentials {
                cfg.auth.users.push(crate::auth::UserSpec {
                    access_key: ak.clone(),
                    secret_key: sk.clone(),
                    super_user: true,
                    session_token: None,
                });
            }
            if let Some(t) = &args.tls {
                cfg.tls = crate::auth::tls::TlsFileConfig {
                    mode: Some(crate::auth::tls::Mode::Enforcing),
                    cert: t.cert.clone(),
                    key: t.key.clone(),
                    ..Default::default()
                };
            }
            scratch = Some(dir);
            let b = server::start(cfg, Arc::new(SystemClock)).await?;
            (b.addr.to_string(), Some(b))
        }
        Target::Embedded(_) | Target::Remoting(_) => return Err("not a gRPC target".into()),
    };
    if args.fifo && matches!(args.target, Target::Endpoint(_)) {
        crate::admin::client::group(&hostport, &args.group, Some(true))
            .await
            .map_err(|e| {
                format!("--fifo declares the group FIFO with rocklet's admin service: {e}")
            })?;
    }
    let url = format!(
        "{}://{hostport}",
        if args.tls.is_some() { "https" } else { "http" }
    );
    let pid = std::process::id();
    let run_id = (epoch_ms() as u32) ^ pid.rotate_left(16);
    let sh = Arc::new(Shared {
        args: args.clone(),
        topic: args.topic(),
        run_id,
        client_id: format!("rocklet-bench-producer-{pid}-{run_id:08x}"),
        consumer_id: format!("rocklet-bench-consumer-{pid}-{run_id:08x}"),
        access: endpoints(&hostport),
        ledger: Mutex::new(ledger(args)),
        rec: Mutex::new(Recorder::default()),
        deadline: Mutex::new(Vec::new()),
        backlog: if args.mode == Mode::Txn {
            args.backlog
        } else {
            0
        },
        next: AtomicU64::new(0),
        pace_start: std::sync::OnceLock::new(),
        stop_consumers: AtomicBool::new(false),
        checks_answered: AtomicU64::new(0),
    });
    let result = drive(&sh, &url).await;
    let (fsyncs, log_bytes) = match broker {
        Some(b) => {
            let x = b
                .core
                .inspect(|c| (c.stats().syncs, c.log_end()))
                .await
                .ok();
            b.stop().await;
            x.map_or((None, None), |(s, e)| (Some(s), Some(e)))
        }
        None => (None, None),
    };
    if let Some(d) = scratch {
        let _ = std::fs::remove_dir_all(d);
    }
    let (elapsed, notes, cpu) = result?;
    let ledger = std::mem::take(&mut *sh.ledger.lock().expect("ledger"));
    let rec = std::mem::take(&mut *sh.rec.lock().expect("recorder"));
    Ok(Outcomes {
        consumed: ledger.consumed_total(),
        verdict: ledger.verdict(),
        rec,
        elapsed,
        fsyncs,
        log_bytes,
        notes,
        fields: Vec::new(),
        cpu,
    })
}

async fn drive(
    sh: &Arc<Shared>,
    url: &str,
) -> Result<(Duration, Vec<String>, Option<RunCpu>), String> {
    let args = &sh.args;
    let mut notes = Vec::new();
    if let Some(r) = args.rate {
        notes.push(format!(
            "paced: at most {r} operations started per second (--rate)"
        ));
    }
    // The producer's telemetry stream: settings first (a proxy wants them before sends), then
    // transaction checks.
    let (tele_tx, tele_task) = telemetry_producer(sh, url).await?;
    let consumer_tele = telemetry_consumer(sh, url).await?;
    if args.mode == Mode::Consume {
        load(sh, url).await?;
    }
    let mut consumers = Vec::new();
    let start_consumers = |consumers: &mut Vec<_>| {
        for _ in 0..args.consumers {
            let sh = sh.clone();
            let url = url.to_string();
            consumers.push(tokio::spawn(async move { consume(sh, url).await }));
        }
    };
    if args.mode != Mode::Consume {
        start_consumers(&mut consumers);
    }
    if sh.backlog > 0 {
        let t = Instant::now();
        produce_all(sh, url, sh.backlog, None, true).await?;
        notes.push(format!(
            "backlog: {} pending transactions prepared in {:.2} s",
            sh.backlog,
            t.elapsed().as_secs_f64()
        ));
        *sh.rec.lock().expect("recorder") = Recorder::default();
    }
    let live_stop = Arc::new(AtomicBool::new(false));
    let live = {
        let sh = sh.clone();
        let stop = live_stop.clone();
        tokio::spawn(async move {
            let mut l = Live::new(sh.args.live);
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                if l.due() {
                    let (consumed, waiting) = {
                        let g = sh.ledger.lock().expect("ledger");
                        (g.consumed_total(), g.awaiting_checks())
                    };
                    let r = sh.rec.lock().expect("recorder");
                    l.print(sh.args.mode.noun(), &r, consumed, waiting);
                }
            }
            l.finish();
        })
    };
    let cpu0 = CpuMark::now(args.broker_pid)?;
    let t0 = Instant::now();
    let elapsed;
    if args.mode == Mode::Consume {
        start_consumers(&mut consumers);
        let until = Instant::now() + args.drain_timeout;
        loop {
            let (left, _) = sh.ledger.lock().expect("ledger").outstanding();
            if left == 0 || Instant::now() >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        elapsed = t0.elapsed();
    } else {
        let end = sh.backlog + args.count;
        produce_all(sh, url, end, args.duration, false).await?;
        elapsed = t0.elapsed();
    }
    // Drain: everything consumed, every unknown checked (and the backlog, if its checks are
    // due during the run).
    let until = Instant::now() + args.drain_timeout;
    loop {
        let (left, checks, backlog) = {
            let g = sh.ledger.lock().expect("ledger");
            let (l, c) = g.outstanding();
            let b = if args.backlog_check_after_ms.is_none() && sh.backlog > 0 {
                g.count(Fate::Backlog)
            } else {
                0
            };
            (l, c, b)
        };
        if left == 0 && checks == 0 && backlog == 0 {
            break;
        }
        if Instant::now() >= until {
            sh.error(format!(
                "drain timed out after {:?}: {left} messages not consumed, {checks} checks not answered, {backlog} backlog halves not checked",
                args.drain_timeout
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Up to here every operation was served and consumed: the CPU it cost is used.
    let cpu = RunCpu::between(cpu0, CpuMark::now(args.broker_pid)?);
    // A little longer, so a duplicate or a rolled-back delivery would show.
    tokio::time::sleep(Duration::from_millis(600)).await;
    sh.stop_consumers.store(true, Ordering::Relaxed);
    for c in consumers {
        let _ = c.await;
    }
    live_stop.store(true, Ordering::Relaxed);
    let _ = live.await;
    drop(tele_tx);
    drop(consumer_tele);
    tele_task.abort();
    Ok((elapsed, notes, cpu))
}

fn settings(sh: &Shared, consumer: bool) -> pb::TelemetryCommand {
    let pub_sub = if consumer {
        pb::settings::PubSub::Subscription(pb::Subscription {
            group: client::resource(&sh.args.group),
            subscriptions: vec![pb::SubscriptionEntry {
                topic: client::resource(&sh.topic),
                expression: Some(pb::FilterExpression {
                    r#type: pb::FilterType::Tag as i32,
                    expression: "*".into(),
                }),
            }],
            fifo: Some(false),
            receive_batch_size: Some(RECV_BATCH),
            long_polling_timeout: Some(client::duration(LONG_POLL)),
        })
    } else {
        pb::settings::PubSub::Publishing(pb::Publishing {
            topics: vec![client::resource(&sh.topic).expect("resource")],
            max_body_size: 4 << 20,
            validate_message_type: true,
        })
    };
    pb::TelemetryCommand {
        status: None,
        command: Some(pb::telemetry_command::Command::Settings(pb::Settings {
            client_type: Some(if consumer {
                pb::ClientType::SimpleConsumer as i32
            } else {
                pb::ClientType::Producer as i32
            }),
            access_point: Some(sh.access.clone()),
            backoff_policy: None,
            request_timeout: Some(client::duration(CALL_TIMEOUT)),
            pub_sub: Some(pub_sub),
            user_agent: Some(pb::Ua {
                language: pb::Language::Rust as i32,
                version: env!("CARGO_PKG_VERSION").into(),
                platform: std::env::consts::OS.into(),
                hostname: String::new(),
            }),
            metric: None,
        })),
    }
}

type TeleTx = mpsc::Sender<pb::TelemetryCommand>;

/// Opens a telemetry stream, sends settings and waits for the answer.
async fn open_telemetry(
    sh: &Shared,
    url: &str,
    consumer: bool,
) -> Result<(TeleTx, tonic::Streaming<pb::TelemetryCommand>), String> {
    let mut c = connect(sh, url).await?;
    let (tx, rx) = mpsc::channel(64);
    tx.send(settings(sh, consumer))
        .await
        .map_err(|_| "telemetry channel closed")?;
    let id = if consumer {
        &sh.consumer_id
    } else {
        &sh.client_id
    };
    let mut r = tonic::Request::new(ReceiverStream::new(rx));
    let m = r.metadata_mut();
    for (k, v) in [
        ("x-mq-client-id", id.as_str()),
        ("x-mq-language", "RUST"),
        ("x-mq-protocol", "v2"),
    ] {
        if let Ok(v) = v.parse() {
            m.insert(k, v);
        }
    }
    let mut inbound = c
        .telemetry(r)
        .await
        .map_err(|e| format!("telemetry refused: {e}"))?
        .into_inner();
    match tokio::time::timeout(Duration::from_secs(5), inbound.next()).await {
        Ok(Some(Ok(_))) => Ok((tx, inbound)),
        Ok(Some(Err(e))) => Err(format!("telemetry failed: {e}")),
        Ok(None) => Err("telemetry stream closed before the settings were answered".into()),
        Err(_) => Err("no answer to the telemetry settings within 5 s".into()),
    }
}

async fn telemetry_consumer(sh: &Arc<Shared>, url: &str) -> Result<TeleTx, String> {
    let (tx, mut inbound) = open_telemetry(sh, url, true).await?;
    tokio::spawn(async move { while let Some(Ok(_)) = inbound.next().await {} });
    Ok(tx)
}

/// The producer's telemetry stream, answering transaction checks.
async fn telemetry_producer(
    sh: &Arc<Shared>,
    url: &str,
) -> Result<(TeleTx, tokio::task::JoinHandle<()>), String> {
    let (tx, mut inbound) = open_telemetry(sh, url, false).await?;
    let client = connect(sh, url).await?;
    let sh = sh.clone();
    let task = tokio::spawn(async move {
        while let Some(Ok(cmd)) = inbound.next().await {
            let Some(pb::telemetry_command::Command::RecoverOrphanedTransactionCommand(c)) =
                cmd.command
            else {
                continue;
            };
            let now = epoch_ms();
            let msg = c.message.unwrap_or_default();
            let (seq, mine) = match parse_body(&msg.body) {
                Some((run, seq)) if run == sh.run_id => (seq, true),
                _ => (0, false),
            };
            if !mine {
                sh.ledger.lock().expect("ledger").foreign();
                continue;
            }
            let first = sh.ledger.lock().expect("ledger").fate(seq);
            if matches!(first, Fate::AwaitingCheck | Fate::Backlog) {
                if let Some(&d) = sh.deadline.lock().expect("deadlines").get(seq as usize) {
                    let _ = sh
                        .rec
                        .lock()
                        .expect("recorder")
                        .check_late
                        .record(now.saturating_sub(d));
                }
            }
            let commit = checked_commit(&sh.args.mix, sh.backlog, seq);
            sh.ledger.lock().expect("ledger").set(
                seq,
                if commit {
                    Fate::Committed
                } else {
                    Fate::RolledBack
                },
            );
            let mut client = client.clone();
            let sh2 = sh.clone();
            tokio::spawn(async move {
                let r = pb::EndTransactionRequest {
                    topic: msg.topic.clone(),
                    message_id: msg
                        .system_properties
                        .as_ref()
                        .map(|s| s.message_id.clone())
                        .unwrap_or_default(),
                    transaction_id: c.transaction_id,
                    resolution: if commit {
                        pb::TransactionResolution::Commit
                    } else {
                        pb::TransactionResolution::Rollback
                    } as i32,
                    source: pb::TransactionSource::SourceServerCheck as i32,
                    trace_context: String::new(),
                };
                match client
                    .end_transaction(req(r, &sh2.client_id, CALL_TIMEOUT))
                    .await
                {
                    Ok(resp) => {
                        if let Err(e) = ok(resp.get_ref().status.as_ref()) {
                            sh2.error(format!("check answer: {e}"));
                        }
                    }
                    Err(e) => sh2.error(format!("check answer: {e}")),
                }
                sh2.checks_answered.fetch_add(1, Ordering::Relaxed);
            });
        }
    });
    Ok((tx, task))
}

fn message(sh: &Shared, seq: u64, ty: pb::MessageType, deliver_at: Option<u64>) -> pb::Message {
    let immunity = if seq < sh.backlog {
        sh.args
            .backlog_check_after_ms
            .map(|ms| client::duration(Duration::from_millis(ms)))
    } else {
        None
    };
    pb::Message {
        topic: client::resource(&sh.topic),
        user_properties: Default::default(),
        system_properties: Some(pb::SystemProperties {
            message_id: format!("01{:08X}{:08X}{seq:016X}", std::process::id(), sh.run_id),
            message_type: ty as i32,
            body_encoding: pb::Encoding::Identity as i32,
            born_timestamp: Some(client::timestamp(epoch_ms())),
            born_host: "127.0.0.1".into(),
            delivery_timestamp: deliver_at.map(client::timestamp),
            orphaned_transaction_recovery_duration: immunity,
            ..Default::default()
        }),
        body: body(sh.run_id, seq, sh.args.size),
    }
}

fn ledger(args: &BenchArgs) -> Ledger {
    let mut l = Ledger::default();
    if args.fifo {
        l.expect_fifo(args.message_groups);
    }
    l
}

/// Consume mode: the messages to consume, sent in batches before the clock starts, spread
/// over the topic's queues as clients spread them (FIFO: a message group's in one queue).
async fn load(sh: &Arc<Shared>, url: &str) -> Result<(), String> {
    let mut c = connect(sh, url).await?;
    let route = c
        .query_route(req(
            pb::QueryRouteRequest {
                topic: client::resource(&sh.topic),
                endpoints: Some(sh.access.clone()),
            },
            &sh.client_id,
            CALL_TIMEOUT,
        ))
        .await
        .map_err(|e| format!("load: route: {e}"))?
        .into_inner();
    ok(route.status.as_ref()).map_err(|e| format!("load: route: {e}"))?;
    let queues = (route.message_queues.len() as u64).max(1);
    let fifo = sh.args.fifo;
    let groups = sh.args.message_groups;
    let queue_of = |seq: u64| {
        if fifo {
            (seq % groups) % queues
        } else {
            seq % queues
        }
    };
    // A batch goes to one queue: batches per queue, each in sequence order.
    let mut pending: Vec<Vec<u64>> = vec![Vec::new(); queues as usize];
    for seq in 0..sh.args.count {
        let q = queue_of(seq) as usize;
        pending[q].push(seq);
        if pending[q].len() == 32 {
            let batch = std::mem::take(&mut pending[q]);
            load_batch(sh, &mut c, q as i32, &batch).await?;
        }
    }
    for (q, batch) in pending.into_iter().enumerate() {
        if !batch.is_empty() {
            load_batch(sh, &mut c, q as i32, &batch).await?;
        }
    }
    Ok(())
}

async fn load_batch(
    sh: &Arc<Shared>,
    c: &mut Client,
    queue: i32,
    seqs: &[u64],
) -> Result<(), String> {
    let messages = seqs
        .iter()
        .map(|&s| {
            let ty = if sh.args.fifo {
                pb::MessageType::Fifo
            } else {
                pb::MessageType::Normal
            };
            let mut m = message(sh, s, ty, None);
            let sp = m.system_properties.as_mut().expect("set");
            sp.queue_id = queue;
            if sh.args.fifo {
                sp.message_group = Some(format!("g{}", s % sh.args.message_groups));
            }
            m
        })
        .collect();
    let r = c
        .send_message(req(
            pb::SendMessageRequest { messages },
            &sh.client_id,
            CALL_TIMEOUT,
        ))
        .await
        .map_err(|e| format!("load failed: {e}"))?;
    ok(r.get_ref().status.as_ref()).map_err(|e| format!("load refused: {e}"))?;
    let mut g = sh.ledger.lock().expect("ledger");
    for &s in seqs {
        g.set(s, Fate::Once);
    }
    Ok(())
}

/// Runs `clients` producers over sequence numbers up to `end` (or for `duration`).
async fn produce_all(
    sh: &Arc<Shared>,
    url: &str,
    end: u64,
    duration: Option<Duration>,
    backlog: bool,
) -> Result<(), String> {
    let stop_at = duration.map(|d| Instant::now() + d);
    let mut tasks = Vec::new();
    for _ in 0..sh.args.clients {
        let client = connect(sh, url).await?;
        let sh = sh.clone();
        tasks.push(tokio::spawn(async move {
            produce(sh, client, end, stop_at, backlog).await;
        }));
    }
    for t in tasks {
        t.await.map_err(|e| format!("producer failed: {e}"))?;
    }
    Ok(())
}

async fn produce(
    sh: Arc<Shared>,
    mut c: Client,
    end: u64,
    stop_at: Option<Instant>,
    backlog: bool,
) {
    let args = &sh.args;
    loop {
        if stop_at.is_some_and(|t| Instant::now() >= t) {
            return;
        }
        let seq = sh.next.fetch_add(1, Ordering::Relaxed);
        if stop_at.is_none() && seq >= end {
            sh.next.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        if let (Some(rate), false) = (args.rate, backlog) {
            let start = *sh.pace_start.get_or_init(Instant::now);
            let due = start + Duration::from_secs_f64(seq.saturating_sub(sh.backlog) as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
        }
        let t0 = Instant::now();
        let (ty, deliver_at) = match args.mode {
            Mode::Txn => {
                let after = if backlog {
                    args.check_after_ms.max(
                        args.backlog_check_after_ms
                            .map_or(0, |ms| ms.div_ceil(1000) * 1000),
                    )
                } else {
                    args.check_after_ms
                };
                let mut d = sh.deadline.lock().expect("deadlines");
                if d.len() <= seq as usize {
                    d.resize(seq as usize + 1, 0);
                }
                d[seq as usize] = epoch_ms() + after;
                (pb::MessageType::Transaction, None)
            }
            Mode::Delay => {
                let ms = 1 + (spread(seq) >> 8) % args.delay_max_ms.max(1);
                let at = epoch_ms() + ms;
                sh.ledger.lock().expect("ledger").set_deliver_at(seq, at);
                (pb::MessageType::Delay, Some(at))
            }
            _ => (pb::MessageType::Normal, None),
        };
        let m = message(&sh, seq, ty, deliver_at);
        let message_id = m
            .system_properties
            .as_ref()
            .map(|s| s.message_id.clone())
            .unwrap_or_default();
        let sent = c
            .send_message(req(
                pb::SendMessageRequest { messages: vec![m] },
                &sh.client_id,
                CALL_TIMEOUT,
            ))
            .await;
        let entry = match sent {
            Ok(r) => {
                let r = r.into_inner();
                match ok(r.status.as_ref()).and_then(|()| {
                    r.entries
                        .into_iter()
                        .next()
                        .ok_or_else(|| "send answered no entry".to_string())
                }) {
                    Ok(e) => e,
                    Err(e) => {
                        sh.ledger.lock().expect("ledger").set(seq, Fate::Ambiguous);
                        sh.error(format!("send: {e}"));
                        continue;
                    }
                }
            }
            Err(e) => {
                sh.ledger.lock().expect("ledger").set(seq, Fate::Ambiguous);
                sh.error(format!("send: {e}"));
                continue;
            }
        };
        if args.mode != Mode::Txn {
            sh.ledger.lock().expect("ledger").set(seq, Fate::Once);
            let mut r = sh.rec.lock().expect("recorder");
            let _ = r.op.record(us(t0.elapsed()));
            r.done += 1;
            continue;
        }
        let outcome = if backlog {
            Outcome::Unknown
        } else {
            args.mix.outcome(seq)
        };
        let (resolution, fate) = match outcome {
            Outcome::Commit => (pb::TransactionResolution::Commit, Fate::Committed),
            Outcome::Rollback => (pb::TransactionResolution::Rollback, Fate::RolledBack),
            Outcome::Unknown => {
                {
                    let mut g = sh.ledger.lock().expect("ledger");
                    // A check may already have answered it.
                    if g.fate(seq) == Fate::Unset {
                        g.set(
                            seq,
                            if backlog {
                                Fate::Backlog
                            } else {
                                Fate::AwaitingCheck
                            },
                        );
                    }
                }
                let mut r = sh.rec.lock().expect("recorder");
                let _ = r.op.record(us(t0.elapsed()));
                r.done += 1;
                continue;
            }
        };
        sh.ledger.lock().expect("ledger").set(seq, fate);
        let t_end = Instant::now();
        let ended = c
            .end_transaction(req(
                pb::EndTransactionRequest {
                    topic: client::resource(&sh.topic),
                    message_id,
                    transaction_id: entry.transaction_id,
                    resolution: resolution as i32,
                    source: pb::TransactionSource::SourceClient as i32,
                    trace_context: String::new(),
                },
                &sh.client_id,
                CALL_TIMEOUT,
            ))
            .await;
        let res = match ended {
            Ok(r) => ok(r.get_ref().status.as_ref()),
            Err(e) => Err(e.to_string()),
        };
        match res {
            Ok(()) => {
                let mut r = sh.rec.lock().expect("recorder");
                let _ = r.end.record(us(t_end.elapsed()));
                let _ = r.op.record(us(t0.elapsed()));
                r.done += 1;
            }
            Err(e) => {
                sh.ledger.lock().expect("ledger").set(seq, Fate::Ambiguous);
                sh.error(format!("end transaction: {e}"));
            }
        }
    }
}

/// A simple consumer: receive a batch, record it, ack it.
async fn consume(sh: Arc<Shared>, url: String) {
    let mut c = match connect(&sh, &url).await {
        Ok(c) => c,
        Err(e) => {
            sh.error(e);
            return;
        }
    };
    let args = &sh.args;
    let queue = match c
        .query_assignment(req(
            pb::QueryAssignmentRequest {
                topic: client::resource(&sh.topic),
                group: client::resource(&args.group),
                endpoints: Some(sh.access.clone()),
            },
            &sh.consumer_id,
            CALL_TIMEOUT,
        ))
        .await
    {
        Ok(r) => r
            .into_inner()
            .assignments
            .into_iter()
            .find_map(|a| a.message_queue),
        Err(_) => None,
    }
    .unwrap_or(pb::MessageQueue {
        topic: client::resource(&sh.topic),
        id: -1,
        permission: pb::Permission::ReadWrite as i32,
        broker: None,
        accept_message_types: Vec::new(),
    });
    while !sh.stop_consumers.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        let r = pb::ReceiveMessageRequest {
            group: client::resource(&args.group),
            message_queue: Some(queue.clone()),
            filter_expression: Some(pb::FilterExpression {
                r#type: pb::FilterType::Tag as i32,
                expression: "*".into(),
            }),
            batch_size: RECV_BATCH,
            invisible_duration: Some(client::duration(INVISIBLE)),
            auto_renew: false,
            long_polling_timeout: Some(client::duration(LONG_POLL)),
            attempt_id: None,
        };
        let mut stream = match c
            .receive_message(req(r, &sh.consumer_id, LONG_POLL + CALL_TIMEOUT))
            .await
        {
            Ok(s) => s.into_inner(),
            Err(e) => {
                sh.error(format!("receive: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut acks = Vec::new();
        while let Some(item) = stream.next().await {
            let resp = match item {
                Ok(r) => r,
                Err(e) => {
                    sh.error(format!("receive stream: {e}"));
                    break;
                }
            };
            match resp.content {
                Some(pb::receive_message_response::Content::Message(m)) => {
                    let now = epoch_ms();
                    let sp = m.system_properties.unwrap_or_default();
                    {
                        let mut g = sh.ledger.lock().expect("ledger");
                        match parse_body(&m.body) {
                            Some((run, seq)) if run == sh.run_id => {
                                let late = g.consumed(seq, now, EARLY_TOLERANCE_MS);
                                drop(g);
                                let mut rec = sh.rec.lock().expect("recorder");
                                if let Some(l) = late {
                                    let _ = rec.delay_late.record(l);
                                }
                                if args.mode == Mode::Consume {
                                    rec.done += 1;
                                }
                            }
                            _ => g.foreign(),
                        }
                    }
                    acks.push(pb::AckMessageEntry {
                        message_id: sp.message_id,
                        receipt_handle: sp.receipt_handle.unwrap_or_default(),
                    });
                }
                Some(pb::receive_message_response::Content::Status(s)) => {
                    let code = s.code;
                    if code != pb::Code::Ok as i32 && code != pb::Code::MessageNotFound as i32 {
                        sh.error(format!("receive: status {code}: {}", s.message));
                    }
                }
                _ => {}
            }
        }
        if acks.is_empty() {
            continue;
        }
        if args.mode == Mode::Consume {
            let _ = sh.rec.lock().expect("recorder").op.record(us(t0.elapsed()));
        }
        let a = pb::AckMessageRequest {
            group: client::resource(&args.group),
            topic: client::resource(&sh.topic),
            entries: acks,
        };
        match c.ack_message(req(a, &sh.consumer_id, CALL_TIMEOUT)).await {
            Ok(r) => {
                if let Err(e) = ok(r.get_ref().status.as_ref()) {
                    sh.error(format!("ack: {e}"));
                }
            }
            Err(e) => sh.error(format!("ack: {e}")),
        }
    }
}
