//! Property tests: round trips of arbitrary envelopes through both codecs and the framing
//! layer, and "never panics" on arbitrary input for the decoder and the hub handshake.

use std::collections::BTreeMap;

use agentwire_proto::{
    AgentHandshake, Codec, Destination, Envelope, EnvelopeView, ErrorCode, Frame, FrameDecoder,
    FrameError, Goodbye, Heartbeat, Hello, HubDecision, HubHandshake, HubPolicy, Kind, Priority,
    RawFrame, Reject, Welcome,
};
use bytes::Bytes;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::select;

const MAX: u32 = 1 << 20;

fn destination() -> impl Strategy<Value = Destination> {
    prop_oneof![
        any::<String>().prop_map(Destination::Agent),
        any::<String>().prop_map(Destination::Topic),
        Just(Destination::Broadcast),
        ".{0,300}".prop_map(Destination::Queue),
    ]
}

fn envelope() -> impl Strategy<Value = Envelope> {
    (
        (
            any::<u64>(),
            any::<String>(),
            destination(),
            select(Kind::ALL.to_vec()),
            select(Priority::ALL.to_vec()),
        ),
        (
            any::<u32>(),
            any::<u64>(),
            any::<Option<u64>>(),
            btree_map(any::<String>(), any::<String>(), 0..6),
            // Bodies across MessagePack's bin 8 / 16 / 32 boundaries.
            prop_oneof![
                4 => vec(any::<u8>(), 0..300),
                1 => vec(any::<u8>(), 65_530..65_540),
            ],
        ),
    )
        .prop_map(
            |(
                (id, from, to, kind, priority),
                (ttl_ms, timestamp_us, correlation, headers, body),
            )| Envelope {
                id,
                from,
                to,
                kind,
                priority,
                ttl_ms,
                timestamp_us,
                correlation,
                headers: headers.into_iter().collect::<BTreeMap<_, _>>(),
                body: Bytes::from(body),
            },
        )
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    select(ErrorCode::ALL.to_vec())
}

fn hello() -> impl Strategy<Value = Hello> {
    (
        (any::<u16>(), any::<u16>(), any::<String>(), any::<String>()),
        (
            vec(any::<String>(), 0..3),
            vec(
                prop_oneof![
                    Just("msgpack".to_owned()),
                    Just("json".to_owned()),
                    any::<String>()
                ],
                0..3,
            ),
            any::<Option<String>>(),
            any::<u32>(),
        ),
    )
        .prop_map(
            |(
                (version_min, version_max, agent_id, role),
                (capabilities, codecs, auth_token, max_frame_size),
            )| Hello {
                version_min,
                version_max,
                agent_id,
                role,
                capabilities,
                codecs,
                auth_token,
                max_frame_size,
            },
        )
}

fn welcome() -> impl Strategy<Value = Welcome> {
    (
        any::<u16>(),
        select(vec!["msgpack", "json"]),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        vec(any::<String>(), 0..3),
    )
        .prop_map(
            |(version, codec, session_id, max_frame_size, heartbeat_interval_ms, capabilities)| {
                Welcome {
                    version,
                    codec: codec.to_owned(),
                    session_id,
                    max_frame_size,
                    heartbeat_interval_ms,
                    capabilities,
                }
            },
        )
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        4 => envelope().prop_map(Frame::Envelope),
        1 => hello().prop_map(Frame::Hello),
        1 => welcome().prop_map(Frame::Welcome),
        1 => (any::<u32>(), any::<String>())
            .prop_map(|(code, reason)| Frame::Reject(Reject { code, reason })),
        1 => any::<String>().prop_map(Frame::Subscribe),
        1 => any::<String>().prop_map(Frame::Unsubscribe),
        1 => (any::<u64>(), any::<u64>())
            .prop_map(|(seq, timestamp_us)| Frame::Heartbeat(Heartbeat { seq, timestamp_us })),
        1 => (error_code(), any::<String>())
            .prop_map(|(code, reason)| Frame::Goodbye(Goodbye { code, reason })),
    ]
}

