//! The hub's behaviour, in memory on explicit time: no sockets, no tasks, no clock.
//!
//! `Sim` plays the driver the way quinn-proto's `Pair` plays the network: it feeds the core
//! the frames agents send, takes what the core queued for each connection and decodes it as
//! the agent would, and moves time forward by hand.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agentwire_proto::{
    AgentHandshake, Codec, Destination, Envelope, ErrorCode, Frame, FrameDecoder, Hello, Kind,
    Priority, RawFrame,
};
use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use agentwire_transport::{SendClass, TransportKind};

mod memory;
mod trust;

/// A reply handle as a transport would have one: here, a number naming the request stream.
type Reply = u64;
type SimConn = Arc<Conn<(), Reply>>;

struct Sim {
    core: HubCore<(), Reply>,
    now: Now,
    actions: Vec<Action<(), Reply>>,
    /// Every close the core asked for, by connection id.
    closes: HashMap<u64, (ErrorCode, bool)>,
    /// Queue writes the core asked the driver to make durable, not yet confirmed.
    persists: Vec<(u64, Vec<agentwire_queue::StoreOp>)>,
    /// Operations asked of the hub: who, the request's id, what.
    hub_ops: Vec<(SimConn, u64, super::HubOp)>,
    /// [`Action::AgentsChanged`] seen so far.
    agents_changed: usize,
}

/// One frame the hub sent to an agent, decoded.
#[derive(Debug)]
struct Got {
    frame: Frame,
    class: SendClass,
    reply: Option<Reply>,
    /// The bytes as sent (to check forwarding without re-encoding).
    wire: Bytes,
}

impl Got {
    fn envelope(&self) -> &Envelope {
        match &self.frame {
            Frame::Envelope(e) => e,
            other => panic!("expected an envelope, got {other:?}"),
        }
    }
}

#[derive(Clone)]
struct Agent {
    conn: SimConn,
    id: String,
    codec: Codec,
}

fn config() -> CoreConfig {
    CoreConfig {
        agent_queue_capacity: 8,
        ..CoreConfig::default()
    }
}

impl Sim {
    fn new(config: CoreConfig) -> Sim {
        let now = Now {
            instant: std::time::Instant::now(),
            unix_us: 1_800_000_000_000_000,
        };
        Sim {
            core: HubCore::new(config, HubMetrics::new(), now),
            now,
            actions: Vec::new(),
            closes: HashMap::new(),
            persists: Vec::new(),
            hub_ops: Vec::new(),
            agents_changed: 0,
        }
    }

    /// Confirms every write asked for so far, as a store would after its commit.
    fn persist_all(&mut self) {
        if let Some(&(last, _)) = self.persists.last() {
            self.persists.clear();
            self.core.on_persisted(last, self.now, &mut self.actions);
            self.take_actions();
        }
    }

    fn take_actions(&mut self) {
        for a in self.actions.drain(..) {
            match a {
                Action::Close {
                    conn, code, linger, ..
                } => {
                    self.closes.insert(conn.id(), (code, linger));
                }
                Action::Persist { token, writes } => self.persists.push((token, writes)),
                Action::HubOp {
                    conn, request, op, ..
                } => self.hub_ops.push((conn, request, op)),
                Action::AgentsChanged => self.agents_changed += 1,
                Action::Wake(_) | Action::Registered(_) => {}
            }
        }
    }

    fn open(&mut self) -> SimConn {
        self.core.open(TransportKind::Quic, (), self.now)
    }

    fn feed(&mut self, conn: &SimConn, bytes: Bytes, reply: Option<Reply>) {
        let raw = FrameDecoder::decode_one(bytes, u32::MAX).expect("a whole frame");
        self.core
            .on_frame(conn, raw, reply, self.now, &mut self.actions);
        self.take_actions();
    }

    fn hello(&mut self, conn: &SimConn, hello: Hello) {
        let bytes = AgentHandshake::new(hello).hello_frame().unwrap();
        self.feed(conn, bytes, None);
    }

    fn connect_with(&mut self, id: &str, codec: Codec) -> Agent {
        let conn = self.open();
        let mut hello = Hello::new(id, "test");
        hello.codecs = vec![codec.name().to_owned()];
        self.hello(&conn, hello);
        let got = self.drain_raw(&conn);
        assert!(
            matches!(got.first().map(|g| &g.frame), Some(Frame::Welcome(_))),
            "{id}: expected a welcome, got {got:?}"
        );
        Agent {
            conn,
            id: id.to_owned(),
            codec,
        }
    }

    fn connect(&mut self, id: &str) -> Agent {
        self.connect_with(id, Codec::MsgPack)
    }

    fn send(&mut self, from: &Agent, env: Envelope) {
        self.send_with_reply(from, env, None)
    }

    fn send_with_reply(&mut self, from: &Agent, env: Envelope, reply: Option<Reply>) {
        let bytes = Frame::Envelope(env).encode(from.codec).unwrap();
        self.feed(&from.conn, bytes, reply);
    }

    fn control(&mut self, from: &Agent, frame: Frame) {
        let bytes = frame.encode(from.codec).unwrap();
        self.feed(&from.conn, bytes, None);
    }

    /// Everything queued for `conn`, decoded (handshake frames in MessagePack, envelopes in
    /// the codec the connection registered with).
    fn drain_raw(&mut self, conn: &SimConn) -> Vec<Got> {
        let codec = conn.registration().map_or(Codec::MsgPack, |r| r.codec);
        let mut got = Vec::new();
        while let Some(out) = self.core.poll_outbound(conn) {
            let raw: RawFrame = FrameDecoder::decode_one(out.frame.clone(), u32::MAX).unwrap();
            let frame = Frame::decode(&raw, codec).expect("the hub sends valid frames");
            got.push(Got {
                frame,
                class: out.class,
                reply: out.reply,
                wire: out.frame,
            });
        }
        self.core.written(conn);
        got
    }

    fn drain(&mut self, agent: &Agent) -> Vec<Got> {
        self.drain_raw(&agent.conn)
    }

    fn advance(&mut self, d: Duration) {
        self.now = self.now.after(d);
        self.core.on_timeout(self.now, &mut self.actions);
        self.take_actions();
    }

    fn transport_closed(&mut self, agent: &Agent) {
        self.core.on_closed(
            &agent.conn,
            ErrorCode::Normal,
            "gone",
            self.now,
            &mut self.actions,
        );
        self.take_actions();
    }
}

fn env(id: u64, from: &Agent, to: Destination, kind: Kind) -> Envelope {
    Envelope::new(id, from.id.clone(), to, kind).with_body(format!("body-{id}").into_bytes())
}

fn error_code(e: &Envelope) -> Option<ErrorCode> {
    assert_eq!(e.kind, Kind::Error, "{e:?}");
    e.headers.get("code").and_then(|c| ErrorCode::from_name(c))
}

// ---- handshake and registry ------------------------------------------------------------

#[test]
fn hello_registers_and_duplicates_are_refused() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    assert_eq!(sim.core.agent_count(), 1);
    assert_eq!(a.conn.registration().unwrap().agent_id.as_ref(), "a");

    let dup = sim.open();
    sim.hello(&dup, Hello::new("a", "test"));
    let got = sim.drain_raw(&dup);
    assert!(
        matches!(&got[..], [Got { frame: Frame::Reject(r), .. }] if r.code == ErrorCode::DuplicateAgentId.code())
    );
    assert_eq!(
        sim.closes[&dup.id()],
        (ErrorCode::DuplicateAgentId, true),
        "reject lingers"
    );
    assert!(!a.conn.is_closed());
    assert_eq!(sim.core.agent_count(), 1);
}

