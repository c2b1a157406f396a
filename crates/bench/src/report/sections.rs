//! The report's sections, one function each: configuration, throughput and latency, open loop, connects, priorities, resources.
//!
//! This module owns the sections' tables; it must not render them.

use super::*;

pub(super) fn config_table(report: &Report) -> Table {
    let c = &report.config;
    let mut t = Table::new(&["setting", "value"]);
    let join = |v: Vec<String>| {
        if v.is_empty() {
            NONE.to_owned()
        } else {
            v.join(", ")
        }
    };
    let distinct = |f: &dyn Fn(&CellConfig) -> String| -> Vec<String> {
        first_seen(report.cells.iter().map(|cell| f(&cell.config)))
    };
    let ms_or_none = |ms: u64| {
        if ms == 0 {
            "none".to_owned()
        } else {
            format!("{ms} ms")
        }
    };
    let rows: Vec<(&str, String)> = vec![
        ("preset", c.preset.clone()),
        ("hub", report.hub_mode.to_owned()),
        (
            "transports",
            join(c.transports.iter().map(|t| t.name().to_owned()).collect()),
        ),
        (
            "scenarios (agents × bytes @ network)",
            join(
                c.scenarios
                    .iter()
                    .map(|s| format!("{} × {} @ {}", s.agents, s.size, s.network))
                    .collect(),
            ),
        ),
        ("repetitions", c.repetitions.to_string()),
        ("warm-up", format!("{} ms", c.warmup_ms)),
        (
            "measured window (duration)",
            format!("{} ms", c.duration_ms),
        ),
        ("request timeout", format!("{} ms", c.request_timeout_ms)),
        (
            "window (requests in flight per client)",
            c.window.map_or_else(
                || "auto (about 16 MiB in flight over all clients, 1 to 16 each)".to_owned(),
                |w| w.to_string(),
            ),
        ),
        ("emulated-loss seed", c.seed.to_string()),
        ("QUIC congestion control", c.quic_cc.to_string()),
        (
            "QUIC concurrent streams per peer",
            c.quic_max_streams.to_string(),
        ),
        ("QUIC max MTU", c.quic_max_mtu.to_string()),
        ("QUIC hub endpoints", c.quic_endpoints.to_string()),
        (
            "runtime threads, hub / clients",
            format!("{} / {}", c.hub_threads, c.client_threads),
        ),
        (
            "QUIC hub receive budget",
            match c.quic_receive_budget {
                0 => "off".to_owned(),
                n => format!("{} KiB", n / 1024),
            },
        ),
        (
            "QUIC loopback MTU",
            match c.quic_loopback_mtu {
                0 => "discovered".to_owned(),
                n => n.to_string(),
            },
        ),
        ("netsim stage of emulated paths", {
            let ran = first_seen(
                report
                    .cells
                    .iter()
                    .flat_map(|cell| &cell.runs)
                    .filter_map(|r| r.network.emulator.as_ref().map(|e| e.stage.clone())),
            );
            if ran.is_empty() {
                format!("{} (no emulated path ran)", c.netsim_stage)
            } else {
                join(ran)
            }
        }),
        (
            "TCP congestion control in emulated paths",
            c.tcp_cc
                .clone()
                .unwrap_or_else(|| "the kernel's default".to_owned()),
        ),
        ("TCP congestion control that ran (read back)", {
            let ran = first_seen(
                report
                    .cells
                    .iter()
                    .flat_map(|cell| &cell.runs)
                    .filter_map(|r| r.network.emulator.as_ref()?.tcp_cc.clone()),
            );
            if ran.is_empty() {
                "no emulated path".to_owned()
            } else {
                join(ran)
            }
        }),
        (
            "windows of the cells",
            join(distinct(&|cc| cc.window.to_string())),
        ),
        (
            "closed loop's rate cap (`--rate`)",
            join(distinct(&|cc| match cc.rate {
                Some(rate) => format!("{rate} requests/s"),
                None => "none".to_owned(),
            })),
        ),
        (
            "network profiles",
            join(distinct(&|cc| cc.network.name.clone())),
        ),
        (
            "open-loop phase",
            join(distinct(&|cc| ms_or_none(cc.open_loop_ms))),
        ),
        (
            "priority probe",
            join(distinct(&|cc| ms_or_none(cc.priority_probe_ms))),
        ),
        ("cells", report.cells.len().to_string()),
    ];
    for (k, v) in rows {
        t.rows.push(vec![k.to_owned(), v]);
    }
    t
}

