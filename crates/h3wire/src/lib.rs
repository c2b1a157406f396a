//! The HTTP/3 wire format that `agentwire serve` speaks (RFC 9114), with QPACK (RFC 9204)
//! limited to its static table: variable-length integers, frames, the server's control-stream
//! preface, a reader for request streams and one for the client's unidirectional streams, a
//! QPACK decoder for request header sections and an encoder for response header sections.
//!
//! Sans-IO: pure functions and small state machines fed with bytes, no sockets and no tokio,
//! so that every malformed input can be tested here; `serve` adapts them to quinn streams.
//! Nothing here may panic or allocate without bound on any input: every malformed input is an
//! [`H3Error`] that names the RFC error code to send and whether it ends the stream or the
//! connection.
//!
//! What it does not do: the QPACK dynamic table (the SETTINGS we send give it capacity 0, so a
//! client may not use it), server push, extended CONNECT, HTTP/3 datagrams and trailers. The
//! client side of `agentwire load` uses the h3 crate instead; this crate exists because the
//! server's per-request cost decides the long-connection requests/s of `agentwire serve`
//! (the h3 crate's server cost 17 µs more per request there). It is fuzzed by
//! `fuzz/fuzz_targets/h3_wire.rs`.

#![warn(missing_docs)]

// The coding primitives QPACK shares with HPACK, where they were before they moved.
pub use agentwire_hpack::{huffman_decode_into, put_prefix_int, HuffmanError};
use bytes::{BufMut, Bytes, BytesMut};
use http::Method;

mod qpack;
mod uni;

pub use qpack::{decode_request, response_head};
pub use uni::{CriticalStreams, UniKind, UniReader};

/// HTTP/3 and QPACK error codes (RFC 9114 section 8.1, RFC 9204 section 6).
pub mod code {
    /// No error: also used to stop reading a request whose answer is complete.
    pub const H3_NO_ERROR: u64 = 0x100;
    /// A stream of a type that may not be opened, or a second critical stream.
    pub const H3_STREAM_CREATION_ERROR: u64 = 0x103;
    /// A control or QPACK stream was closed or reset.
    pub const H3_CLOSED_CRITICAL_STREAM: u64 = 0x104;
    /// A frame that is not allowed where it arrived.
    pub const H3_FRAME_UNEXPECTED: u64 = 0x105;
    /// A frame whose layout is wrong.
    pub const H3_FRAME_ERROR: u64 = 0x106;
    /// More than the limits allow (header section size, skipped bytes).
    pub const H3_EXCESSIVE_LOAD: u64 = 0x107;
    /// A SETTINGS frame with a forbidden or repeated identifier.
    pub const H3_SETTINGS_ERROR: u64 = 0x109;
    /// The control stream did not begin with SETTINGS.
    pub const H3_MISSING_SETTINGS: u64 = 0x10a;
    /// The server did not process the request (the client may send it again).
    pub const H3_REQUEST_REJECTED: u64 = 0x10b;
    /// The request stream ended before a complete request.
    pub const H3_REQUEST_INCOMPLETE: u64 = 0x10d;
    /// A malformed request (pseudo-headers wrong, missing or repeated).
    pub const H3_MESSAGE_ERROR: u64 = 0x10e;
    /// A header section that cannot be decoded, or one that uses the dynamic table.
    pub const QPACK_DECOMPRESSION_FAILED: u64 = 0x200;
}

/// Frame types (RFC 9114 section 7.2).
mod frame {
    pub const DATA: u64 = 0x00;
    pub const HEADERS: u64 = 0x01;
    pub const CANCEL_PUSH: u64 = 0x03;
    pub const SETTINGS: u64 = 0x04;
    pub const PUSH_PROMISE: u64 = 0x05;
    pub const GOAWAY: u64 = 0x07;
    pub const MAX_PUSH_ID: u64 = 0x0d;
    /// Types HTTP/2 used that HTTP/3 reserves: receiving one is an error (section 7.2.8).
    pub const HTTP2_ONLY: [u64; 4] = [0x02, 0x06, 0x08, 0x09];
}

