//! The queue state machine driven in memory on explicit time, with a store in the loop: every
//! step applies the core's writes before its actions are looked at (the driver's rule), and a
//! "restart" builds a new core from what the store kept.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use agentwire_queue::{
    ConsumerId, Delivery, Enqueue, FailReason, FileStore, MemoryStore, Now, QueueAction,
    QueueConfig, QueueCore, QueueError, QueueStore, StoreError, TaskId,
};

const A: ConsumerId = ConsumerId(1);
const B: ConsumerId = ConsumerId(2);

struct Harness<S: QueueStore> {
    config: QueueConfig,
    core: QueueCore,
    store: S,
    now: Now,
    deliveries: Vec<Delivery>,
    dead: Vec<(TaskId, FailReason)>,
}

impl<S: QueueStore> Harness<S> {
    fn new(config: QueueConfig, mut store: S) -> Self {
        let now = Now::new(Instant::now(), 1_700_000_000_000);
        let core = QueueCore::recover(config.clone(), store.load().unwrap(), now);
        let mut h = Harness {
            config,
            core,
            store,
            now,
            deliveries: Vec::new(),
            dead: Vec::new(),
        };
        h.step();
        h
    }

    /// Writes first, then actions.
    fn step(&mut self) {
        let writes = self.core.take_writes();
        self.store.apply(&writes).unwrap();
        while let Some(a) = self.core.poll_action() {
            match a {
                QueueAction::Deliver(d) => self.deliveries.push(d),
                QueueAction::DeadLettered { task, reason, .. } => self.dead.push((task, reason)),
            }
        }
    }

    fn enqueue(&mut self, body: &str) -> TaskId {
        let e = self
            .core
            .enqueue(Enqueue::new("jobs", body.to_string()), self.now)
            .unwrap();
        self.step();
        e.task
    }

    fn consume(&mut self, c: ConsumerId, credit: u32) {
        self.core.consume(c, "jobs", credit, self.now).unwrap();
        self.step();
    }

    fn ack(&mut self, c: ConsumerId, t: TaskId) {
        self.core.ack(c, t, self.now).unwrap();
        self.step();
    }

    fn advance(&mut self, d: Duration) {
        self.now = self.now.plus(d);
        self.core.on_timeout(self.now);
        self.step();
    }

    fn take(&mut self) -> Vec<(ConsumerId, TaskId, u32)> {
        self.deliveries
            .drain(..)
            .map(|d| (d.consumer, d.task, d.attempt))
            .collect()
    }

    fn restart(&mut self) {
        self.core = QueueCore::recover(self.config.clone(), self.store.load().unwrap(), self.now);
        self.deliveries.clear();
        self.step();
    }
}

fn config() -> QueueConfig {
    QueueConfig {
        ack_wait: Duration::from_secs(10),
        max_deliver: 3,
        backoff: vec![Duration::from_secs(1), Duration::from_secs(5)],
        duplicate_window: Duration::from_secs(60),
        ..QueueConfig::default()
    }
}

fn memory() -> Harness<MemoryStore> {
    Harness::new(config(), MemoryStore::default())
}

#[test]
fn competing_consumers_each_take_one_task_at_a_time_in_turn() {
    let mut h = memory();
    let ids: Vec<TaskId> = (0..4).map(|i| h.enqueue(&format!("t{i}"))).collect();
    assert!(h.take().is_empty(), "no consumer yet");
    h.consume(A, 1);
    h.consume(B, 1);
    assert_eq!(h.take(), vec![(A, ids[0], 1), (B, ids[1], 1)]);
    h.ack(B, ids[1]);
    assert_eq!(h.take(), vec![(B, ids[2], 1)]);
    h.ack(A, ids[0]);
    assert_eq!(h.take(), vec![(A, ids[3], 1)]);
    let s = h.core.stats("jobs").unwrap();
    assert_eq!((s.ready, s.in_flight, s.consumers), (0, 2, 2));
}

#[test]
fn credit_bounds_what_one_consumer_holds() {
    let mut h = memory();
    for i in 0..5 {
        h.enqueue(&format!("t{i}"));
    }
    h.consume(A, 3);
    assert_eq!(h.take().len(), 3);
    h.core.consume(A, "jobs", 5, h.now).unwrap(); // more credit
    h.step();
    assert_eq!(h.take().len(), 2);
}

