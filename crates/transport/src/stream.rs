//! Frames over one ordered byte stream (a Unix socket, or any `AsyncRead + AsyncWrite`).
//!
//! The simplest mapping: every frame, control or message, is written to the one stream in the
//! order the sender's priority queue releases it, and the receiver cuts frames out with
//! [`FrameDecoder`]. There are no stream priorities on the wire: the four classes are honoured
//! by the hub's and the agent's send queues. Closing writes a `Goodbye` frame carrying the
//! code, then shuts the stream down.
//!
//! This module owns that mapping only; it must not route or interpret envelopes.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use agentwire_proto::frame::Goodbye;
use agentwire_proto::{Codec, ErrorCode, Frame, FrameDecoder, Limits, RawFrame};
use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadHalf, WriteHalf};
use tokio::sync::{watch, Mutex};

use super::frame_writer::FrameWriter;
use super::{
    check_outgoing, ConnectionStats, FrameReceiver, FrameSender, SendClass, TransportError,
    TransportKind,
};

/// Bytes read per system call at most.
const READ_BUFFER: usize = 64 * 1024;
/// A read buffer with less room than this is replaced (or taken back) before the next read.
const MIN_READ_ROOM: usize = 16 * 1024;
/// Reads shorter than this are copied into the decoder; longer ones are handed over.
const SMALL_READ: usize = 16 * 1024;

type BoxedWriter = FrameWriter<WriteHalf<Box<dyn ByteStream>>>;
type BoxedReader = ReadHalf<Box<dyn ByteStream>>;

/// A bidirectional byte stream.
pub trait ByteStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> ByteStream for T {}

/// Shared between the two halves: how the connection ended, once it has.
struct Shared {
    kind: TransportKind,
    remote: Option<SocketAddr>,
    closed: watch::Sender<Option<TransportError>>,
    bytes_sent: AtomicU64,
    bytes_received: AtomicU64,
    goodbye_sent: AtomicBool,
}

impl Shared {
    fn end(&self, why: TransportError) {
        self.closed.send_if_modified(|state| {
            if state.is_none() {
                *state = Some(why);
                true
            } else {
                false
            }
        });
    }
}

/// Splits a byte stream into frame sender and receiver halves.
pub fn split_stream<T: ByteStream>(
    io: T,
    kind: TransportKind,
    remote: Option<SocketAddr>,
) -> (StreamSender, StreamReceiver) {
    let boxed: Box<dyn ByteStream> = Box::new(io);
    let (reader, writer) = tokio::io::split(boxed);
    let (closed, _) = watch::channel(None);
    let shared = Arc::new(Shared {
        kind,
        remote,
        closed,
        bytes_sent: AtomicU64::new(0),
        bytes_received: AtomicU64::new(0),
        goodbye_sent: AtomicBool::new(false),
    });
    let max = Limits::default().max_frame_size;
    (
        StreamSender {
            writer: Arc::new(Mutex::new(Some(FrameWriter::new(writer)))),
            shared: shared.clone(),
            peer_max: Arc::new(AtomicU32::new(max)),
        },
        StreamReceiver {
            reader,
            decoder: FrameDecoder::new(max),
            buf: BytesMut::with_capacity(READ_BUFFER),
            shared,
            done: false,
        },
    )
}

/// Sending half of a byte-stream connection.
#[derive(Clone)]
pub struct StreamSender {
    writer: Arc<Mutex<Option<BoxedWriter>>>,
    shared: Arc<Shared>,
    peer_max: Arc<AtomicU32>,
}

