//! The system calls of the packet stages that no well-kept crate wraps for us: AF_PACKET
//! sockets bound to one interface, `ppoll` with a sub-millisecond timeout, interface flags and
//! offload features (`SIOCETHTOOL`, so that no `ethtool` binary is needed), and entering a user
//! namespace of our own.
//!
//! This module owns the crate's only `unsafe` code; every function returns an
//! [`std::io::Error`] instead of panicking. It must not decide anything: callers choose which
//! interface, which features and when.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The index of interface `name` in the calling thread's network namespace.
pub fn interface_index(name: &str) -> io::Result<u32> {
    let c = CString::new(name).map_err(|_| io::Error::other("interface name with a NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(index)
    }
}

/// A raw AF_PACKET socket bound to one interface: it reads the whole Ethernet frames the
/// interface receives (not those it sends) and sends whole frames out of it. Non-blocking.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

const ETH_P_ALL_BE: u16 = (libc::ETH_P_ALL as u16).to_be();
/// `PACKET_IGNORE_OUTGOING` (Linux 4.20): frames the interface sends are not read back.
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `PACKET_VNET_HDR`: frames are read and sent after a [`VNET_HDR_LEN`]-byte virtio_net_hdr.
const PACKET_VNET_HDR: libc::c_int = 15;
/// `PACKET_STATISTICS`: frames received and dropped since the last read.
const PACKET_STATISTICS: libc::c_int = 6;
/// Bytes of the virtio_net_hdr before each frame ([`PacketSocket::recv`] and
/// [`PacketSocket::send`] include it).
pub const VNET_HDR_LEN: usize = 10;
/// Offset of `gso_type` in the virtio_net_hdr (0: not a GSO frame).
pub const VNET_GSO_TYPE: usize = 1;

impl PacketSocket {
    /// Opens a socket on interface `index` (of the calling thread's namespace) with a receive
    /// buffer of `rcvbuf` bytes (`SO_RCVBUFFORCE` as root of the namespace, else as much as
    /// `SO_RCVBUF` grants).
    pub fn bind(index: u32, rcvbuf: usize) -> io::Result<Self> {
        // Protocol 0 first: the socket receives nothing until it is bound to the interface,
        // so no frame of another interface slips in between.
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let fd = check(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        })?;
        // SAFETY: `fd` is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let one: libc::c_int = 1;
        setsockopt(&fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &one)?;
        // Every frame read comes with a virtio_net_hdr, and every frame sent goes with the
        // same header: a frame whose checksum the sender left to "hardware" (veth's
        // CHECKSUM_PARTIAL) keeps that state across the bridge instead of arriving with a
        // half-done checksum.
        setsockopt(&fd, libc::SOL_PACKET, PACKET_VNET_HDR, &one)?;
        let size = libc::c_int::try_from(rcvbuf).unwrap_or(libc::c_int::MAX);
        if setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &size).is_err() {
            setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &size)?;
        }
        // SAFETY: an all-zero sockaddr_ll is valid; the fields that matter are set below.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ETH_P_ALL_BE;
        addr.sll_ifindex = i32::try_from(index).map_err(io::Error::other)?;
        // SAFETY: `addr` is a sockaddr_ll of the size passed.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                std::ptr::from_ref(&addr).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(PacketSocket { fd })
    }

    /// Reads one frame, after its virtio_net_hdr, into `buf`: `Ok(Some(n))` with the length
    /// of both (which may exceed `buf`: then only the start was copied), `Ok(None)` when none
    /// is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            // SAFETY: `buf` is valid for `buf.len()` bytes of writes.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_TRUNC,
                )
            };
            if n >= 0 {
                return Ok(Some(n as usize));
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(None),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        }
    }

    /// Frames the kernel dropped for this socket (its buffer full) since the last call.
    pub fn take_drops(&self) -> io::Result<u64> {
        // struct tpacket_stats { unsigned int tp_packets, tp_drops; }
        let mut stats = [0u32; 2];
        let mut len = std::mem::size_of_val(&stats) as libc::socklen_t;
        // SAFETY: `stats` is writable for `len` bytes, and `len` for its own size.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                stats.as_mut_ptr().cast(),
                &mut len,
            )
        })?;
        Ok(u64::from(stats[1]))
    }

    /// Sends one whole frame, after its virtio_net_hdr, out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        loop {
            // SAFETY: `frame` is valid for `frame.len()` bytes of reads.
            let n =
                unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Waits until a frame can be read, at most `timeout` (with the precision of `ppoll`, not
    /// of milliseconds). Returns whether one can.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Ok(n > 0)
    }
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live T of the size passed.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            std::ptr::from_ref(value).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// `struct ifreq` with the union as a pointer (`ifr_data`) or flags (`ifr_flags`).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _rest: [u8; 16],
}

