//! `load`'s HTTP/2 connections: [`agentwire_h2wire::ClientConn`] (sans-IO) driven over a TLS
//! stream inside the connection slot's own task, with no task, channel or header map per
//! request.
//!
//! [`H2Link`] is what each lane holds: it opens a stream and waits for that stream's outcome.
//! [`H2Driver`] owns the socket: the slot polls it right after its lanes (see
//! `load::run_slot`), so that the requests the lanes just queued are written in the same
//! turn, and what it reads is handed to the lanes' streams, whose wakers it wakes. Both sides
//! live in one task, so they share state through a `RefCell` that is never borrowed across
//! an `.await`.
//!
//! This module must not count or time anything beyond a response's first byte (the lanes
//! do), must not print, and must not panic on anything the server sends: a connection error
//! fails every open stream with a [`LoadError`], a stream error fails that stream only.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use agentwire_h2wire::{
    code, ClientConn, ClientSettings, Event, RefusedBy, RequestHead, ResetBy, StreamId,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::report::{ErrorKind, LoadError};
use crate::response::{body_error, check_size, io_kind, GetError, Response};

/// Longest a graceful close may take (GOAWAY, close_notify, FIN).
const CLOSE_WAIT: Duration = Duration::from_millis(200);

/// One request's progress.
#[derive(Debug, Default)]
struct Pending {
    /// Where its HEADERS end in the connection's output: it has left once that many bytes
    /// were written.
    sent_at: u64,
    status: u16,
    content_length: Option<u64>,
    received: u64,
    first_byte: Option<Instant>,
    outcome: Option<Result<Response, GetError>>,
    waker: Option<Waker>,
}

impl Pending {
    fn finish(&mut self, outcome: Result<Response, GetError>) {
        self.outcome = Some(outcome);
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    fn complete(&mut self) {
        let outcome = match check_size(self.received, self.content_length) {
            Ok(()) => Ok(Response {
                status: self.status,
                body_bytes: self.received,
                first_byte: self.first_byte.unwrap_or_else(Instant::now),
            }),
            Err(e) => Err(GetError::Failed(e)),
        };
        self.finish(outcome);
    }
}

/// What the lanes and the driver of one connection share.
struct Shared {
    conn: ClientConn,
    streams: Streams,
    /// Why the connection is over.
    failure: Option<LoadError>,
    /// Bytes of output handed to TLS.
    written: u64,
}

impl Shared {
    /// The connection is over: every request without an outcome gets one.
    fn fail(&mut self, err: LoadError) {
        for p in self
            .streams
            .pending
            .values_mut()
            .filter(|p| p.outcome.is_none())
        {
            let outcome = if p.sent_at > self.written {
                GetError::NotSent(err.clone())
            } else {
                GetError::Failed(body_error(err.clone(), p.received, p.content_length))
            };
            p.finish(Err(outcome));
        }
        self.failure.get_or_insert(err);
        self.streams.wake_waiting();
    }
}

/// The requests of one connection, updated by the events of its frames.
#[derive(Default)]
struct Streams {
    pending: HashMap<StreamId, Pending>,
    /// Lanes waiting for the server's stream limit to allow another stream.
    waiting: Vec<Waker>,
    /// The code of the GOAWAY received, for messages.
    goaway: Option<u32>,
}

impl Streams {
    fn wake_waiting(&mut self) {
        for w in self.waiting.drain(..) {
            w.wake();
        }
    }

