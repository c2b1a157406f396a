//! Both sides of a connection in memory, on explicit time (quinn-proto's `Pair` is the
//! model): every rule of the handshake, the answers, the timeouts and the bad input.

use std::time::{Duration, Instant};

use agentwire_zap_proto::agent::{AgentConfig, AgentEvent, AgentSession};
use agentwire_zap_proto::messages::{
    Body, BodyChunkEvent, Decision, HealthStatus, RequestHeadersEvent, RequestMetadata,
};
use agentwire_zap_proto::proxy::{ProxyConfig, ProxyError, ProxyEvent, ProxySession};
use agentwire_zap_proto::*;

fn caps(binary_body: bool) -> Capabilities {
    Capabilities {
        agent_id: "test-agent".into(),
        name: "Test".into(),
        version: "1.0.0".into(),
        supported_events: vec![1, 2],
        features: Features {
            concurrent_requests: 100,
            cancellation: true,
            binary_body,
            ..Features::default()
        },
        limits: Limits::default(),
    }
}

struct Pair {
    agent: AgentSession,
    proxy: ProxySession,
    now: Instant,
}

impl Pair {
    fn new(agent_encodings: &[Encoding], proxy_encodings: &[Encoding], binary_body: bool) -> Pair {
        let now = Instant::now();
        let mut config = AgentConfig::new(caps(binary_body));
        config.encodings = agent_encodings.to_vec();
        let agent = AgentSession::new(config);
        let proxy = ProxySession::new(
            ProxyConfig {
                encodings: proxy_encodings.to_vec(),
                request_timeout: Duration::from_secs(2),
                ..ProxyConfig::default()
            },
            now,
        );
        let mut pair = Pair { agent, proxy, now };
        pair.drive();
        pair
    }

    /// Moves bytes both ways until both sides are quiet.
    fn drive(&mut self) {
        loop {
            let mut moved = false;
            if let Some(b) = self.proxy.poll_transmit() {
                let _ = self.agent.receive(&b);
                moved = true;
            }
            if let Some(b) = self.agent.poll_transmit() {
                let _ = self.proxy.receive(&b);
                moved = true;
            }
            if !moved {
                return;
            }
        }
    }

    fn agent_events(&mut self) -> Vec<AgentEvent> {
        std::iter::from_fn(|| self.agent.poll_event()).collect()
    }

    fn proxy_events(&mut self) -> Vec<ProxyEvent> {
        std::iter::from_fn(|| self.proxy.poll_event()).collect()
    }
}

fn headers(cid: &str) -> Event {
    Event::RequestHeaders(RequestHeadersEvent {
        metadata: RequestMetadata::new(cid, "127.0.0.1"),
        method: "GET".into(),
        uri: "/".into(),
        headers: [("host", ["example.com"])].into_iter().collect(),
    })
}

fn chunk(cid: &str, data: &[u8]) -> Event {
    Event::RequestBodyChunk(BodyChunkEvent {
        correlation_id: cid.into(),
        data: Body(bytes::Bytes::copy_from_slice(data)),
        is_last: true,
        total_size: Some(data.len() as u64),
        chunk_index: 0,
        bytes_received: Some(data.len() as u64),
        bytes_sent: None,
    })
}

#[test]
fn handshake_picks_the_first_offered_encoding_the_agent_speaks() {
    let mut p = Pair::new(
        &[Encoding::Json, Encoding::MsgPack],
        &[Encoding::MsgPack, Encoding::Json],
        false,
    );
    assert!(matches!(
        p.proxy_events().as_slice(),
        [ProxyEvent::Ready {
            encoding: Encoding::MsgPack,
            ..
        }]
    ));
    assert!(matches!(
        p.agent_events().as_slice(),
        [AgentEvent::Connected {
            encoding: Encoding::MsgPack,
            ..
        }]
    ));
    let mut p = Pair::new(
        &[Encoding::Json],
        &[Encoding::MsgPack, Encoding::Json],
        false,
    );
    assert!(matches!(
        p.proxy_events().as_slice(),
        [ProxyEvent::Ready {
            encoding: Encoding::Json,
            ..
        }]
    ));
}

