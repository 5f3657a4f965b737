//! Config, inputs and views: key naming, refusals with their texts, the JS views' shapes,
//! error kinds and codes.

use super::*;

fn entries(kv: &[(&str, config::Value)]) -> Vec<(String, config::Value)> {
    kv.iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

#[test]
fn config_reads_keys_in_the_hosts_naming_and_keeps_defaults() {
    use config::{Naming, Value};
    let base = Config::default();
    let snake = entries(&[("transaction_timeout_ms", Value::from(5u64))]);
    let c = config::config(&base, snake, Naming::Snake, &[], &[]).unwrap();
    assert_eq!(c.transaction_timeout_ms, 5);
    assert_eq!(c.segment_size, base.segment_size);
    let camel = entries(&[("transactionTimeoutMs", Value::from(7u64))]);
    let c = config::config(&base, camel, Naming::Camel, &[], &[]).unwrap();
    assert_eq!(c.transaction_timeout_ms, 7);
    // The other naming is not accepted: a key is spelt one way per host.
    let wrong = entries(&[("transaction_timeout_ms", Value::from(7u64))]);
    let e = config::config(&base, wrong, Naming::Camel, &["path"], &[]).unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with("unknown option `transaction_timeout_ms` (known: path, "));
    assert!(text.contains("transactionTimeoutMs"), "{text}");
}

