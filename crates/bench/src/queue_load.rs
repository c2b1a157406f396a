//! `agentwire queue bench`: durable-queue throughput against a running hub.
//!
//! The shape of NATS JetStream's work-queue benchmark (`scripts/peers/jetstream.sh` runs both
//! side by side): `producers` connections each keep `window` enqueues in flight, and each
//! enqueue waits for the hub's receipt (the task is stored: with `--store`, on disk);
//! `consumers` connections each hold up to `credit` tasks and ack each one as it arrives.
//! After a warm-up, it counts receipts and consumed tasks over the measured window. Every
//! loop stops by itself at the window's end; every enqueue has a timeout.
//!
//! It measures only; it must not change how the hub or the agents behave.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwire::agent_queues::QueueTask;
use agentwire::{Agent, AgentOptions};
use agentwire_measure::stats::{new_histogram, record_us, summarize, LatencySummary};
use anyhow::{Context, Result};
use serde::Serialize;

/// The load's shape, repeated in its report.
#[derive(Debug, Clone, Serialize)]
pub struct QueueShape {
    /// The queue.
    pub queue: String,
    /// Producer connections.
    pub producers: usize,
    /// Enqueues in flight per producer.
    pub window: usize,
    /// Consumer connections.
    pub consumers: usize,
    /// Tasks each consumer holds at once.
    pub credit: u32,
    /// Task body, bytes.
    pub size: usize,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct QueueLoadConfig {
    /// Queue, connections, credit, task size.
    pub shape: QueueShape,
    /// Before measuring.
    pub warmup: Duration,
    /// Measured window.
    pub duration: Duration,
    /// Per enqueue.
    pub timeout: Duration,
}

/// What it measured.
#[derive(Debug, Clone, Serialize)]
pub struct QueueLoadReport {
    /// Queue, connections, credit, task size (flattened into the JSON).
    #[serde(flatten)]
    pub shape: QueueShape,
    /// The measured window, ms.
    pub duration_ms: u64,
    /// Receipts (tasks stored) per second.
    pub enqueued_per_sec: f64,
    /// Tasks delivered and acked per second.
    pub consumed_per_sec: f64,
    /// Of those, deliveries after the first of their task.
    pub redelivered: u64,
    /// Enqueues that failed or timed out in the window.
    pub errors: u64,
    /// Enqueue to receipt.
    pub enqueue_latency: LatencySummary,
}

/// Runs the load against the hub `options` name (each connection gets its own id from
/// `options(id)`), for warm-up plus duration, and reports.
pub async fn run(
    config: &QueueLoadConfig,
    options: impl Fn(&str) -> Result<AgentOptions>,
) -> Result<QueueLoadReport> {
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Instant::now() + config.warmup + config.duration;
    let consumed = Arc::new(AtomicU64::new(0));
    let redelivered = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    let pid = std::process::id();
    for c in 0..config.shape.consumers {
        let mut agent = Agent::connect(options(&format!("qbench-{pid}-consumer-{c}"))?)
            .await
            .context("connecting a consumer")?;
        agent
            .consume(&config.shape.queue, config.shape.credit.max(1))
            .await?;
        let (measuring, consumed, redelivered) =
            (measuring.clone(), consumed.clone(), redelivered.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let left = stop.saturating_duration_since(Instant::now());
                let Ok(Some(msg)) = tokio::time::timeout(left, agent.recv()).await else {
                    break;
                };
                let Some(task) = QueueTask::from_envelope(&msg.envelope) else {
                    continue;
                };
                if agent.ack(task.task).await.is_err() {
                    break;
                }
                if measuring.load(Ordering::Relaxed) {
                    consumed.fetch_add(1, Ordering::Relaxed);
                    if task.attempt > 1 {
                        redelivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            agent.close().await;
        }));
    }
    let enqueued = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let hist = Arc::new(Mutex::new(new_histogram()));
    let body = bytes::Bytes::from(vec![0x5a; config.shape.size]);
    let mut producers = Vec::new();
    for p in 0..config.shape.producers {
        let agent = Agent::connect(options(&format!("qbench-{pid}-producer-{p}"))?)
            .await
            .context("connecting a producer")?;
        let agent = Arc::new(agent);
        for _ in 0..config.shape.window.max(1) {
            let (agent, body, queue, timeout) = (
                agent.clone(),
                body.clone(),
                config.shape.queue.clone(),
                config.timeout,
            );
            let (measuring, enqueued, errors, hist) = (
                measuring.clone(),
                enqueued.clone(),
                errors.clone(),
                hist.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut local = new_histogram();
                while Instant::now() < stop {
                    let start = Instant::now();
                    let result = agent.enqueue(&queue, body.clone(), None, timeout).await;
                    if !measuring.load(Ordering::Relaxed) {
                        continue;
                    }
                    match result {
                        Ok(_) => {
                            enqueued.fetch_add(1, Ordering::Relaxed);
                            record_us(&mut local, start.elapsed().as_micros() as u64);
                        }
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                if let Ok(mut h) = hist.lock() {
                    let _ = h.add(&local);
                }
            }));
        }
        producers.push(agent);
    }
    tokio::time::sleep(config.warmup).await;
    measuring.store(true, Ordering::Relaxed);
    let began = Instant::now();
    tokio::time::sleep(config.duration).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = began.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    for p in producers {
        p.close().await;
    }
    let latency = hist
        .lock()
        .map(|h| summarize(&h))
        .unwrap_or_else(|_| summarize(&new_histogram()));
    Ok(QueueLoadReport {
        shape: config.shape.clone(),
        duration_ms: config.duration.as_millis() as u64,
        enqueued_per_sec: enqueued.load(Ordering::Relaxed) as f64 / elapsed,
        consumed_per_sec: consumed.load(Ordering::Relaxed) as f64 / elapsed,
        redelivered: redelivered.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
        enqueue_latency: latency,
    })
}
