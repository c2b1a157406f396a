//! The accuracy bounds `netsim check` holds the emulator to: added RTT within 1 ms, loss within the binomial 99 % interval, rate within 5 %; pure functions, unit-tested.
//!
//! This module owns the arithmetic of the bounds only.

/// z of the two-sided 99 % normal interval.
pub const Z99: f64 = 2.576;

/// One-way delay of the RTT check.
pub const RTT_DELAY_MS: f64 = 25.0;

/// Allowed |median − baseline − 2 × delay| of the RTT check.
pub const RTT_TOLERANCE_MS: f64 = 1.0;

/// Loss probability (each way) of the loss check.
pub const LOSS_P: f64 = 0.01;

/// Bottleneck rate of the rate check.
pub const RATE_BPS: f64 = 20_000_000.0;

/// Allowed relative error of the rate check.
pub const RATE_TOLERANCE: f64 = 0.05;

/// The binomial 99 % interval of the number of successes in `n` trials of probability `p`
/// (normal approximation: `n·p ± 2.576·sqrt(n·p·(1−p))`).
pub fn binomial_interval(n: u64, p: f64) -> (f64, f64) {
    let n = n as f64;
    let mean = n * p;
    let half = Z99 * (n * p * (1.0 - p)).sqrt();
    (mean - half, mean + half)
}

/// Whether `lost` of `n` is within the 99 % interval for loss probability `p`.
pub fn loss_pass(lost: u64, n: u64, p: f64) -> bool {
    let (lo, hi) = binomial_interval(n, p);
    (lo..=hi).contains(&(lost as f64))
}

/// Whether the delay added on top of the baseline is `expected_ms` within `tolerance_ms`.
pub fn rtt_pass(median_ms: f64, baseline_ms: f64, expected_ms: f64, tolerance_ms: f64) -> bool {
    (median_ms - baseline_ms - expected_ms).abs() <= tolerance_ms
}

/// Whether `measured` is within `tolerance` (relative) of `target`.
pub fn rate_pass(measured_bps: f64, target_bps: f64, tolerance: f64) -> bool {
    (measured_bps - target_bps).abs() <= tolerance * target_bps
}

/// Rate over the steady part of a receive trace `(seconds since start, bytes)` sorted by time:
/// the bytes of arrivals after the 10 % mark up to the 90 % mark, over the time between them.
/// `None` with fewer than 20 arrivals or no time elapsed.
pub fn steady_rate_bps(arrivals: &[(f64, u64)]) -> Option<f64> {
    let k = arrivals.len();
    if k < 20 {
        return None;
    }
    let (a, b) = (k / 10, k * 9 / 10);
    let dt = arrivals[b].0 - arrivals[a].0;
    if dt <= 0.0 {
        return None;
    }
    let bytes: u64 = arrivals[a + 1..=b].iter().map(|x| x.1).sum();
    Some(bytes as f64 * 8.0 / dt)
}

// ---------------------------------------------------------------------------------------------
// Emulator instances
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binomial_interval_known_numbers() {
        // n = 10000, p = 0.01: mean 100, sd sqrt(99) = 9.9499, half 25.631.
        let (lo, hi) = binomial_interval(10_000, 0.01);
        assert!((lo - 74.369).abs() < 1e-3, "{lo}");
        assert!((hi - 125.631).abs() < 1e-3, "{hi}");
        // n = 2000: mean 20, half 2.576 × sqrt(19.8) = 11.4625.
        let (lo, hi) = binomial_interval(2_000, 0.01);
        assert!((lo - 8.5375).abs() < 1e-3 && (hi - 31.4625).abs() < 1e-3);
        assert_eq!(binomial_interval(100, 0.0), (0.0, 0.0));
    }

    #[test]
    fn loss_pass_and_fail() {
        assert!(loss_pass(100, 10_000, 0.01));
        assert!(loss_pass(75, 10_000, 0.01));
        assert!(loss_pass(125, 10_000, 0.01));
        assert!(!loss_pass(74, 10_000, 0.01));
        assert!(!loss_pass(126, 10_000, 0.01));
        assert!(!loss_pass(0, 10_000, 0.01));
        assert!(loss_pass(9, 2_000, 0.01) && !loss_pass(8, 2_000, 0.01));
        assert!(loss_pass(31, 2_000, 0.01) && !loss_pass(32, 2_000, 0.01));
    }

    #[test]
    fn rtt_pass_and_fail() {
        assert!(rtt_pass(50.3, 0.05, 50.0, 1.0));
        assert!(rtt_pass(51.0, 0.0, 50.0, 1.0));
        assert!(rtt_pass(49.0, 0.0, 50.0, 1.0));
        assert!(!rtt_pass(51.2, 0.1, 50.0, 1.0));
        assert!(!rtt_pass(48.9, 0.0, 50.0, 1.0));
    }

    #[test]
    fn rate_pass_and_fail() {
        assert!(rate_pass(20e6, 20e6, 0.05));
        assert!(rate_pass(19.0e6, 20e6, 0.05) && rate_pass(21.0e6, 20e6, 0.05));
        assert!(!rate_pass(18.9e6, 20e6, 0.05) && !rate_pass(21.1e6, 20e6, 0.05));
        assert!(!rate_pass(0.0, 20e6, 0.05));
    }

    #[test]
    fn the_check_percentiles_are_the_measure_crates() {
        use agentwire_measure::stats::{median, nearest_rank};
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(median(&v), Some(100.5));
        assert_eq!(nearest_rank(&v, 0.99), Some(198.0));
        assert_eq!(nearest_rank(&v, 0.0), Some(1.0));
        assert_eq!(nearest_rank(&v, 1.0), Some(200.0));
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn steady_rate_of_a_uniform_trace() {
        // 1000 arrivals of 1250 bytes every 0.5 ms = 20 Mbit/s; a slow start is cut off.
        let mut trace: Vec<(f64, u64)> =
            (0..1000).map(|i| (1.0 + i as f64 * 0.0005, 1250)).collect();
        trace[0].0 = 0.0;
        let r = steady_rate_bps(&trace).unwrap();
        assert!((r - 20e6).abs() < 1.0, "{r}");
        assert_eq!(steady_rate_bps(&trace[..10]), None);
    }
}
