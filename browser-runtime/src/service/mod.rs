//! The gRPC service: authenticates each caller as a `worker` of one tenant, validates the
//! request, and runs it on the caller's own session. Sessions live with the Chromium they drive,
//! so a session belongs to one runtime process; every rule it enforces is re-read from the live
//! page, not from what the process remembers.

use std::sync::Arc;
use transport::Gate;

use credentials::Role;
use proto::runtime as pb;
use time::OffsetDateTime;
use tonic::{Request, Response, Status};

use crate::session::{Allow, Code, Redeem, Session};

mod convert;
mod redeem;

use convert::{Reader, code_pb, id, invalid, observation_pb, origin, session_status};
pub use convert::{act_input, facts_pb};
use proto::limits::MAX_STEPS;
pub use redeem::AuthorizerRedeemer;

/// `$call` on session `$s` within the configured bound; a call that does not come back in time
/// (a renderer stuck in the page's script) restarts the session's browser clean.
macro_rules! bounded {
    ($self:ident, $s:ident, $call:expr) => {
        match tokio::time::timeout($self.config.call_timeout, $call).await {
            Ok(r) => r,
            Err(_) => Err($s.hung(&$self.config.browser).await),
        }
    };
}

// After `bounded!`, which they use.
mod form;
mod owner;
mod shared;

pub use shared::BrowserRuntime;
use shared::{Entry, Shared, Slot, Timer, forget, note_open, own_run};

impl<R: Redeem + 'static> BrowserRuntime<R> {
    pub fn into_server(self) -> pb::browser_runtime_server::BrowserRuntimeServer<Self> {
        pb::browser_runtime_server::BrowserRuntimeServer::new(self)
    }
}

