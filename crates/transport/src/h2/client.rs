//! The agent's side: connecting over TLS, opening the session stream, reading the hub's answer, and posting message streams.
//!
//! This module owns the client's requests; it must not retry (the agent's connector decides).

use super::*;

/// Agent side: drives the h2 client connection until it ends or a shutdown is asked for.
pub(super) async fn drive_client<IO>(conn: h2::client::Connection<IO, Bytes>, core: Arc<Core>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut shutdown = core.shutdown.subscribe();
    tokio::pin!(conn);
    let first = tokio::select! {
        r = &mut conn => Some(r),
        () = wait_true(&mut shutdown) => None,
    };
    let result = match first {
        Some(r) => r,
        None => tokio::time::timeout(CLOSE_GRACE, &mut conn)
            .await
            .unwrap_or(Ok(())),
    };
    core.connection_ended(result);
}

/// Client side: TCP connect to addr, TLS (client_config must have ALPN h2), h2 handshake, open
/// the session stream.
pub async fn connect(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    server_name: rustls_pki_types::ServerName<'static>,
) -> Result<(H2Sender, H2Receiver), TransportError> {
    connect_sending(addr, tls, server_name, None).await
}

/// [`connect`], with `first_frame` (the agent's hello) queued on the session stream right
/// behind the session request, so that both leave in one write. Written later, it could meet
/// a connection the hub had already closed (a refused client certificate closes it just after
/// the handshake), and the write's broken pipe would hide the hub's TLS alert, which says why.
pub async fn connect_sending(
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    server_name: rustls_pki_types::ServerName<'static>,
    first_frame: Option<Bytes>,
) -> Result<(H2Sender, H2Receiver), TransportError> {
    if !tls.alpn_protocols.iter().any(|p| p == ALPN_H2) {
        return Err(ConnectError::Config(
            "the TLS client configuration does not offer ALPN \"h2\", which HTTP/2 requires".into(),
        )
        .into());
    }
    let authority = match &server_name {
        rustls_pki_types::ServerName::DnsName(name) => format!("{}:{}", name.as_ref(), addr.port()),
        _ => addr.to_string(),
    };
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| ConnectError::socket(format!("cannot connect to {addr}"), e))?;
    let _ = tcp.set_nodelay(true);
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(server_name, crate::read_ahead::ReadAhead::new(tcp))
        .await
        .map_err(|e| ConnectError::tls_handshake(format!("TLS handshake with {addr} failed"), e))?;
    if stream.get_ref().1.alpn_protocol() != Some(ALPN_H2) {
        return Err(ConnectError::Config(format!(
            "the server at {addr} did not agree to HTTP/2 (ALPN \"h2\")"
        ))
        .into());
    }
    let (requests, conn) = client_builder()
        .handshake::<_, Bytes>(crate::tls_alert::AlertOnWriteError::new(stream))
        .await
        .map_err(|e| ConnectError::refused(format!("HTTP/2 handshake with {addr} failed"), e))?;
    let (core, tx, rx) = Core::new(Some(addr), authority, Limits::default().max_frame_size);
    tokio::spawn(drive_client(conn, core.clone()));
    match open_session(&core, requests, tx, first_frame).await {
        Ok(()) => Ok(halves(core, rx)),
        Err(e) => {
            session_failed(&core, &e);
            Err(e)
        }
    }
}

/// Why the session request failed, as a connect error.
pub(super) fn session_request_failed(
    what: &str,
    e: impl std::error::Error + Send + Sync + 'static,
) -> ConnectError {
    ConnectError::refused(format!("HTTP/2 session request failed ({what})"), e)
}

/// Ends a client connection whose session request failed.
pub(super) fn session_failed(core: &Core, e: &TransportError) {
    core.end(e.clone(), false);
    core.set_requests(None);
    core.shutdown.send_replace(true);
}

/// Sends the session request and makes its body the way out, without waiting for the hub's
/// answer: the caller's first frame leaves with the request, as it would on the other
/// transports, and the connect costs no round trip more than TCP and TLS. The answer is
/// awaited by [`session_answer`], which ends the connection with its error if the hub refused.
pub(super) async fn open_session(
    core: &Arc<Core>,
    requests: h2::client::SendRequest<Bytes>,
    tx: mpsc::Sender<Inbound>,
    first_frame: Option<Bytes>,
) -> Result<(), TransportError> {
    let mut requests = requests
        .ready()
        .await
        .map_err(|e| session_request_failed("ready", e))?;
    let request =
        post(&core.authority, SESSION_PATH).map_err(|e| session_request_failed("request", e))?;
    let (response, mut out) = requests
        .send_request(request, false)
        .map_err(|e| session_request_failed("send", e))?;
    core.streams_opened.fetch_add(1, Ordering::Relaxed);
    if let Some(frame) = first_frame {
        check_outgoing(&frame, core.peer_max.load(Ordering::Relaxed))?;
        let len = frame.len() as u64;
        out.send_data(frame, false)
            .map_err(|e| session_request_failed("first frame", e))?;
        core.bytes_sent.fetch_add(len, Ordering::Relaxed);
    }
    *core.session_out.lock().await = Some(out);
    core.set_requests(Some(requests));
    tokio::spawn(session_answer(response, core.clone(), tx));
    Ok(())
}

/// Waits for the hub's answer to the session request, then reads the session; a refusal
/// ends the connection, and the receiver reports it.
pub(super) async fn session_answer(
    response: h2::client::ResponseFuture,
    core: Arc<Core>,
    tx: mpsc::Sender<Inbound>,
) {
    let answer = match response.await {
        Err(e) if closed_after_handshake(&e) => Err(session_request_failed(
            "the hub closed the connection right after the TLS handshake, as a hub that \
             requires client certificates does when it refuses the agent's certificate \
             (or the lack of one)",
            e,
        )
        .into()),
        Err(e) => Err(session_request_failed("response", e).into()),
        Ok(response) if response.status() != StatusCode::OK => Err(ConnectError::Config(format!(
            "the hub answered {} to the HTTP/2 session request",
            response.status()
        ))
        .into()),
        Ok(response) => Ok(response),
    };
    match answer {
        Ok(response) => session_pump(response.into_body(), core, tx).await,
        Err(e) => {
            session_failed(&core, &e);
            let _ = tx.send(Err(e)).await;
        }
    }
}

/// Whether the session request failed because the connection broke under it (a broken pipe
/// or a reset): with TLS 1.3 that is how a hub's refusal of the client's certificate can
/// arrive, when the client's writes meet the closed connection before its alert is read.
pub(super) fn closed_after_handshake(e: &h2::Error) -> bool {
    e.get_io().is_some_and(|io| {
        matches!(
            io.kind(),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
        )
    })
}

pub(super) fn post(authority: &str, path: &str) -> Result<Request<()>, http::Error> {
    Request::builder()
        .method(Method::POST)
        .uri(format!("https://{authority}{path}"))
        .header(header::CONTENT_TYPE, CONTENT_TYPE)
        .body(())
}
