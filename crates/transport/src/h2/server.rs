//! The hub's side: accepting the session and message streams of one connection, routing them by path and method, answering `200`, `204`, `400`, `404` or `405`.
//!
//! This module owns the server's routing; it must not interpret frames.

use super::*;

/// A stream the server accepted: its request and the handle that answers it.
pub(super) type Accepted = (Request<RecvStream>, h2::server::SendResponse<Bytes>);

/// Accepts the next stream of `conn`. While none is ready, first answers the message streams
/// in `answers` (`204`) and drives the connection once more, which writes them together.
pub(super) fn poll_accept_answering<IO>(
    conn: &mut h2::server::Connection<IO, Bytes>,
    answers: &mut Vec<h2::server::SendResponse<Bytes>>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<Option<Result<Accepted, h2::Error>>>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let next = conn.poll_accept(cx);
        if next.is_ready() || answers.is_empty() {
            return next;
        }
        answer_all(answers);
    }
}

pub(super) fn answer_all(answers: &mut Vec<h2::server::SendResponse<Bytes>>) {
    for mut respond in answers.drain(..) {
        respond_status(&mut respond, StatusCode::NO_CONTENT);
    }
}

/// Reads the rest of a message stream's body in a task of its own.
pub(super) async fn message_pump(
    mut body: RecvStream,
    mut respond: h2::server::SendResponse<Bytes>,
    mut state: MessageBody,
    core: Arc<Core>,
    tx: mpsc::Sender<Inbound>,
) {
    let result = loop {
        let data = body.data().await;
        if let BodyStep::Done(result) = state.step(&core, &mut body, data) {
            break result;
        }
    };
    drop(body);
    if let Some((inbound, status)) = state.settle(&core, result) {
        // Queued for the hub first, then answered (see `read_message_inline`).
        let _ = tx.send(inbound).await;
        respond_status(&mut respond, status);
    }
}

pub(super) fn respond_status(respond: &mut h2::server::SendResponse<Bytes>, status: StatusCode) {
    if let Ok(response) = Response::builder().status(status).body(()) {
        let _ = respond.send_response(response, true);
    }
}

pub(super) enum Route {
    Session,
    Message,
    Refuse(StatusCode),
}

pub(super) fn route<B>(req: &Request<B>) -> Route {
    let path = req.uri().path();
    let known = path == SESSION_PATH || path == MESSAGE_PATH;
    if !known {
        return Route::Refuse(StatusCode::NOT_FOUND);
    }
    if req.method() != Method::POST {
        return Route::Refuse(StatusCode::METHOD_NOT_ALLOWED);
    }
    if path == SESSION_PATH {
        Route::Session
    } else {
        Route::Message
    }
}

/// Hub side: drives the h2 server connection, routes requests, and ends the connection when
/// asked to.
pub(super) async fn serve<IO>(
    mut conn: h2::server::Connection<IO, Bytes>,
    core: Arc<Core>,
    tx: mpsc::Sender<Inbound>,
    mut session_ready: Option<oneshot::Sender<()>>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut shutdown = core.shutdown.subscribe();
    let mut have_session = false;
    let mut answers = Vec::new();
    let result: Result<(), h2::Error> = loop {
        let next = tokio::select! {
            next = poll_fn(|cx| poll_accept_answering(&mut conn, &mut answers, cx)) => Some(next),
            () = wait_true(&mut shutdown) => None,
        };
        let Some(next) = next else {
            answer_all(&mut answers);
            conn.graceful_shutdown();
            // Keep driving while the goodbye and the open streams finish, refusing new ones.
            let drain = async {
                loop {
                    match conn.accept().await {
                        Some(Ok((_, mut respond))) => {
                            respond.send_reset(h2::Reason::REFUSED_STREAM)
                        }
                        Some(Err(e)) => return Err(e),
                        None => return Ok(()),
                    }
                }
            };
            break tokio::time::timeout(CLOSE_GRACE, drain)
                .await
                .unwrap_or(Ok(()));
        };
        let (req, mut respond) = match next {
            None => break Ok(()),
            Some(Err(e)) => break Err(e),
            Some(Ok(pair)) => pair,
        };
        match route(&req) {
            Route::Refuse(status) => respond_status(&mut respond, status),
            Route::Session if have_session => respond_status(&mut respond, StatusCode::BAD_REQUEST),
            Route::Message if !have_session => {
                respond_status(&mut respond, StatusCode::BAD_REQUEST)
            }
            Route::Session => {
                let response = Response::builder()
                    .status(StatusCode::OK)
                    .header(header::CONTENT_TYPE, CONTENT_TYPE)
                    .body(());
                let Ok(response) = response else {
                    continue;
                };
                let Ok(out) = respond.send_response(response, false) else {
                    continue;
                };
                have_session = true;
                *core.session_out.lock().await = Some(out);
                tokio::spawn(session_pump(req.into_body(), core.clone(), tx.clone()));
                if let Some(ready) = session_ready.take() {
                    let _ = ready.send(());
                }
            }
            Route::Message => {
                read_message_inline(req.into_body(), respond, &core, &tx, &mut answers);
            }
        }
    };
    core.connection_ended(result);
    drop(tx);
}

/// Server side: a TLS stream (already accepted with ALPN h2) → the session's halves, once the
/// session request has arrived (within `session_timeout`). Drives the h2 server connection in a
/// spawned task that lives as long as the session.
pub async fn accept<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: IO,
    remote: Option<SocketAddr>,
    session_timeout: Duration,
) -> Result<(H2Sender, H2Receiver), TransportError> {
    let deadline = tokio::time::Instant::now() + session_timeout;
    let conn = match tokio::time::timeout_at(deadline, server_builder().handshake::<IO, Bytes>(io))
        .await
    {
        Err(_) => return Err(TransportError::Timeout(session_timeout)),
        Ok(Err(e)) => {
            return Err(ConnectError::refused(
                "HTTP/2 handshake failed (is the peer an agentwire HTTP/2 client?)",
                e,
            )
            .into())
        }
        Ok(Ok(conn)) => conn,
    };
    // Nothing bigger than a hello until the hub has read the hello: the session pump starts
    // reading as soon as the session request arrives, before the hub holds the receiver.
    let (core, tx, rx) = Core::new(remote, String::new(), agentwire_proto::MAX_HELLO_FRAME);
    let (ready_tx, ready_rx) = oneshot::channel();
    let driver = tokio::spawn(serve(conn, core.clone(), tx, Some(ready_tx)));
    match tokio::time::timeout_at(deadline, ready_rx).await {
        Ok(Ok(())) => Ok(halves(core, rx)),
        Ok(Err(_)) => Err(core.reason().unwrap_or_else(|| TransportError::Closed {
            code: None,
            reason: "the connection ended before the session request".into(),
        })),
        Err(_) => {
            driver.abort();
            Err(TransportError::Timeout(session_timeout))
        }
    }
}
