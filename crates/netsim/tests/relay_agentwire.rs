//! End to end: real agentwire agents talk to a real hub through socket relays — QUIC through a
//! UDP relay (delay and loss), HTTP/2 through a TCP relay (delay).

use std::net::SocketAddr;
use std::time::Duration;

use agentwire::hub::{BoundAddr, Hub, HubConfig};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, HubIdentity};
use agentwire::{Agent, AgentOptions, HubTrust, HubUrl, Kind};
use agentwire_netsim::relay::{TcpRelay, UdpRelay};
use agentwire_netsim::Spec;

fn addr(bound: &BoundAddr) -> SocketAddr {
    match bound {
        BoundAddr::Net(a) => *a,
        other => panic!("expected a network listener, got {other:?}"),
    }
}

async fn fifty_requests(client: &Agent) {
    for i in 0..50 {
        let body = format!("request {i}");
        let resp = client
            .request("echo", body.clone(), Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("request {i} over {}: {e}", client.transport()));
        assert_eq!(resp.body.as_ref(), body.as_bytes());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_through_udp_and_tcp_relays() {
    let bundle = tls::generate(&tls::default_hub_names()).unwrap();
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let trust = || HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
    let hub = Hub::new(HubConfig::default(), HubMetrics::new());
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

    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let udp_imp = Spec::parse("delay=10ms,loss=1%").unwrap().impairment;
    let udp = UdpRelay::start(any, addr(&quic.bound), udp_imp.clone(), udp_imp, 42)
        .await
        .unwrap();
    let tcp_imp = Spec::parse("delay=10ms").unwrap().impairment;
    let tcp = TcpRelay::start(any, addr(&h2.bound), tcp_imp.clone(), tcp_imp, 42)
        .await
        .unwrap();

    // The echo agent connects directly.
    let mut echo = Agent::connect(AgentOptions::new("echo", quic.url.to_string(), trust()))
        .await
        .unwrap();
    let echo_task = tokio::spawn(async move {
        while let Some(msg) = echo.recv().await {
            if msg.envelope.kind == Kind::Request {
                let _ = msg.reply(msg.envelope.body.clone()).await;
            }
        }
    });

    let via_udp = format!("quic://127.0.0.1:{}", udp.local_addr().port());
    let mut opts = AgentOptions::new("client-quic", via_udp, trust());
    opts.connect_timeout = Duration::from_secs(20);
    let quic_client = Agent::connect(opts).await.unwrap();
    assert_eq!(quic_client.transport().to_string(), "quic");
    fifty_requests(&quic_client).await;
    let rtt_us = quic_client.stats().connection.rtt_us;
    assert!(
        rtt_us >= 20_000,
        "QUIC RTT through 2 × 10 ms was {rtt_us} µs"
    );

    let via_tcp = format!("h2://127.0.0.1:{}", tcp.local_addr().port());
    let mut opts = AgentOptions::new("client-h2", via_tcp, trust());
    opts.connect_timeout = Duration::from_secs(20);
    let h2_client = Agent::connect(opts).await.unwrap();
    let t = std::time::Instant::now();
    fifty_requests(&h2_client).await;
    // Every request crosses the relay twice (there and back): ≥ 20 ms each.
    assert!(t.elapsed() >= Duration::from_millis(50 * 20));

    let (us, ts) = (udp.stats(), tcp.stats());
    assert!(us.forward.packets_out > 0 && us.reverse.packets_out > 0);
    assert!(ts.forward.bytes_out > 0 && ts.reverse.bytes_out > 0);
    assert_eq!(ts.forward.dropped() + ts.reverse.dropped(), 0);

    quic_client.close().await;
    h2_client.close().await;
    echo_task.abort();
}
