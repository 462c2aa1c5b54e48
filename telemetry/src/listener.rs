//! The metrics listener: `GET /metrics` (the registry's exposition) and `GET /healthz` (200, or
//! 503 naming what is wrong), on an address of its own that is loopback unless the operator says
//! otherwise. Nothing else is served: a metrics port must never leak a secret or a credential.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

/// Where a service serves its metrics, as `<PREFIX>_METRICS_LISTEN` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsListen {
    /// `off`: no listener.
    Off,
    At(SocketAddr),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MetricsError {
    #[error("{var}={value:?} is not an address like 127.0.0.1:9401, or off")]
    NotAnAddress { var: String, value: String },
    #[error(
        "{var}={addr} is not a loopback address: metrics are served on loopback unless \
         METRICS_ALLOW_NON_LOOPBACK=true says otherwise"
    )]
    NotLoopback { var: String, addr: SocketAddr },
    #[error("METRICS_ALLOW_NON_LOOPBACK={0:?} is neither true nor false")]
    NotABoolean(String),
}

impl MetricsListen {
    /// Reads `<prefix>_METRICS_LISTEN` (default `default`) and METRICS_ALLOW_NON_LOOPBACK.
    pub fn parse(get: impl Fn(&str) -> Option<String>, prefix: &str, default: &str) -> Result<Self, MetricsError> {
        let var = format!("{prefix}_METRICS_LISTEN");
        let value = get(&var).unwrap_or_else(|| default.to_owned());
        if value == "off" {
            return Ok(Self::Off);
        }
        let addr: SocketAddr =
            value.parse().map_err(|_| MetricsError::NotAnAddress { var: var.clone(), value: value.clone() })?;
        let allowed = match get("METRICS_ALLOW_NON_LOOPBACK").as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => return Err(MetricsError::NotABoolean(other.to_owned())),
        };
        if !addr.ip().to_canonical().is_loopback() && !allowed {
            return Err(MetricsError::NotLoopback { var, addr });
        }
        Ok(Self::At(addr))
    }
}

/// What a service says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Serving,
    /// Not serving, and why (the database is gone, a worker is stuck).
    Failing(String),
}

type Check = dyn Fn() -> Pin<Box<dyn Future<Output = Health> + Send>> + Send + Sync;

/// How a service is asked for its health: at each `GET /healthz`, and by gRPC health.
#[derive(Clone)]
pub struct HealthCheck(Arc<Check>);

impl HealthCheck {
    pub fn new<F>(check: impl Fn() -> F + Send + Sync + 'static) -> Self
    where
        F: Future<Output = Health> + Send + 'static,
    {
        Self(Arc::new(move || Box::pin(check())))
    }

    /// A check that always answers serving: for a service with nothing of its own to check.
    pub fn serving() -> Self {
        Self::new(|| async { Health::Serving })
    }

    pub async fn check(&self) -> Health {
        (self.0)().await
    }
}

impl std::fmt::Debug for HealthCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HealthCheck")
    }
}

/// Scrapers served at once: a metrics port shares the process's files with the service, so a
/// flood of connections to it must not take them all.
const MAX_CONNECTIONS: usize = 16;

/// The longest one connection may take, read and answer together.
const CONNECTION_TIME: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves `registry` and `health` on `listener` until `shutdown` resolves: one request per
/// connection, at most [`MAX_CONNECTIONS`] at once, each within [`CONNECTION_TIME`].
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    health: HealthCheck,
    shutdown: impl Future<Output = ()> + Send,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let slot = tokio::select! {
            () = &mut shutdown => return,
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of files or a reset before accept: pause, so a persistent failure does not
                // spin, then try again.
                Err(e) => {
                    tracing::warn!(error = %e, "metrics listener: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        let (registry, health) = (Arc::clone(&registry), health.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (registry, health) = (Arc::clone(&registry), health.clone());
                async move { Ok::<_, Infallible>(answer(&req, &registry, &health).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(5))
                .keep_alive(false)
                .serve_connection(io, service);
            // A scraper that hangs up or stalls mid-answer is nothing to report.
            let _ = tokio::time::timeout(CONNECTION_TIME, connection).await;
            drop(slot);
        });
    }
}

