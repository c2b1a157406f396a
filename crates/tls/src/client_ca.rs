//! What a hub accepts of agents' certificates, replaceable while it runs: the CA(s) they must
//! chain to and the serials revoked since they were issued.
//!
//! This module owns [`ClientCa`] (what `agentwire hub --client-ca FILE` loads, with
//! `--revoked-serials FILE`), the verifier rustls asks during every handshake (it reads the
//! CA and revocations in force at that moment, so a [`ClientCa::reload`] reaches every
//! listener sharing the `ClientCa`), [`RevokedSerials`], and [`AgentCertificate`], the
//! verified chain a hub keeps for a connection so that it can check it again at the hello
//! (a resumed TLS session skips verification) and after a reload.
//!
//! It must not decide what an agent id may do (the access policy does) nor close connections
//! (the hub does, with what [`ClientCa::check`] says).

use agentwire_sync::RwLockExt;
use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, UnixTime};

use super::{crypto_provider, parse_certs, pem_err, read_text, TlsError, INLINE_PEM};

/// The CA(s) whose agent certificates a hub accepts, and the serials it no longer does; with
/// it, the hub requires every TLS connection to present such a certificate (see
/// [`super::server_config_for_agents`]). Clones share one state: [`reload`](Self::reload)
/// on any of them changes what every listener built from them accepts.
#[derive(Clone)]
pub struct ClientCa {
    live: Arc<RwLock<Arc<Trust>>>,
}

/// One consistent view: roots, the verifier built from them, revocations.
struct Trust {
    roots: usize,
    source: PathBuf,
    verifier: Arc<dyn ClientCertVerifier>,
    revoked: RevokedSerials,
}

impl fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let trust = self.trust();
        f.debug_struct("ClientCa")
            .field("source", &trust.source)
            .field("certificates", &trust.roots)
            .field("revoked", &trust.revoked.len())
            .finish()
    }
}

/// Why [`ClientCa::check`] no longer accepts an agent's certificate.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateRefused {
    /// Its serial is among the revoked ones in force.
    #[error("its certificate (serial {serial}) is revoked")]
    Revoked {
        /// The serial, in hex as `agentwire cert agent` prints it.
        serial: String,
    },
    /// The connection kept no certificate to check.
    #[error("no certificate")]
    Missing,
    /// It no longer chains to a CA in force (or has expired): rustls's verdict.
    #[error("its certificate is no longer accepted: {0}")]
    NotTrusted(#[source] rustls::Error),
}

/// What a [`ClientCa::reload`] put in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reloaded {
    /// CA certificates now trusted.
    pub cas: usize,
    /// Serials now revoked.
    pub revoked: usize,
}

impl ClientCa {
    /// The CA certificate(s) in the PEM file at `path` (for example the `ca.pem` of
    /// `agentwire cert`). Errors name the file.
    pub fn from_file(path: &Path) -> Result<Self, TlsError> {
        let pem = read_text(path)?;
        Self::from_trust(Trust::build(
            parse_certs(&pem, path)?,
            path,
            RevokedSerials::none(),
        )?)
    }

