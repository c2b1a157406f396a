//! Reaching a hub: the hub addresses tried in order with their fallback timeouts, one dialer
//! per transport built in (agentwire's features `quic`, `h2`, `ws`, `unix`), and the QUIC
//! endpoint and session tickets a [`Connector`] keeps across connections for 0-RTT.
//!
//! This module owns getting a connection whose hello is sent; it must not run the session
//! (the agent does, once the hub answers).

#[cfg(not(feature = "quic"))]
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use agentwire_proto::{AgentHandshake, ErrorCode, HandshakeError, Hello};
use bytes::Bytes;

use agentwire_transport::any::{AnyReceiver, AnySender};
use agentwire_transport::dial::Dial;
#[cfg(feature = "h2")]
use agentwire_transport::dial::H2Dial;
#[cfg(feature = "unix")]
use agentwire_transport::dial::UnixDial;
#[cfg(feature = "ws")]
use agentwire_transport::dial::WsDial;
use agentwire_transport::dial::{DialTarget, ZeroRtt};
#[cfg(feature = "quic")]
use agentwire_transport::quic::{QuicDial, QuicEndpointHandle};
use agentwire_transport::settings::SocketBuffers;
use agentwire_transport::url::{HubEndpoint, HubUrl};
use agentwire_transport::{FrameReceiver, FrameSender, TransportError, TransportKind};

use super::error::{AgentError, FailedAttempt};
use super::options::AgentOptions;
use super::{Agent, AgentCounters};

/// The cargo feature `kind` needs, when this build left it out (agentwire's features `quic`,
/// `h2`, `ws`, `unix`); `None` when it is built in or is no transport agents dial.
fn missing_feature(kind: TransportKind) -> Option<&'static str> {
    let (feature, built) = match kind {
        TransportKind::Quic => ("quic", cfg!(feature = "quic")),
        TransportKind::Http2 => ("h2", cfg!(feature = "h2")),
        TransportKind::WebSocket => ("ws", cfg!(feature = "ws")),
        TransportKind::Unix => ("unix", cfg!(feature = "unix")),
        TransportKind::WebTransport => ("wt", cfg!(feature = "wt")),
        _ => return None,
    };
    (!built).then_some(feature)
}

/// Without QUIC built in, an agent never has a QUIC endpoint: this stands in for its handle.
#[cfg(not(feature = "quic"))]
#[derive(Clone, Debug)]
pub(super) enum QuicEndpointHandle {}

#[cfg(not(feature = "quic"))]
impl QuicEndpointHandle {
    pub(super) fn rebind(&self, _addr: SocketAddr) -> Result<SocketAddr, TransportError> {
        match *self {}
    }

    pub(super) fn local_addr(&self) -> Option<SocketAddr> {
        match *self {}
    }
}

/// Makes connections and keeps what should survive them: the QUIC endpoint and the TLS
/// session-ticket cache (so a reconnect can use 0-RTT).
///
/// ```no_run
/// # async fn demo(opts: agentwire::AgentOptions) -> Result<(), agentwire::AgentError> {
/// let connector = agentwire::Connector::new(&opts)?;
/// let first = connector.connect(&opts).await?;   // full handshake, ticket cached
/// first.close().await;
/// let second = connector.connect(&opts).await?;  // 0-RTT if opts.zero_rtt
/// assert!(second.stats().zero_rtt_accepted <= 1);
/// # Ok(()) }
/// ```
pub struct Connector {
    #[cfg(feature = "quic")]
    quic: tokio::sync::OnceCell<QuicDial>,
    #[cfg(feature = "wt")]
    wt: tokio::sync::OnceCell<agentwire_transport::wt::WtDial>,
    zero_rtt_accepted: Arc<AtomicU64>,
    zero_rtt_rejected: Arc<AtomicU64>,
}

impl Connector {
    /// Checks `opts` (addresses, TLS trust); the QUIC endpoint is made on first use.
    pub fn new(opts: &AgentOptions) -> Result<Self, AgentError> {
        opts.hub_urls()?;
        Ok(Connector {
            #[cfg(feature = "quic")]
            quic: tokio::sync::OnceCell::new(),
            #[cfg(feature = "wt")]
            wt: tokio::sync::OnceCell::new(),
            zero_rtt_accepted: Arc::default(),
            zero_rtt_rejected: Arc::default(),
        })
    }

