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
        .map_err(|e| super::ConnectError::socket(path.display().to_string(), e))?;
    Ok(split_stream(stream, TransportKind::Unix, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn socket_file_mode_stale_and_live() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hub.sock");

        let first = bind(&path, DEFAULT_SOCKET_MODE).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);

        // A live socket is never replaced.
        let err = bind(&path, DEFAULT_SOCKET_MODE).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);

        // Once nobody listens, the file is stale and a new bind takes its place.
        drop(first);
        assert!(path.exists());
        let _second = bind(&path, 0o660).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);

        // A path that is not a socket is refused, and left alone.
        let file = dir.path().join("not-a-socket");
        std::fs::write(&file, b"data").unwrap();
        let err = bind(&file, DEFAULT_SOCKET_MODE).await.unwrap_err();
        assert!(err.to_string().contains("not a socket"), "{err}");
        assert_eq!(std::fs::read(&file).unwrap(), b"data");
    }

    #[tokio::test]
    async fn connect_to_nothing_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.sock");
        match connect(&path).await {
            Err(e @ TransportError::Connect(_)) => {
                assert!(e.to_string().contains("absent.sock"), "{e}")
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("connected to nothing"),
        }
    }
}
