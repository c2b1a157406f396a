//! Fallback: an agent given several hub addresses (or `auto://`) moves on after a real
//! failure within its fallback timeout, and reports the transport it landed on.

mod common;

use std::time::{Duration, Instant};

use agentwire::hub::{Hub, HubConfig};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, HubIdentity};
use agentwire::transport::TransportKind;
use agentwire::{Agent, AgentOptions, HubTrust, HubUrl};

/// A hub that listens for HTTP/2 (and WebSocket) on TCP `port`, and nothing else.
async fn tcp_only_hub(port: u16) -> Option<(Hub, agentwire::hub::Listener, tls::CertBundle)> {
    common::init_logs();
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let hub = Hub::new(HubConfig::default(), HubMetrics::new());
    let url = HubUrl::parse(&format!("h2://127.0.0.1:{port}")).unwrap();
    let listener = hub.listen(&url, Some(&identity)).await.ok()?;
    Some((hub, listener, bundle))
}

async fn lands_on_http2(udp_blackhole: bool) {
    // Pick a port whose UDP side either swallows every datagram, as a firewall dropping UDP
    // would (a bound socket nobody reads), or has nothing at all listening.
    let (blackhole, hub, _listener, bundle, port) = loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if let Some((hub, listener, bundle)) = tcp_only_hub(port).await {
            let blackhole = if udp_blackhole { Some(udp) } else { None };
            break (blackhole, hub, listener, bundle, port);
        }
    };

    let fallback = Duration::from_millis(500);
    let mut opts = AgentOptions::new(
        "roamer",
        format!("auto://127.0.0.1:{port}"),
        HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap(),
    );
    opts.fallback_timeout = fallback;
    // QUIC's idle timeout is far longer: falling back must not wait for it.
    assert!(opts.quic.idle_timeout >= Duration::from_secs(10));

    let started = Instant::now();
    let agent = Agent::connect(opts).await.unwrap();
    let took = started.elapsed();
    assert_eq!(agent.transport(), TransportKind::Http2);
    assert_eq!(agent.stats().connection.transport, "http2");
    assert!(
        took >= fallback,
        "QUIC was given its {fallback:?} first (took {took:?})"
    );
    assert!(
        took < fallback + Duration::from_secs(3),
        "fell back within the configured time ({took:?})"
    );
    let metrics = hub.metrics().encode();
    assert!(
        metrics.contains("agentwire_hub_agents{transport=\"http2\"} 1"),
        "the hub's metrics report the transport:\n{metrics}"
    );
    drop(blackhole);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_lands_on_http2_when_udp_is_blocked() {
    lands_on_http2(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_lands_on_http2_when_nothing_listens_on_udp() {
    lands_on_http2(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejecting_hub_ends_the_search() {
    let mut config = HubConfig::default();
    config.policy.auth_token = Some("secret".into());
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let hub = Hub::new(config, HubMetrics::new());
    let quic = hub
        .listen(
            &HubUrl::parse("quic://127.0.0.1:0").unwrap(),
            Some(&identity),
        )
        .await
        .unwrap();
    let h2 = hub
        .listen(&HubUrl::parse("h2://127.0.0.1:0").unwrap(), Some(&identity))
        .await
        .unwrap();
    let mut opts = AgentOptions::new(
        "no-token",
        quic.url.to_string(),
        HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap(),
    );
    opts.hubs.push(h2.url.to_string());
    match Agent::connect(opts).await {
        Err(agentwire::AgentError::Rejected { code, .. }) => {
            assert_eq!(code, agentwire::ErrorCode::Unauthorized)
        }
        Err(e) => panic!("expected the QUIC hub's rejection, got {e}"),
        Ok(a) => panic!("expected a rejection, connected over {}", a.transport()),
    }
    assert!(
        !hub.metrics()
            .encode()
            .contains("transport=\"http2\",outcome=\"rejected\""),
        "no second attempt after a rejection"
    );
}
