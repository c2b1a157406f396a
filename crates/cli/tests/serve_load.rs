//! The `agentwire serve` / `agentwire load` contract, run for real as separate processes on
//! loopback:
//!
//!     agentwire serve --root DIR --listen 127.0.0.1:PORT --cert-dir CERTS --generate
//!     agentwire load https://127.0.0.1:PORT/1k.bin --proto h3 --duration 1s --insecure --json
//!
//! for h3, h2 and http1.1, plus the failures a person meets first (no --ca, wrong --streams).
//! No assertion depends on speed.

mod common;

use common::{run, start_server, text};

#[test]
fn load_measures_serve_over_every_protocol() {
    let (_server, addr, _dir) = start_server();
    let url = format!("https://{addr}/1k.bin");
    for proto in ["h3", "h2", "http1.1"] {
        let out = run(&[
            "load",
            &url,
            "--proto",
            proto,
            "--duration",
            "1s",
            "--insecure",
            "--json",
        ]);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{proto}: {}\n{stdout}",
            text(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("{proto}: not one JSON object ({e}): {stdout}"));
        assert_eq!(json["schema"], "agentwire-load/2");
        assert_eq!(json["settings"]["proto"], proto);
        let requests = json["requests"].as_u64().unwrap();
        assert!(requests > 0, "{proto}: {json}");
        assert_eq!(json["errors"], 0, "{proto}: {json}");
        assert_eq!(json["status"]["200"].as_u64(), Some(requests), "{proto}");
        assert_eq!(json["bytes"].as_u64(), Some(requests * 1024), "{proto}");
        assert!(json["rps"].as_f64().unwrap() > 0.0, "{proto}");
        for key in ["request", "ttfb", "connect"] {
            for p in ["p50_us", "p90_us", "p99_us", "p999_us", "max_us"] {
                assert!(json["latency"][key][p].is_u64(), "{proto}: {key}.{p}");
            }
        }
        assert!(
            text(&out.stderr).contains("verification is DISABLED"),
            "{proto}: --insecure must warn"
        );
    }
}

#[test]
fn load_with_the_ca_and_the_text_summary() {
    let (_server, addr, dir) = start_server();
    let ca = dir.path().join("certs").join("ca.pem");
    let out = run(&[
        "load",
        &format!("https://{addr}/5k.bin"),
        &format!("https://{addr}/630b.bin"),
        "--proto",
        "h2",
        "--requests",
        "20",
        "--connections",
        "2",
        "--streams",
        "2",
        "--ca",
        ca.to_str().unwrap(),
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", text(&out.stderr));
    assert!(
        stdout.contains("requests: 20 total, 20 responses (20 2xx), 0 errors"),
        "{stdout}"
    );
    assert!(stdout.contains("p99.9"), "{stdout}");
}

#[test]
fn load_without_trust_fails_with_a_tls_message_not_a_hang() {
    let (_server, addr, _dir) = start_server();
    for proto in ["h3", "h2", "http1.1"] {
        let out = run(&[
            "load",
            &format!("https://{addr}/1k.bin"),
            "--proto",
            proto,
            "--requests",
            "3",
        ]);
        assert!(!out.status.success(), "{proto} succeeded without trust");
        let err = text(&out.stderr);
        assert!(err.contains("no request succeeded"), "{proto}: {err}");
        assert!(err.contains("tls"), "{proto}: {err}");
        assert!(err.contains("--ca"), "{proto}: {err}");
    }
}

#[test]
fn bad_load_flags_are_refused_clearly() {
    let out = run(&[
        "load",
        "https://127.0.0.1:1/x",
        "--proto",
        "http1.1",
        "--streams",
        "4",
        "--insecure",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--streams 1"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["load", "https://127.0.0.1:1/x", "--proto", "spdy"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("h3, h2 or http1.1"));
    let out = run(&["load", "http://127.0.0.1:1/x", "--insecure"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("https://"));
    let out = run(&[
        "serve",
        "--root",
        "/nonexistent-agentwire-root",
        "--cert-dir",
        "/nonexistent-agentwire-certs",
    ]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("/nonexistent-agentwire-root"));
}

#[test]
fn load_resumes_sessions_and_sends_0rtt_on_request() {
    let (_server, addr, dir) = start_server();
    let url = format!("https://{addr}/1k.bin");
    let ca = dir.path().join("certs").join("ca.pem");
    let out = run(&[
        "load",
        &url,
        "--proto",
        "h3",
        "--0rtt",
        "--max-requests-per-conn",
        "1",
        "--requests",
        "20",
        "--ca",
        ca.to_str().unwrap(),
        "--json",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", text(&out.stderr));
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["settings"]["resume"], true, "--0rtt implies --resume");
    assert_eq!(json["settings"]["zero_rtt"], true);
    assert_eq!(json["succeeded"], 20);
    let h = &json["handshakes"];
    assert_eq!(h["connections"], 20);
    assert!(h["resumed"].as_u64().unwrap() > 0, "{h}");
    assert!(h["zero_rtt_accepted"].as_u64().unwrap() > 0, "{h}");
    let out = run(&["load", &url, "--proto", "h2", "--0rtt", "--insecure"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("--0rtt works with --proto h3 only"));
}
