//! The shipped alert rules (broker/packaging/alerts/rocklet-alerts.yml) name only metrics the
//! broker exports: a running broker's scrape, plus what cluster mode adds (rendered from a
//! master's view with one replica, as a cluster node renders it). `promtool test rules`
//! checks what the rules do with them (tests/ci/alerts.sh).

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use common::*;
use rocklet_broker::cluster::{render_metrics, ClusterView, ReplicaLag};
use rocklet_broker::pb::v2 as pb;

const RULES: &str = include_str!("../packaging/alerts/rocklet-alerts.yml");

/// Every `rocklet_…` name the rules file uses, comments left out.
fn named_by_rules() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in RULES.lines() {
        let code = line.split('#').next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("rocklet_") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            names.insert(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    names
}

/// The sample names of a Prometheus text exposition.
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn every_metric_an_alert_names_is_exported() {
    let names = named_by_rules();
    assert!(
        names.len() >= 15,
        "the rules name too few metrics ({names:?}): did the file move?"
    );

    let b =
        TestBroker::start_with(|c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let mut client = b.client.clone();
    send_ok(
        &mut client,
        msg("Alerts", b"x", pb::MessageType::Normal, "ID-ALERTS"),
    )
    .await;
    let addr = b.broker.as_ref().unwrap().metrics_addr.unwrap();
    let host = addr.to_string();
    let (status, _, body) =
        common::web::exchange(addr, "GET", "/metrics", &[("Host", &host)], None).await;
    assert_eq!(status, 200);
    let mut exported = sample_names(&String::from_utf8(body).unwrap());
    b.stop().await;

    // Cluster mode's metrics, as a master with one replica renders them.
    let view = ClusterView::default();
    view.master_epoch.store(3, Ordering::Relaxed);
    view.replicas.write().unwrap().push(ReplicaLag {
        node: 2,
        acked: 0,
        lag_bytes: 10,
        lag_ms: 5,
        in_sync: true,
    });
    let mut cluster = String::new();
    render_metrics(&view, &mut cluster);
    exported.extend(sample_names(&cluster));

    let missing: Vec<_> = names.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the alert rules name metrics the broker does not export: {missing:?}"
    );
}
