//! Planned master change: `rocklet admin cluster handoff` and SIGTERM on a master hand
//! mastership to an in-sync replica at once (see [`Node::hand_over`]).

use super::*;

/// How long a master handing over waits for the replica it chose to hold its whole log
/// before it gives up and stays master.
pub const HANDOFF_CATCH_UP: Duration = Duration::from_secs(2);
/// How long the old master waits for the new one to appear in etcd after a handoff.
pub(super) const HANDOFF_ELECTION: Duration = Duration::from_secs(3);
/// The longest a client write waits while a handoff is under way ([`HandoffSlot::settled`]):
/// the replica's catch-up and the election, and a margin.
const HANDOFF_HOLD: Duration = Duration::from_millis(
    HANDOFF_CATCH_UP.as_millis() as u64 + HANDOFF_ELECTION.as_millis() as u64 + 500,
);
/// A master stopping (SIGTERM) after a handoff goes on passing what clients send here on to
/// the new master until nothing has come for this long: by then their routes name the new
/// master (official clients refresh them every 30 s, and only then: the Python client 5.1.2
/// has this node's address until its next refresh, and meeting it refused costs it gRPC's
/// 1 s reconnect backoff).
pub const DRAIN_QUIET: Duration = Duration::from_secs(2);
/// ...but no longer than this (30 s route refreshes, a request's time, a margin).
pub const DRAIN_MAX: Duration = Duration::from_secs(40);

/// A handoff asked of this node as master by its own process (SIGTERM), with where the
/// answer goes.
#[derive(Debug, Default)]
pub struct HandoffSlot {
    pub(super) asked: std::sync::Mutex<Option<HandoffAsk>>,
    pub(super) notify: Notify,
    /// The process stops: a replica stops following and campaigning.
    pub(super) leaving: std::sync::atomic::AtomicBool,
    /// This master is handing over: a client write waits for the new master (and goes there)
    /// instead of being taken here, where the new master may never get it (it stops following
    /// when it is elected) and it would never be answered.
    /// A watch, so the writes held wake once when it ends.
    pub(super) handing_over: tokio::sync::watch::Sender<bool>,
    /// When ([`monotonic_ms`]) this node last passed a client request on to its master.
    last_forward: std::sync::atomic::AtomicU64,
}

impl HandoffSlot {
    /// Waits while a handoff is under way (at most [`HANDOFF_HOLD`]): then the request goes
    /// to the new master, or, the handoff refused, is taken here. Every caller is a request
    /// the gate admitted, so what waits is bounded by the request budget.
    pub async fn settled(&self) {
        let mut handing_over = self.handing_over.subscribe();
        // Err: the hold ran out (or the sender is gone, which it never is while `self` is).
        let _ = tokio::time::timeout(HANDOFF_HOLD, handing_over.wait_for(|h| !*h)).await;
    }

    /// A client request was passed on to the master (what [`drain`] waits to stop). Not an
    /// answer to a transaction check the master sent through this node: that the client
    /// answers where the check came from, and once this node stops the master checks again
    /// through the client's own connection.
    pub fn forwarded(&self) {
        self.last_forward.store(monotonic_ms(), Ordering::SeqCst);
    }
}

