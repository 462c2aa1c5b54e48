//! `Gate`: in front of a service, the header bounds, the caller's authentication before its body
//! is read, the call's span and metrics; and what each service serves beside its own (health that
//! follows a check, reflection, the request id).

use super::{
    AuthError, Code, ConnInfo, Context, Credentials, Duration, ErrorDetails, Limits, Pin, Poll, Registry, Role, Scope,
    Status, StatusExt,
};

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
            let mut remembered = None;
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
                        if caller.unconfirmed.is_none()
                            && let Some(conn) = req.extensions().get::<ConnInfo>()
                        {
                            registry.prove(conn.id);
                        }
                        remembered = caller.unconfirmed.is_some().then(|| caller.clone());
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
            let conn = req.extensions().get::<ConnInfo>().map(|c| c.id);
            let response = inner.call(req).await?;
            // A caller let in from memory that nothing in the call confirmed (its body did not
            // decode, say) is confirmed now: a revoked credential hears "unknown", and only a
            // confirmed one proves its connection.
            if let Some(mut caller) = remembered {
                if let Err(e) = credentials.confirm(&mut caller).await {
                    return Ok(auth_status(e).into_http());
                }
                if let Some(id) = conn {
                    registry.prove(id);
                }
            }
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
