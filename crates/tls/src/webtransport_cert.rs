//! Certificates a browser accepts by their hash for WebTransport (`serverCertificateHashes`):
//! issuing one ([`issue_webtransport_cert`]), checking one against the browsers' rules
//! ([`check_webtransport_cert`]), its SHA-256 ([`certificate_sha256`]) and its files.
//!
//! A page may connect to a hub whose certificate no public CA signed by naming the
//! certificate's SHA-256 in `serverCertificateHashes`; browsers then accept only an ECDSA P-256
//! certificate whose whole validity (notBefore to notAfter) is at most 14 days, so such a
//! certificate must be issued again every two weeks and the hub must take the new one without
//! a restart. This module owns those rules and the files `webtransport.pem` and
//! `webtransport.key` in a cert directory; it must not build TLS configurations or decide which
//! connection is served which certificate.

use super::*;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The certificate's file in a cert directory.
pub const WEBTRANSPORT_CERT_FILE: &str = "webtransport.pem";
/// Its private key's file in a cert directory (mode 0600).
pub const WEBTRANSPORT_KEY_FILE: &str = "webtransport.key";
/// The longest validity browsers accept for a certificate named by its hash (Chromium counts
/// from notBefore to notAfter, and refuses even a 14-day certificate backdated 5 minutes).
pub const WEBTRANSPORT_MAX_VALIDITY: Duration = Duration::from_secs(14 * 86_400);
/// How far before its issue a certificate starts to be valid, for clocks a little behind.
pub const WEBTRANSPORT_BACKDATE: Duration = Duration::from_secs(3_600);
/// The most days [`issue_webtransport_cert`] issues for (plus [`WEBTRANSPORT_BACKDATE`], under
/// [`WEBTRANSPORT_MAX_VALIDITY`]).
pub const WEBTRANSPORT_MAX_DAYS: u32 = 13;

/// A certificate for browsers, its key and its SHA-256.
#[derive(Clone)]
pub struct WebTransportCert {
    /// The certificate, signed by the cert directory's CA.
    pub cert_pem: String,
    /// Its private key (ECDSA P-256).
    pub key_pem: String,
    /// SHA-256 of the certificate's DER: the value a page gives in `serverCertificateHashes`.
    pub sha256: [u8; 32],
    /// When it stops being valid.
    pub not_after: SystemTime,
}

impl fmt::Debug for WebTransportCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebTransportCert")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("sha256", &hex::encode(self.sha256))
            .field("not_after", &self.not_after)
            .finish()
    }
}

/// SHA-256 of a certificate's DER encoding (the whole certificate, as
/// `serverCertificateHashes` names it; not the public-key pin of [`spki_sha256`]).
pub fn certificate_sha256(cert_der: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, cert_der);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// What a browser would hold against `cert_pem` (the first certificate in it) when a page
/// names it by hash: not ECDSA P-256, or valid for longer than [`WEBTRANSPORT_MAX_VALIDITY`].
/// Returns the certificate's SHA-256 and its notAfter when it passes.
pub fn check_webtransport_cert(cert_pem: &str) -> Result<([u8; 32], SystemTime), TlsError> {
    let der = CertificateDer::from_pem_slice(cert_pem.as_bytes())
        .map_err(|e| TlsError::BadCertificate(format!("not a PEM certificate: {e}")))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| TlsError::BadCertificate(e.to_string()))?;
    let spki = &cert.tbs_certificate.subject_pki;
    let ec = spki.algorithm.algorithm == x509_parser::oid_registry::OID_KEY_TYPE_EC_PUBLIC_KEY;
    let p256 = spki
        .algorithm
        .parameters
        .as_ref()
        .and_then(|p| p.as_oid().ok())
        .is_some_and(|curve| curve == x509_parser::oid_registry::OID_EC_P256);
    if !(ec && p256) {
        return Err(TlsError::BadCertificate(
            "browsers accept only an ECDSA P-256 certificate by its hash; issue one with \
             `agentwire cert --webtransport`"
                .into(),
        ));
    }
    let validity = cert.validity();
    let (from, until) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    let span = until.saturating_sub(from);
    let max = WEBTRANSPORT_MAX_VALIDITY.as_secs() as i64;
    if span > max {
        return Err(TlsError::BadCertificate(format!(
            "the certificate is valid for {:.1} days; browsers accept at most 14 by its hash",
            span as f64 / 86_400.0
        )));
    }
    let not_after = UNIX_EPOCH + Duration::from_secs(u64::try_from(until).unwrap_or(0));
    Ok((certificate_sha256(&der), not_after))
}