impl StreamSender {
    /// Queues `frame` in the writer, and writes everything queued when `flush` (frames fed
    /// together are written together, in one vectored system call per 64 frames).
    async fn write(&self, frame: Option<Bytes>, flush: bool) -> Result<(), TransportError> {
        if let Some(f) = &frame {
            check_outgoing(f, self.peer_max.load(Ordering::Relaxed))?;
        }
        if let Some(why) = self.shared.closed.borrow().clone() {
            return Err(why);
        }
        let mut guard = self.writer.lock().await;
        let Some(writer) = guard.as_mut() else {
            return Err(closed_locally());
        };
        let result = async {
            if let Some(f) = &frame {
                writer.feed(f.clone()).await?;
            }
            if flush {
                writer.flush().await?;
            }
            Ok::<(), std::io::Error>(())
        }
        .await;
        match result {
            Ok(()) => {
                let len = frame.as_ref().map_or(0, Bytes::len);
                self.shared
                    .bytes_sent
                    .fetch_add(len as u64, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                let why = TransportError::io("write failed", e);
                self.shared.end(why.clone());
                Err(why)
            }
        }
    }
}

impl FrameSender for StreamSender {
    async fn send_frame(&self, frame: Bytes, _class: SendClass) -> Result<(), TransportError> {
        self.write(Some(frame), true).await
    }

    async fn feed_frame(&self, frame: Bytes, _class: SendClass) -> Result<(), TransportError> {
        self.write(Some(frame), false).await
    }

    async fn flush(&self) -> Result<(), TransportError> {
        self.write(None, true).await
    }

    fn set_peer_max_frame_size(&self, max: u32) {
        self.peer_max.store(max, Ordering::Relaxed);
    }

    fn close(&self, code: ErrorCode, reason: &str) {
        self.shared.end(TransportError::Closed {
            code: Some(code),
            reason: format!("closed locally: {} {reason}", code.name()),
        });
        // The goodbye goes out once, even when the receiving half already saw the end (a bad
        // frame from the peer is exactly when the peer must be told the code).
        if self.shared.goodbye_sent.swap(true, Ordering::Relaxed) {
            return;
        }
        let writer = self.writer.clone();
        let goodbye = Frame::Goodbye(Goodbye {
            code,
            reason: reason.chars().take(256).collect(),
        })
        .encode(Codec::MsgPack);
        tokio::spawn(async move {
            let mut guard = writer.lock().await;
            if let Some(mut w) = guard.take() {
                if let Ok(frame) = goodbye {
                    let _ = w.feed(frame).await;
                }
                let _ = w.shutdown().await;
            }
        });
    }

    async fn closed(&self) -> TransportError {
        let mut rx = self.shared.closed.subscribe();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return closed_locally();
            }
        }
    }

    fn stats(&self) -> ConnectionStats {
        ConnectionStats {
            transport: self.shared.kind.name(),
            remote_addr: self.shared.remote,
            bytes_sent: self.shared.bytes_sent.load(Ordering::Relaxed),
            bytes_received: self.shared.bytes_received.load(Ordering::Relaxed),
            ..ConnectionStats::default()
        }
    }

    fn kind(&self) -> TransportKind {
        self.shared.kind
    }
}

fn closed_locally() -> TransportError {
    TransportError::Closed {
        code: Some(ErrorCode::Normal),
        reason: "closed locally".into(),
    }
}

/// Receiving half of a byte-stream connection.
pub struct StreamReceiver {
    reader: BoxedReader,
    decoder: FrameDecoder,
    buf: BytesMut,
    shared: Arc<Shared>,
    done: bool,
}

impl StreamReceiver {
    fn finish(&mut self, why: TransportError) -> Result<Option<RawFrame>, TransportError> {
        self.done = true;
        self.shared.end(why.clone());
        match why {
            TransportError::Closed {
                code: Some(ErrorCode::Normal),
                ..
            } => Ok(None),
            other => Err(other),
        }
    }
}

