//! Reading the peer's streams: one task accepts them, each stream is read frame by frame (inline while small), within the connection's partial-frame budget, and handed to the receiver in the order the peer opened them.
//!
//! This module owns stream reading; it must not interpret frames.

use super::*;

/// Bytes the accept loop reads from one new stream before it hands the stream to a task.
pub(super) const INLINE_READ_MAX: usize = 64 * 1024;

/// Reads frames from streams into the connection's inbound queue.
#[derive(Clone)]
pub(super) struct StreamReader {
    pub(super) max_frame_size: Arc<AtomicU32>,
    pub(super) buffered: Arc<AtomicUsize>,
    /// Bytes of partly received frames all streams together may hold ([`PRE_HELLO_WINDOW`]
    /// on a hub's connection until the hello is accepted).
    pub(super) max_buffered: Arc<AtomicUsize>,
    pub(super) tx: InboundSender<Result<Inbound, TransportError>>,
    /// The peer-opened streams read so far (for the counted goodbye).
    pub(super) streams: Arc<StreamsRead>,
    /// Frames read and not yet consumed.
    pub(super) backlog: Arc<Backlog>,
    /// Inside a WebTransport session: its id, whose signal opens every stream the peer opens
    /// for it.
    pub(super) session: Option<u64>,
}

/// The most bytes a stream's opening may take before it is known (two 8-byte varints).
const OPENING_MAX: usize = 16;

/// What a frame counts in a connection's [`Backlog`].
pub(super) fn backlog_len(frame: &RawFrame) -> usize {
    frame.payload.len() + agentwire_proto::FRAME_HEADER_LEN + 1
}

/// Whether a stream is one the peer opened for its messages, which its counted goodbye
/// counts (the control stream and the answers to this side's requests are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    Yes,
    No,
}

impl StreamReader {
    /// Reads a stream the accept loop has just accepted. A message stream whose bytes and end
    /// have all arrived (most small messages: one packet) is read here, in the accept loop,
    /// and its frame queued without a wait; a task per stream was 4.5 % of a QUIC hub's CPU
    /// at 10 × 1 KiB. Anything else (bytes still to come, a full queue, not exactly one
    /// frame) goes to a [`pump`](Self::pump) task with the bytes read so far, and ends
    /// exactly as if that task had read them.
    pub(super) fn start(&self, stream: RecvStream, reply: Option<SendStream>, ticket: Ticket) {
        match self.session {
            None => self.start_message(stream, reply, ticket),
            Some(session) => {
                tokio::spawn(
                    self.clone()
                        .open_session_stream(stream, reply, ticket, session),
                );
            }
        }
    }

    /// A stream the peer opened inside a WebTransport session: its signal read (and dropped),
    /// then its frames as any message stream's. A unidirectional stream of another kind (a
    /// browser's QPACK streams) is kept open and drained, uncounted; a bidirectional one is
    /// refused.
    async fn open_session_stream(
        self,
        mut stream: RecvStream,
        mut reply: Option<SendStream>,
        ticket: Ticket,
        session: u64,
    ) {
        let mut head = Vec::new();
        let mut rest = Vec::new();
        loop {
            let chunk = match stream.read_chunk(usize::MAX, true).await {
                Ok(Some(chunk)) => chunk.bytes,
                // Ended or reset before saying what it is: nothing to read.
                Ok(None) | Err(_) => return,
            };
            head.extend_from_slice(&chunk[..chunk.len().min(OPENING_MAX)]);
            rest.push(chunk);
            match signal::opening(&head, reply.is_some(), session) {
                signal::Opening::Short if head.len() < OPENING_MAX => continue,
                signal::Opening::Ours(mut skip) => {
                    // Drop the signal's bytes from the chunks read.
                    let mut read = Vec::with_capacity(rest.len());
                    for mut chunk in rest {
                        let cut = skip.min(chunk.len());
                        skip -= cut;
                        let _ = chunk.split_to(cut);
                        if !chunk.is_empty() {
                            read.push(chunk);
                        }
                    }
                    self.streams.started();
                    return self
                        .pump(stream, reply, Some(ticket), read, Counted::Yes)
                        .await;
                }
                signal::Opening::Other { .. } | signal::Opening::Short => {
                    if let Some(mut refused) = reply.take() {
                        let _ =
                            refused.reset(VarInt::from_u32(ErrorCode::ProtocolViolation.code()));
                        let _ = stream.stop(VarInt::from_u32(ErrorCode::ProtocolViolation.code()));
                        return;
                    }
                    // Kept open (closing an HTTP/3 stream of the connection is an error), its
                    // bytes dropped as they come.
                    while let Ok(Some(_)) = stream.read_chunk(usize::MAX, true).await {}
                    return;
                }
            }
        }
    }

