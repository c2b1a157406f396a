//! Nobody speaks for another agent: answers only from the agent that was asked, the hub's `$`
//! names kept for the hub, and open requests bounded per agent.

use super::*;
use crate::core::{HubOp, HubOpError, HUB_OP_HEADER};

/// `agentwire_hub_dropped_messages_total{reason}` as the core counted it.
pub(super) fn dropped(sim: &Sim, reason: &str) -> u64 {
    let needle = format!("reason=\"{reason}\"}} ");
    sim.core
        .metrics()
        .encode()
        .lines()
        .filter(|l| l.starts_with("agentwire_hub_dropped_messages_total"))
        .find_map(|l| {
            l.split_once(&needle)
                .map(|(_, n)| n.trim().parse().unwrap())
        })
        .unwrap_or(0)
}

fn answer(id: u64, from: &Agent, to: &str, request: u64, kind: Kind) -> Envelope {
    Envelope::new(id, from.id.clone(), Destination::agent(to), kind)
        .with_correlation(request)
        .with_header("code", "internal")
        .with_body(format!("answer-{id}").into_bytes())
}

#[test]
fn a_third_agent_cannot_answer_for_the_asked_one() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    let c = sim.connect("c");
    sim.send_with_reply(
        &a,
        env(1, &a, Destination::agent("b"), Kind::Request),
        Some(7),
    );
    assert_eq!(sim.drain(&b).len(), 1);

    // c guesses every id from 1 to 64, with responses and errors alike.
    for guess in 1..=64u64 {
        let kind = if guess % 2 == 0 {
            Kind::Response
        } else {
            Kind::Error
        };
        sim.send(&c, answer(1000 + guess, &c, "a", guess, kind));
        let refusal = sim.drain(&c);
        let e = refusal[0].envelope();
        assert_eq!(error_code(e), Some(ErrorCode::Unauthorized));
        assert_eq!(e.from, HUB_ID);
        assert_eq!(
            e.correlation,
            Some(1000 + guess),
            "the refused answer's own id"
        );
    }
    assert!(sim.drain(&a).is_empty(), "no forged answer reaches a");
    assert_eq!(dropped(&sim, "not-asked"), 64);

    // The real answer still settles the request, on its own stream.
    sim.send(&b, answer(5, &b, "a", 1, Kind::Response));
    let got = sim.drain(&a);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].envelope().from.as_str(), got[0].reply),
        ("b", Some(7))
    );
    // And only once: b owes nothing more, so a second answer is refused too.
    sim.send(&b, answer(6, &b, "a", 1, Kind::Response));
    assert!(sim.drain(&a).is_empty());
    assert_eq!(
        error_code(sim.drain(&b)[0].envelope()),
        Some(ErrorCode::Unauthorized)
    );
    assert_eq!(dropped(&sim, "not-asked"), 65);
}

#[test]
fn an_answer_nobody_asked_for_is_refused_even_to_an_agent_that_never_asked() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    sim.send(&b, answer(3, &b, "a", 1, Kind::Response));
    assert!(sim.drain(&a).is_empty());
    assert_eq!(
        error_code(sim.drain(&b)[0].envelope()),
        Some(ErrorCode::Unauthorized)
    );
    assert!(!b.conn.is_closed(), "a refusal, not a close");
}

#[test]
fn an_id_reused_for_a_later_request_is_not_answered_by_the_first_target() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    let c = sim.connect("c");
    let req = |to: &str, now: Now| {
        env(1, &a, Destination::agent(to), Kind::Request)
            .with_timestamp_us(now.unix_us)
            .with_ttl_ms(100)
    };
    sim.send(&a, req("b", sim.now));
    sim.drain(&b);
    sim.advance(Duration::from_millis(150));
    assert_eq!(
        error_code(sim.drain(&a)[0].envelope()),
        Some(ErrorCode::Cancelled)
    );
    // a asks c with the same id; b's late answer must not settle it.
    sim.send(&a, req("c", sim.now));
    sim.drain(&c);
    sim.send(&b, answer(9, &b, "a", 1, Kind::Response));
    assert!(sim.drain(&a).is_empty());
    sim.send(&c, answer(9, &c, "a", 1, Kind::Response));
    assert_eq!(sim.drain(&a)[0].envelope().from, "c");
}

