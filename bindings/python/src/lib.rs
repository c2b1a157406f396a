//! The native half of the `agentwire` Python package (`agentwire._agentwire`): thin PyO3
//! wrappers over `agentwire-sdk`.
//!
//! Every call that waits takes a [`Completions`] (one per asyncio event loop) and a ticket,
//! starts its work on the SDK's tokio runtime and returns at once; the result lands in the
//! completion queue, and the Python side (`agentwire._Dispatcher`), woken through a socket
//! the loop watches, settles its futures with everything that finished. So no runtime thread
//! ever takes the interpreter lock, and a call still running when the interpreter exits
//! touches nothing of Python's.
//!
//! This module owns only the crossing between Python and Rust: argument conversion, the
//! completion queue, and turning [`SdkError`]s into the exception classes of
//! `agentwire/errors.py`. The idiomatic API (keyword arguments, `async for`, `async with`,
//! type hints) is the pure-Python layer in `python/agentwire/__init__.py`. Nothing here may
//! panic on a caller's input.

#![warn(missing_docs)]

use agentwire_sync::LockExt;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agentwire_sdk::{CompletionQueue, ConnectConfig, SdkAgent, SdkError};
#[cfg(feature = "hub")]
use agentwire_sdk::{EmbeddedHub, HubConfigSpec};
use bytes::Bytes;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `err` as an instance of the exception class its kind names in `agentwire.errors`.
fn py_err(err: SdkError) -> PyErr {
    Python::attach(|py| {
        let class = py
            .import("agentwire.errors")
            .and_then(|m| m.getattr(err.kind.class_name()));
        match class.and_then(|c| c.call1((err.message.clone(), err.code_number(), err.code_name())))
        {
            Ok(value) => PyErr::from_value(value),
            Err(_) => PyRuntimeError::new_err(err.message),
        }
    })
}

fn timeout(seconds: f64) -> PyResult<std::time::Duration> {
    SdkAgent::timeout(seconds).map_err(py_err)
}

/// What a finished call hands back.
enum Done {
    Unit,
    Id(u64),
    Ids(Vec<u64>),
    Text(String),
    Receipt(u64, bool),
    Message(agentwire_sdk::Message),
    MaybeMessage(Option<agentwire_sdk::Message>),
    Agent(SdkAgent),
    #[cfg(feature = "hub")]
    Hub(EmbeddedHub),
    Failed(SdkError),
}

impl<T: Into<Done>> From<Result<T, SdkError>> for Done {
    fn from(r: Result<T, SdkError>) -> Done {
        match r {
            Ok(v) => v.into(),
            Err(e) => Done::Failed(e),
        }
    }
}

impl From<()> for Done {
    fn from(_: ()) -> Done {
        Done::Unit
    }
}

impl From<u64> for Done {
    fn from(id: u64) -> Done {
        Done::Id(id)
    }
}

impl From<Vec<u64>> for Done {
    fn from(ids: Vec<u64>) -> Done {
        Done::Ids(ids)
    }
}

impl From<String> for Done {
    fn from(text: String) -> Done {
        Done::Text(text)
    }
}

/// One event loop's calls in flight (see `agentwire_sdk::CompletionQueue`): the Python side
/// watches `fd` with `loop.add_reader` and calls `take` when it is readable.
#[pyclass(module = "agentwire._agentwire", frozen)]
struct Completions {
    queue: Arc<CompletionQueue<Done>>,
    reader: UnixStream,
    /// Calls that can be cancelled (recv), by ticket.
    running: Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>>,
}

impl Completions {
    /// Runs `work` on the runtime; its result is handed back under `ticket`.
    fn spawn<F, T>(&self, ticket: u64, work: F) -> PyResult<()>
    where
        F: Future<Output = T> + Send + 'static,
        T: Into<Done>,
    {
        let rt = agentwire_sdk::runtime().map_err(py_err)?;
        let queue = self.queue.clone();
        rt.spawn(async move {
            let done = work.await.into();
            queue.complete(ticket, done);
        });
        Ok(())
    }

    /// [`spawn`](Self::spawn) for work that [`cancel`](Completions::cancel) may stop.
    fn spawn_cancellable<F, T>(&self, ticket: u64, work: F) -> PyResult<()>
    where
        F: Future<Output = T> + Send + 'static,
        T: Into<Done>,
    {
        let rt = agentwire_sdk::runtime().map_err(py_err)?;
        let (queue, running) = (self.queue.clone(), self.running.clone());
        // Held while spawning, so that a task finishing at once removes its entry only after
        // it was inserted.
        let mut table = running.lock_or_recover();
        let task = rt.spawn({
            let running = running.clone();
            async move {
                let done = work.await.into();
                running.lock_or_recover().remove(&ticket);
                queue.complete(ticket, done);
            }
        });
        table.insert(ticket, task.abort_handle());
        Ok(())
    }
}

