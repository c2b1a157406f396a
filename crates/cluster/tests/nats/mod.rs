//! nats-server processes for tests, on loopback: one server, or a 3-node cluster, both with
//! JetStream. The binary comes from `NATS_SERVER`, `target/peers-nats/nats-server` (as
//! scripts/lib/nats-server.sh installs it), or `PATH`; without one the helpers say so and
//! return `None`, except under CI (`CI` set), which must install one.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub struct Nats(pub Child, pub String);

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fresh JetStream store directory for one nats-server.
pub fn jetstream_dir(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!(
        "aw-nats-{}-{name}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    dir.display().to_string()
}

pub fn nats_server() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NATS_SERVER") {
        return Some(PathBuf::from(p));
    }
    let local =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/peers-nats/nats-server");
    if local.exists() {
        return Some(local);
    }
    let on_path = Command::new("nats-server").arg("--version").output();
    on_path
        .ok()
        .filter(|o| o.status.success())
        .map(|_| PathBuf::from("nats-server"))
}

/// A nats-server on a free loopback port, or `None` (with the reason printed) when there is none.
pub fn start_nats() -> Option<Nats> {
    let Some(bin) = nats_server() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install nats-server (scripts/peers/nats.sh installs it)"
        );
        eprintln!("skipped: no nats-server (set NATS_SERVER, or run scripts/peers/nats.sh)");
        return None;
    };
    let mut command = Command::new(bin);
    command.args([
        "-a",
        "127.0.0.1",
        "-p",
        "-1",
        "-js",
        "-sd",
        &jetstream_dir("one"),
    ]);
    let (child, line) = start_until(command, "Listening for client connections on ");
    let url = match line.split("Listening for client connections on ").nth(1) {
        Some(addr) => format!("nats://{}", addr.trim()),
        None => panic!("no address in {line:?}"),
    };
    Some(Nats(child, url))
}

/// Three free loopback TCP ports (for a NATS cluster's client and route listeners).
pub fn free_ports(n: usize) -> Vec<u16> {
    let sockets: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    sockets
        .iter()
        .map(|s| s.local_addr().unwrap().port())
        .collect()
}

/// Where one node of a NATS cluster runs: a network namespace (`None`: this one), its
/// address and its two ports.
pub struct NodeHost {
    pub netns: Option<String>,
    pub ip: String,
    pub client_port: u16,
    pub route_port: u16,
}

/// A 3-node NATS cluster on loopback (each node routes to the other two), or `None`.
pub fn start_nats_cluster() -> Option<Vec<(Nats, String)>> {
    let ports = free_ports(6);
    let hosts: Vec<NodeHost> = (0..3)
        .map(|i| NodeHost {
            netns: None,
            ip: "127.0.0.1".into(),
            client_port: ports[i],
            route_port: ports[3 + i],
        })
        .collect();
    start_nats_cluster_on(&hosts)
}

/// A NATS cluster with JetStream, one node per host (each routes to all others), or `None`
/// when there is no nats-server. Returns each node with its client URL.
pub fn start_nats_cluster_on(hosts: &[NodeHost]) -> Option<Vec<(Nats, String)>> {
    let bin = nats_server().or_else(|| {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install nats-server"
        );
        eprintln!("skipped: no nats-server");
        None
    })?;
    let route = |h: &NodeHost| format!("nats://{}:{}", h.ip, h.route_port);
    let mut nodes = Vec::new();
    for (i, host) in hosts.iter().enumerate() {
        let others: Vec<String> = hosts
            .iter()
            .enumerate()
            .filter(|&(j, _)| j != i)
            .map(|(_, h)| route(h))
            .collect();
        let mut command = match &host.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        command
            .args([
                "-a",
                &host.ip,
                "-p",
                &host.client_port.to_string(),
                "-n",
                &format!("node-{i}"),
            ])
            .args(["--cluster_name", "aw", "--cluster", &route(host)])
            .args(["--routes", &others.join(",")])
            .args(["-js", "-sd", &jetstream_dir(&format!("node-{i}"))]);
        let (child, _) = start_until(command, "Server is ready");
        let url = format!("nats://{}:{}", host.ip, host.client_port);
        nodes.push((Nats(child, url.clone()), url));
    }
    Some(nodes)
}

/// Starts `command` (a nats-server) and reads its log until a line holds `needle`; returns
/// the process and that line. The rest of the log is read and dropped (so the server never
/// blocks on a full pipe).
fn start_until(mut command: Command, needle: &str) -> (std::process::Child, String) {
    let mut child = command
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("nats-server starts");
    let stderr = child.stderr.take().expect("piped");
    let mut lines = BufReader::new(stderr).lines();
    let found = loop {
        let line = lines
            .next()
            .expect("nats-server starts up")
            .expect("its log is text");
        if line.contains(needle) {
            break line;
        }
    };
    std::thread::spawn(move || for _ in lines {});
    (child, found)
}

/// A nats-server (no JetStream) on a free loopback port started with the configuration
/// `config` (its `listen` line is added here), or `None` as [`start_nats`] says.
pub fn start_nats_with_config(config: &str) -> Option<Nats> {
    let Some(bin) = nats_server() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install nats-server (scripts/peers/nats.sh installs it)"
        );
        eprintln!("skipped: no nats-server (set NATS_SERVER, or run scripts/peers/nats.sh)");
        return None;
    };
    let port = free_ports(1)[0];
    let file = std::path::PathBuf::from(jetstream_dir("conf")).with_extension("conf");
    std::fs::write(&file, format!("listen: \"127.0.0.1:{port}\"\n{config}\n")).unwrap();
    let mut command = Command::new(bin);
    command.arg("-c").arg(&file);
    let (child, _) = start_until(command, "Server is ready");
    Some(Nats(child, format!("127.0.0.1:{port}")))
}
