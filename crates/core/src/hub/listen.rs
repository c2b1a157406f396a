//! The hub's listeners: one per `--listen` URL, each accepting connections of its transport
//! and handing them to the hub's transport-independent session logic.
//!
//! This module owns sockets, accept loops and TLS set-up for listeners; it must not route or
//! interpret messages.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::task::JoinHandle;

use super::Hub;
use crate::settings::SocketBuffers;
use crate::tls::HubIdentity;
use crate::transport::{uds, TransportError, TransportKind};
use crate::url::{HubEndpoint, HubUrl};

/// Where a listener is bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundAddr {
    /// A network address (the real port when 0 was asked for).
    Net(SocketAddr),
    /// A Unix socket path.
    Path(PathBuf),
}

/// A running listener. Dropping it stops accepting (connections already made go on) and, for
/// Unix sockets, removes the socket file.
pub struct Listener {
    /// The transport it accepts.
    pub transport: TransportKind,
    /// The URL agents use to reach it (with the real port).
    pub url: HubUrl,
    /// Where it is bound.
    pub bound: BoundAddr,
    /// UDP socket buffers granted (QUIC only).
    pub socket_buffers: Option<SocketBuffers>,
    task: Option<JoinHandle<()>>,
    quic: Option<super::QuicListener>,
    socket_file: Option<SocketFile>,
}