#[test]
fn an_unacked_task_goes_to_another_consumer_after_ack_wait_and_backoff() {
    let mut h = memory();
    let t = h.enqueue("slow");
    h.consume(A, 1);
    assert_eq!(h.take(), vec![(A, t, 1)]);
    h.consume(B, 1);
    h.advance(Duration::from_millis(9_999));
    assert!(h.take().is_empty(), "still within the ack wait");
    h.advance(Duration::from_millis(1));
    assert!(h.take().is_empty(), "first backoff: 1 s");
    assert_eq!(h.core.stats("jobs").unwrap().waiting, 1);
    h.advance(Duration::from_secs(1));
    assert_eq!(h.take(), vec![(B, t, 2)]);
    // A's late ack is refused: the task is B's now.
    assert_eq!(
        h.core.ack(A, t, h.now),
        Err(QueueError::NotInFlight { task: t })
    );
    h.ack(B, t);
    assert_eq!(h.core.totals().redelivered, 1);
}

#[test]
fn a_nack_with_a_delay_waits_that_long() {
    let mut h = memory();
    let t = h.enqueue("later");
    h.consume(A, 1);
    h.take();
    h.core
        .nack(A, t, Some(Duration::from_secs(3)), h.now)
        .unwrap();
    h.step();
    h.advance(Duration::from_millis(2_999));
    assert!(h.take().is_empty());
    h.advance(Duration::from_millis(1));
    assert_eq!(h.take(), vec![(A, t, 2)]);
}

#[test]
fn a_consumer_that_goes_away_hands_its_tasks_back() {
    let mut h = memory();
    let t1 = h.enqueue("a");
    let t2 = h.enqueue("b");
    h.consume(A, 2);
    assert_eq!(h.take().len(), 2);
    h.consume(B, 2);
    h.core.consumer_gone(A, h.now);
    h.step();
    h.advance(Duration::from_secs(1));
    assert_eq!(h.take(), vec![(B, t1, 2), (B, t2, 2)]);
    assert_eq!(h.core.stats("jobs").unwrap().consumers, 1);
}

#[test]
fn after_max_deliver_a_task_is_a_dead_letter_that_can_be_replayed_or_discarded() {
    let mut h = memory();
    let t = h.enqueue("poison");
    h.consume(A, 1);
    for attempt in 1..=3 {
        assert_eq!(h.take(), vec![(A, t, attempt)]);
        h.core.nack(A, t, Some(Duration::ZERO), h.now).unwrap();
        h.step();
    }
    assert!(h.take().is_empty());
    assert_eq!(h.dead, vec![(t, FailReason::Nacked)]);
    let dead = h.core.dead_letters("jobs");
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].task, dead[0].attempts, dead[0].reason.as_str()),
        (t, 3, "nacked")
    );
    assert_eq!(&dead[0].body[..], b"poison");
    // Dead letters survive a restart.
    h.restart();
    assert_eq!(h.core.dead_letters("jobs").len(), 1);
    assert!(h.take().is_empty());
    h.consume(A, 1);
    assert_eq!(h.core.replay("jobs", None, h.now), 1);
    h.step();
    assert_eq!(
        h.take(),
        vec![(A, t, 1)],
        "a replayed task starts its count again"
    );
    for attempt in 2..=4 {
        h.core.nack(A, t, Some(Duration::ZERO), h.now).unwrap();
        h.step();
        if attempt <= 3 {
            assert_eq!(h.take(), vec![(A, t, attempt)]);
        }
    }
    assert_eq!(h.core.stats("jobs").unwrap().dead, 1);
    assert_eq!(h.core.discard_dead("jobs", Some(TaskId(12345))), 0);
    assert_eq!(h.core.discard_dead("jobs", Some(t)), 1);
    h.step();
    assert!(h.store.load().unwrap().tasks.is_empty());
}

