//! `agentwire scorecard` as a process: a tiny in-process run writes its files and succeeds,
//! and a target where nothing listens fails quickly with a clear error instead of hanging.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::BIN;

/// Runs `agentwire ARGS`, killing it (and failing) if it takes longer than `limit`.
fn run_within(args: &[&str], limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start agentwire");
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collect output");
            panic!(
                "agentwire {args:?} still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let elapsed = started.elapsed();
    (child.wait_with_output().expect("collect output"), elapsed)
}

#[test]
fn nothing_listening_fails_quickly_and_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (output, took) = run_within(
        &[
            "scorecard",
            "--url",
            "https://127.0.0.1:1",
            "--insecure",
            "--quick",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(
        stderr.contains("error: cannot use https://127.0.0.1:1"),
        "{stderr}"
    );
    assert!(stderr.contains("refused"), "{stderr}");
}

#[test]
fn tiny_in_process_scorecard_writes_json_and_markdown() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (output, _) = run_within(
        &[
            "scorecard",
            "--scale",
            "tiny",
            "--protos",
            "h2,h3",
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("| scenario | metric | h2 | h3 |"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(out.join("scorecard.md")).unwrap();
    assert_eq!(md, stdout);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scorecard.json")).unwrap())
            .unwrap();
    assert_eq!(json["schema"], "agentwire-scorecard/1");
    assert_eq!(json["total_errors"], 0);
}

#[test]
fn scorecard_of_a_server_process_measures_its_cpu_and_compares_side_by_side() {
    let (server, addr, dir) = common::start_server();
    let pid = server.0.id().to_string();
    let ca = dir.path().join("certs").join("ca.pem");
    let served = dir.path().join("served");
    let url = format!("https://{addr}");
    let (output, _) = run_within(
        &[
            "scorecard",
            "--url",
            &url,
            "--ca",
            ca.to_str().unwrap(),
            "--server-pid",
            &pid,
            "--label",
            "served",
            "--threads",
            "2",
            "--scale",
            "tiny",
            "--protos",
            "h2",
            "--out",
            served.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(served.join("scorecard.json")).unwrap())
            .unwrap();
    assert_eq!(json["target"]["label"], "served");
    assert_eq!(
        json["target"]["server_pid"].as_u64(),
        pid.parse::<u64>().ok()
    );
    let runs = json["runs"].as_array().unwrap();
    assert!(
        runs.iter().all(|r| r["server_cpu_s"].is_number()),
        "every run measured"
    );
    assert!(
        runs.iter().all(|r| r["client_cpu_s"].is_number()),
        "client apart from server"
    );
    let server_cpu: f64 = runs.iter().filter_map(|r| r["server_cpu_s"].as_f64()).sum();
    assert!(server_cpu > 0.0, "the server worked: {server_cpu}");
    let round1 = runs
        .iter()
        .find(|r| r["scenario"] == "round1-630b")
        .unwrap();
    assert_eq!(round1["threads"], 2);
    for chart in ["scorecard-req-per-s.svg", "scorecard-mb-per-s.svg"] {
        let svg = std::fs::read_to_string(served.join(chart)).unwrap();
        assert!(svg.contains("<rect"), "{chart}");
    }
    let md = std::fs::read_to_string(served.join("scorecard.md")).unwrap();
    assert!(md.contains("server CPU us/req"), "{md}");
    assert!(md.contains("](scorecard-req-per-s.svg)"), "{md}");

    // The same card twice, side by side: one h2 table, each server a column, ratio 1.
    let side = dir.path().join("side");
    let card = served.join("scorecard.json");
    let (output, _) = run_within(
        &[
            "scorecard",
            "--compare",
            card.to_str().unwrap(),
            card.to_str().unwrap(),
            "--out",
            side.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("### h2"), "{stdout}");
    assert!(!stdout.contains("### h3"), "{stdout}");
    assert!(
        stdout.contains("| scenario | metric | served | served | served ÷ best other |"),
        "{stdout}"
    );
    assert!(stdout.contains(" 1.00 |"), "{stdout}");
    assert!(side.join("compare.md").exists());
    assert!(side.join("h2-req-per-s.svg").exists());

    // A file that is not a scorecard is refused, naming it.
    let (output, _) = run_within(
        &[
            "scorecard",
            "--compare",
            ca.to_str().unwrap(),
            "--out",
            side.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("ca.pem"));
}
