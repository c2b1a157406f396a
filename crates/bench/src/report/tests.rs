//! The report renderer's tests: every section, escaping, charts present or left out, the HTML page's self-check.

use super::*;
use crate::record::*;
use crate::stats::LatencySummary;
use crate::{BenchConfig, ClassSummary, Environment, SCHEMA};
use crate::{NetworkProfile, Pattern};

fn network(name: &str) -> NetworkProfile {
    NetworkProfile {
        name: name.to_owned(),
        rtt_ms: 0,
        loss_percent: 0.0,
    }
}

fn cell(transport: BenchTransport, agents: usize, size: usize, net: &str) -> CellConfig {
    CellConfig {
        pattern: Pattern::Request,
        transport,
        agents,
        workers: CellConfig::workers_for(agents),
        size,
        window: 4,
        warmup_ms: 100,
        duration_ms: 1000,
        rate: None,
        request_timeout_ms: 5000,
        network: network(net),
        open_loop_ms: 0,
        priority_probe_ms: 0,
        quic_cc: Default::default(),
        quic_max_streams: 4096,
        quic_max_mtu: 16384,
        quic_loopback_mtu: 16384,
        quic_receive_budget: 0,
        quic_endpoints: 1,
        hub_threads: 1,
        client_threads: 1,
        tcp_cc: None,
        netsim_stage: Default::default(),
        qlog_dir: None,
    }
}

fn latency(p50: u64, p99: u64) -> LatencySummary {
    LatencySummary {
        count: 100,
        min_us: p50 / 2,
        mean_us: p50 as f64,
        p50_us: p50,
        p90_us: (p50 + p99) / 2,
        p99_us: p99,
        p999_us: p99 * 2,
        max_us: p99 * 3,
    }
}

/// A hand-made run: `rps` responses per second, a small histogram around `p50_us`.
fn run(config: &CellConfig, rps: f64, p50_us: u64) -> CellResult {
    CellResult {
        config: config.clone(),
        hub_url: "quic://127.0.0.1:1".into(),
        network: NetworkPath {
            mode: "loopback",
            spec: None,
            hub_url: "quic://127.0.0.1:1".into(),
            emulator: None,
        },
        connect_ms: 12.5,
        connect: ConnectRecord {
            agents: config.agents + config.workers,
            all_connected_ms: 12.5,
            p50_ms: 8.0,
            p99_ms: 12.0,
            handshakes_per_sec: 880.0,
            resumed: None,
        },
        sent: 100,
        answered: 100,
        errors: 0,
        timeouts: 0,
        abandoned: 0,
        consistent: true,
        responses_per_sec: rps,
        payload_mbit_per_sec: rps * config.size as f64 * 16.0 / 1e6,
        latency: latency(p50_us, p50_us * 4),
        histogram: vec![(p50_us / 2, 10), (p50_us, 40), (p50_us * 4, 50)],
        open_loop: None,
        priority: None,
        resources: Resources {
            hub_mode: "in-process",
            hub: None,
            agents: ProcessUsage::default(),
            hub_cpu_us_per_response: None,
            agents_cpu_us_per_response: 0.0,
            hub_rss_bytes_per_agent: None,
            hub_sockets: None,
        },
        bottleneck: None,
        error_samples: Vec::new(),
        udp_rcvbuf_errors: None,
    }
}

fn report(cells: Vec<CellSummary>) -> Report {
    Report {
        schema: SCHEMA,
        command_line: vec!["agentwire".into(), "bench".into(), "--note=<b>&".into()],
        started_unix: 1_700_000_000,
        environment: Environment {
            cpu_model: Some("Example CPU <x> | 2.0GHz".into()),
            cores: 2,
            kernel: None,
            git_sha: Some("abc123".into()),
            rustc: Some("rustc 1.95.0".into()),
            build_profile: "release",
            target: "linux-x86_64".into(),
            crate_versions: [("quinn".to_owned(), "0.11.12".to_owned())].into(),
            network: crate::environment::NetworkEnvironment {
                rmem_max: Some(212_992),
                wmem_max: None,
                quic_udp_buffers: Some((4_194_304, 4_194_304)),
                udp_gso_segments: Some(64),
                udp_gro_segments: Some(64),
                tcp_congestion_control: Some("cubic".into()),
            },
        },
        hub_mode: "process",
        config: BenchConfig::default(),
        cells,
    }
}

