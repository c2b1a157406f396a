//! End-to-end: tiny benchmark runs over real loopback QUIC, one per stream mapping. These
//! check behaviour (every request accounted for, JSON shape), never speed.

use agentwire::StreamMapping;
use agentwire_bench::{run, write_report, BenchConfig, SCHEMA};

fn tiny(mapping: StreamMapping) -> BenchConfig {
    BenchConfig {
        mappings: vec![mapping],
        agents: vec![2],
        sizes: vec![100],
        window: 4,
        warmup_ms: 100,
        duration_ms: 300,
        // Generous, so a slow machine gets slow answers rather than errors.
        request_timeout_ms: 30_000,
    }
}

async fn tiny_run(mapping: StreamMapping) {
    let config = tiny(mapping);
    let mut lines = Vec::new();
    let report = run(&config, vec!["test".into()], &mut |l| {
        lines.push(l.to_owned())
    })
    .await
    .unwrap();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].starts_with("cell 1/1: "), "{}", lines[0]);
    assert_eq!(report.cells.len(), 1);
    let cell = &report.cells[0];
    assert_eq!(cell.config.workers, 1);
    assert_eq!(cell.config.mapping, mapping);
    assert!(cell.answered > 0, "no answers: {cell:?}");
    assert_eq!(cell.errors, 0, "errors: {:?}", cell.error_samples);
    assert_eq!(cell.sent, cell.answered);
    assert!(cell.consistent);
    assert!(cell.connect_ms > 0.0);
    assert!(cell.responses_per_sec > 0.0);

    let dir = tempfile::tempdir().unwrap();
    let path = write_report(&report, dir.path()).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(json["schema"], SCHEMA);
    assert_eq!(json["command_line"][0], "test");
    assert!(json["environment"]["cores"].as_u64().unwrap() >= 1);
    let c = &json["cells"][0];
    assert_eq!(c["config"]["mapping"], mapping.to_string());
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
async fn tiny_run_per_message() {
    tiny_run(StreamMapping::PerMessage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_run_lanes() {
    tiny_run(StreamMapping::Lanes).await;
}
