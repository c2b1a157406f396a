//! The native half of the `agentwire` Node package (`agentwire.node`): thin napi-rs wrappers
//! over `agentwire-sdk`, each call returning a Promise that settles on napi's tokio runtime.
//!
//! It owns only the crossing between JavaScript and Rust: argument conversion, Promises, and
//! errors, which cross as an `Error` whose message starts `agentwire|CLASS|CODE|NAME|` so that
//! `index.js` can rethrow them as its own subclasses (`RemoteError`, …, with `code` and
//! `codeName`). The idiomatic API (options objects, async iterators, the compatibility layer)
//! is `index.js`. Nothing here may panic on a caller's input.

#![warn(missing_docs)]

use agentwire_sync::LockExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentwire_sdk::{CompletionQueue, ConnectConfig, SdkAgent, SdkError};
#[cfg(feature = "hub")]
use agentwire_sdk::{EmbeddedHub, HubConfigSpec};
use bytes::Bytes;
use napi::bindgen_prelude::{Buffer, Either};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Env;
use napi_derive::napi;

fn js_err(err: SdkError) -> napi::Error {
    let code = err.code_number().map(|c| c.to_string()).unwrap_or_default();
    napi::Error::from_reason(format!(
        "agentwire|{}|{}|{}|{}",
        err.kind.class_name(),
        code,
        err.code_name().unwrap_or(""),
        err.message
    ))
}

fn seconds(what: &str, ms: f64) -> napi::Result<std::time::Duration> {
    SdkAgent::timeout(ms / 1000.0)
        .map_err(|e| js_err(SdkError::config(format!("{what}: {}", e.message))))
}

/// What a finished hot-path call hands back.
enum Done {
    Unit,
    Id(u64),
    Message(agentwire_sdk::Message),
    MaybeMessage(Option<agentwire_sdk::Message>),
    Failed(SdkError),
}

/// One finished call, as `take` hands it to JavaScript: `error` set (the `agentwire|…`
/// text) when it failed, else `id` or `message` (or neither) by what the call returns.
#[napi(object, object_from_js = false)]
pub struct Completion {
    /// The ticket the caller gave when it started the call.
    pub ticket: i64,
    /// When the call failed: the error as `agentwire|CLASS|CODE|NAME|MESSAGE` text.
    pub error: Option<String>,
    /// For send and publish: the id of the message sent.
    pub id: Option<i64>,
    /// For request: the answer; for recv: the message received (none once the connection has
    /// ended).
    pub message: Option<NativeMessage>,
}

/// Finished calls waiting for the main thread (see `agentwire_sdk::CompletionQueue`): the
/// hot-path calls (request, send, publish, recv, reply) finish here, and `onReady` is called
/// when the queue was empty, so that index.js settles every finished call in one `take`.
/// `onReady` keeps the process alive only while `setBusy(true)` (calls in flight).
#[napi]
pub struct Completions {
    queue: Arc<CompletionQueue<Done>>,
    wake: Arc<Mutex<ThreadsafeFunction<u32>>>,
}

impl Completions {
    fn spawn<F>(&self, ticket: i64, work: F)
    where
        F: std::future::Future<Output = Done> + Send + 'static,
    {
        let queue = self.queue.clone();
        let ticket = ticket as u64;
        napi::bindgen_prelude::spawn(async move {
            let done = work.await;
            queue.complete(ticket, done);
        });
    }

    fn lock_wake(&self) -> std::sync::MutexGuard<'_, ThreadsafeFunction<u32>> {
        self.wake.lock_or_recover()
    }
}

