//! What every call of the service shares: the service itself, its caller check and its write,
//! and the reads several calls make. A leaf: the per-call files use it, it uses none of them.

use std::sync::Arc;

use proto::ticket::Keyring;
use proto::v1 as pb;

use crate::auth::Rpc;
use credentials::{Caller, Credentials};
use time::OffsetDateTime;
use tonic::{Code, Request, Response, Status};

use crate::authority::Authority;
use crate::domain;
use crate::domain::{Command, Grant, World};
use crate::store::Backend;
use crate::store::Need;

use super::CALLER_NOT_PERMITTED;
use super::convert::position;
use super::facts;
use super::status::{status, with_reason};

/// A grant is the principal's to see while its chat exists: deleting the session takes its grants
/// off every list and get (their end, `revoked`, stays in the log).
pub(super) fn visible_to(w: &World, g: &Grant, principal: &str) -> bool {
    g.created.principal_id == principal && w.sessions.get(&g.created.session_id).is_some_and(|s| !s.deleted)
}

/// The gRPC face of the authority, for every tenant: each call acts in its credential's tenant.
#[derive(Debug)]
pub struct AuthorizerService<B> {
    pub(super) authority: Arc<Authority<B>>,
    pub(super) credentials: Credentials,
    /// Seals every allow's dispatch ticket, and opens the runtime's sealed facts.
    pub(super) tickets: Arc<Keyring>,
    pub(super) refusals: Arc<facts::Refusals>,
    /// What the gate records of every call, when the operator serves metrics.
    pub(super) gate_metrics: Option<transport::GateMetrics>,
    /// What gRPC health follows, when set (otherwise SERVING while the server runs).
    pub(super) health_check: Option<telemetry::HealthCheck>,
    /// Only the `testing` feature sets it: the domain's own tests speak facts in the clear.
    pub(super) accept_unsealed: bool,
    /// The owners' answers this replica's callers wait for.
    pub(super) waits: Arc<super::waits::Waits>,
    /// How long a worker holds a task it took or renewed.
    pub(super) task_lease: time::Duration,
}

impl<B> Clone for AuthorizerService<B> {
    fn clone(&self) -> Self {
        Self {
            authority: Arc::clone(&self.authority),
            credentials: self.credentials.clone(),
            tickets: Arc::clone(&self.tickets),
            refusals: Arc::clone(&self.refusals),
            gate_metrics: self.gate_metrics.clone(),
            health_check: self.health_check.clone(),
            accept_unsealed: self.accept_unsealed,
            waits: Arc::clone(&self.waits),
            task_lease: self.task_lease,
        }
    }
}

