//! Bodies: frames written onto a stream's body within flow control, the session stream's pump, and one message stream's body read into exactly one frame under the size limit.
//!
//! This module owns body I/O; it must not route or answer requests.

use super::*;

/// Session frames held back by `feed_frame` before they are written anyway.
pub(super) const SESSION_BATCH: usize = 64 * 1024;

/// An agent's messages up to this many bytes (frame header included) ride the session
/// stream, batched with its control frames; larger ones get a message stream of their own, so
/// that HTTP/2 interleaves them with everything else instead of holding the session stream up
/// behind them. 16 KiB is one DATA frame at HTTP/2's default maximum frame size.
pub const SESSION_MESSAGE_MAX: usize = 16 * 1024;

/// Writes `data` to an h2 stream, waiting for flow-control capacity chunk by chunk (so a slow
/// reader holds the writer back instead of h2 buffering without bound).
pub(super) async fn write_body(
    stream: &mut SendStream<Bytes>,
    mut data: Bytes,
    end: bool,
) -> Result<(), h2::Error> {
    if data.is_empty() {
        return stream.send_data(data, end);
    }
    loop {
        stream.reserve_capacity(data.len());
        let mut cap = stream.capacity();
        if cap == 0 {
            cap = match poll_fn(|cx| stream.poll_capacity(cx)).await {
                Some(Ok(n)) => n,
                Some(Err(e)) => return Err(e),
                None => return Err(h2::Error::from(h2::Reason::STREAM_CLOSED)),
            };
            if cap == 0 {
                continue;
            }
        }
        let chunk = data.split_to(cap.min(data.len()));
        let last = data.is_empty();
        stream.send_data(chunk, end && last)?;
        if last {
            return Ok(());
        }
    }
}

/// Accounts a reader's partially buffered bytes against the connection's budget.
pub(super) fn account(core: &Core, held: &mut usize, now: usize) -> Result<(), TransportError> {
    if now > *held {
        let add = now - *held;
        let total = core.buffered.fetch_add(add, Ordering::Relaxed) + add;
        *held = now;
        if total > DEFAULT_MAX_BUFFERED_BYTES {
            return Err(TransportError::Frame(FrameError::TooLarge {
                len: u32::try_from(total).unwrap_or(u32::MAX),
                max: u32::try_from(DEFAULT_MAX_BUFFERED_BYTES).unwrap_or(u32::MAX),
            }));
        }
    } else {
        core.buffered.fetch_sub(*held - now, Ordering::Relaxed);
        *held = now;
    }
    Ok(())
}

/// Reads the session stream's incoming side (the request body on the hub, the response body
/// on the agent) as a sequence of frames. Its end ends the session.
pub(super) async fn session_pump(mut body: RecvStream, core: Arc<Core>, tx: mpsc::Sender<Inbound>) {
    let mut decoder = FrameDecoder::new(core.max_in.load(Ordering::Relaxed));
    let mut held = 0usize;
    let mut goodbye: Option<Goodbye> = None;
    // Ok(true): clean end; Ok(false): consumer gone; Err: frame error (reported) or h2 error.
    let outcome: Result<bool, Result<TransportError, h2::Error>> = 'read: loop {
        let chunk = match body.data().await {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => break Err(Err(e)),
            None => match decoder.finish() {
                Ok(()) => break Ok(true),
                Err(e) => break Err(Ok(e.into())),
            },
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        core.bytes_received
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        decoder.push_bytes(chunk);
        loop {
            decoder.set_max_frame_size(core.max_in.load(Ordering::Relaxed));
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    if frame.type_byte == FrameType::Goodbye as u8 {
                        if let Ok(Frame::Goodbye(g)) = Frame::decode(&frame, Codec::MsgPack) {
                            goodbye = Some(g);
                        }
                    }
                    if tx.send(Ok(frame)).await.is_err() {
                        break 'read Ok(false);
                    }
                }
                Ok(None) => break,
                Err(e) => break 'read Err(Ok(e.into())),
            }
        }
        if let Err(e) = account(&core, &mut held, decoder.buffered()) {
            break Err(Ok(e));
        }
    };
    core.buffered.fetch_sub(held, Ordering::Relaxed);
    match outcome {
        Ok(true) => {
            let why = match goodbye {
                Some(g) => TransportError::Closed {
                    code: Some(g.code),
                    reason: format!("closed by peer: {} {}", g.code.name(), g.reason)
                        .trim_end()
                        .to_owned(),
                },
                None => TransportError::Closed {
                    code: Some(ErrorCode::Normal),
                    reason: "the peer ended the session".into(),
                },
            };
            core.clean.store(true, Ordering::Relaxed);
            core.end(why, false);
            begin_shutdown(&core, None);
        }
        Ok(false) => {}
        // The consumer closes the connection with the error's code.
        Err(Ok(frame_error)) => {
            let _ = tx.send(Err(frame_error)).await;
        }
        Err(Err(e)) => {
            core.end(map_h2_error(&e), false);
            begin_shutdown(&core, None);
        }
    }
}

