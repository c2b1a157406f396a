//! Command-line flags, and their translation into library options.

use clap::{Parser, Subcommand};

mod hub;
pub use hub::*;
mod agent;
pub use agent::*;
mod cert;
pub use cert::*;
#[cfg(feature = "agent-protocol")]
mod agent_protocol;
#[cfg(feature = "agent-protocol")]
pub use agent_protocol::*;
#[cfg(feature = "netsim")]
mod netsim;
#[cfg(feature = "netsim")]
pub use netsim::*;
#[cfg(feature = "bench")]
mod bench;
#[cfg(feature = "bench")]
pub use bench::*;
#[cfg(feature = "load")]
mod load;
#[cfg(feature = "load")]
pub use load::*;

/// agentwire — a QUIC-first transport for multi-agent systems.
#[derive(Parser, Debug)]
#[command(name = "agentwire", version, about, long_about = None)]
pub struct Cli {
    /// More logging (-v info, -vv debug); AGENTWIRE_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a CA and a hub certificate signed by it; `cert agent` issues an agent's
    /// certificate (mutual TLS).
    ///
    /// Example: agentwire cert --out certs
    /// Example: agentwire cert agent --id worker-1 --ca-dir certs
    Cert(CertArgs),
    /// Run a hub.
    ///
    /// Example: agentwire hub --listen quic://127.0.0.1:4433 --cert-dir certs
    Hub(Box<HubArgs>),
    /// Run an agent that prints what it receives (and, with --echo, answers requests).
    ///
    /// Example: agentwire agent --hub quic://127.0.0.1:4433 --ca certs/ca.pem --id worker-1 --echo
    Agent(AgentArgs),
    /// Send one message or request and exit (0 on success, non-zero on any failure).
    ///
    /// Example: agentwire send --hub quic://127.0.0.1:4433 --ca certs/ca.pem --to worker-1 --request hello
    Send(SendArgs),
    /// Benchmark request/response over loopback: a real hub and real agents in this process,
    /// a grid of transports × agents × sizes; prints a table and writes JSON.
    ///
    /// Example: agentwire bench --agents 10,100 --sizes 1024 --transports quic,h2 --out target/bench-small
    #[cfg(feature = "bench")]
    Bench(BenchArgs),
    /// Serve the files of a directory over HTTP/3 (UDP) and HTTP/2 + HTTP/1.1 (TCP, TLS 1.3)
    /// on the same port, from memory; for `agentwire load` and other HTTP load tools.
    /// Runs until Ctrl-C.
    ///
    /// Example: agentwire serve --root www --listen 127.0.0.1:8443 --cert-dir certs --generate
    #[cfg(feature = "load")]
    Serve(ServeArgs),
    /// Load an HTTP server: many connections and requests over h3, h2 or http/1.1, closed
    /// loop or at a fixed rate; reports requests/s, errors by kind and latency percentiles.
    ///
    /// Example: agentwire load https://127.0.0.1:8443/1k.bin --proto h3 --duration 3s --insecure --json
    #[cfg(feature = "load")]
    Load(LoadArgs),
    /// A curl-scorecard style comparison of h3, h2 and http/1.1: handshakes, serial and
    /// parallel downloads, requests/s at several parallelisms, two load rounds, long and
    /// short connections. Starts its own server unless --url is given; writes scorecard.json
    /// and scorecard.md into --out and prints the table; exits non-zero if any scenario had
    /// errors.
    ///
    /// Example: agentwire scorecard --quick --out scorecard-out
    #[cfg(feature = "load")]
    Scorecard(ScorecardArgs),
    /// Network emulation between real agentwire endpoints (delay, jitter, loss, rate …).
    ///
    /// Example: agentwire netsim relay --listen 127.0.0.1:4434 --to 127.0.0.1:4433 --udp --spec "delay=25ms,loss=1%"
    #[cfg(feature = "netsim")]
    #[command(subcommand)]
    Netsim(NetsimCommand),
    /// Zentinel Agent Protocol v2 over Unix sockets (a reverse proxy's external agents): run
    /// an agent, or benchmark any agent through the pool.
    ///
    /// Example: agentwire agent-protocol serve --socket /tmp/agent.sock
    #[cfg(feature = "agent-protocol")]
    #[command(subcommand)]
    AgentProtocol(AgentProtocolCommand),
    /// Make an agent token for a hub's access file: prints a new random token and the SHA-256
    /// the file holds (or, with --hash, the SHA-256 of a token you have).
    ///
    /// Example: agentwire token
    Token(TokenArgs),
    /// Look at and repair a hub's work queues: counts, dead letters, replay, discard. Prints
    /// the hub's JSON answer.
    ///
    /// Example: agentwire queue --hub unix:///tmp/hub.sock dead-letters jobs
    Queue(QueueArgs),
    /// Ask a running hub to read its files again (access file, client CA, revoked serials,
    /// hub certificate), as SIGHUP does; the agent's credential must say "admin": true.
    /// Prints the hub's JSON answer.
    ///
    /// Example: agentwire reload --hub unix:///tmp/hub.sock --id ops --auth-token "$OPS_TOKEN"
    Reload(ReloadArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentwire::hub::HubConfig;
    use clap::Parser;

    fn hub(args: &[&str]) -> HubConfig {
        let fixed = ["agentwire", "hub", "--listen", "quic://127.0.0.1:0"];
        let cli = Cli::try_parse_from(fixed.iter().chain(args)).unwrap();
        match cli.command {
            Command::Hub(a) => a.hub_config().unwrap(),
            _ => unreachable!(),
        }
    }

    fn agent(args: &[&str]) -> agentwire::AgentOptions {
        let fixed = [
            "agentwire",
            "agent",
            "--hub",
            "unix:///tmp/x.sock",
            "--id",
            "a",
        ];
        let cli = Cli::try_parse_from(fixed.iter().chain(args)).unwrap();
        match cli.command {
            Command::Agent(a) => a.connect.options("a").unwrap(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn an_agent_grants_its_hub_more_streams_than_a_hub_grants_each_agent() {
        let streams = |q: &agentwire::QuicSettings| {
            (q.max_concurrent_uni_streams, q.max_concurrent_bidi_streams)
        };
        assert_eq!(streams(&hub(&[]).quic), (256, 256));
        assert_eq!(streams(&agent(&[]).quic), (1024, 256));
        assert_eq!(streams(&hub(&["--max-streams", "64"]).quic), (64, 64));
        assert_eq!(streams(&agent(&["--max-streams", "64"]).quic), (64, 64));
        let library = agentwire::AgentOptions::new("a", "unix:///x", agentwire::HubTrust::Insecure);
        assert_eq!(streams(&library.quic), (1024, 256));
    }

    #[test]
    fn no_datagrams_withdraws_only_that_capability() {
        let default = hub(&[]).policy.capabilities;
        assert!(default.contains(&"datagrams".to_owned()));
        assert!(default.contains(&agentwire_proto::counted_goodbye::CAPABILITY.to_owned()));
        let without = hub(&["--no-datagrams"]).policy.capabilities;
        assert!(!without.contains(&"datagrams".to_owned()));
        assert!(without.contains(&agentwire_proto::counted_goodbye::CAPABILITY.to_owned()));
    }
}
