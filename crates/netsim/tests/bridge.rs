//! The bridge stage (frames forwarded between two veth pairs over AF_PACKET sockets, in a
//! middle namespace): delay, binomial loss, TCP, UDP GSO batches crossing as single packets,
//! and a held burst. Needs network namespaces (root, or root of a user namespace); without
//! them each test prints `skipped: <reason>` and passes. CI runs as root.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use agentwire_netsim::bridge::{BridgeOptions, BridgeStage};
use agentwire_netsim::packet::{
    check_namespaces, enter_netns, namespace_exists, Offloads, Topology, Wiring, CLIENT_ADDR,
    SERVER_ADDR,
};
use agentwire_netsim::Impairment;

#[path = "support/ns.rs"]
mod ns;
use ns::{delay, in_ns, pings_answered, spawn_udp_echo};

fn namespaces(test: &str) -> bool {
    match check_namespaces() {
        Ok(()) => true,
        Err(e) => {
            println!("{test}: skipped: {e}");
            false
        }
    }
}

fn bridged() -> Topology {
    let topo = Topology::with_wiring(Wiring::Bridged).unwrap();
    assert_eq!(
        topo.offloads(),
        &Offloads::Disabled,
        "every merging offload off"
    );
    topo
}

#[test]
fn udp_delay_and_binomial_loss_through_the_bridge() {
    if !namespaces("udp_delay_and_binomial_loss_through_the_bridge") {
        return;
    }
    let topo = bridged();
    let names = [
        topo.client_ns().to_string(),
        topo.server_ns().to_string(),
        topo.middle_ns().unwrap().to_string(),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let echo = spawn_udp_echo(names[1].clone(), stop.clone());
    let server: SocketAddr = (SERVER_ADDR, 7).into();

    // 1. delay=25ms each way: every RTT >= 50 ms, median <= 52 ms.
    let stage = BridgeStage::start(&topo, delay(25), delay(25), BridgeOptions::default()).unwrap();
    let mut rtts = in_ns(&names[0], move || {
        let sock = UdpSocket::bind((CLIENT_ADDR, 0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 64];
        (0u32..50)
            .map(|i| {
                let t = Instant::now();
                sock.send_to(&i.to_be_bytes(), server).unwrap();
                let (n, _) = sock.recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..n], &i.to_be_bytes());
                t.elapsed()
            })
            .collect::<Vec<_>>()
    });
    rtts.sort();
    let stats = stage.stats();
    println!(
        "delay=25ms each way: min {:?} median {:?}; {stats:?}",
        rtts[0], rtts[25]
    );
    assert!(
        rtts[0] >= Duration::from_millis(50),
        "min RTT {:?}",
        rtts[0]
    );
    assert!(
        rtts[25] <= Duration::from_millis(52),
        "median RTT {:?}",
        rtts[25]
    );
    // The permanent neighbours: no ARP crosses, just the 50 pings each way (IPv6 may add a
    // few link-local frames of its own).
    let c2s = &stats.client_to_server;
    assert!((50..60).contains(&c2s.packets_handled), "{c2s:?}");
    assert_eq!(c2s.oversize, 0);
    drop(stage);

    // 2. loss=10% each way over 2000 pings: combined loss 1 - 0.9² = 19 %, within the 99 %
    // binomial interval.
    let lossy = Impairment {
        loss: 0.10,
        ..delay(5)
    };
    let opts = BridgeOptions {
        seed: 2024,
        ..BridgeOptions::default()
    };
    let stage = BridgeStage::start(&topo, lossy.clone(), lossy, opts).unwrap();
    const N: u32 = 2000;
    let received = pings_answered(&names[0], CLIENT_ADDR, server, N);
    let lost = (N as usize - received) as f64;
    let p = 1.0 - 0.9f64 * 0.9;
    let (mean, half) = (N as f64 * p, 2.576 * (N as f64 * p * (1.0 - p)).sqrt());
    println!(
        "loss=10% each way: lost {lost}/{N} (99% interval {:.0}..={:.0})",
        mean - half,
        mean + half
    );
    assert!((mean - half..=mean + half).contains(&lost), "lost {lost}");
    let stats = stage.stats();
    assert_eq!(stats.client_to_server.kernel_dropped, 0);
    assert_eq!(stats.client_to_server.verdict_errors, 0, "send errors");
    drop(stage);

    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    drop(topo);
    for ns in &names {
        assert!(!namespace_exists(ns), "{ns} removed");
    }
}

