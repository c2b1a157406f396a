//! Test vectors: `docs/vectors/NAME.hex` holds the exact bytes of one frame (lowercase hex,
//! wrapped at 64 characters per line) and `docs/vectors/NAME.json` describes the decoded frame:
//!
//! ```json
//! {"description": "...", "frame_type": "envelope", "codec": "msgpack", "value": {...}}
//! ```
//!
//! `check_committed_vectors` (run by `cargo test`) decodes every committed hex and compares it
//! with the JSON's value, and re-encodes the value and compares it with the hex, byte for byte.
//! `regenerate_vectors` rewrites the directory from [`vectors`]:
//!
//! ```text
//! cargo test -p agentwire-proto --test vectors -- --ignored
//! ```

use std::fs;
use std::path::PathBuf;

use agentwire_proto::{
    Codec, Consume, Destination, Envelope, ErrorCode, Frame, FrameDecoder, FrameType, Goodbye,
    Heartbeat, Hello, Kind, Nack, Priority, Reject, Welcome,
};
use bytes::Bytes;
use serde_json::{json, Value};

/// One vector: a name (file stem), a description, the frame and the codec it is encoded with.
struct Vector {
    name: String,
    description: String,
    frame: Frame,
    codec: Codec,
}

fn vector(name: &str, description: &str, frame: Frame, codec: Codec) -> Vector {
    Vector {
        name: name.to_owned(),
        description: description.to_owned(),
        frame,
        codec,
    }
}

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/vectors")
}

const TS: u64 = 1_700_000_000_000_000;