#[test]
fn answers_come_back_in_any_order_matched_by_the_events_own_id() {
    for encoding in [Encoding::Json, Encoding::MsgPack] {
        let mut p = Pair::new(&[encoding], &[encoding], false);
        p.proxy_events();
        p.agent_events();
        for cid in ["a", "b", "c"] {
            p.proxy.send(&headers(cid), p.now).unwrap();
        }
        p.drive();
        let got: Vec<String> = p
            .agent_events()
            .into_iter()
            .map(|e| match e {
                AgentEvent::Request { correlation_id, .. } => correlation_id.into(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(got, ["a", "b", "c"]);
        // The agent answers in reverse order, as concurrent handlers may.
        for cid in ["c", "b", "a"] {
            p.agent
                .respond(cid, AgentResponse::block(403, Some(cid.into())))
                .unwrap();
        }
        p.drive();
        let answers: Vec<(String, Decision)> = p
            .proxy_events()
            .into_iter()
            .map(|e| match e {
                ProxyEvent::Answer {
                    correlation_id,
                    response,
                } => (correlation_id, response.decision),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(answers.len(), 3);
        for (cid, decision) in answers {
            assert_eq!(
                decision,
                Decision::Block {
                    status: 403,
                    body: Some(cid.clone()),
                    headers: None
                },
                "{encoding:?}: the answer for {cid} is its own"
            );
        }
        assert_eq!(p.proxy.in_flight(), 0);
    }
}

#[test]
fn body_bytes_stay_bytes_in_every_encoding() {
    let raw: Vec<u8> = (0..=255u8).rev().collect(); // not UTF-8
    for (encoding, binary) in [
        (Encoding::Json, false),
        (Encoding::MsgPack, false),
        (Encoding::MsgPack, true),
    ] {
        let mut p = Pair::new(&[encoding], &[encoding], binary);
        p.proxy_events();
        p.agent_events();
        p.proxy.send(&chunk("body", &raw), p.now).unwrap();
        p.drive();
        match p.agent_events().as_slice() {
            [AgentEvent::Request {
                event: Event::RequestBodyChunk(c),
                ..
            }] => {
                assert_eq!(&c.data.0[..], &raw[..], "{encoding:?} binary={binary}")
            }
            other => panic!("{encoding:?}: {other:?}"),
        }
    }
}

#[test]
fn an_event_that_does_not_decode_is_refused_not_allowed() {
    let mut p = Pair::new(&[Encoding::Json], &[Encoding::Json], false);
    p.proxy_events();
    p.agent_events();
    // A body chunk whose data is not base64: the reference agent answers allow.
    let mut wire = bytes::BytesMut::new();
    encode_frame(
        MessageType::RequestBodyChunk,
        br#"{"correlation_id":"bad","data":"%%%","is_last":true,"total_size":null}"#,
        &mut wire,
    )
    .unwrap();
    p.agent.receive(&wire).unwrap();
    assert!(matches!(
        p.agent_events().as_slice(),
        [AgentEvent::Refused { correlation_id, kind: MessageType::RequestBodyChunk, .. }] if correlation_id == "bad"
    ));
    let answer = p.agent.poll_transmit().unwrap();
    let mut d = FrameDecoder::new(MAX_FRAME_LEN);
    d.push(&answer);
    let f = d.next_frame().unwrap().unwrap();
    let r: AgentResponse = Encoding::Json.decode(&f.payload).unwrap();
    assert!(matches!(r.decision, Decision::Block { status: 400, .. }));
    assert_eq!(r.correlation_id(), Some("bad"));
    assert!(!p.agent.is_closed(), "only that request is refused");
}

/// Feeds `bytes` to an open agent and returns the frame it sends before closing.
fn protocol_error(bytes: &[u8]) -> (String, HealthStatus) {
    let mut p = Pair::new(&[Encoding::MsgPack], &[Encoding::MsgPack], false);
    p.agent_events();
    let err = p.agent.receive(bytes).unwrap_err().to_string();
    assert!(p.agent.is_closed());
    let out = p
        .agent
        .poll_transmit()
        .expect("an error frame before the close");
    let mut d = FrameDecoder::new(MAX_FRAME_LEN);
    d.push(&out);
    let f = d.next_frame().unwrap().unwrap();
    assert_eq!(f.kind, MessageType::HealthStatus);
    (err, Encoding::MsgPack.decode(&f.payload).unwrap())
}

#[test]
fn bad_frames_get_an_error_frame_then_the_close() {
    let (err, status) = protocol_error(&[0, 0, 0, 1, 0x99]);
    assert!(err.contains("unknown message type 0x99"), "{err}");
    assert_eq!(status.state, 4);
    assert!(status.message.unwrap().contains("0x99"));
    let (err, _) = protocol_error(&[0, 0, 0, 0]);
    assert!(err.contains("zero-length"), "{err}");
    let (err, _) = protocol_error(&(MAX_FRAME_LEN + 1).to_be_bytes());
    assert!(err.contains("over the limit"), "{err}");
    let (err, _) = protocol_error(&[0, 0, 0, 1, MessageType::AgentResponse as u8]);
    assert!(err.contains("unexpected"), "{err}");
}

#[test]
fn a_truncated_frame_at_the_end_is_an_error() {
    let mut p = Pair::new(&[Encoding::Json], &[Encoding::Json], false);
    p.agent.receive(&[0, 0, 0, 50, 0x10, b'{']).unwrap();
    assert!(p
        .agent
        .finish()
        .unwrap_err()
        .to_string()
        .contains("ended inside a frame"));
}

#[test]
fn an_answer_for_an_unknown_id_ends_the_connection() {
    let mut p = Pair::new(&[Encoding::Json], &[Encoding::Json], false);
    p.proxy_events();
    p.agent
        .respond("never-sent", AgentResponse::allow())
        .unwrap();
    let bytes = p.agent.poll_transmit().unwrap();
    assert!(
        matches!(p.proxy.receive(&bytes), Err(ProxyError::UnknownAnswer(cid)) if cid == "never-sent")
    );
    assert!(p.proxy.is_closed());
}

#[test]
fn timeouts_cancel_on_the_agent_and_late_answers_are_dropped() {
    let mut p = Pair::new(&[Encoding::MsgPack], &[Encoding::MsgPack], false);
    p.proxy_events();
    p.agent_events();
    p.proxy.send(&headers("slow"), p.now).unwrap();
    p.drive();
    p.agent_events();
    let due = p.proxy.poll_timeout().unwrap();
    assert_eq!(due, p.now + Duration::from_secs(2));
    p.proxy
        .on_timeout(due - Duration::from_millis(1), 0)
        .unwrap();
    assert!(p.proxy_events().is_empty(), "not before its deadline");
    p.proxy.on_timeout(due, 0).unwrap();
    assert_eq!(
        p.proxy_events(),
        vec![ProxyEvent::TimedOut {
            correlation_id: "slow".into()
        }]
    );
    p.drive();
    assert!(matches!(
        p.agent_events().as_slice(),
        [AgentEvent::Cancel(c)] if c.correlation_id == "slow" && c.reason == 1
    ));
    // The handler finished anyway: its answer is dropped, the connection lives.
    p.agent.respond("slow", AgentResponse::allow()).unwrap();
    p.drive();
    assert!(p.proxy_events().is_empty());
    assert!(p.proxy.is_ready());
}

#[test]
fn a_json_ping_on_a_msgpack_connection_is_answered() {
    let mut p = Pair::new(&[Encoding::MsgPack], &[Encoding::MsgPack], false);
    p.agent_events();
    let json_ping = br#"{"sequence":7,"timestamp_ms":1}"#;
    let mut wire = bytes::BytesMut::new();
    encode_frame(MessageType::Ping, json_ping, &mut wire).unwrap();
    p.agent.receive(&wire).unwrap();
    let out = p.agent.poll_transmit().unwrap();
    assert_eq!(out[4], MessageType::Pong as u8);
    assert_eq!(&out[5..], json_ping, "the pong echoes the ping's bytes");
    // And our own (MessagePack) ping comes back as a Pong event.
    let seq = p.proxy.ping(1).unwrap();
    p.drive();
    assert!(p
        .proxy_events()
        .contains(&ProxyEvent::Pong { sequence: seq }));
}

#[test]
fn a_proxy_speaking_another_version_is_refused_with_a_reason() {
    let mut agent = AgentSession::new(AgentConfig::new(caps(false)));
    let mut request = HandshakeRequest::new("old-proxy", "0.1", &[Encoding::Json]);
    request.supported_versions = vec![1];
    let mut wire = bytes::BytesMut::new();
    encode_frame(
        MessageType::HandshakeRequest,
        &serde_json::to_vec(&request).unwrap(),
        &mut wire,
    )
    .unwrap();
    assert!(agent.receive(&wire).is_err());
    let out = agent.poll_transmit().unwrap();
    let mut proxy = ProxySession::new(ProxyConfig::default(), Instant::now());
    let err = proxy.receive(&out).unwrap_err().to_string();
    assert!(err.contains("versions [1]"), "{err}");
}

#[test]
fn one_event_per_id_in_flight_and_close_returns_what_was_waiting() {
    let mut p = Pair::new(&[Encoding::Json], &[Encoding::Json], false);
    p.proxy_events();
    p.proxy.send(&headers("x"), p.now).unwrap();
    assert!(
        p.proxy.send(&chunk("x", b"more"), p.now).is_err(),
        "x is busy"
    );
    p.proxy.send(&headers("y"), p.now).unwrap();
    let mut left = p.proxy.close();
    left.sort();
    assert_eq!(left, ["x", "y"]);
}

#[test]
fn the_handshake_times_out() {
    let now = Instant::now();
    let mut proxy = ProxySession::new(ProxyConfig::default(), now);
    let due = proxy.poll_timeout().unwrap();
    assert!(matches!(
        proxy.on_timeout(due, 0),
        Err(ProxyError::HandshakeTimeout(_))
    ));
}
