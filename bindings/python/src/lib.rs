//! The native half of the `agentwire` Python package (`agentwire._agentwire`): thin PyO3
//! wrappers over `agentwire-sdk`, each call returning an asyncio awaitable that runs on the
//! SDK's tokio runtime.
//!
//! It owns only the crossing between Python and Rust: argument conversion, awaitables, and
//! turning [`SdkError`]s into the exception classes of `agentwire/errors.py`. The idiomatic
//! API (keyword arguments, `async for`, `async with`, type hints) is the pure-Python layer in
//! `python/agentwire/__init__.py`. Nothing here may panic on a caller's input.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use agentwire_sdk::{
    CompletionQueue, ConnectConfig, EmbeddedHub, HubConfigSpec, SdkAgent, SdkError,
};
use bytes::Bytes;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Raises `err` as the exception class its kind names in `agentwire.errors`.
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

fn runtime_ready() -> PyResult<()> {
    static READY: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    READY
        .get_or_init(|| match agentwire_sdk::runtime() {
            Ok(rt) => {
                // Already set (a second import of the module): the same runtime is in place.
                let _ = pyo3_async_runtimes::tokio::init_with_runtime(rt);
                Ok(())
            }
            Err(e) => Err(e.message),
        })
        .clone()
        .map_err(PyRuntimeError::new_err)
}

fn timeout(seconds: f64) -> PyResult<std::time::Duration> {
    SdkAgent::timeout(seconds).map_err(py_err)
}

/// What a finished hot-path call hands back.
enum Done {
    Unit,
    Id(u64),
    Message(agentwire_sdk::Message),
    MaybeMessage(Option<agentwire_sdk::Message>),
    Failed(SdkError),
}

impl<E: Into<SdkError>> From<Result<(), E>> for Done {
    fn from(r: Result<(), E>) -> Done {
        match r {
            Ok(()) => Done::Unit,
            Err(e) => Done::Failed(e.into()),
        }
    }
}

/// One event loop's results in waiting (see `agentwire_sdk::CompletionQueue`): the Python
/// side watches `fd` with `loop.add_reader` and calls `take` when it is readable. Calls on the
/// hot path (request, send, publish, recv, reply) finish here instead of each taking the
/// interpreter lock from a runtime thread.
#[pyclass(module = "agentwire._agentwire", frozen)]
struct Completions {
    queue: Arc<CompletionQueue<Done>>,
    reader: UnixStream,
    /// Calls that can be cancelled (recv), by ticket.
    running: Arc<Mutex<HashMap<u64, tokio::task::AbortHandle>>>,
}

impl Completions {
    fn spawn<F>(&self, ticket: u64, work: F) -> PyResult<()>
    where
        F: std::future::Future<Output = Done> + Send + 'static,
    {
        let rt = agentwire_sdk::runtime().map_err(py_err)?;
        let queue = self.queue.clone();
        rt.spawn(async move {
            let done = work.await;
            queue.complete(ticket, done);
        });
        Ok(())
    }

    fn spawn_cancellable<F>(&self, ticket: u64, work: F) -> PyResult<()>
    where
        F: std::future::Future<Output = Done> + Send + 'static,
    {
        let rt = agentwire_sdk::runtime().map_err(py_err)?;
        let (queue, running) = (self.queue.clone(), self.running.clone());
        // Held while spawning, so that a task finishing at once removes its entry only after
        // it was inserted.
        let mut table = running.lock().unwrap_or_else(PoisonError::into_inner);
        let task = rt.spawn({
            let running = running.clone();
            async move {
                let done = work.await;
                running
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&ticket);
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
        runtime_ready()?;
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
                Done::Message(m) | Done::MaybeMessage(Some(m)) => (true, message(py, m)?),
                Done::Failed(e) => (false, py_err(e).into_value(py).into_any()),
            };
            out.push((ticket, ok, value));
        }
        Ok(out)
    }

    /// Stops call `ticket` if it is still running (a cancelled `recv`).
    fn cancel(&self, ticket: u64) {
        let task = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&ticket);
        if let Some(task) = task {
            task.abort();
        }
    }
}

fn message(py: Python<'_>, m: agentwire_sdk::Message) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, NativeMessage { inner: Arc::new(m) })?.into_any())
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
#[pyclass(module = "agentwire._agentwire", frozen)]
struct NativeHub {
    inner: Arc<EmbeddedHub>,
}

#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (hubs, id, ca=None, ca_pem=None, pin=None, insecure=false, token=None,
    cert=None, key=None, role=None, server_name=None, connect_timeout=None,
    fallback_timeout=None, codecs=Vec::new()))]
