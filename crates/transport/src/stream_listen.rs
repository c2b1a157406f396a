//! The TCP and Unix-socket listeners: TLS and ALPN on TCP (HTTP/2 or WebSocket), the hello
//! gate before any cryptography, and Unix sockets in plain.
//!
//! This module owns accepting on stream sockets; the trait they implement and what they hand
//! out ([`Listen`], [`Accepted`]) are `listen`'s, and the QUIC listener lives with the QUIC
//! transport. It must not run the agentwire handshake or route anything.

#[cfg(any(feature = "h2", feature = "ws"))]
pub use tcp::*;
#[cfg(feature = "unix")]
pub use unix::*;

/// TCP, with TLS (HTTP/2 and WebSocket by ALPN) or without (plain WebSocket).
#[cfg(any(feature = "h2", feature = "ws"))]
mod tcp {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::time::Duration;

    use crate::accept_gate::{AcceptGate, AcceptLimits};
    use crate::any::{AnyReceiver, AnySender};
    #[cfg(feature = "h2")]
    use crate::h2;
    use crate::hello_gate::{Gated, HelloGate};
    use crate::listen::{AcceptFailed, Accepted, Listen, Setup};
    use crate::read_ahead::ReadAhead;
    use crate::settings::WsOptions;
    use crate::{ConnectError, TransportError, TransportKind};

    /// A TCP listener. With TLS it speaks HTTP/2 and WebSocket, chosen by ALPN (`h2` or
    /// `http/1.1`), so an `h2://` and a `wss://` URL may share one port; without TLS it speaks
    /// plain WebSocket (`ws://`).
    pub struct TcpListen {
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
        timeout: Duration,
        websocket: WsOptions,
        gate: AcceptGate,
    }