/// Feeds `bytes` to a decoder in pieces cut at `cuts` (positions taken modulo the length) and
/// returns every frame, checking that the stream ends on a frame boundary.
/// Feeds `bytes` cut at `cuts`, each piece copied (`push`) or handed over (`push_bytes`) as
/// `owned` says, piece by piece.
fn decode_chunked(bytes: &[u8], cuts: &[usize], owned: &[bool]) -> Vec<RawFrame> {
    decode_chunked_draining(bytes, cuts, owned, &[])
}

/// As [`decode_chunked`], but frames are taken after piece `i` only when `hold[i]` is not
/// true (several pieces may arrive before the reader looks), and at the end.
fn decode_chunked_draining(
    bytes: &[u8],
    cuts: &[usize],
    owned: &[bool],
    hold: &[bool],
) -> Vec<RawFrame> {
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|c| c % (bytes.len() + 1))
        .chain([0, bytes.len()])
        .collect();
    points.sort_unstable();
    points.dedup();
    let mut dec = FrameDecoder::new(MAX);
    let mut out = Vec::new();
    for (i, w) in points.windows(2).enumerate() {
        if owned.get(i).copied().unwrap_or(false) {
            dec.push_bytes(Bytes::copy_from_slice(&bytes[w[0]..w[1]]));
        } else {
            dec.push(&bytes[w[0]..w[1]]);
        }
        if hold.get(i).copied().unwrap_or(false) {
            continue;
        }
        while let Some(raw) = dec.next_frame().unwrap() {
            out.push(raw);
        }
    }
    while let Some(raw) = dec.next_frame().unwrap() {
        out.push(raw);
    }
    assert_eq!(dec.finish(), Ok(()));
    out
}

/// Drains a decoder fed with arbitrary bytes and decodes whatever frames come out.
/// `payload` with the bytes at `flips` (positions taken modulo its length) XORed with their
/// values, then cut at `truncate` (modulo its length plus one): an envelope damaged in
/// transit or by a peer that lies.
fn damage(mut payload: Vec<u8>, flips: Vec<(usize, u8)>, truncate: Option<usize>) -> Vec<u8> {
    for (at, x) in flips {
        if !payload.is_empty() {
            let i = at % payload.len();
            payload[i] ^= x;
        }
    }
    if let Some(t) = truncate {
        payload.truncate(t % (payload.len() + 1));
    }
    payload
}

