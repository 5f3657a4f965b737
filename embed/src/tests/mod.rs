use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use rocklet_core::{
    ClientError, Config, FlushMode, MemStorage, Millis, NewMessage, Reply, Request, Resolution,
    TagFilter,
};

use crate::*;

mod config_views;

type H = Engine<MemStorage, ManualClock>;

fn cfg() -> Config {
    Config {
        default_queues: 4,
        transaction_timeout_ms: 1000,
        transaction_check_interval_ms: 1000,
        transaction_check_max: 3,
        ..Config::default()
    }
}

fn host() -> H {
    Engine::open(cfg(), MemStorage::new(), ManualClock::new(0), false).unwrap()
}

fn msg(topic: &str, body: &str, queue: u32) -> NewMessage {
    let mut m = NewMessage::new(topic, body);
    m.queue_id = Some(queue);
    m
}

fn bodies(ms: &[rocklet_core::Message]) -> Vec<String> {
    ms.iter()
        .map(|m| String::from_utf8_lossy(&m.body).to_string())
        .collect()
}

fn pull_args(queue: Option<u32>, max: u32) -> PullArgs {
    PullArgs {
        group: "G".into(),
        topic: "T".into(),
        queue,
        offset: None,
        max,
        filter: TagFilter::All,
        auto_commit: true,
    }
}

