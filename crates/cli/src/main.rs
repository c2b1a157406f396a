//! The `agentwire` command: parses flags and calls the library crates, nothing more.

mod agent_protocol;
mod args;
mod netsim;
mod reload;

use std::process::ExitCode;
use std::time::Duration;

use agentwire::hub::{Hub, HubConfig};
use agentwire::metrics::HubMetrics;
use agentwire::tls::{self, HubIdentity};
use agentwire::{Agent, AgentHandle, Destination, HubUrl, Inbox, Kind};
use anyhow::{bail, Context, Result};
use clap::Parser;

use args::{
    AgentArgs, BenchArgs, CertAgentArgs, CertArgs, CertCommand, Cli, Command, HubArgs, LoadArgs,
    NetsimCommand, QueueArgs, QueueCommand, RelayArgs, ReloadArgs, ScorecardArgs, SendArgs,
    ServeArgs, TokenArgs,
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    #[cfg(target_os = "linux")]
    own_network_if_needed(&cli.command);
    let result = match cli.command {
        // These two build their own runtimes (thread counts are part of what they measure).
        Command::Serve(a) => serve(a),
        Command::Load(a) => load(a),
        Command::Scorecard(a) => scorecard(a),
        command => run_async(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", agentwire::error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Without root, `bench` (with emulated networks on the bridge stage) and `netsim check` (packet
/// mode on the bridge stage) become root of a user namespace of their own (user, mount and
/// network), as rootless containers do, where the bridge stage's namespaces can be made. Done
/// first, while the process still has one thread; where it fails, the emulated networks are
/// skipped with the reason, as before.
#[cfg(target_os = "linux")]
fn own_network_if_needed(command: &Command) {
    use agentwire_netsim::{userns, StageKind};
    if userns::is_root() {
        return;
    }
    let wants = match command {
        Command::Bench(a) => {
            a.netsim_stage == StageKind::Bridge
                && a.config()
                    .is_ok_and(|c| c.cells().iter().any(|c| !c.network.is_loopback()))
        }
        Command::Netsim(NetsimCommand::Check(a)) => {
            a.stage == StageKind::Bridge && a.mode != args::CheckMode::Socket
        }
        _ => false,
    };
    if !wants {
        return;
    }
    match userns::enter() {
        Ok(()) => eprintln!(
            "not root: running in a user namespace of our own (user, mount and network), where \
             the emulated networks can be made"
        ),
        Err(e) => eprintln!("not root, and {e}"),
    }
}

/// Runs the subcommands that share one multi-threaded runtime.
fn run_async(command: Command) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        match command {
            Command::Cert(a) => cert(a),
            Command::Hub(a) => hub(*a).await,
            Command::Agent(a) => agent(a).await,
            Command::Send(a) => send(a).await,
            Command::Bench(a) => bench(a).await,
            Command::Netsim(NetsimCommand::Relay(a)) => netsim_relay(a).await,
            Command::Netsim(NetsimCommand::Up(a)) => netsim::up(a).await,
            Command::Netsim(NetsimCommand::Check(a)) => netsim::check(a).await,
            Command::AgentProtocol(c) => agent_protocol::run(c).await,
            Command::Queue(a) => queue(a).await,
            Command::Reload(a) => reload_hub(a).await,
            Command::Token(a) => token(a),
            Command::Serve(_) | Command::Load(_) | Command::Scorecard(_) => {
                bail!("serve, load and scorecard start their own runtimes; they are run from main")
            }
        }
    })
}

/// `agentwire serve`: starts the file server (see `agentwire_load::serve`) and waits for
/// Ctrl-C or SIGTERM.
fn serve(a: ServeArgs) -> Result<()> {
    let server = agentwire_load::serve::start(a.config())?;
    println!(
        "serving {} on https://{} (h3 on UDP, h2 and http/1.1 on TCP)",
        a.root.display(),
        server.local_addr()
    );
    let waiter = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the signal runtime")?;
    waiter.block_on(wait_for_signal());
    server.stop();
    Ok(())
}

