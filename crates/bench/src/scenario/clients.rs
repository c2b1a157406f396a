//! The client side's agents: connected concurrently and timed, one thread and runtime for all of them, and the closed loop that keeps `window` requests in flight per agent.
//!
//! This module owns the clients; it must not touch the server side.

use super::*;
use agentwire_sync::LockExt;

#[derive(Default)]
pub(super) struct Counters {
    pub(super) sent: AtomicU64,
    pub(super) answered: AtomicU64,
    pub(super) errors: AtomicU64,
    pub(super) timeouts: AtomicU64,
    pub(super) in_flight: AtomicU64,
    pub(super) samples: Mutex<Vec<String>>,
}

impl Counters {
    pub(super) fn sample(&self, msg: String) {
        let mut s = self.samples.lock_or_recover();
        if s.len() < MAX_ERROR_SAMPLES && !s.contains(&msg) {
            s.push(msg);
        }
    }
}

/// What the closed-loop phase counted.
pub(super) struct ClosedLoop {
    pub(super) sent: u64,
    pub(super) answered: u64,
    pub(super) errors: u64,
    pub(super) timeouts: u64,
    pub(super) abandoned: u64,
    pub(super) histogram: Histogram<u64>,
    pub(super) error_samples: Vec<String>,
}

/// Everything the client side measured.
pub(super) struct ClientOutcome {
    pub(super) hub_url: String,
    pub(super) connect: ConnectRecord,
    pub(super) closed: ClosedLoop,
    pub(super) cpu: Option<CpuWindow>,
    pub(super) open_loop: Option<OpenLoopRecord>,
    pub(super) priority: Option<PriorityRecord>,
}

pub(super) fn client_thread(
    config: CellConfig,
    ready: ServerReady,
    netns: Option<String>,
) -> Result<ClientOutcome> {
    if let Some(ns) = &netns {
        netpath::enter(ns)?;
    }
    // A multi-threaded runtime even with one thread, as with more. (One thread, either kind,
    // slowed the TCP transports over emulated paths: the kernel's BBR paced them lower;
    // notes/hub-cpu.md.)
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.client_threads.max(1))
        .thread_name("bench-clients-rt")
        .enable_all()
        .build()
        .context("building the client-side runtime")?;
    if config.pattern.is_one_way() {
        rt.block_on(super::one_way::one_way_side(&config, &ready))
    } else {
        rt.block_on(client_side(&config, &ready))
    }
}

pub(super) fn client_options(config: &CellConfig, ready: &ServerReady, id: &str) -> AgentOptions {
    let mut o = AgentOptions::new(id, ready.url.clone(), ready.trust.clone());
    o.stream_mapping = config.transport.mapping();
    o.connect_timeout = connect_timeout(config);
    o.zero_rtt = config.transport.kind() == TransportKind::Quic;
    QuicKnobs::of(config).apply_to_agent(&mut o.quic);
    o
}

/// Generous: a thousand handshakes over a 100 ms path on two cores take a while.
pub(super) fn connect_timeout(config: &CellConfig) -> Duration {
    Duration::from_secs(30) + Duration::from_millis(config.network.rtt_ms as u64 * 20)
}

/// Agents connected together: in order, the time until the last one was up, and each one's
/// own time from the common start, shortest first.
pub(super) struct Connected {
    pub(super) agents: Vec<Agent>,
    pub(super) all: Duration,
    pub(super) each: Vec<Duration>,
}

impl Connected {
    /// What connecting them took, as the report records it.
    pub(super) fn record(&self) -> ConnectRecord {
        let n = self.agents.len();
        ConnectRecord {
            agents: n,
            all_connected_ms: self.all.as_secs_f64() * 1000.0,
            p50_ms: self.quantile_ms(0.5),
            p99_ms: self.quantile_ms(0.99),
            handshakes_per_sec: per_sec(n, self.all),
            resumed: None,
        }
    }

    /// The `q` quantile (0..=1) of the agents' own connect times, milliseconds (exact, not
    /// bucketed as a latency histogram would: it is compared with `all`).
    pub(super) fn quantile_ms(&self, q: f64) -> f64 {
        let each = &self.each;
        let at = ((each.len() as f64 - 1.0) * q).round() as usize;
        each.get(at).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    }
}

/// A connector per id, and all of them connected together ([`connect_clients`]).
pub(super) async fn connect_all(
    config: &CellConfig,
    ready: &ServerReady,
    ids: &[String],
) -> Result<(Vec<Arc<Connector>>, Connected)> {
    let connectors = ids
        .iter()
        .map(|id| Connector::new(&client_options(config, ready, id)).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("client options: {e}"))?;
    let connected = connect_clients(config, ready, &connectors, ids).await?;
    Ok((connectors, connected))
}

