//! Shared by the CLI integration tests: running the `agentwire` binary, spawning it with its
//! output lines on a channel, waiting for a line, expecting a failure with a message.
#![allow(dead_code)] // each test binary uses a different part

pub mod lan;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_agentwire");

/// Kills the child process when dropped, so a failing test leaves nothing running.
pub struct Running(pub Child);

impl Running {
    /// Sends the process SIGHUP (a hub reloads its files on it).
    pub fn hang_up(&self) {
        let pid = self.0.id().to_string();
        assert!(Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success());
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `agentwire ARGS` and returns it with a channel of its output lines (stdout and
/// stderr merged).
pub fn spawn(args: &[&str]) -> (Running, mpsc::Receiver<String>) {
    let mut command = Command::new(BIN);
    command.args(args);
    spawn_command(command)
}

/// Starts `command` and returns it with a channel of its output lines (stdout and stderr
/// merged).
pub fn spawn_command(mut command: Command) -> (Running, mpsc::Receiver<String>) {
    let mut child = command
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

/// The address after `scheme` in a server's "listening" line, up to the next space: the port
/// the server chose.
pub fn addr_after(line: &str, scheme: &str) -> String {
    line.split(scheme)
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {scheme} address in {line:?}"))
        .to_owned()
}

/// Waits for an output line containing `needle` and returns it (lines before it are
/// skipped).
pub fn wait_for(rx: &mpsc::Receiver<String>, needle: &str) -> String {
    wait_for_all(rx, &[needle]).remove(0)
}

/// Waits until every one of `needles` has been in an output line, in any order, and returns
/// the lines in the order of `needles`. For lines from the two streams: stdout and stderr
/// are read by a thread each, so a line the process printed later to one stream can arrive
/// before a line it printed earlier to the other (and `wait_for` would skip it).
pub fn wait_for_all(rx: &mpsc::Receiver<String>, needles: &[&str]) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut found: Vec<Option<String>> = vec![None; needles.len()];
    let mut seen = Vec::new();
    while found.iter().any(Option::is_none) {
        let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) else {
            break;
        };
        let Ok(line) = rx.recv_timeout(left) else {
            break;
        };
        match (0..needles.len()).find(|&i| found[i].is_none() && line.contains(needles[i])) {
            Some(i) => found[i] = Some(line),
            None => seen.push(line),
        }
    }
    let missing: Vec<&str> = (0..needles.len())
        .filter(|&i| found[i].is_none())
        .map(|i| needles[i])
        .collect();
    assert!(
        missing.is_empty(),
        "no line containing {missing:?}; saw: {seen:#?}"
    );
    found.into_iter().flatten().collect()
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

/// `agentwire cert` into a temporary directory, then `agentwire serve --generate` on a free
/// port; returns the server, its address and the directory.
pub fn start_server() -> (Running, String, tempfile::TempDir) {
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
    let addr = addr_after(&line, "https://");
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
