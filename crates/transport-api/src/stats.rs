//! A connection's network counters, as every transport reports them.
//!
//! This module owns the snapshot's fields; it must not read any socket.

use std::net::SocketAddr;

/// A snapshot of a connection's network-level counters. Fields a transport cannot know are 0.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ConnectionStats {
    /// Transport name.
    pub transport: &'static str,
    /// Peer address.
    pub remote_addr: Option<SocketAddr>,
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u64,
    /// Congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Packets declared lost.
    pub lost_packets: u64,
    /// Bytes declared lost.
    pub lost_bytes: u64,
    /// Packets sent.
    pub sent_packets: u64,
    /// UDP/TCP payload bytes sent.
    pub bytes_sent: u64,
    /// UDP/TCP payload bytes received.
    pub bytes_received: u64,
    /// Streams this side opened.
    pub streams_opened: u64,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Answers written on the bidirectional stream their request arrived on (QUIC: requests
    /// from peers that send them that way, such as browsers).
    pub replies_on_request_streams: u64,
    /// Current path MTU, bytes.
    pub mtu: u16,
    /// Congestion events.
    pub congestion_events: u64,
}
