//! The client side of HTTP/2 (RFC 9113) as `agentwire load` speaks it: frames, the
//! connection and stream state a client needs, receive flow control, and HPACK (RFC 7541)
//! with the dynamic table for what the server sends.
//!
//! Sans-IO: [`ClientConn`] is fed the bytes read from the connection and hands back
//! [`Event`]s and the bytes to write; it has no sockets, no tokio and no timers, so every
//! malformed input can be tested here and fuzzed (`fuzz/fuzz_targets/h2_client.rs`). `load`
//! adapts it to a TLS stream. Nothing here may panic or allocate without bound on any input:
//! a connection error is an [`H2Error`] (after which a GOAWAY with its code is queued), a
//! stream error resets that stream only and is reported as [`Event::Reset`].
//!
//! What it does not do: send request bodies (every request is a GET with END_STREAM, so the
//! send windows only need checking), server push (disabled in the SETTINGS sent), priorities
//! (PRIORITY frames are ignored) and Huffman coding on the encoding side (request heads are
//! literals the first time and table references after, see [`hpack::Encoder`]). It exists because
//! the h2 crate and its header map took a fifth of `load`'s CPU per request, which made it
//! costlier than h2load.

#![warn(missing_docs)]

pub mod hpack;
mod recv;

use std::collections::HashMap;

pub use hpack::RequestHead;

/// HTTP/2 error codes (RFC 9113 section 7).
pub mod code {
    /// Graceful: no error.
    pub const NO_ERROR: u32 = 0x0;
    /// The peer broke the protocol.
    pub const PROTOCOL_ERROR: u32 = 0x1;
    /// An error inside the endpoint.
    pub const INTERNAL_ERROR: u32 = 0x2;
    /// The peer sent more than the flow-control window allowed.
    pub const FLOW_CONTROL_ERROR: u32 = 0x3;
    /// SETTINGS were not acknowledged in time.
    pub const SETTINGS_TIMEOUT: u32 = 0x4;
    /// A frame arrived on a stream that was half-closed.
    pub const STREAM_CLOSED: u32 = 0x5;
    /// A frame of the wrong size.
    pub const FRAME_SIZE_ERROR: u32 = 0x6;
    /// The stream was refused before any processing: it may be sent again.
    pub const REFUSED_STREAM: u32 = 0x7;
    /// The stream is no longer needed.
    pub const CANCEL: u32 = 0x8;
    /// The HPACK state can no longer be kept.
    pub const COMPRESSION_ERROR: u32 = 0x9;
    /// A CONNECT tunnel failed.
    pub const CONNECT_ERROR: u32 = 0xa;
    /// The peer is generating too much load.
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
    /// TLS does not meet HTTP/2's requirements.
    pub const INADEQUATE_SECURITY: u32 = 0xc;
    /// Use HTTP/1.1 for this request.
    pub const HTTP_1_1_REQUIRED: u32 = 0xd;

    /// The code's name, for messages (`"0x1f"` style for unknown codes is up to the caller).
    ///
    /// ```
    /// assert_eq!(agentwire_h2wire::code::name(7), Some("REFUSED_STREAM"));
    /// assert_eq!(agentwire_h2wire::code::name(99), None);
    /// ```
    pub fn name(code: u32) -> Option<&'static str> {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        usize::try_from(code)
            .ok()
            .and_then(|c| NAMES.get(c))
            .copied()
    }
}

/// Frame types (RFC 9113 section 6).
mod frame {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers (RFC 9113 section 6.5.2).
mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// The client connection preface (RFC 9113 section 3.4).
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Bytes in a frame header.
pub const FRAME_HEADER_LEN: usize = 9;
/// The largest frame payload this client accepts (the default SETTINGS_MAX_FRAME_SIZE: it
/// does not announce another).
pub const MAX_FRAME_SIZE: usize = 16_384;
/// The largest flow-control window (2^31 - 1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The window every connection and stream starts with.
const DEFAULT_WINDOW: u32 = 65_535;
/// The most bytes of one header block (HEADERS plus CONTINUATION frames) kept while it is
/// incomplete; beyond that the connection ends with ENHANCE_YOUR_CALM.
pub const MAX_HEADER_BLOCK: usize = 256 * 1024;

/// A connection error: the connection is over, and a GOAWAY with [`H2Error::code`] is queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H2Error {
    /// One of [`code`].
    pub code: u32,
    /// What was wrong (also the GOAWAY's debug data).
    pub reason: &'static str,
}

impl H2Error {
    fn new(code: u32, reason: &'static str) -> Self {
        H2Error { code, reason }
    }

    fn protocol(reason: &'static str) -> Self {
        H2Error::new(code::PROTOCOL_ERROR, reason)
    }

