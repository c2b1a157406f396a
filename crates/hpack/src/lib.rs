//! HPACK's coding primitives, which QPACK shares: prefixed integers (RFC 7541 section 5.1) and
//! the static Huffman code (section 5.2, Appendix B). Used by `agentwire-h2wire` (HPACK) and
//! `agentwire-h3wire` (QPACK).
//!
//! This crate owns those two encodings only; it must not know about header tables, frames or
//! either protocol's errors (callers map [`IntError`] and [`HuffmanError`] to their own).

#![warn(missing_docs)]

use bytes::BufMut;

/// Appends a prefixed integer (RFC 7541 section 5.1, which QPACK shares) whose first byte
/// carries `flags` above its `prefix_bits` (1..=8) low bits.
///
/// ```
/// let mut out = Vec::new();
/// agentwire_hpack::put_prefix_int(&mut out, 0x80, 5, 1337); // RFC 7541 C.1.2
/// assert_eq!(out, [0x9f, 0x9a, 0x0a]);
/// ```
pub fn put_prefix_int(out: &mut impl BufMut, flags: u8, prefix_bits: u32, value: u64) {
    let mask = ((1u16 << prefix_bits) - 1) as u64;
    if value < mask {
        out.put_u8(flags | value as u8);
        return;
    }
    out.put_u8(flags | mask as u8);
    let mut rest = value - mask;
    while rest >= 0x80 {
        out.put_u8((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.put_u8(rest as u8);
}

/// Why a prefixed integer could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IntError {
    /// The input ends inside the integer.
    Truncated,
    /// The integer exceeds the caller's limit.
    TooLarge,
}

impl IntError {
    /// A short description.
    pub fn reason(self) -> &'static str {
        match self {
            IntError::Truncated => "truncated integer",
            IntError::TooLarge => "integer too large",
        }
    }
}

/// Decodes a prefixed integer (RFC 7541 section 5.1) whose first byte keeps its value in the
/// low `prefix_bits` (1..=8) bits; returns the value and the bytes it took. Values above `max`
/// are an error, and so is a longer run of continuation bytes than `max` needs (zero bytes as
/// padding included), so a peer cannot make the decoder read without end.
///
/// ```
/// use agentwire_hpack::{decode_prefix_int, IntError};
/// // RFC 7541 C.1.2: 1337 with a 5-bit prefix, after flag bits.
/// assert_eq!(decode_prefix_int(&[0x9f, 0x9a, 0x0a], 5, u64::from(u32::MAX)), Ok((1337, 3)));
/// assert_eq!(decode_prefix_int(&[0x0a], 5, 100), Ok((10, 1)));
/// assert_eq!(decode_prefix_int(&[0x1f, 0x9a], 5, 5000), Err(IntError::Truncated));
/// assert_eq!(decode_prefix_int(&[0x1f, 0x9a, 0x0a], 5, 1000), Err(IntError::TooLarge));
/// ```
pub fn decode_prefix_int(buf: &[u8], prefix_bits: u32, max: u64) -> Result<(u64, usize), IntError> {
    let first = *buf.first().ok_or(IntError::Truncated)?;
    let mask = (1u64 << prefix_bits) - 1;
    let mut value = u64::from(first) & mask;
    if value < mask {
        return if value > max {
            Err(IntError::TooLarge)
        } else {
            Ok((value, 1))
        };
    }
    // Continuation bytes carry 7 bits each: as many as `max` needs, and no more.
    let max_shift = (64 - max.leading_zeros()).div_ceil(7).saturating_sub(1) * 7;
    let mut shift = 0u32;
    for (i, byte) in buf.iter().enumerate().skip(1) {
        if shift > max_shift {
            return Err(IntError::TooLarge);
        }
        // In 128 bits no bit shifted out of 64 goes unseen.
        let wide = u128::from(value) + (u128::from(byte & 0x7f) << shift);
        value = u64::try_from(wide)
            .ok()
            .filter(|v| *v <= max)
            .ok_or(IntError::TooLarge)?;
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
        shift += 7;
    }
    Err(IntError::Truncated)
}

/// Why a Huffman-coded string could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HuffmanError {
    /// The string contains the EOS symbol.
    Eos,
    /// A run of 30 bits matches no code.
    InvalidCode,
    /// The string ends in more than 7 bits, or in bits that are not all ones.
    InvalidPadding,
}

impl HuffmanError {
    /// A short description.
    pub fn reason(self) -> &'static str {
        match self {
            HuffmanError::Eos => "Huffman string contains EOS",
            HuffmanError::InvalidCode => "invalid Huffman code",
            HuffmanError::InvalidPadding => "invalid Huffman padding",
        }
    }
}

