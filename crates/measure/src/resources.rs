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
    parse_status_kib(status, "VmHWM:")
}

/// Current resident set size in bytes (`VmRSS`) from the contents of `/proc/<pid>/status`.
///
/// ```
/// use agentwire_measure::resources::parse_status_rss;
/// let status = "Name:\tagentwire\nVmHWM:\t   12345 kB\nVmRSS:\t 1000 kB\n";
/// assert_eq!(parse_status_rss(status), Some(1000 * 1024));
/// ```
pub fn parse_status_rss(status: &str) -> Option<u64> {
    parse_status_kib(status, "VmRSS:")
}

/// The value of the `/proc/<pid>/status` line starting with `key`, a number of KiB, in bytes.
fn parse_status_kib(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line
        .trim_start_matches(key)
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

/// Current RSS of process `pid`, bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    read(&format!("/proc/{pid}/status")).and_then(|s| parse_status_rss(&s))
}

/// Bytes queued in the kernel for process `pid`'s TCP and UDP sockets (IPv4 and IPv6): for
/// TCP, data sent and not yet acknowledged or not yet sent, plus data received and not yet
/// read; for UDP, the memory of datagrams waiting in the send and receive buffers. This is
/// memory a process's traffic costs outside its RSS: a TCP server's backlog of unread and
/// unacknowledged data sits here, where a QUIC server holds the same in its own heap. Read
/// from `/proc/<pid>/fd` (the socket inodes) and `/proc/<pid>/net/{tcp,tcp6,udp,udp6}` (the
/// process's network namespace); Unix sockets are not counted. `None` when `/proc` cannot be
/// read.
pub fn socket_queue_bytes(pid: u32) -> Option<u64> {
    socket_queue_bytes_in(pid, &NetTable::ALL)
}

/// One of the kernel's socket tables under `/proc/<pid>/net/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetTable {
    /// `tcp`: TCP over IPv4.
    Tcp,
    /// `tcp6`: TCP over IPv6.
    Tcp6,
    /// `udp`: UDP over IPv4.
    Udp,
    /// `udp6`: UDP over IPv6.
    Udp6,
}

impl NetTable {
    /// All four.
    pub const ALL: [NetTable; 4] = [NetTable::Tcp, NetTable::Tcp6, NetTable::Udp, NetTable::Udp6];

    /// The file's name.
    ///
    /// ```
    /// use agentwire_measure::resources::NetTable;
    /// assert_eq!(NetTable::Udp6.file_name(), "udp6");
    /// ```
    pub fn file_name(self) -> &'static str {
        match self {
            NetTable::Tcp => "tcp",
            NetTable::Tcp6 => "tcp6",
            NetTable::Udp => "udp",
            NetTable::Udp6 => "udp6",
        }
    }
}

/// As [`socket_queue_bytes`], from the named tables only. Reading a TCP table walks the
/// kernel's whole table of established connections, however few the process has: about
/// 4.5 ms for each of `tcp` and `tcp6` on the 24 GiB test machine, every sample; a sampler
/// that knows which protocol and address family the process serves should read only those.
pub fn socket_queue_bytes_in(pid: u32, tables: &[NetTable]) -> Option<u64> {
    let inodes = socket_inodes(pid)?;
    let mut total = 0;
    for table in tables {
        if let Some(text) = read(&format!("/proc/{pid}/net/{}", table.file_name())) {
            total += parse_net_queues(&text, &inodes);
        }
    }
    Some(total)
}

/// The inodes of process `pid`'s sockets, from the links in `/proc/<pid>/fd`.
fn socket_inodes(pid: u32) -> Option<std::collections::HashSet<u64>> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        fds.flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter_map(|target| {
                let target = target.to_str()?;
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .parse()
                    .ok()
            })
            .collect(),
    )
}

/// The sum of `tx_queue` and `rx_queue` (hexadecimal, the fifth column) over the rows of a
/// `/proc/net/{tcp,tcp6,udp,udp6}` table whose inode (the tenth column) is in `inodes`.
///
/// ```
/// use agentwire_measure::resources::parse_net_queues;
/// let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
///  0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0 100 0 0 10 0\n   \
///  1: 0100007F:1F90 0100007F:9C40 01 00000100:00001000 00:00000000 00000000     0        0 4243 1 0 20 4 30 10 -1\n   \
///  2: 0100007F:1F91 0100007F:9C41 01 00000010:00000010 00:00000000 00000000     0        0 9999 1 0 20 4 30 10 -1\n";
/// let ours = [4242, 4243].into_iter().collect();
/// assert_eq!(parse_net_queues(table, &ours), 0x100 + 0x1000);
/// ```
pub fn parse_net_queues(text: &str, inodes: &std::collections::HashSet<u64>) -> u64 {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let inode: u64 = fields.get(9)?.parse().ok()?;
            if !inodes.contains(&inode) {
                return None;
            }
            let (tx, rx) = fields.get(4)?.split_once(':')?;
            let tx = u64::from_str_radix(tx, 16).ok()?;
            let rx = u64::from_str_radix(rx, 16).ok()?;
            Some(tx + rx)
        })
        .sum()
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

    /// Data written to a loopback TCP connection and not read is counted for this process.
    #[test]
    fn unread_tcp_data_is_counted() {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, _) = listener.accept().unwrap();
        let me = std::process::id();
        let before = socket_queue_bytes(me).unwrap();
        client.write_all(&[7u8; 10_000]).unwrap();
        // Loopback delivers at once; allow the kernel a moment on a busy machine.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut now = socket_queue_bytes(me).unwrap();
        while now < before + 10_000 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            now = socket_queue_bytes(me).unwrap();
        }
        assert!(now >= before + 10_000, "{before} then {now}");
        assert!(rss_bytes(me).is_some_and(|rss| rss > 0));
    }

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