impl FrameReceiver for StreamReceiver {
    async fn recv_frame(&mut self) -> Result<Option<RawFrame>, TransportError> {
        if self.done {
            return Ok(None);
        }
        let mut closed = self.shared.closed.subscribe();
        loop {
            match self.decoder.next_frame() {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => {}
                Err(e) => return self.finish(TransportError::Frame(e)),
            }
            // Bind first: the watch's read guard must be gone before `finish` writes to it.
            let ended = closed.borrow_and_update().clone();
            if let Some(why) = ended {
                return self.finish(why);
            }
            // Large reads go to the decoder uncopied: frames are cut out of them (see
            // `FrameDecoder::push_bytes`; copying 10 KiB frames out of 64 KiB reads was 5 %
            // of a Unix hub's CPU at 100 x 10 KiB). The buffer is taken back once the frames
            // cut from it are gone, and replaced only when they are not, so that allocations
            // stay at about one per READ_BUFFER bytes received.
            if self.buf.capacity() - self.buf.len() < MIN_READ_ROOM
                && !self.buf.try_reclaim(READ_BUFFER)
            {
                self.buf = BytesMut::with_capacity(READ_BUFFER);
            }
            // The read goes first: when data is waiting the watch is never polled, so never
            // registered and dropped again, for this frame (the end was checked just above).
            let read = tokio::select! {
                biased;
                r = self.reader.read_buf(&mut self.buf) => r,
                _ = closed.changed() => continue,
            };
            match read {
                Ok(0) => {
                    let why = match self.decoder.finish() {
                        Ok(()) => TransportError::Closed {
                            code: None,
                            reason: "the peer closed the connection".into(),
                        },
                        Err(e) => TransportError::Frame(e),
                    };
                    return self.finish(why);
                }
                Ok(n) => {
                    self.shared
                        .bytes_received
                        .fetch_add(n as u64, Ordering::Relaxed);
                    if n < SMALL_READ {
                        // Small reads are copied and the buffer reused: cutting frames of a
                        // few hundred bytes out of shared buffers cost more than the copy
                        // (10 x 1 KiB: hub CPU per response +3-4 %).
                        self.decoder.push(&self.buf);
                        self.buf.clear();
                    } else {
                        self.decoder.push_bytes(self.buf.split().freeze());
                    }
                }
                Err(e) => return self.finish(TransportError::io("read failed", e)),
            }
        }
    }

    fn set_max_frame_size(&mut self, max: u32) {
        self.decoder.set_max_frame_size(max);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire_proto::FrameType;
    use tokio::io::AsyncWriteExt;

    /// A raw frame of `len` bytes after the prefix (type byte included), its payload a
    /// pattern seeded by `seed`.
    fn frame(len: usize, seed: u8) -> Vec<u8> {
        let mut wire = (len as u32).to_be_bytes().to_vec();
        wire.push(FrameType::Envelope as u8);
        wire.extend((1..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)));
        wire
    }

    /// Frames from 2 bytes to 200 KiB, written in pieces that cut them anywhere, arrive
    /// whole and in order, whether the reads that carry them are copied (small) or handed
    /// to the decoder (large).
    #[tokio::test]
    async fn frames_of_every_size_survive_reads_of_every_size() {
        let (a, b) = tokio::net::UnixStream::pair().unwrap();
        let (_sender, mut receiver) = split_stream(b, TransportKind::Unix, None);
        let sizes: Vec<usize> = [2, 100, 1_000, 10_000, 20_000, 70_000, 200_000]
            .into_iter()
            .cycle()
            .take(70)
            .collect();
        let frames: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| frame(n, i as u8))
            .collect();
        let stream: Vec<u8> = frames.concat();
        let writer = tokio::spawn(async move {
            let mut a = a;
            // Pieces of 1 byte to 96 KiB, so that reads are short and long.
            let pieces = [1usize, 7, 4_096, 30_000, 98_304, 13, 65_536];
            let mut at = 0;
            for step in pieces.iter().cycle() {
                if at >= stream.len() {
                    break;
                }
                let end = (at + step).min(stream.len());
                a.write_all(&stream[at..end]).await.unwrap();
                at = end;
            }
            a
        });
        for (i, want) in frames.iter().enumerate() {
            let got = receiver.recv_frame().await.unwrap().unwrap();
            assert_eq!(
                got.to_wire(),
                &want[..],
                "frame {i} of {} bytes",
                want.len()
            );
        }
        drop(writer.await.unwrap());
        assert!(matches!(
            receiver.recv_frame().await,
            Err(TransportError::Closed { .. }) | Ok(None)
        ));
    }
}