#[test]
fn every_subscriber_of_a_topic_request_may_answer_once_and_nobody_else() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    let c = sim.connect("c");
    let d = sim.connect("d");
    for s in [&b, &c] {
        sim.control(s, Frame::Subscribe("jobs".into()));
    }
    sim.send(&a, env(1, &a, Destination::topic("jobs"), Kind::Request));
    assert_eq!(sim.drain(&b).len(), 1);
    assert_eq!(sim.drain(&c).len(), 1);
    sim.send(&d, answer(2, &d, "a", 1, Kind::Response));
    sim.send(&b, answer(3, &b, "a", 1, Kind::Response));
    sim.send(&c, answer(4, &c, "a", 1, Kind::Response));
    sim.send(&b, answer(5, &b, "a", 1, Kind::Response));
    let from: Vec<String> = sim
        .drain(&a)
        .iter()
        .map(|g| g.envelope().from.clone())
        .collect();
    assert_eq!(from, ["b", "c"]);
    assert_eq!(
        error_code(sim.drain(&d)[0].envelope()),
        Some(ErrorCode::Unauthorized)
    );
    assert_eq!(
        error_code(sim.drain(&b)[0].envelope()),
        Some(ErrorCode::Unauthorized),
        "b's second answer was not asked for"
    );
}

#[test]
fn what_an_agent_owes_is_forgotten_at_the_requests_deadline() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    sim.control(&b, Frame::Subscribe("t".into()));
    let at = sim.now.unix_us;
    let ttl = |e: Envelope, ms| e.with_timestamp_us(at).with_ttl_ms(ms);
    sim.send(
        &a,
        ttl(env(1, &a, Destination::agent("b"), Kind::Request), 100),
    );
    sim.send(
        &a,
        ttl(env(2, &a, Destination::topic("t"), Kind::Request), 300),
    );
    assert_eq!(b.conn.lock().owed.len(), 2);
    sim.advance(Duration::from_millis(150));
    assert_eq!(b.conn.lock().owed.len(), 1);
    sim.advance(Duration::from_millis(200));
    assert!(b.conn.lock().owed.is_empty());
    // The topic request's answer after its deadline: not asked any more.
    sim.drain(&b);
    sim.send(&b, answer(3, &b, "a", 2, Kind::Response));
    assert!(sim
        .drain(&a)
        .iter()
        .all(|g| g.envelope().correlation != Some(2) || g.envelope().from == HUB_ID));
}

#[test]
fn open_requests_are_bounded_both_ways() {
    let mut sim = Sim::new(CoreConfig {
        max_open_requests: 2,
        ..config()
    });
    let a = sim.connect("a");
    let b = sim.connect("b");
    let c = sim.connect("c");
    for id in 1..=3 {
        sim.send(&a, env(id, &a, Destination::agent("b"), Kind::Request));
    }
    let got = sim.drain(&a);
    assert_eq!(got.len(), 1);
    assert_eq!(
        error_code(got[0].envelope()),
        Some(ErrorCode::LimitExceeded)
    );
    assert_eq!(got[0].envelope().correlation, Some(3));
    // b owes two answers: a third request to it is refused as to a full queue.
    sim.send(&c, env(1, &c, Destination::agent("b"), Kind::Request));
    let got = sim.drain(&c);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::QueueFull));
    // Answering frees a place.
    sim.drain(&b);
    sim.send(&b, answer(10, &b, "a", 1, Kind::Response));
    sim.send(&c, env(2, &c, Destination::agent("b"), Kind::Request));
    assert!(sim.drain(&c).is_empty());
    assert_eq!(sim.drain(&b).len(), 1);
}

