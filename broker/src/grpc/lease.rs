//! Deliveries the broker keeps invisible for push consumers while they hold them (gRPC
//! `auto_renew`), as RocketMQ's proxy does with its receipt-handle manager.
//!
//! A push consumer receives with `auto_renew = true` and no invisible duration: the server
//! is to keep each message invisible for as long as the consumer holds it. The consumer may
//! hold one for long: the Java client's FIFO consumer takes a batch one message at a time and
//! retries a failed message in place, locally, after the backoff policy's delays (1 s, 2 s,
//! 4 s … up to 60 s, for up to `max_delivery_attempts`), so a batch can be held for many
//! invisible times. Were it to become visible meanwhile, the queue's next consumer would get
//! it again while the first still works on it, and FIFO order would be lost.
//!
//! [`Leases`] holds each such delivery under the handle the consumer was given. Shortly
//! before it would become visible (a third of `default_invisible_ms` ahead) the delivery is
//! renewed by a `ChangeInvisible` of `default_invisible_ms`, which gives the core's new
//! handle; the consumer's later ack, invisible-time change or dead-lettering names its first
//! handle and is carried out with the current one ([`Leases::resolve`]). Renewal stops when
//! the consumer is gone — its last telemetry stream closed, or it sent
//! NotifyClientTermination — and what it held is made visible at once, so the group's other
//! consumers take over; it also stops after [`RENEW_MAX_MS`] (the proxy's
//! `renewMaxTimeMillis`), leaving the delivery to its invisible time. A client with no open
//! telemetry stream (every official client opens one) is not renewed.
//!
//! Leases are connection state: a restart starts with none. The handles survive it: a
//! renewal keeps the earlier handles of the same delivery attempt valid in the core, so a
//! consumer that acks a renewed delivery after a restart, with the handle it was given, acks it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rocklet_core::{ClientError, Millis, ReceiptHandle};
use tracing::debug;

use crate::clock::Clock;
use crate::driver::CoreHandle;

/// Longest a delivery is renewed, from when it was received (RocketMQ's proxy:
/// `renewMaxTimeMillis`, 3 h).
pub const RENEW_MAX_MS: Millis = 3 * 3_600_000;

/// A lease's key: the group and the handle the consumer was given.
type Key = (String, String);

#[derive(Debug)]
struct Lease {
    client: String,
    group: String,
    /// When the delivery was received.
    since: Millis,
    held: tokio::sync::Mutex<Held>,
}

#[derive(Debug)]
struct Held {
    /// The handle of the delivery now (the given one until the first renewal).
    current: ReceiptHandle,
    /// Taken by the consumer's ack, change or dead-lettering, or cleared: not renewed again.
    done: bool,
}

#[derive(Debug, Default)]
struct State {
    leases: HashMap<Key, Arc<Lease>>,
    /// When each lease is to be renewed; one entry per lease (a taken lease's entry is
    /// skipped when it comes due).
    due: BinaryHeap<Reverse<(Millis, Key)>>,
    by_client: HashMap<String, HashSet<Key>>,
    /// Open telemetry streams per client id.
    online: HashMap<String, usize>,
}

impl State {
    /// Removes a lease from the maps (not from `due`).
    fn remove(&mut self, key: &Key) -> Option<Arc<Lease>> {
        let lease = self.leases.remove(key)?;
        if let Some(keys) = self.by_client.get_mut(&lease.client) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_client.remove(&lease.client);
            }
        }
        Some(lease)
    }
}

/// The deliveries kept invisible for push consumers. See the module doc.
#[derive(Debug)]
pub struct Leases {
    state: Mutex<State>,
    /// The invisible time of a renewal.
    renew_ms: Millis,
    /// How long before a delivery would become visible it is renewed.
    ahead_ms: Millis,
}

