//! The static file server behind `agentwire serve`: HTTP/3 on a UDP port (quinn, with the
//! HTTP/3 framing of `agentwire_h3wire`, ALPN `h3`) and HTTP/2 and HTTP/1.1 on the TCP port of
//! the same number (hyper's automatic connection builder over TLS 1.3, ALPN `h2` and
//! `http/1.1`).
//!
//! Files come from a [`FileStore`] loaded into memory once at start (see [`crate::files`]):
//! GET and HEAD only (405 otherwise), 404 for anything not in the store (which also covers
//! every unsafe path), Content-Length always set, and on TCP responses
//! `Alt-Svc: h3=":PORT"` to advertise HTTP/3.
//!
//! Threads: `threads == 1` runs everything on one current-thread runtime (for fair per-core
//! comparisons); more runs a multi-threaded runtime with that many workers. QUIC packet I/O
//! for all connections goes through the one quinn endpoint (quinn's design); requests and TCP
//! connections are spread over the workers.
//!
//! This module must not log or print on the request path, and [`ServerHandle::stop`] (or
//! dropping the handle) ends every connection and task it started.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use agentwire_tls::HubIdentity;
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use http::header::{HeaderValue, ALLOW, ALT_SVC, CONTENT_LENGTH, CONTENT_TYPE};
use http::{Method, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::files::{self, FileStore};
use agentwire_h3wire::{self as h3wire, H3Error};

/// Most time a new connection may take to finish its TLS or QUIC handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`ServeConfig::request_head_timeout`].
pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What `agentwire serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Directory whose files are served.
    pub root: PathBuf,
    /// Directory holding `hub.pem` and `hub.key` (as written by `agentwire cert`).
    pub cert_dir: PathBuf,
    /// Address for both the UDP (HTTP/3) and the TCP (HTTP/2, HTTP/1.1) listener. With port
    /// 0, a port free on both is chosen.
    pub listen: SocketAddr,
    /// Runtime worker threads; 1 = a single-threaded runtime; 0 = one per CPU.
    pub threads: usize,
    /// Write the standard benchmark files into the root first.
    pub generate: bool,
    /// HTTP/3: most time from a request stream's opening to its complete HEADERS frame; a
    /// stream that takes longer is reset with H3_REQUEST_REJECTED, so that idle streams
    /// cannot hold a connection's stream slots.
    pub request_head_timeout: Duration,
}

impl ServeConfig {
    /// Serve `root` with the certificate in `cert_dir` on 127.0.0.1:8443, one worker per CPU.
    pub fn new(root: PathBuf, cert_dir: PathBuf) -> Self {
        ServeConfig {
            root,
            cert_dir,
            listen: SocketAddr::from(([127, 0, 0, 1], 8443)),
            threads: 0,
            generate: false,
            request_head_timeout: REQUEST_HEAD_TIMEOUT,
        }
    }
}

/// A running server. Stop it with [`ServerHandle::stop`]; dropping it stops it too.
pub struct ServerHandle {
    local_addr: SocketAddr,
    files: usize,
    bytes: u64,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle")
            .field("local_addr", &self.local_addr)
            .field("files", &self.files)
            .finish()
    }
}

impl ServerHandle {
    /// The address both listeners are bound to (UDP and TCP share the port number).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Number of files served.
    pub fn files(&self) -> usize {
        self.files
    }

    /// Bytes held in memory for the files.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Stops the server: the QUIC endpoint closes every connection, TCP connections are
    /// dropped, and the server's threads end. Returns once they have.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let _ = self.stop.send(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Loads the files and the certificate, binds both listeners and starts serving on a thread
/// of its own. Errors name the file, directory or address that is wrong.
pub fn start(config: ServeConfig) -> Result<ServerHandle> {
    if config.generate {
        files::write_standard_files(&config.root).with_context(|| {
            format!("writing the standard files into {}", config.root.display())
        })?;
    }
    let store = Arc::new(FileStore::load(&config.root)?);
    let identity = HubIdentity::from_dir(&config.cert_dir).with_context(|| {
        format!(
            "loading hub.pem and hub.key from {} (create them with `agentwire cert --out {}`)",
            config.cert_dir.display(),
            config.cert_dir.display()
        )
    })?;
    let mut tcp_tls =
        agentwire_tls::server_config(&identity, &[crate::ALPN_H2, crate::ALPN_HTTP11])?;
    tcp_tls.max_early_data_size = 0;
    let quic_tls = agentwire_tls::server_config(&identity, &[crate::ALPN_H3])?;
    let quic_crypto = quinn::crypto::rustls::QuicServerConfig::try_from(quic_tls)
        .map_err(|e| anyhow!("the TLS configuration does not suit QUIC: {e}"))?;
    let mut quic_config = quinn::ServerConfig::with_crypto(Arc::new(quic_crypto));
    // As the hub: no NEW_TOKEN frames and no token filter, whatever quinn's features.
    quic_config.validation_token = agentwire_transport::quic::no_validation_tokens();
    quic_config.transport_config(Arc::new(crate::client::quic_transport(
        2 * 1024 * 1024,
        32 * 1024 * 1024,
    )?));

    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let runtime = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("aw-serve")
            .enable_all()
            .build()
    }
    .context("cannot start the server's runtime")?;

    let quic = QuicAccept {
        base: quic_config,
        settings: crate::client::quic_settings(2 * 1024 * 1024, 32 * 1024 * 1024),
    };
    let (tcp, endpoint, local_addr) = runtime.block_on(bind_both(config.listen, &quic))?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tcp_tls));
    let files = store.len();
    let bytes = store.total_bytes();
    let thread = std::thread::Builder::new()
        .name("aw-serve-main".into())
        .spawn(move || {
            runtime.block_on(serve_all(
                tcp,
                QuicServer {
                    endpoint,
                    accept: Arc::new(quic),
                },
                acceptor,
                store,
                stop_rx,
                local_addr,
                config.request_head_timeout,
            ));
            runtime.shutdown_timeout(Duration::from_secs(1));
        })
        .context("cannot start the server thread")?;
    Ok(ServerHandle {
        local_addr,
        files,
        bytes,
        stop: stop_tx,
        thread: Some(thread),
    })
}

/// Binds UDP and TCP on the same port (with port 0: tries ports until one is free on both).
async fn bind_both(
    listen: SocketAddr,
    quic: &QuicAccept,
) -> Result<(TcpListener, quinn::Endpoint, SocketAddr)> {
    let settings = &quic.settings;
    let tries = if listen.port() == 0 { 20 } else { 1 };
    let mut last_err = None;
    for _ in 0..tries {
        let (udp, _) = settings
            .bind_udp(listen)
            .with_context(|| format!("binding UDP {listen} for HTTP/3"))?;
        let udp_addr = udp.local_addr().context("reading the UDP address")?;
        match bind_tcp(udp_addr) {
            Ok(tcp) => {
                let endpoint =
                    agentwire_transport::quic::endpoint_on(udp, settings, Some(quic.base.clone()))
                        .context("creating the QUIC endpoint")?;
                let tcp = TcpListener::from_std(tcp).context("registering the TCP listener")?;
                return Ok((tcp, endpoint, udp_addr));
            }
            Err(e) => {
                last_err =
                    Some(e.context(format!("binding TCP {udp_addr} for HTTP/2 and HTTP/1.1")))
            }
        }
    }
    match last_err {
        Some(e) => Err(e),
        None => bail!("cannot bind {listen}"),
    }
}

fn bind_tcp(addr: SocketAddr) -> Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// How QUIC connections are accepted: the server configuration, adjusted per peer by
/// agentwire's settings (loopback peers get the loopback datagram size).
struct QuicAccept {
    base: quinn::ServerConfig,
    settings: agentwire_transport::QuicSettings,
}

/// The HTTP/3 side of the server: its endpoint and how it accepts.
struct QuicServer {
    endpoint: quinn::Endpoint,
    accept: Arc<QuicAccept>,
}

async fn serve_all(
    tcp: TcpListener,
    quic: QuicServer,
    acceptor: tokio_rustls::TlsAcceptor,
    store: Arc<FileStore>,
    mut stop: watch::Receiver<bool>,
    local_addr: SocketAddr,
    head_timeout: Duration,
) {
    let alt_svc = HeaderValue::from_str(&format!("h3=\":{}\"", local_addr.port()))
        .unwrap_or_else(|_| HeaderValue::from_static("h3=\":443\""));
    let tcp_task = tokio::spawn(accept_tcp(
        tcp,
        acceptor,
        store.clone(),
        alt_svc,
        stop.clone(),
    ));
    let endpoint = quic.endpoint;
    let quic_task = tokio::spawn(accept_quic(
        endpoint.clone(),
        quic.accept,
        store,
        stop.clone(),
        head_timeout,
    ));
    // Until stopped (or the handle is gone).
    stopped(&mut stop).await;
    endpoint.close(crate::client::H3_NO_ERROR.into(), b"server stopping");
    tcp_task.abort();
    quic_task.abort();
    let _ = tokio::time::timeout(Duration::from_millis(200), endpoint.wait_idle()).await;
}

/// Resolves once the server is told to stop.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

async fn accept_tcp(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    store: Arc<FileStore>,
    alt_svc: HeaderValue,
    stop: watch::Receiver<bool>,
) {
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(1024);
    let builder = Arc::new(builder);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            // Out of file descriptors and the like: wait a moment instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let acceptor = acceptor.clone();
        let store = store.clone();
        let alt_svc = alt_svc.clone();
        let builder = builder.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let serve = async {
                let Ok(Ok(tls)) =
                    tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                else {
                    return;
                };
                let service = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let resp = hyper_response(&store, req.method(), req.uri().path(), &alt_svc);
                    async move { Ok::<_, Infallible>(resp) }
                });
                let _ = builder.serve_connection(TokioIo::new(tls), service).await;
            };
            tokio::select! {
                _ = serve => {}
                _ = stopped(&mut stop) => {}
            }
        });
    }
}

async fn accept_quic(
    endpoint: quinn::Endpoint,
    quic: Arc<QuicAccept>,
    store: Arc<FileStore>,
    stop: watch::Receiver<bool>,
    head_timeout: Duration,
) {
    while let Some(incoming) = endpoint.accept().await {
        let store = store.clone();
        let mut stop = stop.clone();
        let quic = quic.clone();
        tokio::spawn(async move {
            let serve = async {
                let accepted = agentwire_transport::quic::accept_incoming(
                    incoming,
                    &quic.base,
                    &quic.settings,
                    None,
                );
                let Ok(connecting) = accepted else {
                    return;
                };
                let Ok(Ok(conn)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting).await else {
                    return;
                };
                serve_h3(conn, store, head_timeout).await;
            };
            tokio::select! {
                _ = serve => {}
                _ = stopped(&mut stop) => {}
            }
        });
    }
}

/// Serves HTTP/3 on one QUIC connection until it ends: sends our control stream, reads the
/// client's unidirectional streams, and answers each request stream. Requests are answered
/// inside this connection's task, not on tasks of their own: a spawn per request costs more
/// than the answer to a small GET. A protocol error on a stream resets that stream; one on
/// the connection closes it with its HTTP/3 error code (other connections go on).
async fn serve_h3(conn: quinn::Connection, store: Arc<FileStore>, head_timeout: Duration) {
    let Ok(mut control) = conn.open_uni().await else {
        return;
    };
    if control
        .write_chunk(h3wire::control_stream_preface())
        .await
        .is_err()
    {
        return;
    }
    let critical = Arc::new(h3wire::CriticalStreams::default());
    let mut answers = FuturesUnordered::new();
    let mut uni = FuturesUnordered::new();
    // The accept futures live across turns of the loop (a new one only after each stream).
    let mut accept_bi = std::pin::pin!(conn.accept_bi());
    let mut accept_uni = std::pin::pin!(conn.accept_uni());
    let outcome = loop {
        tokio::select! {
            biased;
            Some(result) = answers.next(), if !answers.is_empty() => {
                if let Err(e) = result {
                    break Err(e);
                }
            }
            Some(result) = uni.next(), if !uni.is_empty() => {
                if let Err(e) = result {
                    break Err(e);
                }
            }
            bi = &mut accept_bi => match bi {
                Ok((send, recv)) => {
                    answers.push(answer_h3(send, recv, store.clone(), head_timeout));
                    accept_bi.set(conn.accept_bi());
                }
                Err(_) => break Ok(()),
            },
            stream = &mut accept_uni => match stream {
                Ok(recv) => {
                    uni.push(read_client_uni(recv, critical.clone()));
                    accept_uni.set(conn.accept_uni());
                }
                Err(_) => break Ok(()),
            },
        }
    };
    if let Err(e) = outcome {
        conn.close(varint(e.code), e.reason.as_bytes());
    }
    // Kept open until here: closing our control stream would be an error.
    drop(control);
}

fn varint(code: u64) -> quinn::VarInt {
    quinn::VarInt::from_u64(code).unwrap_or(quinn::VarInt::MAX)
}

/// Reads one of the client's unidirectional streams until it ends or the connection does.
async fn read_client_uni(
    mut recv: quinn::RecvStream,
    critical: Arc<h3wire::CriticalStreams>,
) -> Result<(), H3Error> {
    let mut reader = h3wire::UniReader::default();
    loop {
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => {
                if let Some(kind) = reader.push(&chunk.bytes)? {
                    critical.open(kind)?;
                    if kind == h3wire::UniKind::Unknown {
                        let _ = recv.stop(varint(h3wire::code::H3_STREAM_CREATION_ERROR));
                        return Ok(());
                    }
                }
            }
            Ok(None) | Err(quinn::ReadError::Reset(_)) => {
                return reader.ended().map_or(Ok(()), Err);
            }
            // The connection is gone: nothing more to say on it.
            Err(_) => return Ok(()),
        }
    }
}

/// Answers one HTTP/3 request stream. Returns an error only for errors that close the
/// connection; stream errors reset the stream here.
async fn answer_h3(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    store: Arc<FileStore>,
    head_timeout: Duration,
) -> Result<(), H3Error> {
    // The timer is only armed if the headers are not there at once (the usual case is a
    // whole request in the stream's first chunk).
    let read = tokio::time::timeout(head_timeout, read_request_head(&mut recv)).await;
    let failed = match read {
        Ok(Ok(Some(head))) => return respond_h3(send, recv, &store, head).await,
        // Reset by the client, or the connection is gone.
        Ok(Ok(None)) => return Ok(()),
        Ok(Err(e)) => e,
        Err(_) => h3wire::RequestReader::rejected("no complete request headers in time"),
    };
    if failed.scope == h3wire::Scope::Connection {
        return Err(failed);
    }
    let _ = send.reset(varint(failed.code));
    let _ = recv.stop(varint(failed.code));
    Ok(())
}

/// Reads a request stream up to its HEADERS frame: `None` if the stream was reset or the
/// connection is gone.
async fn read_request_head(
    recv: &mut quinn::RecvStream,
) -> Result<Option<h3wire::RequestHead>, H3Error> {
    let mut reader = h3wire::RequestReader::default();
    loop {
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => {
                if let h3wire::RequestProgress::Head(head) = reader.push(&chunk.bytes)? {
                    return Ok(Some(head));
                }
            }
            Ok(None) => return Err(h3wire::RequestReader::incomplete()),
            Err(_) => return Ok(None),
        }
    }
}

/// Sends the answer to a request whose headers have been read.
async fn respond_h3(
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    store: &FileStore,
    head: h3wire::RequestHead,
) -> Result<(), H3Error> {
    let reply = lookup(store, &head.method, &head.path);
    let allow;
    let extra: &[(&str, &str)] = match reply.allow() {
        Some(methods) => {
            allow = [("allow", methods)];
            &allow
        }
        None => &[],
    };
    let has_body = !reply.body.is_empty();
    let response_head = h3wire::response_head(
        reply.status,
        reply.length,
        reply.content_type,
        extra,
        has_body.then_some(reply.body.len() as u64),
    );
    let mut chunks = [response_head, reply.body];
    let parts = if has_body { 2 } else { 1 };
    if send.write_all_chunks(&mut chunks[..parts]).await.is_err() {
        return Ok(());
    }
    let _ = send.finish();
    // The request is answered. A GET's stream normally ends right after its headers: if that
    // end is already here, take it, and nothing more needs saying. Otherwise tell the client
    // we read no more of it with H3_NO_ERROR (RFC 9114, 4.1), instead of the bare 0 quinn
    // would send when the unread receive side is dropped.
    let ended = matches!(
        recv.read_chunk(usize::MAX, true).now_or_never(),
        Some(Ok(None))
    );
    if !ended {
        let _ = recv.stop(varint(h3wire::code::H3_NO_ERROR));
    }
    Ok(())
}

/// The answer to one request, whatever the protocol.
struct Reply {
    status: StatusCode,
    /// Content-Length (for HEAD: the file's length, with an empty body).
    length: u64,
    body: Bytes,
    content_type: &'static str,
}

impl Reply {
    /// The methods to name in `Allow` (405 only).
    fn allow(&self) -> Option<&'static str> {
        (self.status == StatusCode::METHOD_NOT_ALLOWED).then_some("GET, HEAD")
    }

    fn head(&self, alt_svc: Option<&HeaderValue>) -> http::response::Builder {
        let mut b = http::Response::builder()
            .status(self.status)
            .header(CONTENT_LENGTH, self.length)
            .header(CONTENT_TYPE, self.content_type);
        if let Some(methods) = self.allow() {
            b = b.header(ALLOW, methods);
        }
        if let Some(v) = alt_svc {
            b = b.header(ALT_SVC, v.clone());
        }
        b
    }
}

fn lookup(store: &FileStore, method: &Method, path: &str) -> Reply {
    let text = |status: StatusCode, body: &'static str| Reply {
        status,
        length: body.len() as u64,
        body: Bytes::from_static(body.as_bytes()),
        content_type: "text/plain; charset=utf-8",
    };
    let head = method == Method::HEAD;
    if method != Method::GET && !head {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
    }
    // A directory's page is its index.html, as in every static file server.
    let index;
    let path = if path.ends_with('/') {
        index = format!("{path}index.html");
        &index
    } else {
        path
    };
    let mut reply = match store.get(path) {
        Some(file) => Reply {
            status: StatusCode::OK,
            length: file.len() as u64,
            body: file.clone(),
            content_type: content_type(path),
        },
        None => text(StatusCode::NOT_FOUND, "not found\n"),
    };
    if head {
        reply.body = Bytes::new();
    }
    reply
}

/// The media type of a file, by its extension: what a browser needs to show a page and run
/// its module scripts (it refuses a script served as `application/octet-stream`); anything
/// else, the benchmark's `.bin` files included, is `application/octet-stream`.
fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    match ext.to_ascii_lowercase().as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "txt" | "md" => "text/plain; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "wasm" => "application/wasm",
        _ => "application/octet-stream",
    }
}

fn hyper_response(
    store: &FileStore,
    method: &Method,
    path: &str,
    alt_svc: &HeaderValue,
) -> http::Response<Full<Bytes>> {
    let reply = lookup(store, method, path);
    let head = reply.head(Some(alt_svc));
    match head.body(Full::new(reply.body)) {
        Ok(resp) => resp,
        Err(_) => {
            let mut resp = http::Response::new(Full::new(Bytes::new()));
            *resp.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            resp
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_for_files_missing_paths_methods_and_head() {
        let store = FileStore::from_files([("a.bin", vec![7u8; 10])]);
        let ok = lookup(&store, &Method::GET, "/a.bin");
        assert_eq!(
            (ok.status, ok.length, ok.body.len()),
            (StatusCode::OK, 10, 10)
        );
        let head = lookup(&store, &Method::HEAD, "/a.bin");
        assert_eq!(
            (head.status, head.length, head.body.len()),
            (StatusCode::OK, 10, 0)
        );
        let missing = lookup(&store, &Method::GET, "/../a.bin");
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        assert_eq!(missing.length, missing.body.len() as u64);
        let post = lookup(&store, &Method::POST, "/a.bin");
        assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
        let alt = HeaderValue::from_static("h3=\":8443\"");
        let resp = hyper_response(&store, &Method::GET, "/a.bin", &alt);
        assert_eq!(resp.headers()[ALT_SVC], "h3=\":8443\"");
        assert_eq!(resp.headers()[CONTENT_LENGTH], "10");
        let resp = hyper_response(&store, &Method::PUT, "/a.bin", &alt);
        assert_eq!(resp.headers()[ALLOW], "GET, HEAD");
    }

    #[test]
    fn a_page_and_its_scripts_have_their_media_types_and_a_directory_its_index() {
        let store = FileStore::from_files([
            ("index.html", b"<!doctype html>".to_vec()),
            ("app.js", b"export {}".to_vec()),
            ("sdk/index.html", b"sdk".to_vec()),
        ]);
        let page = lookup(&store, &Method::GET, "/");
        assert_eq!(
            (page.status, page.content_type),
            (StatusCode::OK, "text/html; charset=utf-8")
        );
        assert_eq!(&page.body[..], b"<!doctype html>");
        assert_eq!(lookup(&store, &Method::GET, "/sdk/").body, "sdk");
        let script = lookup(&store, &Method::GET, "/app.js");
        assert_eq!(script.content_type, "text/javascript; charset=utf-8");
        assert_eq!(content_type("/1k.bin"), "application/octet-stream");
        assert_eq!(content_type("/noext"), "application/octet-stream");
        assert_eq!(
            lookup(&store, &Method::GET, "/missing/").status,
            StatusCode::NOT_FOUND
        );
    }
}
