//! The README's CLI contract, run for real: `agentwire cert`, a hub and two agents as separate
//! processes on loopback QUIC, and `agentwire send`.

mod common;

use std::path::Path;
use std::process::Output;

use common::{fails_with, run, spawn, text, wait_for};

fn webtransport_hash(certs: &Path) -> String {
    let pem = std::fs::read_to_string(certs.join("webtransport.pem")).unwrap();
    hex::encode(agentwire::tls::check_webtransport_cert(&pem).unwrap().0)
}

#[test]
fn hub_and_two_agents_exchange_messages_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let certs_s = certs.to_str().unwrap();
    let out = run(&["cert", "--out", certs_s]);
    assert!(out.status.success(), "cert failed: {}", text(&out.stderr));
    for f in ["ca.pem", "hub.pem", "hub.key"] {
        assert!(Path::new(&certs).join(f).exists(), "{f} missing");
    }
    let pin_line = text(&out.stdout)
        .lines()
        .find(|l| l.starts_with("hub key pin:"))
        .map(str::to_owned)
        .expect("cert prints the pin");
    let pin = pin_line
        .trim_start_matches("hub key pin:")
        .trim()
        .to_owned();

    // On a single-threaded runtime (`--threads 1`); the other tests run the default.
    let (_hub, hub_out) = spawn(&[
        "hub",
        "--listen",
        "quic://127.0.0.1:0",
        "--cert-dir",
        certs_s,
        "--threads",
        "1",
    ]);
    let line = wait_for(&hub_out, "hub listening on quic://");
    let addr = common::addr_after(&line, "quic://");
    let url = format!("quic://{addr}");
    let ca = certs.join("ca.pem");
    let ca_s = ca.to_str().unwrap();

    let (_worker, worker_out) = spawn(&[
        "agent", "--hub", &url, "--ca", ca_s, "--id", "worker-1", "--echo",
    ]);
    wait_for(&worker_out, "agent worker-1 connected over quic");
    let (_listener, listener_out) = spawn(&[
        "agent",
        "--hub",
        &url,
        "--pin",
        &pin,
        "--id",
        "listener",
        "--subscribe",
        "news",
    ]);
    wait_for(&listener_out, "agent listener connected over quic");

    // The contract: prints the reply body and exits 0.
    let out = run(&[
        "send",
        "--hub",
        &url,
        "--ca",
        ca_s,
        "--to",
        "worker-1",
        "--request",
        "hello",
    ]);
    assert!(out.status.success(), "send failed: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello\n");
    wait_for(&worker_out, "request medium from send-");

    // A one-way message to the second agent, and a topic publication it subscribed to.
    let out = run(&[
        "send",
        "--hub",
        &url,
        "--ca",
        ca_s,
        "--to",
        "listener",
        "--message",
        "direct hi",
        "--priority",
        "high",
    ]);
    assert!(out.status.success(), "send failed: {}", text(&out.stderr));
    wait_for(&listener_out, "task high from send-");
    let out = run(&[
        "send",
        "--hub",
        &url,
        "--ca",
        ca_s,
        "--to",
        "topic:news",
        "--message",
        "extra",
        "--kind",
        "event",
    ]);
    assert!(
        out.status.success(),
        "publish failed: {}",
        text(&out.stderr)
    );
    let line = wait_for(&listener_out, "event medium from send-");
    assert!(line.ends_with("extra"), "{line}");

    // Failures exit non-zero with a reason.
    fails_with(
        &[
            "send",
            "--hub",
            &url,
            "--ca",
            ca_s,
            "--to",
            "nobody",
            "--request",
            "x",
        ],
        "unknown-agent",
    );

    let other = dir.path().join("other");
    assert!(run(&["cert", "--out", other.to_str().unwrap()])
        .status
        .success());
    let other_ca = other.join("ca.pem");
    fails_with(
        &[
            "send",
            "--hub",
            &url,
            "--ca",
            other_ca.to_str().unwrap(),
            "--to",
            "worker-1",
            "--request",
            "x",
        ],
        "not signed by the trusted CA",
    );

    // --insecure works but says loudly what it does.
    let out = run(&[
        "send",
        "--hub",
        &url,
        "--insecure",
        "--to",
        "worker-1",
        "--request",
        "risky",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("WARNING"),
        "{}",
        text(&out.stderr)
    );

    // No trust option at all is refused before connecting.
    fails_with(
        &["send", "--hub", &url, "--to", "worker-1", "--request", "x"],
        "--ca",
    );
}

