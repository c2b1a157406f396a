//! `serve`'s HTTP/3 layer against a raw QUIC client (quinn, ALPN `h3`) that sends what a real
//! client should not: a malformed frame or header section closes that one connection with
//! its HTTP/3 error code, a malformed request resets only its own stream (as does one whose
//! headers do not come in time), and every other connection goes on being served. Also: a
//! loopback client set up as agentwire's own gets its download in loopback-sized datagrams.
//! No assertion depends on speed; timeouts only catch hangs.

mod common;

use std::sync::Arc;
use std::time::Duration;

use agentwire_load::serve::{self, ServeConfig, ServerHandle};
use agentwire_tls::HubTrust;

const HANG_GUARD: Duration = Duration::from_secs(20);

struct Setup {
    _dir: tempfile::TempDir,
    server: ServerHandle,
    client: quinn::ClientConfig,
}

fn setup() -> Setup {
    setup_with(|_| {})
}

fn setup_with(adjust: impl FnOnce(&mut ServeConfig)) -> Setup {
    let dir = common::test_dir();
    let certs = dir.path().join("certs");
    let mut config = ServeConfig::new(dir.path().join("www"), certs.clone());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.threads = 1;
    config.generate = true;
    adjust(&mut config);
    let server = serve::start(config).unwrap();
    let trust = HubTrust::ca_file(&certs.join("ca.pem")).unwrap();
    let tls = agentwire_tls::client_config(&trust, &[b"h3"]).unwrap();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    Setup {
        _dir: dir,
        server,
        client: quinn::ClientConfig::new(Arc::new(crypto)),
    }
}

impl Setup {
    /// A new connection from a new endpoint (created inside the test's runtime).
    async fn connect(&self) -> quinn::Connection {
        let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        endpoint
            .connect_with(self.client.clone(), self.server.local_addr(), "127.0.0.1")
            .unwrap()
            .await
            .unwrap()
    }
}

/// A HEADERS frame around an encoded field section that uses only the static table.
fn headers(section: &[u8]) -> Vec<u8> {
    assert!(section.len() < 64);
    let mut f = vec![0x01, section.len() as u8];
    f.extend_from_slice(section);
    f
}

/// GET https://127.0.0.1 `path`: Required Insert Count 0, base 0, :method GET (static 17),
/// :scheme https (static 23), :path as a literal with static name 1.
fn get(path: &str) -> Vec<u8> {
    let mut s = vec![0x00, 0x00, 0xc0 | 17, 0xc0 | 23, 0x51, path.len() as u8];
    s.extend_from_slice(path.as_bytes());
    headers(&s)
}

/// Sends `bytes` as a whole request stream and returns what comes back (or the reset).
async fn request(conn: &quinn::Connection, bytes: &[u8]) -> Result<Vec<u8>, quinn::ReadError> {
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    send.write_all(bytes).await.unwrap();
    send.finish().unwrap();
    let mut out = Vec::new();
    loop {
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => out.extend_from_slice(&chunk.bytes),
            Ok(None) => return Ok(out),
            Err(quinn::ReadError::Reset(code)) => return Err(quinn::ReadError::Reset(code)),
            Err(e) => return Err(e),
        }
    }
}

/// Checks a response to GET /1k.bin: a HEADERS frame, then one DATA frame of 1024 bytes.
fn assert_1k_response(bytes: &[u8]) {
    assert_eq!(bytes[0], 0x01, "starts with HEADERS");
    let headers_len = usize::from(bytes[1]);
    assert!(headers_len < 64);
    let data = &bytes[2 + headers_len..];
    assert_eq!(
        &data[..3],
        &[0x00, 0x44, 0x00],
        "a DATA frame of 1024 bytes"
    );
    assert_eq!(data.len(), 3 + 1024);
}

