//! End-to-end: tiny benchmark runs over every real loopback transport (QUIC per-message and
//! lanes, HTTP/2 and WebSocket over TLS, a Unix socket). These check behaviour (every request
//! accounted for, the transport recorded, JSON shape), never speed.

mod common;

use agentwire_bench::{
    run, write_report, BenchConfig, BenchTransport, HubLauncher, NetworkProfile, Progress, Report,
    SCHEMA,
};

fn tiny(transport: BenchTransport) -> BenchConfig {
    common::tiny(&[transport])
}

fn run_collecting(config: &BenchConfig) -> (Report, Vec<Progress>) {
    let mut events = Vec::new();
    let report = run(
        config,
        &HubLauncher::InProcess,
        vec!["test".into()],
        &mut |p| events.push(p.clone()),
    )
    .unwrap();
    (report, events)
}

fn tiny_run(transport: BenchTransport) {
    let config = tiny(transport);
    let (report, events) = run_collecting(&config);
    // A "starting" and a "finished" event per run.
    assert_eq!(events.len(), 4);
    assert_eq!(events[3].finished_runs, 2);
    assert_eq!(events[3].total_runs, 2);
    assert_eq!((events[2].repetition, events[2].repetitions), (2, 2));
    assert!(events[3].label.contains("msg/s"), "{}", events[3].label);
    assert_eq!(report.cells.len(), 1);
    assert_eq!(report.hub_mode, "in-process");
    let summary = &report.cells[0];
    assert!(summary.failures.is_empty(), "{:?}", summary.failures);
    assert!(summary.skipped.is_none());
    assert_eq!(summary.runs.len(), 2);
    assert_eq!(summary.errors, 0);
    assert!(summary.consistent);
    assert!(summary.responses_per_sec > 0.0);
    assert!(summary.responses_per_sec_cov.is_some());
    assert_eq!(summary.network_mode, Some("loopback"));
    assert_eq!(summary.priority.len(), 4);
    let cell = &summary.runs[0];
    assert_eq!(cell.config.workers, 1);
    assert_eq!(cell.config.agents, 2);
    assert_eq!(cell.config.transport, transport);
    assert!(cell.answered > 0, "no answers: {cell:?}");
    assert_eq!(cell.errors, 0, "errors: {:?}", cell.error_samples);
    assert_eq!(cell.sent, cell.answered);
    assert!(cell.consistent);
    assert!(cell.connect_ms > 0.0);
    // Each client's own connect time: none after the last one's.
    let c = &cell.connect;
    assert!(0.0 < c.p50_ms && c.p50_ms <= c.p99_ms, "{c:?}");
    assert!(c.p99_ms <= c.all_connected_ms, "{c:?}");
    assert_eq!(cell.connect.agents, 2);
    assert!(cell.connect.handshakes_per_sec > 0.0);
    assert!(cell.responses_per_sec > 0.0);
    // Open loop: every scheduled request answered, latency from intended send time.
    let ol = cell.open_loop.as_ref().expect("open-loop phase");
    assert!(ol.rate_per_sec >= 1.0);
    assert!(ol.scheduled > 0);
    assert_eq!(ol.answered, ol.scheduled, "{ol:?}");
    assert_eq!(ol.errors, 0);
    assert_eq!(ol.latency.count, ol.answered);
    // Priority probe: every class sent and answered, bulk moved.
    let pr = cell.priority.as_ref().expect("priority probe");
    let classes: Vec<&str> = pr.classes.iter().map(|c| c.class).collect();
    assert_eq!(classes, ["critical", "high", "medium", "low"]);
    for c in &pr.classes {
        assert!(c.sent > 0 && c.answered == c.sent, "{c:?}");
        assert_eq!(c.latency.count, c.answered);
    }
    assert!(pr.bulk_answered > 0, "{pr:?}");
    // Resources: the hub ran in-process, so only the agent side is measured.
    assert_eq!(cell.resources.hub_mode, "in-process");
    assert!(cell.resources.hub.is_none());
    assert!(cell.resources.agents.peak_rss_bytes > 0);
    // QUIC reconnects every client with 0-RTT; the others do not.
    match transport {
        BenchTransport::Quic | BenchTransport::QuicLanes => {
            let z = cell.connect.resumed.as_ref().expect("0-RTT reconnect");
            assert_eq!(z.agents, 2);
            assert_eq!(z.zero_rtt_accepted, 2, "{z:?}");
        }
        _ => assert!(cell.connect.resumed.is_none()),
    }
    assert_eq!(cell.network.mode, "loopback");
    let expected_scheme = match transport {
        BenchTransport::Quic | BenchTransport::QuicLanes => "quic://127.0.0.1:",
        BenchTransport::H2 => "h2://127.0.0.1:",
        BenchTransport::Wss => "wss://127.0.0.1:",
        BenchTransport::Unix => "unix://",
        BenchTransport::Wt => "wt://127.0.0.1:",
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
    assert_eq!(SCHEMA, "agentwire-bench/3");
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

#[test]
fn tiny_run_quic() {
    tiny_run(BenchTransport::Quic);
}

#[test]
fn tiny_run_quic_lanes() {
    tiny_run(BenchTransport::QuicLanes);
}

#[test]
fn tiny_run_h2() {
    tiny_run(BenchTransport::H2);
}

#[test]
fn tiny_run_wss() {
    tiny_run(BenchTransport::Wss);
}

#[test]
fn tiny_run_unix() {
    tiny_run(BenchTransport::Unix);
}

#[test]
fn tiny_run_wt() {
    tiny_run(BenchTransport::Wt);
}

/// All transports in one run: cells in order, each on its own transport.
#[test]
fn tiny_run_all_transports_in_order() {
    let mut config = tiny(BenchTransport::Quic);
    config.transports = BenchTransport::ALL.to_vec();
    config.repetitions = 1;
    config.open_loop_ms = 0;
    config.priority_probe_ms = 0;
    let (report, events) = run_collecting(&config);
    assert_eq!(events.len(), 2 * BenchTransport::ALL.len());
    let got: Vec<BenchTransport> = report.cells.iter().map(|c| c.config.transport).collect();
    assert_eq!(got, BenchTransport::ALL.to_vec());
    for c in report.cells.iter().flat_map(|s| &s.runs) {
        assert!(c.answered > 0, "no answers: {c:?}");
        assert_eq!(c.errors, 0, "errors: {:?}", c.error_samples);
        assert!(c.consistent);
        assert!(c.open_loop.is_none() && c.priority.is_none());
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

/// An emulated 40 ms path (netsim packet mode; needs namespaces): every transport but Unix
/// crosses it on each stage, Unix is skipped with its reason, round trips take at least the
/// added RTT, and the record names the stage that ran.
#[test]
fn emulated_path_adds_its_rtt_or_skips() {
    for stage in agentwire_netsim::StageKind::ALL {
        emulated_path_on(stage);
    }
}

fn emulated_path_on(stage: agentwire_netsim::StageKind) {
    if let Err(why) = agentwire_bench::netpath::EmulatedPath::available(stage) {
        eprintln!("{stage}: skipped: {why}");
        return;
    }
    let mut config = tiny(BenchTransport::Quic);
    config.netsim_stage = stage;
    config.transports = vec![
        BenchTransport::Quic,
        BenchTransport::H2,
        BenchTransport::Wss,
        BenchTransport::Unix,
    ];
    config.scenarios[0].network = NetworkProfile::parse("40ms").unwrap();
    config.repetitions = 1;
    let (report, _) = run_collecting(&config);
    for cell in &report.cells {
        if cell.config.transport == BenchTransport::Unix {
            assert!(
                cell.skipped.as_deref().unwrap().contains("unix"),
                "{cell:?}"
            );
            assert!(cell.runs.is_empty());
            continue;
        }
        assert!(cell.failures.is_empty(), "{:?}", cell.failures);
        let r = &cell.runs[0];
        assert_eq!(r.network.mode, "packet");
        assert_eq!(r.network.spec.as_deref(), Some("delay=20ms"));
        assert!(r.hub_url.contains("198.18.0.2"), "{}", r.hub_url);
        assert!(r.errors == 0 && r.consistent, "{:?}", r.error_samples);
        assert!(
            r.latency.min_us >= 40_000,
            "{}: {:?}",
            r.config.transport,
            r.latency
        );
        let emu = r.network.emulator.as_ref().unwrap();
        assert!(emu.packets > 0);
        assert_eq!(emu.dropped_loss, 0);
        assert_eq!(emu.stage, stage.name());
        assert_eq!(emu.oversize, 0, "{stage}: every packet within the MTU");
    }
}

/// `--rate`: the closed loop sends no more than the cap allows (each of the cell's slots at
/// most once per interval), whatever the machine's speed.
#[test]
fn a_rate_cap_bounds_the_closed_loop() {
    let mut config = tiny(BenchTransport::Unix);
    config.repetitions = 1;
    config.open_loop_ms = 0;
    config.priority_probe_ms = 0;
    config.duration_ms = 500;
    config.rate = Some(40.0);
    let (report, _) = run_collecting(&config);
    let run = &report.cells[0].runs[0];
    let slots = (run.config.agents * run.config.window) as u64;
    assert_eq!(run.config.rate, Some(40.0));
    assert!(run.answered > 0, "no answers: {run:?}");
    assert_eq!(run.errors, 0, "errors: {:?}", run.error_samples);
    // 40/s over 0.5 s, plus one turn per slot that may fall on the window's edges.
    assert!(
        run.sent <= 20 + slots,
        "{} sent under a cap of 40/s",
        run.sent
    );

    config.rate = Some(0.0);
    assert!(config.validate().is_err());
}
