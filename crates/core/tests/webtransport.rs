//! WebTransport sessions on the hub's QUIC port, over real sockets: a session opened as a
//! browser opens one (HTTP/3, extended CONNECT, the page's Origin) does the agentwire handshake
//! and reaches a QUIC agent; the browsers' certificate is served to `h3` alone; another path,
//! a page the hub does not allow, and a hub with a client CA are refused.
#![cfg(feature = "hub")]

mod common;

use std::sync::Arc;
use std::time::Duration;

use agentwire::hub::{HubConfig, WebTransportConfig};
use agentwire::tls::{self, ClientCa, HubTrust};
use agentwire::transport::wt::{self, WtReceiver, WtSender};
use agentwire::transport::{FrameReceiver, FrameSender, SendClass, TransportError};
use agentwire::{Agent, AgentOptions, Codec, Destination, Envelope, Kind};
use agentwire_proto::{Frame, FrameType, Hello};

const PAGE: &str = "https://app.example.com";
const WAIT: Duration = Duration::from_secs(10);

type Rig = common::WebTransportHub;

async fn rig(origins: &[&str]) -> Rig {
    common::webtransport_hub(origins).await
}

/// A QUIC connection offering ALPN `h3` alone, as a browser's WebTransport does, trusting the
/// hub's CA; returns it and the certificate the hub presented.
async fn h3_connection(r: &Rig) -> (quinn::Connection, Vec<u8>) {
    let trust = HubTrust::ca_pem(&r.bundle.ca_cert_pem).unwrap();
    let tls = tls::client_config(&trust, &[tls::ALPN_H3]).unwrap();
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let conn = endpoint
        .connect(r.addr, "localhost")
        .unwrap()
        .await
        .unwrap();
    let presented = conn
        .peer_identity()
        .unwrap()
        .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
        .unwrap()[0]
        .to_vec();
    (conn, presented)
}

async fn session(r: &Rig, origin: Option<&str>) -> Result<(WtSender, WtReceiver), TransportError> {
    let (conn, _) = h3_connection(r).await;
    wt::connect(conn, "localhost", origin).await
}

async fn echo_agent(r: &Rig) -> tokio::task::JoinHandle<()> {
    let trust = HubTrust::ca_pem(&r.bundle.ca_cert_pem).unwrap();
    let opts = AgentOptions::new("echo", r.listener.url.to_string(), trust);
    let mut agent = Agent::connect(opts).await.unwrap();
    tokio::spawn(async move {
        while let Some(msg) = agent.recv().await {
            let body = msg.envelope.body.clone();
            let _ = msg.reply(body).await;
        }
    })
}

