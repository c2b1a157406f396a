//! The one-way patterns end to end on loopback: fan-out, gather, stream and queue deliver every
//! message sent in the measured window to every receiver it is for (none missing, each
//! delivery's latency recorded), with no echo workers. Behaviour, never speed.

mod common;

use agentwire_bench::{run, BenchTransport, HubLauncher, Pattern};

fn one_way(pattern: Pattern, transport: BenchTransport) {
    let mut config = common::tiny(&[transport]);
    config.scenarios[0].pattern = pattern;
    config.scenarios[0].agents = 3;
    config.repetitions = 1;
    let report = run(
        &config,
        &HubLauncher::InProcess,
        vec!["test".into()],
        &mut |_| {},
    )
    .unwrap();
    let summary = &report.cells[0];
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    let cell = &summary.runs[0];
    assert_eq!(cell.config.pattern, pattern);
    assert_eq!(cell.config.workers, 0);
    assert!(cell.answered > 0, "nothing delivered: {cell:?}");
    assert_eq!(cell.errors, 0, "{:?}", cell.error_samples);
    assert_eq!(cell.sent, cell.answered);
    assert!(cell.consistent);
    assert_eq!(cell.latency.count, cell.answered);
    assert!(cell.latency.p50_us > 0);
    assert!(cell.open_loop.is_none() && cell.priority.is_none());
    if pattern == Pattern::Fanout {
        // Every message is expected at each of the three subscribers.
        assert_eq!(cell.sent % 3, 0, "{} deliveries expected", cell.sent);
    }
    let table = agentwire_bench::render_table(&report);
    assert!(table.starts_with("pattern transport"), "{table}");
    assert!(
        table.lines().nth(1).unwrap().starts_with(pattern.name()),
        "{table}"
    );
}

#[test]
fn fanout_over_a_unix_socket() {
    one_way(Pattern::Fanout, BenchTransport::Unix);
}

#[test]
fn fanout_over_quic() {
    one_way(Pattern::Fanout, BenchTransport::Quic);
}

#[test]
fn gather_over_websocket() {
    one_way(Pattern::Gather, BenchTransport::Wss);
}

#[test]
fn stream_over_quic() {
    one_way(Pattern::Stream, BenchTransport::Quic);
}

#[test]
fn queue_over_a_unix_socket() {
    one_way(Pattern::Queue, BenchTransport::Unix);
}

#[test]
fn queue_over_quic() {
    one_way(Pattern::Queue, BenchTransport::Quic);
}

#[test]
fn a_body_too_small_for_the_header_is_refused() {
    let mut config = common::tiny(&[BenchTransport::Unix]);
    config.scenarios[0].pattern = Pattern::Fanout;
    config.scenarios[0].size = 8;
    assert!(config.validate().is_err());
}
