//! Handshake failures in words a person can act on ([`describe_tls_error`]): which certificate
//! check failed, which alert the peer sent, and what to do about it.
//!
//! This module owns the wording only; it must not decide whether a failure is fatal.

use super::*;

/// rustls reports presented names as `DnsName("x")` / `IpAddress(1.2.3.4)`.
pub(crate) fn pretty_san(name: &str) -> &str {
    if let Some(inner) = name
        .strip_prefix("DnsName(\"")
        .and_then(|r| r.strip_suffix("\")"))
    {
        return inner;
    }
    if let Some(inner) = name
        .strip_prefix("IpAddress(")
        .and_then(|r| r.strip_suffix(')'))
    {
        return inner;
    }
    name
}

pub(crate) fn describe_cert_error(err: &CertificateError) -> String {
    #[allow(deprecated)]
    match err {
        CertificateError::UnknownIssuer => "the hub's certificate is not signed by the trusted CA \
             (check that the CA file is the one that issued the hub's certificate, \
             or pin the hub's public key instead)"
            .into(),
        CertificateError::NotValidForName => {
            "the hub's certificate is not valid for the name the client connected to".into()
        }
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } => {
            let valid = if presented.is_empty() {
                "no names at all".to_string()
            } else {
                presented
                    .iter()
                    .map(|n| pretty_san(n))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!(
                "the hub's certificate is not valid for the name \"{}\" the client connected to; \
                 it is only valid for {valid} (connect using one of those names, \
                 or regenerate the hub certificate with this name)",
                expected.to_str()
            )
        }
        CertificateError::Expired => "the hub's certificate has expired".into(),
        CertificateError::ExpiredContext { time, not_after } => format!(
            "the hub's certificate has expired: it was valid until {} (UNIX time) and it is now {} \
             ({} seconds later); check the clocks or renew the certificate",
            not_after.as_secs(),
            time.as_secs(),
            time.as_secs().saturating_sub(not_after.as_secs())
        ),
        CertificateError::NotValidYet => {
            "the hub's certificate is not valid yet (check the clocks)".into()
        }
        CertificateError::NotValidYetContext { time, not_before } => format!(
            "the hub's certificate is not valid yet: it becomes valid at {} (UNIX time), \
             {} seconds from now; check the clocks",
            not_before.as_secs(),
            not_before.as_secs().saturating_sub(time.as_secs())
        ),
        CertificateError::BadEncoding => "the hub's certificate is malformed".into(),
        CertificateError::BadSignature => "the hub's certificate has an invalid signature".into(),
        CertificateError::UnsupportedSignatureAlgorithm
        | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
        | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
            "the hub's certificate uses a signature algorithm agentwire does not support".into()
        }
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "the hub's certificate is not allowed to be used for TLS server authentication \
             (extended key usage)"
                .into()
        }
        CertificateError::Revoked => "the hub's certificate has been revoked".into(),
        CertificateError::UnhandledCriticalExtension => {
            "the hub's certificate has a critical extension agentwire does not understand".into()
        }
        CertificateError::Other(other) => match other.0.downcast_ref::<PinMismatch>() {
            Some(pin) => pin.to_string(),
            None => format!("the hub's certificate was rejected: {other}"),
        },
        other => format!("the hub's certificate was rejected: {other}"),
    }
}

pub(crate) fn describe_alert(alert: &rustls::AlertDescription) -> String {
    use rustls::AlertDescription as A;
    match alert {
        A::BadCertificate
        | A::UnknownCA
        | A::CertificateUnknown
        | A::UnsupportedCertificate
        | A::CertificateExpired
        | A::CertificateRevoked
        | A::AccessDenied
        | A::DecryptError => format!(
            "the peer rejected our certificate (TLS alert {alert:?}): a client that does not \
             trust this hub's certificate, or a hub that does not trust this agent's"
        ),
        A::CertificateRequired => "the hub requires an agent certificate (agent --cert FILE \
             --key FILE, from `agentwire cert agent --id ID`)"
            .into(),
        A::NoApplicationProtocol => {
            "the peer does not speak agentwire (no common ALPN protocol)".into()
        }
        A::ProtocolVersion => "the peer does not support TLS 1.3, which agentwire requires".into(),
        A::HandshakeFailure | A::InsufficientSecurity => format!(
            "the peer found no TLS parameters in common with agentwire (TLS alert {alert:?})"
        ),
        _ => format!("the peer aborted the TLS handshake (TLS alert {alert:?})"),
    }
}

/// Turns a rustls error from a failed handshake into a sentence naming the
/// problem, e.g. `UnknownIssuer` → "the hub's certificate is not signed by the
/// trusted CA ...", a pin mismatch → "the hub's public key `sha256:<got>` does
/// not match the pinned `sha256:<want>`".
pub fn describe_tls_error(err: &rustls::Error) -> String {
    use rustls::Error as E;
    match err {
        E::InvalidCertificate(ce) => describe_cert_error(ce),
        E::NoCertificatesPresented => "the peer presented no certificate".into(),
        E::AlertReceived(alert) => describe_alert(alert),
        E::NoApplicationProtocol => format!(
            "the peer does not speak agentwire: no common ALPN protocol (agentwire uses \"{}\")",
            String::from_utf8_lossy(ALPN_AGENTWIRE)
        ),
        E::PeerIncompatible(p) => format!(
            "the peer's TLS settings are incompatible with agentwire, which requires TLS 1.3 ({p:?})"
        ),
        E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. } => format!(
            "the peer sent unexpected TLS data ({err}); it may not be an agentwire hub"
        ),
        E::DecryptError => {
            "the TLS handshake failed to decrypt; the peer may be misbehaving or the data corrupted"
                .into()
        }
        E::Other(other) => match other.0.downcast_ref::<PinMismatch>() {
            Some(pin) => pin.to_string(),
            None => format!("TLS handshake failed: {other}"),
        },
        _ => format!("TLS handshake failed: {err}"),
    }
}
