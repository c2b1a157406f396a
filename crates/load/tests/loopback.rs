//! `load` against `serve` for real, on loopback: every protocol, exact byte counts, short
//! connections, open loop, unsafe paths, and failures that must be reported (not hang):
//! refused connections, untrusted certificates, a server that lies about Content-Length, and
//! a server that stops in the middle of a run; session resumption and 0-RTT (accepted, and
//! rejected by a restarted server); requests a server turns away gracefully (GOAWAY,
//! `Connection: close`), which go again instead of counting as errors. No assertion depends
//! on speed; the time bounds only catch hangs.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire_load::files::STANDARD_FILES;
use agentwire_load::load::{self, Limit, LoadConfig, Trust};
use agentwire_load::report::{ErrorKind, LoadReport};
use agentwire_load::serve::{self, ServeConfig, ServerHandle};
use agentwire_load::Proto;

const PROTOS: [Proto; 3] = [Proto::H3, Proto::H2, Proto::Http11];

/// Far more than any of these runs needs; only a hang gets near it.
const HANG_GUARD: Duration = Duration::from_secs(60);

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            dir: common::test_dir(),
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("www")
    }

    fn certs(&self) -> PathBuf {
        self.dir.path().join("certs")
    }

    fn ca(&self) -> PathBuf {
        self.certs().join("ca.pem")
    }

    fn serve(&self) -> ServerHandle {
        let mut config = ServeConfig::new(self.root(), self.certs());
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.threads = 1;
        config.generate = true;
        serve::start(config).unwrap()
    }

    fn config(&self, server: &ServerHandle, proto: Proto, paths: &[&str]) -> LoadConfig {
        let urls = paths
            .iter()
            .map(|p| format!("https://{}{p}", server.local_addr()))
            .collect();
        let mut c = LoadConfig::new(urls);
        c.proto = proto;
        c.trust = Trust::Ca(self.ca());
        c
    }
}

fn size_of(name: &str) -> u64 {
    STANDARD_FILES
        .iter()
        .find(|f| f.0 == name)
        .map(|f| f.1 as u64)
        .unwrap()
}

/// Runs the load, failing the test if it takes anywhere near the hang guard.
fn run(config: &LoadConfig) -> LoadReport {
    let started = Instant::now();
    let report = load::run(config).unwrap();
    assert!(
        started.elapsed() < HANG_GUARD,
        "the run took {:?}",
        started.elapsed()
    );
    report
}

fn clean(report: &LoadReport) {
    assert_eq!(
        report.errors, 0,
        "{}: errors {:?} e.g. {:?}",
        report.settings.proto, report.errors_by_kind, report.error_examples
    );
}

#[test]
fn every_protocol_serves_exact_bytes() {
    let fx = Fixture::new();
    let server = fx.serve();
    assert_eq!(server.files(), STANDARD_FILES.len());
    for proto in PROTOS {
        let mut c = fx.config(&server, proto, &["/1k.bin", "/10k.bin"]);
        c.threads = 2;
        c.connections = 1;
        c.streams = if proto == Proto::Http11 { 1 } else { 4 };
        c.limit = Limit::Requests(200);
        let r = run(&c);
        clean(&r);
        assert_eq!(r.requests, 200, "{proto}");
        assert_eq!(r.responses, 200, "{proto}");
        assert_eq!(r.succeeded, 200, "{proto}");
        assert_eq!(r.status_count(200), 200, "{proto}");
        assert_eq!(
            r.bytes,
            100 * size_of("1k.bin") + 100 * size_of("10k.bin"),
            "{proto}"
        );
        assert_eq!(r.connections, 2, "{proto}");
        assert_eq!(r.latency.request.count, 200, "{proto}");
        assert_eq!(r.latency.ttfb.count, 200, "{proto}");
        assert_eq!(r.latency.connect.count, 2, "{proto}");
        assert!(r.latency.request.p50_us <= r.latency.request.max_us);
        assert!(r.rps > 0.0 && r.bytes_per_s > 0.0);
        assert!(r.peak_rss_bytes.is_some_and(|b| b > 0));
        assert!(r.cpu_seconds.is_some());
    }
    server.stop();
}

