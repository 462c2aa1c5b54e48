//! The owner's HTTP gateway: JSON under `/v1` over the authorizer's gRPC API (called with the
//! tenant's `gateway` credential, naming the owner it authenticated) and the projections' views.
//! It keeps nothing between requests that a decision depends on: owner tokens, links and
//! sessions are rows, reads go to the authorizer or the views, so any number of replicas serve
//! any tenant. The one thing held in memory is each replica's rate-limit buckets, which only
//! ever refuse.

// A refusal is made at most once a request and answered at once: its size costs nothing.
#![allow(clippy::result_large_err)]

pub mod api;
mod call;
pub mod console;
mod docs;
mod gateway;
mod guard;
pub mod metrics;
pub mod openapi;
pub mod owners;
pub mod problem;
mod routes;
mod settings;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tower::ServiceExt;

pub use gateway::{AuthorizerLink, Gateway, RuntimeLink};
pub use guard::{MAX_STREAMS, MAX_STREAMS_PER_TOKEN, RateLimit};
pub use owners::{Kind, Owner, OwnerError, Owners};
pub use problem::Problem;
pub use settings::{
    CSRF_HEADER, GRPC_TIMEOUT, MAX_BODY_BYTES, MAX_VIEW_WAITS, REQUEST_TIMEOUT, SESSION_COOKIE, STREAM_LIFETIME,
    VIEW_WAIT,
};

/// Serves `gateway` on `listener` (TLS when `tls` is given: HTTP/1.1 over rustls) until
/// `shutdown`, then lets requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    gateway: Gateway,
    tls: Option<Arc<transport::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    use futures_util::StreamExt;
    use hyper_util::rt::{TokioIo, TokioTimer};

    let limits =
        transport::Limits::for_requests_within(REQUEST_TIMEOUT).within_open_files(transport::raise_fd_limit(), 256);
    let registry = transport::Registry::default();
    let mut incoming = transport::incoming(listener, tls, limits, registry.clone());
    let router = routes::router(gateway.clone());
    tokio::pin!(shutdown);
    let mut open = tokio::task::JoinSet::new();
    loop {
        let conn = tokio::select! {
            () = &mut shutdown => break,
            c = incoming.next() => match c {
                Some(Ok(c)) => c,
                Some(Err(_)) => continue,
                None => break,
            },
        };
        let info = tonic::transport::server::Connected::connect_info(&conn);
        let (router, registry) = (router.clone(), registry.clone());
        open.spawn(async move {
            let service = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(guard::Proof { registry: registry.clone(), id: info.id });
                router.clone().oneshot(req.map(axum::body::Body::new))
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .max_headers(limits.max_headers)
                // The read buffer bounds a request's head (32 KiB): headers past it are refused.
                .max_buf_size(limits.max_header_bytes.max(8192) * 2)
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(conn), service)
                .await;
        });
    }
    drop(incoming);
    // Requests in flight finish; streams end with the process.
    let _ = tokio::time::timeout(Duration::from_secs(5), async { while open.join_next().await.is_some() {} }).await;
    Ok(())
}
