//! A check's results, its verdict, and the table a person reads.
//!
//! This module owns the results' shape and their text; it must not measure.

use super::*;

/// The added-RTT check: UDP ping-pong through the emulator against the baseline without it.
#[derive(Debug, Serialize)]
pub struct RttResult {
    pub(crate) setting: String,
    pub(crate) samples: u32,
    pub(crate) min_ms: f64,
    pub(crate) median_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) baseline_median_ms: f64,
    pub(crate) added_ms: f64,
    pub(crate) expected_added_ms: f64,
    pub(crate) tolerance_ms: f64,
    pub(crate) pass: bool,
}

/// The loss check: a counted one-way stream against the binomial interval.
#[derive(Debug, Serialize)]
pub struct LossResult {
    pub(crate) setting: String,
    pub(crate) packets: u64,
    pub(crate) received: u64,
    pub(crate) lost: u64,
    pub(crate) loss_percent: f64,
    /// Drops decided by the model (client → server link).
    pub(crate) model_dropped: u64,
    /// Lost datagrams the model did not drop (socket buffers, queue overflow): should be 0.
    pub(crate) other_lost: u64,
    pub(crate) expected_lost: f64,
    pub(crate) bound_lo: f64,
    pub(crate) bound_hi: f64,
    pub(crate) pass: bool,
}

/// The rate check: a blast through a rate-limited link.
#[derive(Debug, Serialize)]
pub struct RateResult {
    pub(crate) setting: String,
    pub(crate) datagram_bytes: usize,
    pub(crate) counted_overhead_bytes: u64,
    pub(crate) sent: u64,
    pub(crate) received: u64,
    pub(crate) measured_mbit: f64,
    pub(crate) target_mbit: f64,
    pub(crate) bound_lo_mbit: f64,
    pub(crate) bound_hi_mbit: f64,
    pub(crate) pass: bool,
}

/// The emulator's ceiling: the most it forwards without a limit (reported, not judged).
#[derive(Debug, Serialize)]
pub struct CeilingResult {
    pub(crate) setting: String,
    pub(crate) datagram_bytes: usize,
    pub(crate) seconds: f64,
    pub(crate) sent: u64,
    pub(crate) received: u64,
    pub(crate) sent_per_sec: f64,
    pub(crate) packets_per_sec: f64,
    pub(crate) mbit: f64,
    pub(crate) cpu_seconds: Option<f64>,
    pub(crate) note: &'static str,
}

/// Everything one `netsim check` measured, and whether every bound held.
#[derive(Debug, Serialize)]
pub struct CheckReport {
    pub(crate) mode: Mode,
    /// The packet stage measured (packet mode only).
    pub(crate) stage: Option<crate::StageKind>,
    pub(crate) mode_description: &'static str,
    pub(crate) auto_fallback: Option<String>,
    pub(crate) seed: u64,
    pub(crate) rtt: RttResult,
    pub(crate) loss: LossResult,
    pub(crate) rate: RateResult,
    pub(crate) ceiling: CeilingResult,
    pub(crate) passed: bool,
    pub(crate) total_seconds: f64,
}

/// What the ceiling means, in the table and the JSON.
pub const CEILING_NOTE: &str = "the emulator, not the protocol, is the bottleneck above this rate";

/// `PASS` or `FAIL`.
pub fn verdict(pass: bool) -> &'static str {
    if pass {
        "PASS"
    } else {
        "FAIL"
    }
}

/// The report as the table `agentwire netsim check` prints.
pub fn render_table(r: &CheckReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "netsim check ({}), seed {}",
        r.mode_description, r.seed
    );
    if let Some(why) = &r.auto_fallback {
        let _ = writeln!(
            out,
            "auto: socket mode because packet mode is unavailable: {why}"
        );
    }
    let rows = [
        (
            "rtt",
            r.rtt.setting.clone(),
            format!(
                "added {:.2} ms (median {:.2}, min {:.2}, p99 {:.2}; baseline median {:.3})",
                r.rtt.added_ms,
                r.rtt.median_ms,
                r.rtt.min_ms,
                r.rtt.p99_ms,
                r.rtt.baseline_median_ms
            ),
            format!("50 ± {} ms", r.rtt.tolerance_ms),
            verdict(r.rtt.pass),
        ),
        (
            "loss",
            r.loss.setting.clone(),
            format!(
                "lost {} = {:.2} % (model dropped {}, other {})",
                r.loss.lost, r.loss.loss_percent, r.loss.model_dropped, r.loss.other_lost
            ),
            format!("{:.1}..={:.1}", r.loss.bound_lo, r.loss.bound_hi),
            verdict(r.loss.pass),
        ),
        (
            "rate",
            r.rate.setting.clone(),
            format!(
                "{:.2} Mbit/s ({} of {} datagrams arrived)",
                r.rate.measured_mbit, r.rate.received, r.rate.sent
            ),
            format!(
                "{:.0}..={:.0} Mbit/s",
                r.rate.bound_lo_mbit, r.rate.bound_hi_mbit
            ),
            verdict(r.rate.pass),
        ),
        (
            "ceiling",
            r.ceiling.setting.clone(),
            format!(
                "{:.0} pkt/s = {:.0} Mbit/s ({} of {} arrived), CPU {}",
                r.ceiling.packets_per_sec,
                r.ceiling.mbit,
                r.ceiling.received,
                r.ceiling.sent,
                r.ceiling
                    .cpu_seconds
                    .map_or("n/a".into(), |c| format!("{c:.2} s"))
            ),
            "reported".into(),
            "-",
        ),
    ];
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0);
    let w3 = rows.iter().map(|r| r.3.len()).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "{:<8} {:<w1$} {:<w2$} {:<w3$} result",
        "check", "setting", "measured", "bound"
    );
    for (a, b, c, d, e) in &rows {
        let _ = writeln!(out, "{a:<8} {b:<w1$} {c:<w2$} {d:<w3$} {e}");
    }
    let _ = writeln!(
        out,
        "ceiling: {:.0} pkt/s, {:.0} Mbit/s of 1200-byte datagrams: {CEILING_NOTE} \
         (CPU counts the whole process: sender, receiver and emulator)",
        r.ceiling.packets_per_sec, r.ceiling.mbit
    );
    let _ = writeln!(
        out,
        "{} in {:.1} s",
        if r.passed {
            "all bounds PASS"
        } else {
            "FAILED"
        },
        r.total_seconds
    );
    out
}

impl CheckReport {
    /// Whether every bound held.
    pub fn passed(&self) -> bool {
        self.passed
    }

    /// The checks whose bound did not hold (`rtt`, `loss`, `rate`).
    pub fn failed(&self) -> Vec<&'static str> {
        [
            ("rtt", self.rtt.pass),
            ("loss", self.loss.pass),
            ("rate", self.rate.pass),
        ]
        .iter()
        .filter(|x| !x.1)
        .map(|x| x.0)
        .collect()
    }
}
