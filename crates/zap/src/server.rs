//! Agents: a Unix-socket server that runs a [`Handler`] for every event.
//!
//! Each connection is driven by one task around an [`AgentSession`]; every event runs in a
//! task of its own, so a slow handler holds up nobody else (the reference agent handles one
//! connection strictly in order). A Cancel aborts the event's task: the handler stops at its
//! next await and nothing is answered. When `max_in_flight` handlers run on one connection,
//! the agent sends FlowControl pause and stops reading that connection (the socket's buffer
//! then pushes back on a proxy that ignores the pause); at half it resumes. A handler that
//! panics is answered `block 500` (fail closed). Health goes out every `health_interval` and
//! whenever the connection pauses or resumes; metrics every `metrics_interval` if set.
//!
//! This module owns sockets, tasks and timers for the agent side; the protocol is
//! `agentwire_zap_proto::agent`'s.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentwire_zap_proto::agent::{AgentConfig, AgentEvent, AgentSession};
use agentwire_zap_proto::messages::{
    BodyChunkEvent, ConfigureEvent, CounterMetric, FlowAction, FlowControl, GaugeMetric,
    GuardrailInspectEvent, HealthState, HealthStatus, MetricsReport, RequestCompleteEvent,
    RequestHeadersEvent, ResponseHeadersEvent, Text, WebSocketDecision, WebSocketFrameEvent,
};
use agentwire_zap_proto::{AgentResponse, Event};
use futures_util::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::unix_ms;

/// What an agent does with each event. Every method has a default that allows; a handler
/// overrides what it inspects. Methods run concurrently, each in its own task, and are
/// aborted when the proxy cancels the request.
///
/// ```
/// use agentwire_zap::server::Handler;
/// use agentwire_zap_proto::{messages::RequestHeadersEvent, AgentResponse};
/// struct DenyAdmin;
/// impl Handler for DenyAdmin {
///     async fn on_request_headers(&self, e: RequestHeadersEvent) -> AgentResponse {
///         if e.uri.starts_with("/admin") { AgentResponse::block(403, None) } else { AgentResponse::allow() }
///     }
/// }
/// ```
pub trait Handler: Send + Sync + 'static {
    /// 0x10.
    fn on_request_headers(
        &self,
        _e: RequestHeadersEvent,
    ) -> impl Future<Output = AgentResponse> + Send {
        async { AgentResponse::allow() }
    }
    /// 0x11.
    fn on_request_body_chunk(
        &self,
        _e: BodyChunkEvent,
    ) -> impl Future<Output = AgentResponse> + Send {
        async { AgentResponse::allow() }
    }
    /// 0x12.
    fn on_response_headers(
        &self,
        _e: ResponseHeadersEvent,
    ) -> impl Future<Output = AgentResponse> + Send {
        async { AgentResponse::allow() }
    }
    /// 0x13.
    fn on_response_body_chunk(
        &self,
        _e: BodyChunkEvent,
    ) -> impl Future<Output = AgentResponse> + Send {
        async { AgentResponse::allow() }
    }
    /// 0x14.
    fn on_request_complete(
        &self,
        _e: RequestCompleteEvent,
    ) -> impl Future<Output = AgentResponse> + Send {
        async { AgentResponse::allow() }
    }
    /// 0x15.
    fn on_websocket_frame(
        &self,
        _e: WebSocketFrameEvent,
    ) -> impl Future<Output = AgentResponse> + Send {
        async {
            let mut r = AgentResponse::allow();
            r.websocket_decision = Some(WebSocketDecision::Allow);
            r
        }
    }
    /// 0x16 (the reference agent never answers these).
    fn on_guardrail_inspect(
        &self,
        _e: GuardrailInspectEvent,
    ) -> impl Future<Output = AgentResponse> + Send {
        async { AgentResponse::allow() }
    }
    /// 0x17.
    fn on_configure(&self, _e: ConfigureEvent) -> impl Future<Output = AgentResponse> + Send {
        async { AgentResponse::allow() }
    }
}

async fn dispatch<H: Handler>(handler: &H, event: Event) -> AgentResponse {
    match event {
        Event::RequestHeaders(e) => handler.on_request_headers(e).await,
        Event::RequestBodyChunk(e) => handler.on_request_body_chunk(e).await,
        Event::ResponseHeaders(e) => handler.on_response_headers(e).await,
        Event::ResponseBodyChunk(e) => handler.on_response_body_chunk(e).await,
        Event::RequestComplete(e) => handler.on_request_complete(e).await,
        Event::WebSocketFrame(e) => handler.on_websocket_frame(e).await,
        Event::GuardrailInspect(e) => handler.on_guardrail_inspect(e).await,
        Event::Configure(e) => handler.on_configure(e).await,
    }
}

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// What the agent announces and accepts.
    pub agent: AgentConfig,
    /// Handlers running at once on one connection before the agent pauses it.
    pub max_in_flight: usize,
    /// Health reports, this often.
    pub health_interval: Duration,
    /// Metrics reports, this often (none if `None`).
    pub metrics_interval: Option<Duration>,
}

