//! Helpers of the packet-mode tests (NFQUEUE and bridge stages), included by path.

use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use agentwire_netsim::packet::{enter_netns, SERVER_ADDR};
use agentwire_netsim::Impairment;

/// A one-way delay of `ms`, nothing else.
pub fn delay(ms: u64) -> Impairment {
    Impairment {
        delay: Duration::from_millis(ms),
        ..Impairment::default()
    }
}

/// UDP echo on SERVER_ADDR:7 inside the server namespace until `stop`.
pub fn spawn_udp_echo(ns: String, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = thread::spawn(move || {
        enter_netns(&ns).unwrap();
        let sock = UdpSocket::bind((SERVER_ADDR, 7)).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        tx.send(()).unwrap();
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((n, from)) = sock.recv_from(&mut buf) {
                let _ = sock.send_to(&buf[..n], from);
            }
        }
    });
    rx.recv().unwrap();
    h
}

/// Runs `f` in a thread that entered namespace `ns`.
pub fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    thread::spawn(move || {
        enter_netns(&ns).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// From a new socket in namespace `client_ns` at `client`, sends `n` numbered pings (one every
/// 250 µs) to the echo at `server`; how many distinct ones came back within 500 ms of the last.
pub fn pings_answered(
    client_ns: &str,
    client: std::net::Ipv4Addr,
    server: std::net::SocketAddr,
    n: u32,
) -> usize {
    in_ns(client_ns, move || {
        let sock = UdpSocket::bind((client, 0)).unwrap();
        let rx = sock.try_clone().unwrap();
        let reader = thread::spawn(move || {
            rx.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut seen = vec![false; n as usize];
            let mut buf = [0u8; 64];
            while let Ok((len, _)) = rx.recv_from(&mut buf) {
                if len == 4 {
                    let i = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                    if let Some(s) = seen.get_mut(i) {
                        *s = true;
                    }
                }
            }
            seen.iter().filter(|s| **s).count()
        });
        for i in 0..n {
            sock.send_to(&i.to_be_bytes(), server).unwrap();
            thread::sleep(Duration::from_micros(250));
        }
        reader.join().unwrap()
    })
}
