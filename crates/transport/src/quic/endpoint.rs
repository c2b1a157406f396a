//! QUIC endpoints: server and client endpoints on their sockets (GSO, buffers, the UDP probe), and the quinn configurations built from `QuicSettings` and the TLS crate's configs.
//!
//! This module owns set-up only; it must not read or write streams.

use super::*;

/// A bound QUIC server endpoint and the configuration it accepts with.
pub struct ServerEndpoint {
    /// The endpoint.
    pub endpoint: quinn::Endpoint,
    /// The UDP socket buffers the kernel granted.
    pub socket_buffers: SocketBuffers,
    /// The server configuration (TLS and transport) every connection starts from; a
    /// connection traced to qlog gets a copy with its own transport configuration.
    pub config: quinn::ServerConfig,
    /// Further endpoints on the same address (`SO_REUSEPORT`), one fewer than
    /// [`QuicSettings::server_endpoints`]; empty by default.
    pub more: Vec<quinn::Endpoint>,
}

/// The hub sends no address-validation tokens (NEW_TOKEN) and keeps no log of them, whatever
/// quinn's features: with `bloom` (which web-transport-quinn turns on) quinn's default sends
/// two per connection and keeps a 10 MiB filter of used ones; agentwire validates addresses
/// with Retry under a flood instead (`QuicSettings::retry_above_per_sec`).
pub fn no_validation_tokens() -> quinn::ValidationTokenConfig {
    let mut tokens = quinn::ValidationTokenConfig::default();
    tokens.log(Arc::new(quinn::NoneTokenLog)).sent(0);
    tokens
}

/// Builds a quinn server endpoint bound to `addr`.
pub fn server_endpoint(
    addr: SocketAddr,
    settings: &QuicSettings,
    tls: rustls::ServerConfig,
) -> Result<ServerEndpoint, TransportError> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(|e| {
        ConnectError::Config(format!("the TLS configuration is not usable for QUIC: {e}"))
    })?;
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    // Connections waiting for the listener (at the accept limits) are held in a bounded queue:
    // quinn's defaults are 65,536 connections and 100 MiB of their first packets.
    config
        .max_incoming(INCOMING_QUEUE)
        .incoming_buffer_size(INCOMING_QUEUE_BYTES / 16)
        .incoming_buffer_size_total(INCOMING_QUEUE_BYTES);
    config.validation_token = no_validation_tokens();
    config.transport_config(Arc::new(
        settings
            .transport_config()
            .map_err(ConnectError::settings)?,
    ));
    let mut sockets = settings
        .bind_udp_group(addr, settings.server_endpoints)
        .map_err(|e| ConnectError::socket(format!("cannot bind UDP {addr}"), e))?
        .into_iter();
    let Some((first, socket_buffers)) = sockets.next() else {
        return Err(ConnectError::Config("no UDP socket was bound".into()).into());
    };
    let endpoint = endpoint_on(first, settings, Some(config.clone()))?;
    let more = sockets
        .map(|(socket, _)| endpoint_on(socket, settings, Some(config.clone())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ServerEndpoint {
        endpoint,
        socket_buffers,
        config,
        more,
    })
}

/// Accepts `incoming` with `base`, or with a copy of `base` whose transport configuration
/// fits this peer ([`QuicSettings::for_peer`]: loopback datagram size), has the connection
/// window `window` (a share of the endpoint's [receive budget](crate::quic_budget)) and, when
/// `settings` ask for qlog traces, writes `DIR/hub-<connection id>.sqlog`.
pub fn accept_incoming(
    incoming: quinn::Incoming,
    base: &quinn::ServerConfig,
    settings: &QuicSettings,
    window: Option<u64>,
) -> Result<quinn::Connecting, quinn::ConnectionError> {
    let odcid = incoming.orig_dst_cid();
    let peer = incoming.remote_address().ip();
    match connection_transport(settings, peer, window, QlogRole::Hub, || odcid.to_string()) {
        None => incoming.accept(),
        Some(transport) => {
            let mut config = base.clone();
            config.transport_config(Arc::new(transport));
            incoming.accept_with(Arc::new(config))
        }
    }
}

