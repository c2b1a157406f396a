//! QUIC settings as quinn takes them: the transport configuration (windows, streams,
//! congestion controller, MTU discovery, ACK frequency) and the endpoint configuration.
//!
//! This module owns the translation from [`QuicSettings`] to quinn; it must not bind sockets
//! (see `quic::udp`) or open connections.

use std::sync::Arc;

use quinn::congestion::{BbrConfig, CubicConfig, NewRenoConfig};
use quinn::{IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt};

use crate::settings::{initial_window, CongestionControl, QuicSettings, SettingsError};

/// The largest `max_ack_delay` QUIC can announce (RFC 9000: values of 2^14 ms or more are
/// invalid).
const MAX_ACK_DELAY: std::time::Duration = std::time::Duration::from_millis((1 << 14) - 1);

impl QuicSettings {
    /// Builds the quinn transport configuration.
    pub fn transport_config(&self) -> Result<TransportConfig, SettingsError> {
        let mut t = TransportConfig::default();
        let idle = IdleTimeout::try_from(self.idle_timeout)
            .map_err(|_| SettingsError::IdleTimeout(self.idle_timeout))?;
        t.max_idle_timeout(Some(idle))
            .keep_alive_interval(self.keep_alive)
            .max_concurrent_uni_streams(VarInt::from_u32(self.max_concurrent_uni_streams))
            .max_concurrent_bidi_streams(VarInt::from_u32(self.max_concurrent_bidi_streams))
            .stream_receive_window(VarInt::from_u32(self.stream_receive_window))
            .receive_window(
                VarInt::from_u64(self.receive_window)
                    .map_err(|_| SettingsError::ReceiveWindow(self.receive_window))?,
            )
            .send_window(self.send_window)
            // Round-robin between streams of one priority. Without it quinn finishes a stream
            // it has started before it looks at any other, whatever their priorities, so a
            // critical message waited behind the rest of a 256 KiB bulk message: over 50 ms
            // that was two to four round trips while the congestion window grew (the priority
            // probe's critical p99 205-225 ms; with fairness 82-111 ms,
            // docs/benchmarks/2026-11-25-send-fairness).
            .send_fairness(true);
        if self.initial_mtu < 1200 || self.max_mtu < self.initial_mtu {
            return Err(SettingsError::Mtu {
                initial: self.initial_mtu,
                max: self.max_mtu,
            });
        }
        t.initial_mtu(self.initial_mtu);
        let mut mtu = MtuDiscoveryConfig::default();
        mtu.upper_bound(self.max_mtu);
        t.mtu_discovery_config(Some(mtu));
        // The ACK frequency extension: the peer acknowledges after this many ack-eliciting
        // packets (or its max_ack_delay), and at once on a gap, so loss is still seen at once.
        let mut ack = quinn::AckFrequencyConfig::default();
        ack.ack_eliciting_threshold(VarInt::from_u32(self.ack_eliciting_threshold));
        if self.max_ack_delay > MAX_ACK_DELAY {
            return Err(SettingsError::MaxAckDelay(self.max_ack_delay));
        }
        ack.max_ack_delay(Some(self.max_ack_delay));
        t.ack_frequency_config(Some(ack));
        if self.datagrams {
            t.datagram_receive_buffer_size(Some(1024 * 1024));
        } else {
            t.datagram_receive_buffer_size(None);
        }
        // quinn's controllers start at 14,720 bytes whatever the datagram size, which is less
        // than one 16 KiB loopback datagram: they could never send (a handshake timed out).
        let window = initial_window(self.initial_mtu);
        match self.congestion {
            CongestionControl::Cubic => t.congestion_controller_factory(Arc::new(
                CubicConfig::default().initial_window(window).clone(),
            )),
            CongestionControl::NewReno => t.congestion_controller_factory(Arc::new(
                NewRenoConfig::default().initial_window(window).clone(),
            )),
            CongestionControl::Bbr => t.congestion_controller_factory(Arc::new(
                BbrConfig::default().initial_window(window).clone(),
            )),
            CongestionControl::Bbr3 => {
                t.congestion_controller_factory(Arc::new(agentwire_cc::BbrConfig::default()))
            }
        };
        Ok(t)
    }

    /// Builds the quinn endpoint configuration: the largest UDP payload this endpoint accepts
    /// (announced to peers, who size their datagrams by it) is
    /// [`endpoint_payload`](Self::endpoint_payload).
    pub fn endpoint_config(&self) -> Result<quinn::EndpointConfig, SettingsError> {
        let mut config = quinn::EndpointConfig::default();
        let payload = self.endpoint_payload();
        config
            .max_udp_payload_size(payload)
            .map_err(|_| SettingsError::Payload(payload))?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn settings_quinn_cannot_use_are_named() {
        let mut s = QuicSettings {
            initial_mtu: 1000,
            ..QuicSettings::default()
        };
        assert!(matches!(
            s.transport_config(),
            Err(SettingsError::Mtu { initial: 1000, .. })
        ));
        s.initial_mtu = 1200;
        s.receive_window = u64::MAX;
        assert!(matches!(
            s.transport_config(),
            Err(SettingsError::ReceiveWindow(u64::MAX))
        ));
        s.receive_window = QuicSettings::default().receive_window;
        s.idle_timeout = Duration::MAX;
        assert!(matches!(
            s.transport_config(),
            Err(SettingsError::IdleTimeout(_))
        ));
        s.idle_timeout = QuicSettings::default().idle_timeout;
        s.max_ack_delay = Duration::from_millis(1 << 14);
        assert!(matches!(
            s.transport_config(),
            Err(SettingsError::MaxAckDelay(_))
        ));
        s.max_ack_delay = MAX_ACK_DELAY;
        assert!(s.transport_config().is_ok());
        assert!(QuicSettings::default().transport_config().is_ok());
        assert!(QuicSettings::default().endpoint_config().is_ok());
    }
}