/// Decodes a Huffman-coded string (the code of RFC 7541 Appendix B, which QPACK shares)
/// onto the end of `out`, so that a caller can reuse one buffer. On error, `out` may hold
/// part of the string.
///
/// ```
/// use agentwire_hpack::{huffman_decode_into, HuffmanError};
/// let mut out = b"x=".to_vec();
/// huffman_decode_into(&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf], &mut out).unwrap();
/// assert_eq!(out, b"x=no-cache");
/// assert_eq!(huffman_decode_into(&[0x00], &mut out), Err(HuffmanError::InvalidPadding));
/// ```
pub fn huffman_decode_into(input: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    let table = huffman_table();
    out.reserve(input.len() * 8 / 5);
    let mut code: u32 = 0;
    let mut len: u8 = 0;
    for byte in input {
        for shift in (0..8).rev() {
            code = (code << 1) | u32::from((byte >> shift) & 1);
            len += 1;
            if len < 5 {
                continue;
            }
            let l = usize::from(len);
            let offset = code.wrapping_sub(table.first_code[l]);
            if code >= table.first_code[l] && offset < table.count[l] {
                let symbol = table.symbols[table.start[l] + offset as usize];
                if symbol == 256 {
                    return Err(HuffmanError::Eos);
                }
                out.push(symbol as u8);
                code = 0;
                len = 0;
            } else if len >= 30 {
                return Err(HuffmanError::InvalidCode);
            }
        }
    }
    // What is left must be padding: fewer than 8 bits, all ones (a prefix of EOS).
    if len > 7 || code != (1u32 << len) - 1 {
        return Err(HuffmanError::InvalidPadding);
    }
    Ok(())
}

/// The canonical code's layout by length, built once from [`HUFFMAN_CODES`].
struct HuffmanTable {
    /// Lowest code of each length (index = length, 0..=30).
    first_code: [u32; 31],
    /// How many codes have each length.
    count: [u32; 31],
    /// Where each length's symbols begin in `symbols`.
    start: [usize; 31],
    /// Symbols ordered by (length, code).
    symbols: [u16; 257],
}

fn huffman_table() -> &'static HuffmanTable {
    static TABLE: std::sync::OnceLock<HuffmanTable> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut order: Vec<u16> = (0..257).collect();
        order.sort_by_key(|s| {
            let (code, len) = HUFFMAN_CODES[usize::from(*s)];
            (len, code)
        });
        let mut t = HuffmanTable {
            first_code: [u32::MAX; 31],
            count: [0; 31],
            start: [0; 31],
            symbols: [0; 257],
        };
        for (i, s) in order.iter().enumerate() {
            let (code, len) = HUFFMAN_CODES[usize::from(*s)];
            let l = usize::from(len);
            if t.count[l] == 0 {
                t.first_code[l] = code;
                t.start[l] = i;
            }
            t.count[l] += 1;
            t.symbols[i] = *s;
        }
        t
    })
}

