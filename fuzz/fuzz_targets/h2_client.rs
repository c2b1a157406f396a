//! Fuzzes `agentwire load`'s HTTP/2 client connection (agentwire-h2wire): the server's bytes,
//! after its SETTINGS, fed whole and in pieces of every size to a connection with a few
//! streams open, and the same bytes as an HPACK block. Nothing may panic, and the events, the
//! bytes the client would write and the connection error must not depend on the split.
#![no_main]

use agentwire_h2wire::{hpack::Decoder, ClientConn, ClientSettings, RequestHead};
use libfuzzer_sys::fuzz_target;

fn run(data: &[u8], piece: usize) -> (Vec<String>, Vec<u8>, Option<u32>) {
    let mut conn = ClientConn::new(ClientSettings {
        stream_window: 1000,
        ..ClientSettings::default()
    });
    for path in ["/", "/a", "/b"] {
        let _ = conn.open(&RequestHead::get("https", "h", path));
    }
    let n = conn.output().len();
    conn.consume_output(n);
    let mut events = Vec::new();
    let mut pending: Vec<u8> = vec![0, 0, 0, 4, 0, 0, 0, 0, 0]; // the server's SETTINGS
    let mut error = None;
    for chunk in data.chunks(piece.max(1)) {
        pending.extend_from_slice(chunk);
        match conn.recv(&pending, &mut |e| events.push(format!("{e:?}"))) {
            Ok(used) => {
                pending.drain(..used);
            }
            Err(e) => {
                error = Some(e.code);
                break;
            }
        }
    }
    (events, conn.output().to_vec(), error)
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let whole = run(rest, rest.len());
    let split = run(rest, usize::from(first % 32) + 1);
    assert_eq!(whole, split, "the outcome depends on how the input was split");
    let _ = Decoder::new(usize::from(first) * 16).decode(rest, &mut |_, _| {});
});
