//! Our agent server, connection and pool over real Unix sockets: concurrency, cancellation,
//! flow control, dead agents, the circuit breaker, fail modes, draining, metrics.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentwire_zap::client::{AgentConnection, RequestError};
use agentwire_zap::pool::{AgentPool, BreakerConfig, OnUnavailable, PoolConfig, PoolError};
use agentwire_zap::server::{AgentServer, Handler, ServerConfig};
use agentwire_zap_proto::agent::{AgentConfig, AgentEvent, AgentSession};
use agentwire_zap_proto::messages::{Decision, RequestHeadersEvent, RequestMetadata};
use agentwire_zap_proto::proxy::ProxyConfig;
use agentwire_zap_proto::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

const GUARD: Duration = Duration::from_secs(60);

fn caps() -> Capabilities {
    Capabilities {
        agent_id: "sock-test".into(),
        name: "socket test agent".into(),
        version: "0".into(),
        supported_events: vec![1],
        features: Features::default(),
        limits: Limits::default(),
    }
}

fn headers(cid: &str, uri: &str) -> Event {
    Event::RequestHeaders(RequestHeadersEvent {
        metadata: RequestMetadata::new(cid, "127.0.0.1"),
        method: "GET".into(),
        uri: uri.into(),
        headers: Default::default(),
    })
}

/// Holds requests for `/hold` until released; answers the rest at once.
#[derive(Clone)]
struct Gate {
    /// No permits until released: a held handler waits for one (a permit given before the
    /// handler waits is not lost, unlike a notification).
    release: Arc<Semaphore>,
    held: Arc<AtomicUsize>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            release: Arc::new(Semaphore::new(0)),
            held: Arc::default(),
        }
    }
}

impl Gate {
    fn open(&self) {
        self.release.add_permits(1 << 20);
    }
}

impl Handler for Gate {
    async fn on_request_headers(&self, e: RequestHeadersEvent) -> AgentResponse {
        if e.uri == "/hold" {
            self.held.fetch_add(1, Ordering::SeqCst);
            let _ = self.release.acquire().await;
        }
        if e.uri == "/panic" {
            panic!("handler bug");
        }
        AgentResponse::allow()
    }
}

async fn serve(path: &Path, gate: Gate, max_in_flight: usize) {
    let mut config = ServerConfig::new(AgentConfig::new(caps()));
    config.max_in_flight = max_in_flight;
    let server = AgentServer::bind(path, config, gate).await.unwrap();
    tokio::spawn(server.run(std::future::pending()));
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..2000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for {what}");
}

fn sock(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("agent.sock")
}

