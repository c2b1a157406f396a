//! The native half of the `agentwire` Python package (`agentwire._agentwire`): thin PyO3
//! wrappers over `agentwire-sdk`, each call returning an asyncio awaitable that runs on the
//! SDK's tokio runtime.
//!
//! It owns only the crossing between Python and Rust: argument conversion, awaitables, and
//! turning [`SdkError`]s into the exception classes of `agentwire/errors.py`. The idiomatic
//! API (keyword arguments, `async for`, `async with`, type hints) is the pure-Python layer in
//! `python/agentwire/__init__.py`. Nothing here may panic on a caller's input.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use agentwire_sdk::{ConnectConfig, EmbeddedHub, HubConfigSpec, SdkAgent, SdkError};
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

    #[pyo3(signature = (to, body, kind, priority, headers=None))]
    fn send<'py>(
        &self,
        py: Python<'py>,
        to: String,
        body: &[u8],
        kind: String,
        priority: String,
        headers: Option<BTreeMap<String, String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (agent, body, headers) = (
            self.inner.clone(),
            Bytes::copy_from_slice(body),
            self::headers(headers),
        );
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            agent
                .send(&to, body, &kind, &priority, headers)
                .await
                .map_err(py_err)
        })
    }

    #[pyo3(signature = (to, body, timeout, priority, headers=None))]
    fn request<'py>(
        &self,
        py: Python<'py>,
        to: String,
        body: &[u8],
        timeout: f64,
        priority: String,
        headers: Option<BTreeMap<String, String>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let wait = self::timeout(timeout)?;
        let (agent, body, headers) = (
            self.inner.clone(),
            Bytes::copy_from_slice(body),
            self::headers(headers),
        );
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let answer = agent
                .request(&to, body, wait, &priority, headers)
                .await
                .map_err(py_err)?;
            Ok(NativeMessage {
                inner: Arc::new(answer),
            })
        })
    }

    fn recv<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let agent = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            Ok(agent
                .recv()
                .await
                .map(|m| NativeMessage { inner: Arc::new(m) }))
        })
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

    fn publish<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        body: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        let (agent, body) = (self.inner.clone(), Bytes::copy_from_slice(body));
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            agent.publish(&topic, body).await.map_err(py_err)
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

    fn reply<'py>(&self, py: Python<'py>, body: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        let (message, body) = (self.inner.clone(), Bytes::copy_from_slice(body));
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            message.reply(body).await.map_err(py_err)
        })
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
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
