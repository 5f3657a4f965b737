//! `rocklet bench`: sends through gRPC to a broker started in-process on a scratch data
//! directory and reports throughput, latency percentiles and fsyncs per request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rocklet_core::FlushMode;

use crate::clock::SystemClock;
use crate::config::BrokerConfig;
use crate::pb::v2 as pb;
use crate::pb::v2::messaging_service_client::MessagingServiceClient;
use crate::server;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchArgs {
    pub flush: FlushMode,
    pub clients: usize,
    pub messages: usize,
    pub size: usize,
    /// Each message as a transaction: prepare, then commit.
    pub transactional: bool,
}

fn resource(name: &str) -> Option<pb::Resource> {
    Some(pb::Resource {
        resource_namespace: String::new(),
        name: name.into(),
    })
}

/// Runs the benchmark and returns the report.
pub async fn run(args: BenchArgs) -> Result<String, String> {
    let dir = std::env::temp_dir().join(format!("rocklet-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut cfg = BrokerConfig {
        listen: "127.0.0.1:0".parse().expect("valid address"),
        data_dir: dir.clone(),
        ..BrokerConfig::default()
    };
    cfg.core.flush = args.flush;
    cfg.core.segment_size = 1 << 28;
    let broker = server::start(cfg, Arc::new(SystemClock)).await?;
    let url = format!("http://{}", broker.addr);
    let per_client = args.messages.div_ceil(args.clients.max(1));
    let body = vec![b'r'; args.size.max(1)];
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..args.clients.max(1) {
        let url = url.clone();
        let body = body.clone();
        let transactional = args.transactional;
        tasks.push(tokio::spawn(async move {
            let mut client = MessagingServiceClient::connect(url)
                .await
                .map_err(|e| e.to_string())?;
            let mut lat = Vec::with_capacity(per_client);
            for i in 0..per_client {
                let ty = if transactional {
                    pb::MessageType::Transaction
                } else {
                    pb::MessageType::Normal
                };
                let m = pb::Message {
                    topic: resource("BenchTopic"),
                    user_properties: Default::default(),
                    system_properties: Some(pb::SystemProperties {
                        message_id: format!("bench-{c}-{i}"),
                        message_type: ty as i32,
                        ..Default::default()
                    }),
                    body: body.clone(),
                };
                let t = Instant::now();
                let r = client
                    .send_message(pb::SendMessageRequest { messages: vec![m] })
                    .await
                    .map_err(|e| e.to_string())?
                    .into_inner();
                let status = r.status.unwrap_or_default();
                if status.code != pb::Code::Ok as i32 {
                    return Err(status.message);
                }
                if transactional {
                    let txn = r
                        .entries
                        .first()
                        .map(|e| e.transaction_id.clone())
                        .unwrap_or_default();
                    let s = client
                        .end_transaction(pb::EndTransactionRequest {
                            topic: resource("BenchTopic"),
                            message_id: String::new(),
                            transaction_id: txn,
                            resolution: pb::TransactionResolution::Commit as i32,
                            source: pb::TransactionSource::SourceClient as i32,
                            trace_context: String::new(),
                        })
                        .await
                        .map_err(|e| e.to_string())?
                        .into_inner()
                        .status
                        .unwrap_or_default();
                    if s.code != pb::Code::Ok as i32 {
                        return Err(s.message);
                    }
                }
                lat.push(t.elapsed());
            }
            Ok::<Vec<Duration>, String>(lat)
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.map_err(|e| e.to_string())??);
    }
    let elapsed = t0.elapsed();
    let (stats, end) = broker
        .core
        .inspect(|b| (b.stats(), b.log_end()))
        .await
        .map_err(|e| e.to_string())?;
    broker.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3;
    let n = lat.len();
    Ok(format!(
        "{n} {} of {} B, {} clients, {:?} flush: {:.0}/s, latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; \
         {} fsyncs ({:.2} per {}), {:.1} MiB logged in {:.2} s\n",
        if args.transactional { "transactions (send + commit)" } else { "sends" },
        args.size,
        args.clients,
        args.flush,
        n as f64 / elapsed.as_secs_f64(),
        pct(0.5),
        pct(0.99),
        pct(1.0),
        stats.syncs,
        stats.syncs as f64 / n.max(1) as f64,
        if args.transactional { "transaction" } else { "send" },
        end as f64 / (1 << 20) as f64,
        elapsed.as_secs_f64(),
    ))
}
