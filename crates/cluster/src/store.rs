//! [`JetStreamStore`]: a cluster's work queues kept in a NATS JetStream stream, through the
//! queue crate's [`QueueStore`] trait, so that the hub that keeps the queues can die and
//! another one carries on with every task.
//!
//! The stream holds the last value of each key (`max_msgs_per_subject` 1, file storage,
//! replicated on up to three NATS nodes): a task under `<prefix>.t.<id>`, a producer id under
//! `<prefix>.d.<queue hex>.<producer id hex>`. A deletion is a marker message (header
//! `Agentwire-Deleted`) that replaces the value and expires by itself a minute later
//! (`Nats-TTL`). One [`QueueStore::apply`] is one JetStream atomic batch (ADR-50) of up to
//! [`MAX_BATCH`] messages: all of them are stored or none is. A longer group commit is several
//! batches in order: a failure then leaves a prefix of it stored, which the queue core's
//! write order makes safe (a task's record is written before its producer id, so a producer
//! that was not answered re-sends and is at worst stored twice, never lost).
//!
//! Only the hub holding the queue owner's lease writes: while its [`Lease`] is not valid,
//! every write fails. And since a lease is only as good as clocks and networks, each batch
//! also ends with the writer's mark on `<prefix>.owner`, expecting the mark before it to be
//! its own (`Nats-Expected-Last-Subject-Sequence`); a hub taking the queues over first writes
//! its mark ([`JetStreamStore::claim`]), so a late batch of the hub before it (one its NATS
//! client held while reconnecting, say) is refused whole, and that hub never writes again.
//! A batch tried again after an answer was lost is recognised by its id in the mark.
//!
//! It owns the stream's layout and nothing else: the queue core decides, the store keeps.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agentwire_queue::{
    DedupeRecord, Quarantined, QueueName, QueueStore, Recovered, StoreError, StoreOp, TaskId,
    TaskRecord,
};
use async_nats::jetstream;
use bytes::Bytes;
use futures_util::StreamExt;

use crate::lease::Lease;

/// How long JetStream gets to place the queues' stream with the replicas asked for.
const REPLICA_PATIENCE: Duration = Duration::from_secs(30);

/// Unanswered tries remembered (a try a second for a minute, more than JetStream's own
/// patience with a lost answer).
const MAX_UNANSWERED: usize = 64;

/// Messages in one JetStream atomic batch (the server's default limit).
pub const MAX_BATCH: usize = 1000;

/// How long a write is tried again before the store fails.
const WRITE_PATIENCE: Duration = Duration::from_secs(30);

/// The header naming the batch (or `claim`) that wrote an owner's mark.
const BATCH_HEADER: &str = "Agentwire-Batch";

/// The header that marks a deleted key.
const DELETED_HEADER: &str = "Agentwire-Deleted";

/// How long a deletion marker stays.
const DELETED_TTL: &str = "60s";

/// The work queues of one cluster, in JetStream.
pub struct JetStreamStore {
    client: async_nats::Client,
    js: jetstream::Context,
    stream: String,
    prefix: String,
    runtime: tokio::runtime::Handle,
    lease: Arc<Lease>,
    batches: AtomicU64,
    /// Ids of tries whose answer never came (maybe stored after all), until a write succeeds:
    /// a mark with one of them is this hub's own, also when the hub's writer tries the same
    /// writes again in a later [`QueueStore::apply`].
    unanswered: Vec<String>,
    /// The sequence of this hub's last mark on the stream (0: none yet).
    fence: AtomicU64,
    hub: String,
    timeout: Duration,
    preloaded: Option<Recovered>,
}

/// Where the stream is and how it is made.
#[derive(Debug, Clone)]
pub struct StoreLayout {
    /// The stream's name.
    pub stream: String,
    /// Its subjects' prefix (`<prefix>.>`).
    pub prefix: String,
    /// Replicas to ask for: exactly this many on a NATS cluster, one on a server that is not
    /// clustered.
    pub replicas: usize,
    /// How long JetStream gets to place the stream with those replicas before opening fails
    /// (30 s: a NATS cluster that has just started elects its leader meanwhile).
    pub patience: Duration,
}

