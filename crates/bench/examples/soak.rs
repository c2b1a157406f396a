//! A long run against a hub for `scripts/soak.sh` (issue 16): many agents, for minutes, with
//! requests, topic messages and a durable queue at once; one JSON line of counts every 10 s.
//!
//! usage: soak HUB_URL CA_PEM AGENTS SECONDS
//!
//! Ten coordinators each send a request to a worker every 100 ms (round robin over the
//! workers), publish on topic `news` every second and enqueue a task on queue `jobs` every
//! 200 ms; every other agent is a worker that answers requests, subscribes to `news` and
//! consumes `jobs` (credit 1, acking each task); workers stop 5 s after the coordinators.
//! Every loop stops by itself at the end.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentwire::agent_queues::QueueTask;
use agentwire::{Agent, AgentOptions, HubTrust, Kind};

#[derive(Default)]
struct Counts {
    requests_ok: AtomicU64,
    request_errors: AtomicU64,
    topic_received: AtomicU64,
    enqueued: AtomicU64,
    enqueue_errors: AtomicU64,
    tasks_done: AtomicU64,
}

const COORDINATORS: usize = 10;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        anyhow::bail!("usage: soak HUB_URL CA_PEM AGENTS SECONDS");
    }
    let (url, ca) = (args[1].clone(), std::path::PathBuf::from(&args[2]));
    let agents: usize = args[3].parse()?;
    let seconds: u64 = args[4].parse()?;
    let trust = HubTrust::ca_file(&ca)?;
    let workers = agents.saturating_sub(COORDINATORS).max(1);
    let stop = Instant::now() + Duration::from_secs(seconds);
    // Workers outlast the coordinators, so that requests still in flight at the end are
    // answered (an error in the counts is then a real one).
    let workers_stop = stop + Duration::from_secs(5);
    let counts = Arc::new(Counts::default());
    let opts = |id: String| {
        let mut o = AgentOptions::new(id, url.clone(), trust.clone());
        o.connect_timeout = Duration::from_secs(60);
        o
    };
    let mut tasks = Vec::new();
    for w in 0..workers {
        let mut agent = Agent::connect(opts(format!("worker-{w}"))).await?;
        agent.subscribe("news").await?;
        agent.consume("jobs", 1).await?;
        let counts = counts.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < workers_stop {
                let left = workers_stop.saturating_duration_since(Instant::now());
                let Ok(Some(msg)) = tokio::time::timeout(left, agent.recv()).await else {
                    break;
                };
                if let Some(t) = QueueTask::from_envelope(&msg.envelope) {
                    if agent.ack(t.task).await.is_ok() {
                        counts.tasks_done.fetch_add(1, Ordering::Relaxed);
                    }
                } else if msg.envelope.kind == Kind::Request {
                    let _ = msg.reply(msg.envelope.body.clone()).await;
                } else {
                    counts.topic_received.fetch_add(1, Ordering::Relaxed);
                }
            }
            agent.close().await;
        }));
    }
    for c in 0..COORDINATORS {
        let agent = Arc::new(Agent::connect(opts(format!("coordinator-{c}"))).await?);
        let counts2 = counts.clone();
        let a = agent.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            let mut n = c;
            while Instant::now() < stop {
                tick.tick().await;
                n = (n + COORDINATORS) % workers;
                match a
                    .request(
                        &format!("worker-{n}"),
                        vec![7u8; 256],
                        Duration::from_secs(10),
                    )
                    .await
                {
                    Ok(_) => counts2.requests_ok.fetch_add(1, Ordering::Relaxed),
                    Err(_) => counts2.request_errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
        let (a, counts2) = (agent.clone(), counts.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while Instant::now() < stop {
                tick.tick().await;
                let _ = a.publish("news", Kind::Event, vec![1u8; 512]).await;
                let _ = &counts2;
            }
        }));
        let (a, counts2) = (agent, counts.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            let mut i = 0u64;
            while Instant::now() < stop {
                tick.tick().await;
                i += 1;
                let id = format!("c{c}-{i}");
                match a
                    .enqueue("jobs", vec![3u8; 1024], Some(&id), Duration::from_secs(10))
                    .await
                {
                    Ok(_) => counts2.enqueued.fetch_add(1, Ordering::Relaxed),
                    Err(_) => counts2.enqueue_errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    let started = Instant::now();
    let mut report = tokio::time::interval(Duration::from_secs(10));
    report.tick().await;
    while Instant::now() < stop {
        report.tick().await;
        let c = &counts;
        println!(
            "{}",
            serde_json::json!({
                "t_secs": started.elapsed().as_secs(),
                "requests_ok": c.requests_ok.load(Ordering::Relaxed),
                "request_errors": c.request_errors.load(Ordering::Relaxed),
                "topic_received": c.topic_received.load(Ordering::Relaxed),
                "enqueued": c.enqueued.load(Ordering::Relaxed),
                "enqueue_errors": c.enqueue_errors.load(Ordering::Relaxed),
                "tasks_done": c.tasks_done.load(Ordering::Relaxed),
            })
        );
    }
    for t in tasks {
        let _ = t.await;
    }
    Ok(())
}
