//! One behavioural suite, run against every transport: a real hub listening on all of them at
//! once, real agents over real sockets on loopback.
//!
//! Ordering guarantees differ by transport and are tested exactly as documented in
//! `docs/protocol.md`: byte-stream transports (Unix socket, WebSocket) and QUIC in `lanes`
//! mapping keep FIFO order per sender; QUIC `per-message` and HTTP/2 (one stream per message)
//! promise delivery exactly once, in no particular order.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use agentwire::hub::{Hub, HubConfig, Listener};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, CertBundle, HubIdentity};
use agentwire::transport::any::AnyReceiver;
use agentwire::transport::{FrameReceiver, FrameSender, SendClass, TransportError, TransportKind};
use agentwire::{
    Agent, AgentError, AgentOptions, Codec, Connector, Destination, ErrorCode, HubTrust, HubUrl,
    Kind, Priority, StreamMapping,
};
use agentwire_proto::{Frame, FrameType, Hello};
use bytes::Bytes;

const SECOND: Duration = Duration::from_secs(1);

/// A hub listening on every transport.
struct Rig {
    flavor: Flavor,
    hub: Hub,
    listeners: Vec<Listener>,
    bundle: CertBundle,
    _dir: tempfile::TempDir,
}

async fn rig(f: Flavor, mut config: HubConfig) -> Rig {
    config.stream_mapping = f.mapping;
    // WebTransport sessions come in on the QUIC listener (`wt://` is its port).
    config.webtransport = Some(agentwire::hub::WebTransportConfig::default());
    common::init_logs();
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let hub = Hub::new(config, HubMetrics::new());
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("hub.sock");
    let listeners = common::listen_everywhere(&hub, &identity, &sock).await;
    Rig {
        flavor: f,
        hub,
        listeners,
        bundle,
        _dir: dir,
    }
}

impl Rig {
    fn url(&self, kind: TransportKind) -> String {
        if kind == TransportKind::WebTransport {
            let quic = self.url(TransportKind::Quic);
            return quic.replacen("quic://", "wt://", 1);
        }
        self.listeners
            .iter()
            .find(|l| l.transport == kind)
            .map(|l| l.url.to_string())
            .unwrap_or_else(|| panic!("no {kind} listener"))
    }

    fn opts(&self, kind: TransportKind, id: &str) -> AgentOptions {
        let trust = HubTrust::ca_pem(&self.bundle.ca_cert_pem).unwrap();
        let mut opts = AgentOptions::new(id, self.url(kind), trust);
        opts.stream_mapping = self.flavor.mapping;
        opts
    }

    async fn agent(&self, kind: TransportKind, id: &str) -> Agent {
        let agent = Agent::connect(self.opts(kind, id)).await.unwrap();
        assert_eq!(agent.transport(), kind);
        agent
    }

    async fn echo(&self, kind: TransportKind, id: &str) -> tokio::task::JoinHandle<()> {
        let mut agent = self.agent(kind, id).await;
        tokio::spawn(async move {
            while let Some(msg) = agent.recv().await {
                if msg.envelope.kind == Kind::Request {
                    let _ = msg.reply(msg.envelope.body.clone()).await;
                }
            }
        })
    }

    fn queued_for(&self, id: &str) -> usize {
        self.hub
            .agents()
            .into_iter()
            .find(|a| a.id == id)
            .map(|a| a.queued)
            .unwrap_or(0)
    }

