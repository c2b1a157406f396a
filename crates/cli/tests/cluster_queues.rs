//! Three hub processes (`agentwire hub --cluster`) on a 3-node NATS cluster with JetStream,
//! each hub and each NATS node in a network namespace of its own on a bridge the test makes
//! (when it may: root and `ip`; on loopback otherwise). Agents on different hubs meet
//! (request/reply, a topic message arriving once, a `$presence` join); then a work queue is
//! shared by consumers on every hub, and no task is lost when a consumer's hub is killed, when
//! the hub keeping the queues is killed, or when a NATS node is killed. The consumers
//! reconnect to the next hub of their fallback list; tasks they held are delivered again. Redeliveries (duplicates) are counted and
//! printed, not failed: the queue promises at-least-once.

mod common;
#[path = "../../cluster/tests/nats/mod.rs"]
mod nats;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwire::agent_queues::QueueTask;
use agentwire::{Agent, AgentOptions, Destination, HubTrust, Kind};
use std::process::Command;

use common::lan::Lan;
use common::{addr_after, run, spawn_command, text, wait_for, wait_for_all, Running};

/// Where the NATS nodes and the hubs run.
struct Placement {
    nats: Vec<nats::NodeHost>,
    /// Each hub's namespace (`None`: this one) and its listen URL.
    hubs: Vec<(Option<String>, String)>,
    /// Names the hubs' certificate must hold.
    names: Vec<String>,
    _lan: Option<Lan>,
}

/// Hosts 0-2 for the NATS nodes and 3-5 for the hubs on a [`Lan`], or all on loopback.
/// The tests that make a [`Lan`] take turns: they use the same addresses.
static LAN_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn placement() -> Placement {
    match Lan::create(6) {
        Ok(lan) => Placement {
            nats: (0..3)
                .map(|k| nats::NodeHost {
                    netns: Some(lan.netns(k)),
                    ip: Lan::addr(k),
                    client_port: 4222,
                    route_port: 6222,
                })
                .collect(),
            hubs: (3..6)
                .map(|k| (Some(lan.netns(k)), format!("quic://{}:4433", Lan::addr(k))))
                .collect(),
            names: (3..6).map(Lan::addr).collect(),
            _lan: Some(lan),
        },
        Err(why) => {
            println!("on loopback: no network namespaces here ({why})");
            let ports = nats::free_ports(6);
            Placement {
                nats: (0..3)
                    .map(|i| nats::NodeHost {
                        netns: None,
                        ip: "127.0.0.1".into(),
                        client_port: ports[i],
                        route_port: ports[3 + i],
                    })
                    .collect(),
                hubs: (0..3)
                    .map(|_| (None, "quic://127.0.0.1:0".to_owned()))
                    .collect(),
                names: vec!["127.0.0.1".into()],
                _lan: None,
            }
        }
    }
}

struct HubProcess {
    _process: Running,
    url: String,
    /// Its output lines so far.
    log: Arc<Mutex<Vec<String>>>,
}

impl HubProcess {
    fn logged(&self, needle: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(needle))
    }
}

/// `agentwire hub` number `i` in cluster `q` through `servers` (its own node first), in
/// namespace `netns` on `listen`. Returns it, and whether it took the queues.
fn start_hub(
    i: usize,
    (netns, listen): &(Option<String>, String),
    servers: &[String],
    certs: &str,
) -> (HubProcess, bool) {
    let id = format!("hub-{i}");
    let mut command = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, common::BIN]);
            c
        }
        None => Command::new(common::BIN),
    };
    command.args([
        "hub",
        "--listen",
        listen,
        "--cert-dir",
        certs,
        "--cluster",
        &servers.join(","),
        "--cluster-name",
        "q",
        "--hub-id",
        &id,
        "--queue-ack-wait-ms",
        "5000",
        // Failover in 2 s instead of 3.5.
        "--cluster-expiry-ms",
        "2000",
        "-v",
    ]);
    let (process, lines) = spawn_command(command);
    let joined = wait_for(&lines, "joined cluster q");
    assert!(joined.contains(&id), "{joined}");
    let mut owner = false;
    let listening = loop {
        let line = wait_for(&lines, "");
        if line.contains("keeps the cluster's work queues") {
            owner = true;
        }
        if line.contains("hub listening on quic://") {
            break line;
        }
    };
    let url = format!("quic://{}", addr_after(&listening, "quic://"));
    // Its log, shown when the test fails (and it never blocks on a full pipe).
    let log = Arc::new(Mutex::new(Vec::new()));
    let keep = log.clone();
    std::thread::spawn(move || {
        for line in lines {
            println!("[hub-{i}] {line}");
            keep.lock().unwrap().push(line);
        }
    });
    (
        HubProcess {
            _process: process,
            url,
            log,
        },
        owner,
    )
}

