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
    fn new(
        remote: Option<SocketAddr>,
        authority: String,
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
            max_in: AtomicU32::new(max),
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

/// Session frames held back by `feed_frame` before they are written anyway.
const SESSION_BATCH: usize = 64 * 1024;

/// An agent's messages up to this many bytes (frame header included) ride the session
/// stream, batched with its control frames; larger ones get a message stream of their own, so
/// that HTTP/2 interleaves them with everything else instead of holding the session stream up
/// behind them. 16 KiB is one DATA frame at HTTP/2's default maximum frame size.
pub const SESSION_MESSAGE_MAX: usize = 16 * 1024;

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

/// Writes `data` to an h2 stream, waiting for flow-control capacity chunk by chunk (so a slow
/// reader holds the writer back instead of h2 buffering without bound).
async fn write_body(
    stream: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), h2::Error> {
    if data.is_empty() {
        return stream.send_data(data, end);
    }
    loop {
        stream.reserve_capacity(data.len());
        let mut cap = stream.capacity();
        if cap == 0 {
            cap = match poll_fn(|cx| stream.poll_capacity(cx)).await {
                Some(Ok(n)) => n,
                Some(Err(e)) => return Err(e),
                None => return Err(h2::Error::from(h2::Reason::STREAM_CLOSED)),
            };
            if cap == 0 {
                continue;
            }
        }
        let chunk = data.split_to(cap.min(data.len()));
        let last = data.is_empty();
        stream.send_data(chunk, end && last)?;
        if last {
            return Ok(());
        }
    }
}

/// Accounts a reader's partially buffered bytes against the connection's budget.
fn account(core: &Core, held: &mut usize, now: usize) -> Result<(), TransportError> {
    if now > *held {
        let add = now - *held;
        let total = core.buffered.fetch_add(add, Ordering::Relaxed) + add;
        *held = now;
        if total > DEFAULT_MAX_BUFFERED_BYTES {
            return Err(TransportError::Frame(FrameError::TooLarge {
                len: u32::try_from(total).unwrap_or(u32::MAX),
                max: u32::try_from(DEFAULT_MAX_BUFFERED_BYTES).unwrap_or(u32::MAX),
            }));
        }
    } else {
        core.buffered.fetch_sub(*held - now, Ordering::Relaxed);
        *held = now;
    }
    Ok(())
}

/// Reads the session stream's incoming side (the request body on the hub, the response body
/// on the agent) as a sequence of frames. Its end ends the session.
async fn session_pump(mut body: RecvStream, core: Arc<Core>, tx: mpsc::Sender<Inbound>) {
    let mut decoder = FrameDecoder::new(core.max_in.load(Ordering::Relaxed));
    let mut held = 0usize;
    let mut goodbye: Option<Goodbye> = None;
    // Ok(true): clean end; Ok(false): consumer gone; Err: frame error (reported) or h2 error.
    let outcome: Result<bool, Result<TransportError, h2::Error>> = 'read: loop {
        let chunk = match body.data().await {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => break Err(Err(e)),
            None => match decoder.finish() {
                Ok(()) => break Ok(true),
                Err(e) => break Err(Ok(e.into())),
            },
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        core.bytes_received
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        decoder.push_bytes(chunk);
        loop {
            decoder.set_max_frame_size(core.max_in.load(Ordering::Relaxed));
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    if frame.type_byte == FrameType::Goodbye as u8 {
                        if let Ok(Frame::Goodbye(g)) = Frame::decode(&frame, Codec::MsgPack) {
                            goodbye = Some(g);
                        }
                    }
                    if tx.send(Ok(frame)).await.is_err() {
                        break 'read Ok(false);
                    }
                }
                Ok(None) => break,
                Err(e) => break 'read Err(Ok(e.into())),
            }
        }
        if let Err(e) = account(&core, &mut held, decoder.buffered()) {
            break Err(Ok(e));
        }
    };
    core.buffered.fetch_sub(held, Ordering::Relaxed);
    match outcome {
        Ok(true) => {
            let why = match goodbye {
                Some(g) => TransportError::Closed {
                    code: Some(g.code),
                    reason: format!("closed by peer: {} {}", g.code.name(), g.reason)
                        .trim_end()
                        .to_owned(),
                },
                None => TransportError::Closed {
                    code: Some(ErrorCode::Normal),
                    reason: "the peer ended the session".into(),
                },
            };
            core.clean.store(true, Ordering::Relaxed);
            core.end(why, false);
            begin_shutdown(&core, None);
        }
        Ok(false) => {}
        // The consumer closes the connection with the error's code.
        Err(Ok(frame_error)) => {
            let _ = tx.send(Err(frame_error)).await;
        }
        Err(Err(e)) => {
            core.end(map_h2_error(&e), false);
            begin_shutdown(&core, None);
        }
    }
}

/// Hub side: one message stream's body being read, which must carry exactly one frame, then
/// the end of the stream.
struct MessageBody {
    decoder: FrameDecoder,
    /// Bytes of this stream counted in the connection's `buffered` total.
    held: usize,
    frame: Option<RawFrame>,
}

/// What one step of reading a message body came to.
enum BodyStep {
    /// More bytes are needed.
    More,
    /// The stream ended: its one frame, nothing (a reset stream loses only its own message;
    /// a lost connection is reported by the connection driver), or a frame error.
    Done(Result<Option<RawFrame>, TransportError>),
}

impl MessageBody {
    fn new(core: &Core) -> Self {
        MessageBody {
            decoder: FrameDecoder::new(core.max_in.load(Ordering::Relaxed)),
            held: 0,
            frame: None,
        }
    }