impl<B: Backend + 'static> AuthorizerService<B> {
    pub fn new(authority: Arc<Authority<B>>, credentials: Credentials, tickets: Arc<Keyring>) -> Self {
        let refusals = Arc::new(facts::Refusals::new(authority.metrics().clone()));
        Self {
            authority,
            credentials,
            tickets,
            refusals,
            gate_metrics: None,
            health_check: None,
            accept_unsealed: false,
            waits: Arc::default(),
            task_lease: grant_domain::limits::TASK_LEASE,
        }
    }

    /// Workers hold a task `lease` past each claim or renewal ([`grant_domain::limits::TASK_LEASE`]
    /// unless set): tests shorten it to see a dead worker's task taken over.
    #[must_use]
    pub fn with_task_lease(self, lease: std::time::Duration) -> Self {
        let lease = time::Duration::try_from(lease).unwrap_or(grant_domain::limits::TASK_LEASE);
        Self { task_lease: lease, ..self }
    }

    /// Records every call the server's gate sees (method, status, time; refused callers) in
    /// `metrics`.
    #[must_use]
    pub fn with_gate_metrics(self, metrics: transport::GateMetrics) -> Self {
        Self { gate_metrics: Some(metrics), ..self }
    }

    /// gRPC health follows `check` (the database answering), as `/healthz` does.
    #[must_use]
    pub fn with_health_check(self, check: telemetry::HealthCheck) -> Self {
        Self { health_check: Some(check), ..self }
    }

    /// Decides on facts sent in the clear too: for tests of the decisions, which have no runtime.
    #[cfg(feature = "testing")]
    #[must_use]
    pub fn accepting_unsealed_facts(self) -> Self {
        Self { accept_unsealed: true, ..self }
    }

    /// `Authorize` calls whose facts were refused (unsealed, forged, expired, another owner's or
    /// snapshot's) since this service started.
    /// The authority served, for tests that read what it recorded.
    #[cfg(feature = "testing")]
    pub fn authority(&self) -> &Arc<Authority<B>> {
        &self.authority
    }

    pub fn facts_refused(&self) -> u64 {
        self.refusals.count()
    }

    /// The authenticated caller of `rpc`, whose role must be the one the call belongs to, and the
    /// authority of its credential's tenant. A credential recognised from memory is confirmed live
    /// here, except for `Authorize` on a backend whose read confirms it (see `authorize_call`).
    pub(super) async fn caller<T>(&self, req: &Request<T>, rpc: Rpc) -> Result<(Caller, Authority<B>), Status> {
        // Over a socket the gate authenticated the caller from the headers, before the body was
        // read; a service called without it (in-process) authenticates here.
        let gated = req.extensions().get::<Caller>().filter(|c| rpc.roles().contains(&c.role)).cloned();
        let mut caller = match gated {
            Some(c) => c,
            None => self
                .credentials
                .authenticate(req.metadata(), rpc.roles(), rpc.scopes(), OffsetDateTime::now_utc())
                .await
                .map_err(transport::auth_status)?,
        };
        if !(rpc == Rpc::Authorize && self.authority.backend().confirms_credentials()) {
            self.credentials.confirm(&mut caller).await.map_err(transport::auth_status)?;
        }
        tracing::debug!(role = %caller.role, principal = %caller.principal, tenant = %caller.tenant, "authenticated");
        let tenant = domain::tenant_id(&caller.tenant).map_err(|e| {
            with_reason(Code::PermissionDenied, CALLER_NOT_PERMITTED, format!("the credential's tenant: {e}"))
        })?;
        let authority = self.authority.for_tenant(tenant);
        Ok((caller, authority))
    }

    /// The caller's credential read again from the store: for a call that waited, before it
    /// answers (a revocation or expiry during the wait refuses the answer). It must name the same
    /// tenant and principal as when the call began.
    pub(super) async fn still_live(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        was: &Caller,
        rpc: Rpc,
    ) -> Result<(), Status> {
        let now = OffsetDateTime::now_utc();
        // Recognised from memory, it is read by `confirm`; otherwise `authenticate` read it.
        let mut again = self
            .credentials
            .authenticate(metadata, rpc.roles(), rpc.scopes(), now)
            .await
            .map_err(transport::auth_status)?;
        self.credentials.confirm(&mut again).await.map_err(transport::auth_status)?;
        if (again.tenant.as_str(), again.principal.as_str()) != (was.tenant.as_str(), was.principal.as_str()) {
            return Err(transport::auth_status(Credentials::refused()));
        }
        Ok(())
    }

    pub(super) async fn write(
        &self,
        authority: &Authority<B>,
        command: Command,
        principal: &str,
    ) -> Result<Response<pb::WriteReply>, Status> {
        let (_, at) = authority.execute_at(command, principal).await.map_err(status)?;
        Ok(Response::new(pb::WriteReply { position: at.and_then(position) }))
    }
}

/// The longest an AwaitApproval waits for the owner.
pub const MAX_APPROVAL_WAIT_MS: u32 = 20_000;

/// Reads come from the inline tables every write updated before it returned, so a position a
/// write answered is always seen; the field stays for clients that send it.
pub(super) fn seen(_min: Option<pb::Position>) {}

/// The task-grant calls exist only with the tenant's recorded flag on: with it off they answer
/// as a route that is not mounted, to any authenticated caller of the right role.
pub(super) async fn grant_routes_mounted<B: Backend>(authority: &Authority<B>) -> Result<(), Status> {
    if authority.read(Need::Deployment { grants: false }, |w| w.settings.enabled).await.map_err(status)? {
        Ok(())
    } else {
        Err(Status::unimplemented("task grants are not enabled on this deployment"))
    }
}

/// A bound credential (an agent client the owner connected to one chat) names that chat only;
/// any other is answered as a chat that is not there.
pub(super) fn bound(caller: &Caller, session_id: &str) -> Result<(), Status> {
    if caller.may_name(session_id) { Ok(()) } else { Err(Status::not_found("session not found")) }
}

/// A bound credential drives its one run (`mcp-<credential id>`): any other is refused.
pub(super) fn bound_run(caller: &Caller, run_id: &str) -> Result<(), Status> {
    if caller.may_run(run_id) {
        Ok(())
    } else {
        Err(super::status::invalid("run_id", "is this agent key's own run: mcp-<its agent id>"))
    }
}

/// The session, if it is this principal's and not deleted.
pub(super) async fn own_session<B: Backend>(
    authority: &Authority<B>,
    session_id: &str,
    principal: &str,
) -> Result<(), Status> {
    let owns = authority
        .read(Need::Session(session_id), |w| w.session_of(session_id, principal).is_ok())
        .await
        .map_err(status)?;
    if owns { Ok(()) } else { Err(Status::not_found("session not found")) }
}