    /// The CA certificate(s) in PEM text.
    ///
    /// ```
    /// let ca = agentwire_tls::generate(&["localhost".into()])?;
    /// let clients = agentwire_tls::ClientCa::from_pem(&ca.ca_cert_pem)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_pem(pem: &str) -> Result<Self, TlsError> {
        let source = Path::new(INLINE_PEM);
        Self::from_trust(Trust::build(
            parse_certs(pem, source)?,
            source,
            RevokedSerials::none(),
        )?)
    }

    fn from_trust(trust: Trust) -> Result<Self, TlsError> {
        Ok(ClientCa {
            live: Arc::new(RwLock::new(Arc::new(trust))),
        })
    }

    fn trust(&self) -> Arc<Trust> {
        self.live.read_or_recover().clone()
    }

    /// Puts `revoked` in force (in place of the serials revoked before).
    pub fn set_revoked(&self, revoked: RevokedSerials) {
        let mut live = self.live.write_or_recover();
        let old = live.clone();
        *live = Arc::new(Trust {
            roots: old.roots,
            source: old.source.clone(),
            verifier: old.verifier.clone(),
            revoked,
        });
    }

    /// Reads the CA file again (a CA from inline PEM stays), and the revocation file if one
    /// was set, and puts both in force together. On any error nothing changes.
    pub fn reload(&self) -> Result<Reloaded, TlsError> {
        let old = self.trust();
        let revoked = match &old.revoked.source {
            Some(path) => RevokedSerials::from_file(path)?,
            None => old.revoked.clone(),
        };
        let trust = if old.source == Path::new(INLINE_PEM) {
            Trust {
                roots: old.roots,
                source: old.source.clone(),
                verifier: old.verifier.clone(),
                revoked,
            }
        } else {
            let pem = read_text(&old.source)?;
            Trust::build(parse_certs(&pem, &old.source)?, &old.source, revoked)?
        };
        let reloaded = Reloaded {
            cas: trust.roots,
            revoked: trust.revoked.len(),
        };
        *self.live.write_or_recover() = Arc::new(trust);
        Ok(reloaded)
    }

    /// Whether `cert` is still a credential: not revoked, and still chaining to a CA in
    /// force, at `now`. The error says why not.
    pub fn check(&self, cert: &AgentCertificate, now: UnixTime) -> Result<(), CertificateRefused> {
        let trust = self.trust();
        if trust.revoked.contains(&cert.serial) {
            return Err(CertificateRefused::Revoked {
                serial: hex(&cert.serial),
            });
        }
        let (leaf, intermediates) = cert
            .chain
            .split_first()
            .ok_or(CertificateRefused::Missing)?;
        trust
            .verifier
            .verify_client_cert(leaf, intermediates, now)
            .map(|_| ())
            .map_err(CertificateRefused::NotTrusted)
    }

    /// The verifier rustls asks: the state in force at each handshake.
    pub(super) fn verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        Ok(Arc::new(LiveVerifier {
            live: self.live.clone(),
        }))
    }
}

impl Trust {
    fn build(
        certs: Vec<CertificateDer<'static>>,
        source: &Path,
        revoked: RevokedSerials,
    ) -> Result<Trust, TlsError> {
        let mut roots = RootCertStore::empty();
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| pem_err(source, format!("not usable as a CA certificate: {e}")))?;
        }
        let count = roots.len();
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            crypto_provider(),
        )
        .build()
        .map_err(|e| pem_err(source, format!("cannot check client certificates: {e}")))?;
        Ok(Trust {
            roots: count,
            source: source.to_path_buf(),
            verifier,
            revoked,
        })
    }
}

/// Delegates to the verifier in force, refusing revoked serials first.
struct LiveVerifier {
    live: Arc<RwLock<Arc<Trust>>>,
}

impl fmt::Debug for LiveVerifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LiveVerifier")
    }
}

impl LiveVerifier {
    fn trust(&self) -> Arc<Trust> {
        self.live.read_or_recover().clone()
    }
}

impl ClientCertVerifier for LiveVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    /// No hints: they would have to outlive a reload, and an agent has one certificate.
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let trust = self.trust();
        if let Ok(serial) = serial_of(end_entity) {
            if trust.revoked.contains(&serial) {
                return Err(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::Revoked,
                ));
            }
        }
        trust
            .verifier
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.trust()
            .verifier
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.trust()
            .verifier
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.trust().verifier.supported_verify_schemes()
    }
}

/// Certificate serial numbers a hub refuses although their CA signed them: a text file, one
/// serial per line in hexadecimal (`0x` and `:` separators allowed, as `openssl x509 -serial`
/// and `agentwire cert agent` print them), `#` starting a comment.
#[derive(Clone, Default)]
pub struct RevokedSerials {
    serials: HashSet<Vec<u8>>,
    source: Option<PathBuf>,
}

impl fmt::Debug for RevokedSerials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RevokedSerials")
            .field("source", &self.source)
            .field("serials", &self.serials.len())
            .finish()
    }
}

