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
