//! The proxy's connection to one agent: a task around a [`ProxySession`] and handles that
//! send events and wait for their answers.
//!
//! Many requests share one connection (multiplexed by correlation id). When the connection
//! ends (the agent closed it, broke the protocol or stopped answering the handshake), every
//! request still waiting fails at once with the reason, and [`AgentConnection::is_connected`]
//! turns false: the reference client keeps reporting itself connected and lets each request
//! wait for its full timeout.
//!
//! This module owns the socket and the task of one connection; the protocol is
//! `agentwire_zap_proto::proxy`'s.

use agentwire_sync::LockExt;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use agentwire_zap_proto::messages::HealthStatus;
use agentwire_zap_proto::proxy::{ProxyConfig, ProxyEvent, ProxySession};
use agentwire_zap_proto::{AgentResponse, Capabilities, Encoding, Event};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot, watch};

use crate::unix_ms;

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The agent did not answer in time (a Cancel was sent).
    #[error("the agent did not answer in time")]
    Timeout,
    /// The connection ended before the answer.
    #[error("connection to the agent lost: {0}")]
    ConnectionLost(String),
    /// The agent paused this connection.
    #[error("the agent paused this connection")]
    Paused,
    /// The event could not be sent (not ready, busy correlation id, too large).
    #[error("not sent: {0}")]
    NotSent(String),
    /// The request was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The socket.
    #[error("{path}: {source}")]
    Socket {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The handshake.
    #[error("{path}: {reason}")]
    Handshake {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

enum Command {
    Send(
        Arc<Event>,
        oneshot::Sender<Result<AgentResponse, RequestError>>,
    ),
    Cancel(String, i32),
    Ping,
}

struct Shared {
    connected: AtomicBool,
    paused: AtomicBool,
    in_flight: AtomicUsize,
    health: Mutex<Option<HealthStatus>>,
}

/// One connection to an agent. Cheap to clone; all clones share the connection.
#[derive(Clone)]
pub struct AgentConnection {
    commands: mpsc::UnboundedSender<Command>,
    shared: Arc<Shared>,
    capabilities: Arc<Capabilities>,
    encoding: Encoding,
    ended: watch::Receiver<Option<String>>,
}

impl AgentConnection {
    /// Connects to the agent at `path` and completes the handshake (within the config's
    /// handshake timeout).
    pub async fn connect(path: &Path, config: ProxyConfig) -> Result<Self, ConnectError> {
        let handshake_timeout = config.handshake_timeout;
        let socket = tokio::time::timeout(handshake_timeout, UnixStream::connect(path))
            .await
            .map_err(|_| ConnectError::Socket {
                path: path.to_path_buf(),
                source: std::io::ErrorKind::TimedOut.into(),
            })?
            .map_err(|source| ConnectError::Socket {
                path: path.to_path_buf(),
                source,
            })?;
        let mut session = ProxySession::new(config, Instant::now());
        let mut stream = socket;
        let handshake_failed = |reason: String| ConnectError::Handshake {
            path: path.to_path_buf(),
            reason,
        };
        let ready = tokio::time::timeout(handshake_timeout, async {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                if let Some(out) = session.poll_transmit() {
                    stream.write_all(&out).await.map_err(|e| e.to_string())?;
                }
                if let Some(ProxyEvent::Ready {
                    capabilities,
                    encoding,
                }) = session.poll_event()
                {
                    return Ok::<_, String>((capabilities, encoding));
                }
                let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
                if n == 0 {
                    return Err("the agent closed the connection during the handshake".into());
                }
                session.receive(&buf[..n]).map_err(|e| e.to_string())?;
            }
        })
        .await
        .map_err(|_| handshake_failed(format!("no answer within {handshake_timeout:?}")))?
        .map_err(handshake_failed)?;
        let (capabilities, encoding) = ready;
        let shared = Arc::new(Shared {
            connected: AtomicBool::new(true),
            paused: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            health: Mutex::new(None),
        });
        let (commands, rx) = mpsc::unbounded_channel();
        let (ended_tx, ended) = watch::channel(None);
        tokio::spawn(drive(stream, session, rx, shared.clone(), ended_tx));
        Ok(AgentConnection {
            commands,
            shared,
            capabilities: Arc::from(capabilities),
            encoding,
            ended,
        })
    }

    /// Sends `event` and waits for its answer (keyed by the event's own correlation id).
    pub async fn send(&self, event: impl Into<Arc<Event>>) -> Result<AgentResponse, RequestError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Send(event.into(), tx))
            .map_err(|_| self.lost())?;
        rx.await.map_err(|_| self.lost())?
    }

    /// Cancels the request `correlation_id` (reason as in [`agentwire_zap_proto::messages::Cancel`]):
    /// its caller gets [`RequestError::Cancelled`] and the agent stops its handler.
    pub fn cancel(&self, correlation_id: &str, reason: i32) {
        let _ = self
            .commands
            .send(Command::Cancel(correlation_id.to_string(), reason));
    }

    /// Sends a ping.
    pub fn ping(&self) {
        let _ = self.commands.send(Command::Ping);
    }

    fn lost(&self) -> RequestError {
        RequestError::ConnectionLost(
            self.ended
                .borrow()
                .clone()
                .unwrap_or_else(|| "connection closed".into()),
        )
    }

    /// Whether the connection is up.
    pub fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
    }

    /// Whether the agent has paused this connection.
    pub fn is_paused(&self) -> bool {
        self.shared.paused.load(Ordering::Relaxed)
    }

    /// Requests waiting for their answers.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Relaxed)
    }

    /// The agent's last health report, if any.
    pub fn health(&self) -> Option<HealthStatus> {
        self.shared.health.lock_or_recover().clone()
    }

    /// What the agent announced.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// The negotiated encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// Waits until the connection ends; returns why.
    pub async fn closed(&self) -> String {
        let mut ended = self.ended.clone();
        loop {
            if let Some(why) = ended.borrow_and_update().clone() {
                return why;
            }
            if ended.changed().await.is_err() {
                return "connection closed".into();
            }
        }
    }
}