#[test]
fn a_mebibyte_of_tcp_crosses_in_mtu_sized_packets() {
    if !namespaces("a_mebibyte_of_tcp_crosses_in_mtu_sized_packets") {
        return;
    }
    let topo = bridged();
    let (client_ns, server_ns) = (topo.client_ns().to_string(), topo.server_ns().to_string());
    let stage = BridgeStage::start(&topo, delay(5), delay(5), BridgeOptions::default()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let server = thread::spawn(move || {
        enter_netns(&server_ns).unwrap();
        let listener = TcpListener::bind((SERVER_ADDR, 9000)).unwrap();
        tx.send(()).unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        conn.write_all(&(got.len() as u64).to_be_bytes()).unwrap();
        got
    });
    rx.recv().unwrap();
    let data: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let sent = data.clone();
    let acked = in_ns(&client_ns, move || {
        let mut conn = TcpStream::connect((SERVER_ADDR, 9000)).unwrap();
        conn.write_all(&sent).unwrap();
        conn.shutdown(std::net::Shutdown::Write).unwrap();
        let mut len = [0u8; 8];
        conn.read_exact(&mut len).unwrap();
        u64::from_be_bytes(len)
    });
    let got = server.join().unwrap();
    assert_eq!(acked, 1 << 20);
    assert_eq!(got, data, "every byte, in order");
    let c2s = stage.stats().client_to_server;
    println!("1 MiB of TCP: {c2s:?}");
    assert_eq!(c2s.oversize, 0, "no frame over the MTU");
    assert!(c2s.link.bytes_in >= 1 << 20);
    assert!(c2s.link.bytes_in <= 1500 * c2s.link.packets_in, "{c2s:?}");
}

/// A UDP GSO send (one sendmsg, 10 segments: what quinn does) crosses as 10 packets of the
/// segment size, each seen by the link, none dropped as oversize.
#[test]
fn udp_gso_batches_cross_as_single_packets() {
    if !namespaces("udp_gso_batches_cross_as_single_packets") {
        return;
    }
    let topo = bridged();
    let (client_ns, server_ns) = (topo.client_ns().to_string(), topo.server_ns().to_string());
    let stage = BridgeStage::start(&topo, delay(1), delay(1), BridgeOptions::default()).unwrap();
    let receiver = in_ns(&server_ns, || UdpSocket::bind((SERVER_ADDR, 7000)).unwrap());
    receiver
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let sent_as_gso = in_ns(&client_ns, || {
        use std::os::fd::AsRawFd;
        let sock = UdpSocket::bind((CLIENT_ADDR, 0)).unwrap();
        let segment: libc::c_int = 1000;
        // SAFETY: UDP_SEGMENT takes an int; the socket is open.
        let ok = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                std::ptr::from_ref(&segment).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        } == 0;
        let batch: Vec<u8> = (0..10_000).map(|i| (i / 1000) as u8).collect();
        sock.send_to(&batch, (SERVER_ADDR, 7000)).unwrap();
        ok
    });
    let mut buf = [0u8; 65_536];
    let mut sizes = Vec::new();
    while let Ok(n) = receiver.recv(&mut buf) {
        sizes.push(n);
        if sizes.len() == 10 {
            break;
        }
    }
    let c2s = stage.stats().client_to_server;
    println!("GSO ({sent_as_gso}): received {sizes:?}; {c2s:?}");
    assert!(sent_as_gso, "UDP_SEGMENT is available on Linux");
    assert_eq!(sizes, vec![1000; 10], "ten datagrams of one segment each");
    assert_eq!(c2s.oversize, 0);
    assert_eq!(c2s.link.packets_in, 10);
    assert_eq!(c2s.link.bytes_in, 10 * (1000 + 28));
}

/// 4,000 datagrams sent back to back are all held (50 ms) and all delivered: no ARP wait
/// before the first, no kernel drop of the burst.
#[test]
fn a_held_burst_of_4000_datagrams_is_delivered_whole() {
    if !namespaces("a_held_burst_of_4000_datagrams_is_delivered_whole") {
        return;
    }
    let topo = bridged();
    let (client_ns, server_ns) = (topo.client_ns().to_string(), topo.server_ns().to_string());
    let stage = BridgeStage::start(&topo, delay(50), delay(50), BridgeOptions::default()).unwrap();
    let receiver = in_ns(&server_ns, || UdpSocket::bind((SERVER_ADDR, 7001)).unwrap());
    // The burst departs at once after its delay: room for all of it in the receiving socket
    // (the default buffer holds a few hundred small datagrams), so that only the stage's own
    // losses would show.
    {
        use std::os::fd::AsRawFd;
        let bytes: libc::c_int = 16 << 20;
        // SAFETY: SO_RCVBUFFORCE takes an int; the socket is open.
        let forced = unsafe {
            libc::setsockopt(
                receiver.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                std::ptr::from_ref(&bytes).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(forced, 0, "root of the namespace may size its buffers");
    }
    receiver
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    const N: u32 = 4000;
    in_ns(&client_ns, || {
        let sock = UdpSocket::bind((CLIENT_ADDR, 0)).unwrap();
        for i in 0..N {
            sock.send_to(&i.to_be_bytes(), (SERVER_ADDR, 7001)).unwrap();
        }
    });
    let mut seen = vec![false; N as usize];
    let mut buf = [0u8; 64];
    while let Ok(n) = receiver.recv(&mut buf) {
        if n == 4 {
            seen[u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize] = true;
        }
        if seen.iter().all(|s| *s) {
            break;
        }
    }
    let c2s = stage.stats().client_to_server;
    let got = seen.iter().filter(|s| **s).count();
    println!("burst: {got}/{N}; {c2s:?}");
    assert_eq!(got, N as usize);
    assert!(c2s.max_held > 100, "the burst was held: {c2s:?}");
    assert_eq!(c2s.kernel_dropped, 0);
}
