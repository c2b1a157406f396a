//! HPACK (RFC 7541): a decoder with the dynamic table, for the header blocks a server sends,
//! and an encoder for request heads that indexes `:authority` and `:path` in the dynamic
//! table, as browsers and h2load do, so that a server decodes a repeated request head from a
//! few bytes of table references instead of literals.
//!
//! The decoder must keep its table exactly in step with the server's encoder, so every block
//! is decoded, including those for streams the client has already given up. It must not
//! panic or grow without bound on any input: strings are bounded by the block, the table by
//! the size the client announced.

use std::collections::VecDeque;

use agentwire_hpack::put_prefix_int as put_int;

use crate::{code, H2Error};

/// The static table (RFC 7541 Appendix A); index 1 is the first entry.
const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// What each entry costs in the table besides its name and value (RFC 7541 section 4.1).
const ENTRY_OVERHEAD: usize = 32;

/// Integers larger than this are refused (no table, string or size of ours comes near it).
const MAX_INT: u64 = u32::MAX as u64;

fn compression(reason: &'static str) -> H2Error {
    H2Error::new(code::COMPRESSION_ERROR, reason)
}

/// Reads an HPACK integer with an `prefix_bits`-bit prefix from the front of `buf`: the value
/// and the bytes it took.
fn read_int(buf: &[u8], prefix_bits: u32) -> Result<(u64, usize), H2Error> {
    agentwire_hpack::decode_prefix_int(buf, prefix_bits, MAX_INT)
        .map_err(|e| compression(e.reason()))
}

/// One dynamic-table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    name: Box<[u8]>,
    value: Box<[u8]>,
}

impl Entry {
    fn size(&self) -> usize {
        self.name.len() + self.value.len() + ENTRY_OVERHEAD
    }
}

/// A dynamic table (RFC 7541 section 2.3.2 and 4): the decoder keeps one, and the encoder a
/// copy of the server's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Table {
    /// Newest first: dynamic index 62 is `entries[0]`.
    entries: VecDeque<Entry>,
    /// Sum of the entries' sizes.
    size: usize,
    /// The most the entries may take.
    max_size: usize,
}

impl Table {
    fn new(max_size: usize) -> Self {
        Table {
            max_size,
            ..Table::default()
        }
    }

    fn get(&self, index: usize) -> Option<&Entry> {
        self.entries.get(index.checked_sub(STATIC.len() + 1)?)
    }

    /// The dynamic index of an entry equal to `name: value`.
    fn find(&self, name: &[u8], value: &[u8]) -> Option<usize> {
        self.entries
            .iter()
            .position(|e| &*e.name == name && &*e.value == value)
            .map(|pos| pos + STATIC.len() + 1)
    }

    fn insert(&mut self, name: &[u8], value: &[u8]) {
        let entry = Entry {
            name: name.into(),
            value: value.into(),
        };
        let size = entry.size();
        if size > self.max_size {
            // RFC 7541 section 4.4: an entry larger than the table empties it.
            self.evict_to(0);
            return;
        }
        self.evict_to(self.max_size - size);
        self.size += size;
        self.entries.push_front(entry);
    }

