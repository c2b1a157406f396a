//! Per-agent credentials and permissions with real processes: a hub with an access file,
//! agents with their tokens; impostors (a wrong token, another agent's id, a forbidden topic
//! or destination) are refused while everyone else keeps working.

mod common;

use common::{fails_with, run, spawn, text, wait_for, wait_for_all, Running};

fn token() -> (String, String) {
    let out = run(&["token"]);
    assert!(out.status.success(), "token: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let field = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
    };
    let (t, h) = (field("token:"), field("token_sha256:"));
    assert_eq!(t.len(), 64);
    let again = run(&["token", "--hash", &t]);
    assert_eq!(text(&again.stdout).trim(), format!("token_sha256: {h}"));
    (t, h)
}

/// A hub on a Unix socket with an access file, and agent `worker-1` echoing on it.
struct Site {
    hub: Running,
    hub_out: std::sync::mpsc::Receiver<String>,
    _worker: Running,
    worker_out: std::sync::mpsc::Receiver<String>,
    url: String,
}

impl Site {
    fn start(dir: &std::path::Path, access: &std::path::Path, worker_token: &str) -> Site {
        let url = format!("unix://{}", dir.join("hub.sock").display());
        let (hub, hub_out) = spawn(&[
            "hub",
            "--listen",
            &url,
            "--access-file",
            access.to_str().unwrap(),
        ]);
        wait_for(&hub_out, "hub listening on unix://");
        let (worker, worker_out) = spawn(&[
            "agent",
            "--hub",
            &url,
            "--id",
            "worker-1",
            "--auth-token",
            worker_token,
            "--echo",
        ]);
        wait_for(&worker_out, "agent worker-1 connected");
        Site {
            hub,
            hub_out,
            _worker: worker,
            worker_out,
            url,
        }
    }
}

#[test]
fn impostors_are_refused_and_everyone_else_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let (boss_token, boss_hash) = token();
    let (worker_token, worker_hash) = token();
    let access = dir.path().join("access.json");
    std::fs::write(
        &access,
        format!(
            r#"{{"credentials": [
  {{"token_sha256": "{boss_hash}", "ids": ["boss"], "send": ["agent:worker-*"]}},
  {{"token_sha256": "{worker_hash}", "ids": ["worker-*"], "send": ["topic:results"],
    "subscribe": ["results"]}}
]}}"#
        ),
    )
    .unwrap();
    let site = Site::start(dir.path(), &access, &worker_token);
    let url = site.url.clone();

    // The boss may ask a worker.
    let ask = |token: &str, id: &str, to: &str| {
        run(&[
            "send",
            "--hub",
            &url,
            "--id",
            id,
            "--auth-token",
            token,
            "--to",
            to,
            "--request",
            "ping",
        ])
    };
    let out = ask(&boss_token, "boss", "worker-1");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "ping\n");
    // Impostors: a wrong token, and the worker's token used for the boss's id.
    let out = ask("not-the-token", "boss", "worker-1");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("unauthorized"),
        "{}",
        text(&out.stderr)
    );
    let out = ask(&worker_token, "boss", "worker-1");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no credential for agent id \"boss\""),
        "{}",
        text(&out.stderr)
    );
    // A worker may not write to another worker, nor subscribe outside its grant.
    fails_with(
        &[
            "send",
            "--hub",
            &url,
            "--id",
            "worker-2",
            "--auth-token",
            &worker_token,
            "--to",
            "worker-1",
            "--message",
            "hi",
        ],
        "not allowed to send to agent:worker-1",
    );
    let (_spy, spy_out) = spawn(&[
        "agent",
        "--hub",
        &url,
        "--id",
        "worker-3",
        "--auth-token",
        &worker_token,
        "--subscribe",
        "secrets",
    ]);
    wait_for(&spy_out, "not allowed to subscribe to \"secrets\"");
    // Everyone else kept working.
    let out = ask(&boss_token, "boss", "worker-1");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // A broken access file stops the hub with the file named.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"credentials\": [{\"ids\": [\"x\"]}]}").unwrap();
    fails_with(
        &[
            "hub",
            "--listen",
            &format!("unix://{}/h2.sock", dir.path().display()),
            "--access-file",
            bad.to_str().unwrap(),
        ],
        &format!("the access file {} is not valid", bad.display()),
    );
}