#[pymethods]
impl Completions {
    #[new]
    fn new() -> PyResult<Self> {
        agentwire_sdk::runtime().map_err(py_err)?;
        let (reader, writer) = UnixStream::pair()
            .and_then(|(r, w)| {
                r.set_nonblocking(true)?;
                w.set_nonblocking(true)?;
                Ok((r, w))
            })
            .map_err(|e| PyRuntimeError::new_err(format!("cannot make a wake-up socket: {e}")))?;
        // A full socket already holds a wake-up: a failed write loses nothing.
        let queue = CompletionQueue::new(move || {
            let _ = (&writer).write(&[1]);
        });
        Ok(Completions {
            queue: Arc::new(queue),
            reader,
            running: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    /// The file descriptor that becomes readable when results are waiting.
    #[getter]
    fn fd(&self) -> i32 {
        self.reader.as_raw_fd()
    }

    /// Every finished call as `(ticket, ok, value)`: `value` is the result, or the exception
    /// when `ok` is false.
    fn take(&self, py: Python<'_>) -> PyResult<Vec<(u64, bool, Py<PyAny>)>> {
        let mut sink = [0u8; 256];
        while matches!((&self.reader).read(&mut sink), Ok(n) if n > 0) {}
        let mut out = Vec::new();
        for (ticket, done) in self.queue.take() {
            let (ok, value) = match done {
                Done::Unit | Done::MaybeMessage(None) => (true, py.None()),
                Done::Id(id) => (true, id.into_pyobject(py)?.into_any().unbind()),
                Done::Ids(ids) => (true, ids.into_pyobject(py)?.into_any().unbind()),
                Done::Text(text) => (true, text.into_pyobject(py)?.into_any().unbind()),
                Done::Receipt(task, duplicate) => (
                    true,
                    (task, duplicate).into_pyobject(py)?.into_any().unbind(),
                ),
                Done::Message(m) | Done::MaybeMessage(Some(m)) => (true, message(py, m)?),
                Done::Agent(a) => {
                    let agent = NativeAgent { inner: Arc::new(a) };
                    (true, Py::new(py, agent)?.into_any())
                }
                #[cfg(feature = "hub")]
                Done::Hub(h) => {
                    let hub = NativeHub { inner: Arc::new(h) };
                    (true, Py::new(py, hub)?.into_any())
                }
                Done::Failed(e) => (false, py_err(e).into_value(py).into_any()),
            };
            out.push((ticket, ok, value));
        }
        Ok(out)
    }

    /// Stops call `ticket` if it is still running (a cancelled `recv`).
    fn cancel(&self, ticket: u64) {
        let task = self.running.lock_or_recover().remove(&ticket);
        if let Some(task) = task {
            task.abort();
        }
    }

    /// Connects an agent; the result is a `NativeAgent`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (ticket, hubs, id, ca=None, ca_pem=None, pin=None, insecure=false,
        token=None, cert=None, key=None, role=None, server_name=None, connect_timeout=None,
        fallback_timeout=None, codecs=Vec::new()))]
    fn connect(
        &self,
        ticket: u64,
        hubs: Vec<String>,
        id: String,
        ca: Option<PathBuf>,
        ca_pem: Option<String>,
        pin: Option<String>,
        insecure: bool,
        token: Option<String>,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        role: Option<String>,
        server_name: Option<String>,
        connect_timeout: Option<f64>,
        fallback_timeout: Option<f64>,
        codecs: Vec<String>,
    ) -> PyResult<()> {
        let config = ConnectConfig {
            hubs,
            id,
            ca,
            ca_pem,
            pin,
            insecure,
            token,
            cert,
            key,
            role,
            server_name,
            connect_timeout: connect_timeout.map(timeout).transpose()?,
            fallback_timeout: fallback_timeout.map(timeout).transpose()?,
            codecs,
        };
        self.spawn(ticket, async move {
            match SdkAgent::connect(config).await {
                Ok(agent) => Done::Agent(agent),
                Err(e) => Done::Failed(e),
            }
        })
    }

    /// Starts a hub in this process; the result is a `NativeHub`. A build without the `hub`
    /// feature (the agent API alone) raises instead.
    #[cfg(feature = "hub")]
    #[pyo3(signature = (ticket, listen, cert_dir=None, token=None, store=None))]
    fn start_hub(
        &self,
        ticket: u64,
        listen: Vec<String>,
        cert_dir: Option<PathBuf>,
        token: Option<String>,
        store: Option<PathBuf>,
    ) -> PyResult<()> {
        let spec = HubConfigSpec {
            listen,
            cert_dir,
            token,
            store,
        };
        self.spawn(ticket, async move {
            match EmbeddedHub::start(spec).await {
                Ok(hub) => Done::Hub(hub),
                Err(e) => Done::Failed(e),
            }
        })
    }