/// RFC 7541 Appendix B: the Huffman code of each symbol (0..=255, then 256 = EOS) as
/// (code, length in bits).
const HUFFMAN_CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),
    (0x7fffd8, 23),
    (0xfffffe2, 28),
    (0xfffffe3, 28),
    (0xfffffe4, 28),
    (0xfffffe5, 28),
    (0xfffffe6, 28),
    (0xfffffe7, 28),
    (0xfffffe8, 28),
    (0xffffea, 24),
    (0x3ffffffc, 30),
    (0xfffffe9, 28),
    (0xfffffea, 28),
    (0x3ffffffd, 30),
    (0xfffffeb, 28),
    (0xfffffec, 28),
    (0xfffffed, 28),
    (0xfffffee, 28),
    (0xfffffef, 28),
    (0xffffff0, 28),
    (0xffffff1, 28),
    (0xffffff2, 28),
    (0x3ffffffe, 30),
    (0xffffff3, 28),
    (0xffffff4, 28),
    (0xffffff5, 28),
    (0xffffff6, 28),
    (0xffffff7, 28),
    (0xffffff8, 28),
    (0xffffff9, 28),
    (0xffffffa, 28),
    (0xffffffb, 28),
    (0x14, 6),
    (0x3f8, 10),
    (0x3f9, 10),
    (0xffa, 12),
    (0x1ff9, 13),
    (0x15, 6),
    (0xf8, 8),
    (0x7fa, 11),
    (0x3fa, 10),
    (0x3fb, 10),
    (0xf9, 8),
    (0x7fb, 11),
    (0xfa, 8),
    (0x16, 6),
    (0x17, 6),
    (0x18, 6),
    (0x0, 5),
    (0x1, 5),
    (0x2, 5),
    (0x19, 6),
    (0x1a, 6),
    (0x1b, 6),
    (0x1c, 6),
    (0x1d, 6),
    (0x1e, 6),
    (0x1f, 6),
    (0x5c, 7),
    (0xfb, 8),
    (0x7ffc, 15),
    (0x20, 6),
    (0xffb, 12),
    (0x3fc, 10),
    (0x1ffa, 13),
    (0x21, 6),
    (0x5d, 7),
    (0x5e, 7),
    (0x5f, 7),
    (0x60, 7),
    (0x61, 7),
    (0x62, 7),
    (0x63, 7),
    (0x64, 7),
    (0x65, 7),
    (0x66, 7),
    (0x67, 7),
    (0x68, 7),
    (0x69, 7),
    (0x6a, 7),
    (0x6b, 7),
    (0x6c, 7),
    (0x6d, 7),
    (0x6e, 7),
    (0x6f, 7),
    (0x70, 7),
    (0x71, 7),
    (0x72, 7),
    (0xfc, 8),
    (0x73, 7),
    (0xfd, 8),
    (0x1ffb, 13),
    (0x7fff0, 19),
    (0x1ffc, 13),
    (0x3ffc, 14),
    (0x22, 6),
    (0x7ffd, 15),
    (0x3, 5),
    (0x23, 6),
    (0x4, 5),
    (0x24, 6),
    (0x5, 5),
    (0x25, 6),
    (0x26, 6),
    (0x27, 6),
    (0x6, 5),
    (0x74, 7),
    (0x75, 7),
    (0x28, 6),
    (0x29, 6),
    (0x2a, 6),
    (0x7, 5),
    (0x2b, 6),
    (0x76, 7),
    (0x2c, 6),
    (0x8, 5),
    (0x9, 5),
    (0x2d, 6),
    (0x77, 7),
    (0x78, 7),
    (0x79, 7),
    (0x7a, 7),
    (0x7b, 7),
    (0x7ffe, 15),
    (0x7fc, 11),
    (0x3ffd, 14),
    (0x1ffd, 13),
    (0xffffffc, 28),
    (0xfffe6, 20),
    (0x3fffd2, 22),
    (0xfffe7, 20),
    (0xfffe8, 20),
    (0x3fffd3, 22),
    (0x3fffd4, 22),
    (0x3fffd5, 22),
    (0x7fffd9, 23),
    (0x3fffd6, 22),
    (0x7fffda, 23),
    (0x7fffdb, 23),
    (0x7fffdc, 23),
    (0x7fffdd, 23),
    (0x7fffde, 23),
    (0xffffeb, 24),
    (0x7fffdf, 23),
    (0xffffec, 24),
    (0xffffed, 24),
    (0x3fffd7, 22),
    (0x7fffe0, 23),
    (0xffffee, 24),
    (0x7fffe1, 23),
    (0x7fffe2, 23),
    (0x7fffe3, 23),
    (0x7fffe4, 23),
    (0x1fffdc, 21),
    (0x3fffd8, 22),
    (0x7fffe5, 23),
    (0x3fffd9, 22),
    (0x7fffe6, 23),
    (0x7fffe7, 23),
    (0xffffef, 24),
    (0x3fffda, 22),
    (0x1fffdd, 21),
    (0xfffe9, 20),
    (0x3fffdb, 22),
    (0x3fffdc, 22),
    (0x7fffe8, 23),
    (0x7fffe9, 23),
    (0x1fffde, 21),
    (0x7fffea, 23),
    (0x3fffdd, 22),
    (0x3fffde, 22),
    (0xfffff0, 24),
    (0x1fffdf, 21),
    (0x3fffdf, 22),
    (0x7fffeb, 23),
    (0x7fffec, 23),
    (0x1fffe0, 21),
    (0x1fffe1, 21),
    (0x3fffe0, 22),
    (0x1fffe2, 21),
    (0x7fffed, 23),
    (0x3fffe1, 22),
    (0x7fffee, 23),
    (0x7fffef, 23),
    (0xfffea, 20),
    (0x3fffe2, 22),
    (0x3fffe3, 22),
    (0x3fffe4, 22),
    (0x7ffff0, 23),
    (0x3fffe5, 22),
    (0x3fffe6, 22),
    (0x7ffff1, 23),
    (0x3ffffe0, 26),
    (0x3ffffe1, 26),
    (0xfffeb, 20),
    (0x7fff1, 19),
    (0x3fffe7, 22),
    (0x7ffff2, 23),
    (0x3fffe8, 22),
    (0x1ffffec, 25),
    (0x3ffffe2, 26),
    (0x3ffffe3, 26),
    (0x3ffffe4, 26),
    (0x7ffffde, 27),
    (0x7ffffdf, 27),
    (0x3ffffe5, 26),
    (0xfffff1, 24),
    (0x1ffffed, 25),
    (0x7fff2, 19),
    (0x1fffe3, 21),
    (0x3ffffe6, 26),
    (0x7ffffe0, 27),
    (0x7ffffe1, 27),
    (0x3ffffe7, 26),
    (0x7ffffe2, 27),
    (0xfffff2, 24),
    (0x1fffe4, 21),
    (0x1fffe5, 21),
    (0x3ffffe8, 26),
    (0x3ffffe9, 26),
    (0xffffffd, 28),
    (0x7ffffe3, 27),
    (0x7ffffe4, 27),
    (0x7ffffe5, 27),
    (0xfffec, 20),
    (0xfffff3, 24),
    (0xfffed, 20),
    (0x1fffe6, 21),
    (0x3fffe9, 22),
    (0x1fffe7, 21),
    (0x1fffe8, 21),
    (0x7ffff3, 23),
    (0x3fffea, 22),
    (0x3fffeb, 22),
    (0x1ffffee, 25),
    (0x1ffffef, 25),
    (0xfffff4, 24),
    (0xfffff5, 24),
    (0x3ffffea, 26),
    (0x7ffff4, 23),
    (0x3ffffeb, 26),
    (0x7ffffe6, 27),
    (0x3ffffec, 26),
    (0x3ffffed, 26),
    (0x7ffffe7, 27),
    (0x7ffffe8, 27),
    (0x7ffffe9, 27),
    (0x7ffffea, 27),
    (0x7ffffeb, 27),
    (0xffffffe, 28),
    (0x7ffffec, 27),
    (0x7ffffed, 27),
    (0x7ffffee, 27),
    (0x7ffffef, 27),
    (0x7fffff0, 27),
    (0x3ffffee, 26),
    (0x3fffffff, 30),
];