#[test]
fn a_resent_producer_id_is_a_duplicate_within_the_window_only() {
    let mut h = memory();
    let first = h
        .core
        .enqueue(Enqueue::new("jobs", "x").with_producer_id("order-1"), h.now)
        .unwrap();
    h.step();
    let again = h
        .core
        .enqueue(Enqueue::new("jobs", "x").with_producer_id("order-1"), h.now)
        .unwrap();
    h.step();
    assert!(!first.duplicate);
    assert!(again.duplicate);
    assert_eq!(again.task, first.task);
    // Another queue, or another id, is another task.
    let other = h
        .core
        .enqueue(
            Enqueue::new("jobs2", "x").with_producer_id("order-1"),
            h.now,
        )
        .unwrap();
    assert!(!other.duplicate);
    h.step();
    // The window survives a restart, and the task's ack does not end it.
    h.restart();
    h.consume(A, 1);
    h.ack(A, first.task);
    let later = h
        .core
        .enqueue(Enqueue::new("jobs", "x").with_producer_id("order-1"), h.now)
        .unwrap();
    assert!(later.duplicate);
    h.advance(Duration::from_secs(60));
    let after = h
        .core
        .enqueue(Enqueue::new("jobs", "x").with_producer_id("order-1"), h.now)
        .unwrap();
    assert!(!after.duplicate);
    assert_ne!(after.task, first.task);
    assert_eq!(h.core.totals().duplicates, 1, "counts since the restart");
}

#[test]
fn a_restart_puts_tasks_in_flight_back_in_line_and_never_reuses_an_id() {
    let mut h = memory();
    let t1 = h.enqueue("a");
    let t2 = h.enqueue("b");
    h.consume(A, 2);
    assert_eq!(h.take().len(), 2);
    h.ack(A, t2); // the highest id is gone from the store
    h.restart();
    assert_eq!(h.core.stats("jobs").unwrap().ready, 1);
    h.consume(B, 1);
    assert_eq!(
        h.take(),
        vec![(B, t1, 1)],
        "an attempt cut short by a restart is not counted"
    );
    let t3 = h.enqueue("c");
    assert!(t3 > t2);
}

#[test]
fn bad_calls_are_refused_and_change_nothing() {
    let mut h = Harness::new(
        QueueConfig {
            max_tasks_per_queue: 1,
            max_task_bytes: 4,
            max_producer_id: 3,
            ..config()
        },
        MemoryStore::default(),
    );
    let now = h.now;
    assert!(matches!(
        h.core.enqueue(Enqueue::new("", "x"), now),
        Err(QueueError::BadName(_))
    ));
    assert!(matches!(
        h.core.enqueue(Enqueue::new("a b", "x"), now),
        Err(QueueError::BadName(_))
    ));
    assert_eq!(
        h.core.enqueue(Enqueue::new("jobs", "12345"), now),
        Err(QueueError::TooLarge { len: 5, max: 4 })
    );
    assert_eq!(
        h.core
            .enqueue(Enqueue::new("jobs", "1").with_producer_id("long"), now),
        Err(QueueError::ProducerIdTooLong { len: 4, max: 3 })
    );
    let t = h.enqueue("1");
    assert_eq!(
        h.core.enqueue(Enqueue::new("jobs", "2"), now),
        Err(QueueError::Full {
            queue: "jobs".into(),
            max: 1
        })
    );
    assert_eq!(h.core.consume(A, "jobs", 0, now), Err(QueueError::NoCredit));
    h.consume(A, 1);
    assert_eq!(
        h.core.consume(A, "other", 1, now),
        Err(QueueError::AlreadyConsuming("jobs".into()))
    );
    assert_eq!(
        h.core.ack(B, t, now),
        Err(QueueError::NotInFlight { task: t })
    );
    assert_eq!(
        h.core.ack(A, TaskId(99), now),
        Err(QueueError::NotInFlight { task: TaskId(99) })
    );
    h.ack(A, t);
    assert_eq!(
        h.core.ack(A, t, now),
        Err(QueueError::NotInFlight { task: t }),
        "acked twice"
    );
    assert!(h.core.take_writes().is_empty(), "refusals write nothing");
    assert_eq!(h.core.totals().enqueued, 1);
}

