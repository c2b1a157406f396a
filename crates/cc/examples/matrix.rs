//! The congestion-control matrix on simulated time: every controller of the simulator over
//! random and bursty loss, three RTTs and two bottlenecks with shallow and deep buffers, then
//! fairness between two flows on one bottleneck.
//!
//! `cargo run --release -p agentwire-cc --example matrix -- [--quick] [--pairs-only]
//! [--queue-quantile Q] [--probe-wait-ms MS] [--cruise-rounds-per-packet F] [--short-term]
//! [--json FILE]`
//!
//! `--pairs-only` skips the single flows; `--queue-quantile`, `--probe-wait-ms`,
//! `--cruise-rounds-per-packet` and `--short-term` set bbr3's `BbrConfig::queue_quantile`,
//! `probe_wait`, `cruise_rounds_per_packet` and `short_term` (to compare a setting with the
//! default side by side). A `--probe-wait-ms` above 0 also sets 1 round per packet, BBRv3's
//! bound (`--cruise-rounds-per-packet` overrides that).

use std::time::Duration;

use agentwire_cc::sim::{self, FlowSpec, Scenario, SimController};
use agentwire_cc::{Bbr, BbrConfig};

fn controller(name: &str, mss: u64, bbr: &BbrConfig) -> Box<dyn SimController> {
    match name {
        "reno" => Box::new(sim::Reno::new(mss)),
        _ => Box::new(Bbr::new(bbr.clone(), 1200)),
    }
}

#[derive(serde::Serialize)]
struct Row {
    kind: &'static str,
    path: String,
    flows: Vec<String>,
    goodput_mbit: Vec<f64>,
    utilisation: Option<f64>,
    queue_p50_ms: Vec<f64>,
    queue_p95_ms: Vec<f64>,
    loss_percent: Vec<f64>,
    share: Option<f64>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1).cloned());
    let pairs_only = args.iter().any(|a| a == "--pairs-only");
    let mut bbr = BbrConfig::default();
    if let Some(q) = flag(
        &args,
        "--queue-quantile",
        "a number from 0 to 1",
        |q: &f64| (0.0..=1.0).contains(q),
    ) {
        bbr.queue_quantile = q;
    }
    if let Some(ms) = flag(
        &args,
        "--probe-wait-ms",
        "a whole number of milliseconds",
        |_| true,
    ) {
        bbr.probe_wait = Duration::from_millis(ms);
        if ms > 0 {
            bbr.cruise_rounds_per_packet = 1.0;
        }
    }
    if let Some(f) = flag(
        &args,
        "--cruise-rounds-per-packet",
        "a number of at least 0",
        |f: &f64| *f >= 0.0,
    ) {
        bbr.cruise_rounds_per_packet = f;
    }
    if args.iter().any(|a| a == "--short-term") {
        bbr.short_term = true;
    }
    let secs = if quick { 10 } else { 30 };
    let losses = ["", "loss=0.1%", "loss=1%", "loss=3%", "ge=0.01/0.3/0/0.5"];
    let rtts = [10u64, 50, 150];
    let bottlenecks = ["rate=20mbit", "rate=100mbit"];
    let queues = ["queue=0.25bdp", "queue=4bdp"];
    let mut rows = Vec::new();
    println!(
        "{:<58} {:>6} {:>9} {:>7} {:>8} {:>8} {:>7}",
        "path (one way)", "cc", "Mbit/s", "util", "q50_ms", "q95_ms", "loss%"
    );
    for rtt in rtts.into_iter().filter(|_| !pairs_only) {
        for bottleneck in bottlenecks {
            for queue in queues {
                for loss in losses {
                    let mut spec = format!("delay={}ms,{bottleneck},{queue}", rtt / 2);
                    if !loss.is_empty() {
                        spec.push(',');
                        spec.push_str(loss);
                    }
                    for cc in ["bbr3", "reno"] {
                        let r = run(&spec, rtt, secs, &[cc], &bbr);
                        rows.push(print_row("single", &spec, r));
                    }
                }
            }
        }
    }
    for bottleneck in bottlenecks {
        for rtt in rtts {
            for queue in queues {
                let spec = format!("delay={}ms,{bottleneck},{queue}", rtt / 2);
                for pair in [["bbr3", "bbr3"], ["bbr3", "reno"], ["reno", "reno"]] {
                    let r = run(&spec, rtt, secs * 2, &pair, &bbr);
                    rows.push(print_row("fairness", &spec, r));
                }
            }
        }
    }
    if let Some(path) = json {
        let doc = serde_json::json!({
            "schema": "agentwire-cc-matrix/1",
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "simulated_seconds": secs,
            "queue_quantile": bbr.queue_quantile,
            "probe_wait_ms": bbr.probe_wait.as_millis() as u64,
            "cruise_rounds_per_packet": bbr.cruise_rounds_per_packet,
            "short_term": bbr.short_term,
            "rows": rows,
        });
        if let Err(e) = std::fs::write(
            &path,
            serde_json::to_string_pretty(&doc).unwrap_or_default(),
        ) {
            eprintln!("cannot write {path}: {e}");
            std::process::exit(1);
        }
    }
}

