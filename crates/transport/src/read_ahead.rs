//! A read-ahead buffer under TLS: one large read from the socket, handed out to rustls in the
//! small pieces it asks for.
//!
//! rustls reads at most one TLS record (about 16 KiB), and often only 4 KiB, per call. So a
//! hub reading 10 KiB messages made about one `recvfrom` per message, each with its socket
//! lock and receive-window bookkeeping. [`ReadAhead`] reads up to [`READ_AHEAD`] bytes at
//! once and serves rustls from them. The buffer exists only while it holds unread bytes: it
//! is allocated for a read and freed once drained, so an idle connection holds none of it.
//!
//! This module owns the buffering of reads only; writes pass straight through (vectored
//! writes included). It must not parse anything.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, ReadBuf};

/// Bytes read from the socket at once, at most.
pub const READ_AHEAD: usize = 64 * 1024;

/// A stream whose reads go through a buffer that is allocated only while it holds data.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use agentwire_transport::read_ahead::ReadAhead;
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// let (a, mut b) = tokio::io::duplex(1 << 20);
/// b.write_all(&[7u8; 10_000]).await.unwrap();
/// let mut a = ReadAhead::new(a);
/// let mut piece = [0u8; 4096];
/// assert_eq!(a.read(&mut piece).await.unwrap(), 4096); // one read of 10,000 bytes behind it
/// assert_eq!(a.buffered(), 10_000 - 4096);
/// # });
/// ```
#[derive(Debug)]
pub struct ReadAhead<S> {
    inner: S,
    /// Unread bytes; unallocated when drained.
    buf: BytesMut,
}

impl<S> ReadAhead<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        ReadAhead {
            inner,
            buf: BytesMut::new(),
        }
    }

    /// Bytes read from the socket and not yet handed out.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Hands out what is buffered; frees the buffer once it is drained.
    fn take(&mut self, out: &mut ReadBuf<'_>) {
        let n = out.remaining().min(self.buffered());
        out.put_slice(&self.buf[..n]);
        self.buf.advance(n);
        if self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ReadAhead<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.buffered() > 0 {
            this.take(out);
            return Poll::Ready(Ok(()));
        }
        if out.remaining() >= READ_AHEAD {
            return Pin::new(&mut this.inner).poll_read(cx, out);
        }
        // Not zero-filled: the read writes into the new buffer's spare capacity.
        this.buf.reserve(READ_AHEAD);
        match tokio_util::io::poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.buf) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    this.take(out);
                } else {
                    this.buf = BytesMut::new();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => {
                this.buf = BytesMut::new();
                Poll::Ready(Err(e))
            }
            Poll::Pending => {
                // An idle connection keeps no buffer.
                this.buf = BytesMut::new();
                Poll::Pending
            }
        }
    }
}

super::write_through::write_through!(ReadAhead);

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn small_reads_are_served_from_one_socket_read_and_the_buffer_is_freed() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let sent: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        b.write_all(&sent).await.unwrap();
        let mut a = ReadAhead::new(a);
        let mut got = Vec::new();
        let mut piece = [0u8; 4096];
        let n = a.read(&mut piece).await.unwrap();
        got.extend_from_slice(&piece[..n]);
        // Everything the socket had came in one read; the rest waits in the buffer.
        assert_eq!(a.buffered(), sent.len() - n);
        while got.len() < sent.len() {
            let n = a.read(&mut piece).await.unwrap();
            got.extend_from_slice(&piece[..n]);
        }
        assert_eq!(got, sent);
        assert_eq!(a.buffered(), 0);
        assert_eq!(a.buf.capacity(), 0, "a drained buffer is freed");
    }

    #[tokio::test]
    async fn large_reads_bypass_the_buffer_and_eof_and_writes_pass_through() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        b.write_all(&[1u8; 100_000]).await.unwrap();
        let mut a = ReadAhead::new(a);
        let mut big = vec![0u8; 2 * READ_AHEAD];
        let n = a.read(&mut big).await.unwrap();
        assert!(n > 0 && big[..n].iter().all(|&x| x == 1));
        assert_eq!(a.buffered(), 0);
        // Writes (vectored too) reach the peer untouched.
        let parts = [io::IoSlice::new(b"ab"), io::IoSlice::new(b"cd")];
        let n_vec = a.write_vectored(&parts).await.unwrap();
        a.write_all(&b"abcd"[n_vec..]).await.unwrap();
        a.flush().await.unwrap();
        let mut four = [0u8; 4];
        b.read_exact(&mut four).await.unwrap();
        assert_eq!(&four, b"abcd");
        // End of stream: the rest, then 0.
        drop(b);
        let mut rest = Vec::new();
        a.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest.len(), 100_000 - n);
        assert_eq!(a.read(&mut [0u8; 10]).await.unwrap(), 0);
    }
}