#[test]
fn big_files_arrive_whole() {
    let fx = Fixture::new();
    let server = fx.serve();
    for proto in PROTOS {
        let mut c = fx.config(&server, proto, &["/1m.bin", "/630b.bin"]);
        c.limit = Limit::Requests(4);
        let r = run(&c);
        clean(&r);
        assert_eq!(r.status_count(200), 4, "{proto}");
        assert_eq!(
            r.bytes,
            2 * size_of("1m.bin") + 2 * size_of("630b.bin"),
            "{proto}"
        );
    }
}

#[test]
fn short_connections_pay_a_handshake_each() {
    let fx = Fixture::new();
    let server = fx.serve();
    for proto in PROTOS {
        let mut c = fx.config(&server, proto, &["/630b.bin"]);
        c.connections = 2;
        c.max_requests_per_conn = 1;
        c.limit = Limit::Requests(30);
        let r = run(&c);
        clean(&r);
        assert_eq!(r.responses, 30, "{proto}");
        assert_eq!(r.connections, 30, "{proto}");
        assert_eq!(r.latency.connect.count, 30, "{proto}");
        assert!(r.handshakes_per_s > 0.0);
        assert_eq!(r.bytes, 30 * 630);
    }
}

#[test]
fn a_timed_run_with_warmup_measures_its_window() {
    let fx = Fixture::new();
    let server = fx.serve();
    for proto in PROTOS {
        let mut c = fx.config(&server, proto, &["/5k.bin"]);
        c.limit = Limit::Duration(Duration::from_millis(300));
        c.warmup = Duration::from_millis(100);
        let live = Arc::new(load::LiveCounts::default());
        c.live = Some(live.clone());
        let r = run(&c);
        clean(&r);
        assert!(r.responses > 0, "{proto}");
        assert_eq!(
            live.snapshot(),
            (r.responses, r.errors),
            "{proto}: the live counts (progress bar) match the report"
        );
        assert_eq!(r.status_count(200), r.responses);
        assert_eq!(r.bytes, r.responses * size_of("5k.bin"));
        // The last request ends after the window closes (it was sent before).
        assert!(r.elapsed_s >= 0.3, "{proto}: {}", r.elapsed_s);
        // The connection was made during the warm-up (unless the machine is very slow): not
        // measured.
        assert!(r.connections <= 1, "{proto}");
    }
}

#[test]
fn open_loop_sends_the_scheduled_requests() {
    let fx = Fixture::new();
    let server = fx.serve();
    for proto in PROTOS {
        let mut c = fx.config(&server, proto, &["/1k.bin"]);
        c.connections = 2;
        c.rate = Some(200.0);
        c.limit = Limit::Requests(40);
        let r = run(&c);
        clean(&r);
        assert_eq!(r.settings.mode, "open-loop");
        assert_eq!(r.responses, 40, "{proto}");
        assert_eq!(r.bytes, 40 * 1024);
    }
}

