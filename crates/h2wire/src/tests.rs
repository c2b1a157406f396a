//! Tests of the client connection: every frame type, every connection and stream error, flow
//! control, and that any split of the input gives the same result.

use super::*;

fn fr(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.push(ty);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn settings(items: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (id, v) in items {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    fr(frame::SETTINGS, 0, 0, &p)
}

const END_STREAM: u8 = flag::END_STREAM;
const END_HEADERS: u8 = flag::END_HEADERS;

/// `:status 200` (static index 8).
const STATUS_200: &[u8] = &[0x88];

/// `:status 200`, then `content-length: N` as a literal with incremental indexing.
fn head_with_length(n: u64) -> Vec<u8> {
    let digits = n.to_string();
    let mut b = vec![0x88, 0x40 | 28, digits.len() as u8];
    b.extend_from_slice(digits.as_bytes());
    b
}

struct Harness {
    conn: ClientConn,
    events: Vec<String>,
}

impl Harness {
    fn new(settings: ClientSettings) -> Self {
        let mut conn = ClientConn::new(settings);
        let n = conn.output().len();
        conn.consume_output(n);
        Harness {
            conn,
            events: Vec::new(),
        }
    }

    /// A connection that has seen the server's (empty) SETTINGS.
    fn ready() -> Self {
        let mut h = Harness::new(ClientSettings::default());
        h.feed(&settings(&[])).unwrap();
        h.take_output();
        h
    }

    fn open(&mut self) -> StreamId {
        let id = self
            .conn
            .open(&RequestHead::get("https", "h", "/x"))
            .unwrap();
        self.take_output();
        id
    }

    fn feed(&mut self, input: &[u8]) -> Result<(), H2Error> {
        let events = &mut self.events;
        let used = self
            .conn
            .recv(input, &mut |e| events.push(format!("{e:?}")))?;
        assert_eq!(used, input.len(), "all complete frames are used");
        Ok(())
    }

    fn take_output(&mut self) -> Vec<u8> {
        let out = self.conn.output().to_vec();
        self.conn.consume_output(out.len());
        out
    }
}

/// Splits `out` into frames: (type, flags, stream, payload).
fn frames(mut out: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut list = Vec::new();
    while out.len() >= 9 {
        let len = (usize::from(out[0]) << 16) | (usize::from(out[1]) << 8) | usize::from(out[2]);
        let stream = u32::from_be_bytes([out[5], out[6], out[7], out[8]]);
        list.push((out[3], out[4], stream, out[9..9 + len].to_vec()));
        out = &out[9 + len..];
    }
    assert!(out.is_empty());
    list
}

#[test]
fn the_preface_announces_settings_and_the_connection_window() {
    let conn = ClientConn::new(ClientSettings {
        stream_window: 1 << 20,
        conn_window: 1 << 24,
        header_table_size: 8192,
        max_header_list_size: 1000,
    });
    let out = conn.output();
    assert!(out.starts_with(PREFACE));
    let list = frames(&out[PREFACE.len()..]);
    assert_eq!(list.len(), 2);
    assert_eq!(
        list[0],
        (
            frame::SETTINGS,
            0,
            0,
            [
                &[0, 1, 0, 0, 0x20, 0][..],
                &[0, 2, 0, 0, 0, 0],
                &[0, 4, 0, 0x10, 0, 0],
                &[0, 6, 0, 0, 0x03, 0xe8]
            ]
            .concat()
        )
    );
    let inc = (1u32 << 24) - 65_535;
    assert_eq!(
        list[1],
        (frame::WINDOW_UPDATE, 0, 0, inc.to_be_bytes().to_vec())
    );
    assert_eq!(conn.queued_total(), out.len() as u64);
    // The default windows need no WINDOW_UPDATE.
    let plain = ClientConn::new(ClientSettings::default());
    assert_eq!(frames(&plain.output()[PREFACE.len()..]).len(), 1);
}

#[test]
fn a_response_arrives_in_pieces_and_windows_are_given_back() {
    let mut h = Harness::new(ClientSettings {
        stream_window: 100,
        ..ClientSettings::default()
    });
    h.feed(&settings(&[(setting::MAX_CONCURRENT_STREAMS, 10)]))
        .unwrap();
    assert_eq!(
        frames(&h.take_output()),
        [(frame::SETTINGS, flag::ACK, 0, vec![])]
    );
    let id = h.open();
    assert_eq!(id, StreamId(1));
    h.feed(&fr(frame::HEADERS, END_HEADERS, 1, &head_with_length(120)))
        .unwrap();
    h.feed(&fr(frame::DATA, 0, 1, &[7; 60])).unwrap();
    // 60 >= 100 / 2: the stream's window is given back, not yet the connection's.
    assert_eq!(
        frames(&h.take_output()),
        [(frame::WINDOW_UPDATE, 0, 1, 60u32.to_be_bytes().to_vec())]
    );
    h.feed(&fr(frame::DATA, END_STREAM, 1, &[7; 60])).unwrap();
    assert!(
        h.take_output().is_empty(),
        "no update for a stream that ended"
    );
    assert_eq!(
        h.events,
        [
            "Response { stream: StreamId(1), status: 200, content_length: Some(120), end_stream: false }",
            &format!("Data {{ stream: StreamId(1), data: {:?}, end_stream: false }}", [7u8; 60]),
            &format!("Data {{ stream: StreamId(1), data: {:?}, end_stream: true }}", [7u8; 60]),
        ]
    );
    assert_eq!(h.conn.open_streams(), 0);
    // The connection window: 65,535 / 2 bytes received in all brings an update.
    let mut total = 120;
    while total < 65_535 / 2 {
        let id = h.open();
        h.feed(&fr(frame::HEADERS, END_HEADERS, id.0, STATUS_200))
            .unwrap();
        h.feed(&fr(frame::DATA, END_STREAM, id.0, &[0; 90]))
            .unwrap();
        total += 90;
    }
    let updates: Vec<_> = frames(&h.take_output())
        .into_iter()
        .filter(|f| f.0 == frame::WINDOW_UPDATE && f.2 == 0)
        .collect();
    assert_eq!(
        updates,
        [(
            frame::WINDOW_UPDATE,
            0,
            0,
            (total as u32).to_be_bytes().to_vec()
        )]
    );
}

/// A transcript that uses every frame the client reads: it must give the same events and
/// output however it is split.
fn transcript() -> Vec<u8> {
    let mut t = settings(&[(setting::MAX_FRAME_SIZE, 20_000), (0x99, 1)]);
    t.extend(fr(frame::PING, 0, 0, b"12345678"));
    t.extend(fr(0xfa, 0x7, 0, b"unknown frames are ignored"));
    // Stream 1: a 103, then a head split over CONTINUATION with padding and priority.
    t.extend(fr(
        frame::HEADERS,
        END_HEADERS,
        1,
        &[0x08, 0x03, b'1', b'0', b'3'],
    ));
    let mut first = vec![2u8]; // pad length
    first.extend_from_slice(&[0, 0, 0, 0, 16]); // priority fields
    first.push(0x88);
    first.extend_from_slice(&[0, 0]);
    t.extend(fr(frame::HEADERS, flag::PADDED | flag::PRIORITY, 1, &first));
    t.extend(fr(frame::CONTINUATION, 0, 1, &[0x40 | 28, 1]));
    t.extend(fr(frame::CONTINUATION, END_HEADERS, 1, b"5"));
    t.extend(fr(frame::PRIORITY, 0, 1, &[0, 0, 0, 0, 1]));
    t.extend(fr(frame::DATA, flag::PADDED, 1, &[3, b'a', b'b', 0, 0, 0]));
    t.extend(fr(frame::DATA, 0, 1, b"cde"));
    t.extend(fr(
        frame::HEADERS,
        END_HEADERS | END_STREAM,
        1,
        &[0x40, 1, b'x', 1, b'y'],
    ));
    // Stream 3: the dynamic entry `content-length: 5` (index 63 now, after `x: y`).
    t.extend(fr(frame::HEADERS, END_HEADERS, 3, &[0x88, 0xbf]));
    t.extend(fr(frame::WINDOW_UPDATE, 0, 0, &[0, 0, 1, 0]));
    t.extend(fr(frame::WINDOW_UPDATE, 0, 3, &[0, 0, 1, 0]));
    t.extend(fr(
        frame::RST_STREAM,
        0,
        3,
        &code::INTERNAL_ERROR.to_be_bytes(),
    ));
    // Stream 5 refused, stream 7 above the GOAWAY's last stream.
    t.extend(fr(
        frame::RST_STREAM,
        0,
        5,
        &code::REFUSED_STREAM.to_be_bytes(),
    ));
    t.extend(fr(
        frame::GOAWAY,
        0,
        0,
        &[0, 0, 0, 5, 0, 0, 0, 0, b'b', b'y', b'e'],
    ));
    t
}

fn run_transcript(chunks: &[&[u8]]) -> (Vec<String>, Vec<u8>) {
    let mut h = Harness::new(ClientSettings::default());
    for _ in 0..4 {
        h.conn.open(&RequestHead::get("https", "h", "/")).unwrap();
    }
    h.take_output();
    let mut pending = Vec::new();
    for chunk in chunks {
        pending.extend_from_slice(chunk);
        let events = &mut h.events;
        let used = h
            .conn
            .recv(&pending, &mut |e| events.push(format!("{e:?}")))
            .unwrap();
        pending.drain(..used);
    }
    assert!(pending.is_empty());
    let out = h.take_output();
    (h.events, out)
}

#[test]
fn every_frame_type_in_one_transcript() {
    let t = transcript();
    let (events, out) = run_transcript(&[&t]);
    assert_eq!(
        events,
        [
            "Response { stream: StreamId(1), status: 200, content_length: Some(5), end_stream: false }",
            "Data { stream: StreamId(1), data: [97, 98], end_stream: false }",
            "Data { stream: StreamId(1), data: [99, 100, 101], end_stream: false }",
            "Trailers { stream: StreamId(1) }",
            "Response { stream: StreamId(3), status: 200, content_length: Some(5), end_stream: false }",
            "Reset { stream: StreamId(3), code: 2, by: Peer, reason: \"\" }",
            "Refused { stream: StreamId(5), by: ResetStream }",
            "Refused { stream: StreamId(7), by: GoAway }",
            "GoAway { last_stream: StreamId(5), code: 0, debug: [98, 121, 101] }",
        ]
    );
    assert_eq!(
        frames(&out),
        [
            (frame::SETTINGS, flag::ACK, 0, vec![]),
            (frame::PING, flag::ACK, 0, b"12345678".to_vec()),
        ]
    );
}

#[test]
fn any_split_of_the_input_gives_the_same_result() {
    let t = transcript();
    let whole = run_transcript(&[&t]);
    for cut in 0..=t.len() {
        assert_eq!(
            run_transcript(&[&t[..cut], &t[cut..]]),
            whole,
            "cut at {cut}"
        );
    }
    let bytes: Vec<&[u8]> = t.chunks(1).collect();
    assert_eq!(run_transcript(&bytes), whole);
}

#[test]
fn goaway_and_refusals_stop_new_streams() {
    let mut h = Harness::ready();
    assert_eq!(h.open(), StreamId(1));
    assert_eq!(h.open(), StreamId(3));
    h.feed(&fr(frame::GOAWAY, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0]))
        .unwrap();
    assert_eq!(
        h.conn.open(&RequestHead::get("https", "h", "/")),
        Err(Refusal::GoingAway)
    );
    assert_eq!(h.conn.open_streams(), 1, "stream 1 may still complete");
    // A second GOAWAY may not raise the last stream id.
    h.feed(&fr(frame::GOAWAY, 0, 0, &[0, 0, 0, 9, 0, 0, 0, 0]))
        .unwrap();
    assert!(h
        .events
        .last()
        .unwrap()
        .contains("last_stream: StreamId(1)"));
    h.feed(&fr(frame::HEADERS, END_HEADERS | END_STREAM, 1, STATUS_200))
        .unwrap();
    assert_eq!(h.conn.open_streams(), 0);
    // Our own graceful GOAWAY.
    let mut h = Harness::ready();
    h.conn.go_away(code::NO_ERROR);
    assert_eq!(
        frames(&h.take_output()),
        [(frame::GOAWAY, 0, 0, vec![0; 8])]
    );
    assert_eq!(
        h.conn.open(&RequestHead::get("https", "h", "/")),
        Err(Refusal::GoingAway)
    );
}

#[test]
fn max_concurrent_streams_is_respected() {
    let mut h = Harness::new(ClientSettings::default());
    h.feed(&settings(&[(setting::MAX_CONCURRENT_STREAMS, 1)]))
        .unwrap();
    let id = h.open();
    let head = RequestHead::get("https", "h", "/");
    assert_eq!(h.conn.can_open(), Err(Refusal::AtCapacity));
    assert_eq!(h.conn.open(&head), Err(Refusal::AtCapacity));
    h.feed(&fr(
        frame::HEADERS,
        END_HEADERS | END_STREAM,
        id.0,
        STATUS_200,
    ))
    .unwrap();
    assert_eq!(h.conn.open(&head), Ok(StreamId(3)));
}

#[test]
fn a_cancelled_stream_is_reset_and_its_frames_still_keep_hpack_in_step() {
    let mut h = Harness::ready();
    let id = h.open();
    h.conn.cancel(id);
    assert_eq!(
        frames(&h.take_output()),
        [(frame::RST_STREAM, 0, 1, code::CANCEL.to_be_bytes().to_vec())]
    );
    // The head for the cancelled stream inserts `content-length: 9` ...
    h.feed(&fr(frame::HEADERS, END_HEADERS, 1, &head_with_length(9)))
        .unwrap();
    h.feed(&fr(frame::DATA, END_STREAM, 1, b"123456789"))
        .unwrap();
    // ... which the next stream's head refers to.
    let next = h.open();
    h.feed(&fr(
        frame::HEADERS,
        END_HEADERS | END_STREAM,
        next.0,
        &[0x88, 0xbe],
    ))
    .unwrap();
    assert_eq!(
        h.events,
        ["Response { stream: StreamId(3), status: 200, content_length: Some(9), end_stream: true }"]
    );
    assert!(
        h.take_output().is_empty(),
        "nothing is sent for a cancelled stream's frames"
    );
}

#[test]
fn malformed_responses_reset_only_their_stream() {
    let cases: [(&[u8], u8, &str); 9] = [
        (
            &[0x40, 2, b':', b'x', 1, b'1'],
            END_HEADERS,
            "other than :status",
        ),
        (&[0x08, 2, b'2', b'0'], END_HEADERS, "three digits"),
        (
            &[0x40, 1, b'a', 0, 0x88],
            END_HEADERS,
            "pseudo-header after",
        ),
        (&[0x40, 1, b'a', 0], END_HEADERS, "no :status"),
        (&[0x88, 0x40, 1, b'A', 0], END_HEADERS, "upper case"),
        (&[0x88, 0x88], END_HEADERS, ":status twice"),
        (&[0x88, 0x0f, 0x0d, 1, b'x'], END_HEADERS, "content-length"),
        (
            &[0x88, 0x0f, 0x2a, 1, b'x'],
            END_HEADERS,
            "connection-specific",
        ),
        (
            &[0x08, 3, b'1', b'0', b'0'],
            END_HEADERS | END_STREAM,
            "informational",
        ),
    ];
    for (block, flags, reason) in cases {
        let mut h = Harness::ready();
        let id = h.open();
        let other = h.open();
        h.feed(&fr(frame::HEADERS, flags, id.0, block)).unwrap();
        assert_eq!(
            frames(&h.take_output()),
            [(
                frame::RST_STREAM,
                0,
                1,
                code::PROTOCOL_ERROR.to_be_bytes().to_vec()
            )],
            "{reason}"
        );
        assert!(h.events[0].contains(reason), "{reason}: {:?}", h.events);
        // The other stream is unaffected.
        h.feed(&fr(
            frame::HEADERS,
            END_HEADERS | END_STREAM,
            other.0,
            STATUS_200,
        ))
        .unwrap();
        assert!(
            h.events[1].starts_with("Response { stream: StreamId(3)"),
            "{reason}"
        );
    }
    // Stream-level errors in the body.
    let body_cases: [(Vec<u8>, &str); 4] = [
        (fr(frame::DATA, 0, 1, b"x"), "DATA before the response head"),
        (
            fr(frame::WINDOW_UPDATE, 0, 1, &[0, 0, 0, 0]),
            "WINDOW_UPDATE of 0",
        ),
        (
            [
                fr(frame::HEADERS, END_HEADERS, 1, STATUS_200),
                fr(frame::HEADERS, END_HEADERS, 1, &[0x40, 1, b'x', 0]),
            ]
            .concat(),
            "trailers without END_STREAM",
        ),
        (
            [
                fr(frame::HEADERS, END_HEADERS, 1, STATUS_200),
                fr(frame::HEADERS, END_HEADERS | END_STREAM, 1, STATUS_200),
            ]
            .concat(),
            "pseudo-header in trailers",
        ),
    ];
    for (input, reason) in body_cases {
        let mut h = Harness::ready();
        h.open();
        h.feed(&input).unwrap();
        assert!(
            h.events.last().unwrap().contains(reason),
            "{reason}: {:?}",
            h.events
        );
        assert_eq!(h.conn.open_streams(), 0);
    }
}

#[test]
fn flow_control_violations() {
    let mut h = Harness::new(ClientSettings {
        stream_window: 10,
        ..ClientSettings::default()
    });
    h.feed(&settings(&[])).unwrap();
    h.open();
    h.feed(&fr(frame::HEADERS, END_HEADERS, 1, STATUS_200))
        .unwrap();
    h.feed(&fr(frame::DATA, 0, 1, &[0; 11])).unwrap();
    assert!(h
        .events
        .last()
        .unwrap()
        .contains("beyond the stream's window"));
    assert_eq!(
        frames(&h.take_output()),
        [(
            frame::RST_STREAM,
            0,
            1,
            code::FLOW_CONTROL_ERROR.to_be_bytes().to_vec()
        )]
    );
    // The connection's window is given back at half, before a frame (at most 16 KiB) could
    // overrun it: a compliant server never meets FLOW_CONTROL_ERROR.
}

#[test]
fn connection_errors_queue_a_goaway_with_their_code() {
    let s = |input: Vec<u8>| input;
    let cases: Vec<(Vec<u8>, u32, &str)> = vec![
        (
            fr(frame::PING, 0, 0, b"12345678"),
            code::PROTOCOL_ERROR,
            "first frame is not SETTINGS",
        ),
        (
            fr(frame::DATA, 0, 0, b""),
            code::PROTOCOL_ERROR,
            "DATA on stream 0",
        ),
        (
            fr(frame::DATA, 0, 9, b""),
            code::PROTOCOL_ERROR,
            "never opened",
        ),
        (
            fr(frame::HEADERS, END_HEADERS, 2, STATUS_200),
            code::PROTOCOL_ERROR,
            "never opened",
        ),
        (
            fr(frame::HEADERS, END_HEADERS, 0, STATUS_200),
            code::PROTOCOL_ERROR,
            "stream 0",
        ),
        (
            fr(frame::HEADERS, END_HEADERS, 1, &[0x80]),
            code::COMPRESSION_ERROR,
            "index 0",
        ),
        (
            fr(frame::HEADERS, END_HEADERS | flag::PADDED, 1, &[5, 0x88]),
            code::PROTOCOL_ERROR,
            "padding",
        ),
        (
            fr(frame::HEADERS, flag::PADDED, 1, &[]),
            code::FRAME_SIZE_ERROR,
            "pad length",
        ),
        (
            [
                fr(frame::HEADERS, 0, 1, STATUS_200),
                fr(frame::PING, 0, 0, b"12345678"),
            ]
            .concat(),
            code::PROTOCOL_ERROR,
            "interrupted",
        ),
        (
            fr(frame::CONTINUATION, END_HEADERS, 1, STATUS_200),
            code::PROTOCOL_ERROR,
            "CONTINUATION without",
        ),
        (
            fr(frame::PRIORITY, 0, 0, &[0; 5]),
            code::PROTOCOL_ERROR,
            "PRIORITY on stream 0",
        ),
        (
            fr(frame::RST_STREAM, 0, 1, &[0; 3]),
            code::FRAME_SIZE_ERROR,
            "RST_STREAM is not 4",
        ),
        (
            fr(frame::RST_STREAM, 0, 0, &[0; 4]),
            code::PROTOCOL_ERROR,
            "RST_STREAM on stream 0",
        ),
        (
            fr(frame::RST_STREAM, 0, 11, &[0; 4]),
            code::PROTOCOL_ERROR,
            "never opened",
        ),
        (
            fr(frame::SETTINGS, 0, 1, &[]),
            code::PROTOCOL_ERROR,
            "SETTINGS on a stream",
        ),
        (
            fr(frame::SETTINGS, flag::ACK, 0, &[0; 6]),
            code::FRAME_SIZE_ERROR,
            "ACK with a payload",
        ),
        (
            fr(frame::SETTINGS, 0, 0, &[0; 5]),
            code::FRAME_SIZE_ERROR,
            "multiple of 6",
        ),
        (
            settings(&[(setting::ENABLE_PUSH, 1)]),
            code::PROTOCOL_ERROR,
            "ENABLE_PUSH 1",
        ),
        (
            settings(&[(setting::ENABLE_PUSH, 2)]),
            code::PROTOCOL_ERROR,
            "0 or 1",
        ),
        (
            settings(&[(setting::INITIAL_WINDOW_SIZE, 1 << 31)]),
            code::FLOW_CONTROL_ERROR,
            "INITIAL_WINDOW",
        ),
        (
            settings(&[(setting::MAX_FRAME_SIZE, 100)]),
            code::PROTOCOL_ERROR,
            "MAX_FRAME_SIZE",
        ),
        (
            fr(frame::PUSH_PROMISE, END_HEADERS, 1, &[0, 0, 0, 2, 0x88]),
            code::PROTOCOL_ERROR,
            "push is disabled",
        ),
        (
            fr(frame::PING, 0, 1, b"12345678"),
            code::PROTOCOL_ERROR,
            "PING on a stream",
        ),
        (
            fr(frame::PING, 0, 0, b"1234567"),
            code::FRAME_SIZE_ERROR,
            "PING is not 8",
        ),
        (
            fr(frame::GOAWAY, 0, 1, &[0; 8]),
            code::PROTOCOL_ERROR,
            "GOAWAY on a stream",
        ),
        (
            fr(frame::GOAWAY, 0, 0, &[0; 7]),
            code::FRAME_SIZE_ERROR,
            "GOAWAY shorter",
        ),
        (
            fr(frame::WINDOW_UPDATE, 0, 0, &[0; 3]),
            code::FRAME_SIZE_ERROR,
            "WINDOW_UPDATE is not 4",
        ),
        (
            fr(frame::WINDOW_UPDATE, 0, 0, &[0; 4]),
            code::PROTOCOL_ERROR,
            "WINDOW_UPDATE of 0",
        ),
        (
            fr(frame::WINDOW_UPDATE, 0, 0, &[0x7f, 0xff, 0xff, 0xff]),
            code::FLOW_CONTROL_ERROR,
            "send window",
        ),
        (
            fr(frame::WINDOW_UPDATE, 0, 13, &[0, 0, 0, 1]),
            code::PROTOCOL_ERROR,
            "never opened",
        ),
        (
            s([0, 0x40, 1, 0, 0, 0, 0, 0, 1].to_vec()),
            code::FRAME_SIZE_ERROR,
            "larger than SETTINGS_MAX_FRAME_SIZE",
        ),
        (
            fr(frame::DATA, 0, 1, &[0; 16_384]),
            code::PROTOCOL_ERROR,
            "DATA before",
        ),
    ];
    for (input, want, reason) in cases {
        let mut h = Harness::new(ClientSettings::default());
        h.conn.open(&RequestHead::get("https", "h", "/")).unwrap();
        h.take_output();
        let mut all = if reason.contains("first frame") {
            Vec::new()
        } else {
            settings(&[])
        };
        all.extend_from_slice(&input);
        let result = h.feed(&all);
        if reason == "DATA before" {
            // A stream error, not a connection error: only that stream is reset.
            assert!(result.is_ok());
            continue;
        }
        let err = result.expect_err(reason);
        assert_eq!(err.code, want, "{reason}: {err}");
        assert!(err.reason.contains(reason), "{reason}: {err}");
        let out = frames(&h.take_output());
        let goaway = out.last().expect("a GOAWAY");
        assert_eq!(goaway.0, frame::GOAWAY, "{reason}");
        assert_eq!(goaway.3[4..8], want.to_be_bytes(), "{reason}");
        assert_eq!(&goaway.3[8..], err.reason.as_bytes());
        assert_eq!(h.conn.can_open(), Err(Refusal::Closed));
        assert!(h.feed(&settings(&[])).is_err(), "nothing more is read");
    }
}

#[test]
fn a_header_block_may_not_grow_without_bound() {
    let mut h = Harness::ready();
    h.open();
    let mut input = fr(frame::HEADERS, 0, 1, &[0; 16_000]);
    for _ in 0..16 {
        input.extend(fr(frame::CONTINUATION, 0, 1, &[0; 16_000]));
    }
    let err = h.feed(&input).unwrap_err();
    assert_eq!(err.code, code::ENHANCE_YOUR_CALM);
}

#[test]
fn long_request_heads_are_split_into_continuation_frames() {
    let mut h = Harness::ready();
    let path = format!("/{}", "p".repeat(40_000));
    h.conn.open(&RequestHead::get("https", "h", &path)).unwrap();
    let out = frames(&h.take_output());
    assert_eq!(out.len(), 3);
    assert_eq!((out[0].0, out[0].1), (frame::HEADERS, END_STREAM));
    assert_eq!((out[1].0, out[1].1), (frame::CONTINUATION, 0));
    assert_eq!((out[2].0, out[2].1), (frame::CONTINUATION, END_HEADERS));
    let block: Vec<u8> = out.iter().flat_map(|f| f.3.clone()).collect();
    let mut fields = Vec::new();
    hpack::Decoder::new(4096)
        .decode(&block, &mut |n, v| fields.push((n.to_vec(), v.to_vec())))
        .unwrap();
    assert_eq!(fields[2], (b":path".to_vec(), path.into_bytes()));
}

#[test]
fn request_heads_follow_the_servers_table_size() {
    let mut h = Harness::new(ClientSettings::default());
    let head = RequestHead::get("https", "h", "/x");
    let mut decoder = hpack::Decoder::new(4096);
    let mut sent = |h: &mut Harness| {
        let out = frames(&h.take_output());
        let mut fields = Vec::new();
        decoder
            .decode(&out[0].3, &mut |n, v| fields.push((n.to_vec(), v.to_vec())))
            .unwrap();
        assert_eq!(fields[2].1, b"/x");
        out[0].3.clone()
    };
    h.conn.open(&head).unwrap();
    assert_eq!(
        sent(&mut h),
        [0x82, 0x87, 0x44, 2, b'/', b'x', 0x41, 1, b'h']
    );
    h.conn.open(&head).unwrap();
    assert_eq!(sent(&mut h), [0x82, 0x87, 0xbf, 0xbe]);
    // The server allows no table: the next block says so first and uses literals.
    h.feed(&settings(&[(setting::HEADER_TABLE_SIZE, 0)]))
        .unwrap();
    h.take_output();
    h.conn.open(&head).unwrap();
    assert_eq!(
        sent(&mut h),
        [0x20, 0x82, 0x87, 0x04, 2, b'/', b'x', 0x01, 1, b'h']
    );
}

#[test]
fn random_input_never_panics() {
    // A small xorshift: the same inputs every run.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..2_000 {
        let mut h = Harness::new(ClientSettings::default());
        for _ in 0..3 {
            let _ = h.conn.open(&RequestHead::get("https", "h", "/"));
        }
        let mut input = settings(&[]);
        let len = (next() % 200) as usize;
        for _ in 0..len {
            let r = next();
            // Bias the frame header bytes towards valid types and small lengths.
            input.push(if r % 3 == 0 {
                (r >> 8) as u8 % 10
            } else {
                (r >> 16) as u8
            });
        }
        let _ = h.conn.recv(&input, &mut |_| {});
    }
}