#[napi]
impl Completions {
    /// A queue that calls `onReady` whenever a call finishes while the queue is empty; the
    /// wake-up does not keep the process alive until `setBusy(true)`.
    // `unref`/`refer` are deprecated in favour of counting clones, but what is wanted here is
    // Node-API's own switch (napi_unref/ref_threadsafe_function): whether a pending wake-up
    // keeps the event loop alive.
    #[allow(deprecated)]
    #[napi(constructor)]
    pub fn new(env: Env, on_ready: ThreadsafeFunction<u32>) -> napi::Result<Self> {
        let mut on_ready = on_ready;
        on_ready.unref(&env)?;
        let wake = Arc::new(Mutex::new(on_ready));
        let waker = wake.clone();
        let queue = CompletionQueue::new(move || {
            let tsfn = waker.lock_or_recover();
            tsfn.call(Ok(0), ThreadsafeFunctionCallMode::NonBlocking);
        });
        Ok(Completions {
            queue: Arc::new(queue),
            wake,
        })
    }

    /// Keeps the process alive (calls in flight) or lets it exit (none).
    #[allow(deprecated)]
    #[napi]
    pub fn set_busy(&self, env: Env, busy: bool) -> napi::Result<()> {
        let mut tsfn = self.lock_wake();
        if busy {
            tsfn.refer(&env)
        } else {
            tsfn.unref(&env)
        }
    }

    /// Every call finished since the last `take`, oldest first.
    #[napi]
    pub fn take(&self) -> Vec<Completion> {
        self.queue
            .take()
            .into_iter()
            .map(|(ticket, done)| {
                let mut c = Completion {
                    ticket: ticket as i64,
                    error: None,
                    id: None,
                    message: None,
                };
                match done {
                    Done::Unit | Done::MaybeMessage(None) => {}
                    Done::Id(id) => c.id = Some(id as i64),
                    Done::Message(m) | Done::MaybeMessage(Some(m)) => {
                        c.message = Some(NativeMessage { inner: Arc::new(m) })
                    }
                    Done::Failed(e) => c.error = Some(js_err(e).reason),
                }
                c
            })
            .collect()
    }
}

/// Connect options (see `index.d.ts`).
#[napi(object)]
pub struct NativeConnectOptions {
    /// Hub addresses, tried in order (`quic://`, `h2://`, `wss://`, `ws://`, `unix://`,
    /// `auto://`).
    pub hubs: Vec<String>,
    /// This agent's id.
    pub id: String,
    /// PEM file of the CA that signed the hub's certificate.
    pub ca: Option<String>,
    /// The same CA as PEM text.
    pub ca_pem: Option<String>,
    /// The hub's public-key pin, `sha256:HEX`.
    pub pin: Option<String>,
    /// Accept any hub certificate (testing only; warns loudly). Default false.
    pub insecure: Option<bool>,
    /// The hub's shared token, or this agent's credential.
    pub token: Option<String>,
    /// This agent's certificate file, for hubs that require one (mutual TLS).
    pub cert: Option<String>,
    /// The key file of `cert`.
    pub key: Option<String>,
    /// Role announced to the hub (default `agent`).
    pub role: Option<String>,
    /// TLS server name (default: the address's host).
    pub server_name: Option<String>,
    /// Time allowed for the whole connect, in milliseconds (default 10000).
    pub connect_timeout_ms: Option<f64>,
    /// With several addresses, time allowed for each, in milliseconds (default 2000).
    pub fallback_timeout_ms: Option<f64>,
    /// Codecs offered, preferred first (`msgpack`, `json`; default both).
    pub codecs: Option<Vec<String>>,
}

/// A received message.
#[napi]
pub struct NativeMessage {
    inner: Arc<agentwire_sdk::Message>,
}

/// A connected agent.
#[napi]
pub struct NativeAgent {
    inner: Arc<SdkAgent>,
}

/// A hub running in this process.
#[cfg(feature = "hub")]
#[napi]
pub struct NativeHub {
    inner: Arc<EmbeddedHub>,
}

