//! The subcommands that act as an agent of a running hub: `agent`, `send`, `queue`, `reload`,
//! and `token`, which makes an agent's credential.

use std::time::Duration;

use agentwire::{Agent, AgentHandle, Destination, Inbox, Kind};
use anyhow::{bail, Result};

use args::{AgentArgs, QueueArgs, QueueCommand, ReloadArgs, SendArgs, TokenArgs};

use crate::*;

pub(crate) async fn agent(mut a: AgentArgs) -> Result<()> {
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
pub(crate) fn token(a: TokenArgs) -> Result<()> {
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
pub(crate) async fn queue(a: QueueArgs) -> Result<()> {
    use agentwire::agent_queues::QueueOp;
    let id =
        a.id.clone()
            .unwrap_or_else(|| format!("queue-{}", std::process::id()));
    let (queue, op) = match &a.op {
        QueueCommand::Stats { queue } => (queue, QueueOp::Stats),
        QueueCommand::DeadLetters { queue } => (queue, QueueOp::DeadLetters),
        QueueCommand::Replay { queue, task } => (queue, QueueOp::Replay(*task)),
        QueueCommand::Discard { queue, task } => (queue, QueueOp::Discard(*task)),
        #[cfg(feature = "bench")]
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
pub(crate) async fn print_dead_letters(
    agent: &Agent,
    queue: &str,
    timeout: Duration,
) -> Result<()> {
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
pub(crate) async fn reload_hub(a: ReloadArgs) -> Result<()> {
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

pub(crate) async fn send(a: SendArgs) -> Result<()> {
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

pub(crate) async fn send_with(a: &SendArgs, agent: &AgentHandle, inbox: &mut Inbox) -> Result<()> {
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

pub(crate) fn write_body(body: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(body)?;
    if !body.ends_with(b"\n") {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}