/// Unidirectional stream types (RFC 9114 section 6.2, RFC 9204 section 4.2).
mod stream_type {
    pub const CONTROL: u64 = 0x00;
    pub const PUSH: u64 = 0x01;
    pub const QPACK_ENCODER: u64 = 0x02;
    pub const QPACK_DECODER: u64 = 0x03;
}

/// SETTINGS identifiers we send.
mod setting {
    pub const QPACK_MAX_TABLE_CAPACITY: u64 = 0x01;
    pub const MAX_FIELD_SECTION_SIZE: u64 = 0x06;
    pub const QPACK_BLOCKED_STREAMS: u64 = 0x07;
}

/// Largest request header section accepted (and announced as SETTINGS_MAX_FIELD_SECTION_SIZE).
pub const MAX_FIELD_SECTION: u64 = 16 * 1024;
/// Most bytes of unknown frames skipped on one stream before it counts as abuse.
/// Largest QPACK integer taken: 63 bits (nine continuation bytes after the prefix).
const MAX_QPACK_INT: u64 = u64::MAX >> 1;
const MAX_SKIPPED: u64 = 64 * 1024;
/// Largest SETTINGS frame accepted.
const MAX_SETTINGS_FRAME: u64 = 4 * 1024;

/// Whether an error ends one request stream or the whole connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Reset this stream (and stop reading it); the connection goes on.
    Stream,
    /// Close the connection with the code.
    Connection,
}

/// A protocol error: the code to send, where it applies, and a reason for the close frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H3Error {
    /// One of [`code`].
    pub code: u64,
    /// Stream or connection.
    pub scope: Scope,
    /// A short reason (sent as the CONNECTION_CLOSE reason).
    pub reason: &'static str,
}

impl H3Error {
    fn conn(code: u64, reason: &'static str) -> Self {
        H3Error {
            code,
            scope: Scope::Connection,
            reason,
        }
    }

    fn stream(code: u64, reason: &'static str) -> Self {
        H3Error {
            code,
            scope: Scope::Stream,
            reason,
        }
    }

    fn qpack(reason: &'static str) -> Self {
        H3Error::conn(code::QPACK_DECOMPRESSION_FAILED, reason)
    }

    fn message(reason: &'static str) -> Self {
        H3Error::stream(code::H3_MESSAGE_ERROR, reason)
    }
}

/// Decodes a QUIC variable-length integer (RFC 9000 section 16) from the front of `buf`:
/// the value and the bytes it took, or `None` if `buf` holds only part of it.
///
/// ```
/// use agentwire_h3wire::decode_varint;
/// assert_eq!(decode_varint(&[0x40, 0x25]), Some((37, 2)));
/// assert_eq!(decode_varint(&[0x40]), None); // not all there yet
/// ```
pub fn decode_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let rest = buf.get(1..len)?;
    let value = rest
        .iter()
        .fold(u64::from(first & 0x3f), |v, b| (v << 8) | u64::from(*b));
    Some((value, len))
}

/// Appends `value` (below 2^62) as a QUIC variable-length integer in its shortest form.
pub fn encode_varint(value: u64, out: &mut BytesMut) {
    if value < 1 << 6 {
        out.put_u8(value as u8);
    } else if value < 1 << 14 {
        out.put_u16(0x4000 | value as u16);
    } else if value < 1 << 30 {
        out.put_u32(0x8000_0000 | value as u32);
    } else {
        out.put_u64(0xc000_0000_0000_0000 | (value & 0x3fff_ffff_ffff_ffff));
    }
}

/// The start of a frame: its type, payload length, and how many bytes the two took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FrameHead {
    ty: u64,
    len: u64,
    head_len: usize,
}

fn frame_head(buf: &[u8]) -> Option<FrameHead> {
    let (ty, a) = decode_varint(buf)?;
    let (len, b) = decode_varint(buf.get(a..)?)?;
    Some(FrameHead {
        ty,
        len,
        head_len: a + b,
    })
}

