//! The crates.io RocketMQ 4 Rust client (`rocketmq-client-rust` 1.0.0) against a running
//! rocklet, through its name-server address only (first argument, e.g. 127.0.0.1:9876).
//!
//! The broker must run with a short transaction timeout (the scenario waits for a check):
//! `[core] transaction_timeout_ms = 1000`, `transaction_check_interval_ms = 1000`.
//!
//! - TransactionMQProducer: commit, rollback, and unknown → CHECK_TRANSACTION_STATE → commit.
//! - DefaultMQProducer: a batch and a delay-level message.
//! - DefaultMQPushConsumer: receives exactly what was committed (each once), the batch, and
//!   the delayed message no earlier than its level's delay.
//!
//! Exits non-zero with the reason on any mismatch.

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rocketmq_client_rust::{
    ClientError, ClientResult, ClientRuntime, ClientRuntimeConfig, ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus, DefaultMQProducer, DefaultMQPushConsumer, LocalTransactionState,
    MQPushConsumer, MessageListenerConcurrently, TransactionListener, TransactionMQProducer,
};
use rocketmq_model::common::message::message_ext::MessageExt;
use rocketmq_model::common::message::message_single::Message;
use rocketmq_model::common::message::MessageTrait;
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

const TXN_TOPIC: &str = "V4RustTxn";
const BATCH_TOPIC: &str = "V4RustBatch";
const DELAY_TOPIC: &str = "V4RustDelay";

fn body_of(m: &dyn MessageTrait) -> String {
    m.get_body()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

/// Local transactions decided by the body's prefix; checks always commit (and are counted).
struct Listener {
    checks: Arc<AtomicUsize>,
}

impl TransactionListener for Listener {
    fn execute_local_transaction(
        &self,
        msg: &dyn MessageTrait,
        _arg: Option<&(dyn Any + Send + Sync)>,
    ) -> LocalTransactionState {
        let b = body_of(msg);
        if b.starts_with("commit") {
            LocalTransactionState::CommitMessage
        } else if b.starts_with("rollback") {
            LocalTransactionState::RollbackMessage
        } else {
            LocalTransactionState::Unknown
        }
    }

    fn check_local_transaction(&self, msg: &MessageExt) -> LocalTransactionState {
        let b = msg
            .body()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        eprintln!(
            "check for `{b}` (transaction {:?})",
            msg.get_transaction_id()
        );
        assert!(
            b.starts_with("unknown"),
            "checked a decided transaction: {b}"
        );
        self.checks.fetch_add(1, Ordering::SeqCst);
        LocalTransactionState::CommitMessage
    }
}

type Seen = Arc<Mutex<BTreeMap<String, (usize, Instant)>>>;

struct Collect(Seen);

impl MessageListenerConcurrently for Collect {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        let mut seen = self.0.lock().unwrap();
        for m in msgs {
            let b = m
                .body()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            let key = format!("{}/{b}", m.topic());
            eprintln!("consumed {key}");
            seen.entry(key).or_insert((0, Instant::now())).0 += 1;
        }
        Ok(ConsumeConcurrentlyStatus::ConsumeSuccess)
    }
}

fn message(topic: &str, body: &str) -> Message {
    Message::builder()
        .topic(topic)
        .tags("TagA")
        .body_slice(body.as_bytes())
        .build_unchecked()
}

