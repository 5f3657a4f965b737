//! mqadmin's requests about the broker itself: clusterList (GET_BROKER_CLUSTER_INFO),
//! wipeWritePerm / addWritePerm (WIPE_WRITE_PERM_OF_BROKER, ADD_WRITE_PERM_OF_BROKER),
//! getBrokerConfig / updateBrokerConfig (GET_BROKER_CONFIG, UPDATE_BROKER_CONFIG) and
//! getNamesrvConfig (GET_NAMESRV_CONFIG).

use serde_json::{json, Map, Value};

use super::with_body;
use crate::cluster::directory::GroupNodes;
use crate::remoting::codec::RemotingCommand;
use crate::remoting::codes::status;
use crate::remoting::conn::Ctx;
use crate::remoting::reply::{core_failure, fail, ok, required, Answer};
use crate::remoting::BROKER_NAME;

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

/// The config keys `updateBrokerConfig` changes while the broker runs: `brokerPermission`
/// (6 read and write, 4 read only: the same switch as wipeWritePerm / addWritePerm). Every
/// other key is refused by name: Rocklet reads the rest of its config when it starts.
pub const LIVE_KEYS: [&str; 1] = ["brokerPermission"];

/// Rocklet's config as `key=value` lines (Java Properties text, as GET_BROKER_CONFIG
/// answers): Apache RocketMQ's name where one means the same, Rocklet's own (the config
/// file's `section.key`) for the rest, sorted by name.
#[must_use]
pub fn config_properties(ctx: &Ctx) -> String {
    use std::collections::BTreeMap;
    let c = &ctx.cfg;
    let core = &c.core;
    let mut p: BTreeMap<&str, String> = BTreeMap::new();
    p.insert("brokerClusterName", BROKER_NAME.into());
    p.insert("brokerName", own_name(ctx).into());
    let role = match (&c.cluster, &ctx.cluster) {
        (Some(cc), Some(v)) if !v.is_master() => {
            p.insert("brokerId", cc.node_id.to_string());
            "SLAVE"
        }
        (Some(cc), _) => {
            p.insert("brokerId", "0".into());
            match cc.replication {
                crate::cluster::ReplicationMode::Sync => "SYNC_MASTER",
                crate::cluster::ReplicationMode::Async => "ASYNC_MASTER",
            }
        }
        // One broker alone: no replica to wait for.
        (None, _) => {
            p.insert("brokerId", "0".into());
            "ASYNC_MASTER"
        }
    };
    p.insert("brokerRole", role.into());
    if let Some(a) = ctx.broker_addr {
        p.insert("brokerIP1", a.ip().to_string());
        p.insert("listenPort", a.port().to_string());
    }
    if let Some(ns) = ctx.namesrv_addr {
        p.insert("namesrvAddr", ns.to_string());
    }
    p.insert(
        "brokerPermission",
        if ctx.core.writable() { "6" } else { "4" }.into(),
    );
    p.insert("storePathRootDir", c.data_dir.display().to_string());
    p.insert(
        "flushDiskType",
        match core.flush {
            rocklet_core::FlushMode::Sync => "SYNC_FLUSH",
            rocklet_core::FlushMode::Async => "ASYNC_FLUSH",
        }
        .into(),
    );
    p.insert("flushIntervalCommitLog", core.flush_interval_ms.to_string());
    p.insert("mappedFileSizeCommitLog", core.segment_size.to_string());
    p.insert("maxMessageSize", core.max_message_size.to_string());
    p.insert("autoCreateTopicEnable", core.auto_create_topics.to_string());
    p.insert("defaultTopicQueueNums", core.default_queues.to_string());
    p.insert(
        "transactionTimeOut",
        core.transaction_timeout_ms.to_string(),
    );
    p.insert(
        "transactionCheckInterval",
        core.transaction_check_interval_ms.to_string(),
    );
    p.insert(
        "transactionCheckMax",
        core.transaction_check_max.to_string(),
    );
    p.insert(
        "messageDelayLevel",
        core.delay_levels
            .iter()
            .map(|ms| delay_level(*ms))
            .collect::<Vec<_>>()
            .join(" "),
    );
    p.insert("enablePropertyFilter", c.enable_property_filter.to_string());
    p.insert(
        "diskSpaceWarningLevelRatio",
        c.disk_space_warning_level_ratio.to_string(),
    );
    p.insert("longPollingEnable", "true".into());
    // Rocklet's own, by the config file's names.
    p.insert(
        "core.max_delivery_attempts",
        core.max_delivery_attempts.to_string(),
    );
    p.insert(
        "core.default_invisible_ms",
        core.default_invisible_ms.to_string(),
    );
    p.insert("core.max_invisible_ms", core.max_invisible_ms.to_string());
    p.insert("core.max_topics", core.max_topics.to_string());
    p.insert("core.max_groups", core.max_groups.to_string());
    p.insert("core.index_keys", core.index_keys.to_string());
    p.insert("listen", c.listen.to_string());
    p.insert("max_long_polling_ms", c.max_long_polling_ms.to_string());
    p.insert("max_batch_messages", c.max_batch_messages.to_string());
    p.insert("max_connections", c.max_connections.to_string());
    p.insert("idle_timeout_ms", c.idle_timeout_ms.to_string());
    let mut out = String::new();
    for (k, v) in p {
        out.push_str(k);
        out.push('=');
        out.push_str(&v);
        out.push('\n');
    }
    out
}