/// The canonical set of vectors.
fn vectors() -> Vec<Vector> {
    let mut hello = Hello::new("worker-1", "worker");
    hello.capabilities = vec!["datagrams".into()];
    let mut hello_token = Hello::new("coordinator", "coordinator");
    hello_token.codecs = vec!["json".into()];
    hello_token.auth_token = Some("s3cret".into());
    hello_token.max_frame_size = 65_536;

    let mut v = vec![
        vector(
            "hello",
            "Agent hello: version 1..=1, both codecs (msgpack preferred), no token, 16 MiB frames",
            Frame::Hello(hello),
            Codec::MsgPack,
        ),
        vector(
            "hello_with_token",
            "Agent hello offering only JSON, with an auth token and a 64 KiB frame limit",
            Frame::Hello(hello_token),
            Codec::MsgPack,
        ),
        vector(
            "welcome",
            "Hub welcome: version 1, msgpack, session 42, 16 MiB frames, 5 s heartbeats",
            Frame::Welcome(Welcome {
                version: 1,
                codec: "msgpack".into(),
                session_id: 42,
                max_frame_size: 16 * 1024 * 1024,
                heartbeat_interval_ms: 5_000,
                capabilities: vec!["datagrams".into()],
            }),
            Codec::MsgPack,
        ),
        vector(
            "reject",
            "Hub reject with code 5 (unauthorized)",
            Frame::Reject(Reject::new(
                ErrorCode::Unauthorized,
                "missing or wrong auth token",
            )),
            Codec::MsgPack,
        ),
        vector(
            "envelope_msgpack_small",
            "The smallest useful envelope (the worked example in docs/protocol.md)",
            Frame::Envelope(
                Envelope::new(1, "a", Destination::agent("b"), Kind::Task).with_body(&b"hi"[..]),
            ),
            Codec::MsgPack,
        ),
    ];

    for kind in Kind::ALL {
        let mut env = Envelope::new(
            100 + u64::from(kind.code()),
            "coordinator",
            Destination::agent("worker-1"),
            kind,
        )
        .with_timestamp_us(TS)
        .with_body(format!("{kind} body").into_bytes());
        if matches!(kind, Kind::Response | Kind::Error | Kind::Result) {
            env = env.with_correlation(42);
        }
        if kind == Kind::Error {
            env = env
                .with_header("code", ErrorCode::UnknownAgent.code().to_string())
                .with_header("error", ErrorCode::UnknownAgent.name());
        }
        v.push(vector(
            &format!("envelope_msgpack_{}", kind.name()),
            &format!("A {kind} envelope (kind code {}) to an agent", kind.code()),
            Frame::Envelope(env),
            Codec::MsgPack,
        ));
    }

    v.extend([
        vector(
            "envelope_msgpack_topic",
            "An event to a topic, high priority",
            Frame::Envelope(
                Envelope::new(7, "sensor", Destination::topic("metrics/cpu"), Kind::Event)
                    .with_priority(Priority::High)
                    .with_timestamp_us(TS)
                    .with_body(&br#"{"load":0.5}"#[..]),
            ),
            Codec::MsgPack,
        ),
        vector(
            "envelope_msgpack_broadcast",
            "A broadcast state update, low priority, empty body",
            Frame::Envelope(
                Envelope::new(8, "leader", Destination::Broadcast, Kind::State)
                    .with_priority(Priority::Low)
                    .with_timestamp_us(TS),
            ),
            Codec::MsgPack,
        ),
        vector(
            "envelope_msgpack_full",
            "Every field set: critical priority, ttl, correlation, headers, non-UTF-8 body",
            Frame::Envelope(
                Envelope::new(
                    u64::MAX,
                    "agent-ü",
                    Destination::agent("worker-2"),
                    Kind::Request,
                )
                .with_priority(Priority::Critical)
                .with_ttl_ms(30_000)
                .with_timestamp_us(TS)
                .with_correlation(1 << 40)
                .with_header("content-type", "application/octet-stream")
                .with_header("trace", "00-abc-01")
                .with_body(vec![0x00, 0xff, 0xfe, 0x80, 0xc3, 0x28, 0x7f]),
            ),
            Codec::MsgPack,
        ),
        vector(
            "envelope_json_request",
            "A JSON request with headers, ttl and a text body",
            Frame::Envelope(
                Envelope::new(
                    5,
                    "coordinator",
                    Destination::agent("worker-1"),
                    Kind::Request,
                )
                .with_priority(Priority::High)
                .with_ttl_ms(10_000)
                .with_timestamp_us(TS)
                .with_header("deadline", "10s")
                .with_header("trace", "t-17")
                .with_body(&b"resize image 17"[..]),
            ),
            Codec::Json,
        ),
        vector(
            "envelope_json_response",
            "A JSON response correlated with request 5",
            Frame::Envelope(
                Envelope::new(
                    900,
                    "worker-1",
                    Destination::agent("coordinator"),
                    Kind::Response,
                )
                .with_timestamp_us(TS + 1_500)
                .with_correlation(5)
                .with_body(&br#"{"ok":true}"#[..]),
            ),
            Codec::Json,
        ),
        vector(
            "envelope_json_binary_body",
            "A JSON envelope whose body is not UTF-8 (base64 with padding)",
            Frame::Envelope(
                Envelope::new(6, "camera", Destination::topic("frames"), Kind::Sync)
                    .with_priority(Priority::Low)
                    .with_timestamp_us(TS)
                    .with_body(vec![0x00, 0xff, 0xfe, 0x80, 0xc3]),
            ),
            Codec::Json,
        ),
        vector(
            "envelope_json_broadcast",
            "A JSON broadcast event (destination name is empty)",
            Frame::Envelope(
                Envelope::new(3, "hub", Destination::Broadcast, Kind::Event)
                    .with_priority(Priority::Critical)
                    .with_header("event", "join")
                    .with_body(&b"worker-9"[..]),
            ),
            Codec::Json,
        ),
        vector(
            "subscribe",
            "Subscribe to a topic (payload: raw UTF-8)",
            Frame::Subscribe("metrics/cpu".into()),
            Codec::MsgPack,
        ),
        vector(
            "unsubscribe",
            "Unsubscribe from a topic (payload: raw UTF-8)",
            Frame::Unsubscribe("metrics/cpu".into()),
            Codec::MsgPack,
        ),
        vector(
            "heartbeat",
            "Heartbeat: sequence u64 BE then timestamp u64 BE",
            Frame::Heartbeat(Heartbeat {
                seq: 3,
                timestamp_us: TS,
            }),
            Codec::MsgPack,
        ),
        vector(
            "consume",
            "Consume: credit u32 BE (16 tasks in flight at most) then the queue name in UTF-8",
            Frame::Consume(Consume {
                queue: "jobs".into(),
                credit: 16,
            }),
            Codec::MsgPack,
        ),
        vector(
            "ack",
            "Ack: the delivered task's id, u64 BE",
            Frame::Ack(42),
            Codec::MsgPack,
        ),
        vector(
            "nack",
            "Nack: the task's id u64 BE, then the delay before its next attempt in ms, u32 BE (0xffffffff: the queue's backoff)",
            Frame::Nack(Nack {
                task: 42,
                delay_ms: Some(500),
            }),
            Codec::MsgPack,
        ),
        vector(
            "envelope-queue-msgpack",
            "Envelope to a work queue (destination tag 3), a task with a producer id header, MessagePack",
            Frame::Envelope(
                Envelope::new(9, "coordinator", Destination::queue("jobs"), Kind::Request)
                    .with_timestamp_us(TS)
                    .with_header("producer-id", "order-9")
                    .with_body(&b"resize photo 9"[..]),
            ),
            Codec::MsgPack,
        ),
        vector(
            "goodbye",
            "Goodbye: code u32 BE (16 = shutting-down) then the reason in UTF-8",
            Frame::Goodbye(Goodbye {
                code: ErrorCode::ShuttingDown,
                reason: "hub restarting".into(),
            }),
            Codec::MsgPack,
        ),
    ]);
    v
}

fn frame_type_name(t: FrameType) -> &'static str {
    match t {
        FrameType::Hello => "hello",
        FrameType::Welcome => "welcome",
        FrameType::Reject => "reject",
        FrameType::Envelope => "envelope",
        FrameType::Subscribe => "subscribe",
        FrameType::Unsubscribe => "unsubscribe",
        FrameType::Consume => "consume",
        FrameType::Ack => "ack",
        FrameType::Nack => "nack",
        FrameType::Heartbeat => "heartbeat",
        FrameType::Goodbye => "goodbye",
    }
}

/// The readable JSON form of a frame's content.
fn frame_to_value(frame: &Frame) -> Value {
    match frame {
        Frame::Hello(h) => serde_json::to_value(h).unwrap(),
        Frame::Welcome(w) => serde_json::to_value(w).unwrap(),
        Frame::Reject(r) => serde_json::to_value(r).unwrap(),
        Frame::Envelope(e) => serde_json::to_value(e).unwrap(),
        Frame::Subscribe(t) | Frame::Unsubscribe(t) => json!({ "topic": t }),
        Frame::Consume(c) => json!({ "queue": c.queue, "credit": c.credit }),
        Frame::Ack(task) => json!({ "task": task }),
        Frame::Nack(n) => json!({ "task": n.task, "delay_ms": n.delay_ms }),
        Frame::Heartbeat(h) => serde_json::to_value(h).unwrap(),
        Frame::Goodbye(g) => {
            json!({ "code": g.code.code(), "name": g.code.name(), "reason": g.reason })
        }
    }
}

/// The inverse of [`frame_to_value`].
fn value_to_frame(frame_type: &str, value: &Value) -> Frame {
    let topic = || value["topic"].as_str().unwrap().to_owned();
    match frame_type {
        "hello" => Frame::Hello(serde_json::from_value(value.clone()).unwrap()),
        "welcome" => Frame::Welcome(serde_json::from_value(value.clone()).unwrap()),
        "reject" => Frame::Reject(serde_json::from_value(value.clone()).unwrap()),
        "envelope" => Frame::Envelope(serde_json::from_value(value.clone()).unwrap()),
        "subscribe" => Frame::Subscribe(topic()),
        "unsubscribe" => Frame::Unsubscribe(topic()),
        "consume" => Frame::Consume(Consume {
            queue: value["queue"].as_str().unwrap().to_owned(),
            credit: u32::try_from(value["credit"].as_u64().unwrap()).unwrap(),
        }),
        "ack" => Frame::Ack(value["task"].as_u64().unwrap()),
        "nack" => Frame::Nack(Nack {
            task: value["task"].as_u64().unwrap(),
            delay_ms: value["delay_ms"]
                .as_u64()
                .map(|d| u32::try_from(d).unwrap()),
        }),
        "heartbeat" => Frame::Heartbeat(serde_json::from_value(value.clone()).unwrap()),
        "goodbye" => {
            let code = u32::try_from(value["code"].as_u64().unwrap()).unwrap();
            let code = ErrorCode::from_code(code).unwrap();
            assert_eq!(value["name"], code.name());
            Frame::Goodbye(Goodbye {
                code,
                reason: value["reason"].as_str().unwrap().to_owned(),
            })
        }
        other => panic!("unknown frame_type {other:?}"),
    }
}

fn to_hex_lines(bytes: &[u8]) -> String {
    let hex = hex::encode(bytes);
    let mut out = String::new();
    for line in hex.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out
}

fn from_hex_lines(text: &str) -> Vec<u8> {
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    assert_eq!(compact, compact.to_lowercase(), "hex must be lowercase");
    hex::decode(compact).unwrap()
}

fn description(v: &Vector) -> Value {
    json!({
        "description": v.description,
        "frame_type": frame_type_name(v.frame.frame_type()),
        "codec": v.codec.name(),
        "value": frame_to_value(&v.frame),
    })
}

#[test]
#[ignore = "rewrites docs/vectors; run with --ignored after a deliberate wire change"]
fn regenerate_vectors() {
    let dir = dir();
    fs::create_dir_all(&dir).unwrap();
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("hex" | "json")
        ) {
            fs::remove_file(path).unwrap();
        }
    }
    for v in vectors() {
        let bytes = v.frame.encode(v.codec).unwrap();
        fs::write(dir.join(format!("{}.hex", v.name)), to_hex_lines(&bytes)).unwrap();
        let mut text = serde_json::to_string_pretty(&description(&v)).unwrap();
        text.push('\n');
        fs::write(dir.join(format!("{}.json", v.name)), text).unwrap();
    }
}

