//! Feeds arbitrary bytes to `FrameDecoder` in arbitrary chunks, decodes every frame with both
//! codecs, and checks that every envelope that decodes survives a re-encode/re-decode round
//! trip unchanged. Also runs every frame through the hub's handshake.
#![no_main]

use agentwire_proto::{
    Codec, Frame, FrameDecoder, HubDecision, HubHandshake, HubPolicy, RawFrame,
};
use libfuzzer_sys::fuzz_target;

fn check(raw: &RawFrame) {
    for codec in Codec::ALL {
        let Ok(frame) = Frame::decode(raw, codec) else {
            continue;
        };
        if let Frame::Envelope(env) = &frame {
            let bytes = frame.encode(codec).expect("a decoded envelope re-encodes");
            let again = FrameDecoder::decode_one(bytes, u32::MAX).expect("one whole frame");
            assert_eq!(again.type_byte, raw.type_byte);
            match Frame::decode(&again, codec) {
                Ok(Frame::Envelope(env2)) => assert_eq!(&env2, env, "round trip with {codec}"),
                other => panic!("re-encoded envelope did not decode with {codec}: {other:?}"),
            }
        }
    }
    let hub = HubHandshake::new(HubPolicy::default());
    let reply = match hub.on_frame(raw, 1) {
        HubDecision::Accept { reply, .. } | HubDecision::Reject { reply, .. } => reply,
    };
    assert!(FrameDecoder::decode_one(reply, u32::MAX).is_ok());
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunk size (1..=256) the rest of the input is fed in.
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(first) + 1;
    let mut decoder = FrameDecoder::new(1 << 16);
    'feed: for piece in rest.chunks(chunk) {
        decoder.push(piece);
        loop {
            match decoder.next_frame() {
                Ok(Some(raw)) => check(&raw),
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
    }
    let _ = decoder.finish();
});
