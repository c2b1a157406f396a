//! Network namespaces by name: where their handles live, entering one on the calling thread or
//! on a thread of its own, and the error type of packet mode ([`PacketError`]).
//!
//! This module owns naming and entering namespaces; making and wiring them is `netlink`'s and
//! `packet`'s. It must not create or delete anything.

use std::fs::File;
use std::path::{Path, PathBuf};

use nix::sched::{setns, CloneFlags};

/// Message of [`PacketError::Privileges`]: what to do instead.
pub const PRIVILEGES_HINT: &str = "packet mode needs root or CAP_NET_ADMIN and iptables; use the \
     socket relay mode instead: `agentwire netsim relay ...`";

/// Where `ip netns` keeps its namespace handles.
pub const NETNS_DIR: &str = "/var/run/netns";

/// Errors of the packet-level mode.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PacketError {
    /// The process may not create namespaces or iptables is missing.
    #[error("{PRIVILEGES_HINT} ({reason})")]
    Privileges {
        /// What exactly failed.
        reason: String,
    },
    /// Network namespaces cannot be made here (the bridge stage's only need).
    #[error(
        "the emulated network needs network namespaces: run as root, or where unprivileged \
         user namespaces are enabled (agentwire then makes its own) ({reason})"
    )]
    Namespaces {
        /// What exactly failed.
        reason: String,
    },
    /// An external command (`iptables`, `modprobe`) failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status, or why it could not be started.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// A system call or the NFQUEUE socket failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The impairment cannot be expressed in packet mode (e.g. duplication).
    #[error("not supported in packet mode: {0}")]
    Unsupported(String),
    /// The impairment does not validate.
    #[error(transparent)]
    Config(#[from] crate::Error),
    /// A stage thread failed to start.
    #[error("packet stage thread: {0}")]
    Thread(String),
}
pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> PacketError {
    let context = context.into();
    move |source| PacketError::Io { context, source }
}

/// Path of namespace `name`'s handle, as created by `ip netns add`.
pub fn netns_path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Whether namespace `name` exists (its `ip netns` handle is present).
pub fn namespace_exists(name: &str) -> bool {
    netns_path(name).exists()
}

/// Moves the **calling thread** into network namespace `name` (`setns(2)` with
/// `CLONE_NEWNET`). Other threads are unaffected; sockets created afterwards by this thread live
/// in that namespace.
pub fn enter_netns(name: &str) -> Result<(), PacketError> {
    let path = netns_path(name);
    let file = File::open(&path).map_err(io_err(format!("open {}", path.display())))?;
    setns(&file, CloneFlags::CLONE_NEWNET).map_err(|e| PacketError::Io {
        context: format!("setns({}, CLONE_NEWNET)", path.display()),
        source: std::io::Error::from(e),
    })
}

/// Runs `f` on a thread of its own that has entered namespace `ns` (so the caller's thread
/// stays where it is).
pub(crate) fn in_namespace<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PacketError> {
    let ns = ns.to_string();
    std::thread::Builder::new()
        .name("netsim-setup".into())
        .spawn(move || {
            enter_netns(&ns)?;
            Ok(f())
        })
        .map_err(io_err("spawn a set-up thread"))?
        .join()
        .map_err(|_| PacketError::Thread("a set-up thread panicked".into()))?
}