    fn on_event(&mut self, event: Event<'_>) {
        let stream = match &event {
            Event::Response { stream, .. }
            | Event::Data { stream, .. }
            | Event::Trailers { stream }
            | Event::Reset { stream, .. }
            | Event::Refused { stream, .. } => *stream,
            Event::GoAway { code, .. } => {
                self.goaway = Some(*code);
                self.wake_waiting();
                return;
            }
        };
        let Some(p) = self.pending.get_mut(&stream) else {
            return;
        };
        match event {
            Event::Response {
                status,
                content_length,
                end_stream,
                ..
            } => {
                p.status = status;
                p.content_length = content_length;
                p.first_byte = Some(Instant::now());
                if end_stream {
                    p.complete();
                }
            }
            Event::Data {
                data, end_stream, ..
            } => {
                p.received += data.len() as u64;
                if end_stream {
                    p.complete();
                }
            }
            Event::Trailers { .. } => p.complete(),
            Event::Reset {
                code, by, reason, ..
            } => {
                let err = reset_error(code, by, reason);
                let err = body_error(err, p.received, p.content_length);
                p.finish(Err(GetError::Failed(err)));
            }
            Event::Refused { by, .. } => {
                let err = match by {
                    RefusedBy::ResetStream => LoadError::new(
                        ErrorKind::Reset,
                        "the server refused the stream unprocessed (REFUSED_STREAM)",
                    ),
                    RefusedBy::GoAway => LoadError::new(
                        ErrorKind::Closed,
                        "the server is going away and did not process the stream (GOAWAY)",
                    ),
                };
                p.finish(Err(GetError::NotSent(err)));
            }
            Event::GoAway { .. } => {}
        }
        self.wake_waiting();
    }
}

fn io_error(e: &std::io::Error, doing: &str) -> LoadError {
    LoadError::new(
        io_kind(e),
        format!("the connection broke while {doing}: {e}"),
    )
}

fn code_text(c: u32) -> String {
    code::name(c).map_or_else(|| format!("0x{c:x}"), str::to_owned)
}

/// A reset stream: a broken protocol is `protocol`, anything else `reset`.
fn reset_error(c: u32, by: ResetBy, reason: &str) -> LoadError {
    let kind = match c {
        code::PROTOCOL_ERROR
        | code::FRAME_SIZE_ERROR
        | code::COMPRESSION_ERROR
        | code::FLOW_CONTROL_ERROR => ErrorKind::Protocol,
        _ => ErrorKind::Reset,
    };
    let message = match by {
        ResetBy::Peer => format!("the server reset the stream ({})", code_text(c)),
        ResetBy::Us => format!(
            "the server's response was malformed, stream reset ({}): {reason}",
            code_text(c)
        ),
    };
    LoadError::new(kind, message)
}

/// A lane's handle on its connection.
#[derive(Clone)]
pub(crate) struct H2Link(Rc<RefCell<Shared>>);

impl H2Link {
    /// True once no new request can go out on this connection.
    pub(crate) fn is_closed(&self) -> bool {
        let sh = self.0.borrow();
        sh.failure.is_some() || sh.conn.is_going_away()
    }

    /// Sends `GET` with `head` and waits for its whole response. The caller bounds the time;
    /// if it gives up, the stream is reset with CANCEL.
    pub(crate) async fn get(&self, head: &RequestHead) -> Result<Response, GetError> {
        let stream = poll_fn(|cx| self.poll_open(cx, head)).await?;
        let mut cancel = CancelOnDrop {
            link: self,
            stream: Some(stream),
        };
        let outcome = poll_fn(|cx| self.poll_outcome(cx, stream)).await;
        cancel.stream = None;
        outcome
    }

    fn poll_open(
        &self,
        cx: &mut Context<'_>,
        head: &RequestHead,
    ) -> Poll<Result<StreamId, GetError>> {
        let mut sh = self.0.borrow_mut();
        if let Some(err) = &sh.failure {
            return Poll::Ready(Err(GetError::NotSent(err.clone())));
        }
        match sh.conn.open(head) {
            Ok(stream) => {
                let sent_at = sh.conn.queued_total();
                sh.streams.pending.insert(
                    stream,
                    Pending {
                        sent_at,
                        ..Pending::default()
                    },
                );
                Poll::Ready(Ok(stream))
            }
            Err(agentwire_h2wire::Refusal::AtCapacity) => {
                sh.streams.waiting.push(cx.waker().clone());
                Poll::Pending
            }
            Err(_) => {
                let message = match sh.streams.goaway {
                    Some(c) => format!("the server sent GOAWAY ({}): no new streams", code_text(c)),
                    None => "the connection is closing: no new streams".to_owned(),
                };
                Poll::Ready(Err(GetError::NotSent(LoadError::new(
                    ErrorKind::Closed,
                    message,
                ))))
            }
        }
    }

    fn poll_outcome(
        &self,
        cx: &mut Context<'_>,
        stream: StreamId,
    ) -> Poll<Result<Response, GetError>> {
        let mut sh = self.0.borrow_mut();
        let Some(p) = sh.streams.pending.get_mut(&stream) else {
            return Poll::Ready(Err(GetError::Failed(LoadError::new(
                ErrorKind::Other,
                "the request's stream was forgotten",
            ))));
        };
        if p.outcome.is_none() {
            match &mut p.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                w => *w = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
        let outcome = sh.streams.pending.remove(&stream).and_then(|p| p.outcome);
        Poll::Ready(outcome.unwrap_or_else(|| {
            Err(GetError::Failed(LoadError::new(
                ErrorKind::Other,
                "no outcome",
            )))
        }))
    }
}

/// Resets a stream whose request was given up (timed out) before its outcome.
struct CancelOnDrop<'a> {
    link: &'a H2Link,
    stream: Option<StreamId>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        let Some(stream) = self.stream else { return };
        if let Ok(mut sh) = self.link.0.try_borrow_mut() {
            sh.streams.pending.remove(&stream);
            sh.conn.cancel(stream);
            sh.streams.wake_waiting();
        }
    }
}

