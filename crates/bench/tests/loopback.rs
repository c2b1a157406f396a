//! End-to-end: tiny benchmark runs over every real loopback transport (QUIC per-message and
//! lanes, HTTP/2 and WebSocket over TLS, a Unix socket). These check behaviour (every request
//! accounted for, the transport recorded, JSON shape), never speed.

use agentwire_bench::{run, write_report, BenchConfig, BenchTransport, SCHEMA};

fn tiny(transport: BenchTransport) -> BenchConfig {
    BenchConfig {
        transports: vec![transport],
        agents: vec![2],
        sizes: vec![100],
        window: 4,
        warmup_ms: 100,
        duration_ms: 300,
        // Generous, so a slow machine gets slow answers rather than errors.
        request_timeout_ms: 30_000,
        repetitions: 2,
    }
}

async fn tiny_run(transport: BenchTransport) {
    let config = tiny(transport);
    let mut lines = Vec::new();
    let report = run(&config, vec!["test".into()], &mut |l| {
        lines.push(l.to_owned())
    })
    .await
    .unwrap();
    assert_eq!(lines.len(), 2);
    assert!(
        lines[1].starts_with(&format!("cell 1/1, run 2/2: {transport} ")),
        "{}",
        lines[1]
    );
    assert_eq!(report.cells.len(), 1);
    let summary = &report.cells[0];
    assert_eq!(summary.runs.len(), 2);
    assert_eq!(summary.errors, 0);
    assert!(summary.consistent);
    assert!(summary.responses_per_sec > 0.0);
    assert!(summary.responses_per_sec_cov.is_some());
    let cell = &summary.runs[0];
    assert_eq!(cell.config.workers, 1);
    assert_eq!(cell.config.agents, 2);
    assert_eq!(cell.config.transport, transport);
    assert!(cell.answered > 0, "no answers: {cell:?}");
    assert_eq!(cell.errors, 0, "errors: {:?}", cell.error_samples);
    assert_eq!(cell.sent, cell.answered);
    assert!(cell.consistent);
    assert!(cell.connect_ms > 0.0);
    assert!(cell.responses_per_sec > 0.0);
    let expected_scheme = match transport {
        BenchTransport::Quic | BenchTransport::QuicLanes => "quic://127.0.0.1:",
        BenchTransport::H2 => "h2://127.0.0.1:",
        BenchTransport::Wss => "wss://127.0.0.1:",
        BenchTransport::Unix => "unix://",
    };
    assert!(
        cell.hub_url.starts_with(expected_scheme),
        "{}",
        cell.hub_url
    );
    if let Some(sock) = cell.hub_url.strip_prefix("unix://") {
        // The socket and its temporary directory are gone again.
        let sock = std::path::Path::new(sock);
        let dir = sock.parent().unwrap();
        assert!(dir.starts_with(std::env::temp_dir()), "{}", dir.display());
        assert!(!sock.exists(), "{} left behind", sock.display());
        assert!(!dir.exists(), "{} left behind", dir.display());
    }

    let dir = tempfile::tempdir().unwrap();
    let path = write_report(&report, dir.path()).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(json["schema"], SCHEMA);
    assert_eq!(SCHEMA, "agentwire-bench/2");
    assert_eq!(json["command_line"][0], "test");
    assert!(json["environment"]["cores"].as_u64().unwrap() >= 1);
    assert_eq!(json["config"]["transports"][0], transport.name());
    assert_eq!(json["cells"][0]["runs"].as_array().unwrap().len(), 2);
    let c = &json["cells"][0]["runs"][0];
    assert_eq!(c["config"]["transport"], transport.name());
    assert!(c["config"].get("mapping").is_none());
    assert_eq!(c["hub_url"], cell.hub_url.as_str());
    let hist_total: u64 = c["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| pair[1].as_u64().unwrap())
        .sum();
    assert_eq!(hist_total, cell.answered);
    assert_eq!(c["latency"]["count"].as_u64().unwrap(), cell.answered);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_run_quic() {
    tiny_run(BenchTransport::Quic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_run_quic_lanes() {
    tiny_run(BenchTransport::QuicLanes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_run_h2() {
    tiny_run(BenchTransport::H2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_run_wss() {
    tiny_run(BenchTransport::Wss).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_run_unix() {
    tiny_run(BenchTransport::Unix).await;
}

/// All transports in one run: cells in order, each on its own transport.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_run_all_transports_in_order() {
    let mut config = tiny(BenchTransport::Quic);
    config.transports = BenchTransport::ALL.to_vec();
    config.repetitions = 1;
    let mut lines = Vec::new();
    let report = run(&config, vec!["test".into()], &mut |l| {
        lines.push(l.to_owned())
    })
    .await
    .unwrap();
    assert_eq!(lines.len(), 5);
    let got: Vec<BenchTransport> = report.cells.iter().map(|c| c.config.transport).collect();
    assert_eq!(got, BenchTransport::ALL.to_vec());
    for c in report.cells.iter().flat_map(|s| &s.runs) {
        assert!(c.answered > 0, "no answers: {c:?}");
        assert_eq!(c.errors, 0, "errors: {:?}", c.error_samples);
        assert!(c.consistent);
    }
    let table = agentwire_bench::render_table(&report);
    assert!(table.starts_with("transport "), "{table}");
    for t in BenchTransport::ALL {
        assert!(
            table.lines().any(|l| l.starts_with(&format!("{t} "))),
            "{table}"
        );
    }
}