    /// Takes what `body.data()` gave.
    fn step(
        &mut self,
        core: &Core,
        body: &mut RecvStream,
        data: Option<Result<Bytes, h2::Error>>,
    ) -> BodyStep {
        let chunk = match data {
            Some(Ok(chunk)) => chunk,
            Some(Err(_)) => return BodyStep::Done(Ok(None)),
            None => {
                return BodyStep::Done(match self.frame.take() {
                    Some(f) => Ok(Some(f)),
                    None => Err(TransportError::Frame(match self.decoder.finish() {
                        Err(e) => e,
                        Ok(()) => FrameError::Truncated {
                            buffered: 0,
                            needed: FRAME_HEADER_LEN,
                        },
                    })),
                })
            }
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        core.bytes_received
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        self.decoder.push_bytes(chunk);
        if self.frame.is_none() {
            self.decoder
                .set_max_frame_size(core.max_in.load(Ordering::Relaxed));
            match self.decoder.next_frame() {
                Ok(f) => self.frame = f,
                Err(e) => return BodyStep::Done(Err(e.into())),
            }
        }
        if self.frame.is_some() && self.decoder.buffered() > 0 {
            return BodyStep::Done(Err(FrameError::Trailing(self.decoder.buffered()).into()));
        }
        match account(core, &mut self.held, self.decoder.buffered()) {
            Ok(()) => BodyStep::More,
            Err(e) => BodyStep::Done(Err(e)),
        }
    }

    /// Gives back this stream's share of the connection's buffered bytes. Returns what goes
    /// to the consumer and the answer the stream gets: `204` for a frame, `400` for a frame
    /// error, none for a reset stream.
    fn settle(
        self,
        core: &Core,
        result: Result<Option<RawFrame>, TransportError>,
    ) -> Option<(Inbound, StatusCode)> {
        core.buffered.fetch_sub(self.held, Ordering::Relaxed);
        match result {
            Ok(Some(frame)) => Some((Ok(frame), StatusCode::NO_CONTENT)),
            Ok(None) => None,
            Err(e) => Some((Err(e), StatusCode::BAD_REQUEST)),
        }
    }
}

/// Reads a message stream whose body has arrived, inside the connection driver: no task, and
/// its `204` waits in `answers` until the driver has nothing more to read, so the answers to
/// everything read in one go leave in one write. Most small messages arrive whole (HEADERS
/// and DATA with END_STREAM in one read); a task per stream cost a spawn, a wake-up of the
/// driver and a TLS record and `writev` of its own for each `204` (half the hub's `writev`s
/// at 10 × 1 KiB were 32-byte records). Whatever has not arrived yet is handed to a
/// [`message_pump`] task; a frame the consumer has no room for waits in a task of its own.
fn read_message_inline(
    mut body: RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    core: &Arc<Core>,
    tx: &mpsc::Sender<Inbound>,
    answers: &mut Vec<h2::server::SendResponse<Bytes>>,
) {
    use futures_util::FutureExt;
    let mut state = MessageBody::new(core);
    loop {
        let Some(data) = body.data().now_or_never() else {
            tokio::spawn(message_pump(body, respond, state, core.clone(), tx.clone()));
            return;
        };
        if let BodyStep::Done(result) = state.step(core, &mut body, data) {
            drop(body);
            let Some((inbound, status)) = state.settle(core, result) else {
                return;
            };
            // The answer goes out only once the frame is queued for the hub: an agent that has
            // every answer knows its frames are ahead of anything it sends next (its goodbye
            // on the session stream).
            match tx.try_send(inbound) {
                Err(mpsc::error::TrySendError::Full(inbound)) => {
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let _ = tx.send(inbound).await;
                        respond_status(&mut respond, status);
                    });
                }
                _ if status == StatusCode::NO_CONTENT => answers.push(respond),
                _ => respond_status(&mut respond, status),
            }
            return;
        }
    }
}

/// A stream the server accepted: its request and the handle that answers it.
type Accepted = (Request<RecvStream>, h2::server::SendResponse<Bytes>);

/// Accepts the next stream of `conn`. While none is ready, first answers the message streams
/// in `answers` (`204`) and drives the connection once more, which writes them together.
fn poll_accept_answering<IO>(
    conn: &mut h2::server::Connection<IO, Bytes>,
    answers: &mut Vec<h2::server::SendResponse<Bytes>>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<Option<Result<Accepted, h2::Error>>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let next = conn.poll_accept(cx);
        if next.is_ready() || answers.is_empty() {
            return next;
        }
        answer_all(answers);
    }
}

fn answer_all(answers: &mut Vec<h2::server::SendResponse<Bytes>>) {
    for mut respond in answers.drain(..) {
        respond_status(&mut respond, StatusCode::NO_CONTENT);
    }
}

/// Reads the rest of a message stream's body in a task of its own.
async fn message_pump(
    mut body: RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    mut state: MessageBody,
    core: Arc<Core>,
    tx: mpsc::Sender<Inbound>,
) {
    let result = loop {
        let data = body.data().await;
        if let BodyStep::Done(result) = state.step(&core, &mut body, data) {
            break result;
        }
    };
    drop(body);
    if let Some((inbound, status)) = state.settle(&core, result) {
        // Queued for the hub first, then answered (see `read_message_inline`).
        let _ = tx.send(inbound).await;
        respond_status(&mut respond, status);
    }
}

fn respond_status(respond: &mut h2::server::SendResponse<Bytes>, status: StatusCode) {
    if let Ok(response) = Response::builder().status(status).body(()) {
        let _ = respond.send_response(response, true);
    }
}

enum Route {
    Session,
    Message,
    Refuse(StatusCode),
}

fn route<B>(req: &Request<B>) -> Route {
    let path = req.uri().path();
    let known = path == SESSION_PATH || path == MESSAGE_PATH;
    if !known {
        return Route::Refuse(StatusCode::NOT_FOUND);
    }
    if req.method() != Method::POST {
        return Route::Refuse(StatusCode::METHOD_NOT_ALLOWED);
    }
    if path == SESSION_PATH {
        Route::Session
    } else {
        Route::Message
    }
}

