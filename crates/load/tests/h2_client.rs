//! `load`'s own HTTP/2 client against a raw HTTP/2 server over real TLS on loopback, scripted
//! to misbehave in ways a real server (the h2 crate's) will not: a body shorter than its
//! Content-Length, a frame that breaks the protocol, and silence. Each must be reported as
//! the right kind of error, on the wire too (GOAWAY with the code, RST_STREAM CANCEL), and the
//! run must end by itself. No assertion depends on speed.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentwire_load::load::{self, Limit, LoadConfig, Trust};
use agentwire_load::report::{ErrorKind, LoadReport};
use agentwire_load::Proto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Far more than any of these runs needs; only a hang gets near it.
const HANG_GUARD: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq)]
enum Script {
    /// `content-length: 2000` and 1000 body bytes.
    ShortBody,
    /// The first request is answered; then a HEADERS frame on stream 2, which the client
    /// never opened.
    BreakAfterOne,
    /// Never answers.
    Silent,
}

/// A frame the server received: type, flags, stream, payload.
type Frame = (u8, u8, u32, Vec<u8>);

fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.push(ty);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Starts the scripted server; it records every frame it receives and stops by itself after
/// `HANG_GUARD`.
fn raw_h2_server(certs: &Path, script: Script) -> (SocketAddr, Arc<Mutex<Vec<Frame>>>) {
    let identity = agentwire_tls::HubIdentity::from_dir(certs).unwrap();
    let tls = agentwire_tls::server_config(&identity, &[agentwire_load::ALPN_H2]).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let _ = tokio::time::timeout(HANG_GUARD, async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    let (acceptor, log) = (acceptor.clone(), log.clone());
                    tokio::spawn(async move {
                        let Ok(mut tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let mut preface = [0u8; 24];
                        if tls.read_exact(&mut preface).await.is_err() {
                            return;
                        }
                        let _ = tls.write_all(&frame(0x4, 0, 0, &[])).await;
                        let mut answered = 0;
                        loop {
                            let mut head = [0u8; 9];
                            if tls.read_exact(&mut head).await.is_err() {
                                return;
                            }
                            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
                            let mut payload = vec![0u8; len];
                            if tls.read_exact(&mut payload).await.is_err() {
                                return;
                            }
                            let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
                            log.lock()
                                .unwrap()
                                .push((head[3], head[4], stream, payload));
                            if head[3] != 0x1 {
                                continue;
                            }
                            let reply = match script {
                                Script::ShortBody => {
                                    // :status 200; content-length (static 28) "2000".
                                    let block = [0x88, 0x0f, 0x0d, 4, b'2', b'0', b'0', b'0'];
                                    let mut r = frame(0x1, 0x4, stream, &block);
                                    r.extend(frame(0x0, 0x1, stream, &[b'x'; 1000]));
                                    r
                                }
                                Script::BreakAfterOne if answered == 0 => {
                                    frame(0x1, 0x5, stream, &[0x88])
                                }
                                Script::BreakAfterOne => frame(0x1, 0x5, 2, &[0x88]),
                                Script::Silent => continue,
                            };
                            answered += 1;
                            if tls.write_all(&reply).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            })
            .await;
        });
    });
    (addr, seen)
}

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        Fixture {
            dir: common::test_dir(),
        }
    }

    fn run(&self, script: Script, requests: u64) -> (LoadReport, Vec<Frame>) {
        let (addr, seen) = raw_h2_server(&self.dir.path().join("certs"), script);
        let mut c = LoadConfig::new(vec![format!("https://{addr}/x")]);
        c.proto = Proto::H2;
        c.trust = Trust::Ca(self.dir.path().join("certs/ca.pem"));
        c.limit = Limit::Requests(requests);
        c.request_timeout = Duration::from_millis(400);
        let report = load::run(&c).unwrap();
        // The client's last frames (GOAWAY, RST_STREAM) may still be on their way.
        std::thread::sleep(Duration::from_millis(200));
        let frames = seen.lock().unwrap().clone();
        (report, frames)
    }
}

#[test]
fn a_short_body_is_wrong_size() {
    let (r, _) = Fixture::new().run(Script::ShortBody, 4);
    assert_eq!(r.responses, 0);
    assert_eq!(
        r.errors_of(ErrorKind::WrongSize),
        4,
        "{:?}",
        r.error_examples
    );
    let example = &r.error_examples["wrong-size"];
    assert!(
        example.contains("1000") && example.contains("2000"),
        "{example}"
    );
}

#[test]
fn a_broken_frame_ends_that_connection_with_goaway_and_the_run_goes_on() {
    let (r, frames) = Fixture::new().run(Script::BreakAfterOne, 4);
    // Per connection: one response, then the next request fails with a protocol error.
    assert_eq!(r.requests, 4);
    assert_eq!(r.responses, 2, "{:?}", r.error_examples);
    assert_eq!(
        r.errors_of(ErrorKind::Protocol),
        2,
        "{:?}",
        r.errors_by_kind
    );
    let example = &r.error_examples["protocol"];
    assert!(
        example.contains("PROTOCOL_ERROR") && example.contains("never opened"),
        "{example}"
    );
    let goaways: Vec<&Frame> = frames.iter().filter(|f| f.0 == 0x7).collect();
    assert!(
        goaways.iter().any(
            |f| f.3[4..8] == 1u32.to_be_bytes() && f.3[8..].starts_with(b"HEADERS on a stream")
        ),
        "no GOAWAY(PROTOCOL_ERROR): {goaways:?}"
    );
}

#[test]
fn a_silent_server_times_out_and_the_streams_are_cancelled() {
    let (r, frames) = Fixture::new().run(Script::Silent, 2);
    assert_eq!(r.responses, 0);
    assert_eq!(r.errors_of(ErrorKind::Timeout), 2, "{:?}", r.errors_by_kind);
    let cancels: Vec<u32> = frames
        .iter()
        .filter(|f| f.0 == 0x3 && f.3 == 8u32.to_be_bytes())
        .map(|f| f.2)
        .collect();
    assert_eq!(
        cancels,
        [1, 3],
        "RST_STREAM(CANCEL) for each timed-out stream: {frames:?}"
    );
    // The connection stays open between them, and ends with a graceful GOAWAY.
    assert!(frames.iter().any(|f| f.0 == 0x7 && f.3[4..8] == [0; 4]));
}
