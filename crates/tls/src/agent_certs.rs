//! Agent certificates (mutual TLS): issuing a client certificate whose name is an agent id,
//! the CA a hub checks agents' certificates against, and reading the id back from a verified
//! certificate.
//!
//! This module owns the agent side of identity by certificate: [`issue_agent_cert`] (what
//! `agentwire cert agent --id ID` runs), [`write_agent_cert`], [`ClientCa`] (what `agentwire
//! hub --client-ca FILE` loads; [`super::server_config_for_agents`] makes the hub require a
//! certificate it signed) and [`certified_agent_id`]. The agent id is the certificate's
//! subject common name; the certificate carries the `clientAuth` extended key usage, so a
//! hub's own certificate (`serverAuth` only) is never accepted as an agent's.
//!
//! It must not decide what an id may do (the hub's access policy does) nor compare the id
//! with the one an agent's hello claims (the hub core does, at the handshake).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::CertificateDer;

#[cfg(feature = "generate")]
use super::gen_err;
#[cfg(test)]
use super::ClientCa;
use super::{io_err, write_file, TlsError};

/// Longest agent id a certificate may name (the hub accepts ids of at most 128 bytes too).
pub const MAX_CERT_AGENT_ID: usize = 128;

/// An agent's certificate and private key, PEM-encoded (from [`issue_agent_cert`]).
#[derive(Clone)]
pub struct AgentCert {
    /// The agent id the certificate names (its subject common name).
    pub agent_id: String,
    /// The certificate, signed by the CA.
    pub cert_pem: String,
    /// The agent's private key.
    pub key_pem: String,
}

impl AgentCert {
    /// The certificate's serial number in hexadecimal, as a hub's `--revoked-serials` file
    /// lists it.
    pub fn serial(&self) -> Result<String, TlsError> {
        use rustls_pki_types::pem::PemObject;
        let der = CertificateDer::from_pem_slice(self.cert_pem.as_bytes())
            .map_err(|e| TlsError::BadCertificate(e.to_string()))?;
        super::certificate_serial(&der)
    }
}

impl std::fmt::Debug for AgentCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentCert")
            .field("agent_id", &self.agent_id)
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

