//! Test vectors written by the reference implementation (`zentinel-agent-protocol` 0.6.45)
//! and committed in `tests/vectors/` (hex of each payload, one file per message and
//! encoding). Each test checks that the reference still writes exactly the committed bytes,
//! that our types read them to the same message and, for events, that we write the same bytes. `ZAP_WRITE_VECTORS=1 cargo test
//! zentinel_vectors` writes the files anew from the reference crate.

use std::collections::HashMap;
use std::path::PathBuf;

use agentwire_zap_proto::messages::{self as ours, Body, BodyChunkEvent, Text};
use agentwire_zap_proto::{BodyWire, Encoding, Event, MessageType};
use base64::Engine as _;
use zentinel_agent_protocol as zen;
use zentinel_agent_protocol::v2::UdsEncoding;

const ENCODINGS: [(Encoding, UdsEncoding); 2] = [
    (Encoding::Json, UdsEncoding::Json),
    (Encoding::MsgPack, UdsEncoding::MessagePack),
];

/// The committed vector `name` in `encoding`, after checking that the reference crate writes
/// exactly `reference` (or writing it, with `ZAP_WRITE_VECTORS`).
fn vector(name: &str, encoding: Encoding, reference: &[u8]) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(format!("{name}.{}.hex", encoding.name()));
    if std::env::var_os("ZAP_WRITE_VECTORS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("{}\n", hex_encode(reference))).unwrap();
    }
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (ZAP_WRITE_VECTORS=1 writes it)", path.display()));
    let committed = hex_decode(text.trim());
    assert_eq!(
        committed,
        reference,
        "the reference crate no longer writes {}",
        path.display()
    );
    committed
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn zentinel_vectors_request_headers_read_as_ours() {
    // One header: the reference keeps headers in a HashMap, whose order is not fixed.
    let theirs = zen::RequestHeadersEvent {
        metadata: zen::RequestMetadata {
            correlation_id: "vec-1".into(),
            request_id: "req-1".into(),
            client_ip: "203.0.113.7".into(),
            client_port: 51234,
            server_name: Some("api.example.com".into()),
            protocol: "HTTP/2".into(),
            tls_version: Some("TLSv1.3".into()),
            tls_cipher: None,
            route_id: Some("orders".into()),
            upstream_id: None,
            timestamp: "2026-11-26T00:00:00Z".into(),
            traceparent: None,
        },
        method: "POST".into(),
        uri: "/api/orders?q=\"quoted\"&u=\u{e9}".into(),
        headers: HashMap::from([(
            "accept".to_string(),
            vec!["application/json".to_string(), "*/*".to_string()],
        )]),
    };
    let mut expected = ours::RequestHeadersEvent {
        metadata: ours::RequestMetadata {
            request_id: "req-1".into(),
            client_port: 51234,
            server_name: Some("api.example.com".into()),
            protocol: "HTTP/2".into(),
            tls_version: Some("TLSv1.3".into()),
            route_id: Some("orders".into()),
            timestamp: "2026-11-26T00:00:00Z".into(),
            ..ours::RequestMetadata::new("vec-1", "203.0.113.7")
        },
        method: "POST".into(),
        uri: "/api/orders?q=\"quoted\"&u=\u{e9}".into(),
        headers: Default::default(),
    };
    expected
        .headers
        .insert("accept", ["application/json", "*/*"]);
    for (encoding, zen_encoding) in ENCODINGS {
        let bytes = vector(
            "request_headers",
            encoding,
            &zen_encoding.serialize(&theirs).unwrap(),
        );
        let got = Event::decode(MessageType::RequestHeaders, encoding, &bytes).unwrap();
        assert_eq!(
            got,
            Some(Event::RequestHeaders(expected.clone())),
            "{encoding:?}"
        );
        // And we write the same bytes (field order, escapes, numbers).
        let written = Event::RequestHeaders(expected.clone())
            .encode(encoding, BodyWire::Base64)
            .unwrap();
        assert_eq!(written, bytes, "{encoding:?}");
    }
}

#[test]
fn zentinel_vectors_body_chunk_reads_as_bytes() {
    let raw: Vec<u8> = (0..=255u8).collect(); // not UTF-8
    let theirs = zen::RequestBodyChunkEvent {
        correlation_id: "vec-2".into(),
        data: base64::engine::general_purpose::STANDARD.encode(&raw),
        is_last: true,
        total_size: Some(256),
        chunk_index: 3,
        bytes_received: 1024,
    };
    let expected = BodyChunkEvent {
        correlation_id: "vec-2".into(),
        data: Body(raw.into()),
        is_last: true,
        total_size: Some(256),
        chunk_index: 3,
        bytes_received: Some(1024),
        bytes_sent: None,
    };
    for (encoding, zen_encoding) in ENCODINGS {
        let bytes = vector(
            "request_body_chunk",
            encoding,
            &zen_encoding.serialize(&theirs).unwrap(),
        );
        let got = Event::decode(MessageType::RequestBodyChunk, encoding, &bytes).unwrap();
        assert_eq!(
            got,
            Some(Event::RequestBodyChunk(expected.clone())),
            "{encoding:?}"
        );
        // Base64 text as the reference writes it (`bytes_sent`, which it lacks, is left out).
        let written = Event::RequestBodyChunk(expected.clone())
            .encode(encoding, BodyWire::Base64)
            .unwrap();
        assert_eq!(written, bytes, "{encoding:?}");
    }
}

#[test]
fn zentinel_vectors_metrics_report_reads_as_ours() {
    let mut theirs = zen::v2::MetricsReport::new("waf-1", 10_000);
    theirs.timestamp_ms = 1_795_000_000_000;
    let mut counter = zen::v2::CounterMetric::new("agent_requests_total", 42);
    counter.labels = HashMap::from([("rule".to_string(), "sqli".to_string())]);
    theirs.counters = vec![counter];
    theirs.gauges = vec![zen::v2::GaugeMetric::new("agent_in_flight", 2.5)];
    for (encoding, zen_encoding) in ENCODINGS {
        let bytes = vector(
            "metrics_report",
            encoding,
            &zen_encoding.serialize(&theirs).unwrap(),
        );
        let got: ours::MetricsReport = encoding.decode(&bytes).unwrap();
        assert_eq!(got.agent_id, "waf-1");
        assert_eq!(
            (got.timestamp_ms, got.interval_ms),
            (1_795_000_000_000, 10_000)
        );
        assert_eq!(got.counters.len(), 1);
        assert_eq!(got.counters[0].name, "agent_requests_total");
        assert_eq!(got.counters[0].value, 42);
        assert_eq!(
            got.counters[0].labels.get("rule"),
            Some(&Text::from("sqli"))
        );
        assert_eq!(got.gauges.len(), 1);
        assert_eq!(
            (got.gauges[0].name.as_str(), got.gauges[0].value),
            ("agent_in_flight", 2.5)
        );
    }
}