    fn resize(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn evict_to(&mut self, target: usize) {
        while self.size > target {
            match self.entries.pop_back() {
                Some(e) => self.size -= e.size(),
                None => {
                    self.size = 0;
                    break;
                }
            }
        }
    }
}

/// Decodes the header blocks of one connection, keeping the dynamic table.
///
/// ```
/// use agentwire_h2wire::hpack::Decoder;
/// // RFC 7541 C.6.1 then C.6.2 (Huffman-coded, table of 256 bytes).
/// let mut d = Decoder::new(256);
/// let first = [
///     0x48, 0x82, 0x64, 0x02, 0x58, 0x85, 0xae, 0xc3, 0x77, 0x1a, 0x4b, 0x61, 0x96, 0xd0,
///     0x7a, 0xbe, 0x94, 0x10, 0x54, 0xd4, 0x44, 0xa8, 0x20, 0x05, 0x95, 0x04, 0x0b, 0x81,
///     0x66, 0xe0, 0x82, 0xa6, 0x2d, 0x1b, 0xff, 0x6e, 0x91, 0x9d, 0x29, 0xad, 0x17, 0x18,
///     0x63, 0xc7, 0x8f, 0x0b, 0x97, 0xc8, 0xe9, 0xae, 0x82, 0xae, 0x43, 0xd3,
/// ];
/// let mut fields = Vec::new();
/// d.decode(&first, &mut |n, v| fields.push((n.to_vec(), v.to_vec()))).unwrap();
/// assert_eq!(fields[0], (b":status".to_vec(), b"302".to_vec()));
/// assert_eq!(d.table_size(), 222);
/// fields.clear();
/// d.decode(&[0x48, 0x83, 0x64, 0x0e, 0xff, 0xc1, 0xc0, 0xbf], &mut |n, v| {
///     fields.push((n.to_vec(), v.to_vec()))
/// })
/// .unwrap();
/// assert_eq!(fields[3], (b"location".to_vec(), b"https://www.example.com".to_vec()));
/// ```
#[derive(Debug, Clone)]
pub struct Decoder {
    /// Its size is the one the encoder chose last (at most `limit`).
    table: Table,
    /// The size this side announced (SETTINGS_HEADER_TABLE_SIZE).
    limit: usize,
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Decoder {
    /// A decoder whose table may hold `limit` bytes (the SETTINGS_HEADER_TABLE_SIZE this side
    /// sent; 4096 unless it sent another).
    pub fn new(limit: usize) -> Self {
        Decoder {
            table: Table::new(limit),
            limit,
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// The dynamic table's size in bytes, as RFC 7541 counts it.
    pub fn table_size(&self) -> usize {
        self.table.size
    }

    /// Decodes one complete header block, calling `on_field(name, value)` for each field in
    /// order. An error is a COMPRESSION_ERROR: the table can no longer be trusted, so the
    /// connection must end.
    pub fn decode(
        &mut self,
        mut block: &[u8],
        on_field: &mut impl FnMut(&[u8], &[u8]),
    ) -> Result<(), H2Error> {
        let mut fields_seen = false;
        while let Some(&first) = block.first() {
            if first & 0x80 != 0 {
                let (index, n) = read_int(block, 7)?;
                block = &block[n..];
                let (name, value) = self.get(index)?;
                on_field(name, value);
                fields_seen = true;
            } else if first & 0x40 != 0 {
                block = self.literal(block, 6, true, on_field)?;
                fields_seen = true;
            } else if first & 0x20 != 0 {
                if fields_seen {
                    return Err(compression("table size update after a field"));
                }
                let (size, n) = read_int(block, 5)?;
                block = &block[n..];
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                if size > self.limit {
                    return Err(compression(
                        "table size update above SETTINGS_HEADER_TABLE_SIZE",
                    ));
                }
                self.table.resize(size);
            } else {
                // 0000: without indexing; 0001: never indexed.
                block = self.literal(block, 4, false, on_field)?;
                fields_seen = true;
            }
        }
        Ok(())
    }

    fn get(&self, index: u64) -> Result<(&[u8], &[u8]), H2Error> {
        let index = usize::try_from(index).unwrap_or(usize::MAX);
        if index == 0 {
            return Err(compression("index 0"));
        }
        if let Some((name, value)) = STATIC.get(index - 1) {
            return Ok((name.as_bytes(), value.as_bytes()));
        }
        self.table
            .get(index)
            .map(|e| (&e.name[..], &e.value[..]))
            .ok_or_else(|| compression("index beyond the dynamic table"))
    }

    /// Decodes a literal field whose name index has `prefix_bits` bits; returns the rest.
    fn literal<'a>(
        &mut self,
        block: &'a [u8],
        prefix_bits: u32,
        insert: bool,
        on_field: &mut impl FnMut(&[u8], &[u8]),
    ) -> Result<&'a [u8], H2Error> {
        let (index, n) = read_int(block, prefix_bits)?;
        let mut rest = &block[n..];
        let mut name = std::mem::take(&mut self.name);
        let mut value = std::mem::take(&mut self.value);
        name.clear();
        value.clear();
        let result = (|| {
            if index == 0 {
                rest = read_string(rest, &mut name)?;
            } else {
                name.extend_from_slice(self.get(index)?.0);
            }
            rest = read_string(rest, &mut value)?;
            Ok::<_, H2Error>(())
        })();
        if result.is_ok() {
            on_field(&name, &value);
            if insert {
                self.table.insert(&name, &value);
            }
        }
        self.name = name;
        self.value = value;
        result.map(|()| rest)
    }
}

/// Reads a string literal from the front of `buf` onto `out`; returns the rest.
fn read_string<'a>(buf: &'a [u8], out: &mut Vec<u8>) -> Result<&'a [u8], H2Error> {
    let huffman = buf.first().is_some_and(|b| b & 0x80 != 0);
    let (len, n) = read_int(buf, 7)?;
    let rest = &buf[n..];
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > rest.len() {
        return Err(compression("string longer than the block"));
    }
    let (bytes, rest) = rest.split_at(len);
    if huffman {
        agentwire_hpack::huffman_decode_into(bytes, out).map_err(|e| compression(e.reason()))?;
    } else {
        out.extend_from_slice(bytes);
    }
    Ok(rest)
}

