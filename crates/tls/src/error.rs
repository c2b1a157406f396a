//! Errors: what went wrong loading, generating or configuring TLS material, naming the file.
//!
//! This module owns [`TlsError`] and the helpers that build it; it must not decide what a
//! caller does about an error.

use super::*;

pub(crate) const INLINE_PEM: &str = "<inline PEM>";

/// Errors from loading, generating or configuring TLS material.
///
/// Every message names the file (where there is one) and the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// Reading or writing a file failed.
    #[error("cannot access {}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying I/O error.
        source: io::Error,
    },
    /// A file (or inline text) is not valid PEM, or holds something unusable.
    #[error("{}: {message}", path.display())]
    Pem {
        /// The file involved (`<inline PEM>` for in-memory text).
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Certificate or key generation failed.
    #[error("cannot generate certificates: {0}")]
    Generate(String),
    /// rustls refused a configuration (for example an unusable key).
    #[error("TLS configuration error: {0}")]
    Rustls(#[from] rustls::Error),
    /// A public-key pin string is malformed.
    #[error("invalid hub pin: {0}")]
    InvalidPin(String),
    /// A file expected to contain a certificate contains none.
    #[error("{} contains no certificate (expected a \"-----BEGIN CERTIFICATE-----\" block)", .0.display())]
    NoCertificate(PathBuf),
    /// A file expected to contain a private key contains none.
    #[error("{} contains no private key (expected a \"-----BEGIN PRIVATE KEY-----\" block)", .0.display())]
    NoKey(PathBuf),
    /// Refused to overwrite an existing file.
    #[error("{} already exists; refusing to overwrite it", .0.display())]
    AlreadyExists(PathBuf),
    /// The private key does not belong to the certificate.
    #[error("the private key in {} does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch {
        /// Where the certificate came from.
        cert: PathBuf,
        /// Where the key came from.
        key: PathBuf,
    },
    /// A certificate's DER could not be parsed as X.509.
    #[error("cannot parse certificate: {0}")]
    BadCertificate(String),
}

pub(crate) fn io_err(path: &Path, source: io::Error) -> TlsError {
    TlsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn pem_err(path: &Path, message: impl Into<String>) -> TlsError {
    TlsError::Pem {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

#[cfg(feature = "generate")]
pub(crate) fn gen_err(e: rcgen::Error) -> TlsError {
    TlsError::Generate(e.to_string())
}
