//! Listeners that hold against hostile peers, for every gRPC service (authorizer, runtime).
//!
//! - `incoming`: accepts connections under two caps. Handshakes in progress are bounded, each by
//!   a timeout, and a new connection evicts the oldest one still silent, so a flood of idle
//!   sockets can never keep a real client out. Established connections are bounded; one that
//!   has made no authenticated call is closed after a while, and at the cap the oldest such one
//!   makes room. The caps sit below the open-file limit, which `raise_fd_limit` lifts at
//!   start-up, keeping a reserve for the database and the browsers.
//! - `server`: the HTTP/2 limits (streams per connection, windows, frame and header-list size,
//!   keep-alive, request timeout) on tonic's builder.
//! - `Gate`: in front of a service, refuses too many or too large headers as
//!   RESOURCE_EXHAUSTED and authenticates the caller from the headers alone, so the service never
//!   reads or decodes an unauthenticated caller's body (HTTP/2 still buffers up to one stream
//!   window of it before the refusal resets the stream).
//!
//! It knows nothing of grants or browsers: the calls' roles come in as a function.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

pub use rustls::ServerConfig;

mod gate;

pub use gate::{
    CALLER_NOT_PERMITTED, Gate, GateMetrics, HEALTH_EVERY, MAX_HEALTH_REQUEST_BYTES, REQUEST_ID_HEADER, RequestId,
    Route, STANDARD_PATHS, auth_status, follow_health, open_to_all, reflection,
};

use credentials::{AuthError, Credentials, Role, Scope};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// The bounds of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// A TLS handshake not finished by then is closed.
    pub handshake_timeout: Duration,
    /// Handshakes in progress at once; a new connection past it evicts the oldest.
    pub max_pending: usize,
    /// Established connections at once; past it the oldest that has made no authenticated call
    /// is closed to make room, and with none such the new one is closed.
    pub max_connections: usize,
    /// An established connection that has made no authenticated call by then is closed.
    pub first_call_timeout: Duration,
    /// Streams one connection may have open.
    pub max_concurrent_streams: u32,
    /// The longest a request may take in the service.
    pub request_timeout: Duration,
    /// Headers one request may carry, and their total size in bytes (names and values).
    pub max_headers: usize,
    pub max_header_bytes: usize,
}

impl Limits {
    /// The defaults for a service whose calls finish within `request_timeout`.
    pub fn for_requests_within(request_timeout: Duration) -> Self {
        Self {
            handshake_timeout: Duration::from_secs(5),
            max_pending: 256,
            max_connections: 1024,
            first_call_timeout: Duration::from_secs(30),
            max_concurrent_streams: 64,
            request_timeout,
            max_headers: 64,
            max_header_bytes: 16 * 1024,
        }
    }

    /// Caps the connections below `open_files`, less `reserve` for everything else the process
    /// opens (database connections, browsers, files).
    pub fn within_open_files(mut self, open_files: u64, reserve: u64) -> Self {
        let room = usize::try_from(open_files.saturating_sub(reserve)).unwrap_or(usize::MAX).max(16);
        self.max_pending = self.max_pending.min(room / 4).max(4);
        self.max_connections = self.max_connections.min(room - self.max_pending);
        self
    }
}

/// Raises the soft open-file limit to the hard one; returns the limit in force.
pub fn raise_fd_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "the open-file limit could not be raised");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    }
}

/// A rustls server configuration from PEM, speaking HTTP/2 only (gRPC).
pub fn tls_config(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<rustls::ServerConfig>, String> {
    tls_config_for(cert_pem, key_pem, b"h2")
}

/// A rustls server configuration from PEM, speaking HTTP/1.1 only (the owner's gateway).
pub fn tls_config_http1(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<rustls::ServerConfig>, String> {
    tls_config_for(cert_pem, key_pem, b"http/1.1")
}

fn tls_config_for(cert_pem: &[u8], key_pem: &[u8], alpn: &[u8]) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the certificate PEM: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("the key PEM: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the certificate and key: {e}"))?;
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(Arc::new(config))
}

/// The connections of one listener: each established one with whether it has made an
/// authenticated call, and the signal that closes it. Shared between `incoming` and `Gate`.
#[derive(Debug, Clone, Default)]
pub struct Registry(Arc<Mutex<Conns>>);

