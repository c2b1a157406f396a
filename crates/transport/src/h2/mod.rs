//! The HTTP/2 transport (the `h2` crate over tokio-rustls, TLS 1.3, ALPN `h2`).
//!
//! Mapping (see `docs/protocol.md`, "Transport mappings"). One TCP+TLS connection carries one
//! agent session:
//! - **Session stream.** The agent opens `POST /agentwire/v1/session` (content-type
//!   `application/agentwire`). Its request body is the stream of agent→hub control frames
//!   (the hello first, then subscribe/unsubscribe/heartbeat/goodbye: everything sent with
//!   [`SendClass::Control`] or [`SendClass::Heartbeat`]) and of its envelopes up to
//!   [`SESSION_MESSAGE_MAX`] bytes. The hub answers `200` at once; the response body is the
//!   ordered stream of **all** hub→agent frames (welcome, then every envelope and control
//!   frame), so hub→agent is one ordered HTTP/2 stream.
//! - **Message streams.** Each larger agent→hub envelope ([`SendClass::Message`]) travels on
//!   its own HTTP/2 stream, `POST /agentwire/v1/message`, whose body is exactly one frame; the
//!   hub answers `204` once it has read the frame (the sender does not wait for that answer).
//!   HTTP/2 interleaves it with the session stream and the other message streams, so a bulk
//!   message does not hold up the messages sent after it (a lost TCP segment still stalls
//!   everything). The hub accepts envelopes of any size on either kind of stream.
//! - Any other path gets `404`, another method on these paths `405`, a second session or a
//!   `/message` before the session `400`. A message body that is not exactly one valid frame
//!   under the current maximum frame size is a [`TransportError::Frame`] delivered to the
//!   receiver (the hub then closes the connection with the matching code); an oversized frame
//!   is refused from its length prefix, before its body is buffered.
//! - **Flow control.** Initial stream window 1 MiB, connection window 16 MiB, both sides.
//!   Writers wait for flow-control capacity, so a slow reader applies back-pressure.
//! - **Priorities.** HTTP/2 priorities are not used; the hub's and the agent's send queues
//!   honour the four classes. Heartbeats ride the session stream.
//! - **Close.** `close(code, reason)` writes a `Goodbye` frame carrying the code on the
//!   outgoing side of the session stream, ends it, then shuts the connection down (GOAWAY). A
//!   peer ending its side of the session stream ends the session. A received `Goodbye` is
//!   delivered like any frame.
//!
//! This module owns that mapping, the HTTP/2 and TLS set-up of one connection and its stats. It
//! must not route or interpret envelopes: it hands whole raw frames to the hub or agent.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentwire_proto::frame::Goodbye;
use agentwire_proto::{Codec, ErrorCode, Frame, FrameDecoder, FrameError, FrameType, Limits};
use agentwire_proto::{RawFrame, FRAME_HEADER_LEN};
use bytes::Bytes;
use h2::{RecvStream, SendStream};
use http::{header, Method, Request, Response, StatusCode};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch, Mutex};

use super::{
    check_outgoing, ConnectError, ConnectionStats, FrameReceiver, FrameSender, SendClass,
    TransportError, TransportKind,
};

mod body;
pub use body::*;
mod server;
pub use server::*;
mod client;
pub use client::*;
mod sender;
pub use sender::*;
mod receiver;
pub use receiver::*;

/// Path of the session stream.
pub const SESSION_PATH: &str = "/agentwire/v1/session";

/// Path of a message stream.
pub const MESSAGE_PATH: &str = "/agentwire/v1/message";

/// ALPN protocol identifier of HTTP/2 over TLS.
pub const ALPN_H2: &[u8] = b"h2";

/// Content type of agentwire request and response bodies.
pub const CONTENT_TYPE: &str = "application/agentwire";

/// Initial HTTP/2 stream flow-control window, bytes.
pub const STREAM_WINDOW: u32 = 1024 * 1024;

/// Initial HTTP/2 connection flow-control window, bytes.
pub const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;

/// Concurrent streams the hub lets an agent open (the session plus in-flight messages).
pub const MAX_CONCURRENT_STREAMS: u32 = 256;

