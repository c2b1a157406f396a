//! The QUIC listener: incoming connections queued and paced by the accept gate, stale ones let go, handshakes run, connections split into sender and receiver.
//!
//! This module owns accepting; it must not run the agentwire handshake (the hub does).

use super::*;

/// A QUIC listener: the endpoint (or endpoints, see [`QuicSettings::server_endpoints`]), the
/// configuration connections start from, and the receive budget they share (see
/// [`quic_budget`](crate::quic_budget)).
pub struct QuicListen {
    pub(super) incoming: Incomings,
    pub(super) config: Arc<quinn::ServerConfig>,
    pub(super) settings: QuicSettings,
    pub(super) mapping: StreamMapping,
    pub(super) budget: Option<Arc<ReceiveBudget>>,
    pub(super) handshake_timeout: std::time::Duration,
    /// Connection attempts in the current one-second window, for Retry under a flood.
    pub(super) attempts: (std::time::Instant, u32),
    pub(super) retries: Arc<std::sync::atomic::AtomicU64>,
    /// Handshakes going on, in all and per address, counted before any cryptography.
    pub(super) gate: crate::accept_gate::AcceptGate,
    /// WebTransport sessions (ALPN `h3`) accepted beside agentwire connections, when on.
    #[cfg(feature = "wt")]
    pub(super) webtransport: Option<Arc<crate::wt::WtOptions>>,
}

/// What the owner of a [`QuicListen`] keeps: where it is bound, and a way to close it.
#[derive(Clone)]
pub struct QuicListenHandle {
    /// The address bound (useful with port 0).
    pub local_addr: SocketAddr,
    /// The UDP socket buffers the kernel granted (each socket's, when there are several).
    pub socket_buffers: SocketBuffers,
    pub(super) endpoints: Vec<quinn::Endpoint>,
    pub(super) retries: Arc<std::sync::atomic::AtomicU64>,
}

impl QuicListenHandle {
    /// QUIC Retry packets sent so far ([`QuicSettings::retry_above_per_sec`]).
    pub fn retries_sent(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Stops accepting and closes every connection with `code`.
    pub fn close(&self, code: ErrorCode, reason: &str) {
        for endpoint in &self.endpoints {
            endpoint.close(VarInt::from_u32(code.code()), reason.as_bytes());
        }
    }

    /// Connections open on each of the listener's endpoints (one entry per UDP socket, see
    /// [`QuicSettings::server_endpoints`]).
    pub fn connections_per_endpoint(&self) -> Vec<usize> {
        self.endpoints
            .iter()
            .map(quinn::Endpoint::open_connections)
            .collect()
    }
}

/// Where a listener's incoming connections come from: its one endpoint, or the tasks that
/// accept on each of several endpoints sharing one address.
pub(super) enum Incomings {
    One(quinn::Endpoint),
    Many(tokio::sync::mpsc::Receiver<quinn::Incoming>),
    /// With a rate of set-ups: every incoming connection is taken from quinn at once and
    /// queued here with the time it came (at most [`INCOMING_QUEUE`]; beyond, refused), so
    /// that the listener can let go of those that waited longer than their peer would.
    Paced(tokio::sync::mpsc::Receiver<(std::time::Instant, quinn::Incoming)>),
}

impl Incomings {
    /// Accepts on every endpoint; with more than one, a task per endpoint hands its incoming
    /// connections on (it ends when its endpoint closes, and the listener's `accept` returns
    /// `None` once all have).
    pub(super) fn new(mut endpoints: Vec<quinn::Endpoint>) -> Incomings {
        if endpoints.len() == 1 {
            if let Some(endpoint) = endpoints.pop() {
                return Incomings::One(endpoint);
            }
        }
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        for endpoint in endpoints {
            let tx = tx.clone();
            tokio::spawn(async move {
                loop {
                    // Ends with the endpoint, or with the listener (its receiver dropped).
                    let incoming = tokio::select! {
                        incoming = endpoint.accept() => incoming,
                        () = tx.closed() => None,
                    };
                    let Some(incoming) = incoming else { break };
                    if tx.send(incoming).await.is_err() {
                        break;
                    }
                }
            });
        }
        Incomings::Many(rx)
    }