/// The socket side of one connection: TCP and rustls driven directly, so that one `recv`
/// takes whatever has arrived (up to [`SOCKET_READ`]) instead of the 4 KiB per call that
/// rustls reads when given the socket itself.
pub(crate) struct H2Driver {
    link: H2Link,
    tcp: TcpStream,
    tls: rustls::ClientConnection,
    /// Bytes read from the socket, not yet given to rustls.
    sock: Vec<u8>,
    /// Plaintext holding the start of a frame whose end has not arrived.
    partial: Vec<u8>,
    /// Plaintext that arrived with the handshake is still to be read.
    fresh: bool,
    done: bool,
}

/// Bytes read from the socket at most at once.
const SOCKET_READ: usize = 64 * 1024;
/// Socket reads per poll before the driver lets the other connections of its thread run.
const READS_PER_TURN: usize = 16;

/// Starts the HTTP/2 connection on an established TLS stream (ALPN h2): the preface and
/// SETTINGS are queued, to be written on the driver's first poll. Requests may be opened at
/// once.
pub(crate) fn start(
    io: TlsStream<TcpStream>,
    stream_window: u32,
    conn_window: u32,
) -> (H2Link, Box<H2Driver>) {
    let conn = ClientConn::new(ClientSettings {
        stream_window,
        conn_window,
        ..ClientSettings::default()
    });
    let link = H2Link(Rc::new(RefCell::new(Shared {
        conn,
        streams: Streams::default(),
        failure: None,
        written: 0,
    })));
    let (tcp, tls) = io.into_inner();
    let driver = Box::new(H2Driver {
        link: link.clone(),
        tcp,
        tls,
        sock: vec![0; SOCKET_READ],
        partial: Vec::new(),
        fresh: true,
        done: false,
    });
    (link, driver)
}

/// What the server's bytes did to the connection.
enum Flow {
    Open,
    /// The server closed TLS (close_notify).
    Closed,
}

/// `std::io::Write` over a tokio socket, for rustls: never blocks.
struct TcpWriter<'a>(&'a TcpStream);