/// Certificates for the hubs' names, then `n` hubs, each through every NATS node (its own
/// first); the first one takes the queues. Returns the certificates' directory, the CA file
/// and the hubs.
fn start_hubs(
    place: &Placement,
    nodes: &[(nats::Nats, String)],
    n: usize,
) -> (tempfile::TempDir, String, Vec<HubProcess>) {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    let mut cert = vec!["cert", "--out", certs.to_str().unwrap()];
    for name in &place.names {
        cert.extend(["--name", name]);
    }
    let out = run(&cert);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let certs = certs.to_str().unwrap().to_owned();
    let ca = format!("{certs}/ca.pem");
    let node_urls: Vec<String> = nodes.iter().map(|(_, url)| url.clone()).collect();
    let mut hubs = Vec::new();
    for i in 0..n {
        let mut servers = node_urls.clone();
        servers.rotate_left(i);
        let (hub, owner) = start_hub(i, &place.hubs[i], &servers, &certs);
        // The first hub takes the queues; the others find them kept.
        assert_eq!(owner, i == 0, "hub-{i}");
        hubs.push(hub);
    }
    (dir, ca, hubs)
}

/// What the consumers have done: acks per task body, and (re)connections per consumer.
#[derive(Default)]
struct Ledger {
    acked: HashMap<String, u32>,
    connections: HashMap<String, Vec<String>>,
}

fn options(id: &str, hubs: &[&str], ca: &str) -> AgentOptions {
    let trust = HubTrust::ca_file(std::path::Path::new(ca)).unwrap();
    let mut opts = AgentOptions::new(id, hubs[0], trust);
    opts.hubs = hubs.iter().map(|h| h.to_string()).collect();
    // Notice a killed hub within 2 s.
    opts.quic.idle_timeout = Duration::from_secs(2);
    opts.quic.keep_alive = Some(Duration::from_millis(500));
    opts.fallback_timeout = Duration::from_secs(1);
    opts
}

/// A consumer of `jobs` that reconnects through its fallback list whenever its hub goes,
/// until `stop`.
fn worker(
    id: &'static str,
    hubs: Vec<String>,
    ca: String,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let hubs: Vec<&str> = hubs.iter().map(String::as_str).collect();
        while !stop.load(Ordering::Relaxed) {
            let mut agent = match Agent::connect(options(id, &hubs, &ca)).await {
                Ok(a) => a,
                Err(_) => {
                    // Its old hub may still be announced for a moment (duplicate id).
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let hub = agent.hub_url().to_owned();
            ledger
                .lock()
                .unwrap()
                .connections
                .entry(id.to_owned())
                .or_default()
                .push(hub);
            if agent.consume("jobs", 4).await.is_err() {
                continue;
            }
            loop {
                let msg = match tokio::time::timeout(Duration::from_millis(500), agent.recv()).await
                {
                    Ok(Some(msg)) => msg,
                    Ok(None) => break, // its hub is gone: reconnect
                    Err(_) if stop.load(Ordering::Relaxed) => return,
                    Err(_) => continue,
                };
                let Some(task) = QueueTask::from_envelope(&msg.envelope) else {
                    continue;
                };
                tokio::time::sleep(Duration::from_millis(40)).await;
                if agent.ack(task.task).await.is_err() {
                    break;
                }
                let body = String::from_utf8_lossy(&task.body).into_owned();
                *ledger.lock().unwrap().acked.entry(body).or_default() += 1;
            }
        }
    })
}

