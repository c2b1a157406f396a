//! Public-key pins: the SHA-256 of a certificate's SubjectPublicKeyInfo ([`spki_sha256`]), its
//! text form, and the error when a hub presents another key.
//!
//! This module owns the hashing and the wording; it must not verify handshakes.

use super::*;

/// SHA-256 of the DER SubjectPublicKeyInfo of an X.509 certificate (the same
/// value as HPKP / `curl --pinnedpubkey sha256//`, but hex rather than base64).
pub fn spki_sha256(cert_der: &[u8]) -> Result<[u8; 32], TlsError> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| TlsError::BadCertificate(e.to_string()))?;
    let digest = ring::digest::digest(&ring::digest::SHA256, cert.tbs_certificate.subject_pki.raw);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    Ok(out)
}

/// Formats a SHA-256 digest as a pin: `sha256:<64 lowercase hex digits>`.
pub fn format_pin(digest: &[u8; 32]) -> String {
    format!("sha256:{}", hex::encode(digest))
}

/// A hub's public key did not match the pinned one. Carried inside
/// `rustls::Error::InvalidCertificate(CertificateError::Other(..))` by the
/// pinned verifier; [`describe_tls_error`] recognises it.
#[derive(Clone, PartialEq, Eq)]
pub struct PinMismatch {
    /// SHA-256 of the SPKI the hub presented.
    pub got: [u8; 32],
    /// The pinned SHA-256.
    pub want: [u8; 32],
}

impl fmt::Display for PinMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the hub's public key {} does not match the pinned {}",
            format_pin(&self.got),
            format_pin(&self.want)
        )
    }
}

/// `Debug` is the same sentence as `Display`: rustls formats
/// `CertificateError::Other` with `Debug`, and that text is all quinn keeps.
impl fmt::Debug for PinMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for PinMismatch {}
