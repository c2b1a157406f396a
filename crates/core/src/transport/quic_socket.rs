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

/// Datagrams of `segment` bytes that one GSO send may carry within the kernel's limit.
///
/// ```
/// use agentwire::transport::quic_socket::segments_for;
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
/// use agentwire::transport::quic_socket::gso_chunks;
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

/// A quinn socket whose GSO sends stay within 65,535 bytes.
pub struct GsoCapped {
    inner: Arc<dyn AsyncUdpSocket>,
}

impl GsoCapped {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn AsyncUdpSocket>) -> Self {
        GsoCapped { inner }
    }
}

impl fmt::Debug for GsoCapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GsoCapped")
            .field("inner", &self.inner)
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
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}
