//! The scorecard's scenarios: what each one loads (file, connections, streams, requests, a
//! time limit) at a scale, and which figures it reports.
//!
//! This module owns the fixed set of scenarios; it must not run them.

use super::{Metric, Scale, ScenarioRun};
use crate::load::Limit;

/// What one scenario asks for, before the protocol adjusts it.
pub(super) struct Spec {
    pub(super) scenario: String,
    pub(super) group: u8,
    pub(super) title: String,
    pub(super) file: &'static str,
    pub(super) connections: usize,
    pub(super) streams: usize,
    pub(super) max_per_conn: u64,
    pub(super) limit: Limit,
    pub(super) metrics: fn(&ScenarioRun) -> Vec<Metric>,
}

fn handshake_metrics(r: &ScenarioRun) -> Vec<Metric> {
    vec![
        Metric::new("connect p50 ms", r.connect_p50_ms, false),
        Metric::new("connect p99 ms", r.connect_p99_ms, false),
        Metric::new("handshakes/s", r.handshakes_per_s, true),
    ]
}

fn download_metrics(r: &ScenarioRun) -> Vec<Metric> {
    vec![
        Metric::new("mean ms", r.request_mean_ms, false),
        Metric::new("p50 ms", r.request_p50_ms, false),
        Metric::new("p99 ms", r.request_p99_ms, false),
        Metric::new("MB/s", r.mb_per_s, true),
    ]
}

fn rps_metrics(r: &ScenarioRun) -> Vec<Metric> {
    vec![Metric::new("req/s", r.rps, true)]
}

fn round_metrics(r: &ScenarioRun) -> Vec<Metric> {
    vec![
        Metric::new("req/s", r.rps, true),
        Metric::new("MB/s", r.mb_per_s, true),
        Metric::new("p99 ms", r.request_p99_ms, false),
    ]
}

pub(super) fn specs(scale: &Scale) -> Vec<Spec> {
    let mut out = Vec::new();
    let window = Limit::Duration(scale.rps_window);
    let n = scale.downloads;
    out.push(Spec {
        scenario: "handshakes".into(),
        group: 1,
        title: format!(
            "1. handshakes: {} connections x 1 request of 1k.bin",
            scale.handshakes
        ),
        file: "1k.bin",
        connections: 1,
        streams: 1,
        max_per_conn: 1,
        limit: Limit::Requests(scale.handshakes),
        metrics: handshake_metrics,
    });
    let file_name = |f: &str| -> &'static str {
        crate::files::STANDARD_FILES
            .iter()
            .find(|(name, _)| *name == f)
            .map_or("10k.bin", |(name, _)| name)
    };
    for f in &scale.download_files {
        out.push(Spec {
            scenario: format!("serial-{f}"),
            group: 2,
            title: format!("2. serial {f} x{n} (1 connection, 1 stream)"),
            file: file_name(f),
            connections: 1,
            streams: 1,
            max_per_conn: 0,
            limit: Limit::Requests(n),
            metrics: download_metrics,
        });
    }
    let parallel = usize::try_from(n).unwrap_or(1).max(1);
    for f in &scale.download_files {
        out.push(Spec {
            scenario: format!("parallel-{f}"),
            group: 3,
            title: format!("3. parallel {f} x{n} (1 connection, {parallel} streams)"),
            file: file_name(f),
            connections: 1,
            streams: parallel,
            max_per_conn: 0,
            limit: Limit::Requests(n),
            metrics: download_metrics,
        });
    }
    for &p in &scale.parallelism {
        out.push(Spec {
            scenario: format!("rps-10k-p{p}"),
            group: 4,
            title: format!(
                "4. 10k.bin at parallelism {p} (1 connection, {p} stream{}), {:.1} s",
                if p == 1 { "" } else { "s" },
                scale.rps_window.as_secs_f64()
            ),
            file: "10k.bin",
            connections: 1,
            streams: p.max(1),
            max_per_conn: 0,
            limit: window,
            metrics: rps_metrics,
        });
    }
    out.push(Spec {
        scenario: "round1-630b".into(),
        group: 5,
        title: format!(
            "5. round 1: {} x 630b.bin over {} connections x {} streams",
            scale.round1_requests, scale.round1_connections, scale.round1_streams
        ),
        file: "630b.bin",
        connections: scale.round1_connections,
        streams: scale.round1_streams,
        max_per_conn: 0,
        limit: Limit::Requests(scale.round1_requests),
        metrics: round_metrics,
    });
    out.push(Spec {
        scenario: "round2-10m".into(),
        group: 5,
        title: format!(
            "5. round 2: {} x 10m.bin over {} connections x {} streams",
            scale.round2_requests, scale.round2_connections, scale.round2_streams
        ),
        file: "10m.bin",
        connections: scale.round2_connections,
        streams: scale.round2_streams,
        max_per_conn: 0,
        limit: Limit::Requests(scale.round2_requests),
        metrics: round_metrics,
    });
    for f in ["5k.bin", "15k.bin", "2m.bin"] {
        out.push(Spec {
            scenario: format!("long-{f}"),
            group: 6,
            title: format!(
                "6. long connection {f} (1 connection, 1 stream), {:.1} s",
                scale.rps_window.as_secs_f64()
            ),
            file: f,
            connections: 1,
            streams: 1,
            max_per_conn: 0,
            limit: window,
            metrics: rps_metrics,
        });
    }
    out.push(Spec {
        scenario: "short-1k.bin".into(),
        group: 6,
        title: format!(
            "6. short connections 1k.bin (1 request each), {:.1} s",
            scale.rps_window.as_secs_f64()
        ),
        file: "1k.bin",
        connections: 1,
        streams: 1,
        max_per_conn: 1,
        limit: window,
        metrics: rps_metrics,
    });
    out
}

/// The most threads, up to `max`, that divide `connections` evenly (each thread gets the same
/// number of connections).
pub(super) fn spread(connections: usize, max: usize) -> usize {
    (1..=max.max(1).min(connections.max(1)))
        .rev()
        .find(|t| connections % t == 0)
        .unwrap_or(1)
}