/// The value after `name` in `args`, if the flag is there; exits with a message naming `what`
/// it needs when the value is missing, does not parse or fails `valid`.
fn flag<T: std::str::FromStr>(
    args: &[String],
    name: &str,
    what: &str,
    valid: impl Fn(&T) -> bool,
) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    match args.get(i + 1).and_then(|v| v.parse::<T>().ok()) {
        Some(v) if valid(&v) => Some(v),
        _ => {
            eprintln!("{name} needs {what}");
            std::process::exit(2);
        }
    }
}

fn run(spec: &str, rtt: u64, secs: u64, ccs: &[&str], bbr: &BbrConfig) -> sim::SimResult {
    let reverse = format!("delay={}ms", rtt / 2);
    let mut scenario = match Scenario::parse(spec, &reverse, Duration::from_secs(secs)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    scenario.warmup = Duration::from_secs(secs / 5);
    let flows = ccs
        .iter()
        .map(|cc| FlowSpec::bulk(controller(cc, scenario.mss, bbr)))
        .collect();
    match sim::run(&scenario, flows) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{spec}: {e}");
            std::process::exit(2);
        }
    }
}

fn print_row(kind: &'static str, spec: &str, r: sim::SimResult) -> Row {
    let names: Vec<String> = r.flows.iter().map(|f| f.controller.clone()).collect();
    let goodput: Vec<f64> = r.flows.iter().map(|f| f.goodput_bps / 1e6).collect();
    let loss: Vec<f64> = r
        .flows
        .iter()
        .map(|f| 100.0 * f.lost_packets as f64 / f.sent_packets.max(1) as f64)
        .collect();
    let share = (goodput.len() == 2 && goodput[1] > 0.0).then(|| goodput[0] / goodput[1]);
    println!(
        "{:<58} {:>6} {:>9} {:>7} {:>8} {:>8} {:>7}{}",
        spec,
        names.join("+"),
        goodput
            .iter()
            .map(|g| format!("{g:.1}"))
            .collect::<Vec<_>>()
            .join("/"),
        r.utilisation().map_or("-".into(), |u| format!("{:.2}", u)),
        r.flows
            .iter()
            .map(|f| format!("{:.0}", f.queue_delay_p50_ms))
            .collect::<Vec<_>>()
            .join("/"),
        r.flows
            .iter()
            .map(|f| format!("{:.0}", f.queue_delay_p95_ms))
            .collect::<Vec<_>>()
            .join("/"),
        loss.iter()
            .map(|l| format!("{l:.1}"))
            .collect::<Vec<_>>()
            .join("/"),
        share.map_or(String::new(), |s| format!("  share {s:.2}")),
    );
    Row {
        kind,
        path: spec.to_owned(),
        flows: names,
        goodput_mbit: goodput,
        utilisation: r.utilisation(),
        queue_p50_ms: r.flows.iter().map(|f| f.queue_delay_p50_ms).collect(),
        queue_p95_ms: r.flows.iter().map(|f| f.queue_delay_p95_ms).collect(),
        loss_percent: loss,
        share,
    }
}