#[cfg(feature = "generate")]
/// Issues a certificate browsers accept by its hash: ECDSA P-256, for `hub_names` (DNS names
/// or IP addresses), signed by the CA in `ca_cert_pem` and `ca_key_pem`, valid from
/// [`WEBTRANSPORT_BACKDATE`] ago for `days` days (1 to [`WEBTRANSPORT_MAX_DAYS`]).
///
/// ```
/// use agentwire_tls::{check_webtransport_cert, generate, issue_webtransport_cert};
/// let ca = generate(&["localhost".into()])?;
/// let wt = issue_webtransport_cert(&ca.ca_cert_pem, &ca.ca_key_pem, &["127.0.0.1".into()], 13)?;
/// let (sha256, _) = check_webtransport_cert(&wt.cert_pem)?;
/// assert_eq!(sha256, wt.sha256);
/// # Ok::<(), agentwire_tls::TlsError>(())
/// ```
pub fn issue_webtransport_cert(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    hub_names: &[String],
    days: u32,
) -> Result<WebTransportCert, TlsError> {
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
    };
    if !(1..=WEBTRANSPORT_MAX_DAYS).contains(&days) {
        return Err(TlsError::Generate(format!(
            "a WebTransport certificate is valid for 1 to {WEBTRANSPORT_MAX_DAYS} days (browsers \
             refuse one valid for more than 14 by its hash); {days} asked"
        )));
    }
    let names = hub_san_names(hub_names)?;
    let issuer = super::ca_issuer(ca_cert_pem, ca_key_pem)?;
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(gen_err)?;
    let mut params = CertificateParams::default();
    params.subject_alt_names = names;
    let mut dn = DistinguishedName::new();
    if let Some(first) = hub_names.first() {
        dn.push(DnType::CommonName, first.trim());
    }
    dn.push(DnType::OrganizationName, "agentwire WebTransport");
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let from = now.saturating_sub(WEBTRANSPORT_BACKDATE);
    let until = from + Duration::from_secs(u64::from(days) * 86_400) + WEBTRANSPORT_BACKDATE;
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + from;
    params.not_after = epoch + until;
    let cert = params.signed_by(&key, &issuer).map_err(gen_err)?;
    Ok(WebTransportCert {
        sha256: certificate_sha256(cert.der()),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        not_after: UNIX_EPOCH + until,
    })
}

/// Where [`write_webtransport_cert`] put a certificate and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebTransportCertFiles {
    /// `DIR/webtransport.pem`.
    pub cert: PathBuf,
    /// `DIR/webtransport.key` (mode 0600).
    pub key: PathBuf,
}

impl WebTransportCertFiles {
    /// The file names inside `dir`.
    pub fn in_dir(dir: &Path) -> Self {
        WebTransportCertFiles {
            cert: dir.join(WEBTRANSPORT_CERT_FILE),
            key: dir.join(WEBTRANSPORT_KEY_FILE),
        }
    }
}

/// Writes `cert` into `dir` (created if needed). Unless `overwrite`, nothing is written if
/// either file exists. Each file is written beside its place and renamed into it, the key
/// first, so a hub reloading meanwhile reads the old pair or the new key with the old
/// certificate (refused as a mismatch, the old pair kept), never half a file.
pub fn write_webtransport_cert(
    dir: &Path,
    cert: &WebTransportCert,
    overwrite: bool,
) -> Result<WebTransportCertFiles, TlsError> {
    fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    let files = WebTransportCertFiles::in_dir(dir);
    if !overwrite {
        refuse_existing([files.cert.as_path(), files.key.as_path()])?;
    }
    for (path, contents, private) in [
        (&files.key, &cert.key_pem, true),
        (&files.cert, &cert.cert_pem, false),
    ] {
        let staged = path.with_extension("new");
        write_file(&staged, contents, private, true)?;
        fs::rename(&staged, path).map_err(|e| io_err(path, e))?;
    }
    Ok(files)
}