/// How the server closed `conn`: its application error code.
async fn close_code(conn: &quinn::Connection) -> u64 {
    match tokio::time::timeout(HANG_GUARD, conn.closed()).await {
        Ok(quinn::ConnectionError::ApplicationClosed(close)) => close.error_code.into_inner(),
        other => panic!("expected an application close, got {other:?}"),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn malformed_frames_close_one_connection_and_the_rest_are_served() {
    let s = setup();
    runtime().block_on(async {
        let healthy = s.connect().await;
        assert_1k_response(&request(&healthy, &get("/1k.bin")).await.unwrap());

        // DATA before HEADERS on a request stream: H3_FRAME_UNEXPECTED for the connection.
        let bad = s.connect().await;
        let _ = request(&bad, &[0x00, 0x01, 0x00]).await;
        assert_eq!(close_code(&bad).await, 0x105);

        // A section that refers to the dynamic table: QPACK_DECOMPRESSION_FAILED.
        let bad = s.connect().await;
        let _ = request(&bad, &headers(&[0x01, 0x00, 0xc0 | 17])).await;
        assert_eq!(close_code(&bad).await, 0x200);

        // A control stream that does not begin with SETTINGS: H3_MISSING_SETTINGS.
        let bad = s.connect().await;
        let mut control = bad.open_uni().await.unwrap();
        control.write_all(&[0x00, 0x07, 0x01, 0x00]).await.unwrap();
        assert_eq!(close_code(&bad).await, 0x10a);

        // A push stream from a client: H3_STREAM_CREATION_ERROR.
        let bad = s.connect().await;
        let mut push = bad.open_uni().await.unwrap();
        push.write_all(&[0x01, 0x00]).await.unwrap();
        assert_eq!(close_code(&bad).await, 0x103);

        // The first connection never noticed any of it.
        assert_1k_response(&request(&healthy, &get("/1k.bin")).await.unwrap());
        assert!(healthy.close_reason().is_none());
    });
}

#[test]
fn malformed_requests_reset_their_stream_only() {
    let s = setup();
    runtime().block_on(async {
        let conn = s.connect().await;
        // A well-formed SETTINGS-first control stream, as a client sends.
        let mut control = conn.open_uni().await.unwrap();
        control
            .write_all(&[0x00, 0x04, 0x02, 0x01, 0x00])
            .await
            .unwrap();
        // No :path: H3_MESSAGE_ERROR on that stream.
        let no_path = headers(&[0x00, 0x00, 0xc0 | 17, 0xc0 | 23]);
        match request(&conn, &no_path).await {
            Err(quinn::ReadError::Reset(code)) => assert_eq!(code.into_inner(), 0x10e),
            other => panic!("expected a reset, got {other:?}"),
        }
        // A stream that ends before its HEADERS frame is whole: H3_REQUEST_INCOMPLETE.
        match request(&conn, &get("/1k.bin")[..5]).await {
            Err(quinn::ReadError::Reset(code)) => assert_eq!(code.into_inner(), 0x10d),
            other => panic!("expected a reset, got {other:?}"),
        }
        // A frame type HTTP/3 does not know comes first and is skipped; the request is
        // answered, and so is a 404 on the same connection.
        let mut greased = vec![0x40, 0x21, 0x02, 0xaa, 0xbb];
        greased.extend_from_slice(&get("/1k.bin"));
        assert_1k_response(&request(&conn, &greased).await.unwrap());
        let missing = request(&conn, &get("/none.bin")).await.unwrap();
        assert_eq!(
            &missing[..5],
            &[0x01, missing[1], 0x00, 0x00, 0xc0 | 27],
            "404"
        );
        assert!(conn.close_reason().is_none());
        tokio::time::timeout(HANG_GUARD, async {
            conn.close(0u32.into(), b"done");
        })
        .await
        .unwrap();
    });
}

#[test]
fn a_request_whose_headers_never_complete_is_rejected_and_the_connection_goes_on() {
    let s = setup_with(|c| c.request_head_timeout = Duration::from_millis(300));
    runtime().block_on(async {
        let conn = s.connect().await;
        // Half a HEADERS frame, and the stream left open: the server waits, then gives up on
        // it with H3_REQUEST_REJECTED (0x10b), not on the connection.
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        send.write_all(&get("/1k.bin")[..4]).await.unwrap();
        let reset = tokio::time::timeout(HANG_GUARD, recv.read_chunk(usize::MAX, true))
            .await
            .expect("the server gave up on the stream");
        match reset {
            Err(quinn::ReadError::Reset(code)) => assert_eq!(code.into_inner(), 0x10b),
            other => panic!("expected a reset, got {other:?}"),
        }
        assert_1k_response(&request(&conn, &get("/1k.bin")).await.unwrap());
        assert!(conn.close_reason().is_none());
    });
}

#[test]
fn loopback_downloads_come_in_loopback_sized_datagrams() {
    let s = setup();
    runtime().block_on(async {
        let settings = agentwire_transport::QuicSettings {
            datagrams: false,
            ..agentwire_transport::QuicSettings::default()
        };
        let (socket, _) = settings.bind_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let endpoint = agentwire_transport::quic::endpoint_on(socket, &settings, None).unwrap();
        let config = agentwire_transport::quic::client_config_for(
            &s.client,
            &settings,
            s.server.local_addr(),
            "test",
        );
        let conn = endpoint
            .connect_with(config, s.server.local_addr(), "127.0.0.1")
            .unwrap()
            .await
            .unwrap();
        let response = tokio::time::timeout(HANG_GUARD, request(&conn, &get("/1m.bin")))
            .await
            .expect("the download finishes")
            .expect("the download is not reset");
        assert!(response.len() > 1024 * 1024, "{} bytes", response.len());
        let stats = conn.stats();
        assert!(
            stats.path.current_mtu >= 60_000,
            "datagram size {}",
            stats.path.current_mtu
        );
        // 1 MiB in 1,452-byte datagrams would take over 700 of them.
        assert!(
            stats.udp_rx.datagrams < 200,
            "{} datagrams received",
            stats.udp_rx.datagrams
        );
    });
}
