//! `agentwire netsim up` (packet-level mode), `agentwire netsim relay` (socket mode) and
//! `agentwire netsim check`. The impairment model, the stages and the check itself live in
//! `agentwire_netsim`; this module turns flags into their options and prints.

use std::time::Duration;

use agentwire_netsim::check::{self, CheckOptions, Mode};
use agentwire_netsim::Spec;
use anyhow::{anyhow, bail, Context, Result};

use crate::args::{CheckArgs, CheckMode, RelayArgs, UpArgs};
use crate::until_stopped;

/// `agentwire netsim check`.
pub async fn check(a: CheckArgs) -> Result<()> {
    let (mode, auto_fallback) = match a.mode {
        CheckMode::Socket => (Mode::Socket, None),
        CheckMode::Packet => {
            privileged(a.stage).map_err(|e| anyhow!("--mode packet: {e}"))?;
            (Mode::Packet, None)
        }
        CheckMode::Auto => match privileged(a.stage) {
            Ok(()) => (Mode::Packet, None),
            Err(e) => (Mode::Socket, Some(e)),
        },
    };
    let options = CheckOptions {
        stage: a.stage,
        packets: a.packets,
        seed: a.seed,
    };
    let report = check::check(mode, options, auto_fallback).await?;
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", check::render_table(&report));
    }
    if !report.passed() {
        bail!("netsim check failed: {}", report.failed().join(", "));
    }
    Ok(())
}

/// Whether packet mode can run here; the error says why not (and points to the relay mode).
fn privileged(stage: agentwire_netsim::StageKind) -> std::result::Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        stage.check().map_err(|e| e.to_string())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = stage;
        Err("packet mode is Linux only; use `agentwire netsim relay ...`".into())
    }
}

// ---------------------------------------------------------------------------------------------
// netsim up
// ---------------------------------------------------------------------------------------------

/// `agentwire netsim up`: packet-level mode until Ctrl-C / SIGTERM.
#[cfg(not(target_os = "linux"))]
pub async fn up(_a: UpArgs) -> Result<()> {
    bail!("packet mode is Linux only; use `agentwire netsim relay ...`")
}