/// Hub side: drives the h2 server connection, routes requests, and ends the connection when
/// asked to.
async fn serve<IO>(
    mut conn: h2::server::Connection<IO, Bytes>,
    core: Arc<Core>,
    tx: mpsc::Sender<Inbound>,
    mut session_ready: Option<oneshot::Sender<()>>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut shutdown = core.shutdown.subscribe();
    let mut have_session = false;
    let mut answers = Vec::new();
    let result: Result<(), h2::Error> = loop {
        let next = tokio::select! {
            next = poll_fn(|cx| poll_accept_answering(&mut conn, &mut answers, cx)) => Some(next),
            () = wait_true(&mut shutdown) => None,
        };
        let Some(next) = next else {
            answer_all(&mut answers);
            conn.graceful_shutdown();
            // Keep driving while the goodbye and the open streams finish, refusing new ones.
            let drain = async {
                loop {
                    match conn.accept().await {
                        Some(Ok((_, mut respond))) => {
                            respond.send_reset(h2::Reason::REFUSED_STREAM)
                        }
                        Some(Err(e)) => return Err(e),
                        None => return Ok(()),
                    }
                }
            };
            break tokio::time::timeout(CLOSE_GRACE, drain)
                .await
                .unwrap_or(Ok(()));
        };
        let (req, mut respond) = match next {
            None => break Ok(()),
            Some(Err(e)) => break Err(e),
            Some(Ok(pair)) => pair,
        };
        match route(&req) {
            Route::Refuse(status) => respond_status(&mut respond, status),
            Route::Session if have_session => respond_status(&mut respond, StatusCode::BAD_REQUEST),
            Route::Message if !have_session => {
                respond_status(&mut respond, StatusCode::BAD_REQUEST)
            }
            Route::Session => {
                let response = Response::builder()
                    .status(StatusCode::OK)
                    .header(header::CONTENT_TYPE, CONTENT_TYPE)
                    .body(());
                let Ok(response) = response else {
                    continue;
                };
                let Ok(out) = respond.send_response(response, false) else {
                    continue;
                };
                have_session = true;
                *core.session_out.lock().await = Some(out);
                tokio::spawn(session_pump(req.into_body(), core.clone(), tx.clone()));
                if let Some(ready) = session_ready.take() {
                    let _ = ready.send(());
                }
            }
            Route::Message => {
                read_message_inline(req.into_body(), respond, &core, &tx, &mut answers);
            }
        }
    };
    core.connection_ended(result);
    drop(tx);
}

/// Agent side: drives the h2 client connection until it ends or a shutdown is asked for.
async fn drive_client<IO>(conn: h2::client::Connection<IO, Bytes>, core: Arc<Core>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut shutdown = core.shutdown.subscribe();
    tokio::pin!(conn);
    let first = tokio::select! {
        r = &mut conn => Some(r),
        () = wait_true(&mut shutdown) => None,
    };
    let result = match first {
        Some(r) => r,
        None => tokio::time::timeout(CLOSE_GRACE, &mut conn)
            .await
            .unwrap_or(Ok(())),
    };
    core.connection_ended(result);
}

/// Server side: a TLS stream (already accepted with ALPN h2) → the session's halves, once the
/// session request has arrived (within `session_timeout`). Drives the h2 server connection in a
/// spawned task that lives as long as the session.
pub async fn accept<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: IO,
    remote: Option<SocketAddr>,
    session_timeout: Duration,
) -> Result<(H2Sender, H2Receiver), TransportError> {
    let deadline = tokio::time::Instant::now() + session_timeout;
    let conn = match tokio::time::timeout_at(deadline, server_builder().handshake::<IO, Bytes>(io))
        .await
    {
        Err(_) => return Err(TransportError::Timeout(session_timeout)),
        Ok(Err(e)) => {
            return Err(ConnectError::refused(
                "HTTP/2 handshake failed (is the peer an agentwire HTTP/2 client?)",
                e,
            )
            .into())
        }
        Ok(Ok(conn)) => conn,
    };
    let (core, tx, rx) = Core::new(remote, String::new());
    let (ready_tx, ready_rx) = oneshot::channel();
    let driver = tokio::spawn(serve(conn, core.clone(), tx, Some(ready_tx)));
    match tokio::time::timeout_at(deadline, ready_rx).await {
        Ok(Ok(())) => Ok(halves(core, rx)),
        Ok(Err(_)) => Err(core.reason().unwrap_or_else(|| TransportError::Closed {
            code: None,
            reason: "the connection ended before the session request".into(),
        })),
        Err(_) => {
            driver.abort();
            Err(TransportError::Timeout(session_timeout))
        }
    }
}

/// Client side: TCP connect to addr, TLS (client_config must have ALPN h2), h2 handshake, open
/// the session stream.
pub async fn connect(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    server_name: rustls_pki_types::ServerName<'static>,
) -> Result<(H2Sender, H2Receiver), TransportError> {
    connect_sending(addr, tls, server_name, None).await
}

/// [`connect`], with `first_frame` (the agent's hello) queued on the session stream right
/// behind the session request, so that both leave in one write. Written later, it could meet
/// a connection the hub had already closed (a refused client certificate closes it just after
/// the handshake), and the write's broken pipe would hide the hub's TLS alert, which says why.
pub async fn connect_sending(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    server_name: rustls_pki_types::ServerName<'static>,
    first_frame: Option<Bytes>,
) -> Result<(H2Sender, H2Receiver), TransportError> {
    if !tls.alpn_protocols.iter().any(|p| p == ALPN_H2) {
        return Err(ConnectError::Config(
            "the TLS client configuration does not offer ALPN \"h2\", which HTTP/2 requires".into(),
        )
        .into());
    }
    let authority = match &server_name {
        rustls_pki_types::ServerName::DnsName(name) => format!("{}:{}", name.as_ref(), addr.port()),
        _ => addr.to_string(),
    };
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| ConnectError::socket(format!("cannot connect to {addr}"), e))?;
    let _ = tcp.set_nodelay(true);
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(server_name, super::read_ahead::ReadAhead::new(tcp))
        .await
        .map_err(|e| ConnectError::tls_handshake(format!("TLS handshake with {addr} failed"), e))?;
    if stream.get_ref().1.alpn_protocol() != Some(ALPN_H2) {
        return Err(ConnectError::Config(format!(
            "the server at {addr} did not agree to HTTP/2 (ALPN \"h2\")"
        ))
        .into());
    }
    let (requests, conn) = client_builder()
        .handshake::<_, Bytes>(super::tls_alert::AlertOnWriteError::new(stream))
        .await
        .map_err(|e| ConnectError::refused(format!("HTTP/2 handshake with {addr} failed"), e))?;
    let (core, tx, rx) = Core::new(Some(addr), authority);
    tokio::spawn(drive_client(conn, core.clone()));
    match open_session(&core, requests, tx, first_frame).await {
        Ok(()) => Ok(halves(core, rx)),
        Err(e) => {
            session_failed(&core, &e);
            Err(e)
        }
    }
}

