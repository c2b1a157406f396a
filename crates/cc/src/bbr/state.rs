//! What a [`Bbr`](super::Bbr) controller shows of itself: its mode, its phase in a bandwidth
//! probe, and a snapshot of its model (for qlog traces, the simulator and tests).
//!
//! This module owns those public views; it must not change the controller.

use std::time::Duration;

/// The controller's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Doubling every round until the bandwidth stops growing or loss says the pipe is full.
    Startup,
    /// Emptying the queue Startup built.
    Drain,
    /// Steady state, cycling through the phases of [`Phase`].
    ProbeBw(Phase),
    /// A short dip to re-measure the minimum RTT.
    ProbeRtt,
}

/// The phases of ProbeBW.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// One round with more in flight, to find bandwidth that became free.
    Up,
    /// One round with one bandwidth-delay product in flight, to drain what Up queued.
    Down,
    /// The rest of the cycle.
    Cruise,
}

/// A snapshot of what the controller believes, for tests, stats and qlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BbrState {
    /// The current mode.
    pub mode: Mode,
    /// Bottleneck bandwidth estimate, bytes per second.
    pub bandwidth: u64,
    /// Minimum RTT seen in the current window.
    pub min_rtt: Option<Duration>,
    /// The window quinn sees, bytes (the model's, or the pacing headroom or rate window where
    /// larger).
    pub window: u64,
    /// The model's own window, bytes.
    pub model_window: u64,
    /// The loss-derived upper bound on what is in flight (`u64::MAX` when none).
    pub inflight_hi: u64,
    /// Rounds counted so far.
    pub rounds: u64,
}
