//! What machine and build a benchmark ran on: CPU model, cores, kernel, git commit, rustc
//! version and build profile, recorded into the report so numbers can be compared honestly.
//!
//! Every probe is best-effort: a missing file or tool gives `None`, never an error. This module
//! must not measure anything or influence the run.

use std::collections::BTreeMap;
use std::process::Command;

use serde::Serialize;

/// The machine and build a benchmark ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    /// `model name` from `/proc/cpuinfo`, if readable.
    pub cpu_model: Option<String>,
    /// The machine's online CPUs (whatever this process's affinity allows).
    pub cores: usize,
    /// Kernel release from `/proc/sys/kernel/osrelease`, if readable.
    pub kernel: Option<String>,
    /// The commit the binary was built from (recorded at build time), else `git rev-parse
    /// HEAD` in the current directory.
    pub git_sha: Option<String>,
    /// `rustc --version`, if rustc is on the PATH (the toolchain now, not necessarily the one
    /// that built this binary).
    pub rustc: Option<String>,
    /// `"release"` or `"debug"` (whether debug assertions were compiled in).
    pub build_profile: &'static str,
    /// Operating system and architecture this binary was built for.
    pub target: String,
    /// agentwire's version and the locked versions of the crates that decide the numbers
    /// (quinn, rustls, h2, tokio, tungstenite …).
    pub crate_versions: BTreeMap<String, String>,
    /// Socket buffers, UDP offloads and TCP congestion control of this machine.
    pub network: NetworkEnvironment,
}

/// What the machine's network stack offers the transports.
#[derive(Debug, Clone, Serialize)]
pub struct NetworkEnvironment {
    /// `net.core.rmem_max`, bytes.
    pub rmem_max: Option<u64>,
    /// `net.core.wmem_max`, bytes.
    pub wmem_max: Option<u64>,
    /// The UDP buffers a QUIC socket with agentwire's default settings actually got (send,
    /// receive; bytes as read back from the kernel).
    pub quic_udp_buffers: Option<(usize, usize)>,
    /// Segments per UDP GSO send quinn detected on a loopback socket (1 = no GSO).
    pub udp_gso_segments: Option<usize>,
    /// Segments per UDP GRO receive quinn detected on a loopback socket (1 = no GRO).
    pub udp_gro_segments: Option<usize>,
    /// `net.ipv4.tcp_congestion_control`.
    pub tcp_congestion_control: Option<String>,
}

/// What a QUIC socket got from this machine, probed by the caller (this crate knows no QUIC
/// stack): the buffers granted and the UDP offloads detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpProbe {
    /// Send and receive buffer sizes as read back from the kernel, bytes.
    pub buffers: (usize, usize),
    /// Segments per GSO send (1 = no GSO).
    pub gso_segments: usize,
    /// Segments per GRO receive (1 = no GRO).
    pub gro_segments: usize,
}

impl NetworkEnvironment {
    /// Probes this machine's sysctls (best effort; nothing that fails is an error), with the
    /// caller's UDP socket probe.
    ///
    /// ```
    /// use agentwire_measure::environment::{NetworkEnvironment, UdpProbe};
    /// let probe = UdpProbe { buffers: (212_992, 212_992), gso_segments: 64, gro_segments: 64 };
    /// let net = NetworkEnvironment::detect(Some(probe));
    /// assert_eq!(net.quic_udp_buffers, Some((212_992, 212_992)));
    /// assert_eq!(NetworkEnvironment::detect(None).udp_gso_segments, None);
    /// ```
    pub fn detect(udp: Option<UdpProbe>) -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        };
        NetworkEnvironment {
            rmem_max: read("/proc/sys/net/core/rmem_max").and_then(|s| s.parse().ok()),
            wmem_max: read("/proc/sys/net/core/wmem_max").and_then(|s| s.parse().ok()),
            quic_udp_buffers: udp.map(|u| u.buffers),
            udp_gso_segments: udp.map(|u| u.gso_segments),
            udp_gro_segments: udp.map(|u| u.gro_segments),
            tcp_congestion_control: read("/proc/sys/net/ipv4/tcp_congestion_control"),
        }
    }
}

/// The crate versions recorded at build time, plus agentwire's own.
fn crate_versions() -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = env!("AGENTWIRE_BUILD_CRATE_VERSIONS")
        .split(';')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    map.insert("agentwire".into(), env!("CARGO_PKG_VERSION").into());
    map
}

/// `"debug"` when this crate was compiled with debug assertions, else `"release"`.
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// Counts the CPUs in a kernel CPU list such as `/sys/devices/system/cpu/online` (`0-1`,
/// `0,2-5`). The machine's CPUs, whatever this process's affinity (`taskset`) allows.
///
/// ```
/// use agentwire_measure::environment::count_cpus;
/// assert_eq!(count_cpus("0-1\n"), Some(2));
/// assert_eq!(count_cpus("0,2-5"), Some(5));
/// assert_eq!(count_cpus("x"), None);
/// ```
pub fn count_cpus(list: &str) -> Option<usize> {
    let mut n = 0;
    for part in list.trim().split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<usize>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

impl Environment {
    /// Probes the current machine; `udp` is what a QUIC socket got here, probed by the caller
    /// (`None` if it could not be probed).
    pub fn detect(udp: Option<UdpProbe>) -> Self {
        Environment {
            cpu_model: cpu_model(),
            cores: std::fs::read_to_string("/sys/devices/system/cpu/online")
                .ok()
                .and_then(|s| count_cpus(&s))
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty()),
            git_sha: Some(env!("AGENTWIRE_BUILD_GIT_SHA"))
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .or_else(|| command_line_output("git", &["rev-parse", "HEAD"])),
            rustc: command_line_output("rustc", &["--version"]),
            build_profile: build_profile(),
            target: format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
            crate_versions: crate_versions(),
            network: NetworkEnvironment::detect(udp),
        }
    }
}

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    parse_cpu_model(&text)
}

/// The first `model name` value in `/proc/cpuinfo` text.
fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name")
            .then(|| value.trim().to_owned())
            .filter(|v| !v.is_empty())
    })
}

/// First line of a command's stdout when it exits successfully.
fn command_line_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout)
        .ok()?
        .lines()
        .next()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_model_is_parsed() {
        let text = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Example CPU @ 2.0GHz\n\nprocessor\t: 1\nmodel name\t: Example CPU @ 2.0GHz\n";
        assert_eq!(
            parse_cpu_model(text).as_deref(),
            Some("Example CPU @ 2.0GHz")
        );
        assert_eq!(parse_cpu_model("processor : 0\n"), None);
    }

    #[test]
    fn detect_does_not_fail() {
        let env = Environment::detect(None);
        assert!(env.cores >= 1);
        assert!(env.build_profile == "debug" || env.build_profile == "release");
        // The versions come from this workspace's Cargo.lock.
        assert!(
            env.crate_versions.contains_key("quinn"),
            "{:?}",
            env.crate_versions
        );
        assert!(env.crate_versions.contains_key("rustls"));
        assert_eq!(env.crate_versions["agentwire"], env!("CARGO_PKG_VERSION"));
        // No UDP probe given, none recorded.
        assert_eq!(env.network.udp_gso_segments, None);
        assert_eq!(env.network.quic_udp_buffers, None);
    }
}