/// The socket file a Unix listener created, identified by device and inode so that a file
/// another process has since bound at the same path is never removed.
struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    fn of(path: &Path) -> Option<SocketFile> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(path).ok()?;
        Some(SocketFile {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    fn remove_if_ours(&self) {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = std::fs::symlink_metadata(&self.path) {
            if meta.dev() == self.dev && meta.ino() == self.ino {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

impl Listener {
    /// Stops accepting; QUIC listeners also close their connections.
    pub fn close(&self) {
        if let Some(q) = &self.quic {
            q.close();
        }
        if let Some(t) = &self.task {
            t.abort();
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(t) = &self.task {
            t.abort();
        }
        if let Some(file) = &self.socket_file {
            file.remove_if_ours();
        }
    }
}

impl Hub {
    /// Starts listening on `url` (`quic://`, `h2://`, `wss://`, `ws://` or `unix://`). TLS
    /// transports need `identity`.
    pub async fn listen(
        &self,
        url: &HubUrl,
        identity: Option<&HubIdentity>,
    ) -> Result<Listener, TransportError> {
        let need_identity = || {
            identity.ok_or_else(|| {
                TransportError::Connect(format!("{url} needs a certificate (--cert-dir)"))
            })
        };
        match (&url.endpoint, url.transport) {
            (HubEndpoint::Net { .. }, TransportKind::Quic) => {
                let addr = url.resolve().await.map_err(TransportError::Connect)?;
                let quic = self.listen_quic(addr, need_identity()?)?;
                let mut real = url.clone();
                real.endpoint = HubEndpoint::Net {
                    host: url.host().unwrap_or_default().to_owned(),
                    port: quic.local_addr.port(),
                };
                Ok(Listener {
                    transport: TransportKind::Quic,
                    url: real,
                    bound: BoundAddr::Net(quic.local_addr),
                    socket_buffers: Some(quic.socket_buffers),
                    task: None,
                    quic: Some(quic),
                    socket_file: None,
                })
            }
            (HubEndpoint::Path(path), TransportKind::Unix) => self.listen_unix(url, path).await,
            (HubEndpoint::Net { .. }, TransportKind::Http2 | TransportKind::WebSocket) => {
                let tls = if url.tls {
                    let config = crate::tls::server_config(
                        need_identity()?,
                        &[
                            crate::transport::h2::ALPN_H2,
                            crate::transport::ws::ALPN_HTTP11,
                        ],
                    )
                    .map_err(|e| TransportError::Connect(e.to_string()))?;
                    Some(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config)))
                } else {
                    None
                };
                self.listen_tcp(url, tls).await
            }
            _ => Err(TransportError::Connect(format!(
                "{url}: this transport cannot listen yet"
            ))),
        }
    }

    /// A TCP listener. With TLS it speaks HTTP/2 and WebSocket, chosen by ALPN (`h2` or
    /// `http/1.1`), so an `h2://` and a `wss://` URL may share one port; without TLS it speaks
    /// plain WebSocket (`ws://`).
    async fn listen_tcp(
        &self,
        url: &HubUrl,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Result<Listener, TransportError> {
        let addr = url.resolve().await.map_err(TransportError::Connect)?;
        let tcp = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| TransportError::Connect(format!("cannot listen on {addr}: {e}")))?;
        let local = tcp
            .local_addr()
            .map_err(|e| TransportError::Io(e.to_string()))?;
        self.start_liveness();
        let hub = self.clone();
        let task = tokio::spawn(async move {
            loop {
                match tcp.accept().await {
                    Ok((stream, remote)) => {
                        let hub = hub.clone();
                        let tls = tls.clone();
                        tokio::spawn(async move { hub.accept_tcp(stream, remote, tls).await });
                    }
                    Err(e) => {
                        tracing::warn!("TCP accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
        });
        let mut real = url.clone();
        real.endpoint = HubEndpoint::Net {
            host: url.host().unwrap_or_default().to_owned(),
            port: local.port(),
        };
        tracing::info!(%real, "hub listening");
        Ok(Listener {
            transport: url.transport,
            url: real,
            bound: BoundAddr::Net(local),
            socket_buffers: None,
            task: Some(task),
            quic: None,
            socket_file: None,
        })
    }

    async fn accept_tcp(
        &self,
        stream: tokio::net::TcpStream,
        remote: SocketAddr,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) {
        use crate::metrics::outcome::FAILED;
        use crate::transport::{h2, ws};
        let _ = stream.set_nodelay(true);
        let timeout = self.inner.config.handshake_timeout;
        let ws_options = self.inner.config.websocket;
        let Some(acceptor) = tls else {
            match tokio::time::timeout(timeout, ws::accept_io(stream, Some(remote), ws_options))
                .await
            {
                Ok(Ok((s, r))) => self.serve_connection(s, r).await,
                _ => self
                    .metrics()
                    .handshake(TransportKind::WebSocket.name(), FAILED),
            }
            return;
        };
        let tls_stream = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(%remote, "TLS handshake failed: {e}");
                self.metrics().handshake("tls", FAILED);
                return;
            }
            Err(_) => {
                self.metrics().handshake("tls", FAILED);
                return;
            }
        };
        let is_h2 = tls_stream.get_ref().1.alpn_protocol() == Some(h2::ALPN_H2);
        if is_h2 {
            match h2::accept(tls_stream, Some(remote), timeout).await {
                Ok((s, r)) => self.serve_connection(s, r).await,
                Err(e) => {
                    tracing::debug!(%remote, "HTTP/2 session not established: {e}");
                    self.metrics()
                        .handshake(TransportKind::Http2.name(), FAILED);
                }
            }
        } else {
            match tokio::time::timeout(timeout, ws::accept_io(tls_stream, Some(remote), ws_options))
                .await
            {
                Ok(Ok((s, r))) => self.serve_connection(s, r).await,
                Ok(Err(e)) => {
                    tracing::debug!(%remote, "WebSocket upgrade failed: {e}");
                    self.metrics()
                        .handshake(TransportKind::WebSocket.name(), FAILED);
                }
                Err(_) => self
                    .metrics()
                    .handshake(TransportKind::WebSocket.name(), FAILED),
            }
        }
    }

    async fn listen_unix(&self, url: &HubUrl, path: &Path) -> Result<Listener, TransportError> {
        let listener = uds::bind(path, self.inner.config.unix_socket_mode)
            .await
            .map_err(|e| {
                TransportError::Connect(format!("cannot listen on {}: {e}", path.display()))
            })?;
        self.start_liveness();
        let hub = self.clone();
        let task = tokio::spawn(async move {
            loop {
                match uds::accept(&listener).await {
                    Ok((sender, receiver)) => {
                        let hub = hub.clone();
                        tokio::spawn(async move { hub.serve_connection(sender, receiver).await });
                    }
                    Err(e) => {
                        tracing::warn!("unix accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                }
            }
        });
        tracing::info!(path = %path.display(), "hub listening on a Unix socket");
        Ok(Listener {
            transport: TransportKind::Unix,
            url: url.clone(),
            bound: BoundAddr::Path(path.to_path_buf()),
            socket_buffers: None,
            task: Some(task),
            quic: None,
            socket_file: SocketFile::of(path),
        })
    }
}
