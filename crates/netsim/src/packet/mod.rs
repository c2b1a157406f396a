//! Packet-level mode of `agentwire netsim` (Linux only): real kernel packets between two
//! network namespaces, impaired in user space through NFQUEUE.
//!
//! This module owns:
//!
//! * [`Topology`]: two network namespaces (`aw-<pid>-<n>-c`, the *client*, and
//!   `aw-<pid>-<n>-s`, the *server*; `aw-<name>-c`/`-s` with [`Topology::named`]) joined by a
//!   veth pair with [`CLIENT_ADDR`]/30 and [`SERVER_ADDR`]/30 (from the benchmarking range
//!   198.18.0.0/15), MTU 1500, loopback up and every segmentation and receive-coalescing
//!   offload off (made over rtnetlink and `SIOCETHTOOL`, see `netlink`; no `ip` or `ethtool`
//!   binary). Dropping it deletes both namespaces, which
//!   deletes the veth pair and every iptables rule inside them.
//! * [`PacketStage`] (in `nfqueue.rs`): one iptables `INPUT` rule per namespace (on the veth only, all IP
//!   protocols) that sends arriving packets to an NFQUEUE, and one OS thread per direction that
//!   has entered the namespace with `setns(2)`, reads the queue, feeds each packet (with its
//!   length) into a sans-IO [`Link`] and issues the ACCEPT verdict when the packet's departure
//!   time comes, or DROP when the link drops it. Packets arriving at the *server* are the
//!   client→server direction and vice versa.
//!
//! It must not: touch the root namespace's interfaces, routes or firewall (everything it
//! creates lives inside its own namespaces, except the namespace entries themselves), install
//! software, change the calling thread's namespace behind the caller's back (only the stage's
//! own threads and callers of [`enter_netns`] switch), or run without root/`CAP_NET_ADMIN`
//! ([`check_privileges`] says so up front; the socket relay mode is the unprivileged alternative).
//!
//! Limitations:
//!
//! * **No duplication.** An NFQUEUE packet gets exactly one verdict, so a copy cannot be
//!   injected; [`check_impairment`] (and so [`PacketStage::start`]) rejects `duplicate > 0`.
//! * **Timer granularity.** The `nfq` crate exposes no file descriptor to wait on, so each stage
//!   thread polls its non-blocking queue socket and sleeps at most
//!   [`StageOptions::poll_interval`] (default 100 µs) between polls, or less when a departure is
//!   due sooner. Arrival time stamps and departures are therefore late by up to roughly that
//!   interval plus the scheduler's timer slack.
//! * **Offloads.** Where the kernel refuses to switch one off, [`Topology::offloads`] records
//!   it. The queue is bound without `NFQA_CFG_F_GSO`, so the kernel segments GSO packets before
//!   queueing them and the link still sees MTU-sized packets.
//! * The kernel holds every queued packet until its verdict; the queue length limit is
//!   [`StageOptions::queue_max_len`]. Packets beyond it are dropped by the kernel.

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::netlink::{add_namespace, delete_namespace};
use crate::netlink::{add_veth, configure};
pub use crate::netns::{
    enter_netns, namespace_exists, netns_path, PacketError, NETNS_DIR, PRIVILEGES_HINT,
};
pub(crate) use crate::netns::{in_namespace, io_err};

mod nfqueue;
pub use nfqueue::{check_impairment, DirectionStats, PacketStage, StageOptions, StageStats};

/// Address of the client end of the veth pair (prefix length [`PREFIX_LEN`]).
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Address of the server end of the veth pair (prefix length [`PREFIX_LEN`]).
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Prefix length of the veth addresses.
pub const PREFIX_LEN: u8 = 30;
/// MTU of the veth pair.
pub const MTU: u32 = 1500;
/// Name of the veth end inside the client namespace.
pub const CLIENT_DEV: &str = "aw0";
/// Name of the veth end inside the server namespace.
pub const SERVER_DEV: &str = "aw1";
/// Prefix of every namespace this module creates.
pub const NS_PREFIX: &str = "aw-";
/// Longest name accepted by [`Topology::named`].
pub const MAX_NAME_LEN: usize = 32;

/// Runs a command to completion; an error carries the command line and its stderr.
fn run(program: &str, args: &[&str]) -> Result<String, PacketError> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    finish(format!("{program} {}", args.join(" ")), cmd)
}