/// Connects an agent (all fallbacks included) and runs the handshake.
#[napi]
pub async fn connect(options: NativeConnectOptions) -> napi::Result<NativeAgent> {
    let config = ConnectConfig {
        hubs: options.hubs,
        id: options.id,
        ca: options.ca.map(Into::into),
        ca_pem: options.ca_pem,
        pin: options.pin,
        insecure: options.insecure.unwrap_or(false),
        token: options.token,
        cert: options.cert.map(Into::into),
        key: options.key.map(Into::into),
        role: options.role,
        server_name: options.server_name,
        connect_timeout: options
            .connect_timeout_ms
            .map(|ms| seconds("connectTimeoutMs", ms))
            .transpose()?,
        fallback_timeout: options
            .fallback_timeout_ms
            .map(|ms| seconds("fallbackTimeoutMs", ms))
            .transpose()?,
        codecs: options.codecs.unwrap_or_default(),
    };
    let agent = SdkAgent::connect(config).await.map_err(js_err)?;
    Ok(NativeAgent {
        inner: Arc::new(agent),
    })
}

/// Starts a hub in this process, listening on every address of `listen` (port 0 picks one).
/// `certDir` holds `hub.pem` and `hub.key` (without it the hub makes its own CA); `token` is
/// the shared token agents must present; `store` is a directory keeping the work queues (they
/// live in memory otherwise).
#[cfg(feature = "hub")]
#[napi]
pub async fn start_hub(
    listen: Vec<String>,
    cert_dir: Option<String>,
    token: Option<String>,
    store: Option<String>,
) -> napi::Result<NativeHub> {
    let spec = HubConfigSpec {
        listen,
        cert_dir: cert_dir.map(Into::into),
        token,
        store: store.map(Into::into),
    };
    let hub = EmbeddedHub::start(spec).await.map_err(js_err)?;
    Ok(NativeHub {
        inner: Arc::new(hub),
    })
}

fn body(b: Either<Buffer, String>) -> Bytes {
    match b {
        Either::A(buf) => Bytes::copy_from_slice(&buf),
        Either::B(text) => Bytes::from(text),
    }
}

fn pairs(headers: Option<HashMap<String, String>>) -> Vec<(String, String)> {
    headers.map(|h| h.into_iter().collect()).unwrap_or_default()
}