/// Bytes of partially received frames one connection may hold across all its streams before
/// the receiver reports a `TooLarge` frame error (guards against many unfinished streams).
pub const DEFAULT_MAX_BUFFERED_BYTES: usize = 64 * 1024 * 1024;

/// Frames queued between the stream readers and the consumer of one connection.
const INBOUND_QUEUE: usize = 32;

/// How long a closing connection keeps being driven so that the goodbye and GOAWAY go out.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

type Inbound = Result<RawFrame, TransportError>;

/// State shared by the halves, the connection driver and the stream readers.
struct Core {
    remote: Option<SocketAddr>,
    /// `host:port` for request URIs (client side).
    authority: String,
    /// How the connection ended, once it has (or `close()` was called).
    closed: watch::Sender<Option<TransportError>>,
    /// The session ended cleanly: the peer ended its side of the session stream.
    clean: AtomicBool,
    /// The recorded end is the driver's "the connection ended" and may still be replaced by
    /// the session reader's more precise one.
    weak_end: AtomicBool,
    /// `close()` was called on this side.
    local_close: watch::Sender<bool>,
    /// Shutdown has begun (goodbye written or the session ended).
    closing: AtomicBool,
    /// Asks the connection driver to end the connection.
    shutdown: watch::Sender<bool>,
    /// Outgoing side of the session stream: the request body (agent) or response body (hub).
    session_out: Mutex<Option<SendStream<Bytes>>>,
    /// Session frames fed and not yet flushed, written as one DATA chunk by the next write on
    /// the session stream (taken only while `session_out` is held, so order is kept).
    session_pending: std::sync::Mutex<Vec<Bytes>>,
    /// Agent side: the handle that opens message streams.
    requests: std::sync::Mutex<Option<h2::client::SendRequest<Bytes>>>,
    peer_max: AtomicU32,
    max_in: AtomicU32,
    buffered: AtomicUsize,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    streams_opened: AtomicU64,
    /// Agent side: message streams the hub has not answered yet (it answers once it has read
    /// the frame), and the signal that the count reached zero.
    unanswered: watch::Sender<usize>,
}

impl Core {
    /// A connection's shared state. `max_in` is the limit on incoming frames from the start:
    /// the hub's side begins at a hello's (`agentwire_proto::MAX_HELLO_FRAME`), because its
    /// session pump reads before the hub has the receiver in hand.
    fn new(
        remote: Option<SocketAddr>,
        authority: String,
        max_in: u32,
    ) -> (Arc<Core>, mpsc::Sender<Inbound>, mpsc::Receiver<Inbound>) {
        let max = Limits::default().max_frame_size;
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
        let core = Arc::new(Core {
            remote,
            authority,
            closed: watch::channel(None).0,
            clean: AtomicBool::new(false),
            weak_end: AtomicBool::new(false),
            local_close: watch::channel(false).0,
            closing: AtomicBool::new(false),
            shutdown: watch::channel(false).0,
            session_out: Mutex::new(None),
            session_pending: std::sync::Mutex::new(Vec::new()),
            requests: std::sync::Mutex::new(None),
            peer_max: AtomicU32::new(max),
            max_in: AtomicU32::new(max_in),
            buffered: AtomicUsize::new(0),
            bytes_sent: AtomicU64::new(0),
            bytes_received: AtomicU64::new(0),
            streams_opened: AtomicU64::new(0),
            unanswered: watch::channel(0).0,
        });
        (core, tx, rx)
    }

    /// Records how the connection ended; the first record wins, except that a `weak` record
    /// (the connection ended without an error) gives way to the next non-weak one.
    fn end(&self, why: TransportError, weak: bool) {
        self.closed.send_if_modified(|state| {
            let replace = state.is_none() || (!weak && self.weak_end.load(Ordering::Relaxed));
            if replace {
                *state = Some(why);
                self.weak_end.store(weak, Ordering::Relaxed);
            }
            replace
        });
    }

    fn reason(&self) -> Option<TransportError> {
        self.closed.borrow().clone()
    }

