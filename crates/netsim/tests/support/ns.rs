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