    fn start_message(&self, mut stream: RecvStream, reply: Option<SendStream>, ticket: Ticket) {
        use futures_util::FutureExt;
        self.streams.started();
        let mut read = Vec::new();
        let mut size = 0usize;
        let finished = loop {
            match stream.read_chunk(usize::MAX, true).now_or_never() {
                Some(Ok(Some(chunk))) => {
                    size += chunk.bytes.len();
                    read.push(chunk.bytes);
                    if size > INLINE_READ_MAX {
                        break false;
                    }
                }
                Some(Ok(None)) => break true,
                // A reset stream loses only its own message.
                Some(Err(_)) => return self.streams.read(),
                None => break false,
            }
        };
        if finished && read.len() == 1 {
            let max = self.max_frame_size.load(Ordering::Relaxed);
            if let Ok(frame) = FrameDecoder::decode_one(read[0].clone(), max) {
                let slot = reply.map(|s| ReplySlot::new(TransportKind::Quic, s));
                return self.queue_inline([frame], slot, ticket);
            }
            // Several small messages sent together on one stream (`QuicSender::feed_frame`),
            // all here: handed on here too, in their order.
            if reply.is_none() {
                if let Some(frames) = whole_frames(read[0].clone(), max) {
                    return self.queue_inline(frames, None, ticket);
                }
            }
        }
        tokio::spawn(
            self.clone()
                .pump(stream, reply, Some(ticket), read, Counted::Yes),
        );
    }

    /// Queues the frames of a stream read whole in the accept loop, the first with the
    /// stream's ticket and `slot` (a request's reply slot); the rest wait in a task if the
    /// queue is full.
    fn queue_inline(
        &self,
        frames: impl IntoIterator<Item = RawFrame>,
        mut slot: Option<ReplySlot>,
        ticket: Ticket,
    ) {
        let mut items = frames.into_iter().map(|frame| {
            self.backlog.read(backlog_len(&frame));
            Ok((frame, slot.take()))
        });
        let mut first = Some(ticket);
        while let Some(item) = items.next() {
            let ticket = first.take().unwrap_or_else(|| self.tx.ticket());
            match self.tx.try_send(ticket, item) {
                Ok(()) => {}
                Err(quic_inbound::TrySendError::Closed(_)) => break,
                Err(quic_inbound::TrySendError::Full(item)) => {
                    let rest: Vec<_> = items.collect();
                    let (tx, streams) = (self.tx.clone(), self.streams.clone());
                    tokio::spawn(async move {
                        if tx.send(ticket, item).await.is_ok() {
                            for item in rest {
                                if tx.send(tx.ticket(), item).await.is_err() {
                                    break;
                                }
                            }
                        }
                        streams.read();
                    });
                    return;
                }
            }
        }
        self.streams.read();
    }

