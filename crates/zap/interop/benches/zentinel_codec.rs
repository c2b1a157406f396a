//! Encode and decode of agent-protocol payloads, ours beside the reference crate's
//! (`zentinel-agent-protocol` 0.6.45), in one run.
//!
//! Payloads: the reference benchmark's request headers, small (3 headers) and large (21
//! headers), as each crate's request-headers event; body chunks of 1, 4, 16 and 64 KiB of
//! the bytes `i % 256` (not UTF-8). Both encodings. Body bytes start as raw bytes on both
//! sides, so base64 work is inside the timed loop where an encoding needs it: the reference's
//! typed body chunk carries base64 text in JSON and MessagePack alike (its raw-`bin` path is
//! private to its client), ours carries base64 in JSON and `bin` in MessagePack.
//!
//! `cargo bench --bench zentinel_codec` in crates/zap/interop; CI runs each routine once as a
//! build check (`cargo test --all-targets` there), never as a timing.

use std::collections::HashMap;
use std::hint::black_box;

use agentwire_zap_proto::messages::{
    Body, BodyChunkEvent, CounterMetric, GaugeMetric, HealthStatus, MetricsReport,
    RequestHeadersEvent, RequestMetadata, Text,
};
use agentwire_zap_proto::{BodyWire, Encoding, Event, MessageType};
use base64::Engine as _;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zentinel_agent_protocol as zen;
use zentinel_agent_protocol::v2::UdsEncoding;

fn headers(large: bool) -> Vec<(&'static str, Vec<&'static str>)> {
    if !large {
        return vec![
            ("host", vec!["example.com"]),
            ("user-agent", vec!["benchmark/1.0"]),
            ("accept", vec!["*/*"]),
        ];
    }
    vec![
        ("host", vec!["api.example.com"]),
        (
            "user-agent",
            vec!["Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36"],
        ),
        ("accept", vec!["application/json", "text/plain", "*/*"]),
        ("accept-language", vec!["en-US,en;q=0.9"]),
        ("accept-encoding", vec!["gzip, deflate, br"]),
        ("content-type", vec!["application/json"]),
        ("content-length", vec!["1024"]),
        (
            "authorization",
            vec!["Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0"],
        ),
        ("cookie", vec!["session=abc123; tracking=xyz789"]),
        ("x-request-id", vec!["req-12345-67890"]),
        ("x-correlation-id", vec!["corr-abcdef-123456"]),
        (
            "x-forwarded-for",
            vec!["203.0.113.195, 70.41.3.18, 150.172.238.178"],
        ),
        ("x-forwarded-proto", vec!["https"]),
        ("x-forwarded-host", vec!["api.example.com"]),
        ("x-real-ip", vec!["203.0.113.195"]),
        ("cache-control", vec!["no-cache"]),
        ("pragma", vec!["no-cache"]),
        ("origin", vec!["https://app.example.com"]),
        ("referer", vec!["https://app.example.com/dashboard"]),
        ("sec-fetch-dest", vec!["empty"]),
        ("sec-fetch-mode", vec!["cors"]),
        ("sec-fetch-site", vec!["same-site"]),
    ]
}

struct Sample {
    cid: &'static str,
    method: &'static str,
    uri: &'static str,
    client_ip: &'static str,
    large: bool,
}

const SMALL: Sample = Sample {
    cid: "bench-12345",
    method: "GET",
    uri: "/api/v1/users",
    client_ip: "192.168.1.100",
    large: false,
};
const LARGE: Sample = Sample {
    cid: "bench-large-12345-67890",
    method: "POST",
    uri: "/api/v2/orders/create?include=items,shipping&format=json",
    client_ip: "203.0.113.195",
    large: true,
};

fn ours(s: &Sample) -> Event {
    Event::RequestHeaders(RequestHeadersEvent {
        // The same values as `theirs`; `new` leaves the other fields empty, as there.
        metadata: RequestMetadata {
            client_port: 443,
            tls_version: Some("TLSv1.3".into()),
            timestamp: "2026-11-25T00:00:00Z".into(),
            ..RequestMetadata::new(s.cid, s.client_ip)
        },
        method: s.method.into(),
        uri: s.uri.into(),
        headers: headers(s.large).into_iter().collect(),
    })
}

fn theirs(s: &Sample) -> zen::RequestHeadersEvent {
    zen::RequestHeadersEvent {
        metadata: zen::RequestMetadata {
            correlation_id: s.cid.into(),
            request_id: s.cid.into(),
            client_ip: s.client_ip.into(),
            client_port: 443,
            server_name: None,
            protocol: "HTTP/1.1".into(),
            tls_version: Some("TLSv1.3".into()),
            tls_cipher: None,
            route_id: None,
            upstream_id: None,
            timestamp: "2026-11-25T00:00:00Z".into(),
            traceparent: None,
        },
        method: s.method.into(),
        uri: s.uri.into(),
        headers: headers(s.large)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
            .collect::<HashMap<_, _>>(),
    }
}

