//! # agentwire-netsim — the sans-IO impairment model of `agentwire netsim`
//!
//! This crate decides *what a network does to packets*: one-way delay, jitter, random and
//! bursty loss, a rate-limited bottleneck with a drop-tail queue, reordering and duplication.
//! It is the shared impairment logic of `agentwire netsim`, used by the packet-level simulation
//! stage and by the socket relays that sit between real agentwire endpoints.
//!
//! The model ([`Link`], [`Path`], [`Spec`]) must not do I/O: no sockets, no tokio, no threads
//! and no clocks it reads by itself. The I/O adapters that drive it: [`relay`] (socket relay
//! mode: UDP and TCP relays on loopback, tokio, no privileges needed) and packet-level mode
//! (Linux: network namespaces joined by veth, whole packets of TCP and UDP alike), with two
//! stages: `bridge` (the default: a user-space bridge over AF_PACKET sockets in a middle
//! namespace, no netfilter; runs as root or, through `userns`, as any user) and `packet`'s
//! NFQUEUE stage (root and iptables). The crate's only `unsafe` is in `sys`.
//! Time is passed in by the caller as a [`Time`] (a [`std::time::Duration`] since an arbitrary
//! epoch chosen by the caller, e.g. the start of a run; only differences matter). All
//! randomness comes from a ChaCha8 generator seeded by the caller, so the same seed, config
//! and call sequence always produce the same departure schedule.
//!
//! The shape follows `quinn-proto`: the I/O layer [`push`](Link::push)es packets into a
//! [`Link`], arms a timer for [`next_departure`](Link::next_departure) and, when it fires,
//! drains [`poll_departure`](Link::poll_departure).
//!
//! ```
//! use std::time::Duration;
//! use agentwire_netsim::{Impairment, Link, Verdict};
//!
//! let imp = Impairment { delay: Duration::from_millis(25), ..Impairment::default() };
//! let mut link = Link::new(imp, 42).unwrap();
//! let t0 = Duration::ZERO;
//! assert!(matches!(link.push(t0, "hello", 5), Verdict::Queued { .. }));
//! assert_eq!(link.poll_departure(t0), None); // still in flight
//! assert_eq!(link.next_departure(), Some(Duration::from_millis(25)));
//! assert_eq!(link.poll_departure(Duration::from_millis(25)), Some("hello"));
//! ```
//!
//! Impairments can also be written as a CLI-style [`Spec`] string:
//!
//! ```
//! use agentwire_netsim::Spec;
//!
//! let spec: Spec = "delay=25ms,jitter=2ms,loss=1%,rate=100mbit,queue=1bdp".parse().unwrap();
//! assert_eq!(spec.impairment.rate_bps, Some(100_000_000));
//! ```

#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(target_os = "linux")]
pub mod bridge;
pub mod check;
mod link;
#[cfg(target_os = "linux")]
mod netlink;
#[cfg(target_os = "linux")]
mod netns;
#[cfg(target_os = "linux")]
pub mod packet;
pub mod relay;
mod spec;
#[cfg(target_os = "linux")]
pub mod stage;
mod stage_kind;
#[cfg(target_os = "linux")]
mod sys;
#[cfg(target_os = "linux")]
pub mod userns;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use link::{DropReason, Link, Path, Stats, Verdict};
pub use spec::Spec;
pub use stage_kind::{StageKind, UnknownStage};

/// A point in time: the [`Duration`] elapsed since an arbitrary epoch chosen by the caller.
///
/// The crate never reads a clock; every call that needs the current time takes it as an
/// argument. Callers typically use `Instant::now() - start` or a simulated clock.
pub type Time = Duration;

/// Default extra hold-back of a packet selected for [reordering](Impairment::reorder): 10 ms.
pub const DEFAULT_REORDER_DELAY: Duration = Duration::from_millis(10);

/// Errors from validating an [`Impairment`] or parsing a [`Spec`] string.
///
/// Every variant names the offending key (spec keys as written by the user, or the
/// [`Impairment`] field name for config validation errors).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The spec contains a key this crate does not know.
    #[error("unknown key `{key}` in impairment spec (known keys: {})", spec::KNOWN_KEYS.join(", "))]
    UnknownKey {
        /// The unknown key.
        key: String,
    },
    /// A spec item has no `=VALUE` part, or the value is empty.
    #[error("missing value for `{key}` (expected `{key}=VALUE`)")]
    MissingValue {
        /// The key without a value.
        key: String,
    },
    /// The same key appears twice in one spec.
    #[error("duplicate key `{key}` in impairment spec")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// A value could not be parsed (bad number, bad unit, percent above 100 …).
    #[error("invalid value `{value}` for `{key}`: {reason}")]
    InvalidValue {
        /// The key whose value is invalid.
        key: String,
        /// The value as written.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
    /// An [`Impairment`] is inconsistent or out of range (e.g. a probability above 1).
    #[error("invalid impairment: `{field}` {reason}")]
    InvalidConfig {
        /// The [`Impairment`] field (or spec key) at fault.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
}

/// How jitter is distributed around the configured one-way [delay](Impairment::delay).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JitterDist {
    /// Uniform in `[delay - jitter, delay + jitter]`.
    #[default]
    Uniform,
    /// Normal with mean `delay` and standard deviation `jitter`.
    Normal,
}