/// Why the session request failed, as a connect error.
fn session_request_failed(
    what: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> ConnectError {
    ConnectError::refused(format!("HTTP/2 session request failed ({what})"), e)
}

/// Ends a client connection whose session request failed.
fn session_failed(core: &Core, e: &TransportError) {
    core.end(e.clone(), false);
    core.set_requests(None);
    core.shutdown.send_replace(true);
}

/// Sends the session request and makes its body the way out, without waiting for the hub's
/// answer: the caller's first frame leaves with the request, as it would on the other
/// transports, and the connect costs no round trip more than TCP and TLS. The answer is
/// awaited by [`session_answer`], which ends the connection with its error if the hub refused.
async fn open_session(
    core: &Arc<Core>,
    requests: h2::client::SendRequest<Bytes>,
    tx: mpsc::Sender<Inbound>,
    first_frame: Option<Bytes>,
) -> Result<(), TransportError> {
    let mut requests = requests
        .ready()
        .await
        .map_err(|e| session_request_failed("ready", e))?;
    let request =
        post(&core.authority, SESSION_PATH).map_err(|e| session_request_failed("request", e))?;
    let (response, mut out) = requests
        .send_request(request, false)
        .map_err(|e| session_request_failed("send", e))?;
    core.streams_opened.fetch_add(1, Ordering::Relaxed);
    if let Some(frame) = first_frame {
        check_outgoing(&frame, core.peer_max.load(Ordering::Relaxed))?;
        let len = frame.len() as u64;
        out.send_data(frame, false)
            .map_err(|e| session_request_failed("first frame", e))?;
        core.bytes_sent.fetch_add(len, Ordering::Relaxed);
    }
    *core.session_out.lock().await = Some(out);
    core.set_requests(Some(requests));
    tokio::spawn(session_answer(response, core.clone(), tx));
    Ok(())
}

/// Waits for the hub's answer to the session request, then reads the session; a refusal
/// ends the connection, and the receiver reports it.
async fn session_answer(
    response: h2::client::ResponseFuture,
    core: Arc<Core>,
    tx: mpsc::Sender<Inbound>,
) {
    let answer = match response.await {
        Err(e) if closed_after_handshake(&e) => Err(session_request_failed(
            "the hub closed the connection right after the TLS handshake, as a hub that \
             requires client certificates does when it refuses the agent's certificate \
             (or the lack of one)",
            e,
        )
        .into()),
        Err(e) => Err(session_request_failed("response", e).into()),
        Ok(response) if response.status() != StatusCode::OK => Err(ConnectError::Config(format!(
            "the hub answered {} to the HTTP/2 session request",
            response.status()
        ))
        .into()),
        Ok(response) => Ok(response),
    };
    match answer {
        Ok(response) => session_pump(response.into_body(), core, tx).await,
        Err(e) => {
            session_failed(&core, &e);
            let _ = tx.send(Err(e)).await;
        }
    }
}

/// Whether the session request failed because the connection broke under it (a broken pipe
/// or a reset): with TLS 1.3 that is how a hub's refusal of the client's certificate can
/// arrive, when the client's writes meet the closed connection before its alert is read.
fn closed_after_handshake(e: &h2::Error) -> bool {
    e.get_io().is_some_and(|io| {
        matches!(
            io.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        )
    })
}

fn post(authority: &str, path: &str) -> Result<Request<()>, http::Error> {
    Request::builder()
        .method(Method::POST)
        .uri(format!("https://{authority}{path}"))
        .header(header::CONTENT_TYPE, CONTENT_TYPE)
        .body(())
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

/// Sending half of an HTTP/2 connection (either side).
#[derive(Clone)]
pub struct H2Sender {
    core: Arc<Core>,
    _owner: Arc<Owner>,
}

impl H2Sender {
    /// Writes a frame on the outgoing side of the session stream.
    async fn send_session(&self, frame: Bytes) -> Result<(), TransportError> {
        self.write_session(Some(frame)).await
    }

    /// Writes what was fed to the session stream, then `frame`, as one DATA chunk.
    async fn write_session(&self, frame: Option<Bytes>) -> Result<(), TransportError> {
        let mut guard = self.core.session_out.lock().await;
        let Some(stream) = guard.as_mut() else {
            return Err(self.core.reason_or_closed());
        };
        let data = {
            let mut pending = self.pending();
            pending.extend(frame);
            match pending.len() {
                0 => Bytes::new(),
                1 => pending.pop().unwrap_or_default(),
                _ => {
                    // One copy, so that the batch leaves as one DATA frame.
                    let mut all =
                        bytes::BytesMut::with_capacity(pending.iter().map(Bytes::len).sum());
                    for f in pending.drain(..) {
                        all.extend_from_slice(&f);
                    }
                    all.freeze()
                }
            }
        };
        if data.is_empty() {
            return Ok(());
        }
        write_body(stream, data, false)
            .await
            .map_err(|e| self.core.write_error(&e))
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Vec<Bytes>> {
        self.core
            .session_pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Agent side: opens a message stream carrying the frame.
    async fn send_message(&self, frame: Bytes) -> Result<(), TransportError> {
        let Some(requests) = self.core.requests() else {
            return Err(self.core.reason_or_closed());
        };
        let mut requests = requests
            .ready()
            .await
            .map_err(|e| self.core.write_error(&e))?;
        let request = post(&self.core.authority, MESSAGE_PATH)
            .map_err(|e| TransportError::io("cannot build the message request", e))?;
        let (response, mut stream) = requests
            .send_request(request, false)
            .map_err(|e| self.core.write_error(&e))?;
        drop(requests);
        self.core.streams_opened.fetch_add(1, Ordering::Relaxed);
        self.core.unanswered.send_modify(|n| *n += 1);
        let core = self.core.clone();
        // Let the stream complete: read (and discard) the hub's answer.
        tokio::spawn(async move {
            let _answered = Answered(core);
            match response.await {
                Ok(response) => {
                    if !response.status().is_success() {
                        tracing::debug!(status = %response.status(), "hub refused a message stream");
                    }
                    let mut body = response.into_body();
                    while let Some(Ok(chunk)) = body.data().await {
                        let _ = body.flow_control().release_capacity(chunk.len());
                    }
                }
                Err(e) => tracing::trace!("message stream ended without an answer: {e}"),
            }
        });
        write_body(&mut stream, frame, true)
            .await
            .map_err(|e| self.core.write_error(&e))
    }
}

/// Counts a message stream as answered when its answer task ends, however it ends.
struct Answered(Arc<Core>);

impl Drop for Answered {
    fn drop(&mut self) {
        self.0.unanswered.send_modify(|n| *n = n.saturating_sub(1));
    }
}

impl FrameSender for H2Sender {
    async fn send_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        check_outgoing(&frame, self.core.peer_max.load(Ordering::Relaxed))?;
        if let Some(why) = self.core.reason() {
            return Err(why);
        }
        let len = frame.len() as u64;
        let client = !self.core.authority.is_empty();
        if client && own_stream(&frame, class) {
            self.send_message(frame).await?;
        } else {
            self.send_session(frame).await?;
        }
        self.core.bytes_sent.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Frames for the session stream (every frame from the hub; control frames and messages
    /// up to [`SESSION_MESSAGE_MAX`] from an agent) wait to go out together in one DATA chunk
    /// at the next flush, or sooner once 64 KiB are waiting; an agent's larger messages travel
    /// on streams of their own and are sent at once.
    async fn feed_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        let client = !self.core.authority.is_empty();
        if client && own_stream(&frame, class) {
            return self.send_frame(frame, class).await;
        }
        check_outgoing(&frame, self.core.peer_max.load(Ordering::Relaxed))?;
        if let Some(why) = self.core.reason() {
            return Err(why);
        }
        let len = frame.len();
        let full = {
            let mut pending = self.pending();
            pending.push(frame);
            pending.iter().map(Bytes::len).sum::<usize>() >= SESSION_BATCH
        };
        self.core
            .bytes_sent
            .fetch_add(len as u64, Ordering::Relaxed);
        if full {
            self.write_session(None).await?;
        }
        Ok(())
    }

    async fn flush(&self) -> Result<(), TransportError> {
        self.write_session(None).await
    }

    fn set_peer_max_frame_size(&self, max: u32) {
        self.core.peer_max.store(max, Ordering::Relaxed);
    }

    fn close(&self, code: ErrorCode, reason: &str) {
        let goodbye = Frame::Goodbye(Goodbye {
            code,
            reason: reason.chars().take(256).collect(),
        })
        .encode(Codec::MsgPack)
        .ok();
        self.core.end(
            TransportError::Closed {
                code: Some(code),
                reason: format!("closed locally: {} {reason}", code.name())
                    .trim_end()
                    .to_owned(),
            },
            false,
        );
        self.core.local_close.send_replace(true);
        begin_shutdown(&self.core, goodbye);
    }

    async fn closed(&self) -> TransportError {
        let mut rx = self.core.closed.subscribe();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return self.core.reason_or_closed();
            }
        }
    }

    fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            transport: TransportKind::Http2.name(),
            remote_addr: self.core.remote,
            bytes_sent: self.core.bytes_sent.load(Ordering::Relaxed),
            bytes_received: self.core.bytes_received.load(Ordering::Relaxed),
            streams_opened: self.core.streams_opened.load(Ordering::Relaxed),
            ..ConnectionStats::default()
        }
    }

    /// Waits until the hub has answered every message stream (it answers once it has read
    /// the frame), so that a goodbye on the session stream cannot be read before them.
    async fn delivered(&self) {
        let mut unanswered = self.core.unanswered.subscribe();
        let _ = unanswered.wait_for(|n| *n == 0).await;
    }

    fn kind(&self) -> TransportKind {
        TransportKind::Http2
    }
}

