//! The official clients across a retention boundary (issue 31): the v4 Java client
//! (rocketmq-client 5.5.0's DefaultLitePullConsumer, broker/tests/v4-java/src/V4Retention.java)
//! and the RocketMQ 5 Python client (rocketmq-python-client's SimpleConsumer,
//! broker/tests/v4-python/v5_client.py), both unmodified, against the `rocklet` binary.
//!
//! Both clients send into a one-queue topic of 64 KiB segments; groups read; then the broker
//! restarts with a retention that retires every sealed segment at once, and again with the
//! default retention (72 hours, so nothing more goes during the checks). Then:
//! - a Java group that never read and one that committed only the first 10 offsets (both now
//!   below the queue's new first offset) start at the new first offset — the broker answers
//!   as RocketMQ does (QUERY_NOT_FOUND, PULL_OFFSET_MOVED with nextBeginOffset) and the client
//!   moves there by itself — and read every retained message once, each at the queue offset
//!   and with the message id its send result named before retention;
//! - after more sends by both clients, a Java group that had read everything before gets
//!   exactly the new messages: nothing lost, nothing twice; so does a Python group (nothing it
//!   had acked is given again);
//! - a new Python group gets exactly the retained messages and the new ones, by the ids the
//!   clients were given when they sent them.
//!
//! `#[ignore]`d in a plain `cargo test`: it needs a JDK with the client's jars and
//! V4Retention compiled (`ROCKLET_V4_CLASSPATH`) and a Python with rocketmq-python-client
//! (`ROCKLET_PYTHON`), which `bash tests/ci/java.sh` installs and passes.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::BrokerProc;

const TOPIC: &str = "RtClients";
const V5_CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/v4-python/v5_client.py");

/// A message as a client saw it: its id and queue offset.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    id: String,
    offset: u64,
}

struct Clients {
    python: String,
    classpath: String,
}