/// `base`, or a copy of it whose transport configuration fits a hub at `peer`
/// ([`QuicSettings::for_peer`]: loopback datagram size) and, when `settings` ask for qlog
/// traces, writes `DIR/agent-<agent>-<pid>-<n>.sqlog`.
pub fn client_config_for(
    base: &quinn::ClientConfig,
    settings: &QuicSettings,
    peer: SocketAddr,
    agent: &str,
) -> quinn::ClientConfig {
    let mut config = base.clone();
    if let Some(transport) =
        connection_transport(settings, peer.ip(), None, QlogRole::Agent, || {
            crate::qlog::agent_trace_name(agent)
        })
    {
        config.transport_config(Arc::new(transport));
    }
    config
}

/// The transport configuration of one connection with `peer` when it differs from the
/// endpoint's shared one: `settings` adjusted for the peer ([`QuicSettings::for_peer`]), with
/// another connection window, or asking for a qlog trace (`name` is only computed then). A
/// trace that cannot be written is logged and the connection goes on untraced: tracing never
/// refuses service.
pub(super) fn connection_transport(
    settings: &QuicSettings,
    peer: std::net::IpAddr,
    window: Option<u64>,
    role: QlogRole,
    name: impl FnOnce() -> String,
) -> Option<quinn::TransportConfig> {
    let mut settings = settings.for_peer(peer);
    if let Some(window) = window.filter(|w| *w != settings.receive_window) {
        settings.to_mut().receive_window = window;
    }
    if let Some(traced) = traced(&settings, role, name) {
        return Some(traced);
    }
    match &settings {
        std::borrow::Cow::Borrowed(_) => None,
        // Validated when the endpoint was built (`endpoint`).
        std::borrow::Cow::Owned(adjusted) => adjusted.transport_config().ok(),
    }
}

/// The traced transport configuration of one connection, when `settings` ask for qlog
/// traces (`name` is only computed then). A trace that cannot be written is logged and the
/// connection goes on untraced: tracing never refuses service.
pub(super) fn traced(
    settings: &QuicSettings,
    role: QlogRole,
    name: impl FnOnce() -> String,
) -> Option<quinn::TransportConfig> {
    settings.qlog_dir.as_ref()?;
    crate::qlog::traced_transport(settings, role, &name()).unwrap_or_else(|e| {
        tracing::warn!("connection not traced: {e}");
        None
    })
}

/// What a UDP socket bound with `settings` on loopback gets from this machine: the buffers the
/// kernel granted and the GSO/GRO segments quinn detects. `None` if the socket cannot be
/// made. Benchmarks record it beside their results.
///
/// ```
/// use agentwire_transport::{quic::probe_udp, QuicSettings};
/// // Loopback UDP always binds; quinn reports at least one segment per send.
/// let udp = probe_udp(&QuicSettings::default()).ok_or("no loopback UDP socket")?;
/// assert!(udp.gso_segments >= 1 && udp.buffers.recv > 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn probe_udp(settings: &QuicSettings) -> Option<UdpSupport> {
    let (socket, buffers) = settings
        .bind_udp(SocketAddr::from(([127, 0, 0, 1], 0)))
        .ok()?;
    let state = quinn::udp::UdpSocketState::new((&socket).into()).ok()?;
    Some(UdpSupport {
        buffers,
        gso_segments: state.max_gso_segments(),
        gro_segments: state.gro_segments(),
    })
}

/// The result of [`probe_udp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpSupport {
    /// The socket buffers granted.
    pub buffers: SocketBuffers,
    /// Segments per GSO send quinn would use (1 = no GSO).
    pub gso_segments: usize,
    /// Segments per GRO receive quinn would use (1 = no GRO).
    pub gro_segments: usize,
}

