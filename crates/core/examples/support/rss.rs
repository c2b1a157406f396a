//! A process's resident memory from /proc, for the abuse examples (included by `#[path]`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The resident set of process `pid` now, bytes (0 when it cannot be read).
pub fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// The highest RSS of `pid` seen, every `every`, until `stop` is set.
pub fn watch_rss(pid: u32, stop: Arc<AtomicBool>, every: Duration) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::Relaxed) {
            peak = peak.max(rss(pid));
            std::thread::sleep(every);
        }
        peak.max(rss(pid))
    })
}