#[test]
fn pull_reads_every_queue_unless_one_is_given() {
    let mut h = host();
    send_one(&mut h, msg("T", "q1", 1)).unwrap();
    send_one(&mut h, msg("T", "q3", 3)).unwrap();
    send_one(&mut h, msg("T", "q0", 0)).unwrap();
    // One queue: only it.
    let p = pull(&mut h, pull_args(Some(1), 32)).unwrap();
    assert_eq!(bodies(&p.messages), ["q1"]);
    assert_eq!(p.queues.len(), 1);
    assert_eq!((p.queues[0].queue_id, p.queues[0].next_offset), (1, 1));
    // No queue: every queue in order (queue 1 was read and committed already).
    let p = pull(&mut h, pull_args(None, 32)).unwrap();
    assert_eq!(bodies(&p.messages), ["q0", "q3"]);
    assert_eq!(
        p.queues.iter().map(|q| q.queue_id).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    // Nothing left.
    assert!(pull(&mut h, pull_args(None, 32))
        .unwrap()
        .messages
        .is_empty());
}

#[test]
fn pull_across_queues_stops_at_max() {
    let mut h = host();
    for q in 0..4 {
        send_one(&mut h, msg("T", &alloc::format!("m{q}"), q)).unwrap();
    }
    let p = pull(&mut h, pull_args(None, 3)).unwrap();
    assert_eq!(bodies(&p.messages), ["m0", "m1", "m2"]);
    // The rest on the next pull: queue 3 was not committed past.
    let p = pull(&mut h, pull_args(None, 3)).unwrap();
    assert_eq!(bodies(&p.messages), ["m3"]);
}

#[test]
fn pull_with_an_offset_needs_a_queue() {
    let mut h = host();
    send_one(&mut h, msg("T", "x", 0)).unwrap();
    let mut a = pull_args(None, 32);
    a.offset = Some(0);
    assert!(matches!(pull(&mut h, a), Err(Fail::Argument(w)) if w.contains("offset")));
}

#[test]
fn pull_and_receive_on_a_missing_topic_are_unknown_topic() {
    let mut h = host();
    send_one(&mut h, msg("T", "x", 0)).unwrap();
    let mut a = pull_args(None, 32);
    a.topic = "Typo".into();
    assert!(matches!(
        pull(&mut h, a.clone()),
        Err(Fail::Client(ClientError::UnknownTopic(t))) if t == "Typo"
    ));
    a.queue = Some(0);
    assert!(matches!(
        pull(&mut h, a),
        Err(Fail::Client(ClientError::UnknownTopic(_)))
    ));
    let r = receive(
        &mut h,
        ReceiveArgs {
            group: "G".into(),
            topic: "Typo".into(),
            queue: None,
            max: 1,
            invisible_ms: 1000,
            filter: TagFilter::All,
        },
    );
    assert!(matches!(r, Err(Fail::Client(ClientError::UnknownTopic(_)))));
    // Nothing was created by asking.
    assert!(h.core().unwrap().topic_queue_count("Typo").is_none());
    // A bad name is the core's error first.
    let mut a = pull_args(None, 32);
    a.topic = "bad topic".into();
    assert!(matches!(
        pull(&mut h, a),
        Err(Fail::Client(ClientError::InvalidTopic(_)))
    ));
}

#[test]
fn advance_answers_each_check_at_its_own_time() {
    let mut h = host();
    let mut checkers: Checkers<Resolution> = Checkers::default();
    checkers
        .set(&mut h, "P", Some(Resolution::Unknown))
        .unwrap();
    let tx = prepare(&mut h, "P".into(), NewMessage::new("T", "half"), None).unwrap();
    let mut seen: Vec<(u32, Millis)> = Vec::new();
    let mut d = Drive::by(&h, 2500);
    loop {
        let checks = d.next(&mut h).unwrap();
        if checks.is_empty() {
            break;
        }
        for (c, at) in checks {
            assert_eq!(c.txn, tx.txn);
            seen.push((c.check, at));
            let r = *checkers.get(&c.group).unwrap();
            h.answer(&c, r).unwrap();
        }
    }
    assert_eq!(h.now(), 2500);
    // Checked at the transaction timeout, then once per interval: each at its own time.
    assert_eq!(seen, [(1, 1000), (2, 2000)]);
    // The next check commits.
    checkers.set_local("P", Some(Resolution::Commit));
    Drive::until_idle()
        .run(&mut h, |c| checkers.get(&c.group).copied())
        .unwrap();
    assert!(h.now() >= 3000);
    assert!(h.next_due().is_none());
    assert_eq!(h.core().unwrap().pending_transaction_count(), 0);
    let p = pull(&mut h, pull_args(None, 32)).unwrap();
    assert_eq!(bodies(&p.messages), ["half"]);
}

#[test]
fn run_until_idle_ends_when_nobody_answers() {
    let mut h = host();
    h.set_producer_online("P", true).unwrap();
    prepare(&mut h, "P".into(), NewMessage::new("T", "half"), None).unwrap();
    let mut asked = 0;
    Drive::until_idle()
        .run(&mut h, |_| {
            asked += 1;
            None
        })
        .unwrap();
    // transaction_check_max checks, then the broker gives up (rolls back, as RocketMQ).
    assert_eq!(asked, 3);
    assert_eq!(h.core().unwrap().pending_transaction_count(), 0);
}

#[test]
fn driving_a_step_at_a_time_hands_out_each_steps_checks_then_none() {
    let mut h = host();
    let mut d = Driving::default();
    // None started: nothing to do.
    assert!(d.next(&mut h).unwrap().is_empty());
    h.set_producer_online("P", true).unwrap();
    let tx = prepare(&mut h, "P".into(), NewMessage::new("T", "half"), None).unwrap();
    d.start(&h, Some(1500)).unwrap();
    let checks = d.next(&mut h).unwrap();
    assert_eq!(checks.len(), 1);
    assert_eq!((checks[0].0.txn, h.now()), (tx.txn, 1000));
    h.answer(&checks[0].0, Resolution::Unknown).unwrap();
    assert!(d.next(&mut h).unwrap().is_empty());
    assert_eq!(h.now(), 1500);
    // Over: asking again is still nothing, and the clock stays.
    assert!(d.next(&mut h).unwrap().is_empty());
    assert_eq!(h.now(), 1500);
    let e = d.start(&h, Some(100)).unwrap_err();
    assert!(
        matches!(&e, Fail::Argument(w) if w == "target 100 is before the clock (1500)"),
        "{e:?}"
    );
    d.start(&h, None).unwrap();
    d.stop();
    assert!(d.next(&mut h).unwrap().is_empty());
    assert_eq!(h.now(), 1500);
}

#[test]
fn step_refuses_a_target_in_the_past() {
    let mut h = Engine::open(cfg(), MemStorage::new(), ManualClock::new(500), false).unwrap();
    assert!(matches!(h.step(Some(100)), Err(Fail::Argument(w)) if w.contains("before")));
    assert!(!h.step(Some(700)).unwrap());
    assert_eq!(h.now(), 700);
}

#[derive(Debug)]
struct FixedHostClock;
impl Clock for FixedHostClock {
    fn now(&self) -> Millis {
        42
    }
}

#[test]
fn a_host_clock_is_not_moved() {
    let mut h = Engine::open(cfg(), MemStorage::new(), FixedHostClock, false).unwrap();
    assert!(matches!(h.step(None), Err(Fail::WrongClock(_))));
    assert!(matches!(h.jump_to(100), Err(Fail::WrongClock(_))));
    h.fire_due().unwrap();
    let mut m: Engine<MemStorage, ManualClock> = host();
    assert!(matches!(m.fire_due(), Err(Fail::WrongClock(_))));
}

#[test]
fn end_without_a_group_uses_the_transactions_own() {
    let mut h = host();
    let tx = prepare(&mut h, "P".into(), NewMessage::new("T", "a"), None).unwrap();
    let e = end(&mut h, tx.txn, Resolution::Commit, None, false).unwrap();
    assert_eq!((e.resolution, e.duplicate), (Resolution::Commit, false));
    assert!(tx.end(&mut h, Resolution::Commit).unwrap());
    let other = prepare(&mut h, "P".into(), NewMessage::new("T", "b"), None).unwrap();
    let r = end(
        &mut h,
        other.txn,
        Resolution::Commit,
        Some("Q".into()),
        false,
    );
    assert!(matches!(
        r,
        Err(Fail::Client(ClientError::WrongProducerGroup { .. }))
    ));
}

#[test]
fn transaction_exit_commits_on_success_and_rolls_back_on_failure() {
    assert_eq!(Transaction::on_exit(None, true), Some(Resolution::Commit));
    assert_eq!(
        Transaction::on_exit(None, false),
        Some(Resolution::Rollback)
    );
    assert_eq!(Transaction::on_exit(Some(Resolution::Rollback), true), None);
}

#[test]
fn subscription_acks_on_moving_on_and_not_on_leaving() {
    let mut h = host();
    let mut s = Subscription::new("G".into(), "T".into(), 1000, 1, TagFilter::All);
    // Before the topic exists: nothing yet, no error.
    assert!(s.next(&mut h).unwrap().is_none());
    send_one(&mut h, msg("T", "a", 0)).unwrap();
    send_one(&mut h, msg("T", "b", 0)).unwrap();
    let a = s.next(&mut h).unwrap().unwrap();
    assert_eq!(a.message.body, b"a");
    assert_eq!(h.core().unwrap().inflight_count("G", "T"), 1);
    // Moving on acks `a`.
    let b = s.next(&mut h).unwrap().unwrap();
    assert_eq!(b.message.body, b"b");
    assert_eq!(h.core().unwrap().inflight_count("G", "T"), 1);
    // Leaving leaves `b` un-acked: it comes back after its invisible time, `a` never.
    s.stop();
    let mut s2 = Subscription::new("G".into(), "T".into(), 1000, 8, TagFilter::All);
    assert!(s2.next(&mut h).unwrap().is_none());
    h.step(Some(1500)).unwrap();
    while h.step(Some(1500)).unwrap() {}
    let again = s2.next(&mut h).unwrap().unwrap();
    assert_eq!(
        (again.message.body.as_slice(), again.attempt),
        (&b"b"[..], 2)
    );
    // Acked in the body: the automatic ack is no error.
    ack(&mut h, "G".into(), again.handle.clone()).unwrap();
    assert!(s2.next(&mut h).unwrap().is_none());
    assert_eq!(h.core().unwrap().inflight_count("G", "T"), 0);
}

#[test]
fn submitted_requests_wait_for_the_sync_under_sync_flush() {
    let c = Config {
        flush: FlushMode::Sync,
        ..cfg()
    };
    let mut h: H = Engine::open(c, MemStorage::new(), ManualClock::new(0), false).unwrap();
    let id = h
        .submit(Request::Send {
            messages: vec![msg("T", "x", 0)],
        })
        .unwrap();
    assert!(h.take_reply(id).is_none());
    h.sync().unwrap();
    assert!(matches!(h.take_reply(id), Some(Ok(Reply::Sent(_)))));
}

#[test]
fn a_closed_host_says_so() {
    let mut h = host();
    h.close().unwrap();
    h.close().unwrap();
    assert!(matches!(
        send_one(&mut h, msg("T", "x", 0)),
        Err(Fail::Closed(_))
    ));
    let mut h = host();
    h.abandon("the broker was closed after an internal error");
    assert!(matches!(h.now(), 0));
    assert!(
        matches!(h.execute(Request::Send { messages: vec![] }), Err(Fail::Closed(w)) if w.contains("internal"))
    );
}

#[test]
fn eager_sync_releases_replies_at_once_and_reopen_recovers() {
    let c = Config {
        flush: FlushMode::Sync,
        ..cfg()
    };
    let mut h: H = Engine::open(c, MemStorage::new(), ManualClock::new(0), false)
        .unwrap()
        .eager_sync(true);
    let id = h
        .submit(Request::Send {
            messages: vec![msg("T", "x", 0)],
        })
        .unwrap();
    assert!(matches!(h.take_reply(id), Some(Ok(Reply::Sent(_)))));
    h.reopen().unwrap();
    let p = pull(&mut h, pull_args(None, 32)).unwrap();
    assert_eq!(bodies(&p.messages), ["x"]);
}

/// A send that creates the topic lands between the layer's look and the core's answer (as a
/// producer thread's can): what the receive got is handed out, not dropped as UnknownTopic.
struct SendFirst<'a>(&'a mut H);