#[napi]
impl NativeAgent {
    /// This agent's id.
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.inner.id().to_owned()
    }

    /// The transport in use: `quic`, `http2`, `websocket` or `unix`.
    #[napi(getter)]
    pub fn transport(&self) -> String {
        self.inner.transport().to_owned()
    }

    /// Sends; the result (the message id) arrives through `completions` under `ticket`.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &self,
        completions: &Completions,
        ticket: i64,
        to: String,
        payload: Either<Buffer, String>,
        kind: String,
        priority: String,
        headers: Option<HashMap<String, String>>,
    ) {
        let agent = self.inner.clone();
        let (payload, headers) = (body(payload), pairs(headers));
        completions.spawn(ticket, async move {
            match agent.send(&to, payload, &kind, &priority, headers).await {
                Ok(id) => Done::Id(id),
                Err(e) => Done::Failed(e),
            }
        });
    }

    /// Sends a request; its answer arrives through `completions` under `ticket`.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn request(
        &self,
        completions: &Completions,
        ticket: i64,
        to: String,
        payload: Either<Buffer, String>,
        timeout_ms: f64,
        priority: String,
        headers: Option<HashMap<String, String>>,
    ) -> napi::Result<()> {
        let wait = seconds("timeoutMs", timeout_ms)?;
        let agent = self.inner.clone();
        let (payload, headers) = (body(payload), pairs(headers));
        completions.spawn(ticket, async move {
            match agent.request(&to, payload, wait, &priority, headers).await {
                Ok(answer) => Done::Message(answer),
                Err(e) => Done::Failed(e),
            }
        });
        Ok(())
    }

    /// The next message (or none, once the connection ended) arrives through `completions`.
    #[napi]
    pub fn recv(&self, completions: &Completions, ticket: i64) {
        let agent = self.inner.clone();
        completions.spawn(
            ticket,
            async move { Done::MaybeMessage(agent.recv().await) },
        );
    }

    /// Subscribes to `topic`: what is published to it arrives through `recv`.
    #[napi]
    pub async fn subscribe(&self, topic: String) -> napi::Result<()> {
        self.inner.clone().subscribe(&topic).await.map_err(js_err)
    }

    /// Unsubscribes from `topic`.
    #[napi]
    pub async fn unsubscribe(&self, topic: String) -> napi::Result<()> {
        self.inner.clone().unsubscribe(&topic).await.map_err(js_err)
    }

    /// Publishes; the message id arrives through `completions` under `ticket`.
    #[napi]
    pub fn publish(
        &self,
        completions: &Completions,
        ticket: i64,
        topic: String,
        payload: Either<Buffer, String>,
    ) {
        let agent = self.inner.clone();
        let payload = body(payload);
        completions.spawn(ticket, async move {
            match agent.publish(&topic, payload).await {
                Ok(id) => Done::Id(id),
                Err(e) => Done::Failed(e),
            }
        });
    }

    /// Publishes every payload to `topic`, queued in one step (written together); resolves to
    /// their ids in order. Nothing is sent when one is over the hub's frame limit.
    #[napi]
    pub async fn publish_many(
        &self,
        topic: String,
        payloads: Vec<Either<Buffer, String>>,
    ) -> napi::Result<Vec<i64>> {
        let bodies = payloads.into_iter().map(body).collect();
        let ids = self
            .inner
            .clone()
            .publish_many(&topic, bodies)
            .await
            .map_err(js_err)?;
        Ok(ids.into_iter().map(|id| id as i64).collect())
    }

    /// Resolves to `[task, duplicate]`.
    #[napi]
    pub async fn enqueue(
        &self,
        queue: String,
        payload: Either<Buffer, String>,
        timeout_ms: f64,
        producer_id: Option<String>,
    ) -> napi::Result<(i64, bool)> {
        let wait = seconds("timeoutMs", timeout_ms)?;
        let agent = self.inner.clone();
        let receipt = agent
            .enqueue(&queue, body(payload), producer_id.as_deref(), wait)
            .await
            .map_err(js_err)?;
        Ok((receipt.task as i64, receipt.duplicate))
    }

    /// Starts taking tasks from `queue`, `credit` at a time (0 stops); they arrive through `recv`
    /// as messages of kind `task`.
    #[napi]
    pub async fn consume(&self, queue: String, credit: u32) -> napi::Result<()> {
        self.inner
            .clone()
            .consume(&queue, credit)
            .await
            .map_err(js_err)
    }

    /// Takes no more tasks from `queue` (those held stay held until acked or nacked).
    #[napi]
    pub async fn stop_consuming(&self, queue: String) -> napi::Result<()> {
        self.inner
            .clone()
            .stop_consuming(&queue)
            .await
            .map_err(js_err)
    }

    /// Acknowledges task `task`: done, never delivered again.
    #[napi]
    pub async fn ack(&self, task: i64) -> napi::Result<()> {
        let task = task_id(task)?;
        self.inner.clone().ack(task).await.map_err(js_err)
    }

    /// Gives task `task` back, to be delivered again after `delayMs` milliseconds (0: at once;
    /// the queue's backoff when none).
    #[napi]
    pub async fn nack(&self, task: i64, delay_ms: Option<f64>) -> napi::Result<()> {
        let task = task_id(task)?;
        let delay = delay_ms
            .map(|ms| SdkAgent::delay(ms / 1000.0))
            .transpose()
            .map_err(js_err)?;
        self.inner.clone().nack(task, delay).await.map_err(js_err)
    }

    /// A queue's counts (`ready`, `in_flight`, `dead`, `consumers`, …) as JSON text.
    #[napi]
    pub async fn queue_stats(&self, queue: String, timeout_ms: f64) -> napi::Result<String> {
        let wait = seconds("timeoutMs", timeout_ms)?;
        self.inner
            .clone()
            .queue_stats(&queue, wait)
            .await
            .map_err(js_err)
    }

    /// The agent's counters (messages sent and received) and its connection's (RTT, bytes, lost
    /// packets), as JSON text.
    #[napi]
    pub fn stats_json(&self) -> String {
        self.inner.stats_json()
    }

    /// Why the connection ended, or none while it is open.
    #[napi]
    pub fn closed_reason(&self) -> Option<String> {
        self.inner.closed_reason()
    }

    /// Says goodbye to the hub and closes the connection.
    #[napi]
    pub async fn close(&self) {
        self.inner.clone().close().await
    }
}