    impl TcpListen {
        /// Binds `addr`. `tls` is the server configuration (its ALPN list decides which of HTTP/2
        /// and WebSocket it offers); `timeout` bounds each connection's set-up, and `accept` how
        /// many set-ups go on at once.
        pub async fn bind(
            addr: SocketAddr,
            tls: Option<rustls::ServerConfig>,
            timeout: Duration,
            websocket: WsOptions,
            accept: AcceptLimits,
        ) -> Result<(TcpListen, SocketAddr), TransportError> {
            let listener = bind_tcp(addr)
                .map_err(|e| ConnectError::socket(format!("cannot listen on {addr}"), e))?;
            let local = listener.local_addr().map_err(|e| {
                ConnectError::socket(format!("cannot read the address of {addr}"), e)
            })?;
            let listen = TcpListen {
                listener,
                tls: tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c))),
                timeout,
                websocket,
                gate: AcceptGate::new(accept),
            };
            Ok((listen, local))
        }
    }

    /// Connections the kernel queues for a TCP listener before the hub accepts them (it caps this
    /// at `net.core.somaxconn`). tokio's default, 1,024, overflowed when 1,000 agents and their
    /// workers connected at once: the kernel dropped a quarter of the SYNs, and those agents
    /// waited a second for their retransmission (`docs/benchmarks/2026-11-26-listen-backlog/`).
    pub const LISTEN_BACKLOG: u32 = 4096;

    /// A listening TCP socket on `addr` (with `SO_REUSEADDR`, as tokio's own bind) and a queue
    /// of [`LISTEN_BACKLOG`].
    fn bind_tcp(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
        let socket = match addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    }

    impl Listen for TcpListen {
        type Sender = AnySender;
        type Receiver = AnyReceiver;

        async fn accept(&mut self) -> Option<Setup<AnySender, AnyReceiver>> {
            loop {
                // At the limit of set-ups going on, or of set-ups per second, wait (the kernel's
                // backlog holds the rest).
                let slot = self.gate.slot().await?;
                match self.listener.accept().await {
                    Ok((stream, remote)) => {
                        if closed_by_peer(&stream) {
                            // Gave up while it waited in the backlog: nothing to set up.
                            continue;
                        }
                        let pass = match self.gate.admit(slot, remote.ip()) {
                            Ok(pass) => pass,
                            Err(reason) => {
                                // Before TLS: closed at once, counted by the hub as a failed
                                // set-up.
                                drop(stream);
                                return Some(Box::pin(async move {
                                    Err(AcceptFailed {
                                        stage: "accept",
                                        error: TransportError::Closed {
                                            code: Some(agentwire_proto::ErrorCode::LimitExceeded),
                                            reason: reason.to_string(),
                                        },
                                    })
                                }));
                            }
                        };
                        // At the rate of set-ups per second, wait for this one's turn (the
                        // kernel's backlog holds the next ones).
                        self.gate.turn().await;
                        if closed_by_peer(&stream) {
                            continue;
                        }
                        let tls = self.tls.clone();
                        let (timeout, websocket) = (self.timeout, self.websocket.clone());
                        return Some(Box::pin(async move {
                            let ready = tcp_setup(stream, remote, tls, timeout, websocket).await;
                            drop(pass);
                            ready
                        }));
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: wait, and go on accepting.
                        tracing::warn!("TCP accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    }

    /// Whether the peer of an accepted TCP connection has closed it already (`CLOSE_WAIT`: its
    /// FIN came while the connection waited in the backlog), so that no handshake is spent on it.
    fn closed_by_peer(stream: &tokio::net::TcpStream) -> bool {
        use std::os::fd::AsRawFd;
        // SAFETY: an all-zero tcp_info is valid; getsockopt writes at most `len` bytes into it.
        let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        // SAFETY: the descriptor is the stream's own and open; `info` and `len` are valid.
        let ok = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_INFO,
                std::ptr::from_mut(&mut info).cast(),
                &mut len,
            )
        } == 0;
        /// `TCP_CLOSE_WAIT` of the kernel's TCP states.
        const TCP_CLOSE_WAIT: u8 = 8;
        ok && info.tcpi_state == TCP_CLOSE_WAIT
    }

    async fn tcp_setup(
        stream: tokio::net::TcpStream,
        remote: SocketAddr,
        tls: Option<tokio_rustls::TlsAcceptor>,
        timeout: Duration,
        websocket: WsOptions,
    ) -> Result<Accepted<AnySender, AnyReceiver>, AcceptFailed> {
        let _ = stream.set_nodelay(true);
        let gate = HelloGate::default();
        let stream = Gated::new(stream, gate.clone());
        let failed = |stage: &'static str, error: TransportError| AcceptFailed { stage, error };
        let Some(acceptor) = tls else {
            return websocket_setup(stream, remote, timeout, websocket, None, gate).await;
        };
        let tls_stream = tokio::time::timeout(timeout, acceptor.accept(ReadAhead::new(stream)))
            .await
            .map_err(|_| failed("tls", TransportError::Timeout(timeout)))?
            .map_err(|e| {
                tracing::debug!(%remote, "TLS handshake failed: {e}");
                failed(
                    "tls",
                    ConnectError::tls_handshake("TLS handshake failed", e).into(),
                )
            })?;
        let certificate = tls_stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(agentwire_tls::AgentCertificate::of_chain);
        #[cfg(feature = "h2")]
        if tls_stream.get_ref().1.alpn_protocol() == Some(h2::ALPN_H2) {
            let (s, r) = h2::accept(tls_stream, Some(remote), timeout)
                .await
                .map_err(|e| {
                    tracing::debug!(%remote, "HTTP/2 session not established: {e}");
                    failed(TransportKind::Http2.name(), e)
                })?;
            return Ok(certified(
                AnySender::H2(s),
                AnyReceiver::H2(r),
                certificate,
                gate,
            ));
        }
        websocket_setup(tls_stream, remote, timeout, websocket, certificate, gate).await
    }

    /// The WebSocket upgrade on an accepted connection (TLS or not).
    #[cfg(feature = "ws")]
    async fn websocket_setup<T>(
        io: T,
        remote: SocketAddr,
        timeout: Duration,
        websocket: WsOptions,
        certificate: Option<agentwire_tls::AgentCertificate>,
        gate: HelloGate,
    ) -> Result<Accepted<AnySender, AnyReceiver>, AcceptFailed>
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let stage = TransportKind::WebSocket.name();
        let (s, r) =
            tokio::time::timeout(timeout, crate::ws::accept_io(io, Some(remote), websocket))
                .await
                .map_err(|_| AcceptFailed {
                    stage,
                    error: TransportError::Timeout(timeout),
                })?
                .map_err(|error| {
                    tracing::debug!(%remote, "WebSocket upgrade failed: {error}");
                    AcceptFailed { stage, error }
                })?;
        Ok(certified(
            AnySender::Ws(s),
            AnyReceiver::Ws(r),
            certificate,
            gate,
        ))
    }

    /// Without WebSocket built in, a connection that is not HTTP/2 is refused.
    #[cfg(not(feature = "ws"))]
    async fn websocket_setup<T>(
        _io: T,
        _remote: SocketAddr,
        _timeout: Duration,
        _websocket: WsOptions,
        _certificate: Option<agentwire_tls::AgentCertificate>,
        _gate: HelloGate,
    ) -> Result<Accepted<AnySender, AnyReceiver>, AcceptFailed> {
        Err(AcceptFailed {
            stage: TransportKind::WebSocket.name(),
            error: ConnectError::Config(
                "WebSocket is not built in (agentwire-transport's feature `ws`)".into(),
            )
            .into(),
        })
    }

    fn certified(
        sender: AnySender,
        receiver: AnyReceiver,
        certificate: Option<agentwire_tls::AgentCertificate>,
        gate: HelloGate,
    ) -> Accepted<AnySender, AnyReceiver> {
        Accepted {
            sender,
            receiver,
            zero_rtt: false,
            certificate,
            hello_gate: Some(gate),
        }
    }
}

/// Unix domain sockets, in plain.
#[cfg(feature = "unix")]
mod unix {
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use crate::listen::{Accepted, Listen, Setup};
    use crate::stream::{StreamReceiver, StreamSender};
    use crate::{uds, ConnectError, TransportError};

    /// A Unix-socket listener (the socket file is made with `mode`; a stale file is replaced).
    pub struct UnixListen {
        listener: tokio::net::UnixListener,
    }

    impl UnixListen {
        /// Binds `path`.
        pub async fn bind(path: &Path, mode: u32) -> Result<UnixListen, TransportError> {
            let listener = uds::bind(path, mode).await.map_err(|e| {
                ConnectError::socket(format!("cannot listen on {}", path.display()), e)
            })?;
            Ok(UnixListen { listener })
        }

        /// The path it listens on, if the socket has one.
        pub fn path(&self) -> Option<PathBuf> {
            self.listener
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        }
    }

    impl Listen for UnixListen {
        type Sender = StreamSender;
        type Receiver = StreamReceiver;

        async fn accept(&mut self) -> Option<Setup<StreamSender, StreamReceiver>> {
            loop {
                match uds::accept(&self.listener).await {
                    Ok((sender, receiver)) => {
                        return Some(Box::pin(async move {
                            Ok(Accepted {
                                sender,
                                receiver,
                                zero_rtt: false,
                                certificate: None,
                                hello_gate: None,
                            })
                        }))
                    }
                    Err(e) => {
                        tracing::warn!("unix accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    }
}