/// `agentwire load`: runs the load generator (see `agentwire_load::load`) and prints its
/// report; fails when no request succeeded.
fn load(a: LoadArgs) -> Result<()> {
    // With --insecure, building the TLS configuration warns loudly on stderr.
    let mut config = a.config()?;
    let report = if a.no_progress || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        agentwire_load::load::run(&config)?
    } else {
        let live = std::sync::Arc::new(agentwire_load::load::LiveCounts::default());
        config.live = Some(live.clone());
        load_with_progress(&config, &live)?
    };
    if a.json {
        println!("{}", agentwire_load::report::to_json(&report)?);
        for (kind, n) in &report.errors_by_kind {
            let example = report.error_examples.get(kind).map(String::as_str);
            eprintln!("{kind}: {n} error(s), e.g. {}", example.unwrap_or("?"));
        }
    } else {
        print!("{}", agentwire_load::report::render_text(&report));
    }
    if report.succeeded == 0 {
        let first = report
            .error_examples
            .iter()
            .next()
            .map(|(k, e)| format!(": {k}: {e}"))
            .unwrap_or_default();
        bail!(
            "no request succeeded ({} sent, {} failed){first}",
            report.requests,
            report.errors
        );
    }
    Ok(())
}

/// Runs the load on its own thread while a progress bar on stderr shows time (or requests)
/// done, responses, errors and the current rate; the bar is cleared at the end.
fn load_with_progress(
    config: &agentwire_load::load::LoadConfig,
    live: &agentwire_load::load::LiveCounts,
) -> Result<agentwire_load::report::LoadReport> {
    use agentwire_load::load::Limit;
    let (length, by_time) = match config.limit {
        Limit::Duration(d) => (
            u64::try_from((config.warmup + d).as_millis()).unwrap_or(u64::MAX),
            true,
        ),
        Limit::Requests(n) => (n, false),
    };
    let bar = indicatif::ProgressBar::new(length);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:24}] {percent}%  {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let started = std::time::Instant::now();
    let result = std::thread::scope(|scope| {
        let worker = scope.spawn(|| agentwire_load::load::run(config));
        let mut last = (started, 0u64);
        while !worker.is_finished() {
            std::thread::sleep(Duration::from_millis(200));
            let (ok, failed) = live.snapshot();
            let now = std::time::Instant::now();
            let rate =
                (ok - last.1.min(ok)) as f64 / now.duration_since(last.0).as_secs_f64().max(1e-3);
            last = (now, ok);
            let done = if by_time {
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
            } else {
                ok + failed
            };
            bar.set_position(done.min(length));
            bar.set_message(format!("{ok} responses, {failed} errors, {rate:.0} req/s"));
        }
        worker
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the load thread panicked")))
    });
    bar.finish_and_clear();
    result
}

/// Writes each chart into `dir` and links it from `md`.
fn write_charts(
    dir: &std::path::Path,
    charts: &[agentwire_load::compare::Chart],
    md: &mut String,
) -> Result<()> {
    if !charts.is_empty() {
        md.push_str(
            "
Charts:

",
        );
    }
    for c in charts {
        let path = dir.join(&c.file);
        std::fs::write(&path, &c.svg).with_context(|| format!("writing {}", path.display()))?;
        md.push_str(&format!(
            "![{}]({})
",
            c.title, c.file
        ));
    }
    Ok(())
}