pub(super) fn throughput_section<'a>(report: &Report, doc: &mut Vec<Block<'a>>) {
    doc.push(Block::Heading(
        2,
        "Throughput and latency (closed loop)".into(),
    ));
    let mut t = Table::new(&head(&[
        "window", "runs", "msg/s", "cov %", "noisy", "Mbit/s", "p50 ms", "p90 ms", "p99 ms",
        "p99.9 ms", "max ms", "errors", "bound",
    ]));
    let mut notes = Vec::new();
    // One footnote per kind of bottleneck (the first cell's wording), not one per cell.
    let mut bounds: Vec<(String, String)> = Vec::new();
    for c in measured(report) {
        let has = !c.runs.is_empty();
        let mut row = cell_cols(&c.config);
        row.push(c.config.window.to_string());
        row.push(c.runs.len().to_string());
        let num = |v: f64, digits: usize| {
            if has {
                fmt_num(v, digits)
            } else {
                NONE.to_owned()
            }
        };
        row.push(num(c.responses_per_sec, 0));
        row.push(
            c.responses_per_sec_cov
                .map_or(NONE.to_owned(), |v| fmt_num(v * 100.0, 1)),
        );
        row.push(match (c.noisy, c.responses_per_sec_cov) {
            (true, _) => "noisy".to_owned(),
            (false, Some(_)) => "no".to_owned(),
            (false, None) => NONE.to_owned(),
        });
        row.push(num(c.payload_mbit_per_sec, 1));
        for us in [c.p50_us, c.p90_us, c.p99_us, c.p999_us, c.max_us as f64] {
            row.push(num(us / 1000.0, 2));
        }
        row.push(if has {
            c.errors.to_string()
        } else {
            NONE.to_owned()
        });
        let mut kinds = Vec::new();
        for b in &c.bottlenecks {
            let kind = crate::verdict::bound_kind(b).unwrap_or("other").to_owned();
            if !bounds.iter().any(|(k, _)| *k == kind) {
                bounds.push((kind.clone(), b.clone()));
            }
            let n = bounds.iter().position(|(k, _)| *k == kind).unwrap_or(0) + 1;
            kinds.push(format!("{kind} ({n})"));
        }
        row.push(kinds.join(", "));
        t.rows.push(row);

        let label = cell_caption(&c.config);
        if c.noisy {
            notes.push(format!(
                "noisy: {label}: msg/s varies {} % across its {} runs (more than {} %).",
                c.responses_per_sec_cov
                    .map_or(NONE.to_owned(), |v| fmt_num(v * 100.0, 1)),
                c.runs.len(),
                fmt_num(crate::NOISY_COV * 100.0, 0)
            ));
        }
        for f in &c.failures {
            notes.push(format!("failed: {label}: {f}"));
        }
        if has && !c.consistent {
            notes.push(format!(
                "inconsistent: {label}: at least one run did not account for every request."
            ));
        }
        if has && c.errors > 0 {
            let samples: Vec<&str> = c
                .runs
                .iter()
                .flat_map(|r| r.error_samples.iter().map(String::as_str))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            if !samples.is_empty() {
                notes.push(format!("errors: {label}: {}", samples.join("; ")));
            }
        }
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("No cell was run.".into()));
        return;
    }
    doc.push(Block::Para(
        "msg/s is the median of the repetitions' responses per second; cov % is their \
         spread (coefficient of variation), and cells above the noise threshold are marked \
         noisy. Latencies are closed-loop round trips, medians of the runs' percentiles (max \
         is the largest of any run). For a one-way pattern (fanout, gather, stream: named \
         before the transport) msg/s counts deliveries and latency runs from the send to the \
         delivery."
            .into(),
    ));
    doc.push(Block::Table(t));
    if !bounds.is_empty() {
        doc.push(Block::List(
            bounds
                .iter()
                .enumerate()
                .map(|(i, (kind, text))| match text.split_once(": ") {
                    Some((_, why)) => format!("({}) {kind}: {why}", i + 1),
                    None => format!("({}) {text}", i + 1),
                })
                .collect(),
        ));
    }
    if !notes.is_empty() {
        doc.push(Block::List(notes));
    }
}

pub(super) fn open_loop_section<'a>(report: &Report, doc: &mut Vec<Block<'a>>) {
    doc.push(Block::Heading(2, "Open loop".into()));
    let mut t = Table::new(&head(&["rate req/s", "p50 ms", "p99 ms", "p99.9 ms"]));
    for c in with_runs(report) {
        if c.open_loop_rate.is_none()
            && c.open_loop_p50_us.is_none()
            && c.open_loop_p99_us.is_none()
            && c.open_loop_p999_us.is_none()
        {
            continue;
        }
        let mut row = cell_cols(&c.config);
        row.push(opt_num(c.open_loop_rate, 0));
        for us in [c.open_loop_p50_us, c.open_loop_p99_us, c.open_loop_p999_us] {
            row.push(opt_num(us.map(|v| v / 1000.0), 2));
        }
        t.rows.push(row);
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("No cell has an open-loop phase.".into()));
    } else {
        doc.push(Block::Para(
            "Requests at a fixed arrival rate, each timed from its intended send time.".into(),
        ));
        doc.push(Block::Table(t));
    }
}