impl StoreLayout {
    /// The layout of cluster `name`: stream `AGENTWIRE_<name>_QUEUES`, subjects
    /// `agentwire.<name>.queues.>`, three replicas.
    ///
    /// ```
    /// let l = agentwire_cluster::store::StoreLayout::for_cluster("blue");
    /// assert_eq!(l.stream, "AGENTWIRE_blue_QUEUES");
    /// assert_eq!(l.prefix, "agentwire.blue.queues");
    /// ```
    pub fn for_cluster(name: &str) -> Self {
        StoreLayout {
            stream: format!("AGENTWIRE_{name}_QUEUES"),
            prefix: format!("agentwire.{name}.queues"),
            replicas: 3,
            patience: REPLICA_PATIENCE,
        }
    }
}

fn nats_path(stream: &str) -> PathBuf {
    PathBuf::from(format!("JetStream stream {stream}"))
}

impl JetStreamStore {
    /// Opens (creating it if needed) the stream of `layout`; writes are refused while `lease`
    /// is false. Call from the hub's runtime; the store then works from any thread outside it.
    pub async fn open(
        client: async_nats::Client,
        layout: &StoreLayout,
        hub: &str,
        lease: Arc<Lease>,
    ) -> Result<Self, StoreError> {
        let js = jetstream::new(client.clone());
        let path = nats_path(&layout.stream);
        let replicas = replicas_for(&client, layout.replicas);
        let config = jetstream::stream::Config {
            name: layout.stream.clone(),
            subjects: vec![format!("{}.>", layout.prefix)],
            max_messages_per_subject: 1,
            storage: jetstream::stream::StorageType::File,
            num_replicas: replicas,
            allow_atomic_publish: true,
            allow_message_ttl: true,
            description: Some("agentwire work queues".into()),
            ..Default::default()
        };
        // A NATS cluster that has just started may not have elected its JetStream leader yet:
        // it gets time. The stream is never made with fewer replicas than asked for: a stream
        // that silently kept one copy would lose the queues with one NATS node.
        let deadline = tokio::time::Instant::now() + layout.patience;
        loop {
            match js.get_or_create_stream(config.clone()).await {
                Ok(_) => break,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::debug!("JetStream not ready for the queues' stream yet: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => {
                    return Err(StoreError::Open {
                        path,
                        source: Box::new(JetStreamFailure(format!(
                            "JetStream could not keep the queues' stream with {replicas} \
                             replicas within {:?} ({e}); fewer replicas only \
                             with --cluster-replicas",
                            layout.patience
                        ))),
                    })
                }
            }
        }
        if replicas < layout.replicas {
            tracing::warn!(
                stream = %layout.stream,
                replicas,
                asked = layout.replicas,
                "the NATS server is not clustered: the queues' stream keeps one copy, not the \
                 {} asked for (--cluster-replicas)",
                layout.replicas
            );
        }
        tracing::info!(stream = %layout.stream, replicas, "work queues kept in JetStream");
        Ok(JetStreamStore {
            client,
            js,
            stream: layout.stream.clone(),
            prefix: layout.prefix.clone(),
            runtime: tokio::runtime::Handle::current(),
            lease,
            batches: AtomicU64::new(0),
            unanswered: Vec::new(),
            fence: AtomicU64::new(0),
            hub: hub.to_owned(),
            timeout: Duration::from_secs(10),
            preloaded: None,
        })
    }

    /// Reads what the stream holds now, for the next [`QueueStore::load`] (which otherwise
    /// blocks its thread on the runtime, and so must not run on it).
    pub async fn preload(&mut self) -> Result<(), StoreError> {
        let loaded = self.load_async().await.map_err(|e| self.read_error(e))?;
        self.preloaded = Some(loaded);
        Ok(())
    }

