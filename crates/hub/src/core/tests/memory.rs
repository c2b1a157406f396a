//! Memory bounded in bytes: each agent's queue, all queues together, subscriptions per agent.

use super::*;

fn big(id: u64, from: &Agent, to: &str, bytes: usize) -> Envelope {
    Envelope::new(id, from.id.clone(), Destination::agent(to), Kind::Event)
        .with_body(vec![7u8; bytes])
}

/// `agentwire_hub_queued_bytes` as the core counts it.
fn queued_bytes(sim: &Sim) -> i64 {
    sim.core.metrics().queued_bytes().get()
}

#[test]
fn an_agents_queue_is_bounded_in_bytes_and_one_big_message_fits_an_empty_one() {
    let mut sim = Sim::new(CoreConfig {
        agent_queue_capacity: 1000,
        agent_queue_bytes: 10_000,
        ..config()
    });
    let a = sim.connect("a");
    let _b = sim.connect("b");
    let _c = sim.connect("c");
    for id in 1..=3 {
        sim.send(&a, big(id, &a, "b", 4_000));
    }
    let got = sim.drain(&a);
    assert_eq!(got.len(), 1, "the third 4 kB message does not fit 10 kB");
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::QueueFull));
    assert_eq!(got[0].envelope().correlation, Some(3));
    // 50 kB to an empty queue goes; a second does not.
    sim.send(&a, big(4, &a, "c", 50_000));
    sim.send(&a, big(5, &a, "c", 10));
    let got = sim.drain(&a);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].envelope().correlation, Some(5));
}

#[test]
fn all_queues_together_stay_within_the_hubs_budget_and_give_it_back() {
    use super::super::budget::STEP;
    let budget = 16 * STEP;
    let mut sim = Sim::new(CoreConfig {
        agent_queue_capacity: 1000,
        hub_queue_bytes: budget,
        ..config()
    });
    let a = sim.connect("a");
    let readers: Vec<Agent> = (0..4).map(|i| sim.connect(&format!("r{i}"))).collect();
    let (mut accepted, mut refused) = (0, 0);
    for id in 1..=40u64 {
        let to = &readers[id as usize % 4].id;
        sim.send(&a, big(id, &a, to, 10_000));
        let got = sim.drain(&a);
        for g in &got {
            assert_eq!(error_code(g.envelope()), Some(ErrorCode::QueueFull));
            assert!(String::from_utf8_lossy(&g.envelope().body).contains("budget"));
        }
        refused += got.len();
        accepted += 1 - got.len();
        assert!(
            queued_bytes(&sim) <= budget as i64,
            "{}",
            queued_bytes(&sim)
        );
    }
    // Within the budget, less at most two steps per connection.
    assert!(refused > 0);
    let held = accepted * 10_050;
    assert!(
        held <= budget && held + 2 * 5 * STEP >= budget,
        "{accepted} accepted"
    );
    assert_eq!(
        super::trust::dropped(&sim, "hub-queue-budget"),
        refused as u64
    );
    // A topic copy beyond the budget is dropped and counted the same way.
    sim.control(&readers[0], Frame::Subscribe("t".into()));
    sim.send(
        &a,
        env(99, &a, Destination::topic("t"), Kind::Event).with_body(vec![1u8; 3 * STEP]),
    );
    assert_eq!(
        super::trust::dropped(&sim, "hub-queue-budget"),
        refused as u64 + 1
    );
    // Reading and leaving give the bytes back.
    sim.drain(&readers[0]);
    sim.drain(&readers[1]);
    sim.transport_closed(&readers[2]);
    sim.transport_closed(&readers[3]);
    // The two who left hold nothing; the three still here at most two steps each.
    assert!(
        queued_bytes(&sim) <= 3 * 2 * STEP as i64,
        "{}",
        queued_bytes(&sim)
    );
    sim.send(&a, big(100, &a, "r0", 3 * STEP));
    assert!(sim.drain(&a).is_empty());
}

#[test]
fn subscriptions_per_agent_are_bounded() {
    let mut sim = Sim::new(CoreConfig {
        max_subscriptions: 3,
        ..config()
    });
    let a = sim.connect("a");
    for t in ["t1", "t2", "t3", "t1"] {
        sim.control(&a, Frame::Subscribe(t.into()));
    }
    assert!(
        sim.drain(&a).is_empty(),
        "a topic already held does not count twice"
    );
    sim.control(&a, Frame::Subscribe("t4".into()));
    let got = sim.drain(&a);
    assert_eq!(
        error_code(got[0].envelope()),
        Some(ErrorCode::LimitExceeded)
    );
    assert!(!a.conn.is_closed());
    assert_eq!(a.conn.lock().topics.len(), 3);
    sim.control(&a, Frame::Unsubscribe("t1".into()));
    sim.control(&a, Frame::Subscribe("t4".into()));
    assert!(sim.drain(&a).is_empty());
}