#[test]
fn the_hubs_names_cannot_be_taken_or_spoken_to() {
    let mut sim = Sim::new(config());
    for id in [HUB_ID, "$presence", "$anything"] {
        let conn = sim.open();
        sim.hello(&conn, Hello::new(id, "impostor"));
        let got = sim.drain_raw(&conn);
        assert!(
            matches!(got.first().map(|g| &g.frame), Some(Frame::Reject(r)) if r.code == ErrorCode::Unauthorized.code()),
            "{id}: {got:?}"
        );
        assert!(conn.is_closed());
    }
    let a = sim.connect("a");
    let w = sim.connect("watcher");
    sim.control(&w, Frame::Subscribe(PRESENCE_TOPIC.into()));
    assert!(
        sim.drain(&w).is_empty(),
        "subscribing to $presence is allowed"
    );
    sim.control(&w, Frame::Subscribe("$other".into()));
    assert_eq!(
        error_code(sim.drain(&w)[0].envelope()),
        Some(ErrorCode::Unauthorized)
    );

    // A spoofed leave on $presence, and sends to the hub's names: refused, nothing delivered.
    let spoof = env(1, &a, Destination::topic(PRESENCE_TOPIC), Kind::Event)
        .with_header("event", "leave")
        .with_header("agent", "watcher");
    sim.send(&a, spoof);
    sim.send(&a, env(2, &a, Destination::agent(HUB_ID), Kind::Event));
    sim.send(&a, env(3, &a, Destination::queue("$jobs"), Kind::Task));
    let refused: Vec<_> = sim
        .drain(&a)
        .iter()
        .map(|g| (g.envelope().correlation, error_code(g.envelope())))
        .collect();
    assert_eq!(
        refused,
        [1, 2, 3].map(|i| (Some(i), Some(ErrorCode::Unauthorized)))
    );
    assert!(sim.drain(&w).is_empty(), "0 spoofed presence events");
    assert_eq!(dropped(&sim, "permission-denied"), 4);

    // The hub's own presence events still arrive.
    let _b = sim.connect("b");
    let got = sim.drain(&w);
    assert_eq!(got[0].envelope().from, HUB_ID);
    assert_eq!(got[0].envelope().headers["event"], "join");
}

/// A forged answer across two hubs: `a` on hub one asks `b` on hub two; `c`, also on hub two,
/// answers in `b`'s place. Hub two refuses it at once; and were hub two to pass it on anyway
/// (its stand-in of `c` on hub one sending it), hub one refuses it too.
#[test]
fn a_forged_answer_is_refused_on_both_hubs_of_a_cluster() {
    let mut one = Sim::new(config());
    let mut two = Sim::new(config());
    let a = one.connect("a");
    let b_there = one.connect_cluster("b");
    let c_there = one.connect_cluster("c");
    let b = two.connect("b");
    let c = two.connect("c");
    let a_there = two.connect_cluster("a");

    one.send(&a, env(1, &a, Destination::agent("b"), Kind::Request));
    let to_b = one.drain(&b_there);
    assert_eq!(to_b.len(), 1);
    two.feed(&a_there.conn, to_b[0].wire.clone(), None);
    assert_eq!(two.drain(&b)[0].envelope().id, 1);

    // On hub two: c cannot answer for b.
    two.send(&c, answer(50, &c, "a", 1, Kind::Response));
    assert!(two.drain(&a_there).is_empty(), "nothing goes to hub one");
    assert_eq!(
        error_code(two.drain(&c)[0].envelope()),
        Some(ErrorCode::Unauthorized)
    );
    // On hub one: c's stand-in cannot either.
    one.send(&c_there, answer(50, &c_there, "a", 1, Kind::Response));
    assert!(one.drain(&a).is_empty());
    assert_eq!(dropped(&one, "not-asked"), 1);

    // b's answer crosses both hubs.
    two.send(&b, answer(60, &b, "a", 1, Kind::Response));
    let back = two.drain(&a_there);
    assert_eq!(back.len(), 1);
    one.feed(&b_there.conn, back[0].wire.clone(), None);
    let got = one.drain(&a);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].envelope().from, "b");
}