impl RevokedSerials {
    /// None revoked.
    pub fn none() -> Self {
        Self::default()
    }

    /// The serials in the file at `path` (read again by [`ClientCa::reload`]).
    pub fn from_file(path: &Path) -> Result<Self, TlsError> {
        let text = read_text(path)?;
        let mut revoked = Self::parse(&text, path)?;
        revoked.source = Some(path.to_path_buf());
        Ok(revoked)
    }

    /// The serials in `text`; errors name `source` and the line.
    ///
    /// ```
    /// use agentwire_tls::RevokedSerials;
    /// let revoked = RevokedSerials::parse("# lost laptop\n0x01:f4\n  00ab  \n", "list".as_ref())?;
    /// assert_eq!(revoked.len(), 2);
    /// assert!(RevokedSerials::parse("xyz", "list".as_ref()).is_err());
    /// # Ok::<(), agentwire_tls::TlsError>(())
    /// ```
    pub fn parse(text: &str, source: &Path) -> Result<Self, TlsError> {
        let mut serials = HashSet::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let digits: String = line
                .trim_start_matches("0x")
                .trim_start_matches("0X")
                .chars()
                .filter(|c| *c != ':')
                .collect();
            let bytes = parse_hex(&digits).ok_or_else(|| {
                pem_err(
                    source,
                    format!("line {}: {line:?} is not a hexadecimal serial", n + 1),
                )
            })?;
            serials.insert(trim_zeros(&bytes).to_vec());
        }
        Ok(RevokedSerials {
            serials,
            source: None,
        })
    }

    /// How many serials are revoked.
    pub fn len(&self) -> usize {
        self.serials.len()
    }

    /// True when none is.
    pub fn is_empty(&self) -> bool {
        self.serials.is_empty()
    }

    fn contains(&self, serial: &[u8]) -> bool {
        !self.serials.is_empty() && self.serials.contains(trim_zeros(serial))
    }
}

/// A verified agent certificate as a hub keeps it for the connection's life.
#[derive(Clone)]
pub struct AgentCertificate {
    agent_id: Option<Arc<str>>,
    serial: Vec<u8>,
    chain: Arc<[CertificateDer<'static>]>,
}

impl fmt::Debug for AgentCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentCertificate")
            .field("agent_id", &self.agent_id)
            .field("serial", &hex(&self.serial))
            .finish()
    }
}

impl AgentCertificate {
    /// The certificate of a chain rustls verified (end-entity first); `None` when there is no
    /// chain or its end-entity certificate does not parse.
    pub fn of_chain(chain: &[CertificateDer<'_>]) -> Option<AgentCertificate> {
        let leaf = chain.first()?;
        let serial = serial_of(leaf).ok()?;
        Some(AgentCertificate {
            agent_id: super::peer_agent_id(chain),
            serial,
            chain: chain.iter().map(|c| c.clone().into_owned()).collect(),
        })
    }

    /// The agent id it names, if it names a usable one.
    pub fn agent_id(&self) -> Option<&Arc<str>> {
        self.agent_id.as_ref()
    }

    /// Its serial number, in hexadecimal.
    pub fn serial_hex(&self) -> String {
        hex(&self.serial)
    }
}

/// The serial number of a certificate, in hexadecimal (as a revocation file lists it).
pub fn certificate_serial(cert_der: &[u8]) -> Result<String, TlsError> {
    serial_of(&CertificateDer::from(cert_der)).map(|s| hex(&s))
}

fn serial_of(cert: &CertificateDer<'_>) -> Result<Vec<u8>, TlsError> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| TlsError::BadCertificate(e.to_string()))?;
    Ok(trim_zeros(parsed.tbs_certificate.raw_serial()).to_vec())
}

fn trim_zeros(serial: &[u8]) -> &[u8] {
    let first = serial.iter().position(|b| *b != 0).unwrap_or(serial.len());
    &serial[first..]
}

fn parse_hex(digits: &str) -> Option<Vec<u8>> {
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let padded = if digits.len() % 2 == 1 {
        format!("0{digits}")
    } else {
        digits.to_owned()
    };
    (0..padded.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&padded[i..i + 2], 16).ok())
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "00".into();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(all(test, feature = "generate"))]
mod tests {
    use super::*;
    use rustls_pki_types::pem::PemObject;