/// Receiving half of an HTTP/2 connection: frames from the session stream and (on the hub)
/// every message stream, merged.
pub struct H2Receiver {
    core: Arc<Core>,
    rx: mpsc::Receiver<Inbound>,
    done: bool,
    _owner: Arc<Owner>,
}

impl H2Receiver {
    fn finish(&mut self, why: Option<TransportError>) -> Result<Option<RawFrame>, TransportError> {
        self.done = true;
        if self.core.clean.load(Ordering::Relaxed) {
            return Ok(None);
        }
        match why {
            None
            | Some(TransportError::Closed {
                code: Some(ErrorCode::Normal),
                ..
            }) => Ok(None),
            Some(e) => Err(e),
        }
    }
}

impl FrameReceiver for H2Receiver {
    async fn recv_frame(&mut self) -> Result<Option<RawFrame>, TransportError> {
        if self.done {
            return Ok(None);
        }
        let mut local = self.core.local_close.subscribe();
        let next = tokio::select! {
            biased;
            next = self.rx.recv() => next,
            () = wait_true(&mut local) => {
                let why = self.core.reason();
                return self.finish(why);
            }
        };
        match next {
            Some(Ok(frame)) => Ok(Some(frame)),
            Some(Err(e)) => {
                self.done = true;
                Err(e)
            }
            None => {
                let why = Some(self.core.reason_or_closed());
                self.finish(why)
            }
        }
    }

