//! The client's check of the hub's certificate for a [`HubTrust`]: a WebPKI chain to the CA, or
//! a key-only check with a pin, or none with the loud insecure warning ([`server_verifier`]).
//!
//! This module owns the checks; it must not build the configurations that install them.

use super::*;

/// Checks only that the hub holds the key of the certificate it presents (its handshake
/// signature), plus, with a pin, that the certificate's SPKI hashes to the pin. Without a pin
/// it accepts any certificate: that is `--insecure`, and nothing else uses it.
#[derive(Debug)]
pub(crate) struct KeyOnlyVerifier {
    pin: Option<[u8; 32]>,
    sigs: Tls13Signatures,
}

impl ServerCertVerifier for KeyOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(want) = self.pin else {
            return Ok(ServerCertVerified::assertion());
        };
        let got = spki_sha256(end_entity.as_ref())
            .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
        if got == want {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(
                OtherError(Arc::new(PinMismatch { got, want })),
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.sigs.verify_tls12()
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.sigs.verify_tls13(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.sigs.schemes()
    }
}

pub(crate) const INSECURE_WARNING: &str =
    "WARNING: TLS certificate verification is DISABLED (--insecure): \
     this client will talk to ANY server, including an attacker in the middle. \
     Use a CA file or a sha256 pin instead.";

/// The check a client makes of the hub's certificate for `trust`: a WebPKI chain to the
/// given CA(s) and the server name ([`HubTrust::Ca`]), a SHA-256 SPKI pin plus a valid
/// handshake signature ([`HubTrust::PinnedSpki`]), or only a valid handshake signature
/// ([`HubTrust::Insecure`], which warns loudly on tracing and stderr each time this is called).
///
/// [`client_config`] installs it; callers that need to observe verification (for example to
/// tell a resumed handshake, which verifies nothing, from a full one) can wrap it.
///
/// ```
/// use agentwire_tls::{generate, server_verifier};
/// use agentwire_tls::HubTrust;
///
/// let bundle = generate(&["127.0.0.1".to_string()])?;
/// let trust = HubTrust::ca_pem(&bundle.ca_cert_pem)?;
/// let verifier = server_verifier(&trust)?;
/// assert!(!verifier.supported_verify_schemes().is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn server_verifier(trust: &HubTrust) -> Result<Arc<dyn ServerCertVerifier>, TlsError> {
    let provider = crypto_provider();
    let sigs = || Tls13Signatures(provider.signature_verification_algorithms);
    Ok(match trust {
        HubTrust::Ca(cas) => {
            if cas.is_empty() {
                return Err(TlsError::NoCertificate(PathBuf::from("<CA list>")));
            }
            let mut roots = rustls::RootCertStore::empty();
            for (i, ca) in cas.iter().enumerate() {
                roots.add(ca.clone()).map_err(|e| {
                    TlsError::BadCertificate(format!("CA certificate #{} is unusable: {e}", i + 1))
                })?;
            }
            rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            )
            .build()
            .map_err(|e| TlsError::BadCertificate(format!("cannot use the CA list: {e}")))?
        }
        HubTrust::PinnedSpki(pin) => Arc::new(KeyOnlyVerifier {
            pin: Some(*pin),
            sigs: sigs(),
        }),
        HubTrust::Insecure => {
            tracing::warn!("{INSECURE_WARNING}");
            eprintln!("{INSECURE_WARNING}");
            Arc::new(KeyOnlyVerifier {
                pin: None,
                sigs: sigs(),
            })
        }
    })
}
