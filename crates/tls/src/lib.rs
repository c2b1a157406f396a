//! TLS and identity for agentwire.
//!
//! This module owns everything about *who a hub is* and *how a client decides
//! to trust it*:
//!
//! * generating a private CA ("agentwire CA") and a hub certificate signed by
//!   it ([`generate`]), and writing them to a directory with safe permissions
//!   ([`write_cert_dir`]);
//! * loading the hub's certificate chain and private key ([`HubIdentity`]);
//! * the three ways a client can trust a hub ([`HubTrust`]): a CA, a pinned
//!   SHA-256 of the hub's SubjectPublicKeyInfo, or (loudly) not at all;
//! * building the rustls [`rustls::ClientConfig`] / [`rustls::ServerConfig`]
//!   used by the QUIC transport (TLS 1.3 only, ring provider, ALPN, session
//!   resumption and 0-RTT enabled);
//! * agent certificates for mutual TLS ([`issue_agent_cert`], [`ClientCa`],
//!   [`certified_agent_id`]; in `agent_certs`), and the hub config that requires them
//!   ([`server_config_for_agents`]);
//! * turning handshake failures into sentences a person can act on
//!   ([`describe_tls_error`]; [`RecordingVerifier`] keeps the rustls error for transports
//!   that report a failed handshake only as text).
//!
//! What it must NOT do: open sockets or know about QUIC/quinn (the transport
//! wraps these configs with `quinn::crypto::rustls::QuicClientConfig` /
//! `QuicServerConfig`), parse command lines, decide where files live beyond
//! the fixed names inside a directory, log or print private keys, or panic on
//! anything that comes from a file or the network.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

mod agent_certs;
mod client_ca;
pub use agent_certs::{
    certified_agent_id, issue_agent_cert, peer_agent_id, write_agent_cert, AgentCert,
    AgentCertFiles, MAX_CERT_AGENT_ID,
};
pub use client_ca::{certificate_serial, AgentCertificate, ClientCa, Reloaded, RevokedSerials};

/// ALPN protocol identifier spoken by agentwire peers over QUIC.
pub const ALPN_AGENTWIRE: &[u8] = b"agentwire/1";

/// File name of the CA certificate inside a cert directory.
pub const CA_CERT_FILE: &str = "ca.pem";
/// File name of the CA private key inside a cert directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// File name of the hub certificate inside a cert directory.
pub const HUB_CERT_FILE: &str = "hub.pem";
/// File name of the hub private key inside a cert directory.
pub const HUB_KEY_FILE: &str = "hub.key";

/// Label used in errors for PEM text that did not come from a file.
const INLINE_PEM: &str = "<inline PEM>";

/// Errors from loading, generating or configuring TLS material.
///
/// Every message names the file (where there is one) and the problem.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Reading or writing a file failed.
    #[error("cannot access {}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying I/O error.
        source: io::Error,
    },
    /// A file (or inline text) is not valid PEM, or holds something unusable.
    #[error("{}: {message}", path.display())]
    Pem {
        /// The file involved (`<inline PEM>` for in-memory text).
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Certificate or key generation failed.
    #[error("cannot generate certificates: {0}")]
    Generate(String),
    /// rustls refused a configuration (for example an unusable key).
    #[error("TLS configuration error: {0}")]
    Rustls(#[from] rustls::Error),
    /// A public-key pin string is malformed.
    #[error("invalid hub pin: {0}")]
    InvalidPin(String),
    /// A file expected to contain a certificate contains none.
    #[error("{} contains no certificate (expected a \"-----BEGIN CERTIFICATE-----\" block)", .0.display())]
    NoCertificate(PathBuf),
    /// A file expected to contain a private key contains none.
    #[error("{} contains no private key (expected a \"-----BEGIN PRIVATE KEY-----\" block)", .0.display())]
    NoKey(PathBuf),
    /// Refused to overwrite an existing file.
    #[error("{} already exists; refusing to overwrite it", .0.display())]
    AlreadyExists(PathBuf),
    /// The private key does not belong to the certificate.
    #[error("the private key in {} does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch {
        /// Where the certificate came from.
        cert: PathBuf,
        /// Where the key came from.
        key: PathBuf,
    },
    /// A certificate's DER could not be parsed as X.509.
    #[error("cannot parse certificate: {0}")]
    BadCertificate(String),
}