    /// This build has no embedded hub: raises (see the `hub` feature).
    #[cfg(not(feature = "hub"))]
    #[pyo3(signature = (ticket, listen, cert_dir=None, token=None, store=None))]
    fn start_hub(
        &self,
        ticket: u64,
        listen: Vec<String>,
        cert_dir: Option<PathBuf>,
        token: Option<String>,
        store: Option<PathBuf>,
    ) -> PyResult<()> {
        let _ = (ticket, listen, cert_dir, token, store);
        Err(PyRuntimeError::new_err(NO_HUB))
    }
}

/// What `start_hub` says in a build without the `hub` feature.
#[cfg(not(feature = "hub"))]
const NO_HUB: &str = "this agentwire extension was built without the embedded hub (cargo feature \"hub\"); run a hub with `agentwire hub` and connect to it, or build with the feature";

fn message(py: Python<'_>, m: agentwire_sdk::Message) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, NativeMessage { inner: Arc::new(m) })?.into_any())
}

fn headers(pairs: Option<BTreeMap<String, String>>) -> Vec<(String, String)> {
    pairs.map(|h| h.into_iter().collect()).unwrap_or_default()
}

/// A connected agent (use `agentwire.connect`, which wraps it).
#[pyclass(module = "agentwire._agentwire", frozen)]
struct NativeAgent {
    inner: Arc<SdkAgent>,
}

/// A received message (see `agentwire.Message`).
#[pyclass(module = "agentwire._agentwire", frozen)]
struct NativeMessage {
    inner: Arc<agentwire_sdk::Message>,
}

/// A hub running in this process (see `agentwire.Hub`).
#[cfg(feature = "hub")]
#[pyclass(module = "agentwire._agentwire", frozen)]
struct NativeHub {
    inner: Arc<EmbeddedHub>,
}

#[pymethods]
impl NativeAgent {
    #[getter]
    fn id(&self) -> String {
        self.inner.id().to_owned()
    }

