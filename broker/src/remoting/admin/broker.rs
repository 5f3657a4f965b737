//! mqadmin's requests about the broker itself: clusterList (GET_BROKER_CLUSTER_INFO) and
//! wipeWritePerm / addWritePerm (WIPE_WRITE_PERM_OF_BROKER, ADD_WRITE_PERM_OF_BROKER).

use serde_json::{json, Map, Value};

use super::with_body;
use crate::cluster::directory::GroupNodes;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::status;
use crate::remoting::conn::Ctx;
use crate::remoting::handlers::BROKER_NAME;
use crate::remoting::reply::{core_failure, fail, ok, required, Answer};

/// This broker's name in routes: its group's in cluster mode, else `rocklet`.
fn own_name(ctx: &Ctx) -> &str {
    ctx.cfg
        .cluster
        .as_ref()
        .map_or(BROKER_NAME, |c| c.broker_name.as_str())
}

/// GET_BROKER_CLUSTER_INFO (clusterList). One broker alone: cluster `rocklet` of broker
/// `rocklet` at the remoting listener. Cluster mode: every broker group under the prefix
/// in etcd with each live node serving remoting, the master as brokerId 0 and each replica
/// by its node id ([`broker_addrs`]).
pub(super) async fn cluster_info(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    if let Some(dir) = ctx.cluster.as_ref().and_then(|v| v.directory.get()) {
        let groups = dir.groups().await.map_err(|e| {
            fail(
                req,
                status::SYSTEM_ERROR,
                format!("cannot list the cluster's broker groups: {e}"),
            )
        })?;
        let mut table = Map::new();
        let mut names = Vec::new();
        for g in &groups {
            let addrs = broker_addrs(g);
            if addrs.is_empty() {
                continue;
            }
            names.push(g.name.clone());
            table.insert(
                g.name.clone(),
                json!({
                    "cluster": BROKER_NAME,
                    "brokerName": g.name,
                    "brokerAddrs": addrs,
                    "enableActingMaster": false,
                }),
            );
        }
        let body = json!({
            "brokerAddrTable": table,
            "clusterAddrTable": { BROKER_NAME: names },
        });
        return Ok(with_body(req, body.to_string()));
    }
    let Some(addr) = ctx.broker_addr else {
        return Err(fail(
            req,
            status::SYSTEM_ERROR,
            "the remoting broker listener is off: no broker to list",
        ));
    };
    let body = json!({
        "brokerAddrTable": { BROKER_NAME: {
            "cluster": BROKER_NAME,
            "brokerName": BROKER_NAME,
            "brokerAddrs": { "0": addr.to_string() },
            "enableActingMaster": false,
        }},
        "clusterAddrTable": { BROKER_NAME: [BROKER_NAME] },
    });
    Ok(with_body(req, body.to_string()))
}

/// A group's brokerAddrs as RocketMQ numbers them: the master at 0, each replica at its
/// node id (a replica whose node id is 0 after the highest id, as 0 is the master's);
/// nodes without a remoting listener are left out, and so is a master not among the live
/// nodes.
#[must_use]
pub fn broker_addrs(g: &GroupNodes) -> Map<String, Value> {
    let master = g.master.as_ref().map(|m| m.node);
    let top = g.nodes.iter().map(|n| n.node).max().unwrap_or(0);
    let mut out = Map::new();
    for n in &g.nodes {
        let Some(addr) = n.remoting else { continue };
        let id = if Some(n.node) == master {
            0
        } else if n.node == 0 {
            top + 1
        } else {
            n.node
        };
        out.insert(id.to_string(), Value::String(addr.to_string()));
    }
    out
}

/// WIPE_WRITE_PERM_OF_BROKER (wipeWritePerm, `on` false) and ADD_WRITE_PERM_OF_BROKER
/// (addWritePerm, `on` true), which mqadmin sends to the name server: Rocklet is its own
/// name server, so the broker itself stops (or starts again) taking sends on every
/// protocol and its routes show its queues read-only (perm 4) or read-write (6). Apache's
/// name server counts the topics whose route it changed (`wipeTopicCount`,
/// `addTopicCount`): here every topic of the broker, and 0 for a broker name that is not
/// this one. Held in memory as Apache's name server holds it: a restart takes writes again.
pub(super) async fn write_perm(ctx: &Ctx, req: &RemotingCommand, on: bool) -> Answer {
    let name = required(req, "brokerName")?;
    let count = if name == own_name(ctx) {
        let n = ctx
            .core
            .inspect(|b| b.topics().len())
            .await
            .map_err(|e| core_failure(req, &e))?;
        let was = ctx.core.set_writable(on);
        if was != on {
            tracing::info!(
                broker = name,
                writable = on,
                "write permission {} (mqadmin)",
                if on { "added" } else { "wiped" }
            );
        }
        n
    } else {
        0
    };
    let mut r = ok(req);
    r.ext.insert(
        if on {
            "addTopicCount"
        } else {
            "wipeTopicCount"
        }
        .into(),
        count.to_string(),
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{MasterInfo, NodeInfo};

    fn node(n: u32, remoting: bool) -> NodeInfo {
        NodeInfo {
            node: n,
            advertise: format!("127.0.0.1:{}", 9000 + n).parse().unwrap(),
            replication: format!("127.0.0.1:{}", 9100 + n).parse().unwrap(),
            remoting: remoting.then(|| format!("127.0.0.1:{}", 9200 + n).parse().unwrap()),
        }
    }

    #[test]
    fn the_master_is_broker_0_and_replicas_go_by_node_id() {
        let master = |n: u32| MasterInfo {
            node: n,
            epoch: 1,
            advertise: format!("127.0.0.1:{}", 9000 + n).parse().unwrap(),
            replication: format!("127.0.0.1:{}", 9100 + n).parse().unwrap(),
            remoting: Some(format!("127.0.0.1:{}", 9200 + n).parse().unwrap()),
        };
        let g = GroupNodes {
            name: "g".into(),
            master: Some(master(2)),
            nodes: vec![node(1, true), node(2, true), node(3, false)],
        };
        let a = broker_addrs(&g);
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!(a["0"], "127.0.0.1:9202");
        assert_eq!(a["1"], "127.0.0.1:9201");
        // A replica with node id 0 does not take the master's slot.
        let g = GroupNodes {
            name: "g".into(),
            master: Some(master(1)),
            nodes: vec![node(0, true), node(1, true), node(4, true)],
        };
        let a = broker_addrs(&g);
        assert_eq!(a["0"], "127.0.0.1:9201");
        assert_eq!(a["5"], "127.0.0.1:9200");
        assert_eq!(a["4"], "127.0.0.1:9204");
        // No master now: the nodes are all replicas.
        let g = GroupNodes {
            name: "g".into(),
            master: None,
            nodes: vec![node(1, true)],
        };
        assert!(!broker_addrs(&g).contains_key("0"));
    }
}