fn io_err(path: &Path, source: io::Error) -> TlsError {
    TlsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn pem_err(path: &Path, message: impl Into<String>) -> TlsError {
    TlsError::Pem {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn gen_err(e: rcgen::Error) -> TlsError {
    TlsError::Generate(e.to_string())
}

// ---------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------

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

/// The approximate current UTC year, clamped to a range rcgen accepts.
fn current_year() -> i32 {
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

fn random_hex(len: usize) -> Result<String, TlsError> {
    let mut bytes = vec![0u8; len];
    crypto_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| TlsError::Generate("the system random number generator failed".into()))?;
    Ok(hex::encode(bytes))
}

/// Generates a CA "agentwire CA" (IsCa, key usage cert sign) and a hub
/// certificate signed by it, both ECDSA P-256.
///
/// The hub certificate's subjectAltNames are `hub_names`: entries that parse as
/// IP addresses become IP SANs, everything else a DNS SAN. Validity: CA from
/// January 1st of last year for 20 years, hub for 10 years.
pub fn generate(hub_names: &[String]) -> Result<CertBundle, TlsError> {
    use rcgen::{
        date_time_ymd, BasicConstraints, CertificateParams, DistinguishedName, DnType,
        ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
        PKCS_ECDSA_P256_SHA256,
    };

    let names: Vec<String> = hub_names.iter().map(|n| n.trim().to_string()).collect();
    if names.is_empty() {
        return Err(TlsError::Generate(
            "at least one hub name (DNS name or IP address) is required".into(),
        ));
    }
    if names.iter().any(|n| n.is_empty()) {
        return Err(TlsError::Generate("a hub name is empty".into()));
    }

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
    let mut hub_params = CertificateParams::new(names.clone())
        .map_err(|e| TlsError::Generate(format!("invalid hub name in {names:?}: {e}")))?;
    // Be explicit about the SAN types (rcgen already does this, but the
    // contract is ours).
    hub_params.subject_alt_names = names
        .iter()
        .map(|n| match n.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => n
                .clone()
                .try_into()
                .map(SanType::DnsName)
                .map_err(|e| TlsError::Generate(format!("invalid hub DNS name {n:?}: {e}"))),
        })
        .collect::<Result<_, _>>()?;
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

/// Default hub names for a local hub: `localhost`, `127.0.0.1` and `::1`.
pub fn default_hub_names() -> Vec<String> {
    vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
}

// ---------------------------------------------------------------------------
// Cert directory
// ---------------------------------------------------------------------------

/// Paths of the four files in a cert directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    /// CA certificate (`ca.pem`).
    pub ca_cert: PathBuf,
    /// CA private key (`ca.key`).
    pub ca_key: PathBuf,
    /// Hub certificate (`hub.pem`).
    pub hub_cert: PathBuf,
    /// Hub private key (`hub.key`).
    pub hub_key: PathBuf,
}

impl CertFiles {
    /// The standard file names (`ca.pem`, `ca.key`, `hub.pem`, `hub.key`) inside `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        CertFiles {
            ca_cert: dir.join(CA_CERT_FILE),
            ca_key: dir.join(CA_KEY_FILE),
            hub_cert: dir.join(HUB_CERT_FILE),
            hub_key: dir.join(HUB_KEY_FILE),
        }
    }
}

/// Writes `contents` to `path`; `private` files get mode 0600 (on Unix).
/// Without `overwrite` the file must not exist (checked atomically).
fn write_file(path: &Path, contents: &str, private: bool, overwrite: bool) -> Result<(), TlsError> {
    let mut opts = fs::OpenOptions::new();
    opts.write(true);
    if overwrite {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if private { 0o600 } else { 0o644 });
    }
    let mut file = opts.open(path).map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            TlsError::AlreadyExists(path.to_path_buf())
        } else {
            io_err(path, e)
        }
    })?;
    // The mode above only applies to newly created files; an overwritten key
    // file may have had looser permissions.
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(fs::Permissions::from_mode(0o600))
            .map_err(|e| io_err(path, e))?;
    }
    #[cfg(not(unix))]
    let _ = private;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| io_err(path, e))
}