#[test]
fn check_committed_vectors() {
    let mut names: Vec<String> = fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("json"))
        .map(|p| p.file_stem().unwrap().to_str().unwrap().to_owned())
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no vectors in {}", dir().display());

    for name in &names {
        let desc: Value =
            serde_json::from_str(&fs::read_to_string(dir().join(format!("{name}.json"))).unwrap())
                .unwrap();
        let bytes = from_hex_lines(&fs::read_to_string(dir().join(format!("{name}.hex"))).unwrap());
        let codec = Codec::from_name(desc["codec"].as_str().unwrap()).unwrap();
        let frame_type = desc["frame_type"].as_str().unwrap();

        // Decoding the bytes gives the described value.
        let raw = FrameDecoder::decode_one(Bytes::from(bytes.clone()), u32::MAX).unwrap();
        let decoded = Frame::decode(&raw, codec).unwrap();
        assert_eq!(frame_type_name(decoded.frame_type()), frame_type, "{name}");
        assert_eq!(
            frame_to_value(&decoded),
            desc["value"],
            "{name}: decoded value"
        );

        // Encoding the described value gives exactly the bytes.
        let frame = value_to_frame(frame_type, &desc["value"]);
        assert_eq!(frame, decoded, "{name}: value");
        assert_eq!(
            hex::encode(frame.encode(codec).unwrap()),
            hex::encode(&bytes),
            "{name}: re-encoded bytes"
        );

        // A stream decoder fed one byte at a time agrees.
        let mut dec = FrameDecoder::new(u32::MAX);
        let mut got = Vec::new();
        for b in &bytes {
            dec.push(&[*b]);
            while let Some(raw) = dec.next_frame().unwrap() {
                got.push(raw);
            }
        }
        assert_eq!(got, vec![raw], "{name}: streamed");
    }
}

#[test]
fn committed_vectors_are_up_to_date() {
    let expected = vectors();
    for v in &expected {
        let hex = fs::read_to_string(dir().join(format!("{}.hex", v.name)))
            .unwrap_or_else(|e| panic!("{}: {e} (regenerate the vectors)", v.name));
        assert_eq!(
            from_hex_lines(&hex),
            v.frame.encode(v.codec).unwrap().to_vec(),
            "{}",
            v.name
        );
        let desc: Value = serde_json::from_str(
            &fs::read_to_string(dir().join(format!("{}.json", v.name))).unwrap(),
        )
        .unwrap();
        assert_eq!(desc, description(v), "{}", v.name);
    }
    let committed = fs::read_dir(dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .and_then(|e| e.to_str())
                == Some("json")
        })
        .count();
    assert_eq!(committed, expected.len(), "stray or missing vectors");
}