#[test]
fn bad_flags_are_clear_errors() {
    fails_with(
        &[
            "send",
            "--hub",
            "ftp://x:1",
            "--insecure",
            "--to",
            "a",
            "--request",
            "x",
        ],
        "unsupported scheme",
    );
    fails_with(
        &[
            "hub",
            "--listen",
            "quic://127.0.0.1:0",
            "--cert-dir",
            "/nonexistent/dir",
        ],
        "agentwire cert",
    );
    fails_with(
        &["hub", "--listen", "quic://127.0.0.1:0", "--threads", "2000"],
        "2000 is not in 0..=1024",
    );
}

#[test]
fn bench_flags_are_checked() {
    fails_with(&["bench", "--transports", "tcp"], "unknown bench transport");
    fails_with(
        &["bench", "--allow-debug", "--cell", "quic:100"],
        "TRANSPORT:AGENTSxSIZE",
    );
    fails_with(&["bench", "--allow-debug", "--networks", "50"], "RTTms");
    fails_with(&["bench", "--allow-debug", "--window", "0"], "window 0");
    fails_with(
        &["bench", "--allow-debug", "--rate", "0"],
        "rate 0 is out of range",
    );
    fails_with(
        &["bench", "--allow-debug", "--rate", "NaN"],
        "rate NaN is out of range",
    );
    fails_with(
        &["bench", "--allow-debug", "--pattern", "broadcast"],
        "unknown bench pattern",
    );
    fails_with(
        &["bench", "--allow-debug", "--hub-threads", "0"],
        "0 is not in 1..=1024",
    );
    fails_with(
        &[
            "bench",
            "--allow-debug",
            "--pattern",
            "fanout",
            "--sizes",
            "8",
        ],
        "too small for the fanout pattern",
    );
    if cfg!(debug_assertions) {
        // Numbers from a debug build are meaningless: refused unless asked for.
        fails_with(&["bench", "--agents", "1"], "DEBUG build");
    }
}

/// `--patterns`: every scenario once per pattern, through the hub as a process;
/// the one-way cells count deliveries, with none missing.
#[test]
fn bench_patterns_run_each_pattern_with_the_hub_as_a_process() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "bench",
        "--allow-debug",
        "--no-progress",
        "--patterns",
        "--transports",
        "unix",
        "--agents",
        "2",
        "--sizes",
        "100",
        "--warmup-ms",
        "0",
        "--duration-ms",
        "200",
        "--open-loop-ms",
        "0",
        "--probe-ms",
        "0",
        "--repetitions",
        "1",
        // The hub single-threaded, the clients on two threads.
        "--hub-threads",
        "1",
        "--client-threads",
        "2",
        "--json",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for c in json["cells"].as_array().unwrap() {
        assert_eq!(c["config"]["hub_threads"], 1);
        assert_eq!(c["config"]["client_threads"], 2);
    }
    let patterns: Vec<&str> = json["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["config"]["pattern"].as_str().unwrap())
        .collect();
    assert_eq!(patterns, ["request", "fanout", "gather", "stream", "queue"]);
    for c in json["cells"].as_array().unwrap() {
        let name = &c["config"]["pattern"];
        assert_eq!(c["errors"], 0, "{name}");
        assert_eq!(c["failures"].as_array().unwrap().len(), 0, "{name}");
        let r = &c["runs"][0];
        assert!(r["answered"].as_u64().unwrap() > 0, "{name}");
        assert_eq!(r["answered"], r["sent"], "{name}");
    }
}