#[derive(Debug, Default)]
struct Conns {
    next: u64,
    open: HashMap<u64, Open>,
    /// Handshakes in progress, oldest first: id, whether the peer sent anything, eviction.
    pending: VecDeque<(u64, Arc<AtomicBool>, oneshot::Sender<()>)>,
}

#[derive(Debug)]
struct Open {
    proven: bool,
    evict: Option<oneshot::Sender<()>>,
}

/// What each request of a connection carries in its extensions: the peer's addresses and the
/// connection's own id in the registry (two connections can share a remote address).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub tcp: TcpConnectInfo,
    pub id: u64,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Conns> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes a new established connection: its id, and the signal that closes it.
    fn open(&self) -> (u64, oneshot::Receiver<()>) {
        let (evict, evicted) = oneshot::channel();
        let mut conns = self.lock();
        conns.next += 1;
        let id = conns.next;
        conns.open.insert(id, Open { proven: false, evict: Some(evict) });
        (id, evicted)
    }

    /// Marks connection `id` as one that made an authenticated call.
    pub fn prove(&self, id: u64) {
        if let Some(o) = self.lock().open.get_mut(&id) {
            o.proven = true;
        }
    }

    fn evict(open: &mut Open) -> bool {
        open.evict.take().is_some_and(|e| e.send(()).is_ok())
    }

    /// Closes the oldest connection that has made no authenticated call; whether there was one.
    fn evict_oldest_unproven(&self) -> bool {
        let mut conns = self.lock();
        let oldest = conns.open.iter().filter(|(_, o)| !o.proven && o.evict.is_some()).map(|(id, _)| *id).min();
        let Some(id) = oldest else { return false };
        conns.open.get_mut(&id).is_some_and(Self::evict)
    }
}

/// An accepted connection, holding its place under the cap until it closes.
#[derive(Debug)]
pub struct Conn {
    io: Io,
    info: ConnInfo,
    evicted: Option<oneshot::Receiver<()>>,
    /// Told to close: every later read and write fails too.
    closed: bool,
    registry: Registry,
    /// Dropped with the connection: ends its first-call timer.
    _gone: oneshot::Sender<()>,
    _slot: OwnedSemaphorePermit,
}

#[derive(Debug)]
enum Io {
    Plain(Heard),
    Tls(Box<tokio_rustls::server::TlsStream<Heard>>),
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.registry.lock().open.remove(&self.info.id);
    }
}

impl Conn {
    /// An error once the connection was told to close; the transport then drops it.
    fn closed(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let aborted = || io::Error::new(io::ErrorKind::ConnectionAborted, "closed to make room");
        if self.closed {
            return Some(aborted());
        }
        let rx = self.evicted.as_mut()?;
        match Pin::new(rx).poll(cx) {
            Poll::Ready(Ok(())) => {
                self.evicted = None;
                self.closed = true;
                Some(aborted())
            }
            // The registry dropped its end without a word: it keeps it for the connection's life.
            Poll::Ready(Err(_)) => {
                self.evicted = None;
                None
            }
            Poll::Pending => None,
        }
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.closed(cx) {
            return Poll::Ready(Err(e));
        }
        match &mut self.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(e) = self.closed(cx) {
            return Poll::Ready(Err(e));
        }
        match &mut self.io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A socket that notes whether its peer has sent anything: a silent one is evicted first.
#[derive(Debug)]
struct Heard {
    stream: TcpStream,
    heard: Arc<AtomicBool>,
}

impl AsyncRead for Heard {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.heard.store(true, Ordering::Relaxed);
        }
        polled
    }
}

