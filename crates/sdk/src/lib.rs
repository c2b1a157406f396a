//! What agentwire's language bindings share (`bindings/python`, PyO3; `bindings/node`,
//! napi-rs), so that both expose one behaviour and neither repeats the other.
//!
//! It owns: handing results back to the binding's host thread in batches
//! ([`CompletionQueue`]); turning a binding's plain options into [`agentwire::AgentOptions`]
//! ([`ConnectConfig`]); the one tokio runtime the bindings' futures run on ([`runtime`]); a
//! connected agent that many callers can use at once ([`SdkAgent`]), whose received messages
//! are plain data ([`Message`]); errors as a kind, a protocol code and a sentence
//! ([`SdkError`]); and a hub a binding's tests (or an application) can start in-process
//! ([`EmbeddedHub`]).
//!
//! It must not know Python or JavaScript: no PyO3, no napi types here. Everything it returns
//! is owned, `Send` and `'static`, so a binding can move it across its runtime boundary.

#![warn(missing_docs)]

mod agent;
mod completions;
mod config;
mod error;
#[cfg(feature = "hub")]
mod hub;
mod message;

pub use agent::SdkAgent;
pub use completions::CompletionQueue;
pub use config::ConnectConfig;
pub use error::{ErrorKind, SdkError};
#[cfg(feature = "hub")]
pub use hub::{EmbeddedHub, HubConfigSpec};
pub use message::Message;

use std::sync::OnceLock;

/// The runtime every binding's future runs on: multi-threaded, one worker per CPU up to
/// four, started on first use and kept for the life of the process (an interpreter that
/// exits takes it down with it). `Err` if the system would not give it threads.
///
/// ```
/// let answer = agentwire_sdk::runtime()?.block_on(async { 6 * 7 });
/// assert_eq!(answer, 42);
/// # Ok::<(), agentwire_sdk::SdkError>(())
/// ```
pub fn runtime() -> Result<&'static tokio::runtime::Runtime, SdkError> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    let built = RUNTIME.get_or_init(|| {
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .clamp(1, 4);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("agentwire")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });
    built.as_ref().map_err(|e| {
        SdkError::new(
            ErrorKind::Internal,
            format!("cannot start the runtime: {e}"),
        )
    })
}