    #[cfg(feature = "quic")]
    async fn quic_dial(&self, opts: &AgentOptions, url: &HubUrl) -> Result<&QuicDial, AgentError> {
        self.quic
            .get_or_try_init(|| async {
                let bind = opts.bind.unwrap_or_else(|| url.default_bind());
                let verifier = agentwire_tls::server_verifier(&opts.trust)?;
                QuicDial::with_identity(bind, &opts.quic, verifier, opts.identity.as_ref())
                    .map_err(AgentError::Connect)
            })
            .await
    }

    #[cfg(feature = "wt")]
    async fn wt_dial(
        &self,
        opts: &AgentOptions,
        url: &HubUrl,
    ) -> Result<&agentwire_transport::wt::WtDial, AgentError> {
        self.wt
            .get_or_try_init(|| async {
                let bind = opts.bind.unwrap_or_else(|| url.default_bind());
                let verifier = agentwire_tls::server_verifier(&opts.trust)?;
                agentwire_transport::wt::WtDial::new(
                    bind,
                    &opts.quic,
                    verifier,
                    opts.identity.as_ref(),
                )
                .map_err(AgentError::Connect)
            })
            .await
    }

    /// Connects and runs the handshake, trying each hub address in order. With more than one
    /// address, each attempt gets `fallback_timeout`; a hub that answers and rejects the agent
    /// ends the search (falling back would not change its answer).
    pub async fn connect(&self, opts: &AgentOptions) -> Result<Agent, AgentError> {
        let urls = opts.hub_urls()?;
        let attempts = async {
            if let [url] = urls.as_slice() {
                return self.connect_url(opts, url).await;
            }
            let mut failures = Vec::new();
            for url in &urls {
                let error =
                    match tokio::time::timeout(opts.fallback_timeout, self.connect_url(opts, url))
                        .await
                    {
                        Ok(Ok(agent)) => return Ok(agent),
                        Ok(Err(e @ AgentError::Rejected { .. })) => return Err(e),
                        Ok(Err(e)) => Some(Box::new(e)),
                        Err(_) => None,
                    };
                failures.push(FailedAttempt {
                    url: url.to_string(),
                    error,
                    waited: opts.fallback_timeout,
                });
                tracing::info!(%url, "hub not reachable, trying the next address");
            }
            Err(AgentError::Unreachable(failures))
        };
        tokio::time::timeout(opts.connect_timeout, attempts)
            .await
            .map_err(|_| AgentError::Timeout(opts.connect_timeout))?
    }

    fn hello(opts: &AgentOptions, transport: TransportKind) -> AgentHandshake {
        let mut hello = Hello::new(opts.id.clone(), opts.role.clone());
        hello.codecs = opts.codecs.iter().map(|c| c.name().to_owned()).collect();
        hello.auth_token.clone_from(&opts.auth_token);
        hello.max_frame_size = opts.max_frame_size;
        if transport == TransportKind::Quic && opts.quic.datagrams {
            hello.capabilities.push("datagrams".into());
        }
        if transport == TransportKind::Quic {
            hello
                .capabilities
                .push(agentwire_proto::counted_goodbye::CAPABILITY.into());
        }
        AgentHandshake::new(hello)
    }

    fn counters(&self, zero_rtt_used: bool, socket_buffers: SocketBuffers) -> AgentCounters {
        AgentCounters {
            zero_rtt_accepted: self.zero_rtt_accepted.clone(),
            zero_rtt_rejected: self.zero_rtt_rejected.clone(),
            zero_rtt_used,
            socket_buffers,
        }
    }

    /// Connects to one address.
    pub async fn connect_url(
        &self,
        opts: &AgentOptions,
        url: &HubUrl,
    ) -> Result<Agent, AgentError> {
        let mut handshake = Self::hello(opts, url.transport);
        let hello = handshake.hello_frame().map_err(AgentError::Encode)?;
        let RawConnection {
            sender,
            mut receiver,
            quic,
            zero_rtt_used,
            socket_buffers,
        } = self.open(opts, url, hello).await?;
        let session = match receiver.recv_frame().await {
            Ok(Some(raw)) => handshake.on_frame(&raw).map_err(|e| match e {
                HandshakeError::Rejected { code, reason } => AgentError::Rejected { code, reason },
                other => AgentError::Handshake(other),
            }),
            Ok(None) => Err(AgentError::Connect(TransportError::Closed {
                code: None,
                reason: "the hub closed before answering the hello".into(),
            })),
            Err(e) => Err(AgentError::Connect(e)),
        };
        let session = match session {
            Ok(s) => s,
            Err(e) => {
                FrameSender::close(&sender, ErrorCode::Normal, "handshake failed");
                return Err(e);
            }
        };
        sender.set_peer_max_frame_size(session.max_frame_size);
        if session.has_capability(agentwire_proto::counted_goodbye::CAPABILITY) {
            FrameSender::count_streams_in_goodbye(&sender);
        }
        receiver.set_max_frame_size(session.max_frame_size);
        let counters = self.counters(zero_rtt_used, socket_buffers);
        Ok(Agent::start(
            session,
            opts,
            url.to_string(),
            sender,
            receiver,
            counters,
            quic,
        ))
    }

