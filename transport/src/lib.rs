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

/// tonic answers a request body that ends inside a frame, or holds no message, as INTERNAL
/// before any codec sees it; it is the caller's malformed request.
fn callers_fault(response: http::Response<tonic::body::Body>) -> http::Response<tonic::body::Body> {
    let h = response.headers();
    let internal = h.get("grpc-status").is_some_and(|v| v == "13");
    let message = h.get("grpc-message").and_then(|v| v.to_str().ok()).unwrap_or_default();
    // tonic's own words, percent-encoded as it sends them; a service's INTERNAL is left alone.
    if internal && matches!(message, "Unexpected%20EOF%20decoding%20stream." | "Missing%20request%20message.") {
        return Status::invalid_argument("request: the message is cut short or missing").into_http();
    }
    response
}

/// Who may make the call at a path: its roles and the owner's scopes it needs, or `None` for a
/// path that is no call of the service (answered as tonic answers it).
pub type Route = fn(&str) -> Option<(&'static [Role], &'static [Scope])>;

/// The route of a service any caller may use (health): the gate bounds its headers only.
pub fn open_to_all(_: &str) -> Option<(&'static [Role], &'static [Scope])> {
    None
}

/// The largest health request decoded: a service name.
pub const MAX_HEALTH_REQUEST_BYTES: usize = 512;

/// The header limits and the caller's authentication, in front of a service.
#[derive(Clone)]
pub struct Gate<S> {
    inner: S,
    credentials: Credentials,
    route: Route,
    limits: Limits,
    registry: Registry,
    metrics: Option<GateMetrics>,
}

/// What the gate records: every call by method and status (`grpc_server_*`), and every caller it
/// refused by cause (`credential_refusals_total`).
#[derive(Debug, Clone)]
pub struct GateMetrics {
    grpc: telemetry::GrpcMetrics,
    refusals: telemetry::Counters<1>,
}

impl GateMetrics {
    /// Registers the families in `registry`; `paths` are the methods this server serves.
    pub fn new(registry: &mut telemetry::Registry, paths: impl IntoIterator<Item = String>) -> Self {
        let refusals = telemetry::Family::default();
        registry.register(
            "credential_refusals",
            "Callers refused before their call was read, by cause",
            refusals.clone(),
        );
        Self { grpc: telemetry::GrpcMetrics::new(registry, paths), refusals }
    }
}

/// The methods every server serves beside its own: health and reflection.
pub const STANDARD_PATHS: [&str; 3] = [
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
];

/// How often gRPC health is brought in step with the service's own check.
pub const HEALTH_EVERY: Duration = Duration::from_secs(5);

/// Keeps gRPC health in step with `check`, every [`HEALTH_EVERY`] until aborted: the server's
/// overall status (`""`) and `service`'s, so a load balancer's probe and `/healthz` agree.
pub fn follow_health(
    reporter: tonic_health::server::HealthReporter,
    service: &'static str,
    check: telemetry::HealthCheck,
) -> tokio::task::JoinHandle<()> {
    use tonic_health::ServingStatus;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(HEALTH_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut said = None;
        loop {
            tick.tick().await;
            let status = match check.check().await {
                telemetry::Health::Serving => ServingStatus::Serving,
                telemetry::Health::Failing(_) => ServingStatus::NotServing,
            };
            // A watcher hears a change, not the same status every period.
            if said != Some(status) {
                for name in ["", service] {
                    reporter.set_service_status(name, status).await;
                }
                said = Some(status);
            }
        }
    })
}

/// gRPC server reflection over `sets` (encoded file descriptor sets), advertising `service`
/// (`package.Service`), health and reflection, so that `grpcurl list` and `describe` work. The
/// schema is public, so any caller may ask, with messages of at most 4 KiB.
pub fn reflection(
    sets: &[&'static [u8]],
    service: &str,
) -> tonic_reflection::server::v1::ServerReflectionServer<impl tonic_reflection::server::v1::ServerReflection> {
    let builder = sets
        .iter()
        .fold(tonic_reflection::server::Builder::configure(), |b, set| b.register_encoded_file_descriptor_set(set));
    let names = [service, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"];
    let builder = names.into_iter().fold(builder, |b, name| b.with_service_name(name));
    // Open to any caller, as health is: so each message it decodes is held small, as health's is.
    builder.build_v1().expect("the compiled descriptor sets are well formed").max_decoding_message_size(4 * 1024)
}

/// The id a request carries across services (`x-request-id`), for the logs: the caller's when it
/// sends a plausible one, otherwise one made here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// The header a request id travels in, from the gateway to the authorizer and the runtime.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

impl RequestId {
    /// A new id.
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4().simple().to_string())
    }

    /// The id `headers` carry when it is 1 to 64 letters, digits, `-`, `_` or `.`; otherwise a
    /// new one, so a caller cannot write arbitrary text into every log line.
    pub fn from_headers(headers: &http::HeaderMap) -> Self {
        let given = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).filter(|v| {
            (1..=64).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        });
        given.map_or_else(Self::new, |id| Self(id.to_owned()))
    }
}

impl Default for RequestId {
    fn default() -> Self {
        Self::new()
    }
}