impl IfReq {
    fn new(name: &str) -> io::Result<Self> {
        let bytes = name.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(io::Error::other(format!("bad interface name {name:?}")));
        }
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: std::ptr::null_mut(),
            _rest: [0; 16],
        };
        req.name[..bytes.len()].copy_from_slice(bytes);
        Ok(req)
    }
}

/// A datagram socket for interface ioctls in the calling thread's namespace.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let fd =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `struct ifreq` with the union as `ifr_flags`.
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _rest: [u8; 22],
}

/// Brings interface `name` up (`SIOCSIFFLAGS` with `IFF_UP`), in the calling thread's
/// namespace.
pub fn set_up(name: &str) -> io::Result<()> {
    let sock = control_socket()?;
    let mut req = IfReqFlags {
        name: IfReq::new(name)?.name,
        flags: 0,
        _rest: [0; 22],
    };
    // SAFETY: SIOCGIFFLAGS writes ifr_flags into `req`, an ifreq of the full size.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) })?;
    req.flags |= libc::IFF_UP as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads ifr_flags from `req`.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req) })?;
    Ok(())
}

const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETHTOOL_GFEATURES: u32 = 0x3a;
const ETHTOOL_SFEATURES: u32 = 0x3b;
const ETH_SS_FEATURES: u32 = 4;
const ETH_GSTRING_LEN: usize = 32;

fn ethtool(sock: &OwnedFd, name: &str, buf: &mut [u32]) -> io::Result<()> {
    let mut req = IfReq::new(name)?;
    req.data = buf.as_mut_ptr().cast();
    // SAFETY: `req.data` points to `buf`, laid out as the ethtool command in its first word
    // expects and large enough for the answer (the callers size it from the count).
    check(unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL, &mut req) })?;
    Ok(())
}

/// The names of interface `name`'s features (`ethtool -k`), in the kernel's order.
fn feature_names(sock: &OwnedFd, name: &str) -> io::Result<Vec<String>> {
    // struct ethtool_sset_info { u32 cmd, reserved; u64 sset_mask; u32 data[1] }
    let mut info = [ETHTOOL_GSSET_INFO, 0, 1 << ETH_SS_FEATURES, 0, 0];
    ethtool(sock, name, &mut info)?;
    let count = info[4] as usize;
    // struct ethtool_gstrings { u32 cmd, string_set, len; u8 data[len * 32] }
    let mut strings = vec![0u32; 3 + count * ETH_GSTRING_LEN / 4];
    strings[0] = ETHTOOL_GSTRINGS;
    strings[1] = ETH_SS_FEATURES;
    strings[2] = count as u32;
    ethtool(sock, name, &mut strings)?;
    let bytes: Vec<u8> = strings[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
    Ok(bytes
        .chunks(ETH_GSTRING_LEN)
        .map(|c| {
            let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
            String::from_utf8_lossy(&c[..end]).into_owned()
        })
        .collect())
}

/// The features of interface `name` that are active, by name.
fn active_features(sock: &OwnedFd, name: &str, names: &[String]) -> io::Result<Vec<String>> {
    let blocks = names.len().div_ceil(32);
    // struct ethtool_gfeatures { u32 cmd, size; { u32 available, requested, active,
    // never_changed } features[size] }
    let mut buf = vec![0u32; 2 + 4 * blocks];
    buf[0] = ETHTOOL_GFEATURES;
    buf[1] = blocks as u32;
    ethtool(sock, name, &mut buf)?;
    Ok(names
        .iter()
        .enumerate()
        .filter(|(i, _)| buf[2 + 4 * (i / 32) + 2] & (1 << (i % 32)) != 0)
        .map(|(_, n)| n.clone())
        .collect())
}

/// Switches off, on interface `name` of the calling thread's namespace, every feature whose
/// name `off` selects (as `ethtool -K NAME FEATURE off` would, by the kernel's own feature
/// names). Returns the selected features that are still active afterwards (those the kernel
/// would not change), so the caller can say so.
pub fn switch_features_off(name: &str, off: impl Fn(&str) -> bool) -> io::Result<Vec<String>> {
    let sock = control_socket()?;
    let names = feature_names(&sock, name)?;
    let blocks = names.len().div_ceil(32);
    // struct ethtool_sfeatures { u32 cmd, size; { u32 valid, requested } features[size] }
    let mut buf = vec![0u32; 2 + 2 * blocks];
    buf[0] = ETHTOOL_SFEATURES;
    buf[1] = blocks as u32;
    for (i, n) in names.iter().enumerate() {
        if off(n) {
            buf[2 + 2 * (i / 32)] |= 1 << (i % 32);
        }
    }
    // A positive answer (some wishes not granted) is not an error: the check below tells.
    ethtool(&sock, name, &mut buf)?;
    Ok(active_features(&sock, name, &names)?
        .into_iter()
        .filter(|n| off(n))
        .collect())
}

/// Makes the calling process root of a user namespace of its own, with a mount and a network
/// namespace of its own (`unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET)`), as rootless
/// containers do: the current user is mapped to root inside, mounts are made private, and
/// nothing outside changes. Must be called while the process has one thread (the kernel
/// refuses a new user namespace otherwise).
pub fn unshare_user_mount_net() -> io::Result<()> {
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: unshare(2) with flags only.
    check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWNET) })?;
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("0 {gid} 1"))?;
    // Our mounts must not propagate anywhere.
    mount(None, "/", None, libc::MS_REC | libc::MS_PRIVATE)?;
    Ok(())
}