#[test]
fn the_file_store_keeps_tasks_dead_letters_and_producer_ids_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let t_dead;
    let t_live;
    let first;
    {
        let mut h = Harness::new(config(), FileStore::open(dir.path()).unwrap());
        t_dead = h.enqueue("poison");
        h.consume(A, 1);
        for _ in 0..3 {
            let (_, t, _) = h.take().pop().unwrap();
            h.core.nack(A, t, Some(Duration::ZERO), h.now).unwrap();
            h.step();
        }
        t_live = h.enqueue("work");
        first = h
            .core
            .enqueue(Enqueue::new("jobs", "once").with_producer_id("p-1"), h.now)
            .unwrap();
        h.step();
        assert_eq!(h.take().len(), 1, "the live task went to A");
    } // the file is closed here, as by a crash after the last commit
    let mut h = Harness::new(config(), FileStore::open(dir.path()).unwrap());
    let dead = h.core.dead_letters("jobs");
    assert_eq!((dead.len(), dead[0].task, dead[0].attempts), (1, t_dead, 3));
    assert_eq!(h.core.stats("jobs").unwrap().ready, 2);
    let dup = h
        .core
        .enqueue(Enqueue::new("jobs", "once").with_producer_id("p-1"), h.now)
        .unwrap();
    assert!(dup.duplicate);
    assert_eq!(dup.task, first.task);
    h.consume(B, 10);
    let got: Vec<TaskId> = h.take().into_iter().map(|(_, t, _)| t).collect();
    assert_eq!(got, vec![t_live, first.task]);
    for t in got {
        h.ack(B, t);
    }
    let next = h.enqueue("new");
    assert!(next > first.task);
}

#[test]
fn a_damaged_or_unusable_store_is_an_error_that_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("queues.redb");
    std::fs::write(&file, vec![0x5a; 8192]).unwrap();
    let err = FileStore::open(dir.path())
        .err()
        .expect("garbage is not a store");
    assert!(matches!(err, StoreError::Open { .. }));
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );

    // A directory that is a file.
    let not_dir = dir.path().join("plain-file");
    std::fs::write(&not_dir, b"x").unwrap();
    let err = FileStore::open(&not_dir)
        .err()
        .expect("a file is not a directory");
    assert!(err.to_string().contains("plain-file"), "{err}");
}