    /// Reads frames from `stream` until it ends, starting with the bytes `read` already
    /// taken from it. `reply` is the other direction of a peer-opened bidirectional stream:
    /// it travels with the first frame, as that request's reply slot. `first` is the stream's
    /// place in the peer's opening order (taken when it was accepted); its first frame waits
    /// for room with it, later frames with a new ticket. A [`Counted`] stream is reported
    /// read once its last frame is queued.
    pub(super) async fn pump(
        self,
        mut stream: RecvStream,
        mut reply: Option<SendStream>,
        mut first: Option<Ticket>,
        read: Vec<Bytes>,
        counted: Counted,
    ) {
        let mut decoder = FrameDecoder::new(self.max_frame_size.load(Ordering::Relaxed));
        let mut held = 0usize;
        let mut pending = read.into_iter();
        let mut read_before = false;
        let result = loop {
            let chunk = match pending.next() {
                Some(bytes) => bytes,
                None => {
                    if read_before {
                        // Chunks already buffered come back without waiting: give the
                        // connection's other tasks (the accept loop with a new, maybe
                        // critical, stream) a turn.
                        tokio::task::yield_now().await;
                    }
                    read_before = true;
                    // Nothing more read while the consumer has a full backlog: the bytes wait
                    // in quinn, within the stream's flow-control window.
                    if !self.backlog.has_room() {
                        self.backlog.room().await;
                    }
                    match stream.read_chunk(usize::MAX, true).await {
                        Ok(Some(chunk)) => chunk.bytes,
                        Ok(None) => break decoder.finish().map_err(TransportError::from),
                        // A reset stream loses only its own message; a lost connection is
                        // reported by the accept loop.
                        Err(_) => break Ok(()),
                    }
                }
            };
            decoder.push_bytes(chunk);
            let outcome = self.drain(&mut decoder, &mut reply, &mut first).await;
            let now = decoder.buffered();
            if now > held {
                let total = self.buffered.fetch_add(now - held, Ordering::Relaxed) + now - held;
                held = now;
                let max_buffered = self.max_buffered.load(Ordering::Relaxed);
                if total > max_buffered {
                    break Err(TransportError::Frame(
                        agentwire_proto::FrameError::TooLarge {
                            len: u32::try_from(total).unwrap_or(u32::MAX),
                            max: u32::try_from(max_buffered).unwrap_or(u32::MAX),
                        },
                    ));
                }
            } else {
                self.buffered.fetch_sub(held - now, Ordering::Relaxed);
                held = now;
            }
            match outcome {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.buffered.fetch_sub(held, Ordering::Relaxed);
        if let Err(e) = result {
            let _ = self.tx.send(self.tx.ticket(), Err(e)).await;
        }
        if counted == Counted::Yes {
            self.streams.read();
        }
    }

    /// Hands every whole frame in the decoder on; `Ok(false)` when the consumer is gone.
    pub(super) async fn drain(
        &self,
        decoder: &mut FrameDecoder,
        reply: &mut Option<SendStream>,
        first: &mut Option<Ticket>,
    ) -> Result<bool, TransportError> {
        loop {
            decoder.set_max_frame_size(self.max_frame_size.load(Ordering::Relaxed));
            match decoder.next_frame()? {
                Some(frame) => {
                    self.backlog.read(backlog_len(&frame));
                    let slot = reply.take().map(|s| ReplySlot::new(TransportKind::Quic, s));
                    let ticket = first.take().unwrap_or_else(|| self.tx.ticket());
                    if self.tx.send(ticket, Ok((frame, slot))).await.is_err() {
                        return Ok(false);
                    }
                }
                None => return Ok(true),
            }
        }
    }
}

/// The frames of `bytes` when it holds two or more whole frames and nothing else; `None`
/// otherwise (one frame, a partial or malformed one: the stream's reader deals with those).
fn whole_frames(bytes: Bytes, max_frame_size: u32) -> Option<Vec<RawFrame>> {
    let mut decoder = FrameDecoder::new(max_frame_size);
    decoder.push_bytes(bytes);
    let mut frames = Vec::new();
    while let Ok(Some(frame)) = decoder.next_frame() {
        frames.push(frame);
    }
    (frames.len() > 1 && decoder.buffered() == 0).then_some(frames)
}

/// The payload of a datagram of session `session` (after its quarter stream id), or `None`
/// for a datagram of another session or too short to name one.
fn session_datagram(mut bytes: Bytes, session: u64) -> Option<Bytes> {
    let mut head = &bytes[..];
    let quarter = super::signal::get_varint(&mut head)?;
    if quarter != session / 4 {
        return None;
    }
    let prefix = bytes.len() - head.len();
    Some(bytes.split_off(prefix))
}

pub(super) async fn accept_loop(
    conn: Connection,
    reader: StreamReader,
    tx: InboundSender<Result<Inbound, TransportError>>,
) {
    let ended = loop {
        // No new stream while the consumer has a full backlog (see `quic_backlog`).
        if !reader.backlog.has_room() {
            tokio::select! {
                () = reader.backlog.room() => {}
                e = conn.closed() => break Some(e),
            }
        }
        tokio::select! {
            stream = conn.accept_uni() => match stream {
                Ok(stream) => reader.start(stream, None, tx.ticket()),
                Err(e) => break Some(e),
            },
            request = conn.accept_bi() => match request {
                Ok((reply, stream)) => reader.start(stream, Some(reply), tx.ticket()),
                Err(e) => break Some(e),
            },
            datagram = conn.read_datagram() => match datagram {
                Ok(bytes) => {
                    // A WebTransport session's datagrams open with its quarter stream id; one
                    // naming another session is not this session's to read.
                    let bytes = match reader.session {
                        None => bytes,
                        Some(session) => match session_datagram(bytes, session) {
                            Some(bytes) => bytes,
                            None => continue,
                        },
                    };
                    let max = reader.max_frame_size.load(Ordering::Relaxed);
                    let frame = FrameDecoder::decode_one(bytes, max).map_err(TransportError::from).and_then(|f| {
                        if f.type_byte == FrameType::Heartbeat as u8 {
                            Ok(f)
                        } else {
                            Err(TransportError::Frame(agentwire_proto::FrameError::Malformed {
                                frame: FrameType::Heartbeat,
                                message: format!("datagram carried frame type 0x{:02x}; only heartbeats may", f.type_byte),
                            }))
                        }
                    });
                    let fatal = frame.is_err();
                    if let Ok(f) = &frame {
                        reader.backlog.read(backlog_len(f));
                    }
                    if tx.send(tx.ticket(), frame.map(|f| (f, None))).await.is_err() || fatal {
                        break None;
                    }
                }
                Err(e) => break Some(e),
            },
        }
    };
    if let Some(e) = ended {
        // The connection ended. Streams whose data had arrived are still handed out before
        // the error, and their data stays readable: take them all (one branch's error above
        // said nothing about the other's streams), so that nothing sent before a goodbye and
        // then a close is lost.
        while let Ok(stream) = conn.accept_uni().await {
            reader.start(stream, None, tx.ticket());
        }
        while let Ok((reply, stream)) = conn.accept_bi().await {
            reader.start(stream, Some(reply), tx.ticket());
        }
        reader.streams.end();
        let _ = tx.send(tx.ticket(), Err(map_connection_error(&e))).await;
    } else {
        reader.streams.end();
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    #[test]
    fn a_session_datagram_is_read_past_its_quarter_stream_id() {
        let beat = Bytes::from_static(&[0x00, 0, 0, 0, 17, 0x30]);
        assert_eq!(
            super::session_datagram(beat, 0).unwrap()[..],
            [0, 0, 0, 17, 0x30]
        );
        // Session on stream 8: quarter id 2.
        let beat = Bytes::from_static(&[0x02, 0xaa]);
        assert_eq!(super::session_datagram(beat, 8).unwrap()[..], [0xaa]);
        // Another session's, and one too short to name a session: not this session's.
        assert!(super::session_datagram(Bytes::from_static(&[0x01, 0xaa]), 0).is_none());
        assert!(super::session_datagram(Bytes::from_static(&[0x40]), 0).is_none());
        assert!(super::session_datagram(Bytes::new(), 0).is_none());
    }
}