/// Moves the calling thread into a new, empty network namespace (`unshare(CLONE_NEWNET)`;
/// other threads are unaffected).
pub fn unshare_net() -> io::Result<()> {
    // SAFETY: unshare(2) with flags only.
    check(unsafe { libc::unshare(libc::CLONE_NEWNET) }).map(|_| ())
}

/// `umount2(target, MNT_DETACH)`.
pub fn unmount_detach(target: &str) -> io::Result<()> {
    let target = CString::new(target).map_err(|_| io::Error::other("path with a NUL"))?;
    // SAFETY: a NUL-terminated path that lives across the call.
    check(unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) }).map(|_| ())
}

/// Makes `cmd`'s child enter the network namespace of `netns` (a namespace file, such as
/// `/run/netns/NAME`) before it executes, as `ip netns exec` would.
pub fn enter_netns_on_exec(cmd: &mut std::process::Command, netns: std::fs::File) {
    use std::os::unix::process::CommandExt;
    let fd = netns.as_raw_fd();
    // SAFETY: the hook runs in the forked child before exec and calls only setns(2), which is
    // async-signal-safe; `netns` stays open in the parent until the command is dropped, and
    // its descriptor is inherited by the child.
    unsafe {
        cmd.pre_exec(move || {
            let _keep = &netns;
            if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `mount(2)`: `source` of `fstype` on `target` with `flags`, no data.
pub fn mount(
    source: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
) -> io::Result<()> {
    let cstr = |s: &str| CString::new(s).map_err(|_| io::Error::other("path with a NUL"));
    let source = source.map(cstr).transpose()?;
    let target = cstr(target)?;
    let fstype = fstype.map(cstr).transpose()?;
    let ptr = |c: &Option<CString>| c.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
    // SAFETY: every pointer is NUL-terminated or null, and lives across the call.
    check(unsafe {
        libc::mount(
            ptr(&source),
            target.as_ptr(),
            ptr(&fstype),
            flags,
            std::ptr::null(),
        )
    })
    .map(|_| ())
}

/// Runs `f` in a forked child and reports whether it returned `Ok` (the child exits at once; the
/// parent is unchanged whatever `f` did to the child). For steps that cannot be undone, to try
/// them first. Call it while the process has one thread.
pub fn in_child(f: impl FnOnce() -> io::Result<()>) -> io::Result<bool> {
    // SAFETY: fork(2) in a process with one thread; the child runs only `f` and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = i32::from(f().is_err());
        // SAFETY: _exit(2) ends the child without running the parent's destructors twice.
        unsafe { libc::_exit(code) };
    }
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waiting for our own child, with a valid status pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0)
}

/// Whether the process is root (effective uid 0) of the namespace it is in.
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Threads of the calling process (`/proc/self/task`).
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}
