//! A tmpfs of a given size mounted for one test, unmounted when dropped: a disk that really
//! fills up. Shared by the queue store's fault tests and the CLI's (`#[path]` include).
//! Mounting needs root: without it the caller is told to skip (and says so); as root (as CI
//! runs) a failed mount is an error.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted tmpfs; unmounted on drop.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=`, e.g. `2m`) on `dir`; `None`, after
    /// printing why, when not root.
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if mounted {
            return Some(Tmpfs(dir.to_path_buf()));
        }
        let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        });
        assert!(!root, "running as root, yet a tmpfs could not be mounted");
        eprintln!("skipped: mounting a tmpfs needs root");
        None
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}
