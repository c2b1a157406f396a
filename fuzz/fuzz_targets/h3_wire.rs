//! Fuzzes `agentwire serve`'s HTTP/3 wire format (agentwire-h3wire): request streams fed in
//! pieces of every size, header sections, Huffman strings and client unidirectional streams.
//! Nothing may panic, and a request stream gives the same answer however it is split.
#![no_main]

use agentwire_h3wire::{decode_request, huffman_decode, RequestProgress, RequestReader, UniReader};
use libfuzzer_sys::fuzz_target;

fn read_request(data: &[u8], piece: usize) -> Option<Result<(String, String), u64>> {
    let mut reader = RequestReader::default();
    for chunk in data.chunks(piece.max(1)) {
        match reader.push(chunk) {
            Ok(RequestProgress::NeedMore) => {}
            Ok(RequestProgress::Head(head)) => {
                return Some(Ok((head.method.to_string(), head.path)));
            }
            Err(e) => return Some(Err(e.code)),
        }
    }
    None
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let whole = read_request(rest, rest.len());
    let split = read_request(rest, usize::from(first % 16) + 1);
    assert_eq!(whole, split, "the answer depends on how the stream was split");
    let _ = decode_request(rest);
    let _ = huffman_decode(rest);
    let mut uni = UniReader::default();
    for chunk in rest.chunks(usize::from(first % 7) + 1) {
        if uni.push(chunk).is_err() {
            break;
        }
    }
    let _ = uni.ended();
});
