//! The one-way patterns: fan-out (one publisher, `agents` subscribers of a topic), gather
//! (`agents` senders, one aggregator), stream (`agents` sender → receiver pairs) and queue
//! (`agents` producers enqueueing to one work queue, `agents` consumers taking its tasks in
//! turn, each acking every task).
//!
//! Senders send events; receivers count what is delivered. With no answer to wait for, each
//! sender keeps at most `window` messages its *pacing receiver* (the first subscriber, the
//! aggregator, its own receiver) has not yet received: a closed loop driven by deliveries,
//! which no lost message can stall (the count moves on with the next delivery). Every body
//! starts with the sender's index, the message's sequence number and its send time on the
//! client side's one clock, so a delivery's latency is read where it arrives. Messages sent
//! in the measured window count: each is expected once at every receiver it is for, and a
//! delivery still missing after the drain is an error.
//!
//! This module owns the one-way load on the client side; it must not touch the server side.

use super::*;
use agentwire::Inbox;
use agentwire_sync::LockExt;
use std::sync::atomic::AtomicBool;
use tokio::sync::Notify;

/// Bytes at the front of every body: sender index (u32), sequence (u64), send time (u64,
/// nanoseconds since the cell's clock started), big-endian.
pub const HEADER: usize = 20;

/// The topic of the fan-out pattern.
const TOPIC: &str = "bench.fanout";

/// The work queue of the queue pattern.
const QUEUE: &str = "bench.queue";

/// The sender index of the probes that check every subscription is in place.
const PROBE: u32 = u32::MAX;

/// Longest wait for a drained delivery once none has come for a while.
const DRAIN_QUIET: Duration = Duration::from_secs(1);

/// Who sends to whom in a one-way cell.
struct Plan {
    senders: Vec<String>,
    receivers: Vec<String>,
    /// Per sender: its destination and the receiver whose deliveries pace it (`None`: any;
    /// a queue's tasks go to whichever consumer's turn it is).
    routes: Vec<(Destination, Option<usize>)>,
    /// Receivers each message is for.
    fanout: u64,
}

fn plan(config: &CellConfig) -> Result<Plan> {
    let n = config.agents;
    Ok(match config.pattern {
        Pattern::Fanout => Plan {
            senders: vec!["publisher-0".into()],
            receivers: (0..n).map(|i| format!("subscriber-{i}")).collect(),
            routes: vec![(Destination::topic(TOPIC), Some(0))],
            fanout: n as u64,
        },
        Pattern::Gather => Plan {
            senders: (0..n).map(|i| format!("sender-{i}")).collect(),
            receivers: vec!["aggregator".into()],
            routes: (0..n)
                .map(|_| (Destination::agent("aggregator"), Some(0)))
                .collect(),
            fanout: 1,
        },
        Pattern::Stream => Plan {
            senders: (0..n).map(|i| format!("sender-{i}")).collect(),
            receivers: (0..n).map(|i| format!("receiver-{i}")).collect(),
            routes: (0..n)
                .map(|i| (Destination::agent(format!("receiver-{i}")), Some(i)))
                .collect(),
            fanout: 1,
        },
        Pattern::Queue => Plan {
            senders: (0..n).map(|i| format!("producer-{i}")).collect(),
            receivers: (0..n).map(|i| format!("consumer-{i}")).collect(),
            routes: (0..n).map(|_| (Destination::queue(QUEUE), None)).collect(),
            fanout: 1,
        },
        other => bail!("{other} is not a one-way pattern"),
    })
}

