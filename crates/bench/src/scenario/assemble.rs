//! A cell's result put together from the client side's counts and the readings, with the bottleneck rule that names what limited the cell.
//!
//! This module owns the arithmetic of the result; it must not measure.

use super::*;

/// Builds the run's record from what both sides measured.
pub(super) fn assemble(
    config: &CellConfig,
    launcher: &HubLauncher,
    path: &Option<EmulatedPath>,
    outcome: ClientOutcome,
    emulator: Option<EmulatorRecord>,
) -> CellResult {
    let c = &outcome.closed;
    let secs = (config.duration_ms.max(1)) as f64 / 1000.0;
    // A request and its response each carry the body; a one-way delivery once.
    let legs = if config.pattern.is_one_way() {
        1.0
    } else {
        2.0
    };
    let payload_bits = c.answered as f64 * config.size as f64 * legs * 8.0;
    let open_consistent = outcome
        .open_loop
        .as_ref()
        .is_none_or(|o| o.scheduled == o.answered + o.errors && o.latency.count == o.answered);
    let cpu = outcome.cpu;
    let wall = cpu.map_or(secs, |w| w.wall.max(1e-9));
    let usage = |cpu_s: f64, rss: u64| ProcessUsage {
        cpu_seconds: cpu_s,
        cores_busy: cpu_s / wall,
        peak_rss_bytes: rss,
    };
    let hub = match launcher {
        HubLauncher::InProcess => None,
        HubLauncher::Process(_) => cpu
            .and_then(|w| w.hub)
            .map(|h| usage(h, cpu.and_then(|w| w.hub_peak_rss).unwrap_or(0))),
    };
    let agents = usage(
        cpu.map_or(0.0, |w| w.agents),
        cpu.and_then(|w| w.agents_peak_rss).unwrap_or(0),
    );
    let per_response = |cpu_s: f64| cpu_s * 1e6 / (c.answered.max(1) as f64);
    let resources = Resources {
        hub_mode: launcher.mode(),
        hub,
        agents,
        hub_cpu_us_per_response: hub.map(|h| per_response(h.cpu_seconds)),
        agents_cpu_us_per_response: per_response(agents.cpu_seconds),
        hub_rss_bytes_per_agent: hub
            .map(|h| h.peak_rss_bytes as f64 / (config.agents + config.workers) as f64),
        // Sampled only with a hub process to sample (`ServerReady::hub_pid`).
        hub_sockets: cpu.and_then(|w| w.hub_sockets),
    };
    let bottleneck = bottleneck(cpu, emulator.as_ref(), crate::cores());
    let spec = path.as_ref().map(|p| p.spec().to_owned());
    CellResult {
        config: config.clone(),
        hub_url: outcome.hub_url.clone(),
        network: NetworkPath {
            mode: if path.is_some() { "packet" } else { "loopback" },
            spec,
            hub_url: outcome.hub_url.clone(),
            emulator,
        },
        connect_ms: outcome.connect.all_connected_ms,
        connect: outcome.connect,
        sent: c.sent,
        answered: c.answered,
        errors: c.errors,
        timeouts: c.timeouts,
        abandoned: c.abandoned,
        consistent: c.sent == c.answered + c.errors
            && c.histogram.len() == c.answered
            && open_consistent,
        responses_per_sec: c.answered as f64 / secs,
        payload_mbit_per_sec: payload_bits / secs / 1e6,
        latency: stats::summarize(&c.histogram),
        histogram: stats::recorded_pairs(&c.histogram),
        open_loop: outcome.open_loop,
        priority: outcome.priority,
        resources,
        bottleneck,
        error_samples: c.error_samples.clone(),
        udp_rcvbuf_errors: None,
    }
}

/// Says whether the closed-loop numbers may describe the load generator or the emulator
/// rather than the hub and transport under test.
///
/// * The emulator is the bottleneck when one of its threads was busy more than 85 % of the
///   time, or its queue filled up (verdicts refused, or 75 % of the queue held).
/// * The load generator is the bottleneck when the machine was busy more than 85 % of its
///   cores and the agent side (clients and workers) used more CPU than the hub.
///
/// ```
/// # use agentwire_bench::scenario::bottleneck_rule;
/// // 2 cores, 1 s: agents 1.5 s CPU, hub 0.3 s: the generator saturates the machine.
/// assert!(bottleneck_rule(1.0, 1.5, Some(0.3), 0.0, 2, false).unwrap().contains("load generator"));
/// // Hub busier than the agents: that is the system under test working, no warning.
/// assert!(bottleneck_rule(1.0, 0.8, Some(1.1), 0.0, 2, false).is_none());
/// // An emulator thread at 95 %: the emulator limits the cell.
/// assert!(bottleneck_rule(1.0, 0.2, Some(0.2), 0.95, 2, false).unwrap().contains("emulator"));
/// ```
pub fn bottleneck_rule(
    wall_s: f64,
    agents_cpu_s: f64,
    hub_cpu_s: Option<f64>,
    emulator_busiest_thread_s: f64,
    cores: usize,
    emulator_queue_full: bool,
) -> Option<String> {
    let wall = wall_s.max(1e-9);
    if emulator_queue_full || emulator_busiest_thread_s / wall > BUSY {
        return Some(format!(
            "emulator bound: the netsim stage was {:.0}% busy{}; the numbers measure the \
             emulator, not the protocol",
            emulator_busiest_thread_s / wall * 100.0,
            if emulator_queue_full {
                " and its queue filled up or the kernel dropped packets before it saw them"
            } else {
                ""
            }
        ));
    }
    let hub = hub_cpu_s.unwrap_or(0.0);
    let busy = (agents_cpu_s + hub + emulator_busiest_thread_s) / (wall * cores as f64);
    if busy > BUSY && agents_cpu_s > hub {
        return Some(format!(
            "load generator bound: the machine was {:.0}% busy and the agent side used {:.2} \
             cores against the hub's {:.2}; a faster client would show more",
            busy * 100.0,
            agents_cpu_s / wall,
            hub / wall
        ));
    }
    None
}

pub(super) fn bottleneck(
    cpu: Option<CpuWindow>,
    emulator: Option<&EmulatorRecord>,
    cores: usize,
) -> Option<String> {
    let w = cpu?;
    let queue_full = emulator.is_some_and(|e| {
        e.verdict_errors > 0
            || e.dropped_kernel > 0
            || e.oversize > 0
            || e.max_held >= EmulatedPath::queue_limit() * 3 / 4
    });
    // The stage has one thread per direction; half the total is a fair stand-in for the
    // busier one when only the total is known.
    bottleneck_rule(w.wall, w.agents, w.hub, w.emulator / 2.0, cores, queue_full)
}
