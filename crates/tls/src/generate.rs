//! Generating a private CA and a hub certificate signed by it ([`generate`]).
//!
//! This module owns key and certificate generation (rcgen, behind the `generate` feature); it
//! must not write files (see `cert_dir`) or build TLS configurations.

use super::*;
#[cfg(feature = "generate")]
use std::net::IpAddr;
#[cfg(feature = "generate")]
use std::time::{SystemTime, UNIX_EPOCH};

/// A freshly generated CA and hub certificate, all PEM-encoded.
#[derive(Clone)]
pub struct CertBundle {
    /// The CA certificate (give this to clients).
    pub ca_cert_pem: String,
    /// The CA private key (keep offline; needed only to issue new hub certs).
    pub ca_key_pem: String,
    /// The hub certificate, signed by the CA.
    pub hub_cert_pem: String,
    /// The hub private key.
    pub hub_key_pem: String,
}

impl fmt::Debug for CertBundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertBundle")
            .field("ca_cert_pem", &self.ca_cert_pem)
            .field("ca_key_pem", &"<redacted>")
            .field("hub_cert_pem", &self.hub_cert_pem)
            .field("hub_key_pem", &"<redacted>")
            .finish()
    }
}

#[cfg(feature = "generate")]
/// The approximate current UTC year, clamped to a range rcgen accepts.
pub(crate) fn current_year() -> i32 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // 365.2425 days per year; off by at most a day around New Year, which the
    // one-year backdating below absorbs.
    let years = secs / 31_556_952;
    let year = 1970i64.saturating_add(i64::try_from(years).unwrap_or(0));
    year.clamp(1971, 9000) as i32
}

#[cfg(feature = "generate")]
pub(crate) fn random_hex(len: usize) -> Result<String, TlsError> {
    let mut bytes = vec![0u8; len];
    crypto_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| TlsError::Generate("the system random number generator failed".into()))?;
    Ok(hex::encode(bytes))
}

#[cfg(feature = "generate")]
/// Generates a CA "agentwire CA" (IsCa, key usage cert sign) and a hub
/// certificate signed by it, both ECDSA P-256.
///
/// The hub certificate's subjectAltNames are `hub_names`: entries that parse as
/// IP addresses become IP SANs, everything else a DNS SAN. Validity: CA from
/// January 1st of last year for 20 years, hub for 10 years.
pub fn generate(hub_names: &[String]) -> Result<CertBundle, TlsError> {
    use rcgen::{
        date_time_ymd, BasicConstraints, CertificateParams, DistinguishedName, DnType,
        ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    };

    let names: Vec<String> = hub_names.iter().map(|n| n.trim().to_string()).collect();
    let sans = hub_san_names(&names)?;

    let year = current_year();
    let not_before = date_time_ymd(year - 1, 1, 1);

    // CA
    let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen_err)?;
    let mut ca_params = CertificateParams::default();
    let mut ca_dn = DistinguishedName::new();
    ca_dn.push(DnType::CommonName, "agentwire CA");
    ca_dn.push(DnType::OrganizationName, "agentwire");
    // Every agentwire CA is called "agentwire CA"; a random unit makes each
    // CA's name unique so that a hub from another installation is reported as
    // UnknownIssuer rather than as a bad signature from a same-named CA.
    ca_dn.push(
        DnType::OrganizationalUnitName,
        format!("ca-{}", random_hex(8)?),
    );
    ca_params.distinguished_name = ca_dn;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = not_before;
    ca_params.not_after = date_time_ymd(year + 20, 1, 1);
    let ca_cert = ca_params.self_signed(&ca_key).map_err(gen_err)?;
    let ca_cert_pem = ca_cert.pem();
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);

    // Hub
    let hub_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen_err)?;
    let mut hub_params = CertificateParams::default();
    hub_params.subject_alt_names = sans;
    let mut hub_dn = DistinguishedName::new();
    if let Some(first) = names.first() {
        hub_dn.push(DnType::CommonName, first.as_str());
    }
    hub_dn.push(DnType::OrganizationName, "agentwire");
    hub_params.distinguished_name = hub_dn;
    hub_params.is_ca = IsCa::ExplicitNoCa;
    hub_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    hub_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    hub_params.use_authority_key_identifier_extension = true;
    hub_params.not_before = not_before;
    hub_params.not_after = date_time_ymd(year + 10, 1, 1);
    let hub_cert = hub_params.signed_by(&hub_key, &issuer).map_err(gen_err)?;

    Ok(CertBundle {
        ca_cert_pem,
        ca_key_pem,
        hub_cert_pem: hub_cert.pem(),
        hub_key_pem: hub_key.serialize_pem(),
    })
}

#[cfg(feature = "generate")]
/// The CA of `agentwire cert` (its certificate and key, PEM), ready to sign certificates.
pub(crate) fn ca_issuer(
    ca_cert_pem: &str,
    ca_key_pem: &str,
) -> Result<rcgen::Issuer<'static, rcgen::KeyPair>, TlsError> {
    let ca_key = rcgen::KeyPair::from_pem(ca_key_pem)
        .map_err(|e| TlsError::Generate(format!("the CA key is not usable: {e}")))?;
    rcgen::Issuer::from_ca_cert_pem(ca_cert_pem, ca_key)
        .map_err(|e| TlsError::Generate(format!("the CA certificate is not usable: {e}")))
}

#[cfg(feature = "generate")]
/// The subjectAltNames of a hub certificate: each name that parses as an IP address an IP SAN,
/// any other a DNS SAN; at least one, none empty.
pub(crate) fn hub_san_names(hub_names: &[String]) -> Result<Vec<rcgen::SanType>, TlsError> {
    let names: Vec<&str> = hub_names.iter().map(|n| n.trim()).collect();
    if names.is_empty() {
        return Err(TlsError::Generate(
            "at least one hub name (DNS name or IP address) is required".into(),
        ));
    }
    if names.iter().any(|n| n.is_empty()) {
        return Err(TlsError::Generate("a hub name is empty".into()));
    }
    names
        .iter()
        .map(|n| match n.parse::<IpAddr>() {
            Ok(ip) => Ok(rcgen::SanType::IpAddress(ip)),
            Err(_) => n
                .to_string()
                .try_into()
                .map(rcgen::SanType::DnsName)
                .map_err(|e| TlsError::Generate(format!("invalid hub DNS name {n:?}: {e}"))),
        })
        .collect()
}

/// Default hub names for a local hub: `localhost`, `127.0.0.1` and `::1`.
pub fn default_hub_names() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
}