#[test]
fn config_errors_name_the_key_and_hidden_fields_are_unknown() {
    use config::{ConfigFail, Naming, Value};
    let base = Config {
        notify_available: true,
        ..Config::default()
    };
    let bad = entries(&[("flush", Value::from("sometimes"))]);
    match config::config(&base, bad, Naming::Snake, &[], &[]).unwrap_err() {
        ConfigFail::Invalid { key, reason } => {
            assert_eq!(key, "flush");
            assert!(!reason.is_empty());
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    let hidden = entries(&[("notifyAvailable", Value::from(false))]);
    let e = config::config(&base, hidden, Naming::Camel, &[], &["notify_available"]);
    assert!(matches!(e, Err(ConfigFail::Unknown { ref key, ref known })
        if key == "notifyAvailable" && !known.contains("notifyAvailable")));
    // The base's own values stay.
    let c = config::config(&base, Vec::new(), Naming::Camel, &[], &[]).unwrap();
    assert!(c.notify_available);
}

#[test]
fn a_message_input_refuses_two_delays() {
    let m = input::MessageInput {
        topic: "T".into(),
        body: input::Body(b"x".to_vec()),
        tag: None,
        keys: None,
        properties: None,
        queue_id: None,
        message_id: None,
        message_group: None,
        delay_level: Some(1),
        deliver_at_ms: Some(5),
        delay_ms: None,
        born_timestamp: None,
        flag: None,
    };
    assert_eq!(
        m.into_message().unwrap_err(),
        "give at most one of delayLevel, deliverAtMs, delayMs"
    );
    let fields = input::field_names::<input::PullInput>();
    assert!(fields.contains(&"queueId") && fields.contains(&"autoCommit"));
}

#[test]
fn views_use_camel_case_and_keep_the_stats_order() {
    let mut h = host();
    send_one(&mut h, msg("T", "a", 1)).unwrap();
    let stats = h.core().unwrap().stats();
    let v = serde_json::to_value(view::stats(&stats)).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert!(keys.contains(&"messagesStored") && keys.contains(&"clientErrors"));
    assert_eq!(v["messagesStored"], 1);
    assert_eq!(view::stats_fields(&stats)[0], ("messages_stored", 1));
    let sent = send_one(&mut h, msg("T", "b", 2)).unwrap();
    let v = serde_json::to_value(view::send_result(&sent)).unwrap();
    assert_eq!(v["queueId"], 2);
    assert!(v["txn"].is_null());
}

#[test]
fn a_decoded_record_names_its_offset_when_the_bytes_are_not_one() {
    let e = view::decoded_record(42, &[0u8; 3]).err().unwrap();
    assert!(e.starts_with("record at 42: "), "{e}");
    let mut h = host();
    send_one(&mut h, msg("T", "hello", 0)).unwrap();
    let recs = h.core_mut().unwrap().raw_records(0, 1).unwrap();
    let (off, bytes) = &recs[0];
    let v = serde_json::to_value(view::decoded_record(*off, bytes).ok().unwrap()).unwrap();
    assert_eq!(v["topic"], "T");
    assert_eq!(v["body"], "hello");
    assert_eq!(v["fields"][0]["name"], "TOTALSIZE");
}

#[test]
fn range_checks_have_one_text() {
    assert_eq!(
        arg::int_u32("delay_level", -1).unwrap_err(),
        "delay_level must be a whole number from 0 to 4294967295, not -1"
    );
    assert_eq!(
        arg::number_u32("queueId", 1.5).unwrap_err(),
        "queueId must be a whole number from 0 to 4294967295, not 1.5"
    );
    assert_eq!(arg::int_u32("q", 7), Ok(7));
    assert_eq!(arg::number("ms", 5.0, u64::MAX), Ok(5));
    // JS numbers stop at 2^53 - 1, whatever the type could hold.
    assert!(arg::number("ms", 9_007_199_254_740_992.0, u64::MAX).is_err());
    assert!(arg::number("ms", f64::NAN, u64::MAX).is_err());
    assert_eq!(
        arg::int("offset", i128::from(u64::MAX), u64::MAX),
        Ok(u64::MAX)
    );
}

#[test]
fn failures_have_a_kind_and_a_code() {
    let mut h = host();
    let mut offset_without_queue = pull_args(None, 1);
    offset_without_queue.offset = Some(0);
    let e = pull(&mut h, offset_without_queue).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Argument);
    assert_eq!(e.kind().code(), "INVALID_ARGUMENT");
    h.close().unwrap();
    let e = send_one(&mut h, msg("T", "a", 0)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Closed);
    let failed: rocklet_core::Error<()> = rocklet_core::Error::Failed { reason: "x".into() };
    assert_eq!(ErrorKind::of(&failed).code(), "FAILED");
}

#[test]
fn subscriptions_by_id_ack_on_next_and_refuse_an_id_not_open() {
    let mut h = host();
    let mut subs = Subscriptions::default();
    let a = subs.open(Subscription::new(
        "G".into(),
        "T".into(),
        1000,
        1,
        TagFilter::All,
    ));
    let b = subs.open(Subscription::new(
        "H".into(),
        "T".into(),
        1000,
        1,
        TagFilter::All,
    ));
    assert_ne!(a, b);
    // Before the topic exists: nothing yet, no error.
    assert!(subs.next(a, &mut h).unwrap().is_none());
    send_one(&mut h, msg("T", "one", 0)).unwrap();
    send_one(&mut h, msg("T", "two", 0)).unwrap();
    let first = subs.next(a, &mut h).unwrap().unwrap();
    assert_eq!(first.message.body, b"one");
    assert_eq!(h.core().unwrap().inflight_count("G", "T"), 1);
    // Asking for the next acks the one before.
    let second = subs.next(a, &mut h).unwrap().unwrap();
    assert_eq!(second.message.body, b"two");
    assert_eq!(h.core().unwrap().inflight_count("G", "T"), 1);
    // Stopped: the current message stays un-acked, and the id is gone.
    subs.stop(a);
    assert_eq!(h.core().unwrap().inflight_count("G", "T"), 1);
    let e = subs.next(a, &mut h).unwrap_err();
    assert!(
        matches!(&e, Fail::Argument(w) if w == "no open subscription 0"),
        "{e:?}"
    );
    // The other group's subscription sees both messages on its own.
    assert_eq!(subs.next(b, &mut h).unwrap().unwrap().message.body, b"one");
    subs.clear();
    assert!(matches!(subs.next(b, &mut h), Err(Fail::Argument(_))));
    assert_eq!(arg::limit(None), usize::MAX);
    assert_eq!(arg::limit(Some(3)), 3);
}

#[cfg(feature = "std")]
mod shared {
    use super::*;

    /// The test's own failure type, as a binding would define it.
    #[derive(Debug, PartialEq)]
    enum F {
        Host(String),
        Broken(String),
        Panic(String),
        Failed(String),
    }

    impl From<crate::engine::EngineFail<MemStorage>> for F {
        fn from(e: crate::engine::EngineFail<MemStorage>) -> Self {
            F::Host(e.to_string())
        }
    }

    impl SharedFail<MemStorage> for F {
        fn broken(why: String) -> Self {
            F::Broken(why)
        }
        fn panic(why: String) -> Self {
            F::Panic(why)
        }
        fn failed(reason: String) -> Self {
            F::Failed(reason)
        }
    }

    fn shared(flush: FlushMode) -> Shared<MemStorage, ManualClock> {
        let c = Config { flush, ..cfg() };
        Shared::new(
            Engine::open(c, MemStorage::new(), ManualClock::new(0), false).unwrap(),
            true,
        )
    }

    fn send(s: &Shared<MemStorage, ManualClock>, body: &str) -> Result<(Reply, bool), F> {
        s.request(Request::Send {
            messages: vec![msg("T", body, 0)],
        })
    }

    #[test]
    fn writers_on_many_threads_are_all_answered_under_sync_flush() {
        let s = shared(FlushMode::Sync);
        std::thread::scope(|scope| {
            for t in 0..4 {
                let s = &s;
                scope.spawn(move || {
                    for i in 0..10 {
                        let (reply, _) = send(s, &std::format!("{t}-{i}")).unwrap();
                        assert!(
                            matches!(reply, Reply::Sent(ref v) if v.len() == 1),
                            "{reply:?}"
                        );
                    }
                });
            }
        });
        let stored = s.read::<_, F>(|c| c.stats().messages_stored).unwrap();
        assert_eq!(stored, 40);
    }

    #[test]
    fn a_panic_breaks_the_broker_and_every_later_call_says_so() {
        let s = shared(FlushMode::Async);
        let r: Result<(), F> = s.with(|_| panic!("boom"));
        assert_eq!(r, Err(F::Panic("boom".into())));
        let after = send(&s, "x").unwrap_err();
        assert_eq!(after, F::Broken("internal error: boom".into()));
        // Closing a broken broker releases it without syncing.
        assert_eq!(s.shut::<F>(), Ok(()));
        assert!(s.peek(|h| h.is_closed()));
    }

    type Ask<'a> = &'a mut dyn FnMut(&rocklet_core::CheckRequest) -> Option<Resolution>;

    #[test]
    fn manual_drive_answers_each_check_at_its_time_without_holding_the_mutex() {
        let s = shared(FlushMode::Async);
        s.with::<_, F>(|h| Ok(h.set_producer_online("P", true)?))
            .unwrap();
        let mut seen = Vec::new();
        let mut ask = |c: &rocklet_core::CheckRequest| {
            // The mutex is free while a checker runs: it may call the broker.
            seen.push((c.check, s.peek(|h| h.now())));
            Some(if c.check < 2 {
                Resolution::Unknown
            } else {
                Resolution::Commit
            })
        };
        let tx = {
            let mut ep = s.endpoint::<_, Ask<'_>, F>(NoLock, &mut ask);
            prepare(&mut ep, "P".into(), NewMessage::new("T", "half"), None).unwrap()
        };
        s.run_drive::<F>(&NoLock, Drive::to(2500), &mut ask)
            .unwrap();
        assert_eq!(seen, [(1, 1000), (2, 2000)]);
        assert_eq!(s.peek(|h| h.now()), 2500);
        let pending = s.read::<_, F>(|c| c.pending_transaction_count()).unwrap();
        assert_eq!(pending, 0);
        // Ended by the checker: ending it again is a duplicate.
        let mut none = |_: &rocklet_core::CheckRequest| None;
        let mut ep = s.endpoint::<_, Ask<'_>, F>(NoLock, &mut none);
        assert!(tx.end(&mut ep, Resolution::Commit).unwrap());
    }

    #[test]
    fn a_failing_or_panicking_checker_is_reported_and_answered_unknown() {
        let s: Shared<MemStorage, ManualClock, u8> = Shared::new(
            Engine::open(cfg(), MemStorage::new(), ManualClock::new(0), false).unwrap(),
            true,
        );
        // Checker 0 fails, 1 panics, 2 commits; a checker may set checkers meanwhile.
        for (g, k) in [("A", 0), ("B", 1), ("C", 2)] {
            s.set_checker::<F>(&NoLock, g, Some(k)).unwrap();
        }
        let mut reports = Vec::new();
        let mut ask = s.asker(
            |k| *k,
            |k, c| match k {
                0 => Err("no database"),
                1 => panic!("checker bug"),
                _ => {
                    s.set_checker::<F>(&NoLock, &c.group, Some(2)).unwrap();
                    Ok(Resolution::Commit)
                }
            },
            |f| reports.push((f.to_string(), f.error().copied())),
        );
        // A real check to ask about, from another host.
        let mut h = host();
        h.set_producer_online("P", true).unwrap();
        prepare(&mut h, "P".into(), NewMessage::new("T", "half"), None).unwrap();
        let sample = Drive::to(1000).next(&mut h).unwrap().remove(0).0;
        let txn = sample.txn;
        let check = |group: &str| rocklet_core::CheckRequest {
            group: group.into(),
            ..sample.clone()
        };
        assert_eq!(ask(&check("A")), Some(Resolution::Unknown));
        assert_eq!(ask(&check("B")), Some(Resolution::Unknown));
        assert_eq!(ask(&check("C")), Some(Resolution::Commit));
        assert_eq!(ask(&check("D")), None);
        drop(ask);
        assert_eq!(
            reports,
            [
                (
                    std::format!("checker of producer group `A` failed on transaction {txn}; it stays pending and will be checked again"),
                    Some("no database")
                ),
                (
                    std::format!("checker of `B` on {txn}: internal error checker bug"),
                    None
                ),
            ]
        );
    }

    #[test]
    fn a_waiting_subscription_times_out_then_gets_what_arrives() {
        let s = shared(FlushMode::Async);
        let mut none = |_: &rocklet_core::CheckRequest| None;
        let mut sub = Subscription::new("G".into(), "T".into(), 1000, 1, TagFilter::All);
        let slice = core::time::Duration::from_millis(10);
        let t0 = std::time::Instant::now();
        let deadline = Some(t0 + core::time::Duration::from_millis(50));
        let mut ep = s.endpoint::<_, Ask<'_>, F>(NoLock, &mut none);
        let mut waits = 0;
        let got = s.next_waiting(&NoLock, &mut sub, &mut ep, deadline, slice, || {
            waits += 1;
            Ok(())
        });
        assert!(got.unwrap().is_none());
        assert!(t0.elapsed() >= core::time::Duration::from_millis(50));
        // It sleeps between tries: about one a slice, not a spin (its own empty receive is no
        // change to wake it; it made thousands when every reply woke it).
        assert!(
            (1..=8).contains(&waits),
            "{waits} tries in 50 ms of 10 ms slices"
        );
        // `between` failing ends the wait with its failure.
        let got = s.next_waiting(&NoLock, &mut sub, &mut ep, None, slice, || {
            Err(Fail::Host(F::Broken("interrupted".into())))
        });
        assert!(matches!(got, Err(Fail::Host(F::Broken(w))) if w == "interrupted"));
        // No deadline: it waits until a send (on another thread) wakes it.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(core::time::Duration::from_millis(30));
                send(&s, "late").unwrap();
            });
            let r = s.next_waiting(&NoLock, &mut sub, &mut ep, None, slice, || Ok(()));
            let r = r.unwrap().expect("the message sent meanwhile");
            assert_eq!(r.message.body, b"late");
        });
        // A closed broker ends the wait.
        s.shut::<F>().unwrap();
        let got = s.next_waiting(&NoLock, &mut sub, &mut ep, None, slice, || Ok(()));
        assert!(got.unwrap().is_none());
    }

    #[test]
    fn the_driver_thread_answers_checks_on_time_and_close_joins_it() {
        use core::sync::atomic::{AtomicU32, Ordering::SeqCst};
        use std::sync::Arc;
        let c = Config {
            transaction_timeout_ms: 20,
            transaction_check_interval_ms: 20,
            ..cfg()
        };
        let host = Engine::open(c, MemStorage::new(), crate::SystemClock, false).unwrap();
        // The checkers: how many times each was asked, what it answers.
        type K = Arc<(AtomicU32, Resolution)>;
        let shared: Arc<Shared<MemStorage, crate::SystemClock, K>> =
            Arc::new(Shared::new(host, false));
        let answer = |s: &Shared<MemStorage, crate::SystemClock, K>| {
            let call = |k: &K, _: &rocklet_core::CheckRequest| {
                k.0.fetch_add(1, SeqCst);
                Ok::<_, ()>(k.1)
            };
            let mut ask = s.asker(Arc::clone, call, |f| panic!("{f}"));
            s.answer_all::<F>(&NoLock, &mut ask).is_ok()
        };
        let stopped = |why: String| panic!("the driver stopped: {why}");
        Shared::start_driver::<F>(&shared, "test-driver", answer, stopped).unwrap();
        let checker: K = Arc::new((AtomicU32::new(0), Resolution::Commit));
        let old = shared.set_checker::<F>(&NoLock, "P", Some(Arc::clone(&checker)));
        assert!(old.unwrap().is_none());
        let mut none = |_: &rocklet_core::CheckRequest| None;
        let mut ep = shared.endpoint::<_, Ask<'_>, F>(NoLock, &mut none);
        prepare(&mut ep, "P".into(), NewMessage::new("T", "half"), None).unwrap();
        let t0 = std::time::Instant::now();
        while shared
            .read::<_, F>(|c| c.pending_transaction_count())
            .unwrap()
            > 0
        {
            assert!(t0.elapsed().as_secs() < 10, "the driver never checked");
            std::thread::sleep(core::time::Duration::from_millis(5));
        }
        assert_eq!(checker.0.load(SeqCst), 1);
        // A group without a checker is offline: its transaction waits, unasked.
        let gone = shared.set_checker::<F>(&NoLock, "P", None).unwrap();
        assert!(gone.is_some_and(|k| Arc::ptr_eq(&k, &checker)));
        prepare(&mut ep, "P".into(), NewMessage::new("T", "half2"), None).unwrap();
        std::thread::sleep(core::time::Duration::from_millis(80));
        assert_eq!(checker.0.load(SeqCst), 1);
        assert_eq!(
            shared.read::<_, F>(|c| c.pending_transaction_count()),
            Ok(1)
        );
        shared.close::<F>().unwrap();
        // Joined: the thread is gone, its clone of the Arc dropped with it.
        assert_eq!(Arc::strong_count(&shared), 1);
        assert!(shared.peek(|h| h.is_closed()));
        assert_eq!(shared.close::<F>(), Ok(()));
        assert!(shared.clear_checkers().is_empty());
    }
}

