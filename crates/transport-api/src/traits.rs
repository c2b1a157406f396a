//! The traits every transport implements: a cloneable sending half, an owned receiving half,
//! and the control the hub keeps of a connection.
//!
//! This module owns the contract (what each method promises); it must not implement any
//! transport.

use std::future::Future;

use agentwire_proto::{ErrorCode, Priority, RawFrame};
use bytes::Bytes;

use crate::{ConnectionStats, ReplySlot, SendClass, TransportError, TransportKind};

/// The sending half of a connection.
pub trait FrameSender: Clone + Send + Sync + 'static {
    /// Sends one encoded frame (length prefix included). Returns once the transport has taken
    /// the bytes (not when the peer has them); waits while the transport's buffers are full.
    fn send_frame(
        &self,
        frame: Bytes,
        class: SendClass,
    ) -> impl Future<Output = Result<(), TransportError>> + Send;

    /// Sends the answer to a received request on its reply slot; transports without reply
    /// slots (or a slot that no longer works) send it as an ordinary message.
    fn send_reply(
        &self,
        frame: Bytes,
        priority: Priority,
        slot: ReplySlot,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        drop(slot);
        self.send_frame(frame, SendClass::Message(priority))
    }

    /// Sends a frame that more frames follow at once. A transport that writes a byte stream
    /// may hold it until [`flush`](FrameSender::flush), so that several frames go out in one
    /// TLS record and one system call; the others send it as [`send_frame`] does.
    ///
    /// [`send_frame`]: FrameSender::send_frame
    fn feed_frame(
        &self,
        frame: Bytes,
        class: SendClass,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        self.send_frame(frame, class)
    }

    /// Resolves once the peer has acknowledged everything sent so far, so that a frame sent
    /// next (a goodbye) cannot overtake it. Byte-stream transports deliver in order and
    /// resolve at once; QUIC, whose messages travel on streams of their own, waits for their
    /// acknowledgements where the connection keeps track of them (agents' connections do).
    fn delivered(&self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// Writes out what [`feed_frame`](FrameSender::feed_frame) held back.
    fn flush(&self) -> impl Future<Output = Result<(), TransportError>> + Send {
        async { Ok(()) }
    }

    /// Sets the largest frame the peer accepts (after the handshake).
    fn set_peer_max_frame_size(&self, max: u32);

    /// The peer understands counted goodbyes (both offered
    /// `agentwire_proto::counted_goodbye::CAPABILITY`): a transport that sends messages on
    /// streams other than its goodbye's (QUIC) names how many it opened in its goodbye, so
    /// that the peer passes the goodbye on only after them. Others ignore it.
    fn count_streams_in_goodbye(&self) {}

    /// The hub accepted the peer's hello: a transport that held the peer to a small window
    /// before it (QUIC, `quic::PRE_HELLO_WINDOW`) opens it now. Others ignore it.
    fn hello_accepted(&self) {}

    /// Closes the connection with a code and a reason; pending frames may be lost.
    fn close(&self, code: ErrorCode, reason: &str);

    /// Resolves when the connection is closed, by either side.
    fn closed(&self) -> impl Future<Output = TransportError> + Send;

    /// Network counters.
    fn stats(&self) -> ConnectionStats;

    /// The transport in use.
    fn kind(&self) -> TransportKind;
}

/// The receiving half of a connection.
pub trait FrameReceiver: Send + 'static {
    /// The next whole frame, `Ok(None)` at an orderly end, or an error that ends the
    /// connection (a malformed or oversized frame, a reset, a timeout).
    fn recv_frame(
        &mut self,
    ) -> impl Future<Output = Result<Option<RawFrame>, TransportError>> + Send;

    /// Sets the largest frame accepted from the peer (after the handshake).
    fn set_max_frame_size(&mut self, max: u32);

    /// The reply slot of the frame [`recv_frame`](FrameReceiver::recv_frame) returned last,
    /// if that frame arrived as a request on a stream that can carry its answer.
    fn take_reply_slot(&mut self) -> Option<ReplySlot> {
        None
    }
}

/// Closing and inspecting a connection without knowing its transport (what the hub keeps of
/// each connection besides its writer).
pub trait ConnectionControl: Send + Sync {
    /// Closes the connection with a code.
    fn close(&self, code: ErrorCode, reason: &str);
    /// Network counters.
    fn stats(&self) -> ConnectionStats;
    /// Sets the largest frame the peer accepts (after the handshake).
    fn set_peer_frame_limit(&self, max: u32);
    /// See [`FrameSender::count_streams_in_goodbye`].
    fn count_streams_in_goodbye(&self);
    /// See [`FrameSender::hello_accepted`].
    fn hello_accepted(&self);
}

impl<S: FrameSender> ConnectionControl for S {
    fn close(&self, code: ErrorCode, reason: &str) {
        FrameSender::close(self, code, reason)
    }
    fn stats(&self) -> ConnectionStats {
        FrameSender::stats(self)
    }
    fn set_peer_frame_limit(&self, max: u32) {
        FrameSender::set_peer_max_frame_size(self, max)
    }
    fn count_streams_in_goodbye(&self) {
        FrameSender::count_streams_in_goodbye(self)
    }
    fn hello_accepted(&self) {
        FrameSender::hello_accepted(self)
    }
}

/// Checks an outgoing frame against the peer's limit (the 4-byte length prefix excluded): for
/// transports, before they write a frame.
pub fn check_outgoing(frame: &Bytes, peer_max: u32) -> Result<(), TransportError> {
    let len = frame
        .len()
        .saturating_sub(agentwire_proto::FRAME_HEADER_LEN);
    if len > peer_max as usize {
        return Err(TransportError::TooLarge { len, max: peer_max });
    }
    Ok(())
}
