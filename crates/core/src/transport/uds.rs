//! The Unix-domain-socket transport, for agents on the same host as the hub.
//!
//! Frames travel over one `SOCK_STREAM` connection with the [byte-stream mapping](super::stream)
//! and no TLS: access is controlled by the socket file's permissions, 0600 by default. A stale
//! socket file (left by a hub that died) is removed on bind; a live one (another hub answers)
//! is an error, never silently replaced.
//!
//! This module owns socket-file handling and connection set-up; it must not route messages.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tokio::net::{UnixListener, UnixStream};

use super::stream::{split_stream, StreamReceiver, StreamSender};
use super::{TransportError, TransportKind};

/// Default permission bits of the socket file: owner read/write only.
pub const DEFAULT_SOCKET_MODE: u32 = 0o600;

/// Binds a listening socket at `path` with permission bits `mode`.
///
/// If `path` exists and is a socket that nobody answers on, it is removed first. If another
/// process is listening there, or `path` is not a socket, binding fails with a clear error.
pub async fn bind(path: &Path, mode: u32) -> io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket; refusing to replace it",
                    path.display()
                ),
            ));
        }
        match UnixStream::connect(path).await {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("another process is listening on {}", path.display()),
                ))
            }
            Err(_) => {
                tracing::info!(path = %path.display(), "removing stale socket file");
                std::fs::remove_file(path)?;
            }
        }
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(listener)
}

/// Accepts one connection and splits it into frame halves.
pub async fn accept(listener: &UnixListener) -> io::Result<(StreamSender, StreamReceiver)> {
    let (stream, _) = listener.accept().await?;
    Ok(split_stream(stream, TransportKind::Unix, None))
}

/// Connects to a hub's socket at `path`.
pub async fn connect(path: &Path) -> Result<(StreamSender, StreamReceiver), TransportError> {
    let stream = UnixStream::connect(path)
        .await
        .map_err(|e| TransportError::Connect(format!("{}: {e}", path.display())))?;
    Ok(split_stream(stream, TransportKind::Unix, None))
}
