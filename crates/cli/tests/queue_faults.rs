//! Work queues with real processes (issue 16): the CLI contract (`hub --store`, `send --to
//! queue:NAME`, `agent --consume NAME --print --ack-delay-ms N`), and faults: a consumer killed
//! with SIGKILL in the middle of 10,000 tasks, a hub killed with SIGKILL while tasks flow and
//! restarted on the same store, a damaged store. Every wait is bounded.

mod common;
#[path = "../../queue/tests/support/tmpfs.rs"]
mod tmpfs;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use agentwire::{Agent, AgentOptions, HubTrust};
use common::{fails_with, run, spawn, text, wait_for, Running};

const LIMIT: Duration = Duration::from_secs(90);

fn hub(store: &std::path::Path, sock: &std::path::Path) -> (Running, mpsc::Receiver<String>) {
    let (hub, out) = spawn(&[
        "hub",
        "--listen",
        &format!("unix://{}", sock.display()),
        "--store",
        store.to_str().unwrap(),
        "--queue-ack-wait-ms",
        "3000",
    ]);
    wait_for(&out, "hub listening on unix://");
    (hub, out)
}

fn hub_url(sock: &std::path::Path) -> String {
    format!("unix://{}", sock.display())
}

async fn connect(sock: &std::path::Path, id: &str) -> Agent {
    // Unix sockets carry no TLS: an empty trust store (which would refuse any TLS peer).
    let opts = AgentOptions::new(id, hub_url(sock), HubTrust::Ca(Vec::new()));
    Agent::connect(opts).await.expect("connect to the hub")
}

/// Bodies a consumer process printed, one per line, until `stop` says so or `LIMIT` passes.
fn collect(
    lines: &mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    stop: impl Fn(&[String]) -> bool,
) {
    let deadline = Instant::now() + LIMIT;
    while !stop(seen) && Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
            if line.starts_with("task-") || line.starts_with("poison-") {
                seen.push(line);
            }
        }
    }
}

/// Enqueues `task-{i}` for every i in `ids` (producer id `p-{i}`), 64 at a time; returns the
/// ids the hub acknowledged.
async fn produce(agent: &Agent, ids: impl Iterator<Item = usize>) -> BTreeSet<usize> {
    produce_counted(agent, ids, &AtomicUsize::new(0)).await
}

/// [`produce`], counting acknowledgements in `done` as they come.
async fn produce_counted(
    agent: &Agent,
    ids: impl Iterator<Item = usize>,
    done: &AtomicUsize,
) -> BTreeSet<usize> {
    use futures_util::stream::{self, StreamExt};
    let results: Vec<(usize, bool)> = stream::iter(ids)
        .map(|i| async move {
            let r = agent
                .enqueue(
                    "jobs",
                    format!("task-{i}"),
                    Some(&format!("p-{i}")),
                    Duration::from_secs(10),
                )
                .await;
            if r.is_ok() {
                done.fetch_add(1, Ordering::SeqCst);
            }
            (i, r.is_ok())
        })
        .buffer_unordered(64)
        .collect()
        .await;
    results
        .into_iter()
        .filter(|(_, ok)| *ok)
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn the_cli_stores_prints_and_acks_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let sock = dir.path().join("hub.sock");
    let (_hub, hub_out) = hub(&store, &sock);
    let _ = hub_out;
    let url = hub_url(&sock);
    for i in 0..3 {
        let out = run(&[
            "send",
            "--hub",
            &url,
            "--to",
            "queue:jobs",
            "--message",
            &format!("task-{i}"),
        ]);
        assert!(out.status.success(), "send: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(&format!("stored task {i} in queue:jobs")),
            "{}",
            text(&out.stderr)
        );
    }
    let (_worker, lines) = spawn(&[
        "agent",
        "--hub",
        &url,
        "--id",
        "w",
        "--consume",
        "jobs",
        "--print",
        "--ack-delay-ms",
        "10",
    ]);
    let mut seen = Vec::new();
    collect(&lines, &mut seen, |s| s.len() >= 3);
    assert_eq!(seen, vec!["task-0", "task-1", "task-2"]);
    // The same producer id twice: stored once.
    for _ in 0..2 {
        let out = run(&[
            "send",
            "--hub",
            &url,
            "--to",
            "queue:jobs",
            "--message",
            "task-9",
            "--producer-id",
            "p-9",
        ]);
        assert!(out.status.success(), "send: {}", text(&out.stderr));
    }
    collect(&lines, &mut seen, |s| s.len() >= 4);
    assert_eq!(seen.last().map(String::as_str), Some("task-9"));
    // A refused task is an error exit, with the hub's reason.
    fails_with(
        &[
            "send",
            "--hub",
            &url,
            "--to",
            "queue:two words",
            "--message",
            "x",
        ],
        "bad queue name",
    );
}

