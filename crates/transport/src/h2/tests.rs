//! The HTTP/2 transport's tests, over real TLS on loopback: sessions, message streams, limits, close.

use super::*;
use agentwire_proto::Priority;
use agentwire_tls::{self as tls, CertBundle, HubIdentity, HubTrust};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

type Halves = (H2Sender, H2Receiver);

const GUARD: Duration = Duration::from_secs(30);

fn bundle() -> CertBundle {
    tls::generate(&["localhost".into(), "127.0.0.1".into()]).unwrap()
}

async fn start_hub(
    bundle: &CertBundle,
) -> (SocketAddr, JoinHandle<Result<Halves, TransportError>>) {
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let config = Arc::new(tls::server_config(&identity, &[ALPN_H2]).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hub = tokio::spawn(async move {
        let (tcp, peer) = listener
            .accept()
            .await
            .map_err(|e| TransportError::io("accept", e))?;
        let tls = tokio_rustls::TlsAcceptor::from(config)
            .accept(tcp)
            .await
            .map_err(|e| ConnectError::tls_handshake("TLS accept", e))?;
        accept(tls, Some(peer), Duration::from_secs(10)).await
    });
    (addr, hub)
}

async fn connect_agent(addr: SocketAddr, ca_pem: &str) -> Result<Halves, TransportError> {
    let trust = HubTrust::ca_pem(ca_pem).unwrap();
    let config = tls::client_config(&trust, &[ALPN_H2]).unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost".to_string()).unwrap();
    connect(addr, Arc::new(config), name).await
}

/// (hub, agent), the hub's limit raised past the hello's as the hub does after a hello.
async fn pair() -> (Halves, Halves) {
    let bundle = bundle();
    let (addr, hub) = start_hub(&bundle).await;
    let agent = connect_agent(addr, &bundle.ca_cert_pem).await.unwrap();
    let mut hub = hub.await.unwrap().unwrap();
    hub.1.set_max_frame_size(Limits::default().max_frame_size);
    (hub, agent)
}

fn raw(type_byte: u8, payload: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(payload.len() + 5);
    out.extend_from_slice(&(payload.len() as u32 + 1).to_be_bytes());
    out.push(type_byte);
    out.extend_from_slice(payload);
    Bytes::from(out)
}

const MSG: SendClass = SendClass::Message(Priority::Medium);

async fn guarded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(GUARD, f)
        .await
        .expect("test timed out")
}