    /// The recorded end, or a generic one.
    fn reason_or_closed(&self) -> TransportError {
        self.reason().unwrap_or_else(|| TransportError::Closed {
            code: None,
            reason: "the HTTP/2 connection is closed".into(),
        })
    }

    /// Maps a failed write: the recorded end if there is one, else the h2 error.
    fn write_error(&self, e: &h2::Error) -> TransportError {
        self.reason().unwrap_or_else(|| map_h2_error(e))
    }

    fn set_requests(&self, requests: Option<h2::client::SendRequest<Bytes>>) {
        if let Ok(mut guard) = self.requests.lock() {
            *guard = requests;
        }
    }

    fn requests(&self) -> Option<h2::client::SendRequest<Bytes>> {
        self.requests.lock().ok().and_then(|g| g.clone())
    }

    /// Records the connection driver's outcome and releases the stream handles.
    fn connection_ended(&self, result: Result<(), h2::Error>) {
        match result {
            // Clean at the HTTP/2 level (GOAWAY or EOF), but only the session stream's end
            // makes the session's end clean; its reader may refine this.
            Ok(()) => self.end(
                TransportError::Closed {
                    code: None,
                    reason: "the HTTP/2 connection ended".into(),
                },
                true,
            ),
            Err(e) => self.end(map_h2_error(&e), false),
        }
        self.set_requests(None);
        if let Ok(mut guard) = self.session_out.try_lock() {
            guard.take();
        }
    }
}

/// Starts ending the session: stops opening streams, writes `goodbye` (if any) and ends the
/// outgoing side of the session stream, then asks the driver to end the connection.
fn begin_shutdown(core: &Arc<Core>, goodbye: Option<Bytes>) {
    if core.closing.swap(true, Ordering::AcqRel) {
        return;
    }
    let core = core.clone();
    tokio::spawn(async move {
        core.set_requests(None);
        // A writer waiting for flow-control capacity holds the lock; do not wait for it
        // forever (the connection's end releases it).
        if let Ok(mut guard) = tokio::time::timeout(CLOSE_GRACE, core.session_out.lock()).await {
            if let Some(mut stream) = guard.take() {
                let _ = stream.send_data(goodbye.unwrap_or_default(), true);
            }
        }
        core.shutdown.send_replace(true);
    });
}

/// Resolves once the flag is true.
async fn wait_true(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn map_h2_error(e: &h2::Error) -> TransportError {
    if let Some(io) = e.get_io() {
        return TransportError::Closed {
            code: None,
            reason: format!("HTTP/2 connection lost: {io}"),
        };
    }
    if e.is_go_away() && e.is_remote() {
        return TransportError::Closed {
            code: None,
            reason: format!("the peer closed the HTTP/2 connection: {e}"),
        };
    }
    TransportError::Closed {
        code: None,
        reason: format!("HTTP/2 error: {e}"),
    }
}

/// Whether `frame`, sent with `class` by an agent, travels on a message stream of its own.
fn own_stream(frame: &Bytes, class: SendClass) -> bool {
    matches!(class, SendClass::Message(_) | SendClass::Request(_))
        && frame.len() > SESSION_MESSAGE_MAX
}

fn client_builder() -> h2::client::Builder {
    let mut b = h2::client::Builder::new();
    b.initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .enable_push(false);
    b
}

fn server_builder() -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
    b
}

fn halves(core: Arc<Core>, rx: mpsc::Receiver<Inbound>) -> (H2Sender, H2Receiver) {
    let owner = Arc::new(Owner { core: core.clone() });
    (
        H2Sender {
            core: core.clone(),
            _owner: owner.clone(),
        },
        H2Receiver {
            core,
            rx,
            done: false,
            _owner: owner,
        },
    )
}

/// Held by every handle of a connection: once the last sender and the receiver are dropped,
/// the session is ended (its outgoing side closed) and the connection shut down.
struct Owner {
    core: Arc<Core>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        if tokio::runtime::Handle::try_current().is_ok() {
            begin_shutdown(&self.core, None);
        } else {
            self.core.shutdown.send_replace(true);
        }
    }
}

#[cfg(test)]
mod tests;