#[test]
fn agent_certificates_bind_ids_and_impostors_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let certs_s = certs.to_str().unwrap();
    let out = run(&["cert", "--out", certs_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for id in ["worker-1", "boss"] {
        let out = run(&["cert", "agent", "--id", id, "--ca-dir", certs_s]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains(&format!("{id}.pem")));
    }
    let file = |name: &str| certs.join(name).to_str().unwrap().to_owned();
    let ca = file("ca.pem");
    let (_hub, hub_out) = spawn(&[
        "hub",
        "--listen",
        "quic://127.0.0.1:0",
        "--cert-dir",
        certs_s,
        "--client-ca",
        &ca,
    ]);
    let line = wait_for(&hub_out, "hub listening on quic://");
    let url = format!("quic://{}", common::addr_after(&line, "quic://"));
    let (_worker, worker_out) = spawn(&[
        "agent",
        "--hub",
        &url,
        "--ca",
        &ca,
        "--id",
        "worker-1",
        "--cert",
        &file("worker-1.pem"),
        "--key",
        &file("worker-1.key"),
        "--echo",
    ]);
    wait_for(&worker_out, "agent worker-1 connected");
    let ask = |extra: &[&str]| {
        let mut args = vec![
            "send",
            "--hub",
            &url,
            "--ca",
            &ca,
            "--to",
            "worker-1",
            "--request",
            "ping",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let (boss_cert, boss_key) = (file("boss.pem"), file("boss.key"));
    let boss = ["--id", "boss", "--cert", &boss_cert, "--key", &boss_key];
    let out = ask(&boss);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "ping\n");
    // No certificate: refused in the TLS handshake.
    let out = ask(&["--id", "boss"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).to_lowercase().contains("certificate"),
        "{}",
        text(&out.stderr)
    );
    // Another agent's certificate: the CLI says so before connecting (the hub would refuse
    // it too: crates/core/tests/client_certs.rs).
    let (w_cert, w_key) = (file("worker-1.pem"), file("worker-1.key"));
    let out = ask(&["--id", "boss", "--cert", &w_cert, "--key", &w_key]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("names agent \"worker-1\", not \"boss\""),
        "{}",
        text(&out.stderr)
    );
    // The certified agents kept working.
    let out = ask(&boss);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // `cert agent` refuses to write over a cert directory's own files.
    fails_with(
        &[
            "cert", "agent", "--id", "hub", "--ca-dir", certs_s, "--force",
        ],
        "would be written over",
    );
}

/// Secure defaults: an open hub beyond loopback warns, `--require-auth` refuses to start an
/// open hub or one whose tokens would cross plain ws://, and a token from a file works.
#[test]
fn an_open_hub_warns_and_require_auth_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let sock = format!("unix://{}/hub.sock", dir.path().display());
    // Beyond loopback without credentials: a warning, and the hub still starts. (It listens on
    // every address of this machine for a moment; nothing connects to it.)
    let (_open, open_out) = spawn(&["hub", "--listen", "ws://0.0.0.0:0"]);
    wait_for_all(
        &open_out,
        &[
            "WARNING: ws://0.0.0.0:0 is reachable beyond this machine",
            "hub listening on ws://",
        ],
    );

    fails_with(
        &["hub", "--listen", &sock, "--require-auth"],
        "--require-auth: not starting",
    );
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token-from-a-file\n").unwrap();
    let mut perms = std::fs::metadata(&token_file).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o600);
    std::fs::set_permissions(&token_file, perms).unwrap();
    let file = token_file.to_str().unwrap();
    fails_with(
        &[
            "hub",
            "--listen",
            "ws://127.0.0.1:0",
            "--auth-token-file",
            file,
            "--require-auth",
        ],
        "travel unencrypted over loopback on ws://127.0.0.1:0",
    );
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    fails_with(
        &[
            "hub",
            "--listen",
            &sock,
            "--auth-token-file",
            empty.to_str().unwrap(),
        ],
        "is empty",
    );

    let (_hub, hub_out) = spawn(&[
        "hub",
        "--listen",
        &sock,
        "--auth-token-file",
        file,
        "--require-auth",
    ]);
    wait_for(&hub_out, "hub listening on unix://");
    let send = |token: &str| {
        run(&[
            "send",
            "--hub",
            &sock,
            "--id",
            "a",
            "--auth-token",
            token,
            "--to",
            "a",
            "--message",
            "hi",
        ])
    };
    let out = send("s3cret-token-from-a-file");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = send("s3cret-token-from-a-fil");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("unauthorized"),
        "{}",
        text(&out.stderr)
    );
}

/// SIGHUP reloads the access file: an agent whose credential was removed is closed, and a file
/// that is not valid leaves the rules in force.
#[test]
fn sighup_reloads_the_access_file_and_revokes_removed_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let (boss_token, boss_hash) = token();
    let (worker_token, worker_hash) = token();
    let access = dir.path().join("access.json");
    let write = |worker: bool| {
        let worker_line = if worker {
            format!(
                r#", {{"token_sha256": "{worker_hash}", "ids": ["worker-*"], "send": ["agent:boss"]}}"#
            )
        } else {
            String::new()
        };
        std::fs::write(
            &access,
            format!(
                r#"{{"credentials": [{{"token_sha256": "{boss_hash}", "ids": ["boss"], "send": ["agent:worker-*"]}}{worker_line}]}}"#
            ),
        )
        .unwrap();
    };
    write(true);
    let site = Site::start(dir.path(), &access, &worker_token);
    let url = site.url.clone();
    let hangup = || site.hub.hang_up();
    // A broken file: the rules in force stay, the worker stays.
    std::fs::write(&access, "{not json").unwrap();
    hangup();
    wait_for(&site.hub_out, "the access rules in force stay as they were");
    let ask = || {
        run(&[
            "send",
            "--hub",
            &url,
            "--id",
            "boss",
            "--auth-token",
            &boss_token,
            "--to",
            "worker-1",
            "--request",
            "ping",
        ])
    };
    let out = ask();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The worker's credential removed: it is closed with unauthorized.
    write(false);
    hangup();
    wait_for(&site.hub_out, "reloaded: 1 agent(s) closed");
    wait_for(&site.worker_out, "unauthorized");
    let out = ask();
    assert!(!out.status.success());
}