/// quic and wss on two networks; quic noisy, wss with a bottleneck; one skipped cell.
fn sample() -> Report {
    let mut cells = Vec::new();
    for net in ["0ms", "50ms+1%"] {
        let q = cell(BenchTransport::Quic, 10, 1024, net);
        cells.push(CellSummary::from_runs(
            q.clone(),
            vec![
                run(&q, 900.0, 1500),
                run(&q, 1300.0, 1600),
                run(&q, 1000.0, 1400),
            ],
        ));
        let w = cell(BenchTransport::Wss, 10, 1024, net);
        let mut runs = vec![run(&w, 500.0, 3000), run(&w, 510.0, 3100)];
        runs[1].bottleneck = Some("load generator at 100% CPU".into());
        cells.push(CellSummary::from_runs(w, runs));
    }
    cells.push(CellSummary::skipped(
        cell(BenchTransport::H2, 10, 1024, "50ms+1%"),
        "packet mode needs root <&>".into(),
    ));
    report(cells)
}

/// Where QUIC loses, the verdict names the winner and why, from the cells' CPU per message.
#[test]
fn the_verdict_says_who_won_and_why_quic_lost() {
    let mut cells = Vec::new();
    let q = cell(BenchTransport::Quic, 10, 1024, "0ms");
    let mut qr = run(&q, 600.0, 2000);
    qr.resources.hub_cpu_us_per_response = Some(30.0);
    cells.push(CellSummary::from_runs(q, vec![qr]));
    let h = cell(BenchTransport::H2, 10, 1024, "0ms");
    let mut hr = run(&h, 1000.0, 1000);
    hr.resources.hub_cpu_us_per_response = Some(15.0);
    cells.push(CellSummary::from_runs(h, vec![hr]));
    // Unix is faster still, but crosses no network: not the "best TCP".
    let u = cell(BenchTransport::Unix, 10, 1024, "0ms");
    cells.push(CellSummary::from_runs(
        u.clone(),
        vec![run(&u, 5000.0, 200)],
    ));
    // A network where only QUIC ran.
    cells.push(CellSummary::skipped(
        cell(BenchTransport::Quic, 10, 1024, "50ms+1%"),
        "no namespaces here".into(),
    ));
    let r = report(cells);
    let lines = crate::verdict::verdict(&r);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let l = &lines[0];
    assert_eq!(l.tcp, "h2");
    assert!((l.msgs_ratio - 0.6).abs() < 1e-9);
    assert_eq!(l.winner, crate::verdict::Winner::Tcp("h2"));
    assert_eq!(
        l.why.as_deref(),
        Some("CPU per message in the hub: 2.0x h2's")
    );
    let text = crate::verdict::render_text(&r);
    assert!(text.contains("0.60x msg/s, p90 2.00x"), "{text}");
    assert!(text.contains("→ h2 wins"), "{text}");
    assert!(
        text.contains("50ms+1%: not measured (no namespaces here)"),
        "{text}"
    );
}

#[test]
fn markdown_has_the_medians_flags_and_reasons() {
    let r = sample();
    let md = render_markdown(&r, &charts(&r));
    // Median of 900, 1300, 1000 is 1000; cov is 19.5 %.
    assert!(
        md.contains("| quic | 0ms | 10 | 1024 | 4 | 3 | 1000 | 19.5 | noisy |"),
        "{md}"
    );
    // wss: median of 500 and 510 is 505; p50 median of 3.0 and 3.1 ms is 3.05 ms.
    assert!(
        md.contains("| wss | 0ms | 10 | 1024 | 4 | 2 | 505 | 1.4 | no |"),
        "{md}"
    );
    assert!(md.contains("| 3.05 |"), "{md}");
    assert!(
        md.contains("- noisy: quic, network 0ms, 10 agents × 1 KiB"),
        "{md}"
    );
    // The bottleneck is a column with one footnote per kind, not a note per cell.
    assert!(
        md.contains("| 0 | load generator at 100% CPU (1) |"),
        "{md}"
    );
    assert!(md.contains("- (1) load generator at 100% CPU\n"), "{md}");
    assert!(!md.contains("- bottleneck:"), "{md}");
    // The verdict opens the report: QUIC 1000 msg/s against wss's 505 on both networks.
    let verdict = md.find("## Verdict").expect("a verdict section");
    assert!(verdict < md.find("## Command line").unwrap(), "{md}");
    assert!(
        md.contains(
            "- 0ms · 10 agents × 1 KiB: QUIC vs best TCP (wss) 1.98x msg/s, p90 0.49x, \
             p99 0.49x → QUIC wins (1,000 vs 505 msg/s)"
        ),
        "{md}"
    );
    assert!(
        md.contains("| h2 | 50ms+1% | 10 | 1024 | packet mode needs root &lt;&amp;&gt; |"),
        "{md}"
    );
    // Escaped for Markdown: a pipe in a table cell, angle brackets.
    assert!(md.contains("Example CPU &lt;x&gt; \\| 2.0GHz"), "{md}");
    // The command line is verbatim in a code block, quoted like a shell would.
    assert!(
        md.contains("```\nagentwire bench '--note=<b>&'\n```"),
        "{md}"
    );
    assert!(md.contains("| kernel | – |"), "{md}");
    assert!(md.contains("![Throughput, network 0ms"), "{md}");
    assert!(md.contains("(charts/throughput-50ms_1pct.svg)"), "{md}");
    assert!(md.contains("2023-11-14 22:13:20 UTC"), "{md}");
    // Connect: 12.50 ms (each client: p50 8, p99 12) and 880 handshakes/s; no 0-RTT.
    assert!(
        md.contains("| quic | 0ms | 10 | 1024 | 12.50 | 8.00 | 12.00 | 880 | – | – |"),
        "{md}"
    );
    assert!(md.contains("No cell has an open-loop phase."), "{md}");
    assert!(md.contains("No cell has priority probe data."), "{md}");
}