#[test]
fn replace_policy_closes_the_old_connection() {
    let mut sim = Sim::new(CoreConfig {
        duplicate_policy: DuplicatePolicy::ReplaceOld,
        ..config()
    });
    let watcher = sim.connect("watcher");
    sim.control(&watcher, Frame::Subscribe(PRESENCE_TOPIC.into()));
    let old = sim.connect("a");
    let new = sim.connect("a");
    assert!(old.conn.is_closed());
    assert_eq!(sim.closes[&old.conn.id()], (ErrorCode::Replaced, false));
    assert!(!new.conn.is_closed());
    let events: Vec<String> = sim
        .drain(&watcher)
        .iter()
        .map(|g| g.envelope().headers["event"].clone())
        .collect();
    assert_eq!(events, ["join", "leave", "join"]);
    // Messages to "a" reach the newcomer.
    let b = sim.connect("b");
    sim.send(&b, env(1, &b, Destination::agent("a"), Kind::Task));
    assert_eq!(sim.drain(&new).len(), 1);
}

#[test]
fn bad_hello_and_silence_close_the_connection() {
    let mut sim = Sim::new(config());
    let conn = sim.open();
    sim.feed(
        &conn,
        Frame::Subscribe("x".into()).encode(Codec::MsgPack).unwrap(),
        None,
    );
    assert!(conn.is_closed());
    assert!(matches!(
        sim.drain_raw(&conn).first().map(|g| &g.frame),
        Some(Frame::Reject(_))
    ));

    let silent = sim.open();
    sim.advance(Duration::from_secs(9));
    assert!(!silent.is_closed());
    sim.advance(Duration::from_secs(2));
    assert_eq!(sim.closes[&silent.id()].0, ErrorCode::HandshakeTimeout);
}

#[test]
fn frames_after_close_are_ignored() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    sim.transport_closed(&a);
    sim.send(&a, env(1, &a, Destination::agent("b"), Kind::Task));
    assert!(sim.drain(&b).is_empty());
    assert_eq!(sim.core.agent_count(), 1);
}

// ---- routing ---------------------------------------------------------------------------

#[test]
fn direct_messages_are_forwarded_without_re_encoding() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    let sent = env(7, &a, Destination::agent("b"), Kind::Task)
        .with_priority(Priority::Low)
        .with_header("trace", "t");
    let bytes = Frame::Envelope(sent.clone())
        .encode(Codec::MsgPack)
        .unwrap();
    sim.feed(&a.conn, bytes.clone(), None);
    let got = sim.drain(&b);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].envelope(), &sent);
    assert_eq!(got[0].class, SendClass::Message(Priority::Low));
    // The very buffer the sender's frame arrived in.
    assert_eq!(got[0].wire, bytes);
    assert_eq!(got[0].wire.as_ptr(), bytes.as_ptr());
}

#[test]
fn codecs_are_converted_and_from_is_corrected() {
    let mut sim = Sim::new(config());
    let a = sim.connect_with("a", Codec::MsgPack);
    let j = sim.connect_with("j", Codec::Json);
    let m = sim.connect("m");
    // A JSON agent claiming to be someone else: the hub writes the real sender.
    let mut lie = env(1, &j, Destination::agent("a"), Kind::Event);
    lie.from = "m".into();
    sim.send(&j, lie.clone());
    let got = sim.drain(&a);
    assert_eq!(got[0].envelope().from, "j");
    assert_eq!(got[0].envelope().body, lie.body);
    // MessagePack to JSON.
    let to_json = env(2, &m, Destination::agent("j"), Kind::Event).with_body(vec![0u8, 255, 7]);
    sim.send(&m, to_json.clone());
    assert_eq!(sim.drain(&j)[0].envelope(), &to_json);
}

#[test]
fn topics_and_broadcast_reach_everyone_but_the_sender() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    let c = sim.connect_with("c", Codec::Json);
    for x in [&a, &b, &c] {
        sim.control(x, Frame::Subscribe("news".into()));
    }
    sim.control(&c, Frame::Unsubscribe("news".into()));
    sim.send(&a, env(1, &a, Destination::topic("news"), Kind::Event));
    assert!(sim.drain(&a).is_empty(), "not to the sender");
    assert_eq!(sim.drain(&b).len(), 1);
    assert!(sim.drain(&c).is_empty(), "unsubscribed");

    sim.send(&b, env(2, &b, Destination::Broadcast, Kind::State));
    assert!(sim.drain(&b).is_empty());
    assert_eq!(sim.drain(&a)[0].envelope().id, 2);
    assert_eq!(sim.drain(&c)[0].envelope().id, 2);

    // A topic nobody subscribes to is not an error.
    sim.send(&a, env(3, &a, Destination::topic("empty"), Kind::Event));
    assert!(sim.drain(&a).is_empty());
}

#[test]
fn unknown_agent_and_expired_messages_get_errors() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    sim.send(&a, env(5, &a, Destination::agent("nobody"), Kind::Task));
    let got = sim.drain(&a);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::UnknownAgent));
    assert_eq!(got[0].envelope().correlation, Some(5));
    assert_eq!(got[0].envelope().from, HUB_ID);

    let b = sim.connect("b");
    let old = env(6, &a, Destination::agent("b"), Kind::Task)
        .with_timestamp_us(sim.now.unix_us - 2_000_000)
        .with_ttl_ms(1000);
    sim.send(&a, old);
    assert!(sim.drain(&b).is_empty());
    assert_eq!(
        error_code(sim.drain(&a)[0].envelope()),
        Some(ErrorCode::Expired)
    );
}

#[test]
fn full_queues_refuse_direct_messages_and_drop_copies() {
    let mut sim = Sim::new(config()); // 8 frames per queue
    let a = sim.connect("a");
    let b = sim.connect("b");
    sim.control(&b, Frame::Subscribe("t".into()));
    for i in 0..8 {
        sim.send(&a, env(i, &a, Destination::agent("b"), Kind::Task));
    }
    sim.send(&a, env(100, &a, Destination::agent("b"), Kind::Task));
    let errs = sim.drain(&a);
    assert_eq!(errs.len(), 1);
    assert_eq!(error_code(errs[0].envelope()), Some(ErrorCode::QueueFull));
    assert_eq!(errs[0].envelope().correlation, Some(100));
    // A topic copy to the full queue is dropped silently.
    sim.send(&a, env(101, &a, Destination::topic("t"), Kind::Event));
    assert!(sim.drain(&a).is_empty());
    assert_eq!(sim.drain(&b).len(), 8);
}

#[test]
fn the_queue_hands_out_the_most_urgent_class_first() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    for (i, p) in [
        Priority::Low,
        Priority::Medium,
        Priority::Low,
        Priority::Critical,
        Priority::High,
    ]
    .into_iter()
    .enumerate()
    {
        sim.send(
            &a,
            env(i as u64, &a, Destination::agent("b"), Kind::Task).with_priority(p),
        );
    }
    let order: Vec<u64> = sim.drain(&b).iter().map(|g| g.envelope().id).collect();
    assert_eq!(order, [3, 4, 1, 0, 2]);
}