    fn task_subject(&self, id: TaskId) -> String {
        format!("{}.t.{}", self.prefix, id.0)
    }

    fn dedupe_subject(&self, queue: &QueueName, producer_id: &str) -> String {
        format!(
            "{}.d.{}.{}",
            self.prefix,
            hex(queue.to_string().as_bytes()),
            hex(producer_id.as_bytes())
        )
    }

    /// A message per write: (subject, body, deleted).
    fn messages(&self, ops: &[StoreOp]) -> Vec<(String, Bytes, bool)> {
        ops.iter()
            .map(|op| match op {
                StoreOp::Put(r) => (self.task_subject(r.id), Bytes::from(r.encode()), false),
                StoreOp::Delete(id) => (self.task_subject(*id), Bytes::new(), true),
                StoreOp::PutDedupe(d) => {
                    let body = serde_json::json!({
                        "queue": d.queue.to_string(),
                        "producer_id": d.producer_id,
                        "task": d.task.0,
                        "expires_unix_ms": d.expires_unix_ms,
                    });
                    (
                        self.dedupe_subject(&d.queue, &d.producer_id),
                        Bytes::from(body.to_string()),
                        false,
                    )
                }
                StoreOp::DeleteDedupe { queue, producer_id } => {
                    (self.dedupe_subject(queue, producer_id), Bytes::new(), true)
                }
            })
            .collect()
    }

    fn owner_subject(&self) -> String {
        format!("{}.owner", self.prefix)
    }