/// Size of the drop-tail queue in front of the [rate-limited](Impairment::rate_bps) bottleneck.
///
/// The queue holds every packet whose serialization has not finished yet, including the one
/// being serialized. A packet that would push the queue above the limit is dropped
/// ([`DropReason::QueueFull`]), except that an empty queue always accepts one packet, so a
/// limit smaller than one packet never black-holes the link.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueLimit {
    /// No limit: every packet is queued, however long the wait.
    #[default]
    Unlimited,
    /// At most this many bytes.
    Bytes(u64),
    /// This many bandwidth-delay products, where one BDP is
    /// `rate_bps / 8 × 2 × delay` bytes (the round trip assumes the same delay both ways).
    ///
    /// ```
    /// use std::time::Duration;
    /// use agentwire_netsim::{Impairment, QueueLimit};
    ///
    /// let imp = Impairment {
    ///     delay: Duration::from_millis(25),
    ///     rate_bps: Some(10_000_000),
    ///     queue: QueueLimit::Bdp(1.0),
    ///     ..Impairment::default()
    /// };
    /// assert_eq!(imp.queue_limit_bytes(), Some(62_500)); // 1.25 MB/s × 50 ms
    /// ```
    Bdp(f64),
}

/// Gilbert–Elliott bursty loss: a two-state Markov chain evaluated once per packet.
///
/// In the usual notation the chain has states *Good* and *Bad*, `p` = P(Good → Bad) and
/// `r` = P(Bad → Good). The classic papers write `k` and `h` for the probabilities of
/// *successful delivery* in Good and Bad; this struct stores the loss probabilities directly,
/// [`loss_good`](Self::loss_good) = `1 − k` and [`loss_bad`](Self::loss_bad) = `1 − h`
/// (the same order and meaning as the spec key `ge=p/r/loss_good/loss_bad` and Linux netem's
/// `gemodel p r 1-h 1-k` apart from the argument order of the last two).
///
/// For each packet the loss decision is drawn in the current state, then the state transitions.
/// The stationary probability of Bad is `p / (p + r)` and the mean sojourn in Bad is `1 / r`
/// packets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GilbertElliott {
    /// Probability of moving from Good to Bad after a packet.
    pub p: f64,
    /// Probability of moving from Bad to Good after a packet.
    pub r: f64,
    /// Loss probability in the Good state (`1 − k`).
    pub loss_good: f64,
    /// Loss probability in the Bad state (`1 − h`).
    pub loss_bad: f64,
}

impl GilbertElliott {
    /// Long-run average loss probability: `π_G·loss_good + π_B·loss_bad` with
    /// `π_B = p / (p + r)`. If `p + r = 0` the chain never leaves Good.
    ///
    /// ```
    /// use agentwire_netsim::GilbertElliott;
    ///
    /// let ge = GilbertElliott { p: 0.01, r: 0.3, loss_good: 0.0, loss_bad: 0.5 };
    /// assert!((ge.stationary_loss() - 0.01 / 0.31 * 0.5).abs() < 1e-12);
    /// ```
    pub fn stationary_loss(&self) -> f64 {
        let s = self.p + self.r;
        if s <= 0.0 {
            return self.loss_good;
        }
        let bad = self.p / s;
        (1.0 - bad) * self.loss_good + bad * self.loss_bad
    }
}

/// The impairments applied to one direction of a path. [`Default`] is no impairment at all:
/// every packet departs at the instant it is pushed, in order.
///
/// All impairments combine; per packet they apply in this order: random loss
/// ([`loss`](Self::loss)), bursty loss ([`gilbert_elliott`](Self::gilbert_elliott)), the
/// rate-limited drop-tail queue, one-way delay plus jitter, FIFO clamping (unless
/// [`jitter_reorders`](Self::jitter_reorders)), reordering hold-back and finally duplication.
///
/// Serializes with serde (durations in serde's native `{secs, nanos}` form; missing fields take
/// their defaults). Deserialized configs should be checked with [`validate`](Self::validate);
/// [`Link::new`] does so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Impairment {
    /// Fixed one-way propagation delay added to every packet.
    pub delay: Duration,
    /// Jitter amplitude: half-width for [`JitterDist::Uniform`], standard deviation for
    /// [`JitterDist::Normal`]. The total delay is clamped at zero.
    pub jitter: Duration,
    /// Distribution of the jitter.
    pub jitter_dist: JitterDist,
    /// When `false` (the default) a packet never departs before one pushed earlier: its
    /// departure is clamped to the previous departure time. When `true`, jitter may reorder.
    /// (Packets held back by [`reorder`](Self::reorder) and duplicate copies are exempt.)
    pub jitter_reorders: bool,
    /// Bernoulli loss probability in `[0, 1]`.
    pub loss: f64,
    /// Optional Gilbert–Elliott bursty loss, applied after [`loss`](Self::loss).
    pub gilbert_elliott: Option<GilbertElliott>,
    /// Bottleneck rate in bit/s; `None` means unlimited. Serialization takes
    /// `size × 8 / rate` seconds and packets are serialized back to back.
    pub rate_bps: Option<u64>,
    /// Drop-tail queue size in front of the bottleneck (requires [`rate_bps`](Self::rate_bps)).
    pub queue: QueueLimit,
    /// Probability in `[0, 1]` that a packet is held back by an extra
    /// [`reorder_delay`](Self::reorder_delay), letting later packets overtake it.
    pub reorder: f64,
    /// Extra delay of a packet selected for reordering (default [`DEFAULT_REORDER_DELAY`]).
    pub reorder_delay: Duration,
    /// Probability in `[0, 1]` that a packet is duplicated.
    pub duplicate: f64,
    /// How long after the original the duplicate departs (default zero: same instant,
    /// right after the original).
    pub duplicate_delay: Duration,
}

