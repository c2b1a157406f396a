//! One hub's membership of a cluster: the NATS connection, the presence it publishes and
//! reads, and the stand-ins it runs on its hub for the other hubs' agents.

use agentwire_sync::LockExt;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentwire::hub::{DuplicatePolicy, Hub};
use futures_util::StreamExt;
use tokio::task::JoinHandle;

pub use crate::error::ClusterError;
use crate::link::{
    sending_hub, stand_in, Shared, StandInFeed, StandInSender, DELIVER_HEADER, FROM_HEADER,
    HUB_ANSWER_HEADER,
};
use crate::owner::Ownership;
use crate::presence::{keeps_id, AgentEntry, Change, Directory, PresenceMessage};

/// The least time between two announcements of a hub's agents. A change among them is
/// announced at once, unless the last announcement is more recent than this; then it goes out
/// this long after that one, with every other change made meanwhile (agents connecting
/// together make one announcement per this while they keep coming).
pub const ANNOUNCE_GAP: Duration = Duration::from_millis(50);

/// How a hub joins a cluster.
///
/// ```
/// let c = agentwire_cluster::ClusterConfig::new(vec!["nats://127.0.0.1:4222".into()], "hub-1");
/// assert_eq!(c.name, "default");
/// ```
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// NATS server URLs (`nats://HOST:PORT`), tried in order: the hub's own node first, then
    /// where to go when it fails.
    pub servers: Vec<String>,
    /// The cluster's name: hubs with the same name on the same NATS form one agent space.
    pub name: String,
    /// This hub's id, unique in the cluster.
    pub hub_id: String,
    /// How often the hub announces its agents even when nothing changed.
    pub beat: Duration,
    /// A hub not heard from for this long is taken as gone (its agents leave).
    pub expiry: Duration,
    /// How often the hub looks for hubs gone silent, and, as a fallback, for changes among
    /// its own agents: the hub reports those as they happen ([`agentwire::hub::ClusterHooks`]),
    /// and they are announced at most one [`ANNOUNCE_GAP`] later.
    pub poll: Duration,
    /// How long connecting to NATS may take.
    pub connect_timeout: Duration,
    /// Talk to NATS over TLS, trusting the CA certificate(s) in this PEM file.
    pub tls_ca: Option<std::path::PathBuf>,
    /// A NATS credentials file (`.creds`: a user JWT and its NKey seed). A user and password
    /// or a token may instead be given in the server URL (`nats://user:pass@host:4222`).
    pub credentials: Option<std::path::PathBuf>,
    /// Where the work queues live.
    pub queues: QueuePlacement,
}

/// Where a cluster's work queues live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueuePlacement {
    /// One hub at a time keeps every queue, in a JetStream stream (replicated on up to
    /// `replicas` NATS nodes); the others pass their agents' queue work to it, and another
    /// hub takes over when it stops (the default; NATS must run JetStream).
    JetStream {
        /// Replicas to ask for (fewer when the NATS cluster is smaller).
        replicas: usize,
    },
    /// Each hub keeps its own queues in its own way (in memory, or its `--store`); only its
    /// own agents share them.
    PerHub,
}

impl ClusterConfig {
    /// Defaults: cluster `default`, a beat each second, expiry after 3.5 s, changes looked
    /// for every 50 ms, 5 s to connect.
    pub fn new(servers: Vec<String>, hub_id: impl Into<String>) -> Self {
        ClusterConfig {
            servers,
            name: "default".into(),
            hub_id: hub_id.into(),
            beat: Duration::from_secs(1),
            expiry: Duration::from_millis(3500),
            poll: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(5),
            tls_ca: None,
            credentials: None,
            queues: QueuePlacement::JetStream { replicas: 3 },
        }
    }
}

