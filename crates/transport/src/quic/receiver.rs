//! The receiving half of a QUIC connection: frames from the control stream and from every unidirectional stream the peer opens, in one bounded queue, and the goodbye's wait for streams still arriving.
//!
//! This module owns the consumer's side; the stream readers are in `streams`.

use super::*;

/// Receiving half of a QUIC connection: frames from the control stream, every unidirectional
/// stream and datagrams, merged.
pub struct QuicReceiver {
    pub(super) rx: InboundReceiver<Result<Inbound, TransportError>>,
    pub(super) max_frame_size: Arc<AtomicU32>,
    pub(super) done: bool,
    pub(super) last_reply: Option<ReplySlot>,
    /// A goodbye held back while the frames of other streams, sent before it, come in.
    pub(super) goodbye: Option<Held>,
    /// How far the peer's streams have been read.
    pub(super) streams: Arc<StreamsRead>,
    /// Bytes read and not yet taken from here.
    pub(super) backlog: Arc<Backlog>,
}

impl QuicReceiver {
    /// Bytes read from the peer's streams and not yet taken with `recv_frame`: at most
    /// about 16 MiB before new streams wait (`quic_backlog`), plus one frame per stream
    /// being read.
    pub fn unconsumed_bytes(&self) -> usize {
        self.backlog.bytes()
    }

    /// Reads no further while this many bytes are read and not taken
    /// ([`QuicSettings::max_unread_bytes`]).
    pub fn set_max_unread_bytes(&self, max: usize) {
        self.backlog.set_limit(max);
    }
}

impl Drop for QuicReceiver {
    fn drop(&mut self) {
        self.backlog.consumer_gone();
    }
}

/// A goodbye held back, and until when.
pub(super) struct Held {
    pub(super) goodbye: Inbound,
    /// A counted goodbye: the message streams the peer opened before it.
    pub(super) streams: Option<u64>,
    /// When it arrived (for an uncounted goodbye's hold).
    pub(super) since: tokio::time::Instant,
}

/// A peer that does not count its streams in its goodbye (it did not offer the capability):
/// its goodbye is handed on once no other frame has come for this long...
pub(super) const GOODBYE_QUIET: std::time::Duration = std::time::Duration::from_millis(25);

/// ...or this long after it arrived: a guess, which a receiver whose readers are starved for
/// longer can lose messages to. Counted goodbyes wait for exactly what was sent before them.
pub(super) const GOODBYE_HOLD_MAX: std::time::Duration = std::time::Duration::from_millis(500);

/// What [`QuicReceiver::next`] found.
pub(super) enum Next {
    /// A frame (or the end, or an error) from the streams.
    Item(Option<Result<Inbound, TransportError>>),
    /// The held goodbye, now due.
    Goodbye(Inbound),
}

/// A frame read from a stream, with the stream's reply direction if it arrived as the first
/// frame of a peer-opened bidirectional (request) stream.
pub(super) type Inbound = (RawFrame, Option<ReplySlot>);

impl QuicReceiver {
    /// The next item from the streams, or, when a goodbye is held, the goodbye once
    /// everything sent before it was handed on.
    pub(super) async fn next(&mut self) -> Next {
        let Some(held) = &self.goodbye else {
            return Next::Item(self.rx.recv().await);
        };
        let Some(named) = held.streams else {
            let quiet = tokio::time::Instant::now() + GOODBYE_QUIET;
            let until = quiet.min(held.since + GOODBYE_HOLD_MAX);
            return match tokio::time::timeout_at(until, self.rx.recv()).await {
                Ok(next) => Next::Item(next),
                // Quiet (or held long enough): the goodbye now.
                Err(_) => Next::Goodbye(self.take_goodbye()),
            };
        };
        loop {
            if self.streams.all_read(named) {
                // Every frame of those streams is queued already: those first, then the
                // goodbye.
                return match self.rx.try_recv() {
                    Some(next) => Next::Item(Some(next)),
                    None => Next::Goodbye(self.take_goodbye()),
                };
            }
            tokio::select! {
                () = self.streams.changed() => {}
                next = self.rx.recv() => return Next::Item(next),
            }
        }
    }

    pub(super) fn take_goodbye(&mut self) -> Inbound {
        let held = self.goodbye.take().expect("a goodbye is held");
        held.goodbye
    }
}

impl FrameReceiver for QuicReceiver {
    async fn recv_frame(&mut self) -> Result<Option<RawFrame>, TransportError> {
        self.last_reply = None;
        if self.done {
            return Ok(None);
        }
        let next = loop {
            let next = match self.next().await {
                Next::Item(next) => next,
                Next::Goodbye(goodbye) => break Some(Ok(goodbye)),
            };
            let counted = matches!(&next, Some(Ok((f, _))) if f.type_byte == counted_goodbye::TYPE);
            match next {
                Some(Ok((frame, reply)))
                    if (counted || frame.type_byte == FrameType::Goodbye as u8)
                        && self.goodbye.is_none() =>
                {
                    let (streams, frame) = match counted {
                        true => match counted_goodbye::split(&frame) {
                            Ok((n, goodbye)) => {
                                self.backlog
                                    .taken(frame.payload.len() - goodbye.payload.len());
                                (Some(n), goodbye)
                            }
                            Err(e) => break Some(Err(TransportError::Frame(e))),
                        },
                        false => (None, frame),
                    };
                    self.goodbye = Some(Held {
                        goodbye: (frame, reply),
                        streams,
                        since: tokio::time::Instant::now(),
                    });
                }
                // The connection ended (or a stream broke) while a counted goodbye was held:
                // the streams already started still finish (a closed connection's received
                // data stays readable), and the goodbye waits for them.
                Some(Err(_)) if self.goodbye.as_ref().is_some_and(|h| h.streams.is_some()) => {}
                // The connection ended while an uncounted goodbye was held: the goodbye first.
                Some(Err(_)) | None if self.goodbye.is_some() => {
                    break Some(Ok(self.take_goodbye()));
                }
                other => break other,
            }
        };
        match next {
            Some(Ok((frame, reply))) => {
                self.backlog.taken(backlog_len(&frame));
                self.last_reply = reply;
                Ok(Some(frame))
            }
            Some(Err(TransportError::Closed {
                code: Some(ErrorCode::Normal),
                ..
            }))
            | None => {
                self.done = true;
                Ok(None)
            }
            Some(Err(e)) => {
                self.done = true;
                Err(e)
            }
        }
    }

    fn set_max_frame_size(&mut self, max: u32) {
        self.max_frame_size.store(max, Ordering::Relaxed);
    }

    fn take_reply_slot(&mut self) -> Option<ReplySlot> {
        self.last_reply.take()
    }
}
