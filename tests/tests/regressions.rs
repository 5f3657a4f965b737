//! Replays the fuzzers' regression inputs (`tests/vectors/regressions/<target>/*`, each a
//! minimized input that once broke an invariant) for the decoder and recovery targets,
//! through the very checks the fuzz targets run (`tests/fuzz/src/checks.rs`, included here
//! so stable `cargo test` covers them without cargo-fuzz). The `state_machine` inputs are
//! replayed by `tests/ci/fuzz.sh`, which needs the fuzz crate's `arbitrary` decoding.

#[path = "../fuzz/src/checks.rs"]
#[allow(dead_code)]
mod checks;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

type Check = fn(&[u8]);

const TARGETS: [(&str, Check); 4] = [
    ("record_decode", checks::record_decode),
    ("props_decode", checks::props_decode),
    ("batch_decode", checks::batch_decode),
    ("log_recovery", checks::log_recovery),
];

/// Runs every input of one target; returns the names of those that fail.
fn replay(target: &str, check: Check) -> (usize, Vec<String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("vectors/regressions")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (0, Vec::new());
    };
    let mut files: Vec<_> = entries.map(|e| e.expect("readable dir").path()).collect();
    files.sort();
    let mut failed = Vec::new();
    for f in &files {
        let data = std::fs::read(f).expect("readable regression input");
        if catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() {
            failed.push(format!(
                "{target}/{}",
                f.file_name().unwrap().to_string_lossy()
            ));
        }
    }
    (files.len(), failed)
}

#[test]
fn fuzz_regressions_stay_fixed() {
    let mut failed = Vec::new();
    let mut total = 0;
    for (target, check) in TARGETS {
        let (n, f) = replay(target, check);
        total += n;
        failed.extend(f);
    }
    assert!(total > 0, "no regression inputs found");
    assert!(failed.is_empty(), "regression inputs that fail: {failed:?}");
}

/// The checks are not vacuous: inputs that must pass do, and a record that re-encodes
/// differently (hand-made here) is caught.
#[test]
fn checks_accept_good_inputs_and_catch_bad_ones() {
    // Empty and tiny inputs of every target pass.
    for (target, check) in TARGETS {
        for input in [&[][..], &[0][..], &[1, 2, 3][..], &[0xFF; 64][..]] {
            assert!(
                catch_unwind(AssertUnwindSafe(|| check(input))).is_ok(),
                "{target} rejects {input:?}"
            );
        }
    }
    // props_decode: valid and invalid strings alike pass (they agree).
    checks::props_decode(b"a\x01b\x02KEYS\x01k1 k2\x02");
    checks::props_decode(b"\x01b\x02");
    // batch_decode: three intact records, the second opening a group of two.
    checks::batch_decode(&[3, 0, 4, b'a', b'b', b'c', b'd', 1, 2, 0, 0, 0]);
    // record_decode repairs a record (mode 0) whose every field is fine: it re-encodes.
    let mut rec = vec![0u8; 1 + 111];
    rec[1 + 53] = 0; // port field upper bytes zero
    checks::record_decode(&rec);
}

