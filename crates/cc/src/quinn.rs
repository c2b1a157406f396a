//! [`Bbr`] as a quinn congestion controller, and [`BbrConfig`] as its factory.
//!
//! This module only forwards quinn's events to the state machine; it must not hold logic of
//! its own.

use std::any::Any;
use std::sync::Arc;
use std::time::Instant;

use quinn_proto::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

use crate::{Bbr, BbrConfig};

impl Controller for Bbr {
    fn on_sent(&mut self, now: Instant, bytes: u64, _last_packet_number: u64) {
        Bbr::on_sent(self, now, bytes);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.on_smoothed_rtt(rtt.get());
        Bbr::on_ack(self, now, sent, bytes, app_limited);
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        _largest_packet_num_acked: Option<u64>,
    ) {
        Bbr::on_end_acks(self, now, in_flight, app_limited);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        Bbr::on_congestion_event(self, now, sent, is_persistent_congestion, lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        Bbr::on_mtu_update(self, new_mtu);
    }

    fn window(&self) -> u64 {
        Bbr::window(self)
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = Bbr::window(self);
        m.pacing_rate = self.pacing_rate().map(|bytes| bytes.saturating_mul(8));
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        Bbr::initial_window(self)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// Builds a [`Bbr`] per connection:
///
/// ```
/// use std::sync::Arc;
/// let mut transport = quinn_proto::TransportConfig::default();
/// transport.congestion_controller_factory(Arc::new(agentwire_cc::BbrConfig::default()));
/// ```
impl ControllerFactory for BbrConfig {
    fn build(self: Arc<Self>, _now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Bbr::new((*self).clone(), current_mtu))
    }
}
