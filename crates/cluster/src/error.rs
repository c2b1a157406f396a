//! Why a hub could not join its cluster ([`ClusterError`]).
//!
//! This module owns the error type only; it must not decide whether a failure is fatal (the
//! hub's `--cluster-optional` does).

use std::time::Duration;

/// Why a hub could not join its cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// A setting is unusable (a name with characters NATS subjects cannot hold, no server).
    #[error("invalid cluster setting: {0}")]
    Config(String),
    /// NATS did not answer in time.
    #[error("cannot reach NATS at {servers}: no answer within {timeout:?}")]
    ConnectTimeout {
        /// The servers tried.
        servers: String,
        /// The time allowed.
        timeout: Duration,
    },
    /// NATS could not be reached.
    #[error("cannot reach NATS at {servers}")]
    Connect {
        /// The servers tried.
        servers: String,
        /// Why.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The credentials file cannot be used.
    #[error("cannot use the NATS credentials file {path}")]
    Credentials {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The queues cannot be kept in JetStream (not enabled on the NATS servers, or the
    /// stream cannot be made or read).
    #[error("cannot keep the work queues in JetStream (does nats-server run with -js?)")]
    Queues(#[source] agentwire_queue::StoreError),
    /// The lease that names the hub keeping the queues cannot be made.
    #[error("cannot make the queue owner's lease in JetStream: {0}")]
    Lease(String),
    /// NATS refused a subscription.
    #[error("cannot subscribe to {subject}")]
    Subscribe {
        /// The subject.
        subject: String,
        /// Why.
        #[source]
        source: async_nats::SubscribeError,
    },
}
