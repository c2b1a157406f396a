//! The open loop: requests at a fixed total rate, each timed from its intended send time (no coordinated omission).
//!
//! This module owns the schedule and its tally.

use super::*;
use agentwire_sync::LockExt;

/// Tallies of an open-loop stream of requests.
#[derive(Default)]
pub(super) struct OpenTally {
    pub(super) answered: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) late: AtomicU64,
    pub(super) hist: Mutex<Option<Histogram<u64>>>,
}

impl OpenTally {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(OpenTally {
            hist: Mutex::new(Some(stats::new_histogram())),
            ..OpenTally::default()
        })
    }

    pub(super) fn record(&self, us: u64) {
        let mut h = self.hist.lock_or_recover();
        if let Some(h) = h.as_mut() {
            stats::record_us(h, us);
        }
        self.answered.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn histogram(&self) -> Histogram<u64> {
        self.hist
            .lock_or_recover()
            .take()
            .unwrap_or_else(stats::new_histogram)
    }
}

/// Sends requests built by `make` on `schedule`, each in its own task, timing each from its
/// intended send time. Returns the number scheduled.
pub(super) fn spawn_schedule<F, Fut>(
    tasks: &mut JoinSet<()>,
    schedule: OpenLoopSchedule,
    start: Instant,
    tally: Arc<OpenTally>,
    make: F,
) -> u64
where
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let count = schedule.count();
    let mut inner = JoinSet::new();
    tasks.spawn(async move {
        for k in 0..count {
            let Some(due) = schedule.intended(k) else {
                break;
            };
            let intended = start + due;
            tokio::time::sleep_until(intended).await;
            if Instant::now().duration_since(intended) > LATE_SEND {
                tally.late.fetch_add(1, Ordering::Relaxed);
            }
            let fut = make(k);
            let t = tally.clone();
            inner.spawn(async move {
                if fut.await {
                    let us = stats::latency_from_intended_us(due, Instant::now() - start);
                    t.record(us);
                } else {
                    t.errors.fetch_add(1, Ordering::Relaxed);
                }
            });
            // Reap finished requests as we go so the set stays small.
            while inner.try_join_next().is_some() {}
        }
        while inner.join_next().await.is_some() {}
    });
    count
}

/// The open-loop phase over the connected clients.
pub(super) async fn open_loop(
    clients: &[AgentHandle],
    workers: &[String],
    body: &Bytes,
    rate: f64,
    rate_basis: String,
    duration: Duration,
    timeout: Duration,
) -> OpenLoopRecord {
    let start = Instant::now() + Duration::from_millis(20);
    let tally = OpenTally::new();
    let mut tasks = JoinSet::new();
    let mut scheduled = 0;
    let workers: Arc<[String]> = workers.into();
    for (i, client) in clients.iter().enumerate() {
        let Some(schedule) = OpenLoopSchedule::for_client(rate, clients.len(), i, duration) else {
            continue;
        };
        let client = client.clone();
        let workers = workers.clone();
        let body = body.clone();
        let size = body.len();
        scheduled += spawn_schedule(&mut tasks, schedule, start, tally.clone(), move |k| {
            let client = client.clone();
            let to = workers
                .get((i + k as usize) % workers.len().max(1))
                .cloned()
                .unwrap_or_default();
            let body = body.clone();
            async move {
                matches!(client.request(&to, body, timeout).await, Ok(env) if env.body.len() == size)
            }
        });
    }
    join_until(
        &mut tasks,
        start + duration + timeout + Duration::from_secs(1),
    )
    .await;
    let hist = tally.histogram();
    let answered = tally.answered.load(Ordering::Relaxed);
    OpenLoopRecord {
        rate_per_sec: rate,
        rate_basis,
        duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        scheduled,
        answered,
        // Failed, or never finished before the drain deadline.
        errors: scheduled.saturating_sub(answered),
        late_sends: tally.late.load(Ordering::Relaxed),
        latency: stats::summarize(&hist),
        histogram: stats::recorded_pairs(&hist),
    }
}
