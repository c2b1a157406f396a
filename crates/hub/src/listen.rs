//! The hub's listeners: one per `--listen` URL, each accepting connections of its transport
//! and handing them to the hub's transport-independent session logic.
//!
//! This module owns the accept loops: it makes the transport's [`Listen`] for each URL and
//! serves every connection it sets up. It must not route or interpret messages, nor know a
//! transport's insides (those are `transport::listen` and `transport::quic`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tokio::task::JoinHandle;

use super::Hub;
use crate::metrics::outcome;
use agentwire_tls::HubIdentity;
use agentwire_transport::listen::Listen;
use agentwire_transport::settings::SocketBuffers;
use agentwire_transport::stream_listen::{TcpListen, UnixListen};
use agentwire_transport::url::{HubEndpoint, HubUrl};
use agentwire_transport::{ConnectError, TransportError, TransportKind};

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
                ConnectError::Config(format!("{url} needs a certificate (--cert-dir)"))
            })
        };
        match (&url.endpoint, url.transport) {
            (HubEndpoint::Net { .. }, TransportKind::Quic) => {
                let addr = url
                    .resolve()
                    .await
                    .map_err(|e| ConnectError::Config(agentwire_transport::error_chain(&e)))?;
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
            (HubEndpoint::Path(path), TransportKind::Unix) => {
                let listen = UnixListen::bind(path, self.inner.config.unix_socket_mode).await?;
                let task = self.spawn_listener(listen);
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
            (HubEndpoint::Net { .. }, TransportKind::Http2 | TransportKind::WebSocket) => {
                let tls = if url.tls {
                    Some(
                        agentwire_tls::server_config_for_agents(
                            need_identity()?,
                            &[
                                agentwire_transport::h2::ALPN_H2,
                                agentwire_transport::ws::ALPN_HTTP11,
                            ],
                            self.inner.config.client_ca.as_ref(),
                        )
                        .map_err(|e| ConnectError::Config(e.to_string()))?,
                    )
                } else {
                    None
                };
                let addr = url
                    .resolve()
                    .await
                    .map_err(|e| ConnectError::Config(agentwire_transport::error_chain(&e)))?;
                let config = &self.inner.config;
                let (listen, local) = TcpListen::bind(
                    addr,
                    tls,
                    config.handshake_timeout,
                    config.websocket.clone(),
                    config.accept,
                )
                .await?;
                let task = self.spawn_listener(listen);
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
            (_, TransportKind::WebTransport) => Err(ConnectError::Config(format!(
                "{url}: WebTransport sessions come in on a quic:// listener of a hub with \
                 WebTransport on (`hub --webtransport`), not on a listener of their own"
            ))
            .into()),
            _ => {
                Err(ConnectError::Config(format!("{url}: this transport cannot listen yet")).into())
            }
        }
    }

    /// Accepts connections from `listen` until it closes, each set up and then served on a
    /// task of its own.
    pub(super) fn spawn_listener<L: Listen>(&self, mut listen: L) -> JoinHandle<()> {
        self.start_timer();
        let hub = self.clone();
        tokio::spawn(async move {
            while let Some(setup) = listen.accept().await {
                let hub = hub.clone();
                tokio::spawn(async move {
                    match setup.await {
                        Ok(accepted) => {
                            if accepted.zero_rtt {
                                hub.metrics().zero_rtt(true);
                            }
                            hub.serve_gated(
                                accepted.sender,
                                accepted.receiver,
                                accepted.certificate,
                                accepted.hello_gate,
                            )
                            .await
                        }
                        Err(failed) => {
                            tracing::debug!(
                                stage = failed.stage,
                                "connection not set up: {}",
                                failed.error
                            );
                            hub.metrics().handshake(failed.stage, outcome::FAILED);
                        }
                    }
                });
            }
        })
    }
}