/// The codes of `tests/vectors/error-codes.json` are [`ErrorKind::code`]'s, kind by kind
/// (the bindings' tests check what they raise against the same file).
#[test]
fn the_error_code_vector_is_the_kinds_table() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/vectors/error-codes.json"
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let codes = v["codes"].as_object().unwrap();
    let kinds = [
        ErrorKind::Client,
        ErrorKind::Argument,
        ErrorKind::Config,
        ErrorKind::Storage,
        ErrorKind::Corrupted,
        ErrorKind::Encode,
        ErrorKind::Failed,
        ErrorKind::Closed,
        ErrorKind::WrongClock,
        ErrorKind::Internal,
    ];
    assert_eq!(codes.len(), kinds.len(), "one code per kind");
    for kind in kinds {
        // Exhaustive: a new kind must be named in the vector too.
        let key = match kind {
            ErrorKind::Client => "client",
            ErrorKind::Argument => "argument",
            ErrorKind::Config => "config",
            ErrorKind::Storage => "storage",
            ErrorKind::Corrupted => "corrupted",
            ErrorKind::Encode => "encode",
            ErrorKind::Failed => "failed",
            ErrorKind::Closed => "closed",
            ErrorKind::WrongClock => "wrong_clock",
            ErrorKind::Internal => "internal",
        };
        assert_eq!(codes[key], kind.code(), "{key}");
    }
    for case in v["cases"].as_array().unwrap() {
        let kind = case["kind"].as_str().unwrap();
        assert!(codes.contains_key(kind), "{case}");
        if kind != "client" {
            assert_eq!(case["expect"], codes[kind], "{case}");
        }
    }
}
