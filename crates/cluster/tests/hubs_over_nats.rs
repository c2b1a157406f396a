//! Hubs joined through a real nats-server (from `NATS_SERVER`, `target/peers-nats/nats-server`
//! as scripts/peers/nats.sh installs it, or `PATH`), on loopback: agents on different hubs
//! reach each other by request/reply, topics reach every hub's subscribers once, and an agent
//! that leaves its hub leaves the others. Without a nats-server the tests say so and pass,
//! except under CI (`CI` set), which installs one.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentwire::hub::{Hub, HubConfig, QuicListener};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, CertBundle, HubIdentity};
use agentwire::{Agent, AgentOptions, Destination, HubTrust, Kind};
use agentwire_cluster::{Cluster, ClusterConfig};

mod nats;
use nats::{free_ports, nats_server, start_nats, start_nats_cluster, start_nats_with_config, Nats};

struct TestHub {
    hub: Hub,
    _listener: QuicListener,
    url: String,
    _cluster: Cluster,
}

async fn hub_in_cluster(nats: &str, id: &str, certs: &CertBundle) -> TestHub {
    hub_on_servers(
        vec![nats.to_owned()],
        "test",
        id,
        Duration::from_millis(1500),
        certs,
    )
    .await
}

/// A hub on QUIC in cluster `name` through `servers`, announcing every 200 ms and taking
/// other hubs as gone after `expiry`.
async fn hub_on_servers(
    servers: Vec<String>,
    name: &str,
    id: &str,
    expiry: Duration,
    certs: &CertBundle,
) -> TestHub {
    hub_with_config(servers, name, id, expiry, certs, HubConfig::default()).await
}

async fn hub_with_config(
    servers: Vec<String>,
    name: &str,
    id: &str,
    expiry: Duration,
    certs: &CertBundle,
    config: HubConfig,
) -> TestHub {
    hub_tuned(servers, name, id, certs, config, |cluster| {
        cluster.beat = Duration::from_millis(200);
        cluster.expiry = expiry;
    })
    .await
}

/// A hub on QUIC in cluster `name`, its cluster settings as `tune` leaves them.
async fn hub_tuned(
    servers: Vec<String>,
    name: &str,
    id: &str,
    certs: &CertBundle,
    mut config: HubConfig,
    tune: impl FnOnce(&mut ClusterConfig),
) -> TestHub {
    let identity = HubIdentity::from_pem(&certs.hub_cert_pem, &certs.hub_key_pem).unwrap();
    config.policy.heartbeat_interval_ms = 500;
    let hub = Hub::new(config, HubMetrics::new());
    let listener = hub
        .listen_quic("127.0.0.1:0".parse().unwrap(), &identity)
        .unwrap();
    let url = format!("quic://127.0.0.1:{}", listener.local_addr.port());
    let mut cluster = ClusterConfig::new(servers, id);
    cluster.name = name.into();
    tune(&mut cluster);
    let cluster = Cluster::join(hub.clone(), cluster).await.unwrap();
    TestHub {
        hub,
        _listener: listener,
        url,
        _cluster: cluster,
    }
}

async fn agent(hub: &TestHub, certs: &CertBundle, id: &str) -> Agent {
    let trust = HubTrust::ca_pem(&certs.ca_cert_pem).unwrap();
    Agent::connect(AgentOptions::new(id, hub.url.clone(), trust))
        .await
        .unwrap()
}

