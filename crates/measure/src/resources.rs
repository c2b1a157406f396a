//! CPU time and peak memory of processes and threads, read from Linux's `/proc`.
//!
//! The bench runs the hub as its own process so that hub and agent side can be measured
//! apart: CPU seconds come from `utime + stime` in `/proc/<pid>/stat` (and per thread from
//! `/proc/<pid>/task/<tid>/stat`, to take the emulator's threads out of the agent side), peak
//! RSS from `VmHWM` in `/proc/<pid>/status`, reset between runs by writing `5` to
//! `/proc/<pid>/clear_refs`.
//!
//! Every probe is best-effort and returns `None` where `/proc` is missing or unreadable; the
//! parsers are pure functions tested with known inputs. This module must not start or stop
//! anything.

use std::path::Path;

/// Clock ticks per second of the `utime`/`stime` fields. Linux fixes this user-visible value
/// (`USER_HZ`) at 100 on every architecture agentwire builds for.
pub const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system) from the contents of a `/proc/.../stat` file.
///
/// The second field (the command name) may contain spaces and parentheses, so fields are
/// counted from the last `)`.
///
/// ```
/// use agentwire_measure::resources::parse_stat_cpu_seconds;
/// let stat = "4242 (agentwire hub) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
/// assert_eq!(parse_stat_cpu_seconds(stat), Some(3.0));
/// assert_eq!(parse_stat_cpu_seconds("garbage"), None);
/// ```
pub fn parse_stat_cpu_seconds(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state(3) ppid(4) pgrp(5) session(6) tty_nr(7) tpgid(8) flags(9)
    // minflt(10) cminflt(11) majflt(12) cmajflt(13) utime(14) stime(15).
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// Peak resident set size in bytes (`VmHWM`) from the contents of `/proc/<pid>/status`.
///
/// ```
/// use agentwire_measure::resources::parse_status_peak_rss;
/// let status = "Name:\tagentwire\nVmPeak:\t  900000 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 1000 kB\n";
/// assert_eq!(parse_status_peak_rss(status), Some(12345 * 1024));
/// assert_eq!(parse_status_peak_rss("Name:\tx\n"), None);
/// ```
pub fn parse_status_peak_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// CPU seconds used so far by process `pid` (all its threads, also those that ended). Read
/// from the process's CPU-time clock (`clock_getcpuclockid`, nanoseconds) where the kernel
/// allows it, else from `/proc/PID/stat` (clock ticks, usually 10 ms).
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let precise = i32::try_from(pid).ok().and_then(|p| {
        let clock = nix::time::clock_getcpuclockid(nix::unistd::Pid::from_raw(p)).ok()?;
        let t = nix::time::clock_gettime(clock).ok()?;
        Some(t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
    });
    precise.or_else(|| read(&format!("/proc/{pid}/stat")).and_then(|s| parse_stat_cpu_seconds(&s)))
}

/// CPU seconds used so far by this process.
pub fn self_cpu_seconds() -> Option<f64> {
    process_cpu_seconds(std::process::id())
}

/// Peak RSS of process `pid` since it started or since [`reset_peak_rss`], bytes.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    read(&format!("/proc/{pid}/status")).and_then(|s| parse_status_peak_rss(&s))
}

/// Resets the peak RSS of process `pid` (one of ours) to its current RSS. Returns whether
/// the kernel accepted it.
pub fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// CPU seconds used so far by this process's threads whose name starts with `prefix` (for
/// example the emulator's `netsim-nfq` threads). Threads that ended are not counted.
pub fn self_threads_cpu_seconds(prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut total = 0.0;
    for task in tasks.flatten() {
        let dir = task.path();
        let named = read_path(&dir.join("comm")).is_some_and(|c| c.trim().starts_with(prefix));
        if named {
            total += read_path(&dir.join("stat"))
                .and_then(|s| parse_stat_cpu_seconds(&s))
                .unwrap_or(0.0);
        }
    }
    total
}

fn read(path: &str) -> Option<String> {
    read_path(Path::new(path))
}

fn read_path(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Datagrams the kernel dropped because a UDP socket's receive buffer was full
/// (`RcvbufErrors`), from the contents of `/proc/net/snmp` (the `Udp:` header and value lines)
/// or `/proc/net/snmp6` (`Udp6RcvbufErrors`).
///
/// ```
/// use agentwire_measure::resources::parse_udp_rcvbuf_errors;
/// let snmp = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
///             Udp: 1895999 3 6058 1800000 6058 0\n";
/// assert_eq!(parse_udp_rcvbuf_errors(snmp), Some(6058));
/// assert_eq!(parse_udp_rcvbuf_errors("Udp6RcvbufErrors                  17\n"), Some(17));
/// assert_eq!(parse_udp_rcvbuf_errors("garbage"), None);
/// ```
pub fn parse_udp_rcvbuf_errors(text: &str) -> Option<u64> {
    if let Some(line) = text.lines().find(|l| l.starts_with("Udp6RcvbufErrors")) {
        return line.split_whitespace().nth(1)?.parse().ok();
    }
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let header = udp.next()?;
    let values = udp.next()?;
    let column = header
        .split_whitespace()
        .position(|name| name == "RcvbufErrors")?;
    values.split_whitespace().nth(column)?.parse().ok()
}

/// UDP receive-buffer drops counted so far in this network namespace, IPv4 and IPv6.
pub fn udp_rcvbuf_errors() -> Option<u64> {
    let v4 = read("/proc/net/snmp").and_then(|t| parse_udp_rcvbuf_errors(&t));
    let v6 = read("/proc/net/snmp6").and_then(|t| parse_udp_rcvbuf_errors(&t));
    match (v4, v6) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_parentheses_in_the_name() {
        let stat = "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 1234 766 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat_cpu_seconds(stat), Some(20.0));
        assert_eq!(parse_stat_cpu_seconds("7 (x) R 1 2"), None);
        assert_eq!(
            parse_stat_cpu_seconds("7 (x) R 1 7 7 0 -1 0 0 0 0 0 x 1"),
            None
        );
    }

    #[test]
    fn this_process_is_measurable() {
        // Burn a little CPU so the counter is not zero on a coarse clock.
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert!(x != 1);
        assert!(self_cpu_seconds().is_some_and(|s| s > 0.0));
        assert!(peak_rss_bytes(std::process::id()).is_some_and(|b| b > 1024 * 1024));
        assert_eq!(self_threads_cpu_seconds("no-such-thread-name"), 0.0);
    }
}