/// Writes `bundle` into `dir` as `ca.pem`, `ca.key`, `hub.pem`, `hub.key`.
///
/// Creates `dir` (and parents) if needed. Private keys are written with mode
/// 0600 on Unix. Unless `overwrite` is true, nothing is written if any of the
/// four files already exists ([`TlsError::AlreadyExists`]).
pub fn write_cert_dir(
    dir: &Path,
    bundle: &CertBundle,
    overwrite: bool,
) -> Result<CertFiles, TlsError> {
    fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let files = CertFiles::in_dir(dir);
    let plan = [
        (&files.ca_cert, &bundle.ca_cert_pem, false),
        (&files.ca_key, &bundle.ca_key_pem, true),
        (&files.hub_cert, &bundle.hub_cert_pem, false),
        (&files.hub_key, &bundle.hub_key_pem, true),
    ];
    if !overwrite {
        for (path, _, _) in &plan {
            match fs::symlink_metadata(path) {
                Ok(_) => return Err(TlsError::AlreadyExists(path.to_path_buf())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(path, e)),
            }
        }
    }
    for (path, contents, private) in plan {
        write_file(path, contents, private, overwrite)?;
    }
    Ok(files)
}

// ---------------------------------------------------------------------------
// Identity
// ---------------------------------------------------------------------------

fn read_text(path: &Path) -> Result<String, TlsError> {
    let bytes = fs::read(path).map_err(|e| io_err(path, e))?;
    String::from_utf8(bytes).map_err(|_| pem_err(path, "not a PEM text file (invalid UTF-8)"))
}

fn parse_certs(pem: &str, source: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
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

fn parse_key(pem: &str, source: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
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
    served: Arc<std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>>,
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
    fn from_pem_labeled(
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
        let certified = new.served.read().unwrap_or_else(|p| p.into_inner()).clone();
        *self.served.write().unwrap_or_else(|p| p.into_inner()) = certified;
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

// ---------------------------------------------------------------------------
// Pins
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Trust
// ---------------------------------------------------------------------------

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

/// The crypto provider of every agentwire TLS config: ring's by default, aws-lc-rs's when the
/// crate is built with the `aws-lc-rs` feature. TLS 1.3's AES-128-GCM-SHA256 suite is
/// preferred (both providers list AES-256-GCM-SHA384 first): the handshake's key schedule then
/// hashes with SHA-256, which runs on the CPU's SHA extensions; ring has no hardware path for
/// SHA-384, and a profile of 1,000 agents connecting spent about 6 % of all CPU in it. Both
/// ends of every agentwire connection use this order, and the other suites stay available to
/// other peers.
fn crypto_provider() -> Arc<CryptoProvider> {
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
struct Tls13Signatures(WebPkiSupportedAlgorithms);

impl Tls13Signatures {
    fn verify_tls12(&self) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::ServerTlsVersionIsDisabledByOurConfig,
        ))
    }

    fn verify_tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// Checks only that the hub holds the key of the certificate it presents (its handshake
/// signature), plus, with a pin, that the certificate's SPKI hashes to the pin. Without a pin
/// it accepts any certificate: that is `--insecure`, and nothing else uses it.
#[derive(Debug)]
struct KeyOnlyVerifier {
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

const INSECURE_WARNING: &str = "WARNING: TLS certificate verification is DISABLED (--insecure): \
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
const MAX_REFUSALS: usize = 64;

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
        self.refused.lock().unwrap_or_else(|p| p.into_inner())
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

/// Number of resumable sessions the hub remembers (stateful resumption).
pub const SERVER_SESSION_CACHE_SIZE: usize = 4096;

/// Builds the hub's TLS config: TLS 1.3 only, ring provider, no client
/// certificates, the given ALPN protocols, and `max_early_data_size =
/// u32::MAX` (quinn requires 0 or `u32::MAX`; agentwire wants 0-RTT).
///
/// Session tickets are issued (rustls sends 2 NewSessionTicket messages per
/// connection) but resumption is *stateful*: tickets are keys into an
/// in-memory cache of [`SERVER_SESSION_CACHE_SIZE`] sessions. rustls only
/// allows 0-RTT with stateful resumption (RFC 8446 §8.1) and silently drops
/// early data if the stateless ring `Ticketer` is installed, so it is
/// deliberately not. Each ticket is single-use, which also limits 0-RTT replay
/// to nothing within one hub process; a restarted hub forgets all sessions and
/// clients fall back to a full handshake.
pub fn server_config(
    identity: &HubIdentity,
    alpn: &[&[u8]],
) -> Result<rustls::ServerConfig, TlsError> {
    server_config_for_agents(identity, alpn, None)
}

/// [`server_config`] that, given `clients`, requires every peer to present a certificate
/// chaining to one of its CAs with the `clientAuth` usage (mutual TLS); the hub then reads
/// the agent id from it ([`peer_agent_id`]). A peer without one fails the handshake
/// (TLS alert `certificate_required`). Resumed sessions keep the certificate they were
/// verified with.
pub fn server_config_for_agents(
    identity: &HubIdentity,
    alpn: &[&[u8]],
    clients: Option<&ClientCa>,
) -> Result<rustls::ServerConfig, TlsError> {
    let builder = rustls::ServerConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?;
    let builder = match clients {
        Some(ca) => builder.with_client_cert_verifier(ca.verifier()?),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(ServedCert(identity.served.clone())));
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config.session_storage =
        rustls::server::ServerSessionMemoryCache::new(SERVER_SESSION_CACHE_SIZE);
    config.max_early_data_size = u32::MAX;
    Ok(config)
}

/// The certificate a hub serves, replaceable while it runs ([`HubIdentity::serve_instead`]).
#[derive(Debug)]
struct ServedCert(Arc<std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>>);

impl rustls::server::ResolvesServerCert for ServedCert {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|p| p.into_inner()).clone())
    }
}

