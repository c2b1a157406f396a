//! Feeds arbitrary bytes, in arbitrary chunks, to both sides of a Zentinel Agent Protocol
//! connection (after a valid handshake, so the bytes reach every message path): nothing may
//! panic, and whatever a side sends back must be whole frames.
#![no_main]

use std::time::Instant;

use agentwire_zap_proto::agent::{AgentConfig, AgentSession};
use agentwire_zap_proto::proxy::{ProxyConfig, ProxySession};
use agentwire_zap_proto::*;
use libfuzzer_sys::fuzz_target;

fn caps() -> Capabilities {
    Capabilities {
        agent_id: "fuzz".into(),
        name: "fuzz".into(),
        version: "0".into(),
        supported_events: vec![1],
        features: Features::default(),
        limits: Limits::default(),
    }
}

fn whole_frames(bytes: &[u8]) {
    let mut d = FrameDecoder::new(MAX_FRAME_LEN);
    d.push(bytes);
    while let Ok(Some(_)) = d.next_frame() {}
    assert!(d.finish().is_ok(), "a side sent part of a frame");
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let now = Instant::now();
    let encoding = if mode & 1 == 0 { Encoding::Json } else { Encoding::MsgPack };
    let mut agent = AgentSession::new(AgentConfig::new(caps()));
    let mut proxy = ProxySession::new(
        ProxyConfig {
            encodings: vec![encoding],
            ..ProxyConfig::default()
        },
        now,
    );
    // A real handshake first.
    if let Some(b) = proxy.poll_transmit() {
        let _ = agent.receive(&b);
    }
    if let Some(b) = agent.poll_transmit() {
        let _ = proxy.receive(&b);
    }
    while agent.poll_event().is_some() {}
    while proxy.poll_event().is_some() {}
    let chunk = usize::from(mode >> 1).max(1);
    for piece in rest.chunks(chunk) {
        let _ = agent.receive(piece);
        let _ = proxy.receive(piece);
        while agent.poll_event().is_some() {}
        while proxy.poll_event().is_some() {}
        if let Some(out) = agent.poll_transmit() {
            whole_frames(&out);
        }
        if let Some(out) = proxy.poll_transmit() {
            whole_frames(&out);
        }
    }
    let _ = proxy.on_timeout(now + std::time::Duration::from_secs(3600), 0);
});
