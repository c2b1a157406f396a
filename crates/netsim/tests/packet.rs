//! Packet-level mode (NFQUEUE between two namespaces). Needs root/CAP_NET_ADMIN and iptables;
//! without them each test prints `skipped: <reason>` and passes.
#![cfg(target_os = "linux")]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use agentwire_netsim::packet::{
    check_impairment, check_privileges, enter_netns, namespace_exists, PacketStage, StageOptions,
    Topology, CLIENT_ADDR, SERVER_ADDR,
};
use agentwire_netsim::{Impairment, Spec};

#[path = "support/ns.rs"]
mod ns;
use ns::{delay, in_ns, pings_answered, spawn_udp_echo};

fn privileged(test: &str) -> bool {
    match check_privileges() {
        Ok(()) => true,
        Err(e) => {
            println!("{test}: skipped: {e}");
            false
        }
    }
}

#[test]
fn duplication_is_rejected_in_packet_mode() {
    let spec: Spec = "delay=5ms,dup=1%".parse().unwrap();
    let err = check_impairment(&spec.impairment).unwrap_err();
    assert!(err.to_string().contains("duplication"), "{err}");
    assert!(check_impairment(&delay(5)).is_ok());
}

#[test]
fn udp_rtt_and_loss_through_nfqueue() {
    if !privileged("udp_rtt_and_loss_through_nfqueue") {
        return;
    }
    let topo = Topology::new().unwrap();
    let (client_ns, server_ns) = (topo.client_ns().to_string(), topo.server_ns().to_string());
    println!("offloads: {:?}", topo.offloads());
    let stop = Arc::new(AtomicBool::new(false));
    let echo = spawn_udp_echo(server_ns.clone(), stop.clone());
    let server: SocketAddr = (SERVER_ADDR, 7).into();

    // 1. delay=25ms each way: every RTT >= 50 ms, median <= 51 ms.
    let stage = PacketStage::start(&topo, delay(25), delay(25), StageOptions::default()).unwrap();
    let mut rtts = in_ns(&client_ns, move || {
        let sock = UdpSocket::bind((CLIENT_ADDR, 0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut rtts = Vec::new();
        let mut buf = [0u8; 64];
        for i in 0u32..50 {
            let t = Instant::now();
            sock.send_to(&i.to_be_bytes(), server).unwrap();
            let (n, _) = sock.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], &i.to_be_bytes());
            rtts.push(t.elapsed());
        }
        rtts
    });
    rtts.sort();
    let median = rtts[rtts.len() / 2];
    let stats = stage.stats();
    println!(
        "delay=25ms each way: min {:?} median {:?} max {:?}; c2s {:?}",
        rtts[0],
        median,
        rtts[rtts.len() - 1],
        stats.client_to_server
    );
    assert!(
        rtts[0] >= Duration::from_millis(50),
        "min RTT {:?}",
        rtts[0]
    );
    assert!(median <= Duration::from_millis(51), "median RTT {median:?}");
    assert_eq!(stats.client_to_server.packets_handled, 50);
    assert_eq!(stats.server_to_client.packets_handled, 50);
    // IPv4 (20) + UDP (8) + 4 payload bytes per ping.
    assert_eq!(stats.client_to_server.link.bytes_in, 50 * 32);
    drop(stage);

    // 2. loss=10% each way over 2000 pings: combined loss 1 - 0.9² = 19 %.
    let lossy = Impairment {
        loss: 0.10,
        ..delay(25)
    };
    let opts = StageOptions {
        seed: 2024,
        ..StageOptions::default()
    };
    let stage = PacketStage::start(&topo, lossy.clone(), lossy, opts).unwrap();
    const N: u32 = 2000;
    let received = pings_answered(&client_ns, CLIENT_ADDR, server, N);
    let lost = N as usize - received;
    let p = 1.0 - 0.9f64 * 0.9;
    let mean = N as f64 * p;
    let half = 2.576 * (N as f64 * p * (1.0 - p)).sqrt();
    let stats = stage.stats();
    println!(
        "loss=10% each way: lost {lost}/{N} = {:.2}% (99% interval {:.0}..={:.0}); \
         c2s {:.0} pkt/s max held {}; s2c {:.0} pkt/s max held {}",
        100.0 * lost as f64 / N as f64,
        mean - half,
        mean + half,
        stats.client_to_server.packets_per_sec(),
        stats.client_to_server.max_held,
        stats.server_to_client.packets_per_sec(),
        stats.server_to_client.max_held,
    );
    assert!(
        (mean - half..=mean + half).contains(&(lost as f64)),
        "lost {lost} outside the 99% interval"
    );
    assert_eq!(stats.client_to_server.verdict_errors, 0);
    drop(stage);

    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    drop(topo);
    assert!(!namespace_exists(&client_ns) && !namespace_exists(&server_ns));
}