// ---------------------------------------------------------------------------
// Error descriptions
// ---------------------------------------------------------------------------

/// rustls reports presented names as `DnsName("x")` / `IpAddress(1.2.3.4)`.
fn pretty_san(name: &str) -> &str {
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

fn describe_cert_error(err: &CertificateError) -> String {
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

fn describe_alert(alert: &rustls::AlertDescription) -> String {
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

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{ClientConnection, Connection, ServerConnection};

    fn identity(bundle: &CertBundle) -> HubIdentity {
        HubIdentity::from_pem(&bundle.hub_cert_pem, &bundle.hub_key_pem).unwrap()
    }

    fn local_bundle() -> CertBundle {
        generate(&default_hub_names()).unwrap()
    }

    /// Moves all pending TLS bytes from `from` to `to`.
    fn pump(from: &mut Connection, to: &mut Connection) -> Result<usize, rustls::Error> {
        let mut buf = Vec::new();
        while from.wants_write() {
            from.write_tls(&mut buf).unwrap();
        }
        let mut rd = &buf[..];
        while !rd.is_empty() {
            to.read_tls(&mut rd).unwrap();
            to.process_new_packets()?;
        }
        Ok(buf.len())
    }

    struct Outcome {
        client_err: Option<rustls::Error>,
        server_err: Option<rustls::Error>,
        alpn: Option<Vec<u8>>,
        suite: Option<rustls::CipherSuite>,
    }

    impl Outcome {
        fn ok(&self) -> bool {
            self.client_err.is_none() && self.server_err.is_none()
        }
        fn client_err(&self) -> &rustls::Error {
            self.client_err.as_ref().expect("client should have failed")
        }
    }

    /// In-memory handshake between a client and a server config.
    fn handshake(
        client: rustls::ClientConfig,
        server: rustls::ServerConfig,
        name: &str,
    ) -> Outcome {
        let name = ServerName::try_from(name.to_string()).unwrap();
        let mut c = Connection::Client(ClientConnection::new(Arc::new(client), name).unwrap());
        let mut s = Connection::Server(ServerConnection::new(Arc::new(server)).unwrap());
        let mut out = Outcome {
            client_err: None,
            server_err: None,
            alpn: None,
            suite: None,
        };
        for _ in 0..20 {
            let a = match pump(&mut c, &mut s) {
                Ok(n) => n,
                Err(e) => {
                    out.server_err = Some(e);
                    let _ = pump(&mut s, &mut c).map_err(|e| out.client_err = Some(e));
                    return out;
                }
            };
            let b = match pump(&mut s, &mut c) {
                Ok(n) => n,
                Err(e) => {
                    out.client_err = Some(e);
                    let _ = pump(&mut c, &mut s).map_err(|e| out.server_err = Some(e));
                    return out;
                }
            };
            if a == 0 && b == 0 && !c.is_handshaking() && !s.is_handshaking() {
                out.alpn = c.alpn_protocol().map(|p| p.to_vec());
                out.suite = c.negotiated_cipher_suite().map(|s| s.suite());
                assert_eq!(s.alpn_protocol(), c.alpn_protocol());
                return out;
            }
        }
        panic!("handshake did not finish");
    }

    fn server_for(bundle: &CertBundle) -> rustls::ServerConfig {
        server_config(&identity(bundle), &[ALPN_AGENTWIRE]).unwrap()
    }

    fn client_for(trust: &HubTrust) -> rustls::ClientConfig {
        client_config(trust, &[ALPN_AGENTWIRE]).unwrap()
    }

    #[test]
    fn ca_trusted_handshake_succeeds_for_every_default_name() {
        let bundle = local_bundle();
        let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
        for name in default_hub_names() {
            let out = handshake(client_for(&trust), server_for(&bundle), &name);
            assert!(
                out.ok(),
                "{name}: {:?} / {:?}",
                out.client_err,
                out.server_err
            );
            assert_eq!(out.alpn.as_deref(), Some(ALPN_AGENTWIRE));
            assert_eq!(
                out.suite,
                Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256),
                "the hardware-hashed suite is preferred"
            );
        }
    }

    #[test]
    fn wrong_ca_is_rejected_with_unknown_issuer() {
        let hub = local_bundle();
        let other = local_bundle();
        let trust = HubTrust::ca_pem(&other.ca_cert_pem).unwrap();
        let out = handshake(client_for(&trust), server_for(&hub), "localhost");
        let err = out.client_err();
        assert!(
            matches!(
                err,
                rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)
            ),
            "{err:?}"
        );
        let msg = describe_tls_error(err);
        assert!(msg.contains("not signed by the trusted CA"), "{msg}");
        // The hub sees the client's alert.
        let server_msg = describe_tls_error(out.server_err.as_ref().unwrap());
        assert!(
            server_msg.contains("rejected our certificate"),
            "{server_msg}"
        );
    }

    #[test]
    fn hub_name_not_in_sans_fails_clearly() {
        let bundle = generate(&["hub.example".to_string(), "10.1.2.3".to_string()]).unwrap();
        let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
        let ok = handshake(client_for(&trust), server_for(&bundle), "10.1.2.3");
        assert!(ok.ok(), "{:?}", ok.client_err);
        let out = handshake(client_for(&trust), server_for(&bundle), "localhost");
        let err = out.client_err();
        assert!(
            matches!(
                err,
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                        | CertificateError::NotValidForNameContext { .. }
                )
            ),
            "{err:?}"
        );
        let msg = describe_tls_error(err);
        assert!(
            msg.contains("not valid for the name \"localhost\""),
            "{msg}"
        );
        assert!(msg.contains("hub.example"), "{msg}");
        assert!(msg.contains("10.1.2.3"), "{msg}");
    }

    #[test]
    fn correct_pin_succeeds_regardless_of_name_and_issuer() {
        let bundle = generate(&["hub.example".to_string()]).unwrap();
        let pin = identity(&bundle).spki_pin().unwrap();
        let trust = HubTrust::pin(&pin).unwrap();
        let out = handshake(client_for(&trust), server_for(&bundle), "anything.invalid");
        assert!(out.ok(), "{:?} / {:?}", out.client_err, out.server_err);
        assert_eq!(out.alpn.as_deref(), Some(ALPN_AGENTWIRE));
    }

    #[test]
    fn wrong_pin_is_rejected_with_pin_message() {
        let hub = local_bundle();
        let other = local_bundle();
        let want = identity(&other).spki_pin().unwrap();
        let got = identity(&hub).spki_pin().unwrap();
        assert_ne!(want, got);
        let trust = HubTrust::pin(&want).unwrap();
        let out = handshake(client_for(&trust), server_for(&hub), "localhost");
        let err = out.client_err();
        let msg = describe_tls_error(err);
        assert_eq!(
            msg,
            format!("the hub's public key {got} does not match the pinned {want}")
        );
    }

    #[test]
    fn insecure_accepts_anything() {
        // A self-signed cert for an unrelated name, not from our CA.
        let rogue = rcgen::generate_simple_self_signed(vec!["evil.example".to_string()]).unwrap();
        let ident =
            HubIdentity::from_pem(&rogue.cert.pem(), &rogue.signing_key.serialize_pem()).unwrap();
        let server = server_config(&ident, &[ALPN_AGENTWIRE]).unwrap();
        let out = handshake(client_for(&HubTrust::Insecure), server, "localhost");
        assert!(out.ok(), "{:?} / {:?}", out.client_err, out.server_err);
    }

    #[test]
    fn alpn_mismatch_is_described() {
        let bundle = local_bundle();
        let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
        let client = client_config(&trust, &[b"something-else"]).unwrap();
        let out = handshake(client, server_for(&bundle), "localhost");
        let err = out.server_err.as_ref().unwrap();
        assert!(describe_tls_error(err).contains("ALPN"), "{err:?}");
    }

    #[test]
    fn spki_pin_is_hash_of_subject_public_key_info() {
        use rcgen::PublicKeyData;
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["x.example".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let expected = ring::digest::digest(&ring::digest::SHA256, &key.subject_public_key_info());
        let got = spki_sha256(cert.der().as_ref()).unwrap();
        assert_eq!(&got[..], expected.as_ref());
        assert!(spki_sha256(b"not a certificate").is_err());
        let pin = format_pin(&got);
        assert!(pin.starts_with("sha256:"));
        assert_eq!(pin.len(), 7 + 64);
    }

    #[test]
    fn pin_parsing_accepts_and_rejects_formats() {
        let digest = [0xabu8; 32];
        let hex_lower = hex::encode(digest);
        let hex_upper = hex_lower.to_uppercase();
        for s in [
            format!("sha256:{hex_lower}"),
            format!("SHA256:{hex_upper}"),
            format!("Sha256:{hex_upper}"),
            hex_lower.clone(),
            hex_upper.clone(),
            format!("  sha256:{hex_lower}\n"),
        ] {
            match HubTrust::pin(&s) {
                Ok(HubTrust::PinnedSpki(d)) => assert_eq!(d, digest, "{s}"),
                other => panic!("{s:?} -> {other:?}"),
            }
        }
        assert_eq!(
            format_pin(&digest),
            format!("sha256:{hex_lower}"),
            "format_pin round trip"
        );
        for bad in [
            String::new(),
            "sha256:".to_string(),
            format!("sha256:{}", &hex_lower[..62]),
            format!("sha256:{hex_lower}00"),
            format!("sha1:{hex_lower}"),
            format!("sha256//{hex_lower}"),
            format!("sha256:{}zz", &hex_lower[..62]),
            "sha256:é".to_string(),
        ] {
            let err = HubTrust::pin(&bad).unwrap_err();
            assert!(matches!(err, TlsError::InvalidPin(_)), "{bad:?} -> {err:?}");
            let msg = err.to_string();
            assert!(
                msg.contains("64 hex digits") || msg.contains("sha256"),
                "{msg}"
            );
        }
    }

    #[test]
    fn write_cert_dir_sets_key_modes_and_refuses_overwrite() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("nested").join("certs");
        let bundle = local_bundle();
        let files = write_cert_dir(&dir, &bundle, false).unwrap();
        assert_eq!(files, CertFiles::in_dir(&dir));
        assert_eq!(
            fs::read_to_string(&files.ca_cert).unwrap(),
            bundle.ca_cert_pem
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&files.ca_key), 0o600);
            assert_eq!(mode(&files.hub_key), 0o600);
            // An overwritten key with loose permissions is tightened again.
            fs::set_permissions(&files.hub_key, fs::Permissions::from_mode(0o644)).unwrap();
            let second = local_bundle();
            write_cert_dir(&dir, &second, true).unwrap();
            assert_eq!(mode(&files.hub_key), 0o600);
            assert_eq!(
                fs::read_to_string(&files.hub_key).unwrap(),
                second.hub_key_pem
            );
        }
        let before = fs::read_to_string(&files.hub_key).unwrap();
        let err = write_cert_dir(&dir, &local_bundle(), false).unwrap_err();
        match &err {
            TlsError::AlreadyExists(p) => assert_eq!(p, &files.ca_cert),
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("ca.pem"), "{err}");
        assert!(err.to_string().contains("already exists"), "{err}");
        assert_eq!(fs::read_to_string(&files.hub_key).unwrap(), before);
    }

    #[test]
    fn hub_identity_from_dir_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let bundle = local_bundle();
        write_cert_dir(tmp.path(), &bundle, false).unwrap();
        let loaded = HubIdentity::from_dir(tmp.path()).unwrap();
        let direct = identity(&bundle);
        assert_eq!(loaded.cert_chain, direct.cert_chain);
        assert_eq!(loaded.key.secret_der(), direct.key.secret_der());
        assert_eq!(loaded.spki_pin().unwrap(), direct.spki_pin().unwrap());
        let cloned = loaded.clone();
        assert_eq!(cloned.key.secret_der(), loaded.key.secret_der());
        let dbg = format!("{loaded:?}");
        assert!(
            dbg.contains("<redacted>") && !dbg.contains("PRIVATE"),
            "{dbg}"
        );
        // The CA file works as trust.
        let trust = HubTrust::ca_file(&tmp.path().join(CA_CERT_FILE)).unwrap();
        let server = server_config(&loaded, &[ALPN_AGENTWIRE]).unwrap();
        assert!(handshake(client_for(&trust), server, "127.0.0.1").ok());
    }

    #[test]
    fn loading_errors_name_the_file_and_problem() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("nope.pem");
        let err = HubIdentity::load(&missing, &missing).unwrap_err();
        assert!(matches!(err, TlsError::Io { .. }));
        assert!(err.to_string().contains("nope.pem"), "{err}");

        let bundle = local_bundle();
        let other = local_bundle();
        let cert = tmp.path().join("hub.pem");
        let key = tmp.path().join("hub.key");
        fs::write(&cert, &bundle.hub_cert_pem).unwrap();
        fs::write(&key, &other.hub_key_pem).unwrap();
        let err = HubIdentity::load(&cert, &key).unwrap_err();
        assert!(matches!(err, TlsError::KeyMismatch { .. }), "{err:?}");

        // Key file holding a certificate; cert file holding a key.
        let err = HubIdentity::load(&cert, &cert).unwrap_err();
        assert!(
            matches!(err, TlsError::NoKey(ref p) if p == &cert),
            "{err:?}"
        );
        let err = HubIdentity::load(&key, &key).unwrap_err();
        assert!(
            matches!(err, TlsError::NoCertificate(ref p) if p == &key),
            "{err:?}"
        );
        assert!(err.to_string().contains("contains no certificate"), "{err}");

        let garbage = tmp.path().join("garbage.pem");
        fs::write(&garbage, "-----BEGIN CERTIFICATE-----\n!!!!\n").unwrap();
        let err = HubTrust::ca_file(&garbage).unwrap_err();
        assert!(err.to_string().contains("garbage.pem"), "{err}");
        let err = HubTrust::ca_pem("").unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate(_)), "{err:?}");
        assert!(generate(&[]).is_err());
    }

    #[test]
    fn bundle_debug_hides_private_keys() {
        let bundle = local_bundle();
        let dbg = format!("{bundle:?}");
        assert!(!dbg.contains("PRIVATE KEY"), "{dbg}");
    }

    /// Real QUIC over loopback: quinn accepts both configs, ALPN is
    /// negotiated, a resumed connection gets 0-RTT, and a pin mismatch
    /// surfaces through quinn with a describable reason.
    #[tokio::test]
    async fn quinn_accepts_configs_and_does_0rtt() {
        use quinn::crypto::rustls::{HandshakeData, QuicClientConfig, QuicServerConfig};

        let bundle = local_bundle();
        let ident = identity(&bundle);
        let server_crypto = server_config(&ident, &[ALPN_AGENTWIRE]).unwrap();
        let server_cfg = quinn::ServerConfig::with_crypto(Arc::new(
            QuicServerConfig::try_from(server_crypto).unwrap(),
        ));
        let server = quinn::Endpoint::server(server_cfg, "127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();

        let server_task = tokio::spawn(async move {
            while let Some(incoming) = server.accept().await {
                let Ok(conn) = incoming.await else { continue };
                tokio::spawn(async move {
                    while let Ok((mut send, mut recv)) = conn.accept_bi().await {
                        let data = recv.read_to_end(1024).await.unwrap();
                        send.write_all(&data).await.unwrap();
                        send.finish().unwrap();
                    }
                });
            }
        });

        let client = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        let trust = HubTrust::ca_pem(&bundle.ca_cert_pem).unwrap();
        let client_crypto = client_config(&trust, &[ALPN_AGENTWIRE]).unwrap();
        let client_cfg =
            quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(client_crypto).unwrap()));

        async fn echo(conn: &quinn::Connection, msg: &[u8]) -> Vec<u8> {
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            send.write_all(msg).await.unwrap();
            send.finish().unwrap();
            recv.read_to_end(1024).await.unwrap()
        }

        let test = async {
            // 1. Full handshake.
            let conn = client
                .connect_with(client_cfg.clone(), addr, "localhost")
                .unwrap()
                .await
                .unwrap();
            let hd = conn
                .handshake_data()
                .unwrap()
                .downcast::<HandshakeData>()
                .unwrap();
            assert_eq!(hd.protocol.as_deref(), Some(ALPN_AGENTWIRE));
            assert_eq!(echo(&conn, b"hello").await, b"hello");
            conn.close(0u32.into(), b"done");
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;

            // 2. Resumed connection with 0-RTT (same ClientConfig → same
            //    session store, which now holds the hub's ticket).
            let connecting = client
                .connect_with(client_cfg.clone(), addr, "localhost")
                .unwrap();
            let (conn, accepted) = connecting
                .into_0rtt()
                .unwrap_or_else(|_| panic!("no 0-RTT: session ticket not stored / early data off"));
            assert_eq!(echo(&conn, b"early").await, b"early");
            assert!(accepted.await, "hub rejected 0-RTT");
            conn.close(0u32.into(), b"done");

            // 3. A wrong pin fails, and the recording check keeps the rustls error that quinn
            //    reports only as text.
            let wrong = identity(&local_bundle()).spki_pin().unwrap();
            let recorder = Arc::new(RecordingVerifier::new(
                server_verifier(&HubTrust::pin(&wrong).unwrap()).unwrap(),
            ));
            let pinned = client_config_with_verifier(recorder.clone(), &[ALPN_AGENTWIRE]).unwrap();
            let pinned_cfg =
                quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(pinned).unwrap()));
            let err = client
                .connect_with(pinned_cfg, addr, "localhost")
                .unwrap()
                .await
                .unwrap_err();
            assert!(
                matches!(err, quinn::ConnectionError::TransportError(_)),
                "{err:?}"
            );
            let refused = recorder
                .take_refusal("localhost")
                .expect("the check recorded its refusal");
            let msg = describe_tls_error(&refused);
            assert!(msg.contains("does not match the pinned"), "{msg} ({err})");
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), test)
            .await
            .expect("quinn test timed out");
        client.wait_idle().await;
        server_task.abort();
    }
}
