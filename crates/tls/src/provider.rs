//! The cryptography every agentwire TLS configuration uses: ring's provider (aws-lc-rs's with
//! the `aws-lc-rs` feature), TLS 1.3's AES-128-GCM first, and TLS 1.3 signature checks.
//!
//! This module owns the provider choice only; it must not build configurations.

use super::*;

/// The crypto provider of every agentwire TLS config: ring's by default, aws-lc-rs's when the
/// crate is built with the `aws-lc-rs` feature. TLS 1.3's AES-128-GCM-SHA256 suite is
/// preferred (both providers list AES-256-GCM-SHA384 first): the handshake's key schedule then
/// hashes with SHA-256, which runs on the CPU's SHA extensions; ring has no hardware path for
/// SHA-384, and a profile of 1,000 agents connecting spent about 6 % of all CPU in it. Both
/// ends of every agentwire connection use this order, and the other suites stay available to
/// other peers.
pub(crate) fn crypto_provider() -> Arc<CryptoProvider> {
    #[cfg(feature = "aws-lc-rs")]
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    #[cfg(not(feature = "aws-lc-rs"))]
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .sort_by_key(|suite| suite.suite() != rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    Arc::new(provider)
}

/// Which library does the cryptography: `"ring"` or `"aws-lc-rs"` (a build-time choice, the
/// `aws-lc-rs` feature). Benchmarks record it beside their figures.
///
/// ```
/// assert!(["ring", "aws-lc-rs"].contains(&agentwire_tls::crypto_library()));
/// ```
pub fn crypto_library() -> &'static str {
    if cfg!(feature = "aws-lc-rs") {
        "aws-lc-rs"
    } else {
        "ring"
    }
}

/// Verifies handshake signatures with the provider's algorithms, TLS 1.3 only.
#[derive(Debug)]
pub(crate) struct Tls13Signatures(pub(crate) WebPkiSupportedAlgorithms);

impl Tls13Signatures {
    pub(crate) fn verify_tls12(&self) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::ServerTlsVersionIsDisabledByOurConfig,
        ))
    }

    pub(crate) fn verify_tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0)
    }

    pub(crate) fn schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
