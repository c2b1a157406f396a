//! Where the answer to one received request can be written, without naming a transport.
//!
//! This module owns the neutral box; it must not know what any transport puts in it.

use std::fmt;

use crate::TransportKind;

/// Where the answer to one received request can be written (on QUIC, the request's own
/// bidirectional stream). Obtained from [`FrameReceiver::take_reply_slot`] right after the
/// request frame was received, used with [`FrameSender::send_reply`]. Dropping it unused
/// simply ends what it holds; the answer then travels like any other message.
///
/// The slot is neutral: it names no transport. The transport that made it puts in whatever
/// its replies need ([`ReplySlot::new`]) and alone takes it out again ([`ReplySlot::take`]);
/// any other transport finds nothing it knows in it and sends the answer the ordinary way.
pub struct ReplySlot {
    inner: Box<dyn std::any::Any + Send>,
    transport: TransportKind,
}

impl ReplySlot {
    /// `handle` as the reply slot of a request received over `transport` (for transports:
    /// whatever their [`FrameSender::send_reply`](crate::FrameSender::send_reply) needs).
    pub fn new<T: std::any::Any + Send>(transport: TransportKind, handle: T) -> Self {
        ReplySlot {
            inner: Box::new(handle),
            transport,
        }
    }

    /// The handle inside, if it is a `T` (that is, if the slot came from the transport that
    /// puts a `T` in). Only that transport knows its `T`, so only it finds its handle.
    pub fn take<T: std::any::Any>(self) -> Option<T> {
        self.inner.downcast::<T>().ok().map(|b| *b)
    }
}

impl fmt::Debug for ReplySlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReplySlot({})", self.transport)
    }
}

#[cfg(test)]
mod reply_slot_tests {
    use super::*;
    use crate::TransportKind;

    #[test]
    fn only_the_transport_that_filled_a_reply_slot_finds_its_handle() {
        let slot = ReplySlot::new(TransportKind::Quic, 7u64);
        assert_eq!(format!("{slot:?}"), "ReplySlot(quic)");
        assert_eq!(slot.take::<u64>(), Some(7));
        let slot = ReplySlot::new(TransportKind::Quic, 7u64);
        assert_eq!(
            slot.take::<String>(),
            None,
            "another transport's handle type finds nothing"
        );
    }
}