/// What the server writes first on its control stream: the stream type and a SETTINGS frame
/// saying QPACK's dynamic table has capacity 0, no stream may block on it, and header
/// sections may be up to [`MAX_FIELD_SECTION`] bytes.
///
/// ```
/// let preface = agentwire_h3wire::control_stream_preface();
/// assert_eq!(&preface[..2], &[0x00, 0x04]); // control stream, SETTINGS frame
/// ```
pub fn control_stream_preface() -> Bytes {
    let mut settings = BytesMut::new();
    for (id, value) in [
        (setting::QPACK_MAX_TABLE_CAPACITY, 0),
        (setting::QPACK_BLOCKED_STREAMS, 0),
        (setting::MAX_FIELD_SECTION_SIZE, MAX_FIELD_SECTION),
    ] {
        encode_varint(id, &mut settings);
        encode_varint(value, &mut settings);
    }
    let mut out = BytesMut::with_capacity(settings.len() + 4);
    encode_varint(stream_type::CONTROL, &mut out);
    encode_varint(frame::SETTINGS, &mut out);
    encode_varint(settings.len() as u64, &mut out);
    out.extend_from_slice(&settings);
    out.freeze()
}

/// Errors for frame types that may never arrive where a request or control frame is read.
fn forbidden_everywhere(ty: u64) -> bool {
    frame::HTTP2_ONLY.contains(&ty)
}

/// The parts of a request that the file server needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// `:method`.
    pub method: Method,
    /// `:path` (for CONNECT, which has none: empty).
    pub path: String,
}

/// What a [`RequestReader`] has after some bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum RequestProgress {
    /// The request's HEADERS frame is not complete yet.
    NeedMore,
    /// The request's header section, decoded.
    Head(RequestHead),
}

/// Reads a request stream up to and including its HEADERS frame (RFC 9114 section 4.1):
/// frames of unknown or reserved types before it are skipped (up to a limit), and frames that
/// may not come first are errors.
///
/// ```
/// use agentwire_h3wire::{RequestProgress, RequestReader};
/// // HEADERS: section prefix 0 0, then :method GET, :scheme https, :path "/" (static table).
/// let frame = [0x01, 0x05, 0x00, 0x00, 0xd1, 0xd7, 0xc1];
/// let mut r = RequestReader::default();
/// assert_eq!(r.push(&frame[..3]).unwrap(), RequestProgress::NeedMore);
/// match r.push(&frame[3..]).unwrap() {
///     RequestProgress::Head(head) => assert_eq!((head.method.as_str(), head.path.as_str()), ("GET", "/")),
///     RequestProgress::NeedMore => panic!("the frame is complete"),
/// }
/// ```
#[derive(Debug, Default)]
pub struct RequestReader {
    buf: BytesMut,
    /// Bytes of an unknown frame still to skip.
    skip: u64,
    skipped: u64,
}

/// How far [`RequestReader::parse`] got.
enum Parsed {
    Head(RequestHead),
    /// Incomplete; `consumed` bytes at the front are done with.
    Partial {
        consumed: usize,
    },
}

impl RequestReader {
    /// Feeds the next bytes of the stream.
    pub fn push(&mut self, mut data: &[u8]) -> Result<RequestProgress, H3Error> {
        if self.skip > 0 {
            let n = self.skip.min(data.len() as u64) as usize;
            self.skip -= n as u64;
            data = &data[n..];
        }
        if self.buf.is_empty() {
            // The usual case, a whole request in one chunk: parsed where it lies.
            return match self.parse(data)? {
                Parsed::Head(head) => Ok(RequestProgress::Head(head)),
                Parsed::Partial { consumed } => {
                    self.buf.extend_from_slice(&data[consumed..]);
                    Ok(RequestProgress::NeedMore)
                }
            };
        }
        self.buf.extend_from_slice(data);
        let buf = std::mem::take(&mut self.buf);
        match self.parse(&buf)? {
            Parsed::Head(head) => Ok(RequestProgress::Head(head)),
            Parsed::Partial { consumed } => {
                self.buf = BytesMut::from(&buf[consumed..]);
                Ok(RequestProgress::NeedMore)
            }
        }
    }