    /// Opens a transport connection to `url` and sends `hello` (normally a hello frame) as its
    /// first control frame, without waiting for an answer. The agent API is built on this;
    /// tests and tools use it to speak to a hub frame by frame.
    pub async fn open(
        &self,
        opts: &AgentOptions,
        url: &HubUrl,
        hello: Bytes,
    ) -> Result<RawConnection, AgentError> {
        let mut target = DialTarget {
            addr: None,
            path: None,
            host: url.host().unwrap_or_default().to_owned(),
            server_name: opts
                .server_name
                .clone()
                .or_else(|| url.host().map(str::to_owned))
                .unwrap_or_default(),
            agent_id: opts.id.clone(),
            zero_rtt: opts.zero_rtt,
            mapping: opts.stream_mapping,
        };
        match &url.endpoint {
            HubEndpoint::Path(path) => target.path = Some(path.clone()),
            HubEndpoint::Net { .. } => {
                target.addr = Some(
                    url.resolve()
                        .await
                        .map_err(|e| AgentError::Resolve(Arc::new(e)))?,
                )
            }
        }
        // The QUIC endpoint goes with the connection (for `rebind`); other transports have none.
        if let Some(feature) = missing_feature(url.transport) {
            return Err(AgentError::Config(format!(
                "{url}: the {} transport is not built in (agentwire's cargo feature `{feature}`)",
                url.transport
            )));
        }
        let (dialed, quic) = match (url.transport, &url.endpoint) {
            #[cfg(feature = "quic")]
            (TransportKind::Quic, HubEndpoint::Net { .. }) => {
                let dial = self.quic_dial(opts, url).await?;
                (dial.dial(&target, hello).await, Some(dial.endpoint()))
            }
            #[cfg(feature = "wt")]
            (TransportKind::WebTransport, HubEndpoint::Net { .. }) => {
                let dial = self.wt_dial(opts, url).await?;
                (dial.dial(&target, hello).await, None)
            }
            #[cfg(feature = "unix")]
            (TransportKind::Unix, HubEndpoint::Path(_)) => {
                (UnixDial.dial(&target, hello).await, None)
            }
            #[cfg(feature = "h2")]
            (TransportKind::Http2, HubEndpoint::Net { .. }) => {
                let alpn = [agentwire_transport::h2::ALPN_H2];
                let tls =
                    agentwire_tls::client_config_as(&opts.trust, &alpn, opts.identity.as_ref())?;
                let dial = H2Dial { tls: Arc::new(tls) };
                (dial.dial(&target, hello).await, None)
            }
            #[cfg(feature = "ws")]
            (TransportKind::WebSocket, HubEndpoint::Net { .. }) => {
                let tls = if url.tls {
                    let alpn = [agentwire_transport::ws::ALPN_HTTP11];
                    let identity = opts.identity.as_ref();
                    Some(Arc::new(agentwire_tls::client_config_as(
                        &opts.trust,
                        &alpn,
                        identity,
                    )?))
                } else {
                    None
                };
                let options = opts.websocket.clone();
                (WsDial { tls, options }.dial(&target, hello).await, None)
            }
            _ => {
                return Err(AgentError::Config(format!(
                    "{url}: not a usable hub address"
                )))
            }
        };
        let dialed = dialed.map_err(AgentError::Connect)?;
        match dialed.zero_rtt {
            ZeroRtt::Accepted => self.zero_rtt_accepted.fetch_add(1, Ordering::Relaxed),
            ZeroRtt::Rejected => self.zero_rtt_rejected.fetch_add(1, Ordering::Relaxed),
            ZeroRtt::NotTried => 0,
        };
        Ok(RawConnection {
            sender: dialed.sender,
            receiver: dialed.receiver,
            quic,
            zero_rtt_used: dialed.zero_rtt == ZeroRtt::Accepted,
            socket_buffers: dialed.socket_buffers,
        })
    }
}

/// A transport connection whose first frame has been sent, before the hub has answered.
pub struct RawConnection {
    /// Sending half.
    pub sender: AnySender,
    /// Receiving half.
    pub receiver: AnyReceiver,
    pub(super) quic: Option<QuicEndpointHandle>,
    pub(super) zero_rtt_used: bool,
    pub(super) socket_buffers: SocketBuffers,
}
