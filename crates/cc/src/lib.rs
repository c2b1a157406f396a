//! # agentwire-cc — a BBR-class congestion controller for quinn
//!
//! [`Bbr`] is a sans-IO state machine after BBRv3: it measures the path's bottleneck bandwidth
//! and minimum RTT and keeps about 1.5 bandwidth-delay products in flight, and it bounds what
//! it sends by loss only when the loss comes with a queue (see the [`bbr`] module).
//! [`BbrConfig`] is a `quinn_proto::congestion::ControllerFactory`, so
//! `transport.congestion_controller_factory(Arc::new(BbrConfig::default()))` puts it under a
//! quinn connection.
//!
//! The optional `sim` feature adds [`sim`]: bulk flows through `agentwire-netsim`'s impairment
//! model on simulated time (no sockets, deterministic), which the tests and the `matrix`
//! example use to check and compare controllers.
//!
//! This crate owns congestion control only; it must not do I/O, read clocks or know about
//! agents.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bbr;
mod filter;
mod quinn;
mod rate;
#[cfg(feature = "sim")]
pub mod sim;

pub use bbr::{Bbr, BbrConfig, BbrState, Mode, Phase};
pub use filter::WindowedMax;
pub use rate::{DeliveryRate, RateSample};