#[tokio::test]
async fn a_slow_handler_holds_up_nobody_on_its_connection() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let gate = Gate::default();
        serve(&sock(&dir), gate.clone(), 256).await;
        let conn = AgentConnection::connect(&sock(&dir), ProxyConfig::default())
            .await
            .unwrap();
        let slow = tokio::spawn({
            let conn = conn.clone();
            async move { conn.send(headers("slow", "/hold")).await }
        });
        until("the slow handler to start", || {
            gate.held.load(Ordering::SeqCst) == 1
        })
        .await;
        // 99 more on the same connection, all answered while the slow one is still held.
        let fast = (0..99).map(|i| {
            let conn = conn.clone();
            async move { conn.send(headers(&format!("f{i}"), "/")).await }
        });
        for r in futures_util::future::join_all(fast).await {
            assert_eq!(r.unwrap().decision, Decision::Allow);
        }
        assert!(!slow.is_finished());
        gate.open();
        assert_eq!(slow.await.unwrap().unwrap().correlation_id(), Some("slow"));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_panicking_handler_is_answered_closed() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        serve(&sock(&dir), Gate::default(), 256).await;
        let conn = AgentConnection::connect(&sock(&dir), ProxyConfig::default())
            .await
            .unwrap();
        let r = conn.send(headers("p", "/panic")).await.unwrap();
        assert!(matches!(r.decision, Decision::Block { status: 500, .. }));
        assert_eq!(
            conn.send(headers("q", "/")).await.unwrap().decision,
            Decision::Allow
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn an_agent_at_its_limit_pauses_the_connection_then_resumes() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let gate = Gate::default();
        serve(&sock(&dir), gate.clone(), 2).await;
        let conn = AgentConnection::connect(&sock(&dir), ProxyConfig::default())
            .await
            .unwrap();
        let held: Vec<_> = (0..2)
            .map(|i| {
                let conn = conn.clone();
                tokio::spawn(async move { conn.send(headers(&format!("h{i}"), "/hold")).await })
            })
            .collect();
        until("the pause", || conn.is_paused()).await;
        assert_eq!(
            conn.send(headers("x", "/")).await,
            Err(RequestError::Paused)
        );
        gate.open();
        for h in held {
            h.await.unwrap().unwrap();
        }
        until("the resume", || !conn.is_paused()).await;
        assert_eq!(
            conn.send(headers("y", "/")).await.unwrap().decision,
            Decision::Allow
        );
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn an_unknown_type_gets_an_error_frame_then_the_close() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        serve(&sock(&dir), Gate::default(), 256).await;
        let other = AgentConnection::connect(&sock(&dir), ProxyConfig::default())
            .await
            .unwrap();
        let mut raw = tokio::net::UnixStream::connect(sock(&dir)).await.unwrap();
        let mut wire = bytes::BytesMut::new();
        let hello = HandshakeRequest::new("raw", "0", &[Encoding::Json]);
        encode_frame(
            MessageType::HandshakeRequest,
            &serde_json::to_vec(&hello).unwrap(),
            &mut wire,
        )
        .unwrap();
        wire.extend_from_slice(&[0, 0, 0, 1, 0x77]);
        raw.write_all(&wire).await.unwrap();
        let mut got = Vec::new();
        raw.read_to_end(&mut got).await.unwrap();
        let mut d = FrameDecoder::new(MAX_FRAME_LEN);
        d.push(&got);
        assert_eq!(
            d.next_frame().unwrap().unwrap().kind,
            MessageType::HandshakeResponse
        );
        let error = d.next_frame().unwrap().unwrap();
        assert_eq!(error.kind, MessageType::HealthStatus);
        assert!(String::from_utf8_lossy(&error.payload).contains("unknown message type 0x77"));
        // Only that connection ended.
        assert_eq!(
            other.send(headers("ok", "/")).await.unwrap().decision,
            Decision::Allow
        );
    })
    .await
    .unwrap();
}

/// An agent that completes the handshake, takes one request and dies without answering.
async fn dying_agent(path: &Path) {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut session = AgentSession::new(AgentConfig::new(caps()));
                let mut buf = vec![0u8; 65536];
                loop {
                    let Ok(n) = stream.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 || session.receive(&buf[..n]).is_err() {
                        return;
                    }
                    if let Some(out) = session.poll_transmit() {
                        let _ = stream.write_all(&out).await;
                    }
                    while let Some(e) = session.poll_event() {
                        if matches!(e, AgentEvent::Request { .. }) {
                            return; // dies holding the request
                        }
                    }
                }
            });
        }
    });
}

#[tokio::test]
async fn a_dying_agent_fails_its_requests_at_once_not_at_the_timeout() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        dying_agent(&sock(&dir)).await;
        let config = ProxyConfig {
            request_timeout: Duration::from_secs(3600),
            ..ProxyConfig::default()
        };
        let conn = AgentConnection::connect(&sock(&dir), config).await.unwrap();
        assert!(conn.is_connected());
        match conn.send(headers("doomed", "/")).await {
            Err(RequestError::ConnectionLost(why)) => assert!(why.contains("closed"), "{why}"),
            other => panic!("expected a lost connection, got {other:?}"),
        }
        assert!(!conn.is_connected());
    })
    .await
    .unwrap();
}

fn pool_config() -> PoolConfig {
    PoolConfig {
        connections_per_agent: 2,
        reconnect_initial: Duration::from_millis(20),
        reconnect_max: Duration::from_millis(200),
        breaker: BreakerConfig {
            failures_to_open: 3,
            open_for: Duration::from_millis(200),
        },
        ..PoolConfig::default()
    }
}

