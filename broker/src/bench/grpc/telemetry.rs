//! The bench client's telemetry streams: the settings it announces, a consumer's stream,
//! a producer's that answers transaction checks from the ledger.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

use super::{connect, ok, req, Shared, CALL_TIMEOUT, LONG_POLL, RECV_BATCH};
use crate::bench::ledger::Fate;
use crate::bench::{checked_commit, epoch_ms, parse_body};
use crate::client;
use crate::pb::v2 as pb;

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

pub(super) async fn telemetry_consumer(sh: &Arc<Shared>, url: &str) -> Result<TeleTx, String> {
    let (tx, mut inbound) = open_telemetry(sh, url, true).await?;
    tokio::spawn(async move { while let Some(Ok(_)) = inbound.next().await {} });
    Ok(tx)
}

/// The producer's telemetry stream, answering transaction checks.
pub(super) async fn telemetry_producer(
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