    fn frame_size(reason: &'static str) -> Self {
        H2Error::new(code::FRAME_SIZE_ERROR, reason)
    }
}

impl std::fmt::Display for H2Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match code::name(self.code) {
            Some(name) => write!(f, "{name}: {}", self.reason),
            None => write!(f, "error 0x{:x}: {}", self.code, self.reason),
        }
    }
}

impl std::error::Error for H2Error {}

/// A stream identifier (client-initiated: odd).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub u32);

/// Who reset a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetBy {
    /// The server sent RST_STREAM.
    Peer,
    /// This side found the stream's frames malformed and reset it.
    Us,
}

/// How the server said it did not process a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBy {
    /// RST_STREAM with REFUSED_STREAM.
    ResetStream,
    /// A GOAWAY whose last stream id is below the stream's.
    GoAway,
}

/// What the server's frames mean for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event<'a> {
    /// A stream's final response head (1xx heads are skipped).
    Response {
        /// The stream.
        stream: StreamId,
        /// The `:status`.
        status: u16,
        /// The content-length header, if any.
        content_length: Option<u64>,
        /// The response has no body and the stream is complete.
        end_stream: bool,
    },
    /// Body bytes (padding removed). The receive windows are given back by the connection
    /// itself, as if the data had been consumed.
    Data {
        /// The stream.
        stream: StreamId,
        /// The bytes.
        data: &'a [u8],
        /// The stream is complete.
        end_stream: bool,
    },
    /// Trailers arrived: the stream is complete.
    Trailers {
        /// The stream.
        stream: StreamId,
    },
    /// The stream ended without a complete response.
    Reset {
        /// The stream.
        stream: StreamId,
        /// One of [`code`] (the peer's may be any number).
        code: u32,
        /// Which side reset it.
        by: ResetBy,
        /// Why this side reset it (empty when the peer did).
        reason: &'static str,
    },
    /// The server did not process the stream: it may be sent again (RFC 9113 section 8.7).
    Refused {
        /// The stream.
        stream: StreamId,
        /// How the server said so.
        by: RefusedBy,
    },
    /// The server is going away: no new streams; those above `last_stream` were refused.
    GoAway {
        /// The last stream the server may still process.
        last_stream: StreamId,
        /// The GOAWAY's error code (one of [`code`] or any number).
        code: u32,
        /// The GOAWAY's debug data.
        debug: &'a [u8],
    },
}

/// Why [`ClientConn::open`] cannot open a stream now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// As many streams are open as the server allows: wait for one to end.
    AtCapacity,
    /// A GOAWAY was sent or received, or the stream ids are used up: never on this
    /// connection.
    GoingAway,
    /// The connection failed.
    Closed,
}

/// What the client announces, and its receive windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientSettings {
    /// Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE), 1..=2^31-1.
    pub stream_window: u32,
    /// The connection's receive window, 65,535..=2^31-1 (smaller values count as 65,535,
    /// the size every connection starts with).
    pub conn_window: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK table the server may use.
    pub header_table_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a response head larger than this (RFC 7541 sizes) is
    /// reset as malformed.
    pub max_header_list_size: u32,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            stream_window: DEFAULT_WINDOW,
            conn_window: DEFAULT_WINDOW,
            header_table_size: 4096,
            max_header_list_size: 64 * 1024,
        }
    }
}

/// Where a stream is in its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No final response head yet.
    Head,
    /// Head received; body (or trailers) to come.
    Body,
}

#[derive(Debug, Clone)]
struct Stream {
    phase: Phase,
    /// Bytes the server may still send on it.
    window: u32,
    /// Bytes received and not yet given back with WINDOW_UPDATE.
    unacked: u32,
}

/// A header block still waiting for CONTINUATION frames.
#[derive(Debug, Clone)]
struct PartialBlock {
    stream: u32,
    end_stream: bool,
}