/// `agentwire netsim up`: packet-level mode until Ctrl-C / SIGTERM.
#[cfg(target_os = "linux")]
pub async fn up(a: UpArgs) -> Result<()> {
    use agentwire_netsim::packet::{
        check_impairment, DirectionStats, Offloads, StageOptions, Topology, CLIENT_ADDR,
        SERVER_ADDR,
    };
    use agentwire_netsim::stage::Stage;
    use tokio::signal::unix::{signal, SignalKind};

    // Signals first, so a Ctrl-C during setup still cleans up.
    let mut interrupt = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut terminate =
        signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;

    let forward = Spec::parse(&a.spec).context("--spec")?;
    let reverse = match &a.reverse_spec {
        Some(r) => Spec::parse(r).context("--reverse-spec")?,
        None => forward.clone(),
    };
    check_impairment(&forward.impairment).context("--spec")?;
    check_impairment(&reverse.impairment).context("--reverse-spec")?;
    let seed = a.seed.or(forward.seed).unwrap_or(0);
    let label = match &a.reverse_spec {
        None => format!("[{}]", a.spec.trim()),
        Some(r) => format!("[forward {}; reverse {}]", a.spec.trim(), r.trim()),
    };
    a.stage
        .check()
        .with_context(|| format!("netsim up ({} stage)", a.stage))?;

    let topo = match &a.name {
        Some(n) => Topology::named_with(n, a.stage.wiring())?,
        None => Topology::with_wiring(a.stage.wiring())?,
    };
    let (c, s) = (topo.client_ns().to_string(), topo.server_ns().to_string());
    if let Some(cc) = &a.tcp_cc {
        for ns in [&c, &s] {
            topo.set_tcp_congestion_control(ns, cc)
                .with_context(|| format!("--tcp-cc {cc} in {ns}"))?;
        }
    }
    let cc_c = topo.tcp_congestion_control(&c)?;
    let cc_s = topo.tcp_congestion_control(&s)?;
    let stage = Stage::start(
        a.stage,
        &topo,
        forward.impairment.clone(),
        reverse.impairment.clone(),
        seed,
    )?;

    println!(
        "netsim up (packet mode, {} stage): client ns {c} {CLIENT_ADDR} <-> server ns {s} \
         {SERVER_ADDR} {label}",
        a.stage
    );
    println!(
        "run the hub:   ip netns exec {s} agentwire hub --listen quic://{SERVER_ADDR}:4433 \
         --listen h2://{SERVER_ADDR}:4443 --cert-dir CERTS   \
         (make CERTS with: agentwire cert --out CERTS --name {SERVER_ADDR})"
    );
    println!(
        "run an agent:  ip netns exec {c} agentwire agent --hub quic://{SERVER_ADDR}:4433 \
         --ca CERTS/ca.pem --id a1"
    );
    println!("tcp congestion control: {c} {cc_c}, {s} {cc_s}");
    match topo.offloads() {
        Offloads::Disabled => {
            println!("offloads: segmentation and receive coalescing off on every veth end")
        }
        Offloads::Unchanged(why) => println!("offloads: left on ({why})"),
    }
    println!("Ctrl-C or SIGTERM removes the namespaces and their rules");

    fn dir_json(d: &DirectionStats) -> serde_json::Value {
        serde_json::json!({
            "link": d.link,
            "packets_handled": d.packets_handled,
            "packets_per_sec": d.packets_per_sec(),
            "held": d.held,
            "max_held": d.max_held,
            "verdict_errors": d.verdict_errors,
            "kernel_dropped": d.kernel_dropped,
            "oversize": d.oversize,
            "error": d.error,
        })
    }
    let interval = (a.stats_interval > 0).then(|| Duration::from_secs(a.stats_interval));
    let mut ticker = tokio::time::interval(interval.unwrap_or(Duration::from_secs(3600)));
    ticker.tick().await;
    let mut health = tokio::time::interval(Duration::from_secs(1));
    let queue_limit = StageOptions::default().queue_max_len as usize;
    let mut warned = false;
    let outcome: Result<()> = loop {
        tokio::select! {
            _ = interrupt.recv() => break Ok(()),
            _ = terminate.recv() => break Ok(()),
            _ = ticker.tick(), if interval.is_some() => {
                let st = stage.stats();
                let line = serde_json::json!({
                    "mode": "packet",
                    "client_to_server": dir_json(&st.client_to_server),
                    "server_to_client": dir_json(&st.server_to_client),
                });
                eprintln!("{line}");
            }
            _ = health.tick() => {
                let st = stage.stats();
                for (name, d) in [("client->server", &st.client_to_server), ("server->client", &st.server_to_client)] {
                    let overloaded = d.held >= queue_limit * 3 / 4 || d.verdict_errors > 0;
                    if overloaded && !warned {
                        eprintln!(
                            "WARNING: the emulator is the bottleneck ({name}: {} packets held of a \
                             {queue_limit}-packet queue, {} verdicts refused, {:.0} packets/s): \
                             results now measure the emulator, not the protocol",
                            d.held, d.verdict_errors, d.packets_per_sec()
                        );
                        warned = true;
                    }
                }
                if let Some(e) = st.client_to_server.error.or(st.server_to_client.error) {
                    break Err(anyhow!("packet stage stopped: {e}"));
                }
            }
        }
    };
    drop(stage);
    let middle = topo
        .middle_ns()
        .map(|m| format!(", {m}"))
        .unwrap_or_default();
    let removed = topo.remove();
    match (&outcome, removed) {
        (_, Ok(())) => println!("netsim up stopped: removed {c}, {s}{middle}"),
        (Ok(()), Err(e)) => return Err(anyhow!(e).context("removing the namespaces")),
        (Err(_), Err(e)) => eprintln!("error: removing the namespaces: {e}"),
    }
    outcome
}

/// `agentwire netsim relay`: socket relay mode (see `agentwire_netsim::relay`).
pub(crate) async fn relay(a: RelayArgs) -> Result<()> {
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
