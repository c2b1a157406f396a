//! Hub observability: Prometheus/OpenMetrics metrics and the `/metrics` HTTP endpoint.
//!
//! # What this module owns
//!
//! * [`HubMetrics`], a cheaply clonable handle holding one
//!   [`prometheus_client`] [`Registry`] (prefix `agentwire_hub`) and the handles of
//!   every hub metric: connections, handshakes, agents, messages and bytes,
//!   errors, drops, queue depth, request latency and QUIC 0-RTT outcomes.
//! * [`serve_metrics`] / [`spawn_metrics_server`], a tiny HTTP/1.1 server
//!   (hyper 1) that exposes the registry as OpenMetrics text on `GET /metrics`.
//!
//! # What it must not do
//!
//! * No routing, no agent bookkeeping and no I/O other than the `/metrics`
//!   endpoint: the hub calls the recording methods, this module only counts.
//! * No dependency on the protocol crate: message kinds, priorities and error
//!   codes arrive as `&'static str` names (`kind.name()`, `priority.name()`,
//!   `code.name()`).
//! * No per-agent (or other unbounded) labels: a hub may serve thousands of
//!   agents and every label combination is a time series that lives forever.
//!   Label values are `&'static str`, so they come from a small, fixed set.
//! * No lock, blocking or allocation on the hot path: the hub records messages
//!   through [`MessageTable`]s resolved once (two atomic adds), and request
//!   latency in a histogram of atomic buckets. Other recording methods are an
//!   atomic add after a read-locked hash lookup inside [`Family`]. The registry
//!   mutex is taken only by [`HubMetrics::encode`] and
//!   [`HubMetrics::register_with`], never by a recording method.
//! * No panics on network input: the HTTP server answers every request with a
//!   status and logs connection errors through `tracing`.

use agentwire_sync::LockExt;
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::exponential_buckets;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Canonical `transport` label values; pass these to the connection, handshake
/// and agent methods so every call site spells a transport the same way.
pub mod transport {
    /// QUIC (the primary transport).
    pub const QUIC: &str = "quic";
    /// HTTP/2.
    pub const HTTP2: &str = "http2";
    /// WebSocket.
    pub const WEBSOCKET: &str = "websocket";
    /// Unix domain socket.
    pub const UNIX: &str = "unix";
}

/// Canonical `outcome` label values for [`HubMetrics::handshake`].
pub mod outcome {
    /// The peer completed the handshake and was admitted.
    pub const ACCEPTED: &str = "accepted";
    /// The hub refused the peer (authentication, policy, version, capacity).
    pub const REJECTED: &str = "rejected";
    /// The handshake did not complete (I/O error, timeout, malformed frame).
    pub const FAILED: &str = "failed";
}

/// Message direction label values used in `messages_total` / `message_bytes_total`.
pub mod direction {
    /// Received by the hub from an agent.
    pub const IN: &str = "in";
    /// Sent by the hub to an agent.
    pub const OUT: &str = "out";
}

mod histogram;
pub use histogram::*;
mod registry;
pub use registry::*;
mod server;
pub use server::*;

/// Prefix of every metric registered by [`HubMetrics::new`].
pub const METRIC_PREFIX: &str = "agentwire_hub";

/// Content type of the `/metrics` response (OpenMetrics text format 1.0.0).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests;