impl Clients {
    /// `V4Retention <ns> <args>`: its `SENT`/`GOT` lines as (body id, what it saw), in order.
    fn java(&self, ns: &str, args: &[&str]) -> Vec<(String, Seen)> {
        let out = Command::new("java")
            .args(["-cp", &self.classpath, "V4Retention", ns])
            .args(args)
            .output()
            .expect("java runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "V4Retention {args:?} failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split(' ').collect();
                match w.as_slice() {
                    ["SENT" | "GOT", body, id, queue, offset] => {
                        assert_eq!(*queue, "0", "a one-queue topic: {l}");
                        Some((
                            body.to_string(),
                            Seen {
                                id: id.to_string(),
                                offset: offset.parse().unwrap(),
                            },
                        ))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// `v5_client.py <args>`: its JSON answer.
    fn python(&self, args: &[&str]) -> serde_json::Value {
        let out = Command::new(&self.python)
            .arg(V5_CLIENT)
            .args(args)
            .output()
            .expect("python runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "v5_client.py {args:?} failed:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(text.lines().last().unwrap_or_default()).unwrap()
    }

    /// Sends `bodies` with the Python client: (body id, message id) in order.
    fn py_send(&self, addr: &str, bodies: &[String]) -> Vec<(String, String)> {
        let mut args = vec!["send", addr, TOPIC, "T"];
        args.extend(bodies.iter().map(String::as_str));
        let ids = self.python(&args);
        let ids = ids.as_array().unwrap();
        assert_eq!(ids.len(), bodies.len());
        bodies
            .iter()
            .zip(ids)
            .map(|(b, id)| (b.clone(), id.as_str().unwrap().to_string()))
            .collect()
    }

    /// What a Python group receives (and acks): (body id, message id), asking for `count`.
    fn py_receive(&self, addr: &str, group: &str, count: usize) -> Vec<(String, String)> {
        let got = self.python(&["receive", addr, TOPIC, group, &count.to_string()]);
        got.as_array()
            .unwrap()
            .iter()
            .map(|m| {
                let body = m["body"].as_str().unwrap();
                let body = body.split(' ').next().unwrap().to_string();
                (body, m["id"].as_str().unwrap().to_string())
            })
            .collect()
    }
}

/// The name server's address, from the broker's log.
fn namesrv(p: &BrokerProc) -> String {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let log = p.log();
        if let Some(i) = log.find("namesrv=Some(") {
            let rest = &log[i + "namesrv=Some(".len()..];
            return rest[..rest.find(')').unwrap()].to_string();
        }
        assert!(Instant::now() < until, "no name server address in:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn write(path: &Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// Every body id once, in offset order, from what a consumer printed.
fn by_offset(got: &[(String, Seen)], who: &str) -> Vec<(u64, String, String)> {
    let mut out: Vec<(u64, String, String)> = got
        .iter()
        .map(|(b, s)| (s.offset, b.clone(), s.id.clone()))
        .collect();
    out.sort();
    let bodies: BTreeSet<&String> = out.iter().map(|x| &x.1).collect();
    assert_eq!(
        bodies.len(),
        out.len(),
        "{who} got a message twice: {out:?}"
    );
    out
}

#[test]
#[ignore = "needs a JDK with the v4 client and Python with the v5 client: tests/ci/java.sh"]
fn official_clients_read_across_a_retention_boundary_with_the_right_offsets() {
    let clients = Clients {
        python: std::env::var("ROCKLET_PYTHON")
            .expect("ROCKLET_PYTHON: a Python with rocketmq-python-client (tests/ci/java.sh)"),
        classpath: std::env::var("ROCKLET_V4_CLASSPATH").expect(
            "ROCKLET_V4_CLASSPATH: the v4 client's jars and V4Retention (tests/ci/java.sh)",
        ),
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let common = format!(
        "disk_max_used_space_ratio = 1.0\ndisk_space_clean_forcibly_ratio = 1.0\n\
         disk_space_warning_level_ratio = 1.0\n\
         [core]\nflush = \"sync\"\nsegment_size = 65536\nmax_message_size = 8192\n\
         max_batch_size = 8192\n[[topics]]\nname = \"{TOPIC}\"\nqueues = 1\n"
    );
    let keep = write(&tmp.path().join("keep.toml"), &common);
    let hours: Vec<String> = (0..24).map(|h| format!("{h:02}")).collect();
    let retire = write(
        &tmp.path().join("retire.toml"),
        &format!(
            "file_reserved_time_hours = 0.0001\ndelete_when = \"{}\"\n\
             retention_check_interval_ms = 50\n{common}",
            hours.join(";")
        ),
    );

    // Before retention: 60 messages of 3 KB from Java, 20 small ones from Python.
    let p = BrokerProc::start(&data, &["--config", &keep]);
    let (ns, addr) = (namesrv(&p), p.addr.to_string());
    let mut sent: BTreeMap<String, Seen> = clients
        .java(&ns, &["send", TOPIC, "60", "J", "3000"])
        .into_iter()
        .collect();
    let offsets: Vec<u64> = (0..60).map(|i| sent[&format!("J{i}")].offset).collect();
    assert_eq!(offsets, (0..60).collect::<Vec<u64>>());
    let py_bodies: Vec<String> = (0..20).map(|i| format!("P{i}")).collect();
    let mut py_ids: BTreeMap<String, String> =
        clients.py_send(&addr, &py_bodies).into_iter().collect();
    // A Java group reads everything (the Python sends' offsets are what it sees), one group
    // reads the first 10 offsets only, a Python group reads everything.
    let caught = by_offset(
        &clients.java(&ns, &["pull", TOPIC, "JCaught", "80", "3000"]),
        "JCaught",
    );
    assert_eq!(caught.len(), 80, "{caught:?}");
    for (i, (offset, body, id)) in caught.iter().enumerate() {
        assert_eq!(*offset, i as u64);
        match sent.get(body) {
            Some(s) => assert_eq!(
                s,
                &Seen {
                    id: id.clone(),
                    offset: *offset
                },
                "{body}"
            ),
            None => {
                assert_eq!(
                    py_ids.get(body),
                    Some(id),
                    "{body}: the id its send returned"
                );
                sent.insert(
                    body.clone(),
                    Seen {
                        id: id.clone(),
                        offset: *offset,
                    },
                );
            }
        }
    }
    let behind = clients.java(&ns, &["pull", TOPIC, "JBehind", "10", "3000"]);
    let behind_end = behind.iter().map(|(_, s)| s.offset + 1).max().unwrap();
    let py_caught = clients.py_receive(&addr, "PyCaught", 80);
    let once: BTreeSet<&String> = py_caught.iter().map(|m| &m.0).collect();
    assert!(
        py_caught.len() == 80 && once.len() == 80,
        "PyCaught: each of 80 once: {py_caught:?}"
    );
    for (body, id) in &py_caught {
        assert_eq!(&sent[body].id, id, "{body}");
    }
    let (status, log) = p.term();
    assert!(status.success(), "{log}");

    // Retention: every sealed segment goes.
    let p = BrokerProc::start(&data, &["--config", &retire]);
    let until = Instant::now() + Duration::from_secs(20);
    while !p
        .log()
        .contains("log retention retired the oldest segments")
    {
        assert!(
            Instant::now() < until,
            "retention did not run:\n{}",
            p.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (status, log) = p.term();
    assert!(status.success(), "{log}");

    // After: the default retention, nothing more goes.
    let p = BrokerProc::start(&data, &["--config", &keep]);
    let (ns, addr) = (namesrv(&p), p.addr.to_string());
    // A group that never read starts at the new first offset; so does one below it.
    let fresh = by_offset(
        &clients.java(&ns, &["pull", TOPIC, "JFresh", "80", "3000"]),
        "JFresh",
    );
    let min = fresh.first().expect("the retained messages").0;
    assert!(
        min > behind_end && min < 80,
        "retention moved the first offset past JBehind's ({behind_end}): {min}"
    );
    let retained: Vec<(u64, String, String)> = (min..80)
        .map(|o| {
            let (b, s) = sent.iter().find(|(_, s)| s.offset == o).unwrap();
            (o, b.clone(), s.id.clone())
        })
        .collect();
    assert_eq!(
        fresh, retained,
        "JFresh: every retained message once, as sent"
    );
    let behind = by_offset(
        &clients.java(&ns, &["pull", TOPIC, "JBehind", "80", "3000"]),
        "JBehind",
    );
    assert_eq!(
        behind, retained,
        "JBehind: moved to the first offset by the broker's answer"
    );

    // More sends by both; the groups that had read everything get exactly those.
    let more: BTreeMap<String, Seen> = clients
        .java(&ns, &["send", TOPIC, "10", "K", "3000"])
        .into_iter()
        .collect();
    let q_bodies: Vec<String> = (0..10).map(|i| format!("Q{i}")).collect();
    let q = clients.py_send(&addr, &q_bodies);
    py_ids.extend(q.iter().cloned());
    let caught = by_offset(
        &clients.java(&ns, &["pull", TOPIC, "JCaught", "100", "3000"]),
        "JCaught",
    );
    assert_eq!(caught.len(), 20, "JCaught after retention: {caught:?}");
    for (i, (offset, body, id)) in caught.iter().enumerate() {
        assert_eq!(*offset, 80 + i as u64, "{body}");
        match more.get(body) {
            Some(s) => assert_eq!(
                s,
                &Seen {
                    id: id.clone(),
                    offset: *offset
                },
                "{body}"
            ),
            None => assert_eq!(py_ids.get(body), Some(id), "{body}"),
        }
    }
    let new_ids: BTreeSet<(String, String)> = caught
        .iter()
        .map(|(_, b, id)| (b.clone(), id.clone()))
        .collect();
    // The Python group gets every new message, by the ids their sends returned, and nothing
    // it acked before the restarts (its place in each queue is in LOG_START from version 2).
    let py_caught: Vec<(String, String)> = clients.py_receive(&addr, "PyCaught", 20);
    let got: BTreeSet<(String, String)> = py_caught.iter().cloned().collect();
    assert_eq!(
        got.len(),
        py_caught.len(),
        "PyCaught, nothing twice now: {py_caught:?}"
    );
    assert!(
        got.is_superset(&new_ids),
        "PyCaught lost new messages: {py_caught:?}"
    );
    let again: Vec<&(String, String)> = got.difference(&new_ids).collect();
    assert!(
        again.is_empty(),
        "PyCaught was given again what it acked before the restarts: {again:?}"
    );
    eprintln!(
        "PyCaught after retention: {} new messages, none it acked given again",
        new_ids.len(),
    );
    let want = (100 - min) as usize;
    let py_fresh = clients.py_receive(&addr, "PyFresh", want);
    assert_eq!(py_fresh.len(), want, "PyFresh, nothing twice: {py_fresh:?}");
    let mut expect: BTreeSet<(String, String)> = retained
        .iter()
        .map(|(_, b, id)| (b.clone(), id.clone()))
        .collect();
    expect.extend(new_ids.iter().cloned());
    assert_eq!(py_fresh.into_iter().collect::<BTreeSet<_>>(), expect);
    let (status, log) = p.term();
    assert!(status.success(), "{log}");
}