/// Huffman-encodes `input` (RFC 7541 Appendix B), padding the last byte with ones. agentwire's
/// servers never encode; tests and fuzzers use it for round trips.
///
/// ```
/// use agentwire_hpack::{huffman_decode_into, huffman_encode};
/// assert_eq!(huffman_encode(b"no-cache"), [0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf]);
/// let mut out = Vec::new();
/// huffman_decode_into(&huffman_encode(b"www.example.com"), &mut out).unwrap();
/// assert_eq!(out, b"www.example.com");
/// ```
pub fn huffman_encode(input: &[u8]) -> Vec<u8> {
    let (mut acc, mut bits, mut out) = (0u64, 0u32, Vec::new());
    for b in input {
        let (code, len) = HUFFMAN_CODES[usize::from(*b)];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            out.push((acc >> (bits - 8)) as u8);
            bits -= 8;
        }
    }
    if bits > 0 {
        out.push(((acc << (8 - bits)) as u8) | ((1u8 << (8 - bits)) - 1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ints_round_trip_and_keep_their_limits() {
        for prefix in 1..=8u32 {
            for value in [
                0u64,
                1,
                30,
                31,
                127,
                128,
                255,
                256,
                1337,
                16_383,
                1 << 20,
                u64::from(u32::MAX),
            ] {
                let mut out = Vec::new();
                put_prefix_int(&mut out, 0, prefix, value);
                assert_eq!(
                    decode_prefix_int(&out, prefix, u64::from(u32::MAX)),
                    Ok((value, out.len())),
                    "{value} with a {prefix}-bit prefix"
                );
            }
        }
        // Padding with zero continuation bytes beyond what the limit needs is refused.
        let padded = [0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(
            decode_prefix_int(&padded, 5, u64::from(u32::MAX)),
            Err(IntError::TooLarge)
        );
        let huge = [
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ];
        assert_eq!(
            decode_prefix_int(&huge, 8, u64::MAX),
            Err(IntError::TooLarge)
        );
        // A bit shifted past 64 is an error, not lost.
        let past = [
            0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02,
        ];
        assert_eq!(
            decode_prefix_int(&past, 8, u64::MAX),
            Err(IntError::TooLarge)
        );
        assert_eq!(decode_prefix_int(&[], 5, 10), Err(IntError::Truncated));
    }

    #[test]
    fn huffman_round_trips_every_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let mut out = Vec::new();
        huffman_decode_into(&huffman_encode(&all), &mut out).unwrap();
        assert_eq!(out, all);
    }
}
