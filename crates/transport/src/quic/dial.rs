//! The QUIC client: one endpoint and TLS configuration for all of an agent's connections, so that a reconnect sends its hello as 0-RTT data; refused certificates come back as the rustls error.
//!
//! This module owns dialing; it must not retry (the agent's connector decides).

use super::*;

/// A QUIC client: one endpoint and one TLS configuration, with its session-ticket cache, for
/// all of an agent's connections, so that a reconnect can send its hello as 0-RTT data. Its
/// certificate check records why it refused a hub, so that a refused certificate comes back
/// as the rustls error itself ([`ConnectError::Tls`]), not as quinn's text of it.
pub struct QuicDial {
    pub(super) endpoint: quinn::Endpoint,
    pub(super) client_config: quinn::ClientConfig,
    pub(super) recorder: Arc<agentwire_tls::RecordingVerifier>,
    pub(super) socket_buffers: SocketBuffers,
    pub(super) settings: QuicSettings,
}

/// A QUIC client endpoint, to move it to another local address (connection migration) or
/// read the one it has.
#[derive(Clone)]
pub struct QuicEndpointHandle {
    pub(super) endpoint: quinn::Endpoint,
    pub(super) settings: QuicSettings,
}

impl QuicEndpointHandle {
    /// Moves the endpoint, and every connection on it, to a new UDP socket bound to `addr`;
    /// returns the address bound.
    pub fn rebind(&self, addr: SocketAddr) -> Result<SocketAddr, TransportError> {
        let (socket, _) = self
            .settings
            .bind_udp(addr)
            .map_err(|e| ConnectError::socket(format!("cannot bind {addr}"), e))?;
        let local = socket
            .local_addr()
            .map_err(|e| ConnectError::socket(format!("cannot read the address of {addr}"), e))?;
        self.endpoint
            .rebind(socket)
            .map_err(|e| ConnectError::socket(format!("cannot move the endpoint to {addr}"), e))?;
        Ok(local)
    }

    /// The endpoint's local address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.endpoint.local_addr().ok()
    }
}

impl QuicDial {
    /// A client endpoint bound to `bind` (port 0 for any) with `settings`, checking hubs'
    /// certificates with `verifier` (see [`agentwire_tls::server_verifier`]).
    pub fn new(
        bind: SocketAddr,
        settings: &QuicSettings,
        verifier: Arc<dyn rustls::client::danger::ServerCertVerifier>,
    ) -> Result<QuicDial, TransportError> {
        Self::with_identity(bind, settings, verifier, None)
    }

    /// [`new`](Self::new) that presents `identity` (an agent certificate) to hubs that ask.
    pub fn with_identity(
        bind: SocketAddr,
        settings: &QuicSettings,
        verifier: Arc<dyn rustls::client::danger::ServerCertVerifier>,
        identity: Option<&agentwire_tls::AgentIdentity>,
    ) -> Result<QuicDial, TransportError> {
        Self::with_alpn(
            bind,
            settings,
            verifier,
            identity,
            agentwire_tls::ALPN_AGENTWIRE,
        )
    }

    /// [`with_identity`](Self::with_identity) offering ALPN `alpn` (WebTransport's `h3`).
    pub(crate) fn with_alpn(
        bind: SocketAddr,
        settings: &QuicSettings,
        verifier: Arc<dyn rustls::client::danger::ServerCertVerifier>,
        identity: Option<&agentwire_tls::AgentIdentity>,
        alpn: &[u8],
    ) -> Result<QuicDial, TransportError> {
        let recorder = Arc::new(agentwire_tls::RecordingVerifier::new(verifier));
        let tls =
            agentwire_tls::client_config_with_verifier_as(recorder.clone(), &[alpn], identity)
                .map_err(|e| ConnectError::Config(e.to_string()))?;
        let client_config = client_config(settings, tls)?;
        let (endpoint, socket_buffers) = client_endpoint(bind, settings)?;
        Ok(QuicDial {
            endpoint,
            client_config,
            recorder,
            socket_buffers,
            settings: settings.clone(),
        })
    }

    /// The endpoint, for migration and its address.
    pub fn endpoint(&self) -> QuicEndpointHandle {
        QuicEndpointHandle {
            endpoint: self.endpoint.clone(),
            settings: self.settings.clone(),
        }
    }
}

/// One connection attempt: where to, and how to tell why it failed.
pub(super) struct Attempt<'a> {
    pub(super) addr: SocketAddr,
    pub(super) server_name: &'a str,
    pub(super) recorder: &'a agentwire_tls::RecordingVerifier,
}