/// Connects `ids` concurrently through their connectors; every agent must land on the
/// transport under test.
pub(super) async fn connect_clients(
    config: &CellConfig,
    ready: &ServerReady,
    connectors: &[Arc<Connector>],
    ids: &[String],
) -> Result<Connected> {
    let start = Instant::now();
    let mut connecting = JoinSet::new();
    for (i, (connector, id)) in connectors.iter().zip(ids).enumerate() {
        let o = client_options(config, ready, id);
        let c = connector.clone();
        connecting.spawn(async move {
            let result = c.connect(&o).await;
            (i, result.map(|agent| (agent, start.elapsed())))
        });
    }
    let mut each = Vec::with_capacity(ids.len());
    let mut agents: Vec<Option<Agent>> = (0..ids.len()).map(|_| None).collect();
    let mut first_error = None;
    let expected = config.transport.kind();
    let deadline = start + connect_timeout(config) + Duration::from_secs(5);
    while let Ok(Some(joined)) = tokio::time::timeout_at(deadline, connecting.join_next()).await {
        match joined {
            Ok((i, Ok((agent, took)))) => {
                each.push(took);
                if agent.transport() != expected {
                    first_error.get_or_insert_with(|| {
                        anyhow!(
                            "{} connected over {}, expected {expected}",
                            ids.get(i).map_or("?", |s| s.as_str()),
                            agent.transport()
                        )
                    });
                }
                if let Some(slot) = agents.get_mut(i) {
                    *slot = Some(agent);
                }
            }
            Ok((i, Err(e))) => {
                first_error.get_or_insert_with(|| {
                    anyhow!("connecting {}: {e}", ids.get(i).map_or("?", |s| s.as_str()))
                });
            }
            Err(e) => {
                first_error.get_or_insert_with(|| anyhow!("connect task failed: {e}"));
            }
        }
    }
    connecting.abort_all();
    let elapsed = start.elapsed();
    let connected: Vec<Agent> = agents.into_iter().flatten().collect();
    if first_error.is_some() || connected.len() != ids.len() {
        close_all(connected.iter().map(|a| a.handle().clone()).collect()).await;
        return Err(first_error.unwrap_or_else(|| {
            anyhow!(
                "only {} of {} agents connected in time",
                connected.len(),
                ids.len()
            )
        }));
    }
    each.sort_unstable();
    Ok(Connected {
        agents: connected,
        all: elapsed,
        each,
    })
}