#[test]
fn chart_names_and_svgs() {
    let mut r = sample();
    // Priority data and hub RSS for the first cell.
    r.cells[0].priority = vec![
        ClassSummary {
            class: "critical",
            p50_us: 900.0,
            p99_us: 2000.0,
        },
        ClassSummary {
            class: "low",
            p50_us: 1900.0,
            p99_us: 9000.0,
        },
    ];
    r.cells[0].hub_peak_rss_bytes = Some(64.0 * MIB);
    r.cells[1].agents_peak_rss_bytes = 80.0 * MIB;
    let charts = charts(&r);
    let names: Vec<&str> = charts.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "throughput-0ms",
            "throughput-50ms_1pct",
            "latency-0ms-10x1024",
            "latency-50ms_1pct-10x1024",
            "connect-0ms",
            "connect-50ms_1pct",
            "rss-0ms",
            "priority-0ms",
        ]
    );
    for c in &charts {
        assert!(c.svg.starts_with("<svg"), "{}", c.name);
        assert!(c.svg.trim_end().ends_with("</svg>"), "{}", c.name);
        assert!(c.svg.contains("quic"), "{}", c.name);
        if !c.name.starts_with("priority") && !c.name.starts_with("rss") {
            assert!(c.svg.contains("wss"), "{}", c.name);
        }
    }
    let rss = &charts[6];
    assert!(rss.svg.contains("quic hub") && rss.svg.contains("wss agents"));
    let prio = &charts[7];
    assert!(prio.svg.contains("critical") && prio.svg.contains("low"));
    // The Markdown and HTML carry the priority table and every figure.
    let md = render_markdown(&r, &charts);
    assert!(
        md.contains("| quic | 0ms | 10 | 1024 | critical | 0.90 | 2.00 |"),
        "{md}"
    );
    assert!(md.contains("| 64.0 |"), "{md}");
    let html = render_html(&r, &charts);
    assert_eq!(html.matches("<figure").count(), charts.len());
    assert_eq!(html.matches("<figcaption>").count(), charts.len());
}

#[test]
fn open_loop_adds_a_dashed_line_and_a_table() {
    let mut r = sample();
    let c = r.cells[0].config.clone();
    let mut runs = vec![run(&c, 1000.0, 1500)];
    runs[0].open_loop = Some(OpenLoopRecord {
        rate_per_sec: 500.0,
        rate_basis: "50% of this run's closed-loop rate".into(),
        duration_ms: 1000,
        scheduled: 500,
        answered: 500,
        errors: 0,
        late_sends: 0,
        latency: latency(2000, 8000),
        histogram: vec![(1000, 100), (2000, 300), (8000, 100)],
    });
    r.cells[0] = CellSummary::from_runs(c, runs);
    let md = render_markdown(&r, &[]);
    assert!(
        md.contains("| quic | 0ms | 10 | 1024 | 500 | 2.00 | 8.00 | 16.00 |"),
        "{md}"
    );
    let charts = charts(&r);
    let cdf = charts
        .iter()
        .find(|c| c.name == "latency-0ms-10x1024")
        .unwrap();
    assert!(cdf.svg.contains("quic open-loop"), "{}", cdf.svg);
}