/// Runs `program args` inside namespace `ns` (the child enters it before `exec`, as `ip netns
/// exec` would, without running `ip`).
fn run_in(ns: &str, program: &str, args: &[&str]) -> Result<String, PacketError> {
    let path = netns_path(ns);
    let file = File::open(&path).map_err(io_err(format!("open {}", path.display())))?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    crate::sys::enter_netns_on_exec(&mut cmd, file);
    finish(format!("(in {ns}) {program} {}", args.join(" ")), cmd)
}

/// Runs `cmd` (shown as `command` in errors) with no input to completion: its standard output,
/// or an error with its status and standard error.
fn finish(command: String, mut cmd: Command) -> Result<String, PacketError> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| PacketError::Command {
            command: command.clone(),
            status: "could not start".into(),
            stderr: e.to_string(),
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(PacketError::Command {
            command,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

const TCP_AVAILABLE_CC: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
const TCP_ALLOWED_CC: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// Makes TCP congestion control `algo` usable in every namespace: loads `tcp_ALGO` if the
/// kernel lacks it and adds it to the host's allowed list. Returns whether it changed the
/// allowed list.
pub fn allow_tcp_congestion_control(algo: &str) -> Result<bool, PacketError> {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|s| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .map_err(io_err(format!("reading {path}")))
    };
    let available = || Ok::<_, PacketError>(read(TCP_AVAILABLE_CC)?.iter().any(|a| a == algo));
    if !available()? {
        // Best effort: the module may be built in under another name, or absent.
        let _ = run("modprobe", &[&format!("tcp_{algo}")]);
        if !available()? {
            return Err(PacketError::Unsupported(format!(
                "TCP congestion control `{algo}` is not available in this kernel (see {TCP_AVAILABLE_CC})"
            )));
        }
    }
    let mut allowed = read(TCP_ALLOWED_CC)?;
    if allowed.iter().any(|a| a == algo) {
        return Ok(false);
    }
    allowed.push(algo.to_owned());
    std::fs::write(TCP_ALLOWED_CC, allowed.join(" ")).map_err(io_err(format!(
        "adding `{algo}` to {TCP_ALLOWED_CC} (root needed)"
    )))?;
    Ok(true)
}

fn command_exists(program: &str, version_arg: &str) -> bool {
    Command::new(program)
        .arg(version_arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Checks that packet mode can run here: `ip` and `iptables` exist and a network namespace can
/// be created (root or `CAP_NET_ADMIN`). The error says to use the socket relay mode instead.
pub fn check_privileges() -> Result<(), PacketError> {
    if !command_exists("iptables", "-V") {
        return Err(PacketError::Privileges {
            reason: "`iptables -V` failed: iptables is not installed or not runnable".into(),
        });
    }
    let n = TOPOLOGY_COUNTER.fetch_add(1, Ordering::Relaxed);
    let probe = format!("{NS_PREFIX}{}-{n}-probe", std::process::id());
    add_namespace(&probe).map_err(|e| PacketError::Privileges {
        reason: e.to_string(),
    })?;
    let rule = run_in(&probe, "iptables", &["-w", "-L", "INPUT", "-n"]);
    let del = delete_namespace(&probe);
    rule.map_err(|e| PacketError::Privileges {
        reason: e.to_string(),
    })?;
    del.map(|_| ())
}

/// Checks that the [bridge stage](crate::bridge) can run here: `ip` runs and a network
/// namespace can be created (as root, or as root of a user namespace of this process's own:
/// [`crate::userns`]). Needs neither iptables nor `ip`.
pub fn check_namespaces() -> Result<(), PacketError> {
    let failed = |reason: String| PacketError::Namespaces { reason };
    let n = TOPOLOGY_COUNTER.fetch_add(1, Ordering::Relaxed);
    let probe = format!("{NS_PREFIX}{}-{n}-probe", std::process::id());
    add_namespace(&probe).map_err(|e| failed(e.to_string()))?;
    delete_namespace(&probe)
}

/// Lists the namespaces known to `ip netns`.
pub fn list_namespaces() -> Result<Vec<String>, PacketError> {
    crate::netlink::namespaces()
}

/// Removes leftover namespaces from crashed runs: every namespace whose name starts with
/// `prefix` (normally [`NS_PREFIX`]) and whose creating process (the pid in
/// `aw-<pid>-<n>-…`) is no longer running. Namespaces of live processes, including this one,
/// are kept, and so are names without a pid (those of [`Topology::named`]). Returns the names
/// removed.
pub fn cleanup_stale(prefix: &str) -> Result<Vec<String>, PacketError> {
    let mut removed = Vec::new();
    for name in list_namespaces()? {
        let Some(rest) = name.strip_prefix(prefix) else {
            continue;
        };
        // Only `aw-<pid>-<n>-…` names carry an owner; named topologies
        // ([`Topology::named`]) have none and are left alone.
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // Another cleanup may have removed it meanwhile: only a namespace still there is an error.
        if let Err(e) = delete_namespace(&name) {
            if namespace_exists(&name) {
                return Err(e);
            }
            continue;
        }
        removed.push(name);
    }
    Ok(removed)
}

/// Whether the veth offloads (TSO/GSO/GRO) could be switched off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offloads {
    /// Every segmentation and receive-coalescing offload is off on every veth end.
    Disabled,
    /// They are left as the kernel set them; why.
    Unchanged(String),
}

/// The offloads a bridged topology switches off, by the kernel's feature names: every kind
/// of segmentation (TSO, GSO, UDP GSO: a sender's batch would cross as one frame over the
/// MTU) and receive coalescing (GRO, LRO).
fn merges_or_splits_packets(feature: &str) -> bool {
    feature.ends_with("segmentation")
        || feature.starts_with("rx-gro")
        || feature == "rx-lro"
        || feature == "tx-gso-list"
        || feature == "rx-udp-gro-forwarding"
}

/// MAC address of [`CLIENT_DEV`] in a bridged topology (locally administered).
pub const CLIENT_MAC: &str = "02:61:77:00:00:01";
/// MAC address of [`SERVER_DEV`] in a bridged topology (locally administered).
pub const SERVER_MAC: &str = "02:61:77:00:00:02";
/// The middle namespace's end of the client's veth pair (bridged topology).
pub const MIDDLE_CLIENT_DEV: &str = "b0";
/// The middle namespace's end of the server's veth pair (bridged topology).
pub const MIDDLE_SERVER_DEV: &str = "b1";

static TOPOLOGY_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Two network namespaces joined by a veth pair, or, for the [bridge
/// stage](crate::bridge), each by a veth pair into a third, middle namespace. See the [module
/// docs](self).
#[derive(Debug)]
pub struct Topology {
    client: String,
    server: String,
    /// The middle namespace of a bridged topology.
    middle: Option<String>,
    offloads: Offloads,
}

/// How the client and server namespaces are joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wiring {
    /// One veth pair between them (the NFQUEUE stage impairs packets as they arrive).
    Direct,
    /// A veth pair from each into a middle namespace, where the [bridge
    /// stage](crate::bridge) forwards frames between the two (no netfilter at all).
    Bridged,
}

impl Topology {
    /// Creates the namespaces and the veth pair. On failure everything created so far is
    /// removed again.
    pub fn new() -> Result<Self, PacketError> {
        Self::with_wiring(Wiring::Direct)
    }

    /// Creates the namespaces joined as `wiring` says, with names of this process
    /// (`aw-<pid>-<n>-c`, `-s`, and `-m` for the middle). On failure everything created so far
    /// is removed again.
    pub fn with_wiring(wiring: Wiring) -> Result<Self, PacketError> {
        let n = TOPOLOGY_COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = format!("{NS_PREFIX}{}-{n}", std::process::id());
        Self::create(&base, wiring)
    }

    /// Adds the namespaces `<base>-c`, `<base>-s` (and `<base>-m` when bridged), then wires
    /// them; whatever exists is removed again on failure (by Drop).
    fn create(base: &str, wiring: Wiring) -> Result<Self, PacketError> {
        let client = format!("{base}-c");
        add_namespace(&client)?;
        // From here on, Drop cleans up whatever exists.
        let mut topo = Topology {
            server: format!("{base}-s"),
            client,
            middle: None,
            offloads: Offloads::Unchanged("not attempted".into()),
        };
        add_namespace(&topo.server)?;
        match wiring {
            Wiring::Direct => topo.setup()?,
            Wiring::Bridged => {
                let middle = format!("{base}-m");
                add_namespace(&middle)?;
                topo.middle = Some(middle);
                topo.setup_bridged()?;
            }
        }
        Ok(topo)
    }

    /// Like [`new`](Self::new) but with stable names `aw-<name>-c` and `aw-<name>-s`, for
    /// topologies users address by name (`agentwire netsim up --name NAME`). `name` must be
    /// 1–[`MAX_NAME_LEN`] ASCII letters, digits, `_` or `-` and must not start with a digit
    /// (so [`cleanup_stale`] never mistakes it for a pid). Fails if either namespace exists.
    pub fn named(name: &str) -> Result<Self, PacketError> {
        Self::named_with(name, Wiring::Direct)
    }

    /// [`named`](Self::named), joined as `wiring` says (the middle namespace of a bridged
    /// topology is `aw-<name>-m`).
    pub fn named_with(name: &str, wiring: Wiring) -> Result<Self, PacketError> {
        let valid = !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(PacketError::Unsupported(format!(
                "topology name `{name}`: use 1-{MAX_NAME_LEN} ASCII letters, digits, `_` or `-`, \
                 not starting with a digit"
            )));
        }
        let base = format!("{NS_PREFIX}{name}");
        for suffix in ["c", "s", "m"] {
            let ns = format!("{base}-{suffix}");
            if namespace_exists(&ns) {
                return Err(PacketError::Unsupported(format!(
                    "namespace `{ns}` already exists (another topology named `{name}` is running, \
                     or a crashed one left it: `ip netns del {ns}`)"
                )));
            }
        }
        Self::create(&base, wiring)
    }

    fn setup(&mut self) -> Result<(), PacketError> {
        let (c, s) = (self.client.clone(), self.server.clone());
        add_veth(&c, CLIENT_DEV, None, MTU, SERVER_DEV, &s)?;
        for (ns, dev, addr) in [(&c, CLIENT_DEV, CLIENT_ADDR), (&s, SERVER_DEV, SERVER_ADDR)] {
            configure(ns, dev, Some((addr, PREFIX_LEN)), &[])?;
        }
        self.offloads = self.switch_offloads_off(&[(&c, &[CLIENT_DEV]), (&s, &[SERVER_DEV])])?;
        Ok(())
    }

    /// Switches every offload that merges or splits packets off on `devs` (per namespace).
    fn switch_offloads_off(
        &self,
        devs: &[(&String, &[&'static str])],
    ) -> Result<Offloads, PacketError> {
        let mut still_on = Vec::new();
        for (ns, devs) in devs {
            for dev in devs.iter().copied() {
                let on = in_namespace(ns, move || {
                    crate::sys::switch_features_off(dev, merges_or_splits_packets)
                })?
                .map_err(io_err(format!("switching offloads off on {dev} in {ns}")))?;
                still_on.extend(on.into_iter().map(|f| format!("{dev}: {f}")));
            }
        }
        Ok(if still_on.is_empty() {
            Offloads::Disabled
        } else {
            Offloads::Unchanged(format!("still on: {}", still_on.join(", ")))
        })
    }

    /// Wires a bridged topology: `aw0` (client) to `b0` and `aw1` (server) to `b1` in the
    /// middle namespace, fixed MAC addresses and permanent neighbour entries (so no ARP has to
    /// cross the stage before the first packet), every offload that merges or splits packets
    /// off on all four ends.
    fn setup_bridged(&mut self) -> Result<(), PacketError> {
        let (c, s) = (self.client.clone(), self.server.clone());
        let m = self.middle.clone().unwrap_or_default();
        for (ns, dev, mac, mid_dev) in [
            (&c, CLIENT_DEV, CLIENT_MAC, MIDDLE_CLIENT_DEV),
            (&s, SERVER_DEV, SERVER_MAC, MIDDLE_SERVER_DEV),
        ] {
            add_veth(ns, dev, Some(mac), MTU, mid_dev, &m)?;
        }
        for (ns, dev, addr, peer, peer_mac) in [
            (&c, CLIENT_DEV, CLIENT_ADDR, SERVER_ADDR, SERVER_MAC),
            (&s, SERVER_DEV, SERVER_ADDR, CLIENT_ADDR, CLIENT_MAC),
        ] {
            configure(ns, dev, Some((addr, PREFIX_LEN)), &[(peer, peer_mac)])?;
        }
        for dev in [MIDDLE_CLIENT_DEV, MIDDLE_SERVER_DEV] {
            configure(&m, dev, None, &[])?;
        }
        self.offloads = self.switch_offloads_off(&[
            (&c, &[CLIENT_DEV]),
            (&s, &[SERVER_DEV]),
            (&m, &[MIDDLE_CLIENT_DEV, MIDDLE_SERVER_DEV]),
        ])?;
        Ok(())
    }

    /// Name of the middle namespace of a bridged topology.
    pub fn middle_ns(&self) -> Option<&str> {
        self.middle.as_deref()
    }

    /// How the client and server namespaces are joined.
    pub fn wiring(&self) -> Wiring {
        if self.middle.is_some() {
            Wiring::Bridged
        } else {
            Wiring::Direct
        }
    }

    /// Name of the client namespace (holds [`CLIENT_DEV`] with [`CLIENT_ADDR`]).
    pub fn client_ns(&self) -> &str {
        &self.client
    }

    /// Name of the server namespace (holds [`SERVER_DEV`] with [`SERVER_ADDR`]).
    pub fn server_ns(&self) -> &str {
        &self.server
    }

    /// Whether the veth offloads could be switched off.
    pub fn offloads(&self) -> &Offloads {
        &self.offloads
    }

    fn check_ns(&self, ns: &str) -> Result<(), PacketError> {
        if ns != self.client && ns != self.server {
            return Err(PacketError::Unsupported(format!(
                "namespace `{ns}` is not part of this topology ({} / {})",
                self.client, self.server
            )));
        }
        Ok(())
    }

    /// The TCP congestion control in effect in namespace `ns` (one of this topology's), read
    /// from `/proc/sys/net/ipv4/tcp_congestion_control` inside it.
    pub fn tcp_congestion_control(&self, ns: &str) -> Result<String, PacketError> {
        self.check_ns(ns)?;
        // /proc/sys/net is the namespace of the thread that opens it.
        let out = in_namespace(ns, || {
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        })?
        .map_err(io_err(format!(
            "reading the TCP congestion control in {ns}"
        )))?;
        Ok(out.trim().to_string())
    }

    /// Sets the TCP congestion control of namespace `ns` (one of this topology's) with
    /// `sysctl -w net.ipv4.tcp_congestion_control=ALGO` inside it.
    ///
    /// A namespace other than the host's may only pick an algorithm the host allows
    /// (`net.ipv4.tcp_allowed_congestion_control`); this call first makes it allowed (and,
    /// when the kernel does not have it yet, loads module `tcp_ALGO`), as root can. Read
    /// [`tcp_congestion_control`](Self::tcp_congestion_control) to see which one is in effect.
    pub fn set_tcp_congestion_control(&self, ns: &str, algo: &str) -> Result<(), PacketError> {
        self.check_ns(ns)?;
        if algo.is_empty() || !algo.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(PacketError::Unsupported(format!(
                "congestion control `{algo}` is not a valid name"
            )));
        }
        allow_tcp_congestion_control(algo)?;
        let value = algo.to_string();
        in_namespace(ns, move || {
            std::fs::write("/proc/sys/net/ipv4/tcp_congestion_control", value)
        })?
        .map_err(io_err(format!(
            "setting TCP congestion control {algo} in {ns}"
        )))
    }

    /// Runs `program args` inside namespace `ns` (one of [`client_ns`](Self::client_ns) and
    /// [`server_ns`](Self::server_ns)), inheriting stdio: the child enters the namespace before
    /// `exec`, as `ip netns exec` would.
    pub fn spawn_in<I, S>(&self, ns: &str, program: &str, args: I) -> Result<Child, PacketError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.check_ns(ns)?;
        let path = netns_path(ns);
        let file = File::open(&path).map_err(io_err(format!("open {}", path.display())))?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        crate::sys::enter_netns_on_exec(&mut cmd, file);
        cmd.spawn()
            .map_err(io_err(format!("spawn `{program}` in {ns}")))
    }

    /// Deletes both namespaces now, reporting errors (dropping does the same, silently).
    pub fn remove(mut self) -> Result<(), PacketError> {
        self.remove_namespaces()
    }

    fn remove_namespaces(&mut self) -> Result<(), PacketError> {
        let mut first_err = None;
        let mut middle = self.middle.take().unwrap_or_default();
        for ns in [&mut self.client, &mut self.server, &mut middle] {
            if ns.is_empty() {
                continue;
            }
            if namespace_exists(ns) {
                if let Err(e) = delete_namespace(ns) {
                    first_err.get_or_insert(e);
                }
            }
            ns.clear();
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let _ = self.remove_namespaces();
    }
}