    fn der(pem: &str) -> CertificateDer<'static> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
    }

    #[test]
    fn serials_parse_in_the_forms_tools_print_them() {
        let r = RevokedSerials::parse(
            "# comment\n\n0x00ff\nAB:CD # trailing\n0abcd\n7\n",
            Path::new("f"),
        )
        .unwrap();
        // 0abcd and ab:cd are the same serial.
        assert_eq!(r.len(), 3);
        assert!(r.contains(&[0xff]));
        assert!(r.contains(&[0, 0xab, 0xcd]));
        assert!(r.contains(&[7]));
        assert!(!r.contains(&[8]));
        for bad in ["0x", "zz", "12 34", "-1"] {
            let err = RevokedSerials::parse(bad, Path::new("list.txt")).unwrap_err();
            assert!(err.to_string().contains("list.txt"), "{err}");
        }
    }

    #[test]
    fn a_revoked_or_foreign_certificate_fails_the_check_and_a_reload_changes_it() {
        let dir = tempfile::tempdir().unwrap();
        let ca = super::super::generate(&["localhost".into()]).unwrap();
        let other = super::super::generate(&["localhost".into()]).unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, &ca.ca_cert_pem).unwrap();
        let revoked_file = dir.path().join("revoked.txt");
        std::fs::write(&revoked_file, "").unwrap();
        let clients = ClientCa::from_file(&ca_file).unwrap();
        clients.set_revoked(RevokedSerials::from_file(&revoked_file).unwrap());

        let issued =
            super::super::issue_agent_cert(&ca.ca_cert_pem, &ca.ca_key_pem, "w1", 30).unwrap();
        let cert = AgentCertificate::of_chain(&[der(&issued.cert_pem)]).unwrap();
        assert_eq!(cert.agent_id().map(|s| &**s), Some("w1"));
        assert_eq!(
            cert.serial_hex(),
            certificate_serial(der(&issued.cert_pem).as_ref()).unwrap()
        );
        let now = UnixTime::now();
        clients.check(&cert, now).unwrap();

        // Revoked, by the serial as `agentwire cert agent` prints it.
        std::fs::write(&revoked_file, format!("{}\n", cert.serial_hex())).unwrap();
        let reloaded = clients.reload().unwrap();
        assert_eq!(reloaded, Reloaded { cas: 1, revoked: 1 });
        let why = clients.check(&cert, now).unwrap_err();
        assert!(
            matches!(&why, CertificateRefused::Revoked { serial } if *serial == cert.serial_hex()),
            "{why}"
        );
        assert!(why.to_string().contains("revoked"), "{why}");
        // rustls is refused too, at the handshake.
        let live = clients.verifier().unwrap();
        assert!(live
            .verify_client_cert(&der(&issued.cert_pem), &[], now)
            .is_err());

        // Another CA in the file: the old one's certificates no longer chain.
        std::fs::write(&revoked_file, "").unwrap();
        std::fs::write(&ca_file, &other.ca_cert_pem).unwrap();
        clients.reload().unwrap();
        let why = clients.check(&cert, now).unwrap_err();
        assert!(matches!(why, CertificateRefused::NotTrusted(_)), "{why}");
        assert!(why.to_string().contains("no longer accepted"), "{why}");

        // A file that does not parse leaves what was in force.
        std::fs::write(&ca_file, "garbage").unwrap();
        assert!(clients.reload().is_err());
        std::fs::write(&revoked_file, "not hex").unwrap();
        assert!(clients.reload().is_err());
        let fresh = super::super::issue_agent_cert(&other.ca_cert_pem, &other.ca_key_pem, "w2", 30)
            .unwrap();
        let fresh = AgentCertificate::of_chain(&[der(&fresh.cert_pem)]).unwrap();
        clients.check(&fresh, now).unwrap();
    }
}