fn connect<'py>(
    py: Python<'py>,
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
) -> PyResult<Bound<'py, PyAny>> {
    runtime_ready()?;
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
    pyo3_async_runtimes::tokio::future_into_py(py, async move {
        let agent = SdkAgent::connect(config).await.map_err(py_err)?;
        Ok(NativeAgent {
            inner: Arc::new(agent),
        })
    })
}

#[pyfunction]
#[pyo3(signature = (listen, cert_dir=None, token=None, store=None))]
fn start_hub<'py>(
    py: Python<'py>,
    listen: Vec<String>,
    cert_dir: Option<PathBuf>,
    token: Option<String>,
    store: Option<PathBuf>,
) -> PyResult<Bound<'py, PyAny>> {
    runtime_ready()?;
    let spec = HubConfigSpec {
        listen,
        cert_dir,
        token,
        store,
    };
    pyo3_async_runtimes::tokio::future_into_py(py, async move {
        let hub = EmbeddedHub::start(spec).await.map_err(py_err)?;
        Ok(NativeHub {
            inner: Arc::new(hub),
        })
    })
}

fn headers(pairs: Option<BTreeMap<String, String>>) -> Vec<(String, String)> {
    pairs.map(|h| h.into_iter().collect()).unwrap_or_default()
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
            match agent.send(&to, body, &kind, &priority, headers).await {
                Ok(id) => Done::Id(id),
                Err(e) => Done::Failed(e),
            }
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

    fn subscribe<'py>(&self, py: Python<'py>, topic: String) -> PyResult<Bound<'py, PyAny>> {
        let agent = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            agent.subscribe(&topic).await.map_err(py_err)
        })
    }

    fn unsubscribe<'py>(&self, py: Python<'py>, topic: String) -> PyResult<Bound<'py, PyAny>> {
        let agent = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            agent.unsubscribe(&topic).await.map_err(py_err)
        })
    }

    fn publish(
        &self,
        completions: &Completions,
        ticket: u64,
        topic: String,
        body: &[u8],
    ) -> PyResult<()> {
        let (agent, body) = (self.inner.clone(), Bytes::copy_from_slice(body));
        completions.spawn(ticket, async move {
            match agent.publish(&topic, body).await {
                Ok(id) => Done::Id(id),
                Err(e) => Done::Failed(e),
            }
        })
    }

    #[pyo3(signature = (queue, body, timeout, producer_id=None))]
    fn enqueue<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        body: &[u8],
        timeout: f64,
        producer_id: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let wait = self::timeout(timeout)?;
        let (agent, body) = (self.inner.clone(), Bytes::copy_from_slice(body));
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let receipt = agent
                .enqueue(&queue, body, producer_id.as_deref(), wait)
                .await
                .map_err(py_err)?;
            Ok((receipt.task, receipt.duplicate))
        })
    }

    fn consume<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        credit: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let agent = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            agent.consume(&queue, credit).await.map_err(py_err)
        })
    }

    fn ack<'py>(&self, py: Python<'py>, task: u64) -> PyResult<Bound<'py, PyAny>> {
        let agent = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            agent.ack(task).await.map_err(py_err)
        })
    }

    #[pyo3(signature = (task, delay=None))]
    fn nack<'py>(
        &self,
        py: Python<'py>,
        task: u64,
        delay: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let delay = delay.map(SdkAgent::delay).transpose().map_err(py_err)?;
        let agent = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            agent.nack(task, delay).await.map_err(py_err)
        })
    }

    fn queue_stats<'py>(
        &self,
        py: Python<'py>,
        queue: String,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let wait = self::timeout(timeout)?;
        let agent = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            agent.queue_stats(&queue, wait).await.map_err(py_err)
        })
    }

    fn stats_json(&self) -> String {
        self.inner.stats_json()
    }

    fn closed_reason(&self) -> Option<String> {
        self.inner.closed_reason()
    }

    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let agent = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            agent.close().await;
            Ok(())
        })
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
        completions.spawn(ticket, async move { message.reply(body).await.into() })
    }
}

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
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(start_hub, m)?)?;
    m.add_class::<NativeAgent>()?;
    m.add_class::<NativeMessage>()?;
    m.add_class::<NativeHub>()?;
    m.add_class::<Completions>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