impl AsyncWrite for Heard {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The connections `listener` accepts under `limits`, TLS when `tls` is given, noted in
/// `registry` (give the same one to the `Gate`). The listener closes when the stream is dropped.
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    registry: Registry,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(accept_loop(listener, tls.map(tokio_rustls::TlsAcceptor::from), limits, registry, tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    registry: Registry,
    tx: mpsc::Sender<io::Result<Conn>>,
) {
    let shared = Arc::new(Shared {
        slots: Arc::new(Semaphore::new(limits.max_connections)),
        waiters: Arc::new(Semaphore::new(limits.max_pending)),
        registry: registry.clone(),
    });
    loop {
        let accepted = tokio::select! {
            () = tx.closed() => return,
            a = listener.accept() => a,
        };
        let (stream, _) = match accepted {
            Ok(a) => a,
            // Out of descriptors or a reset before accept: wait a moment rather than spin.
            Err(e) => {
                tracing::debug!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let info = stream.connect_info();
        let heard = Arc::new(AtomicBool::new(false));
        let stream = Heard { stream, heard: Arc::clone(&heard) };
        let (tx, shared, registry, tls) = (tx.clone(), Arc::clone(&shared), registry.clone(), tls.clone());
        let Some(acceptor) = tls else {
            tokio::spawn(admit(Io::Plain(stream), info, shared, limits, tx));
            continue;
        };
        let (evict, evicted) = oneshot::channel();
        let id = {
            let mut conns = registry.lock();
            while conns.pending.len() >= limits.max_pending {
                // The oldest that has sent nothing goes first; failing that, the oldest.
                let at = conns.pending.iter().position(|(_, h, _)| !h.load(Ordering::Relaxed)).unwrap_or(0);
                if let Some((_, _, oldest)) = conns.pending.remove(at) {
                    let _ = oldest.send(());
                }
            }
            conns.next += 1;
            let id = conns.next;
            conns.pending.push_back((id, heard, evict));
            id
        };
        tokio::spawn(async move {
            let shaken = tokio::select! {
                r = tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)) => r.ok().and_then(Result::ok),
                _ = evicted => None,
            };
            registry.lock().pending.retain(|(i, _, _)| *i != id);
            if let Some(stream) = shaken {
                admit(Io::Tls(Box::new(stream)), info, shared, limits, tx).await;
            }
        });
    }
}

/// Gives an established connection a slot (making room by closing the oldest connection that
/// made no authenticated call, if it must) and hands it to the server; closes it if it makes no
/// authenticated call within `first_call_timeout`. At most `max_pending` connections wait for a
/// room being made; past that a new one is closed at once.
async fn admit(io: Io, tcp: TcpConnectInfo, shared: Arc<Shared>, limits: Limits, tx: mpsc::Sender<io::Result<Conn>>) {
    let slot = match Arc::clone(&shared.slots).try_acquire_owned() {
        Ok(slot) => slot,
        Err(_) => {
            let Ok(_waiting) = Arc::clone(&shared.waiters).try_acquire_owned() else { return };
            if !shared.registry.evict_oldest_unproven() {
                tracing::debug!("every connection slot holds an authenticated caller; closed a new connection");
                return;
            }
            match tokio::time::timeout(Duration::from_secs(1), Arc::clone(&shared.slots).acquire_owned()).await {
                Ok(Ok(slot)) => slot,
                _ => return,
            }
        }
    };
    let (id, evicted) = shared.registry.open();
    let (gone, dropped) = oneshot::channel::<()>();
    let registry = shared.registry.clone();
    let info = ConnInfo { tcp, id };
    let conn =
        Conn { io, info, evicted: Some(evicted), closed: false, registry: registry.clone(), _gone: gone, _slot: slot };
    let sent = tx.send(Ok(conn)).await.is_ok();
    drop(tx);
    if !sent {
        return;
    }
    // The timer ends with the connection (its sender dropped) or at the timeout.
    if tokio::time::timeout(limits.first_call_timeout, dropped).await.is_err() {
        let mut conns = registry.lock();
        if let Some(o) = conns.open.get_mut(&id).filter(|o| !o.proven) {
            Registry::evict(o);
        }
    }
}

/// What the accept loop shares with each connection's task.
#[derive(Debug)]
struct Shared {
    slots: Arc<Semaphore>,
    waiters: Arc<Semaphore>,
    registry: Registry,
}

/// tonic's server with the HTTP/2 limits of `limits`.
pub fn server(limits: &Limits) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .timeout(limits.request_timeout)
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_stream_window_size(256 * 1024)
        .initial_connection_window_size(512 * 1024)
        .max_frame_size(16 * 1024)
        // Far above what `Gate` lets in, so an oversize header list reaches `Gate` and is
        // refused with a gRPC status rather than HTTP 431 or a GOAWAY.
        .http2_max_header_list_size(1024 * 1024)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .http2_max_pending_accept_reset_streams(Some(32))
        // No connection lives for ever, a proven one included: clients reconnect, and a slot a
        // credential held is given back.
        .max_connection_age(Duration::from_secs(3600))
        .max_connection_age_grace(Duration::from_secs(60))
        .accept_http1(false)
}
