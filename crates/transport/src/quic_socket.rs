//! The UDP socket under a quinn endpoint, with GSO batches kept within what the kernel takes.
//!
//! quinn batches up to ten datagrams of one size into one GSO send (`UDP_SEGMENT`). Linux
//! refuses a GSO send whose total exceeds 65,535 bytes, and quinn-udp counts such a refused
//! send as sent, so every datagram in it is lost. With 1,452-byte datagrams ten fit; with the
//! large datagrams of loopback connections (up to 65,507 bytes) they do not, and a bulk sender
//! lost a batch on nearly every send (`agentwire bench`, 100 × 10 KiB at 0 ms with the MTU
//! bound at 16,384: 994 timed-out requests in one run). [`GsoCapped`] splits such a batch into
//! sends that fit, by the batch's own datagram size.
//!
//! An earlier version told quinn to batch fewer datagrams on every connection of the endpoint,
//! by the largest size any of them might use. With 64 KiB loopback datagrams that meant one
//! datagram per send on the lossy paths too, and there the bench's priority probe stalled (all
//! classes at p50 400–550 ms instead of 53 ms, four runs in four).
//!
//! A socket bound to a loopback address talks only to loopback peers, so every datagram it
//! carries has the loopback size ([`crate::settings::QuicSettings::loopback_mtu`]). There
//! [`GsoCapped::loopback`] also tells quinn to batch no more datagrams than one send takes
//! (one of 65,507 bytes). quinn builds each batch in a buffer that every connection keeps for
//! its lifetime, sized by the largest batch it ever built: ten 64 KiB datagrams made that
//! 640 KiB per connection, and a hub with 1,000 agents exchanging 100 KiB messages peaked at
//! 430-470 MiB instead of 270-285 MiB, with no more messages per second
//! (`docs/benchmarks/2026-11-24-hub-memory/`).
//!
//! quinn receives into one buffer per datagram of a batch, each sized for as many datagrams as
//! one receive may coalesce (GRO: up to 64 on Linux), and copies every datagram out of it. A
//! loopback socket receives at most one GSO send at once, at most the largest UDP payload of
//! its address family, so for an endpoint that accepts connections
//! [`GsoCapped::receiving_one_send`] tells quinn so ([`loopback_receive_segments`]): a receive
//! buffer is then one 64 KiB datagram rather than 64 times that. Connecting endpoints keep quinn's
//! sizes: there the buffers of a batch are one allocation large enough to be a fresh mapping,
//! whose pages the kernel provides as they are written, where 2 MiB may come from the heap
//! and be zeroed for every new agent.
//!
//! This module owns those adjustments; it must not change what is sent or received.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

use crate::settings::{MAX_UDP_PAYLOAD_V4, MAX_UDP_PAYLOAD_V6};

/// Largest total a Linux GSO send may carry (`sk_buff` length limit for one UDP datagram).
const MAX_GSO_BYTES: usize = 65_535;

/// Datagrams of `segment` bytes that one GSO send may carry within the kernel's limit.
///
/// ```
/// use agentwire_transport::quic_socket::segments_for;
/// assert_eq!(segments_for(1452), 45);
/// assert_eq!(segments_for(16_384), 3);
/// assert_eq!(segments_for(65_507), 1);
/// ```
pub fn segments_for(segment: usize) -> usize {
    (MAX_GSO_BYTES / segment.max(1)).max(1)
}

/// The byte ranges of `len` bytes of `segment`-byte datagrams, grouped into sends that fit
/// the kernel's GSO limit.
///
/// ```
/// use agentwire_transport::quic_socket::gso_chunks;
/// let chunks: Vec<_> = gso_chunks(3 * 30_000 + 10, 30_000).collect();
/// assert_eq!(chunks, vec![0..60_000, 60_000..90_010]);
/// assert_eq!(gso_chunks(14_520, 1452).collect::<Vec<_>>(), vec![0..14_520]);
/// ```
pub fn gso_chunks(len: usize, segment: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let step = segments_for(segment) * segment.max(1);
    (0..len)
        .step_by(step)
        .map(move |start| start..(start + step).min(len))
}

/// How many of quinn's per-segment receive sizes (`payload`, the endpoint's largest UDP
/// payload, which quinn caps at 64 KiB) a receive on a loopback socket needs: a loopback
/// receive is one datagram or one GSO send, never more than the largest payload of the
/// address family.
///
/// ```
/// use agentwire_transport::quic_socket::loopback_receive_segments;
/// assert_eq!(loopback_receive_segments(65_507, true), 1);
/// assert_eq!(loopback_receive_segments(65_507, false), 2);
/// assert_eq!(loopback_receive_segments(65_527, false), 1);
/// assert_eq!(loopback_receive_segments(1472, true), 45);
/// ```
pub fn loopback_receive_segments(payload: usize, ipv4: bool) -> usize {
    let largest = if ipv4 {
        MAX_UDP_PAYLOAD_V4
    } else {
        MAX_UDP_PAYLOAD_V6
    };
    usize::from(largest).div_ceil(payload.clamp(1, 64 * 1024))
}