#[tonic::async_trait]
impl<R: Redeem + 'static> pb::browser_runtime_server::BrowserRuntime for BrowserRuntime<R> {
    async fn open_session(
        &self,
        req: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionReply>, Status> {
        let caller = self.caller(&req).await?;
        let req = req.into_inner();
        let profile = id("browser_profile_id", &req.browser_profile_id)?;
        if req.allowed_origins.is_empty() {
            return Err(invalid("allowed_origins", "names at least one origin"));
        }
        let origins =
            req.allowed_origins.iter().map(|o| origin("allowed_origins", o)).collect::<Result<Vec<_>, _>>()?;
        let start = url::Url::parse(&req.start_url).map_err(|_| invalid("start_url", "is not a URL"))?;
        if !origins.contains(&start.origin().ascii_serialization()) {
            return Err(invalid("start_url", "is on one of the allowed origins"));
        }
        if !(1..=MAX_STEPS).contains(&u64::from(req.max_steps)) {
            return Err(invalid("max_steps", &format!("is between 1 and {MAX_STEPS}")));
        }
        // An agent key opens its chat's profile at the page its owner named, on that page's
        // origin alone.
        if let Some(b) = &caller.binding {
            let named = url::Url::parse(&b.start_url).map(|u| u.origin().ascii_serialization()).ok();
            if profile != b.browser_profile_id
                || req.start_url != b.start_url
                || origins != named.into_iter().collect::<Vec<_>>()
            {
                return Err(Status::permission_denied(
                    "an agent key opens its chat's browser profile at the start page its owner named, and that origin only",
                ));
            }
        }
        let session_id = format!("bs_{}", hex::encode(rand::random::<[u8; 12]>()));
        let owner = (caller.tenant.clone(), caller.principal.clone(), profile.clone());
        let mut session = Session::new(owner, origins, req.start_url, req.max_steps);
        // The slot is taken before Chromium starts, so the pool limit holds under concurrency.
        let placeholder = (caller.tenant.clone(), caller.principal.clone(), profile.clone());
        let shared: Shared = Arc::new(tokio::sync::Mutex::new(Session::new(placeholder, Vec::new(), String::new(), 0)));
        let mut guard = Arc::clone(&shared).lock_owned().await;
        let mut slot = {
            let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if sessions.len() >= self.config.pool_size {
                return Err(Status::resource_exhausted(format!(
                    "the browser pool is full ({} sessions): close one first",
                    self.config.pool_size
                )));
            }
            // Per owner: another owner naming this profile id must not hold it against its owner.
            // (What a session may do on a profile is the authorizer's to decide: it knows owners.)
            let held = |e: &Entry| e.tenant == caller.tenant && e.principal == caller.principal && e.profile == profile;
            if sessions.values().any(held) {
                return Err(Status::already_exists("this browser profile already has an open session"));
            }
            let entry = Entry {
                tenant: caller.tenant.clone(),
                principal: caller.principal.clone(),
                profile: profile.clone(),
                opened_by: caller.binding.as_ref().map(|_| caller.credential_id),
                session: Arc::clone(&shared),
            };
            sessions.insert(session_id.clone(), entry);
            note_open(sessions.len());
            Slot { sessions: &self.sessions, id: session_id.clone(), kept: false }
        };
        if let Err(e) = session.start(&self.config.browser).await {
            session.close().await;
            return Err(session_status(e));
        }
        *guard = session;
        slot.kept = true;
        Ok(Response::new(pb::OpenSessionReply { session_id }))
    }

    async fn observe(&self, req: Request<pb::ObserveRequest>) -> Result<Response<pb::ObserveReply>, Status> {
        let caller = self.caller(&req).await?;
        let mut s = self.owned(&caller, &req.get_ref().session_id).await?;
        let run_id = req.get_ref().run_id.clone();
        own_run(&caller, &run_id)?;
        let run = if run_id.is_empty() { None } else { Some(id("run_id", &run_id)?) };
        // The record first: a record that cannot be read leaves the newest snapshot standing.
        let (tenant, principal, profile) = (s.tenant.clone(), s.principal.clone(), s.profile.clone());
        let by = Reader { keys: &self.config.tickets, tenant: &tenant, principal: &principal, profile: &profile };
        let texts = match run {
            Some(run) => self.record_texts(&by, &run)?,
            None => Vec::new(),
        };
        let timer = Timer::start("observe");
        let o = bounded!(self, s, s.observe(&self.config.browser)).map_err(session_status)?;
        drop(timer);
        Ok(Response::new(pb::ObserveReply { texts, ..observation_pb(o, &by) }))
    }

    async fn act(&self, req: Request<pb::ActRequest>) -> Result<Response<pb::ActReply>, Status> {
        let caller = self.caller(&req).await?;
        let req = req.into_inner();
        let session_id = req.session_id.clone();
        own_run(&caller, &req.run_id)?;
        let input = act_input(req)?;
        let mut s = self.owned(&caller, &session_id).await?;
        let now = OffsetDateTime::now_utc();
        let allow = Allow { tickets: &self.config.tickets, redeemer: &self.redeemer };
        let timer = Timer::start("act");
        let m = &crate::metrics::METRICS;
        let o = bounded!(self, s, s.act(input, &self.records, allow, &self.config.browser, now)).map_err(|e| {
            // Not one of the contract's answers: the act failed as a call (the browser failed,
            // timed out or was restarted, or the input was refused as malformed or out of turn).
            m.acts.get_or_create(&[("code", "SESSION_ERROR")]).inc();
            session_status(e)
        })?;
        drop(timer);
        m.acts.get_or_create(&[("code", o.code.name())]).inc();
        if let (Code::GrantNotApplicable, Some(reason)) = (o.code, o.reason) {
            m.grant_refusals.get_or_create(&[("reason", reason)]).inc();
        }
        if o.outcome_unknown {
            m.outcome_unknown.get_or_create(&[("call", "act")]).inc();
        }
        if o.code != Code::Ok {
            tracing::info!(code = o.code.name(), detail = %o.detail, session = %session_id, "act refused");
        }
        Ok(Response::new(pb::ActReply {
            ok: o.code == Code::Ok,
            code: code_pb(o.code) as i32,
            code_name: o.code.name().to_owned(),
            detail: o.detail,
            snapshot_id: o.snapshot_id,
            changed: o.changed,
            dispatched: o.dispatched,
            reason: o.reason.unwrap_or_default().to_owned(),
            outcome_unknown: o.outcome_unknown,
            recoverable: o.code != Code::Ok && o.recoverable,
            consequential: o.consequential,
        }))
    }

    async fn screenshot(&self, req: Request<pb::ScreenshotRequest>) -> Result<Response<pb::ScreenshotReply>, Status> {
        let caller = self.caller(&req).await?;
        let mut s = self.owned(&caller, &req.get_ref().session_id).await?;
        let png = bounded!(self, s, s.screenshot(&self.config.browser)).map_err(session_status)?;
        Ok(Response::new(pb::ScreenshotReply { png }))
    }

    async fn read_form(&self, req: Request<pb::ReadFormRequest>) -> Result<Response<pb::ReadFormReply>, Status> {
        self.read_form_call(req).await
    }

    async fn live_view(&self, req: Request<pb::LiveViewRequest>) -> Result<Response<pb::LiveViewReply>, Status> {
        self.live_view_call(req).await
    }

    async fn take_over(&self, req: Request<pb::TakeOverRequest>) -> Result<Response<pb::TakeOverReply>, Status> {
        self.take_over_call(req).await
    }

    async fn live_input(&self, req: Request<pb::LiveInputRequest>) -> Result<Response<pb::LiveViewReply>, Status> {
        self.live_input_call(req).await
    }

    async fn close_session(
        &self,
        req: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionReply>, Status> {
        let caller = self.caller(&req).await?;
        let session_id = req.get_ref().session_id.clone();
        let mut s = self.owned(&caller, &session_id).await?;
        s.close().await;
        s.closed = true;
        drop(s);
        forget(&self.sessions, &session_id);
        Ok(Response::new(pb::CloseSessionReply {}))
    }
}

/// Every call of the runtime is the worker's, but the owner's own (a look at a live tab, taking
/// it over, input to it), which are the gateway's for an owner who may answer cards.
pub fn route(path: &str) -> Option<(&'static [Role], &'static [credentials::Scope])> {
    let method = path.strip_prefix("/browser_runtime.v1.BrowserRuntime/")?;
    Some(if matches!(method, "LiveView" | "TakeOver" | "LiveInput") {
        (&[Role::Gateway][..], &[credentials::Scope::ApprovalResolve][..])
    } else {
        (&[Role::Worker][..], &[][..])
    })
}

/// Open files kept back from connections: each browser's driver, its DevTools sockets, records.
const OPEN_FILE_RESERVE: u64 = 512;

/// Serves `runtime` on `listener` until `shutdown`, then closes every browser it started.
pub async fn serve<R: Redeem + 'static>(
    listener: tokio::net::TcpListener,
    runtime: Arc<BrowserRuntime<R>>,
    tls: Option<Arc<transport::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    // An act's calls are each bounded by the browser-call timeout; the request bound stays well
    // above the longest act (its several calls, a restart, the settle), so it never cuts one.
    let longest_act = runtime.config.call_timeout * 8 + std::time::Duration::from_secs(60);
    let limits = transport::Limits::for_requests_within(longest_act)
        .within_open_files(transport::raise_fd_limit(), OPEN_FILE_RESERVE);
    let server = pb::browser_runtime_server::BrowserRuntimeServer::from_arc(Arc::clone(&runtime))
        .max_decoding_message_size(proto::limits::MAX_RUNTIME_REQUEST_BYTES);
    let registry = transport::Registry::default();
    let (reporter, health) = tonic_health::server::health_reporter();
    let health = health.max_decoding_message_size(transport::MAX_HEALTH_REQUEST_BYTES);
    reporter.set_serving::<pb::browser_runtime_server::BrowserRuntimeServer<BrowserRuntime<R>>>().await;
    let following = runtime
        .health_check
        .clone()
        .map(|check| transport::follow_health(reporter, "browser_runtime.v1.BrowserRuntime", check));
    // Idle sessions are closed on a tick of half the idle time (at least a second, at most a
    // minute), so none outlives its bound by more than that.
    let reaper = {
        let runtime = Arc::clone(&runtime);
        let every =
            (runtime.config.idle / 2).clamp(std::time::Duration::from_secs(1), std::time::Duration::from_secs(60));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                runtime.reap_idle().await;
            }
        })
    };
    let (credentials, metrics) = (runtime.credentials.clone(), runtime.gate_metrics.clone());
    let reflection = transport::reflection(
        &[proto::FILE_DESCRIPTOR_SET, tonic_health::pb::FILE_DESCRIPTOR_SET],
        "browser_runtime.v1.BrowserRuntime",
    );
    let open = transport::open_to_all;
    crate::metrics::METRICS.pool_size.set(i64::try_from(runtime.config.pool_size).unwrap_or(i64::MAX));
    let served = transport::server(&limits)
        .add_service(Gate::new(health, credentials.clone(), open, limits, registry.clone()).metered(metrics.clone()))
        .add_service(
            Gate::new(reflection, credentials.clone(), open, limits, registry.clone()).metered(metrics.clone()),
        )
        .add_service(Gate::new(server, credentials, route, limits, registry.clone()).metered(metrics))
        .serve_with_incoming_shutdown(transport::incoming(listener, tls, limits, registry), shutdown)
        .await;
    reaper.abort();
    if let Some(f) = following {
        f.abort();
    }
    runtime.close_all().await;
    served
}