/// What senders and receivers share.
struct Shared {
    clock: Instant,
    window: u64,
    /// The measured window, in nanoseconds of `clock` (set once the load starts; until then
    /// nothing is in it).
    measure_start_ns: AtomicU64,
    measure_end_ns: AtomicU64,
    /// Per sender: deliveries its pacing receiver has counted.
    progress: Vec<AtomicU64>,
    /// Per sender: woken at each of those deliveries.
    wake: Vec<Notify>,
    /// Per receiver: whether a probe has reached it (fan-out's subscriptions are in place).
    probed: Vec<AtomicBool>,
    /// Messages sent in the measured window (each expected at `fanout` receivers).
    sent: AtomicU64,
    /// Deliveries of those messages.
    delivered: AtomicU64,
    counters: Counters,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        ns_between(self.clock, Instant::now())
    }

    fn in_window(&self, ns: u64) -> bool {
        ns >= self.measure_start_ns.load(Ordering::Relaxed)
            && ns < self.measure_end_ns.load(Ordering::Relaxed)
    }
}

fn ns_between(clock: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(clock).as_nanos()).unwrap_or(u64::MAX)
}

fn body(size: usize, sender: u32, seq: u64, sent_ns: u64) -> Bytes {
    let mut b = vec![0xA5u8; size.max(HEADER)];
    b[..4].copy_from_slice(&sender.to_be_bytes());
    b[4..12].copy_from_slice(&seq.to_be_bytes());
    b[12..20].copy_from_slice(&sent_ns.to_be_bytes());
    Bytes::from(b)
}

/// The sender index and send time at the front of a body.
fn header(body: &[u8]) -> Option<(u32, u64)> {
    let h = body.get(..HEADER)?;
    Some((
        u32::from_be_bytes(h[..4].try_into().ok()?),
        u64::from_be_bytes(h[12..20].try_into().ok()?),
    ))
}

/// The client side of a one-way cell: connect, (fan-out) check the subscriptions, run the
/// load, drain, count.
pub(super) async fn one_way_side(
    config: &CellConfig,
    ready: &ServerReady,
) -> Result<ClientOutcome> {
    let plan = plan(config)?;
    let ids: Vec<String> = plan
        .senders
        .iter()
        .chain(&plan.receivers)
        .cloned()
        .collect();
    let (_connectors, connected) = connect_all(config, ready, &ids).await?;
    let connect = connected.record();
    let mut agents = connected.agents.into_iter().map(Agent::split);
    let senders: Vec<(AgentHandle, Inbox)> = agents.by_ref().take(plan.senders.len()).collect();
    let receivers: Vec<(AgentHandle, Inbox)> = agents.collect();
    let all: Vec<AgentHandle> = senders
        .iter()
        .chain(&receivers)
        .map(|(h, _)| h.clone())
        .collect();
    let outcome = run_load(config, ready, &plan, senders, receivers).await;
    close_all(all).await;
    let closed = outcome?;
    Ok(ClientOutcome {
        hub_url: ready.url.clone(),
        connect,
        closed: closed.0,
        cpu: closed.1,
        open_loop: None,
        priority: None,
    })
}