    /// Parses frames from the front of `data`. What is kept between calls is bounded: an
    /// incomplete frame head (at most 16 bytes) or HEADERS frame (at most
    /// [`MAX_FIELD_SECTION`] bytes); unknown frames are skipped, never kept.
    fn parse(&mut self, data: &[u8]) -> Result<Parsed, H3Error> {
        let mut pos = 0;
        loop {
            let rest = &data[pos..];
            let Some(head) = frame_head(rest) else {
                return Ok(Parsed::Partial { consumed: pos });
            };
            match head.ty {
                frame::HEADERS => {
                    if head.len > MAX_FIELD_SECTION {
                        return Err(H3Error::stream(
                            code::H3_EXCESSIVE_LOAD,
                            "request header section over 16 KiB",
                        ));
                    }
                    let end = head.head_len + head.len as usize;
                    let Some(block) = rest.get(head.head_len..end) else {
                        return Ok(Parsed::Partial { consumed: pos });
                    };
                    return decode_request(block).map(Parsed::Head);
                }
                frame::DATA => {
                    return Err(H3Error::conn(
                        code::H3_FRAME_UNEXPECTED,
                        "DATA before HEADERS on a request stream",
                    ))
                }
                frame::CANCEL_PUSH
                | frame::SETTINGS
                | frame::PUSH_PROMISE
                | frame::GOAWAY
                | frame::MAX_PUSH_ID => {
                    return Err(H3Error::conn(
                        code::H3_FRAME_UNEXPECTED,
                        "control frame on a request stream",
                    ))
                }
                ty if forbidden_everywhere(ty) => {
                    return Err(H3Error::conn(
                        code::H3_FRAME_UNEXPECTED,
                        "HTTP/2 frame type on a request stream",
                    ))
                }
                _ => {
                    // Unknown or reserved (grease): skip it, within a limit.
                    self.skipped = self.skipped.saturating_add(head.len);
                    if self.skipped > MAX_SKIPPED {
                        return Err(H3Error::stream(
                            code::H3_EXCESSIVE_LOAD,
                            "too many bytes of unknown frames before the request",
                        ));
                    }
                    let available = (rest.len() - head.head_len) as u64;
                    if head.len > available {
                        self.skip = head.len - available;
                        return Ok(Parsed::Partial {
                            consumed: data.len(),
                        });
                    }
                    pos += head.head_len + head.len as usize;
                }
            }
        }
    }

    /// The error for a request the server turns away unprocessed, such as one whose headers
    /// did not arrive in time: H3_REQUEST_REJECTED on that stream.
    pub fn rejected(reason: &'static str) -> H3Error {
        H3Error::stream(code::H3_REQUEST_REJECTED, reason)
    }

    /// The error for a stream that ends before its HEADERS frame is complete.
    pub fn incomplete() -> H3Error {
        H3Error::stream(
            code::H3_REQUEST_INCOMPLETE,
            "request stream ended before its headers",
        )
    }
}

