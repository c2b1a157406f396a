//! The hub's TLS configurations: TLS 1.3 only, stateful resumption for 0-RTT, and, with a
//! client CA, mutual TLS ([`server_config_for_agents`]); the served certificate can be
//! replaced while the hub runs.
//!
//! This module owns the server side; it must not open sockets.

use super::*;
use agentwire_sync::RwLockExt;

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
    let mut config = builder.with_cert_resolver(Arc::new(ServedCert {
        main: identity.served.clone(),
        browsers: None,
    }));
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    config.session_storage =
        rustls::server::ServerSessionMemoryCache::new(SERVER_SESSION_CACHE_SIZE);
    config.max_early_data_size = u32::MAX;
    Ok(config)
}

/// [`server_config_for_agents`] that also serves `browsers`' certificate to clients offering
/// ALPN `h3` and not `agentwire/1` (WebTransport from a web page, which accepts a certificate
/// by its hash only when it is short-lived: [`issue_webtransport_cert`]). Both stay
/// replaceable while the hub runs ([`HubIdentity::serve_instead`]).
pub fn server_config_for_agents_and_browsers(
    identity: &HubIdentity,
    browsers: &HubIdentity,
    alpn: &[&[u8]],
    clients: Option<&ClientCa>,
) -> Result<rustls::ServerConfig, TlsError> {
    let mut config = server_config_for_agents(identity, alpn, clients)?;
    config.cert_resolver = Arc::new(ServedCert {
        main: identity.served.clone(),
        browsers: Some(browsers.served.clone()),
    });
    Ok(config)
}

type Slot = Arc<std::sync::RwLock<Arc<rustls::sign::CertifiedKey>>>;

/// The certificates a hub serves, each replaceable while it runs
/// ([`HubIdentity::serve_instead`]): its own, and optionally one for browsers (ALPN `h3`).
#[derive(Debug)]
pub(crate) struct ServedCert {
    main: Slot,
    browsers: Option<Slot>,
}

impl rustls::server::ResolvesServerCert for ServedCert {
    fn resolve(
        &self,
        hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        let slot = match &self.browsers {
            Some(browsers) if is_browser(hello.alpn()) => browsers,
            _ => &self.main,
        };
        Some(slot.read_or_recover().clone())
    }
}

/// Whether a client's ALPN offer is a browser's WebTransport (`h3`, without `agentwire/1`).
fn is_browser<'a>(alpn: Option<impl Iterator<Item = &'a [u8]>>) -> bool {
    let Some(offered) = alpn else { return false };
    let (mut h3, mut ours) = (false, false);
    for protocol in offered {
        h3 |= protocol == ALPN_H3;
        ours |= protocol == ALPN_AGENTWIRE;
    }
    h3 && !ours
}