impl Attempt<'_> {
    /// Waits for the handshake.
    pub(super) async fn handshake(
        &self,
        connecting: quinn::Connecting,
    ) -> Result<Connection, TransportError> {
        connecting.await.map_err(|e| self.failed(e))
    }

    /// Opens the control stream and writes the first frame on it.
    pub(super) async fn open_control(
        &self,
        conn: &Connection,
        first_frame: &Bytes,
    ) -> Result<(SendStream, RecvStream), TransportError> {
        let (mut send, recv) = conn.open_bi().await.map_err(|e| self.failed(e))?;
        send.write_chunk(first_frame.clone())
            .await
            .map_err(map_write_error)?;
        Ok((send, recv))
    }

    /// A failed handshake: our certificate check's refusal as the rustls error, else quinn's.
    pub(super) fn failed(&self, e: quinn::ConnectionError) -> TransportError {
        if let Some(tls) = self.recorder.take_refusal(self.server_name) {
            return ConnectError::Tls(tls).into();
        }
        match map_connection_error(&e) {
            TransportError::Connect(ConnectError::Quic { source, .. }) => ConnectError::Quic {
                peer: self.addr.to_string(),
                source,
            }
            .into(),
            other => other,
        }
    }
}

impl QuicDial {
    /// Starts a connection to `target`: the handshake under way, and how to tell why it failed.
    fn start<'a>(
        &'a self,
        target: &'a crate::dial::DialTarget,
    ) -> Result<(quinn::Connecting, Attempt<'a>), TransportError> {
        let addr = target.addr()?;
        let config = client_config_for(&self.client_config, &self.settings, addr, &target.agent_id);
        let connecting = self
            .endpoint
            .connect_with(config, addr, &target.server_name)
            .map_err(|e| ConnectError::Config(format!("cannot connect to {addr}: {e}")))?;
        let attempt = Attempt {
            addr,
            server_name: &target.server_name,
            recorder: &self.recorder,
        };
        Ok((connecting, attempt))
    }

    /// A connection to `target` with its handshake complete (no 0-RTT).
    #[cfg(feature = "wt")]
    pub(crate) async fn handshake_with(
        &self,
        target: &crate::dial::DialTarget,
    ) -> Result<Connection, TransportError> {
        let (connecting, attempt) = self.start(target)?;
        attempt.handshake(connecting).await
    }

    /// The UDP socket buffers the kernel granted.
    #[cfg(feature = "wt")]
    pub(crate) fn socket_buffers(&self) -> SocketBuffers {
        self.socket_buffers
    }

    /// The agent's halves of a WebTransport session on `conn`, its control stream open.
    #[cfg(feature = "wt")]
    pub(crate) fn split_session(
        &self,
        conn: Connection,
        control: (SendStream, RecvStream),
        mapping: StreamMapping,
        signal: super::signal::SessionSignal,
    ) -> (QuicSender, QuicReceiver) {
        let max_in = Limits::default().max_frame_size;
        let (sender, receiver) = split_session(
            conn,
            control,
            mapping,
            self.settings.datagrams,
            max_in,
            signal,
        );
        sender.keep_sent_streams();
        receiver.set_max_unread_bytes(self.settings.max_unread_bytes);
        (sender, receiver)
    }
}

impl crate::dial::Dial for QuicDial {
    async fn dial(
        &self,
        target: &crate::dial::DialTarget,
        first_frame: Bytes,
    ) -> Result<crate::dial::Dialed, TransportError> {
        use crate::dial::ZeroRtt;
        let (connecting, attempt) = self.start(target)?;
        let (conn, early) = if target.zero_rtt {
            match connecting.into_0rtt() {
                Ok((conn, accepted)) => (conn, Some(accepted)),
                Err(connecting) => (attempt.handshake(connecting).await?, None),
            }
        } else {
            (attempt.handshake(connecting).await?, None)
        };
        let mut control = attempt.open_control(&conn, &first_frame).await?;
        let mut zero_rtt = ZeroRtt::NotTried;
        if let Some(accepted) = early {
            if accepted.await {
                zero_rtt = ZeroRtt::Accepted;
            } else {
                // The hub discarded the early data: send the first frame again in 1-RTT.
                zero_rtt = ZeroRtt::Rejected;
                control = attempt.open_control(&conn, &first_frame).await?;
            }
        }
        let max_in = Limits::default().max_frame_size;
        let (sender, receiver) = split_connection(
            conn,
            control,
            target.mapping,
            self.settings.datagrams,
            max_in,
        );
        sender.keep_sent_streams();
        receiver.set_max_unread_bytes(self.settings.max_unread_bytes);
        Ok(crate::dial::Dialed {
            sender: crate::any::AnySender::Quic(sender),
            receiver: crate::any::AnyReceiver::Quic(receiver),
            zero_rtt,
            socket_buffers: self.socket_buffers,
        })
    }
}
