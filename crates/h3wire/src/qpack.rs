//! QPACK as this server needs it (RFC 9204, static table only): reading a request's field
//! section into a [`RequestHead`](crate::RequestHead), and writing a response's.
//!
//! This module owns field sections; it must not read frames or streams.

use agentwire_hpack::decode_prefix_int;
use agentwire_hpack::put_prefix_int;
use bytes::{BufMut, Bytes, BytesMut};
use http::{Method, StatusCode};

use crate::{encode_varint, frame, huffman_decode, H3Error, RequestHead, MAX_QPACK_INT};

/// Reads QPACK's prefixed integers and string literals (RFC 7541 sections 5.1, 5.2).
struct FieldReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> FieldReader<'a> {
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn int(&mut self, prefix_bits: u32) -> Result<u64, H3Error> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let (value, used) = decode_prefix_int(rest, prefix_bits, MAX_QPACK_INT)
            .map_err(|e| H3Error::qpack(e.reason()))?;
        self.pos += used;
        Ok(value)
    }

    /// A string literal whose Huffman flag is the bit just above a `prefix_bits` length.
    fn string(&mut self, prefix_bits: u32) -> Result<Literal<'a>, H3Error> {
        let first = self.peek().ok_or(H3Error::qpack("truncated string"))?;
        let huffman = first & (1 << prefix_bits) != 0;
        let len = self.int(prefix_bits)?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| self.pos.checked_add(len))
            .filter(|end| *end <= self.buf.len())
            .ok_or(H3Error::qpack("string runs past the header section"))?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(Literal { bytes, huffman })
    }
}

/// A string as it is on the wire.
#[derive(Debug, Clone, Copy)]
struct Literal<'a> {
    bytes: &'a [u8],
    huffman: bool,
}

impl Literal<'_> {
    fn decode(&self) -> Result<Vec<u8>, H3Error> {
        if self.huffman {
            huffman_decode(self.bytes)
        } else {
            Ok(self.bytes.to_vec())
        }
    }
}

/// A field's name as far as a request's check needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    Method,
    Path,
    Scheme,
    Authority,
    /// A pseudo-header a request may not carry (`:status`, `:protocol`, unknown).
    BadPseudo,
    /// A regular header field.
    Regular,
}

/// Names (and, where it matters, values) of the QPACK static table (RFC 9204 Appendix A).
fn static_entry(index: u64) -> Result<(Name, &'static str), H3Error> {
    Ok(match index {
        0 => (Name::Authority, ""),
        1 => (Name::Path, "/"),
        15 => (Name::Method, "CONNECT"),
        16 => (Name::Method, "DELETE"),
        17 => (Name::Method, "GET"),
        18 => (Name::Method, "HEAD"),
        19 => (Name::Method, "OPTIONS"),
        20 => (Name::Method, "POST"),
        21 => (Name::Method, "PUT"),
        22 => (Name::Scheme, "http"),
        23 => (Name::Scheme, "https"),
        24..=28 | 63..=71 => (Name::BadPseudo, ""),
        2..=98 => (Name::Regular, ""),
        _ => return Err(H3Error::qpack("static table index out of range")),
    })
}

fn literal_name(name: &[u8]) -> Result<Name, H3Error> {
    Ok(match name {
        b":method" => Name::Method,
        b":path" => Name::Path,
        b":scheme" => Name::Scheme,
        b":authority" => Name::Authority,
        [b':', ..] => Name::BadPseudo,
        [] => return Err(H3Error::message("empty field name")),
        _ if name.iter().any(|b| b.is_ascii_uppercase()) => {
            return Err(H3Error::message("upper-case field name"))
        }
        _ => Name::Regular,
    })
}

/// What the fields of a request section have said so far.
#[derive(Default)]
struct RequestFields {
    method: Option<Method>,
    path: Option<String>,
    scheme: bool,
    authority: bool,
    regular_seen: bool,
}

