//! The counted goodbye over real QUIC on loopback (`agentwire_proto::counted_goodbye`): a
//! receiver passes a peer's goodbye on only after every message stream the peer opened before
//! it, however late the receiver reads and even when the peer closed the connection right after
//! its goodbye; and a peer that names more streams than it opened holds its goodbye only while
//! the connection lives.

use std::sync::Arc;
use std::time::Duration;

use agentwire::tls::{self, HubIdentity, HubTrust};
use agentwire::transport::quic::{split_connection, QuicReceiver, QuicSender};
use agentwire::transport::{FrameReceiver, FrameSender, SendClass};
use agentwire::{QuicSettings, StreamMapping};
use agentwire_proto::{counted_goodbye, Codec, ErrorCode, Frame, FrameType, Goodbye, Priority};
use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};

const MAX_FRAME: u32 = 1 << 20;

/// Two ends of one QUIC connection on loopback, split as agents and hubs split them; the
/// client's connection too, to close it.
async fn pair(mapping: StreamMapping) -> (QuicSender, QuicReceiver, quinn::Connection) {
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let transport = Arc::new(QuicSettings::default().transport_config().unwrap());
    let server_tls = tls::server_config(&identity, &[tls::ALPN_AGENTWIRE]).unwrap();
    let mut server_config =
        quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(server_tls).unwrap()));
    server_config.transport_config(transport.clone());
    let server = quinn::Endpoint::server(server_config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.local_addr().unwrap();
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
    let client_tls = tls::client_config(&trust, &[tls::ALPN_AGENTWIRE]).unwrap();
    let mut client_config =
        quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(client_tls).unwrap()));
    client_config.transport_config(transport);
    let client = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();

    let accepting = tokio::spawn(async move {
        let conn = server.accept().await.unwrap().await.unwrap();
        let control = conn.accept_bi().await.unwrap();
        // The endpoint lives as long as the connection needs it.
        std::mem::forget(server);
        (conn, control)
    });
    let conn = client
        .connect_with(client_config, addr, "localhost")
        .unwrap()
        .await
        .unwrap();
    std::mem::forget(client);
    let mut control = conn.open_bi().await.unwrap();
    // The control stream reaches the peer with its first bytes: a first control frame.
    control.0.write_all(&frame(0)).await.unwrap();
    let (server_conn, server_control) = accepting.await.unwrap();
    let (sender, _) = split_connection(conn.clone(), control, mapping, false, MAX_FRAME);
    let (_, receiver) = split_connection(server_conn, server_control, mapping, false, MAX_FRAME);
    sender.keep_sent_streams();
    (sender, receiver, conn)
}

/// A frame the transport does not interpret, numbered.
fn frame(n: u32) -> Bytes {
    let mut out = Vec::from((5u32).to_be_bytes());
    out.push(FrameType::Envelope as u8);
    out.extend_from_slice(&n.to_be_bytes());
    Bytes::from(out)
}

fn goodbye() -> Bytes {
    Frame::Goodbye(Goodbye {
        code: ErrorCode::Normal,
        reason: "done".into(),
    })
    .encode(Codec::MsgPack)
    .unwrap()
}

/// Everything the receiver hands on, up to and including the goodbye: message numbers, then
/// whether the goodbye came.
async fn read_all(receiver: &mut QuicReceiver) -> (Vec<u32>, bool) {
    let mut numbers = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(20), receiver.recv_frame()).await {
            Ok(Ok(Some(raw))) if raw.type_byte == FrameType::Goodbye as u8 => {
                return (numbers, true)
            }
            Ok(Ok(Some(raw))) => {
                numbers.push(u32::from_be_bytes(raw.payload[..4].try_into().unwrap()))
            }
            Ok(Ok(None)) | Ok(Err(_)) => return (numbers, false),
            Err(_) => panic!("nothing for 20 s after {} frames", numbers.len()),
        }
    }
}

#[tokio::test]
async fn every_message_before_a_counted_goodbye_even_after_the_close() {
    const MESSAGES: u32 = 400;
    for mapping in [StreamMapping::PerMessage, StreamMapping::Lanes] {
        let (sender, mut receiver, conn) = pair(mapping).await;
        sender.count_streams_in_goodbye();
        for n in 1..=MESSAGES {
            let class = match n % 3 {
                0 => SendClass::Request(Priority::Medium),
                1 => SendClass::Message(Priority::High),
                _ => SendClass::Message(Priority::Low),
            };
            sender.send_frame(frame(n), class).await.unwrap();
        }
        // As an agent closes: everything acknowledged, the goodbye, and the connection
        // closed at once, before the receiver has read anything.
        sender.delivered().await;
        sender
            .send_frame(goodbye(), SendClass::Control)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        conn.close(0u32.into(), b"closed right after the goodbye");
        tokio::time::sleep(Duration::from_millis(100)).await;

        let (mut numbers, goodbye) = read_all(&mut receiver).await;
        assert!(goodbye, "{mapping:?}: the goodbye did not come");
        assert_eq!(
            numbers.first(),
            Some(&0),
            "{mapping:?}: the control frame first"
        );
        numbers.sort_unstable();
        assert_eq!(
            numbers,
            (0..=MESSAGES).collect::<Vec<_>>(),
            "{mapping:?}: a message missing or doubled before the goodbye"
        );
    }
}