/// What the property test does next.
#[derive(Debug, Clone)]
enum Op {
    Enqueue { producer: Option<u8> },
    Consume { who: u8, credit: u32 },
    Ack { pick: usize },
    Nack { pick: usize, zero_delay: bool },
    Gone { who: u8 },
    Advance { ms: u64 },
    Restart,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        4 => proptest::option::of(0u8..6).prop_map(|producer| Op::Enqueue { producer }),
        2 => (0u8..3, 1u32..4).prop_map(|(who, credit)| Op::Consume { who, credit }),
        4 => any::<usize>().prop_map(|pick| Op::Ack { pick }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, zero_delay)| Op::Nack { pick, zero_delay }),
        1 => (0u8..3).prop_map(|who| Op::Gone { who }),
        2 => (0u64..15_000).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Restart),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

    /// For any interleaving of enqueues, consumers coming and going, acks, nacks, time and
    /// restarts: every stored task is in the end acked exactly once or a dead letter, never
    /// both, never lost; a task is in one consumer's hands at a time; the store and the core
    /// agree.
    #[test]
    fn no_task_is_lost_or_acked_twice(ops in proptest::collection::vec(op(), 1..80)) {
        let mut h = memory();
        let mut stored: BTreeSet<TaskId> = BTreeSet::new();
        let mut acked: BTreeMap<TaskId, u32> = BTreeMap::new();
        let mut held: BTreeMap<TaskId, ConsumerId> = BTreeMap::new();
        let mut credits: BTreeMap<ConsumerId, u32> = BTreeMap::new();
        let absorb = |h: &mut Harness<MemoryStore>, held: &mut BTreeMap<TaskId, ConsumerId>| {
            for d in h.deliveries.drain(..) {
                held.insert(d.task, d.consumer);
            }
        };
        for op in ops {
            let before: BTreeMap<ConsumerId, usize> =
                credits.keys().map(|&c| (c, h.core.consumer_in_flight(c).unwrap_or(0))).collect();
            match op {
                Op::Enqueue { producer } => {
                    let mut e = Enqueue::new("jobs", "body");
                    if let Some(p) = producer {
                        e = e.with_producer_id(format!("p{p}"));
                    }
                    let r = h.core.enqueue(e, h.now).unwrap();
                    h.step();
                    if !r.duplicate {
                        proptest::prop_assert!(stored.insert(r.task), "id given twice");
                    }
                }
                Op::Consume { who, credit } => {
                    credits.insert(ConsumerId(who.into()), credit);
                    h.core.consume(ConsumerId(who.into()), "jobs", credit, h.now).unwrap();
                    h.step();
                }
                Op::Ack { pick } | Op::Nack { pick, .. } if !held.is_empty() => {
                    let (&task, &who) = held.iter().nth(pick % held.len()).unwrap();
                    held.remove(&task);
                    let result = if let Op::Nack { zero_delay, .. } = op {
                        h.core.nack(who, task, zero_delay.then_some(Duration::ZERO), h.now)
                    } else {
                        h.core.ack(who, task, h.now)
                    };
                    // Refused only when the task left that consumer's hands (ack wait,
                    // disconnect, restart) since it was delivered.
                    if result.is_ok() && matches!(op, Op::Ack { .. }) {
                        *acked.entry(task).or_default() += 1;
                    }
                    h.step();
                }
                Op::Ack { .. } | Op::Nack { .. } => {}
                Op::Gone { who } => {
                    h.core.consumer_gone(ConsumerId(who.into()), h.now);
                    h.step();
                    held.retain(|_, c| c.0 != u64::from(who));
                    credits.remove(&ConsumerId(who.into()));
                }
                Op::Advance { ms } => h.advance(Duration::from_millis(ms)),
                Op::Restart => {
                    h.restart();
                    held.clear();
                    credits.clear();
                }
            }
            absorb(&mut h, &mut held);
            // Lowering a credit takes nothing back, but no task goes to a consumer at its credit.
            for (c, credit) in &credits {
                let n = h.core.consumer_in_flight(*c).unwrap_or(0);
                let was = before.get(c).copied().unwrap_or(0);
                proptest::prop_assert!(n <= (*credit as usize).max(was), "{c:?} holds {n} with credit {credit}");
            }
            // The store holds exactly the tasks not yet acked.
            let in_store: BTreeSet<TaskId> = h.store.load().unwrap().tasks.iter().map(|t| t.id).collect();
            let expected: BTreeSet<TaskId> = stored.iter().filter(|t| !acked.contains_key(t)).copied().collect();
            proptest::prop_assert_eq!(in_store, expected);
        }
        // Drain: one patient consumer acks everything until nothing is left but dead letters.
        h.core.consumer_gone(ConsumerId(0), h.now);
        h.core.consumer_gone(ConsumerId(1), h.now);
        h.core.consumer_gone(ConsumerId(2), h.now);
        h.step();
        h.deliveries.clear();
        h.core.consume(ConsumerId(9), "jobs", 1_000, h.now).unwrap();
        h.step();
        for _ in 0..20 {
            for d in std::mem::take(&mut h.deliveries) {
                h.core.ack(d.consumer, d.task, h.now).unwrap();
                *acked.entry(d.task).or_default() += 1;
            }
            h.step();
            h.advance(Duration::from_secs(60));
        }
        let dead: BTreeSet<TaskId> = h.core.dead_letters("jobs").iter().map(|d| d.task).collect();
        for t in &stored {
            let n = acked.get(t).copied().unwrap_or(0);
            proptest::prop_assert!(
                (n == 1 && !dead.contains(t)) || (n == 0 && dead.contains(t)),
                "task {t}: acked {n} times, dead: {}", dead.contains(t)
            );
        }
        let s = h.core.stats("jobs").map(|s| (s.ready, s.waiting, s.in_flight)).unwrap_or_default();
        proptest::prop_assert_eq!(s, (0, 0, 0));
    }
}