async fn answer<B>(req: &http::Request<B>, registry: &Registry, health: &HealthCheck) -> http::Response<Full<Bytes>> {
    let reply = |status: http::StatusCode, kind: &'static str, body: String| {
        let mut r = http::Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(kind));
        r.headers_mut().insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
        r
    };
    if req.method() != http::Method::GET {
        return reply(http::StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n".into());
    }
    match req.uri().path() {
        "/metrics" => reply(
            http::StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            crate::encode(registry),
        ),
        "/healthz" => match health.check().await {
            Health::Serving => reply(http::StatusCode::OK, "text/plain", "serving\n".into()),
            Health::Failing(why) => reply(http::StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("{why}\n")),
        },
        _ => reply(http::StatusCode::NOT_FOUND, "text/plain", "/metrics or /healthz\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<MetricsListen, MetricsError> {
        let vars: std::collections::HashMap<_, _> = vars.iter().copied().collect();
        MetricsListen::parse(|k| vars.get(k).map(|v| (*v).to_owned()), "X", "127.0.0.1:9401")
    }

    #[test]
    fn a_metrics_listener_is_loopback_unless_the_operator_says_otherwise() {
        let at = |s: &str| MetricsListen::At(s.parse().unwrap());
        assert_eq!(parse(&[]), Ok(at("127.0.0.1:9401")));
        assert_eq!(parse(&[("X_METRICS_LISTEN", "off")]), Ok(MetricsListen::Off));
        assert_eq!(parse(&[("X_METRICS_LISTEN", "[::1]:9")]), Ok(at("[::1]:9")));
        assert_eq!(parse(&[("X_METRICS_LISTEN", "[::ffff:127.0.0.1]:9")]), Ok(at("[::ffff:127.0.0.1]:9")));
        assert!(matches!(parse(&[("X_METRICS_LISTEN", "[::]:9401")]), Err(MetricsError::NotLoopback { .. })));
        assert!(matches!(parse(&[("X_METRICS_LISTEN", "0.0.0.0:9401")]), Err(MetricsError::NotLoopback { .. })));
        assert!(matches!(parse(&[("X_METRICS_LISTEN", "10.0.0.1:9401")]), Err(MetricsError::NotLoopback { .. })));
        let public = [("X_METRICS_LISTEN", "0.0.0.0:9401"), ("METRICS_ALLOW_NON_LOOPBACK", "true")];
        assert_eq!(parse(&public), Ok(at("0.0.0.0:9401")));
        let unsure = [("X_METRICS_LISTEN", "0.0.0.0:9401"), ("METRICS_ALLOW_NON_LOOPBACK", "yes")];
        assert!(matches!(parse(&unsure), Err(MetricsError::NotABoolean(_))));
        assert!(matches!(parse(&[("X_METRICS_LISTEN", "localhost")]), Err(MetricsError::NotAnAddress { .. })));
    }
}

#[cfg(test)]
mod served {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn ask(addr: SocketAddr, request: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn only_a_get_of_metrics_or_health_is_answered() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let failing = HealthCheck::new(|| async { Health::Failing("the database is gone".into()) });
        tokio::spawn(serve(listener, Arc::new(Registry::default()), failing, std::future::pending()));
        let status = |r: &str| r.split_whitespace().nth(1).unwrap_or_default().to_owned();
        let metrics = ask(addr, "GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert_eq!(status(&metrics), "200", "{metrics}");
        assert!(metrics.ends_with("# EOF\n"), "{metrics}");
        let health = ask(addr, "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert_eq!(status(&health), "503", "{health}");
        assert!(health.ends_with("the database is gone\n"), "{health}");
        let post = ask(addr, "POST /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n").await;
        assert_eq!(status(&post), "405", "{post}");
        let other = ask(addr, "GET /debug HTTP/1.1\r\nhost: x\r\n\r\n").await;
        assert_eq!(status(&other), "404", "{other}");
    }
}