#[tokio::test]
async fn a_goodbye_naming_streams_never_opened_waits_only_while_the_connection_lives() {
    let (sender, mut receiver, conn) = pair(StreamMapping::PerMessage).await;
    for n in 1..=3 {
        sender
            .send_frame(frame(n), SendClass::Message(Priority::Medium))
            .await
            .unwrap();
    }
    sender.delivered().await;
    // A lie: a thousand streams.
    let lie = counted_goodbye::count(&goodbye(), 1_000).unwrap();
    sender.send_frame(lie, SendClass::Control).await.unwrap();
    let mut numbers = Vec::new();
    for _ in 0..4 {
        let raw = receiver.recv_frame().await.unwrap().unwrap();
        assert_ne!(raw.type_byte, FrameType::Goodbye as u8);
        numbers.push(u32::from_be_bytes(raw.payload[..4].try_into().unwrap()));
    }
    numbers.sort_unstable();
    assert_eq!(numbers, [0, 1, 2, 3]);
    // Held while the connection lives (recv_frame keeps the held goodbye when cancelled)...
    assert!(
        tokio::time::timeout(Duration::from_millis(300), receiver.recv_frame())
            .await
            .is_err(),
        "the goodbye came before the streams it named"
    );
    // ...and handed on once it ends.
    conn.close(0u32.into(), b"bye");
    let (rest, goodbye) = read_all(&mut receiver).await;
    assert!(rest.is_empty());
    assert!(goodbye, "the goodbye was lost when the connection ended");
}

#[tokio::test]
async fn a_malformed_counted_goodbye_is_an_error() {
    let (sender, mut receiver, _conn) = pair(StreamMapping::PerMessage).await;
    let mut short = Vec::from(5u32.to_be_bytes());
    short.push(counted_goodbye::TYPE);
    short.extend_from_slice(&[0, 0, 0, 1]);
    sender
        .send_frame(Bytes::from(short), SendClass::Control)
        .await
        .unwrap();
    let first = receiver.recv_frame().await.unwrap().unwrap();
    assert_eq!(first.payload[..4], 0u32.to_be_bytes());
    let next = tokio::time::timeout(Duration::from_secs(20), receiver.recv_frame())
        .await
        .unwrap();
    assert!(
        next.is_err(),
        "a counted goodbye without its count was taken: {next:?}"
    );
}

/// A receiver that does not read holds a bounded backlog: frames of finished streams stop
/// being taken in at about 16 MiB, the rest waits in the sender's flow control, and all of it
/// arrives once the receiver reads.
#[tokio::test]
async fn a_receiver_that_does_not_read_holds_a_bounded_backlog() {
    const MESSAGES: u32 = 100;
    const SIZE: usize = (1 << 20) - 64;
    let (sender, mut receiver, _conn) = pair(StreamMapping::PerMessage).await;
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let sending = tokio::spawn({
        let (sender, sent) = (sender.clone(), sent.clone());
        async move {
            for n in 1..=MESSAGES {
                let mut f = Vec::from(((SIZE + 5) as u32).to_be_bytes());
                f.push(FrameType::Envelope as u8);
                f.extend_from_slice(&n.to_be_bytes());
                f.resize(SIZE + 4 + 1 + 4, 0);
                sender
                    .send_frame(Bytes::from(f), SendClass::Message(Priority::Medium))
                    .await
                    .unwrap();
                sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let held = receiver.unconsumed_bytes();
    eprintln!(
        "held unread: {held} bytes, sent {}",
        sent.load(std::sync::atomic::Ordering::Relaxed)
    );
    assert!(held <= 24 << 20, "the receiver holds {held} bytes unread");
    assert!(
        sent.load(std::sync::atomic::Ordering::Relaxed) < MESSAGES,
        "every message was taken in without a reader"
    );
    let mut numbers = Vec::new();
    while numbers.len() < MESSAGES as usize + 1 {
        let raw = tokio::time::timeout(Duration::from_secs(20), receiver.recv_frame())
            .await
            .expect("frames keep coming")
            .unwrap()
            .unwrap();
        numbers.push(u32::from_be_bytes(raw.payload[..4].try_into().unwrap()));
    }
    sending.await.unwrap();
    numbers.sort_unstable();
    assert_eq!(numbers, (0..=MESSAGES).collect::<Vec<_>>());
    assert_eq!(receiver.unconsumed_bytes(), 0);
}