#[test]
fn unsafe_and_missing_paths_get_404() {
    let fx = Fixture::new();
    let outside = fx.dir.path().join("secret.txt");
    std::fs::write(&outside, b"secret").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&outside, fx.root().join("leak.txt")).unwrap();
    let server = fx.serve();
    let paths = [
        "/missing.bin",
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/..%2fsecret.txt",
        "/leak.txt",
        "/.//1k.bin",
    ];
    for proto in PROTOS {
        let mut c = fx.config(&server, proto, &paths);
        c.limit = Limit::Requests(paths.len() as u64);
        let r = run(&c);
        clean(&r);
        assert_eq!(
            r.status_count(404),
            paths.len() as u64,
            "{proto}: {:?}",
            r.status
        );
        assert_eq!(r.succeeded, 0);
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn refused_connections_are_counted_not_hung_on() {
    let fx = Fixture::new();
    let port = free_port();
    for proto in PROTOS {
        let mut c = LoadConfig::new(vec![format!("https://127.0.0.1:{port}/1k.bin")]);
        c.proto = proto;
        c.trust = Trust::Ca(fx.ca());
        c.connect_timeout = Duration::from_millis(300);
        c.limit = Limit::Requests(3);
        let r = run(&c);
        assert_eq!(r.responses, 0);
        assert_eq!(r.errors, 3, "{proto}");
        // QUIC over UDP gets no "refused": the handshake times out instead.
        let kind = if proto == Proto::H3 {
            ErrorKind::ConnectTimeout
        } else {
            ErrorKind::ConnectRefused
        };
        assert_eq!(r.errors_of(kind), 3, "{proto}: {:?}", r.errors_by_kind);
    }
}

#[test]
fn untrusted_certificates_fail_with_a_clear_tls_error() {
    let fx = Fixture::new();
    let server = fx.serve();
    for proto in PROTOS {
        let mut c = fx.config(&server, proto, &["/1k.bin"]);
        c.trust = Trust::NoCa;
        c.limit = Limit::Requests(3);
        let r = run(&c);
        assert_eq!(r.responses, 0);
        assert_eq!(
            r.errors_of(ErrorKind::Tls),
            3,
            "{proto}: {:?}",
            r.errors_by_kind
        );
        let example = &r.error_examples["tls"];
        assert!(example.contains("--ca"), "{proto}: {example}");
        assert!(example.contains("--insecure"), "{proto}: {example}");
    }
    // And --insecure accepts it.
    let mut c = fx.config(&server, Proto::H2, &["/1k.bin"]);
    c.trust = Trust::Insecure;
    c.limit = Limit::Requests(3);
    clean(&run(&c));
}

/// A server for tests that answers every request with `Content-Length: 2000` and only 1000
/// body bytes: HTTP/1.1 over TLS on TCP, and HTTP/3 on UDP. It stops by itself after
/// `HANG_GUARD`.
fn lying_server(certs: &Path) -> (std::net::SocketAddr, std::net::SocketAddr) {
    let identity = agentwire_tls::HubIdentity::from_dir(certs).unwrap();
    let tcp_tls = agentwire_tls::server_config(&identity, &[agentwire_load::ALPN_HTTP11]).unwrap();
    let quic_tls = agentwire_tls::server_config(&identity, &[agentwire_load::ALPN_H3]).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (tcp, endpoint) = rt.block_on(async {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(quic_tls).unwrap();
        let endpoint = quinn::Endpoint::server(
            quinn::ServerConfig::with_crypto(Arc::new(crypto)),
            "127.0.0.1:0".parse().unwrap(),
        )
        .unwrap();
        (tcp, endpoint)
    });
    let addrs = (tcp.local_addr().unwrap(), endpoint.local_addr().unwrap());
    std::thread::spawn(move || {
        rt.block_on(async move {
            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tcp_tls));
            let h1 = async move {
                loop {
                    let Ok((stream, _)) = tcp.accept().await else {
                        return;
                    };
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let Ok(mut tls) = acceptor.accept(stream).await else {
                            return;
                        };
                        let mut request = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                            match tls.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => request.extend_from_slice(&buf[..n]),
                            }
                        }
                        let mut reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n".to_vec();
                        reply.extend_from_slice(&[b'x'; 1000]);
                        let _ = tls.write_all(&reply).await;
                        let _ = tls.shutdown().await;
                    });
                }
            };
            let h3 = async move {
                while let Some(incoming) = endpoint.accept().await {
                    tokio::spawn(async move {
                        let Ok(conn) = incoming.await else { return };
                        let Ok(mut h3c) = h3::server::builder()
                            .build::<_, bytes::Bytes>(h3_quinn::Connection::new(conn))
                            .await
                        else {
                            return;
                        };
                        while let Ok(Some(resolver)) = h3c.accept().await {
                            tokio::spawn(async move {
                                let Ok((_, mut stream)) = resolver.resolve_request().await else {
                                    return;
                                };
                                let resp = http::Response::builder()
                                    .status(200)
                                    .header("content-length", "2000")
                                    .body(())
                                    .unwrap();
                                let _ = stream.send_response(resp).await;
                                let _ =
                                    stream.send_data(bytes::Bytes::from(vec![b'x'; 1000])).await;
                                let _ = stream.finish().await;
                            });
                        }
                    });
                }
            };
            let _ = tokio::time::timeout(HANG_GUARD, async {
                tokio::join!(h1, h3);
            })
            .await;
        });
    });
    addrs
}