/// A request: `GET` of a path at an authority, encoded for each connection by its
/// [`Encoder`].
///
/// ```
/// use agentwire_h2wire::hpack::{Decoder, Encoder, RequestHead};
/// let head = RequestHead::get("https", "127.0.0.1:8443", "/5k.bin");
/// let mut encoder = Encoder::default();
/// let (mut first, mut second) = (Vec::new(), Vec::new());
/// encoder.encode(&head, &mut first);
/// encoder.encode(&head, &mut second);
/// assert_eq!(second, [0x82, 0x87, 0xbf, 0xbe]); // the path and authority are now indexed
/// let mut decoder = Decoder::new(4096);
/// for block in [first, second] {
///     let mut fields = Vec::new();
///     decoder
///         .decode(&block, &mut |n, v| {
///             fields.push(format!("{} {}", String::from_utf8_lossy(n), String::from_utf8_lossy(v)))
///         })
///         .unwrap();
///     assert_eq!(fields, [":method GET", ":scheme https", ":path /5k.bin", ":authority 127.0.0.1:8443"]);
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    scheme: Box<[u8]>,
    authority: Box<[u8]>,
    path: Box<[u8]>,
}

impl RequestHead {
    /// `GET` of `path` (origin form, `/` if empty) at `authority`, with `scheme`.
    pub fn get(scheme: &str, authority: &str, path: &str) -> Self {
        RequestHead {
            scheme: scheme.as_bytes().into(),
            authority: authority.as_bytes().into(),
            path: if path.is_empty() {
                b"/"[..].into()
            } else {
                path.as_bytes().into()
            },
        }
    }
}

/// Encodes the request heads of one connection. It keeps a copy of the server's dynamic
/// table: `:path` and `:authority` are inserted the first time ("literal with incremental
/// indexing") and sent as one-byte references after that, until evicted.
#[derive(Debug, Clone)]
pub struct Encoder {
    table: Table,
    /// A size to announce at the start of the next block (the server lowered its limit).
    update: Option<usize>,
}

impl Default for Encoder {
    /// The table size every connection starts with, 4096 bytes.
    fn default() -> Self {
        Encoder {
            table: Table::new(DEFAULT_TABLE_SIZE),
            update: None,
        }
    }
}

/// SETTINGS_HEADER_TABLE_SIZE until the server says otherwise, and the most this encoder
/// uses whatever the server allows.
pub const DEFAULT_TABLE_SIZE: usize = 4096;

impl Encoder {
    /// The server's SETTINGS_HEADER_TABLE_SIZE arrived: the table this encoder uses is that
    /// size, at most [`DEFAULT_TABLE_SIZE`]. A change is announced at the start of the next
    /// block (RFC 7541 section 4.2).
    pub fn set_table_limit(&mut self, limit: usize) {
        let size = limit.min(DEFAULT_TABLE_SIZE);
        if size != self.table.max_size {
            self.table.resize(size);
            self.update = Some(size);
        }
    }

    /// Appends the header block of `head` to `out`.
    pub fn encode(&mut self, head: &RequestHead, out: &mut Vec<u8>) {
        if let Some(size) = self.update.take() {
            put_int(out, 0x20, 5, size as u64);
        }
        out.push(0x80 | 2); // :method GET
        match &*head.scheme {
            b"https" => out.push(0x80 | 7),
            b"http" => out.push(0x80 | 6),
            other => literal_with_name_index(out, 6, other),
        }
        match &*head.path {
            b"/" => out.push(0x80 | 4),
            b"/index.html" => out.push(0x80 | 5),
            path => self.indexed_field(out, 4, b":path", path),
        }
        self.indexed_field(out, 1, b":authority", &head.authority);
    }