impl RequestFields {
    fn add(&mut self, name: Name, value: FieldValue<'_>) -> Result<(), H3Error> {
        if name == Name::Regular {
            self.regular_seen = true;
            return Ok(());
        }
        if self.regular_seen {
            return Err(H3Error::message("pseudo-header after a regular field"));
        }
        let repeated = || H3Error::message("repeated pseudo-header");
        match name {
            Name::Method => {
                if self.method.is_some() {
                    return Err(repeated());
                }
                let bytes = value.bytes()?;
                let method =
                    Method::from_bytes(&bytes).map_err(|_| H3Error::message("invalid :method"))?;
                self.method = Some(method);
            }
            Name::Path => {
                if self.path.is_some() {
                    return Err(repeated());
                }
                let path = String::from_utf8(value.bytes()?)
                    .map_err(|_| H3Error::message(":path is not UTF-8"))?;
                if path.is_empty() {
                    return Err(H3Error::message("empty :path"));
                }
                self.path = Some(path);
            }
            Name::Scheme => {
                if std::mem::replace(&mut self.scheme, true) {
                    return Err(repeated());
                }
            }
            Name::Authority => {
                if std::mem::replace(&mut self.authority, true) {
                    return Err(repeated());
                }
            }
            Name::BadPseudo => {
                return Err(H3Error::message("pseudo-header not allowed in a request"))
            }
            Name::Regular => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<RequestHead, H3Error> {
        let method = self
            .method
            .ok_or(H3Error::message("request without :method"))?;
        if method == Method::CONNECT {
            // No :scheme or :path (RFC 9114 section 4.4); the server answers 405.
            return Ok(RequestHead {
                method,
                path: self.path.unwrap_or_default(),
            });
        }
        let path = self.path.ok_or(H3Error::message("request without :path"))?;
        if !self.scheme {
            return Err(H3Error::message("request without :scheme"));
        }
        Ok(RequestHead { method, path })
    }
}

/// A field's value: from the static table, or a literal still to be decoded if needed.
enum FieldValue<'a> {
    Static(&'static str),
    Literal(Literal<'a>),
}

impl FieldValue<'_> {
    fn bytes(&self) -> Result<Vec<u8>, H3Error> {
        match self {
            FieldValue::Static(s) => Ok(s.as_bytes().to_vec()),
            FieldValue::Literal(l) => l.decode(),
        }
    }
}

/// Decodes a request's encoded field section (RFC 9204 section 4.5) that may use only the
/// static table, and checks its pseudo-headers (RFC 9114 section 4.3.1). Values of regular
/// fields are skipped, not decoded.
///
/// ```
/// use agentwire_h3wire::{code, decode_request};
/// // :method GET, :scheme https, then :path as a literal with the static name :path.
/// let head = decode_request(&[0x00, 0x00, 0xd1, 0xd7, 0x51, 0x03, b'/', b'a', b'b']).unwrap();
/// assert_eq!(head.path, "/ab");
/// // A reference to the dynamic table, which our SETTINGS forbid.
/// assert_eq!(decode_request(&[0x01, 0x00]).unwrap_err().code, code::QPACK_DECOMPRESSION_FAILED);
/// ```
pub fn decode_request(block: &[u8]) -> Result<RequestHead, H3Error> {
    let mut r = FieldReader { buf: block, pos: 0 };
    if r.int(8)? != 0 {
        return Err(H3Error::qpack("the section refers to the dynamic table"));
    }
    r.int(7)?; // Sign and Delta Base: meaningless without a dynamic table.
    let mut fields = RequestFields::default();
    while let Some(b) = r.peek() {
        if b & 0x80 != 0 {
            // Indexed field line: 1 T index(6).
            if b & 0x40 == 0 {
                return Err(H3Error::qpack("dynamic table reference"));
            }
            let (name, value) = static_entry(r.int(6)?)?;
            fields.add(name, FieldValue::Static(value))?;
        } else if b & 0x40 != 0 {
            // Literal with name reference: 0 1 N T index(4), value.
            if b & 0x10 == 0 {
                return Err(H3Error::qpack("dynamic table reference"));
            }
            let (name, _) = static_entry(r.int(4)?)?;
            let value = r.string(7)?;
            fields.add(name, FieldValue::Literal(value))?;
        } else if b & 0x20 != 0 {
            // Literal with literal name: 0 0 1 N H length(3), name, value.
            let name = r.string(3)?;
            let name = if name.huffman {
                literal_name(&name.decode()?)?
            } else {
                literal_name(name.bytes)?
            };
            let value = r.string(7)?;
            fields.add(name, FieldValue::Literal(value))?;
        } else {
            return Err(H3Error::qpack("post-base (dynamic table) reference"));
        }
    }
    fields.finish()
}

/// `value` in decimal ASCII, written at the end of `buf` (no allocation).
fn decimal(mut value: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Appends a literal value (no Huffman coding) with a 7-bit length prefix.
fn put_value(out: &mut BytesMut, value: &[u8]) {
    put_prefix_int(out, 0, 7, value.len() as u64);
    out.extend_from_slice(value);
}

/// The response head of `serve`: status and the header fields, as a HEADERS frame followed,
/// when `body_len` is `Some`, by the header of the DATA frame that will carry the body.
///
/// ```
/// use http::StatusCode;
/// let head = agentwire_h3wire::response_head(StatusCode::OK, 5, "text/plain", &[], Some(5));
/// assert_eq!(head[0], 0x01); // HEADERS
/// assert_eq!(&head[head.len() - 2..], &[0x00, 0x05]); // DATA, 5 bytes to follow
/// ```
///
/// The section uses only the static table (`:status 200` and `404` are indexed; other
/// statuses, `content-length` and `content-type` are literals with a static name), so it
/// never depends on state the client keeps.
pub fn response_head(
    status: StatusCode,
    content_length: u64,
    content_type: &str,
    extra: &[(&str, &str)],
    body_len: Option<u64>,
) -> Bytes {
    // One buffer: the HEADERS frame's length is patched in once the section is written
    // (a one-byte varint when the section is under 64 bytes, as it is for our files).
    let mut out = BytesMut::with_capacity(96);
    encode_varint(frame::HEADERS, &mut out);
    out.put_u8(0);
    let start = out.len();
    out.put_u8(0); // Required Insert Count 0
    out.put_u8(0); // Delta Base 0
    match status.as_u16() {
        200 => put_prefix_int(&mut out, 0xc0, 6, 25),
        404 => put_prefix_int(&mut out, 0xc0, 6, 27),
        _ => {
            put_prefix_int(&mut out, 0x50, 4, 24);
            put_value(&mut out, status.as_str().as_bytes());
        }
    }
    put_prefix_int(&mut out, 0x50, 4, 4);
    let mut digits = [0u8; 20];
    put_value(&mut out, decimal(content_length, &mut digits));
    put_prefix_int(&mut out, 0x50, 4, 44);
    put_value(&mut out, content_type.as_bytes());
    for (name, value) in extra {
        put_prefix_int(&mut out, 0x20, 3, name.len() as u64);
        out.extend_from_slice(name.as_bytes());
        put_value(&mut out, value.as_bytes());
    }
    let block_len = (out.len() - start) as u64;
    if block_len < 64 {
        out[start - 1] = block_len as u8;
    } else {
        let block = out.split_off(start);
        out.truncate(start - 1);
        encode_varint(block_len, &mut out);
        out.extend_from_slice(&block);
    }
    if let Some(len) = body_len {
        encode_varint(frame::DATA, &mut out);
        encode_varint(len, &mut out);
    }
    out.freeze()
}