/// Request/reply, a topic and `$presence` across the three hub processes: an echo agent on
/// hub 0 answers a requester on hub 1; a subscriber on hub 2 gets a topic message from hub 0
/// once, and sees an agent join on hub 1.
async fn agents_meet_across_hubs(u0: &str, u1: &str, u2: &str, ca: &str) {
    let mut echo = Agent::connect(options("echo", &[u0], ca)).await.unwrap();
    let echoing = tokio::spawn(async move {
        while let Some(msg) = echo.recv().await {
            if msg.envelope.kind == Kind::Request {
                let body = msg.envelope.body.clone();
                let _ = msg.reply(body).await;
            }
        }
    });
    let asker = Agent::connect(options("asker", &[u1], ca)).await.unwrap();
    let mut answered = None;
    for _ in 0..100 {
        // Until hub 1 has heard of the echo agent.
        if let Ok(a) = asker
            .handle()
            .request("echo", "ping", Duration::from_millis(500))
            .await
        {
            answered = Some(a);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = answered.expect("the echo agent on hub 0 answers hub 1");
    assert_eq!(
        (answer.from.as_str(), &answer.body[..]),
        ("echo", &b"ping"[..])
    );

    let mut listener = Agent::connect(options("listener", &[u2], ca))
        .await
        .unwrap();
    listener.subscribe("news").await.unwrap();
    listener.subscribe("$presence").await.unwrap();
    // Hub 0 mirrors the subscription once hub 2 has announced it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let news = Agent::connect(options("news-desk", &[u0], ca))
        .await
        .unwrap();
    let late = Agent::connect(options("late", &[u1], ca)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    news.send(Destination::topic("news"), Kind::Event, "extra")
        .await
        .unwrap();
    let (mut news_seen, mut joined) = (0, false);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !(news_seen == 1 && joined) {
        let Ok(Some(msg)) = tokio::time::timeout(Duration::from_secs(1), listener.recv()).await
        else {
            continue;
        };
        let env = &msg.envelope;
        match &env.to {
            Destination::Topic(t) if t == "news" => news_seen += 1,
            Destination::Topic(t) if t == "$presence" => {
                joined |= env.headers.get("event").map(String::as_str) == Some("join")
                    && env.headers.get("agent").map(String::as_str) == Some("late");
            }
            _ => {}
        }
    }
    assert!(joined, "hub 2's subscriber saw the agent joining hub 1");
    assert_eq!(news_seen, 1, "the topic message from hub 0 arrived once");
    // Nothing more of it.
    while let Ok(Some(msg)) =
        tokio::time::timeout(Duration::from_millis(300), listener.recv()).await
    {
        assert_ne!(msg.envelope.to, Destination::topic("news"), "a second copy");
    }
    echoing.abort();
    drop((asker, news, late));
}

/// Stops the workers and prints what became of the `n` tasks (all acked by now); returns
/// each worker's connections, in order.
async fn finish(
    stop: &AtomicBool,
    workers: Vec<tokio::task::JoinHandle<()>>,
    ledger: &Mutex<Ledger>,
    n: u32,
) -> HashMap<String, Vec<String>> {
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(5), w).await;
    }
    let l = ledger.lock().unwrap();
    let duplicates: u32 = l.acked.values().map(|n| n - 1).sum();
    println!(
        "{n} tasks, 0 lost, {duplicates} delivered again; connections: {:?}",
        l.connections
    );
    l.connections.clone()
}

/// Enqueues tasks `range` from `boss`, each re-sent (same producer id) until stored.
async fn produce(boss: &Agent, range: std::ops::Range<u32>) {
    for i in range {
        let body = format!("task-{i}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match boss
                .handle()
                .enqueue("jobs", body.clone(), Some(&body), Duration::from_secs(2))
                .await
            {
                Ok(_) => break,
                Err(e) => {
                    assert!(Instant::now() < deadline, "{body} never stored: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
}

/// Waits until every task below `n` is acked.
async fn all_acked(ledger: &Mutex<Ledger>, n: u32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let missing: Vec<u32> = {
            let l = ledger.lock().unwrap();
            (0..n)
                .filter(|i| !l.acked.contains_key(&format!("task-{i}")))
                .collect()
        };
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: tasks never acked: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_across_three_hubs_loses_no_task_when_hubs_and_nats_nodes_die() {
    let _turn = LAN_TURN.lock().await;
    let place = placement();
    let Some(mut nodes) = nats::start_nats_cluster_on(&place.nats) else {
        return;
    };
    let (_dir, ca, started) = start_hubs(&place, &nodes, 3);
    let mut hubs: Vec<Option<HubProcess>> = started.into_iter().map(Some).collect();
    let url = |i: usize| hubs[i].as_ref().unwrap().url.clone();
    let (u0, u1, u2) = (url(0), url(1), url(2));

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers = vec![
        worker(
            "w0",
            vec![u0.clone(), u2.clone()],
            ca.clone(),
            ledger.clone(),
            stop.clone(),
        ),
        worker(
            "w1",
            vec![u1.clone(), u2.clone()],
            ca.clone(),
            ledger.clone(),
            stop.clone(),
        ),
        worker(
            "w2",
            vec![u2.clone(), u0.clone()],
            ca.clone(),
            ledger.clone(),
            stop.clone(),
        ),
    ];
    let boss = Agent::connect(options("boss", &[&u2], &ca)).await.unwrap();
    agents_meet_across_hubs(&u0, &u1, &u2, &ca).await;

    // All hubs up: every task done, by consumers on every hub.
    produce(&boss, 0..60).await;
    all_acked(&ledger, 60, "all hubs up").await;

    // A consumer's hub dies with tasks in flight: they are delivered again, and its consumer
    // reconnects to the next hub of its list.
    produce(&boss, 60..100).await;
    hubs[1] = None; // kill -9
    all_acked(&ledger, 100, "after hub-1 was killed").await;

    // The hub keeping the queues dies: another takes them over from JetStream.
    hubs[0] = None;
    produce(&boss, 100..140).await;
    all_acked(&ledger, 140, "after hub-0, the queues' keeper, was killed").await;

    // A NATS node dies (hub-2's own): the hub moves to another node, JetStream keeps the
    // stream on the other two.
    let (node, _) = nodes.remove(2);
    drop(node);
    produce(&boss, 140..180).await;
    all_acked(&ledger, 180, "after NATS node-2 was killed").await;

    let connections = finish(&stop, workers, &ledger, 180).await;
    for (w, first_hub, fallback) in [("w0", &u0, &u2), ("w1", &u1, &u2)] {
        let seen = &connections[w];
        assert_eq!(&seen[0], first_hub, "{w}: {seen:?}");
        assert!(
            seen.contains(fallback),
            "{w} reconnected to {fallback}: {seen:?}"
        );
    }
}

#[test]
fn nats_unreachable_at_start_is_an_error_or_with_cluster_optional_a_lone_hub() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("hub.sock");
    let url = format!("unix://{}", sock.display());
    // Nothing listens on port 9 of loopback.
    let out = run(&["hub", "--listen", &url, "--cluster", "nats://127.0.0.1:9"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot reach NATS at nats://127.0.0.1:9"),
        "{err}"
    );
    // A cluster keeps its queues in JetStream: a hub's own store does not go with it.
    let store = dir.path().join("store");
    let out = run(&[
        "hub",
        "--listen",
        &url,
        "--cluster",
        "nats://127.0.0.1:9",
        "--store",
        store.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--cluster-queues per-hub"),
        "{}",
        text(&out.stderr)
    );
    // With --cluster-optional the hub says so and serves its agents alone.
    let mut command = Command::new(common::BIN);
    command.args([
        "hub",
        "--listen",
        &url,
        "--cluster",
        "nats://127.0.0.1:9",
        "--cluster-optional",
    ]);
    let (_hub, lines) = spawn_command(command);
    // The warning goes to stderr and the listening line, printed after it, to stdout: they
    // may arrive in either order.
    let found = wait_for_all(
        &lines,
        &["warning: cannot reach NATS", "hub listening on unix://"],
    );
    assert!(found[0].contains("--cluster-optional"), "{}", found[0]);
    let (_echo, echo_out) = {
        let mut c = Command::new(common::BIN);
        c.args(["agent", "--hub", &url, "--id", "echo", "--echo"]);
        spawn_command(c)
    };
    wait_for(&echo_out, "agent echo connected");
    let out = run(&[
        "send",
        "--hub",
        &url,
        "--id",
        "asker",
        "--to",
        "echo",
        "--request",
        "alone",
    ]);
    assert_eq!(text(&out.stdout).trim(), "alone", "{}", text(&out.stderr));
}

#[test]
fn a_clustered_hub_stops_on_sigterm_even_with_nats_gone() {
    let Some(nats) = nats::start_nats() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("unix://{}", dir.path().join("hub.sock").display());
    let mut command = Command::new(common::BIN);
    command.args(["hub", "--listen", &url, "--cluster", &nats.1]);
    let (mut hub, lines) = spawn_command(command);
    wait_for(&lines, "keeps the cluster's work queues");
    wait_for(&lines, "hub listening on unix://");
    drop(nats);
    std::thread::sleep(Duration::from_millis(300));
    let pid = hub.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = hub.0.try_wait().unwrap() {
            println!("stopped with {status}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the hub is still running 15 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_keeper_cut_off_from_the_network_loses_nothing_and_writes_nothing_late() {
    let _turn = LAN_TURN.lock().await;
    let place = placement();
    if place.hubs[0].0.is_none() {
        println!("skipped: a network partition needs network namespaces");
        return;
    }
    let Some(nodes) = nats::start_nats_cluster_on(&place.nats) else {
        return;
    };
    let (_dir, ca, hubs) = start_hubs(&place, &nodes, 2);
    let (u0, u1) = (hubs[0].url.clone(), hubs[1].url.clone());
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers = vec![
        worker(
            "w0",
            vec![u0.clone(), u1.clone()],
            ca.clone(),
            ledger.clone(),
            stop.clone(),
        ),
        worker(
            "w1",
            vec![u1.clone(), u0.clone()],
            ca.clone(),
            ledger.clone(),
            stop.clone(),
        ),
    ];
    let boss = Agent::connect(options("boss", &[&u1], &ca)).await.unwrap();
    produce(&boss, 0..40).await;
    all_acked(&ledger, 40, "both hubs up").await;

    // hub-0 keeps the queues; its link goes down (its process runs on, cut off from NATS and
    // from its agents), with tasks being produced.
    let ns0 = place.hubs[0].0.clone().unwrap();
    let cut = |up: &str| {
        let out = Command::new("ip")
            .args(["-n", &ns0, "link", "set", "eth0", up])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    let during = tokio::spawn({
        let boss = boss.handle().clone();
        async move {
            for i in 40..80u32 {
                let body = format!("task-{i}");
                loop {
                    if boss
                        .enqueue("jobs", body.clone(), Some(&body), Duration::from_secs(2))
                        .await
                        .is_ok()
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    cut("down");
    during.await.unwrap();
    all_acked(&ledger, 80, "while hub-0 was cut off").await;
    // hub-0 found out it had lost the lease.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !hubs[0].logged("lost the queue owner's lease") {
        assert!(
            Instant::now() < deadline,
            "hub-0 never noticed it lost the lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(hubs[1].logged("this hub keeps the work queues now"));

    // It comes back: whatever its NATS client held back is refused (fenced), and it passes
    // queue work on to hub-1 like any other hub.
    cut("up");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let late = Agent::connect(options("late-boss", &[&u0], &ca))
        .await
        .unwrap();
    produce(&late, 80..100).await;
    all_acked(&ledger, 100, "after hub-0 came back").await;

    finish(&stop, workers, &ledger, 100).await;
}