    /// The next incoming connection and when it came.
    pub(super) async fn next(&mut self) -> Option<(std::time::Instant, quinn::Incoming)> {
        let now = std::time::Instant::now;
        match self {
            Incomings::One(endpoint) => endpoint.accept().await.map(|i| (now(), i)),
            Incomings::Many(rx) => rx.recv().await.map(|i| (now(), i)),
            Incomings::Paced(rx) => rx.recv().await,
        }
    }

    /// These incomings, taken from quinn as they come by a task of their own and queued with
    /// their arrival time ([`Incomings::Paced`]).
    pub(super) fn paced(mut self) -> Incomings {
        if matches!(self, Incomings::Paced(_)) {
            return self;
        }
        let (tx, rx) = tokio::sync::mpsc::channel(INCOMING_QUEUE);
        tokio::spawn(async move {
            loop {
                let incoming = tokio::select! {
                    incoming = self.next() => incoming,
                    () = tx.closed() => None,
                };
                let Some(incoming) = incoming else { break };
                match tx.try_send(incoming) {
                    Ok(()) => {}
                    Err(tokio::sync::mpsc::error::TrySendError::Full((_, incoming))) => {
                        incoming.refuse();
                    }
                    Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => break,
                }
            }
        });
        Incomings::Paced(rx)
    }
}

impl QuicListen {
    /// Binds `addr` with `settings` and the server TLS configuration `tls`. Connections whose
    /// control stream does not open within `handshake_timeout` are closed.
    pub fn bind(
        addr: SocketAddr,
        settings: &QuicSettings,
        tls: rustls::ServerConfig,
        mapping: StreamMapping,
        handshake_timeout: std::time::Duration,
    ) -> Result<(QuicListen, QuicListenHandle), TransportError> {
        let ServerEndpoint {
            endpoint,
            socket_buffers,
            config,
            more,
        } = server_endpoint(addr, settings, tls)?;
        let local_addr = endpoint
            .local_addr()
            .map_err(|e| ConnectError::socket("cannot read the UDP socket's address", e))?;
        let budget = (settings.receive_budget > 0)
            .then(|| ReceiveBudget::new(settings.receive_budget, settings.receive_window));
        let mut endpoints = vec![endpoint];
        endpoints.extend(more);
        let retries = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let handle = QuicListenHandle {
            local_addr,
            socket_buffers,
            endpoints: endpoints.clone(),
            retries: retries.clone(),
        };
        let listen = QuicListen {
            incoming: Incomings::new(endpoints),
            config: Arc::new(config),
            settings: settings.clone(),
            mapping,
            budget,
            handshake_timeout,
            attempts: (std::time::Instant::now(), 0),
            retries,
            gate: crate::accept_gate::AcceptGate::new(Default::default()),
            #[cfg(feature = "wt")]
            webtransport: None,
        };
        Ok((listen, handle))
    }
}

impl QuicListen {
    /// Whether to answer `incoming` with a Retry: the address is not validated yet and the
    /// attempts of this second are over the configured threshold.
    pub(super) fn should_retry(&mut self, incoming: &quinn::Incoming) -> bool {
        let Some(limit) = self.settings.retry_above_per_sec else {
            return false;
        };
        let now = std::time::Instant::now();
        if now.duration_since(self.attempts.0) >= std::time::Duration::from_secs(1) {
            self.attempts = (now, 0);
        }
        self.attempts.1 = self.attempts.1.saturating_add(1);
        self.attempts.1 > limit && incoming.may_retry()
    }
}

impl QuicListen {
    /// Holds the connections in their QUIC handshake and set-up (until the control stream is
    /// open) to `limits`, as the TCP listeners are: at the total, the listener takes no new
    /// connection until one is set up (quinn queues the rest); past the per-address count a
    /// new connection is refused before any cryptography.
    ///
    /// With a rate of set-ups per second, connections beyond it wait for their turn in a queue
    /// of [`INCOMING_QUEUE`]; one that waited longer than the handshake timeout (its peer has
    /// given up by then) is let go without an answer and without spending a turn, so that a
    /// newcomer after a flood waits at most about that long.
    pub fn with_accept_limits(mut self, limits: crate::accept_gate::AcceptLimits) -> Self {
        self.gate = crate::accept_gate::AcceptGate::new(limits);
        if limits.handshakes_per_sec.is_some() {
            let incoming = std::mem::replace(
                &mut self.incoming,
                Incomings::Many(tokio::sync::mpsc::channel(1).1),
            );
            self.incoming = incoming.paced();
        }
        self
    }
}

#[cfg(feature = "wt")]
impl QuicListen {
    /// Also accepts WebTransport sessions (browser agents) on this endpoint: connections that
    /// choose ALPN `h3` (which the TLS configuration must offer) are set up as sessions at
    /// [`WT_PATH`](crate::wt::WT_PATH) for the pages `options` allows.
    pub fn with_webtransport(mut self, options: crate::wt::WtOptions) -> Self {
        self.webtransport = Some(Arc::new(options));
        self
    }
}

impl Listen for QuicListen {
    type Sender = AnySender;
    type Receiver = AnyReceiver;

