//! What every request of a replica shares: the owner store, the views' pool, the authorizer and
//! runtime clients with each tenant's credential, the rate limit and the stream cap.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use credentials::Scope;
use ledger::EventStore;
use proto::v1 as pb;
use tokio::sync::watch;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::guard::{self, RateLimit, Streams};
use crate::owners::{self, Kind, Owner, OwnerError, Owners};
use crate::problem::Problem;
use crate::settings::{GRPC_TIMEOUT, MAX_VIEW_WAITS, SESSION_COOKIE};

/// How the gateway reaches the authorizer: its URL, the CA of its certificate, and the
/// `gateway` credential of each tenant it serves.
#[derive(Debug, Clone)]
pub struct AuthorizerLink {
    pub url: String,
    pub ca_pem: Option<Vec<u8>>,
    /// tenant → `glc_` token of a `gateway` credential of that tenant.
    pub credentials: HashMap<String, String>,
}

impl AuthorizerLink {
    /// Reads `<tenant> <token>` lines (blank lines and `#` comments skipped).
    pub fn parse_credentials(text: &str) -> Result<HashMap<String, String>, String> {
        let mut out = HashMap::new();
        for (n, line) in text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (tenant, token) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| format!("line {n}: expected `<tenant> <glc_ token>`"))?;
            ledger::check_entity_id("tenant", tenant).map_err(|e| format!("line {n}: {e}"))?;
            let token = token.trim();
            if !token.starts_with("glc_") {
                return Err(format!("line {n}: the token is a glc_ credential of the gateway role"));
            }
            if out.insert(tenant.to_owned(), token.to_owned()).is_some() {
                return Err(format!("line {n}: tenant {tenant} is named twice"));
            }
        }
        Ok(out)
    }
}

/// How the gateway reaches the browser runtime, for the owner's look at a live tab: its URL and
/// the CA of its certificate (the runtime takes the same `gateway` credentials).
#[derive(Debug, Clone)]
pub struct RuntimeLink {
    pub url: String,
    pub ca_pem: Option<Vec<u8>>,
}

/// A lazily connected gRPC channel to `url`, over TLS with `ca_pem` for an `https://` URL.
fn channel(url: &str, ca_pem: Option<&[u8]>, what: &str) -> Result<Channel, String> {
    let mut endpoint = Endpoint::from_shared(url.to_owned()).map_err(|e| format!("the {what} URL: {e}"))?;
    if url.starts_with("https://") {
        let mut config = ClientTlsConfig::new().with_enabled_roots();
        if let Some(ca) = ca_pem {
            config = config.ca_certificate(tonic::transport::Certificate::from_pem(ca));
        }
        endpoint = endpoint.tls_config(config).map_err(|e| format!("the {what}'s CA: {e}"))?;
    }
    Ok(endpoint.connect_timeout(Duration::from_secs(2)).timeout(GRPC_TIMEOUT).connect_lazy())
}

/// Everything a request needs, shared by every request of a replica.
#[derive(Debug, Clone)]
pub struct Gateway(pub(crate) Arc<Inner>);

#[derive(Debug)]
pub(crate) struct Inner {
    /// On a small pool of its own with a bounded wait: made-up tokens cannot take the
    /// connections the views are read with, and a slow view cannot lock owners out.
    pub(crate) owners: Owners,
    pub(crate) views: deadpool_postgres::Pool,
    /// Reads waiting for a view to reach a position, at most [`MAX_VIEW_WAITS`] at once.
    pub(crate) view_waits: Arc<tokio::sync::Semaphore>,
    pub(crate) streams: Streams,
    pub(crate) client: pb::authorizer_client::AuthorizerClient<Channel>,
    /// The browser runtime, when this gateway shows live tabs.
    pub(crate) runtime: Option<proto::runtime::browser_runtime_client::BrowserRuntimeClient<Channel>>,
    pub(crate) bearers: HashMap<String, MetadataValue<Ascii>>,
    pub(crate) limit: RateLimit,
    pub(crate) wake: watch::Receiver<u64>,
    /// Keeps the ledger's LISTEN connection (the wake-ups) alive, and reads receipts.
    pub(crate) store: ledger::PgStore,
    /// Set when the listener speaks TLS: responses then carry HSTS.
    pub(crate) tls: bool,
}

impl Gateway {
    /// A gateway over the database at `pg_config` and the authorizer at `link`, refusing past
    /// `limit` requests per token per minute on this replica.
    pub fn new(
        pg_config: tokio_postgres::Config,
        link: &AuthorizerLink,
        limit: RateLimit,
        tls: bool,
    ) -> Result<Self, String> {
        let authorizer = channel(&link.url, link.ca_pem.as_deref(), "authorizer")?;
        let mut bearers = HashMap::new();
        for (tenant, token) in &link.credentials {
            let value = format!("Bearer {token}").parse().map_err(|_| format!("tenant {tenant}'s token"))?;
            bearers.insert(tenant.clone(), value);
        }
        let wait = Duration::from_secs(2);
        let owners = ledger::postgres::bounded_pool(pg_config.clone(), 4, wait)?;
        let views = ledger::postgres::bounded_pool(pg_config.clone(), 8, wait)?;
        let store = ledger::PgStore::with_listener(views.clone(), pg_config);
        Ok(Self(Arc::new(Inner {
            owners: Owners::new(owners),
            views,
            view_waits: Arc::new(tokio::sync::Semaphore::new(MAX_VIEW_WAITS)),
            streams: Streams::default(),
            client: pb::authorizer_client::AuthorizerClient::new(authorizer),
            runtime: None,
            bearers,
            limit,
            wake: store.wake_ups(),
            store,
            tls,
        })))
    }