/// After a SIGTERM handoff: this node keeps serving, passing every client request on to the
/// new master, until none has come for [`DRAIN_QUIET`] (at most [`DRAIN_MAX`]), so clients
/// move by their route refresh and never meet the address refused while the process restarts.
async fn drain(view: &super::super::ClusterView) {
    let start = Instant::now();
    view.handoff.forwarded();
    loop {
        let quiet = monotonic_ms().saturating_sub(view.handoff.last_forward.load(Ordering::SeqCst));
        if quiet >= DRAIN_QUIET.as_millis() as u64 {
            info!(
                drained_ms = start.elapsed().as_millis() as u64,
                "no client request for {DRAIN_QUIET:?}: their routes name the new master; stopping"
            );
            return;
        }
        if start.elapsed() >= DRAIN_MAX {
            warn!("clients still send here after {DRAIN_MAX:?}; stopping anyway");
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(super) type HandoffAsk = (Option<u32>, oneshot::Sender<Result<u32, String>>);

/// `rocklet admin cluster handoff`'s request, the handoff key's value: only the master of
/// `epoch` acts on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffRequest {
    pub id: String,
    pub epoch: u64,
    /// The replica to hand over to (default: the most advanced member of the SyncStateSet).
    pub to: Option<u32>,
}

/// The master's answer to a [`HandoffRequest`], the handoff_result key's value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoffResult {
    pub id: String,
    pub from: u32,
    pub epoch: u64,
    /// The node that takes over, or why the master stays.
    pub result: Result<u32, String>,
}

/// Asks this node, if it is master, to hand mastership to an in-sync replica (SIGTERM);
/// the node taking over, or why none does.
pub async fn hand_off(view: &super::super::ClusterView, to: Option<u32>) -> Result<u32, String> {
    if !view.is_master() {
        return Err("this node is not the master".into());
    }
    let (tx, rx) = oneshot::channel();
    *view.handoff.asked.lock().expect("not poisoned") = Some((to, tx));
    view.handoff.notify.notify_one();
    let within = HANDOFF_CATCH_UP + HANDOFF_ELECTION + Duration::from_secs(2);
    match tokio::time::timeout(within, rx).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err("the master's task ended without an answer".into()),
        Err(_) => Err(format!(
            "no answer from the master's task within {within:?}"
        )),
    }
}

/// Before the process stops (SIGTERM): a master hands mastership to an in-sync replica, then
/// passes what clients still send here on to the new master until they have moved
/// ([`drain`]); a replica stops following and campaigning. Whether mastership was handed
/// over.
pub async fn before_stop(view: &super::super::ClusterView) -> bool {
    if view.is_master() {
        info!("stopping the master: handing mastership over first");
        match hand_off(view, None).await {
            Ok(n) => {
                info!(to = n, "mastership handed over; passing client requests on to it until clients have moved");
                drain(view).await;
                true
            }
            Err(e) => {
                warn!(error = %e, "no handoff: the group elects a master once this one's lease expires");
                false
            }
        }
    } else {
        view.handoff.leaving.store(true, Ordering::SeqCst);
        false
    }
}

impl Node {
    /// Hands mastership to `to`, or to the most advanced replica of `set`: this master stops
    /// acknowledging (the caller, the lead loop, releases nothing meanwhile), waits until the
    /// replica holds its whole log (at most [`HANDOFF_CATCH_UP`]), then one etcd transaction
    /// — *if* the master key and the epoch are still this master's — deletes the master key
    /// and makes the replica the SyncStateSet alone, so it is the only node that may be
    /// elected, in a new epoch. `Err`: why it stays master (acknowledging again).
    pub(super) async fn hand_over(
        &self,
        c: &mut Etcd,
        info: &MasterInfo,
        set: &[u32],
        to: Option<u32>,
    ) -> Result<u32, String> {
        let acked = |n: u32| {
            self.replicas
                .table
                .lock()
                .expect("not poisoned")
                .get(&n)
                .map_or(0, |s| s.acked)
        };
        let target = {
            let t = self.replicas.table.lock().expect("not poisoned");
            machine::handoff_target(&self.params(), set, to, &t)?
        };
        let end = self
            .core
            .inspect(|b| b.log_end())
            .await
            .map_err(|e| e.to_string())?;
        let deadline = Instant::now() + HANDOFF_CATCH_UP;
        loop {
            let held = acked(target);
            if held >= end {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "node {target} holds the log to {held}, not to its end {end}, after {HANDOFF_CATCH_UP:?}"
                ));
            }
            tokio::select! {
                () = self.replicas.changed.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        let set = SyncStateSet {
            epoch: info.epoch,
            members: vec![target],
        };
        let when = vec![
            etcd::value_is(
                &self.keys.master,
                &serde_json::to_vec(info).expect("serializes"),
            ),
            etcd::value_is(&self.keys.epoch, info.epoch.to_string().as_bytes()),
        ];
        let then = vec![
            etcd::delete(&self.keys.master),
            etcd::put(
                &self.keys.sync_state_set,
                serde_json::to_vec(&set).expect("serializes"),
                0,
            ),
        ];
        match c.txn(when, then).await {
            Ok(true) => Ok(target),
            Ok(false) => self.fence("the master key is no longer this node's"),
            // Whether the transaction ran is unknown: look.
            Err(e) => match self.master(c).await {
                Ok(Some((m, _))) if m == *info => Err(format!("etcd: {e}")),
                _ => self.fence("a handoff transaction may have run"),
            },
        }
    }