    /// Puts this hub's mark on the stream (`<prefix>.owner`): from now on a batch of any
    /// hub that wrote before it is refused whole. Call once the lease is held, before
    /// [`preload`](Self::preload).
    pub async fn claim(&self) -> Result<(), StoreError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(BATCH_HEADER, "claim");
        let ack = async {
            self.js
                .publish_with_headers(self.owner_subject(), headers, Bytes::from(self.hub.clone()))
                .await
                .map_err(|e| e.to_string())?
                .await
                .map_err(|e| e.to_string())
        }
        .await
        .map_err(|e| self.write_error(e))?;
        self.fence.store(ack.sequence, Ordering::Release);
        Ok(())
    }

    /// How long a write waits for JetStream's answer before it is tried again (10 s by
    /// default).
    pub fn set_answer_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// A new id for one try of a batch.
    fn next_batch_id(&self) -> String {
        format!(
            "{}-{}",
            self.hub,
            self.batches.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Writes `batch` as `id` and, last, this hub's mark, expecting the mark before it to be
    /// this hub's own: all of it is stored, or nothing when another hub has claimed the
    /// stream. `earlier` names this batch's earlier tries: when one of them was stored after
    /// all (its answer lost), the mark it left is recognised as this batch's, not taken for
    /// another hub's claim.
    async fn write_batch(
        &self,
        batch: &[(String, Bytes, bool)],
        id: &str,
        earlier: &[String],
    ) -> Result<(), WriteError> {
        let fence = self.fence.load(Ordering::Acquire);
        if fence == 0 {
            return Err(WriteError::Fenced(
                "this hub never claimed the stream".into(),
            ));
        }
        let failed = |e: String| WriteError::Failed(e);
        for (i, (subject, body, deleted)) in batch.iter().enumerate() {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Batch-Id", id);
            headers.insert("Nats-Batch-Sequence", (i + 1).to_string().as_str());
            if *deleted {
                headers.insert(DELETED_HEADER, "1");
                headers.insert("Nats-TTL", DELETED_TTL);
            }
            self.client
                .publish_with_headers(subject.clone(), headers, body.clone())
                .await
                .map_err(|e| failed(e.to_string()))?;
        }
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Batch-Id", id);
        headers.insert(
            "Nats-Batch-Sequence",
            (batch.len() + 1).to_string().as_str(),
        );
        headers.insert("Nats-Batch-Commit", "1");
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            fence.to_string().as_str(),
        );
        headers.insert(BATCH_HEADER, id);
        let ack = self
            .js
            .publish_with_headers(self.owner_subject(), headers, Bytes::from(self.hub.clone()))
            .await
            .map_err(|e| failed(e.to_string()))?;
        let ack = tokio::time::timeout(self.timeout, ack).await.map_err(|_| {
            failed(format!(
                "no answer from JetStream within {:?}",
                self.timeout
            ))
        })?;
        match ack {
            Ok(ack) => {
                self.fence.store(ack.sequence, Ordering::Release);
                Ok(())
            }
            Err(e) if e.to_string().contains("wrong last sequence") => {
                // Stored after all, on an earlier try whose answer was lost? Then the mark
                // is this batch's.
                let stream = self
                    .js
                    .get_stream(&self.stream)
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                let mark = stream
                    .get_last_raw_message_by_subject(&self.owner_subject())
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                let ours = mark
                    .headers
                    .get(BATCH_HEADER)
                    .is_some_and(|v| v.as_str() == id || earlier.iter().any(|e| e == v.as_str()));
                if ours {
                    self.fence.store(mark.sequence, Ordering::Release);
                    return Ok(());
                }
                Err(WriteError::Fenced(format!(
                    "hub {} claimed the queues' stream",
                    String::from_utf8_lossy(&mark.payload)
                )))
            }
            Err(e) => Err(failed(e.to_string())),
        }
    }

    async fn load_async(&self) -> Result<Recovered, String> {
        let mut stream = self
            .js
            .get_stream(&self.stream)
            .await
            .map_err(|e| e.to_string())?;
        let info = stream.info().await.map_err(|e| e.to_string())?;
        let (count, last_seq) = (info.state.messages, info.state.last_sequence);
        let mut tasks = BTreeMap::new();
        let mut dedupe = Vec::new();
        let mut quarantined = Vec::new();
        if count > 0 {
            let consumer = stream
                .create_consumer(jetstream::consumer::pull::OrderedConfig {
                    filter_subject: format!("{}.>", self.prefix),
                    deliver_policy: jetstream::consumer::DeliverPolicy::LastPerSubject,
                    ..Default::default()
                })
                .await
                .map_err(|e| e.to_string())?;
            let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
            loop {
                let next = tokio::time::timeout(self.timeout, messages.next())
                    .await
                    .map_err(|_| "JetStream stopped sending the stored tasks".to_owned())?;
                let Some(msg) = next else { break };
                let msg = msg.map_err(|e| e.to_string())?;
                let pending = msg.info().map(|i| i.pending).unwrap_or(0);
                self.take(&msg, &mut tasks, &mut dedupe, &mut quarantined)?;
                if pending == 0 {
                    break;
                }
            }
        }
        let max_id = tasks.keys().next_back().map_or(0, |id: &TaskId| id.0 + 1);
        Ok(Recovered {
            tasks: tasks.into_values().collect(),
            dedupe,
            // Every id ever given out has a message, so the stream's last sequence is past
            // every id: an acked task's id is never given out again.
            next_id: max_id.max(last_seq + 1),
            quarantined,
        })
    }

    fn take(
        &self,
        msg: &jetstream::Message,
        tasks: &mut BTreeMap<TaskId, TaskRecord>,
        dedupe: &mut Vec<DedupeRecord>,
        quarantined: &mut Vec<Quarantined>,
    ) -> Result<(), String> {
        let deleted = msg
            .headers
            .as_ref()
            .is_some_and(|h| h.get(DELETED_HEADER).is_some());
        if deleted {
            return Ok(());
        }
        let key = msg
            .subject
            .as_str()
            .strip_prefix(&self.prefix)
            .unwrap_or_default();
        if let Some(id) = key.strip_prefix(".t.") {
            let id = TaskId(
                id.parse::<u64>()
                    .map_err(|e| format!("bad task key {key:?}: {e}"))?,
            );
            match TaskRecord::decode(id, &msg.payload) {
                Ok(record) => {
                    tasks.insert(id, record);
                }
                // Left where it is (only the queue keeper writes the stream) and reported:
                // one bad record must not stop every hub's takeover.
                Err(e) => quarantined.push(Quarantined {
                    key: msg.subject.to_string(),
                    reason: format!("task {} does not decode: {e}", id.0),
                }),
            }
        } else if key.starts_with(".d.") {
            let v: serde_json::Value = serde_json::from_slice(&msg.payload)
                .map_err(|e| format!("producer id {key:?} does not decode: {e}"))?;
            let text = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or_default();
            let number = |k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or_default();
            let queue = QueueName::new(text("queue"))
                .map_err(|e| format!("producer id {key:?} names a bad queue: {e}"))?;
            dedupe.push(DedupeRecord {
                queue,
                producer_id: text("producer_id").to_owned(),
                task: TaskId(number("task")),
                expires_unix_ms: number("expires_unix_ms"),
            });
        }
        Ok(())
    }

    fn path(&self) -> PathBuf {
        nats_path(&self.stream)
    }

    fn read_error(&self, e: String) -> StoreError {
        StoreError::Read {
            path: self.path(),
            source: Box::new(JetStreamFailure(e)),
        }
    }

    fn write_error(&self, e: String) -> StoreError {
        StoreError::Write {
            path: self.path(),
            source: Box::new(JetStreamFailure(e)),
        }
    }
}