/// Decodes a Huffman-coded string (RFC 7541 section 5.2, Appendix B): the code is canonical,
/// so codes of one length are consecutive and a symbol is found from its length's first code.
/// Padding must be at most 7 bits of ones, and EOS may not appear.
///
/// ```
/// // RFC 7541 C.4.2: "no-cache".
/// let coded = [0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf];
/// assert_eq!(agentwire_h3wire::huffman_decode(&coded).unwrap(), b"no-cache");
/// ```
pub fn huffman_decode(input: &[u8]) -> Result<Vec<u8>, H3Error> {
    let mut out = Vec::with_capacity(input.len() * 8 / 5);
    huffman_decode_into(input, &mut out).map_err(|e| H3Error::qpack(e.reason()))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_hpack::huffman_encode;
    use http::StatusCode;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A request section as a client would encode it, from (field line) pieces.
    fn section(lines: &[&[u8]]) -> Vec<u8> {
        let mut s = vec![0x00, 0x00];
        for l in lines {
            s.extend_from_slice(l);
        }
        s
    }

    fn lit_name_ref(index: u8, value: &[u8]) -> Vec<u8> {
        assert!(index < 15 && value.len() < 127);
        let mut v = vec![0x50 | index, value.len() as u8];
        v.extend_from_slice(value);
        v
    }

    fn lit_name(name: &[u8], value: &[u8]) -> Vec<u8> {
        assert!(name.len() < 7 + 128 && value.len() < 127);
        let mut v = BytesMut::new();
        put_prefix_int(&mut v, 0x20, 3, name.len() as u64);
        v.extend_from_slice(name);
        v.put_u8(value.len() as u8);
        v.extend_from_slice(value);
        v.to_vec()
    }

    const GET: &[u8] = &[0xc0 | 17];
    const HTTPS: &[u8] = &[0xc0 | 23];

    fn get(path: &[u8]) -> Vec<u8> {
        section(&[
            GET,
            HTTPS,
            &lit_name_ref(0, b"127.0.0.1"),
            &lit_name_ref(1, path),
        ])
    }

    fn headers_frame(block: &[u8]) -> Vec<u8> {
        let mut f = BytesMut::new();
        encode_varint(frame::HEADERS, &mut f);
        encode_varint(block.len() as u64, &mut f);
        f.extend_from_slice(block);
        f.to_vec()
    }

    fn err_code(r: Result<RequestHead, H3Error>) -> (u64, Scope) {
        let e = r.unwrap_err();
        (e.code, e.scope)
    }

    #[test]
    fn varints_at_every_length_boundary() {
        for v in [
            0,
            63,
            64,
            16383,
            16384,
            (1 << 30) - 1,
            1 << 30,
            (1 << 62) - 1,
        ] {
            let mut b = BytesMut::new();
            encode_varint(v, &mut b);
            assert_eq!(decode_varint(&b), Some((v, b.len())), "{v}");
            assert_eq!(decode_varint(&b[..b.len() - 1]), None, "{v} cut short");
        }
        // RFC 9000 appendix A.1 examples.
        assert_eq!(
            decode_varint(&hex("c2197c5eff14e88c")),
            Some((151_288_809_941_952_652, 8))
        );
        assert_eq!(decode_varint(&hex("9d7f3e7d")), Some((494_878_333, 4)));
        assert_eq!(decode_varint(&hex("7bbd")), Some((15_293, 2)));
        assert_eq!(decode_varint(&hex("25")), Some((37, 1)));
        assert_eq!(decode_varint(&[]), None);
    }

    #[test]
    fn huffman_matches_rfc7541_examples_and_round_trips_every_byte() {
        // RFC 7541 appendix C.4.
        for (coded, plain) in [
            ("f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"),
            ("a8eb 1064 9cbf", "no-cache"),
            ("25a8 49e9 5ba9 7d7f", "custom-key"),
            ("25a8 49e9 5bb8 e8b4 bf", "custom-value"),
        ] {
            assert_eq!(huffman_decode(&hex(coded)).unwrap(), plain.as_bytes());
            assert_eq!(huffman_encode(plain.as_bytes()), hex(coded));
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(huffman_decode(&huffman_encode(&all)).unwrap(), all);
        assert_eq!(huffman_decode(&[]).unwrap(), b"");
    }

    #[test]
    fn huffman_rejects_eos_bad_padding_and_long_padding() {
        // EOS is 30 ones: four 0xff bytes hold it.
        assert!(huffman_decode(&[0xff, 0xff, 0xff, 0xff]).is_err());
        // '0' is 00000 (5 bits); padding must be ones, not zeros.
        assert!(huffman_decode(&[0b0000_0000]).is_err());
        assert_eq!(huffman_decode(&[0b0000_0111]).unwrap(), b"0");
        // A whole byte of padding is too much.
        assert!(huffman_decode(&[0b0000_0111, 0xff]).is_err());
    }

    #[test]
    fn decodes_requests_in_every_field_line_form() {
        let head = decode_request(&get(b"/5k.bin")).unwrap();
        assert_eq!(head.method, Method::GET);
        assert_eq!(head.path, "/5k.bin");
        // Static-indexed :path "/", HEAD, and a Huffman-coded path with a long length.
        let head = decode_request(&section(&[&[0xc0 | 18], HTTPS, &[0xc0 | 1]])).unwrap();
        assert_eq!((head.method, head.path.as_str()), (Method::HEAD, "/"));
        let long = format!("/{}", "a".repeat(300));
        let coded = huffman_encode(long.as_bytes());
        let mut path = BytesMut::new();
        path.put_u8(0x51);
        put_prefix_int(&mut path, 0x80, 7, coded.len() as u64);
        path.extend_from_slice(&coded);
        let head = decode_request(&section(&[GET, HTTPS, &path])).unwrap();
        assert_eq!(head.path, long);
        // Literal names, one Huffman-coded, and regular fields after the pseudo-headers.
        let mut name = BytesMut::new();
        let coded = huffman_encode(b":path");
        put_prefix_int(&mut name, 0x28, 3, coded.len() as u64);
        name.extend_from_slice(&coded);
        name.put_u8(4);
        name.extend_from_slice(b"/x.y");
        let head = decode_request(&section(&[
            &lit_name(b":method", b"GET"),
            &lit_name(b":scheme", b"https"),
            &name,
            &lit_name(b"user-agent", b"test"),
            &[0xc0 | 29], // accept: */*
        ]))
        .unwrap();
        assert_eq!((head.method, head.path.as_str()), (Method::GET, "/x.y"));
        // RFC 9204 appendix B.1's section is only a :path: a request needs more.
        assert_eq!(
            err_code(decode_request(&hex(
                "0000 510b 2f69 6e64 6578 2e68 746d 6c"
            ))),
            (code::H3_MESSAGE_ERROR, Scope::Stream)
        );
        // CONNECT needs no :path or :scheme.
        let head = decode_request(&section(&[&[0xc0 | 15], &lit_name_ref(0, b"x:1")])).unwrap();
        assert_eq!((head.method, head.path.as_str()), (Method::CONNECT, ""));
    }

    #[test]
    fn malformed_sections_are_qpack_errors_and_malformed_requests_message_errors() {
        let qpack = (code::QPACK_DECOMPRESSION_FAILED, Scope::Connection);
        let message = (code::H3_MESSAGE_ERROR, Scope::Stream);
        let cases: Vec<(Vec<u8>, (u64, Scope))> = vec![
            (vec![0x01, 0x00, 0xd1], qpack),          // Required Insert Count 1
            (section(&[&[0x80 | 3]]), qpack),         // dynamic indexed line
            (section(&[&[0x40 | 3, 0]]), qpack),      // dynamic name reference
            (section(&[&[0x10]]), qpack),             // post-base index
            (section(&[&[0x00, 0x00]]), qpack),       // post-base name reference
            (section(&[&[0xff, 0x24]]), qpack),       // static index 99
            (section(&[&[0x51, 0x05, b'/']]), qpack), // string runs past the end
            (section(&[&[0x51, 0x81, 0xff]]), qpack), // bad Huffman padding
            (
                section(&[&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]]),
                qpack,
            ),
            (vec![0x00], qpack),                                 // no Delta Base
            (section(&[GET, HTTPS]), message),                   // no :path
            (section(&[GET, &lit_name_ref(1, b"/a")]), message), // no :scheme
            (section(&[HTTPS, &lit_name_ref(1, b"/a")]), message), // no :method
            (
                section(&[GET, GET, HTTPS, &lit_name_ref(1, b"/a")]),
                message,
            ),
            (section(&[GET, HTTPS, &lit_name_ref(1, b"")]), message),
            (
                section(&[GET, HTTPS, &lit_name_ref(1, b"/a"), &[0xc0 | 25]]),
                message,
            ), // :status
            (
                section(&[GET, &[0xc0 | 29], HTTPS, &lit_name_ref(1, b"/a")]),
                message,
            ), // order
            (
                section(&[
                    GET,
                    HTTPS,
                    &lit_name_ref(1, b"/a"),
                    &lit_name(b"X-Up", b"1"),
                ]),
                message,
            ),
            (
                section(&[
                    GET,
                    HTTPS,
                    &lit_name_ref(1, b"/a"),
                    &lit_name(b":proto", b"1"),
                ]),
                message,
            ),
            (
                section(&[
                    &lit_name(b":method", b"G T"),
                    HTTPS,
                    &lit_name_ref(1, b"/a"),
                ]),
                message,
            ),
            (
                section(&[GET, HTTPS, &lit_name_ref(1, &[0xc3, 0x28])]),
                message,
            ), // not UTF-8
        ];
        for (i, (block, want)) in cases.into_iter().enumerate() {
            assert_eq!(err_code(decode_request(&block)), want, "case {i}");
        }
    }

    #[test]
    fn request_reader_takes_bytes_in_any_split_and_skips_unknown_frames() {
        let mut stream = Vec::new();
        // A reserved (grease) frame type 0x21 and an unknown 0x30, before the HEADERS.
        stream.extend_from_slice(&[0x40, 0x21, 0x03, 1, 2, 3, 0x30, 0x00]);
        stream.extend_from_slice(&headers_frame(&get(b"/1k.bin")));
        stream.extend_from_slice(&[0x00, 0x02, 9, 9]); // a body: never read
        for split in 1..stream.len() {
            let mut r = RequestReader::default();
            let mut got = None;
            for piece in stream.chunks(split) {
                if let RequestProgress::Head(h) = r.push(piece).unwrap() {
                    got = Some(h);
                    break;
                }
            }
            assert_eq!(
                got.map(|h| h.path),
                Some("/1k.bin".to_string()),
                "split {split}"
            );
        }
        let mut r = RequestReader::default();
        assert_eq!(r.push(&stream[..5]).unwrap(), RequestProgress::NeedMore);
        assert_eq!(
            RequestReader::incomplete().code,
            code::H3_REQUEST_INCOMPLETE
        );
    }

    #[test]
    fn request_reader_rejects_frames_out_of_place_and_over_limits() {
        let read = |bytes: &[u8]| {
            RequestReader::default()
                .push(bytes)
                .map(|_| ())
                .unwrap_err()
        };
        let unexpected = (code::H3_FRAME_UNEXPECTED, Scope::Connection);
        for first in [0x00u8, 0x03, 0x04, 0x05, 0x07, 0x0d, 0x02, 0x06, 0x08, 0x09] {
            let e = read(&[first, 0x01, 0x00]);
            assert_eq!((e.code, e.scope), unexpected, "frame type {first:#x}");
        }
        let mut big = BytesMut::new();
        encode_varint(frame::HEADERS, &mut big);
        encode_varint(MAX_FIELD_SECTION + 1, &mut big);
        let e = read(&big);
        assert_eq!((e.code, e.scope), (code::H3_EXCESSIVE_LOAD, Scope::Stream));
        // Unknown frames are skipped only up to a limit, even when each is small.
        let mut r = RequestReader::default();
        let grease = [0x21u8, 0x3f]
            .iter()
            .copied()
            .chain([0u8; 0x3f])
            .collect::<Vec<_>>();
        let mut result = Ok(RequestProgress::NeedMore);
        for _ in 0..(MAX_SKIPPED / 0x3f + 2) {
            result = r.push(&grease);
            if result.is_err() {
                break;
            }
        }
        let e = result.unwrap_err();
        assert_eq!((e.code, e.scope), (code::H3_EXCESSIVE_LOAD, Scope::Stream));
        // A huge unknown frame is refused at its header, without waiting for its bytes.
        let mut r = RequestReader::default();
        let mut huge = BytesMut::new();
        encode_varint(0x21, &mut huge);
        encode_varint(1 << 40, &mut huge);
        assert!(r.push(&huge).is_err());
    }

    fn control_stream(frames: &[&[u8]]) -> Vec<u8> {
        let mut s = vec![stream_type::CONTROL as u8];
        for f in frames {
            s.extend_from_slice(f);
        }
        s
    }

    const SETTINGS_OK: &[u8] = &[0x04, 0x04, 0x01, 0x00, 0x07, 0x00];
    const GOAWAY: &[u8] = &[0x07, 0x01, 0x00];

    #[test]
    fn control_stream_is_read_in_any_split() {
        let stream = control_stream(&[SETTINGS_OK, GOAWAY, &[0x21, 0x02, 7, 7], GOAWAY]);
        for split in 1..stream.len() {
            let mut r = UniReader::default();
            let mut kinds = Vec::new();
            for piece in stream.chunks(split) {
                kinds.extend(r.push(piece).unwrap());
            }
            assert_eq!(kinds, [UniKind::Control], "split {split}");
            assert_eq!(
                r.ended().map(|e| e.code),
                Some(code::H3_CLOSED_CRITICAL_STREAM)
            );
        }
        // Our own preface is one the reader accepts.
        let mut r = UniReader::default();
        assert_eq!(
            r.push(&control_stream_preface()).unwrap(),
            Some(UniKind::Control)
        );
    }

    #[test]
    fn control_stream_errors_and_other_stream_types() {
        let fails = |bytes: Vec<u8>| {
            let mut r = UniReader::default();
            r.push(&bytes).unwrap_err().code
        };
        assert_eq!(fails(control_stream(&[GOAWAY])), code::H3_MISSING_SETTINGS);
        assert_eq!(
            fails(control_stream(&[SETTINGS_OK, SETTINGS_OK])),
            code::H3_FRAME_UNEXPECTED
        );
        assert_eq!(
            fails(control_stream(&[SETTINGS_OK, &[0x01, 0x00]])),
            code::H3_FRAME_UNEXPECTED
        );
        assert_eq!(
            fails(control_stream(&[SETTINGS_OK, &[0x00, 0x00]])),
            code::H3_FRAME_UNEXPECTED
        );
        assert_eq!(
            fails(control_stream(&[SETTINGS_OK, &[0x06, 0x00]])),
            code::H3_FRAME_UNEXPECTED
        );
        assert_eq!(
            fails(control_stream(&[&[0x04, 0x02, 0x02, 0x00]])),
            code::H3_SETTINGS_ERROR
        );
        assert_eq!(
            fails(control_stream(&[&[0x04, 0x04, 0x01, 0x00, 0x01, 0x00]])),
            code::H3_SETTINGS_ERROR
        );
        assert_eq!(
            fails(control_stream(&[&[0x04, 0x01, 0x01]])),
            code::H3_FRAME_ERROR
        );
        assert_eq!(
            fails(control_stream(&[&[0x04, 0x50, 0x01]])),
            code::H3_EXCESSIVE_LOAD
        );
        assert_eq!(fails(vec![0x01]), code::H3_STREAM_CREATION_ERROR);
        for (ty, kind) in [
            (0x02u8, UniKind::QpackEncoder),
            (0x03, UniKind::QpackDecoder),
            (0x21, UniKind::Unknown),
        ] {
            let mut r = UniReader::default();
            assert_eq!(r.push(&[ty, 0x3f, 0x01]).unwrap(), Some(kind));
            assert_eq!(r.push(&[0xff; 8]).unwrap(), None, "later bytes are dropped");
            assert_eq!(r.ended().is_some(), kind.is_critical());
        }
        let mut r = UniReader::default();
        assert_eq!(r.push(&[]).unwrap(), None);
        assert_eq!(r.ended(), None);
    }

    #[test]
    fn response_heads_are_static_table_sections() {
        let head = response_head(
            StatusCode::OK,
            10,
            "application/octet-stream",
            &[],
            Some(10),
        );
        let mut want = vec![
            0x01, 0x00, 0x00, 0x00, 0xd9, 0x54, 0x02, b'1', b'0', 0x5f, 0x1d, 24,
        ];
        want.extend_from_slice(b"application/octet-stream");
        want[1] = (want.len() - 2) as u8;
        want.extend_from_slice(&[0x00, 10]);
        assert_eq!(head.as_ref(), want.as_slice());
        // 405 is a literal value with :status's name; extra fields are literal names.
        let head = response_head(
            StatusCode::METHOD_NOT_ALLOWED,
            3,
            "text/plain",
            &[("allow", "GET, HEAD")],
            None,
        );
        let block = &head[2..];
        assert_eq!(&block[..7], &[0x00, 0x00, 0x5f, 0x09, 3, b'4', b'0']);
        assert!(head.windows(5).any(|w| w == b"allow"));
        assert_eq!(
            usize::from(head[1]),
            head.len() - 2,
            "no DATA header without a body"
        );
    }

    /// Random bytes never panic any reader (a cheap stand-in for the fuzzer between runs).
    #[test]
    fn random_input_never_panics() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (next() % 64) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = decode_request(&bytes);
            let _ = huffman_decode(&bytes);
            let _ = RequestReader::default().push(&bytes);
            let mut r = UniReader::default();
            let _ = r.push(&[0x00]);
            let _ = r.push(&bytes);
            let mut with_frame = headers_frame(&bytes);
            with_frame.truncate((next() % (with_frame.len() as u64 + 1)) as usize);
            let _ = RequestReader::default().push(&with_frame);
        }
    }
}
