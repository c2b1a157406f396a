//! Latency recording and summaries: an HDR histogram of round-trip times in microseconds,
//! its percentiles, and its raw recorded buckets for the JSON report.
//!
//! This module only does arithmetic on recorded values; it must not time anything, touch the
//! network or print.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Highest latency the histogram tracks, in microseconds (larger values are clamped to it).
pub const MAX_TRACKED_US: u64 = 60_000_000;

/// A new latency histogram: 1 µs to [`MAX_TRACKED_US`], 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    // Constant bounds that satisfy hdrhistogram's rules (low >= 1, high >= 2 * low,
    // sigfig <= 5): this cannot fail at run time.
    Histogram::new_with_bounds(1, MAX_TRACKED_US, 3).expect("constant histogram bounds are valid")
}

/// Records one latency, clamping it into the tracked range.
pub fn record_us(hist: &mut Histogram<u64>, us: u64) {
    hist.saturating_record(us.clamp(1, MAX_TRACKED_US));
}

/// Percentiles of a latency histogram, in microseconds. All zero when nothing was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencySummary {
    /// Number of recorded values.
    pub count: u64,
    /// Smallest recorded value.
    pub min_us: u64,
    /// Arithmetic mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest recorded value.
    pub max_us: u64,
}

/// Summarises `hist`.
///
/// ```
/// let mut h = agentwire_measure::stats::new_histogram();
/// for v in 1..=100 { agentwire_measure::stats::record_us(&mut h, v); }
/// let s = agentwire_measure::stats::summarize(&h);
/// assert_eq!((s.count, s.p50_us, s.max_us), (100, 50, 100));
/// ```
pub fn summarize(hist: &Histogram<u64>) -> LatencySummary {
    if hist.is_empty() {
        return LatencySummary {
            count: 0,
            min_us: 0,
            mean_us: 0.0,
            p50_us: 0,
            p90_us: 0,
            p99_us: 0,
            p999_us: 0,
            max_us: 0,
        };
    }
    LatencySummary {
        count: hist.len(),
        min_us: hist.min(),
        mean_us: hist.mean(),
        p50_us: hist.value_at_quantile(0.50),
        p90_us: hist.value_at_quantile(0.90),
        p99_us: hist.value_at_quantile(0.99),
        p999_us: hist.value_at_quantile(0.999),
        max_us: hist.max(),
    }
}