type Waiters = HashMap<String, oneshot::Sender<Result<AgentResponse, RequestError>>>;

/// Commands the writer takes before it writes.
const COMMAND_BATCH: usize = 256;

fn handle_command(command: Command, session: &mut ProxySession, waiters: &mut Waiters) {
    match command {
        Command::Send(event, reply) => {
            if session.is_paused() {
                let _ = reply.send(Err(RequestError::Paused));
                return;
            }
            match session.send(&event, Instant::now()) {
                Ok(()) => {
                    waiters.insert(event.correlation_id().to_string(), reply);
                }
                Err(e) => {
                    let _ = reply.send(Err(RequestError::NotSent(e.to_string())));
                }
            }
        }
        Command::Cancel(cid, reason) => {
            if session.cancel(&cid, reason, unix_ms()) {
                if let Some(w) = waiters.remove(&cid) {
                    let _ = w.send(Err(RequestError::Cancelled));
                }
            }
        }
        Command::Ping => {
            let _ = session.ping(unix_ms());
        }
    }
}

/// The connection's state, shared by its reader and writer tasks (never held across an
/// await).
struct State {
    session: ProxySession,
    waiters: Waiters,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock_or_recover()
}

/// Hands the session's events to the callers waiting for them.
fn dispatch(st: &mut State, shared: &Shared) {
    while let Some(event) = st.session.poll_event() {
        match event {
            ProxyEvent::Answer {
                correlation_id,
                response,
            } => {
                if let Some(w) = st.waiters.remove(&correlation_id) {
                    let _ = w.send(Ok(response));
                }
            }
            ProxyEvent::TimedOut { correlation_id } => {
                if let Some(w) = st.waiters.remove(&correlation_id) {
                    let _ = w.send(Err(RequestError::Timeout));
                }
            }
            ProxyEvent::Paused(p) => shared.paused.store(p, Ordering::Relaxed),
            ProxyEvent::Health(h) => {
                *shared.health.lock_or_recover() = Some(h);
            }
            ProxyEvent::Ready { .. } | ProxyEvent::Metrics(_) | ProxyEvent::Pong { .. } => {}
        }
    }
    shared.in_flight.store(st.waiters.len(), Ordering::Relaxed);
}

