//! One sender type and one receiver type for every transport, so code that picks the
//! transport at run time (the agent's connector, fallback, tests) can hold either.
//!
//! This module only dispatches; it must not add behaviour of its own.

use agentwire_proto::{ErrorCode, RawFrame};
use bytes::Bytes;

#[cfg(feature = "h2")]
use super::h2::{H2Receiver, H2Sender};
#[cfg(feature = "quic")]
use super::quic::{QuicReceiver, QuicSender};
#[cfg(feature = "unix")]
use super::stream::{StreamReceiver, StreamSender};
#[cfg(feature = "ws")]
use super::ws::{WsReceiver, WsSender};
#[cfg(feature = "wt")]
use super::wt::{WtReceiver, WtSender};
use super::{
    ConnectionStats, FrameReceiver, FrameSender, SendClass, TransportError, TransportKind,
};

/// The sending half of a connection on any transport.
#[derive(Clone)]
pub enum AnySender {
    /// QUIC.
    #[cfg(feature = "quic")]
    Quic(QuicSender),
    /// A byte stream (Unix socket).
    #[cfg(feature = "unix")]
    Stream(StreamSender),
    /// HTTP/2.
    #[cfg(feature = "h2")]
    H2(H2Sender),
    /// WebSocket.
    #[cfg(feature = "ws")]
    Ws(WsSender),
    /// WebTransport.
    #[cfg(feature = "wt")]
    Wt(WtSender),
}

/// The receiving half of a connection on any transport.
pub enum AnyReceiver {
    /// QUIC.
    #[cfg(feature = "quic")]
    Quic(QuicReceiver),
    /// A byte stream (Unix socket).
    #[cfg(feature = "unix")]
    Stream(StreamReceiver),
    /// HTTP/2.
    #[cfg(feature = "h2")]
    H2(H2Receiver),
    /// WebSocket.
    #[cfg(feature = "ws")]
    Ws(WsReceiver),
    /// WebTransport.
    #[cfg(feature = "wt")]
    Wt(WtReceiver),
}

macro_rules! each_sender {
    ($self:expr, $s:ident => $body:expr) => {
        match $self {
            #[cfg(feature = "quic")]
            AnySender::Quic($s) => $body,
            #[cfg(feature = "unix")]
            AnySender::Stream($s) => $body,
            #[cfg(feature = "h2")]
            AnySender::H2($s) => $body,
            #[cfg(feature = "ws")]
            AnySender::Ws($s) => $body,
            #[cfg(feature = "wt")]
            AnySender::Wt($s) => $body,
        }
    };
}

macro_rules! each_receiver {
    ($self:expr, $r:ident => $body:expr) => {
        match $self {
            #[cfg(feature = "quic")]
            AnyReceiver::Quic($r) => $body,
            #[cfg(feature = "unix")]
            AnyReceiver::Stream($r) => $body,
            #[cfg(feature = "h2")]
            AnyReceiver::H2($r) => $body,
            #[cfg(feature = "ws")]
            AnyReceiver::Ws($r) => $body,
            #[cfg(feature = "wt")]
            AnyReceiver::Wt($r) => $body,
        }
    };
}

impl FrameSender for AnySender {
    async fn send_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        each_sender!(self, s => s.send_frame(frame, class).await)
    }
    async fn send_reply(
        &self,
        frame: Bytes,
        priority: agentwire_proto::Priority,
        slot: super::ReplySlot,
    ) -> Result<(), TransportError> {
        each_sender!(self, s => s.send_reply(frame, priority, slot).await)
    }
    async fn feed_frame(&self, frame: Bytes, class: SendClass) -> Result<(), TransportError> {
        each_sender!(self, s => s.feed_frame(frame, class).await)
    }
    async fn flush(&self) -> Result<(), TransportError> {
        each_sender!(self, s => FrameSender::flush(s).await)
    }
    async fn delivered(&self) {
        each_sender!(self, s => s.delivered().await)
    }
    fn set_peer_max_frame_size(&self, max: u32) {
        each_sender!(self, s => s.set_peer_max_frame_size(max))
    }
    fn count_streams_in_goodbye(&self) {
        each_sender!(self, s => FrameSender::count_streams_in_goodbye(s))
    }
    fn hello_accepted(&self) {
        each_sender!(self, s => FrameSender::hello_accepted(s))
    }
    fn close(&self, code: ErrorCode, reason: &str) {
        each_sender!(self, s => FrameSender::close(s, code, reason))
    }
    async fn closed(&self) -> TransportError {
        each_sender!(self, s => s.closed().await)
    }
    fn stats(&self) -> ConnectionStats {
        each_sender!(self, s => FrameSender::stats(s))
    }
    fn kind(&self) -> TransportKind {
        each_sender!(self, s => s.kind())
    }
}

impl FrameReceiver for AnyReceiver {
    async fn recv_frame(&mut self) -> Result<Option<RawFrame>, TransportError> {
        each_receiver!(self, r => r.recv_frame().await)
    }
    fn set_max_frame_size(&mut self, max: u32) {
        each_receiver!(self, r => r.set_max_frame_size(max))
    }
    fn take_reply_slot(&mut self) -> Option<super::ReplySlot> {
        each_receiver!(self, r => r.take_reply_slot())
    }
}
