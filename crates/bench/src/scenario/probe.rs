//! The priority probe: small requests of every priority class at a fixed rate on a connection that bulk low-priority requests share.
//!
//! This module owns the probe's pacing and slots.

use super::*;
use agentwire_sync::LockExt;

/// How long a priority-probe bulk request body is, bytes.
pub const PROBE_BULK_SIZE: usize = 256 * 1024;

/// Bulk requests the probe keeps in flight.
pub const PROBE_BULK_WINDOW: usize = 4;

/// Body size of the probe's small requests, bytes.
pub const PROBE_SMALL_SIZE: usize = 64;

/// Small probe requests per second and priority class.
pub const PROBE_RATE_PER_CLASS: f64 = 20.0;

/// A request sent more than this after its intended time counts as a late send (Tokio's
/// timer has millisecond granularity, so up to about 1 ms late is normal).
pub(super) const LATE_SEND: Duration = Duration::from_millis(5);

/// Fraction of its total time a side must be busy before the bench calls it a bottleneck.
pub(super) const BUSY: f64 = 0.85;

/// The priority / head-of-line probe on one extra client.
pub(super) async fn priority_probe(
    config: &CellConfig,
    ready: &ServerReady,
    worker: &str,
    duration: Duration,
    timeout: Duration,
) -> Result<PriorityRecord> {
    let opts = client_options(config, ready, "probe");
    let agent = Agent::connect(opts)
        .await
        .map_err(|e| anyhow!("connecting the priority probe: {e}"))?;
    let (probe, mut inbox) = agent.split();
    let drain = tokio::spawn(async move { while inbox.recv().await.is_some() {} });
    let start = Instant::now() + Duration::from_millis(20);
    let end = start + duration;

    // Bulk: low-priority requests kept in flight for the whole probe.
    let bulk_answered = Arc::new(AtomicU64::new(0));
    let mut bulk = JoinSet::new();
    let bulk_body = Bytes::from(vec![0x5Au8; PROBE_BULK_SIZE]);
    for _ in 0..PROBE_BULK_WINDOW {
        let (probe, body, to, done) = (
            probe.clone(),
            bulk_body.clone(),
            worker.to_owned(),
            bulk_answered.clone(),
        );
        bulk.spawn(async move {
            while Instant::now() < end {
                let env = probe
                    .envelope(Destination::agent(&to), Kind::Request)
                    .with_priority(Priority::Low)
                    .with_body(body.clone());
                match probe.request_envelope(env, timeout).await {
                    Ok(_) => {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(AgentError::Disconnected(_)) => return,
                    Err(_) => {}
                }
            }
        });
    }

    // Small requests of every class at a fixed rate each, timed from intended send time.
    let mut tasks = JoinSet::new();
    let mut per_class = Vec::new();
    let small = Bytes::from(vec![0x11u8; PROBE_SMALL_SIZE]);
    for priority in Priority::ALL {
        let tally = OpenTally::new();
        let Some(schedule) = OpenLoopSchedule::for_client(PROBE_RATE_PER_CLASS, 1, 0, duration)
        else {
            continue;
        };
        let (probe, body, to) = (probe.clone(), small.clone(), worker.to_owned());
        let sent = spawn_schedule(&mut tasks, schedule, start, tally.clone(), move |_| {
            let env = probe
                .envelope(Destination::agent(&to), Kind::Request)
                .with_priority(priority)
                .with_body(body.clone());
            let probe = probe.clone();
            async move {
                matches!(probe.request_envelope(env, timeout).await,
                    Ok(e) if e.body.len() == PROBE_SMALL_SIZE)
            }
        });
        per_class.push((priority, sent, tally));
    }
    join_until(&mut tasks, end + timeout + Duration::from_secs(1)).await;
    join_until(&mut bulk, end + timeout + Duration::from_secs(1)).await;
    probe.close().await;
    drain.abort();
    let classes = per_class
        .into_iter()
        .map(|(priority, sent, tally)| {
            let hist = tally.histogram();
            ClassLatency {
                class: priority.name(),
                sent,
                answered: tally.answered.load(Ordering::Relaxed),
                latency: stats::summarize(&hist),
            }
        })
        .collect();
    Ok(PriorityRecord {
        bulk_size: PROBE_BULK_SIZE,
        bulk_window: PROBE_BULK_WINDOW,
        bulk_answered: bulk_answered.load(Ordering::Relaxed),
        probe_size: PROBE_SMALL_SIZE,
        probe_rate_per_class: PROBE_RATE_PER_CLASS,
        classes,
    })
}

/// One in-flight slot of one client: issues a request, waits for it, repeats.
pub(super) struct Slot {
    pub(super) client: AgentHandle,
    pub(super) workers: Arc<[String]>,
    pub(super) next_worker: usize,
    pub(super) body: Bytes,
    pub(super) size: usize,
    pub(super) timeout: Duration,
    pub(super) measure_start: Instant,
    pub(super) measure_end: Instant,
    pub(super) counters: Arc<Counters>,
    pub(super) hist: Arc<Mutex<Histogram<u64>>>,
    /// `--rate`: when this slot may send next, and its interval.
    pub(super) pace: Option<Pace>,
}

/// One slot's share of a rate cap ([`CellConfig::rate`]).
pub(super) struct Pace {
    pub(super) next: Instant,
    pub(super) interval: Duration,
}

impl Pace {
    /// Slot `index` of `slots` under a cap of `rate` requests per second in all, from `start`;
    /// `None` (no cap) for a rate that is not a positive number or an interval too long to
    /// represent ([`BenchConfig::validate`](crate::BenchConfig::validate) refuses those).
    pub(super) fn new(rate: f64, slots: usize, index: usize, start: Instant) -> Option<Pace> {
        let interval = Duration::try_from_secs_f64(slots as f64 / rate)
            .ok()
            .filter(|i| rate > 0.0 && !i.is_zero())?;
        let offset = interval.mul_f64(index as f64 / slots.max(1) as f64);
        Some(Pace {
            next: start.checked_add(offset)?,
            interval,
        })
    }

    /// Waits for this slot's turn; the next turn is one interval after this one, or after
    /// now if this one came late.
    pub(super) async fn turn(&mut self) {
        tokio::time::sleep_until(self.next).await;
        self.next = self.next.max(Instant::now()) + self.interval;
    }
}

impl Slot {
    pub(super) async fn run(mut self) {
        let c = &self.counters;
        for _ in 0..MAX_REQUESTS_PER_SLOT {
            if let Some(pace) = &mut self.pace {
                // A turn after the window's end is never waited for.
                if pace.next >= self.measure_end {
                    return;
                }
                pace.turn().await;
            }
            let start = Instant::now();
            if start >= self.measure_end || self.workers.is_empty() {
                return;
            }
            let measured = start >= self.measure_start;
            let to = &self.workers[self.next_worker % self.workers.len()];
            self.next_worker = self.next_worker.wrapping_add(1);
            if measured {
                c.sent.fetch_add(1, Ordering::Relaxed);
                c.in_flight.fetch_add(1, Ordering::Relaxed);
            }
            let answer = self
                .client
                .request(to, self.body.clone(), self.timeout)
                .await;
            let rtt_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
            let disconnected = matches!(answer, Err(AgentError::Disconnected(_)));
            if measured {
                match answer {
                    Ok(env) if env.body.len() == self.size => {
                        let mut h = self.hist.lock_or_recover();
                        stats::record_us(&mut h, rtt_us);
                        drop(h);
                        c.answered.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(env) => {
                        c.errors.fetch_add(1, Ordering::Relaxed);
                        c.sample(format!(
                            "response body of {} bytes, expected {}",
                            env.body.len(),
                            self.size
                        ));
                    }
                    Err(e) => {
                        if matches!(e, AgentError::Timeout(_)) {
                            c.timeouts.fetch_add(1, Ordering::Relaxed);
                        }
                        c.errors.fetch_add(1, Ordering::Relaxed);
                        c.sample(e.to_string());
                    }
                }
                c.in_flight.fetch_sub(1, Ordering::Relaxed);
            }
            if disconnected {
                // This client's connection is gone; further requests would fail at once.
                return;
            }
        }
    }
}