/// Drives one connection: a reader task (bytes in, answers out to their callers) and this
/// task as the writer (callers' events, deadlines and cancels out), so that reading and
/// writing proceed on both cores at once (one task doing both was slower than the
/// reference's two at 16 requests in flight).
async fn drive(
    stream: UnixStream,
    session: ProxySession,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shared: Arc<Shared>,
    ended: watch::Sender<Option<String>>,
) {
    let (read_half, write_half) = stream.into_split();
    let state = Arc::new(Mutex::new(State {
        session,
        waiters: HashMap::new(),
    }));
    let mut reader = tokio::spawn(read_loop(read_half, state.clone(), shared.clone()));
    let why: String = tokio::select! {
        why = write_loop(write_half, &state, &mut commands, &shared) => {
            reader.abort();
            why
        }
        why = &mut reader => why.unwrap_or_else(|e| format!("reader task ended: {e}")),
    };
    shared.connected.store(false, Ordering::Relaxed);
    let _ = ended.send(Some(why.clone()));
    {
        let mut st = lock(&state);
        st.session.close();
        for (_, w) in st.waiters.drain() {
            let _ = w.send(Err(RequestError::ConnectionLost(why.clone())));
        }
    }
    shared.in_flight.store(0, Ordering::Relaxed);
    // Commands that arrive after the end find the channel closed.
    commands.close();
    while let Ok(command) = commands.try_recv() {
        if let Command::Send(_, reply) = command {
            let _ = reply.send(Err(RequestError::ConnectionLost(why.clone())));
        }
    }
}

async fn read_loop(
    mut read: tokio::net::unix::OwnedReadHalf,
    state: Arc<Mutex<State>>,
    shared: Arc<Shared>,
) -> String {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match read.read(&mut buf).await {
            Ok(0) => return "the agent closed the connection".into(),
            Ok(n) => n,
            Err(e) => return format!("read failed: {e}"),
        };
        let mut st = lock(&state);
        if let Err(e) = st.session.receive(&buf[..n]) {
            return e.to_string();
        }
        dispatch(&mut st, &shared);
    }
}

async fn write_loop(
    mut write: tokio::net::unix::OwnedWriteHalf,
    state: &Mutex<State>,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    shared: &Shared,
) -> String {
    let timer = tokio::time::sleep(std::time::Duration::from_secs(3600));
    tokio::pin!(timer);
    let mut armed: Option<Instant> = None;
    loop {
        // One timer, moved only when the earliest deadline changes (a new timer per loop
        // turn cost a timer-wheel registration per request).
        let deadline = lock(state).session.poll_timeout();
        if deadline != armed {
            armed = deadline;
            if let Some(d) = deadline {
                timer.as_mut().reset(tokio::time::Instant::from_std(d));
            }
        }
        tokio::select! {
            command = commands.recv() => {
                let Some(first) = command else {
                    return "the proxy closed the connection".into();
                };
                // Everything already queued goes out in one write.
                let mut st = lock(state);
                let st = &mut *st;
                let mut next = Some(first);
                let mut taken = 0;
                while let Some(command) = next {
                    handle_command(command, &mut st.session, &mut st.waiters);
                    taken += 1;
                    next = if taken < COMMAND_BATCH { commands.try_recv().ok() } else { None };
                }
                shared.in_flight.store(st.waiters.len(), Ordering::Relaxed);
            }
            () = &mut timer, if armed.is_some() => {
                // Fired: re-arm on the next turn even if the earliest deadline is the same.
                armed = None;
                let mut st = lock(state);
                if let Err(e) = st.session.on_timeout(Instant::now(), unix_ms()) {
                    return e.to_string();
                }
                dispatch(&mut st, shared);
            }
        }
        let out = lock(state).session.poll_transmit();
        if let Some(out) = out {
            if let Err(e) = write.write_all(&out).await {
                return format!("write failed: {e}");
            }
        }
    }
}