#[test]
fn bad_frames_close_only_their_sender() {
    let mut sim = Sim::new(CoreConfig {
        policy: agentwire_proto::HubPolicy {
            limits: agentwire_proto::Limits {
                max_headers: 1,
                ..Default::default()
            },
            ..Default::default()
        },
        ..config()
    });
    let a = sim.connect("a");
    let b = sim.connect("b");
    let c = sim.connect("c");
    // Garbage in an envelope frame.
    let mut garbage = vec![0, 0, 0, 4, 0x10];
    garbage.extend_from_slice(&[0xc1, 0xff, 0x00]);
    sim.feed(&a.conn, Bytes::from(garbage), None);
    assert_eq!(sim.closes[&a.conn.id()].0, ErrorCode::MalformedFrame);
    // Too many headers.
    let many = env(1, &b, Destination::agent("c"), Kind::Task)
        .with_header("1", "")
        .with_header("2", "");
    sim.send(&b, many);
    assert_eq!(sim.closes[&b.conn.id()].0, ErrorCode::LimitExceeded);
    // A handshake frame after the handshake; an unknown frame type.
    let d = sim.connect("d");
    sim.feed(
        &d.conn,
        AgentHandshake::new(Hello::new("d", "x"))
            .hello_frame()
            .unwrap(),
        None,
    );
    assert_eq!(sim.closes[&d.conn.id()].0, ErrorCode::ProtocolViolation);
    let e = sim.connect("e");
    sim.feed(&e.conn, Bytes::from_static(&[0, 0, 0, 1, 0x77]), None);
    assert!(e.conn.is_closed());
    // c never noticed.
    assert!(!c.conn.is_closed());
    assert_eq!(sim.core.agent_count(), 1);
}

// ---- requests --------------------------------------------------------------------------

#[test]
fn a_request_gets_its_answer_on_its_own_stream() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    sim.send_with_reply(
        &a,
        env(1, &a, Destination::agent("b"), Kind::Request),
        Some(11),
    );
    let req = sim.drain(&b);
    assert_eq!(req[0].class, SendClass::Request(Priority::Medium));
    let answer =
        Envelope::new(50, "b", Destination::agent("a"), Kind::Response).with_correlation(1);
    sim.send(&b, answer.clone());
    let got = sim.drain(&a);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].envelope(), &answer);
    assert_eq!(got[0].reply, Some(11), "on the request's stream");
    // A second answer is not delivered: the request is settled and b owes nothing more.
    sim.send(&b, answer.clone().with_correlation(1));
    assert!(sim.drain(&a).is_empty());
}

#[test]
fn a_second_request_with_a_waiting_id_is_refused_and_the_first_still_answered() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    sim.send_with_reply(
        &a,
        env(1, &a, Destination::agent("b"), Kind::Request),
        Some(10),
    );
    sim.send_with_reply(
        &a,
        env(1, &a, Destination::agent("b"), Kind::Request),
        Some(11),
    );
    let refused = sim.drain(&a);
    assert_eq!(refused.len(), 1);
    assert_eq!(
        error_code(refused[0].envelope()),
        Some(ErrorCode::ProtocolViolation)
    );
    assert_eq!(
        refused[0].reply,
        Some(11),
        "on the second request's own stream"
    );
    assert!(
        !a.conn.is_closed(),
        "a bad id is the message's error, not the connection's"
    );
    assert_eq!(
        sim.drain(&b).len(),
        1,
        "only the first request was forwarded"
    );
    sim.send(
        &b,
        Envelope::new(5, "b", Destination::agent("a"), Kind::Response).with_correlation(1),
    );
    assert_eq!(sim.drain(&a)[0].reply, Some(10));
}

#[test]
fn a_request_to_nobody_is_answered_on_its_stream() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    sim.send_with_reply(
        &a,
        env(1, &a, Destination::agent("x"), Kind::Request),
        Some(3),
    );
    let got = sim.drain(&a);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::UnknownAgent));
    assert_eq!(got[0].reply, Some(3));
}

#[test]
fn an_unanswered_request_is_cancelled_at_its_ttl_and_late_answers_dropped() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    let req = env(1, &a, Destination::agent("b"), Kind::Request)
        .with_timestamp_us(sim.now.unix_us)
        .with_ttl_ms(500);
    sim.send_with_reply(&a, req, Some(9));
    sim.drain(&b);
    sim.advance(Duration::from_millis(400));
    assert!(sim.drain(&a).is_empty());
    sim.advance(Duration::from_millis(200));
    let got = sim.drain(&a);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::Cancelled));
    assert_eq!(
        (got[0].envelope().correlation, got[0].reply),
        (Some(1), Some(9))
    );
    // The answer comes after all: dropped, not a second answer.
    sim.send(
        &b,
        Envelope::new(2, "b", Destination::agent("a"), Kind::Response).with_correlation(1),
    );
    assert!(sim.drain(&a).is_empty());
    assert!(
        sim.drain(&b).is_empty(),
        "no error to the late responder either"
    );
}

#[test]
fn a_request_fails_at_once_when_its_target_leaves() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let b = sim.connect("b");
    sim.send_with_reply(
        &a,
        env(1, &a, Destination::agent("b"), Kind::Request),
        Some(4),
    );
    sim.send_with_reply(&a, env(2, &a, Destination::agent("b"), Kind::Request), None);
    sim.transport_closed(&b);
    let mut got: Vec<(u64, Option<ErrorCode>, Option<Reply>)> = sim
        .drain(&a)
        .iter()
        .map(|g| {
            (
                g.envelope().correlation.unwrap(),
                error_code(g.envelope()),
                g.reply,
            )
        })
        .collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        [
            (1, Some(ErrorCode::UnknownAgent), Some(4)),
            (2, Some(ErrorCode::UnknownAgent), None)
        ]
    );
}

#[test]
fn a_request_to_a_full_queue_is_refused_on_its_stream() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let _b = sim.connect("b");
    for i in 0..8 {
        sim.send(&a, env(i, &a, Destination::agent("b"), Kind::Task));
    }
    sim.send_with_reply(
        &a,
        env(99, &a, Destination::agent("b"), Kind::Request),
        Some(5),
    );
    let got = sim.drain(&a);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::QueueFull));
    assert_eq!(got[0].reply, Some(5));
    // Nothing is left waiting: no second error at the deadline.
    sim.advance(Duration::from_secs(61));
    assert!(sim
        .drain(&a)
        .iter()
        .all(|g| g.envelope().correlation != Some(99)));
}

// ---- liveness and presence -------------------------------------------------------------

#[test]
fn silent_agents_are_removed_and_others_told() {
    let mut sim = Sim::new(config());
    let beat = u64::from(sim.core.config().policy.heartbeat_interval_ms);
    let limit = beat * u64::from(sim.core.config().heartbeat_miss_limit);
    let watcher = sim.connect("watcher");
    sim.control(&watcher, Frame::Subscribe(PRESENCE_TOPIC.into()));
    let quiet = sim.connect("quiet");
    let busy = sim.connect("busy");
    sim.drain(&watcher);
    let hb = Frame::Heartbeat(agentwire_proto::Heartbeat {
        seq: 1,
        timestamp_us: 0,
    });
    let mut t = 0;
    while t <= limit + beat {
        sim.advance(Duration::from_millis(beat / 2));
        t += beat / 2;
        sim.control(&busy, hb.clone());
        sim.control(&watcher, hb.clone());
    }
    assert_eq!(sim.closes[&quiet.conn.id()].0, ErrorCode::LivenessTimeout);
    assert!(!busy.conn.is_closed());
    let leave = sim.drain(&watcher);
    let e = leave[0].envelope();
    assert_eq!(
        (
            e.headers["event"].as_str(),
            e.headers["agent"].as_str(),
            e.headers["reason"].as_str()
        ),
        ("leave", "quiet", "liveness-timeout")
    );
}

#[test]
fn shutdown_closes_everyone() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    let pending = sim.open();
    sim.core.shutdown(sim.now, &mut sim.actions);
    sim.take_actions();
    assert_eq!(sim.closes[&a.conn.id()].0, ErrorCode::ShuttingDown);
    assert!(pending.is_closed());
    assert_eq!(sim.core.agent_count(), 0);
}