/// A reloaded access file: an agent whose credential is gone, or whose permissions changed,
/// is closed with `unauthorized`; the others keep their connections; newcomers meet the new
/// rules.
#[test]
fn a_reloaded_access_file_closes_whom_it_no_longer_admits() {
    let mut sim = Sim::new(access_config());
    let boss = sim.connect_token("boss", "boss-token").unwrap();
    let worker = sim.connect_token("worker-1", "worker-token").unwrap();
    let other = sim.connect_token("worker-2", "worker-token").unwrap();
    // The workers' credential is gone; the boss's is as it was.
    let json = format!(
        r#"{{"credentials": [
            {{"token_sha256": "{}", "ids": ["boss"], "send": ["agent:worker-*", "queue:jobs"],
              "subscribe": ["results.*"]}}
        ]}}"#,
        token_sha256("boss-token")
    );
    let policy = Arc::new(AccessPolicy::from_json(&json).unwrap());
    let closed = sim.core.reload_access(policy, sim.now, &mut sim.actions);
    sim.take_actions();
    assert_eq!(closed, 2);
    for w in [&worker, &other] {
        assert_eq!(sim.closes[&w.conn.id()].0, ErrorCode::Unauthorized);
    }
    assert!(!boss.conn.is_closed());
    assert_eq!(
        sim.connect_token("worker-1", "worker-token").err(),
        Some(ErrorCode::Unauthorized)
    );
    // The boss may now send less: closed too, and back in under the new grant.
    let json = format!(
        r#"{{"credentials": [{{"token_sha256": "{}", "ids": ["boss"], "send": []}}]}}"#,
        token_sha256("boss-token")
    );
    let policy = Arc::new(AccessPolicy::from_json(&json).unwrap());
    assert_eq!(sim.core.reload_access(policy, sim.now, &mut sim.actions), 1);
    sim.take_actions();
    assert_eq!(sim.closes[&boss.conn.id()].0, ErrorCode::Unauthorized);
    let boss = sim.connect_token("boss", "boss-token").unwrap();
    sim.send(&boss, env(1, &boss, Destination::queue("jobs"), Kind::Task));
    assert_eq!(
        error_code(sim.drain(&boss)[0].envelope()),
        Some(ErrorCode::Unauthorized)
    );
}

