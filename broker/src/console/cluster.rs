//! The console in cluster mode: what the node knows of its broker group (master, epoch,
//! SyncStateSet, each replica's lag), and actions taken on a replica's page carried out by
//! the master.
//!
//! - The overview's `cluster` object: this node's role, the master (node, epoch, gRPC
//!   address), the SyncStateSet, and each replica's lag as the master reports it (the master
//!   from its own view; a replica from the group's keys in etcd, read with a deadline).
//! - An action on a replica (`/api/resolve`) goes to the master's admin service (on its
//!   gRPC address, as `rocklet admin resolve` reaches it), signed with the operator's own
//!   credentials when authentication is on, so the master checks the same super user. (A
//!   master whose admin service is on its own `--admin-listen` cannot be reached this way:
//!   the action fails naming the master.)

use std::time::Duration;

use rocklet_core::{Resolution, TxnId};
use serde_json::{json, Value};

use crate::auth::admin::Signer;
use crate::cluster::{self, LagReport, SyncStateSet, View};
use crate::pb::admin;
use crate::pb::admin::admin_client::AdminClient;

use super::Console;

/// How long an action a replica passes on may take at the master.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a replica's page waits for etcd (the SyncStateSet, the replicas' lag).
const ETCD_READ: Duration = Duration::from_secs(1);

/// The node's place in its broker group, for the console.
#[derive(Debug)]
pub struct ClusterLink {
    pub view: View,
    pub node: u32,
    pub broker_name: String,
    pub etcd: Vec<String>,
    pub prefix: String,
}

impl ClusterLink {
    /// From the broker's cluster config and the node's view.
    #[must_use]
    pub fn new(cfg: &cluster::ClusterConfig, view: View) -> Self {
        ClusterLink {
            view,
            node: cfg.node_id,
            broker_name: cfg.broker_name.clone(),
            etcd: cfg.etcd.clone(),
            prefix: cfg.prefix.clone(),
        }
    }

    /// The master to carry an action out, when this node is a replica that knows one.
    pub(super) fn master_elsewhere(&self) -> Option<cluster::MasterInfo> {
        if self.view.is_master() {
            return None;
        }
        self.view.master().filter(|m| m.node != self.node)
    }

    /// The group's SyncStateSet and lag report in etcd (a replica's page; a replica's own
    /// view does not follow the SyncStateSet).
    async fn read_etcd(&self) -> Option<(Option<SyncStateSet>, Option<LagReport>)> {
        let keys = cluster::Keys::new(&self.prefix, &self.broker_name);
        let read = async {
            let mut c = cluster::etcd::Etcd::connect(&self.etcd, 0).await.ok()?;
            let set = c.get(&keys.sync_state_set).await.ok()?;
            let lag = c.get(&keys.lag).await.ok()?;
            Some((
                set.and_then(|kv| serde_json::from_slice(&kv.value).ok()),
                lag.and_then(|kv| serde_json::from_slice(&kv.value).ok()),
            ))
        };
        tokio::time::timeout(ETCD_READ, read).await.ok().flatten()
    }

    /// The overview's `cluster` object.
    pub(super) async fn json(&self) -> Value {
        let v = &self.view;
        let master = v.master();
        let is_master = v.is_master();
        let (set, replicas, lag_from) = if is_master {
            (
                v.sync_state_set.read().ok().and_then(|s| s.clone()),
                v.replicas.read().map(|r| r.clone()).unwrap_or_default(),
                "this node",
            )
        } else {
            match self.read_etcd().await {
                Some((set, lag)) => (
                    set,
                    lag.map(|r| r.replicas).unwrap_or_default(),
                    "etcd (the master's report)",
                ),
                None => (None, Vec::new(), "unknown (etcd did not answer)"),
            }
        };
        json!({
            "broker_name": self.broker_name,
            "node": self.node,
            "role": if is_master { "master" } else if master.is_some() { "replica" } else { "candidate" },
            "epoch": master.as_ref().map(|m| m.epoch),
            "master": master.as_ref().map(|m| json!({
                "node": m.node,
                "epoch": m.epoch,
                "advertise": m.advertise.to_string(),
            })),
            "sync_state_set": set.map(|s| s.members),
            "min_in_sync_replicas": v.min_in_sync_replicas.load(std::sync::atomic::Ordering::Relaxed),
            "replicas": replicas.iter().map(|r| json!({
                "node": r.node,
                "lag_bytes": r.lag_bytes,
                "lag_ms": r.lag_ms,
                "in_sync": r.in_sync,
            })).collect::<Vec<_>>(),
            "lag_from": lag_from,
        })
    }
}

impl Console {
    /// Resolves a transaction on the master `m` (this node is a replica), through the
    /// master's admin service (on its gRPC address) as `rocklet admin resolve` does, signed
    /// as the operator (`credentials`: their access and secret key) when authentication is
    /// on, so the master checks the same super user. Answers whether it was already resolved
    /// that way.
    pub(super) async fn resolve_on_master(
        &self,
        m: &cluster::MasterInfo,
        txn: TxnId,
        resolution: Resolution,
        credentials: Option<&(String, String)>,
    ) -> Result<bool, String> {
        let at = format!("http://{}", m.advertise);
        let master = format!("the master (node {} at {})", m.node, m.advertise);
        let ch = tonic::transport::Endpoint::from_shared(at)
            .map_err(|e| format!("{master}: {e}"))?
            .connect_timeout(FORWARD_TIMEOUT)
            .timeout(FORWARD_TIMEOUT)
            .connect()
            .await
            .map_err(|e| format!("{master} cannot be reached: {e}"))?;
        let signer = match credentials {
            Some((ak, sk)) => Signer::new(ak, sk),
            None => Signer::default(),
        };
        let mut c = AdminClient::with_interceptor(ch, signer);
        let r = c
            .resolve(admin::ResolveRequest {
                transaction_id: txn.to_string(),
                resolution: resolution.as_str().into(),
            })
            .await
            .map_err(|s| format!("{master} refused it: {} ({:?})", s.message(), s.code()))?;
        Ok(r.into_inner().duplicate)
    }
}