// ---- properties ------------------------------------------------------------------------

/// One step of a random run.
#[derive(Debug, Clone)]
enum Step {
    Connect(usize),
    Disconnect(usize),
    Send {
        from: usize,
        to: usize,
    },
    Request {
        from: usize,
        to: usize,
        ttl_ms: u32,
    },
    /// Agent `who` answers the oldest request it received and has not answered.
    Answer(usize),
    /// Agent `from` answers, to agent `to`, a request it was not necessarily asked: the
    /// `pick`-th request made so far (any requester, any target).
    Forge {
        from: usize,
        to: usize,
        pick: usize,
    },
    /// Agent `who` takes what the hub queued for it.
    Drain(usize),
    Tick(u16),
}

fn step() -> impl Strategy<Value = Step> {
    let agent = 0..4usize;
    prop_oneof![
        agent.clone().prop_map(Step::Connect),
        agent.clone().prop_map(Step::Disconnect),
        (agent.clone(), agent.clone()).prop_map(|(from, to)| Step::Send { from, to }),
        (agent.clone(), agent.clone(), 0..3000u32).prop_map(|(from, to, ttl_ms)| Step::Request {
            from,
            to,
            ttl_ms
        }),
        agent.clone().prop_map(Step::Answer),
        (agent.clone(), agent.clone(), 0..64usize).prop_map(|(from, to, pick)| Step::Forge {
            from,
            to,
            pick
        }),
        agent.prop_map(Step::Drain),
        (1..2000u16).prop_map(Step::Tick),
    ]
}