impl Endpoint for SendFirst<'_> {
    type Error = rocklet_core::Error<<MemStorage as rocklet_core::Storage>::Error>;
    fn request(&mut self, req: Request) -> Result<Reply, Fail<Self::Error>> {
        if matches!(req, Request::Receive { .. } | Request::Pull { .. }) {
            send_one(self.0, msg("New", "raced", 0)).unwrap();
        }
        self.0.request(req)
    }
    fn queue_count(&mut self, topic: &str) -> Result<Option<u32>, Fail<Self::Error>> {
        self.0.queue_count(topic)
    }
    fn transaction_group(
        &mut self,
        txn: rocklet_core::TxnId,
    ) -> Result<Option<String>, Fail<Self::Error>> {
        Endpoint::transaction_group(self.0, txn)
    }
}

#[test]
fn a_topic_created_meanwhile_is_read_not_refused() {
    let mut h = host();
    let got = receive(
        &mut SendFirst(&mut h),
        ReceiveArgs {
            group: "G".into(),
            topic: "New".into(),
            queue: None,
            max: 8,
            invisible_ms: 1000,
            filter: TagFilter::All,
        },
    )
    .unwrap();
    assert_eq!(got.len(), 1);
    let mut a = pull_args(Some(0), 8);
    a.topic = "New".into();
    let p = pull(&mut SendFirst(&mut h), a).unwrap();
    assert_eq!(bodies(&p.messages), ["raced", "raced"]);
}

#[test]
fn create_topic_through_the_host_makes_the_topic_readable() {
    let mut h = host();
    assert_eq!(h.create_topic("Made", 2).unwrap(), Ok(()));
    let mut a = pull_args(None, 8);
    a.topic = "Made".into();
    assert_eq!(pull(&mut h, a).unwrap().queues.len(), 2);
    assert!(h.create_topic("bad topic", 2).unwrap().is_err());
}
