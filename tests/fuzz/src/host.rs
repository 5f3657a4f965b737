//! One in-memory broker per input, assembled as `rocklet_broker::server::start` does it
//! (core thread from `driver::spawn`, the same config types) but without sockets, on one
//! tokio runtime shared by every input.
//!
//! The runtime's clock is paused (`test-util`): when nothing is runnable, tokio jumps to the
//! next timer, so a long poll (up to `max_long_polling_ms`, 20 s here) ends as soon as the
//! core has answered it empty, and no input waits in real time. The core's clock is a
//! [`ManualClock`] the inputs move (`advance`), which fires transaction checks and delays.

use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

use rocklet_broker::clock::ManualClock;
use rocklet_broker::config::BrokerConfig;
use rocklet_broker::driver::{self, CoreHandle};
use rocklet_broker::metrics::Metrics;
use rocklet_core::{AnyStorage, Broker, MemStorage, Millis};
use tokio::runtime::{Builder, Runtime};

/// The core's clock at the start of every input.
pub const START_MS: Millis = 1_700_000_000_000;

/// The runtime every input runs on (current thread, paused clock).
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a tokio runtime")
    })
}

/// A running core thread over memory storage.
pub struct Host {
    pub core: CoreHandle,
    pub cfg: Arc<BrokerConfig>,
    pub metrics: Arc<Metrics>,
    clock: ManualClock,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

/// The broker config of the protocol targets: defaults, with short transaction timers (an
/// `advance` of a few seconds brings checks), small segments (rolls happen) and long polls
/// that the paused clock ends at once.
#[must_use]
pub fn config() -> BrokerConfig {
    let mut cfg = BrokerConfig {
        listen: "127.0.0.1:8081".parse().expect("address"),
        ..BrokerConfig::default()
    };
    cfg.max_long_polling_ms = 20_000;
    cfg.core.segment_size = 1 << 17;
    cfg.core.max_message_size = 8 << 10;
    cfg.core.max_batch_size = 32 << 10;
    cfg.core.default_queues = 2;
    cfg.core.transaction_timeout_ms = 1_000;
    cfg.core.transaction_check_interval_ms = 1_000;
    cfg.core.notify_available = true;
    cfg
}

impl Host {
    /// Opens an empty broker and starts its core thread.
    #[must_use]
    pub fn start() -> Self {
        let cfg = config();
        let clock = ManualClock::new(START_MS);
        let broker = Broker::open(
            cfg.core.clone(),
            AnyStorage::Mem(MemStorage::new()),
            START_MS,
        )
        .expect("an empty broker opens");
        let metrics = Arc::new(Metrics::default());
        let (core, thread) = driver::spawn(broker, Arc::new(clock.clone()), metrics.clone())
            .expect("the core thread starts");
        Host {
            core,
            cfg: Arc::new(cfg),
            metrics,
            clock,
            thread: Some(thread),
        }
    }

    /// The core's clock (the remoting context's too: queue lock expiry).
    #[must_use]
    pub fn clock(&self) -> Arc<ManualClock> {
        Arc::new(self.clock.clone())
    }

    /// Moves the core's clock and waits until the core thread has run what fell due.
    pub async fn advance(&self, ms: Millis) {
        self.clock.advance(ms);
        self.core.tick();
        self.core
            .inspect(|_| ())
            .await
            .expect("the core thread is running");
    }

    /// Flushes and stops the core thread. A panic there aborts the process (libFuzzer's
    /// panic hook), so a clean join is all that is left to see.
    pub async fn stop(mut self) {
        self.core.shutdown().await;
        if let Some(t) = self.thread.take() {
            t.join().expect("the core thread ended without a panic");
        }
    }
}

/// Property names that make a message anything but an immediately visible one (a delay or a
/// transaction); sends carrying any of them are left out of the delivery check.
pub const NOT_IMMEDIATE: [&str; 5] = [
    "DELAY",
    "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELAY_MS",
    "TRAN_MSG",
];

/// A message the broker acknowledged, which must be delivered.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Acked {
    pub topic: String,
    pub queue_id: u32,
    pub queue_offset: u64,
    pub body: Vec<u8>,
}

/// Panics naming every acknowledged message that `delivered` (topic, queue, offset, body)
/// lacks (`ROCKLET_FUZZ_VERBOSE` set: prints both counts).
/// `Acked::queue_id` of a message whose queue the acknowledgement did not name (a gRPC send:
/// the broker picks the queue); it matches a delivery in any queue.
pub const ANY_QUEUE: u32 = u32::MAX;

pub fn check_delivered(acked: &[Acked], delivered: &[Acked]) {
    if std::env::var_os("ROCKLET_FUZZ_VERBOSE").is_some() {
        eprintln!(
            "delivery check: {} acknowledged, {} delivered",
            acked.len(),
            delivered.len()
        );
    }
    let mut got = delivered.to_vec();
    got.sort();
    let missing: Vec<&Acked> = acked
        .iter()
        .filter(|a| {
            if a.queue_id == ANY_QUEUE {
                !got.iter().any(|d| {
                    d.topic == a.topic && d.queue_offset == a.queue_offset && d.body == a.body
                })
            } else {
                got.binary_search(a).is_err()
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged messages not delivered: {missing:?}\ndelivered: {delivered:?}"
    );
}
