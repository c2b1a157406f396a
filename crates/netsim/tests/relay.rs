//! Socket relay mode over real loopback sockets. Only lower bounds on added delay are exact;
//! upper bounds carry generous slack so that slow machines pass.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agentwire_netsim::relay::{TcpRelay, UdpRelay};
use agentwire_netsim::{Impairment, Spec};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket};

fn imp(spec: &str) -> Impairment {
    Spec::parse(spec).unwrap().impairment
}

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A UDP echo server; returns its address.
async fn udp_echo() -> SocketAddr {
    let s = UdpSocket::bind(any()).await.unwrap();
    let addr = s.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_536];
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            let _ = s.send_to(&buf[..n], from).await;
        }
    });
    addr
}

/// A TCP echo server; returns its address.
async fn tcp_echo() -> SocketAddr {
    let l = TcpListener::bind(any()).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_delay_adds_to_every_round_trip() {
    let echo = udp_echo().await;
    let d = imp("delay=25ms");
    let relay = UdpRelay::start(any(), echo, d.clone(), d, 1).await.unwrap();
    let client = UdpSocket::bind(any()).await.unwrap();
    client.connect(relay.local_addr()).await.unwrap();
    let mut rtts = Vec::new();
    let mut buf = [0u8; 64];
    for i in 0u32..20 {
        let t = Instant::now();
        client.send(&i.to_be_bytes()).await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), client.recv(&mut buf))
            .await
            .expect("echo within 5 s")
            .unwrap();
        rtts.push(t.elapsed());
        assert_eq!(&buf[..n], &i.to_be_bytes());
    }
    for r in &rtts {
        assert!(*r >= Duration::from_millis(50), "RTT {r:?} below 2 × 25 ms");
    }
    rtts.sort();
    let median = rtts[rtts.len() / 2];
    assert!(median < Duration::from_millis(75), "median RTT {median:?}");
    let s = relay.stats();
    assert_eq!((s.forward.packets_out, s.reverse.packets_out), (20, 20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_loss_all_or_nothing() {
    let echo = udp_echo().await;
    let mut buf = [0u8; 64];

    // loss=100%: nothing gets through.
    let relay = UdpRelay::start(any(), echo, imp("loss=100%"), imp(""), 2)
        .await
        .unwrap();
    let client = UdpSocket::bind(any()).await.unwrap();
    client.connect(relay.local_addr()).await.unwrap();
    for i in 0u32..50 {
        client.send(&i.to_be_bytes()).await.unwrap();
    }
    let got = tokio::time::timeout(Duration::from_millis(300), client.recv(&mut buf)).await;
    assert!(got.is_err(), "a datagram crossed a 100% loss link");
    let s = relay.stats();
    assert_eq!(s.forward.packets_in, 50);
    assert_eq!(s.forward.dropped_loss, 50);
    assert_eq!(s.reverse.packets_in, 0);
    drop(relay);

    // loss=0: everything gets through, once.
    let relay = UdpRelay::start(any(), echo, imp("delay=5ms"), imp("loss=0"), 3)
        .await
        .unwrap();
    let client = UdpSocket::bind(any()).await.unwrap();
    client.connect(relay.local_addr()).await.unwrap();
    let mut seen = [false; 100];
    for i in 0u32..100 {
        client.send(&i.to_be_bytes()).await.unwrap();
    }
    for _ in 0..100 {
        let n = tokio::time::timeout(Duration::from_secs(5), client.recv(&mut buf))
            .await
            .expect("every datagram echoed")
            .unwrap();
        let i = u32::from_be_bytes(buf[..n].try_into().unwrap()) as usize;
        assert!(!seen[i], "datagram {i} twice");
        seen[i] = true;
    }
    let s = relay.stats();
    assert_eq!((s.forward.packets_out, s.reverse.packets_out), (100, 100));
    assert_eq!(s.forward.dropped() + s.reverse.dropped(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_clients_get_their_own_replies() {
    let echo = udp_echo().await;
    let relay = UdpRelay::start(any(), echo, imp("delay=2ms"), imp("delay=2ms"), 4)
        .await
        .unwrap();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let c = UdpSocket::bind(any()).await.unwrap();
        c.connect(relay.local_addr()).await.unwrap();
        clients.push(c);
    }
    for (i, c) in clients.iter().enumerate() {
        c.send(format!("client {i}").as_bytes()).await.unwrap();
    }
    let mut buf = [0u8; 64];
    for (i, c) in clients.iter().enumerate() {
        let n = tokio::time::timeout(Duration::from_secs(5), c.recv(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], format!("client {i}").as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_delay_and_intact_ordered_bytes() {
    let echo = tcp_echo().await;
    // Loss/reorder/dup must be ignored by a TCP relay; jitter must not reorder bytes.
    let f = imp("delay=20ms,jitter=5ms,jitter_reorders=true,loss=50%,reorder=50%,dup=50%");
    let r = imp("delay=20ms");
    let relay = TcpRelay::start(any(), echo, f, r, 5).await.unwrap();

    // Request/response: at least 2 × 20 ms... minus jitter on the forward leg (≥ 15 ms).
    let mut s = tokio::net::TcpStream::connect(relay.local_addr())
        .await
        .unwrap();
    s.set_nodelay(true).unwrap();
    let t = Instant::now();
    s.write_all(b"ping").await.unwrap();
    let mut reply = [0u8; 4];
    s.read_exact(&mut reply).await.unwrap();
    let rtt = t.elapsed();
    assert_eq!(&reply, b"ping");
    assert!(
        rtt >= Duration::from_millis(35),
        "request/response took {rtt:?}"
    );
    drop(s);

    // Without jitter the bound is the full 40 ms.
    let d = imp("delay=20ms");
    let plain = TcpRelay::start(any(), echo, d.clone(), d, 6).await.unwrap();
    let mut s = tokio::net::TcpStream::connect(plain.local_addr())
        .await
        .unwrap();
    s.set_nodelay(true).unwrap();
    let t = Instant::now();
    s.write_all(b"ping").await.unwrap();
    s.read_exact(&mut reply).await.unwrap();
    let rtt = t.elapsed();
    assert!(
        rtt >= Duration::from_millis(40),
        "request/response took {rtt:?}"
    );
    drop(s);

    // 1 MiB both ways through the jittery relay: intact and in order.
    let data: Vec<u8> = (0..1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let s = tokio::net::TcpStream::connect(relay.local_addr())
        .await
        .unwrap();
    let (mut rd, mut wr) = s.into_split();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        wr.write_all(&sent).await.unwrap();
        wr.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut back))
        .await
        .expect("1 MiB echoed within 30 s")
        .unwrap();
    writer.await.unwrap();
    assert_eq!(back.len(), data.len());
    assert!(back == data, "bytes corrupted or reordered");
    let st = relay.stats();
    assert_eq!(st.forward.dropped() + st.reverse.dropped(), 0);
    assert_eq!(st.forward.duplicated + st.forward.reordered, 0);
    assert!(st.forward.bytes_out >= 1024 * 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_relay_closes_its_port() {
    let echo = udp_echo().await;
    let relay = TcpRelay::start(any(), echo, imp(""), imp(""), 7)
        .await
        .unwrap();
    let addr = relay.local_addr();
    drop(relay);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