/// The client's side of one HTTP/2 connection.
///
/// ```
/// use agentwire_h2wire::{ClientConn, ClientSettings, Event, RequestHead, StreamId};
/// let mut conn = ClientConn::new(ClientSettings::default());
/// assert!(conn.output().starts_with(agentwire_h2wire::PREFACE));
/// let id = conn.open(&RequestHead::get("https", "example", "/")).unwrap();
/// assert_eq!(id, StreamId(1));
/// let n = conn.output().len();
/// conn.consume_output(n);
///
/// // The server's SETTINGS, then HEADERS (`:status 200`, indexed) with END_STREAM.
/// let input = [
///     &[0, 0, 0, 4, 0, 0, 0, 0, 0][..],
///     &[0, 0, 1, 1, 0x5, 0, 0, 0, 1, 0x88],
/// ]
/// .concat();
/// let mut events = Vec::new();
/// let used = conn.recv(&input, &mut |e| events.push(format!("{e:?}"))).unwrap();
/// assert_eq!(used, input.len());
/// assert_eq!(
///     events,
///     ["Response { stream: StreamId(1), status: 200, content_length: None, end_stream: true }"]
/// );
/// assert_eq!(conn.output(), [0, 0, 0, 4, 1, 0, 0, 0, 0]); // SETTINGS ACK
/// assert_eq!(conn.open_streams(), 0);
/// ```
#[derive(Debug)]
pub struct ClientConn {
    settings: ClientSettings,
    out: Vec<u8>,
    /// Bytes ever queued in `out`.
    queued: u64,
    hpack: hpack::Decoder,
    encoder: hpack::Encoder,
    /// The request block being encoded (kept for its allocation).
    request: Vec<u8>,
    streams: HashMap<u32, Stream>,
    next_stream: u32,
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS.
    peer_max_streams: u32,
    /// The server's SETTINGS_MAX_FRAME_SIZE (for the HEADERS this side sends).
    peer_max_frame: usize,
    /// The server's SETTINGS arrived (the first frame must be SETTINGS).
    preface_seen: bool,
    /// Connection receive window left, and bytes not yet given back.
    window: u32,
    unacked: u32,
    /// The connection send window (only checked: no DATA is sent).
    send_window: i64,
    partial: Option<PartialBlock>,
    block: Vec<u8>,
    /// The lowest last-stream-id of the GOAWAYs received.
    goaway_received: Option<u32>,
    goaway_sent: bool,
    failed: bool,
}

impl ClientConn {
    /// A new connection: the preface, SETTINGS and the connection's WINDOW_UPDATE are queued.
    /// Requests may be opened at once (RFC 9113 section 3.4).
    pub fn new(settings: ClientSettings) -> Self {
        let settings = ClientSettings {
            stream_window: settings.stream_window.clamp(1, MAX_WINDOW),
            conn_window: settings.conn_window.clamp(DEFAULT_WINDOW, MAX_WINDOW),
            ..settings
        };
        let mut conn = ClientConn {
            settings,
            out: Vec::with_capacity(256),
            queued: 0,
            hpack: hpack::Decoder::new(settings.header_table_size as usize),
            encoder: hpack::Encoder::default(),
            request: Vec::with_capacity(64),
            streams: HashMap::new(),
            next_stream: 1,
            peer_max_streams: u32::MAX,
            peer_max_frame: MAX_FRAME_SIZE,
            preface_seen: false,
            window: settings.conn_window,
            unacked: 0,
            send_window: i64::from(DEFAULT_WINDOW),
            partial: None,
            block: Vec::new(),
            goaway_received: None,
            goaway_sent: false,
            failed: false,
        };
        conn.out.extend_from_slice(PREFACE);
        let mut payload = Vec::with_capacity(24);
        let mut put = |id: u16, value: u32| {
            payload.extend_from_slice(&id.to_be_bytes());
            payload.extend_from_slice(&value.to_be_bytes());
        };
        if settings.header_table_size != 4096 {
            put(setting::HEADER_TABLE_SIZE, settings.header_table_size);
        }
        put(setting::ENABLE_PUSH, 0);
        put(setting::INITIAL_WINDOW_SIZE, settings.stream_window);
        put(setting::MAX_HEADER_LIST_SIZE, settings.max_header_list_size);
        conn.frame(frame::SETTINGS, 0, 0, &payload);
        if settings.conn_window > DEFAULT_WINDOW {
            conn.window_update(0, settings.conn_window - DEFAULT_WINDOW);
        }
        conn.queued = conn.out.len() as u64;
        conn
    }

    /// Bytes to write to the server, in order.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// Marks the first `n` bytes of [`ClientConn::output`] as written.
    pub fn consume_output(&mut self, n: usize) {
        let n = n.min(self.out.len());
        if n == self.out.len() {
            self.out.clear();
        } else {
            self.out.drain(..n);
        }
    }

    /// Bytes ever queued for writing: a request whose HEADERS end at or before the count of
    /// bytes written has left this side.
    pub fn queued_total(&self) -> u64 {
        self.queued
    }

    /// Streams open (requests without a complete response).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// True once the connection failed, or a GOAWAY was sent or received.
    pub fn is_going_away(&self) -> bool {
        self.failed || self.goaway_sent || self.goaway_received.is_some()
    }

    /// Whether a stream could be opened now.
    pub fn can_open(&self) -> Result<(), Refusal> {
        if self.failed {
            Err(Refusal::Closed)
        } else if self.goaway_sent
            || self.goaway_received.is_some()
            || self.next_stream > MAX_WINDOW
        {
            Err(Refusal::GoingAway)
        } else if self.streams.len() >= self.peer_max_streams as usize {
            Err(Refusal::AtCapacity)
        } else {
            Ok(())
        }
    }

