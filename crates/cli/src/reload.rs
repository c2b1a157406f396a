//! Reading a running hub's files again: on SIGHUP and when an agent with an `admin` credential
//! asks (`agentwire reload`, a `$hub` request with `hub-op: reload`).
//!
//! This module owns what is reloaded and the report of it: the access file, the client CA
//! with the revoked serials, the hub certificate, the certificate served to browsers. Each part on its own: a file that cannot be
//! read or is not valid leaves its part as it was and is reported as an error. It must not
//! decide whom to close (the hub does, against what is now in force).

use std::path::PathBuf;
use std::sync::Arc;

use agentwire::hub::{Hub, HubOp, HubOpError, WeakHub};
use agentwire::tls::HubIdentity;

use crate::args::HubArgs;

/// What the hub was started with that can be read again.
pub struct Reloader {
    access: Option<PathBuf>,
    client_ca: bool,
    served: Option<(HubIdentity, PathBuf)>,
    /// The certificate served to browsers (WebTransport), from the same directory.
    browsers: Option<(HubIdentity, PathBuf)>,
}

/// Loads CERT_DIR/webtransport.pem and .key when they exist, checked against the rules
/// browsers apply to a certificate named by its hash; returns it and its SHA-256.
pub fn load_browsers_certificate(
    dir: &std::path::Path,
) -> anyhow::Result<Option<(HubIdentity, [u8; 32])>> {
    use anyhow::Context;
    let files = agentwire::tls::WebTransportCertFiles::in_dir(dir);
    if !files.cert.exists() {
        return Ok(None);
    }
    let pem = std::fs::read_to_string(&files.cert)
        .with_context(|| format!("reading {}", files.cert.display()))?;
    let (sha256, not_after) = agentwire::tls::check_webtransport_cert(&pem)
        .with_context(|| format!("checking {}", files.cert.display()))?;
    if not_after <= std::time::SystemTime::now() {
        anyhow::bail!(
            "{} has expired; issue another with `agentwire cert --webtransport --force --out {}`",
            files.cert.display(),
            dir.display()
        );
    }
    let identity = HubIdentity::load(&files.cert, &files.key)?;
    Ok(Some((identity, sha256)))
}

/// What one reload did.
#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    /// What was reloaded, one line each.
    pub reloaded: Vec<String>,
    /// What was not, and why.
    pub errors: Vec<String>,
}

impl Reloader {
    /// `None` when the hub was started with nothing to reload.
    pub fn new(
        a: &HubArgs,
        identity: Option<&HubIdentity>,
        browsers: Option<HubIdentity>,
    ) -> Option<Arc<Reloader>> {
        let r = Reloader {
            access: a.access_file.clone(),
            client_ca: a.client_ca.is_some(),
            served: identity.cloned().zip(a.cert_dir.clone()),
            browsers: browsers.zip(a.cert_dir.clone()),
        };
        (r.access.is_some() || r.client_ca || r.served.is_some()).then(|| Arc::new(r))
    }

    /// Reads every file again and puts what is valid in force.
    pub fn run(&self, hub: &Hub) -> Report {
        let mut report = Report::default();
        if let Some(path) = &self.access {
            match agentwire::hub::AccessPolicy::from_file(path) {
                Ok(policy) => {
                    let closed = hub.reload_access(Arc::new(policy));
                    report.reloaded.push(format!(
                        "access file {} reloaded: {closed} agent(s) closed",
                        path.display()
                    ));
                }
                Err(e) => report
                    .errors
                    .push(format!("{e}; the access rules in force stay as they were")),
            }
        }
        match hub.reload_certificates() {
            Some(Ok((now, closed))) => report.reloaded.push(format!(
                "client CA reloaded: {} CA certificate(s), {} serial(s) revoked, {closed} agent(s) closed",
                now.cas, now.revoked
            )),
            Some(Err(e)) => report.errors.push(format!(
                "{e}; the client CA and revocations in force stay as they were"
            )),
            None => {}
        }
        if let Some((identity, dir)) = &self.served {
            match HubIdentity::from_dir(dir) {
                Ok(new) => {
                    identity.serve_instead(&new);
                    report.reloaded.push(match new.spki_pin() {
                        Ok(pin) => format!("hub certificate reloaded: key pin {pin}"),
                        Err(_) => "hub certificate reloaded".into(),
                    });
                }
                Err(e) => report
                    .errors
                    .push(format!("{e}; the hub certificate in force stays as it was")),
            }
        }
        if let Some((identity, dir)) = &self.browsers {
            let kept = "the certificate served to browsers stays as it was";
            match load_browsers_certificate(dir) {
                Ok(Some((new, sha256))) => {
                    identity.serve_instead(&new);
                    report.reloaded.push(format!(
                        "webtransport certificate reloaded: sha-256 {}",
                        hex::encode(sha256)
                    ));
                }
                Ok(None) => report
                    .errors
                    .push(format!("{} is gone; {kept}", dir.display())),
                Err(e) => report.errors.push(format!("{e:#}; {kept}")),
            }
        }
        report
    }

    /// Prints a report as SIGHUP's: reloads on stdout, errors on stderr.
    pub fn print(report: &Report) {
        for line in &report.reloaded {
            println!("{line}");
        }
        for line in &report.errors {
            eprintln!("error: {line}");
        }
    }

    /// Lets agents with an `admin` credential ask for a reload; the answer is the report as
    /// JSON (errors included, the reload of the other parts done).
    pub fn serve_hub_ops(self: &Arc<Self>, hub: &Hub) {
        let (me, weak): (Arc<Reloader>, WeakHub) = (self.clone(), hub.downgrade());
        hub.on_hub_op(Box::new(move |op| {
            let hub = weak.upgrade().ok_or(HubOpError::Stopping)?;
            match op {
                HubOp::Reload => {
                    let report = me.run(&hub);
                    Reloader::print(&report);
                    serde_json::to_string(&report)
                        .map_err(|e| HubOpError::failed("writing the reload report", e))
                }
                other => Err(HubOpError::Unsupported(other)),
            }
        }));
    }

    /// Runs a reload on every SIGHUP until the task is aborted.
    pub fn on_sighup(self: &Arc<Self>, hub: &Hub) -> Option<tokio::task::JoinHandle<()>> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("warning: cannot watch SIGHUP, nothing will be reloaded on it: {e}");
                return None;
            }
        };
        let (me, hub) = (self.clone(), hub.clone());
        Some(tokio::spawn(async move {
            while hangups.recv().await.is_some() {
                Reloader::print(&me.run(&hub));
            }
        }))
    }
}