#[test]
fn a_body_shorter_than_content_length_is_wrong_size() {
    let fx = Fixture::new();
    let (tcp, udp) = lying_server(&fx.certs());
    for (proto, addr) in [(Proto::Http11, tcp), (Proto::H3, udp)] {
        let mut c = LoadConfig::new(vec![format!("https://{addr}/1k.bin")]);
        c.proto = proto;
        c.trust = Trust::Ca(fx.ca());
        c.limit = Limit::Requests(4);
        c.request_timeout = Duration::from_secs(5);
        let r = run(&c);
        assert_eq!(r.responses, 0, "{proto}");
        assert_eq!(
            r.errors_of(ErrorKind::WrongSize),
            4,
            "{proto}: {:?} {:?}",
            r.errors_by_kind,
            r.error_examples
        );
        let example = &r.error_examples["wrong-size"];
        assert!(
            example.contains("1000") && example.contains("2000"),
            "{example}"
        );
    }
}

#[test]
fn a_server_that_stops_mid_run_gives_errors_and_the_run_still_ends() {
    let fx = Fixture::new();
    for proto in PROTOS {
        let server = fx.serve();
        let mut c = fx.config(&server, proto, &["/10k.bin"]);
        c.connections = 2;
        c.limit = Limit::Duration(Duration::from_millis(1500));
        c.connect_timeout = Duration::from_millis(300);
        c.request_timeout = Duration::from_secs(2);
        let started = Instant::now();
        let runner = std::thread::spawn(move || load::run(&c));
        std::thread::sleep(Duration::from_millis(500));
        server.stop();
        let r = runner.join().unwrap().unwrap();
        // 1.5 s of run, plus at most one connect or request timeout: far below the guard.
        assert!(started.elapsed() < HANG_GUARD, "{proto}");
        assert!(r.responses > 0, "{proto}: nothing before the stop");
        assert!(
            r.errors > 0,
            "{proto}: no errors after the server stopped: {:?}",
            r.status
        );
        let connect_errors =
            r.errors_of(ErrorKind::ConnectRefused) + r.errors_of(ErrorKind::ConnectTimeout);
        assert!(connect_errors > 0, "{proto}: {:?}", r.errors_by_kind);
    }
}

#[test]
fn without_resume_every_handshake_is_full() {
    let fx = Fixture::new();
    let server = fx.serve();
    for proto in PROTOS {
        let mut c = fx.config(&server, proto, &["/630b.bin"]);
        c.max_requests_per_conn = 1;
        c.limit = Limit::Requests(10);
        let r = run(&c);
        clean(&r);
        assert_eq!(r.handshakes.full, 10, "{proto}: {:?}", r.handshakes);
        assert_eq!(r.handshakes.resumed, 0, "{proto}");
        assert_eq!(r.retried, 0, "{proto}");
    }
}

#[test]
fn resume_uses_session_tickets_on_every_protocol() {
    let fx = Fixture::new();
    let server = fx.serve();
    for proto in PROTOS {
        let mut c = fx.config(&server, proto, &["/630b.bin"]);
        c.max_requests_per_conn = 1;
        c.resume = true;
        c.limit = Limit::Requests(20);
        let r = run(&c);
        clean(&r);
        let h = r.handshakes;
        assert_eq!(h.connections, 20, "{proto}: {h:?}");
        assert_eq!(h.full + h.resumed, h.connections, "{proto}: {h:?}");
        // The first connection has no ticket yet; later ones have the tickets the server sent.
        assert!(h.full >= 1, "{proto}: {h:?}");
        assert!(h.resumed >= 1, "{proto}: {h:?}");
        assert_eq!(h.zero_rtt_accepted + h.zero_rtt_rejected, 0, "{proto}");
    }
}

