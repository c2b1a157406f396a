//! The `/metrics` endpoint: a small HTTP/1.1 server (hyper) that answers `GET /metrics` with the registry as OpenMetrics text, bounded in connections and header time.
//!
//! This module owns the endpoint; it must not count anything.

use super::*;

/// How long the metrics server waits for a client's request headers.
pub(super) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Keeps one connection counted in `open_connections{transport}` until dropped.
/// Created by [`HubMetrics::connection_guard`].
#[derive(Debug)]
pub struct ConnectionGuard {
    pub(super) metrics: HubMetrics,
    pub(super) transport: &'static str,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.metrics.connection_closed(self.transport);
    }
}

pub(super) fn text_response(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Answers one request of the metrics endpoint. Never fails.
pub(super) fn handle(metrics: &HubMetrics, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET {
        let mut response = text_response(
            StatusCode::METHOD_NOT_ALLOWED,
            PLAIN,
            Bytes::from_static(b"method not allowed\n"),
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    match req.uri().path() {
        "/metrics" => match metrics.try_encode() {
            Ok(text) => text_response(StatusCode::OK, OPENMETRICS_CONTENT_TYPE, Bytes::from(text)),
            Err(fmt::Error) => {
                tracing::error!("failed to encode metrics");
                text_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    PLAIN,
                    Bytes::from_static(b"failed to encode metrics\n"),
                )
            }
        },
        "/" => text_response(
            StatusCode::OK,
            PLAIN,
            Bytes::from_static(b"agentwire hub: metrics at /metrics\n"),
        ),
        _ => text_response(
            StatusCode::NOT_FOUND,
            PLAIN,
            Bytes::from_static(b"not found\n"),
        ),
    }
}

/// Whether an accept error concerns only the one incoming connection (the
/// listener itself is fine and accepting should go on).
pub(super) fn is_per_connection_error(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::Interrupted
    )
}

/// Serves the metrics endpoint on `listener` over HTTP/1.1 (hyper 1):
///
/// * `GET /metrics` → 200, content type
///   `application/openmetrics-text; version=1.0.0; charset=utf-8`, body [`HubMetrics::encode`];
/// * `GET /` → 200, a one-line text pointer to `/metrics`;
/// * any other path → 404; any method other than GET → 405 (with `Allow: GET`).
///
/// Each connection runs in its own task; a client has
/// 10 s to send its request headers. Connection errors are logged, never fatal.
/// Returns only when accepting fails with an error that concerns the listener
/// (errors that concern one incoming connection, such as `ConnectionAborted`,
/// are logged and skipped).
///
/// # Errors
///
/// The listener's accept error that stopped the server.
pub async fn serve_metrics(listener: TcpListener, metrics: HubMetrics) -> std::io::Result<()> {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) if is_per_connection_error(&err) => {
                tracing::debug!(error = %err, "metrics endpoint: accept error on one connection");
                continue;
            }
            Err(err) => {
                tracing::warn!(error = %err, "metrics endpoint: accept failed, stopping");
                return Err(err);
            }
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let response = handle(&metrics, &req);
                async move { Ok::<_, Infallible>(response) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            if let Err(err) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %err, "metrics endpoint: connection error");
            }
        });
    }
}

/// Binds a TCP listener on `addr`, spawns [`serve_metrics`] on it and returns
/// the bound address (so port 0 picks a free port) and the server's task.
/// Abort the handle to stop the server.
///
/// # Errors
///
/// Binding `addr` or reading the bound address failed.
pub async fn spawn_metrics_server(
    addr: SocketAddr,
    metrics: HubMetrics,
) -> std::io::Result<(SocketAddr, JoinHandle<std::io::Result<()>>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, "metrics endpoint listening");
    let handle = tokio::spawn(serve_metrics(listener, metrics));
    Ok((local, handle))
}
