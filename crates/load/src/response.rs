//! What one request gives back, over any protocol: the [`Response`] (status and body size)
//! or why there is none ([`GetError`]), and the checks every client applies to a body.
//!
//! This module owns the shared result types; it must not send anything.

use std::time::Instant;

use http::header::CONTENT_LENGTH;
use http::HeaderMap;

use crate::report::{ErrorKind, LoadError};

/// A complete response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Response {
    pub status: u16,
    pub body_bytes: u64,
    /// When the response's headers arrived.
    pub first_byte: Instant,
}

/// Why a request got no (complete) response.
#[derive(Debug)]
pub(crate) enum GetError {
    /// The server cannot have processed it; it may be sent again elsewhere.
    NotSent(LoadError),
    /// It failed: count it.
    Failed(LoadError),
}

pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.trim().parse().ok())
}

/// Compares the body's length with the announced one.
pub(crate) fn check_size(received: u64, announced: Option<u64>) -> Result<(), LoadError> {
    match announced {
        Some(want) if want != received => Err(LoadError::new(
            ErrorKind::WrongSize,
            format!("received {received} body bytes, Content-Length said {want}"),
        )),
        _ => Ok(()),
    }
}

/// A body that broke off before Content-Length was reached is a wrong size; any other
/// failure keeps its own kind.
pub(crate) fn body_error(err: LoadError, received: u64, announced: Option<u64>) -> LoadError {
    match announced {
        Some(want)
            if received < want
                && matches!(
                    err.kind,
                    ErrorKind::Closed | ErrorKind::Protocol | ErrorKind::Other
                ) =>
        {
            LoadError::new(
                ErrorKind::WrongSize,
                format!(
                    "the body ended after {received} of {want} bytes (Content-Length): {}",
                    err.message
                ),
            )
        }
        _ => err,
    }
}

pub(crate) fn io_kind(io: &std::io::Error) -> ErrorKind {
    use std::io::ErrorKind as K;
    match io.kind() {
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => ErrorKind::Reset,
        K::TimedOut => ErrorKind::Timeout,
        _ => ErrorKind::Closed,
    }
}
