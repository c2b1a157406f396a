//! The flags of `agentwire cert` and `agentwire cert agent`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CertArgs {
    #[command(subcommand)]
    pub issue: Option<CertCommand>,
    /// Directory to write ca.pem, ca.key, hub.pem and hub.key into.
    #[arg(long, required = true)]
    pub out: Option<PathBuf>,
    /// Names the hub certificate is valid for (DNS names or IPs); repeatable.
    /// Default: localhost, 127.0.0.1, ::1.
    #[arg(long = "name")]
    pub names: Vec<String>,
    /// Overwrite existing files (with --webtransport: the WebTransport certificate only).
    #[arg(long)]
    pub force: bool,
    /// Also issue webtransport.pem and webtransport.key: an ECDSA P-256 certificate for the
    /// hub names, signed by the directory's CA (made first if the directory has none), valid
    /// for --days, which a web page accepts by its SHA-256 (`serverCertificateHashes`; browsers
    /// take at most 14 days). Prints the SHA-256. Run again with --force to rotate it; a
    /// running hub takes the new one on SIGHUP or a reload.
    #[arg(long)]
    pub webtransport: bool,
    /// Days the WebTransport certificate stays valid (1 to 13).
    #[arg(long, default_value_t = 13, requires = "webtransport")]
    pub days: u32,
}

#[derive(Subcommand, Debug)]
pub enum CertCommand {
    /// Issue a client certificate whose name is an agent id, signed by the CA of
    /// `agentwire cert`, for hubs run with --client-ca. Writes ID.pem and ID.key.
    ///
    /// Example: agentwire cert agent --id worker-1 --ca-dir certs
    Agent(CertAgentArgs),
}

#[derive(Args, Debug)]
pub struct CertAgentArgs {
    /// The agent id the certificate names (the only id its holder may take).
    #[arg(long)]
    pub id: String,
    /// Directory holding the CA's ca.pem and ca.key (from `agentwire cert --out DIR`).
    #[arg(long)]
    pub ca_dir: PathBuf,
    /// Directory to write ID.pem and ID.key into (default: --ca-dir).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Days the certificate stays valid.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// Overwrite existing files.
    #[arg(long)]
    pub force: bool,
}