    async fn accept(&mut self) -> Option<Setup<AnySender, AnyReceiver>> {
        let (incoming, pass) = loop {
            // At the limit of set-ups going on, or of set-ups per second, wait (quinn holds
            // the next ones, up to INCOMING_QUEUE).
            let slot = self.gate.slot().await?;
            let (came, incoming) = self.incoming.next().await?;
            if came.elapsed() > self.handshake_timeout {
                // Its peer gave up waiting: no answer, no turn spent.
                incoming.ignore();
                continue;
            }
            self.gate.turn().await;
            if self.should_retry(&incoming) {
                if incoming.retry().is_ok() {
                    self.retries.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            let remote = incoming.remote_address().ip();
            match self.gate.admit(slot, remote) {
                Ok(pass) => break (incoming, pass),
                Err(reason) => {
                    // Before the handshake: refused at once, counted by the hub as a failed
                    // set-up.
                    incoming.refuse();
                    return Some(Box::pin(async move {
                        Err(AcceptFailed {
                            stage: "accept",
                            error: TransportError::Closed {
                                code: Some(ErrorCode::LimitExceeded),
                                reason: reason.to_string(),
                            },
                        })
                    }));
                }
            }
        };
        let admission = self.budget.as_ref().map(ReceiveBudget::admit);
        let config = self.config.clone();
        let settings = self.settings.clone();
        let mapping = self.mapping;
        let timeout = self.handshake_timeout;
        #[cfg(feature = "wt")]
        let webtransport = self.webtransport.clone();
        #[cfg(not(feature = "wt"))]
        let webtransport = None;
        Some(Box::pin(async move {
            let set_up = accept_connection(
                incoming,
                &config,
                &settings,
                mapping,
                admission,
                timeout,
                webtransport,
            )
            .await;
            drop(pass);
            set_up
        }))
    }
}

/// What the listener accepts besides agentwire connections (WebTransport sessions, with the
/// `wt` feature).
#[cfg(feature = "wt")]
type Sessions = Option<Arc<crate::wt::WtOptions>>;
#[cfg(not(feature = "wt"))]
type Sessions = Option<std::convert::Infallible>;

/// Takes one incoming connection to the point where its control stream (or, for a
/// WebTransport session, the agent's stream) is open.
pub(super) async fn accept_connection(
    incoming: quinn::Incoming,
    config: &quinn::ServerConfig,
    settings: &QuicSettings,
    mapping: StreamMapping,
    admission: Option<Admission>,
    timeout: std::time::Duration,
    webtransport: Sessions,
) -> Result<Accepted<AnySender, AnyReceiver>, AcceptFailed> {
    let failed = |error: TransportError| AcceptFailed {
        stage: "quic",
        error,
    };
    let window = admission
        .as_ref()
        .map_or(settings.pre_hello_window, Admission::window)
        .min(settings.pre_hello_window)
        .min(settings.receive_window);
    #[allow(unused_mut)]
    let mut connecting = accept_incoming(incoming, config, settings, Some(window))
        .map_err(|e| failed(map_connection_error(&e)))?;
    // With WebTransport on, the ALPN decides the path. It is read from the handshake data,
    // which the server has once it has read the ClientHello; the connection's own copy
    // (`Connection::handshake_data`) arrives later, through its driver, and at 0.5-RTT was
    // sometimes not there yet (a browser's session then waited out the timeout on the
    // agentwire path).
    #[cfg(feature = "wt")]
    if let Some(options) = webtransport {
        let h3 = match tokio::time::timeout(timeout, connecting.handshake_data()).await {
            Ok(Ok(data)) => crate::wt::chose_h3(&*data),
            Ok(Err(e)) => return Err(failed(map_connection_error(&e))),
            Err(_) => return Err(failed(TransportError::Timeout(timeout))),
        };
        if h3 {
            let session = crate::wt::HubSide {
                options: &options,
                settings,
                mapping,
            };
            return accept_session(connecting, session, admission, timeout).await;
        }
    }
    #[cfg(not(feature = "wt"))]
    let _ = webtransport;
    // Take the connection at 0.5-RTT so that a control stream sent as 0-RTT data can be seen
    // arriving before the handshake completes (that is how the hub counts accepted 0-RTT),
    // but hand on nothing until the handshake has completed: a replayed 0-RTT flight never
    // completes it, so it can never register an agent.
    let (conn, handshake_done) = connecting.into_0rtt().map_err(|_| {
        failed(ConnectError::Config("the QUIC handshake could not start".into()).into())
    })?;
    let setup = async {
        tokio::pin!(handshake_done);
        let (control, early) = tokio::select! {
            biased;
            _ = &mut handshake_done => (conn.accept_bi().await, false),
            control = conn.accept_bi() => (control, true),
        };
        if early {
            // On the server this resolves when the handshake completes; its value is not
            // meaningful there (quinn reports 0-RTT acceptance to clients only).
            let _ = handshake_done.await;
        }
        (control, early)
    };
    let (control, zero_rtt) = match tokio::time::timeout(timeout, setup).await {
        Ok((Ok(streams), zero_rtt)) => (streams, zero_rtt),
        Ok((Err(e), _)) => return Err(failed(map_connection_error(&e))),
        Err(_) => {
            conn.close(
                VarInt::from_u32(ErrorCode::HandshakeTimeout.code()),
                b"no control stream in time",
            );
            return Err(failed(TransportError::Timeout(timeout)));
        }
    };
    if let Some(reason) = conn.close_reason() {
        // The handshake failed after 0-RTT data arrived (e.g. a replayed flight).
        return Err(failed(map_connection_error(&reason)));
    }
    let certificate = conn
        .peer_identity()
        .and_then(|any| {
            any.downcast::<Vec<rustls_pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .and_then(|chain| agentwire_tls::AgentCertificate::of_chain(&chain));
    // Nothing bigger than a hello until the hub has read the hello (the hub raises the limit
    // to the agreed one then).
    let max_in = agentwire_proto::MAX_HELLO_FRAME;
    let (sender, receiver) = split_connection(conn, control, mapping, settings.datagrams, max_in);
    before_hello(&sender, &receiver, settings, admission);
    Ok(Accepted {
        sender: AnySender::Quic(sender),
        receiver: AnyReceiver::Quic(receiver),
        zero_rtt,
        certificate,
        // QUIC bounds what a peer may send before its hello by the connection window
        // (PRE_HELLO_WINDOW); the receiver takes no frame over a hello's size before it.
        hello_gate: None,
    })
}

/// A hub's side of a new connection until its hello is accepted: the window, and what partly
/// received frames may hold, stay small (raised by `hello_accepted`); the connection holds its
/// place in the receive budget, if there is one.
pub(crate) fn before_hello(
    sender: &QuicSender,
    receiver: &QuicReceiver,
    settings: &QuicSettings,
    admission: Option<Admission>,
) {
    sender.inner.reader.max_buffered.store(
        usize::try_from(settings.pre_hello_window).unwrap_or(usize::MAX),
        Ordering::Relaxed,
    );
    receiver.set_max_unread_bytes(settings.max_unread_bytes);
    match admission {
        Some(admission) => sender.hold_admission(admission),
        None => sender
            .inner
            .window_after_hello
            .store(settings.receive_window, Ordering::Relaxed),
    }
}

/// How long a refused WebTransport session's connection stays open for its peer to read why.
#[cfg(feature = "wt")]
const REFUSAL_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// A connection that chose ALPN `h3`: the WebTransport session and the agent's stream, within
/// `timeout`, handed on only once the handshake is complete.
///
/// The session's set-up starts at 0.5-RTT, so the hub's HTTP/3 SETTINGS leave with its
/// handshake flight and the client can send its CONNECT with its Finished: started after the
/// handshake, they cost a round trip more (4 round trips to the welcome instead of 3 at 50 ms,
/// `docs/benchmarks/2026-11-28-webtransport-connect/`). A replayed 0-RTT flight never
/// completes the handshake, so it never reaches the hub.
#[cfg(feature = "wt")]
async fn accept_session(
    connecting: quinn::Connecting,
    hub: crate::wt::HubSide<'_>,
    admission: Option<Admission>,
    timeout: std::time::Duration,
) -> Result<Accepted<AnySender, AnyReceiver>, AcceptFailed> {
    let failed = |error: TransportError| AcceptFailed {
        stage: "webtransport",
        error,
    };
    let (conn, handshake_done) = connecting.into_0rtt().map_err(|_| {
        failed(ConnectError::Config("the QUIC handshake could not start".into()).into())
    })?;
    let set_up = async {
        let session = crate::wt::accept(conn.clone(), hub, admission).await;
        // On the server this resolves when the handshake completes or fails.
        let _ = handshake_done.await;
        match conn.close_reason() {
            Some(reason) => Err(map_connection_error(&reason)),
            None => session,
        }
    };
    match tokio::time::timeout(timeout, set_up).await {
        Ok(Ok((sender, receiver))) => Ok(Accepted {
            sender: AnySender::Wt(sender),
            receiver: AnyReceiver::Wt(receiver),
            zero_rtt: false,
            certificate: None,
            // As for QUIC: the connection window bounds what comes before the hello.
            hello_gate: None,
        }),
        Ok(Err(e)) => {
            let code = match &e {
                TransportError::Closed { code: Some(c), .. } => *c,
                _ => ErrorCode::ProtocolViolation,
            };
            // The refusal (403, 404) is on its way to the peer: close once it has read it
            // and gone, or after a grace period, not under it.
            let reason = e.to_string();
            tokio::spawn(async move {
                let _ = tokio::time::timeout(REFUSAL_GRACE, conn.closed()).await;
                conn.close(VarInt::from_u32(code.code()), reason.as_bytes());
            });
            Err(failed(e))
        }
        Err(_) => {
            conn.close(
                VarInt::from_u32(ErrorCode::HandshakeTimeout.code()),
                b"no WebTransport session in time",
            );
            Err(failed(TransportError::Timeout(timeout)))
        }
    }
}
