//! Network namespaces, veth pairs, addresses, links up and neighbours, made as `ip netns add`,
//! `ip link add … type veth`, `ip addr add`, `ip link set … up` and `ip neigh replace` make
//! them, without running `ip`: a namespace is a bind mount of a thread's
//! `/proc/thread-self/ns/net` under [`NETNS_DIR`] (so `ip netns exec NAME …` still finds it),
//! everything else is rtnetlink (the `rtnetlink` crate) from a thread inside the namespace.
//!
//! This module owns those operations only; it must not decide a topology (that is
//! `packet::Topology`'s) nor touch any namespace it is not named.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use futures_util::TryStreamExt;
use rtnetlink::{Handle, LinkUnspec, LinkVeth};

use crate::netns::{in_namespace, netns_path, PacketError, NETNS_DIR};
use crate::sys;

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> PacketError {
    let context = context.into();
    move |source| PacketError::Io { context, source }
}

fn netlink(context: &str, e: rtnetlink::Error) -> PacketError {
    PacketError::Io {
        context: context.to_string(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// Creates network namespace `name` (its handle `NETNS_DIR/name`), with loopback up. Fails if
/// the handle exists.
pub fn add_namespace(name: &str) -> Result<(), PacketError> {
    std::fs::create_dir_all(NETNS_DIR).map_err(io(format!("creating {NETNS_DIR}")))?;
    let path = netns_path(name);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(io(format!("creating {}", path.display())))?;
    let target = path.to_string_lossy().into_owned();
    let made = std::thread::Builder::new()
        .name("netsim-setup".into())
        .spawn(move || -> std::io::Result<()> {
            // A new network namespace for this thread only, kept alive by the bind mount.
            sys::unshare_net()?;
            sys::mount(
                Some("/proc/thread-self/ns/net"),
                &target,
                None,
                libc::MS_BIND,
            )?;
            sys::set_up("lo")
        })
        .map_err(io("spawning a set-up thread"))?
        .join()
        .map_err(|_| PacketError::Thread("a set-up thread panicked".into()))?;
    if let Err(e) = made {
        let _ = sys::unmount_detach(&path.to_string_lossy());
        let _ = std::fs::remove_file(&path);
        return Err(io(format!("making network namespace {name}"))(e));
    }
    Ok(())
}

/// Removes namespace `name`'s handle (the namespace goes once nothing else holds it).
pub fn delete_namespace(name: &str) -> Result<(), PacketError> {
    let path = netns_path(name);
    sys::unmount_detach(&path.to_string_lossy())
        .map_err(io(format!("unmounting {}", path.display())))?;
    std::fs::remove_file(&path).map_err(io(format!("removing {}", path.display())))
}

/// The namespaces with a handle in [`NETNS_DIR`].
pub fn namespaces() -> Result<Vec<String>, PacketError> {
    match std::fs::read_dir(Path::new(NETNS_DIR)) {
        Ok(dir) => Ok(dir
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(io(format!("listing {NETNS_DIR}"))(e)),
    }
}

/// Runs `f` with an rtnetlink handle whose socket lives in namespace `ns`, on a thread of its
/// own with a runtime of its own.
fn with_handle<T, F, Fut>(ns: &str, what: &str, f: F) -> Result<T, PacketError>
where
    T: Send + 'static,
    F: FnOnce(Handle) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, rtnetlink::Error>>,
{
    let what = what.to_string();
    in_namespace(ns, move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("starting a netlink runtime"))?;
        rt.block_on(async move {
            let (connection, handle, _) =
                rtnetlink::new_connection().map_err(io("opening a netlink socket"))?;
            let driver = tokio::spawn(connection);
            let out = f(handle).await.map_err(|e| netlink(&what, e));
            driver.abort();
            out
        })
    })?
}

async fn index_of(handle: &Handle, dev: &str) -> Result<u32, rtnetlink::Error> {
    let mut links = handle.link().get().match_name(dev.to_string()).execute();
    match links.try_next().await? {
        Some(link) => Ok(link.header.index),
        None => Err(rtnetlink::Error::RequestFailed),
    }
}

/// Parses `02:61:…` into six bytes.
fn mac_bytes(mac: &str) -> Result<Vec<u8>, PacketError> {
    let bytes: Vec<u8> = mac
        .split(':')
        .map(|b| u8::from_str_radix(b, 16))
        .collect::<Result<_, _>>()
        .map_err(|_| PacketError::Unsupported(format!("bad MAC address {mac}")))?;
    if bytes.len() != 6 {
        return Err(PacketError::Unsupported(format!("bad MAC address {mac}")));
    }
    Ok(bytes)
}

/// Creates a veth pair in namespace `ns`: `dev` (with MAC `mac` if given) stays there, `peer`
/// moves to namespace `peer_ns`. Both get `mtu`.
pub fn add_veth(
    ns: &str,
    dev: &str,
    mac: Option<&str>,
    mtu: u32,
    peer: &str,
    peer_ns: &str,
) -> Result<(), PacketError> {
    let mac = mac.map(mac_bytes).transpose()?;
    let peer_path = netns_path(peer_ns);
    let peer_file =
        std::fs::File::open(&peer_path).map_err(io(format!("opening {}", peer_path.display())))?;
    let (dev, peer) = (dev.to_string(), peer.to_string());
    let what = format!("creating veth {dev} / {peer} in {ns}");
    with_handle(ns, &what, move |handle| async move {
        use std::os::fd::AsRawFd;
        let mut link = LinkVeth::new(&dev, &peer).mtu(mtu);
        if let Some(mac) = mac {
            link = link.address(mac);
        }
        handle.link().add(link.build()).execute().await?;
        let index = index_of(&handle, &peer).await?;
        handle
            .link()
            .set(
                LinkUnspec::new_with_index(index)
                    .mtu(mtu)
                    .setns_by_fd(peer_file.as_raw_fd())
                    .build(),
            )
            .execute()
            .await
    })
}

/// In namespace `ns`: gives `dev` the address `addr/prefix` (if given), brings it up, and adds
/// the permanent neighbours `(address, MAC)`.
pub fn configure(
    ns: &str,
    dev: &str,
    addr: Option<(Ipv4Addr, u8)>,
    neighbours: &[(Ipv4Addr, &str)],
) -> Result<(), PacketError> {
    let neighbours: Vec<(Ipv4Addr, Vec<u8>)> = neighbours
        .iter()
        .map(|(a, m)| Ok((*a, mac_bytes(m)?)))
        .collect::<Result<_, PacketError>>()?;
    let dev = dev.to_string();
    let what = format!("configuring {dev} in {ns}");
    with_handle(ns, &what, move |handle| async move {
        let index = index_of(&handle, &dev).await?;
        if let Some((a, prefix)) = addr {
            handle
                .address()
                .add(index, IpAddr::V4(a), prefix)
                .execute()
                .await?;
        }
        handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await?;
        for (a, mac) in neighbours {
            handle
                .neighbours()
                .add(index, IpAddr::V4(a))
                .link_layer_address(&mac)
                .replace()
                .execute()
                .await?;
        }
        Ok(())
    })
}
