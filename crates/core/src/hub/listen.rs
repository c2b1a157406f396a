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
    socket_file: Option<PathBuf>,
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
        if let Some(path) = &self.socket_file {
            let _ = std::fs::remove_file(path);
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
            _ => Err(TransportError::Connect(format!(
                "{url}: this transport cannot listen yet"
            ))),
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
            socket_file: Some(path.to_path_buf()),
        })
    }
}