async fn scenario(rt: Arc<ClientRuntime>, ns: String) -> Result<(), String> {
    let e = |what: &str| {
        let what = what.to_string();
        move |err: ClientError| format!("{what}: {err}")
    };
    // Consumer first, so it is subscribed before anything is committed.
    let seen: Seen = Arc::default();
    let mut consumer = DefaultMQPushConsumer::builder(rt.clone())
        .consumer_group("V4RustConsumer".to_string())
        .name_server_addr(ns.clone())
        .build();
    for t in [TXN_TOPIC, BATCH_TOPIC, DELAY_TOPIC] {
        consumer.subscribe(t, "*").await.map_err(e("subscribe"))?;
    }
    consumer.register_message_listener_concurrently(Collect(seen.clone()));
    consumer.start().await.map_err(e("consumer start"))?;

    let checks = Arc::new(AtomicUsize::new(0));
    let mut txp = TransactionMQProducer::builder(rt.clone())
        .producer_group("V4RustTxnGroup".to_string())
        .name_server_addr(ns.clone())
        .topics(vec![TXN_TOPIC])
        .transaction_listener(Listener {
            checks: checks.clone(),
        })
        .build();
    txp.start().await.map_err(e("transaction producer start"))?;
    for b in ["commit-1", "rollback-1", "unknown-1"] {
        let r = txp
            .send_message_in_transaction::<(), _>(message(TXN_TOPIC, b), None)
            .await
            .map_err(e("send in transaction"))?;
        eprintln!("{b}: {r}");
    }

    let mut p = DefaultMQProducer::builder(rt.clone())
        .producer_group("V4RustProducer".to_string())
        .name_server_addr(ns.clone())
        .build();
    p.start().await.map_err(e("producer start"))?;
    let batch: Vec<Message> = (0..3)
        .map(|i| message(BATCH_TOPIC, &format!("batch-{i}")))
        .collect();
    let r = p.send_batch(batch).await.map_err(e("batch send"))?;
    eprintln!("batch: {r}");
    let mut delayed = message(DELAY_TOPIC, "delay-1");
    delayed.set_delay_time_level(1);
    let sent_delayed = Instant::now();
    let r = p.send(delayed).await.map_err(e("delay send"))?;
    eprintln!("delayed: {r:?}");

    let want = [
        format!("{TXN_TOPIC}/commit-1"),
        format!("{TXN_TOPIC}/unknown-1"),
        format!("{BATCH_TOPIC}/batch-0"),
        format!("{BATCH_TOPIC}/batch-1"),
        format!("{BATCH_TOPIC}/batch-2"),
        format!("{DELAY_TOPIC}/delay-1"),
    ];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done = {
            let s = seen.lock().unwrap();
            want.iter().all(|w| s.contains_key(w))
        };
        if done {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "timed out; consumed {:?}, checks {}",
                seen.lock().unwrap().keys().collect::<Vec<_>>(),
                checks.load(Ordering::SeqCst)
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Anything that should not arrive (the rollback, duplicates) has had time to.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = seen.lock().unwrap().clone();
    let got: Vec<&String> = s.keys().collect();
    if got.len() != want.len() || s.values().any(|(n, _)| *n != 1) {
        return Err(format!("consumed {s:?}, wanted each of {want:?} once"));
    }
    if checks.load(Ordering::SeqCst) < 1 {
        return Err("the unknown transaction was committed without a check".into());
    }
    let at = s[&format!("{DELAY_TOPIC}/delay-1")].1;
    if at.duration_since(sent_delayed) < Duration::from_millis(900) {
        return Err(format!(
            "delay level 1 delivered after {:?}",
            at.duration_since(sent_delayed)
        ));
    }
    p.shutdown().await;
    txp.shutdown().await;
    consumer.shutdown().await;
    Ok(())
}

fn main() {
    let ns = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9876".into());
    let owner = RuntimeOwner::plan(RuntimeConfig {
        thread_name: "v4-client-test".into(),
        ..Default::default()
    })
    .expect("runtime config")
    .build()
    .expect("runtime");
    let telemetry = rocketmq_observability::TelemetryRuntimeGuard::noop();
    let rt = ClientRuntime::try_new(
        owner.root_context().component("client"),
        ClientRuntimeConfig::default(),
        telemetry.handle(),
    )
    .expect("client runtime");
    let result = owner.block_on(async {
        let r = tokio::time::timeout(Duration::from_secs(120), scenario(rt.clone(), ns)).await;
        let _ = rt.shutdown().await;
        r.unwrap_or_else(|_| Err("scenario timed out".into()))
    });
    match result {
        Ok(()) => println!("v4 rust client: all scenarios passed"),
        Err(e) => {
            eprintln!("v4 rust client: FAILED: {e}");
            std::process::exit(1);
        }
    }
}
