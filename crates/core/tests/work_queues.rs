//! Durable work queues end to end: a real hub with a queue store on disk, real agents over
//! real sockets on loopback (every transport), tasks enqueued, consumed by competing
//! consumers, acked; a consumer that disconnects; a hub restarted on the same store.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agentwire::agent_queues::QueueTask;
use agentwire::hub::{Hub, HubConfig, Listener};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, CertBundle, HubIdentity};
use agentwire::transport::TransportKind;
use agentwire::{Agent, AgentOptions, HubTrust};
use agentwire_queue::FileStore;

const WAIT: Duration = Duration::from_secs(10);

struct Rig {
    hub: Hub,
    listeners: Vec<Listener>,
    bundle: CertBundle,
    sock_dir: tempfile::TempDir,
}

async fn rig(store_dir: &std::path::Path, bundle: Option<CertBundle>) -> Rig {
    common::init_logs();
    let bundle = bundle.unwrap_or_else(|| tls::generate(&tls::default_hub_names()).unwrap());
    let identity = HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap();
    let mut config = HubConfig::default();
    config.queue.ack_wait = Duration::from_secs(2);
    config.queue.backoff = vec![Duration::from_millis(50)];
    let store = FileStore::open(store_dir).unwrap();
    let hub = Hub::with_store(config, HubMetrics::new(), Box::new(store)).unwrap();
    let sock_dir = tempfile::tempdir().unwrap();
    let sock = sock_dir.path().join("hub.sock");
    let listeners = common::listen_everywhere(&hub, &identity, &sock).await;
    Rig {
        hub,
        listeners,
        bundle,
        sock_dir,
    }
}

impl Rig {
    async fn agent(&self, kind: TransportKind, id: &str) -> Agent {
        let url = self
            .listeners
            .iter()
            .find(|l| l.transport == kind)
            .map(|l| l.url.to_string())
            .unwrap();
        let trust = HubTrust::ca_pem(&self.bundle.ca_cert_pem).unwrap();
        Agent::connect(AgentOptions::new(id, url, trust))
            .await
            .unwrap()
    }
}

/// Takes tasks from `agent` until `n` arrived or `WAIT` passed; acks each unless `ack` is
/// false. Returns (task id, body, attempt) in arrival order.
async fn take(agent: &mut Agent, n: usize, ack: bool) -> Vec<(u64, String, u32)> {
    take_shared(agent, &AtomicUsize::new(0), n, ack).await
}