    /// A reference to the table, or a literal (static name `name_index`) that adds the field
    /// to it when it fits.
    fn indexed_field(&mut self, out: &mut Vec<u8>, name_index: u64, name: &[u8], value: &[u8]) {
        if let Some(index) = self.table.find(name, value) {
            put_int(out, 0x80, 7, index as u64);
        } else if name.len() + value.len() + ENTRY_OVERHEAD <= self.table.max_size {
            put_int(out, 0x40, 6, name_index);
            put_int(out, 0x00, 7, value.len() as u64);
            out.extend_from_slice(value);
            self.table.insert(name, value);
        } else {
            literal_with_name_index(out, name_index, value);
        }
    }
}

/// A literal field "without indexing" whose name is static entry `index`, value not
/// Huffman-coded.
fn literal_with_name_index(out: &mut Vec<u8>, index: u64, value: &[u8]) {
    put_int(out, 0x00, 4, index);
    put_int(out, 0x00, 7, value.len() as u64);
    out.extend_from_slice(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    fn decode(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, H2Error> {
        let mut fields = Vec::new();
        d.decode(block, &mut |n, v| {
            fields.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ))
        })?;
        Ok(fields)
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn table(d: &Decoder) -> Vec<(String, String)> {
        d.table
            .entries
            .iter()
            .map(|e| {
                (
                    String::from_utf8_lossy(&e.name).into_owned(),
                    String::from_utf8_lossy(&e.value).into_owned(),
                )
            })
            .collect()
    }

    const REQUESTS: [&[(&str, &str)]; 3] = [
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
        ],
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
            ("cache-control", "no-cache"),
        ],
        &[
            (":method", "GET"),
            (":scheme", "https"),
            (":path", "/index.html"),
            (":authority", "www.example.com"),
            ("custom-key", "custom-value"),
        ],
    ];

    /// RFC 7541 C.3 (plain) and C.4 (Huffman): three requests sharing one table.
    #[test]
    fn appendix_c_3_and_c_4_requests() {
        let plain = [
            "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "8286 84be 5808 6e6f 2d63 6163 6865",
            "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ];
        let huffman = [
            "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
            "8286 84be 5886 a8eb 1064 9cbf",
            "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ];
        for blocks in [plain, huffman] {
            let mut d = Decoder::new(4096);
            for ((block, want), size) in blocks.iter().zip(REQUESTS).zip([57, 110, 164]) {
                assert_eq!(decode(&mut d, &hex(block)).unwrap(), pairs(want));
                assert_eq!(d.table_size(), size);
            }
            assert_eq!(
                table(&d),
                pairs(&[
                    ("custom-key", "custom-value"),
                    ("cache-control", "no-cache"),
                    (":authority", "www.example.com"),
                ])
            );
        }
    }

    /// RFC 7541 C.5 (plain) and C.6 (Huffman): three responses in a 256-byte table, with
    /// evictions.
    #[test]
    fn appendix_c_5_and_c_6_responses_evict() {
        let plain = [
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 \
             2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 \
             6c65 2e63 6f6d",
            "4803 3330 37c1 c0bf",
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d \
             54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 \
             5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e \
             3d31",
        ];
        let huffman = [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 \
             2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab \
             77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f \
             9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ];
        let date1 = ("date", "Mon, 21 Oct 2013 20:13:21 GMT");
        let loc = ("location", "https://www.example.com");
        let cookie = (
            "set-cookie",
            "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
        );
        let responses: [&[(&str, &str)]; 3] = [
            &[(":status", "302"), ("cache-control", "private"), date1, loc],
            &[(":status", "307"), ("cache-control", "private"), date1, loc],
            &[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                loc,
                ("content-encoding", "gzip"),
                cookie,
            ],
        ];
        for blocks in [plain, huffman] {
            let mut d = Decoder::new(256);
            for ((block, want), size) in blocks.iter().zip(responses).zip([222, 222, 215]) {
                assert_eq!(decode(&mut d, &hex(block)).unwrap(), pairs(want));
                assert_eq!(d.table_size(), size);
            }
            assert_eq!(
                table(&d),
                pairs(&[
                    cookie,
                    ("content-encoding", "gzip"),
                    ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                ])
            );
        }
    }

    #[test]
    fn size_updates_and_bad_blocks() {
        let mut d = Decoder::new(256);
        decode(&mut d, &hex("4803 3330 32")).unwrap(); // :status 302, indexed
        assert_eq!(d.table_size(), 42);
        // Size update to 0 at the start evicts everything; then back to 256.
        assert!(decode(&mut d, &hex("20 3fe1 01 88")).is_ok());
        assert_eq!(d.table_size(), 0);
        let bad: [(&str, &str); 10] = [
            ("80", "index 0"),
            ("be", "beyond the dynamic table"),
            ("3fe2 01", "above SETTINGS_HEADER_TABLE_SIZE"), // 257 > 256
            ("88 20", "after a field"),
            ("ff", "truncated integer"),
            ("ff ff ff ff ff ff 7f", "too large"),
            ("ff 80 80 80 80 80 80 80 80 80 80 80 01", "too large"),
            ("40 05 61 62", "longer than the block"),
            ("40 81 00 00", "padding"), // Huffman name that is not valid
            ("00 01 61 81", "longer than the block"),
        ];
        for (block, reason) in bad {
            let mut d = Decoder::new(256);
            let e = decode(&mut d, &hex(block)).unwrap_err();
            assert_eq!(e.code, code::COMPRESSION_ERROR, "{block}");
            assert!(e.reason.contains(reason), "{block}: {}", e.reason);
        }
        // An entry larger than the table empties it and is not inserted.
        let mut d = Decoder::new(64);
        decode(&mut d, &hex("4803 3330 32")).unwrap();
        assert_eq!(d.table_size(), 42);
        let mut big = hex("40 0a");
        big.extend_from_slice(b"custom-key");
        big.push(40);
        big.extend_from_slice(&[b'v'; 40]);
        assert_eq!(decode(&mut d, &big).unwrap()[0].1.len(), 40);
        assert_eq!(d.table_size(), 0);
    }

    #[test]
    fn integers_above_the_limit_are_compression_errors() {
        let mut out = Vec::new();
        put_int(&mut out, 0, 5, MAX_INT);
        assert_eq!(read_int(&out, 5).unwrap(), (MAX_INT, out.len()));
        out.clear();
        put_int(&mut out, 0, 5, MAX_INT + 1);
        assert_eq!(read_int(&out, 5).unwrap_err().code, code::COMPRESSION_ERROR);
    }

    fn block(encoder: &mut Encoder, head: &RequestHead) -> Vec<u8> {
        let mut out = Vec::new();
        encoder.encode(head, &mut out);
        out
    }

    #[test]
    fn request_heads_index_path_and_authority() {
        let mut e = Encoder::default();
        let root = RequestHead::get("https", "a", "/");
        assert_eq!(block(&mut e, &root), hex("8287 84 41 0161"));
        assert_eq!(block(&mut e, &root), hex("8287 84 be"));
        // A server that allows no table: the size update comes first, then literals only.
        let mut d = Decoder::new(4096);
        let odd = RequestHead::get("h3x", "host", "/index.html");
        let mut e = Encoder::default();
        e.set_table_limit(0);
        let b = block(&mut e, &odd);
        assert_eq!(b[0], 0x20);
        let fields = decode(&mut d, &b).unwrap();
        assert_eq!(fields[1], (":scheme".into(), "h3x".into()));
        assert_eq!(fields[2], (":path".into(), "/index.html".into()));
        assert_eq!(d.table_size(), 0);
    }

    /// The encoder's copy of the table stays equal to the server's decoder, through many
    /// paths, evictions and changes of the server's limit.
    #[test]
    fn the_encoders_table_follows_the_decoders() {
        let mut e = Encoder::default();
        let mut d = Decoder::new(4096);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..3_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 500 == 499 {
                e.set_table_limit([0, 100, 300, 4096, 100_000][(x % 5) as usize]);
            }
            let path = format!("/{}", "p".repeat((x % 200) as usize));
            let authority = ["a", "bb", "host.example:8443"][(x >> 8) as usize % 3];
            let head = RequestHead::get("https", authority, &path);
            let fields = decode(&mut d, &block(&mut e, &head)).unwrap();
            assert_eq!(fields[2].1, path);
            assert_eq!(fields[3].1, authority);
            assert_eq!(d.table, e.table, "after request {i}");
        }
    }
}