/// `agentwire scorecard --compare A.json B.json …`: the scorecards side by side, into
/// --out/compare.md (printed too) and charts.
fn scorecard_compare(a: &ScorecardArgs) -> Result<()> {
    use agentwire_load::compare;
    let cards = a
        .compare
        .iter()
        .map(|p| compare::CardView::load(p))
        .collect::<Result<Vec<_>>>()?;
    let sources: Vec<String> = a.compare.iter().map(|p| p.display().to_string()).collect();
    let mut md = compare::compare_markdown(&cards, &sources);
    write_charts(&a.out, &compare::compare_charts(&cards), &mut md)?;
    let path = a.out.join("compare.md");
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    print!("{md}");
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// `agentwire scorecard`: runs the scorecard (see `agentwire_load::scorecard`), writes
/// scorecard.json and scorecard.md into --out, prints the table (or the JSON), and fails
/// after writing everything if any scenario had errors.
fn scorecard(a: ScorecardArgs) -> Result<()> {
    use agentwire_load::{compare, scorecard};
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("creating the output directory {}", a.out.display()))?;
    if !a.compare.is_empty() {
        return scorecard_compare(&a);
    }
    let config = a.config()?;
    let mut progress = |r: &scorecard::ScenarioRun| {
        let problems = r.problems();
        eprintln!(
            "  {:<18} {:<8} {:>9.1} req/s {:>9.2} MB/s {:>7} requests{}",
            r.scenario,
            r.proto.name(),
            r.rps,
            r.mb_per_s,
            r.requests,
            if problems > 0 {
                format!("  {problems} ERROR(S)")
            } else {
                String::new()
            }
        );
    };
    eprintln!(
        "scorecard ({}) for {}:",
        config.scale.name,
        config
            .protos
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let card = scorecard::run(&config, &mut progress)?;
    let json = scorecard::to_json(&card)?;
    let mut md = scorecard::render_markdown(&card);
    let charts = compare::card_charts(&compare::CardView::of(&card)?);
    write_charts(&a.out, &charts, &mut md)?;
    let json_path = a.out.join("scorecard.json");
    let md_path = a.out.join("scorecard.md");
    std::fs::write(&json_path, format!("{json}\n"))
        .with_context(|| format!("writing {}", json_path.display()))?;
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    if a.json {
        println!("{json}");
    } else {
        print!("{md}");
    }
    eprintln!(
        "wrote {} and {} ({:.1} s)",
        json_path.display(),
        md_path.display(),
        card.elapsed_s
    );
    if card.total_errors > 0 {
        bail!(
            "{} error(s) in the scorecard (see the Errors section of {})",
            card.total_errors,
            md_path.display()
        );
    }
    Ok(())
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info,agentwire=info",
        2 => "info,agentwire=debug",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGENTWIRE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn cert(a: CertArgs) -> Result<()> {
    let out = match (a.issue, a.out) {
        (Some(CertCommand::Agent(agent)), _) => return cert_agent(agent),
        (None, Some(out)) => out,
        (None, None) => bail!("say where to write the certificates: --out DIR"),
    };
    let names = if a.names.is_empty() {
        tls::default_hub_names()
    } else {
        a.names.clone()
    };
    let bundle = tls::generate(&names).context("generating certificates")?;
    let files = tls::write_cert_dir(&out, &bundle, a.force)?;
    let identity = HubIdentity::from_dir(&out)?;
    println!("CA certificate:  {}", files.ca_cert.display());
    println!("CA key:          {}", files.ca_key.display());
    println!("hub certificate: {}", files.hub_cert.display());
    println!("hub key:         {}", files.hub_key.display());
    println!("hub names:       {}", names.join(", "));
    println!("hub key pin:     {}", identity.spki_pin()?);
    Ok(())
}

/// Joins the cluster `--cluster` names, if any.
async fn join_cluster(a: &HubArgs, hub: &Hub) -> Result<Option<agentwire_cluster::Cluster>> {
    if a.cluster.is_empty() {
        return Ok(None);
    }
    let hub_id = match &a.hub_id {
        Some(id) => id.clone(),
        None => format!("hub-{:08x}", rand_u32()),
    };
    let mut config = agentwire_cluster::ClusterConfig::new(a.cluster.clone(), hub_id.clone());
    config.name.clone_from(&a.cluster_name);
    config.tls_ca.clone_from(&a.cluster_ca);
    config.credentials.clone_from(&a.cluster_creds);
    config.expiry = Duration::from_millis(a.cluster_expiry_ms);
    config.beat = config.expiry * 2 / 7;
    config.queues = match a.cluster_queues.as_str() {
        "per-hub" => agentwire_cluster::QueuePlacement::PerHub,
        _ => agentwire_cluster::QueuePlacement::JetStream {
            replicas: a.cluster_replicas as usize,
        },
    };
    if a.store.is_some() && config.queues != agentwire_cluster::QueuePlacement::PerHub {
        anyhow::bail!(
            "--store keeps one hub's queues on its disk; a cluster keeps them in JetStream \
             (leave --store out, or pass --cluster-queues per-hub)"
        );
    }
    match agentwire_cluster::Cluster::join(hub.clone(), config).await {
        Ok(cluster) => {
            let servers: Vec<String> = a
                .cluster
                .iter()
                .map(|s| agentwire_cluster::node::redacted(s))
                .collect();
            println!(
                "hub {hub_id} joined cluster {} through {}",
                a.cluster_name,
                servers.join(",")
            );
            if cluster.owns_queues() {
                println!("hub {hub_id} keeps the cluster's work queues (JetStream)");
            }
            Ok(Some(cluster))
        }
        Err(e) if a.cluster_optional => {
            eprintln!(
                "warning: {}; serving this hub's agents alone (--cluster-optional)",
                agentwire::error_chain(&e)
            );
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// A random number from the system (for a default hub id).
fn rand_u32() -> u32 {
    let mut bytes = [0u8; 4];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut bytes);
    }
    u32::from_le_bytes(bytes) ^ std::process::id()
}

fn cert_agent(a: CertAgentArgs) -> Result<()> {
    let ca = tls::CertFiles::in_dir(&a.ca_dir);
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading {} (create the CA with `agentwire cert --out {}`)",
                path.display(),
                a.ca_dir.display()
            )
        })
    };
    let (ca_cert, ca_key) = (read(&ca.ca_cert)?, read(&ca.ca_key)?);
    let cert = tls::issue_agent_cert(&ca_cert, &ca_key, &a.id, a.days)?;
    let files = tls::write_agent_cert(a.out.as_deref().unwrap_or(&a.ca_dir), &cert, a.force)?;
    println!("agent id:          {}", a.id);
    println!("agent certificate: {}", files.cert.display());
    println!("agent key:         {}", files.key.display());
    println!("valid for:         {} days", a.days);
    println!("serial:            {}", cert.serial()?);
    Ok(())
}