const ENCODINGS: [(Encoding, UdsEncoding); 2] = [
    (Encoding::Json, UdsEncoding::Json),
    (Encoding::MsgPack, UdsEncoding::MessagePack),
];

fn request_headers(c: &mut Criterion) {
    let mut g = c.benchmark_group("request_headers");
    for (name, sample) in [("small", SMALL), ("large", LARGE)] {
        let event = ours(&sample);
        let zen_event = theirs(&sample);
        for (enc, zen_enc) in ENCODINGS {
            let tag = format!("{name}/{}", enc.name());
            let mut out = bytes::BytesMut::with_capacity(4096);
            g.bench_function(format!("encode/ours/{tag}"), |b| {
                b.iter(|| {
                    out.clear();
                    event.encode_into(enc, BodyWire::Base64, &mut out).unwrap();
                    black_box(out.len())
                })
            });
            g.bench_function(format!("encode/reference/{tag}"), |b| {
                b.iter(|| black_box(zen_enc.serialize(&zen_event).unwrap()))
            });
            let bytes = bytes::Bytes::from(event.encode(enc, BodyWire::Base64).unwrap());
            g.bench_function(format!("decode/ours/{tag}"), |b| {
                b.iter(|| {
                    black_box(Event::decode(MessageType::RequestHeaders, enc, &bytes).unwrap())
                })
            });
            let zen_bytes = zen_enc.serialize(&zen_event).unwrap();
            g.bench_function(format!("decode/reference/{tag}"), |b| {
                b.iter(|| {
                    black_box(
                        zen_enc
                            .deserialize::<zen::RequestHeadersEvent>(&zen_bytes)
                            .unwrap(),
                    )
                })
            });
        }
    }
    g.finish();
}

fn body_chunks(c: &mut Criterion) {
    let mut g = c.benchmark_group("body_chunk");
    for size in [1024usize, 4096, 16384, 65536] {
        g.throughput(Throughput::Bytes(size as u64));
        let data: Vec<u8> = (0..size).map(|i| (i % 256) as u8).collect();
        for (enc, zen_enc) in ENCODINGS {
            let tag = format!("{size}/{}", enc.name());
            let event = Event::RequestBodyChunk(BodyChunkEvent {
                correlation_id: "bench-123".into(),
                data: Body(data.clone().into()),
                is_last: false,
                total_size: None,
                chunk_index: 0,
                bytes_received: None,
                bytes_sent: None,
            });
            let mut out = bytes::BytesMut::with_capacity(2 * size + 256);
            g.bench_function(format!("encode/ours/{tag}"), |b| {
                b.iter(|| {
                    out.clear();
                    event.encode_into(enc, BodyWire::Binary, &mut out).unwrap();
                    black_box(out.len())
                })
            });
            g.bench_function(format!("encode/reference/{tag}"), |b| {
                b.iter(|| {
                    let chunk = zen::RequestBodyChunkEvent {
                        correlation_id: "bench-123".into(),
                        data: base64::engine::general_purpose::STANDARD.encode(&data),
                        is_last: false,
                        total_size: None,
                        chunk_index: 0,
                        bytes_received: 0,
                    };
                    black_box(zen_enc.serialize(&chunk).unwrap())
                })
            });
            let bytes = bytes::Bytes::from(event.encode(enc, BodyWire::Binary).unwrap());
            g.bench_function(format!("decode/ours/{tag}"), |b| {
                b.iter(|| {
                    black_box(Event::decode(MessageType::RequestBodyChunk, enc, &bytes).unwrap())
                })
            });
            let zen_bytes = zen_enc
                .serialize(&zen::RequestBodyChunkEvent {
                    correlation_id: "bench-123".into(),
                    data: base64::engine::general_purpose::STANDARD.encode(&data),
                    is_last: false,
                    total_size: None,
                    chunk_index: 0,
                    bytes_received: 0,
                })
                .unwrap();
            g.bench_function(format!("decode/reference/{tag}"), |b| {
                b.iter(|| {
                    let chunk: zen::RequestBodyChunkEvent =
                        zen_enc.deserialize(&zen_bytes).unwrap();
                    // The bytes, as its handler gets them (`BinaryRequestBodyChunkEvent::from`).
                    black_box(zen::BinaryRequestBodyChunkEvent::from(&chunk))
                })
            });
        }
    }
    g.finish();
}