/// A NATS URL without the user, password or token it may carry, for messages and logs.
///
/// ```
/// use agentwire_cluster::node::redacted;
/// assert_eq!(redacted("nats://aw:s3cret@127.0.0.1:4222"), "nats://***@127.0.0.1:4222");
/// assert_eq!(redacted("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
/// ```
pub fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        (None, Some(at)) => format!("***{}", &url[at..]),
        _ => url.to_owned(),
    }
}

fn subject_safe(what: &str, s: &str) -> Result<(), ClusterError> {
    if s.is_empty()
        || !s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(ClusterError::Config(format!(
            "{what} {s:?} must be letters, digits, '-' or '_'"
        )));
    }
    Ok(())
}

/// The longest [`Cluster::leave`] waits for NATS.
pub const LEAVE_WAIT: Duration = Duration::from_secs(2);

/// A hub in a cluster. Dropping it (or [`leave`](Self::leave)) stops the membership.
pub struct Cluster {
    hub: Hub,
    /// What the hub calls when its agents change (taken back when this ends).
    hooks: Arc<dyn agentwire::hub::ClusterHooks>,
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
    ownership: Option<Arc<Ownership>>,
}

struct StandIn {
    feed: StandInFeed,
    sender: StandInSender,
    /// Tells this stand-in from a later one for the same agent.
    generation: u64,
    /// The hub of the agent.
    hub: String,
}

struct State {
    hub: Hub,
    shared: Arc<Shared>,
    directory: Mutex<Directory>,
    stand_ins: Mutex<HashMap<String, StandIn>>,
    /// Numbers this hub's publications of its state (parts of one share it).
    presence_epoch: std::sync::atomic::AtomicU64,
    generations: std::sync::atomic::AtomicU64,
    heartbeat: Duration,
    ownership: std::sync::OnceLock<Arc<Ownership>>,
}

