//! TLS for the load generator's connections: certificate verification, session resumption
//! (`--resume`) and telling full handshakes from resumed ones.
//!
//! A client cannot ask rustls (through quinn) whether a handshake resumed a session, but it
//! can see the one thing that differs: a full TLS 1.3 handshake carries the server's
//! certificate, which the client verifies; a resumed one (a PSK from a session ticket)
//! carries none. So the run's verifier counts the certificates it verified, and the run
//! counts `full = verified` and `resumed = connections - verified`. The count is per run, not
//! per connection: rustls only resumes a ticket with the very verifier that stored it, so
//! every connection must share one. The same works for TCP and QUIC.
//!
//! This module must not do I/O; it builds configurations and counts.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use agentwire_tls::{HubTrust, VerdictWatch, WatchedVerifier};
use anyhow::{Context, Result};
use rustls::client::danger::{ServerCertVerified, ServerCertVerifier};
use rustls_pki_types::ServerName;

/// How the client checks the server's certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// The certificate must chain to the CA certificate(s) in this PEM file and be valid for
    /// the server name.
    Ca(PathBuf),
    /// Accept any certificate (testing only; a loud warning goes to stderr).
    Insecure,
    /// Verification on, with no trusted CA: every certificate is refused, and each connection
    /// attempt fails with a `tls` error that says to pass `--ca` or `--insecure`. (There is no
    /// system trust store here.)
    NoCa,
}

/// Tickets the run's shared store keeps (rustls keeps up to 8 TLS 1.3 tickets per server).
const SESSION_CACHE_SERVERS: usize = 64;

/// The run's client TLS: one configuration (with resumption, one shared ticket store) for
/// every connection, and the count of certificates verified.
#[derive(Clone)]
pub(crate) struct TlsSetup {
    config: Arc<rustls::ClientConfig>,
    verified: Arc<AtomicU64>,
}

impl TlsSetup {
    /// TLS 1.3 with one ALPN protocol. Without `resume` every handshake is a full one (no
    /// tickets kept, no early data); with it, tickets are kept in memory for the run and
    /// offered on new connections, and `early_data` allows QUIC 0-RTT with them.
    pub(crate) fn new(trust: &Trust, alpn: &[u8], resume: bool, early_data: bool) -> Result<Self> {
        let verifier = match trust {
            Trust::Ca(path) => agentwire_tls::server_verifier(
                &HubTrust::ca_file(path)
                    .with_context(|| format!("loading the CA certificate {}", path.display()))?,
            )?,
            Trust::Insecure => agentwire_tls::server_verifier(&HubTrust::Insecure)?,
            Trust::NoCa => no_ca_verifier()?,
        };
        let verified = Arc::new(AtomicU64::new(0));
        let counting = Arc::new(WatchedVerifier::wrap(
            verifier,
            CountAccepted(verified.clone()),
        ));
        let mut config = agentwire_tls::client_config_with_verifier(counting, &[alpn])?;
        config.resumption = if resume {
            rustls::client::Resumption::in_memory_sessions(SESSION_CACHE_SERVERS)
        } else {
            rustls::client::Resumption::disabled()
        };
        config.enable_early_data = resume && early_data;
        Ok(TlsSetup {
            config: Arc::new(config),
            verified,
        })
    }

    /// The configuration every connection uses.
    pub(crate) fn config(&self) -> Arc<rustls::ClientConfig> {
        self.config.clone()
    }

    /// Certificates verified so far: the run's full handshakes.
    pub(crate) fn verified(&self) -> u64 {
        self.verified.load(Ordering::Relaxed)
    }
}

/// A verifier with no trusted CA: it refuses every certificate with rustls's own
/// `UnknownIssuer`, which the error text turns into "pass --ca or --insecure". (rustls will
/// not build a verifier over an empty root store, so it trusts only a throwaway CA made here,
/// whose key is dropped at once and which signed nothing.)
fn no_ca_verifier() -> Result<Arc<dyn ServerCertVerifier>> {
    let bundle = agentwire_tls::generate(&["unused.invalid".to_string()])?;
    let trust = HubTrust::ca_pem(&bundle.ca_cert_pem)?;
    Ok(agentwire_tls::server_verifier(&trust)?)
}

/// Counts the certificates the run's verifier accepted.
#[derive(Debug)]
struct CountAccepted(Arc<AtomicU64>);

impl VerdictWatch for CountAccepted {
    fn verdict(
        &self,
        _server_name: &ServerName<'_>,
        verdict: &Result<ServerCertVerified, rustls::Error>,
    ) {
        if verdict.is_ok() {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumption_and_early_data_follow_the_flags() {
        let off = TlsSetup::new(&Trust::Insecure, b"h2", false, true).unwrap();
        assert!(
            !off.config().enable_early_data,
            "no early data without resumption"
        );
        let on = TlsSetup::new(&Trust::Insecure, b"h3", true, true).unwrap();
        assert!(on.config().enable_early_data);
        assert!(
            Arc::ptr_eq(&on.config(), &on.config()),
            "one config for all"
        );
        assert_eq!(on.verified(), 0);
    }
}