    #[getter]
    fn transport(&self) -> &'static str {
        self.inner.transport()
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (completions, ticket, to, body, kind, priority, headers=None))]
    fn send(
        &self,
        completions: &Completions,
        ticket: u64,
        to: String,
        body: &[u8],
        kind: String,
        priority: String,
        headers: Option<BTreeMap<String, String>>,
    ) -> PyResult<()> {
        let (agent, body, headers) = (
            self.inner.clone(),
            Bytes::copy_from_slice(body),
            self::headers(headers),
        );
        completions.spawn(ticket, async move {
            agent.send(&to, body, &kind, &priority, headers).await
        })
    }

    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (completions, ticket, to, body, timeout, priority, headers=None))]
    fn request(
        &self,
        completions: &Completions,
        ticket: u64,
        to: String,
        body: &[u8],
        timeout: f64,
        priority: String,
        headers: Option<BTreeMap<String, String>>,
    ) -> PyResult<()> {
        let wait = self::timeout(timeout)?;
        let (agent, body, headers) = (
            self.inner.clone(),
            Bytes::copy_from_slice(body),
            self::headers(headers),
        );
        completions.spawn(ticket, async move {
            match agent.request(&to, body, wait, &priority, headers).await {
                Ok(answer) => Done::Message(answer),
                Err(e) => Done::Failed(e),
            }
        })
    }

    fn recv(&self, completions: &Completions, ticket: u64) -> PyResult<()> {
        let agent = self.inner.clone();
        completions.spawn_cancellable(
            ticket,
            async move { Done::MaybeMessage(agent.recv().await) },
        )
    }

    /// Gives back a message `recv` delivered to a cancelled caller.
    fn unrecv(&self, message: &NativeMessage) {
        self.inner.unrecv((*message.inner).clone());
    }

    fn subscribe(&self, completions: &Completions, ticket: u64, topic: String) -> PyResult<()> {
        let agent = self.inner.clone();
        completions.spawn(ticket, async move { agent.subscribe(&topic).await })
    }

    fn unsubscribe(&self, completions: &Completions, ticket: u64, topic: String) -> PyResult<()> {
        let agent = self.inner.clone();
        completions.spawn(ticket, async move { agent.unsubscribe(&topic).await })
    }

    fn publish(
        &self,
        completions: &Completions,
        ticket: u64,
        topic: String,
        body: &[u8],
    ) -> PyResult<()> {
        let (agent, body) = (self.inner.clone(), Bytes::copy_from_slice(body));
        completions.spawn(ticket, async move { agent.publish(&topic, body).await })
    }

    fn publish_many(
        &self,
        completions: &Completions,
        ticket: u64,
        topic: String,
        bodies: Vec<Vec<u8>>,
    ) -> PyResult<()> {
        let agent = self.inner.clone();
        let bodies = bodies.into_iter().map(Bytes::from).collect();
        completions.spawn(
            ticket,
            async move { agent.publish_many(&topic, bodies).await },
        )
    }

    #[pyo3(signature = (completions, ticket, queue, body, timeout, producer_id=None))]
    fn enqueue(
        &self,
        completions: &Completions,
        ticket: u64,
        queue: String,
        body: &[u8],
        timeout: f64,
        producer_id: Option<String>,
    ) -> PyResult<()> {
        let wait = self::timeout(timeout)?;
        let (agent, body) = (self.inner.clone(), Bytes::copy_from_slice(body));
        completions.spawn(ticket, async move {
            match agent
                .enqueue(&queue, body, producer_id.as_deref(), wait)
                .await
            {
                Ok(receipt) => Done::Receipt(receipt.task, receipt.duplicate),
                Err(e) => Done::Failed(e),
            }
        })
    }

    fn consume(
        &self,
        completions: &Completions,
        ticket: u64,
        queue: String,
        credit: u32,
    ) -> PyResult<()> {
        let agent = self.inner.clone();
        completions.spawn(ticket, async move { agent.consume(&queue, credit).await })
    }

    fn stop_consuming(
        &self,
        completions: &Completions,
        ticket: u64,
        queue: String,
    ) -> PyResult<()> {
        let agent = self.inner.clone();
        completions.spawn(ticket, async move { agent.stop_consuming(&queue).await })
    }

    fn ack(&self, completions: &Completions, ticket: u64, task: u64) -> PyResult<()> {
        let agent = self.inner.clone();
        completions.spawn(ticket, async move { agent.ack(task).await })
    }

    #[pyo3(signature = (completions, ticket, task, delay=None))]
    fn nack(
        &self,
        completions: &Completions,
        ticket: u64,
        task: u64,
        delay: Option<f64>,
    ) -> PyResult<()> {
        let delay = delay.map(SdkAgent::delay).transpose().map_err(py_err)?;
        let agent = self.inner.clone();
        completions.spawn(ticket, async move { agent.nack(task, delay).await })
    }

    fn queue_stats(
        &self,
        completions: &Completions,
        ticket: u64,
        queue: String,
        timeout: f64,
    ) -> PyResult<()> {
        let wait = self::timeout(timeout)?;
        let agent = self.inner.clone();
        completions.spawn(ticket, async move { agent.queue_stats(&queue, wait).await })
    }

    fn stats_json(&self) -> String {
        self.inner.stats_json()
    }

    fn closed_reason(&self) -> Option<String> {
        self.inner.closed_reason()
    }

    fn close(&self, completions: &Completions, ticket: u64) -> PyResult<()> {
        let agent = self.inner.clone();
        completions.spawn(ticket, async move { agent.close().await })
    }
}

#[pymethods]
impl NativeMessage {
    #[getter]
    fn id(&self) -> u64 {
        self.inner.id
    }
    #[getter]
    fn sender(&self) -> String {
        self.inner.sender.clone()
    }
    #[getter]
    fn to(&self) -> String {
        self.inner.to.clone()
    }
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind
    }
    #[getter]
    fn priority(&self) -> &'static str {
        self.inner.priority
    }
    #[getter]
    fn correlation(&self) -> Option<u64> {
        self.inner.correlation
    }
    #[getter]
    fn headers(&self) -> BTreeMap<String, String> {
        self.inner.headers.clone()
    }
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.body)
    }
    #[getter]
    fn queue(&self) -> Option<String> {
        self.inner.queue.clone()
    }
    #[getter]
    fn attempt(&self) -> Option<u32> {
        self.inner.attempt
    }

    fn reply(&self, completions: &Completions, ticket: u64, body: &[u8]) -> PyResult<()> {
        let (message, body) = (self.inner.clone(), Bytes::copy_from_slice(body));
        completions.spawn(ticket, async move { message.reply(body).await })
    }
}

#[cfg(feature = "hub")]
#[pymethods]
impl NativeHub {
    #[getter]
    fn urls(&self) -> Vec<String> {
        self.inner.urls.clone()
    }
    #[getter]
    fn ca_pem(&self) -> Option<String> {
        self.inner.ca_pem.clone()
    }
    #[getter]
    fn pin(&self) -> String {
        self.inner.pin.clone()
    }
    fn agent_count(&self) -> usize {
        self.inner.agent_count()
    }
    fn close(&self) {
        self.inner.close()
    }
}

#[pymodule]
fn _agentwire(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Completions>()?;
    m.add_class::<NativeAgent>()?;
    m.add_class::<NativeMessage>()?;
    #[cfg(feature = "hub")]
    m.add_class::<NativeHub>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
