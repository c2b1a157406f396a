//! A network of our own without being root: the process becomes root of a user namespace of
//! its own, with its own mount and network namespaces (as rootless containers do), so that
//! packet mode's namespaces, veths and the [bridge stage](crate::bridge) work for any user
//! where unprivileged user namespaces are enabled.
//!
//! This module owns that one step and the mounts it needs (a private tmpfs where `ip netns`
//! keeps its handles, loopback up in the new network). It must not be called once the process
//! has more than one thread (the kernel refuses), and changes nothing outside the process: its
//! mounts are private, its network is empty but for loopback.

use std::path::Path;

use crate::netns::{PacketError, NETNS_DIR};
use crate::sys;

/// Why the process stays where it is, or what entering failed on.
fn failed(reason: impl std::fmt::Display) -> PacketError {
    PacketError::Namespaces {
        reason: format!("entering a user namespace of our own: {reason}"),
    }
}

/// Whether the process is root of the namespace it is in (then [`enter`] is not needed).
pub fn is_root() -> bool {
    sys::is_root()
}

/// Makes the calling process root of a new user namespace with a new mount and network
/// namespace, mounts a private tmpfs for `ip netns` (over `/run/netns`, or over `/run` where
/// that directory does not exist and cannot be made), and brings loopback up. Everything the
/// process does afterwards (loopback benchmarks included) runs in that network.
///
/// The whole step is tried first in a forked child: where the kernel lets a user namespace be
/// made but refuses what follows (a security module may), the process stays as it was, with
/// its network, instead of ending half inside.
pub fn enter() -> Result<(), PacketError> {
    let threads = sys::thread_count();
    if threads > 1 {
        return Err(failed(format!(
            "the process has {threads} threads already (it must have one)"
        )));
    }
    let works = sys::in_child(|| {
        enter_here().map_err(|e| {
            // The child's only way to say why; the parent's error follows it.
            eprintln!("{e}");
            std::io::Error::other(e)
        })
    })
    .map_err(failed)?;
    if !works {
        return Err(failed(
            "a trial in a child process failed, as above (unprivileged user namespaces may be \
             disabled or restricted here)",
        ));
    }
    enter_here()
}

/// [`enter`]'s steps, in this process.
fn enter_here() -> Result<(), PacketError> {
    sys::unshare_user_mount_net().map_err(failed)?;
    let netns = Path::new(NETNS_DIR);
    let tmpfs = |target: &Path| {
        sys::mount(
            Some("tmpfs"),
            &target.to_string_lossy(),
            Some("tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
        )
        .map_err(|e| failed(format!("mounting a tmpfs on {}: {e}", target.display())))
    };
    if netns.is_dir() {
        tmpfs(netns)?;
    } else if std::fs::create_dir_all(netns).is_err() {
        let parent = netns.parent().unwrap_or(Path::new("/run"));
        tmpfs(parent)?;
        std::fs::create_dir_all(netns)
            .map_err(|e| failed(format!("creating {}: {e}", netns.display())))?;
    }
    sys::set_up("lo").map_err(|e| failed(format!("bringing loopback up: {e}")))?;
    Ok(())
}