    /// After [`Node::hand_over`] to `target`: releases what `target` holds (it keeps all of
    /// it as the next master's log) until it stops following, and learns the new master
    /// (at most [`HANDOFF_ELECTION`]), so writes that reach this node go there.
    pub(super) async fn after_hand_over(
        &self,
        c: &mut Etcd,
        target: u32,
        fence: &Fence,
        mut released: u64,
    ) {
        // The replication streams stay open (they end when `master_epoch` changes) until the
        // new master is known: `target` goes on taking what clients still send here.
        if let Ok(mut v) = self.view.master.write() {
            *v = None;
        }
        let deadline = Instant::now() + HANDOFF_ELECTION;
        let mut last_look = Instant::now();
        while Instant::now() < deadline {
            tokio::select! {
                () = self.replicas.changed.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            let held = self
                .replicas
                .table
                .lock()
                .expect("not poisoned")
                .get(&target)
                .map_or(0, |s| s.acked);
            if held > released && fence.valid() {
                let ok = self
                    .core
                    .with_mut(move |b| {
                        b.replicated_to(held);
                        true
                    })
                    .await;
                if ok == Ok(true) {
                    released = held;
                }
            }
            if last_look.elapsed() >= Duration::from_millis(50) {
                last_look = Instant::now();
                if let Ok(Some((m, _))) = self.master(c).await {
                    if m.node != self.cfg.node_id {
                        info!(node = m.node, epoch = m.epoch, "the new master");
                        if let Ok(mut v) = self.view.master.write() {
                            *v = Some(m);
                        }
                        self.view.master_epoch.store(0, Ordering::SeqCst);
                        return;
                    }
                }
            }
        }
        warn!(node = target, "no new master in etcd yet");
        self.view.master_epoch.store(0, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write held by a handoff wakes the moment the handoff ends (virtual time does not
    /// move), and one held by a handoff that never ends goes on after [`HANDOFF_HOLD`].
    #[tokio::test(start_paused = true)]
    async fn a_held_write_wakes_when_the_handoff_ends_and_waits_at_most_the_hold() {
        let slot = Arc::new(HandoffSlot::default());
        let t0 = tokio::time::Instant::now();
        slot.settled().await;
        assert_eq!(t0.elapsed(), Duration::ZERO, "no handoff: nothing waits");

        slot.handing_over.send_replace(true);
        let held = tokio::spawn({
            let slot = slot.clone();
            async move {
                let t = tokio::time::Instant::now();
                slot.settled().await;
                t.elapsed()
            }
        });
        tokio::task::yield_now().await;
        assert!(
            !held.is_finished(),
            "a write waits while the master hands over"
        );
        slot.handing_over.send_replace(false);
        assert_eq!(
            held.await.unwrap(),
            Duration::ZERO,
            "woken at once, not by a poll"
        );

        slot.handing_over.send_replace(true);
        let t = tokio::time::Instant::now();
        slot.settled().await;
        assert_eq!(t.elapsed(), HANDOFF_HOLD, "bounded by the hold");
    }
}
