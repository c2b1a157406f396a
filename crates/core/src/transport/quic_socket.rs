//! The UDP socket under a quinn endpoint, with GSO batches kept within what the kernel takes.
//!
//! quinn batches up to ten datagrams of one size into one GSO send (`UDP_SEGMENT`). Linux
//! refuses a GSO send whose total exceeds 65,535 bytes, and quinn-udp counts such a refused
//! send as sent, so every datagram in it is lost. With 1,452-byte datagrams ten fit; with the
//! larger datagrams path MTU discovery finds on loopback (up to 65,527 bytes) they do not,
//! and a bulk sender lost a batch on nearly every send (`agentwire bench`, 100 × 10 KiB at
//! 0 ms with the MTU bound at 16,384: 994 timed-out requests in one run). [`GsoCapped`]
//! reports to quinn only as many segments per batch as fit for the largest datagram this
//! endpoint may send.
//!
//! This module owns that one adjustment; it must not change what is sent or received.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, UdpPoller};

/// Largest total a Linux GSO send may carry (`sk_buff` length limit for one UDP datagram).
const MAX_GSO_BYTES: usize = 65_535;

/// Segments per GSO batch that fit the kernel's limit when each may be `max_datagram` bytes.
///
/// ```
/// use agentwire::transport::quic_socket::segments_for;
/// assert_eq!(segments_for(1452, 64), 45);
/// assert_eq!(segments_for(16_384, 64), 3);
/// assert_eq!(segments_for(65_527, 64), 1);
/// assert_eq!(segments_for(1452, 1), 1); // no GSO on this socket
/// ```
pub fn segments_for(max_datagram: u16, socket_max: usize) -> usize {
    (MAX_GSO_BYTES / usize::from(max_datagram.max(1))).clamp(1, socket_max.max(1))
}

/// A quinn socket whose GSO batches stay within 65,535 bytes for datagrams up to
/// `max_datagram` bytes.
pub struct GsoCapped {
    inner: Arc<dyn AsyncUdpSocket>,
    segments: usize,
}

impl GsoCapped {
    /// Wraps `inner` for datagrams of at most `max_datagram` bytes.
    pub fn new(inner: Arc<dyn AsyncUdpSocket>, max_datagram: u16) -> Self {
        let segments = segments_for(max_datagram, inner.max_transmit_segments());
        GsoCapped { inner, segments }
    }
}

impl fmt::Debug for GsoCapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GsoCapped")
            .field("inner", &self.inner)
            .field("segments", &self.segments)
            .finish()
    }
}

impl AsyncUdpSocket for GsoCapped {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        self.inner.clone().create_io_poller()
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
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
        self.segments
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}
