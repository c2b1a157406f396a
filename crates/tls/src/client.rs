//! Client TLS configurations (TLS 1.3 only, ALPN, 0-RTT) with the hub check of a trust, an
//! agent certificate when the hub asks for one, and [`RecordingVerifier`], which keeps the
//! rustls error of a refused certificate for transports that report failures as text.
//!
//! This module owns the client side; it must not open sockets.

use super::*;
use agentwire_sync::LockExt;

/// Builds the client TLS config: TLS 1.3 only, ring provider, the given ALPN
/// protocols, `enable_early_data = true` (for QUIC 0-RTT) and the default
/// in-memory resumption store. The certificate check is [`server_verifier`].
///
/// With [`HubTrust::Insecure`] the config accepts any certificate and this
/// function warns loudly (`tracing::warn!` and stderr) each time it is called.
pub fn client_config(trust: &HubTrust, alpn: &[&[u8]]) -> Result<rustls::ClientConfig, TlsError> {
    client_config_with_verifier(server_verifier(trust)?, alpn)
}

/// [`client_config`] that presents `identity` (an agent certificate) to hubs that ask for one.
pub fn client_config_as(
    trust: &HubTrust,
    alpn: &[&[u8]],
    identity: Option<&AgentIdentity>,
) -> Result<rustls::ClientConfig, TlsError> {
    client_config_with_verifier_as(server_verifier(trust)?, alpn, identity)
}

/// [`client_config`] with a certificate check of the caller's (for example
/// [`server_verifier`] wrapped to observe it): TLS 1.3 only, ring provider, the given ALPN
/// protocols, `enable_early_data = true` and the default in-memory resumption store.
///
/// ```
/// use agentwire_tls::{client_config_with_verifier, server_verifier};
/// use agentwire_tls::HubTrust;
///
/// let config = client_config_with_verifier(server_verifier(&HubTrust::Insecure)?, &[b"h3"])?;
/// assert_eq!(config.alpn_protocols, vec![b"h3".to_vec()]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn client_config_with_verifier(
    verifier: Arc<dyn ServerCertVerifier>,
    alpn: &[&[u8]],
) -> Result<rustls::ClientConfig, TlsError> {
    client_config_with_verifier_as(verifier, alpn, None)
}

/// [`client_config_with_verifier`] that presents `identity` to hubs that ask for a client
/// certificate.
pub fn client_config_with_verifier_as(
    verifier: Arc<dyn ServerCertVerifier>,
    alpn: &[&[u8]],
    identity: Option<&AgentIdentity>,
) -> Result<rustls::ClientConfig, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match identity {
        Some(id) => builder.with_client_auth_cert(id.cert_chain.clone(), id.key.clone_key())?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config.enable_early_data = true;
    Ok(config)
}

/// A certificate check that remembers why it refused a server name last, so that a transport
/// which reports a failed handshake only as text (QUIC: quinn keeps the rustls error's
/// message, not the error) can still hand on the rustls error itself. One check serves every
/// connection of a client config: rustls resumes (and sends 0-RTT) only with the check that
/// verified the session first.
#[derive(Debug)]
pub struct RecordingVerifier {
    inner: Arc<dyn ServerCertVerifier>,
    refused: std::sync::Mutex<std::collections::HashMap<String, rustls::Error>>,
}

/// Most refusals a [`RecordingVerifier`] keeps (older ones are forgotten).
pub(crate) const MAX_REFUSALS: usize = 64;

impl RecordingVerifier {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn ServerCertVerifier>) -> Self {
        RecordingVerifier {
            inner,
            refused: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    fn refusals(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, rustls::Error>> {
        self.refused.lock_or_recover()
    }

    /// Why the check last refused `server_name`'s certificate, if it did (and forgets it).
    pub fn take_refusal(&self, server_name: &str) -> Option<rustls::Error> {
        self.refusals().remove(server_name)
    }

    fn keep<T>(
        &self,
        name: Option<&ServerName<'_>>,
        r: Result<T, rustls::Error>,
    ) -> Result<T, rustls::Error> {
        if let (Err(e), Some(name)) = (&r, name) {
            let mut refused = self.refusals();
            if refused.len() >= MAX_REFUSALS {
                refused.clear();
            }
            refused.insert(name.to_str().into_owned(), e.clone());
        }
        r
    }
}

impl ServerCertVerifier for RecordingVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.keep(
            Some(server_name),
            self.inner.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp_response,
                now,
            ),
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.keep(None, self.inner.verify_tls12_signature(message, cert, dss))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.keep(None, self.inner.verify_tls13_signature(message, cert, dss))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
