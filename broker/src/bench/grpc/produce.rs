//! The bench client's sends: consume mode's load before the clock starts, and the producers.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{connect, message, ok, req, Client, Shared, CALL_TIMEOUT};
use crate::bench::ledger::Fate;
use crate::bench::{epoch_ms, spread, us, Mode, Outcome};
use crate::client;
use crate::pb::v2 as pb;

/// Consume mode: the messages to consume, sent in batches before the clock starts, spread
/// over the topic's queues as clients spread them (FIFO: a message group's in one queue).
pub(super) async fn load(sh: &Arc<Shared>, url: &str) -> Result<(), String> {
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
pub(super) async fn produce_all(
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
