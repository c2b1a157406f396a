//! Integration tests: a real hub and real agents over loopback QUIC.

mod common;

use std::time::Duration;

use agentwire::hub::{DuplicatePolicy, HubConfig, PRESENCE_TOPIC};
use agentwire::{
    Agent, AgentError, Codec, Connector, Destination, ErrorCode, HubTrust, Kind, Priority,
};
use agentwire_proto::{Frame, FrameType, Hello};
use common::{close_code, start_hub};

const SECOND: Duration = Duration::from_secs(1);

#[tokio::test]
async fn request_reply_and_codec_negotiation() {
    let t = start_hub(HubConfig::default()).await;
    let _echo = t.echo_agent("echo").await;

    let msgpack = t.agent("mp").await;
    assert_eq!(msgpack.session().codec, Codec::MsgPack);

    let mut json_opts = t.opts("js");
    json_opts.codecs = vec![Codec::Json];
    let json = Agent::connect(json_opts).await.unwrap();
    assert_eq!(json.session().codec, Codec::Json);

    // Bodies with non-UTF-8 bytes cross between codecs intact.
    let body: Vec<u8> = (0..=255u8).collect();
    for agent in [&msgpack, &json] {
        let reply = agent
            .request("echo", body.clone(), 5 * SECOND)
            .await
            .unwrap();
        assert_eq!(reply.kind, Kind::Response);
        assert_eq!(reply.from, "echo");
        assert_eq!(&reply.body[..], &body[..]);
    }
    let stats = msgpack.stats();
    assert_eq!(stats.connection.transport, "quic");
    assert!(stats.connection.rtt_us > 0);
    assert!(stats.connection.bytes_sent > 0);
    assert!(stats.messages_sent >= 1);
}

#[tokio::test]
async fn hub_prefers_its_codec_order_and_rejects_no_common_codec() {
    let mut config = HubConfig::default();
    config.policy.codecs = vec![Codec::Json, Codec::MsgPack];
    let t = start_hub(config).await;
    let a = t.agent("a").await;
    assert_eq!(
        a.session().codec,
        Codec::Json,
        "hub's first choice among those offered"
    );

    let mut config = HubConfig::default();
    config.policy.codecs = vec![Codec::MsgPack];
    let t = start_hub(config).await;
    let mut opts = t.opts("json-only");
    opts.codecs = vec![Codec::Json];
    match Agent::connect(opts).await {
        Err(AgentError::Rejected { code, .. }) => assert_eq!(code, ErrorCode::NoCommonCodec),
        Err(other) => panic!("expected a reject, got {other}"),
        Ok(_) => panic!("expected a reject, got a session"),
    }
}

#[tokio::test]
async fn wrong_ca_is_rejected_with_a_clear_error() {
    let t = start_hub(HubConfig::default()).await;
    let other = agentwire::tls::generate(&agentwire::tls::default_hub_names()).unwrap();
    let mut opts = t.opts("a");
    opts.trust = HubTrust::ca_pem(&other.ca_cert_pem).unwrap();
    let err = Agent::connect(opts).await.err().expect("must fail");
    let text = err.to_string();
    assert!(
        text.contains("not signed by the trusted CA"),
        "unclear error: {text}"
    );
    // The rustls error itself, not its text: quinn reports only the text; the dialer's
    // certificate check recorded the error.
    assert!(
        matches!(
            &err,
            AgentError::Connect(agentwire::transport::TransportError::Connect(
                agentwire::transport::ConnectError::Tls(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::UnknownIssuer
                ))
            ))
        ),
        "{err:?}"
    );
    assert_eq!(t.hub.agent_count(), 0);
}

#[tokio::test]
async fn pinned_key_accepted_and_wrong_pin_rejected() {
    let t = start_hub(HubConfig::default()).await;
    let identity =
        agentwire::tls::HubIdentity::from_pem(&t.bundle.hub_cert_pem, &t.bundle.hub_key_pem)
            .unwrap();
    let pin = identity.spki_pin().unwrap();

    let mut opts = t.opts("pinned");
    opts.trust = HubTrust::pin(&pin).unwrap();
    let agent = Agent::connect(opts).await.unwrap();
    assert_eq!(agent.id(), "pinned");

    let mut opts = t.opts("wrong-pin");
    opts.trust = HubTrust::pin(&format!("sha256:{}", "ab".repeat(32))).unwrap();
    let text = Agent::connect(opts)
        .await
        .err()
        .expect("must fail")
        .to_string();
    assert!(
        text.contains("does not match the pinned"),
        "unclear error: {text}"
    );
}