#[cfg(feature = "generate")]
/// Issues a client certificate for `agent_id`, signed by the CA in `ca_cert_pem` and
/// `ca_key_pem` (as [`super::generate`] made them), valid from January 1st of last year until
/// `days` days from now. ECDSA P-256; subject common name = `agent_id`; extended key usage
/// `clientAuth` only.
///
/// ```
/// use agentwire_tls::{certified_agent_id, generate, issue_agent_cert};
/// use rustls_pki_types::{pem::PemObject, CertificateDer};
/// let ca = generate(&["localhost".into()])?;
/// let cert = issue_agent_cert(&ca.ca_cert_pem, &ca.ca_key_pem, "worker-1", 365)?;
/// let der = CertificateDer::from_pem_slice(cert.cert_pem.as_bytes())?;
/// assert_eq!(certified_agent_id(&der)?, "worker-1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn issue_agent_cert(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    agent_id: &str,
    days: u32,
) -> Result<AgentCert, TlsError> {
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    };

    check_agent_id(agent_id)?;
    if days == 0 {
        return Err(TlsError::Generate(
            "a certificate must be valid for at least one day".into(),
        ));
    }
    let issuer = super::ca_issuer(ca_cert_pem, ca_key_pem)?;

    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen_err)?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, agent_id);
    dn.push(DnType::OrganizationName, "agentwire agent");
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    let not_before = rcgen::date_time_ymd(super::current_year() - 1, 1, 1);
    params.not_before = not_before;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let days = std::time::Duration::from_secs(u64::from(days) * 86_400);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + now + days;
    let cert = params.signed_by(&key, &issuer).map_err(gen_err)?;
    Ok(AgentCert {
        agent_id: agent_id.to_owned(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn check_agent_id(agent_id: &str) -> Result<(), TlsError> {
    if agent_id.is_empty() || agent_id.len() > MAX_CERT_AGENT_ID {
        return Err(TlsError::Generate(format!(
            "an agent id is 1 to {MAX_CERT_AGENT_ID} bytes; {agent_id:?} is {} bytes",
            agent_id.len()
        )));
    }
    if agent_id
        .chars()
        .any(|c| c.is_control() || c == '/' || c == '\\')
    {
        return Err(TlsError::Generate(format!(
            "the agent id {agent_id:?} contains a control character or a slash"
        )));
    }
    Ok(())
}

/// Where [`write_agent_cert`] put an agent's certificate and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentCertFiles {
    /// `DIR/ID.pem`.
    pub cert: PathBuf,
    /// `DIR/ID.key` (mode 0600).
    pub key: PathBuf,
}

/// Writes `cert` into `dir` as `ID.pem` and `ID.key` (the key with mode 0600), creating `dir`
/// if needed. Unless `overwrite`, nothing is written if either file exists. The ids `ca` and
/// `hub` are refused (their files would be a cert directory's own).
pub fn write_agent_cert(
    dir: &Path,
    cert: &AgentCert,
    overwrite: bool,
) -> Result<AgentCertFiles, TlsError> {
    check_agent_id(&cert.agent_id)?;
    if ["ca", "hub"].contains(&cert.agent_id.as_str()) {
        return Err(TlsError::Generate(format!(
            "an agent called {:?} would be written over the CA or hub files of a cert \
             directory; give it another id",
            cert.agent_id
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let files = AgentCertFiles {
        cert: dir.join(format!("{}.pem", cert.agent_id)),
        key: dir.join(format!("{}.key", cert.agent_id)),
    };
    if !overwrite {
        for path in [&files.cert, &files.key] {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(TlsError::AlreadyExists(path.clone()));
            }
        }
    }
    write_file(&files.key, &cert.key_pem, true, overwrite)?;
    write_file(&files.cert, &cert.cert_pem, false, overwrite)?;
    Ok(files)
}

/// The agent id a certificate names: its subject's common name.
///
/// Only meaningful for a certificate rustls has verified against a [`ClientCa`]; the hub
/// reads it from the peer's end-entity certificate after the handshake.
pub fn certified_agent_id(cert_der: &[u8]) -> Result<String, TlsError> {
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| TlsError::BadCertificate(e.to_string()))?;
    let mut names = cert.subject().iter_common_name();
    let name = names
        .next()
        .ok_or_else(|| TlsError::BadCertificate("the certificate has no common name".into()))?;
    if names.next().is_some() {
        return Err(TlsError::BadCertificate(
            "the certificate has more than one common name".into(),
        ));
    }
    let id = name
        .as_str()
        .map_err(|e| TlsError::BadCertificate(format!("the common name is not text: {e}")))?;
    check_agent_id(id).map_err(|e| TlsError::BadCertificate(e.to_string()))?;
    Ok(id.to_owned())
}

/// The agent id named by the end-entity certificate of a verified chain, if there is one.
pub fn peer_agent_id(chain: &[CertificateDer<'_>]) -> Option<Arc<str>> {
    let leaf = chain.first()?;
    match certified_agent_id(leaf.as_ref()) {
        Ok(id) => Some(Arc::from(id)),
        Err(e) => {
            tracing::debug!("a verified client certificate names no usable agent id: {e}");
            None
        }
    }
}

#[cfg(all(test, feature = "generate"))]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject;

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn the_certificate_names_the_agent_and_is_for_clients_only() {
        let ca = super::super::generate(&["localhost".into()]).unwrap();
        let cert = issue_agent_cert(&ca.ca_cert_pem, &ca.ca_key_pem, "worker-7", 30).unwrap();
        let cert_der = der(&cert.cert_pem);
        assert_eq!(certified_agent_id(&cert_der).unwrap(), "worker-7");
        assert_eq!(
            peer_agent_id(std::slice::from_ref(&cert_der)).as_deref(),
            Some("worker-7")
        );
        let (_, parsed) = x509_parser::parse_x509_certificate(&cert_der).unwrap();
        let eku = parsed.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        // The hub's own certificate names no agent the hub would accept as a client.
        let hub = der(&ca.hub_cert_pem);
        let (_, parsed) = x509_parser::parse_x509_certificate(&hub).unwrap();
        assert!(
            !parsed
                .extended_key_usage()
                .unwrap()
                .unwrap()
                .value
                .client_auth
        );
    }

    #[test]
    fn bad_ids_and_bad_cas_are_refused_with_a_reason() {
        let ca = super::super::generate(&["localhost".into()]).unwrap();
        for id in ["", "a/b", "tab\there", &"x".repeat(MAX_CERT_AGENT_ID + 1)] {
            let err = issue_agent_cert(&ca.ca_cert_pem, &ca.ca_key_pem, id, 1).unwrap_err();
            assert!(matches!(err, TlsError::Generate(_)), "{id:?}: {err}");
        }
        let err = issue_agent_cert(&ca.ca_cert_pem, "not a key", "w", 1).unwrap_err();
        assert!(err.to_string().contains("CA key"), "{err}");
        let err = issue_agent_cert("not a cert", &ca.ca_key_pem, "w", 1).unwrap_err();
        assert!(err.to_string().contains("CA certificate"), "{err}");
        assert!(ClientCa::from_pem("garbage").is_err());
        assert!(certified_agent_id(b"garbage").is_err());
    }

    #[test]
    fn files_are_written_once_with_a_private_key() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let ca = super::super::generate(&["localhost".into()]).unwrap();
        let cert = issue_agent_cert(&ca.ca_cert_pem, &ca.ca_key_pem, "w1", 1).unwrap();
        let files = write_agent_cert(dir.path(), &cert, false).unwrap();
        assert_eq!(files.cert, dir.path().join("w1.pem"));
        let mode = std::fs::metadata(&files.key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let err = write_agent_cert(dir.path(), &cert, false).unwrap_err();
        assert!(matches!(err, TlsError::AlreadyExists(_)));
        write_agent_cert(dir.path(), &cert, true).unwrap();
        let hub = issue_agent_cert(&ca.ca_cert_pem, &ca.ca_key_pem, "hub", 1).unwrap();
        assert!(write_agent_cert(dir.path(), &hub, true).is_err());
        let loaded = super::super::AgentIdentity::load(&files.cert, &files.key).unwrap();
        assert_eq!(loaded.cert_chain.len(), 1);
    }
}