    fn set_max_frame_size(&mut self, max: u32) {
        self.core.max_in.store(max, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_proto::Priority;
    use agentwire_tls::{self as tls, CertBundle, HubIdentity, HubTrust};
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;

    type Halves = (H2Sender, H2Receiver);

    const GUARD: Duration = Duration::from_secs(30);

    fn bundle() -> CertBundle {
        tls::generate(&["localhost".into(), "127.0.0.1".into()]).unwrap()
    }

    async fn start_hub(
        bundle: &CertBundle,
    ) -> (SocketAddr, JoinHandle<Result<Halves, TransportError>>) {
        let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
        let config = Arc::new(tls::server_config(&identity, &[ALPN_H2]).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hub = tokio::spawn(async move {
            let (tcp, peer) = listener
                .accept()
                .await
                .map_err(|e| TransportError::io("accept", e))?;
            let tls = tokio_rustls::TlsAcceptor::from(config)
                .accept(tcp)
                .await
                .map_err(|e| ConnectError::tls_handshake("TLS accept", e))?;
            accept(tls, Some(peer), Duration::from_secs(10)).await
        });
        (addr, hub)
    }

    async fn connect_agent(addr: SocketAddr, ca_pem: &str) -> Result<Halves, TransportError> {
        let trust = HubTrust::ca_pem(ca_pem).unwrap();
        let config = tls::client_config(&trust, &[ALPN_H2]).unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost".to_string()).unwrap();
        connect(addr, Arc::new(config), name).await
    }

    /// (hub, agent)
    async fn pair() -> (Halves, Halves) {
        let bundle = bundle();
        let (addr, hub) = start_hub(&bundle).await;
        let agent = connect_agent(addr, &bundle.ca_cert_pem).await.unwrap();
        let hub = hub.await.unwrap().unwrap();
        (hub, agent)
    }

    fn raw(type_byte: u8, payload: &[u8]) -> Bytes {
        let mut out = Vec::with_capacity(payload.len() + 5);
        out.extend_from_slice(&(payload.len() as u32 + 1).to_be_bytes());
        out.push(type_byte);
        out.extend_from_slice(payload);
        Bytes::from(out)
    }

    const MSG: SendClass = SendClass::Message(Priority::Medium);

    async fn guarded<F: std::future::Future>(f: F) -> F::Output {
        tokio::time::timeout(GUARD, f)
            .await
            .expect("test timed out")
    }

    #[tokio::test]
    async fn session_and_messages_round_trip_both_ways() {
        guarded(async {
            let ((hub_tx, mut hub_rx), (agent_tx, mut agent_rx)) = pair().await;
            let subscribe = Frame::Subscribe("news".into())
                .encode(Codec::MsgPack)
                .unwrap();
            agent_tx
                .send_frame(subscribe.clone(), SendClass::Control)
                .await
                .unwrap();
            let beat = raw(FrameType::Heartbeat as u8, &[0u8; 16]);
            agent_tx
                .send_frame(beat.clone(), SendClass::Heartbeat)
                .await
                .unwrap();
            for i in 0..100u32 {
                agent_tx
                    .send_frame(raw(0x10, &i.to_be_bytes()), MSG)
                    .await
                    .unwrap();
            }
            let mut control = Vec::new();
            let mut seen = [false; 100];
            for _ in 0..102 {
                let f = hub_rx.recv_frame().await.unwrap().unwrap();
                if f.type_byte == 0x10 {
                    let i = u32::from_be_bytes(f.payload[..].try_into().unwrap());
                    seen[i as usize] = true;
                } else {
                    control.push(f.type_byte);
                }
            }
            assert!(seen.iter().all(|s| *s));
            assert_eq!(
                control,
                vec![FrameType::Subscribe as u8, FrameType::Heartbeat as u8]
            );

            hub_tx
                .send_frame(raw(0x02, b"welcome"), SendClass::Control)
                .await
                .unwrap();
            for i in 0..100u32 {
                hub_tx
                    .send_frame(raw(0x10, &i.to_be_bytes()), MSG)
                    .await
                    .unwrap();
            }
            let first = agent_rx.recv_frame().await.unwrap().unwrap();
            assert_eq!(first.type_byte, 0x02);
            for i in 0..100u32 {
                let f = agent_rx.recv_frame().await.unwrap().unwrap();
                assert_eq!(&f.payload[..], &i.to_be_bytes(), "hub→agent order");
            }
            let stats = agent_tx.stats();
            assert_eq!(stats.transport, "http2");
            // Messages this small ride the session stream: no stream but the session's.
            assert_eq!(stats.streams_opened, 1);
            assert!(stats.bytes_sent > 0 && stats.bytes_received > 0);
            assert!(hub_tx.stats().bytes_received >= stats.bytes_sent);
        })
        .await;
    }

    /// A frame of `len` bytes in all (length prefix and type byte included) whose payload
    /// starts with `tag`.
    fn sized(tag: u32, len: usize) -> Bytes {
        let mut payload = vec![0u8; len - FRAME_HEADER_LEN - 1];
        payload[..4].copy_from_slice(&tag.to_be_bytes());
        raw(0x10, &payload)
    }

    #[tokio::test]
    async fn small_messages_ride_the_session_stream_and_large_ones_get_their_own() {
        guarded(async {
            let ((_hub_tx, mut hub_rx), (agent_tx, _agent_rx)) = pair().await;
            let small = [SESSION_MESSAGE_MAX, SESSION_MESSAGE_MAX - 1, 64];
            let large = [SESSION_MESSAGE_MAX + 1, 100 * 1024, 1024 * 1024];
            let mut sent = Vec::new();
            for (i, len) in small.iter().chain(&large).enumerate() {
                let frame = sized(i as u32, *len);
                // Fed and flushed, as the agent's writer does, and sent at once.
                if i % 2 == 0 {
                    agent_tx.feed_frame(frame.clone(), MSG).await.unwrap();
                    agent_tx.flush().await.unwrap();
                } else {
                    agent_tx.send_frame(frame.clone(), MSG).await.unwrap();
                }
                sent.push(frame);
            }
            let mut got = Vec::new();
            for _ in 0..sent.len() {
                let f = hub_rx.recv_frame().await.unwrap().unwrap();
                got.push(f.to_wire());
            }
            // Large messages may overtake or trail the others; every one arrives whole, once.
            got.sort();
            sent.sort();
            assert_eq!(got, sent);
            assert_eq!(agent_tx.stats().streams_opened, 1 + large.len() as u64);
        })
        .await;
    }

    #[tokio::test]
    async fn four_mib_frames_go_through_both_ways() {
        guarded(async {
            let ((hub_tx, mut hub_rx), (agent_tx, mut agent_rx)) = pair().await;
            let payload: Vec<u8> = (0..4 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
            let big = raw(0x10, &payload);
            let (a, b) = tokio::join!(
                agent_tx.send_frame(big.clone(), MSG),
                hub_tx.send_frame(big.clone(), MSG)
            );
            a.unwrap();
            b.unwrap();
            let at_hub = hub_rx.recv_frame().await.unwrap().unwrap();
            assert_eq!(at_hub.payload.len(), payload.len());
            assert!(at_hub.payload[..] == payload[..]);
            let at_agent = agent_rx.recv_frame().await.unwrap().unwrap();
            assert!(at_agent.payload[..] == payload[..]);
        })
        .await;
    }

    #[tokio::test]
    async fn wrong_ca_is_reported() {
        guarded(async {
            let hub_bundle = bundle();
            let other = bundle();
            let (addr, _hub) = start_hub(&hub_bundle).await;
            let err = match connect_agent(addr, &other.ca_cert_pem).await {
                Ok(_) => panic!("connected with the wrong CA"),
                Err(e) => e,
            };
            assert!(matches!(err, TransportError::Connect(_)), "{err:?}");
            assert!(
                err.to_string().contains("not signed by the trusted CA"),
                "{err}"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn oversized_message_frame_is_refused() {
        guarded(async {
            let ((_hub_tx, mut hub_rx), (agent_tx, _agent_rx)) = pair().await;
            hub_rx.set_max_frame_size(1024);
            agent_tx
                .send_frame(raw(0x10, &[7u8; 4096]), MSG)
                .await
                .unwrap();
            match hub_rx.recv_frame().await {
                Err(TransportError::Frame(FrameError::TooLarge { len, max })) => {
                    assert_eq!(len, 4097);
                    assert_eq!(max, 1024);
                }
                other => panic!("expected TooLarge, got {other:?}"),
            }
        })
        .await;
    }

    #[tokio::test]
    async fn garbage_on_a_message_stream_is_an_error() {
        guarded(async {
            let ((_hub_tx, mut hub_rx), (agent_tx, _agent_rx)) = pair().await;
            // Large enough for a message stream of its own (smaller ones share the session
            // stream, where bytes after a frame are the next frame).
            let mut two = sized(1, SESSION_MESSAGE_MAX + 1).to_vec();
            two.extend_from_slice(b"garbage");
            agent_tx.send_frame(Bytes::from(two), MSG).await.unwrap();
            match hub_rx.recv_frame().await {
                Err(TransportError::Frame(FrameError::Trailing(7))) => {}
                other => panic!("expected Trailing, got {other:?}"),
            }
        })
        .await;
        guarded(async {
            let ((_hub_tx, mut hub_rx), (agent_tx, _agent_rx)) = pair().await;
            // Announces 100 bytes more than it carries, on a message stream of its own.
            let whole = sized(1, SESSION_MESSAGE_MAX + 1);
            let mut cut = whole.to_vec();
            let announced = (whole.len() - 4 + 100) as u32;
            cut[..4].copy_from_slice(&announced.to_be_bytes());
            agent_tx.send_frame(Bytes::from(cut), MSG).await.unwrap();
            match hub_rx.recv_frame().await {
                Err(TransportError::Frame(FrameError::Truncated { .. })) => {}
                other => panic!("expected Truncated, got {other:?}"),
            }
        })
        .await;
    }

    #[tokio::test]
    async fn hub_close_sends_goodbye_and_ends_both_sides() {
        guarded(async {
            let ((hub_tx, mut hub_rx), (agent_tx, mut agent_rx)) = pair().await;
            hub_tx.send_frame(raw(0x10, b"last"), MSG).await.unwrap();
            hub_tx.close(ErrorCode::ShuttingDown, "maintenance");
            let last = agent_rx.recv_frame().await.unwrap().unwrap();
            assert_eq!(&last.payload[..], b"last");
            let bye = agent_rx.recv_frame().await.unwrap().unwrap();
            match Frame::decode(&bye, Codec::MsgPack).unwrap() {
                Frame::Goodbye(g) => {
                    assert_eq!(g.code, ErrorCode::ShuttingDown);
                    assert_eq!(g.reason, "maintenance");
                }
                other => panic!("expected Goodbye, got {other:?}"),
            }
            assert!(agent_rx.recv_frame().await.unwrap().is_none());
            match agent_tx.closed().await {
                TransportError::Closed { code, .. } => {
                    assert_eq!(code, Some(ErrorCode::ShuttingDown))
                }
                other => panic!("unexpected {other:?}"),
            }
            match hub_tx.closed().await {
                TransportError::Closed { code, .. } => {
                    assert_eq!(code, Some(ErrorCode::ShuttingDown))
                }
                other => panic!("unexpected {other:?}"),
            }
            assert!(hub_rx.recv_frame().await.is_err());
            assert!(agent_tx.send_frame(raw(0x10, b"late"), MSG).await.is_err());
        })
        .await;
    }

    /// A bare HTTP/2 client (the `h2` crate's) connected to the hub at `addr`.
    async fn raw_client(bundle: &CertBundle, addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
        let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
        let config = Arc::new(tls::client_config(&trust, &[ALPN_H2]).unwrap());
        let name = rustls_pki_types::ServerName::try_from("localhost".to_string()).unwrap();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .unwrap();
        let (requests, conn) = client_builder().handshake::<_, Bytes>(tls).await.unwrap();
        tokio::spawn(conn);
        requests.ready().await.unwrap()
    }

    /// An HTTP/2 server over TLS on loopback that serves one connection's first request with
    /// `serve` (given the request body and the way to answer).
    async fn bare_server<F, Fut>(bundle: &CertBundle, serve: F) -> SocketAddr
    where
        F: FnOnce(RecvStream, h2::server::SendResponse<Bytes>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
        let config = Arc::new(tls::server_config(&identity, &[ALPN_H2]).unwrap());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let tls = tokio_rustls::TlsAcceptor::from(config)
                .accept(tcp)
                .await
                .unwrap();
            let mut conn = h2::server::handshake(tls).await.unwrap();
            let (request, respond) = conn.accept().await.unwrap().unwrap();
            tokio::spawn(serve(request.into_body(), respond));
            // Drive the connection until the client goes.
            while let Some(Ok(_)) = conn.accept().await {}
        });
        addr
    }

    /// The first frame leaves with the session request, before the hub answers: a server that
    /// answers only once it has read the first frame still gets it (connecting used to wait
    /// for the answer first, a round trip more than the other transports).
    #[tokio::test]
    async fn the_first_frame_does_not_wait_for_the_session_answer() {
        guarded(async {
            let bundle = bundle();
            let first = raw(FrameType::Hello as u8, b"hello");
            let want = first.clone();
            let (got_tx, got_rx) = tokio::sync::oneshot::channel();
            let addr = bare_server(&bundle, move |mut body, mut respond| async move {
                let mut got = Vec::new();
                while got.len() < want.len() {
                    let Some(Ok(chunk)) = body.data().await else {
                        break;
                    };
                    got.extend_from_slice(&chunk);
                }
                let _ = got_tx.send(got);
                let response = http::Response::builder()
                    .status(StatusCode::OK)
                    .body(())
                    .unwrap();
                let _stream = respond.send_response(response, false).unwrap();
                std::future::pending::<()>().await;
            })
            .await;
            let (sender, _receiver) = connect_agent(addr, &bundle.ca_cert_pem).await.unwrap();
            sender
                .send_frame(first.clone(), SendClass::Control)
                .await
                .unwrap();
            assert_eq!(got_rx.await.unwrap(), first.to_vec());
        })
        .await;
    }

    /// A server that refuses the session request ends the connection with its answer.
    #[tokio::test]
    async fn a_refused_session_is_reported_by_the_receiver() {
        guarded(async {
            let bundle = bundle();
            let addr = bare_server(&bundle, |_body, mut respond| async move {
                let response = http::Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(())
                    .unwrap();
                let _ = respond.send_response(response, true);
            })
            .await;
            let (_sender, mut receiver) = connect_agent(addr, &bundle.ca_cert_pem).await.unwrap();
            let err = receiver.recv_frame().await.unwrap_err();
            assert!(
                err.to_string()
                    .contains("answered 404 Not Found to the HTTP/2 session request"),
                "{err}"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn unknown_paths_and_early_messages_are_refused() {
        guarded(async {
            let bundle = bundle();
            let (addr, _hub) = start_hub(&bundle).await;
            let mut requests = raw_client(&bundle, addr).await;
            let cases = [
                (Method::POST, "/nope", StatusCode::NOT_FOUND),
                (Method::GET, SESSION_PATH, StatusCode::METHOD_NOT_ALLOWED),
                (Method::POST, MESSAGE_PATH, StatusCode::BAD_REQUEST),
            ];
            for (method, path, want) in cases {
                let request = Request::builder()
                    .method(method)
                    .uri(format!("https://localhost{path}"))
                    .body(())
                    .unwrap();
                let (response, _body) = requests.send_request(request, true).unwrap();
                assert_eq!(response.await.unwrap().status(), want, "{path}");
            }
        })
        .await;
    }

    /// Message streams are answered `204` whether their body arrived whole (read in the
    /// connection driver, the answer held until the driver has read everything) or in two
    /// parts (read by a task); both frames reach the receiver.
    #[tokio::test]
    async fn message_streams_are_answered_whole_or_split() {
        guarded(async {
            let bundle = bundle();
            let (addr, hub) = start_hub(&bundle).await;
            let mut requests = raw_client(&bundle, addr).await;
            let post = |path: &str| {
                Request::builder()
                    .method(Method::POST)
                    .uri(format!("https://localhost{path}"))
                    .header(header::CONTENT_TYPE, CONTENT_TYPE)
                    .body(())
                    .unwrap()
            };
            let (_session, _session_body) =
                requests.send_request(post(SESSION_PATH), false).unwrap();
            let (_hub_tx, mut hub_rx) = hub.await.unwrap().unwrap();

            let mut answers = Vec::new();
            for n in 0..8u8 {
                let (answer, mut body) = requests.send_request(post(MESSAGE_PATH), false).unwrap();
                body.send_data(raw(0x10, &[n; 100]), true).unwrap();
                answers.push(answer);
            }
            let (split_answer, mut split) =
                requests.send_request(post(MESSAGE_PATH), false).unwrap();
            let whole = raw(0x10, b"split");
            split.send_data(whole.slice(..3), false).unwrap();
            let mut seen = Vec::new();
            for _ in 0..8 {
                seen.push(hub_rx.recv_frame().await.unwrap().unwrap().payload[0]);
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..8).collect::<Vec<u8>>());
            split.send_data(whole.slice(3..), true).unwrap();
            let last = hub_rx.recv_frame().await.unwrap().unwrap();
            assert_eq!(&last.payload[..], b"split");
            answers.push(split_answer);
            for answer in answers {
                assert_eq!(answer.await.unwrap().status(), StatusCode::NO_CONTENT);
            }
        })
        .await;
    }

    #[tokio::test]
    async fn dropping_the_handles_ends_the_session() {
        guarded(async {
            let (hub, (agent_tx, mut agent_rx)) = pair().await;
            drop(hub);
            assert!(agent_rx.recv_frame().await.unwrap().is_none());
            agent_tx.closed().await;
        })
        .await;
    }

    #[tokio::test]
    async fn agent_close_delivers_goodbye_to_the_hub() {
        guarded(async {
            let ((hub_tx, mut hub_rx), (agent_tx, _agent_rx)) = pair().await;
            agent_tx.close(ErrorCode::Normal, "done");
            let bye = hub_rx.recv_frame().await.unwrap().unwrap();
            assert_eq!(bye.type_byte, FrameType::Goodbye as u8);
            assert!(hub_rx.recv_frame().await.unwrap().is_none());
            hub_tx.closed().await;
            agent_tx.closed().await;
        })
        .await;
    }
}