fn task_id(task: i64) -> napi::Result<u64> {
    u64::try_from(task).map_err(|_| {
        js_err(SdkError::config(format!(
            "a task id is not negative: {task}"
        )))
    })
}

#[napi]
impl NativeMessage {
    /// The sender's id for it (for a queue task: the task id to ack or nack).
    #[napi(getter)]
    pub fn id(&self) -> i64 {
        self.inner.id as i64
    }
    /// The sending agent (`$hub` for the hub's own messages).
    #[napi(getter)]
    pub fn sender(&self) -> String {
        self.inner.sender.clone()
    }
    /// Where it was sent: `agent:ID`, `topic:NAME`, `queue:NAME` or `*`.
    #[napi(getter)]
    pub fn to(&self) -> String {
        self.inner.to.clone()
    }
    /// `request`, `response`, `event`, `task`, `error`, …
    #[napi(getter)]
    pub fn kind(&self) -> String {
        self.inner.kind.to_owned()
    }
    /// `critical`, `high`, `medium` or `low`.
    #[napi(getter)]
    pub fn priority(&self) -> String {
        self.inner.priority.to_owned()
    }
    /// For a response or an error: the id of the request it answers.
    #[napi(getter)]
    pub fn correlation(&self) -> Option<i64> {
        self.inner.correlation.map(|c| c as i64)
    }
    /// Its headers.
    #[napi(getter)]
    pub fn headers(&self) -> HashMap<String, String> {
        self.inner.headers.clone().into_iter().collect()
    }
    /// Its bytes (a copy).
    #[napi(getter)]
    pub fn body(&self) -> Buffer {
        Buffer::from(self.inner.body.to_vec())
    }
    /// For a queue task: its queue.
    #[napi(getter)]
    pub fn queue(&self) -> Option<String> {
        self.inner.queue.clone()
    }
    /// For a queue task: 1 for the first delivery, more for redeliveries.
    #[napi(getter)]
    pub fn attempt(&self) -> Option<u32> {
        self.inner.attempt
    }

    /// Answers this request; done (or the error) arrives through `completions`.
    #[napi]
    pub fn reply(&self, completions: &Completions, ticket: i64, payload: Either<Buffer, String>) {
        let (message, payload) = (self.inner.clone(), body(payload));
        completions.spawn(ticket, async move {
            match message.reply(payload).await {
                Ok(()) => Done::Unit,
                Err(e) => Done::Failed(e),
            }
        });
    }
}

#[cfg(feature = "hub")]
#[napi]
impl NativeHub {
    /// The addresses agents use, with the ports chosen.
    #[napi(getter)]
    pub fn urls(&self) -> Vec<String> {
        self.inner.urls.clone()
    }
    /// The CA certificate agents trust it with (PEM), when it made its own.
    #[napi(getter)]
    pub fn ca_pem(&self) -> Option<String> {
        self.inner.ca_pem.clone()
    }
    /// Its public-key pin (`sha256:HEX`), for `connect({ pin })`.
    #[napi(getter)]
    pub fn pin(&self) -> String {
        self.inner.pin.clone()
    }
    /// Agents connected now.
    #[napi]
    pub fn agent_count(&self) -> u32 {
        u32::try_from(self.inner.agent_count()).unwrap_or(u32::MAX)
    }
    /// Stops listening, closes every agent's connection and the queue store.
    #[napi]
    pub fn close(&self) {
        self.inner.close()
    }
}