/// The tiny end-to-end bench run of CI: every transport over loopback with the hub as its own
/// process, JSON on stdout in the current schema, every request accounted for, hub and agent
/// resources measured apart.
#[test]
fn bench_tiny_run_every_transport_with_the_hub_as_a_process() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&[
        "bench",
        "--allow-debug",
        "--no-progress",
        "--mappings",
        "per-message,lanes,h2,wss,unix",
        "--agents",
        "2",
        "--sizes",
        "100",
        "--warmup-ms",
        "0",
        "--duration-ms",
        "200",
        "--open-loop-ms",
        "200",
        "--probe-ms",
        "200",
        "--request-timeout-ms",
        "30000",
        "--repetitions",
        "1",
        "--json",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["schema"], "agentwire-bench/3");
    assert_eq!(json["hub_mode"], "process");
    assert_eq!(json["config"]["preset"], "custom");
    assert_eq!(json["environment"]["build_profile"], "debug");
    let cells = json["cells"].as_array().unwrap();
    let transports: Vec<&str> = cells
        .iter()
        .map(|c| c["config"]["transport"].as_str().unwrap())
        .collect();
    assert_eq!(transports, ["quic", "quic-lanes", "h2", "wss", "unix"]);
    for c in cells {
        let name = &c["config"]["transport"];
        assert_eq!(c["consistent"], true, "{name}");
        assert_eq!(c["errors"], 0, "{name}");
        assert_eq!(c["failures"].as_array().unwrap().len(), 0, "{name}");
        let r = &c["runs"][0];
        let sent = r["sent"].as_u64().unwrap();
        assert!(sent > 0, "{name}");
        assert_eq!(r["answered"].as_u64().unwrap(), sent, "{name}");
        let ol = &r["open_loop"];
        assert_eq!(ol["answered"], ol["scheduled"], "{name}");
        assert_eq!(r["priority"]["classes"].as_array().unwrap().len(), 4);
        assert_eq!(r["resources"]["hub_mode"], "process");
        assert!(r["resources"]["hub"]["peak_rss_bytes"].as_u64().unwrap() > 1 << 20);
        assert!(r["resources"]["agents"]["peak_rss_bytes"].as_u64().unwrap() > 1 << 20);
        assert_eq!(r["network"]["mode"], "loopback");
    }
    // The JSON file holds the same report.
    let file = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "json"))
        .unwrap();
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(saved["cells"], json["cells"]);
}

#[test]
fn hub_on_every_transport_and_agents_on_each() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let certs_s = certs.to_str().unwrap();
    assert!(run(&["cert", "--out", certs_s]).status.success());
    let sock = dir.path().join("hub.sock");
    let sock_url = format!("unix://{}", sock.display());
    let (_hub, hub_out) = spawn(&[
        "hub",
        "--cert-dir",
        certs_s,
        "--listen",
        "quic://127.0.0.1:0",
        "--listen",
        "h2://127.0.0.1:0",
        "--listen",
        "wss://127.0.0.1:0",
        "--listen",
        &sock_url,
    ]);
    let mut urls = Vec::new();
    for scheme in ["quic://", "h2://", "wss://", "unix://"] {
        let line = wait_for(&hub_out, &format!("hub listening on {scheme}"));
        let url = line
            .trim_start_matches("hub listening on ")
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned();
        urls.push(url);
    }
    let ca = certs.join("ca.pem");
    let ca_s = ca.to_str().unwrap();
    let mut agents = Vec::new();
    for (url, transport) in urls.iter().zip(["quic", "http2", "websocket", "unix"]) {
        let id = format!("echo-{transport}");
        let (agent, out) = spawn(&["agent", "--hub", url, "--ca", ca_s, "--id", &id, "--echo"]);
        wait_for(&out, &format!("agent {id} connected over {transport}"));
        // Keep its output channel alive: the agent writes a line per message received.
        agents.push((agent, out));
    }
    // Every transport reaches every other through the one hub.
    for url in &urls {
        for to in ["quic", "http2", "websocket", "unix"] {
            let body = format!("{url} to {to}");
            let out = run(&[
                "send",
                "--hub",
                url,
                "--ca",
                ca_s,
                "--to",
                &format!("echo-{to}"),
                "--request",
                &body,
            ]);
            assert!(out.status.success(), "{body}: {}", text(&out.stderr));
            assert_eq!(text(&out.stdout).trim_end(), body);
        }
    }
    // auto:// against the HTTP/2 port: nothing answers QUIC there, so the agent falls back
    // and says where it landed.
    let port = urls[1].rsplit(':').next().unwrap();
    let (_auto, auto_out) = spawn(&[
        "agent",
        "--hub",
        &format!("auto://127.0.0.1:{port}"),
        "--ca",
        ca_s,
        "--id",
        "roamer",
        "--fallback-timeout-ms",
        "500",
    ]);
    wait_for(&auto_out, "agent roamer connected over http2");
}

