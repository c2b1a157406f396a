//! The scorecard end to end at the `tiny` scale against our in-process server, for h3, h2
//! and http/1.1: every scenario runs for every protocol, fixed counts are exact, nothing
//! fails, and the JSON has the agentwire-scorecard/1 shape. No assertion depends on speed.

use std::time::{Duration, Instant};

use agentwire_load::scorecard::{self, Scale, ScorecardConfig, SCHEMA, SERVER_CPU_METRIC};
use agentwire_load::Proto;

#[test]
fn tiny_scorecard_runs_every_scenario_for_every_protocol() {
    let protos = vec![Proto::H3, Proto::H2, Proto::Http11];
    let scale = Scale::tiny();
    let mut config = ScorecardConfig::in_process(protos.clone(), scale.clone());
    config.threads = 2;
    // The in-process server lives in this process: its CPU time is measurable here (with
    // the client's, so only the mechanism is checked, not the number).
    config.server_pid = Some(std::process::id());
    let started = Instant::now();
    let mut seen = 0;
    let card = scorecard::run(&config, &mut |_| seen += 1).expect("scorecard runs");
    assert!(started.elapsed() < Duration::from_secs(300), "hang guard");
    assert_eq!(seen, card.runs.len(), "progress is called once per run");

    let mut scenarios: Vec<&str> = card.runs.iter().map(|r| r.scenario.as_str()).collect();
    scenarios.dedup();
    // 1 handshakes + 4 serial + 4 parallel + 2 parallelisms + 2 rounds + 4 long/short.
    assert_eq!(scenarios.len(), 17, "{scenarios:?}");
    assert_eq!(card.runs.len(), 17 * protos.len());
    for group in 1..=6u8 {
        for p in &protos {
            assert!(
                card.runs.iter().any(|r| r.group == group && r.proto == *p),
                "group {group} {p}"
            );
        }
    }

    for r in &card.runs {
        let what = format!("{} {}", r.scenario, r.proto);
        assert_eq!(r.problems(), 0, "{what}: {r:?}");
        assert_eq!(r.errors, 0, "{what}");
        assert!(r.failure.is_none() && !r.cut_short, "{what}");
        assert!(r.succeeded > 0, "{what}");
        assert!(!r.metrics.is_empty(), "{what}");
        assert!(r.server_cpu_s.is_some(), "{what}: server CPU measured");
        assert!(
            r.metrics.iter().any(|m| m.name == SERVER_CPU_METRIC),
            "{what}: server CPU per request shown"
        );
        assert!(
            r.client_cpu_s.is_none(),
            "{what}: in-process, client CPU not separable"
        );
        if let Some(n) = r.requests_asked {
            assert_eq!(r.requests, n, "{what}: count-limited runs are exact");
            assert_eq!(r.succeeded, n, "{what}");
        }
        match r.group {
            1 => {
                assert_eq!(r.requests, scale.handshakes, "{what}");
                assert_eq!(
                    r.connections_made, scale.handshakes,
                    "{what}: one per request"
                );
            }
            2 => {
                assert_eq!(
                    (r.requests, r.connections, r.streams),
                    (scale.downloads, 1, 1)
                );
                assert_eq!(r.connections_made, 1, "{what}");
            }
            3 => {
                let n = scale.downloads as usize;
                assert_eq!(r.requests, scale.downloads, "{what}");
                if r.proto == Proto::Http11 {
                    assert_eq!((r.connections, r.streams), (n, 1), "{what}");
                    assert!(r.note.is_some(), "{what}: http/1.1 says so");
                } else {
                    assert_eq!((r.connections, r.streams), (1, n), "{what}");
                    assert!(r.note.is_none(), "{what}");
                }
            }
            _ => {}
        }
    }
    let round1 = card
        .runs
        .iter()
        .find(|r| r.scenario == "round1-630b")
        .unwrap();
    assert_eq!(round1.requests, scale.round1_requests);
    assert_eq!(round1.threads, 2, "4 connections spread over 2 threads");
    let round2 = card
        .runs
        .iter()
        .find(|r| r.scenario == "round2-10m")
        .unwrap();
    assert_eq!(round2.requests, scale.round2_requests);
    assert_eq!(card.total_errors, 0);
    assert_eq!(card.target.kind, "in-process");
    assert_eq!(card.target.label, "agentwire serve");
    assert_eq!(card.target.client_threads, 2);
    assert_eq!(card.target.verification, "ca");

    let json: serde_json::Value =
        serde_json::from_str(&scorecard::to_json(&card).unwrap()).unwrap();
    assert_eq!(json["schema"], SCHEMA);
    assert_eq!(json["scale"]["name"], "tiny");
    assert_eq!(json["scale"]["rps_window_s"], 0.3);
    assert!(json["environment"]["cores"].as_u64().unwrap() >= 1);
    assert_eq!(json["protos"], serde_json::json!(["h3", "h2", "http1.1"]));
    assert_eq!(json["total_errors"], 0);
    let runs = json["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 51);
    for key in [
        "scenario",
        "group",
        "proto",
        "file",
        "connections",
        "streams",
        "requests",
        "succeeded",
        "errors",
        "errors_by_kind",
        "rps",
        "mb_per_s",
        "connect_p50_ms",
        "request_p99_ms",
        "metrics",
    ] {
        assert!(runs.iter().all(|r| r.get(key).is_some()), "runs[].{key}");
    }

    let md = scorecard::render_markdown(&card);
    assert!(md.contains("| scenario | metric | h3 | h2 | http1.1 | h3/h2 | h3/http1.1 |"));
    assert!(md.contains("Errors: none."), "{md}");
}