/// Waits until `hub` sees exactly `ids` (local agents and stand-ins alike).
async fn wait_for_agents(hub: &Hub, ids: &[&str]) {
    for _ in 0..500 {
        let mut now: Vec<String> = hub.agents().into_iter().map(|a| a.id).collect();
        now.sort();
        if now == ids {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let now: Vec<String> = hub.agents().into_iter().map(|a| a.id).collect();
    panic!("hub has {now:?}, expected {ids:?}");
}

async fn recv(agent: &mut Agent) -> agentwire::Incoming {
    tokio::time::timeout(Duration::from_secs(10), agent.recv())
        .await
        .expect("a message within 10 s")
        .expect("connected")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_on_different_hubs_talk_through_nats() {
    let Some(nats) = start_nats() else { return };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let a = hub_in_cluster(&nats.1, "hub-a", &certs).await;
    let b = hub_in_cluster(&nats.1, "hub-b", &certs).await;

    let alice = agent(&a, &certs, "alice").await;
    let mut bob = agent(&b, &certs, "bob").await;
    wait_for_agents(&a.hub, &["alice", "bob"]).await;
    wait_for_agents(&b.hub, &["alice", "bob"]).await;
    let cluster_peer = a.hub.agents().into_iter().find(|x| x.id == "bob").unwrap();
    assert_eq!(cluster_peer.transport, "cluster");
    assert_eq!(cluster_peer.role, "cluster:hub-b");

    // Request/reply across hubs, both ways, many at once.
    let echo = tokio::spawn(async move {
        while let Some(msg) = bob.recv().await {
            if msg.envelope.kind == Kind::Request {
                let body = msg.envelope.body.clone();
                let _ = msg.reply(body).await;
            }
        }
    });
    let mut asks = Vec::new();
    for i in 0..200 {
        let alice = alice.handle().clone();
        asks.push(tokio::spawn(async move {
            alice
                .request("bob", format!("q{i}"), Duration::from_secs(10))
                .await
        }));
    }
    for (i, ask) in asks.into_iter().enumerate() {
        let answer = ask.await.unwrap().unwrap();
        assert_eq!(answer.from, "bob");
        assert_eq!(&answer.body[..], format!("q{i}").as_bytes());
    }

    // A topic message reaches each subscriber once, whichever hub it is on.
    let mut carol = agent(&a, &certs, "carol").await;
    let mut dave = agent(&b, &certs, "dave").await;
    let mut erin = agent(&b, &certs, "erin").await;
    for s in [&carol, &dave, &erin] {
        s.subscribe("news").await.unwrap();
    }
    wait_for_agents(&a.hub, &["alice", "bob", "carol", "dave", "erin"]).await;
    // The stand-ins on hub-a subscribe once hub-b has announced the subscriptions.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for n in 0..3 {
        alice
            .send(Destination::topic("news"), Kind::Event, format!("n{n}"))
            .await
            .unwrap();
    }
    // Each once. In no particular order: QUIC's per-message mapping (these agents' and the
    // stand-ins') promises delivery exactly once, not order (docs/protocol.md).
    for subscriber in [&mut carol, &mut dave, &mut erin] {
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(recv(subscriber).await.envelope.body.to_vec());
        }
        got.sort();
        assert_eq!(got, [b"n0".to_vec(), b"n1".to_vec(), b"n2".to_vec()]);
        let extra = tokio::time::timeout(Duration::from_millis(300), subscriber.recv()).await;
        assert!(extra.is_err(), "a second copy arrived: {extra:?}");
    }

    // A broadcast reaches every other agent once, whichever hub it is on.
    alice
        .send(Destination::Broadcast, Kind::Event, "to all")
        .await
        .unwrap();
    for subscriber in [&mut carol, &mut dave, &mut erin] {
        let msg = recv(subscriber).await;
        assert_eq!(&msg.envelope.body[..], b"to all");
        let extra = tokio::time::timeout(Duration::from_millis(300), subscriber.recv()).await;
        assert!(extra.is_err(), "a second copy arrived: {extra:?}");
    }

    // An id taken on one hub is taken on every hub: the default policy refuses the newcomer.
    let trust = HubTrust::ca_pem(&certs.ca_cert_pem).unwrap();
    match Agent::connect(AgentOptions::new("alice", b.url.clone(), trust)).await {
        Err(agentwire::AgentError::Rejected { code, .. }) => {
            assert_eq!(code, agentwire::ErrorCode::DuplicateAgentId)
        }
        Err(e) => panic!("a second alice on hub-b: {e}"),
        Ok(_) => panic!("a second alice got in on hub-b"),
    }

    // An agent that leaves its hub leaves the other hub too.
    erin.close().await;
    wait_for_agents(&a.hub, &["alice", "bob", "carol", "dave"]).await;
    echo.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_coming_and_going_are_announced_as_they_happen_not_at_the_next_poll() {
    let Some(nats) = start_nats() else { return };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    // Polls and beats a minute apart: only the hub's hook can make the other hub hear of
    // alice within wait_for_agents's 5 s.
    let slow = |cluster: &mut ClusterConfig| {
        cluster.poll = Duration::from_secs(60);
        cluster.beat = Duration::from_secs(60);
        cluster.expiry = Duration::from_secs(180);
    };
    let config = || HubConfig::default();
    let a = hub_tuned(
        vec![nats.1.clone()],
        "test",
        "hub-a",
        &certs,
        config(),
        slow,
    )
    .await;
    let b = hub_tuned(
        vec![nats.1.clone()],
        "test",
        "hub-b",
        &certs,
        config(),
        slow,
    )
    .await;
    // Both hubs have made their first announcement (empty) by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let alice = agent(&a, &certs, "alice").await;
    wait_for_agents(&b.hub, &["alice"]).await;
    let bob = agent(&b, &certs, "bob").await;
    wait_for_agents(&a.hub, &["alice", "bob"]).await;
    alice.close().await;
    wait_for_agents(&b.hub, &["bob"]).await;
    drop(bob);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_stops_announcing_takes_its_agents_away() {
    let Some(nats) = start_nats() else { return };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let a = hub_in_cluster(&nats.1, "hub-a", &certs).await;
    let b = hub_in_cluster(&nats.1, "hub-b", &certs).await;
    let _alice = agent(&a, &certs, "alice").await;
    let _bob = agent(&b, &certs, "bob").await;
    wait_for_agents(&a.hub, &["alice", "bob"]).await;
    // hub-b dies without a word: its announcements stop, and hub-a lets bob go after the
    // expiry (1.5 s here).
    drop(b);
    wait_for_agents(&a.hub, &["alice"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_unreachable_is_a_clear_error() {
    let hub = Hub::new(HubConfig::default(), HubMetrics::new());
    let mut config = ClusterConfig::new(vec!["nats://127.0.0.1:9".into()], "hub-a");
    config.connect_timeout = Duration::from_secs(2);
    let err = Cluster::join(hub, config)
        .await
        .err()
        .expect("no NATS there");
    assert!(err.to_string().contains("nats://127.0.0.1:9"), "{err}");
    let bad = ClusterConfig::new(vec!["nats://127.0.0.1:9".into()], "hub a");
    let hub = Hub::new(HubConfig::default(), HubMetrics::new());
    let err = Cluster::join(hub, bad).await.err().unwrap();
    assert!(err.to_string().contains("hub id"), "{err}");
}

async fn ask_until_answered(from: &agentwire::AgentHandle, to: &str) {
    for _ in 0..100 {
        if let Ok(answer) = from.request(to, "ping", Duration::from_millis(500)).await {
            assert_eq!(answer.from, to);
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} never got an answer from {to}", from.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hubs_on_a_three_node_nats_cluster_survive_a_node() {
    let Some(mut nodes) = start_nats_cluster() else {
        return;
    };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    // Each hub knows every node, its own first.
    let mut hubs = Vec::new();
    for i in 0..3 {
        let mut servers: Vec<String> = nodes.iter().map(|(_, url)| url.clone()).collect();
        servers.rotate_left(i);
        let id = format!("hub-{i}");
        hubs.push(hub_on_servers(servers, "three", &id, Duration::from_secs(3), &certs).await);
    }
    let mut agents = Vec::new();
    for (i, hub) in hubs.iter().enumerate() {
        let mut a = agent(hub, &certs, &format!("agent-{i}")).await;
        a.subscribe("$presence").await.unwrap();
        let handle = a.handle().clone();
        tokio::spawn(async move {
            while let Some(msg) = a.recv().await {
                if msg.envelope.kind == Kind::Request {
                    let _ = msg.reply("pong").await;
                }
            }
        });
        agents.push(handle);
    }
    for hub in &hubs {
        wait_for_agents(&hub.hub, &["agent-0", "agent-1", "agent-2"]).await;
    }
    for from in &agents {
        for to in ["agent-0", "agent-1", "agent-2"] {
            if from.id() != to {
                let answer = from
                    .request(to, "ping", Duration::from_secs(5))
                    .await
                    .unwrap();
                assert_eq!(&answer.body[..], b"pong");
            }
        }
    }
    // A NATS node dies: the hub connected to it moves to another node, and every agent still
    // reaches every other.
    assert_eq!(hubs[0]._cluster.nats_server(), "node-0");
    let (node, _) = nodes.remove(0);
    drop(node);
    for from in &agents {
        for to in ["agent-0", "agent-1", "agent-2"] {
            if from.id() != to {
                ask_until_answered(from, to).await;
            }
        }
    }
    assert_ne!(hubs[0]._cluster.nats_server(), "node-0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_with_tls_and_a_password() {
    let Some(bin) = nats_server().or_else(|| {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must install nats-server"
        );
        None
    }) else {
        return;
    };
    // The NATS server's certificate from an agentwire CA (names localhost, 127.0.0.1, ::1).
    let dir = std::env::temp_dir().join(format!("aw-nats-tls-{}", std::process::id()));
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let files = tls::write_cert_dir(&dir, &certs, true).unwrap();
    let port = free_ports(1)[0];
    let mut child = Command::new(bin)
        .args([
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--user",
            "aw",
            "--pass",
            "s3cret",
        ])
        .arg("--tls")
        .arg("--tlscert")
        .arg(&files.hub_cert)
        .arg("--tlskey")
        .arg(&files.hub_key)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("nats-server starts");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    while !lines.next().unwrap().unwrap().contains("Server is ready") {}
    std::thread::spawn(move || for _ in lines {});
    let _nats = Nats(child, String::new());

    let join = |url: String, ca: Option<PathBuf>| async move {
        let hub = Hub::new(HubConfig::default(), HubMetrics::new());
        let mut config = ClusterConfig::new(vec![url], "hub-t");
        config.tls_ca = ca;
        // This server runs no JetStream: each hub keeps its own queues.
        config.queues = agentwire_cluster::QueuePlacement::PerHub;
        config.connect_timeout = Duration::from_secs(5);
        Cluster::join(hub, config).await
    };
    let good = format!("nats://aw:s3cret@127.0.0.1:{port}");
    let cluster = join(good.clone(), Some(files.ca_cert.clone()))
        .await
        .unwrap();
    assert_eq!(cluster.hub_id(), "hub-t");
    let wrong = format!("nats://aw:guess@127.0.0.1:{port}");
    let err = join(wrong, Some(files.ca_cert.clone()))
        .await
        .err()
        .expect("a wrong password is refused");
    let text = agentwire::error_chain(&err);
    assert!(
        !text.contains("guess"),
        "the password stays out of messages: {text}"
    );
    assert!(
        join(good, None).await.is_err(),
        "TLS without a CA to trust the server with"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Consumes `queue` with `credit`, acking each task after `work`, and reports each task's body
/// on `done`.
fn consumer(
    mut a: Agent,
    queue: &'static str,
    credit: u32,
    work: Duration,
    done: tokio::sync::mpsc::UnboundedSender<(String, String)>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        a.consume(queue, credit).await.unwrap();
        while let Some(msg) = a.recv().await {
            let Some(task) = agentwire::agent_queues::QueueTask::from_envelope(&msg.envelope)
            else {
                continue;
            };
            tokio::time::sleep(work).await;
            let body = String::from_utf8_lossy(&task.body).into_owned();
            if a.ack(task.task).await.is_err() {
                return;
            }
            let _ = done.send((a.id().to_owned(), body));
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_work_queue_spans_the_hubs() {
    let Some(nats) = start_nats() else { return };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let a = hub_in_cluster(&nats.1, "hub-a", &certs).await;
    let b = hub_in_cluster(&nats.1, "hub-b", &certs).await;
    // The first hub took the queues; the second passes its agents' queue work to it.
    assert!(a._cluster.owns_queues());
    assert!(!b._cluster.owns_queues());
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let on_a = consumer(
        agent(&a, &certs, "worker-a").await,
        "jobs",
        2,
        Duration::from_millis(5),
        done_tx.clone(),
    );
    let on_b = consumer(
        agent(&b, &certs, "worker-b").await,
        "jobs",
        2,
        Duration::from_millis(5),
        done_tx,
    );
    let boss = agent(&b, &certs, "boss").await;
    // Both consumers are known to the owner before the first task.
    for _ in 0..200 {
        let stats = boss
            .handle()
            .queue_op(
                "jobs",
                agentwire::agent_queues::QueueOp::Stats,
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        if stats["consumers"] == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut sent = std::collections::BTreeSet::new();
    for i in 0..40 {
        let body = format!("task-{i}");
        let receipt = boss
            .handle()
            .enqueue("jobs", body.clone(), Some(&body), Duration::from_secs(5))
            .await
            .unwrap();
        assert!(!receipt.duplicate);
        sent.insert(body);
    }
    // A re-sent task (same producer id) is the same task.
    let again = boss
        .handle()
        .enqueue("jobs", "task-0", Some("task-0"), Duration::from_secs(5))
        .await
        .unwrap();
    assert!(again.duplicate);
    let mut got = std::collections::BTreeSet::new();
    let mut by = std::collections::BTreeMap::<String, usize>::new();
    while got.len() < sent.len() {
        let (who, body) = tokio::time::timeout(Duration::from_secs(10), done.recv())
            .await
            .expect("every task within 10 s")
            .unwrap();
        *by.entry(who).or_default() += 1;
        got.insert(body);
    }
    assert_eq!(got, sent);
    assert_eq!(by.len(), 2, "consumers on both hubs got tasks: {by:?}");
    on_a.abort();
    on_b.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_whose_stream_was_claimed_by_another_cannot_write_it() {
    use agentwire_cluster::lease::Lease;
    use agentwire_cluster::store::{JetStreamStore, StoreLayout};
    use agentwire_queue::{QueueStore, StoreOp, TaskId, TaskRecord};
    use std::sync::Arc;

    let Some(nats) = start_nats() else { return };
    let layout = StoreLayout::for_cluster("fence");
    let open = |hub: &'static str| {
        let url = nats.1.clone();
        let layout = layout.clone();
        async move {
            let client = async_nats::connect(url).await.unwrap();
            let lease = Arc::new(Lease::new(Duration::from_secs(60)));
            lease.granted(std::time::Instant::now());
            let store = JetStreamStore::open(client, &layout, hub, lease.clone())
                .await
                .unwrap();
            (store, lease)
        }
    };
    let record = |id: u64, body: &str| {
        StoreOp::Put(TaskRecord {
            id: TaskId(id),
            queue: agentwire_queue::QueueName::new("jobs").unwrap(),
            sender: "boss".into(),
            producer_id: None,
            attempts: 0,
            enqueued_unix_ms: 1,
            dead: None,
            body: body.as_bytes().to_vec().into(),
        })
    };
    let (mut old, old_lease) = open("old").await;
    old.claim().await.unwrap();
    // The store's writes block on the runtime: run them off it, as the hub's writer thread does.
    let (mut old, r) = tokio::task::spawn_blocking(move || {
        let r = old.apply(&[
            record(1, "one"),
            record(2, "two"),
            StoreOp::Delete(TaskId(1)),
        ]);
        (old, r)
    })
    .await
    .unwrap();
    r.unwrap();
    // Another hub takes the queues over: it reads what the old one stored...
    let (mut new, _) = open("new").await;
    new.claim().await.unwrap();
    new.preload().await.unwrap();
    let recovered = new.load().unwrap();
    let ids: Vec<u64> = recovered.tasks.iter().map(|t| t.id.0).collect();
    assert_eq!(ids, vec![2]);
    assert!(recovered.next_id > 2, "{}", recovered.next_id);
    // ... and from then on the old one cannot write: nothing of its batch is stored.
    let (_, r) = tokio::task::spawn_blocking(move || {
        let r = old.apply(&[record(3, "three"), StoreOp::Delete(TaskId(2))]);
        (old, r)
    })
    .await
    .unwrap();
    let err = r.expect_err("the old owner is fenced off");
    assert!(
        err.with_causes().contains("claimed"),
        "{}",
        err.with_causes()
    );
    assert!(!old_lease.valid());
    let (_, r) = tokio::task::spawn_blocking(move || {
        let r = new.apply(&[record(4, "four")]);
        (new, r)
    })
    .await
    .unwrap();
    r.unwrap();
    let (mut check, _) = open("check").await;
    check.preload().await.unwrap();
    let ids: Vec<u64> = check.load().unwrap().tasks.iter().map(|t| t.id.0).collect();
    assert_eq!(ids, vec![2, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_with_one_id_on_two_hubs_at_once_leave_one() {
    let Some(nats) = start_nats() else { return };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let a = hub_in_cluster(&nats.1, "hub-a", &certs).await;
    let b = hub_in_cluster(&nats.1, "hub-b", &certs).await;
    let caller = agent(&a, &certs, "caller").await;
    wait_for_agents(&b.hub, &["caller"]).await;
    // Both connect at once. Usually both get in before either hub hears of the other's, and
    // then the one that connected later is closed by its own hub (the default policy refuses
    // the newcomer). On a slow machine one hub may already have heard of the other's twin at
    // the hello and refuse it there. Either way one twin is left, and the id means the same
    // agent on both hubs.
    let trust = HubTrust::ca_pem(&certs.ca_cert_pem).unwrap();
    let (on_a, on_b) = tokio::join!(
        Agent::connect(AgentOptions::new("twin", a.url.clone(), trust.clone())),
        Agent::connect(AgentOptions::new("twin", b.url.clone(), trust)),
    );
    let refused = |r: &Result<Agent, agentwire::AgentError>| {
        matches!(r, Err(agentwire::AgentError::Rejected { code, .. })
            if *code == agentwire::ErrorCode::DuplicateAgentId)
    };
    let (survivor, hub_of_survivor) = match (on_a, on_b) {
        (Ok(mut on_a), Ok(mut on_b)) => {
            let closed = tokio::time::timeout(Duration::from_secs(10), async {
                tokio::select! {
                    _ = async { while on_a.recv().await.is_some() {} } => "a",
                    _ = async { while on_b.recv().await.is_some() {} } => "b",
                }
            })
            .await
            .expect("one twin is closed");
            match closed {
                "a" => (on_b, "hub-b"),
                _ => (on_a, "hub-a"),
            }
        }
        (Ok(on_a), other) if refused(&other) => (on_a, "hub-a"),
        (other, Ok(on_b)) if refused(&other) => (on_b, "hub-b"),
        (a, b) => panic!(
            "expected one twin left: hub-a {:?}, hub-b {:?}",
            a.err(),
            b.err()
        ),
    };
    println!("the twin on {hub_of_survivor} kept the id");
    let mut survivor = survivor;
    let answer = tokio::spawn(async move {
        while let Some(msg) = survivor.recv().await {
            if msg.envelope.kind == Kind::Request {
                let _ = msg.reply(hub_of_survivor).await;
            }
        }
    });
    for asker in [&caller, &agent(&b, &certs, "caller-b").await] {
        let mut got = None;
        for _ in 0..50 {
            if let Ok(r) = asker
                .handle()
                .request("twin", "who", Duration::from_millis(500))
                .await
            {
                got = Some(r);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let got = got.expect("the twin answers");
        assert_eq!(&got.body[..], hub_of_survivor.as_bytes());
    }
    let _ = caller.close().await;
    answer.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_of_a_shared_queue_are_listed_and_replayed_from_any_hub() {
    use agentwire::agent_queues::{QueueOp, QueueTask};
    let Some(nats) = start_nats() else { return };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let a = hub_in_cluster(&nats.1, "hub-a", &certs).await;
    let b = hub_in_cluster(&nats.1, "hub-b", &certs).await;
    assert!(a._cluster.owns_queues());
    // A consumer on hub-b that cannot do the task: it nacks at once, every time.
    let mut worker = agent(&b, &certs, "worker").await;
    worker.consume("jobs", 1).await.unwrap();
    let boss = agent(&b, &certs, "boss").await;
    let op = |op| boss.handle().queue_op("jobs", op, Duration::from_secs(5));
    for _ in 0..200 {
        if op(QueueOp::Stats).await.unwrap()["consumers"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let receipt = boss
        .handle()
        .enqueue("jobs", "poison", None, Duration::from_secs(5))
        .await
        .unwrap();
    let mut attempts = Vec::new();
    while attempts.len() < 5 {
        let msg = recv(&mut worker).await;
        let task = QueueTask::from_envelope(&msg.envelope).unwrap();
        assert_eq!(task.task, receipt.task);
        attempts.push(task.attempt);
        worker
            .nack(task.task, Some(Duration::from_millis(0)))
            .await
            .unwrap();
    }
    assert_eq!(attempts, vec![1, 2, 3, 4, 5]);
    // After max_deliver (5) attempts it is a dead letter, listed from hub-b.
    let mut dead = serde_json::Value::Null;
    for _ in 0..100 {
        dead = op(QueueOp::DeadLetters).await.unwrap();
        if dead.as_array().is_some_and(|d| d.len() == 1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(dead[0]["task"], receipt.task, "{dead}");
    assert_eq!(dead[0]["body"], "poison");
    // Replayed from hub-b, it comes back with a fresh count, and an ack ends it.
    assert_eq!(
        op(QueueOp::Replay(Some(receipt.task))).await.unwrap()["replayed"],
        1
    );
    let msg = recv(&mut worker).await;
    let task = QueueTask::from_envelope(&msg.envelope).unwrap();
    assert_eq!((task.task, task.attempt), (receipt.task, 1));
    worker.ack(task.task).await.unwrap();
    for _ in 0..100 {
        let s = op(QueueOp::Stats).await.unwrap();
        if s["in_flight"] == 0 && s["dead"] == 0 && s["ready"] == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "the replayed task was not acked: {}",
        op(QueueOp::Stats).await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_loses_the_queue_lease_passes_queue_work_on_again() {
    use agentwire::agent_queues::QueueTask;
    let Some(nats) = start_nats() else { return };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let a = hub_in_cluster(&nats.1, "hub-a", &certs).await;
    let b = hub_in_cluster(&nats.1, "hub-b", &certs).await;
    assert!(a._cluster.owns_queues());
    let mut worker = agent(&a, &certs, "worker").await;
    worker.consume("jobs", 4).await.unwrap();
    let boss = agent(&b, &certs, "boss").await;
    let enqueue = |body: String| {
        let boss = boss.handle().clone();
        async move {
            for _ in 0..100 {
                if boss
                    .enqueue("jobs", body.clone(), Some(&body), Duration::from_secs(1))
                    .await
                    .is_ok()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("{body} never stored");
        }
    };
    enqueue("before".into()).await;
    let msg = recv(&mut worker).await;
    let task = QueueTask::from_envelope(&msg.envelope).unwrap();
    assert_eq!(&task.body[..], b"before");
    worker.ack(task.task).await.unwrap();
    // Someone else's name in the lease (as after a NATS partition): hub-a's next renewal
    // fails, and it gives the queues up.
    let client = async_nats::connect(nats.1.clone()).await.unwrap();
    let kv = async_nats::jetstream::new(client)
        .get_key_value("agentwire_test_owner")
        .await
        .unwrap();
    kv.put("queues", "hub-gone".into()).await.unwrap();
    for _ in 0..100 {
        if !a._cluster.owns_queues() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!a._cluster.owns_queues(), "hub-a gave the queues up");
    // Nobody renews hub-gone's lease: it expires, a hub takes the queues again (either), and
    // the worker on hub-a is a consumer there without doing anything.
    for i in 0..5 {
        enqueue(format!("after-{i}")).await;
    }
    let mut got = Vec::new();
    while got.len() < 5 {
        let msg = recv(&mut worker).await;
        let task = QueueTask::from_envelope(&msg.envelope).unwrap();
        worker.ack(task.task).await.unwrap();
        got.push(String::from_utf8_lossy(&task.body).into_owned());
    }
    got.sort();
    assert_eq!(got, ["after-0", "after-1", "after-2", "after-3", "after-4"]);
    assert!(a._cluster.owns_queues() || b._cluster.owns_queues());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hubs_error_for_a_request_reaches_the_requester_on_another_hub() {
    let Some(nats) = start_nats() else { return };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    // hub-b lets each agent (a stand-in included) send 2 envelopes a second.
    let mut strict = HubConfig::default();
    strict.limits.agent_messages_per_sec = Some(2);
    let servers = vec![nats.1.clone()];
    let a = hub_on_servers(
        servers.clone(),
        "test",
        "hub-a",
        Duration::from_millis(1500),
        &certs,
    )
    .await;
    let b = hub_with_config(
        servers,
        "test",
        "hub-b",
        Duration::from_millis(1500),
        &certs,
        strict,
    )
    .await;
    let alice = agent(&a, &certs, "alice").await;
    let mut bob = agent(&b, &certs, "bob").await;
    let echo = tokio::spawn(async move {
        while let Some(msg) = bob.recv().await {
            if msg.envelope.kind == Kind::Request {
                let _ = msg.reply("pong").await;
            }
        }
    });
    wait_for_agents(&a.hub, &["alice", "bob"]).await;
    // Five at once: hub-b refuses what goes over the limit, and alice hears it from hub-b
    // at once (not at her own deadline, 10 s away).
    let started = std::time::Instant::now();
    let mut asks = Vec::new();
    for i in 0..5 {
        let h = alice.handle().clone();
        asks.push(tokio::spawn(async move {
            h.request("bob", format!("q{i}"), Duration::from_secs(10))
                .await
        }));
    }
    let mut refused = 0;
    for ask in asks {
        match ask.await.unwrap() {
            Ok(answer) => assert_eq!(&answer.body[..], b"pong"),
            Err(agentwire::AgentError::Remote { code, .. }) => {
                assert_eq!(code, agentwire::ErrorCode::LimitExceeded);
                refused += 1;
            }
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    assert!(refused >= 1, "hub-b refused some");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "refusals came at once, not at the deadline: {:?}",
        started.elapsed()
    );
    echo.abort();
}

/// Nobody answers for another agent across hubs: `mallory` (on bob's hub) and `trudy` (on
/// alice's) answer alice's request to bob with its very id before bob does; both are refused
/// with `unauthorized`, and alice gets bob's answer only. A topic request is answered by its
/// subscriber on the other hub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_answer_is_refused_across_hubs() {
    let Some(nats) = start_nats() else { return };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let a = hub_in_cluster(&nats.1, "hub-a", &certs).await;
    let b = hub_in_cluster(&nats.1, "hub-b", &certs).await;
    let alice = agent(&a, &certs, "alice").await;
    let mut trudy = agent(&a, &certs, "trudy").await;
    let mut bob = agent(&b, &certs, "bob").await;
    let mut mallory = agent(&b, &certs, "mallory").await;
    let all = ["alice", "bob", "mallory", "trudy"];
    wait_for_agents(&a.hub, &all).await;
    wait_for_agents(&b.hub, &all).await;

    for round in 0..20 {
        let request = alice
            .envelope(Destination::agent("bob"), Kind::Request)
            .with_body(format!("q{round}"));
        let id = request.id;
        let handle = alice.handle().clone();
        let answer = tokio::spawn(async move {
            handle
                .request_envelope(request, Duration::from_secs(10))
                .await
        });
        let asked = recv(&mut bob).await;
        assert_eq!(asked.envelope.id, id);
        for forger in [&mut mallory, &mut trudy] {
            let forged = forger
                .envelope(Destination::agent("alice"), Kind::Response)
                .with_correlation(id)
                .with_body("forged");
            forger.send_envelope(forged).await.unwrap();
            let e = recv(forger).await.envelope;
            assert_eq!(
                (e.kind, e.headers.get("code").map(String::as_str)),
                (Kind::Error, Some("unauthorized")),
                "{e:?}"
            );
        }
        asked.reply(format!("real{round}")).await.unwrap();
        let got = answer.await.unwrap().unwrap();
        assert_eq!(
            (got.from.as_str(), &got.body[..]),
            ("bob", format!("real{round}").as_bytes())
        );
    }

    // A topic request: its subscriber on the other hub may answer it.
    bob.subscribe("jobs").await.unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let request = alice
        .envelope(Destination::topic("jobs"), Kind::Request)
        .with_body("anyone?");
    let handle = alice.handle().clone();
    let answer = tokio::spawn(async move {
        handle
            .request_envelope(request, Duration::from_secs(10))
            .await
    });
    let asked = recv(&mut bob).await;
    asked.reply("me").await.unwrap();
    let got = answer.await.unwrap().unwrap();
    assert_eq!((got.from.as_str(), &got.body[..]), ("bob", &b"me"[..]));
}

/// An agent on one hub subscribes to 5,000 topics with long names: its hub's presence (about
/// 1.3 MB, past NATS's 1 MiB payload limit) travels in parts, the other hub's stand-in follows
/// every topic, and a message to the last topic crosses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_presence_past_the_nats_payload_limit_crosses_in_parts() {
    const TOPICS: usize = 5_000;
    let Some(nats) = start_nats() else { return };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let servers = vec![nats.1.clone()];
    let expiry = Duration::from_millis(3000);
    // Both hubs allow that many subscriptions per agent: a stand-in is held to its hub's
    // limits too. Each hub reads the other's whole state (about 1.3 MB) every few seconds; on a
    // loaded 2-core machine, in a debug build, that kept both hubs from the agents'
    // heartbeats for 15 s (the default 3 × 5 s), and they removed the agents. This test is
    // about the topics, so it allows 12 missed heartbeats.
    let config = || HubConfig {
        max_subscriptions: TOPICS,
        heartbeat_miss_limit: 12,
        ..HubConfig::default()
    };
    let a = hub_with_config(servers.clone(), "test", "hub-a", expiry, &certs, config()).await;
    let b = hub_with_config(servers, "test", "hub-b", expiry, &certs, config()).await;
    let alice = agent(&a, &certs, "alice").await;
    let mut many = agent(&b, &certs, "many").await;
    let topic = |i: usize| format!("sensors.building-{i:05}.{}", "floor.".repeat(38));
    for i in 0..TOPICS {
        many.subscribe(&topic(i)).await.unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let seen = a
            .hub
            .agents()
            .into_iter()
            .find(|x| x.id == "many")
            .map_or(0, |x| x.topics.len());
        if seen == TOPICS {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "hub-a follows {seen} of many's {TOPICS} topics"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // An event to a topic is delivered at most once, to the subscribers the hub knows of when
    // it arrives. With a 3 s expiry a starved hub may let the other's state lapse for a moment
    // (its stand-ins leave and come back), and an event sent then reaches nobody; so the event
    // is sent again every 2 s until one arrives.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let msg = loop {
        alice
            .send(Destination::topic(topic(TOPICS - 1)), Kind::Event, "last")
            .await
            .unwrap();
        match tokio::time::timeout(Duration::from_secs(2), many.recv()).await {
            Ok(Some(msg)) => break msg,
            Ok(None) => panic!("many's connection closed: {:?}", many.closed_reason()),
            Err(_) => assert!(
                std::time::Instant::now() < deadline,
                "no event to the last topic crossed in 60 s"
            ),
        }
    };
    assert_eq!(&msg.envelope.body[..], b"last");
}

/// Cluster trust over a nats-server whose users may publish only on their own hub's subjects
/// (as docs/book/security.md shows): a NATS client cannot speak for a hub it is not, neither by
/// publishing on that hub's subjects (NATS refuses) nor by naming that hub's agents or that hub
/// on its own subjects (the hubs drop it); the real hubs keep talking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_nats_client_speaks_for_a_hub_it_is_not() {
    let user = |name: &str| {
        format!(
            r#"{{ user: "{name}", password: "pw-{name}", permissions: {{
                publish: ["agentwire.trust.hub.*.from.{name}", "agentwire.trust.presence.{name}", "_INBOX.>"],
                subscribe: ["agentwire.trust.hub.{name}.from.*", "agentwire.trust.presence.*", "_INBOX.>"] }} }}"#
        )
    };
    let config = format!(
        "authorization {{ users = [ {}, {}, {} ] }}",
        user("hub-a"),
        user("hub-b"),
        user("mallory")
    );
    let Some(nats) = start_nats_with_config(&config) else {
        return;
    };
    let certs = tls::generate(&tls::default_hub_names()).unwrap();
    let join = |id: &'static str| {
        let (server, certs) = (nats.1.clone(), certs.clone());
        async move {
            let identity = HubIdentity::from_pem(&certs.hub_cert_pem, &certs.hub_key_pem).unwrap();
            let mut config = HubConfig::default();
            config.policy.heartbeat_interval_ms = 500;
            let hub = Hub::new(config, HubMetrics::new());
            let listener = hub
                .listen_quic("127.0.0.1:0".parse().unwrap(), &identity)
                .unwrap();
            let url = format!("quic://127.0.0.1:{}", listener.local_addr.port());
            let mut cluster = ClusterConfig::new(vec![format!("nats://{id}:pw-{id}@{server}")], id);
            cluster.name = "trust".into();
            cluster.beat = Duration::from_millis(200);
            cluster.queues = agentwire_cluster::QueuePlacement::PerHub;
            let cluster = Cluster::join(hub.clone(), cluster).await.unwrap();
            TestHub {
                hub,
                _listener: listener,
                url,
                _cluster: cluster,
            }
        }
    };
    let (a, b) = (join("hub-a").await, join("hub-b").await);
    let alice = agent(&a, &certs, "alice").await;
    let mut bob = agent(&b, &certs, "bob").await;
    wait_for_agents(&b.hub, &["alice", "bob"]).await;
    wait_for_agents(&a.hub, &["alice", "bob"]).await;

    let mallory =
        async_nats::ConnectOptions::with_user_and_password("mallory".into(), "pw-mallory".into())
            .connect(format!("nats://{}", nats.1))
            .await
            .unwrap();
    let forged = |n: u32| {
        let env = agentwire::Envelope::new(
            u64::from(n),
            "alice",
            Destination::agent("bob"),
            Kind::Event,
        )
        .with_body(format!("forged-{n}").into_bytes());
        agentwire_proto::Frame::Envelope(env)
            .encode(agentwire::Codec::MsgPack)
            .unwrap()
    };
    let from_alice = || {
        let mut h = async_nats::HeaderMap::new();
        h.insert(agentwire_cluster::link::FROM_HEADER, "alice");
        h
    };
    // On hub-a's own subject: NATS refuses it.
    let _ = mallory
        .publish_with_headers(
            "agentwire.trust.hub.hub-b.from.hub-a",
            from_alice(),
            forged(1),
        )
        .await;
    // On its own subject, naming hub-a's agent: hub-b drops it.
    mallory
        .publish_with_headers(
            "agentwire.trust.hub.hub-b.from.mallory",
            from_alice(),
            forged(2),
        )
        .await
        .unwrap();
    // Presence for hub-a: refused on hub-a's subject, dropped on its own.
    let gone = br#"{"type":"gone","hub":"hub-a"}"#;
    let _ = mallory
        .publish("agentwire.trust.presence.hub-a", gone.as_slice().into())
        .await;
    mallory
        .publish("agentwire.trust.presence.mallory", gone.as_slice().into())
        .await
        .unwrap();
    let _ = mallory.flush().await;

    // The real alice still reaches bob, and bob got nothing else.
    alice
        .send(Destination::agent("bob"), Kind::Event, "real")
        .await
        .unwrap();
    let got = recv(&mut bob).await;
    assert_eq!(&got.envelope.body[..], b"real");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(200), bob.recv())
            .await
            .is_err(),
        "a forged frame reached bob"
    );
    // Hub-b still counts alice as hub-a's.
    wait_for_agents(&b.hub, &["alice", "bob"]).await;
}

/// Forwards TCP connections from a loopback port to `upstream`; while `hold` is set, nothing
/// goes from the server to the client (it waits, in order, until `hold` is cleared): answers
/// delayed, not lost.
async fn holding_proxy(
    upstream: String,
    hold: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(upstream.trim_start_matches("nats://"))
                .await
                .unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            tokio::spawn(async move { tokio::io::copy(&mut cr, &mut sw).await });
            let hold = hold.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    while hold.load(std::sync::atomic::Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("nats://{addr}")
}

/// JetStream's answer to a queue write delayed past the store's timeout: the write is tried
/// again, and once the answers come the first try is recognised as this batch's (by the id in
/// the owner's mark). The hub neither fences itself nor loses or doubles a task, and writes on
/// without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jetstream_answer_delayed_past_the_timeout_is_recognised() {
    use agentwire_cluster::lease::Lease;
    use agentwire_cluster::store::{JetStreamStore, StoreLayout};
    use agentwire_queue::{QueueStore, StoreOp, TaskId, TaskRecord};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let Some(nats) = start_nats() else { return };
    let hold = Arc::new(AtomicBool::new(false));
    let proxied = holding_proxy(nats.1.clone(), hold.clone()).await;
    let layout = StoreLayout::for_cluster("delayed");
    let client = async_nats::connect(proxied).await.unwrap();
    let lease = Arc::new(Lease::new(Duration::from_secs(60)));
    lease.granted(std::time::Instant::now());
    let mut store = JetStreamStore::open(client, &layout, "hub-d", lease.clone())
        .await
        .unwrap();
    store.set_answer_timeout(Duration::from_millis(500));
    store.claim().await.unwrap();
    let record = |id: u64| {
        StoreOp::Put(TaskRecord {
            id: TaskId(id),
            queue: agentwire_queue::QueueName::new("jobs").unwrap(),
            sender: "boss".into(),
            producer_id: None,
            attempts: 0,
            enqueued_unix_ms: 1,
            dead: None,
            body: format!("task {id}").into_bytes().into(),
        })
    };
    // Answers held for 2 s: the first tries time out; the writes themselves reach JetStream.
    hold.store(true, Ordering::Relaxed);
    let release = tokio::spawn({
        let hold = hold.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            hold.store(false, Ordering::Relaxed);
        }
    });
    let (mut store, r) = tokio::task::spawn_blocking(move || {
        let r = store.apply(&[record(1), record(2)]);
        (store, r)
    })
    .await
    .unwrap();
    release.await.unwrap();
    r.expect("the delayed write is recognised, not refused");
    assert!(lease.valid(), "the hub fenced itself off");
    // It writes on, without a restart.
    let (_, r) = tokio::task::spawn_blocking(move || {
        let r = store.apply(&[record(3), StoreOp::Delete(TaskId(1))]);
        (store, r)
    })
    .await
    .unwrap();
    r.unwrap();
    let check_client = async_nats::connect(nats.1.clone()).await.unwrap();
    let check_lease = Arc::new(Lease::new(Duration::from_secs(60)));
    let mut check = JetStreamStore::open(check_client, &layout, "check", check_lease)
        .await
        .unwrap();
    check.preload().await.unwrap();
    let tasks = check.load().unwrap().tasks;
    let ids: Vec<u64> = tasks.iter().map(|t| t.id.0).collect();
    assert_eq!(ids, vec![2, 3], "each task once, none lost");
}

/// On a NATS cluster the queues' stream gets exactly the replicas asked for, or opening fails
/// with a reason that names the flag: never a silent downgrade to fewer copies. (Five asked of
/// a three-node cluster; two seconds of patience instead of thirty.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_never_made_with_fewer_replicas_than_asked() {
    use agentwire_cluster::lease::Lease;
    use agentwire_cluster::store::{JetStreamStore, StoreLayout};
    use std::sync::Arc;

    let Some(nodes) = start_nats_cluster() else {
        return;
    };
    let client = async_nats::connect(nodes[0].1.clone()).await.unwrap();
    let lease = Arc::new(Lease::new(Duration::from_secs(60)));
    let layout = StoreLayout {
        replicas: 5,
        patience: Duration::from_secs(2),
        ..StoreLayout::for_cluster("replicas")
    };
    let err = match JetStreamStore::open(client.clone(), &layout, "hub-r", lease.clone()).await {
        Ok(_) => panic!("a stream with fewer replicas than asked was made"),
        Err(e) => e.with_causes(),
    };
    assert!(
        err.contains("5 replicas") && err.contains("--cluster-replicas"),
        "{err}"
    );
    // Three, as many as there are nodes, are kept (JetStream may need a moment after start).
    let layout = StoreLayout {
        replicas: 3,
        ..StoreLayout::for_cluster("replicas")
    };
    JetStreamStore::open(client, &layout, "hub-r", lease)
        .await
        .expect("three replicas on three nodes");
}
