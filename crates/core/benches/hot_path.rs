//! The hub's hot path, piece by piece, in memory: cutting a frame out of received bytes,
//! reading an envelope's routing header in place, decoding it fully (what the hub did before
//! it forwarded without re-encoding), encoding one, the priority queue, the pre-resolved
//! message counters, and one whole route through `HubCore` (frame in, frame out).
//!
//! `cargo bench -p agentwire --bench hot_path` measures; CI builds and runs each routine once
//! (`cargo test -p agentwire --benches`), as a build check, never as a timing test.

use std::hint::black_box;
use std::sync::Arc;

use agentwire::hub::{Action, Conn, CoreConfig, HubCore, Now};
use agentwire::metrics::HubMetrics;
use agentwire::queue::PriorityQueue;
use agentwire::transport::TransportKind;
use agentwire_proto::{
    AgentHandshake, Codec, Destination, Envelope, EnvelopeView, Frame, FrameDecoder, Hello, Kind,
    Priority,
};
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

const SIZES: [usize; 3] = [1024, 10 * 1024, 100 * 1024];

fn envelope(size: usize) -> Envelope {
    Envelope::new(
        42,
        "client-7",
        Destination::agent("worker-3"),
        Kind::Request,
    )
    .with_priority(Priority::Medium)
    .with_ttl_ms(5000)
    .with_timestamp_us(1_800_000_000_000_000)
    .with_header("trace", "3f2a")
    .with_body(vec![0x5a; size])
}

fn frame_bytes(size: usize) -> Bytes {
    Frame::Envelope(envelope(size))
        .encode(Codec::MsgPack)
        .unwrap()
}

fn codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("codec");
    for size in SIZES {
        let bytes = frame_bytes(size);
        let raw = FrameDecoder::decode_one(bytes.clone(), u32::MAX).unwrap();
        let env = envelope(size);
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function(format!("frame_decode/{size}"), |b| {
            b.iter(|| {
                let mut d = FrameDecoder::new(u32::MAX);
                d.push(black_box(&bytes));
                black_box(d.next_frame().unwrap())
            })
        });
        g.bench_function(format!("header_parse/{size}"), |b| {
            b.iter(|| black_box(EnvelopeView::parse(black_box(&raw.payload))))
        });
        g.bench_function(format!("full_decode/{size}"), |b| {
            b.iter(|| {
                black_box(
                    Codec::MsgPack
                        .decode_envelope(black_box(&raw.payload))
                        .unwrap(),
                )
            })
        });
        g.bench_function(format!("encode/{size}"), |b| {
            b.iter(|| black_box(Frame::encode_envelope(black_box(&env), Codec::MsgPack).unwrap()))
        });
    }
    g.finish();
}

fn queue_and_metrics(c: &mut Criterion) {
    let mut g = c.benchmark_group("queue");
    let q = PriorityQueue::new(1024);
    let frame = frame_bytes(1024);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    g.bench_function("push_pop", |b| {
        b.iter(|| {
            q.try_push(frame.clone(), Priority::Medium).unwrap();
            black_box(rt.block_on(q.pop()))
        })
    });
    g.finish();

    let metrics = HubMetrics::new();
    let table = metrics.message_table("in", &["task", "request"], &["high", "medium"]);
    let mut g = c.benchmark_group("metrics");
    g.bench_function("pre_resolved", |b| {
        b.iter(|| table.record(1, 1, black_box(1024)))
    });
    g.bench_function("by_label", |b| {
        b.iter(|| metrics.message_in("request", "medium", black_box(1024)))
    });
    g.finish();
}

type BenchConn = Arc<Conn<(), ()>>;

/// A core with two registered agents, `a` and `b`.
fn two_agents() -> (HubCore<(), ()>, BenchConn, BenchConn, Now) {
    let now = Now::system();
    let core = HubCore::new(CoreConfig::default(), HubMetrics::new(), now);
    let mut out = Vec::new();
    let mut join = |id: &str| {
        let conn = core.open(TransportKind::Unix, (), now);
        let hello = AgentHandshake::new(Hello::new(id, "bench"))
            .hello_frame()
            .unwrap();
        let raw = FrameDecoder::decode_one(hello, u32::MAX).unwrap();
        core.on_frame(&conn, raw, None, now, &mut out);
        while core.poll_outbound(&conn).is_some() {}
        core.written(&conn);
        conn
    };
    let a = join("a");
    let b = join("b");
    (core, a, b, now)
}

fn route(c: &mut Criterion) {
    let mut g = c.benchmark_group("route");
    for size in SIZES {
        let (core, a, b, now) = two_agents();
        let bytes = Frame::Envelope(
            Envelope::new(1, "a", Destination::agent("b"), Kind::Task).with_body(vec![1u8; size]),
        )
        .encode(Codec::MsgPack)
        .unwrap();
        let mut out: Vec<Action<(), ()>> = Vec::new();
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("direct/{size}"), |bench| {
            bench.iter_batched(
                || FrameDecoder::decode_one(bytes.clone(), u32::MAX).unwrap(),
                |raw| {
                    core.on_frame(&a, raw, None, now, &mut out);
                    out.clear();
                    let taken = black_box(core.poll_outbound(&b));
                    core.written(&b);
                    taken
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, codec, queue_and_metrics, route);
criterion_main!(benches);
