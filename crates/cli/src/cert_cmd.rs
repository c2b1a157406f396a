//! `agentwire cert` and `agentwire cert agent`: certificates written into a directory.

use agentwire::tls::{self, HubIdentity};
use anyhow::{bail, Context, Result};

use args::{CertAgentArgs, CertArgs, CertCommand};

use crate::*;

pub(crate) fn cert(a: CertArgs) -> Result<()> {
    let out = match (a.issue, a.out) {
        (Some(CertCommand::Agent(agent)), _) => return cert_agent(agent),
        (None, Some(out)) => out,
        (None, None) => bail!("say where to write the certificates: --out DIR"),
    };
    let names = if a.names.is_empty() {
        tls::default_hub_names()
    } else {
        a.names.clone()
    };
    let ca = tls::CertFiles::in_dir(&out);
    // With --webtransport, a directory that has its CA keeps it (and its hub certificate).
    let has_ca = ca.ca_cert.exists() && ca.ca_key.exists();
    if !(a.webtransport && has_ca) {
        let bundle = tls::generate(&names).context("generating certificates")?;
        let force = a.force && !a.webtransport;
        let files = tls::write_cert_dir(&out, &bundle, force)?;
        let identity = HubIdentity::from_dir(&out)?;
        println!("CA certificate:  {}", files.ca_cert.display());
        println!("CA key:          {}", files.ca_key.display());
        println!("hub certificate: {}", files.hub_cert.display());
        println!("hub key:         {}", files.hub_key.display());
        println!("hub names:       {}", names.join(", "));
        println!("hub key pin:     {}", identity.spki_pin()?);
    }
    if a.webtransport {
        cert_webtransport(&out, &ca, &names, a.days, a.force)?;
    }
    Ok(())
}

/// `agentwire cert --webtransport`: a certificate browsers accept by its SHA-256.
fn cert_webtransport(
    out: &std::path::Path,
    ca: &tls::CertFiles,
    names: &[String],
    days: u32,
    force: bool,
) -> Result<()> {
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    let (ca_cert, ca_key) = (read(&ca.ca_cert)?, read(&ca.ca_key)?);
    let wt = tls::issue_webtransport_cert(&ca_cert, &ca_key, names, days)?;
    let files = tls::write_webtransport_cert(out, &wt, force)?;
    let hash = hex::encode(wt.sha256);
    println!("WebTransport certificate: {}", files.cert.display());
    println!("WebTransport key:         {}", files.key.display());
    println!(
        "valid for:                {days} days (browsers accept at most 14; rotate with --force)"
    );
    println!("sha-256:                  {hash}");
    println!(
        "in a page: serverCertificateHashes: [{{ algorithm: \"sha-256\", value: \
         Uint8Array.from(\"{hash}\".match(/../g), (h) => parseInt(h, 16)) }}]"
    );
    Ok(())
}

pub(crate) fn cert_agent(a: CertAgentArgs) -> Result<()> {
    let ca = tls::CertFiles::in_dir(&a.ca_dir);
    let read = |path: &std::path::Path| {
        std::fs::read_to_string(path).with_context(|| {
            format!(
                "reading {} (create the CA with `agentwire cert --out {}`)",
                path.display(),
                a.ca_dir.display()
            )
        })
    };
    let (ca_cert, ca_key) = (read(&ca.ca_cert)?, read(&ca.ca_key)?);
    let cert = tls::issue_agent_cert(&ca_cert, &ca_key, &a.id, a.days)?;
    let files = tls::write_agent_cert(a.out.as_deref().unwrap_or(&a.ca_dir), &cert, a.force)?;
    println!("agent id:          {}", a.id);
    println!("agent certificate: {}", files.cert.display());
    println!("agent key:         {}", files.key.display());
    println!("valid for:         {} days", a.days);
    println!("serial:            {}", cert.serial()?);
    Ok(())
}