/// Hub side: one message stream's body being read, which must carry exactly one frame, then
/// the end of the stream.
pub(super) struct MessageBody {
    pub(super) decoder: FrameDecoder,
    /// Bytes of this stream counted in the connection's `buffered` total.
    pub(super) held: usize,
    pub(super) frame: Option<RawFrame>,
}

/// What one step of reading a message body came to.
pub(super) enum BodyStep {
    /// More bytes are needed.
    More,
    /// The stream ended: its one frame, nothing (a reset stream loses only its own message;
    /// a lost connection is reported by the connection driver), or a frame error.
    Done(Result<Option<RawFrame>, TransportError>),
}

impl MessageBody {
    pub(super) fn new(core: &Core) -> Self {
        MessageBody {
            decoder: FrameDecoder::new(core.max_in.load(Ordering::Relaxed)),
            held: 0,
            frame: None,
        }
    }

    /// Takes what `body.data()` gave.
    pub(super) fn step(
        &mut self,
        core: &Core,
        body: &mut RecvStream,
        data: Option<Result<Bytes, h2::Error>>,
    ) -> BodyStep {
        let chunk = match data {
            Some(Ok(chunk)) => chunk,
            Some(Err(_)) => return BodyStep::Done(Ok(None)),
            None => {
                return BodyStep::Done(match self.frame.take() {
                    Some(f) => Ok(Some(f)),
                    None => Err(TransportError::Frame(match self.decoder.finish() {
                        Err(e) => e,
                        Ok(()) => FrameError::Truncated {
                            buffered: 0,
                            needed: FRAME_HEADER_LEN,
                        },
                    })),
                })
            }
        };
        let _ = body.flow_control().release_capacity(chunk.len());
        core.bytes_received
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        self.decoder.push_bytes(chunk);
        if self.frame.is_none() {
            self.decoder
                .set_max_frame_size(core.max_in.load(Ordering::Relaxed));
            match self.decoder.next_frame() {
                Ok(f) => self.frame = f,
                Err(e) => return BodyStep::Done(Err(e.into())),
            }
        }
        if self.frame.is_some() && self.decoder.buffered() > 0 {
            return BodyStep::Done(Err(FrameError::Trailing(self.decoder.buffered()).into()));
        }
        match account(core, &mut self.held, self.decoder.buffered()) {
            Ok(()) => BodyStep::More,
            Err(e) => BodyStep::Done(Err(e)),
        }
    }

    /// Gives back this stream's share of the connection's buffered bytes. Returns what goes
    /// to the consumer and the answer the stream gets: `204` for a frame, `400` for a frame
    /// error, none for a reset stream.
    pub(super) fn settle(
        self,
        core: &Core,
        result: Result<Option<RawFrame>, TransportError>,
    ) -> Option<(Inbound, StatusCode)> {
        core.buffered.fetch_sub(self.held, Ordering::Relaxed);
        match result {
            Ok(Some(frame)) => Some((Ok(frame), StatusCode::NO_CONTENT)),
            Ok(None) => None,
            Err(e) => Some((Err(e), StatusCode::BAD_REQUEST)),
        }
    }
}

/// Reads a message stream whose body has arrived, inside the connection driver: no task, and
/// its `204` waits in `answers` until the driver has nothing more to read, so the answers to
/// everything read in one go leave in one write. Most small messages arrive whole (HEADERS
/// and DATA with END_STREAM in one read); a task per stream cost a spawn, a wake-up of the
/// driver and a TLS record and `writev` of its own for each `204` (half the hub's `writev`s
/// at 10 × 1 KiB were 32-byte records). Whatever has not arrived yet is handed to a
/// [`message_pump`] task; a frame the consumer has no room for waits in a task of its own.
pub(super) fn read_message_inline(
    mut body: RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    core: &Arc<Core>,
    tx: &mpsc::Sender<Inbound>,
    answers: &mut Vec<h2::server::SendResponse<Bytes>>,
) {
    use futures_util::FutureExt;
    let mut state = MessageBody::new(core);
    loop {
        let Some(data) = body.data().now_or_never() else {
            tokio::spawn(message_pump(body, respond, state, core.clone(), tx.clone()));
            return;
        };
        if let BodyStep::Done(result) = state.step(core, &mut body, data) {
            drop(body);
            let Some((inbound, status)) = state.settle(core, result) else {
                return;
            };
            // The answer goes out only once the frame is queued for the hub: an agent that has
            // every answer knows its frames are ahead of anything it sends next (its goodbye
            // on the session stream).
            match tx.try_send(inbound) {
                Err(mpsc::error::TrySendError::Full(inbound)) => {
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let _ = tx.send(inbound).await;
                        respond_status(&mut respond, status);
                    });
                }
                _ if status == StatusCode::NO_CONTENT => answers.push(respond),
                _ => respond_status(&mut respond, status),
            }
            return;
        }
    }
}