#[test]
fn html_escapes_and_checks() {
    let r = sample();
    let charts = charts(&r);
    let html = render_html(&r, &charts);
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(
        html.contains("agentwire bench &#39;--note=&lt;b&gt;&amp;&#39;"),
        "{html}"
    );
    assert!(html.contains("packet mode needs root &lt;&amp;&gt;"));
    assert!(!html.contains("<b>"));
    assert!(html.contains("document.body.dataset.check"));
    // No external resources: the only URLs are the SVG namespace names.
    assert_eq!(
        html.matches("http").count(),
        html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
    );
    assert!(!html.contains("<link") && !html.contains("src="));
    assert_eq!(html.matches("<figure").count(), charts.len());
}

#[test]
fn latency_charts_are_limited() {
    let mut cells = Vec::new();
    for agents in 1..=15 {
        let c = cell(BenchTransport::Quic, agents, 100, "0ms");
        cells.push(CellSummary::from_runs(c.clone(), vec![run(&c, 100.0, 500)]));
    }
    let r = report(cells);
    let charts = charts(&r);
    let latency = charts
        .iter()
        .filter(|c| c.name.starts_with("latency-"))
        .count();
    assert_eq!(latency, MAX_LATENCY_CHARTS);
    let md = render_markdown(&r, &charts);
    assert!(md.contains("3 more groups"), "{md}");
    assert!(md.contains("15 agents × 100 B"), "{md}");
}

#[test]
fn empty_and_skipped_only_reports_render() {
    let empty = report(Vec::new());
    assert!(charts(&empty).is_empty());
    let md = render_markdown(&empty, &[]);
    assert!(md.contains("No cell was run."), "{md}");
    assert!(md.contains("No charts"), "{md}");
    let _ = render_html(&empty, &[]);

    let skipped = report(vec![CellSummary::skipped(
        cell(BenchTransport::Unix, 2, 100, "0ms"),
        "no reason".into(),
    )]);
    assert!(charts(&skipped).is_empty());
    let md = render_markdown(&skipped, &[]);
    assert!(md.contains("| unix | 0ms | 2 | 100 | no reason |"), "{md}");

    // A cell that is neither skipped nor run shows dashes.
    let norun = report(vec![CellSummary::from_runs(
        cell(BenchTransport::H2, 2, 100, "0ms"),
        Vec::new(),
    )]);
    assert!(charts(&norun).is_empty());
    let md = render_markdown(&norun, &[]);
    assert!(
        md.contains("| h2 | 0ms | 2 | 100 | 4 | 0 | – | – | – |"),
        "{md}"
    );
    let _ = render_html(&norun, &[]);

    // Runs without answers: no histogram, zero rates.
    let c = cell(BenchTransport::Wss, 2, 100, "0ms");
    let mut r0 = run(&c, 0.0, 0);
    r0.histogram.clear();
    let zero = report(vec![CellSummary::from_runs(c, vec![r0])]);
    let charts = charts(&zero);
    assert!(charts.iter().all(|c| !c.name.starts_with("latency")));
    let _ = render_markdown(&zero, &charts);
    let _ = render_html(&zero, &charts);
}

#[test]
fn write_all_writes_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("new");
    let files = write_all(&sample(), &out).unwrap();
    assert!(files.json.ends_with("bench-1700000000.json"));
    for p in [&files.json, &files.markdown, &files.html] {
        assert!(p.is_file(), "{}", p.display());
    }
    assert_eq!(files.charts.len(), 6);
    for p in &files.charts {
        assert!(p.is_file(), "{}", p.display());
        assert!(p.starts_with(out.join("charts")));
    }
}

#[test]
fn helpers() {
    assert_eq!(slug("50ms+1%"), "50ms_1pct");
    assert_eq!(slug("a b/c"), "a-b-c");
    assert_eq!(size_label(100), "100 B");
    assert_eq!(size_label(10240), "10 KiB");
    assert_eq!(size_label(1 << 20), "1 MiB");
    assert_eq!(size_label(1536), "1536 B");
    assert_eq!(utc_time(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc_time(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(md_escape("a|b_c<d>"), "a\\|b\\_c&lt;d&gt;");
    assert_eq!(
        html_escape("<a href=\"x\">&'"),
        "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
    );
    assert_eq!(
        shell_join(&["a".into(), "b c".into(), "it's".into()]),
        "a 'b c' 'it'\\''s'"
    );
    let pts = cdf_points(&[(1000, 1), (2000, 3)]);
    assert_eq!(pts, vec![(1.0, 0.0), (1.0, 0.25), (2.0, 1.0)]);
    let runs = {
        let c = cell(BenchTransport::Quic, 1, 1, "0ms");
        vec![run(&c, 10.0, 1), run(&c, 30.0, 2), run(&c, 21.0, 3)]
    };
    assert_eq!(median_run(&runs).map(|r| r.responses_per_sec), Some(21.0));
}
