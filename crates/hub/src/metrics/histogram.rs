//! A latency histogram of atomic buckets (no lock on the hot path), encoded as an OpenMetrics histogram.
//!
//! This module owns the buckets' arithmetic and their encoding.

use super::*;

/// Lower bound of the first `request_duration_seconds` bucket: 50 µs.
pub const LATENCY_BUCKET_START_SECONDS: f64 = 50e-6;

/// Growth factor between consecutive `request_duration_seconds` buckets.
pub const LATENCY_BUCKET_FACTOR: f64 = 2.0;

/// Number of finite `request_duration_seconds` buckets (50 µs .. ~26 s, plus `+Inf`).
pub const LATENCY_BUCKET_COUNT: u16 = 20;

/// A histogram recorded with atomic adds only. prometheus-client's `Histogram` takes a write
/// lock per observation, which every answered request would contend on (the hub's message
/// path has no hub-wide lock). Buckets hold non-cumulative counts, as prometheus-client's do;
/// the encoder accumulates them.
#[derive(Clone, Debug)]
pub(super) struct AtomicHistogram {
    pub(super) inner: Arc<AtomicHistogramInner>,
}

#[derive(Debug)]
pub(super) struct AtomicHistogramInner {
    /// Upper bounds, ending with `f64::MAX` (`+Inf` when encoded).
    pub(super) bounds: Vec<f64>,
    pub(super) counts: Vec<AtomicU64>,
    pub(super) count: AtomicU64,
    /// The sum's `f64` bits.
    pub(super) sum: AtomicU64,
}

impl AtomicHistogram {
    /// The `request_duration_seconds` buckets: 50 µs × 2ⁿ, n = 0..19, then `+Inf`.
    pub(super) fn latency() -> Self {
        let bounds: Vec<f64> = exponential_buckets(
            LATENCY_BUCKET_START_SECONDS,
            LATENCY_BUCKET_FACTOR,
            LATENCY_BUCKET_COUNT,
        )
        .chain(std::iter::once(f64::MAX))
        .collect();
        AtomicHistogram {
            inner: Arc::new(AtomicHistogramInner {
                counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
                bounds,
                count: AtomicU64::new(0),
                sum: AtomicU64::new(0f64.to_bits()),
            }),
        }
    }

    pub(super) fn observe(&self, v: f64) {
        let h = &self.inner;
        let i = h.bounds.partition_point(|b| *b < v);
        if let Some(c) = h.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        h.count.fetch_add(1, Ordering::Relaxed);
        let _ = h
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }
}

impl TypedMetric for AtomicHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for AtomicHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let h = &self.inner;
        let buckets: Vec<(f64, u64)> = h
            .bounds
            .iter()
            .zip(&h.counts)
            .map(|(b, c)| (*b, c.load(Ordering::Relaxed)))
            .collect();
        let sum = f64::from_bits(h.sum.load(Ordering::Relaxed));
        encoder.encode_histogram::<NoLabelSet>(sum, h.count.load(Ordering::Relaxed), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}