impl Default for Impairment {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            jitter_dist: JitterDist::Uniform,
            jitter_reorders: false,
            loss: 0.0,
            gilbert_elliott: None,
            rate_bps: None,
            queue: QueueLimit::Unlimited,
            reorder: 0.0,
            reorder_delay: DEFAULT_REORDER_DELAY,
            duplicate: 0.0,
            duplicate_delay: Duration::ZERO,
        }
    }
}

fn check_prob(field: &'static str, v: f64) -> Result<(), Error> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(Error::InvalidConfig {
            field,
            reason: format!("must be a probability in [0, 1], got {v}"),
        })
    }
}

impl Impairment {
    /// Checks ranges and consistency: probabilities in `[0, 1]`, a non-zero rate, a finite
    /// non-negative BDP factor, and no queue limit without a rate.
    ///
    /// ```
    /// use agentwire_netsim::Impairment;
    ///
    /// assert!(Impairment::default().validate().is_ok());
    /// let bad = Impairment { loss: 1.5, ..Impairment::default() };
    /// assert!(bad.validate().unwrap_err().to_string().contains("loss"));
    /// ```
    pub fn validate(&self) -> Result<(), Error> {
        check_prob("loss", self.loss)?;
        check_prob("reorder", self.reorder)?;
        check_prob("duplicate", self.duplicate)?;
        if let Some(ge) = &self.gilbert_elliott {
            check_prob("gilbert_elliott.p", ge.p)?;
            check_prob("gilbert_elliott.r", ge.r)?;
            check_prob("gilbert_elliott.loss_good", ge.loss_good)?;
            check_prob("gilbert_elliott.loss_bad", ge.loss_bad)?;
        }
        if self.rate_bps == Some(0) {
            return Err(Error::InvalidConfig {
                field: "rate_bps",
                reason: "must be positive (use None for unlimited)".into(),
            });
        }
        if let QueueLimit::Bdp(f) = self.queue {
            if !(f.is_finite() && f >= 0.0) {
                return Err(Error::InvalidConfig {
                    field: "queue",
                    reason: format!("BDP factor must be finite and non-negative, got {f}"),
                });
            }
        }
        if self.queue != QueueLimit::Unlimited && self.rate_bps.is_none() {
            return Err(Error::InvalidConfig {
                field: "queue",
                reason: "has no effect without a rate limit (`rate`)".into(),
            });
        }
        Ok(())
    }

    /// The queue limit in bytes, or `None` when unlimited or when there is no rate limit.
    /// A [`QueueLimit::Bdp`] is resolved against `rate_bps` and `2 × delay`.
    pub fn queue_limit_bytes(&self) -> Option<u64> {
        let rate = self.rate_bps?;
        match self.queue {
            QueueLimit::Unlimited => None,
            QueueLimit::Bytes(n) => Some(n),
            QueueLimit::Bdp(f) => {
                let bdp = rate as f64 / 8.0 * 2.0 * self.delay.as_secs_f64();
                let bytes = (f * bdp).round();
                Some(if bytes >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    bytes.max(0.0) as u64
                })
            }
        }
    }

    /// Serialization time of `size_bytes` at [`rate_bps`](Self::rate_bps) (zero if unlimited).
    ///
    /// ```
    /// use std::time::Duration;
    /// use agentwire_netsim::Impairment;
    ///
    /// let imp = Impairment { rate_bps: Some(10_000_000), ..Impairment::default() };
    /// assert_eq!(imp.serialization_delay(1500), Duration::from_micros(1200));
    /// ```
    pub fn serialization_delay(&self, size_bytes: usize) -> Duration {
        match self.rate_bps {
            None | Some(0) => Duration::ZERO,
            Some(rate) => {
                let ns = (size_bytes as u128 * 8 * 1_000_000_000) / rate as u128;
                link::duration_from_ns(ns)
            }
        }
    }
}