#[test]
fn a_damaged_store_stops_the_hub_with_the_file_named() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join("queues.redb"), vec![0x42; 16 * 1024]).unwrap();
    let sock = dir.path().join("hub.sock");
    let url = hub_url(&sock);
    fails_with(
        &["hub", "--listen", &url, "--store", store.to_str().unwrap()],
        &format!(
            "cannot open the queue store {}",
            store.join("queues.redb").display()
        ),
    );
    // A store path that is a file, not a directory.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    fails_with(
        &["hub", "--listen", &url, "--store", file.to_str().unwrap()],
        "cannot open the queue store",
    );
}

#[test]
fn a_consumer_killed_mid_queue_loses_nothing() {
    const N: usize = 10_000;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let sock = dir.path().join("hub.sock");
    let (_hub, _hub_out) = hub(&store, &sock);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let acked = rt.block_on(async {
        let p = connect(&sock, "producer").await;
        produce(&p, 0..N).await
    });
    assert_eq!(acked.len(), N, "every enqueue acknowledged");
    let url = hub_url(&sock);
    let consumer = |id: &str| {
        spawn(&[
            "agent",
            "--hub",
            &url,
            "--id",
            id,
            "--consume",
            "jobs",
            "--credit",
            "32",
            "--print",
        ])
    };
    let (mut first, first_lines) = consumer("c1");
    let mut seen_first = Vec::new();
    collect(&first_lines, &mut seen_first, |s| s.len() >= N / 3);
    first.0.kill().unwrap(); // SIGKILL: no goodbye, tasks in flight unacked
    let _ = first.0.wait();
    // What it printed before it died but after the first third was read (its output pipe
    // ends at its death, so this stops).
    let deadline = Instant::now() + LIMIT;
    while Instant::now() < deadline {
        match first_lines.recv_timeout(Duration::from_millis(500)) {
            Ok(line) if line.starts_with("task-") => seen_first.push(line),
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let (_second, second_lines) = consumer("c2");
    let mut seen_second = Vec::new();
    let first_set: BTreeSet<String> = seen_first.iter().cloned().collect();
    collect(&second_lines, &mut seen_second, |s| {
        first_set.len() + s.len() >= N && {
            let all: BTreeSet<&String> = first_set.iter().chain(s.iter()).collect();
            all.len() >= N
        }
    });
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for b in seen_first.iter().chain(seen_second.iter()) {
        *count.entry(b.as_str()).or_default() += 1;
    }
    let lost = N - count.len();
    let duplicates: usize = count.values().map(|n| n - 1).sum();
    eprintln!(
        "consumer killed after {} tasks: lost {lost}, duplicates {duplicates}",
        seen_first.len()
    );
    assert_eq!(lost, 0);
}

#[test]
fn a_hub_killed_while_tasks_flow_loses_no_stored_task() {
    const N: usize = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let sock1 = dir.path().join("hub1.sock");
    let sock2 = dir.path().join("hub2.sock");
    let (mut first_hub, _out1) = hub(&store, &sock1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (consumed, acked_before) = rt.block_on(async {
        let producer = connect(&sock1, "producer").await;
        let mut consumer = connect(&sock1, "consumer").await;
        consumer.consume("jobs", 16).await.unwrap();
        // Consume (and ack) while the producer sends; the hub dies in the middle.
        let consuming = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Ok(Some(msg)) =
                tokio::time::timeout(Duration::from_secs(5), consumer.recv()).await
            {
                if let Some(t) = agentwire::agent_queues::QueueTask::from_envelope(&msg.envelope) {
                    got.push(String::from_utf8_lossy(&t.body).into_owned());
                    let _ = consumer.ack(t.task).await;
                }
            }
            got
        });
        let done = Arc::new(AtomicUsize::new(0));
        let counted = done.clone();
        let sending = tokio::spawn(async move { produce_counted(&producer, 0..N, &counted).await });
        let deadline = Instant::now() + LIMIT;
        while done.load(Ordering::SeqCst) < N / 4 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        first_hub.0.kill().unwrap();
        let _ = first_hub.0.wait();
        (consuming.await.unwrap(), sending.await.unwrap())
    });
    assert!(
        acked_before.len() < N,
        "the hub died before every task was sent"
    );
    // Restart on the same store; the producer re-sends what was not acknowledged, with the
    // same producer ids (a task stored just before the kill is then a duplicate, not a copy).
    let (_second_hub, _out2) = hub(&store, &sock2);
    let consumed_after = rt.block_on(async {
        let producer = connect(&sock2, "producer").await;
        let resend = (0..N).filter(|i| !acked_before.contains(i));
        let acked = produce(&producer, resend).await;
        assert_eq!(
            acked.len() + acked_before.len(),
            N,
            "every re-sent task acknowledged"
        );
        let mut consumer = connect(&sock2, "consumer").await;
        consumer.consume("jobs", 64).await.unwrap();
        let mut got = Vec::new();
        let mut distinct: BTreeSet<String> = consumed.iter().cloned().collect();
        let deadline = Instant::now() + LIMIT;
        while distinct.len() < N && Instant::now() < deadline {
            let Ok(Some(msg)) = tokio::time::timeout(Duration::from_secs(5), consumer.recv()).await
            else {
                break;
            };
            if let Some(t) = agentwire::agent_queues::QueueTask::from_envelope(&msg.envelope) {
                let body = String::from_utf8_lossy(&t.body).into_owned();
                distinct.insert(body.clone());
                got.push(body);
                consumer.ack(t.task).await.unwrap();
            }
        }
        got
    });
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for b in consumed.iter().chain(consumed_after.iter()) {
        *count.entry(b.as_str()).or_default() += 1;
    }
    let lost = N - count.len();
    let duplicates: usize = count.values().map(|n| n - 1).sum();
    eprintln!(
        "hub killed after {} acknowledged enqueues and {} deliveries: lost {lost}, duplicates {duplicates}",
        acked_before.len(),
        consumed.len()
    );
    assert_eq!(lost, 0);
}

#[test]
fn dead_letters_are_listed_replayed_and_discarded_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let sock = dir.path().join("hub.sock");
    let (_hub, _out) = spawn(&[
        "hub",
        "--listen",
        &hub_url(&sock),
        "--store",
        store.to_str().unwrap(),
        "--queue-max-deliver",
        "1",
    ]);
    wait_for(&_out, "hub listening on unix://");
    let url = hub_url(&sock);
    for body in ["poison-1", "poison-2"] {
        let out = run(&[
            "send",
            "--hub",
            &url,
            "--to",
            "queue:jobs",
            "--message",
            body,
        ]);
        assert!(out.status.success(), "send: {}", text(&out.stderr));
    }
    // A consumer that dies holding both: with one attempt allowed, both become dead letters.
    let (mut doomed, lines) = spawn(&[
        "agent",
        "--hub",
        &url,
        "--id",
        "doomed",
        "--consume",
        "jobs",
        "--credit",
        "2",
        "--print",
        "--ack-delay-ms",
        "60000",
    ]);
    let mut seen = Vec::new();
    collect(&lines, &mut seen, |s| s.len() >= 2);
    doomed.0.kill().unwrap();
    let _ = doomed.0.wait();
    let queue = |args: &[&str]| -> serde_json::Value {
        let mut all = vec!["queue", "--hub", url.as_str()];
        all.extend_from_slice(args);
        // The hub notices the consumer's end a moment after the kill.
        for _ in 0..100 {
            let out = run(&all);
            assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if args[0] != "dead-letters" || v.as_array().is_some_and(|a| a.len() == 2) {
                return v;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{args:?}: no answer as expected");
    };
    let dead = queue(&["dead-letters", "jobs"]);
    let bodies: Vec<&str> = dead
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, vec!["poison-1", "poison-2"]);
    assert_eq!(dead[0]["reason"], "consumer-gone");
    let first = dead[0]["task"].as_u64().unwrap().to_string();
    assert_eq!(
        queue(&["discard", "jobs", "--task", &first]),
        serde_json::json!({"discarded": 1})
    );
    assert_eq!(
        queue(&["replay", "jobs"]),
        serde_json::json!({"replayed": 1})
    );
    let stats = queue(&["stats", "jobs"]);
    assert_eq!(
        (stats["ready"].as_u64(), stats["dead"].as_u64()),
        (Some(1), Some(0))
    );
    let (_worker, lines) = spawn(&[
        "agent",
        "--hub",
        &url,
        "--id",
        "w",
        "--consume",
        "jobs",
        "--print",
    ]);
    let mut seen = Vec::new();
    collect(&lines, &mut seen, |s| !s.is_empty());
    assert_eq!(seen, vec!["poison-2"]);
}

/// A hub whose store's disk fills up, then has room again (a 16 MiB tmpfs; mounting needs
/// root: without it the test says so and passes, and CI runs as root). While the disk is
/// full the task being written waits, new tasks are refused with the reason, and everything
/// else keeps working; once there is room the waiting task's receipt comes, new tasks are
/// taken, all without a restart, and a consumer gets every acknowledged task once.
#[test]
fn a_full_disk_then_freed_needs_no_restart() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    let Some(_unmount) = tmpfs::Tmpfs::mount(&disk, "16m") else {
        return;
    };
    let sock = dir.path().join("hub.sock");
    let (hub_process, hub_out) = hub(&disk.join("store"), &sock);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let producer = connect(&sock, "producer").await;
        let warm = produce(&producer, 0..5).await;
        assert_eq!(warm.len(), 5);
        // Fill what is left of the disk.
        let filler = disk.join("filler");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&filler).unwrap();
            while f.write_all(&[0u8; 64 * 1024]).is_ok() {}
        }
        // Forty big tasks at once, more than the disk can take. The write that fails is tried
        // again: the tasks in it wait for their receipts, and tasks sent meanwhile are refused
        // as new work, with the reason.
        let mut sends = tokio::task::JoinSet::new();
        for i in 0..40 {
            let p = producer.handle().clone();
            sends.spawn(async move {
                let r = p
                    .enqueue(
                        "jobs",
                        vec![0x5au8; 128 * 1024],
                        Some(&format!("big-{i}")),
                        Duration::from_secs(60),
                    )
                    .await;
                (i, r)
            });
        }
        // The hub says its write failed; a new task is then refused, with the reason.
        wait_for(&hub_out, "queue store write failed");
        let refused = producer
            .enqueue("jobs", "small", Some("small"), Duration::from_secs(10))
            .await;
        match refused {
            Err(agentwire::AgentError::Remote { reason, .. }) => {
                assert!(reason.contains("cannot write"), "{reason}")
            }
            other => panic!("a new task while the disk was full: {other:?}"),
        }
        assert!(
            !sends.is_empty(),
            "the tasks of the failed write wait for their receipts"
        );
        let mut results = Vec::new();
        // Room again: the waiting tasks get their receipts, new tasks are taken, no restart.
        std::fs::remove_file(&filler).unwrap();
        while let Some(done) = tokio::time::timeout(Duration::from_secs(30), sends.join_next())
            .await
            .expect("every waiting task answered once the disk had room")
        {
            results.push(done.unwrap());
        }
        let mut stored = std::collections::BTreeSet::new();
        for (i, r) in &results {
            match r {
                Ok(receipt) => {
                    stored.insert(receipt.task);
                }
                Err(agentwire::AgentError::Remote { reason, .. })
                    if reason.contains("cannot write") => {}
                Err(e) => panic!("big-{i}: {e}"),
            }
        }
        let after = produce(&producer, 100..150).await;
        assert_eq!(after.len(), 50);
        // Every acknowledged task once.
        eprintln!(
            "{} of 40 big tasks stored, {} refused while the disk was full",
            stored.len(),
            results.len() - stored.len()
        );
        let expected = 5 + stored.len() + 50;
        let mut consumer = connect(&sock, "consumer").await;
        consumer.consume("jobs", 64).await.unwrap();
        let mut seen = std::collections::BTreeMap::<u64, usize>::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.len() < expected && Instant::now() < deadline {
            let Ok(Some(msg)) = tokio::time::timeout(Duration::from_secs(5), consumer.recv()).await
            else {
                break;
            };
            let Some(task) = agentwire::agent_queues::QueueTask::from_envelope(&msg.envelope)
            else {
                continue;
            };
            *seen.entry(task.task).or_default() += 1;
            consumer.ack(task.task).await.unwrap();
        }
        assert_eq!(seen.len(), expected, "tasks delivered");
        assert!(
            seen.values().all(|n| *n == 1),
            "a task delivered twice: {seen:?}"
        );
        assert!(stored.iter().all(|t| seen.contains_key(t)));
    });
    drop(hub_process);
    let _ = hub_out;
}
