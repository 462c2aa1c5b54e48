//! The guarded browser as a Model Context Protocol server, for agents built elsewhere (any MCP
//! client: coding assistants, desktop apps, agent frameworks). Its tools are the harness's tool
//! contract, listed from the same schemas with the evidence line as an argument; each call is
//! carried into a harness run (`relay`), so the same rules refuse it and the same authorizer
//! and runtime decide, fence and record it. The client authenticates with the key its owner
//! made for one chat on the console; the server forwards that key and is a courier, never a
//! witness (`server`). Served over Streamable HTTP (TLS, the listener rules of every service
//! here) and over stdio.
//!
//! It reaches the services only through their gRPC clients; it knows nothing of PostgreSQL,
//! WebDriver or the ledger.

pub mod metrics;
pub mod relay;
pub mod server;

use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tower::ServiceExt;

pub use server::{Config, Handler, Server, bearer, tools};

/// The largest request body: a tool call's arguments are a few hundred bytes.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The longest a request may take: a `request_approval` waits for the owner up to a card's life.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(11 * 60);

/// Serves `server` over Streamable HTTP at `/mcp` on `listener` (TLS when `tls` is given) until
/// `shutdown`. A request without a bearer key is 401 with the challenge the protocol's
/// authorization rules name; the key itself is checked by the authorizer at each call.
pub async fn serve_http(
    listener: TcpListener,
    server: Server,
    tls: Option<Arc<transport::ServerConfig>>,
    allowed_hosts: Vec<String>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    use futures_util::StreamExt;
    use hyper_util::rt::{TokioIo, TokioTimer};

    // No browser page is a client: a request carrying an Origin is refused (DNS rebinding, a
    // page posting across sites), and Host must be one this deployment names.
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY_BYTES);
    let made = server.clone();
    let service =
        StreamableHttpService::new(move || Ok(made.handler(None)), Arc::new(LocalSessionManager::default()), config);
    let limits =
        transport::Limits::for_requests_within(REQUEST_TIMEOUT).within_open_files(transport::raise_fd_limit(), 256);
    let mut incoming = transport::incoming(listener, tls, limits, transport::Registry::default());
    tokio::pin!(shutdown);
    loop {
        let conn = tokio::select! {
            () = &mut shutdown => break,
            c = incoming.next() => match c {
                Some(Ok(c)) => c,
                Some(Err(_)) => continue,
                None => break,
            },
        };
        let (service, server) = (service.clone(), server.clone());
        tokio::spawn(async move {
            let handle = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let (service, server) = (service.clone(), server.clone());
                async move {
                    let mut req = req;
                    if req.uri().path() != "/mcp" {
                        return Ok(plain(http::StatusCode::NOT_FOUND, "the MCP endpoint is /mcp"));
                    }
                    // An unknown key is refused here, before a protocol session is made for it;
                    // a key whose run ended in this process goes on, to hear that end. What is
                    // read of the key goes with the request, so its call does not read it again.
                    let known = match bearer(req.headers()).map(str::to_owned) {
                        Some(key) if server.knows(&key) => true,
                        Some(key) => match server.describe(&key).await {
                            Ok(described) => {
                                req.extensions_mut().insert(described);
                                true
                            }
                            Err(_) => false,
                        },
                        None => false,
                    };
                    if !known {
                        let mut r = plain(
                            http::StatusCode::UNAUTHORIZED,
                            "an agent key is required (Authorization: Bearer glc_...): the owner makes one on the \
                             chat's console page; this one is missing, unknown, expired or disconnected",
                        );
                        r.headers_mut().insert(
                            http::header::WWW_AUTHENTICATE,
                            http::HeaderValue::from_static("Bearer realm=\"grant-ledger\""),
                        );
                        return Ok(r);
                    }
                    service.oneshot(req).await
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(conn), handle)
                .await;
        });
    }
    Ok(())
}

type Body = http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>;

fn plain(status: http::StatusCode, text: &'static str) -> http::Response<Body> {
    use http_body_util::BodyExt;
    let mut r = http::Response::new(http_body_util::Full::new(bytes::Bytes::from_static(text.as_bytes())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// Serves `server` to one client over this process's stdin and stdout, with the `key` the client
/// gave it, until the client closes them.
pub async fn serve_stdio(server: Server, key: String) -> std::io::Result<()> {
    use rmcp::ServiceExt;
    let running = server.handler(Some(key)).serve(rmcp::transport::stdio()).await.map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