#[test]
fn a_frame_the_writer_holds_counts_until_it_is_written() {
    let mut sim = Sim::new(CoreConfig {
        agent_queue_capacity: 1000,
        agent_queue_bytes: 10_000,
        ..config()
    });
    let a = sim.connect("a");
    let b = sim.connect("b");
    sim.send(&a, big(1, &a, "b", 4_000));
    // The driver takes it, and its write blocks (b does not read).
    assert!(sim.core.poll_outbound(&b.conn).is_some());
    sim.send(&a, big(2, &a, "b", 4_000));
    sim.send(&a, big(3, &a, "b", 4_000));
    let got = sim.drain(&a);
    assert_eq!(
        got.len(),
        1,
        "4 kB held by the writer + 4 kB queued leave no room for 4 kB"
    );
    assert_eq!(got[0].envelope().correlation, Some(3));
    // Written at last: room again.
    sim.core.written(&b.conn);
    sim.send(&a, big(4, &a, "b", 4_000));
    assert!(sim.drain(&a).is_empty());
}

/// Work queues are bounded in bytes and in number: a producer past a limit gets `queue-full`
/// with the reason, counted as `queue-refused`; nothing of it is stored.
#[test]
fn work_queues_are_bounded_in_bytes_and_in_number() {
    let mut sim = Sim::new(CoreConfig {
        queue: agentwire_queue::QueueConfig {
            max_queue_bytes: 1024,
            max_queues: 2,
            ..agentwire_queue::QueueConfig::default()
        },
        ..config()
    });
    let p = sim.connect("producer");
    let task = |id: u64, queue: &str, bytes: usize| {
        env(id, &p, Destination::queue(queue), Kind::Request).with_body(vec![7u8; bytes])
    };
    for (id, queue) in [(1, "a"), (2, "b")] {
        sim.send(&p, task(id, queue, 1000));
        sim.persist_all();
        let got = sim.drain(&p);
        assert_eq!(got[0].envelope().kind, Kind::Response, "{queue}");
    }
    // Queue a holds 1,000 bytes: 100 more do not fit.
    sim.send(&p, task(3, "a", 100));
    let got = sim.drain(&p);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::QueueFull));
    assert!(String::from_utf8_lossy(&got[0].envelope().body).contains("bytes"));
    // A third queue is one too many.
    sim.send(&p, task(4, "c", 1));
    let got = sim.drain(&p);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::QueueFull));
    assert!(String::from_utf8_lossy(&got[0].envelope().body).contains("too many queues"));
    assert_eq!(super::trust::dropped(&sim, "queue-refused"), 2);
    assert!(sim.persists.is_empty(), "nothing refused was written");
}

/// The dead-letter listing comes a page at a time (here one 600 KiB letter per page, under the
/// 1 MiB a page may hold), each page naming where the next starts; every letter once.
#[test]
fn dead_letters_are_listed_a_page_at_a_time() {
    let mut sim = Sim::new(CoreConfig {
        queue: agentwire_queue::QueueConfig {
            max_deliver: 1,
            ..agentwire_queue::QueueConfig::default()
        },
        ..config()
    });
    let boss = sim.connect("boss");
    let worker = sim.connect("worker");
    sim.control(&worker, consume("jobs", 10));
    for id in 1..=3 {
        sim.send(&boss, enqueue(id, &boss, "jobs", &"x".repeat(600 * 1024)));
    }
    sim.persist_all();
    sim.drain(&boss);
    let delivered = tasks(&sim.drain(&worker));
    assert_eq!(delivered.len(), 3);
    for (task, ..) in &delivered {
        sim.control(
            &worker,
            Frame::Nack(agentwire_proto::Nack {
                task: *task,
                delay_ms: Some(0),
            }),
        );
    }
    sim.persist_all();
    assert_eq!(sim.core.queue_stats("jobs").unwrap().dead, 3);
    let (mut after, mut listed, mut pages) = (None::<String>, Vec::new(), 0);
    loop {
        let mut ask = env(
            100 + pages,
            &boss,
            Destination::queue("jobs"),
            Kind::Request,
        )
        .with_header(QUEUE_OP_HEADER, "dead-letters");
        if let Some(a) = &after {
            ask = ask.with_header(AFTER_HEADER, a.clone());
        }
        sim.send(&boss, ask);
        sim.persist_all();
        let got = sim.drain(&boss);
        let answer = got[0].envelope();
        let page: Vec<serde_json::Value> = serde_json::from_slice(&answer.body).unwrap();
        listed.extend(page.iter().map(|d| d["task"].as_u64().unwrap()));
        pages += 1;
        match answer.headers.get(NEXT_AFTER_HEADER) {
            Some(next) => after = Some(next.clone()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let mut expected: Vec<u64> = delivered.iter().map(|(t, ..)| *t).collect();
    expected.sort_unstable();
    assert_eq!(listed, expected);
    // A bad cursor is refused.
    let ask = env(200, &boss, Destination::queue("jobs"), Kind::Request)
        .with_header(QUEUE_OP_HEADER, "dead-letters")
        .with_header(AFTER_HEADER, "soon");
    sim.send(&boss, ask);
    assert!(error_code(sim.drain(&boss)[0].envelope()).is_some());
}