    /// Opens a stream for `head` and queues its HEADERS (with END_STREAM: no body).
    pub fn open(&mut self, head: &RequestHead) -> Result<StreamId, Refusal> {
        self.can_open()?;
        let id = self.next_stream;
        self.next_stream += 2;
        let mut block = std::mem::take(&mut self.request);
        block.clear();
        self.encoder.encode(head, &mut block);
        let max = self.peer_max_frame;
        let mut chunks = block.chunks(max);
        let first = chunks.next().unwrap_or(&[]);
        let end_headers = if block.len() > max {
            0
        } else {
            flag::END_HEADERS
        };
        self.frame(frame::HEADERS, flag::END_STREAM | end_headers, id, first);
        let mut rest = chunks.peekable();
        while let Some(chunk) = rest.next() {
            let last = if rest.peek().is_none() {
                flag::END_HEADERS
            } else {
                0
            };
            self.frame(frame::CONTINUATION, last, id, chunk);
        }
        self.request = block;
        self.streams.insert(
            id,
            Stream {
                phase: Phase::Head,
                window: self.settings.stream_window,
                unacked: 0,
            },
        );
        Ok(StreamId(id))
    }

    /// Gives up a stream: RST_STREAM with CANCEL, if it is still open. Frames that still
    /// arrive for it are read and dropped.
    pub fn cancel(&mut self, stream: StreamId) {
        if self.streams.remove(&stream.0).is_some() && !self.failed {
            self.frame(frame::RST_STREAM, 0, stream.0, &code::CANCEL.to_be_bytes());
        }
    }

    /// Queues a GOAWAY with `code` (NO_ERROR to close gracefully): no new streams.
    pub fn go_away(&mut self, code: u32) {
        if !self.goaway_sent && !self.failed {
            self.queue_goaway(code, b"");
        }
    }

    fn queue_goaway(&mut self, code: u32, debug: &[u8]) {
        self.goaway_sent = true;
        let mut payload = Vec::with_capacity(8 + debug.len());
        // The last server-initiated stream processed: none (push is disabled).
        payload.extend_from_slice(&0u32.to_be_bytes());
        payload.extend_from_slice(&code.to_be_bytes());
        payload.extend_from_slice(debug);
        self.frame(frame::GOAWAY, 0, 0, &payload);
    }

    fn frame(&mut self, ty: u8, flags: u8, stream: u32, payload: &[u8]) {
        let len = payload.len() as u32;
        self.out.extend_from_slice(&len.to_be_bytes()[1..]);
        self.out.push(ty);
        self.out.push(flags);
        self.out.extend_from_slice(&stream.to_be_bytes());
        self.out.extend_from_slice(payload);
        self.queued += (FRAME_HEADER_LEN + payload.len()) as u64;
    }

    fn window_update(&mut self, stream: u32, increment: u32) {
        self.frame(frame::WINDOW_UPDATE, 0, stream, &increment.to_be_bytes());
    }

    fn reset(&mut self, stream: u32, code: u32) {
        self.streams.remove(&stream);
        self.frame(frame::RST_STREAM, 0, stream, &code.to_be_bytes());
    }

    /// Reads the complete frames at the front of `input`, calling `on_event` for what they
    /// mean, and returns how many bytes it used (keep the rest and call again with more). A
    /// connection error queues a GOAWAY and is returned; after it nothing more is read.
    pub fn recv(
        &mut self,
        input: &[u8],
        on_event: &mut impl FnMut(Event<'_>),
    ) -> Result<usize, H2Error> {
        if self.failed {
            return Err(H2Error::protocol("the connection has already failed"));
        }
        let mut used = 0;
        while let Some(head) = input.get(used..used + FRAME_HEADER_LEN) {
            let len =
                (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
            if len > MAX_FRAME_SIZE {
                return Err(self.fail(H2Error::frame_size(
                    "frame larger than SETTINGS_MAX_FRAME_SIZE",
                )));
            }
            let Some(payload) = input.get(used + FRAME_HEADER_LEN..used + FRAME_HEADER_LEN + len)
            else {
                break;
            };
            let (ty, flags) = (head[3], head[4]);
            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & MAX_WINDOW;
            if let Err(e) = self.on_frame(ty, flags, stream, payload, on_event) {
                return Err(self.fail(e));
            }
            used += FRAME_HEADER_LEN + len;
        }
        Ok(used)
    }

    fn fail(&mut self, e: H2Error) -> H2Error {
        if !self.failed {
            self.queue_goaway(e.code, e.reason.as_bytes());
            self.failed = true;
        }
        self.streams.clear();
        e
    }
}

#[cfg(test)]
mod tests;
