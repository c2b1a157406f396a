//! The `agentwire serve` / `agentwire load` contract, run for real as separate processes on
//! loopback:
//!
//!     agentwire serve --root DIR --listen 127.0.0.1:PORT --cert-dir CERTS --generate
//!     agentwire load https://127.0.0.1:PORT/1k.bin --proto h3 --duration 1s --insecure --json
//!
//! for h3, h2 and http1.1, plus the failures a person meets first (no --ca, wrong --streams).
//! No assertion depends on speed.

mod common;

use common::{run, spawn, text, wait_for, Running};

/// `agentwire cert` into a temporary directory, then `agentwire serve --generate` on a free
/// port; returns the server, its address and the directory.
fn start_server() -> (Running, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let root = dir.path().join("www");
    let out = run(&["cert", "--out", certs.to_str().unwrap()]);
    assert!(out.status.success(), "cert failed: {}", text(&out.stderr));
    let (server, lines) = spawn(&[
        "serve",
        "--root",
        root.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--cert-dir",
        certs.to_str().unwrap(),
        "--generate",
        "--threads",
        "1",
    ]);
    let line = wait_for(&lines, "serving ");
    let addr = line
        .split("https://")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap()
        .to_owned();
    assert_eq!(
        line,
        format!(
            "serving {} on https://{addr} (h3 on UDP, h2 and http/1.1 on TCP)",
            root.display()
        )
    );
    assert!(root.join("10m.bin").exists(), "--generate wrote nothing");
    (server, addr, dir)
}

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
