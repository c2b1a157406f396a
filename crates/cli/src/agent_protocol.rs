//! `agentwire agent-protocol serve|bench`: a Zentinel Agent Protocol v2 agent that answers
//! every event with one decision, and the closed-loop benchmark of any agent.
//!
//! This module turns flags into `agentwire_zap` calls and prints; the protocol, the server
//! and the load loop live in `agentwire-zap`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agentwire_zap::bench::{self, BenchConfig, BenchReport};
use agentwire_zap::proto::agent::AgentConfig;
use agentwire_zap::proto::messages::{
    BodyChunkEvent, ConfigureEvent, GuardrailInspectEvent, RequestCompleteEvent,
    RequestHeadersEvent, ResponseHeadersEvent, WebSocketDecision, WebSocketFrameEvent,
};
use agentwire_zap::proto::{AgentResponse, Capabilities, Encoding, EventKind, Features, Limits};
use agentwire_zap::server::{AgentServer, Handler, ServerConfig};
use anyhow::{Context, Result};

use crate::args::{AgentProtocolCommand, ApBenchArgs, ApDecision, ApEncoding, ApServeArgs};

pub async fn run(command: AgentProtocolCommand) -> Result<()> {
    match command {
        AgentProtocolCommand::Serve(a) => serve(a).await,
        AgentProtocolCommand::Bench(a) => bench(a).await,
    }
}

fn encoding(e: ApEncoding) -> Encoding {
    match e {
        ApEncoding::Msgpack => Encoding::MsgPack,
        ApEncoding::Json => Encoding::Json,
    }
}

/// Answers every event with one decision; every `slow_every`-th event takes `slow`.
struct Fixed {
    decision: ApDecision,
    slow_every: u64,
    slow: Duration,
    seen: AtomicU64,
}

impl Fixed {
    async fn answer(&self) -> AgentResponse {
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if self.slow_every > 0 && n % self.slow_every == 0 {
            tokio::time::sleep(self.slow).await;
        }
        match self.decision {
            ApDecision::Allow => AgentResponse::allow(),
            ApDecision::Block => AgentResponse::block(
                403,
                Some("blocked by agentwire agent-protocol serve".into()),
            ),
        }
    }
}

impl Handler for Fixed {
    async fn on_request_headers(&self, _e: RequestHeadersEvent) -> AgentResponse {
        self.answer().await
    }
    async fn on_request_body_chunk(&self, _e: BodyChunkEvent) -> AgentResponse {
        self.answer().await
    }
    async fn on_response_headers(&self, _e: ResponseHeadersEvent) -> AgentResponse {
        self.answer().await
    }
    async fn on_response_body_chunk(&self, _e: BodyChunkEvent) -> AgentResponse {
        self.answer().await
    }
    async fn on_request_complete(&self, _e: RequestCompleteEvent) -> AgentResponse {
        self.answer().await
    }
    async fn on_websocket_frame(&self, _e: WebSocketFrameEvent) -> AgentResponse {
        let mut r = self.answer().await;
        r.websocket_decision = Some(match self.decision {
            ApDecision::Allow => WebSocketDecision::Allow,
            ApDecision::Block => WebSocketDecision::Drop,
        });
        r
    }
    async fn on_guardrail_inspect(&self, _e: GuardrailInspectEvent) -> AgentResponse {
        self.answer().await
    }
    async fn on_configure(&self, _e: ConfigureEvent) -> AgentResponse {
        AgentResponse::allow()
    }
}

async fn serve(a: ApServeArgs) -> Result<()> {
    let capabilities = Capabilities {
        agent_id: "agentwire-agent-protocol".into(),
        name: "agentwire agent-protocol serve".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        supported_events: EventKind::ALL.iter().map(|k| *k as i32).collect(),
        features: Features {
            streaming_body: true,
            websocket: true,
            guardrails: true,
            config_push: true,
            concurrent_requests: a.max_in_flight as u32,
            cancellation: true,
            flow_control: true,
            health_reporting: true,
            binary_body: true,
            ..Features::default()
        },
        limits: Limits {
            max_concurrency: a.max_in_flight as u32,
            ..Limits::default()
        },
    };
    let mut agent = AgentConfig::new(capabilities);
    if let Some(e) = a.encoding {
        agent.encodings = vec![encoding(e)];
    }
    let encodings: Vec<&str> = agent.encodings.iter().map(|e| e.name()).collect();
    let mut config = ServerConfig::new(agent.clone());
    config.max_in_flight = a.max_in_flight.max(1);
    let handler = Fixed {
        decision: a.decision,
        slow_every: a.slow_every,
        slow: Duration::from_millis(a.slow_ms),
        seen: AtomicU64::new(0),
    };
    let server = AgentServer::bind(&a.socket, config, handler)
        .await
        .context("cannot listen")?;
    println!(
        "agent listening on {} (encodings {}, decision {:?}, {} handlers per connection{})",
        a.socket.display(),
        encodings.join(","),
        a.decision,
        a.max_in_flight,
        if a.slow_every > 0 {
            format!(", every {}th event takes {} ms", a.slow_every, a.slow_ms)
        } else {
            String::new()
        }
    );
    server
        .run(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await;
    Ok(())
}

async fn bench(a: ApBenchArgs) -> Result<()> {
    let report = bench::run(BenchConfig {
        socket: a.socket.clone(),
        requests: a.requests,
        concurrency: a.concurrency,
        connections: a.connections,
        encoding: encoding(a.encoding),
        body_size: a.body_size,
        agent_pid: a.agent_pid,
        max_duration: Duration::from_secs(a.max_secs),
    })
    .await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

fn print_report(r: &BenchReport) {
    let l = &r.latency;
    println!(
        "{} requests ({}) over {} connection(s), {} in flight, {}: {:.0} req/s in {:.2} s",
        r.answered,
        if r.config.body_size > 0 {
            format!("{}-byte body chunks", r.config.body_size)
        } else {
            "request headers".to_string()
        },
        r.config.connections,
        r.config.concurrency,
        r.negotiated.name(),
        r.requests_per_sec,
        r.elapsed_secs,
    );
    println!(
        "latency µs: p50 {} p90 {} p99 {} p99.9 {} max {}",
        l.p50_us, l.p90_us, l.p99_us, l.p999_us, l.max_us
    );
    let cpu = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} µs"));
    println!(
        "CPU per request: client {}, agent {}",
        cpu(r.client_cpu_us_per_request),
        cpu(r.agent_cpu_us_per_request)
    );
    if r.errors.is_empty() {
        println!("errors: none");
    } else {
        let list: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("errors: {}", list.join(", "));
    }
}
