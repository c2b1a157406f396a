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

/// What a [`WatchedVerifier`] does with each verdict of the certificate check it wraps.
pub trait VerdictWatch: Send + Sync + fmt::Debug {
    /// Called with every verdict on a server's certificate, accepted or refused.
    fn verdict(
        &self,
        server_name: &ServerName<'_>,
        verdict: &Result<ServerCertVerified, rustls::Error>,
    );
}

/// A certificate check that is the check it wraps, and hands each of its verdicts on a
/// server's certificate to a [`VerdictWatch`] (to count them, to keep the refusals).
#[derive(Debug)]
pub struct WatchedVerifier<W> {
    inner: Arc<dyn ServerCertVerifier>,
    watch: W,
}

impl<W> WatchedVerifier<W> {
    /// `inner`, watched by `watch`.
    pub fn wrap(inner: Arc<dyn ServerCertVerifier>, watch: W) -> Self {
        WatchedVerifier { inner, watch }
    }
}

impl<W: VerdictWatch> ServerCertVerifier for WatchedVerifier<W> {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verdict = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        self.watch.verdict(server_name, &verdict);
        verdict
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// The refusals a [`RecordingVerifier`] keeps: the last rustls error per server name, at most
/// [`MAX_REFUSALS`] names (beyond, the older ones are forgotten).
#[derive(Debug, Default)]
pub struct Refusals(std::sync::Mutex<std::collections::HashMap<String, rustls::Error>>);

/// Most refusals a [`RecordingVerifier`] keeps (older ones are forgotten).
pub(crate) const MAX_REFUSALS: usize = 64;

impl VerdictWatch for Refusals {
    fn verdict(
        &self,
        server_name: &ServerName<'_>,
        verdict: &Result<ServerCertVerified, rustls::Error>,
    ) {
        if let Err(e) = verdict {
            let mut refused = self.0.lock_or_recover();
            if refused.len() >= MAX_REFUSALS {
                refused.clear();
            }
            refused.insert(server_name.to_str().into_owned(), e.clone());
        }
    }
}

/// A certificate check that remembers why it refused a server name last, so that a transport
/// which reports a failed handshake only as text (QUIC: quinn keeps the rustls error's
/// message, not the error) can still hand on the rustls error itself. One check serves every
/// connection of a client config: rustls resumes (and sends 0-RTT) only with the check that
/// verified the session first.
pub type RecordingVerifier = WatchedVerifier<Refusals>;

impl RecordingVerifier {
    /// Wraps `inner`, keeping its refusals.
    pub fn new(inner: Arc<dyn ServerCertVerifier>) -> Self {
        WatchedVerifier::wrap(inner, Refusals::default())
    }

    /// Why the check last refused `server_name`'s certificate, if it did (and forgets it).
    pub fn take_refusal(&self, server_name: &str) -> Option<rustls::Error> {
        self.watch.0.lock_or_recover().remove(server_name)
    }
}