#[tokio::test]
async fn session_and_messages_round_trip_both_ways() {
    guarded(async {
        let ((hub_tx, mut hub_rx), (agent_tx, mut agent_rx)) = pair().await;
        let subscribe = Frame::Subscribe("news".into())
            .encode(Codec::MsgPack)
            .unwrap();
        agent_tx
            .send_frame(subscribe.clone(), SendClass::Control)
            .await
            .unwrap();
        let beat = raw(FrameType::Heartbeat as u8, &[0u8; 16]);
        agent_tx
            .send_frame(beat.clone(), SendClass::Heartbeat)
            .await
            .unwrap();
        for i in 0..100u32 {
            agent_tx
                .send_frame(raw(0x10, &i.to_be_bytes()), MSG)
                .await
                .unwrap();
        }
        let mut control = Vec::new();
        let mut seen = [false; 100];
        for _ in 0..102 {
            let f = hub_rx.recv_frame().await.unwrap().unwrap();
            if f.type_byte == 0x10 {
                let i = u32::from_be_bytes(f.payload[..].try_into().unwrap());
                seen[i as usize] = true;
            } else {
                control.push(f.type_byte);
            }
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(
            control,
            vec![FrameType::Subscribe as u8, FrameType::Heartbeat as u8]
        );

        hub_tx
            .send_frame(raw(0x02, b"welcome"), SendClass::Control)
            .await
            .unwrap();
        for i in 0..100u32 {
            hub_tx
                .send_frame(raw(0x10, &i.to_be_bytes()), MSG)
                .await
                .unwrap();
        }
        let first = agent_rx.recv_frame().await.unwrap().unwrap();
        assert_eq!(first.type_byte, 0x02);
        for i in 0..100u32 {
            let f = agent_rx.recv_frame().await.unwrap().unwrap();
            assert_eq!(&f.payload[..], &i.to_be_bytes(), "hub→agent order");
        }
        let stats = agent_tx.stats();
        assert_eq!(stats.transport, "http2");
        // Messages this small ride the session stream: no stream but the session's.
        assert_eq!(stats.streams_opened, 1);
        assert!(stats.bytes_sent > 0 && stats.bytes_received > 0);
        assert!(hub_tx.stats().bytes_received >= stats.bytes_sent);
    })
    .await;
}

/// A frame of `len` bytes in all (length prefix and type byte included) whose payload
/// starts with `tag`.
fn sized(tag: u32, len: usize) -> Bytes {
    let mut payload = vec![0u8; len - FRAME_HEADER_LEN - 1];
    payload[..4].copy_from_slice(&tag.to_be_bytes());
    raw(0x10, &payload)
}

#[tokio::test]
async fn small_messages_ride_the_session_stream_and_large_ones_get_their_own() {
    guarded(async {
        let ((_hub_tx, mut hub_rx), (agent_tx, _agent_rx)) = pair().await;
        let small = [SESSION_MESSAGE_MAX, SESSION_MESSAGE_MAX - 1, 64];
        let large = [SESSION_MESSAGE_MAX + 1, 100 * 1024, 1024 * 1024];
        let mut sent = Vec::new();
        for (i, len) in small.iter().chain(&large).enumerate() {
            let frame = sized(i as u32, *len);
            // Fed and flushed, as the agent's writer does, and sent at once.
            if i % 2 == 0 {
                agent_tx.feed_frame(frame.clone(), MSG).await.unwrap();
                agent_tx.flush().await.unwrap();
            } else {
                agent_tx.send_frame(frame.clone(), MSG).await.unwrap();
            }
            sent.push(frame);
        }
        let mut got = Vec::new();
        for _ in 0..sent.len() {
            let f = hub_rx.recv_frame().await.unwrap().unwrap();
            got.push(f.to_wire());
        }
        // Large messages may overtake or trail the others; every one arrives whole, once.
        got.sort();
        sent.sort();
        assert_eq!(got, sent);
        assert_eq!(agent_tx.stats().streams_opened, 1 + large.len() as u64);
    })
    .await;
}

#[tokio::test]
async fn four_mib_frames_go_through_both_ways() {
    guarded(async {
        let ((hub_tx, mut hub_rx), (agent_tx, mut agent_rx)) = pair().await;
        let payload: Vec<u8> = (0..4 * 1024 * 1024).map(|i| (i % 251) as u8).collect();
        let big = raw(0x10, &payload);
        let (a, b) = tokio::join!(
            agent_tx.send_frame(big.clone(), MSG),
            hub_tx.send_frame(big.clone(), MSG)
        );
        a.unwrap();
        b.unwrap();
        let at_hub = hub_rx.recv_frame().await.unwrap().unwrap();
        assert_eq!(at_hub.payload.len(), payload.len());
        assert!(at_hub.payload[..] == payload[..]);
        let at_agent = agent_rx.recv_frame().await.unwrap().unwrap();
        assert!(at_agent.payload[..] == payload[..]);
    })
    .await;
}

#[tokio::test]
async fn wrong_ca_is_reported() {
    guarded(async {
        let hub_bundle = bundle();
        let other = bundle();
        let (addr, _hub) = start_hub(&hub_bundle).await;
        let err = match connect_agent(addr, &other.ca_cert_pem).await {
            Ok(_) => panic!("connected with the wrong CA"),
            Err(e) => e,
        };
        assert!(matches!(err, TransportError::Connect(_)), "{err:?}");
        assert!(
            err.to_string().contains("not signed by the trusted CA"),
            "{err}"
        );
    })
    .await;
}

/// The session stream is read as soon as it opens, before the hub holds the receiver: a first
/// frame over a hello's size must be refused even when the whole of it arrived before the
/// hub set any limit (it used to be read whole under the default limit and welcomed).
#[tokio::test]
async fn a_first_frame_over_the_hello_limit_is_refused_before_the_hub_reads() {
    guarded(async {
        let bundle = bundle();
        let (addr, hub) = start_hub(&bundle).await;
        let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
        let config = tls::client_config(&trust, &[ALPN_H2]).unwrap();
        let name = rustls_pki_types::ServerName::try_from("localhost".to_string()).unwrap();
        let first = raw(0x01, &vec![b'x'; 100_000]);
        let (_agent_tx, _agent_rx) = connect_sending(addr, Arc::new(config), name, Some(first))
            .await
            .unwrap();
        let (_hub_tx, mut hub_rx) = hub.await.unwrap().unwrap();
        // Time for the whole frame to arrive before the hub asks for anything.
        tokio::time::sleep(Duration::from_millis(300)).await;
        match hub_rx.recv_frame().await {
            Err(TransportError::Frame(FrameError::TooLarge { len, max })) => {
                assert_eq!(len, 100_001);
                assert_eq!(max, agentwire_proto::MAX_HELLO_FRAME);
            }
            Ok(Some(f)) => panic!("a {}-byte first frame was read whole", f.payload.len()),
            other => panic!("expected TooLarge, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn oversized_message_frame_is_refused() {
    guarded(async {
        let ((_hub_tx, mut hub_rx), (agent_tx, _agent_rx)) = pair().await;
        hub_rx.set_max_frame_size(1024);
        agent_tx
            .send_frame(raw(0x10, &[7u8; 4096]), MSG)
            .await
            .unwrap();
        match hub_rx.recv_frame().await {
            Err(TransportError::Frame(FrameError::TooLarge { len, max })) => {
                assert_eq!(len, 4097);
                assert_eq!(max, 1024);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn garbage_on_a_message_stream_is_an_error() {
    guarded(async {
        let ((_hub_tx, mut hub_rx), (agent_tx, _agent_rx)) = pair().await;
        // Large enough for a message stream of its own (smaller ones share the session
        // stream, where bytes after a frame are the next frame).
        let mut two = sized(1, SESSION_MESSAGE_MAX + 1).to_vec();
        two.extend_from_slice(b"garbage");
        agent_tx.send_frame(Bytes::from(two), MSG).await.unwrap();
        match hub_rx.recv_frame().await {
            Err(TransportError::Frame(FrameError::Trailing(7))) => {}
            other => panic!("expected Trailing, got {other:?}"),
        }
    })
    .await;
    guarded(async {
        let ((_hub_tx, mut hub_rx), (agent_tx, _agent_rx)) = pair().await;
        // Announces 100 bytes more than it carries, on a message stream of its own.
        let whole = sized(1, SESSION_MESSAGE_MAX + 1);
        let mut cut = whole.to_vec();
        let announced = (whole.len() - 4 + 100) as u32;
        cut[..4].copy_from_slice(&announced.to_be_bytes());
        agent_tx.send_frame(Bytes::from(cut), MSG).await.unwrap();
        match hub_rx.recv_frame().await {
            Err(TransportError::Frame(FrameError::Truncated { .. })) => {}
            other => panic!("expected Truncated, got {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn hub_close_sends_goodbye_and_ends_both_sides() {
    guarded(async {
        let ((hub_tx, mut hub_rx), (agent_tx, mut agent_rx)) = pair().await;
        hub_tx.send_frame(raw(0x10, b"last"), MSG).await.unwrap();
        hub_tx.close(ErrorCode::ShuttingDown, "maintenance");
        let last = agent_rx.recv_frame().await.unwrap().unwrap();
        assert_eq!(&last.payload[..], b"last");
        let bye = agent_rx.recv_frame().await.unwrap().unwrap();
        match Frame::decode(&bye, Codec::MsgPack).unwrap() {
            Frame::Goodbye(g) => {
                assert_eq!(g.code, ErrorCode::ShuttingDown);
                assert_eq!(g.reason, "maintenance");
            }
            other => panic!("expected Goodbye, got {other:?}"),
        }
        assert!(agent_rx.recv_frame().await.unwrap().is_none());
        match agent_tx.closed().await {
            TransportError::Closed { code, .. } => {
                assert_eq!(code, Some(ErrorCode::ShuttingDown))
            }
            other => panic!("unexpected {other:?}"),
        }
        match hub_tx.closed().await {
            TransportError::Closed { code, .. } => {
                assert_eq!(code, Some(ErrorCode::ShuttingDown))
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(hub_rx.recv_frame().await.is_err());
        assert!(agent_tx.send_frame(raw(0x10, b"late"), MSG).await.is_err());
    })
    .await;
}

/// A bare HTTP/2 client (the `h2` crate's) connected to the hub at `addr`.
async fn raw_client(bundle: &CertBundle, addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
    let config = Arc::new(tls::client_config(&trust, &[ALPN_H2]).unwrap());
    let name = rustls_pki_types::ServerName::try_from("localhost".to_string()).unwrap();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .unwrap();
    let (requests, conn) = client_builder().handshake::<_, Bytes>(tls).await.unwrap();
    tokio::spawn(conn);
    requests.ready().await.unwrap()
}

/// An HTTP/2 server over TLS on loopback that serves one connection's first request with
/// `serve` (given the request body and the way to answer).
async fn bare_server<F, Fut>(bundle: &CertBundle, serve: F) -> SocketAddr
where
    F: FnOnce(RecvStream, h2::server::SendResponse<Bytes>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let config = Arc::new(tls::server_config(&identity, &[ALPN_H2]).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = tokio_rustls::TlsAcceptor::from(config)
            .accept(tcp)
            .await
            .unwrap();
        let mut conn = h2::server::handshake(tls).await.unwrap();
        let (request, respond) = conn.accept().await.unwrap().unwrap();
        tokio::spawn(serve(request.into_body(), respond));
        // Drive the connection until the client goes.
        while let Some(Ok(_)) = conn.accept().await {}
    });
    addr
}

/// The first frame leaves with the session request, before the hub answers: a server that
/// answers only once it has read the first frame still gets it (connecting used to wait
/// for the answer first, a round trip more than the other transports).
#[tokio::test]
async fn the_first_frame_does_not_wait_for_the_session_answer() {
    guarded(async {
        let bundle = bundle();
        let first = raw(FrameType::Hello as u8, b"hello");
        let want = first.clone();
        let (got_tx, got_rx) = tokio::sync::oneshot::channel();
        let addr = bare_server(&bundle, move |mut body, mut respond| async move {
            let mut got = Vec::new();
            while got.len() < want.len() {
                let Some(Ok(chunk)) = body.data().await else {
                    break;
                };
                got.extend_from_slice(&chunk);
            }
            let _ = got_tx.send(got);
            let response = http::Response::builder()
                .status(StatusCode::OK)
                .body(())
                .unwrap();
            let _stream = respond.send_response(response, false).unwrap();
            std::future::pending::<()>().await;
        })
        .await;
        let (sender, _receiver) = connect_agent(addr, &bundle.ca_cert_pem).await.unwrap();
        sender
            .send_frame(first.clone(), SendClass::Control)
            .await
            .unwrap();
        assert_eq!(got_rx.await.unwrap(), first.to_vec());
    })
    .await;
}

/// A server that refuses the session request ends the connection with its answer.
#[tokio::test]
async fn a_refused_session_is_reported_by_the_receiver() {
    guarded(async {
        let bundle = bundle();
        let addr = bare_server(&bundle, |_body, mut respond| async move {
            let response = http::Response::builder()
                .status(StatusCode::NOT_FOUND)
                .body(())
                .unwrap();
            let _ = respond.send_response(response, true);
        })
        .await;
        let (_sender, mut receiver) = connect_agent(addr, &bundle.ca_cert_pem).await.unwrap();
        let err = receiver.recv_frame().await.unwrap_err();
        assert!(
            err.to_string()
                .contains("answered 404 Not Found to the HTTP/2 session request"),
            "{err}"
        );
    })
    .await;
}

#[tokio::test]
async fn unknown_paths_and_early_messages_are_refused() {
    guarded(async {
        let bundle = bundle();
        let (addr, _hub) = start_hub(&bundle).await;
        let mut requests = raw_client(&bundle, addr).await;
        let cases = [
            (Method::POST, "/nope", StatusCode::NOT_FOUND),
            (Method::GET, SESSION_PATH, StatusCode::METHOD_NOT_ALLOWED),
            (Method::POST, MESSAGE_PATH, StatusCode::BAD_REQUEST),
        ];
        for (method, path, want) in cases {
            let request = Request::builder()
                .method(method)
                .uri(format!("https://localhost{path}"))
                .body(())
                .unwrap();
            let (response, _body) = requests.send_request(request, true).unwrap();
            assert_eq!(response.await.unwrap().status(), want, "{path}");
        }
    })
    .await;
}

/// Message streams are answered `204` whether their body arrived whole (read in the
/// connection driver, the answer held until the driver has read everything) or in two
/// parts (read by a task); both frames reach the receiver.
#[tokio::test]
async fn message_streams_are_answered_whole_or_split() {
    guarded(async {
        let bundle = bundle();
        let (addr, hub) = start_hub(&bundle).await;
        let mut requests = raw_client(&bundle, addr).await;
        let post = |path: &str| {
            Request::builder()
                .method(Method::POST)
                .uri(format!("https://localhost{path}"))
                .header(header::CONTENT_TYPE, CONTENT_TYPE)
                .body(())
                .unwrap()
        };
        let (_session, _session_body) = requests.send_request(post(SESSION_PATH), false).unwrap();
        let (_hub_tx, mut hub_rx) = hub.await.unwrap().unwrap();

        let mut answers = Vec::new();
        for n in 0..8u8 {
            let (answer, mut body) = requests.send_request(post(MESSAGE_PATH), false).unwrap();
            body.send_data(raw(0x10, &[n; 100]), true).unwrap();
            answers.push(answer);
        }
        let (split_answer, mut split) = requests.send_request(post(MESSAGE_PATH), false).unwrap();
        let whole = raw(0x10, b"split");
        split.send_data(whole.slice(..3), false).unwrap();
        let mut seen = Vec::new();
        for _ in 0..8 {
            seen.push(hub_rx.recv_frame().await.unwrap().unwrap().payload[0]);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..8).collect::<Vec<u8>>());
        split.send_data(whole.slice(3..), true).unwrap();
        let last = hub_rx.recv_frame().await.unwrap().unwrap();
        assert_eq!(&last.payload[..], b"split");
        answers.push(split_answer);
        for answer in answers {
            assert_eq!(answer.await.unwrap().status(), StatusCode::NO_CONTENT);
        }
    })
    .await;
}

#[tokio::test]
async fn dropping_the_handles_ends_the_session() {
    guarded(async {
        let (hub, (agent_tx, mut agent_rx)) = pair().await;
        drop(hub);
        assert!(agent_rx.recv_frame().await.unwrap().is_none());
        agent_tx.closed().await;
    })
    .await;
}

#[tokio::test]
async fn agent_close_delivers_goodbye_to_the_hub() {
    guarded(async {
        let ((hub_tx, mut hub_rx), (agent_tx, _agent_rx)) = pair().await;
        agent_tx.close(ErrorCode::Normal, "done");
        let bye = hub_rx.recv_frame().await.unwrap().unwrap();
        assert_eq!(bye.type_byte, FrameType::Goodbye as u8);
        assert!(hub_rx.recv_frame().await.unwrap().is_none());
        hub_tx.closed().await;
        agent_tx.closed().await;
    })
    .await;
}