/// A quinn socket whose GSO sends stay within 65,535 bytes.
pub struct GsoCapped {
    inner: Arc<dyn AsyncUdpSocket>,
    /// At most this many datagrams per batch, when every datagram has one known size.
    batch_limit: Option<usize>,
    /// At most this many segments per receive, when the socket is a loopback socket.
    receive_limit: Option<usize>,
}

impl GsoCapped {
    /// Wraps `inner`; batches of any size are split into sends that fit.
    pub fn new(inner: Arc<dyn AsyncUdpSocket>) -> Self {
        GsoCapped {
            inner,
            batch_limit: None,
            receive_limit: None,
        }
    }

    /// Wraps `inner`, a socket whose datagrams are all at most `datagram` bytes (a socket
    /// bound to a loopback address, whose connections all use the loopback size): quinn is
    /// told to batch no more of them than one GSO send takes ([`segments_for`]), so that no
    /// connection keeps a buffer of several of them.
    pub fn loopback(inner: Arc<dyn AsyncUdpSocket>, datagram: u16) -> Self {
        GsoCapped {
            inner,
            batch_limit: Some(segments_for(usize::from(datagram))),
            receive_limit: None,
        }
    }

    /// For a loopback socket of an endpoint whose largest UDP payload is `payload`: quinn is
    /// told to size its receive buffers for one loopback receive
    /// ([`loopback_receive_segments`]).
    pub fn receiving_one_send(mut self, payload: u16) -> Self {
        let ipv4 = self.inner.local_addr().is_ok_and(|a| a.is_ipv4());
        self.receive_limit = Some(loopback_receive_segments(usize::from(payload), ipv4));
        self
    }
}

impl fmt::Debug for GsoCapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GsoCapped")
            .field("inner", &self.inner)
            .field("batch_limit", &self.batch_limit)
            .field("receive_limit", &self.receive_limit)
            .finish()
    }
}

impl AsyncUdpSocket for GsoCapped {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        let Some(segment) = transmit.segment_size else {
            return self.inner.try_send(transmit);
        };
        if transmit.contents.len() <= MAX_GSO_BYTES {
            return self.inner.try_send(transmit);
        }
        // If a later part would block, the whole batch is reported blocked and quinn sends it
        // again: the receiver drops the datagrams it already has as duplicates.
        for range in gso_chunks(transmit.contents.len(), segment) {
            let contents = &transmit.contents[range];
            self.inner.try_send(&Transmit {
                destination: transmit.destination,
                ecn: transmit.ecn,
                contents,
                segment_size: (contents.len() > segment).then_some(segment),
                src_ip: transmit.src_ip,
            })?;
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [io::IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        let inner = self.inner.max_transmit_segments();
        self.batch_limit.map_or(inner, |limit| inner.min(limit))
    }

    fn max_receive_segments(&self) -> usize {
        let inner = self.inner.max_receive_segments();
        self.receive_limit.map_or(inner, |limit| inner.min(limit))
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn socket() -> Arc<dyn AsyncUdpSocket> {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a loopback UDP socket");
        let runtime = quinn::TokioRuntime;
        quinn::Runtime::wrap_udp_socket(&runtime, udp).expect("wrap the socket for quinn")
    }

    #[tokio::test]
    async fn loopback_sockets_batch_only_what_one_send_takes() {
        let inner = socket();
        let native = inner.max_transmit_segments();
        assert_eq!(
            GsoCapped::new(inner.clone()).max_transmit_segments(),
            native
        );
        assert_eq!(
            GsoCapped::loopback(inner.clone(), 65_507).max_transmit_segments(),
            1
        );
        assert_eq!(
            GsoCapped::loopback(inner, 16_384).max_transmit_segments(),
            native.min(3)
        );
    }

    #[tokio::test]
    async fn loopback_sockets_receive_one_send_at_once() {
        let inner = socket();
        let native = inner.max_receive_segments();
        assert_eq!(GsoCapped::new(inner.clone()).max_receive_segments(), native);
        assert_eq!(
            GsoCapped::loopback(inner.clone(), 65_507).max_receive_segments(),
            native
        );
        // An IPv4 socket: one 65,507-byte payload is the most a receive holds.
        assert_eq!(
            GsoCapped::loopback(inner.clone(), 65_507)
                .receiving_one_send(65_507)
                .max_receive_segments(),
            1
        );
        assert_eq!(
            GsoCapped::loopback(inner, 1452)
                .receiving_one_send(1472)
                .max_receive_segments(),
            native.min(45)
        );
    }
}