    async fn wait_agents(&self, n: usize) {
        for _ in 0..1000 {
            if self.hub.agent_count() == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("hub has {} agents, expected {n}", self.hub.agent_count());
    }
}

/// A transport, and for QUIC its stream mapping.
#[derive(Debug, Clone, Copy)]
struct Flavor {
    kind: TransportKind,
    mapping: StreamMapping,
}

const fn flavor(kind: TransportKind, mapping: StreamMapping) -> Flavor {
    Flavor { kind, mapping }
}

/// Does this transport keep one sender's messages in order?
fn fifo(f: Flavor) -> bool {
    matches!(f.kind, TransportKind::Unix | TransportKind::WebSocket)
        || (f.kind == TransportKind::Quic && f.mapping == StreamMapping::Lanes)
}

async fn next(agent: &mut Agent) -> agentwire::Incoming {
    tokio::time::timeout(10 * SECOND, agent.recv())
        .await
        .expect("a message within 10 s")
        .expect("connection stays up")
}

async fn handshake_and_codecs(f: Flavor) {
    let kind = f.kind;
    let r = rig(f, HubConfig::default()).await;
    let _echo = r.echo(kind, "echo").await;
    let mp = r.agent(kind, "mp").await;
    assert_eq!(mp.session().codec, Codec::MsgPack);
    let mut opts = r.opts(kind, "js");
    opts.codecs = vec![Codec::Json];
    let js = Agent::connect(opts).await.unwrap();
    assert_eq!(js.session().codec, Codec::Json);
    let body: Vec<u8> = (0..=255u8).collect();
    for a in [&mp, &js] {
        let reply = a.request("echo", body.clone(), 5 * SECOND).await.unwrap();
        assert_eq!(&reply.body[..], &body[..]);
    }
    assert_eq!(mp.stats().connection.transport, kind.name());

    let mut opts = r.opts(kind, "bad-token");
    opts.codecs = vec![];
    match Agent::connect(opts).await {
        Err(AgentError::Rejected { code, .. }) => assert_eq!(code, ErrorCode::NoCommonCodec),
        other => panic!("expected no-common-codec, got {:?}", other.err()),
    }
}

async fn every_kind_delivered(f: Flavor) {
    let kind = f.kind;
    let r = rig(f, HubConfig::default()).await;
    let mut rx = r.agent(kind, "rx").await;
    let tx = r.agent(kind, "tx").await;
    for (i, k) in Kind::ALL.into_iter().enumerate() {
        let env = tx
            .envelope(Destination::agent("rx"), k)
            .with_priority(Priority::ALL[i % 4])
            .with_header("n", i.to_string())
            .with_ttl_ms(60_000)
            .with_body(format!("body {i}"));
        tx.send_envelope(env).await.unwrap();
    }
    let mut got = BTreeMap::new();
    while got.len() < Kind::ALL.len() {
        let env = next(&mut rx).await.envelope;
        assert_eq!(env.from, "tx");
        let n: usize = env.headers["n"].parse().unwrap();
        assert_eq!(env.body, format!("body {n}").as_bytes());
        assert_eq!(env.priority, Priority::ALL[n % 4]);
        assert_eq!(env.ttl_ms, 60_000);
        got.insert(n, env.kind);
    }
    let kinds: Vec<Kind> = got.into_values().collect();
    assert_eq!(kinds, Kind::ALL.to_vec());
}

async fn messages_up_to_the_limit(f: Flavor) {
    let kind = f.kind;
    let mut config = HubConfig::default();
    config.policy.limits.max_frame_size = 2 * 1024 * 1024;
    let r = rig(f, config).await;
    let _echo = r.echo(kind, "echo").await;
    let a = r.agent(kind, "big").await;
    let body = vec![0xa5u8; 2 * 1024 * 1024 - 200];
    let reply = a.request("echo", body.clone(), 20 * SECOND).await.unwrap();
    assert_eq!(reply.body.len(), body.len());
    match a
        .request("echo", vec![0u8; 2 * 1024 * 1024 + 1], 5 * SECOND)
        .await
    {
        Err(AgentError::TooLarge(_)) => {}
        other => panic!("expected too large, got {other:?}"),
    }
}

async fn thousand_concurrent_requests(f: Flavor) {
    let kind = f.kind;
    let r = rig(f, HubConfig::default()).await;
    let _w = r.echo(kind, "worker").await;
    let mut all = tokio::task::JoinSet::new();
    for a in 0..10 {
        let agent = r.agent(kind, &format!("client-{a}")).await;
        for i in 0..100 {
            let handle = agent.handle().clone();
            all.spawn(async move {
                let body = format!("{a}/{i}");
                let reply = handle.request("worker", body.clone(), 30 * SECOND).await?;
                assert_eq!(reply.body, body.as_bytes());
                Ok::<_, AgentError>(())
            });
        }
        // Keep the agent alive while its requests run.
        all.spawn(async move {
            tokio::time::sleep(40 * SECOND).await;
            drop(agent);
            Ok(())
        });
    }
    let mut answered = 0;
    while let Some(res) = all.join_next().await {
        res.unwrap().unwrap();
        answered += 1;
        if answered == 1000 {
            all.abort_all();
            break;
        }
    }
    assert_eq!(answered, 1000);
}

async fn ordering(f: Flavor) {
    let kind = f.kind;
    let r = rig(f, HubConfig::default()).await;
    let mut rx = r.agent(kind, "rx").await;
    let tx = r.agent(kind, "tx").await;
    const N: usize = 500;
    for i in 0..N {
        tx.send(Destination::agent("rx"), Kind::State, i.to_string())
            .await
            .unwrap();
    }
    let mut seen = Vec::with_capacity(N);
    while seen.len() < N {
        let env = next(&mut rx).await.envelope;
        seen.push(
            std::str::from_utf8(&env.body)
                .unwrap()
                .parse::<usize>()
                .unwrap(),
        );
    }
    let unique: HashSet<usize> = seen.iter().copied().collect();
    assert_eq!(unique.len(), N, "every message exactly once");
    if fifo(f) {
        assert!(
            seen.windows(2).all(|w| w[0] < w[1]),
            "{kind} keeps FIFO order"
        );
    }
}

/// What an agent sent just before `close` still arrives: on QUIC the goodbye travels on the
/// control stream and must not overtake messages on streams of their own.
async fn messages_sent_before_close_arrive(f: Flavor) {
    let kind = f.kind;
    let r = rig(f, HubConfig::default()).await;
    let mut rx = r.agent(kind, "rx").await;
    for round in 0..5 {
        let tx = r.agent(kind, "tx").await;
        const N: usize = 50;
        for i in 0..N {
            tx.send(
                Destination::agent("rx"),
                Kind::Event,
                format!("{round}-{i}"),
            )
            .await
            .unwrap();
        }
        tx.close().await;
        let mut seen = HashSet::new();
        while seen.len() < N {
            let env = next(&mut rx).await.envelope;
            seen.insert(String::from_utf8(env.body.to_vec()).unwrap());
        }
        assert!(
            (0..N).all(|i| seen.contains(&format!("{round}-{i}"))),
            "{kind} round {round}"
        );
        r.wait_agents(1).await;
    }
}

async fn timeout_and_cancellation(f: Flavor) {
    let kind = f.kind;
    let r = rig(f, HubConfig::default()).await;
    let mut silent = r.agent(kind, "silent").await;
    let _keep = tokio::spawn(async move { while silent.recv().await.is_some() {} });
    let asker = r.agent(kind, "asker").await;
    match asker
        .request("silent", "hi", Duration::from_millis(200))
        .await
    {
        Err(AgentError::Timeout(_)) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    match asker.request("nobody", "hi", 5 * SECOND).await {
        Err(AgentError::Remote { code, .. }) => assert_eq!(code, ErrorCode::UnknownAgent),
        other => panic!("expected unknown-agent, got {other:?}"),
    }
    drop(asker.request("silent", "cancelled", 10 * SECOND));
    let _echo = r.echo(kind, "echo").await;
    asker.request("echo", "after", 5 * SECOND).await.unwrap();
}

/// Answers only from whom they were asked, over a real transport. For each request of `asker`
/// to `slow`, `forger` answers first with the request's very id (responses and errors in
/// turn), and `slow` answers only once the hub has refused every forgery: `forger` gets an
/// `unauthorized` error for each, `asker` gets the real answer and nothing else. The hub's
/// `$` names cannot be taken or published on either.
///
/// Attempts per transport: `AGENTWIRE_FORGE_ATTEMPTS` (default 2,000;
/// `scripts/faults/forged-answers.sh` runs 100,000).
async fn forged_answers_are_refused(f: Flavor) {
    let kind = f.kind;
    let attempts: usize = std::env::var("AGENTWIRE_FORGE_ATTEMPTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let per_request = 50;
    let r = rig(f, HubConfig::default()).await;
    let mut slow = r.agent(kind, "slow").await;
    let asker = r.agent(kind, "asker").await;
    let mut forger = r.agent(kind, "forger").await;
    let mut refused = 0;
    for round in 0..attempts.div_ceil(per_request) {
        let request = asker
            .envelope(Destination::agent("slow"), Kind::Request)
            .with_body(format!("q{round}"));
        let id = request.id;
        let handle = asker.handle().clone();
        let answer =
            tokio::spawn(async move { handle.request_envelope(request, 30 * SECOND).await });
        let asked = next(&mut slow).await;
        assert_eq!(asked.envelope.id, id);
        for i in 0..per_request {
            let k = if i % 2 == 0 {
                Kind::Response
            } else {
                Kind::Error
            };
            let forged = forger
                .envelope(Destination::agent("asker"), k)
                .with_correlation(id)
                .with_header("code", "internal")
                .with_body("forged");
            forger.send_envelope(forged).await.unwrap();
        }
        for _ in 0..per_request {
            let e = next(&mut forger).await.envelope;
            assert_eq!(
                (
                    e.kind,
                    e.from.as_str(),
                    e.headers.get("code").map(String::as_str)
                ),
                (Kind::Error, "$hub", Some("unauthorized")),
                "{kind}: {e:?}"
            );
            refused += 1;
        }
        asked.reply(format!("real{round}")).await.unwrap();
        let got = answer.await.unwrap().unwrap();
        assert_eq!(
            (got.from.as_str(), &got.body[..]),
            ("slow", format!("real{round}").as_bytes()),
            "{kind}: a forged answer was accepted"
        );
    }
    assert!(refused >= attempts);

    forger
        .publish("$presence", Kind::Event, "spoofed leave")
        .await
        .unwrap();
    let e = next(&mut forger).await.envelope;
    assert_eq!(e.headers["code"], "unauthorized", "{kind}: {e:?}");
    match Agent::connect(r.opts(kind, "$hub")).await {
        Err(AgentError::Rejected { code, .. }) => assert_eq!(code, ErrorCode::Unauthorized),
        other => panic!("{kind}: $hub taken as an id: {:?}", other.err()),
    }
}

/// How a raw connection ended: the code of a goodbye or of the close, if any.
async fn end_code(receiver: &mut AnyReceiver) -> Option<ErrorCode> {
    loop {
        match tokio::time::timeout(10 * SECOND, receiver.recv_frame()).await {
            Err(_) => panic!("the hub did not close the offending connection within 10 s"),
            Ok(Ok(Some(raw))) if raw.type_byte == FrameType::Goodbye as u8 => {
                return match Frame::decode(&raw, Codec::MsgPack) {
                    Ok(Frame::Goodbye(g)) => Some(g.code),
                    _ => None,
                };
            }
            Ok(Ok(Some(_))) => continue,
            Ok(Ok(None)) => return None,
            Ok(Err(TransportError::Closed { code, .. })) => return code,
            Ok(Err(_)) => return None,
        }
    }
}

/// Connects raw, completes the handshake, sends `bytes` as a message and returns how the hub
/// ended the connection.
async fn misbehave(
    r: &Rig,
    kind: TransportKind,
    id: &str,
    bytes: &'static [u8],
) -> Option<ErrorCode> {
    let opts = r.opts(kind, id);
    let url = HubUrl::parse(&r.url(kind)).unwrap();
    let hello = Frame::Hello(Hello::new(id, "raw"))
        .encode(Codec::MsgPack)
        .unwrap();
    let mut raw = Connector::new(&opts)
        .unwrap()
        .open(&opts, &url, hello)
        .await
        .unwrap();
    let welcome = raw.receiver.recv_frame().await.unwrap().unwrap();
    assert_eq!(welcome.type_byte, FrameType::Welcome as u8);
    raw.sender
        .send_frame(Bytes::from_static(bytes), SendClass::Message(Priority::Low))
        .await
        .unwrap();
    end_code(&mut raw.receiver).await
}

async fn bad_input_is_isolated(f: Flavor) {
    let kind = f.kind;
    let r = rig(f, HubConfig::default()).await;
    let _echo = r.echo(kind, "echo").await;
    let good = r.agent(kind, "good").await;
    good.request("echo", "warm-up", 5 * SECOND).await.unwrap();

    let m = Some(ErrorCode::MalformedFrame);
    assert_eq!(
        misbehave(&r, kind, "g1", b"\x00\x00\x00\x05\x10\xff\xff\xff\xff").await,
        m
    );
    assert_eq!(misbehave(&r, kind, "g2", b"\x00\x00\x00\x01\x77").await, m);
    assert_eq!(
        misbehave(&r, kind, "g3", b"\x06\x40\x00\x00").await,
        Some(ErrorCode::FrameTooLarge)
    );
    // Before its hello a peer cannot send more than a hello's worth: a 100 kB hello is
    // refused at its length, on every transport. (Over HTTP/2 and WebSocket the transport
    // reads ahead of the hub, so the hello's limit holds from the connection's first byte:
    // until 2026-11-28 a whole 100 kB hello sometimes got through before the hub lowered the
    // limit, was welcomed, and this check waited 10 s for an end that never came.)
    let opts = r.opts(kind, "huge");
    let url = HubUrl::parse(&r.url(kind)).unwrap();
    let mut hello = Hello::new("huge", "x".repeat(100_000));
    hello.codecs = vec![Codec::MsgPack.name().to_owned()];
    let hello = Frame::Hello(hello).encode(Codec::MsgPack).unwrap();
    match Connector::new(&opts)
        .unwrap()
        .open(&opts, &url, hello)
        .await
    {
        Ok(mut raw) => assert_eq!(
            end_code(&mut raw.receiver).await,
            Some(ErrorCode::FrameTooLarge),
            "{kind}"
        ),
        Err(e) => panic!("{kind}: the connection itself failed: {e}"),
    }
    let reply = good
        .request("echo", "still fine", 5 * SECOND)
        .await
        .unwrap();
    assert_eq!(&reply.body[..], b"still fine");
    r.wait_agents(2).await;
}

async fn disconnect_and_reconnect(f: Flavor) {
    let kind = f.kind;
    let r = rig(f, HubConfig::default()).await;
    let _echo = r.echo(kind, "echo").await;
    for round in 0..3 {
        let a = r.agent(kind, "comeback").await;
        let reply = a
            .request("echo", format!("round {round}"), 5 * SECOND)
            .await
            .unwrap();
        assert_eq!(reply.body, format!("round {round}").as_bytes());
        a.close().await;
        r.wait_agents(1).await;
    }
}

async fn dropping_the_agent_disconnects_it(f: Flavor) {
    let kind = f.kind;
    let r = rig(f, HubConfig::default()).await;
    let a = r.agent(kind, "short-lived").await;
    r.wait_agents(1).await;
    drop(a);
    r.wait_agents(0).await;
}

/// A critical message sent after a queue of bulk messages arrives ahead of all the bulk still
/// queued at the hub (by order of arrival: the receiver reads nothing until the critical
/// message has joined the hub's backlog).
async fn critical_overtakes_bulk(f: Flavor) {
    let kind = f.kind;
    let mut config = HubConfig::default();
    config.quic.send_window = 1024 * 1024;
    let r = rig(f, config).await;
    let mut rx_opts = r.opts(kind, "receiver");
    rx_opts.inbox_capacity = 1;
    rx_opts.quic.max_concurrent_uni_streams = 8;
    let mut receiver = Agent::connect(rx_opts).await.unwrap();
    let sender = r.agent(kind, "sender").await;
    // Enough bulk to overflow what the transport buffers below the hub's queue: kernel TCP
    // buffers on loopback grow to several MiB; HTTP/2 and QUIC stop at their windows.
    let bulk = match kind {
        TransportKind::WebSocket => 400,
        _ => 100,
    };
    let bulk_size = 64 * 1024;
    for i in 0..bulk {
        // Each bulk message carries its place in the sending order, so that a failure says
        // whether the hub sent later bulk ahead of the critical message or the receiver
        // handed it on later.
        let mut body = vec![7u8; bulk_size];
        body[..8].copy_from_slice(&(i as u64).to_be_bytes());
        let env = sender
            .envelope(Destination::agent("receiver"), Kind::Task)
            .with_priority(Priority::Low)
            .with_body(body);
        sender.send_envelope(env).await.unwrap();
    }
    let bulk_in = format!(
        "agentwire_hub_messages_total{{direction=\"in\",kind=\"task\",priority=\"low\"}} {bulk}"
    );
    for _ in 0..2000 {
        if r.hub.metrics().encode().contains(&bulk_in) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut backlog = r.queued_for("receiver");
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = r.queued_for("receiver");
        if now == backlog {
            break;
        }
        backlog = now;
    }
    assert!(backlog > 0, "the hub holds a backlog for the receiver");
    let critical = sender
        .envelope(Destination::agent("receiver"), Kind::Event)
        .with_priority(Priority::Critical)
        .with_body(&b"now"[..]);
    sender.send_envelope(critical).await.unwrap();
    for _ in 0..2000 {
        if r.queued_for("receiver") == backlog + 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(r.queued_for("receiver"), backlog + 1);
    let mut position = None;
    let mut ahead = Vec::new();
    for i in 0..=bulk {
        let envelope = next(&mut receiver).await.envelope;
        if envelope.priority == Priority::Critical {
            position = Some(i);
        } else if position.is_none() {
            ahead.push(u64::from_be_bytes(envelope.body[..8].try_into().unwrap()));
        }
    }
    let position = position.expect("critical arrived");
    // Bulk that had left the hub's queue may arrive first; so may one frame the hub's writer
    // held while it waited on the transport, and a frame or two that the receiver's concurrent
    // stream readers had ready when the critical one arrived. Everything else queued at the hub
    // must come after it.
    let slack = 3;
    assert!(
        position <= bulk - backlog + slack,
        "{kind}: critical at {position}, behind bulk that was queued at the hub before it \
         ({backlog} queued); the bulk ahead of it, by sending order: {ahead:?}"
    );
}

macro_rules! conformance {
    ($($module:ident => $kind:expr),* $(,)?) => {$(
        mod $module {
            use super::*;
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn handshake_and_codecs() { super::handshake_and_codecs($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn every_kind_delivered() { super::every_kind_delivered($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn messages_up_to_the_limit() { super::messages_up_to_the_limit($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn thousand_concurrent_requests() { super::thousand_concurrent_requests($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn ordering() { super::ordering($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn timeout_and_cancellation() { super::timeout_and_cancellation($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn messages_sent_before_close_arrive() { super::messages_sent_before_close_arrive($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bad_input_is_isolated() { super::bad_input_is_isolated($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn disconnect_and_reconnect() { super::disconnect_and_reconnect($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn dropping_the_agent_disconnects_it() { super::dropping_the_agent_disconnects_it($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn critical_overtakes_bulk() { super::critical_overtakes_bulk($kind).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn forged_answers_are_refused() { super::forged_answers_are_refused($kind).await }
        }
    )*};
}

conformance! {
    quic => flavor(TransportKind::Quic, StreamMapping::PerMessage),
    quic_lanes => flavor(TransportKind::Quic, StreamMapping::Lanes),
    http2 => flavor(TransportKind::Http2, StreamMapping::PerMessage),
    websocket => flavor(TransportKind::WebSocket, StreamMapping::PerMessage),
    unix => flavor(TransportKind::Unix, StreamMapping::PerMessage),
    webtransport => flavor(TransportKind::WebTransport, StreamMapping::PerMessage),
}

/// Agents on different transports reach each other through one hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_transport_delivery() {
    let f = flavor(TransportKind::Quic, StreamMapping::PerMessage);
    let r = rig(f, HubConfig::default()).await;
    let kinds: Vec<TransportKind> = r.listeners.iter().map(|l| l.transport).collect();
    let mut echoes = Vec::new();
    for k in &kinds {
        echoes.push(r.echo(*k, &format!("echo-{k}")).await);
    }
    for from in &kinds {
        let a = r.agent(*from, &format!("asker-{from}")).await;
        for to in &kinds {
            let body = format!("{from} -> {to}");
            let reply = a
                .request(&format!("echo-{to}"), body.clone(), 5 * SECOND)
                .await
                .unwrap();
            assert_eq!(reply.body, body.as_bytes());
        }
    }
}