#[test]
fn producer_ids_beyond_the_cap_are_forgotten_oldest_first() {
    let mut h = Harness::new(
        QueueConfig {
            max_producer_ids: 2,
            ..config()
        },
        MemoryStore::default(),
    );
    for p in ["a", "b", "c"] {
        h.core
            .enqueue(Enqueue::new("jobs", "x").with_producer_id(p), h.now)
            .unwrap();
        h.step();
    }
    assert_eq!(h.core.totals().producer_ids_forgotten_early, 1);
    assert_eq!(h.store.load().unwrap().dedupe.len(), 2);
    let a = h
        .core
        .enqueue(Enqueue::new("jobs", "x").with_producer_id("a"), h.now)
        .unwrap();
    assert!(!a.duplicate, "the oldest id was forgotten");
    let c = h
        .core
        .enqueue(Enqueue::new("jobs", "x").with_producer_id("c"), h.now)
        .unwrap();
    assert!(c.duplicate);
}

/// Memory held by queues is bounded in bytes (per queue and in all) and in queues in use; an
/// empty queue takes one task of any allowed size; what an ack or a discard frees is room again;
/// queues left idle do not count.
#[test]
fn queues_are_bounded_in_bytes_and_in_number() {
    let mut h = Harness::new(
        QueueConfig {
            max_queue_bytes: 10,
            max_total_bytes: 16,
            max_queues: 2,
            max_task_bytes: 12,
            ..config()
        },
        MemoryStore::default(),
    );
    let now = h.now;
    // One task over the queue's bytes fits an empty queue...
    let big = h.enqueue("123456789012");
    assert_eq!(h.core.bytes(), 12);
    // ...and then the queue is full in bytes.
    assert_eq!(
        h.core.enqueue(Enqueue::new("jobs", "1"), now),
        Err(QueueError::FullBytes {
            queue: "jobs".into(),
            max: 10
        })
    );
    // Another queue: within the total, then over it.
    h.core.enqueue(Enqueue::new("mail", "1234"), now).unwrap();
    assert_eq!(
        h.core.enqueue(Enqueue::new("mail", "1"), now),
        Err(QueueError::AllFull { max: 16 })
    );
    // A third queue in use is one too many, for tasks and for consumers.
    assert_eq!(
        h.core.enqueue(Enqueue::new("third", ""), now),
        Err(QueueError::TooManyQueues {
            queue: "third".into(),
            max: 2
        })
    );
    assert_eq!(
        h.core.consume(B, "third", 1, now),
        Err(QueueError::TooManyQueues {
            queue: "third".into(),
            max: 2
        })
    );
    // Acking the big task frees its bytes and its queue: "jobs" goes idle, "third" fits.
    h.consume(A, 1);
    assert_eq!(h.take(), vec![(A, big, 1)]);
    h.ack(A, big);
    h.core.consumer_gone(A, now);
    assert_eq!(h.core.bytes(), 4);
    h.core
        .enqueue(Enqueue::new("third", "12345678"), now)
        .unwrap();
    assert_eq!(h.core.bytes(), 12);
}

/// Dead letters page by count and by bytes (one letter at least), from after a cursor.
#[test]
fn dead_letters_come_in_pages() {
    let mut h = Harness::new(
        QueueConfig {
            max_deliver: 1,
            ..config()
        },
        MemoryStore::default(),
    );
    let ids: Vec<TaskId> = ["a", "bb", "ccc", "dddd", "eeeee"]
        .iter()
        .map(|b| h.enqueue(b))
        .collect();
    h.consume(A, 10);
    for (_, t, _) in h.take() {
        h.core.nack(A, t, Some(Duration::ZERO), h.now).unwrap();
    }
    h.step();
    assert_eq!(h.core.dead_letters("jobs").len(), 5);
    let page = h.core.dead_letters_page("jobs", None, usize::MAX, 2);
    assert_eq!(
        page.letters.iter().map(|d| d.task).collect::<Vec<_>>(),
        ids[..2]
    );
    assert_eq!(page.next, Some(ids[1]));
    // 3 + 4 bytes fit 7; the 5-byte one waits for the next page.
    let page = h.core.dead_letters_page("jobs", page.next, 7, 10);
    assert_eq!(
        page.letters.iter().map(|d| d.task).collect::<Vec<_>>(),
        ids[2..4]
    );
    // One letter always, even over the bytes.
    let page = h.core.dead_letters_page("jobs", page.next, 1, 10);
    assert_eq!(page.letters.len(), 1);
    assert_eq!(page.next, None);
    assert!(h
        .core
        .dead_letters_page("nothing", None, 1, 1)
        .letters
        .is_empty());
}