/// [`take`] for consumers sharing the work: stops once `total` (all of them together) is `n`.
async fn take_shared(
    agent: &mut Agent,
    total: &AtomicUsize,
    n: usize,
    ack: bool,
) -> Vec<(u64, String, u32)> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while total.load(Ordering::SeqCst) < n && tokio::time::Instant::now() < deadline {
        let Ok(Some(msg)) = tokio::time::timeout(Duration::from_millis(50), agent.recv()).await
        else {
            continue;
        };
        let Some(task) = QueueTask::from_envelope(&msg.envelope) else {
            continue;
        };
        if ack {
            agent.ack(task.task).await.unwrap();
        }
        total.fetch_add(1, Ordering::SeqCst);
        got.push((
            task.task,
            String::from_utf8_lossy(&task.body).into_owned(),
            task.attempt,
        ));
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_consumers_on_every_transport_get_every_task_once() {
    let store = tempfile::tempdir().unwrap();
    let rig = rig(store.path(), None).await;
    for kind in [
        TransportKind::Quic,
        TransportKind::Http2,
        TransportKind::WebSocket,
        TransportKind::Unix,
    ] {
        let queue = format!("jobs-{kind}");
        let producer = rig.agent(kind, &format!("producer-{kind}")).await;
        let mut a = rig.agent(kind, &format!("worker-a-{kind}")).await;
        let mut b = rig.agent(kind, &format!("worker-b-{kind}")).await;
        let mut ids = BTreeSet::new();
        for i in 0..40 {
            let r = producer
                .enqueue(&queue, format!("task {i}"), Some(&format!("p-{i}")), WAIT)
                .await
                .unwrap();
            assert!(!r.duplicate);
            ids.insert(r.task);
        }
        // A task sent again with its producer id is stored once.
        let again = producer
            .enqueue(&queue, "task 0", Some("p-0"), WAIT)
            .await
            .unwrap();
        assert!(again.duplicate);
        assert!(ids.contains(&again.task));
        a.consume(&queue, 4).await.unwrap();
        b.consume(&queue, 4).await.unwrap();
        let total = AtomicUsize::new(0);
        let (ga, gb) = tokio::join!(
            take_shared(&mut a, &total, 40, true),
            take_shared(&mut b, &total, 40, true)
        );
        let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
        for (task, _, _) in ga.iter().chain(gb.iter()) {
            *seen.entry(*task).or_default() += 1;
        }
        assert_eq!(seen.keys().copied().collect::<BTreeSet<_>>(), ids, "{kind}");
        assert!(
            seen.values().all(|&n| n == 1),
            "{kind}: a task delivered twice: {seen:?}"
        );
        assert!(
            !ga.is_empty() && !gb.is_empty(),
            "{kind}: both consumers got work"
        );
        let stats = rig.hub.queue_stats(&queue).unwrap();
        assert_eq!((stats.ready, stats.in_flight), (0, 0), "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_that_disconnects_hands_its_tasks_to_another() {
    let store = tempfile::tempdir().unwrap();
    let rig = rig(store.path(), None).await;
    let producer = rig.agent(TransportKind::Quic, "producer").await;
    for i in 0..6 {
        producer
            .enqueue("jobs", format!("t{i}"), None, WAIT)
            .await
            .unwrap();
    }
    let mut quitter = rig.agent(TransportKind::Unix, "quitter").await;
    quitter.consume("jobs", 3).await.unwrap();
    let held = take(&mut quitter, 3, false).await;
    assert_eq!(held.len(), 3);
    quitter.close().await;
    drop(quitter);
    let mut worker = rig.agent(TransportKind::Quic, "worker").await;
    worker.consume("jobs", 10).await.unwrap();
    let got = take(&mut worker, 6, true).await;
    let bodies: BTreeSet<String> = got.iter().map(|(_, b, _)| b.clone()).collect();
    assert_eq!(bodies.len(), 6, "{got:?}");
    for (task, _, attempt) in &got {
        let was_held = held.iter().any(|(t, _, _)| t == task);
        assert_eq!(*attempt, if was_held { 2 } else { 1 }, "task {task}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_tasks_survive_a_hub_restart_on_the_same_store() {
    let store = tempfile::tempdir().unwrap();
    let first = rig(store.path(), None).await;
    let producer = first.agent(TransportKind::Http2, "producer").await;
    for i in 0..20 {
        producer
            .enqueue("jobs", format!("t{i}"), Some(&format!("p{i}")), WAIT)
            .await
            .unwrap();
    }
    // One task in flight (delivered, not acked) when the hub goes down.
    let mut early = first.agent(TransportKind::Unix, "early").await;
    early.consume("jobs", 1).await.unwrap();
    assert_eq!(take(&mut early, 1, false).await.len(), 1);
    let bundle = first.bundle.clone();
    first.hub.shutdown();
    drop(early);
    drop(producer);
    drop(first);

    let second = rig(store.path(), Some(bundle)).await;
    let producer = second.agent(TransportKind::Http2, "producer").await;
    let dup = producer
        .enqueue("jobs", "t3", Some("p3"), WAIT)
        .await
        .unwrap();
    assert!(dup.duplicate, "producer ids survive the restart");
    let mut worker = second.agent(TransportKind::WebSocket, "worker").await;
    worker.consume("jobs", 8).await.unwrap();
    let got = take(&mut worker, 20, true).await;
    let bodies: BTreeSet<String> = got.iter().map(|(_, b, _)| b.clone()).collect();
    assert_eq!(
        bodies,
        (0..20).map(|i| format!("t{i}")).collect::<BTreeSet<_>>()
    );
    let _ = second.sock_dir.path();
}