/// A delay level as RocketMQ's `messageDelayLevel` writes it: `1s`, `2m`, `1h`, else `ms`.
fn delay_level(ms: u64) -> String {
    match ms {
        0 => "0s".into(),
        ms if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        ms if ms % 1_000 == 0 => format!("{}s", ms / 1_000),
        ms => format!("{ms}ms"),
    }
}

/// GET_BROKER_CONFIG (getBrokerConfig): [`config_properties`].
pub(super) fn broker_config(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    Ok(with_body(req, config_properties(ctx)))
}

/// GET_NAMESRV_CONFIG (getNamesrvConfig): the name-server role's config in Apache's names.
pub(super) fn namesrv_config(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let mut out = String::new();
    if let Some(ns) = ctx.namesrv_addr {
        out.push_str(&format!(
            "listenPort={}\nbindAddress={}\n",
            ns.port(),
            ns.ip()
        ));
    }
    // Rocklet answers for its own broker (or its cluster's, from etcd): there is no
    // registration, so no broker is ever scanned out as inactive.
    out.push_str(&format!(
        "clusterTest=false\norderMessageEnable={}\n",
        ctx.cfg.order_message_enable
    ));
    Ok(with_body(req, out))
}

/// UPDATE_BROKER_CONFIG (updateBrokerConfig): the body's `key=value` lines, each a key of
/// [`LIVE_KEYS`] with a value it takes, else the whole request is refused naming the key
/// (nothing changed). `brokerPermission` is held in memory, as wipeWritePerm holds it: a
/// restart writes again (Apache writes it into its broker.conf; Rocklet's config file
/// stays the operator's).
pub(super) fn update_broker_config(ctx: &Ctx, req: &RemotingCommand) -> Answer {
    let text = std::str::from_utf8(&req.body).map_err(|_| {
        fail(
            req,
            status::SYSTEM_ERROR,
            "the body is not UTF-8 key=value lines",
        )
    })?;
    let mut writable = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(fail(
                req,
                status::SYSTEM_ERROR,
                format!("`{line}` is no key=value line"),
            ));
        };
        let (k, v) = (k.trim(), v.trim());
        match k {
            "brokerPermission" => {
                writable = Some(match v {
                    "6" | "2" => true,
                    "4" => false,
                    _ => {
                        return Err(fail(
                            req,
                            status::SYSTEM_ERROR,
                            format!("brokerPermission {v} is not supported: 6 (read and write) or 4 (read only)"),
                        ))
                    }
                });
            }
            _ => {
                return Err(fail(
                    req,
                    status::SYSTEM_ERROR,
                    format!("broker config `{k}` cannot be changed while rocklet runs (live: {}): set it in the config file and restart", LIVE_KEYS.join(", ")),
                ))
            }
        }
    }
    if let Some(on) = writable {
        if ctx.core.set_writable(on) != on {
            tracing::info!(
                writable = on,
                "brokerPermission changed (mqadmin updateBrokerConfig)"
            );
        }
    }
    Ok(ok(req))
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
    fn delay_levels_are_written_as_rocketmq_does() {
        let w: Vec<String> = [1_000, 300_000, 7_200_000, 250, 0]
            .into_iter()
            .map(delay_level)
            .collect();
        assert_eq!(w, ["1s", "5m", "2h", "250ms", "0s"]);
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