impl Leases {
    /// Leases renewed by `renew_ms` each time (the core's `default_invisible_ms`).
    #[must_use]
    pub fn new(renew_ms: Millis) -> Self {
        Leases {
            state: Mutex::new(State::default()),
            renew_ms,
            ahead_ms: renew_ms / 3,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Maps updated under the lock, each step complete: still right after a panic.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How often the renewer looks for leases that are due.
    #[must_use]
    pub fn tick(&self) -> Duration {
        Duration::from_millis((self.ahead_ms / 2).clamp(10, 1_000))
    }

    /// Holds a delivery `client` received with `auto_renew`, visible again at `visible_at`.
    pub fn add(
        &self,
        client: &str,
        group: &str,
        handle: &ReceiptHandle,
        visible_at: Millis,
        now: Millis,
    ) {
        if client.is_empty() {
            return;
        }
        let key: Key = (group.to_string(), handle.to_string());
        let lease = Arc::new(Lease {
            client: client.to_string(),
            group: group.to_string(),
            since: now,
            held: tokio::sync::Mutex::new(Held {
                current: handle.clone(),
                done: false,
            }),
        });
        let mut s = self.state();
        s.by_client
            .entry(client.to_string())
            .or_default()
            .insert(key.clone());
        s.due.push(Reverse((
            visible_at.saturating_sub(self.ahead_ms),
            key.clone(),
        )));
        s.leases.insert(key, lease);
    }

    /// Leases held now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.state().leases.len()
    }

    /// Whether no lease is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The handle to carry out a consumer's ack, invisible-time change or dead-lettering
    /// with: the current handle of its lease, which ends there (after a renewal in
    /// progress), or the handle it gave.
    pub async fn resolve(&self, group: &str, given: &str) -> Result<ReceiptHandle, ClientError> {
        let taken = self.state().remove(&(group.to_string(), given.to_string()));
        let Some(lease) = taken else {
            return given.parse();
        };
        let mut h = lease.held.lock().await;
        h.done = true;
        Ok(h.current.clone())
    }

    /// A telemetry stream of `client` opened.
    pub fn client_up(&self, client: &str) {
        if client.is_empty() {
            return;
        }
        *self.state().online.entry(client.to_string()).or_default() += 1;
    }

    /// A telemetry stream of `client` closed: when it was its last, what it held is given
    /// up (made visible at once).
    pub fn client_down(&self, client: &str, core: &CoreHandle) {
        let last = {
            let mut s = self.state();
            match s.online.get_mut(client) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    s.online.remove(client);
                    true
                }
                None => false,
            }
        };
        if last {
            self.client_gone(client, core);
        }
    }

    /// `client` is gone (NotifyClientTermination, or its last telemetry stream closed): the
    /// deliveries it held become visible at once, for the group's other consumers.
    pub fn client_gone(&self, client: &str, core: &CoreHandle) {
        let leases: Vec<Arc<Lease>> = {
            let mut s = self.state();
            let keys = s.by_client.get(client).cloned().unwrap_or_default();
            keys.iter().filter_map(|k| s.remove(k)).collect()
        };
        if leases.is_empty() {
            return;
        }
        debug!(
            client,
            deliveries = leases.len(),
            "consumer gone; its deliveries are made visible"
        );
        let core = core.clone();
        tokio::spawn(async move {
            for lease in leases {
                let mut h = lease.held.lock().await;
                if h.done {
                    continue;
                }
                h.done = true;
                let _ = core
                    .change_invisible(lease.group.clone(), h.current.clone(), 0)
                    .await;
            }
        });
    }

    /// Leases due for renewal at `now`.
    fn due(&self, now: Millis) -> Vec<(Key, Arc<Lease>)> {
        let mut s = self.state();
        let mut out = Vec::new();
        while s.due.peek().is_some_and(|Reverse((t, _))| *t <= now) {
            let Reverse((_, key)) = s.due.pop().expect("peeked");
            if let Some(l) = s.leases.get(&key) {
                out.push((key, l.clone()));
            }
        }
        out
    }

    /// Renews one lease, or drops it when its client is offline, it is too old, or the
    /// core no longer has its delivery (acked with another handle, or redelivered).
    async fn renew(&self, key: Key, lease: Arc<Lease>, core: &CoreHandle, now: Millis) {
        let mut h = lease.held.lock().await;
        if h.done {
            return;
        }
        let online = self.state().online.contains_key(&lease.client);
        if !online || now.saturating_sub(lease.since) >= RENEW_MAX_MS {
            // Left to its invisible time.
            self.state().remove(&key);
            return;
        }
        let renewed = core
            .change_invisible(lease.group.clone(), h.current.clone(), self.renew_ms)
            .await;
        match renewed {
            Ok(Ok((handle, visible_at))) => {
                h.current = handle;
                self.state()
                    .due
                    .push(Reverse((visible_at.saturating_sub(self.ahead_ms), key)));
            }
            other => {
                debug!(lease = ?key, result = ?other, "delivery not renewed");
                self.state().remove(&key);
            }
        }
    }
}

/// Renews due leases until the [`Leases`] are dropped (the gRPC service stopped).
pub fn spawn_renewer(leases: &Arc<Leases>, core: CoreHandle, clock: Arc<dyn Clock>) {
    let tick = leases.tick();
    let weak: Weak<Leases> = Arc::downgrade(leases);
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            let Some(leases) = weak.upgrade() else { return };
            let now = clock.now();
            for (key, lease) in leases.due(now) {
                let leases = leases.clone();
                let core = core.clone();
                tokio::spawn(async move { leases.renew(key, lease, &core, now).await });
            }
        }
    });
}