async fn hub(a: HubArgs) -> Result<()> {
    let identity = match &a.cert_dir {
        Some(dir) => Some(HubIdentity::from_dir(dir).with_context(|| {
            format!(
                "loading the hub certificate from {} (create one with `agentwire cert --out {}`)",
                dir.display(),
                dir.display()
            )
        })?),
        None => None,
    };
    let config: HubConfig = a.hub_config()?;
    let urls = a
        .listen
        .iter()
        .map(|u| HubUrl::parse(u).map_err(anyhow::Error::msg))
        .collect::<Result<Vec<_>>>()?;
    check_exposure(&urls, &config, a.require_auth)?;
    let metrics = HubMetrics::new();
    let hub = match &a.store {
        Some(dir) => {
            // The error names the store's file (damaged, not a store, not writable).
            let store = agentwire_queue::FileStore::open(dir)?;
            let path = store.path().display().to_string();
            let hub = Hub::with_store(config, metrics.clone(), Box::new(store))?;
            println!("work queues stored in {path}");
            hub
        }
        None => Hub::new(config, metrics.clone()),
    };
    // Joined before agents can connect: their queue work then goes where the cluster keeps
    // the queues from the first task on.
    let cluster = join_cluster(&a, &hub).await?;
    let mut listeners = Vec::new();
    for url in urls {
        let listener = hub
            .listen(&url, identity.as_ref())
            .await
            .with_context(|| format!("listening on {url}"))?;
        match listener.socket_buffers {
            Some(b) => println!(
                "hub listening on {} (UDP buffers: send {} B, recv {} B)",
                listener.url, b.send, b.recv
            ),
            None => println!("hub listening on {}", listener.url),
        }
        listeners.push(listener);
    }
    if let Some(addr) = a.metrics {
        let (bound, _task) = agentwire::metrics::spawn_metrics_server(addr, metrics)
            .await
            .with_context(|| format!("serving metrics on {addr}"))?;
        println!("metrics on http://{bound}/metrics");
    }
    if let Some(identity) = &identity {
        println!("hub key pin: {}", identity.spki_pin()?);
    }
    let stats = a.stats_interval.map(Duration::from_secs);
    let reloader = reload::Reloader::new(&a, identity.as_ref());
    let reloads = reloader.as_ref().and_then(|r| {
        r.serve_hub_ops(&hub);
        r.on_sighup(&hub)
    });
    until_stopped(stats, || {
        for info in hub.agents() {
            println!("{}", serde_json::to_string(&info)?);
        }
        Ok(())
    })
    .await?;
    if let Some(task) = reloads {
        task.abort();
    }
    println!("shutting down");
    hub.shutdown();
    if let Some(cluster) = cluster {
        cluster.leave().await;
    }
    for l in &listeners {
        l.close();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}

/// Warns (stderr and log) about what the hub would expose, or with `require_auth` refuses to
/// start if it would expose anything at all.
fn check_exposure(urls: &[HubUrl], config: &HubConfig, require_auth: bool) -> Result<()> {
    let found = agentwire::hub::exposures(urls, config);
    if require_auth && !found.is_empty() {
        let why: Vec<String> = found.iter().map(|e| format!("  - {e}")).collect();
        bail!("--require-auth: not starting, because\n{}", why.join("\n"));
    }
    for e in found.iter().filter(|e| e.warns()) {
        eprintln!("WARNING: {e}");
        tracing::warn!("{e}");
    }
    Ok(())
}

async fn agent(mut a: AgentArgs) -> Result<()> {
    let opts = a.connect.options(&a.id)?;
    let mut agent = Agent::connect(opts).await?;
    eprintln!(
        "agent {} connected over {} (session {}, codec {})",
        agent.id(),
        agent.transport(),
        agent.session().session_id,
        agent.session().codec
    );
    for topic in &a.subscribe {
        agent.subscribe(topic).await?;
    }
    for queue in &a.consume {
        agent.consume(queue, a.credit.max(1)).await?;
    }
    let ack_delay = Duration::from_millis(a.ack_delay_ms);
    let mut stats_ticker = a
        .stats_interval
        .map(|s| tokio::time::interval(Duration::from_secs(s)));
    loop {
        let msg = tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = async { match stats_ticker.as_mut() { Some(t) => { t.tick().await; } None => std::future::pending().await } } => {
                eprintln!("{}", serde_json::to_string(&agent.stats())?);
                continue;
            }
            msg = agent.recv() => msg,
        };
        let Some(msg) = msg else {
            bail!(
                "connection to the hub ended: {}",
                agent.closed_reason().unwrap_or_default()
            );
        };
        let env = &msg.envelope;
        if let Some(task) = agentwire::agent_queues::QueueTask::from_envelope(env) {
            if a.print && !a.quiet {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let printed = out
                    .write_all(&task.body)
                    .and_then(|()| out.write_all(b"\n"))
                    .and_then(|()| out.flush());
                if printed.is_err() {
                    a.quiet = true;
                }
            }
            if a.consume.contains(&task.queue) {
                let handle = agent.handle().clone();
                tokio::spawn(async move {
                    tokio::time::sleep(ack_delay).await;
                    if let Err(e) = handle.ack(task.task).await {
                        eprintln!("cannot ack task {}: {e}", task.task);
                    }
                });
            }
            if a.print {
                continue;
            }
        }
        if !a.quiet {
            let headers: Vec<String> = env
                .headers
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            use std::io::Write;
            // With --print, stdout carries task bodies only.
            let mut out: Box<dyn Write> = if a.print {
                Box::new(std::io::stderr())
            } else {
                Box::new(std::io::stdout())
            };
            let printed = writeln!(
                out,
                "{} {} from {} (id {}, {} bytes){}: {}",
                env.kind,
                env.priority,
                env.from,
                env.id,
                env.body.len(),
                if headers.is_empty() {
                    String::new()
                } else {
                    format!(" [{}]", headers.join(" "))
                },
                String::from_utf8_lossy(&env.body[..env.body.len().min(200)])
            );
            if printed.is_err() {
                // Whoever read our output is gone; keep serving quietly.
                a.quiet = true;
            }
        }
        if a.echo && env.kind == Kind::Request {
            msg.reply(env.body.clone()).await?;
        }
    }
    agent.close().await;
    Ok(())
}