async fn run_load(
    config: &CellConfig,
    ready: &ServerReady,
    plan: &Plan,
    senders: Vec<(AgentHandle, Inbox)>,
    receivers: Vec<(AgentHandle, Inbox)>,
) -> Result<(ClosedLoop, Option<CpuWindow>)> {
    if config.pattern == Pattern::Fanout {
        for (handle, _) in &receivers {
            handle
                .subscribe(TOPIC)
                .await
                .map_err(|e| anyhow!("subscribing {}: {e}", handle.id()))?;
        }
    }
    if config.pattern == Pattern::Queue {
        // Each consumer holds at most a window's worth of tasks.
        let credit = u32::try_from(config.window).unwrap_or(u32::MAX);
        for (handle, _) in &receivers {
            handle
                .consume(QUEUE, credit)
                .await
                .map_err(|e| anyhow!("consuming as {}: {e}", handle.id()))?;
        }
    }
    let shared = Arc::new(Shared {
        clock: Instant::now(),
        window: config.window as u64,
        measure_start_ns: AtomicU64::new(u64::MAX),
        measure_end_ns: AtomicU64::new(0),
        progress: plan.senders.iter().map(|_| AtomicU64::new(0)).collect(),
        wake: plan.senders.iter().map(|_| Notify::new()).collect(),
        probed: receivers.iter().map(|_| AtomicBool::new(false)).collect(),
        sent: AtomicU64::new(0),
        delivered: AtomicU64::new(0),
        counters: Counters::default(),
    });
    let histograms: Vec<Arc<Mutex<Histogram<u64>>>> = receivers
        .iter()
        .map(|_| Arc::new(Mutex::new(stats::new_histogram())))
        .collect();
    // Per sender: the receiver whose deliveries pace it.
    let pacers: Arc<[Option<usize>]> = plan.routes.iter().map(|(_, r)| *r).collect();
    let mut tasks = JoinSet::new();
    for (r, ((handle, inbox), hist)) in receivers.into_iter().zip(&histograms).enumerate() {
        tasks.spawn(receive(
            handle,
            inbox,
            r,
            pacers.clone(),
            shared.clone(),
            hist.clone(),
        ));
    }
    // What the hub reports to senders (a full queue, an unknown agent) says why a delivery
    // is missing.
    let mut handles = Vec::with_capacity(senders.len());
    for (handle, inbox) in senders {
        handles.push(handle);
        tasks.spawn(sample_errors(inbox, shared.clone()));
    }
    if config.pattern == Pattern::Fanout {
        probe_subscriptions(config, &handles[0], &shared).await?;
    }

    let (measure_start, measure_end) = measured_window(config);
    shared
        .measure_start_ns
        .store(ns_between(shared.clock, measure_start), Ordering::Relaxed);
    shared
        .measure_end_ns
        .store(ns_between(shared.clock, measure_end), Ordering::Relaxed);
    let sampler = sample_window(ready, measure_start, measure_end);
    let timeout = Duration::from_millis(config.request_timeout_ms.max(1));
    let mut sending = JoinSet::new();
    for (s, handle) in handles.into_iter().enumerate() {
        let (to, _) = plan.routes[s].clone();
        sending.spawn(send(
            handle,
            s,
            to,
            config.size,
            timeout,
            measure_end,
            shared.clone(),
        ));
    }
    join_until(&mut sending, measure_end + timeout + Duration::from_secs(1)).await;
    let cpu = sampler.await.ok();

    // Drain: every message sent in the window is expected at its receivers; wait until all
    // came, or none has come for a while, or the timeout.
    let expected = shared.sent.load(Ordering::Relaxed) * plan.fanout;
    let drain_end = Instant::now() + timeout;
    let mut last = shared.delivered.load(Ordering::Relaxed);
    let mut quiet_since = Instant::now();
    while shared.delivered.load(Ordering::Relaxed) < expected && Instant::now() < drain_end {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = shared.delivered.load(Ordering::Relaxed);
        if now != last {
            last = now;
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() > DRAIN_QUIET {
            break;
        }
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}

    let delivered = shared.delivered.load(Ordering::Relaxed).min(expected);
    let missing = expected - delivered;
    if missing > 0 {
        shared.counters.sample(format!(
            "{missing} of {expected} deliveries had not arrived when the drain ended"
        ));
    }
    let mut merged = stats::new_histogram();
    for h in &histograms {
        let _ = merged.add(&*h.lock_or_recover());
    }
    let c = &shared.counters;
    let error_samples = c.samples.lock_or_recover().clone();
    Ok((
        ClosedLoop {
            sent: expected,
            answered: delivered,
            errors: missing,
            timeouts: c.timeouts.load(Ordering::Relaxed),
            abandoned: 0,
            histogram: merged,
            error_samples,
        },
        cpu,
    ))
}

/// Publishes probes until every subscriber has had one (at most 10 s).
async fn probe_subscriptions(
    config: &CellConfig,
    publisher: &AgentHandle,
    shared: &Shared,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !shared.probed.iter().all(|p| p.load(Ordering::Relaxed)) {
        if Instant::now() > deadline {
            bail!("the subscriptions were not all in place after 10 s");
        }
        publisher
            .publish(TOPIC, Kind::Event, body(config.size, PROBE, 0, 0))
            .await
            .map_err(|e| anyhow!("probing the subscriptions: {e}"))?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// One sender: a message whenever fewer than `window` of its messages are undelivered to its
/// pacing receiver, until the window's end.
async fn send(
    handle: AgentHandle,
    index: usize,
    to: Destination,
    size: usize,
    timeout: Duration,
    end: Instant,
    shared: Arc<Shared>,
) {
    let sender = u32::try_from(index).unwrap_or(PROBE - 1);
    let mut seq = 0u64;
    while Instant::now() < end && seq < MAX_REQUESTS_PER_SLOT {
        while seq >= shared.progress[index].load(Ordering::Acquire) + shared.window {
            let woken = shared.wake[index].notified();
            if seq < shared.progress[index].load(Ordering::Acquire) + shared.window {
                break;
            }
            if tokio::time::timeout(timeout, woken).await.is_err() {
                shared.counters.timeouts.fetch_add(1, Ordering::Relaxed);
                shared.counters.sample(format!(
                    "{}: no delivery of its messages for {timeout:?}",
                    handle.id()
                ));
                return;
            }
            if Instant::now() >= end {
                return;
            }
        }
        let sent_ns = shared.now_ns();
        let env = handle
            .envelope(to.clone(), Kind::Event)
            .with_body(body(size, sender, seq, sent_ns));
        let result = handle.send_envelope(env).await;
        // A message that could not be sent is still one the window expected: it counts as
        // missing at every receiver it was for.
        if shared.in_window(sent_ns) {
            shared.sent.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = result {
            shared.counters.sample(format!("{}: {e}", handle.id()));
            return;
        }
        seq += 1;
    }
}

/// One receiver: counts deliveries of messages sent in the window and their latency, and
/// moves on the senders it paces. A queue's consumer acks every task; a redelivered task (its
/// ack lost, or its ack wait over) is not counted again.
async fn receive(
    handle: AgentHandle,
    mut inbox: Inbox,
    index: usize,
    pacers: Arc<[Option<usize>]>,
    shared: Arc<Shared>,
    hist: Arc<Mutex<Histogram<u64>>>,
) {
    while let Some(msg) = inbox.recv().await {
        if let Some(task) = agentwire::agent_queues::QueueTask::from_envelope(&msg.envelope) {
            if handle.ack(task.task).await.is_err() || task.attempt > 1 {
                continue;
            }
        }
        let Some((sender, sent_ns)) = header(&msg.envelope.body) else {
            continue;
        };
        if sender == PROBE {
            shared.probed[index].store(true, Ordering::Relaxed);
            continue;
        }
        let s = sender as usize;
        if pacers.get(s).is_some_and(|p| p.is_none_or(|p| p == index)) {
            shared.progress[s].fetch_add(1, Ordering::Release);
            shared.wake[s].notify_one();
        }
        if shared.in_window(sent_ns) {
            let us = shared.now_ns().saturating_sub(sent_ns) / 1000;
            stats::record_us(&mut hist.lock_or_recover(), us);
            shared.delivered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A sender's inbox: the hub's error reports, kept as samples (the deliveries they stand for
/// are counted as missing).
async fn sample_errors(mut inbox: Inbox, shared: Arc<Shared>) {
    while let Some(msg) = inbox.recv().await {
        if msg.envelope.kind == Kind::Error {
            let code = msg
                .envelope
                .headers
                .get("code")
                .cloned()
                .unwrap_or_default();
            shared
                .counters
                .sample(format!("the hub reported {code} to {}", msg.envelope.to));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_carries_its_sender_and_send_time() {
        let b = body(64, 7, 9, 123_456);
        assert_eq!(b.len(), 64);
        assert_eq!(header(&b), Some((7, 123_456)));
        assert_eq!(body(4, 1, 2, 3).len(), HEADER);
        assert_eq!(header(&b[..HEADER - 1]), None);
    }
}