/// Found by the `state_machine` target (tests/vectors/regressions/state_machine/
/// delay-due-during-failed-sync): under sync flush, a delayed message whose delivery is
/// written by the timers of a request whose sync then fails stays invisible, though storage
/// is healthy again, until some later request writes: `execute` and `handle_timeout` sync
/// only when the call itself appended. Since a failed sync fails the broker for good, the
/// message must come back from the reopened log instead.
#[test]
fn a_delivery_written_during_a_failed_sync_becomes_visible_once_storage_recovers() {
    use rocklet_core::testing::CrashStorage;
    use rocklet_core::{Broker, Config, Delay, FlushMode, NewMessage, Reply, Request, TagFilter};

    let cfg = Config {
        flush: FlushMode::Sync,
        default_queues: 1,
        ..Config::default()
    };
    let mut b = Broker::open(cfg, CrashStorage::new(), 0).unwrap();
    let delayed = NewMessage::new("T", b"due now".to_vec()).with_delay(Delay::After(0));
    let r = b
        .execute(
            0,
            Request::Send {
                messages: vec![delayed],
            },
        )
        .unwrap();
    assert!(matches!(r, Reply::Sent(_)), "{r:?}");
    // The next request fires the delivery, then its sync fails.
    b.storage_mut().fail_syncs = true;
    let other = NewMessage::new("T", b"fails".to_vec());
    assert!(b
        .execute(
            0,
            Request::Send {
                messages: vec![other]
            }
        )
        .is_err());
    // A failed sync fails the broker (Linux may have dropped the pages it could not write):
    // the host opens it again, and recovery delivers the acknowledged message anew.
    assert!(b.failed().is_some());
    let mut b = Broker::open(
        b.config().clone(),
        CrashStorage::from_mem(b.storage().crash()),
        1_000,
    )
    .unwrap();
    b.handle_timeout(1_000).unwrap();
    let pull = Request::Pull {
        group: "G".into(),
        topic: "T".into(),
        queue_id: 0,
        offset: Some(0),
        max: 16,
        filter: TagFilter::All,
        auto_commit: false,
    };
    let Reply::Pulled { messages, .. } = b.execute(1_000, pull).unwrap() else {
        panic!("pull failed");
    };
    assert!(
        messages.iter().any(|m| m.body == b"due now"),
        "the acknowledged delayed message is not visible: {:?}",
        messages.iter().map(|m| &m.body).collect::<Vec<_>>()
    );
}

/// Found by the `log_recovery` target (tests/vectors/regressions/log_recovery/
/// state-record-queue-id-out-of-range): a consumer-state record names its queue id, and
/// applying it created every queue up to that id (millions from one record; `u32::MAX`
/// overflowed). A client reached the same path: CommitOffset on a topic that did not exist
/// yet accepted any queue id. Then the `state_machine` target (regressions/state_machine/
/// offset-commit-created-topic) found that even a small queue id created the topic, with
/// `queue_id + 1` queues instead of the configured count: an offset commit for a topic that
/// does not exist is now refused, and one for a queue the topic lacks too.
#[test]
fn commit_offset_with_an_out_of_range_queue_is_refused_not_a_panic() {
    use rocklet_core::{Broker, ClientError, Config, MemStorage, NewMessage, Reply, Request};

    let mut b = Broker::open(Config::default(), MemStorage::new(), 0).unwrap();
    let commit = |b: &mut Broker<MemStorage>, topic: &str, queue_id: u32| {
        b.execute(
            0,
            Request::CommitOffset {
                group: "G".into(),
                topic: topic.into(),
                queue_id,
                offset: 7,
            },
        )
        .unwrap()
    };
    for queue_id in [u32::MAX, 3_000_000, 1024, 3, 0] {
        let r = commit(&mut b, "NotYetATopic", queue_id);
        assert!(
            matches!(r, Reply::Error(ClientError::UnknownTopic(_))),
            "queue {queue_id}: {r:?}"
        );
    }
    assert!(b.topics().is_empty(), "{:?}", b.topics());
    let sent = b
        .execute(
            0,
            Request::Send {
                messages: vec![NewMessage::new("NowATopic", "x")],
            },
        )
        .unwrap();
    assert!(matches!(sent, Reply::Sent(_)), "{sent:?}");
    let queues = b.topics()[0].queues.len() as u32;
    for queue_id in [u32::MAX, 3_000_000, queues] {
        let r = commit(&mut b, "NowATopic", queue_id);
        assert!(
            matches!(r, Reply::Error(ClientError::InvalidQueue { .. })),
            "queue {queue_id}: {r:?}"
        );
    }
    assert_eq!(b.topics()[0].queues.len() as u32, queues);
    assert_eq!(
        commit(&mut b, "NowATopic", queues - 1),
        Reply::OffsetCommitted
    );
}