#[tokio::test]
async fn auth_token_is_enforced() {
    let mut config = HubConfig::default();
    config.policy.auth_token = Some("s3cret".into());
    let t = start_hub(config).await;
    for token in [None, Some("wrong".to_owned())] {
        let mut opts = t.opts("a");
        opts.auth_token = token;
        match Agent::connect(opts).await {
            Err(AgentError::Rejected { code, .. }) => assert_eq!(code, ErrorCode::Unauthorized),
            Err(e) => panic!("expected unauthorized, got {e}"),
            Ok(_) => panic!("expected unauthorized, got a session"),
        }
    }
    let mut opts = t.opts("a");
    opts.auth_token = Some("s3cret".into());
    Agent::connect(opts).await.unwrap();
}

#[tokio::test]
async fn duplicate_ids_follow_the_policy() {
    let t = start_hub(HubConfig::default()).await;
    let first = t.agent("dup").await;
    match Agent::connect(t.opts("dup")).await {
        Err(AgentError::Rejected { code, .. }) => assert_eq!(code, ErrorCode::DuplicateAgentId),
        Err(e) => panic!("expected duplicate-agent-id, got {e}"),
        Ok(_) => panic!("expected duplicate-agent-id, got a session"),
    }
    // The first agent is untouched.
    let _echo = t.echo_agent("echo").await;
    first
        .request("echo", "still here", 5 * SECOND)
        .await
        .unwrap();

    let config = HubConfig {
        duplicate_policy: DuplicatePolicy::ReplaceOld,
        ..HubConfig::default()
    };
    let t = start_hub(config).await;
    let old = t.agent("dup").await;
    let new = t.agent("dup").await;
    let reason = tokio::time::timeout(5 * SECOND, old.closed())
        .await
        .unwrap();
    assert!(
        reason.contains("replaced"),
        "old agent closed for: {reason}"
    );
    let _echo = t.echo_agent("echo").await;
    new.request("echo", "new one works", 5 * SECOND)
        .await
        .unwrap();
}

#[tokio::test]
async fn zero_rtt_is_accepted_on_reconnect() {
    zero_rtt_on_reconnect(HubConfig::default()).await;
}

/// With WebTransport on, the listener reads each connection's ALPN before taking it at
/// 0.5-RTT: QUIC agents' 0-RTT still comes through.
#[tokio::test]
async fn zero_rtt_is_accepted_on_reconnect_with_webtransport_on() {
    zero_rtt_on_reconnect(HubConfig {
        webtransport: Some(agentwire::hub::WebTransportConfig::default()),
        ..HubConfig::default()
    })
    .await;
}

async fn zero_rtt_on_reconnect(config: HubConfig) {
    let t = start_hub(config).await;
    let _echo = t.echo_agent("echo").await;
    let mut opts = t.opts("resumer");
    opts.zero_rtt = true;
    let connector = Connector::new(&opts).unwrap();

    let first = connector.connect(&opts).await.unwrap();
    assert!(
        !first.stats().zero_rtt_used,
        "no ticket yet: full handshake"
    );
    // A round trip makes sure the session ticket has arrived.
    first.request("echo", "one", 5 * SECOND).await.unwrap();
    first.close().await;
    t.wait_agents(1).await;

    let second = connector.connect(&opts).await.unwrap();
    let stats = second.stats();
    assert!(stats.zero_rtt_used, "reconnect should use 0-RTT: {stats:?}");
    assert_eq!(stats.zero_rtt_accepted, 1);
    assert_eq!(stats.zero_rtt_rejected, 0);
    second.request("echo", "two", 5 * SECOND).await.unwrap();
    let metrics = t.hub.metrics().encode();
    assert!(
        metrics.contains("agentwire_hub_zero_rtt_total{result=\"accepted\"} 1"),
        "hub counts the accepted 0-RTT connection:\n{metrics}"
    );
}

#[tokio::test]
async fn session_survives_a_rebind() {
    let t = start_hub(HubConfig::default()).await;
    let _echo = t.echo_agent("echo").await;
    let agent = t.agent("mover").await;
    agent.request("echo", "before", 5 * SECOND).await.unwrap();
    let before = agent.local_addr().unwrap();
    let session = agent.session().session_id;

    let after = agent.rebind("127.0.0.1:0".parse().unwrap()).unwrap();
    assert_ne!(before.port(), after.port());
    let reply = agent.request("echo", "after", 5 * SECOND).await.unwrap();
    assert_eq!(&reply.body[..], b"after");
    let info = t
        .hub
        .agents()
        .into_iter()
        .find(|a| a.id == "mover")
        .unwrap();
    assert_eq!(info.session_id, session, "same session after migration");
    assert_eq!(
        info.connection.remote_addr.map(|a| a.port()),
        Some(after.port())
    );
}