    pub fn owners(&self) -> &Owners {
        &self.0.owners
    }

    /// This gateway also shows the owner the live tab of a pending card's browser session, through
    /// the runtime at `link`. Called once, right after [`Gateway::new`].
    pub fn with_runtime(mut self, link: &RuntimeLink) -> Result<Self, String> {
        let runtime = channel(&link.url, link.ca_pem.as_deref(), "runtime")?;
        let inner = Arc::get_mut(&mut self.0).ok_or("the runtime is set before the gateway is shared")?;
        inner.runtime = Some(proto::runtime::browser_runtime_client::BrowserRuntimeClient::new(runtime));
        Ok(self)
    }

    pub(crate) fn runtime(&self) -> Option<proto::runtime::browser_runtime_client::BrowserRuntimeClient<Channel>> {
        self.0.runtime.clone()
    }

    /// A gRPC request to the authorizer for `owner`, with the tenant's gateway credential.
    pub(crate) fn grpc<T>(&self, owner: &Owner, request_id: &str, message: T) -> Result<tonic::Request<T>, Problem> {
        let bearer = self.0.bearers.get(&owner.tenant).ok_or_else(|| {
            tracing::error!(tenant = %owner.tenant, "GATEWAY_CREDENTIALS_FILE names no credential for this tenant");
            Problem::internal("this gateway is not configured for the owner's tenant")
        })?;
        let mut req = tonic::Request::new(message);
        let md = req.metadata_mut();
        md.insert("authorization", bearer.clone());
        let principal =
            owner.principal.parse().map_err(|_| Problem::internal("the principal is not a header value"))?;
        md.insert("x-principal-id", principal);
        let scopes =
            owner.scope_header().parse().map_err(|_| Problem::internal("the scopes are not a header value"))?;
        md.insert("x-owner-scopes", scopes);
        if let Ok(id) = request_id.parse() {
            md.insert("x-request-id", id);
        }
        Ok(req)
    }

    pub(crate) fn authorizer(&self) -> pb::authorizer_client::AuthorizerClient<Channel> {
        self.0.client.clone()
    }

    /// The owner a request's credential names, with `need`'s scopes: a bearer API token, or a
    /// browser session's cookie (whose writes must carry the CSRF header). Counts the request
    /// against the token's rate limit.
    pub(crate) async fn owner(
        &self,
        headers: &HeaderMap,
        write: bool,
        need: &[Scope],
    ) -> Result<(Owner, String), Problem> {
        let (secret, kind) = credential(headers)?;
        let owner = match self.0.owners.find(&secret).await {
            Ok(Some(o)) if o.kind == kind => o,
            Ok(_) => return Err(Problem::unauthenticated("the credential is unknown, expired or revoked")),
            Err(OwnerError::Unavailable(e)) => {
                tracing::warn!(error = %e, "owner tokens unreadable");
                return Err(Problem::unavailable("the database cannot be reached now"));
            }
            Err(OwnerError::Invalid(e)) => return Err(Problem::internal(e)),
        };
        if write && kind == Kind::Session {
            guard::check_csrf(headers, &secret)?;
        }
        self.0.limit.admit(owner.token_id)?;
        if let Some(missing) = need.iter().find(|s| !owner.has(**s)) {
            return Err(Problem::forbidden("scope_missing", format!("this call needs the scope {}", missing.code())));
        }
        Ok((owner, secret))
    }
}

/// The owner secret a request presents, and its kind. A bearer header wins over a cookie, and
/// a bearer that is not an owner token is refused rather than ignored.
fn credential(headers: &HeaderMap) -> Result<(String, Kind), Problem> {
    if let Some(value) = headers.get(axum::http::header::AUTHORIZATION) {
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .filter(|t| owners::well_formed(t, Kind::Token))
            .ok_or(Problem::unauthenticated("the Authorization header is not `Bearer glo_…`"))?;
        return Ok((token.to_owned(), Kind::Token));
    }
    match guard::cookie(headers, SESSION_COOKIE) {
        Some(s) if owners::well_formed(&s, Kind::Session) => Ok((s, Kind::Session)),
        Some(_) => Err(Problem::unauthenticated("the session cookie is malformed; sign in again")),
        None => Err(Problem::unauthenticated("sign in with a link, or send `Authorization: Bearer glo_…`")),
    }
}
