//! `agentwire hub`: the hub's configuration from flags, its listeners, the exposure check, the
//! cluster it joins, and its stats until it is stopped.

use std::time::Duration;

use agentwire::hub::{Hub, HubConfig};
use agentwire::metrics::HubMetrics;
use agentwire::tls::HubIdentity;
use agentwire::HubUrl;
use anyhow::{bail, Context, Result};

use args::HubArgs;

use crate::*;

/// The cluster a hub joined.
#[cfg(feature = "cluster")]
type Joined = agentwire_cluster::Cluster;

/// A build without the `cluster` feature joins no cluster.
#[cfg(not(feature = "cluster"))]
enum Joined {}

#[cfg(not(feature = "cluster"))]
impl Joined {
    async fn leave(self) {
        match self {}
    }
}

/// Without the `cluster` feature, `--cluster` is refused with the reason.
#[cfg(not(feature = "cluster"))]
async fn join_cluster(a: &HubArgs, _hub: &Hub) -> Result<Option<Joined>> {
    if a.cluster.is_empty() {
        return Ok(None);
    }
    anyhow::bail!(
        "--cluster needs the `cluster` feature, and this agentwire was built without it \
         (cargo install agentwire-cli keeps every feature by default)"
    )
}

/// Joins the cluster `--cluster` names, if any.
#[cfg(feature = "cluster")]
async fn join_cluster(a: &HubArgs, hub: &Hub) -> Result<Option<Joined>> {
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
#[cfg(feature = "cluster")]
fn rand_u32() -> u32 {
    let mut bytes = [0u8; 4];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut bytes);
    }
    u32::from_le_bytes(bytes) ^ std::process::id()
}

pub(crate) async fn hub(a: HubArgs) -> Result<()> {
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
    let mut config: HubConfig = a.hub_config()?;
    let browsers = match (&mut config.webtransport, &a.cert_dir) {
        (Some(wt), Some(dir)) => {
            let loaded = reload::load_browsers_certificate(dir)?;
            wt.identity = loaded.as_ref().map(|(identity, _)| identity.clone());
            loaded
        }
        _ => None,
    };
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
    match &browsers {
        Some((_, sha256)) => println!("webtransport sha-256: {}", hex::encode(sha256)),
        None if a.webtransport => println!(
            "webtransport: browsers are served the hub certificate, which a page accepts only \
             if a CA it trusts signed it (for serverCertificateHashes: `agentwire cert \
             --webtransport --out CERT_DIR`)"
        ),
        None => {}
    }
    let stats = a.stats_interval.map(Duration::from_secs);
    let reloader = reload::Reloader::new(&a, identity.as_ref(), browsers.map(|(b, _)| b));
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
pub(crate) fn check_exposure(
    urls: &[HubUrl],
    config: &HubConfig,
    require_auth: bool,
) -> Result<()> {
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
