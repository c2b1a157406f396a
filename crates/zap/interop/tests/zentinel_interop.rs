//! Interop with the reference implementation, `zentinel-agent-protocol` 0.6.45 (its UDS client
//! and agent server), over real Unix sockets. `cargo test` in crates/zap/interop runs them all.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentwire_zap::client::{AgentConnection, ConnectError};
use agentwire_zap::server::{AgentServer, Handler, ServerConfig};
use agentwire_zap_proto::agent::AgentConfig;
use agentwire_zap_proto::messages::{self as ours, Body, BodyChunkEvent, Decision, HeaderOp};
use agentwire_zap_proto::proxy::ProxyConfig;
use agentwire_zap_proto::{AgentResponse, Capabilities, Encoding, Event, Features, Limits};
use zentinel_agent_protocol as zen;
use zentinel_agent_protocol::v2::{
    AgentCapabilities, AgentClientV2Uds, AgentHandlerV2, UdsAgentServerV2, UdsEncoding,
};

const GUARD: Duration = Duration::from_secs(30);

fn socket(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

fn our_caps() -> Capabilities {
    Capabilities {
        agent_id: "agentwire-test".into(),
        name: "agentwire test agent".into(),
        version: "0.1.0".into(),
        supported_events: vec![1, 2, 3, 4, 5, 6, 7, 8],
        features: Features {
            concurrent_requests: 256,
            cancellation: true,
            flow_control: true,
            health_reporting: true,
            binary_body: true,
            ..Features::default()
        },
        limits: Limits::default(),
    }
}

/// Our agent: tags every answer with what it saw, so the test can tell the handler ran.
#[derive(Default)]
struct Tagging {
    cancelled: Arc<AtomicUsize>,
}

struct DropCount(Arc<AtomicUsize>);
impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Handler for Tagging {
    async fn on_request_headers(&self, e: ours::RequestHeadersEvent) -> AgentResponse {
        if e.uri == "/slow" {
            // Counted when the task is dropped: by the abort, since the sleep never ends.
            let _guard = DropCount(self.cancelled.clone());
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        let mut r = AgentResponse::allow();
        r.request_headers.push(HeaderOp::Set {
            name: "x-seen-uri".into(),
            value: e.uri.into(),
        });
        r
    }

    async fn on_request_body_chunk(&self, e: BodyChunkEvent) -> AgentResponse {
        // Answer with the body's length and first and last bytes: bytes must stay bytes.
        let d = &e.data.0;
        AgentResponse::block(
            403,
            Some(format!(
                "{} {:?} {:?}",
                d.len(),
                d.first().copied(),
                d.last().copied()
            )),
        )
    }
}

async fn start_ours(path: &Path, encodings: &[Encoding]) -> Arc<AtomicUsize> {
    let mut agent = AgentConfig::new(our_caps());
    agent.encodings = encodings.to_vec();
    let handler = Tagging::default();
    let cancelled = handler.cancelled.clone();
    let server = AgentServer::bind(path, ServerConfig::new(agent), handler)
        .await
        .unwrap();
    tokio::spawn(server.run(std::future::pending()));
    cancelled
}

fn zen_headers(cid: &str, uri: &str) -> zen::RequestHeadersEvent {
    zen::RequestHeadersEvent {
        metadata: zen::RequestMetadata {
            correlation_id: cid.into(),
            request_id: format!("req-{cid}"),
            client_ip: "127.0.0.1".into(),
            client_port: 40000,
            server_name: Some("example.com".into()),
            protocol: "HTTP/1.1".into(),
            tls_version: None,
            tls_cipher: None,
            route_id: None,
            upstream_id: None,
            timestamp: "2026-11-25T00:00:00Z".into(),
            traceparent: None,
        },
        method: "GET".into(),
        uri: uri.into(),
        headers: HashMap::from([("host".to_string(), vec!["example.com".to_string()])]),
    }
}

/// Not UTF-8: the reference agent cannot read these as MessagePack `bin`.
fn binary_body() -> Vec<u8> {
    (0..4096u32).map(|i| (i % 256) as u8).rev().collect()
}

#[tokio::test]
async fn zentinel_reference_client_against_our_agent_in_both_encodings() {
    tokio::time::timeout(GUARD, async {
        for (ours_speak, expect) in [
            (
                vec![Encoding::MsgPack, Encoding::Json],
                UdsEncoding::MessagePack,
            ),
            (vec![Encoding::Json], UdsEncoding::Json),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = socket(&dir, "ours.sock");
            start_ours(&path, &ours_speak).await;
            let client =
                AgentClientV2Uds::new("ours", path.to_str().unwrap(), Duration::from_secs(5))
                    .await
                    .unwrap();
            client.connect().await.unwrap();
            assert_eq!(client.encoding().await, expect);
            let caps = client.capabilities().await.unwrap();
            assert_eq!(caps.agent_id, "agentwire-test");

            let r = client
                .send_request_headers("c1", &zen_headers("c1", "/hello"))
                .await
                .unwrap();
            assert_eq!(r.audit.custom["correlation_id"], "c1");
            assert_eq!(
                r.request_headers,
                vec![zen::HeaderOp::Set {
                    name: "x-seen-uri".into(),
                    value: "/hello".into()
                }]
            );

            // The reference's binary path: MessagePack `bin` or base64 in JSON. Our handler
            // sees the same bytes either way.
            let body = binary_body();
            let chunk = zen::BinaryRequestBodyChunkEvent::new("c2", body.clone(), 0, true);
            let r = client.send_request_body_chunk_binary(&chunk).await.unwrap();
            assert_eq!(
                r.decision,
                zen::Decision::Block {
                    status: 403,
                    body: Some(format!("4096 Some({}) Some({})", body[0], body[4095])),
                    headers: None
                },
                "{expect:?}"
            );

            // Its Ping is JSON whatever was negotiated; the pong does not disturb it.
            client.ping().await.unwrap();
            let r = client
                .send_request_headers("c3", &zen_headers("c3", "/after-ping"))
                .await
                .unwrap();
            assert_eq!(r.audit.custom["correlation_id"], "c3");
            client.close().await.unwrap();
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn zentinel_reference_client_cancel_stops_our_handler() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let path = socket(&dir, "ours.sock");
        let cancelled = start_ours(&path, &[Encoding::MsgPack, Encoding::Json]).await;
        let client = Arc::new(
            AgentClientV2Uds::new("ours", path.to_str().unwrap(), Duration::from_secs(20))
                .await
                .unwrap(),
        );
        client.connect().await.unwrap();
        let slow = {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .send_request_headers("slow-1", &zen_headers("slow-1", "/slow"))
                    .await
            })
        };
        // While the slow handler runs, other requests on the same connection are answered.
        let r = client
            .send_request_headers("fast-1", &zen_headers("fast-1", "/fast"))
            .await
            .unwrap();
        assert_eq!(r.audit.custom["correlation_id"], "fast-1");
        client
            .cancel_request(
                "slow-1",
                zentinel_agent_protocol::v2::CancelReason::ClientDisconnect,
            )
            .await
            .unwrap();
        while cancelled.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            slow.await.unwrap().is_err(),
            "the cancelled call gets no answer"
        );
    })
    .await
    .unwrap();
}