/// `cert --webtransport`: a certificate browsers accept by hash, issued by the directory's CA
/// (made first when there is none), its printed SHA-256 that of the file, rotated only with
/// --force, and never valid for more than 13 days.
#[test]
fn cert_webtransport_issues_and_rotates_a_certificate_for_browsers() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let certs_s = certs.to_str().unwrap();
    let printed_hash = |out: &Output| {
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("sha-256:").map(|h| h.trim().to_owned()))
            .expect("the hash is printed")
    };
    let file_hash = || webtransport_hash(&certs);
    // A fresh directory: the CA and hub certificate first, then the browsers' one.
    let out = run(&["cert", "--out", certs_s, "--webtransport"]);
    let first = printed_hash(&out);
    assert!(text(&out.stdout).contains("hub key pin:"));
    assert_eq!(first, file_hash());
    let ca = std::fs::read_to_string(certs.join("ca.pem")).unwrap();
    // Again without --force: refused, the certificate in place kept.
    fails_with(
        &["cert", "--out", certs_s, "--webtransport"],
        "already exists",
    );
    assert_eq!(first, file_hash());
    // Rotated: a new certificate from the same CA, the hub's own files untouched.
    let out = run(&[
        "cert",
        "--out",
        certs_s,
        "--webtransport",
        "--force",
        "--days",
        "2",
    ]);
    let second = printed_hash(&out);
    assert_ne!(first, second);
    assert_eq!(second, file_hash());
    assert!(!text(&out.stdout).contains("hub key pin:"));
    assert_eq!(std::fs::read_to_string(certs.join("ca.pem")).unwrap(), ca);
    fails_with(
        &[
            "cert",
            "--out",
            certs_s,
            "--webtransport",
            "--force",
            "--days",
            "14",
        ],
        "1 to 13 days",
    );
    assert_eq!(second, file_hash());
}

/// `hub --webtransport`: prints the hash of the certificate it serves to browsers, takes a
/// rotated one on SIGHUP, and refuses --allow-origin patterns that are not origins.
#[test]
fn hub_webtransport_serves_the_browsers_certificate_and_takes_a_new_one_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let certs_s = certs.to_str().unwrap();
    assert!(run(&["cert", "--out", certs_s, "--webtransport"])
        .status
        .success());
    let (hub, hub_out) = spawn(&[
        "hub",
        "--listen",
        "quic://127.0.0.1:0",
        "--cert-dir",
        certs_s,
        "--webtransport",
        "--allow-origin",
        "http://localhost:*",
    ]);
    let first = webtransport_hash(&certs);
    wait_for(&hub_out, &format!("webtransport sha-256: {first}"));
    assert!(
        run(&["cert", "--out", certs_s, "--webtransport", "--force"])
            .status
            .success()
    );
    let second = webtransport_hash(&certs);
    assert_ne!(first, second);
    hub.hang_up();
    wait_for(
        &hub_out,
        &format!("webtransport certificate reloaded: sha-256 {second}"),
    );
    drop(hub);
    fails_with(
        &[
            "hub",
            "--listen",
            "quic://127.0.0.1:0",
            "--cert-dir",
            certs_s,
            "--webtransport",
            "--allow-origin",
            "app.example.com/path",
        ],
        "is not an origin pattern",
    );
}
