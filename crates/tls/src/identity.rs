//! Identities: a hub's (or an agent's) certificate chain and private key, loaded from PEM and
//! checked to match ([`HubIdentity`]).
//!
//! This module owns loading and the served certificate's replacement; it must not build
//! client configurations or decide trust.

use super::*;
use agentwire_sync::RwLockExt;

pub(crate) fn read_text(path: &Path) -> Result<String, TlsError> {
    let bytes = fs::read(path).map_err(|e| io_err(path, e))?;
    String::from_utf8(bytes).map_err(|_| pem_err(path, "not a PEM text file (invalid UTF-8)"))
}

pub(crate) fn parse_certs(
    pem: &str,
    source: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_err(source, format!("invalid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(source.to_path_buf()));
    }
    for cert in &certs {
        x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| {
            pem_err(
                source,
                format!("contains a malformed X.509 certificate: {e}"),
            )
        })?;
    }
    Ok(certs)
}

pub(crate) fn parse_key(pem: &str, source: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    match PrivateKeyDer::from_pem_slice(pem.as_bytes()) {
        Ok(key) => Ok(key),
        Err(rustls_pki_types::pem::Error::NoItemsFound) => {
            Err(TlsError::NoKey(source.to_path_buf()))
        }
        Err(e) => Err(pem_err(source, format!("invalid PEM private key: {e}"))),
    }
}

/// The hub's certificate chain and private key (and, as [`AgentIdentity`], an agent's).
///
/// `Debug` never prints the key.
pub struct HubIdentity {
    /// End-entity certificate first, then any intermediates.
    pub cert_chain: Vec<CertificateDer<'static>>,
    /// The private key matching `cert_chain[0]`.
    pub key: PrivateKeyDer<'static>,
    /// What TLS configurations built from this identity (or a clone) serve: these
    /// credentials until [`HubIdentity::serve_instead`] replaces them.
    pub(crate) served: Arc<std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>>,
}

/// An agent's client certificate chain and private key, for hubs that require one (from
/// `agentwire cert agent`; loaded with [`HubIdentity::load`], which checks the key matches).
pub type AgentIdentity = HubIdentity;

impl Clone for HubIdentity {
    fn clone(&self) -> Self {
        HubIdentity {
            cert_chain: self.cert_chain.clone(),
            key: self.key.clone_key(),
            served: self.served.clone(),
        }
    }
}

impl fmt::Debug for HubIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pin = self
            .spki_pin()
            .unwrap_or_else(|_| "<unparseable certificate>".into());
        f.debug_struct("HubIdentity")
            .field("certificates", &self.cert_chain.len())
            .field("spki_pin", &pin)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl HubIdentity {
    pub(crate) fn from_pem_labeled(
        cert_pem: &str,
        key_pem: &str,
        cert_src: &Path,
        key_src: &Path,
    ) -> Result<Self, TlsError> {
        let cert_chain = parse_certs(cert_pem, cert_src)?;
        let key = parse_key(key_pem, key_src)?;
        let signing_key = crypto_provider()
            .key_provider
            .load_private_key(key.clone_key())
            .map_err(|e| pem_err(key_src, format!("unsupported private key: {e}")))?;
        let certified = rustls::sign::CertifiedKey::new(cert_chain.clone(), signing_key);
        match certified.keys_match() {
            Ok(()) => {}
            // The key type cannot report its public key: cannot check, let
            // rustls decide at handshake time.
            Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
            Err(rustls::Error::InconsistentKeys(_)) => {
                return Err(TlsError::KeyMismatch {
                    cert: cert_src.to_path_buf(),
                    key: key_src.to_path_buf(),
                })
            }
            Err(e) => return Err(pem_err(cert_src, format!("unusable certificate: {e}"))),
        }
        Ok(HubIdentity {
            cert_chain,
            key,
            served: Arc::new(std::sync::RwLock::new(Arc::new(certified))),
        })
    }

    /// Parses a PEM certificate chain (end-entity first) and a PEM private key
    /// (PKCS#8, SEC1 or PKCS#1), checking that the key matches the certificate.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        Self::from_pem_labeled(
            cert_pem,
            key_pem,
            Path::new(INLINE_PEM),
            Path::new(INLINE_PEM),
        )
    }

    /// Loads the certificate chain from `cert` and the private key from `key`.
    pub fn load(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        let cert_pem = read_text(cert)?;
        let key_pem = read_text(key)?;
        Self::from_pem_labeled(&cert_pem, &key_pem, cert, key)
    }

    /// Makes every TLS configuration built from this identity, or from a clone of it, serve
    /// `new`'s certificate and key from the next handshake on (a hub's certificate reload);
    /// connections already up keep theirs. This identity's own fields stay as they were.
    pub fn serve_instead(&self, new: &HubIdentity) {
        let certified = new.served.read_or_recover().clone();
        *self.served.write_or_recover() = certified;
    }

    /// Loads `hub.pem` and `hub.key` from `dir` (as written by [`write_cert_dir`]).
    pub fn from_dir(dir: &Path) -> Result<Self, TlsError> {
        let files = CertFiles::in_dir(dir);
        Self::load(&files.hub_cert, &files.hub_key)
    }

    /// The pin clients can use for this hub: `sha256:<hex>` of the end-entity
    /// certificate's SubjectPublicKeyInfo (stable across re-issuing the
    /// certificate with the same key).
    pub fn spki_pin(&self) -> Result<String, TlsError> {
        let cert = self
            .cert_chain
            .first()
            .ok_or_else(|| TlsError::BadCertificate("the identity has no certificate".into()))?;
        Ok(format_pin(&spki_sha256(cert.as_ref())?))
    }
}