#[test]
fn zero_rtt_requests_are_accepted_by_serve() {
    let fx = Fixture::new();
    let server = fx.serve();
    let mut c = fx.config(&server, Proto::H3, &["/1k.bin"]);
    c.max_requests_per_conn = 1;
    c.resume = true;
    c.zero_rtt = true;
    c.limit = Limit::Requests(20);
    let r = run(&c);
    clean(&r);
    let h = r.handshakes;
    assert_eq!(r.responses, 20);
    assert!(h.zero_rtt_accepted >= 1, "{h:?}");
    assert_eq!(h.zero_rtt_rejected, 0, "{h:?}");
    assert!(
        h.resumed >= h.zero_rtt_accepted,
        "accepted 0-RTT is a resumption: {h:?}"
    );
    assert_eq!(r.bytes, 20 * size_of("1k.bin"));
}

#[test]
fn zero_rtt_needs_h3_and_resume() {
    let fx = Fixture::new();
    let server = fx.serve();
    let mut c = fx.config(&server, Proto::H2, &["/1k.bin"]);
    c.resume = true;
    c.zero_rtt = true;
    let e = load::run(&c).unwrap_err().to_string();
    assert!(e.contains("h3"), "{e}");
    c.proto = Proto::H3;
    c.resume = false;
    let e = load::run(&c).unwrap_err().to_string();
    assert!(e.contains("--resume"), "{e}");
}

#[test]
fn requests_in_rejected_zero_rtt_are_sent_again_not_lost() {
    let fx = Fixture::new();
    let port = free_port();
    let start = |fx: &Fixture| {
        let mut config = ServeConfig::new(fx.root(), fx.certs());
        config.listen = format!("127.0.0.1:{port}").parse().unwrap();
        config.threads = 1;
        config.generate = true;
        serve::start(config).unwrap()
    };
    let first = start(&fx);
    let mut c = fx.config(&first, Proto::H3, &["/1k.bin"]);
    c.max_requests_per_conn = 1;
    c.resume = true;
    c.zero_rtt = true;
    c.limit = Limit::Duration(Duration::from_millis(2500));
    c.connect_timeout = Duration::from_millis(300);
    // Open loop, so that the few attempts that fail while the server restarts use up only a
    // few of the old tickets (rustls keeps 8; every attempt takes one). At 40 a second the
    // tickets lasted 200 ms of restart, and a loaded 2-core CI machine once took longer (no
    // 0-RTT left to reject); at 10 a second they last 800 ms.
    c.rate = Some(10.0);
    let runner = std::thread::spawn(move || load::run(&c));
    std::thread::sleep(Duration::from_millis(800));
    first.stop();
    // A new server process knows none of the old tickets: it must reject their 0-RTT data.
    let second = start(&fx);
    let r = runner.join().unwrap().unwrap();
    second.stop();
    let h = r.handshakes;
    assert!(h.zero_rtt_accepted >= 1, "{h:?}");
    assert!(h.zero_rtt_rejected >= 1, "{h:?} {:?}", r.error_examples);
    assert!(
        r.retried >= 1,
        "rejected 0-RTT requests go again: {}",
        r.retried
    );
    assert!(
        r.retry_example.as_deref().is_some_and(|e| !e.is_empty()),
        "{:?}",
        r.retry_example
    );
    assert_eq!(r.errors_of(ErrorKind::WrongSize), 0);
    assert!(r.responses > 0);
}