impl Cluster {
    /// Joins: connects to NATS, asks the other hubs for their agents, and from then on keeps
    /// `hub`'s view of them and publishes its own.
    pub async fn join(hub: Hub, config: ClusterConfig) -> Result<Cluster, ClusterError> {
        subject_safe("the cluster name", &config.name)?;
        subject_safe("the hub id", &config.hub_id)?;
        if config.servers.is_empty() {
            return Err(ClusterError::Config("no NATS server given".into()));
        }
        let servers = config
            .servers
            .iter()
            .map(|s| redacted(s))
            .collect::<Vec<_>>()
            .join(",");
        let addresses = config
            .servers
            .iter()
            .map(|s| {
                s.trim().parse::<async_nats::ServerAddr>().map_err(|e| {
                    let s = redacted(s);
                    ClusterError::Config(format!("the NATS address {s:?} is not valid: {e}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut options = async_nats::ConnectOptions::new()
            .name(format!("agentwire hub {}", config.hub_id))
            // The first server given is this hub's own (nearest) node; the others are where it
            // goes when that one fails.
            .retain_servers_order();
        // A user and password (or a token, as the user part) in the URL: async-nats reads
        // them from its options only.
        if let Some(addr) = addresses.iter().find(|a| a.username().is_some()) {
            let user = addr.username().unwrap_or_default().to_owned();
            options = match addr.password() {
                Some(pass) => options.user_and_password(user, pass.to_owned()),
                None => options.token(user),
            };
        }
        // async-nats builds its own TLS settings from rustls's process-wide crypto provider
        // when a server insists on TLS; a build with two providers has none by default, so
        // name one (a provider the application installed first stays).
        let _ = rustls::crypto::ring::default_provider().install_default();
        if let Some(ca) = &config.tls_ca {
            // agentwire's own TLS settings (TLS 1.3), trusting this CA.
            let trust = agentwire::HubTrust::ca_file(ca)
                .map_err(|e| ClusterError::Config(format!("the NATS CA: {e}")))?;
            let tls = agentwire::tls::client_config(&trust, &[])
                .map_err(|e| ClusterError::Config(format!("TLS for NATS: {e}")))?;
            options = options.tls_client_config(tls).require_tls(true);
        }
        if let Some(path) = &config.credentials {
            options = options.credentials_file(path).await.map_err(|source| {
                ClusterError::Credentials {
                    path: path.clone(),
                    source,
                }
            })?;
        }
        let nats = tokio::time::timeout(config.connect_timeout, options.connect(addresses))
            .await
            .map_err(|_| ClusterError::ConnectTimeout {
                servers: servers.clone(),
                timeout: config.connect_timeout,
            })?
            .map_err(|source| ClusterError::Connect {
                servers: servers.clone(),
                source,
            })?;
        let prefix = format!("agentwire.{}", config.name);
        let shared = Arc::new(Shared::new(
            config.hub_id.clone(),
            nats.clone(),
            prefix.clone(),
        ));
        let subscribe = |subject: String| {
            let nats = nats.clone();
            async move {
                nats.subscribe(subject.clone())
                    .await
                    .map_err(|source| ClusterError::Subscribe { subject, source })
            }
        };
        let mut frames = subscribe(shared.inbox_subject()).await?;
        let presence_subject = shared.presence_subject();
        let mut presence = subscribe(shared.presence_wildcard()).await?;
        let heartbeat =
            Duration::from_millis(u64::from(hub.config().policy.heartbeat_interval_ms.max(10)));
        let policy = hub.config().duplicate_policy;
        // The hub tells us when its agents change (see `AgentsChanged`).
        let changed = Arc::new(tokio::sync::Notify::new());
        let hooks: Arc<dyn agentwire::hub::ClusterHooks> = Arc::new(AgentsChanged(changed.clone()));
        hub.join_cluster(hooks.clone());
        let state = Arc::new(State {
            hub: hub.clone(),
            shared: shared.clone(),
            directory: Mutex::new(Directory::new(config.hub_id.clone(), config.expiry, policy)),
            stand_ins: Mutex::new(HashMap::new()),
            // From the clock, so that a hub started again under the same id numbers its
            // publications after those of the one before.
            presence_epoch: std::sync::atomic::AtomicU64::new(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            ),
            generations: std::sync::atomic::AtomicU64::new(0),
            heartbeat,
            ownership: std::sync::OnceLock::new(),
        });
        let mut tasks = Vec::new();
        // Frames for this hub's agents, from agents of other hubs.
        tasks.push(tokio::spawn({
            let state = state.clone();
            async move {
                while let Some(msg) = frames.next().await {
                    // The hub that sent it, from the subject NATS let it publish on.
                    let Some(hub) = sending_hub(&msg.subject).map(str::to_owned) else {
                        continue;
                    };
                    let header = |name: &str| {
                        msg.headers
                            .as_ref()
                            .and_then(|h| h.get(name))
                            .map(|v| v.as_str().to_owned())
                    };
                    if let Some(agent) = header(DELIVER_HEADER) {
                        // A task the queue owner hands to a consumer here.
                        state.hub.deliver_from_owner(&agent, msg.payload.clone());
                        continue;
                    }
                    if header(HUB_ANSWER_HEADER).is_some() {
                        // Another hub's answer for a request of an agent here.
                        state.hub.answer_from_cluster(msg.payload.clone());
                        continue;
                    }
                    let Some(from) = header(FROM_HEADER) else {
                        continue;
                    };
                    let feed = state.feed_for(&hub, &from);
                    if let Some(feed) = feed {
                        feed.frame(msg.payload.clone()).await;
                    }
                }
            }
        }));
        // The other hubs' presence.
        tasks.push(tokio::spawn({
            let state = state.clone();
            let subject = presence_subject.clone();
            async move {
                while let Some(msg) = presence.next().await {
                    let Ok(message) = serde_json::from_slice::<PresenceMessage>(&msg.payload)
                    else {
                        continue;
                    };
                    // A hub speaks for itself only, on its own subject.
                    if sending_hub(&msg.subject) != Some(message.hub()) {
                        tracing::warn!(
                            subject = %msg.subject,
                            claims = message.hub(),
                            "presence for another hub than the one publishing it, ignored"
                        );
                        continue;
                    }
                    let changes =
                        match message {
                            PresenceMessage::State { hub, agents } => state
                                .lock_directory()
                                .on_state(&hub, agents, Instant::now()),
                            PresenceMessage::StatePart {
                                hub,
                                epoch,
                                part,
                                parts,
                                agents,
                            } => state.lock_directory().on_state_part(
                                &hub,
                                epoch,
                                part,
                                parts,
                                agents,
                                Instant::now(),
                            ),
                            PresenceMessage::Gone { hub } => state.lock_directory().on_gone(&hub),
                            PresenceMessage::Sync { hub } if hub != state.shared.hub => {
                                state.announce(&subject).await;
                                Vec::new()
                            }
                            PresenceMessage::Sync { .. } => Vec::new(),
                        };
                    state.apply(changes).await;
                }
            }
        }));
        // This hub's own agents, and hubs that went silent.
        tasks.push(tokio::spawn({
            let state = state.clone();
            let subject = presence_subject.clone();
            let (poll, beat) = (config.poll, config.beat);
            async move {
                let mut last: Option<Vec<AgentEntry>> = None;
                let mut last_sent = Instant::now();
                let mut tick = tokio::time::interval(poll);
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        () = changed.notified() => {
                            // At once, unless an announcement went out a moment ago: then
                            // the changes until ANNOUNCE_GAP after it go out together.
                            let since = last_sent.elapsed();
                            if since < ANNOUNCE_GAP {
                                tokio::time::sleep(ANNOUNCE_GAP - since).await;
                            }
                        }
                    }
                    let now_agents = state.local_agents();
                    if last.as_ref() != Some(&now_agents) || last_sent.elapsed() >= beat {
                        state.publish(&subject, &now_agents).await;
                        last = Some(now_agents);
                        last_sent = Instant::now();
                    }
                    let expired = state.lock_directory().expire(Instant::now());
                    state.apply(expired).await;
                }
            }
        }));
        let ownership = match config.queues {
            QueuePlacement::JetStream { replicas } => {
                let ownership = Ownership::start(
                    state.hub.clone(),
                    shared.clone(),
                    &config.name,
                    replicas,
                    config.expiry,
                    heartbeat,
                )
                .await?;
                let _ = state.ownership.set(ownership.clone());
                tasks.push(tokio::spawn({
                    let ownership = ownership.clone();
                    let beat = config.beat;
                    async move {
                        let mut tick = tokio::time::interval(beat);
                        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                        tick.tick().await;
                        loop {
                            tick.tick().await;
                            ownership.round().await;
                        }
                    }
                }));
                Some(ownership)
            }
            QueuePlacement::PerHub => None,
        };
        let sync = PresenceMessage::Sync {
            hub: config.hub_id.clone(),
        };
        if let Ok(body) = serde_json::to_vec(&sync) {
            let _ = nats.publish(presence_subject, body.into()).await;
        }
        tracing::info!(hub = %config.hub_id, cluster = %config.name, %servers, "hub joined the cluster");
        Ok(Cluster {
            hub,
            hooks,
            shared,
            tasks,
            ownership,
        })
    }

    /// This hub's id in the cluster.
    pub fn hub_id(&self) -> &str {
        &self.shared.hub
    }

    /// The name of the NATS server this hub is connected to now.
    pub fn nats_server(&self) -> String {
        self.shared.nats.server_info().server_name
    }

    /// Whether this hub keeps the cluster's work queues now.
    pub fn owns_queues(&self) -> bool {
        self.shared
            .owns_queues
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Tells the other hubs this one is going (its agents leave there at once), lets the
    /// queues go to another hub if it kept them, and stops. Call after the hub's own
    /// [`shutdown`](agentwire::hub::Hub::shutdown), so that its last queue writes are made.
    ///
    /// Takes at most [`LEAVE_WAIT`]: with NATS unreachable, the other hubs learn of it from
    /// the silence instead (and the lease expires).
    pub async fn leave(self) {
        self.hub.leave_cluster(&self.hooks);
        for t in &self.tasks {
            t.abort();
        }
        let said = tokio::time::timeout(LEAVE_WAIT, async {
            if let Some(ownership) = &self.ownership {
                ownership.give_up().await;
            }
            let gone = PresenceMessage::Gone {
                hub: self.shared.hub.clone(),
            };
            if let Ok(body) = serde_json::to_vec(&gone) {
                let subject = self.shared.presence_subject();
                let _ = self.shared.nats.publish(subject, body.into()).await;
                let _ = self.shared.nats.flush().await;
            }
        })
        .await;
        if said.is_err() {
            tracing::warn!("NATS did not take this hub's goodbye within {LEAVE_WAIT:?}");
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.hub.leave_cluster(&self.hooks);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The hub's hook: wakes the task that announces this hub's agents.
struct AgentsChanged(Arc<tokio::sync::Notify>);

impl agentwire::hub::ClusterHooks for AgentsChanged {
    fn agents_changed(&self) {
        self.0.notify_one();
    }
}

impl State {
    fn lock_directory(&self) -> std::sync::MutexGuard<'_, Directory> {
        self.directory.lock_or_recover()
    }

    fn lock_stand_ins(&self) -> std::sync::MutexGuard<'_, HashMap<String, StandIn>> {
        self.stand_ins.lock_or_recover()
    }

    /// This hub's own agents (stand-ins left out), sorted.
    fn local_agents(&self) -> Vec<AgentEntry> {
        self.hub
            .agents()
            .into_iter()
            .filter(|a| a.transport != agentwire::transport::TransportKind::Cluster.name())
            .map(|a| AgentEntry {
                id: a.id,
                topics: a.topics.into_iter().collect::<BTreeSet<_>>(),
                since_ms: a.connected_unix_ms,
            })
            .collect()
    }

    /// When the local agent `agent` connected (Unix ms), if it is here and not a stand-in.
    fn local_since(&self, agent: &str) -> Option<u64> {
        self.hub
            .agent(agent)
            .filter(|a| a.transport != agentwire::transport::TransportKind::Cluster.name())
            .map(|a| a.connected_unix_ms)
    }

    /// Agent `agent` of `hub` has the id in the cluster now (it connected before, or after,
    /// as the policy says, a local agent with the same id): the local one is closed, and out
    /// of the hub's registry when this returns.
    fn close_local(&self, hub: &str, agent: &str) {
        let (code, why) = match self.hub.config().duplicate_policy {
            DuplicatePolicy::RejectNew => (
                agentwire::ErrorCode::DuplicateAgentId,
                format!("agent id {agent:?} was connected on hub {hub} first"),
            ),
            DuplicatePolicy::ReplaceOld => (
                agentwire::ErrorCode::Replaced,
                format!("agent id {agent:?} connected again on hub {hub}"),
            ),
        };
        tracing::info!(agent = %agent, other_hub = %hub, "closing a local agent whose id another hub's agent keeps");
        self.hub.disconnect(agent, code, &why);
    }

    async fn publish(&self, subject: &str, agents: &[AgentEntry]) {
        let epoch = self
            .presence_epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let messages = crate::presence::state_messages(
            &self.shared.hub,
            agents,
            epoch,
            crate::presence::MAX_PRESENCE_BYTES,
        );
        for message in messages {
            let Ok(body) = serde_json::to_vec(&message) else {
                continue;
            };
            if let Err(e) = self
                .shared
                .nats
                .publish(subject.to_owned(), body.into())
                .await
            {
                tracing::warn!("cannot publish this hub's agents: {e}");
                return;
            }
        }
    }

    async fn announce(&self, subject: &str) {
        let agents = self.local_agents();
        self.publish(subject, &agents).await;
    }

    /// The stand-in of `agent` (of `hub`), made now if a frame from it arrives before its
    /// hub's presence does.
    /// Frames for an agent another hub stands in for are not taken from `hub`: a hub speaks
    /// for its own agents only.
    fn feed_for(self: &Arc<Self>, hub: &str, agent: &str) -> Option<StandInFeed> {
        if let Some(s) = self.lock_stand_ins().get(agent) {
            if s.hub != hub {
                tracing::warn!(
                    agent,
                    from_hub = hub,
                    its_hub = %s.hub,
                    "a frame from another hub than the agent's, ignored"
                );
                return None;
            }
            return Some(s.feed.clone());
        }
        self.start_stand_in(hub, agent)
    }

    fn start_stand_in(self: &Arc<Self>, hub: &str, agent: &str) -> Option<StandInFeed> {
        let (sender, receiver, feed) =
            match stand_in(self.shared.clone(), hub, agent, self.heartbeat) {
                Ok(parts) => parts,
                Err(e) => {
                    tracing::warn!("cannot stand in for {agent} of {hub}: {e}");
                    return None;
                }
            };
        self.shared
            .remote
            .lock_or_recover()
            .insert(agent.to_owned());
        let generation = self
            .generations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock_stand_ins().insert(
            agent.to_owned(),
            StandIn {
                feed: feed.clone(),
                sender: sender.clone(),
                generation,
                hub: hub.to_owned(),
            },
        );
        let (hub_handle, state, id) = (self.hub.clone(), self.clone(), agent.to_owned());
        tokio::spawn(async move {
            hub_handle.serve_connection(sender, receiver).await;
            // Gone from this hub (its hub stopped announcing it, or this hub refused it).
            let mut stand_ins = state.lock_stand_ins();
            let ours = stand_ins
                .get(&id)
                .is_some_and(|s| s.generation == generation);
            if ours {
                stand_ins.remove(&id);
                state.shared.remote.lock_or_recover().remove(&id);
            }
        });
        Some(feed)
    }

    async fn mirror(&self, agent: &str, topic: &str, subscribe: bool) {
        let feed = self.lock_stand_ins().get(agent).map(|s| s.feed.clone());
        if let Some(feed) = feed {
            feed.subscription(topic, subscribe).await;
        }
    }

    async fn apply(self: &Arc<Self>, changes: Vec<Change>) {
        for change in changes {
            match change {
                Change::Join {
                    hub,
                    agent,
                    since_ms,
                } => {
                    if let Some(mine) = self.local_since(&agent) {
                        let policy = self.hub.config().duplicate_policy;
                        if keeps_id(policy, (mine, &self.shared.hub), (since_ms, &hub)) {
                            // The local agent keeps it; the other hub closes its own when it
                            // hears of this one.
                            continue;
                        }
                        // The stand-in follows at once, and the topic changes after this
                        // join mirror the winner's topics on it.
                        self.close_local(&hub, &agent);
                    }
                    if !self.lock_stand_ins().contains_key(&agent) {
                        self.start_stand_in(&hub, &agent);
                    }
                }
                Change::Leave { agent } => {
                    let gone = self.lock_stand_ins().remove(&agent);
                    if let Some(s) = gone {
                        agentwire::transport::FrameSender::close(
                            &s.sender,
                            agentwire::ErrorCode::Normal,
                            "its hub no longer announces it",
                        );
                    }
                    self.shared.remote.lock_or_recover().remove(&agent);
                }
                Change::Subscribe { agent, topic } => self.mirror(&agent, &topic, true).await,
                Change::Unsubscribe { agent, topic } => self.mirror(&agent, &topic, false).await,
            }
        }
    }
}