/// `--revoked-serials`: `cert agent` prints the serial, SIGHUP puts a revocation in force and
/// closes the agent whose certificate it names; it cannot connect again.
#[test]
fn sighup_revokes_an_agent_certificate_by_its_serial() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let certs_s = certs.to_str().unwrap();
    assert!(run(&["cert", "--out", certs_s]).status.success());
    let out = run(&["cert", "agent", "--id", "worker-1", "--ca-dir", certs_s]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let serial = stdout
        .lines()
        .find_map(|l| l.strip_prefix("serial:"))
        .expect("cert agent prints the serial")
        .trim()
        .to_owned();
    let file = |name: &str| certs.join(name).to_str().unwrap().to_owned();
    let revoked = dir.path().join("revoked.txt");
    std::fs::write(&revoked, "# nothing revoked yet\n").unwrap();
    let (hub, hub_out) = spawn(&[
        "hub",
        "--listen",
        "quic://127.0.0.1:0",
        "--cert-dir",
        certs_s,
        "--client-ca",
        &file("ca.pem"),
        "--revoked-serials",
        revoked.to_str().unwrap(),
    ]);
    let line = wait_for(&hub_out, "hub listening on quic://");
    let url = format!("quic://{}", common::addr_after(&line, "quic://"));
    let worker = |out: &str| {
        spawn(&[
            "agent",
            "--hub",
            &url,
            "--ca",
            &file("ca.pem"),
            "--id",
            out,
            "--cert",
            &file("worker-1.pem"),
            "--key",
            &file("worker-1.key"),
            "--echo",
        ])
    };
    let (_worker, worker_out) = worker("worker-1");
    wait_for(&worker_out, "agent worker-1 connected");
    std::fs::write(&revoked, format!("{serial}  # lost laptop\n")).unwrap();
    hub.hang_up();
    wait_for(&hub_out, "1 serial(s) revoked, 1 agent(s) closed");
    wait_for(&worker_out, "revoked");
    let out = run(&[
        "send",
        "--hub",
        &url,
        "--ca",
        &file("ca.pem"),
        "--id",
        "worker-1",
        "--cert",
        &file("worker-1.pem"),
        "--key",
        &file("worker-1.key"),
        "--to",
        "x",
        "hello",
    ]);
    assert!(!out.status.success(), "a revoked certificate got in again");
}

/// `agentwire reload`: an agent whose credential says `"admin": true` makes the hub read its
/// access file again (as SIGHUP does) and gets the report; anyone else is refused.
#[test]
fn an_admin_asks_the_hub_to_reload_and_nobody_else_may() {
    let dir = tempfile::tempdir().unwrap();
    let (ops_token, ops_hash) = token();
    let (worker_token, worker_hash) = token();
    let access = dir.path().join("access.json");
    let write = |worker: bool| {
        let worker_line = if worker {
            format!(r#", {{"token_sha256": "{worker_hash}", "ids": ["worker-*"], "send": ["*"]}}"#)
        } else {
            String::new()
        };
        std::fs::write(
            &access,
            format!(
                r#"{{"credentials": [{{"token_sha256": "{ops_hash}", "ids": ["ops"], "admin": true}}{worker_line}]}}"#
            ),
        )
        .unwrap();
    };
    write(true);
    let site = Site::start(dir.path(), &access, &worker_token);
    let reload = |id: &str, token: &str| {
        run(&[
            "reload",
            "--hub",
            &site.url,
            "--id",
            id,
            "--auth-token",
            token,
        ])
    };
    // A worker, even one allowed to send everywhere, may not.
    let out = reload("worker-2", &worker_token);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("admin"), "{}", text(&out.stderr));
    // The admin may: the worker's credential removed, it is closed, and the report says so.
    write(false);
    let out = reload("ops", &ops_token);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reloaded = report["reloaded"][0].as_str().unwrap();
    assert!(reloaded.contains("reloaded: 1 agent(s) closed"), "{report}");
    assert_eq!(report["errors"], serde_json::json!([]));
    wait_for(&site.hub_out, "reloaded: 1 agent(s) closed");
    wait_for(&site.worker_out, "unauthorized");
    // A broken file is reported, and the command fails.
    std::fs::write(&access, "{not json").unwrap();
    let out = reload("ops", &ops_token);
    assert!(!out.status.success());
    assert!(
        text(&out.stdout).contains("stay as they were"),
        "{}",
        text(&out.stdout)
    );
}