/// Requests to `$hub` with a `hub-op` header: only a credential with `admin` may ask, only for
/// a known operation; the driver's answer goes back to the one who asked.
#[test]
fn only_admins_ask_the_hub_for_operations() {
    let json = format!(
        r#"{{"credentials": [
            {{"token_sha256": "{}", "ids": ["ops"], "admin": true}},
            {{"token_sha256": "{}", "ids": ["worker-*"], "send": ["*", "agent:*"]}}
        ]}}"#,
        token_sha256("ops-token"),
        token_sha256("worker-token")
    );
    let mut sim = Sim::new(CoreConfig {
        access: Some(Arc::new(AccessPolicy::from_json(&json).unwrap())),
        ..config()
    });
    let ops = sim.connect_token("ops", "ops-token").unwrap();
    let worker = sim.connect_token("worker-1", "worker-token").unwrap();
    let ask = |id: u64, from: &Agent, op: &str| {
        env(id, from, Destination::agent(HUB_ID), Kind::Request).with_header(HUB_OP_HEADER, op)
    };
    // Not an admin, even one allowed to send to every agent.
    sim.send(&worker, ask(1, &worker, "reload"));
    let got = sim.drain(&worker);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::Unauthorized));
    assert_eq!(got[0].envelope().correlation, Some(1));
    // An unknown operation.
    sim.send(&ops, ask(2, &ops, "format-disk"));
    let got = sim.drain(&ops);
    assert_eq!(
        error_code(got[0].envelope()),
        Some(ErrorCode::ProtocolViolation)
    );
    assert!(sim.hub_ops.is_empty());
    // The admin's reload goes to the driver, whose answer comes back correlated.
    sim.send(&ops, ask(3, &ops, "reload"));
    let (conn, request, op) = sim.hub_ops.pop().unwrap();
    assert_eq!((conn.id(), request, op), (ops.conn.id(), 3, HubOp::Reload));
    sim.core.answer_hub_op(
        &conn,
        request,
        Ok(r#"{"reloaded": ["access file"]}"#.into()),
        None,
        sim.now,
        &mut sim.actions,
    );
    sim.take_actions();
    let got = sim.drain(&ops);
    let answer = got[0].envelope();
    assert_eq!((answer.kind, answer.correlation), (Kind::Response, Some(3)));
    assert_eq!(answer.from, HUB_ID);
    assert_eq!(&answer.body[..], br#"{"reloaded": ["access file"]}"#);
    // A failure is an error to the admin.
    sim.send(&ops, ask(4, &ops, "reload"));
    let (conn, request, _) = sim.hub_ops.pop().unwrap();
    sim.core.answer_hub_op(
        &conn,
        request,
        Err(HubOpError::failed(
            "reading the access file",
            std::io::Error::other("disk gone"),
        )),
        None,
        sim.now,
        &mut sim.actions,
    );
    sim.take_actions();
    let got = sim.drain(&ops);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::Internal));
    let text = String::from_utf8_lossy(&got[0].envelope().body).into_owned();
    assert!(
        text.contains("reading the access file: disk gone"),
        "{text}"
    );
}

/// Without an access file nobody may ask the hub for operations.
#[test]
fn an_open_hub_does_no_operations() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    sim.send(
        &a,
        env(1, &a, Destination::agent(HUB_ID), Kind::Request).with_header(HUB_OP_HEADER, "reload"),
    );
    assert_eq!(
        error_code(sim.drain(&a)[0].envelope()),
        Some(ErrorCode::Unauthorized)
    );
    assert!(sim.hub_ops.is_empty());
}

/// An agent of another hub is held here to what this hub's access file grants its id at most:
/// a send outside it is refused on arrival, an id no credential names gets no stand-in, and the
/// queue keeper's connection stays the hubs' own.
#[test]
fn a_remote_agent_is_held_to_what_its_id_is_granted_here() {
    let mut sim = Sim::new(access_config());
    let boss = sim.connect_token("boss", "boss-token").unwrap();
    let worker_there = sim.connect_cluster("worker-9");
    // The workers' credential: results.* topics, and answers.
    sim.send(
        &worker_there,
        env(
            1,
            &worker_there,
            Destination::topic("results.x"),
            Kind::Event,
        ),
    );
    assert!(sim.drain(&worker_there).is_empty(), "allowed: no error");
    sim.send(
        &worker_there,
        env(2, &worker_there, Destination::agent("boss"), Kind::Task),
    );
    let got = sim.drain(&worker_there);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::Unauthorized));
    assert!(sim.drain(&boss).is_empty(), "nothing reached the boss");
    // An id no credential here names.
    let conn = sim.core.open(TransportKind::Cluster, (), sim.now);
    let mut hello = Hello::new("mallory", "cluster:test");
    hello.codecs = vec![Codec::MsgPack.name().to_owned()];
    sim.hello(&conn, hello);
    assert!(matches!(
        sim.drain_raw(&conn).first().map(|g| &g.frame),
        Some(Frame::Reject(_))
    ));
    // The hubs' own queue keeper needs no credential.
    sim.connect_cluster(QUEUE_OWNER_ID);
}