/// `wanted` replicas, or 1 when the NATS server is not clustered.
pub fn replicas_for(client: &async_nats::Client, wanted: usize) -> usize {
    match client.server_info().cluster {
        None => 1,
        Some(_) => wanted.max(1),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a batch was not written.
enum WriteError {
    /// Another hub claimed the stream: this one must never write again.
    Fenced(String),
    /// Anything else (tried again).
    Failed(String),
}

/// A failure as the store error's source.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct JetStreamFailure(String);

impl QueueStore for JetStreamStore {
    fn load(&mut self) -> Result<Recovered, StoreError> {
        if let Some(loaded) = self.preloaded.take() {
            return Ok(loaded);
        }
        let runtime = self.runtime.clone();
        runtime
            .block_on(self.load_async())
            .map_err(|e| self.read_error(e))
    }

    fn apply(&mut self, ops: &[StoreOp]) -> Result<(), StoreError> {
        if ops.is_empty() {
            return Ok(());
        }
        let messages = self.messages(ops);
        let runtime = self.runtime.clone();
        for batch in messages.chunks(MAX_BATCH - 1) {
            // A NATS node that dies makes JetStream elect new leaders: a few seconds of
            // errors. The batch is written again (the same values: harmless if the first try
            // was stored after all) until it is stored or the time is up.
            let deadline = std::time::Instant::now() + WRITE_PATIENCE;
            loop {
                if !self.lease.valid() {
                    return Err(
                        self.write_error("this hub no longer holds the queue owner's lease".into())
                    );
                }
                let id = self.next_batch_id();
                match runtime.block_on(self.write_batch(batch, &id, &self.unanswered)) {
                    Ok(()) => {
                        self.unanswered.clear();
                        break;
                    }
                    Err(WriteError::Fenced(e)) => {
                        self.lease.revoke();
                        return Err(self.write_error(e));
                    }
                    Err(WriteError::Failed(e)) => {
                        if self.unanswered.len() == MAX_UNANSWERED {
                            self.unanswered.remove(0);
                        }
                        self.unanswered.push(id);
                        if std::time::Instant::now() >= deadline {
                            return Err(self.write_error(e));
                        }
                        tracing::warn!("a queue write to JetStream failed, trying again: {e}");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
        }
        Ok(())
    }
}
