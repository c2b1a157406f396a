//! A limit on the bytes a TCP connection may send before the hub has read its hello.
//!
//! The hub reads at most a hello's worth of agentwire frame before the hello
//! (`agentwire_proto::MAX_HELLO_FRAME`), but the libraries under it read whole units of their
//! own first: a WebSocket message (up to the frame limit), HTTP/2 DATA (up to the flow-control
//! window). [`Gated`] counts the bytes read from the socket itself and fails the connection
//! past [`BEFORE_HELLO_BYTES`] until its [`HelloGate`] is opened, which the hub does once the
//! hello is accepted. So a peer that has not said who it is makes the hub hold at most that
//! (plus one read), on every TCP transport.
//!
//! This module owns the count; it must not parse anything.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Bytes a connection may send before its hello is accepted: the TLS handshake, the HTTP/2
/// preface or WebSocket upgrade, and the hello, with room to spare.
pub const BEFORE_HELLO_BYTES: usize = 256 * 1024;

/// Opened once the connection's hello is accepted; shared by the connection's reader.
#[derive(Debug, Clone, Default)]
pub struct HelloGate(Arc<AtomicBool>);

impl HelloGate {
    /// The hello is accepted: no more limit.
    pub fn open(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn is_open(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A stream whose reads fail past [`BEFORE_HELLO_BYTES`] while its gate is closed.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use agentwire_transport::hello_gate::{Gated, HelloGate, BEFORE_HELLO_BYTES};
/// use tokio::io::{AsyncReadExt, AsyncWriteExt};
/// let (a, mut b) = tokio::io::duplex(1 << 20);
/// let gate = HelloGate::default();
/// let mut a = Gated::new(a, gate.clone());
/// b.write_all(&vec![7u8; BEFORE_HELLO_BYTES + 1]).await.unwrap();
/// let mut buf = vec![0u8; 64 * 1024];
/// let mut read = 0;
/// let err = loop {
///     match a.read(&mut buf).await {
///         Ok(n) => read += n,
///         Err(e) => break e,
///     }
/// };
/// assert_eq!(read, BEFORE_HELLO_BYTES + 1);
/// assert!(err.to_string().contains("before its hello"));
/// # });
/// ```
#[derive(Debug)]
pub struct Gated<S> {
    inner: S,
    gate: HelloGate,
    read: usize,
}

impl<S> Gated<S> {
    /// Wraps `inner`, limited until `gate` opens.
    pub fn new(inner: S, gate: HelloGate) -> Self {
        Gated {
            inner,
            gate,
            read: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Gated<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.gate.is_open() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        if this.read > BEFORE_HELLO_BYTES {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the peer sent more than {BEFORE_HELLO_BYTES} bytes before its hello"),
            )));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        this.read += buf.filled().len() - before;
        Poll::Ready(Ok(()))
    }
}

super::write_through::write_through!(Gated);

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn an_open_gate_lets_everything_through() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let gate = HelloGate::default();
        let mut a = Gated::new(a, gate.clone());
        let mut buf = vec![0u8; 64 * 1024];
        b.write_all(&[1u8; 1000]).await.unwrap();
        assert_eq!(a.read(&mut buf).await.unwrap(), 1000);
        gate.open();
        let writer = tokio::spawn(async move {
            for _ in 0..16 {
                b.write_all(&vec![2u8; 64 * 1024]).await.unwrap();
            }
        });
        let mut read = 0;
        while read < 16 * 64 * 1024 {
            read += a.read(&mut buf).await.unwrap();
        }
        writer.await.unwrap();
        assert_eq!(read, 4 * BEFORE_HELLO_BYTES);
    }
}