pub(super) fn connect_section<'a>(report: &Report, doc: &mut Vec<Block<'a>>) {
    doc.push(Block::Heading(2, "Connection establishment".into()));
    let mut t = Table::new(&head(&[
        "connect ms",
        "each p50 ms",
        "each p99 ms",
        "handshakes/s",
        "0-RTT reconnect ms",
        "0-RTT accepted",
    ]));
    for c in with_runs(report) {
        let mut row = cell_cols(&c.config);
        row.push(fmt_num(c.connect_ms, 2));
        row.push(fmt_num(c.connect_p50_ms, 2));
        row.push(fmt_num(c.connect_p99_ms, 2));
        row.push(fmt_num(c.handshakes_per_sec, 0));
        row.push(opt_num(c.resumed_connect_ms, 2));
        row.push(
            c.zero_rtt_accepted
                .map_or(NONE.to_owned(), |v| v.to_string()),
        );
        t.rows.push(row);
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("No cell was run.".into()));
    } else {
        doc.push(Block::Para(
            "Time from the first connect to every agent connected; each client's own time \
             from that common start to its welcome (median and 99th percentile); full \
             handshakes per second; for QUIC, the clients' reconnect with 0-RTT resumption \
             when measured."
                .into(),
        ));
        doc.push(Block::Table(t));
    }
}

pub(super) fn priority_section<'a>(report: &Report, doc: &mut Vec<Block<'a>>) {
    doc.push(Block::Heading(2, "Priority / head-of-line".into()));
    let mut t = Table::new(&head(&["class", "p50 ms", "p99 ms"]));
    for c in with_runs(report) {
        for class in &c.priority {
            let mut row = cell_cols(&c.config);
            row.push(class.class.to_owned());
            row.push(fmt_num(class.p50_us / 1000.0, 2));
            row.push(fmt_num(class.p99_us / 1000.0, 2));
            t.rows.push(row);
        }
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("No cell has priority probe data.".into()));
    } else {
        doc.push(Block::Para(
            "Small requests of each priority class sent while bulk low-priority requests \
             share the connection: medians of the runs' p50 and p99."
                .into(),
        ));
        doc.push(Block::Table(t));
    }
}

pub(super) fn resources_section<'a>(report: &Report, doc: &mut Vec<Block<'a>>) {
    doc.push(Block::Heading(2, "Resources".into()));
    let mut t = Table::new(&head(&[
        "hub mode",
        "hub CPU s",
        "hub peak RSS MiB",
        "hub socket queues MiB",
        "hub RSS + queues MiB",
        "agents CPU s",
        "agents peak RSS MiB",
        "hub CPU µs/response",
    ]));
    for c in with_runs(report) {
        let mut row = cell_cols(&c.config);
        let mut modes: Vec<&str> = Vec::new();
        for r in &c.runs {
            if !modes.contains(&r.resources.hub_mode) {
                modes.push(r.resources.hub_mode);
            }
        }
        row.push(if modes.is_empty() {
            NONE.to_owned()
        } else {
            modes.join(" / ")
        });
        row.push(opt_num(c.hub_cpu_seconds, 2));
        row.push(opt_num(c.hub_peak_rss_bytes.map(|b| b / MIB), 1));
        row.push(opt_num(c.hub_peak_socket_queued_bytes.map(|b| b / MIB), 1));
        row.push(opt_num(
            c.hub_peak_rss_plus_queued_bytes.map(|b| b / MIB),
            1,
        ));
        // A process always has some resident memory: a zero peak means the agent side was
        // not measured, so neither number is shown.
        let agents_measured = c.agents_peak_rss_bytes > 0.0;
        row.push(opt_num(agents_measured.then_some(c.agents_cpu_seconds), 2));
        row.push(opt_num(
            agents_measured.then_some(c.agents_peak_rss_bytes / MIB),
            1,
        ));
        row.push(opt_num(c.hub_cpu_us_per_response, 1));
        t.rows.push(row);
    }
    if t.rows.is_empty() {
        doc.push(Block::Para("No cell was run.".into()));
    } else {
        doc.push(Block::Para(
            "CPU over the closed-loop window and peak resident memory, hub and agent side \
             separately (the hub only when it ran as its own process; – where not measured). \
             The hub's socket queues are what the kernel holds for its TCP and UDP sockets \
             (unread, unacknowledged or unsent data), sampled while the load runs; RSS + \
             queues is the largest sum in one sample. A TCP hub keeps its backlog there, a \
             QUIC hub in its RSS."
                .into(),
        ));
        doc.push(Block::Table(t));
    }
}

// ---------------------------------------------------------------------------------------------
// Chart data.
