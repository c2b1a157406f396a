//! The probes a check sends through an emulator: UDP ping-pong for RTT, a counted one-way stream for loss, a timed blast for rate and the emulator's ceiling.
//!
//! This module owns the probes' sockets and timing; it must not judge the results.

use super::*;

/// `n` sequential UDP ping-pongs (after 5 warm-ups); RTTs in ms, sorted.
pub fn ping_pong(
    client: UdpSocket,
    server: UdpSocket,
    target: SocketAddr,
    n: u32,
) -> Result<Vec<f64>> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    server.set_read_timeout(Some(Duration::from_millis(20)))?;
    let echo = thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while !stop2.load(Ordering::Relaxed) {
            if let Ok((len, from)) = server.recv_from(&mut buf) {
                let _ = server.send_to(&buf[..len], from);
            }
        }
    });
    let result = (|| {
        client.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut rtts = Vec::with_capacity(n as usize);
        let mut buf = [0u8; 2048];
        for i in 0..n + 5 {
            let mut msg = [0u8; 16];
            msg[..4].copy_from_slice(&i.to_be_bytes());
            let t = Instant::now();
            client.send_to(&msg, target)?;
            loop {
                let (len, _) = client
                    .recv_from(&mut buf)
                    .map_err(|e| CheckError::io(format!("ping {i}: no echo within 2 s"), e))?;
                if len == 16 && buf[..4] == i.to_be_bytes() {
                    break;
                }
            }
            if i >= 5 {
                rtts.push(ms(t.elapsed()));
            }
        }
        rtts.sort_by(f64::total_cmp);
        Ok(rtts)
    })();
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    result
}

/// Receives on `server` until `done` is set and nothing arrived for `quiet`, or `limit`
/// passed; calls `on` with (arrival time since `t0`, datagram).
pub fn receive_until(
    server: UdpSocket,
    done: Arc<AtomicBool>,
    quiet: Duration,
    limit: Duration,
    t0: Instant,
    mut on: impl FnMut(f64, &[u8]) + Send + 'static,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let _ = server.set_read_timeout(Some(Duration::from_millis(20)));
        let mut buf = vec![0u8; 2048];
        let mut last = Instant::now();
        while t0.elapsed() < limit {
            match server.recv_from(&mut buf) {
                Ok((len, _)) => {
                    last = Instant::now();
                    on(t0.elapsed().as_secs_f64(), &buf[..len]);
                }
                Err(_) => {
                    if done.load(Ordering::Relaxed) && last.elapsed() >= quiet {
                        break;
                    }
                }
            }
        }
    })
}

/// Sends `n` numbered 8-byte datagrams in bursts of 100 with a 2 ms pause; returns how many
/// distinct ones the server received.
pub fn one_way_count(
    client: UdpSocket,
    server: UdpSocket,
    target: SocketAddr,
    n: u32,
) -> Result<u64> {
    let seen = Arc::new(std::sync::Mutex::new(vec![false; n as usize]));
    let done = Arc::new(AtomicBool::new(false));
    let seen2 = seen.clone();
    let t0 = Instant::now();
    let limit = Duration::from_secs(5) + Duration::from_micros(50) * n;
    let rx = receive_until(
        server,
        done.clone(),
        Duration::from_millis(500),
        limit,
        t0,
        move |_, d| {
            if d.len() == 8 {
                let i = u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize;
                if let Some(s) = seen2.lock_or_recover().get_mut(i) {
                    *s = true;
                }
            }
        },
    );
    let send = || -> Result<()> {
        for i in 0..n {
            let mut msg = [0u8; 8];
            msg[..4].copy_from_slice(&i.to_be_bytes());
            client.send_to(&msg, target)?;
            if i % 100 == 99 {
                thread::sleep(Duration::from_millis(2));
            }
        }
        Ok(())
    };
    let sent = send();
    done.store(true, Ordering::Relaxed);
    let _ = rx.join();
    sent?;
    let count = seen.lock_or_recover().iter().filter(|s| **s).count();
    Ok(count as u64)
}

/// A blast of 1200-byte datagrams: `count` of them, or as many as fit in `duration`.
pub struct Blast {
    pub(super) sent: u64,
    pub(super) send_secs: f64,
    /// (seconds since the first send, bytes as the emulator counts them), in arrival order.
    pub(super) arrivals: Vec<(f64, u64)>,
}

pub const BLAST_SIZE: usize = 1200;

pub fn blast(
    em_client: UdpSocket,
    server: UdpSocket,
    target: SocketAddr,
    overhead: u64,
    count: u64,
    duration: Duration,
    limit: Duration,
) -> Result<Blast> {
    let arrivals = Arc::new(std::sync::Mutex::new(Vec::with_capacity(
        count.min(1 << 22) as usize,
    )));
    let arr2 = arrivals.clone();
    let done = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let rx = receive_until(
        server,
        done.clone(),
        Duration::from_millis(500),
        limit,
        t0,
        move |t, d| {
            arr2.lock_or_recover().push((t, d.len() as u64 + overhead));
        },
    );
    let msg = [0x5au8; BLAST_SIZE];
    let mut sent = 0u64;
    let mut err = None;
    while sent < count && t0.elapsed() < duration {
        match em_client.send_to(&msg, target) {
            Ok(_) => sent += 1,
            // ENOBUFS and friends: the sender outran the kernel; try again.
            Err(e) if e.raw_os_error() == Some(105) => thread::yield_now(),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let send_secs = t0.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = rx.join();
    if let Some(e) = err {
        return Err(e.into());
    }
    let arrivals = std::mem::take(&mut *arrivals.lock_or_recover());
    Ok(Blast {
        sent,
        send_secs,
        arrivals,
    })
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------