/// The first `max` bytes of `text`, cut at a character's boundary.
fn clipped(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl<S> std::fmt::Debug for Gate<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").finish_non_exhaustive()
    }
}

impl<S> Gate<S> {
    /// `registry` is the one `incoming` notes this listener's connections in: a connection that
    /// makes an authenticated call is proven and is not closed to make room.
    pub fn new(inner: S, credentials: Credentials, route: Route, limits: Limits, registry: Registry) -> Self {
        Self { inner, credentials, route, limits, registry, metrics: None }
    }

    /// Records every call and refusal in `metrics`.
    #[must_use]
    pub fn metered(self, metrics: Option<GateMetrics>) -> Self {
        Self { metrics, ..self }
    }
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for Gate<S> {
    const NAME: &'static str = S::NAME;
}

/// The status a refused caller gets, the same words every service uses.
pub fn auth_status(e: AuthError) -> Status {
    match e {
        AuthError::Unauthenticated(m) => Status::unauthenticated(m),
        AuthError::PermissionDenied(m) => Status::with_error_details(
            Code::PermissionDenied,
            m,
            ErrorDetails::with_error_info(CALLER_NOT_PERMITTED, "grant_ledger", std::collections::HashMap::new()),
        ),
        AuthError::Unavailable(m) => {
            tracing::warn!(error = %m, "credentials cannot be read");
            Status::unavailable("nothing was written: credentials cannot be read now; retry")
        }
        AuthError::Invalid(m) => Status::invalid_argument(m),
    }
}

/// The `ErrorInfo` reason of a call refused to its caller's credential.
pub const CALLER_NOT_PERMITTED: &str = "CALLER_NOT_PERMITTED";

impl<S, B> tower_service::Service<http::Request<B>> for Gate<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<tonic::body::Body>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn std::future::Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        // The clone that was made ready serves this call; the fresh one waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (credentials, route, limits) = (self.credentials.clone(), self.route, self.limits);
        let (registry, metrics) = (self.registry.clone(), self.metrics.clone());
        let started = metrics.as_ref().map(|m| m.grpc.start(req.uri().path()));
        // The path is the caller's text: a log line carries its closed label, or its first bytes.
        let method = started.as_ref().map_or_else(|| clipped(req.uri().path(), 64).to_owned(), |s| s.method());
        let span = tracing::info_span!(
            "rpc",
            method,
            request_id = tracing::field::Empty,
            tenant = tracing::field::Empty,
            role = tracing::field::Empty,
        );
        let in_span = span.clone();
        let call = async move {
            let headers = req.headers();
            let bytes: usize = headers.iter().map(|(k, v)| k.as_str().len() + v.len()).sum();
            if headers.len() > limits.max_headers || bytes > limits.max_header_bytes {
                let says = format!(
                    "a request carries at most {} headers of {} bytes in all",
                    limits.max_headers, limits.max_header_bytes
                );
                in_span.record("request_id", RequestId::new().0.as_str());
                return Ok(Status::resource_exhausted(says).into_http());
            }
            if let Some((roles, scopes)) = route(req.uri().path()) {
                let metadata = tonic::metadata::MetadataMap::from_headers(headers.clone());
                match credentials.authenticate(&metadata, roles, scopes, time::OffsetDateTime::now_utc()).await {
                    Ok(caller) => {
                        in_span.record("tenant", caller.tenant.as_str());
                        in_span.record("role", tracing::field::display(&caller.role));
                        // Only the gateway's id is believed: it is the one its own logs carry for
                        // the owner's request.
                        if caller.role == Role::Gateway {
                            let id = RequestId::from_headers(req.headers());
                            in_span.record("request_id", id.0.as_str());
                            req.extensions_mut().insert(id);
                        }
                        if let Some(conn) = req.extensions().get::<ConnInfo>() {
                            registry.prove(conn.id);
                        }
                        req.extensions_mut().insert(caller);
                    }
                    Err(e) => {
                        in_span.record("request_id", RequestId::new().0.as_str());
                        if let Some(m) = &metrics {
                            m.refusals.get_or_create(&[("cause", e.cause())]).inc();
                        }
                        return Ok(auth_status(e).into_http());
                    }
                }
            }
            if req.extensions().get::<RequestId>().is_none() {
                let id = RequestId::new();
                in_span.record("request_id", id.0.as_str());
                req.extensions_mut().insert(id);
            }
            let response = inner.call(req).await?;
            Ok(callers_fault(response))
        };
        Box::pin(tracing::Instrument::instrument(
            async move {
                let response = call.await?;
                Ok(match started {
                    Some(s) => s.observe(response).map(tonic::body::Body::new),
                    None => response,
                })
            },
            span,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_made_from_the_oldest_unproven_connection_only() {
        let registry = Registry::default();
        let (old, mut old_evicted) = registry.open();
        let (_, mut newer_evicted) = registry.open();
        registry.prove(old);
        assert!(registry.evict_oldest_unproven());
        assert!(old_evicted.try_recv().is_err(), "a proven connection is kept");
        assert_eq!(newer_evicted.try_recv(), Ok(()));
        assert!(!registry.evict_oldest_unproven(), "none left to close");
    }
}
