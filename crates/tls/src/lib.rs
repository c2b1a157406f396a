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
//! * certificates browsers accept by their hash for WebTransport ([`issue_webtransport_cert`],
//!   [`check_webtransport_cert`]; in `webtransport_cert`);
//! * turning handshake failures into sentences a person can act on
//!   ([`describe_tls_error`]; [`RecordingVerifier`] keeps the rustls error for transports
//!   that report a failed handshake only as text).
//!
//! What it must NOT do: open sockets or know about QUIC/quinn (the transport
//! wraps these configs with `quinn::crypto::rustls::QuicClientConfig` /
//! `QuicServerConfig`), parse command lines, decide where files live beyond
//! the fixed names inside a directory, log or print private keys, or panic on
//! anything that comes from a file or the network.
//!
//! Generating keys and certificates ([`generate`], [`issue_agent_cert`]; rcgen) is the
//! default feature `generate`: an agent that only loads and checks certificates builds
//! without it.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls13_signature, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::{CertificateError, DigitallySignedStruct, OtherError, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

mod agent_certs;
mod client_ca;
#[cfg(feature = "generate")]
pub use agent_certs::issue_agent_cert;
pub use agent_certs::{
    certified_agent_id, peer_agent_id, write_agent_cert, AgentCert, AgentCertFiles,
    MAX_CERT_AGENT_ID,
};
pub use client_ca::{
    certificate_serial, AgentCertificate, CertificateRefused, ClientCa, Reloaded, RevokedSerials,
};

/// ALPN protocol identifier spoken by agentwire peers over QUIC.
pub const ALPN_AGENTWIRE: &[u8] = b"agentwire/1";

/// ALPN protocol identifier of HTTP/3, which WebTransport sessions (browser agents) use on
/// the hub's QUIC port.
pub const ALPN_H3: &[u8] = b"h3";

/// File name of the CA certificate inside a cert directory.
pub const CA_CERT_FILE: &str = "ca.pem";
/// File name of the CA private key inside a cert directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// File name of the hub certificate inside a cert directory.
pub const HUB_CERT_FILE: &str = "hub.pem";
/// File name of the hub private key inside a cert directory.
pub const HUB_KEY_FILE: &str = "hub.key";

mod cert_dir;
mod client;
mod describe;
/// Label used in errors for PEM text that did not come from a file.
mod error;
mod generate;
mod identity;
mod pin;
mod provider;
mod server;
mod trust;
mod verify;
mod webtransport_cert;
pub use cert_dir::*;
pub use client::*;
pub use describe::*;
pub use error::*;
pub use generate::*;
pub use identity::*;
pub use pin::*;
pub use provider::*;
pub use server::*;
pub use trust::*;
pub use verify::*;
pub use webtransport_cert::*;

#[cfg(all(test, feature = "generate"))]
mod tests;
