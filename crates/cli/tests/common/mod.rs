//! Shared by the CLI integration tests: running the `agentwire` binary, spawning it with its
//! output lines on a channel, waiting for a line, expecting a failure with a message.
#![allow(dead_code)] // each test binary uses a different part

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_agentwire");

/// Kills the child process when dropped, so a failing test leaves nothing running.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `agentwire ARGS` and returns it with a channel of its output lines (stdout and
/// stderr merged).
pub fn spawn(args: &[&str]) -> (Running, mpsc::Receiver<String>) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start agentwire");
    let (tx, rx) = mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
    }
    (Running(child), rx)
}

/// Waits for an output line containing `needle` and returns it.
pub fn wait_for(rx: &mpsc::Receiver<String>, needle: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return line,
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    panic!("no line containing {needle:?}; saw: {seen:#?}");
}

pub fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run agentwire")
}

/// Runs `agentwire ARGS`, expecting failure with `needle` in its error output.
pub fn fails_with(args: &[&str], needle: &str) {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    let err = text(&out.stderr);
    assert!(err.contains(needle), "{args:?}: {err}");
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