/// Encode and decode of one message type, ours and the reference's, in both encodings.
fn both_encodings<O, T>(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    ours: &O,
    theirs: &T,
    encode_ours: impl Fn(&O, Encoding, &mut bytes::BytesMut),
    decode_ours: impl Fn(Encoding, &[u8]) -> O,
) where
    O: serde::Serialize + serde::de::DeserializeOwned,
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    for (enc, zen_enc) in ENCODINGS {
        let tag = enc.name();
        let mut out = bytes::BytesMut::with_capacity(4096);
        g.bench_function(format!("encode/ours/{tag}"), |b| {
            b.iter(|| {
                out.clear();
                encode_ours(ours, enc, &mut out);
                black_box(out.len())
            })
        });
        g.bench_function(format!("encode/reference/{tag}"), |b| {
            b.iter(|| black_box(zen_enc.serialize(theirs).unwrap()))
        });
        let bytes = bytes::Bytes::from(enc.encode(ours).unwrap());
        g.bench_function(format!("decode/ours/{tag}"), |b| {
            b.iter(|| black_box(decode_ours(enc, &bytes)))
        });
        let zen_bytes = zen_enc.serialize(theirs).unwrap();
        g.bench_function(format!("decode/reference/{tag}"), |b| {
            b.iter(|| black_box(zen_enc.deserialize::<T>(&zen_bytes).unwrap()))
        });
    }
}

/// The agent's health report: ours as its agent sends it (state as a number, in-flight
/// count), theirs as its typed `v2::HealthStatus` (state as a tagged enum, with its load
/// figures). Each crate's own type for the same message, as with the request headers.
fn health_reports(c: &mut Criterion) {
    let mut g = c.benchmark_group("health_status");
    let ours = HealthStatus {
        agent_id: "waf-agent-1".into(),
        state: 1,
        message: None,
        in_flight: 12,
        timestamp_ms: 1_795_000_000_000,
    };
    let mut theirs = zen::v2::HealthStatus::healthy("waf-agent-1");
    theirs.timestamp_ms = 1_795_000_000_000;
    theirs.load = Some(zen::v2::LoadMetrics {
        in_flight: 12,
        ..Default::default()
    });
    // As our agent sends it (`AgentSession::health`: serde).
    both_encodings(
        &mut g,
        &ours,
        &theirs,
        |o, enc, out| enc.encode_into(o, out).unwrap(),
        |enc, bytes| enc.decode(bytes).unwrap(),
    );
    g.finish();
}

/// A metrics report of 8 counters and 4 gauges, each with two labels, in both crates'
/// `MetricsReport` (the same fields).
fn metrics_reports(c: &mut Criterion) {
    let mut g = c.benchmark_group("metrics_report");
    let labels = |i: usize| {
        [
            ("agent", "waf"),
            ("rule", ["sqli", "xss", "rce", "lfi"][i % 4]),
        ]
    };
    let ours = MetricsReport {
        agent_id: "waf-agent-1".into(),
        timestamp_ms: 1_795_000_000_000,
        interval_ms: 10_000,
        counters: (0..8)
            .map(|i| CounterMetric {
                name: format!("agent_requests_{i}_total").into(),
                help: None,
                labels: labels(i)
                    .iter()
                    .map(|(k, v)| (Text::from(*k), Text::from(*v)))
                    .collect(),
                value: 1000 + i as u64,
            })
            .collect(),
        gauges: (0..4)
            .map(|i| GaugeMetric {
                name: format!("agent_in_flight_{i}").into(),
                help: None,
                labels: labels(i)
                    .iter()
                    .map(|(k, v)| (Text::from(*k), Text::from(*v)))
                    .collect(),
                value: i as f64 + 0.5,
            })
            .collect(),
        histograms: Vec::new(),
    };
    let mut theirs = zen::v2::MetricsReport::new("waf-agent-1", 10_000);
    theirs.timestamp_ms = 1_795_000_000_000;
    theirs.counters = ours
        .counters
        .iter()
        .map(|m| {
            let mut t = zen::v2::CounterMetric::new(m.name.as_str(), m.value);
            t.labels = m
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            t
        })
        .collect();
    theirs.gauges = ours
        .gauges
        .iter()
        .map(|m| {
            let mut t = zen::v2::GaugeMetric::new(m.name.as_str(), m.value);
            t.labels = m
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            t
        })
        .collect();
    // As our agent sends it (`AgentSession::metrics`: `MetricsReport::encode_into`) and our
    // proxy reads it (`MetricsReport::decode`).
    both_encodings(
        &mut g,
        &ours,
        &theirs,
        |o, enc, out| o.encode_into(enc, out).unwrap(),
        |enc, bytes| MetricsReport::decode(enc, bytes).unwrap(),
    );
    g.finish();
}

criterion_group!(
    benches,
    request_headers,
    body_chunks,
    health_reports,
    metrics_reports
);
criterion_main!(benches);