/// The agentwire handshake over a session, as the browser SDK will do it.
async fn hello(tx: &WtSender, rx: &mut WtReceiver, id: &str) {
    let hello = Frame::Hello(Hello::new(id, "page"))
        .encode(Codec::MsgPack)
        .unwrap();
    tx.send_frame(hello, SendClass::Control).await.unwrap();
    let welcome = tokio::time::timeout(WAIT, rx.recv_frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(welcome.type_byte, FrameType::Welcome as u8);
    rx.set_max_frame_size(agentwire_proto::Limits::default().max_frame_size);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_session_reaches_a_quic_agent() {
    let r = rig(&[PAGE]).await;
    let _echo = echo_agent(&r).await;
    // The browsers' certificate is the one served to `h3`.
    let (first, presented) = h3_connection(&r).await;
    let expected = tls::certificate_sha256(&presented);
    assert_eq!(expected, r.browsers.sha256);

    let (tx, mut rx) = session(&r, Some(PAGE)).await.unwrap();
    hello(&tx, &mut rx, "page-1").await;
    for i in 0..100u64 {
        let body = format!("question {i}");
        let env = Envelope::new(i + 1, "page-1", Destination::agent("echo"), Kind::Request)
            .with_body(body.clone());
        let frame = Frame::encode_envelope(&env, Codec::MsgPack).unwrap();
        tx.send_frame(frame, SendClass::Message(env.priority))
            .await
            .unwrap();
        let answer = tokio::time::timeout(WAIT, rx.recv_frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let answer = Codec::MsgPack.decode_envelope(&answer.payload).unwrap();
        assert_eq!(answer.kind, Kind::Response);
        assert_eq!(answer.correlation, Some(i + 1));
        assert_eq!(&answer.body[..], body.as_bytes());
    }
    assert_eq!(tx.kind().name(), "webtransport");
    // No address-validation tokens, although web-transport-quinn turns on quinn's `bloom`
    // (whose default sends two per connection).
    assert_eq!(first.stats().frame_rx.new_token, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_from_other_pages_and_paths_are_refused() {
    let r = rig(&["https://*.example.com"]).await;
    let err = session(&r, Some("https://evil.example.net"))
        .await
        .err()
        .expect("a page the hub does not allow");
    let chain = agentwire::transport::error_chain(&err);
    assert!(chain.contains("403"), "{chain}");
    let (conn, _) = h3_connection(&r).await;
    let err = wt::connect_at(
        conn,
        "localhost",
        "/elsewhere",
        Some("https://app.example.com"),
    )
    .await
    .err()
    .expect("another path");
    let chain = agentwire::transport::error_chain(&err);
    assert!(chain.contains("404"), "{chain}");
    // A request that names no page (not a browser) goes on to its hello.
    let (tx, mut rx) = session(&r, None).await.unwrap();
    hello(&tx, &mut rx, "native").await;
    // Allowed by the wildcard.
    let (tx, mut rx) = session(&r, Some("https://app.example.com")).await.unwrap();
    hello(&tx, &mut rx, "page-2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_with_a_client_ca_takes_no_sessions() {
    common::init_logs();
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let config = HubConfig {
        client_ca: Some(ClientCa::from_pem(&bundle.ca_cert_pem).unwrap()),
        webtransport: Some(WebTransportConfig::default()),
        ..HubConfig::default()
    };
    let (_hub, listener) = common::hub_on_quic(config, &bundle).await;
    let err = listener.err().expect("refused");
    assert!(err.to_string().contains("client certificate"), "{err}");
}

/// A session's hello is held to the hub's credentials like any agent's: without the hub's
/// token it is rejected (`unauthorized`) and no agent is registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_the_hubs_token_is_rejected() {
    common::init_logs();
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let mut config = HubConfig {
        webtransport: Some(WebTransportConfig::default()),
        ..HubConfig::default()
    };
    config.policy.auth_token = Some("s3cret".into());
    let (hub, listener) = common::hub_on_quic(config, &bundle).await;
    let listener = listener.unwrap();
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
    let url = listener.url.to_string().replacen("quic://", "wt://", 1);
    let err = Agent::connect(AgentOptions::new("no-token", url.clone(), trust.clone()))
        .await
        .err()
        .expect("rejected without the token");
    assert!(err.to_string().contains("unauthorized"), "{err}");
    assert!(hub.agents().is_empty());
    let mut opts = AgentOptions::new("with-token", url, trust);
    opts.auth_token = Some("s3cret".into());
    let agent = Agent::connect(opts).await.unwrap();
    assert_eq!(agent.transport().name(), "webtransport");
}

/// Heartbeats ride the session's datagrams, each after the session's quarter stream id: an
/// agent that sends nothing else stays registered through many heartbeat intervals, and its
/// beats left as datagrams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_ride_the_sessions_datagrams() {
    let mut config = HubConfig::default();
    config.policy.heartbeat_interval_ms = 50;
    config.heartbeat_miss_limit = 4;
    let r = common::webtransport_hub_with(&["*"], config).await;
    let trust = HubTrust::ca_pem(&r.bundle.ca_cert_pem).unwrap();
    let url = format!("wt://localhost:{}", r.addr.port());
    let agent = Agent::connect(AgentOptions::new("beats", url, trust))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let stats = agent.stats().connection;
    assert!(
        stats.datagrams_sent >= 3,
        "heartbeats as datagrams: {stats:?}"
    );
    assert!(agent.closed_reason().is_none());
    assert!(r.hub.agents().iter().any(|a| a.id == "beats"));
}
