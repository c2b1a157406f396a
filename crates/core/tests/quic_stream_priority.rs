//! quinn's stream scheduling under agentwire's transport settings, over real QUIC on loopback:
//! a higher-priority stream's bytes go out ahead of a bulk stream that has already started.
//!
//! quinn sends a stream's bytes only as the congestion window allows, so a bulk message is
//! "partly sent" for as long as the window is smaller than the message. With
//! `send_fairness(false)` quinn finished such a stream before it looked at any other stream,
//! whatever their priorities: over a 50 ms path a critical message waited two to four round
//! trips behind 256 KiB of bulk (docs/benchmarks/2026-11-25-send-fairness). Here a congestion
//! controller with a small fixed window keeps the bulk stream partly sent for seconds, and the
//! test checks, by bytes received rather than by time, that the critical stream arrived long
//! before the bulk stream could have.

use std::any::Any;
use std::sync::Arc;
use std::time::Instant;

use agentwire::tls::{self, HubIdentity, HubTrust};
use agentwire::QuicSettings;
use quinn::congestion::{Controller, ControllerFactory};
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};

/// A congestion window that never changes: about four datagrams.
#[derive(Debug, Clone)]
struct FixedWindow(u64);

impl Controller for FixedWindow {
    fn on_congestion_event(&mut self, _: Instant, _: Instant, _: bool, _: u64) {}
    fn on_mtu_update(&mut self, _: u16) {}
    fn window(&self) -> u64 {
        self.0
    }
    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }
    fn initial_window(&self) -> u64 {
        self.0
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl ControllerFactory for FixedWindow {
    fn build(self: Arc<Self>, _: Instant, _: u16) -> Box<dyn Controller> {
        Box::new((*self).clone())
    }
}

/// agentwire's default transport settings with the fixed window.
fn transport() -> Arc<quinn::TransportConfig> {
    let mut t = QuicSettings::default().transport_config().unwrap();
    t.congestion_controller_factory(Arc::new(FixedWindow(4 * 1200)));
    Arc::new(t)
}

/// Bytes of the bulk message: far more than the window lets through before the critical
/// message is written, and within one stream's flow-control window, so the sender holds all of
/// it as pending stream data.
const BULK: usize = 512 * 1024;

#[tokio::test]
async fn a_critical_stream_overtakes_a_partly_sent_bulk_stream() {
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let server_tls = tls::server_config(&identity, &[tls::ALPN_AGENTWIRE]).unwrap();
    let mut server_config =
        quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(server_tls).unwrap()));
    server_config.transport_config(transport());
    let server = quinn::Endpoint::server(server_config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.local_addr().unwrap();

    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
    let client_tls = tls::client_config(&trust, &[tls::ALPN_AGENTWIRE]).unwrap();
    let mut client_config =
        quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(client_tls).unwrap()));
    client_config.transport_config(transport());
    let client = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();

    let (bulk_seen_tx, bulk_seen_rx) = tokio::sync::oneshot::channel();
    let receiver = tokio::spawn(async move {
        let conn = server.accept().await.unwrap().await.unwrap();
        // The bulk stream: read its first bytes, then leave the rest unread.
        let mut bulk = conn.accept_uni().await.unwrap();
        let mut first = [0u8; 1];
        bulk.read_exact(&mut first).await.unwrap();
        let _ = bulk_seen_tx.send(());
        // The critical stream, whole; then how many bytes had arrived by then.
        let mut critical = conn.accept_uni().await.unwrap();
        let message = critical.read_to_end(1024).await.unwrap();
        let received = conn.stats().udp_rx.bytes;
        conn.close(0u32.into(), b"done");
        (message, received)
    });

    let conn = client
        .connect_with(client_config, addr, "localhost")
        .unwrap()
        .await
        .unwrap();
    let mut bulk = conn.open_uni().await.unwrap();
    bulk.set_priority(0).unwrap();
    bulk.write_all(&vec![7u8; BULK]).await.unwrap();
    // Started: the receiver has its first byte.
    bulk_seen_rx.await.unwrap();
    let mut critical = conn.open_uni().await.unwrap();
    critical.set_priority(12).unwrap();
    critical.write_all(b"critical").await.unwrap();
    critical.finish().unwrap();

    let (message, received) = receiver.await.unwrap();
    assert_eq!(message, b"critical");
    // Finishing the bulk stream first would have delivered all of it before the critical
    // message: at least BULK bytes. Round-robin sends the critical message within a window
    // or two of being written.
    assert!(
        received < (BULK / 2) as u64,
        "the critical stream arrived after {received} bytes: it waited behind the bulk stream"
    );
}