impl ServerConfig {
    /// `agent`, 256 handlers per connection, health every 10 s, no metrics reports.
    pub fn new(agent: AgentConfig) -> Self {
        ServerConfig {
            agent,
            max_in_flight: 256,
            health_interval: Duration::from_secs(10),
            metrics_interval: None,
        }
    }
}

/// Counters shared by every connection of a server.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Events handed to the handler.
    pub events: AtomicU64,
    /// Answers sent by handlers.
    pub answered: AtomicU64,
    /// Events refused because they did not decode.
    pub refused: AtomicU64,
    /// Handlers stopped by a Cancel.
    pub cancelled: AtomicU64,
    /// Handlers that panicked (answered `block 500`).
    pub panicked: AtomicU64,
    /// Connections ended by a protocol error.
    pub protocol_errors: AtomicU64,
}

/// A listening agent.
pub struct AgentServer<H> {
    listener: UnixListener,
    path: PathBuf,
    handler: Arc<H>,
    config: Arc<ServerConfig>,
    stats: Arc<ServerStats>,
}

/// The socket could not be bound.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// Another process is serving on the path.
    #[error("{0}: another agent is listening there")]
    InUse(PathBuf),
    /// The path could not be used.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl<H: Handler> AgentServer<H> {
    /// Binds `path`. A socket file left behind by a process that is gone is replaced; one
    /// with a live listener is not (the reference agent removes whatever is there).
    pub async fn bind(path: &Path, config: ServerConfig, handler: H) -> Result<Self, BindError> {
        if path.exists() {
            if UnixStream::connect(path).await.is_ok() {
                return Err(BindError::InUse(path.to_path_buf()));
            }
            std::fs::remove_file(path).map_err(|source| BindError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        }
        let listener = UnixListener::bind(path).map_err(|source| BindError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(AgentServer {
            listener,
            path: path.to_path_buf(),
            handler: Arc::new(handler),
            config: Arc::new(config),
            stats: Arc::new(ServerStats::default()),
        })
    }

    /// The server's counters.
    pub fn stats(&self) -> Arc<ServerStats> {
        self.stats.clone()
    }

    /// Accepts connections until `shutdown` completes, then removes the socket file.
    /// Connections already accepted run on until their proxy closes them.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        self.stats.connections.fetch_add(1, Ordering::Relaxed);
                        tokio::spawn(serve_connection(
                            stream,
                            self.handler.clone(),
                            self.config.clone(),
                            self.stats.clone(),
                        ));
                    }
                    Err(e) => {
                        tracing::warn!("accept on {}: {e}", self.path.display());
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends a handler's answer; `None` (the handler panicked) is answered `block 500`, and an
/// answer that cannot be sent (over the frame limit) too: the request is answered, closed.
fn send_answer(
    session: &mut AgentSession,
    stats: &ServerStats,
    cid: &str,
    response: Option<AgentResponse>,
) {
    let response = response.unwrap_or_else(|| {
        stats.panicked.fetch_add(1, Ordering::Relaxed);
        let mut r = AgentResponse::block(500, Some("agent handler failed".into()));
        r.audit.reason_codes.push("handler_panic".into());
        r
    });
    stats.answered.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = session.respond(cid, response) {
        let mut r = AgentResponse::block(500, Some(format!("agent answer could not be sent: {e}")));
        r.audit.reason_codes.push("answer_unsendable".into());
        let _ = session.respond(cid, r);
    }
}

/// A handler's task, finished: its event's id, its number, its answer.
struct Done {
    cid: Text,
    task: u64,
    response: Option<AgentResponse>,
}

async fn serve_connection<H: Handler>(
    mut stream: UnixStream,
    handler: Arc<H>,
    config: Arc<ServerConfig>,
    stats: Arc<ServerStats>,
) {
    let agent_id = config.agent.capabilities.agent_id.clone();
    let mut session = AgentSession::new(config.agent.clone());
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    // Running handlers by correlation id (a request may have several events in flight).
    let mut running: HashMap<Text, Vec<(u64, AbortHandle)>> = HashMap::new();
    let mut in_flight = 0usize;
    let mut next_task = 0u64;
    let mut paused = false;
    let mut buf = vec![0u8; 64 * 1024];
    let mut health = tokio::time::interval(config.health_interval);
    health.tick().await;
    let mut metrics = config.metrics_interval.map(tokio::time::interval);
    if let Some(m) = metrics.as_mut() {
        m.tick().await;
    }
    let resume_at = config.max_in_flight / 2;
    let status = |state: HealthState, in_flight: usize, message: Option<String>| HealthStatus {
        agent_id: agent_id.as_str().into(),
        state: state as i64,
        message: message.map(Text::from),
        in_flight: in_flight as u32,
        timestamp_ms: unix_ms(),
    };
    let ended: Result<(), String> = 'conn: loop {
        tokio::select! {
            read = stream.read(&mut buf), if !paused => {
                let n = match read {
                    Ok(0) => break 'conn session.finish().map_err(|e| e.to_string()),
                    Ok(n) => n,
                    Err(e) => break 'conn Err(e.to_string()),
                };
                if let Err(e) = session.receive(&buf[..n]) {
                    stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
                    break 'conn Err(e.to_string());
                }
                while let Some(event) = session.poll_event() {
                    match event {
                        AgentEvent::Connected { .. } => {}
                        AgentEvent::Request { correlation_id, event } => {
                            stats.events.fetch_add(1, Ordering::Relaxed);
                            next_task += 1;
                            in_flight += 1;
                            let task = next_task;
                            let handler = handler.clone();
                            let done = done_tx.clone();
                            let cid = correlation_id.clone();
                            let mut answer = Box::pin(
                                std::panic::AssertUnwindSafe(async move { dispatch(&*handler, event).await })
                                    .catch_unwind(),
                            );
                            // A handler that answers without waiting is answered here; one that
                            // waits goes on in a task of its own (and can be cancelled there).
                            if let Some(result) = answer.as_mut().now_or_never() {
                                in_flight -= 1;
                                send_answer(&mut session, &stats, &cid, result.ok());
                                continue;
                            }
                            let handle = tokio::spawn(async move {
                                let _ = done.send(Done { cid, task, response: answer.await.ok() });
                            });
                            running.entry(correlation_id).or_default().push((task, handle.abort_handle()));
                        }
                        AgentEvent::Refused { correlation_id, kind, error } => {
                            stats.refused.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!("refused {kind:?} for {correlation_id}: {error}");
                        }
                        AgentEvent::Cancel(cancel) => {
                            if let Some(tasks) = running.remove(&cancel.correlation_id) {
                                for (_, handle) in tasks {
                                    handle.abort();
                                    in_flight -= 1;
                                    stats.cancelled.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                }
                if in_flight >= config.max_in_flight && !paused {
                    paused = true;
                    let _ = session.flow(&FlowControl { action: FlowAction::Pause as i64, in_flight: in_flight as u32, timestamp_ms: unix_ms() });
                    let _ = session.health(&status(HealthState::Degraded, in_flight, Some("paused: handlers at their limit".into())));
                }
            }
            Some(done) = done_rx.recv() => {
                let mut finished = Some(done);
                while let Some(done) = finished {
                    // A cancelled task that finished before its abort still counts once.
                    let still_running = running.get_mut(&done.cid).is_some_and(|tasks| {
                        let before = tasks.len();
                        tasks.retain(|(t, _)| *t != done.task);
                        tasks.len() < before
                    });
                    if running.get(&done.cid).is_some_and(Vec::is_empty) {
                        running.remove(&done.cid);
                    }
                    if still_running {
                        in_flight -= 1;
                        send_answer(&mut session, &stats, &done.cid, done.response);
                    }
                    finished = done_rx.try_recv().ok();
                }
                if paused && in_flight <= resume_at {
                    paused = false;
                    let _ = session.flow(&FlowControl { action: FlowAction::Resume as i64, in_flight: in_flight as u32, timestamp_ms: unix_ms() });
                    let _ = session.health(&status(HealthState::Healthy, in_flight, None));
                }
            }
            _ = health.tick() => {
                let state = if paused { HealthState::Degraded } else { HealthState::Healthy };
                let _ = session.health(&status(state, in_flight, None));
            }
            _ = async { match metrics.as_mut() { Some(m) => { m.tick().await; } None => std::future::pending::<()>().await } } => {
                let interval = config.metrics_interval.unwrap_or_default();
                let counter = |name: &str, v: &AtomicU64| CounterMetric { name: name.into(), help: None, labels: Default::default(), value: v.load(Ordering::Relaxed) };
                let report = MetricsReport {
                    agent_id: agent_id.as_str().into(),
                    timestamp_ms: unix_ms(),
                    interval_ms: interval.as_millis() as u64,
                    counters: vec![
                        counter("agent_events_total", &stats.events),
                        counter("agent_answers_total", &stats.answered),
                        counter("agent_refused_total", &stats.refused),
                        counter("agent_cancelled_total", &stats.cancelled),
                    ],
                    gauges: vec![GaugeMetric { name: "agent_in_flight".into(), help: None, labels: Default::default(), value: in_flight as f64 }],
                    histograms: Vec::new(),
                };
                let _ = session.metrics(&report);
            }
        }
        if let Some(out) = session.poll_transmit() {
            if let Err(e) = stream.write_all(&out).await {
                break 'conn Err(e.to_string());
            }
        }
        if session.is_closed() {
            break 'conn Err("session ended".into());
        }
    };
    // Whatever the session queued last (a protocol error's frame) goes out before the close.
    if let Some(out) = session.poll_transmit() {
        let _ = stream.write_all(&out).await;
    }
    for (_, handle) in running.into_values().flatten() {
        handle.abort();
    }
    if let Err(e) = ended {
        tracing::debug!("agent connection ended: {e}");
    }
}