/// The reference agent: answers with what it saw.
struct RefAgent {
    refuse: bool,
}

#[async_trait::async_trait]
impl AgentHandlerV2 for RefAgent {
    fn capabilities(&self) -> AgentCapabilities {
        AgentCapabilities::new("reference", "Reference agent", "0.6.45")
            .with_event(zen::EventType::RequestBodyChunk)
    }
    async fn on_handshake(
        &self,
        _request: zen::v2::HandshakeRequest,
    ) -> zen::v2::HandshakeResponse {
        if self.refuse {
            zen::v2::HandshakeResponse::failure("this agent takes no proxies today")
        } else {
            zen::v2::HandshakeResponse::success(self.capabilities())
        }
    }
    async fn on_request_headers(&self, e: zen::RequestHeadersEvent) -> zen::AgentResponse {
        zen::AgentResponse::default_allow().add_request_header(zen::HeaderOp::Set {
            name: "x-seen-uri".into(),
            value: e.uri,
        })
    }
    async fn on_request_body_chunk(&self, e: zen::RequestBodyChunkEvent) -> zen::AgentResponse {
        zen::AgentResponse::block(403, Some(e.data))
    }
}

async fn start_reference(path: &Path, refuse: bool) {
    let server = UdsAgentServerV2::new(
        "reference",
        path.to_path_buf(),
        Box::new(RefAgent { refuse }),
    );
    tokio::spawn(async move {
        let _ = server.run().await;
    });
    // The reference server binds inside `run`: wait for its socket.
    for _ in 0..200 {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("reference agent did not start");
}

fn our_headers(cid: &str, uri: &str) -> Event {
    let mut h = ours::Headers::new();
    h.insert("host", ["example.com"]);
    Event::RequestHeaders(ours::RequestHeadersEvent {
        metadata: ours::RequestMetadata::new(cid, "127.0.0.1"),
        method: "GET".into(),
        uri: uri.into(),
        headers: h,
    })
}

#[tokio::test]
async fn zentinel_our_connection_against_the_reference_agent_in_both_encodings() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let path = socket(&dir, "reference.sock");
        start_reference(&path, false).await;
        for (offer, expect) in [
            (vec![Encoding::MsgPack, Encoding::Json], Encoding::MsgPack),
            (vec![Encoding::Json], Encoding::Json),
        ] {
            let config = ProxyConfig {
                encodings: offer,
                ..ProxyConfig::default()
            };
            let conn = AgentConnection::connect(&path, config).await.unwrap();
            assert_eq!(conn.encoding(), expect);
            assert_eq!(conn.capabilities().agent_id, "reference");
            let r = conn.send(our_headers("r1", "/x")).await.unwrap();
            assert_eq!(r.correlation_id(), Some("r1"));
            assert_eq!(
                r.request_headers,
                vec![HeaderOp::Set {
                    name: "x-seen-uri".into(),
                    value: "/x".into()
                }]
            );
            // Body bytes go as base64 text to an agent that did not announce binary bodies:
            // the reference handler sees the base64 of what we sent.
            let body = binary_body();
            let r = conn
                .send(Event::RequestBodyChunk(BodyChunkEvent {
                    correlation_id: "r2".into(),
                    data: Body(body.clone().into()),
                    is_last: true,
                    total_size: Some(4096),
                    chunk_index: 0,
                    bytes_received: Some(4096),
                    bytes_sent: None,
                }))
                .await
                .unwrap();
            use base64::Engine as _;
            let expect_body = base64::engine::general_purpose::STANDARD.encode(&body);
            assert_eq!(
                r.decision,
                Decision::Block {
                    status: 403,
                    body: Some(expect_body),
                    headers: None
                },
                "{expect:?}"
            );
            // Many requests at once on the one connection.
            let all = (0..50).map(|i| {
                let conn = conn.clone();
                async move { conn.send(our_headers(&format!("m{i}"), "/m")).await }
            });
            for r in futures_util::future::join_all(all).await {
                assert!(r.unwrap().correlation_id().unwrap().starts_with('m'));
            }
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn zentinel_rejected_handshake_is_a_clear_error() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let path = socket(&dir, "refusing.sock");
        start_reference(&path, true).await;
        match AgentConnection::connect(&path, ProxyConfig::default()).await {
            Err(ConnectError::Handshake { reason, .. }) => {
                assert!(reason.contains("takes no proxies today"), "{reason}")
            }
            Err(other) => panic!("expected a handshake error, got {other}"),
            Ok(_) => panic!("expected a handshake error, got a connection"),
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn zentinel_frame_limit_is_16_mib_on_both_sides() {
    use tokio::io::AsyncWriteExt;
    use zentinel_agent_protocol::v2::uds::{read_message, MessageType};
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let path = socket(&dir, "ours.sock");
        start_ours(&path, &[Encoding::Json]).await;
        // The reference's handshake, then a length prefix one over the limit.
        let mut stream = tokio::net::UnixStream::connect(&path).await.unwrap();
        let hello =
            br#"{"supported_versions":[2],"proxy_id":"raw","proxy_version":"0","config":null}"#;
        zentinel_agent_protocol::v2::uds::write_message(
            &mut stream,
            MessageType::HandshakeRequest,
            hello,
        )
        .await
        .unwrap();
        let (kind, _) = read_message(&mut stream).await.unwrap();
        assert_eq!(kind, MessageType::HandshakeResponse);
        let limit = zentinel_agent_protocol::v2::uds::MAX_UDS_MESSAGE_SIZE as u32;
        assert_eq!(limit, agentwire_zap_proto::MAX_FRAME_LEN);
        stream.write_all(&(limit + 1).to_be_bytes()).await.unwrap();
        // Our agent says why (a frame the reference reads), then closes.
        let (kind, payload) = read_message(&mut stream).await.unwrap();
        assert_eq!(kind, MessageType::HealthStatus);
        let status: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!(status["state"], 4);
        assert!(status["message"]
            .as_str()
            .unwrap()
            .contains("over the limit"));
        assert!(
            read_message(&mut stream).await.is_err(),
            "then the connection ends"
        );
    })
    .await
    .unwrap();
}
