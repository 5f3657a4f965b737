//! `rocklet bench` over RocketMQ 5 gRPC: a plain client (route-free sends, telemetry settings,
//! transaction checks answered on the telemetry stream, simple-consumer receive + ack), so it
//! runs against any RocketMQ 5 endpoint.
//!
//! The folder: `mod.rs` (the run, the client's connection, the consumers), `telemetry.rs` (the
//! telemetry streams: settings, transaction checks answered from the ledger), `produce.rs`
//! (consume mode's load, the producers). A run flows: `run` → `drive` (telemetry opened, the
//! load sent, then producers and consumers) → the ledger's verdict.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_stream::StreamExt;
use tonic::transport::{Channel, Endpoint};

use super::ledger::{Fate, Ledger};
use super::{
    body, epoch_ms, parse_body, spread, us, BenchArgs, CpuMark, Live, Mode, Outcomes, Recorder,
    RunCpu, Target,
};
use crate::client;
use crate::clock::SystemClock;
use crate::config::{BrokerConfig, GroupDecl};
use crate::pb::v2 as pb;
use crate::pb::v2::messaging_service_client::MessagingServiceClient;
use crate::server;

mod produce;
mod telemetry;

use produce::{load, produce_all};
use telemetry::{telemetry_consumer, telemetry_producer};

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
    // due during the run). Past the drain timeout, up to --late-wait more for what is still
    // due: what comes then is late (a failover's redelivery), what does not is missing.
    let until = Instant::now() + args.drain_timeout;
    let mut late_until = None;
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
        let now = Instant::now();
        if now >= until && late_until.is_none() {
            sh.ledger.lock().expect("ledger").mark_late();
            late_until = Some(now + args.late_wait);
        }
        if late_until.is_some_and(|l| now >= l) {
            sh.error(format!(
                "drain timed out after {:?} and {:?} more: {left} messages not consumed, {checks} checks not answered, {backlog} backlog halves not checked",
                args.drain_timeout, args.late_wait
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