pub(super) fn per_sec(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

pub(super) async fn client_side(config: &CellConfig, ready: &ServerReady) -> Result<ClientOutcome> {
    let ids: Vec<String> = (0..config.agents).map(|i| format!("client-{i}")).collect();
    let worker_ids: Vec<String> = (0..config.workers).map(|i| format!("worker-{i}")).collect();
    let (connectors, connected) = connect_all(config, ready, &ids).await?;
    let mut connect = connected.record();
    let agents = connected.agents;

    // Clients' inboxes are drained so stray messages cannot stall them.
    let mut background = JoinSet::new();
    let mut clients = Vec::with_capacity(agents.len());
    for agent in agents {
        let (handle, mut inbox) = agent.split();
        background.spawn(async move { while inbox.recv().await.is_some() {} });
        clients.push(handle);
    }

    let (measure_start, measure_end) = measured_window(config);
    let sampler = sample_window(ready, measure_start, measure_end);
    let closed = drive_load(config, &clients, &worker_ids, measure_start, measure_end).await;
    let cpu = sampler.await.ok();

    let body = Bytes::from(vec![0xA5u8; config.size]);
    let timeout = Duration::from_millis(config.request_timeout_ms.max(1));
    let open_loop = if config.open_loop_ms > 0 {
        let secs = (config.duration_ms.max(1)) as f64 / 1000.0;
        let closed_rate = closed.answered as f64 / secs;
        let rate = (closed_rate * 0.5).max(1.0);
        Some(
            open_loop(
                &clients,
                &worker_ids,
                &body,
                rate,
                format!("50% of this run's closed-loop rate ({closed_rate:.0}/s)"),
                Duration::from_millis(config.open_loop_ms),
                timeout,
            )
            .await,
        )
    } else {
        None
    };

    let priority = if config.priority_probe_ms > 0 {
        let worker = worker_ids.first().cloned().unwrap_or_default();
        Some(
            priority_probe(
                config,
                ready,
                &worker,
                Duration::from_millis(config.priority_probe_ms),
                timeout,
            )
            .await?,
        )
    } else {
        None
    };

    close_all(clients).await;
    background.abort_all();

    if config.transport.kind() == TransportKind::Quic {
        // Every connector now holds a session ticket: reconnect all clients with 0-RTT.
        let again: Vec<String> = ids.iter().map(|id| format!("{id}-0rtt")).collect();
        let Connected {
            agents, all: took, ..
        } = connect_clients(config, ready, &connectors, &again).await?;
        let (accepted, rejected) = agents.iter().fold((0, 0), |(a, r), agent| {
            let s = agent.stats();
            (
                a + u64::from(s.zero_rtt_used && s.zero_rtt_rejected == 0),
                r + u64::from(s.zero_rtt_used && s.zero_rtt_rejected > 0),
            )
        });
        connect.resumed = Some(ResumedConnect {
            agents: agents.len(),
            all_connected_ms: took.as_secs_f64() * 1000.0,
            handshakes_per_sec: per_sec(agents.len(), took),
            zero_rtt_accepted: accepted,
            zero_rtt_rejected: rejected,
        });
        close_all(agents.iter().map(|a| a.handle().clone()).collect()).await;
    }

    Ok(ClientOutcome {
        hub_url: ready.url.clone(),
        connect,
        closed,
        cpu,
        open_loop,
        priority,
    })
}

/// The measured window of a cell's load phase: after the warm-up from now, for its duration.
pub(super) fn measured_window(config: &CellConfig) -> (Instant, Instant) {
    let measure_start = Instant::now() + Duration::from_millis(config.warmup_ms);
    (
        measure_start,
        measure_start + Duration::from_millis(config.duration_ms),
    )
}

/// Reads the CPU of hub, agents and emulator at both ends of the measured window, and the
/// peak memory and the hub's socket memory during it.
pub(super) fn sample_window(
    ready: &ServerReady,
    measure_start: Instant,
    measure_end: Instant,
) -> tokio::task::JoinHandle<CpuWindow> {
    let hub_pid = ready.hub_pid;
    let tables = hub_socket_tables(&ready.url);
    let sockets = tokio::spawn(sample_socket_memory(hub_pid, tables, measure_end));
    tokio::spawn(async move {
        tokio::time::sleep_until(measure_start).await;
        let a = CpuSnapshot::take(hub_pid);
        tokio::time::sleep_until(measure_end).await;
        let mut w = CpuWindow::between(a, CpuSnapshot::take(hub_pid));
        // Peak memory with every agent connected and the load running, read before the later
        // phases (the probe's bulk, the 0-RTT reconnects) can raise it.
        w.hub_peak_rss = hub_pid.and_then(resources::peak_rss_bytes);
        w.agents_peak_rss = resources::peak_rss_bytes(std::process::id());
        w.hub_sockets = sockets.await.ok().flatten();
        w
    })
}

/// The closed-loop load: warm-up, measured window, drain.
pub(super) async fn drive_load(
    config: &CellConfig,
    clients: &[AgentHandle],
    worker_ids: &[String],
    measure_start: Instant,
    measure_end: Instant,
) -> ClosedLoop {
    let counters = Arc::new(Counters::default());
    let body = Bytes::from(vec![0xA5u8; config.size]);
    let timeout = Duration::from_millis(config.request_timeout_ms.max(1));
    let workers: Arc<[String]> = worker_ids.into();

    let histograms: Vec<Arc<Mutex<Histogram<u64>>>> = clients
        .iter()
        .map(|_| Arc::new(Mutex::new(stats::new_histogram())))
        .collect();
    let mut slots = JoinSet::new();
    let paced_from = Instant::now();
    let slot_count = clients.len() * config.window;
    for (ci, (client, hist)) in clients.iter().zip(&histograms).enumerate() {
        for slot in 0..config.window {
            let index = ci * config.window + slot;
            let slot_state = Slot {
                client: client.clone(),
                workers: workers.clone(),
                next_worker: index,
                body: body.clone(),
                size: config.size,
                timeout,
                measure_start,
                measure_end,
                counters: counters.clone(),
                hist: hist.clone(),
                pace: config
                    .rate
                    .and_then(|rate| Pace::new(rate, slot_count, index, paced_from)),
            };
            slots.spawn(slot_state.run());
        }
    }
    // Each request ends within `timeout`, so every slot ends within `timeout` of the window's
    // end; the extra second covers scheduling. Anything still running then is abandoned.
    let drain_deadline = measure_end + timeout + Duration::from_secs(1);
    join_until(&mut slots, drain_deadline).await;

    let abandoned = counters.in_flight.load(Ordering::Relaxed);
    let mut merged = stats::new_histogram();
    for h in &histograms {
        let h = h.lock_or_recover();
        // Same bounds on both sides, so adding cannot fail.
        let _ = merged.add(&*h);
    }
    let error_samples = counters.samples.lock_or_recover().clone();
    ClosedLoop {
        sent: counters.sent.load(Ordering::Relaxed),
        answered: counters.answered.load(Ordering::Relaxed),
        errors: counters.errors.load(Ordering::Relaxed) + abandoned,
        timeouts: counters.timeouts.load(Ordering::Relaxed),
        abandoned,
        histogram: merged,
        error_samples,
    }
}

/// Waits for every task of `set` until `deadline`, then aborts the rest and waits (briefly)
/// until they really stopped, so no counter moves while being read.
pub(super) async fn join_until<T: 'static>(set: &mut JoinSet<T>, deadline: Instant) {
    let _ =
        tokio::time::timeout_at(deadline, async { while set.join_next().await.is_some() {} }).await;
    set.abort_all();
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while set.join_next().await.is_some() {}
    })
    .await;
}