/// A server for tests that ends every connection gracefully after `per_conn` responses of
/// 100 bytes, the way servers with a keep-alive limit do (nginx's `keepalive_requests`):
/// HTTP/2 with a graceful GOAWAY, HTTP/1.1 with `Connection: close`. With `per_conn` 0 it
/// turns every request away: HTTP/2 with REFUSED_STREAM, HTTP/1.1 by closing at once. Stops
/// by itself after `HANG_GUARD`.
fn keepalive_limited_server(certs: &Path, per_conn: usize) -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let identity = agentwire_tls::HubIdentity::from_dir(certs).unwrap();
    let tls = agentwire_tls::server_config(
        &identity,
        &[agentwire_load::ALPN_H2, agentwire_load::ALPN_HTTP11],
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tcp = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = tcp.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    std::thread::spawn(move || {
        rt.block_on(async move {
            let _ = tokio::time::timeout(HANG_GUARD, async move {
                while let Ok((stream, _)) = tcp.accept().await {
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        let Ok(mut tls) = acceptor.accept(stream).await else {
                            return;
                        };
                        if tls.get_ref().1.alpn_protocol() == Some(agentwire_load::ALPN_H2) {
                            let Ok(mut conn) = h2::server::handshake(tls).await else {
                                return;
                            };
                            let mut served = 0;
                            while let Some(Ok((_, mut respond))) = conn.accept().await {
                                if per_conn == 0 {
                                    respond.send_reset(h2::Reason::REFUSED_STREAM);
                                    continue;
                                }
                                let resp = http::Response::builder()
                                    .status(200)
                                    .header("content-length", "100")
                                    .body(())
                                    .unwrap();
                                if let Ok(mut body) = respond.send_response(resp, false) {
                                    let _ = body.send_data(bytes::Bytes::from(vec![b'x'; 100]), true);
                                }
                                served += 1;
                                if served == per_conn {
                                    conn.graceful_shutdown();
                                }
                            }
                            return;
                        }
                        if per_conn == 0 {
                            let _ = tls.shutdown().await;
                            return;
                        }
                        for served in 1..=per_conn {
                            let mut request = Vec::new();
                            let mut buf = [0u8; 1024];
                            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                                match tls.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => request.extend_from_slice(&buf[..n]),
                                }
                            }
                            let close = if served == per_conn { "close" } else { "keep-alive" };
                            let mut reply = format!(
                                "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: {close}\r\n\r\n"
                            )
                            .into_bytes();
                            reply.extend_from_slice(&[b'x'; 100]);
                            if tls.write_all(&reply).await.is_err() {
                                return;
                            }
                        }
                        let _ = tls.shutdown().await;
                    });
                }
            })
            .await;
        });
    });
    addr
}

#[test]
fn requests_a_server_turns_away_gracefully_are_sent_again_not_errors() {
    let fx = Fixture::new();
    let addr = keepalive_limited_server(&fx.certs(), 5);
    for (proto, streams) in [(Proto::H2, 8), (Proto::Http11, 1)] {
        let mut c = LoadConfig::new(vec![format!("https://{addr}/x")]);
        c.proto = proto;
        c.trust = Trust::Ca(fx.ca());
        c.streams = streams;
        c.limit = Limit::Requests(60);
        let r = run(&c);
        clean(&r);
        assert_eq!(r.responses, 60, "{proto}");
        assert_eq!(r.bytes, 60 * 100, "{proto}");
        // HTTP/2: the requests already in flight when the GOAWAY comes are still answered.
        let least = 60 / (5 + streams as u64 - 1);
        assert!(
            r.connections >= least,
            "{proto}: {} connections",
            r.connections
        );
        assert!(
            r.retried > 0,
            "{proto}: the turned-away requests went again"
        );
    }
}

#[test]
fn a_server_that_turns_everything_away_ends_the_run_with_errors() {
    let fx = Fixture::new();
    let addr = keepalive_limited_server(&fx.certs(), 0);
    for proto in [Proto::H2, Proto::Http11] {
        let mut c = LoadConfig::new(vec![format!("https://{addr}/x")]);
        c.proto = proto;
        c.trust = Trust::Ca(fx.ca());
        c.limit = Limit::Requests(3);
        let r = run(&c);
        assert_eq!(r.responses, 0, "{proto}");
        assert_eq!(r.errors, 3, "{proto}: every request fails in the end");
        if proto == Proto::H2 {
            // REFUSED_STREAM: certainly unprocessed, so sent again, up to the bound. (An
            // HTTP/1.1 request on a connection closed under it may have been sent: it fails.)
            assert!(r.retried >= 8, "{proto}: sent again first: {}", r.retried);
            let example = r.error_examples.values().next().cloned();
            let example = example.unwrap_or_default();
            assert!(example.contains("turned away"), "{proto}: {example}");
        }
    }
}