#[tokio::test]
async fn the_pool_retries_elsewhere_when_a_connection_dies_and_reconnects_it() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let path = sock(&dir);
        dying_agent(&path).await;
        let pool = AgentPool::new(pool_config());
        assert_eq!(pool.add_agent("dying", &path).await, 2);
        // Both connections die on their first request: the retry dies too, and the pool
        // says so (nothing lost silently).
        match pool.send("dying", headers("d1", "/")).await {
            Err(PoolError::Request {
                error: RequestError::ConnectionLost(_),
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        // The slots come back by themselves.
        until("the reconnects", || pool.live_connections("dying") == 2).await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn the_circuit_opens_fails_fast_then_a_probe_closes_it() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let path = sock(&dir);
        let pool = AgentPool::new(pool_config());
        assert_eq!(pool.add_agent("late", &path).await, 0, "nobody listens yet");
        for i in 0..3 {
            let e = pool
                .send("late", headers(&format!("n{i}"), "/"))
                .await
                .unwrap_err();
            assert_eq!(e.kind(), "no_connection");
        }
        assert!(pool.circuit_open("late"));
        assert!(!pool.is_healthy("late"), "no connection, circuit open");
        let e = pool.send("late", headers("fast", "/")).await.unwrap_err();
        assert_eq!(e.kind(), "circuit_open");
        serve(&path, Gate::default(), 256).await;
        until("the reconnect", || pool.live_connections("late") > 0).await;
        tokio::time::sleep(Duration::from_millis(250)).await; // past open_for: the probe goes
        assert_eq!(
            pool.send("late", headers("probe", "/"))
                .await
                .unwrap()
                .decision,
            Decision::Allow
        );
        assert!(!pool.circuit_open("late"));
        assert!(pool.is_healthy("late"));
        assert!(!pool.is_healthy("nobody"), "an agent not in the pool");
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn fail_open_and_wait_and_retry() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let path = sock(&dir);
        let open = AgentPool::new(PoolConfig {
            on_unavailable: OnUnavailable::FailOpen,
            ..pool_config()
        });
        open.add_agent("none", &path).await;
        let r = open.send("none", headers("o", "/")).await.unwrap();
        assert_eq!(r.decision, Decision::Allow);
        assert!(r
            .audit
            .reason_codes
            .contains(&"agent_unavailable_fail_open".to_string()));
        assert_eq!(r.correlation_id(), Some("o"));

        let waiting = AgentPool::new(PoolConfig {
            on_unavailable: OnUnavailable::WaitAndRetry(Duration::from_secs(20)),
            breaker: BreakerConfig {
                failures_to_open: 1_000_000,
                open_for: Duration::from_millis(1),
            },
            ..pool_config()
        });
        waiting.add_agent("soon", &path).await;
        let pending = tokio::spawn({
            let waiting = waiting.clone();
            async move { waiting.send("soon", headers("w", "/")).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        serve(&path, Gate::default(), 256).await;
        assert_eq!(pending.await.unwrap().unwrap().decision, Decision::Allow);
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn drain_waits_for_requests_in_flight() {
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let path = sock(&dir);
        let gate = Gate::default();
        serve(&path, gate.clone(), 256).await;
        let pool = AgentPool::new(pool_config());
        pool.add_agent("a", &path).await;
        assert!(pool.is_healthy("a"));
        let held = tokio::spawn({
            let pool = pool.clone();
            async move { pool.send("a", headers("h", "/hold")).await }
        });
        until("the held request", || gate.held.load(Ordering::SeqCst) == 1).await;
        let drain = tokio::spawn({
            let pool = pool.clone();
            async move { pool.drain("a", Duration::from_secs(20)).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let e = pool.send("a", headers("new", "/")).await.unwrap_err();
        assert_eq!(e.kind(), "draining");
        assert!(!pool.is_healthy("a"), "a draining agent takes nothing new");
        gate.open();
        assert_eq!(held.await.unwrap().unwrap().decision, Decision::Allow);
        assert_eq!(drain.await.unwrap().unwrap(), 0, "nothing was cut off");
        assert!(matches!(
            pool.send("a", headers("gone", "/")).await,
            Err(PoolError::UnknownAgent(_))
        ));
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn every_strategy_spreads_and_metrics_count() {
    use agentwire_zap::pool::Strategy;
    tokio::time::timeout(GUARD, async {
        let dir = tempfile::tempdir().unwrap();
        let path = sock(&dir);
        serve(&path, Gate::default(), 256).await;
        for strategy in [
            Strategy::RoundRobin,
            Strategy::LeastConnections,
            Strategy::HealthBased,
            Strategy::Random,
        ] {
            let pool = AgentPool::new(PoolConfig {
                strategy,
                ..pool_config()
            });
            let mut registry = prometheus_client::registry::Registry::default();
            pool.register_metrics(&mut registry);
            pool.add_agent("a", &path).await;
            for i in 0..20 {
                pool.send("a", headers(&format!("{strategy:?}{i}"), "/"))
                    .await
                    .unwrap();
            }
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
            assert!(
                text.contains(r#"zap_requests_total{agent="a",outcome="answered"} 20"#),
                "{text}"
            );
            assert!(text.contains(r#"zap_connections{agent="a"} 2"#), "{text}");
        }
    })
    .await
    .unwrap();
}
