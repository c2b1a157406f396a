//! Shared by the bench's integration tests: the tiny configuration they run.

use agentwire_bench::{BenchConfig, BenchTransport, NetworkProfile, Pattern, Scenario};

/// Two clients × 100 B over loopback on `transports`, 2 repetitions of 300 ms (after 100 ms
/// of warm-up), with a 300 ms open-loop phase and priority probe. Seconds, not minutes.
pub fn tiny(transports: &[BenchTransport]) -> BenchConfig {
    BenchConfig {
        preset: "custom".into(),
        transports: transports.to_vec(),
        scenarios: vec![Scenario {
            pattern: Pattern::Request,
            agents: 2,
            size: 100,
            network: NetworkProfile::loopback(),
            priority_probe: true,
            window: None,
        }],
        window: Some(4),
        warmup_ms: 100,
        duration_ms: 300,
        rate: None,
        open_loop_ms: 300,
        priority_probe_ms: 300,
        // Generous, so a slow machine gets slow answers rather than errors.
        request_timeout_ms: 30_000,
        repetitions: 2,
        seed: 1,
        quic_cc: Default::default(),
        quic_max_streams: 4096,
        quic_max_mtu: agentwire::QuicSettings::default().max_mtu,
        quic_loopback_mtu: agentwire::QuicSettings::default().loopback_mtu,
        quic_receive_budget: 0,
        quic_endpoints: 1,
        hub_threads: 1,
        client_threads: 2,
        tcp_cc: None,
        netsim_stage: Default::default(),
        qlog_dir: None,
    }
}