/// Builds a quinn client endpoint bound to `bind` (use port 0).
pub fn client_endpoint(
    bind: SocketAddr,
    settings: &QuicSettings,
) -> Result<(quinn::Endpoint, SocketBuffers), TransportError> {
    endpoint(bind, settings, None)
}

/// A quinn endpoint on a UDP socket set up from `settings` (buffers granted are returned).
pub(super) fn endpoint(
    addr: SocketAddr,
    settings: &QuicSettings,
    server: Option<quinn::ServerConfig>,
) -> Result<(quinn::Endpoint, SocketBuffers), TransportError> {
    let (socket, buffers) = settings
        .bind_udp(addr)
        .map_err(|e| ConnectError::socket(format!("cannot bind UDP {addr}"), e))?;
    Ok((endpoint_on(socket, settings, server)?, buffers))
}

/// A quinn endpoint on `socket` (bound by the caller, for example with
/// [`QuicSettings::bind_udp`]), set up as agentwire's own: the largest datagram any of its
/// connections may use ([`QuicSettings::endpoint_config`]) and GSO batches that the kernel
/// takes, one loopback-sized datagram per batch when `socket` is bound to a loopback address
/// ([`GsoCapped`]). Pair it with [`accept_incoming`] and [`client_config_for`], which give
/// each connection the settings for its peer. `agentwire serve` and `agentwire load` use it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use agentwire_transport::{quic::endpoint_on, QuicSettings};
/// let settings = QuicSettings::default();
/// let (socket, _buffers) = settings.bind_udp("127.0.0.1:0".parse()?)?;
/// let endpoint = endpoint_on(socket, &settings, None)?;
/// assert!(endpoint.local_addr()?.ip().is_loopback());
/// # Ok(())
/// # }
/// ```
pub fn endpoint_on(
    socket: std::net::UdpSocket,
    settings: &QuicSettings,
    server: Option<quinn::ServerConfig>,
) -> Result<quinn::Endpoint, TransportError> {
    let addr = socket
        .local_addr()
        .map_err(|e| ConnectError::socket("cannot read the UDP socket's address", e))?;
    // A connection's settings may differ by peer; check the loopback variant here, once.
    settings
        .for_peer(std::net::Ipv4Addr::LOCALHOST.into())
        .transport_config()
        .map_err(ConnectError::settings)?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| ConnectError::Config("no async runtime found".into()))?;
    let socket = runtime
        .wrap_udp_socket(socket)
        .map_err(|e| ConnectError::socket(format!("cannot use UDP socket {addr}"), e))?;
    // Bound to loopback, every peer is a loopback peer and every datagram has its size.
    let loopback = settings.for_peer(addr.ip());
    let socket = Arc::new(
        if addr.ip().to_canonical().is_loopback() && settings.loopback_mtu > 0 {
            let capped = GsoCapped::loopback(socket, loopback.max_mtu);
            if server.is_some() {
                capped.receiving_one_send(settings.endpoint_payload())
            } else {
                capped
            }
        } else {
            GsoCapped::new(socket)
        },
    );
    quinn::Endpoint::new_with_abstract_socket(
        settings.endpoint_config().map_err(ConnectError::settings)?,
        server,
        socket,
        runtime,
    )
    .map_err(|e| ConnectError::socket(format!("cannot start QUIC endpoint on {addr}"), e).into())
}

/// Builds a quinn client configuration from TLS settings and transport settings.
pub fn client_config(
    settings: &QuicSettings,
    tls: rustls::ClientConfig,
) -> Result<quinn::ClientConfig, TransportError> {
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| {
        ConnectError::Config(format!("the TLS configuration is not usable for QUIC: {e}"))
    })?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    config.transport_config(Arc::new(
        settings
            .transport_config()
            .map_err(ConnectError::settings)?,
    ));
    Ok(config)
}
