//! A client's TLS stream that reports the server's alert instead of a broken pipe.
//!
//! In TLS 1.3 a client's handshake is over before the server has checked the client's
//! certificate. A server that refuses it sends an alert and closes; a client that writes
//! meanwhile (the HTTP/2 preface, the session request, the hello) gets a broken pipe or a
//! reset from the kernel, while the alert, which says why, still waits unread in the socket.
//! [`AlertOnWriteError`] turns such a write error into the alert by reading once. This module
//! owns only that; it must not retry, buffer or change anything else a stream does.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A stream whose failed writes (broken pipe, reset) report what a read finds instead, when
/// that is an error: for a TLS stream, the server's alert.
pub(crate) struct AlertOnWriteError<IO> {
    inner: IO,
}

impl<IO> AlertOnWriteError<IO> {
    pub(crate) fn new(inner: IO) -> Self {
        AlertOnWriteError { inner }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AlertOnWriteError<IO> {
    /// `e`, or the error a read of the stream gives now (data read here is dropped: the
    /// connection has failed either way).
    fn explain(&mut self, cx: &mut Context<'_>, e: io::Error) -> io::Error {
        if !matches!(
            e.kind(),
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
        ) {
            return e;
        }
        let mut scratch = [0u8; 256];
        let mut buf = ReadBuf::new(&mut scratch);
        match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
            Poll::Ready(Err(read)) => read,
            _ => e,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for AlertOnWriteError<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for AlertOnWriteError<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, data) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(self.explain(cx, e))),
            other => other,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(self.explain(cx, e))),
            other => other,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(Err(e)) => Poll::Ready(Err(self.explain(cx, e))),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A stream whose writes fail with a broken pipe and whose reads give `read`.
    struct Broken {
        read: Option<io::Error>,
    }

    impl AsyncRead for Broken {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            match self.read.take() {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Ready(Ok(())),
            }
        }
    }

    impl AsyncWrite for Broken {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_broken_pipe_becomes_the_error_a_read_finds() {
        let alert = io::Error::new(io::ErrorKind::InvalidData, "received fatal alert");
        let mut s = AlertOnWriteError::new(Broken { read: Some(alert) });
        let err = s.write_all(b"hello").await.unwrap_err();
        assert_eq!(err.to_string(), "received fatal alert");
    }

    #[tokio::test]
    async fn without_an_error_to_read_the_broken_pipe_stays() {
        let mut s = AlertOnWriteError::new(Broken { read: None });
        let err = s.write_all(b"hello").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
        // Reads pass through.
        let mut out = Vec::new();
        assert_eq!(s.read_to_end(&mut out).await.unwrap(), 0);
    }
}
