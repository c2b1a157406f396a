//! agentwire's shared measurement code, used by `agentwire bench`, `agentwire load` and
//! `agentwire netsim`: latency histograms and their summaries ([`stats`]), CPU time and peak
//! memory of processes from Linux's `/proc` ([`resources`]), the machine and build a run was on
//! ([`environment`]) and SVG charts ([`chart`]).
//!
//! This crate measures and draws; it must not know about agentwire's transports, the hub or
//! any protocol, so that every tool can depend on it without pulling those in.
//!
//! ```
//! use agentwire_measure::stats::{median, new_histogram, record_us, summarize};
//! let mut h = new_histogram();
//! for us in [100, 200, 300] {
//!     record_us(&mut h, us);
//! }
//! assert_eq!(summarize(&h).count, 3);
//! assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
//! ```

#![warn(missing_docs)]

pub mod chart;
pub mod environment;
pub mod resources;
pub mod stats;

pub use environment::{build_profile, Environment, UdpProbe};
pub use stats::LatencySummary;
