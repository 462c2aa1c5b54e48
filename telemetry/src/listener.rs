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
        if !addr.ip().is_loopback() && !allowed {
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

/// How the listener asks the service for its health at each `GET /healthz`.
pub type HealthCheck = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Health> + Send>> + Send + Sync>;

/// Serves `registry` and `health` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    health: HealthCheck,
    shutdown: impl Future<Output = ()> + Send,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of files or a reset before accept: the next accept may succeed.
                Err(e) => {
                    tracing::warn!(error = %e, "metrics listener: accept failed");
                    continue;
                }
            },
        };
        let (registry, health) = (Arc::clone(&registry), Arc::clone(&health));
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (registry, health) = (Arc::clone(&registry), Arc::clone(&health));
                async move { Ok::<_, Infallible>(answer(&req, &registry, &health).await) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            // A scraper that hangs up mid-answer is nothing to report.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(5))
                .serve_connection(io, service)
                .await;
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
        "/healthz" => match health().await {
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
        assert!(matches!(parse(&[("X_METRICS_LISTEN", "0.0.0.0:9401")]), Err(MetricsError::NotLoopback { .. })));
        assert!(matches!(parse(&[("X_METRICS_LISTEN", "10.0.0.1:9401")]), Err(MetricsError::NotLoopback { .. })));
        let public = [("X_METRICS_LISTEN", "0.0.0.0:9401"), ("METRICS_ALLOW_NON_LOOPBACK", "true")];
        assert_eq!(parse(&public), Ok(at("0.0.0.0:9401")));
        let unsure = [("X_METRICS_LISTEN", "0.0.0.0:9401"), ("METRICS_ALLOW_NON_LOOPBACK", "yes")];
        assert!(matches!(parse(&unsure), Err(MetricsError::NotABoolean(_))));
        assert!(matches!(parse(&[("X_METRICS_LISTEN", "localhost")]), Err(MetricsError::NotAnAddress { .. })));
    }
}
