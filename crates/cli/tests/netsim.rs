//! `agentwire netsim check` run for real: socket mode always, packet mode when privileged
//! (root/CAP_NET_ADMIN and iptables; otherwise it prints `skipped: <reason>` and passes).

use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_agentwire");

/// The checks measure timing: run them one at a time, not in parallel.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `agentwire netsim check --mode MODE --packets 2000 --json` and returns its JSON and
/// whether it exited successfully.
fn check(mode: &str) -> (Value, bool) {
    let out = Command::new(BIN)
        .args([
            "netsim",
            "check",
            "--mode",
            mode,
            "--packets",
            "2000",
            "--json",
        ])
        .output()
        .expect("run agentwire netsim check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("--mode {mode}: {stdout}{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line; stdout {stdout:?} stderr {stderr:?}"));
    (
        serde_json::from_str(line).expect("valid JSON"),
        out.status.success(),
    )
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{} is not a number in {v}", path.join(".")))
}

fn assert_report(v: &Value, mode: &str, exited_ok: bool) {
    assert_eq!(v["mode"], mode, "{v}");
    for key in [
        "mode_description",
        "seed",
        "passed",
        "total_seconds",
        "rtt",
        "loss",
        "rate",
        "ceiling",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {v}");
    }
    for f in [
        "min_ms",
        "median_ms",
        "p99_ms",
        "max_ms",
        "baseline_median_ms",
        "added_ms",
        "expected_added_ms",
        "tolerance_ms",
    ] {
        num(v, &["rtt", f]);
    }
    for f in [
        "packets",
        "received",
        "lost",
        "loss_percent",
        "model_dropped",
        "other_lost",
        "expected_lost",
        "bound_lo",
        "bound_hi",
    ] {
        num(v, &["loss", f]);
    }
    for f in [
        "sent",
        "received",
        "measured_mbit",
        "target_mbit",
        "bound_lo_mbit",
        "bound_hi_mbit",
    ] {
        num(v, &["rate", f]);
    }
    for f in [
        "seconds",
        "sent",
        "received",
        "packets_per_sec",
        "mbit",
        "cpu_seconds",
    ] {
        num(v, &["ceiling", f]);
    }

    assert_eq!(v["rtt"]["samples"], 200);
    // The tool's own bound is 1 ms; a test must not fail because a shared CI machine was
    // busy, so here only the physics is checked: never faster than the configured delay,
    // and not grossly slower.
    assert!(num(v, &["rtt", "min_ms"]) >= 50.0, "{}", v["rtt"]);
    let added = num(v, &["rtt", "added_ms"]);
    assert!(
        (50.0..60.0).contains(&added),
        "added RTT {added} ms: {}",
        v["rtt"]
    );
    assert_eq!(num(v, &["loss", "packets"]), 2000.0);
    assert_eq!(v["loss"]["pass"], true, "loss check failed: {}", v["loss"]);
    // The rate may be noisy on a busy machine: only require that it was measured.
    assert!(num(v, &["rate", "measured_mbit"]) > 0.0, "{}", v["rate"]);
    assert!(
        num(v, &["ceiling", "packets_per_sec"]) > 0.0,
        "{}",
        v["ceiling"]
    );
    assert!(num(v, &["total_seconds"]) < 60.0, "{v}");
    // The exit status follows the bounds.
    assert_eq!(exited_ok, v["passed"] == true, "{v}");
}

#[test]
fn netsim_check_socket_mode_json() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (v, ok) = check("socket");
    assert_report(&v, "socket", ok);
}

#[test]
fn netsim_check_packet_mode_json() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Same probe as the tool: can we create a namespace and run iptables in it?
    let probe = format!("aw-clitest-{}", std::process::id());
    let can = Command::new("ip")
        .args(["netns", "add", &probe])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    let iptables = can
        && Command::new("ip")
            .args([
                "netns", "exec", &probe, "iptables", "-w", "-L", "INPUT", "-n",
            ])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
    if can {
        let _ = Command::new("ip").args(["netns", "del", &probe]).status();
    }
    if !iptables {
        println!("netsim_check_packet_mode_json: skipped: needs root/CAP_NET_ADMIN and iptables");
        let out = Command::new(BIN)
            .args(["netsim", "check", "--mode", "packet", "--json"])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("netsim relay"));
        return;
    }
    let (v, ok) = check("packet");
    assert_report(&v, "packet", ok);
}