/// What each agent saw, checked against the rules at the end of a run.
#[derive(Default)]
struct Ledger {
    /// (sender, id) of every plain message a connected target accepted, with the target.
    sent: HashMap<(String, u64), String>,
    delivered: HashMap<(String, u64), usize>,
    /// (requester, id) → answers and errors it got for it (via its stream or not).
    answers: HashMap<(String, u64), usize>,
    requests: HashSet<(String, u64)>,
    /// (requester, id) → the agent it asked, in the order the requests were made.
    asked: Vec<((String, u64), String)>,
    /// Requests whose requester was disconnected while they were outstanding.
    orphaned: HashSet<(String, u64)>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// For any interleaving of connects, messages, requests, answers, disconnects and time:
    /// a message accepted for a live agent reaches it exactly once (while it stays
    /// connected), and every request of an agent that stays connected gets exactly one
    /// answer or error.
    #[test]
    fn nothing_lost_nothing_doubled(steps in proptest::collection::vec(step(), 1..80)) {
        let mut sim = Sim::new(CoreConfig {
            agent_queue_capacity: 1000,
            max_request_wait: Duration::from_secs(3),
            ..CoreConfig::default()
        });
        let names = ["a0", "a1", "a2", "a3"];
        let mut live: Vec<Option<Agent>> = vec![None, None, None, None];
        let mut inbox: Vec<Vec<Envelope>> = vec![Vec::new(); 4];
        let mut to_answer: Vec<Vec<Envelope>> = vec![Vec::new(); 4];
        let mut ledger = Ledger::default();
        let mut next_id = 1u64;
        let mut beat = 0u64;

        let drain = |sim: &mut Sim, i: usize, live: &[Option<Agent>], inbox: &mut Vec<Vec<Envelope>>, to_answer: &mut Vec<Vec<Envelope>>| {
            if let Some(agent) = &live[i] {
                for g in sim.drain(agent) {
                    if let Frame::Envelope(e) = g.frame {
                        if e.kind == Kind::Request { to_answer[i].push(e.clone()); }
                        inbox[i].push(e);
                    }
                }
            }
        };

        for s in steps {
            match s {
                Step::Connect(i) if live[i].is_none() => {
                    live[i] = Some(sim.connect(names[i]));
                }
                Step::Disconnect(i) => {
                    if let Some(agent) = live[i].take() {
                        drain(&mut sim, i, &live, &mut inbox, &mut to_answer);
                        sim.transport_closed(&agent);
                        // What it had not read is gone with it; its open requests too.
                        for r in &ledger.requests {
                            if r.0 == names[i] { ledger.orphaned.insert(r.clone()); }
                        }
                        ledger.sent.retain(|_, to| to != names[i]);
                        to_answer[i].clear();
                    }
                }
                Step::Send { from, to } => {
                    let (Some(a), Some(_)) = (live[from].clone(), live[to].clone()) else { continue };
                    if from == to { continue; }
                    let id = next_id; next_id += 1;
                    sim.send(&a, Envelope::new(id, names[from], Destination::agent(names[to]), Kind::Task));
                    ledger.sent.insert((names[from].to_owned(), id), names[to].to_owned());
                }
                Step::Request { from, to, ttl_ms } => {
                    let Some(a) = live[from].clone() else { continue };
                    let id = next_id; next_id += 1;
                    let req = Envelope::new(id, names[from], Destination::agent(names[to]), Kind::Request)
                        .with_timestamp_us(sim.now.unix_us)
                        .with_ttl_ms(ttl_ms);
                    sim.send_with_reply(&a, req, Some(id));
                    ledger.requests.insert((names[from].to_owned(), id));
                    ledger.asked.push(((names[from].to_owned(), id), names[to].to_owned()));
                }
                Step::Answer(i) => {
                    let Some(b) = live[i].clone() else { continue };
                    if to_answer[i].is_empty() { continue; }
                    let req = to_answer[i].remove(0);
                    let ans = Envelope::new(next_id, names[i], Destination::Agent(req.from.clone()), Kind::Response)
                        .with_correlation(req.id);
                    next_id += 1;
                    sim.send(&b, ans);
                }
                Step::Forge { from, to, pick } => {
                    let Some(f) = live[from].clone() else { continue };
                    let Some(((_, request), _)) = ledger.asked.get(pick).cloned() else { continue };
                    let ans = Envelope::new(next_id, names[from], Destination::agent(names[to]), Kind::Response)
                        .with_correlation(request);
                    next_id += 1;
                    sim.send(&f, ans);
                }
                Step::Drain(i) => drain(&mut sim, i, &live, &mut inbox, &mut to_answer),
                Step::Tick(ms) => {
                    // Live agents beat, so only requests run out of time.
                    sim.advance(Duration::from_millis(u64::from(ms)));
                    beat += u64::from(ms);
                    for agent in live.iter().flatten() {
                        sim.control(agent, Frame::Heartbeat(agentwire_proto::Heartbeat { seq: beat, timestamp_us: 0 }));
                    }
                }
                Step::Connect(_) => {}
            }
        }
        // Let every deadline pass, then read everything.
        sim.advance(Duration::from_secs(4));
        for i in 0..4 { drain(&mut sim, i, &live, &mut inbox, &mut to_answer); }

        for (i, msgs) in inbox.iter().enumerate() {
            for e in msgs {
                match e.kind {
                    Kind::Task => *ledger.delivered.entry((e.from.clone(), e.id)).or_default() += 1,
                    Kind::Response | Kind::Error => {
                        if let Some(c) = e.correlation {
                            *ledger.answers.entry((names[i].to_owned(), c)).or_default() += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
        for (key, to) in &ledger.sent {
            let n = ledger.delivered.get(key).copied().unwrap_or(0);
            prop_assert_eq!(n, 1, "message {:?} to {} delivered {} times", key, to, n);
        }
        for (key, n) in &ledger.delivered {
            prop_assert!(*n <= 1, "message {:?} delivered {} times", key, n);
        }
        // Every answer to a request came from the agent asked, or from the hub.
        let asked: HashMap<(String, u64), String> = ledger.asked.iter().cloned().collect();
        for (i, msgs) in inbox.iter().enumerate() {
            for e in msgs.iter().filter(|e| matches!(e.kind, Kind::Response | Kind::Error)) {
                let Some(target) = e.correlation.and_then(|c| asked.get(&(names[i].to_owned(), c))) else { continue };
                prop_assert!(e.from == *target || e.from == HUB_ID, "{} answered {}'s request to {}", e.from, names[i], target);
            }
        }
        for r in &ledger.requests {
            if ledger.orphaned.contains(r) { continue; }
            let n = ledger.answers.get(r).copied().unwrap_or(0);
            prop_assert_eq!(n, 1, "request {:?} got {} answers", r, n);
        }
    }
}

// ---- work queues ------------------------------------------------------------------------

fn enqueue(id: u64, from: &Agent, queue: &str, body: &str) -> Envelope {
    env(id, from, Destination::queue(queue), Kind::Request).with_body(body.as_bytes().to_vec())
}

fn consume(queue: &str, credit: u32) -> Frame {
    Frame::Consume(agentwire_proto::Consume {
        queue: queue.into(),
        credit,
    })
}

/// The tasks (id, attempt, body) among what an agent got.
fn tasks(got: &[Got]) -> Vec<(u64, String, String)> {
    got.iter()
        .filter_map(|g| match &g.frame {
            Frame::Envelope(e) if matches!(e.to, Destination::Queue(_)) => Some((
                e.id,
                e.headers.get(ATTEMPT_HEADER).cloned().unwrap_or_default(),
                String::from_utf8_lossy(&e.body).into_owned(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn a_durable_queue_answers_and_delivers_only_once_the_store_has_the_task() {
    let mut sim = Sim::new(config());
    sim.core
        .restore_queues(agentwire_queue::Recovered::default(), sim.now);
    let boss = sim.connect("boss");
    let worker = sim.connect("worker");
    sim.control(&worker, consume("jobs", 1));
    sim.send_with_reply(&boss, enqueue(5, &boss, "jobs", "resize"), Some(77));
    assert!(
        sim.drain(&boss).is_empty(),
        "no receipt before the write is durable"
    );
    assert!(
        sim.drain(&worker).is_empty(),
        "no delivery before the write is durable"
    );
    assert_eq!(sim.persists.len(), 1);
    assert!(matches!(
        sim.persists[0].1[0],
        agentwire_queue::StoreOp::Put(_)
    ));
    sim.persist_all();
    let receipt = sim.drain(&boss);
    assert_eq!(receipt.len(), 1);
    let r = receipt[0].envelope();
    assert_eq!(
        (r.kind, r.correlation, receipt[0].reply),
        (Kind::Response, Some(5), Some(77))
    );
    assert_eq!(r.headers[DUPLICATE_HEADER], "false");
    let task_id: u64 = r.headers[TASK_ID_HEADER].parse().unwrap();
    let got = sim.drain(&worker);
    assert_eq!(tasks(&got), vec![(task_id, "1".into(), "resize".into())]);
    assert_eq!(got[0].envelope().from, "boss");
    // The ack's delete is a write too; the queue is empty once it is durable.
    sim.control(&worker, Frame::Ack(task_id));
    assert!(matches!(
        sim.persists.last().map(|p| &p.1[..]),
        Some([agentwire_queue::StoreOp::Delete(_)])
    ));
    sim.persist_all();
    let s = sim.core.queue_stats("jobs").unwrap();
    assert_eq!((s.ready, s.in_flight), (0, 0));
}

#[test]
fn queues_in_memory_answer_at_once_and_a_departed_consumer_returns_its_task() {
    let mut sim = Sim::new(config());
    let boss = sim.connect("boss");
    let a = sim.connect("a");
    let b = sim.connect("b");
    sim.control(&a, consume("jobs", 1));
    sim.send(&boss, enqueue(1, &boss, "jobs", "t1"));
    assert!(
        sim.persists.is_empty(),
        "nothing to make durable without a store"
    );
    assert_eq!(sim.drain(&boss).len(), 1, "the receipt");
    let held = tasks(&sim.drain(&a));
    assert_eq!(held.len(), 1);
    sim.control(&b, consume("jobs", 1));
    assert!(sim.drain(&b).is_empty(), "the task is a's");
    // b acking a's task changes nothing.
    sim.control(&b, Frame::Ack(held[0].0));
    sim.transport_closed(&a);
    sim.advance(Duration::from_millis(100)); // the first backoff
    assert_eq!(
        tasks(&sim.drain(&b)),
        vec![(held[0].0, "2".into(), "t1".into())]
    );
}

#[test]
fn a_producer_id_sent_twice_is_stored_once() {
    let mut sim = Sim::new(config());
    let boss = sim.connect("boss");
    for id in [1, 2] {
        let e = enqueue(id, &boss, "jobs", "once").with_header(PRODUCER_ID_HEADER, "p-1");
        sim.send(&boss, e);
    }
    let got = sim.drain(&boss);
    let dup: Vec<&str> = got
        .iter()
        .map(|g| g.envelope().headers[DUPLICATE_HEADER].as_str())
        .collect();
    assert_eq!(dup, vec!["false", "true"]);
    assert_eq!(
        got[0].envelope().headers[TASK_ID_HEADER],
        got[1].envelope().headers[TASK_ID_HEADER]
    );
    assert_eq!(sim.core.queue_stats("jobs").unwrap().ready, 1);
}

#[test]
fn a_failing_store_refuses_new_work_keeps_what_waits_and_heals() {
    let mut sim = Sim::new(config());
    sim.core
        .restore_queues(agentwire_queue::Recovered::default(), sim.now);
    let boss = sim.connect("boss");
    sim.send(&boss, enqueue(1, &boss, "jobs", "t"));
    assert!(sim.drain(&boss).is_empty());
    // The write of task 1 fails: the driver will try it again, so boss keeps waiting.
    sim.core.on_store_failed("disk full");
    assert!(
        sim.drain(&boss).is_empty(),
        "no error for a task that will be stored"
    );
    sim.send(&boss, enqueue(2, &boss, "jobs", "t"));
    let got = sim.drain(&boss);
    assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::Internal));
    assert_eq!(got[0].envelope().correlation, Some(2));
    assert!(String::from_utf8_lossy(&got[0].envelope().body).contains("disk full"));
    // Everything else still routes.
    let other = sim.connect("other");
    sim.send(
        &boss,
        env(3, &boss, Destination::agent("other"), Kind::Event),
    );
    assert_eq!(sim.drain(&other).len(), 1);
    // The disk takes writes again: task 1's receipt, and new work is taken.
    sim.core.on_store_recovered();
    sim.persist_all();
    let got = sim.drain(&boss);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].envelope().correlation, Some(1));
    assert_eq!(got[0].envelope().kind, Kind::Response);
    sim.send(&boss, enqueue(4, &boss, "jobs", "t"));
    sim.persist_all();
    assert_eq!(sim.drain(&boss)[0].envelope().kind, Kind::Response);
}

#[test]
fn bad_queue_input_gets_a_clear_error_and_the_sender_stays() {
    let mut sim = Sim::new(CoreConfig {
        queue: agentwire_queue::QueueConfig {
            max_task_bytes: 4,
            ..agentwire_queue::QueueConfig::default()
        },
        ..config()
    });
    let boss = sim.connect("boss");
    sim.send(&boss, enqueue(1, &boss, "jobs", "too large"));
    let got = sim.drain(&boss);
    assert_eq!(
        error_code(got[0].envelope()),
        Some(ErrorCode::LimitExceeded)
    );
    assert!(!boss.conn.is_closed());
    // A malformed ack closes only that connection.
    let other = sim.connect("other");
    let mut bad = Frame::Ack(1).encode(Codec::MsgPack).unwrap().to_vec();
    bad.truncate(bad.len() - 1);
    bad[3] -= 1;
    sim.feed(&boss.conn, Bytes::from(bad), None);
    assert!(boss.conn.is_closed());
    assert!(!other.conn.is_closed());
}

// ---- access policy -------------------------------------------------------------------------

fn access_config() -> CoreConfig {
    let json = format!(
        r#"{{"credentials": [
            {{"token_sha256": "{}", "ids": ["boss"], "send": ["agent:worker-*", "queue:jobs"],
              "subscribe": ["results.*"]}},
            {{"token_sha256": "{}", "ids": ["worker-*"], "send": ["topic:results.*"],
              "subscribe": ["results.*"], "consume": ["jobs"]}}
        ]}}"#,
        token_sha256("boss-token"),
        token_sha256("worker-token")
    );
    CoreConfig {
        access: Some(Arc::new(AccessPolicy::from_json(&json).unwrap())),
        ..config()
    }
}

impl Sim {
    /// Connects with a token; `Err` with the reject's code when the hub refuses.
    fn connect_token(&mut self, id: &str, token: &str) -> Result<Agent, ErrorCode> {
        let conn = self.open();
        let mut hello = Hello::new(id, "test");
        hello.auth_token = Some(token.to_owned());
        self.hello(&conn, hello);
        match self.drain_raw(&conn).first().map(|g| &g.frame) {
            Some(Frame::Welcome(_)) => Ok(Agent {
                conn,
                id: id.to_owned(),
                codec: Codec::MsgPack,
            }),
            Some(Frame::Reject(r)) => {
                Err(ErrorCode::from_code(r.code).unwrap_or(ErrorCode::Internal))
            }
            other => panic!("{id}: expected a welcome or a reject, got {other:?}"),
        }
    }
}

#[test]
fn an_agent_takes_only_the_ids_its_credential_names() {
    let mut sim = Sim::new(access_config());
    assert_eq!(
        sim.connect_token("boss", "worker-token").err(),
        Some(ErrorCode::Unauthorized)
    );
    assert_eq!(
        sim.connect_token("worker-1", "boss-token").err(),
        Some(ErrorCode::Unauthorized)
    );
    assert_eq!(
        sim.connect_token("boss", "").err(),
        Some(ErrorCode::Unauthorized)
    );
    assert!(sim.connect_token("boss", "boss-token").is_ok());
    assert!(sim.connect_token("worker-1", "worker-token").is_ok());
    assert!(sim.connect_token("worker-2", "worker-token").is_ok());
    assert_eq!(sim.core.agent_count(), 3);
}

impl Sim {
    /// Opens a connection on `transport` whose certificate names `certified` and says hello
    /// as `id`; `Err` with the reject's code when the hub refuses.
    fn connect_certified(
        &mut self,
        transport: TransportKind,
        certified: Option<&str>,
        id: &str,
    ) -> Result<(), ErrorCode> {
        let peer = Peer {
            remote: None,
            certified_id: certified.map(Arc::from),
        };
        let conn = self
            .core
            .open_from(transport, peer, (), self.now, &mut self.actions);
        self.take_actions();
        self.hello(&conn, Hello::new(id, "test"));
        match self.drain_raw(&conn).first().map(|g| &g.frame) {
            Some(Frame::Welcome(_)) => Ok(()),
            Some(Frame::Reject(r)) => {
                Err(ErrorCode::from_code(r.code).unwrap_or(ErrorCode::Internal))
            }
            other => panic!("{id}: expected a welcome or a reject, got {other:?}"),
        }
    }
}

#[test]
fn a_certificate_binds_the_id_and_a_hub_may_require_one() {
    use TransportKind::{Quic, Unix, WebSocket};
    let mut sim = Sim::new(config());
    assert_eq!(
        sim.connect_certified(Quic, Some("w1"), "w2"),
        Err(ErrorCode::Unauthorized)
    );
    assert_eq!(sim.connect_certified(Quic, Some("w1"), "w1"), Ok(()));
    assert_eq!(
        sim.connect_certified(Quic, None, "free"),
        Ok(()),
        "not required"
    );

    let mut sim = Sim::new(CoreConfig {
        require_client_cert: true,
        ..config()
    });
    assert_eq!(
        sim.connect_certified(WebSocket, None, "w3"),
        Err(ErrorCode::Unauthorized)
    );
    assert_eq!(
        sim.connect_certified(Quic, None, "w3"),
        Err(ErrorCode::Unauthorized)
    );
    assert_eq!(
        sim.connect_certified(Unix, None, "local"),
        Ok(()),
        "Unix sockets need none"
    );
    assert_eq!(sim.connect_certified(Quic, Some("w3"), "w3"), Ok(()));
    assert_eq!(sim.core.agent_count(), 2);
}

#[test]
fn forbidden_sends_subscribes_and_consumes_are_refused_and_nothing_is_delivered() {
    let mut sim = Sim::new(access_config());
    let boss = sim.connect_token("boss", "boss-token").unwrap();
    let w1 = sim.connect_token("worker-1", "worker-token").unwrap();
    let w2 = sim.connect_token("worker-2", "worker-token").unwrap();
    sim.control(&w2, Frame::Subscribe("results.eu".into()));
    // Allowed: boss → worker, worker → results topic, worker answering boss's request.
    sim.send(
        &boss,
        env(1, &boss, Destination::agent("worker-1"), Kind::Request),
    );
    let got = sim.drain(&w1);
    assert_eq!(got.len(), 1);
    sim.send(
        &w1,
        env(9, &w1, Destination::agent("boss"), Kind::Response).with_correlation(1),
    );
    assert_eq!(sim.drain(&boss)[0].envelope().kind, Kind::Response);
    // Forbidden: a worker writing to another worker, or to the boss unasked.
    sim.send(
        &w1,
        env(2, &w1, Destination::agent("worker-2"), Kind::Event),
    );
    sim.send(&w1, env(3, &w1, Destination::agent("boss"), Kind::Response));
    let errors = sim.drain(&w1);
    assert_eq!(errors.len(), 2);
    for e in &errors {
        assert_eq!(error_code(e.envelope()), Some(ErrorCode::Unauthorized));
    }
    assert_eq!(errors[0].envelope().correlation, Some(2));
    let leaked = sim.drain(&w2);
    assert!(leaked.is_empty(), "nothing half-delivered: {leaked:?}");
    assert!(sim.drain(&boss).is_empty());
    // A broadcast and a topic outside the grant.
    sim.send(&boss, env(4, &boss, Destination::Broadcast, Kind::Event));
    sim.send(
        &boss,
        env(5, &boss, Destination::topic("results.eu"), Kind::Event),
    );
    assert_eq!(sim.drain(&boss).len(), 2);
    assert!(sim.drain(&w2).is_empty());
    // Subscribe and consume outside the grant: an error, and no subscription.
    sim.control(&w1, Frame::Subscribe("secrets".into()));
    sim.control(&boss, consume("jobs", 1));
    for who in [&w1, &boss] {
        let got = sim.drain(who);
        assert_eq!(error_code(got[0].envelope()), Some(ErrorCode::Unauthorized));
        assert!(!who.conn.is_closed(), "a refusal keeps the connection");
    }
    sim.send(&w2, env(6, &w2, Destination::topic("secrets"), Kind::Event));
    assert!(sim.drain(&w1).is_empty());
    // The queue: boss may enqueue, workers may consume; a worker may not enqueue.
    sim.control(&w1, consume("jobs", 1));
    sim.send(&boss, enqueue(7, &boss, "jobs", "t"));
    assert_eq!(sim.drain(&boss)[0].envelope().kind, Kind::Response);
    assert_eq!(tasks(&sim.drain(&w1)).len(), 1);
    sim.send(&w2, enqueue(8, &w2, "jobs", "t"));
    assert_eq!(
        error_code(sim.drain(&w2)[0].envelope()),
        Some(ErrorCode::Unauthorized)
    );
    assert_eq!(sim.core.queue_stats("jobs").unwrap().in_flight, 1);
}

// ---- limits under abuse ----------------------------------------------------------------------

#[test]
fn an_agent_over_its_message_rate_gets_errors_and_others_are_unaffected() {
    let mut sim = Sim::new(CoreConfig {
        limits: AbuseLimits {
            agent_messages_per_sec: Some(5),
            ..AbuseLimits::default()
        },
        ..CoreConfig {
            agent_queue_capacity: 64,
            ..config()
        }
    });
    let flood = sim.connect("flood");
    let calm = sim.connect("calm");
    let sink = sim.connect("sink");
    for id in 1..=8 {
        sim.send(
            &flood,
            env(id, &flood, Destination::agent("sink"), Kind::Event),
        );
    }
    sim.send(
        &calm,
        env(1, &calm, Destination::agent("sink"), Kind::Event),
    );
    assert_eq!(
        sim.drain(&sink).len(),
        6,
        "five of the flood's, one of calm's"
    );
    let errors = sim.drain(&flood);
    assert_eq!(errors.len(), 3);
    assert_eq!(
        error_code(errors[0].envelope()),
        Some(ErrorCode::LimitExceeded)
    );
    assert!(String::from_utf8_lossy(&errors[0].envelope().body).contains("5 messages per second"));
    assert!(!flood.conn.is_closed());
    sim.advance(Duration::from_millis(400)); // two more tokens
    for id in 10..13 {
        sim.send(
            &flood,
            env(id, &flood, Destination::agent("sink"), Kind::Event),
        );
    }
    assert_eq!(sim.drain(&sink).len(), 2);
}

#[test]
fn an_agent_over_its_byte_rate_gets_errors() {
    let mut sim = Sim::new(CoreConfig {
        limits: AbuseLimits {
            agent_bytes_per_sec: Some(4096),
            ..AbuseLimits::default()
        },
        policy: HubPolicy {
            limits: agentwire_proto::Limits {
                max_frame_size: 2048,
                ..agentwire_proto::Limits::default()
            },
            ..HubPolicy::default()
        },
        ..config()
    });
    let big = sim.connect("big");
    let sink = sim.connect("sink");
    for id in 1..=4 {
        let e = env(id, &big, Destination::agent("sink"), Kind::Event).with_body(vec![0u8; 1500]);
        sim.send(&big, e);
    }
    assert_eq!(sim.drain(&sink).len(), 2);
    let errors = sim.drain(&big);
    assert_eq!(errors.len(), 2);
    assert!(String::from_utf8_lossy(&errors[0].envelope().body).contains("4096 bytes per second"));
}

#[test]
fn connections_per_address_and_handshakes_per_second_are_bounded() {
    let mut sim = Sim::new(CoreConfig {
        limits: AbuseLimits {
            connections_per_address: Some(2),
            handshakes_per_sec: Some(4),
            ..AbuseLimits::default()
        },
        ..config()
    });
    let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let other: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let open = |sim: &mut Sim, remote| {
        let c = sim.core.open_from(
            TransportKind::Quic,
            Peer {
                remote,
                certified_id: None,
            },
            (),
            sim.now,
            &mut sim.actions,
        );
        sim.take_actions();
        c
    };
    let a = open(&mut sim, Some(ip));
    let b = open(&mut sim, Some(ip));
    let c = open(&mut sim, Some(ip));
    assert!(!a.is_closed() && !b.is_closed());
    assert!(c.is_closed());
    assert_eq!(sim.closes[&c.id()].0, ErrorCode::LimitExceeded);
    let d = open(&mut sim, Some(other));
    assert!(!d.is_closed(), "another address is not affected");
    // The fourth handshake of this second is the last one the hub takes.
    let e = open(&mut sim, None);
    assert!(e.is_closed(), "over four handshakes per second");
    // A closed connection frees its address's place; a second later there are handshakes again.
    sim.core
        .on_closed(&a, ErrorCode::Normal, "bye", sim.now, &mut sim.actions);
    sim.take_actions();
    sim.now = sim.now.after(Duration::from_secs(1));
    let f = open(&mut sim, Some(ip));
    assert!(!f.is_closed());
}

// ---- queues kept by another hub (a cluster's queue owner) ---------------------------------

impl Sim {
    /// A connection of transport `cluster` registered as `id` (a cluster's stand-in).
    fn connect_cluster(&mut self, id: &str) -> Agent {
        let conn = self.core.open(TransportKind::Cluster, (), self.now);
        let mut hello = Hello::new(id, "cluster:test");
        hello.codecs = vec![Codec::MsgPack.name().to_owned()];
        self.hello(&conn, hello);
        let got = self.drain_raw(&conn);
        assert!(
            matches!(got.first().map(|g| &g.frame), Some(Frame::Welcome(_))),
            "{id}: {got:?}"
        );
        Agent {
            conn,
            id: id.to_owned(),
            codec: Codec::MsgPack,
        }
    }
}

#[test]
fn a_cluster_hears_when_this_hubs_agents_change_and_not_of_its_own_stand_ins() {
    let mut sim = Sim::new(config());
    let a = sim.connect("a");
    assert_eq!(sim.agents_changed, 1, "a joined");
    sim.control(&a, Frame::Subscribe("news".into()));
    assert_eq!(sim.agents_changed, 2, "a subscribed");
    sim.control(&a, Frame::Subscribe("news".into()));
    assert_eq!(
        sim.agents_changed, 2,
        "the same topic again changes nothing"
    );
    sim.control(&a, Frame::Unsubscribe("news".into()));
    sim.control(&a, Frame::Unsubscribe("news".into()));
    assert_eq!(sim.agents_changed, 3, "a unsubscribed, once");
    // A refused subscription changes nothing.
    sim.control(&a, Frame::Subscribe("$hub.secret".into()));
    let refused = sim.agents_changed;
    assert_eq!(refused, 3, "a refused subscription");

    // Another hub's agent, stood in for here: the cluster knows of it already.
    let there = sim.connect_cluster("b");
    sim.control(&there, Frame::Subscribe("news".into()));
    sim.transport_closed(&there);
    assert_eq!(
        sim.agents_changed, refused,
        "stand-ins are the cluster's own"
    );

    sim.transport_closed(&a);
    assert_eq!(sim.agents_changed, refused + 1, "a left");
}

/// Two hubs in memory with the cluster's wiring played by hand: `owner` keeps the queues;
/// `edge` passes its agents' queue work to its `$queues` connection, and each of its agents
/// has a stand-in on `owner`.
struct TwoHubs {
    owner: Sim,
    edge: Sim,
    queues: Agent,
    stand_ins: HashMap<String, Agent>,
}

impl TwoHubs {
    fn new(agents: &[&str]) -> TwoHubs {
        let owner = Sim::new(config());
        let mut edge = Sim::new(config());
        let queues = edge.connect_cluster(QUEUE_OWNER_ID);
        let mut two = TwoHubs {
            owner,
            edge,
            queues,
            stand_ins: HashMap::new(),
        };
        for id in agents {
            let s = two.owner.connect_cluster(id);
            two.stand_ins.insert(id.to_string(), s);
        }
        two
    }

    /// Carries what each side queued for the other until nothing moves: the edge's queue
    /// work to the sender's stand-in on the owner; the owner's deliveries to the consumer on
    /// the edge; its answers to the waiting requests there.
    fn relay(&mut self) {
        loop {
            let mut moved = false;
            for got in self.edge.drain_raw(&self.queues.conn.clone()) {
                let from = got.envelope().from.clone();
                let stand_in = self.stand_ins[&from].conn.clone();
                self.owner.feed(&stand_in, got.wire, None);
                moved = true;
            }
            let stand_ins: Vec<(String, SimConn)> = self
                .stand_ins
                .iter()
                .map(|(id, a)| (id.clone(), a.conn.clone()))
                .collect();
            for (id, conn) in stand_ins {
                for got in self.owner.drain_raw(&conn) {
                    let env = got.envelope();
                    if matches!(env.to, Destination::Queue(_)) {
                        let mut out = Vec::new();
                        assert!(self.edge.core.deliver_from_owner(&id, got.wire, &mut out));
                        self.edge.actions.extend(out);
                        self.edge.take_actions();
                    } else {
                        assert_eq!(env.from, HUB_ID, "only the owner's answers go back");
                        let mut out = Vec::new();
                        let now = self.edge.now;
                        assert!(self.edge.core.answer_from_cluster(got.wire, now, &mut out));
                        self.edge.actions.extend(out);
                        self.edge.take_actions();
                    }
                    moved = true;
                }
            }
            if !moved {
                return;
            }
        }
    }
}

#[test]
fn queue_work_goes_to_the_owner_and_its_answers_and_tasks_come_back() {
    let mut two = TwoHubs::new(&["boss", "worker"]);
    let boss = two.edge.connect("boss");
    let worker = two.edge.connect_with("worker", Codec::Json);
    two.edge.control(&worker, consume("jobs", 1));
    two.relay();
    assert_eq!(two.owner.core.queue_stats("jobs").unwrap().consumers, 1);
    assert!(
        two.edge.core.queue_stats("jobs").is_none(),
        "the edge keeps no queue"
    );
    // A request to the queue waits on the edge with its reply slot, like one to an agent.
    two.edge
        .send_with_reply(&boss, enqueue(5, &boss, "jobs", "resize"), Some(9));
    two.relay();
    let receipt = two.edge.drain(&boss);
    assert_eq!(receipt.len(), 1, "{receipt:?}");
    let r = receipt[0].envelope();
    assert_eq!(
        (r.kind, r.correlation, r.from.as_str(), receipt[0].reply),
        (Kind::Response, Some(5), HUB_ID, Some(9))
    );
    let task: u64 = r.headers[TASK_ID_HEADER].parse().unwrap();
    // The owner's delivery reaches the worker in its own codec (JSON).
    let got = two.edge.drain(&worker);
    assert_eq!(tasks(&got), vec![(task, "1".into(), "resize".into())]);
    assert_eq!(got[0].envelope().from, "boss");
    // A nack and a late ack travel as queue operations.
    two.edge.control(
        &worker,
        Frame::Nack(agentwire_proto::Nack {
            task,
            delay_ms: Some(0),
        }),
    );
    two.relay();
    two.owner.advance(Duration::from_millis(1));
    two.relay();
    assert_eq!(
        tasks(&two.edge.drain(&worker)),
        vec![(task, "2".into(), "resize".into())]
    );
    two.edge.control(&worker, Frame::Ack(task));
    two.relay();
    let s = two.owner.core.queue_stats("jobs").unwrap();
    assert_eq!((s.ready, s.in_flight, s.consumers), (0, 0, 1));
    // A queue operation's answer comes back too.
    let stats = env(6, &boss, Destination::queue("jobs"), Kind::Request)
        .with_header(QUEUE_OP_HEADER, "stats");
    two.edge.send(&boss, stats);
    two.relay();
    let answer = two.edge.drain(&boss);
    let body: serde_json::Value = serde_json::from_slice(&answer[0].envelope().body).unwrap();
    assert_eq!(body["consumers"], 1);
}

#[test]
fn a_new_owner_is_told_the_consumers_and_an_edge_can_take_the_queues_over() {
    let mut two = TwoHubs::new(&["boss", "worker"]);
    let worker = two.edge.connect("worker");
    two.edge.control(&worker, consume("jobs", 2));
    two.relay();
    // The owner changed (a fresh one knows no consumer): the edge names its consumers again.
    two.owner = Sim::new(config());
    for id in ["boss", "worker"] {
        let s = two.owner.connect_cluster(id);
        two.stand_ins.insert(id.into(), s);
    }
    let mut out = Vec::new();
    two.edge.core.queues_moved(&mut out);
    two.edge.actions.extend(out);
    two.edge.take_actions();
    two.relay();
    assert_eq!(two.owner.core.queue_stats("jobs").unwrap().consumers, 1);
    // The edge becomes the owner: its consumer consumes here, and queue work stays here.
    let mut out = Vec::new();
    two.edge.core.take_over_queues(
        agentwire_queue::Recovered::default(),
        two.edge.now,
        &mut out,
    );
    two.edge.actions.extend(out);
    two.edge.take_actions();
    assert!(!two.edge.core.queues_elsewhere());
    assert_eq!(two.edge.core.queue_stats("jobs").unwrap().consumers, 1);
    let boss = two.edge.connect("boss");
    two.edge.send(&boss, enqueue(1, &boss, "jobs", "here"));
    assert!(two.edge.drain_raw(&two.queues.conn.clone()).is_empty());
    two.edge.persist_all();
    assert_eq!(tasks(&two.edge.drain(&worker)).len(), 1);
    two.edge.drain(&boss);
    // It loses the queues again with a task's write under way: the producer is told to send
    // again, and queue work goes to the owner's connection once more.
    two.edge
        .send_with_reply(&boss, enqueue(2, &boss, "jobs", "in flight"), Some(5));
    assert!(two.edge.drain(&boss).is_empty(), "waiting on its write");
    let mut out = Vec::new();
    two.edge.core.give_up_queues(two.edge.now, &mut out);
    two.edge.actions.extend(out);
    two.edge.take_actions();
    let refused = two.edge.drain(&boss);
    assert_eq!(refused.len(), 1);
    let e = refused[0].envelope();
    assert_eq!(
        (error_code(e), e.correlation, refused[0].reply),
        (Some(ErrorCode::Cancelled), Some(2), Some(5))
    );
    assert!(two.edge.core.queues_elsewhere());
    two.edge.send(&boss, enqueue(3, &boss, "jobs", "elsewhere"));
    assert_eq!(two.edge.drain_raw(&two.queues.conn.clone()).len(), 1);
    // The worker is still named to the next owner.
    let mut out = Vec::new();
    two.edge.core.queues_moved(&mut out);
    two.edge.actions.extend(out);
    two.edge.take_actions();
    let named = two.edge.drain_raw(&two.queues.conn.clone());
    assert_eq!(named.len(), 1);
    assert_eq!(named[0].envelope().headers[QUEUE_OP_HEADER], "consume");
}

#[test]
fn only_the_cluster_may_take_the_queue_owner_id() {
    let mut sim = Sim::new(config());
    let conn = sim.open();
    sim.hello(&conn, Hello::new(QUEUE_OWNER_ID, "impostor"));
    let got = sim.drain_raw(&conn);
    assert!(
        matches!(got.first().map(|g| &g.frame), Some(Frame::Reject(r)) if r.code == ErrorCode::Unauthorized as u32),
        "{got:?}"
    );
    assert!(!sim.core.queues_elsewhere());
}