impl std::io::Write for TcpWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.try_write(buf)
    }

    fn write_vectored(&mut self, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<usize> {
        self.0.try_write_vectored(bufs)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl H2Driver {
    /// Writes what is queued and reads what has arrived; true if that may have finished a
    /// request or changed what a lane waits for (so the lanes should be polled again).
    pub(crate) fn poll_drive(&mut self, cx: &mut Context<'_>) -> bool {
        if self.done {
            return false;
        }
        if std::mem::take(&mut self.fresh) {
            if let Err(err) = self.deliver(cx) {
                self.fail(err);
                return true;
            }
        }
        let mut progress = false;
        for _ in 0..READS_PER_TURN {
            if let Err(e) = self.poll_send(cx) {
                self.fail(io_error(&e, "writing"));
                return true;
            }
            let n = match self.tcp.try_read(&mut self.sock) {
                Ok(0) => {
                    self.closed_by_server();
                    return true;
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    match self.tcp.poll_read_ready(cx) {
                        Poll::Ready(Ok(())) => continue,
                        Poll::Ready(Err(e)) => {
                            self.fail(io_error(&e, "reading"));
                            return true;
                        }
                        Poll::Pending => return progress,
                    }
                }
                Err(e) => {
                    self.fail(io_error(&e, "reading"));
                    return true;
                }
            };
            progress = true;
            match self.receive(n, cx) {
                Ok(Flow::Open) => {}
                Ok(Flow::Closed) => {
                    self.closed_by_server();
                    return true;
                }
                Err(err) => {
                    self.fail(err);
                    return true;
                }
            }
        }
        // More may have arrived: come back once the thread's other connections had a turn.
        cx.waker().wake_by_ref();
        false
    }

    /// Hands `n` bytes read from the socket to rustls, and the plaintext to HTTP/2.
    fn receive(&mut self, n: usize, cx: &mut Context<'_>) -> Result<Flow, LoadError> {
        // Taken out while rustls reads it, so that `deliver` may borrow the driver.
        let sock = std::mem::take(&mut self.sock);
        let result = self.receive_from(&sock[..n], cx);
        self.sock = sock;
        result
    }

    fn receive_from(&mut self, mut input: &[u8], cx: &mut Context<'_>) -> Result<Flow, LoadError> {
        while !input.is_empty() {
            self.tls
                .read_tls(&mut input)
                .map_err(|e| io_error(&e, "reading"))?;
            let state = self.tls.process_new_packets().map_err(|e| {
                LoadError::new(ErrorKind::Tls, format!("TLS failed on the connection: {e}"))
            })?;
            let closed = state.peer_has_closed();
            self.deliver(cx)?;
            if closed {
                return Ok(Flow::Closed);
            }
        }
        Ok(Flow::Open)
    }

    /// Feeds the plaintext rustls holds to the HTTP/2 connection, without copying it unless a
    /// frame is split across chunks.
    fn deliver(&mut self, cx: &mut Context<'_>) -> Result<(), LoadError> {
        use std::io::BufRead;
        let H2Driver {
            link, tls, partial, ..
        } = self;
        let mut sh = link.0.borrow_mut();
        let Shared { conn, streams, .. } = &mut *sh;
        let mut result = Ok(());
        loop {
            let mut reader = tls.reader();
            let chunk = match reader.fill_buf() {
                Ok(chunk) if !chunk.is_empty() => chunk,
                // Empty: close_notify (seen by the caller); WouldBlock: nothing more yet;
                // other errors (EOF without close_notify) show up as the socket's EOF.
                _ => break,
            };
            let len = chunk.len();
            if partial.is_empty() {
                match conn.recv(chunk, &mut |e| streams.on_event(e)) {
                    Ok(used) => partial.extend_from_slice(&chunk[used..]),
                    Err(e) => result = Err(e),
                }
            } else {
                partial.extend_from_slice(chunk);
                match conn.recv(partial, &mut |e| streams.on_event(e)) {
                    Ok(used) => {
                        partial.drain(..used);
                    }
                    Err(e) => result = Err(e),
                }
            }
            reader.consume(len);
            if result.is_err() {
                break;
            }
        }
        drop(sh);
        result.map_err(|e| {
            // Best effort: the GOAWAY that says why.
            let _ = self.poll_send(cx);
            LoadError::new(
                ErrorKind::Protocol,
                format!("the server broke HTTP/2, connection closed with {e}"),
            )
        })
    }

    fn closed_by_server(&mut self) {
        let message = match self.link.0.borrow().streams.goaway {
            Some(c) => format!(
                "the server closed the connection after GOAWAY ({})",
                code_text(c)
            ),
            None => "the server closed the connection".to_owned(),
        };
        self.fail(LoadError::new(ErrorKind::Closed, message));
    }

    fn fail(&mut self, err: LoadError) {
        self.link.0.borrow_mut().fail(err);
        self.done = true;
    }

    /// Encrypts what HTTP/2 queued and writes it, until done or the socket is full (then the
    /// task is woken when it can take more).
    fn poll_send(&mut self, cx: &mut Context<'_>) -> std::io::Result<()> {
        loop {
            self.encrypt()?;
            if !self.tls.wants_write() {
                return Ok(());
            }
            match self.tls.write_tls(&mut TcpWriter(&self.tcp)) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    match self.tcp.poll_write_ready(cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(e)) => return Err(e),
                        Poll::Pending => return Ok(()),
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Hands what HTTP/2 queued to rustls (as much as its buffer takes).
    fn encrypt(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        let mut sh = self.link.0.borrow_mut();
        let out = sh.conn.output();
        if !out.is_empty() {
            let n = self.tls.writer().write(out)?;
            sh.conn.consume_output(n);
            sh.written += n as u64;
        }
        Ok(())
    }

    /// True when nothing is left to write.
    fn flushed(&self) -> bool {
        !self.tls.wants_write() && self.link.0.borrow().conn.output().is_empty()
    }

    /// Ends the connection gracefully (GOAWAY, TLS close_notify, FIN), within a bounded time.
    pub(crate) async fn close(mut self: Box<Self>) {
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            if !self.done {
                self.link.0.borrow_mut().conn.go_away(code::NO_ERROR);
                // No plaintext may follow close_notify: the GOAWAY (and any RST_STREAM) first.
                let _ = self.encrypt();
                self.tls.send_close_notify();
                poll_fn(|cx| match self.poll_send(cx) {
                    Ok(()) if !self.flushed() => Poll::Pending,
                    _ => Poll::Ready(()),
                })
                .await;
            }
            let _ = self.tcp.shutdown().await;
        })
        .await;
    }
}