/// `agentwire token`: a new random agent token and its SHA-256 (or the SHA-256 of one given).
fn token(a: TokenArgs) -> Result<()> {
    if let Some(t) = &a.hash {
        println!("token_sha256: {}", agentwire::hub::token_sha256(t));
        return Ok(());
    }
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| anyhow::anyhow!("the system's random number generator failed"))?;
    let t = hex::encode(bytes);
    println!("token: {t}");
    println!("token_sha256: {}", agentwire::hub::token_sha256(&t));
    Ok(())
}

/// `agentwire queue`: one operation on a hub's work queue; prints the JSON answer.
async fn queue(a: QueueArgs) -> Result<()> {
    use agentwire::agent_queues::QueueOp;
    let id =
        a.id.clone()
            .unwrap_or_else(|| format!("queue-{}", std::process::id()));
    let (queue, op) = match &a.op {
        QueueCommand::Stats { queue } => (queue, QueueOp::Stats),
        QueueCommand::DeadLetters { queue } => (queue, QueueOp::DeadLetters),
        QueueCommand::Replay { queue, task } => (queue, QueueOp::Replay(*task)),
        QueueCommand::Discard { queue, task } => (queue, QueueOp::Discard(*task)),
        QueueCommand::Bench {
            queue,
            producers,
            window,
            consumers,
            credit,
            size,
            warmup_ms,
            duration_ms,
        } => {
            let config = agentwire_bench::queue_load::QueueLoadConfig {
                shape: agentwire_bench::queue_load::QueueShape {
                    queue: queue.clone(),
                    producers: (*producers).max(1),
                    window: (*window).max(1),
                    consumers: (*consumers).max(1),
                    credit: (*credit).max(1),
                    size: *size,
                },
                warmup: Duration::from_millis(*warmup_ms),
                duration: Duration::from_millis((*duration_ms).max(1)),
                timeout: Duration::from_millis(a.timeout_ms),
            };
            let report =
                agentwire_bench::queue_load::run(&config, |id| a.connect.options(id)).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            return Ok(());
        }
    };
    let agent = Agent::connect(a.connect.options(&id)?).await?;
    let timeout = Duration::from_millis(a.timeout_ms);
    if op == QueueOp::DeadLetters {
        // Page by page as they come: neither the hub nor this process holds them all.
        let printed = print_dead_letters(&agent, queue, timeout).await;
        agent.close().await;
        return printed;
    }
    let answer = agent.queue_op(queue, op, timeout).await;
    agent.close().await;
    println!("{}", serde_json::to_string_pretty(&answer?)?);
    Ok(())
}