/// The recorded buckets as `(value_us, count)` pairs, ascending; `value_us` is the highest
/// value equivalent to the bucket (exact below 2048 µs, within 0.1 % above).
pub fn recorded_pairs(hist: &Histogram<u64>) -> Vec<(u64, u64)> {
    hist.iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

/// The median of `values` (the mean of the two middle values for an even count); `None` when
/// empty or when a value is not a number.
///
/// ```
/// use agentwire_measure::stats::median;
/// assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
/// assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
/// assert_eq!(median(&[]), None);
/// ```
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 0 {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

/// Nearest-rank percentile `q` (0..=1) of `values` (sorted here): the smallest value with at
/// least `q` of all values at or below it. `None` when empty or any value is NaN.
///
/// ```
/// use agentwire_measure::stats::nearest_rank;
/// let v = [5.0, 1.0, 4.0, 2.0, 3.0];
/// assert_eq!(nearest_rank(&v, 0.5), Some(3.0));
/// assert_eq!(nearest_rank(&v, 0.99), Some(5.0));
/// assert_eq!(nearest_rank(&v, 0.0), Some(1.0));
/// assert_eq!(nearest_rank(&[], 0.5), None);
/// ```
pub fn nearest_rank(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = (q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// Coefficient of variation: sample standard deviation (n − 1) over the mean. `None` for
/// fewer than two values or a zero mean.
///
/// ```
/// use agentwire_measure::stats::coefficient_of_variation;
/// let cov = coefficient_of_variation(&[90.0, 100.0, 110.0]).unwrap();
/// assert!((cov - 0.1).abs() < 1e-12);
/// assert_eq!(coefficient_of_variation(&[5.0]), None);
/// ```
pub fn coefficient_of_variation(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    if mean == 0.0 || !mean.is_finite() {
        return None;
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some(var.sqrt() / mean)
}

/// The intended send times of one client in an open-loop load: the total arrival `rate`
/// is split evenly over `clients`, each client sends every `clients / rate` seconds, and
/// client `i` starts `i / rate` seconds in, so the clients' sends interleave evenly.
///
/// Latency is then measured from [`intended`](Self::intended), not from the moment the
/// request actually left: if the generator or the system stalls, every request scheduled
/// during the stall carries the stall in its latency (no coordinated omission).
///
/// ```
/// use std::time::Duration;
/// use agentwire_measure::stats::OpenLoopSchedule;
/// // 1000 requests/s over 10 clients for one second: each client sends every 10 ms.
/// let s = OpenLoopSchedule::for_client(1000.0, 10, 3, Duration::from_secs(1)).unwrap();
/// assert_eq!(s.count(), 100);
/// assert_eq!(s.intended(0), Some(Duration::from_millis(3)));
/// assert_eq!(s.intended(99), Some(Duration::from_millis(993)));
/// assert_eq!(s.intended(100), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenLoopSchedule {
    interval: std::time::Duration,
    offset: std::time::Duration,
    count: u64,
}

impl OpenLoopSchedule {
    /// The schedule of client `client` of `clients` sharing a total `rate` (requests per
    /// second) for `duration`. `None` when the rate is not positive and finite, there are no
    /// clients, or `client` is out of range.
    pub fn for_client(
        rate: f64,
        clients: usize,
        client: usize,
        duration: std::time::Duration,
    ) -> Option<Self> {
        if !(rate.is_finite() && rate > 0.0) || clients == 0 || client >= clients {
            return None;
        }
        let interval_ns = (clients as f64 / rate * 1e9).round().max(1.0);
        let offset_ns = (client as f64 / rate * 1e9).round();
        let duration_ns = duration.as_nanos() as f64;
        let count = if offset_ns >= duration_ns {
            0
        } else {
            ((duration_ns - offset_ns) / interval_ns).ceil() as u64
        };
        Some(OpenLoopSchedule {
            interval: std::time::Duration::from_nanos(interval_ns as u64),
            offset: std::time::Duration::from_nanos(offset_ns as u64),
            count,
        })
    }

    /// Requests this client sends.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Time between two of this client's sends.
    pub fn interval(&self) -> std::time::Duration {
        self.interval
    }

    /// When request `k` (from 0) is due, counted from the start of the phase; `None` past the
    /// end.
    pub fn intended(&self, k: u64) -> Option<std::time::Duration> {
        if k >= self.count {
            return None;
        }
        let k32 = u32::try_from(k).ok()?;
        Some(self.offset + self.interval.checked_mul(k32)?)
    }
}

/// Latency of a request due at `intended` and answered at `answered` (both offsets from the
/// same start), microseconds; zero if answered "before" it was due.
///
/// ```
/// use std::time::Duration;
/// use agentwire_measure::stats::latency_from_intended_us;
/// // Due at 10 ms, sent late at 40 ms (a stall), answered at 41 ms: 31 ms, not 1 ms.
/// assert_eq!(latency_from_intended_us(Duration::from_millis(10), Duration::from_millis(41)), 31_000);
/// ```
pub fn latency_from_intended_us(
    intended: std::time::Duration,
    answered: std::time::Duration,
) -> u64 {
    u64::try_from(answered.saturating_sub(intended).as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_loop_schedules_cover_the_rate_exactly() {
        use std::time::Duration;
        // 1000/s over 7 clients for 2 s: the clients together send 2000 requests, and the
        // merged intended times are evenly spaced 1 ms apart.
        let d = Duration::from_secs(2);
        let mut all: Vec<Duration> = Vec::new();
        for c in 0..7 {
            let s = OpenLoopSchedule::for_client(1000.0, 7, c, d).unwrap();
            all.extend((0..s.count()).map(|k| s.intended(k).unwrap()));
            assert!(s.intended(s.count()).is_none());
        }
        assert_eq!(all.len(), 2000);
        all.sort();
        for (i, t) in all.iter().enumerate() {
            let expect = Duration::from_millis(i as u64);
            let diff = t.abs_diff(expect);
            assert!(diff <= Duration::from_micros(1), "{i}: {t:?}");
        }
        assert!(all.last().unwrap() < &d);
    }

    #[test]
    fn open_loop_rejects_nonsense() {
        use std::time::Duration;
        let d = Duration::from_secs(1);
        assert!(OpenLoopSchedule::for_client(0.0, 1, 0, d).is_none());
        assert!(OpenLoopSchedule::for_client(f64::NAN, 1, 0, d).is_none());
        assert!(OpenLoopSchedule::for_client(10.0, 0, 0, d).is_none());
        assert!(OpenLoopSchedule::for_client(10.0, 2, 2, d).is_none());
        // A client whose first send would fall after the end sends nothing.
        let late = OpenLoopSchedule::for_client(1.0, 4, 3, d).unwrap();
        assert_eq!(late.count(), 0);
        // A slow rate: 0.5/s for 3 s is sends at 0 s and 2 s.
        let slow = OpenLoopSchedule::for_client(0.5, 1, 0, Duration::from_secs(3)).unwrap();
        assert_eq!(slow.count(), 2);
        assert_eq!(slow.intended(1), Some(Duration::from_secs(2)));
        assert_eq!(
            latency_from_intended_us(Duration::from_secs(2), Duration::from_secs(1)),
            0
        );
    }

    #[test]
    fn median_and_cov_of_known_inputs() {
        assert_eq!(median(&[5.0]), Some(5.0));
        assert_eq!(median(&[2.0, 1.0]), Some(1.5));
        assert_eq!(median(&[1.0, f64::NAN]), None);
        // Mean 4, sample sd sqrt(((2-4)^2 + (4-4)^2 + (6-4)^2) / 2) = 2.
        let cov = coefficient_of_variation(&[2.0, 4.0, 6.0]).unwrap();
        assert!((cov - 0.5).abs() < 1e-12, "{cov}");
        assert_eq!(coefficient_of_variation(&[7.0, 7.0, 7.0]), Some(0.0));
        assert_eq!(coefficient_of_variation(&[0.0, 0.0]), None);
    }

    #[test]
    fn empty_histogram_summarises_to_zero() {
        let s = summarize(&new_histogram());
        assert_eq!(s.count, 0);
        assert_eq!(s.max_us, 0);
        assert_eq!(s.p99_us, 0);
        assert!(recorded_pairs(&new_histogram()).is_empty());
    }

    #[test]
    fn uniform_1_to_1000() {
        let mut h = new_histogram();
        for v in 1..=1000 {
            record_us(&mut h, v);
        }
        let s = summarize(&h);
        assert_eq!(s.count, 1000);
        assert_eq!(s.min_us, 1);
        assert_eq!(s.max_us, 1000);
        assert_eq!(s.p50_us, 500);
        assert_eq!(s.p90_us, 900);
        assert_eq!(s.p99_us, 990);
        assert_eq!(s.p999_us, 999);
        assert!((s.mean_us - 500.5).abs() < 0.01, "mean {}", s.mean_us);
    }

    #[test]
    fn single_outlier_shows_in_max_and_p999_only() {
        let mut h = new_histogram();
        for _ in 0..999 {
            record_us(&mut h, 100);
        }
        record_us(&mut h, 50_000);
        let s = summarize(&h);
        assert_eq!((s.p50_us, s.p90_us, s.p99_us), (100, 100, 100));
        assert_eq!(s.p999_us, 100);
        // 50 000 is above the exact range: within 0.1 %.
        assert!(s.max_us >= 50_000 && s.max_us <= 50_050, "max {}", s.max_us);
    }

    #[test]
    fn pairs_count_every_value_and_clamp() {
        let mut h = new_histogram();
        record_us(&mut h, 0); // clamped to 1
        record_us(&mut h, 7);
        record_us(&mut h, 7);
        record_us(&mut h, MAX_TRACKED_US * 10); // clamped to the top
        let pairs = recorded_pairs(&h);
        assert_eq!(pairs.iter().map(|p| p.1).sum::<u64>(), 4);
        assert_eq!(pairs[0], (1, 1));
        assert_eq!(pairs[1], (7, 2));
        assert!(pairs[2].0 >= MAX_TRACKED_US);
    }
}