#[test]
fn tcp_echo_64k_through_nfqueue() {
    if !privileged("tcp_echo_64k_through_nfqueue") {
        return;
    }
    let topo = Topology::new().unwrap();
    let (client_ns, server_ns) = (topo.client_ns().to_string(), topo.server_ns().to_string());
    let stage = PacketStage::start(&topo, delay(10), delay(10), StageOptions::default()).unwrap();

    let (tx, rx) = std::sync::mpsc::channel();
    let server = thread::spawn(move || {
        enter_netns(&server_ns).unwrap();
        let listener = TcpListener::bind((SERVER_ADDR, 9000)).unwrap();
        tx.send(()).unwrap();
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            conn.write_all(&buf[..n]).unwrap();
        }
    });
    rx.recv().unwrap();

    let data: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    let sent = data.clone();
    let (echoed, elapsed) = in_ns(&client_ns, move || {
        let t = Instant::now();
        let mut conn = TcpStream::connect((SERVER_ADDR, 9000)).unwrap();
        let mut reader = conn.try_clone().unwrap();
        let read = thread::spawn(move || {
            let mut out = Vec::new();
            reader.read_to_end(&mut out).unwrap();
            out
        });
        conn.write_all(&sent).unwrap();
        conn.shutdown(std::net::Shutdown::Write).unwrap();
        let out = read.join().unwrap();
        (out, t.elapsed())
    });
    server.join().unwrap();
    let stats = stage.stats();
    println!(
        "tcp 64 KiB echo, delay=10ms each way: {elapsed:?}; c2s handled {} max held {}; \
         s2c handled {} max held {}",
        stats.client_to_server.packets_handled,
        stats.client_to_server.max_held,
        stats.server_to_client.packets_handled,
        stats.server_to_client.max_held
    );
    assert_eq!(echoed, data);
    let c2s = &stats.client_to_server.link;
    assert!(c2s.bytes_in >= 64 * 1024, "{c2s:?}");
    assert!(
        c2s.bytes_in <= 1500 * c2s.packets_in,
        "MTU-sized at most: {c2s:?}"
    );
    assert!(elapsed >= Duration::from_millis(20), "{elapsed:?}");
    drop(stage);
    let (c, s) = (topo.client_ns().to_string(), topo.server_ns().to_string());
    topo.remove().unwrap();
    assert!(!namespace_exists(&c) && !namespace_exists(&s));
}

#[test]
fn cleanup_stale_removes_only_dead_owners() {
    if !privileged("cleanup_stale_removes_only_dead_owners") {
        return;
    }
    // pid 4294967 is above any pid_max, so its owner is certainly gone.
    let dead = "aw-4294967-0-c";
    let status = std::process::Command::new("ip")
        .args(["netns", "add", dead])
        .status()
        .unwrap();
    assert!(status.success());
    let live = Topology::new().unwrap();
    let removed = agentwire_netsim::packet::cleanup_stale("aw-").unwrap();
    assert!(removed.iter().any(|n| n == dead), "{removed:?}");
    assert!(!namespace_exists(dead));
    assert!(namespace_exists(live.client_ns()) && namespace_exists(live.server_ns()));
}

#[test]
fn named_topology_is_stable_kept_by_cleanup_and_sets_tcp_cc() {
    if !privileged("named_topology_is_stable_kept_by_cleanup_and_sets_tcp_cc") {
        return;
    }
    assert!(
        Topology::named("9lives").is_err(),
        "names must not start with a digit"
    );
    assert!(Topology::named("a b").is_err());
    let name = format!("tst{}", std::process::id());
    let topo = Topology::named(&name).unwrap();
    let (c, s) = (format!("aw-{name}-c"), format!("aw-{name}-s"));
    assert_eq!(
        (topo.client_ns(), topo.server_ns()),
        (c.as_str(), s.as_str())
    );
    // A second topology of the same name is refused, and the first one is untouched.
    let err = Topology::named(&name).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    // Named namespaces carry no pid: cleanup_stale leaves them alone. (A narrow prefix, so
    // this does not race with `cleanup_stale_removes_only_dead_owners`.)
    let removed = agentwire_netsim::packet::cleanup_stale("aw-ts").unwrap();
    assert!(
        !removed.contains(&c) && !removed.contains(&s),
        "{removed:?}"
    );
    assert!(namespace_exists(&c) && namespace_exists(&s));

    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default();
    assert!(!topo.tcp_congestion_control(&c).unwrap().is_empty());
    if available.split_whitespace().any(|a| a == "reno") {
        topo.set_tcp_congestion_control(&s, "reno").unwrap();
        assert_eq!(topo.tcp_congestion_control(&s).unwrap(), "reno");
    }
    // An algorithm the kernel has but the host does not allow to namespaces (cubic, where
    // only reno and bbr are allowed) is allowed first, then set.
    if available.split_whitespace().any(|a| a == "cubic") {
        topo.set_tcp_congestion_control(&c, "cubic").unwrap();
        assert_eq!(topo.tcp_congestion_control(&c).unwrap(), "cubic");
        let allowed =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_allowed_congestion_control").unwrap();
        assert!(
            allowed.split_whitespace().any(|a| a == "cubic"),
            "{allowed}"
        );
    }
    let err = topo.set_tcp_congestion_control(&c, "nosuchcc").unwrap_err();
    assert!(err.to_string().contains("not available"), "{err}");
    assert!(topo
        .set_tcp_congestion_control("aw-elsewhere", "reno")
        .is_err());
    assert!(topo.set_tcp_congestion_control(&c, "reno; rm").is_err());
    topo.remove().unwrap();
    assert!(!namespace_exists(&c) && !namespace_exists(&s));
}