fn drain_and_decode(dec: &mut FrameDecoder) -> Result<(), FrameError> {
    while let Some(raw) = dec.next_frame()? {
        for codec in Codec::ALL {
            if let Ok(Frame::Envelope(env)) = Frame::decode(&raw, codec) {
                // Whatever decodes must re-encode and decode to the same value.
                let again = Frame::Envelope(env.clone()).encode(codec).unwrap();
                let raw2 = FrameDecoder::decode_one(again, u32::MAX).unwrap();
                assert_eq!(Frame::decode(&raw2, codec).unwrap(), Frame::Envelope(env));
            }
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn envelope_round_trips_through_both_codecs(env in envelope()) {
        for codec in Codec::ALL {
            let bytes = codec.encode_envelope(&env).unwrap();
            prop_assert_eq!(&codec.decode::<Envelope>(&bytes).unwrap(), &env);
        }
    }

    #[test]
    fn frames_round_trip_through_decoder_with_any_chunking(
        frames in vec(frame(), 1..6),
        cuts in vec(any::<usize>(), 0..12),
        owned in vec(any::<bool>(), 0..13),
        json in any::<bool>(),
    ) {
        let codec = if json { Codec::Json } else { Codec::MsgPack };
        let mut stream = Vec::new();
        for f in &frames {
            f.encode_into(codec, &mut stream).unwrap();
        }
        let raws = decode_chunked(&stream, &cuts, &owned);
        let decoded: Vec<Frame> = raws.iter().map(|r| Frame::decode(r, codec).unwrap()).collect();
        prop_assert_eq!(decoded, frames);
    }

    #[test]
    fn the_size_hint_covers_the_messagepack_encoding(env in envelope()) {
        let encoded = Codec::MsgPack.encode_envelope(&env).unwrap();
        prop_assert!(encoded.len() <= env.encoded_len_hint(Codec::MsgPack));
    }

    #[test]
    fn frames_round_trip_when_pieces_arrive_before_the_reader_looks(
        frames in vec(frame(), 1..6),
        cuts in vec(any::<usize>(), 0..12),
        owned in vec(any::<bool>(), 0..13),
        hold in vec(any::<bool>(), 0..13),
    ) {
        let mut stream = Vec::new();
        for f in &frames {
            f.encode_into(Codec::MsgPack, &mut stream).unwrap();
        }
        let raws = decode_chunked_draining(&stream, &cuts, &owned, &hold);
        let decoded: Vec<Frame> =
            raws.iter().map(|r| Frame::decode(r, Codec::MsgPack).unwrap()).collect();
        prop_assert_eq!(decoded, frames);
    }

    #[test]
    fn single_frame_round_trips_through_decode_one(f in frame(), json in any::<bool>()) {
        let codec = if json { Codec::Json } else { Codec::MsgPack };
        let bytes = f.encode(codec).unwrap();
        let raw = FrameDecoder::decode_one(bytes, u32::MAX).unwrap();
        prop_assert_eq!(Frame::decode(&raw, codec).unwrap(), f);
    }

    #[test]
    fn random_bytes_never_panic_the_decoder(
        bytes in vec(any::<u8>(), 0..512),
        cuts in vec(any::<usize>(), 0..8),
        max in prop_oneof![Just(0u32), Just(64), Just(1024), Just(u32::MAX)],
    ) {
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        points.extend([0, bytes.len()]);
        points.sort_unstable();
        points.dedup();
        let mut dec = FrameDecoder::new(max);
        for w in points.windows(2) {
            dec.push(&bytes[w[0]..w[1]]);
            if drain_and_decode(&mut dec).is_err() {
                break;
            }
        }
        let _ = dec.finish();
        let _ = FrameDecoder::decode_one(Bytes::from(bytes), max);
    }

    #[test]
    fn random_payloads_never_panic_frame_decode(type_byte in any::<u8>(), payload in vec(any::<u8>(), 0..256)) {
        let raw = RawFrame::new(type_byte, Bytes::from(payload));
        for codec in Codec::ALL {
            let _ = Frame::decode(&raw, codec);
        }
    }

    #[test]
    fn random_payloads_never_panic_the_handshakes(
        type_byte in prop_oneof![Just(0x01u8), Just(0x02), Just(0x03), any::<u8>()],
        payload in vec(any::<u8>(), 0..256),
    ) {
        let raw = RawFrame::new(type_byte, Bytes::from(payload));
        let hub = HubHandshake::new(HubPolicy { auth_token: Some("t".into()), ..HubPolicy::default() });
        let reply = match hub.on_frame(&raw, 7) {
            HubDecision::Accept { reply, .. } | HubDecision::Reject { reply, .. } => reply,
        };
        // Whatever the hub answers is a well-formed welcome or reject frame.
        let answer = FrameDecoder::decode_one(reply, MAX).unwrap();
        prop_assert!(matches!(
            Frame::decode(&answer, Codec::MsgPack).unwrap(),
            Frame::Welcome(_) | Frame::Reject(_)
        ));
        let mut agent = AgentHandshake::new(Hello::new("a", "r"));
        let _ = agent.on_frame(&raw);
    }

    #[test]
    fn mutated_hellos_never_panic_the_hub(
        hello in hello(),
        flips in vec((any::<usize>(), any::<u8>()), 0..4),
        truncate in any::<Option<usize>>(),
    ) {
        let bytes = Frame::Hello(hello).encode(Codec::MsgPack).unwrap();
        let mut payload = bytes[5..].to_vec();
        for (at, x) in flips {
            if !payload.is_empty() {
                let i = at % payload.len();
                payload[i] ^= x;
            }
        }
        if let Some(t) = truncate {
            payload.truncate(t % (payload.len() + 1));
        }
        let raw = RawFrame::new(0x01, Bytes::from(payload));
        let hub = HubHandshake::new(HubPolicy::default());
        match hub.on_frame(&raw, 1) {
            HubDecision::Accept { session, .. } => {
                prop_assert!(!session.agent_id.is_empty());
                prop_assert!(session.max_frame_size >= 64);
            }
            HubDecision::Reject { code, .. } => prop_assert_ne!(code, ErrorCode::Normal),
        }
    }
}

proptest! {
    /// Valid envelopes with a few bytes flipped or cut: whatever still decodes must survive a
    /// re-encode/re-decode round trip unchanged, and nothing panics.
    #[test]
    fn mutated_envelopes_round_trip_or_fail_cleanly(
        env in envelope(),
        json in any::<bool>(),
        flips in vec((any::<usize>(), any::<u8>()), 1..4),
        truncate in any::<Option<usize>>(),
    ) {
        let codec = if json { Codec::Json } else { Codec::MsgPack };
        let mut payload = codec.encode_envelope(&env).unwrap();
        for (at, x) in flips {
            if !payload.is_empty() {
                let i = at % payload.len();
                payload[i] ^= x;
            }
        }
        if let Some(t) = truncate {
            payload.truncate(t % (payload.len() + 1));
        }
        let raw = RawFrame::new(0x10, Bytes::from(payload));
        let mut dec = FrameDecoder::new(MAX);
        let mut bytes = (u32::try_from(raw.payload.len()).unwrap() + 1).to_be_bytes().to_vec();
        bytes.push(raw.type_byte);
        bytes.extend_from_slice(&raw.payload);
        dec.push(&bytes);
        prop_assert_eq!(drain_and_decode(&mut dec), Ok(()));
    }
}

proptest! {
    /// The hub forwards a frame it only read the routing header of: whatever
    /// `EnvelopeView::parse` accepts, every receiver's full decode must accept too, with the
    /// same header. Checked on valid envelopes and on envelopes with bytes flipped or cut.
    #[test]
    fn what_the_view_accepts_decodes_fully(
        env in envelope(),
        flips in vec((any::<usize>(), any::<u8>()), 0..4),
        truncate in any::<Option<usize>>(),
    ) {
        let payload = damage(Codec::MsgPack.encode_envelope(&env).unwrap(), flips, truncate);
        let payload = Bytes::from(payload);
        if let Some(view) = EnvelopeView::parse(&payload) {
            let full = Codec::MsgPack.decode_envelope(&payload);
            prop_assert!(full.is_ok(), "view accepted what the decoder refuses: {:?}", full);
            let full = full.unwrap();
            prop_assert_eq!(view, EnvelopeView::of(&full));
        }
    }
}

proptest! {
    /// The hand-written reader under `decode_envelope` and `EnvelopeView::parse` reads what
    /// serde reads, on valid envelopes and on envelopes with bytes flipped or cut: never an
    /// envelope serde refuses, never other values (`Codec::decode` is serde alone).
    #[test]
    fn the_hand_reader_agrees_with_serde(
        env in envelope(),
        flips in vec((any::<usize>(), any::<u8>()), 0..4),
        truncate in any::<Option<usize>>(),
    ) {
        let valid = Codec::MsgPack.encode_envelope(&env).unwrap();
        let payload = damage(valid.clone(), flips, truncate);
        let serde = Codec::MsgPack.decode::<Envelope>(&payload).ok();
        let fast = Codec::MsgPack.decode_envelope(&Bytes::from(payload.clone())).ok();
        prop_assert_eq!(&fast, &serde);
        if let Some(view) = EnvelopeView::parse(&payload) {
            let slow = serde.expect("serde accepts what the view accepts");
            // A flip may make two header keys equal: the view counts both entries, the map
            // keeps the later one.
            let of = EnvelopeView::of(&slow);
            prop_assert!(view.header_count >= of.header_count);
            prop_assert!(view.header_bytes >= of.header_bytes);
            let headers = |v: EnvelopeView<'_>| (v.header_count, v.header_bytes);
            prop_assert_eq!(
                EnvelopeView { header_count: 0, header_bytes: 0, ..view },
                EnvelopeView { header_count: 0, header_bytes: 0, ..of }
            );
            if view.header_count == slow.headers.len() {
                prop_assert_eq!(headers(view), headers(of));
            }
        }
        if payload == valid {
            prop_assert_eq!(fast, Some(env));
        }
    }
}
