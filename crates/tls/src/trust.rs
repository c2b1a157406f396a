//! How a client decides to trust a hub ([`HubTrust`]): a CA, a pin, or (loudly) not at all.
//!
//! This module owns the choice and its parsing; the checks themselves are in `verify`.

use super::*;

/// How a client decides to trust a hub.
#[derive(Clone, Debug)]
pub enum HubTrust {
    /// The hub's certificate must chain to one of these CA certificates and be
    /// valid for the server name the client connects to.
    Ca(Vec<CertificateDer<'static>>),
    /// The hub's end-entity SPKI must have this SHA-256; names, issuer and
    /// validity dates are not checked (like SSH host keys).
    PinnedSpki([u8; 32]),
    /// Accept any certificate. Development only; warns loudly.
    Insecure,
}

impl HubTrust {
    /// Trust the CA certificate(s) in the PEM file at `path`.
    pub fn ca_file(path: &Path) -> Result<Self, TlsError> {
        let pem = read_text(path)?;
        Ok(HubTrust::Ca(parse_certs(&pem, path)?))
    }

    /// Trust the CA certificate(s) in PEM text.
    pub fn ca_pem(pem: &str) -> Result<Self, TlsError> {
        Ok(HubTrust::Ca(parse_certs(pem, Path::new(INLINE_PEM))?))
    }

    /// Parses a pin: `sha256:<64 hex>` or bare `<64 hex>`, case-insensitive,
    /// surrounding whitespace ignored.
    pub fn pin(s: &str) -> Result<Self, TlsError> {
        let trimmed = s.trim();
        let hex_part = match (trimmed.get(..7), trimmed.get(7..)) {
            (Some(prefix), Some(rest)) if prefix.eq_ignore_ascii_case("sha256:") => rest,
            _ => {
                if let Some((algo, _)) = trimmed.split_once(':') {
                    return Err(TlsError::InvalidPin(format!(
                        "{s:?} uses algorithm {algo:?}; only sha256 is supported \
                         (expected \"sha256:\" followed by 64 hex digits)"
                    )));
                }
                trimmed
            }
        };
        if hex_part.len() != 64 {
            return Err(TlsError::InvalidPin(format!(
                "{s:?} has {} hex digits; expected \"sha256:\" followed by exactly 64 hex digits",
                hex_part.len()
            )));
        }
        let mut digest = [0u8; 32];
        hex::decode_to_slice(hex_part, &mut digest).map_err(|_| {
            TlsError::InvalidPin(format!(
                "{s:?} contains characters that are not hex digits; \
                 expected \"sha256:\" followed by 64 hex digits"
            ))
        })?;
        Ok(HubTrust::PinnedSpki(digest))
    }
}