#[tokio::test]
async fn topics_broadcast_and_presence() {
    let t = start_hub(HubConfig::default()).await;
    let mut watcher = t.agent("watcher").await;
    watcher.subscribe(PRESENCE_TOPIC).await.unwrap();
    watcher.subscribe("news").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let publisher = t.agent("publisher").await;
    let join = tokio::time::timeout(5 * SECOND, watcher.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(join.envelope.kind, Kind::Event);
    assert_eq!(join.envelope.headers["event"], "join");
    assert_eq!(join.envelope.headers["agent"], "publisher");

    publisher
        .publish("news", Kind::Event, "extra!")
        .await
        .unwrap();
    let news = tokio::time::timeout(5 * SECOND, watcher.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(news.envelope.to, Destination::topic("news"));
    assert_eq!(&news.envelope.body[..], b"extra!");

    publisher
        .send(Destination::Broadcast, Kind::State, "all hands")
        .await
        .unwrap();
    let all = tokio::time::timeout(5 * SECOND, watcher.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(all.envelope.to, Destination::Broadcast);
    assert_eq!(all.envelope.from, "publisher");

    publisher.close().await;
    let leave = tokio::time::timeout(5 * SECOND, watcher.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(leave.envelope.headers["event"], "leave");
    assert_eq!(leave.envelope.headers["reason"], "normal");
}

#[tokio::test]
async fn silent_agent_is_removed_and_others_are_told() {
    let mut config = HubConfig::default();
    config.policy.heartbeat_interval_ms = 100;
    config.heartbeat_miss_limit = 3;
    let t = start_hub(config).await;
    let mut watcher = t.agent("watcher").await;
    watcher.subscribe(PRESENCE_TOPIC).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    // A raw client completes the handshake and then sends nothing, not even heartbeats.
    let conn = t.raw_connection().await;
    let _control = raw_hello(&conn, "ghost").await;

    let mut events = Vec::new();
    while events.len() < 2 {
        let msg = tokio::time::timeout(5 * SECOND, watcher.recv())
            .await
            .unwrap()
            .unwrap();
        events.push(msg.envelope.headers.clone());
    }
    assert_eq!(events[0]["event"], "join");
    assert_eq!(events[1]["event"], "leave");
    assert_eq!(events[1]["reason"], "liveness-timeout");
    assert_eq!(
        close_code(&conn).await,
        Some(u64::from(ErrorCode::LivenessTimeout.code()))
    );
    // The watcher itself beats and stays.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(t.hub.agent_count(), 1);
}

/// Opens the control stream of a raw connection, sends a hello as agent `id` and reads the
/// start of the welcome; returns the control stream's two directions.
async fn raw_hello(conn: &quinn::Connection, id: &str) -> (quinn::SendStream, quinn::RecvStream) {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let hello = Frame::Hello(Hello::new(id, "raw"))
        .encode(Codec::MsgPack)
        .unwrap();
    send.write_all(&hello).await.unwrap();
    let mut welcome = [0u8; 5];
    recv.read_exact(&mut welcome).await.unwrap();
    assert_eq!(welcome[4], 0x02, "welcome frame");
    (send, recv)
}

/// Sends `bytes` from a raw connection after a valid hello, and returns the close code.
async fn misbehave(t: &common::TestHub, id: &str, on_control: bool, bytes: &[u8]) -> Option<u64> {
    let conn = t.raw_connection().await;
    let (mut send, _recv) = raw_hello(&conn, id).await;
    if on_control {
        send.write_all(bytes).await.unwrap();
    } else {
        let mut uni = conn.open_uni().await.unwrap();
        uni.write_all(bytes).await.unwrap();
        let _ = uni.finish();
    }
    close_code(&conn).await
}

#[tokio::test]
async fn bad_input_closes_only_the_offender() {
    let t = start_hub(HubConfig::default()).await;
    let _echo = t.echo_agent("echo").await;
    let good = t.agent("good").await;
    good.request("echo", "warm-up", 5 * SECOND).await.unwrap();

    let malformed = u64::from(ErrorCode::MalformedFrame.code());
    // Garbage before any hello: rejected at the handshake.
    let conn = t.raw_connection().await;
    let (mut send, _recv) = conn.open_bi().await.unwrap();
    send.write_all(b"\x00\x00\x00\x09\x01GARBAGE!")
        .await
        .unwrap();
    assert_eq!(close_code(&conn).await, Some(malformed));

    // Garbage bytes as a message.
    assert_eq!(
        misbehave(&t, "g1", false, b"\x00\x00\x00\x05\x10\xff\xff\xff\xff").await,
        Some(malformed)
    );
    // An unknown frame type.
    assert_eq!(
        misbehave(&t, "g2", false, b"\x00\x00\x00\x01\x77").await,
        Some(malformed)
    );
    // A frame announcing 100 MiB: refused before the body is read.
    assert_eq!(
        misbehave(&t, "g3", false, &(100u32 << 20).to_be_bytes()).await,
        Some(u64::from(ErrorCode::FrameTooLarge.code()))
    );
    // A stream that ends in the middle of a frame.
    assert_eq!(
        misbehave(&t, "g4", false, b"\x00\x00\x01\x00\x10abc").await,
        Some(malformed)
    );
    // An envelope with an unknown kind (code 42), well-framed MessagePack otherwise.
    let mut env = Vec::new();
    let good_env = agentwire::Envelope::new(1, "g5", Destination::agent("echo"), Kind::Task);
    Frame::Envelope(good_env)
        .encode_into(Codec::MsgPack, &mut env)
        .unwrap();
    // Field 4 of the array (kind) is the byte after the destination [0, "echo"].
    let kind_at = env.windows(5).position(|w| w == b"\xa4echo").unwrap() + 5;
    assert_eq!(env[kind_at], Kind::Task.code());
    env[kind_at] = 42;
    assert_eq!(misbehave(&t, "g5", false, &env).await, Some(malformed));
    // A second hello on the control stream after the handshake.
    let hello = Frame::Hello(Hello::new("g6", "raw"))
        .encode(Codec::MsgPack)
        .unwrap();
    assert_eq!(
        misbehave(&t, "g6", true, &hello).await,
        Some(u64::from(ErrorCode::ProtocolViolation.code()))
    );

    // Everyone else kept working throughout.
    let reply = good
        .request("echo", "still fine", 5 * SECOND)
        .await
        .unwrap();
    assert_eq!(&reply.body[..], b"still fine");
    t.wait_agents(2).await;
}

#[tokio::test]
async fn messages_up_to_the_limit_and_oversize_refused() {
    let mut config = HubConfig::default();
    config.policy.limits.max_frame_size = 1024 * 1024;
    let t = start_hub(config).await;
    let _echo = t.echo_agent("echo").await;
    let agent = t.agent("big").await;
    assert_eq!(agent.session().max_frame_size, 1024 * 1024);
    // The largest body that fits: the frame adds the envelope header around it.
    let body = vec![1u8; 1024 * 1024 - 200];
    let reply = agent
        .request("echo", body.clone(), 10 * SECOND)
        .await
        .unwrap();
    assert_eq!(reply.body.len(), body.len());
    match agent
        .request("echo", vec![0u8; 1024 * 1024 + 1], 5 * SECOND)
        .await
    {
        Err(AgentError::TooLarge(_)) => {}
        other => panic!("expected too large, got {other:?}"),
    }
}

#[tokio::test]
async fn full_queue_gives_the_sender_an_error() {
    let config = HubConfig {
        agent_queue_capacity: 8,
        ..HubConfig::default()
    };
    let t = start_hub(config).await;
    // A receiver that never reads, with small buffers so that back-pressure reaches the hub.
    let mut opts = t.opts("slow");
    opts.inbox_capacity = 1;
    opts.quic.max_concurrent_uni_streams = 4;
    let _slow = Agent::connect(opts).await.unwrap();
    let (sender, mut inbox) = t.agent("fast").await.split();
    for _ in 0..2000 {
        sender
            .send(Destination::agent("slow"), Kind::Task, vec![0u8; 64])
            .await
            .unwrap();
    }
    let err = tokio::time::timeout(10 * SECOND, inbox.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(err.envelope.kind, Kind::Error);
    assert_eq!(err.envelope.headers["code"], "queue-full");
    assert!(err.envelope.correlation.is_some());
}

#[tokio::test]
async fn heartbeats_ride_datagrams_when_enabled() {
    let mut config = HubConfig::default();
    config.policy.heartbeat_interval_ms = 50;
    config.heartbeat_miss_limit = 4;
    let t = start_hub(config).await;

    let with = t.agent("dgram").await;
    let mut opts = t.opts("no-dgram");
    opts.quic.datagrams = false;
    let without = Agent::connect(opts).await.unwrap();

    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        with.stats().connection.datagrams_sent >= 3,
        "heartbeats went as datagrams: {:?}",
        with.stats().connection
    );
    assert_eq!(without.stats().connection.datagrams_sent, 0);
    // Both stayed alive through many heartbeat intervals: beats arrived either way.
    assert!(with.closed_reason().is_none());
    assert!(without.closed_reason().is_none());
    assert_eq!(t.hub.agent_count(), 2);
}

#[tokio::test]
async fn every_congestion_controller_works() {
    for cc in [
        agentwire::CongestionControl::Cubic,
        agentwire::CongestionControl::NewReno,
        agentwire::CongestionControl::Bbr,
        agentwire::CongestionControl::Bbr3,
    ] {
        let mut config = HubConfig::default();
        config.quic.congestion = cc;
        let t = start_hub(config).await;
        let _echo = t.echo_agent("echo").await;
        let mut opts = t.opts("client");
        opts.quic.congestion = cc;
        let a = Agent::connect(opts).await.unwrap();
        let body = vec![9u8; 256 * 1024];
        let reply = a.request("echo", body.clone(), 10 * SECOND).await.unwrap();
        assert_eq!(reply.body.len(), body.len(), "{cc}");
        assert!(a.stats().connection.cwnd_bytes > 0, "{cc}");
    }
}

#[tokio::test]
async fn idle_timeout_is_applied() {
    // Heartbeats far apart and no keep-alive: only the idle timeout can end the connection.
    let mut config = HubConfig::default();
    config.policy.heartbeat_interval_ms = 60_000;
    let t = start_hub(config).await;
    let mut opts = t.opts("idle");
    opts.quic.idle_timeout = Duration::from_millis(300);
    opts.quic.keep_alive = None;
    let a = Agent::connect(opts).await.unwrap();
    let started = std::time::Instant::now();
    let reason = tokio::time::timeout(10 * SECOND, a.closed()).await.unwrap();
    assert!(reason.contains("idle timeout"), "closed for: {reason}");
    assert!(started.elapsed() < 5 * SECOND);
}

/// In the per-message mapping a request travels as any message does, on a unidirectional
/// stream (shared with what is fed with it), and its answer comes back as a message matched by
/// correlation, through the hub in both directions. A peer that sends its request on a
/// bidirectional stream, as browsers do, gets the answer on that stream's return direction.
#[tokio::test]
async fn requests_travel_as_messages_and_a_request_stream_gets_its_answer() {
    let t = start_hub(HubConfig::default()).await;
    let mut worker = t.agent("worker").await;
    let worker_handle = worker.handle().clone();
    tokio::spawn(async move {
        while let Some(msg) = worker.recv().await {
            let _ = msg.reply(msg.envelope.body.clone()).await;
        }
    });
    let asker = t.agent("asker").await;
    for i in 0..10 {
        let reply = asker
            .request("worker", format!("q{i}"), 5 * SECOND)
            .await
            .unwrap();
        assert_eq!(reply.body, format!("q{i}").as_bytes());
    }
    // The hub's own error answer comes back the same way.
    assert!(matches!(
        asker.request("nobody", "q", 5 * SECOND).await,
        Err(AgentError::Remote {
            code: ErrorCode::UnknownAgent,
            ..
        })
    ));
    let hub_side = |id: &str| {
        t.hub
            .agents()
            .into_iter()
            .find(|a| a.id == id)
            .map(|a| a.connection)
            .unwrap()
    };
    assert_eq!(
        worker_handle.stats().connection.replies_on_request_streams,
        0
    );
    assert_eq!(hub_side("asker").replies_on_request_streams, 0);

    // A raw peer sends its request on a bidirectional stream of its own.
    let conn = t.raw_connection().await;
    let _control = raw_hello(&conn, "raw").await;
    let (mut request, mut answer) = conn.open_bi().await.unwrap();
    let env = agentwire::Envelope::new(7, "raw", Destination::agent("worker"), Kind::Request)
        .with_body("by request stream");
    request
        .write_all(&Frame::Envelope(env).encode(Codec::MsgPack).unwrap())
        .await
        .unwrap();
    request.finish().unwrap();
    let bytes = tokio::time::timeout(5 * SECOND, answer.read_to_end(1 << 20))
        .await
        .expect("the answer comes back on the request's stream")
        .unwrap();
    let raw = agentwire_proto::FrameDecoder::decode_one(bytes.into(), 1 << 20).unwrap();
    let Frame::Envelope(reply) = Frame::decode(&raw, Codec::MsgPack).unwrap() else {
        panic!("not an envelope");
    };
    assert_eq!(
        (reply.kind, reply.correlation, &reply.body[..]),
        (Kind::Response, Some(7), &b"by request stream"[..])
    );
    assert_eq!(hub_side("raw").replies_on_request_streams, 1);
}

/// The records of a JSON-SEQ qlog file (RFC 7464: each starts with 0x1E), parsed.
fn qlog_records(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.split('\u{1e}')
        .filter(|r| !r.trim().is_empty())
        .map(|r| serde_json::from_str(r).unwrap_or_else(|e| panic!("{}: {e}: {r}", path.display())))
        .collect()
}

#[tokio::test]
async fn qlog_writes_one_trace_per_connection_on_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = HubConfig::default();
    config.quic.qlog_dir = Some(dir.path().join("hub"));
    let t = start_hub(config).await;
    let mut opts = t.opts("echo");
    opts.quic.qlog_dir = Some(dir.path().join("agents"));
    let mut echo = Agent::connect(opts).await.unwrap();
    let echo_task = tokio::spawn(async move {
        while let Some(msg) = echo.recv().await {
            let _ = msg.reply(msg.envelope.body.clone()).await;
        }
    });
    let mut opts = t.opts("boss/1");
    opts.quic.qlog_dir = Some(dir.path().join("agents"));
    let boss = Agent::connect(opts).await.unwrap();
    for _ in 0..20 {
        boss.request("echo", vec![7u8; 4000], 5 * SECOND)
            .await
            .unwrap();
    }
    boss.close().await;
    drop(boss);
    echo_task.abort();
    let _ = echo_task.await;
    t.hub.shutdown();
    t.listener.close();
    drop(t);

    // Each file is complete once quinn drops its connection (after the close's draining
    // period): wait for every trace to carry the connection's packets.
    let expect = [("hub", 2usize), ("agents", 2)];
    let deadline = tokio::time::Instant::now() + 20 * SECOND;
    loop {
        let mut complete = true;
        for (sub, n) in expect {
            let files: Vec<_> = std::fs::read_dir(dir.path().join(sub))
                .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
                .unwrap_or_default();
            complete &= files.len() == n
                && files.iter().all(|f| {
                    std::fs::read_to_string(f).is_ok_and(|t| t.contains("recovery:metrics_updated"))
                });
        }
        if complete || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut names: Vec<String> = Vec::new();
    for sub in ["hub", "agents"] {
        for entry in std::fs::read_dir(dir.path().join(sub)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.ends_with(".sqlog"), "{name}");
            let records = qlog_records(&path);
            assert!(records[0]["qlog_version"].is_string(), "{name}: no header");
            let events: Vec<&str> = records[1..]
                .iter()
                .filter_map(|r| r["name"].as_str())
                .collect();
            assert!(events.contains(&"transport:packet_sent"), "{name}");
            assert!(events.contains(&"transport:packet_received"), "{name}");
            assert!(
                records[1..]
                    .iter()
                    .any(|r| r["name"] == "recovery:metrics_updated"
                        && r["data"]["congestion_window"].is_u64()),
                "{name}: no congestion window in the trace"
            );
            names.push(format!("{sub}/{name}"));
        }
    }
    names.sort();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(names[0].starts_with("agents/agent-boss_1-"), "{names:?}");
    assert!(names[1].starts_with("agents/agent-echo-"), "{names:?}");
    assert!(names[2].starts_with("hub/hub-") && names[3].starts_with("hub/hub-"));
}

/// Connections between loopback addresses start at the loopback datagram size on both ends
/// (no discovery) and carry a 1 MiB message in 64 KiB datagrams (quinn's batches of them
/// exceed what one GSO send takes and are split); with it switched off they stay at
/// Ethernet's sizes on loopback too.
#[tokio::test]
async fn loopback_connections_use_the_loopback_datagram_size() {
    let t = start_hub(HubConfig::default()).await;
    let _echo = t.echo_agent("echo").await;
    let a = t.agent("local").await;
    let reply = a
        .request("echo", vec![1u8; 1024 * 1024], 10 * SECOND)
        .await
        .unwrap();
    assert_eq!(reply.body.len(), 1024 * 1024);
    let want = agentwire::QuicSettings::default().loopback_mtu;
    assert_eq!(a.stats().connection.mtu, want, "the agent's datagram size");
    let at_hub = t
        .hub
        .agents()
        .into_iter()
        .find(|i| i.id == "local")
        .unwrap();
    assert_eq!(at_hub.connection.mtu, want, "the hub's datagram size");

    let mut config = HubConfig::default();
    config.quic.loopback_mtu = 0;
    let t = start_hub(config).await;
    let _echo = t.echo_agent("echo").await;
    let mut opts = t.opts("discovering");
    opts.quic.loopback_mtu = 0;
    let a = Agent::connect(opts).await.unwrap();
    let reply = a
        .request("echo", vec![1u8; 64 * 1024], 10 * SECOND)
        .await
        .unwrap();
    assert_eq!(reply.body.len(), 64 * 1024);
    let mtu = a.stats().connection.mtu;
    assert!(
        mtu <= agentwire::QuicSettings::default().max_mtu,
        "discovered {mtu}"
    );
}

/// The hub's endpoint hands each large received datagram on without copying it and reuses its
/// buffer once every message in it is gone (`vendor/README.md`): bodies from 1 byte to 300 KiB,
/// several thousand 64 KiB datagrams in all, more than it keeps buffers for, come back intact,
/// each with its own bytes.
#[tokio::test]
async fn large_datagrams_arrive_intact_through_reused_buffers() {
    let t = start_hub(HubConfig::default()).await;
    let _echo = t.echo_agent("echo").await;
    let mut agents = Vec::new();
    for i in 0..4 {
        agents.push(t.agent(&format!("sender-{i}")).await);
    }
    let body = |agent: usize, n: usize| -> Vec<u8> {
        let len = [1, 1000, 10 * 1024, 65_000, 100 * 1024, 300 * 1024][n % 6];
        (0..len)
            .map(|i| (i * 31 + n * 7 + agent * 13) as u8)
            .collect()
    };
    let runs = agents.iter().enumerate().map(|(a, agent)| async move {
        for n in 0..60 {
            let sent = body(a, n);
            let reply = agent.request("echo", sent.clone(), 30 * SECOND).await;
            let reply = reply.unwrap_or_else(|e| panic!("agent {a} request {n}: {e}"));
            assert!(reply.body[..] == sent[..], "agent {a} request {n} changed");
        }
    });
    futures_util::future::join_all(runs).await;
}

/// With a receive budget far below what the agents send at once, every connection gets the
/// smallest window and still delivers everything: windows throttle, they never stall.
#[tokio::test]
async fn a_tiny_receive_budget_throttles_but_delivers() {
    let mut config = HubConfig::default();
    config.quic.receive_budget = 1;
    let t = start_hub(config).await;
    let _echo = t.echo_agent("echo").await;
    let mut askers = Vec::new();
    for i in 0..4 {
        askers.push(t.agent(&format!("asker-{i}")).await);
    }
    let body = vec![3u8; 512 * 1024];
    let mut calls = Vec::new();
    for a in &askers {
        calls.push(a.request("echo", body.clone(), 30 * SECOND));
    }
    for reply in futures_util::future::join_all(calls).await {
        assert_eq!(reply.unwrap().body.len(), body.len());
    }
}

/// A session resumed with 0-RTT after the receive budget's share has shrunk (more agents
/// connected since) is still accepted: the transport parameters a connection starts with do
/// not depend on how many share the budget.
#[tokio::test]
async fn zero_rtt_survives_a_shrinking_receive_budget_share() {
    let mut config = HubConfig::default();
    config.quic.receive_budget = 4 * 1024 * 1024;
    let t = start_hub(config).await;
    let _echo = t.echo_agent("echo").await;
    let mut opts = t.opts("resumer");
    opts.zero_rtt = true;
    let connector = Connector::new(&opts).unwrap();
    let first = connector.connect(&opts).await.unwrap();
    first.request("echo", "one", 5 * SECOND).await.unwrap();
    first.close().await;
    t.wait_agents(1).await;
    let mut others = Vec::new();
    for i in 0..20 {
        others.push(t.agent(&format!("other-{i}")).await);
    }
    let second = connector.connect(&opts).await.unwrap();
    assert!(second.stats().zero_rtt_used, "{:?}", second.stats());
    let reply = second
        .request("echo", vec![4u8; 300 * 1024], 10 * SECOND)
        .await
        .unwrap();
    assert_eq!(reply.body.len(), 300 * 1024);
}

#[tokio::test]
async fn several_endpoints_on_one_address_share_the_agents() {
    let mut config = HubConfig::default();
    config.quic.server_endpoints = 4;
    let t = start_hub(config).await;
    assert_eq!(t.listener.connections_per_endpoint().len(), 4);
    let _echo = t.echo_agent("echo").await;
    let mut agents = Vec::new();
    for i in 0..12 {
        agents.push(t.agent(&format!("a{i}")).await);
    }
    for (i, agent) in agents.iter().enumerate() {
        let body = format!("hello {i}").into_bytes();
        let reply = agent
            .request("echo", body.clone(), 5 * SECOND)
            .await
            .unwrap();
        assert_eq!(&reply.body[..], &body[..]);
    }
    let per_endpoint = t.listener.connections_per_endpoint();
    assert_eq!(per_endpoint.iter().sum::<usize>(), 13, "{per_endpoint:?}");
    // The kernel spreads peers by address: 13 on one of 4 sockets is a 1-in-4^12 chance.
    assert!(
        per_endpoint.iter().filter(|&&n| n > 0).count() >= 2,
        "every agent on one endpoint: {per_endpoint:?}"
    );
    t.listener.close();
    let err = agents[0]
        .request("echo", b"after close".to_vec(), 5 * SECOND)
        .await;
    assert!(err.is_err(), "the hub closed every endpoint");
}

/// Before its hello, a peer makes the hub hold no more than `PRE_HELLO_WINDOW` of partly sent
/// frames (the connection window is as small): twenty streams each holding 10 KiB of an
/// unfinished 60 KiB frame close the connection with `frame-too-large`, long before the
/// handshake timeout. (After the hello the limit is 64 MiB.)
#[tokio::test]
async fn partial_frames_before_the_hello_are_bounded_by_the_pre_hello_window() {
    let t = common::start_hub(HubConfig::default()).await;
    let conn = t.raw_connection().await;
    // A control stream with the start of a hello that never ends.
    let (mut control, _recv) = conn.open_bi().await.unwrap();
    let mut start = Vec::from((60u32 * 1024).to_be_bytes());
    start.push(FrameType::Hello as u8);
    control.write_all(&start).await.unwrap();
    let mut partial = Vec::from((60u32 * 1024).to_be_bytes());
    partial.push(FrameType::Envelope as u8);
    partial.extend_from_slice(&[0u8; 10 * 1024]);
    let mut streams = Vec::new();
    for _ in 0..20 {
        let Ok(mut uni) = conn.open_uni().await else {
            break;
        };
        if uni.write_all(&partial).await.is_err() {
            break;
        }
        streams.push(uni);
    }
    let started = std::time::Instant::now();
    assert_eq!(
        common::close_code(&conn).await,
        Some(u64::from(ErrorCode::FrameTooLarge.code()))
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // The test holds more than the window.
    const _: () = assert!(agentwire::transport::quic::PRE_HELLO_WINDOW < 20 * 10 * 1024);
}

/// The bodies of the next `n` messages `agent` receives, as text, in arrival order.
async fn bodies(agent: &mut Agent, n: usize) -> Vec<String> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        let msg = tokio::time::timeout(5 * SECOND, agent.recv())
            .await
            .expect("every message arrives")
            .unwrap();
        got.push(String::from_utf8(msg.envelope.body.to_vec()).unwrap());
    }
    got
}

/// Small messages queued together leave on shared streams (one per priority class) and all
/// arrive, once each, and a critical message fed among them is not held behind them.
#[tokio::test]
async fn small_messages_fed_together_share_streams() {
    let t = start_hub(HubConfig::default()).await;
    let mut sink = t.agent("sink").await;
    let source = t.agent("source").await;
    let before = source.stats().connection.streams_opened;
    // Queued without a turn for the writer in between: fed together, flushed once.
    for i in 0..200u32 {
        let priority = if i == 150 {
            Priority::Critical
        } else {
            Priority::Low
        };
        source
            .send_envelope(
                source
                    .envelope(Destination::agent("sink"), Kind::Event)
                    .with_priority(priority)
                    .with_body(format!("m{i}")),
            )
            .await
            .unwrap();
    }
    let got = bodies(&mut sink, 200).await;
    let opened = source.stats().connection.streams_opened - before;
    assert!(opened < 20, "200 small messages took {opened} streams");
    // The critical one left on a stream of its own class, ahead of the low ones' streams.
    let critical = got.iter().position(|m| m == "m150").unwrap();
    assert!(critical < 150, "the critical message arrived {critical}th");
    // Every low one, once.
    let low: Vec<u32> = got
        .iter()
        .filter(|m| *m != "m150")
        .map(|m| m[1..].parse().unwrap())
        .collect();
    let mut sorted = low.clone();
    sorted.sort_unstable();
    assert_eq!(low.len(), 199);
    assert_eq!(sorted, (0..200).filter(|&i| i != 150).collect::<Vec<_>>());
}

/// When the peer's stream credit runs out, the messages waiting for the next stream share
/// it: with 2 streams granted and one-datagram batches (600-byte messages over a 1,200-byte
/// path: one per stream), 100 messages fed together take a handful of streams, not 100
/// round trips of credit, and all arrive once each.
#[tokio::test]
async fn messages_waiting_for_stream_credit_share_the_next_stream() {
    let mut config = HubConfig::default();
    config.quic.max_concurrent_uni_streams = 2;
    let t = start_hub(config).await;
    let mut sink = t.agent("sink").await;
    let mut opts = t.opts("source");
    opts.quic.loopback_mtu = 1200;
    let source = Agent::connect(opts).await.unwrap();
    assert_eq!(source.stats().connection.mtu, 1200);
    let before = source.stats().connection.streams_opened;
    for i in 0..100u32 {
        let mut body = format!("m{i} ").into_bytes();
        body.resize(600, b'.');
        source
            .send(Destination::agent("sink"), Kind::Event, body)
            .await
            .unwrap();
    }
    let got = bodies(&mut sink, 100).await;
    let opened = source.stats().connection.streams_opened - before;
    assert!(opened <= 20, "100 messages took {opened} streams");
    let mut ids: Vec<u32> = got
        .iter()
        .map(|m| m[1..m.find(' ').unwrap()].parse().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..100).collect::<Vec<_>>());
}

/// `publish_many` queues its messages at once: ids in order, every one delivered, few
/// streams; and when one of them is too large, none is sent.
#[tokio::test]
async fn publish_many_queues_them_together_or_not_at_all() {
    let mut config = HubConfig::default();
    config.policy.limits.max_frame_size = 64 * 1024;
    let t = start_hub(config).await;
    let mut sink = t.agent("sink").await;
    sink.subscribe("batch").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let publisher = t.agent("publisher").await;
    let before = publisher.stats().connection.streams_opened;
    let ids = publisher
        .publish_many("batch", Kind::Event, (0..100).map(|i| format!("b{i}")))
        .await
        .unwrap();
    assert_eq!(ids.len(), 100);
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1));
    let mut got = bodies(&mut sink, 100).await;
    got.sort_unstable();
    let mut want: Vec<String> = (0..100).map(|i| format!("b{i}")).collect();
    want.sort_unstable();
    assert_eq!(got, want);
    let opened = publisher.stats().connection.streams_opened - before;
    assert!(opened < 10, "100 small messages took {opened} streams");

    let bodies = vec![vec![1u8; 10], vec![2u8; 64 * 1024 + 1], vec![3u8; 10]];
    match publisher.publish_many("batch", Kind::Event, bodies).await {
        Err(AgentError::TooLarge(_)) => {}
        other => panic!("expected too large, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), sink.recv())
            .await
            .is_err(),
        "nothing of a refused batch is sent"
    );
}