/// Prints `queue`'s dead letters as one JSON array, a page at a time.
async fn print_dead_letters(agent: &Agent, queue: &str, timeout: Duration) -> Result<()> {
    use std::io::Write;
    let mut after = None;
    let mut count = 0usize;
    loop {
        let (page, next) = agent.dead_letters_page(queue, after, timeout).await?;
        let mut out = std::io::stdout().lock();
        for letter in page {
            let text = serde_json::to_string_pretty(&letter)?;
            let sep = if count == 0 { "[\n" } else { ",\n" };
            write!(out, "{sep}  {}", text.replace('\n', "\n  "))?;
            count += 1;
        }
        out.flush()?;
        match next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    println!("{}", if count == 0 { "[]" } else { "\n]" });
    Ok(())
}

/// `agentwire reload`: asks a running hub to read its files again, and prints its answer.
async fn reload_hub(a: ReloadArgs) -> Result<()> {
    let id =
        a.id.clone()
            .unwrap_or_else(|| format!("reload-{}", std::process::id()));
    let agent = Agent::connect(a.connect.options(&id)?).await?;
    let answer = agent
        .hub_op("reload", Duration::from_millis(a.timeout_ms))
        .await;
    agent.close().await;
    let answer = answer?;
    println!("{}", serde_json::to_string_pretty(&answer)?);
    if answer["errors"].as_array().is_some_and(|e| !e.is_empty()) {
        bail!("the hub could not reload everything");
    }
    Ok(())
}

async fn send(a: SendArgs) -> Result<()> {
    let id =
        a.id.clone()
            .unwrap_or_else(|| format!("send-{}", std::process::id()));
    let opts = a.connect.options(&id)?;
    let agent = Agent::connect(opts).await?;
    let (handle, mut inbox) = agent.split();
    let result = send_with(&a, &handle, &mut inbox).await;
    if a.stats {
        eprintln!("{}", serde_json::to_string_pretty(&handle.stats())?);
    }
    handle.close().await;
    result
}

async fn send_with(a: &SendArgs, agent: &AgentHandle, inbox: &mut Inbox) -> Result<()> {
    let dest: Destination = a.to.parse().map_err(anyhow::Error::msg)?;
    let kind = if a.request.is_some() {
        Kind::Request
    } else {
        a.kind.0
    };
    let mut env = agent
        .envelope(dest.clone(), kind)
        .with_priority(a.priority.0)
        .with_body(a.body());
    for (k, v) in &a.headers {
        env = env.with_header(k.clone(), v.clone());
    }
    if let Destination::Queue(queue) = &dest {
        // Stored, or an error: a request to the queue waits for the hub's receipt.
        let mut env = env;
        if let Some(p) = &a.producer_id {
            env = env.with_header(agentwire::hub::PRODUCER_ID_HEADER, p.clone());
        }
        let timeout = Duration::from_millis(a.timeout_ms);
        let receipt = agent.request_envelope(env, timeout).await?;
        let task = receipt
            .headers
            .get(agentwire::hub::TASK_ID_HEADER)
            .cloned()
            .unwrap_or_default();
        if receipt
            .headers
            .get(agentwire::hub::DUPLICATE_HEADER)
            .map(String::as_str)
            == Some("true")
        {
            eprintln!("task {task} was already stored in queue:{queue} (same producer id)");
        } else {
            eprintln!("stored task {task} in queue:{queue}");
        }
        return Ok(());
    }
    if a.request.is_some() {
        if !matches!(dest, Destination::Agent(_)) {
            bail!("--request needs one agent as --to, not {dest}");
        }
        let timeout = Duration::from_millis(a.timeout_ms);
        let env = env.with_ttl_ms(u32::try_from(a.timeout_ms).unwrap_or(u32::MAX));
        let reply = agent.request_envelope(env, timeout).await?;
        return write_body(&reply.body);
    }
    let id = agent.send_envelope(env).await?;
    // A delivery error (unknown agent, full queue) comes back quickly as an error envelope;
    // wait briefly for one before declaring success.
    let error = tokio::time::timeout(Duration::from_millis(300), async {
        while let Some(m) = inbox.recv().await {
            if m.envelope.kind == Kind::Error && m.envelope.correlation == Some(id) {
                return Some(m.envelope);
            }
        }
        None
    })
    .await;
    if let Ok(Some(err)) = error {
        bail!(
            "{}: {}",
            err.headers
                .get("code")
                .map(String::as_str)
                .unwrap_or("error"),
            String::from_utf8_lossy(&err.body)
        );
    }
    eprintln!("sent message {id} to {dest}");
    Ok(())
}

async fn bench(a: BenchArgs) -> Result<()> {
    if agentwire_bench::build_profile() == "debug" {
        if !a.allow_debug {
            bail!(
                "this is a DEBUG build, whose numbers are meaningless: run \
                 `cargo run --release -p agentwire-cli -- bench` (or pass --allow-debug for tests)"
            );
        }
        eprintln!("WARNING: DEBUG build: these numbers are meaningless (--allow-debug)");
    }
    let config = a.config()?;
    for name in agentwire_bench::netpath::remove_stale_namespaces() {
        eprintln!("removed network namespace {name} left behind by an earlier run");
    }
    // Interrupted: remove this run's namespaces (their destructors will not run); the hub
    // processes die with us.
    tokio::spawn(async {
        wait_for_signal().await;
        let n = agentwire_bench::netpath::remove_own_namespaces();
        eprintln!("interrupted: removed {n} network namespace(s); partial results are not written");
        std::process::exit(130);
    });
    // The hub runs this very binary: /proc/self/exe stays valid even if the file is rebuilt
    // while a long run is going on (the path would then name a different binary).
    let exe = std::path::PathBuf::from("/proc/self/exe");
    if !exe.exists() {
        bail!("/proc/self/exe is missing: the bench needs Linux's /proc to start its hub");
    }
    let launcher = agentwire_bench::HubLauncher::Process(exe);
    let no_progress = a.no_progress;
    let command_line: Vec<String> = std::env::args().collect();
    let report = tokio::task::spawn_blocking(move || {
        let bar = indicatif::ProgressBar::new(0);
        if no_progress {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:24}] {pos}/{len} runs, {eta} left  {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        let hidden = bar.is_hidden();
        let result = agentwire_bench::run(&config, &launcher, command_line, &mut |p| {
            bar.set_length(p.total_runs as u64);
            bar.set_position(p.finished_runs as u64);
            let line = format!(
                "cell {}/{}, run {}/{}: {}",
                p.cell, p.cells, p.repetition, p.repetitions, p.label
            );
            if hidden {
                eprintln!("{line}");
            } else {
                bar.set_message(line);
            }
        });
        bar.finish_and_clear();
        result
    })
    .await
    .context("the bench thread failed")??;
    if a.json {
        println!("{}", agentwire_bench::to_json(&report)?);
    } else {
        // Who won on each network first, the table after.
        print!("{}", agentwire_bench::verdict::render_text(&report));
        println!();
        print!("{}", agentwire_bench::render_table(&report));
    }
    let inconsistent = report.cells.iter().filter(|c| !c.consistent).count();
    if inconsistent > 0 {
        eprintln!("WARNING: {inconsistent} cell(s) did not account for every request");
    }
    for c in &report.cells {
        for f in &c.failures {
            eprintln!("WARNING: {}: {f}", agentwire_bench::cell_label(&c.config));
        }
    }
    let files = agentwire_bench::report::write_all(&report, &a.out)?;
    eprintln!(
        "results: {} (JSON), {} (Markdown), {} (HTML), {} charts in {}",
        files.json.display(),
        files.markdown.display(),
        files.html.display(),
        files.charts.len(),
        a.out.join("charts").display()
    );
    Ok(())
}

fn write_body(body: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(body)?;
    if !body.ends_with(b"\n") {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// `agentwire netsim relay`: socket relay mode (see `agentwire_netsim::relay`).
async fn netsim_relay(a: RelayArgs) -> Result<()> {
    use agentwire_netsim::relay::{tcp_ignores, TcpRelay, UdpRelay};
    use agentwire_netsim::Spec;

    let forward = Spec::parse(&a.spec).context("--spec")?;
    let reverse = match &a.reverse_spec {
        Some(r) => Spec::parse(r).context("--reverse-spec")?,
        None => forward.clone(),
    };
    let seed = a.seed.or(forward.seed).unwrap_or(0);
    let (want_udp, want_tcp) = if a.udp || a.tcp {
        (a.udp, a.tcp)
    } else {
        (true, true)
    };
    let label = match &a.reverse_spec {
        None => format!("[{}]", a.spec.trim()),
        Some(r) => format!("[forward {}; reverse {}]", a.spec.trim(), r.trim()),
    };

    let udp = if want_udp {
        let relay = UdpRelay::start(
            a.listen,
            a.to,
            forward.impairment.clone(),
            reverse.impairment.clone(),
            seed,
        )
        .await
        .with_context(|| format!("starting the UDP relay on {}", a.listen))?;
        println!(
            "netsim relay (socket mode) udp {} -> {} {label}",
            relay.local_addr(),
            a.to
        );
        Some(relay)
    } else {
        None
    };
    let tcp = if want_tcp {
        // With port 0, try the UDP relay's port first so both share one port number.
        let mut listen = a.listen;
        if let (0, Some(u)) = (listen.port(), &udp) {
            listen.set_port(u.local_addr().port());
        }
        let start = |l| {
            TcpRelay::start(
                l,
                a.to,
                forward.impairment.clone(),
                reverse.impairment.clone(),
                seed,
            )
        };
        let relay = match start(listen).await {
            Ok(r) => Ok(r),
            Err(_) if a.listen.port() == 0 => start(a.listen).await,
            Err(e) => Err(e),
        }
        .with_context(|| format!("starting the TCP relay on {listen}"))?;
        let ignored = if tcp_ignores(&forward.impairment) || tcp_ignores(&reverse.impairment) {
            " (loss/reorder/dup ignored on TCP)"
        } else {
            ""
        };
        println!(
            "netsim relay (socket mode) tcp {} -> {} {label}{ignored}",
            relay.local_addr(),
            a.to
        );
        Some(relay)
    } else {
        None
    };

    let interval = (a.stats_interval > 0).then(|| Duration::from_secs(a.stats_interval));
    until_stopped(interval, || {
        let line = serde_json::json!({
            "mode": "socket",
            "udp": udp.as_ref().map(|r| r.stats()),
            "tcp": tcp.as_ref().map(|r| r.stats()),
        });
        eprintln!("{line}");
        Ok(())
    })
    .await?;
    println!("netsim relay stopped");
    Ok(())
}

/// Runs `tick` every `interval` (never when `None`) until Ctrl-C or SIGTERM arrives.
async fn until_stopped(
    interval: Option<Duration>,
    mut tick: impl FnMut() -> Result<()>,
) -> Result<()> {
    let mut ticker = tokio::time::interval(interval.unwrap_or(Duration::from_secs(3600)));
    ticker.tick().await;
    let stop = wait_for_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = ticker.tick(), if interval.is_some() => tick()?,
        }
    }
}

/// Waits for Ctrl-C or SIGTERM (forever if the handlers cannot be installed).
async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
