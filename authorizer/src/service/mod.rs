//! The tonic service over the authority: prost types are converted here and go no further in.
//!
//! Every call is authenticated (`auth`): the caller's credential fixes its tenant and role, and
//! the principal is the credential's own, or for the gateway the owner it names. Another
//! principal's session, approval or grant is NOT_FOUND.
//! Bad requests are INVALID_ARGUMENT with field violations and change nothing.

mod agents;
mod approvals;
mod authorize;
mod check_stop;
mod convert;
mod facts;
mod redeem;
mod shared;
mod status;
mod tasks;
mod ticket;
mod waits;

use std::future::Future;
use std::sync::Arc;

use grant_domain::catalogue::{
    Author, Event, SessionCreated, SessionMessageRecorded, SessionToolCalled, SignInPhase, Surface,
};
use proto::v1 as pb;

use crate::auth::Rpc;
use credentials::Role;
use time::OffsetDateTime;
use tokio::net::TcpListener;
use tonic::{Code, Request, Response, Status};
use transport::Gate;

use crate::domain;
use crate::domain::{ApprovalState, Command};
use crate::store::Backend;
use crate::store::Need;

use convert::{approval, grant, id, opt, position, uuid};
pub use facts::{FACTS_INVALID, FACTS_LIFETIME, FACTS_NOT_SEALED};
pub use shared::{AuthorizerService, MAX_APPROVAL_WAIT_MS};
use shared::{bound, grant_routes_mounted, own_session, seen, visible_to};
pub use status::CONCURRENT_CHANGE;
use status::{invalid, status, with_reason};
pub use ticket::TICKET_LIFETIME;

/// The `ErrorInfo` reason of a call refused to its caller's credential (role, tenant or scope),
/// beside the domain's own refusals such as `APPROVAL_TOKEN_INVALID`: the gate's, spelt once.
pub use transport::CALLER_NOT_PERMITTED;

impl<B: Backend + 'static> AuthorizerService<B> {
    pub fn into_server(self) -> pb::authorizer_server::AuthorizerServer<Self> {
        pb::authorizer_server::AuthorizerServer::new(self)
    }
}

#[tonic::async_trait]
impl<B: Backend + 'static> pb::authorizer_server::Authorizer for AuthorizerService<B> {
    async fn create_session(&self, req: Request<pb::CreateSessionRequest>) -> Result<Response<pb::WriteReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::CreateSession).await?;
        let r = req.into_inner();
        let session_id = id("session_id", &r.session_id)?;
        bound(&caller, &session_id)?;
        let principal = caller.principal;
        let surface = match pb::Surface::try_from(r.surface) {
            Ok(pb::Surface::Interactive) => Surface::Interactive,
            Ok(pb::Surface::Inbound) => Surface::Inbound,
            Ok(pb::Surface::Device) => Surface::Device,
            _ => return Err(invalid("surface", "is required")),
        };
        let profile = opt(&r.browser_profile_id).map(|p| id("browser_profile_id", &p)).transpose()?;
        let created = SessionCreated {
            session_id,
            tenant_id: authority.tenant().to_string(),
            principal_id: principal.clone(),
            browser_profile_id: profile,
            schedule_id: opt(&r.schedule_id).map(|s| id("schedule_id", &s)).transpose()?,
            surface,
        };
        self.write(&authority, Command::CreateSession(created), &principal).await
    }

    async fn record_message(&self, req: Request<pb::RecordMessageRequest>) -> Result<Response<pb::WriteReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::RecordMessage).await?;
        let r = req.into_inner();
        // The owner's words come only through the gateway that authenticated the owner; the worker
        // records everyone else's. A worker cannot start a fresh turn by claiming the owner spoke.
        if caller.binding.is_some() {
            let says = "an agent key records only its own run";
            return Err(with_reason(Code::PermissionDenied, CALLER_NOT_PERMITTED, says.into()));
        }
        if r.from_owner != (caller.role == Role::Gateway) {
            let says = "the owner's messages are recorded by the gateway, others' by the worker";
            return Err(with_reason(Code::PermissionDenied, CALLER_NOT_PERMITTED, says.into()));
        }
        let session_id = id("session_id", &r.session_id)?;
        bound(&caller, &session_id)?;
        let principal = caller.principal;
        let message_id = id("message_id", &r.message_id)?;
        own_session(&authority, &session_id, &principal).await?;
        let author = if r.from_owner { Author::Owner } else { Author::Other };
        self.write(
            &authority,
            Command::RecordMessage(SessionMessageRecorded { session_id, message_id, author }),
            &principal,
        )
        .await
    }

    async fn record_run(&self, req: Request<pb::RecordRunRequest>) -> Result<Response<pb::WriteReply>, Status> {
        use domain::RunEvent;
        use grant_domain::catalogue::{RunCompleted, RunEscalated, RunRefused, RunStarted, RunStepped};
        let (caller, authority) = self.caller(&req, Rpc::RecordRun).await?;
        let principal = caller.principal.clone();
        let r = req.into_inner();
        let session_id = id("session_id", &r.session_id)?;
        let run_id = id("run_id", &r.run_id)?;
        shared::bound_run(&caller, &run_id)?;
        let word = r.detail.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if r.detail.is_empty() || r.detail.len() > 64 || !word {
            return Err(invalid("detail", "is 1 to 64 letters, digits and _ . : -"));
        }
        let detail = r.detail;
        let kind = pb::RunEventKind::try_from(r.kind);
        // Only an escalation and a step carry an account: one given elsewhere is refused, not
        // dropped unseen.
        if r.account.is_some() && !matches!(kind, Ok(pb::RunEventKind::Escalated | pb::RunEventKind::Step)) {
            return Err(invalid("account", "is given only with ESCALATED or STEP"));
        }
        let account = account(r.account.unwrap_or_default())?;
        let event = match kind {
            Ok(pb::RunEventKind::Started) => {
                RunEvent::Started(RunStarted { session_id, run_id, agent_version: detail })
            }
            Ok(pb::RunEventKind::Refused) => RunEvent::Refused(RunRefused { session_id, run_id, rule: detail }),
            Ok(pb::RunEventKind::Escalated) => RunEvent::Escalated(RunEscalated {
                session_id,
                run_id,
                reason: detail,
                refs: account.refs,
                detail: account.text,
                snapshot_id: account.snapshot_id,
                screenshots: account.screenshots,
            }),
            Ok(pb::RunEventKind::Step) => RunEvent::Stepped(RunStepped {
                session_id,
                run_id,
                step: account.step,
                tool: detail,
                evidence: account.text,
                result: account.result,
                snapshot_id: account.snapshot_id,
                elapsed_ms: account.elapsed_ms,
                model_ms: account.model_ms,
            }),
            Ok(pb::RunEventKind::Completed) => {
                RunEvent::Completed(RunCompleted { session_id, run_id, reference: detail })
            }
            _ => return Err(invalid("kind", "is required")),
        };
        bound(&caller, event.session_id())?;
        own_session(&authority, event.session_id(), &principal).await?;
        let ends = matches!(event, RunEvent::Escalated(_) | RunEvent::Completed(_));
        let written = self.write(&authority, Command::RecordRun(event), &principal).await?;
        // One agent key drives one run: its run's end spends it, in every process.
        if ends
            && caller.binding.is_some()
            && let Err(e) = self.credentials.revoke(authority.tenant().as_str(), caller.credential_id).await
        {
            tracing::warn!(error = %e, "an ended agent key was not revoked");
        }
        Ok(written)
    }

    async fn record_tool_call(
        &self,
        req: Request<pb::RecordToolCallRequest>,
    ) -> Result<Response<pb::WriteReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::RecordToolCall).await?;
        if caller.binding.is_some() {
            let says = "an agent key records only its own run";
            return Err(with_reason(Code::PermissionDenied, CALLER_NOT_PERMITTED, says.into()));
        }
        let r = req.into_inner();
        let session_id = id("session_id", &r.session_id)?;
        bound(&caller, &session_id)?;
        let principal = caller.principal;
        let tool_call_id = id("tool_call_id", &r.tool_call_id)?;
        if r.tool.is_empty() || r.tool.len() > 200 || r.tool.chars().any(char::is_control) {
            return Err(invalid("tool", "is 1 to 200 bytes with no control characters"));
        }
        own_session(&authority, &session_id, &principal).await?;
        let call = SessionToolCalled { session_id, tool_call_id, tool: r.tool };
        self.write(&authority, Command::RecordToolCall(call), &principal).await
    }

    async fn delete_session(&self, req: Request<pb::DeleteSessionRequest>) -> Result<Response<pb::WriteReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::DeleteSession).await?;
        let principal = caller.principal.clone();
        let session_id = id("session_id", &req.into_inner().session_id)?;
        let delete = Command::DeleteSession { session_id: session_id.clone(), principal_id: principal.clone() };
        let written = self.write(&authority, delete, &principal).await?;
        // A deleted chat's agent keys open nothing more.
        self.end_agents_of_chat(&caller, authority.tenant().as_str(), &session_id).await;
        check_stop::settled(Ok(written)).await
    }

    #[tracing::instrument(skip_all, fields(session_id))]
    async fn stop_session(&self, req: Request<pb::StopSessionRequest>) -> Result<Response<pb::WriteReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::StopSession).await?;
        let principal = caller.principal;
        let session_id = id("session_id", &req.into_inner().session_id)?;
        tracing::Span::current().record("session_id", session_id.as_str());
        let stop = Command::StopSession { session_id, principal_id: principal.clone(), now: OffsetDateTime::now_utc() };
        check_stop::settled(self.write(&authority, stop, &principal).await).await
    }

    async fn stop_everything(
        &self,
        req: Request<pb::StopEverythingRequest>,
    ) -> Result<Response<pb::StopEverythingReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::StopEverything).await?;
        let principal = caller.principal;
        let stop = Command::StopEverything { principal_id: principal.clone(), now: OffsetDateTime::now_utc() };
        let (events, at) = authority.execute_at(stop, &principal).await.map_err(status)?;
        let stopped = events.iter().filter(|e| matches!(e, Event::SessionStopped(_))).count();
        let reply = Response::new(pb::StopEverythingReply {
            position: at.and_then(position),
            stopped: u32::try_from(stopped).unwrap_or(u32::MAX),
            // Stopped sessions are not read again, so a call that stopped none is the last.
            more: stopped > 0,
        });
        // Only the last call waits out the dispatch window: it comes after every earlier call's
        // stops were recorded, so one wait covers them all.
        if stopped > 0 { Ok(reply) } else { check_stop::settled(Ok(reply)).await }
    }

    async fn record_profile_event(
        &self,
        req: Request<pb::ProfileEventRequest>,
    ) -> Result<Response<pb::WriteReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::RecordProfileEvent).await?;
        let principal = caller.principal;
        let r = req.into_inner();
        let profile_id = id("profile_id", &r.profile_id)?;
        // Optional but for a creation: a profiles service older than owners still ends grants.
        let owner_principal_id = opt(&r.owner_principal_id).map(|o| id("owner_principal_id", &o)).transpose()?;
        let command = match pb::ProfileEvent::try_from(r.event) {
            Ok(pb::ProfileEvent::SignInBegan) => {
                Command::AdvanceProfile { profile_id, owner_principal_id, phase: SignInPhase::Began }
            }
            Ok(pb::ProfileEvent::SignInReady) => {
                Command::AdvanceProfile { profile_id, owner_principal_id, phase: SignInPhase::Ready }
            }
            Ok(pb::ProfileEvent::Created) => match owner_principal_id {
                Some(owner_principal_id) => Command::ClaimProfile { profile_id, owner_principal_id },
                None => return Err(invalid("owner_principal_id", "is required to record a profile's creation")),
            },
            Ok(pb::ProfileEvent::Revoked) => Command::RevokeProfile { profile_id, owner_principal_id },
            Ok(pb::ProfileEvent::Deleted) => Command::DeleteProfile { profile_id, owner_principal_id },
            _ => return Err(invalid("event", "is required")),
        };
        self.write(&authority, command, &principal).await
    }

    #[tracing::instrument(skip_all, fields(session_id, decision))]
    async fn authorize(&self, req: Request<pb::AuthorizeRequest>) -> Result<Response<pb::AuthorizeReply>, Status> {
        self.authorize_call(req).await
    }

    #[tracing::instrument(skip_all, fields(approval_id))]
    async fn resolve_approval(
        &self,
        req: Request<pb::ResolveApprovalRequest>,
    ) -> Result<Response<pb::ResolveApprovalReply>, Status> {
        self.resolve_call(req).await
    }

    async fn await_approval(
        &self,
        req: Request<pb::AwaitApprovalRequest>,
    ) -> Result<Response<pb::AwaitApprovalReply>, Status> {
        self.await_call(req).await
    }

    async fn get_approval(&self, req: Request<pb::GetApprovalRequest>) -> Result<Response<pb::Approval>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::GetApproval).await?;
        let principal = caller.principal;
        let r = req.into_inner();
        let approval_id = uuid("approval_id", &r.approval_id)?;
        seen(r.min_position);
        let found = authority
            .read(Need::Approval(approval_id), |w| {
                let a = w.approvals.get(&approval_id)?;
                let session = &w.sessions.get(&a.requested.session_id)?.created;
                let profile = session.browser_profile_id.clone().unwrap_or_default();
                let binding = a.requested.binding.as_ref();
                (session.principal_id == principal).then(|| pb::Approval {
                    browser_profile_id: profile,
                    snapshot_id: binding.map(|b| b.snapshot_id.clone()).unwrap_or_default(),
                    node_ref: binding.map(|b| b.node_ref.clone()).unwrap_or_default(),
                    ..approval(a)
                })
            })
            .await
            .map_err(status)?;
        found.map(Response::new).ok_or_else(|| Status::not_found("approval not found"))
    }

    async fn list_approvals(
        &self,
        req: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::ListApprovals).await?;
        let principal = caller.principal;
        let r = req.into_inner();
        let session_id = id("session_id", &r.session_id)?;
        seen(r.min_position);
        own_session(&authority, &session_id, &principal).await?;
        let mut approvals = authority
            .read(Need::SessionApprovals(&session_id), |w| {
                w.approvals
                    .values()
                    .filter(|a| {
                        a.requested.session_id == session_id && (!r.pending_only || a.state == ApprovalState::Pending)
                    })
                    .map(|a| (a.requested.expires_at, approval(a)))
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(status)?;
        approvals.sort_by_key(|(t, a)| (*t, a.approval_id.clone()));
        Ok(Response::new(pb::ListApprovalsReply { approvals: approvals.into_iter().map(|(_, a)| a).collect() }))
    }

    async fn redeem_token(
        &self,
        req: Request<pb::RedeemTokenRequest>,
    ) -> Result<Response<pb::RedeemTokenReply>, Status> {
        self.redeem_call(req).await
    }

    async fn check_stop(&self, req: Request<pb::CheckStopRequest>) -> Result<Response<pb::CheckStopReply>, Status> {
        self.check_stop_call(req).await
    }

    async fn connect_agent(
        &self,
        req: Request<pb::ConnectAgentRequest>,
    ) -> Result<Response<pb::ConnectAgentReply>, Status> {
        self.connect_agent_call(req).await
    }

    async fn list_agents(&self, req: Request<pb::ListAgentsRequest>) -> Result<Response<pb::ListAgentsReply>, Status> {
        self.list_agents_call(req).await
    }

    async fn disconnect_agent(
        &self,
        req: Request<pb::DisconnectAgentRequest>,
    ) -> Result<Response<pb::DisconnectAgentReply>, Status> {
        self.disconnect_agent_call(req).await
    }

    async fn describe_caller(
        &self,
        req: Request<pb::DescribeCallerRequest>,
    ) -> Result<Response<pb::DescribeCallerReply>, Status> {
        self.describe_caller_call(req).await
    }

    async fn start_task(&self, req: Request<pb::StartTaskRequest>) -> Result<Response<pb::WriteReply>, Status> {
        self.start_task_call(req).await
    }

    async fn continue_task(&self, req: Request<pb::ContinueTaskRequest>) -> Result<Response<pb::WriteReply>, Status> {
        self.continue_task_call(req).await
    }

    async fn list_chats(&self, req: Request<pb::ListChatsRequest>) -> Result<Response<pb::ListChatsReply>, Status> {
        self.list_chats_call(req).await
    }

    async fn claim_task(&self, req: Request<pb::ClaimTaskRequest>) -> Result<Response<pb::ClaimTaskReply>, Status> {
        self.claim_task_call(req).await
    }

    async fn renew_task(&self, req: Request<pb::RenewTaskRequest>) -> Result<Response<pb::RenewTaskReply>, Status> {
        self.renew_task_call(req).await
    }

    async fn get_grant(&self, req: Request<pb::GetGrantRequest>) -> Result<Response<pb::TaskGrant>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::GetGrant).await?;
        let principal = caller.principal;
        grant_routes_mounted(&authority).await?;
        let r = req.into_inner();
        let grant_id = uuid("grant_id", &r.grant_id)?;
        seen(r.min_position);
        let found = authority
            .read(Need::Grant(grant_id), |w| {
                w.grants.get(&grant_id).filter(|g| visible_to(w, g, &principal)).map(grant)
            })
            .await
            .map_err(status)?;
        found.map(Response::new).ok_or_else(|| Status::not_found("grant not found"))
    }

    async fn list_grants(&self, req: Request<pb::ListGrantsRequest>) -> Result<Response<pb::ListGrantsReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::ListGrants).await?;
        let principal = caller.principal;
        grant_routes_mounted(&authority).await?;
        let r = req.into_inner();
        seen(r.min_position);
        // Another owner's session does not exist for the caller, as for its approvals.
        if !r.session_id.is_empty() {
            own_session(&authority, &id("session_id", &r.session_id)?, &principal).await?;
        }
        let mut grants = authority
            .read(Need::PrincipalGrants(&principal), |w| {
                w.grants
                    .values()
                    .filter(|g| visible_to(w, g, &principal))
                    .filter(|g| r.session_id.is_empty() || g.created.session_id == r.session_id)
                    .filter(|g| !r.active_only || g.is_active())
                    .map(|g| (g.created.created_at, grant(g)))
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(status)?;
        grants.sort_by_key(|(t, g)| (*t, g.grant_id.clone()));
        Ok(Response::new(pb::ListGrantsReply { grants: grants.into_iter().map(|(_, g)| g).collect() }))
    }

    #[tracing::instrument(skip_all, fields(grant_id))]
    async fn revoke_grant(&self, req: Request<pb::RevokeGrantRequest>) -> Result<Response<pb::WriteReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::RevokeGrant).await?;
        let principal = caller.principal;
        grant_routes_mounted(&authority).await?;
        let r = req.into_inner();
        let grant_id = uuid("grant_id", &r.grant_id)?;
        tracing::Span::current().record("grant_id", r.grant_id.as_str());
        let revoke = Command::RevokeGrant { grant_id, principal_id: principal.clone() };
        check_stop::settled(self.write(&authority, revoke, &principal).await).await
    }
}

/// Serves `service` on `listener` until `shutdown` resolves, finishing requests in flight, with
/// the standard gRPC health service beside it (SERVING once constructed: the authorizer keeps no
/// state to recover). `tls` is `None` only for plaintext loopback (development) and in-process
/// tests. Every connection is held to `transport`'s limits, every call passes the gate (headers
/// bounded, the caller authenticated before its body is read), and every request is held to the
/// field table by the codec, within [`proto::limits::MAX_AUTHORIZER_REQUEST_BYTES`].
pub async fn serve<B: Backend + 'static>(
    listener: TcpListener,
    service: AuthorizerService<B>,
    tls: Option<Arc<transport::ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let limits = transport::Limits::for_requests_within(std::time::Duration::from_secs(30))
        .within_open_files(transport::raise_fd_limit(), OPEN_FILE_RESERVE);
    let registry = transport::Registry::default();
    let (reporter, health) = tonic_health::server::health_reporter();
    let health = health.max_decoding_message_size(transport::MAX_HEALTH_REQUEST_BYTES);
    reporter.set_serving::<pb::authorizer_server::AuthorizerServer<AuthorizerService<B>>>().await;
    let following = service
        .health_check
        .clone()
        .map(|check| transport::follow_health(reporter, "grant_ledger.v1.Authorizer", check));
    let (credentials, metrics) = (service.credentials.clone(), service.gate_metrics.clone());
    let server = service.into_server().max_decoding_message_size(proto::limits::MAX_AUTHORIZER_REQUEST_BYTES);
    let reflection = transport::reflection(
        &[proto::FILE_DESCRIPTOR_SET, tonic_health::pb::FILE_DESCRIPTOR_SET],
        "grant_ledger.v1.Authorizer",
    );
    let open = transport::open_to_all;
    let served = transport::server(&limits)
        .add_service(Gate::new(health, credentials.clone(), open, limits, registry.clone()).metered(metrics.clone()))
        .add_service(
            Gate::new(reflection, credentials.clone(), open, limits, registry.clone()).metered(metrics.clone()),
        )
        .add_service(Gate::new(server, credentials, Rpc::route, limits, registry.clone()).metered(metrics))
        .serve_with_incoming_shutdown(transport::incoming(listener, tls, limits, registry), shutdown)
        .await;
    if let Some(f) = following {
        f.abort();
    }
    served
}

/// Open files kept back from connections: the ledger's and credentials' pools and the rest.
const OPEN_FILE_RESERVE: u64 = 256;

/// A run's account as the worker gives it, each field checked: the refs are refs, the
/// screenshots digests, the snapshot a snapshot id, the result a word, the text without
/// control characters. The checker bounded the lengths already.
fn account(a: pb::RunAccount) -> Result<pb::RunAccount, Status> {
    use proto::ids::Id;
    for r in &a.refs {
        Id::Ref.check(r).map_err(|why| invalid("account.refs", &why))?;
    }
    for s in &a.screenshots {
        let digest = s
            .strip_prefix("sha256:")
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        if !digest {
            return Err(invalid("account.screenshots", "each is sha256: and 64 lowercase hex digits"));
        }
    }
    if !a.snapshot_id.is_empty() {
        Id::SnapshotId.check(&a.snapshot_id).map_err(|why| invalid("account.snapshot_id", &why))?;
    }
    let word = a.result.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
    if !word {
        return Err(invalid("account.result", "is letters, digits and _ . : -"));
    }
    // Shown to the owner as one line: nothing that ends a line, reorders it or hides in it.
    if a.text.chars().any(proto::limits::hidden_char) {
        return Err(invalid("account.text", "is one line without control, format or direction characters"));
    }
    Ok(a)
}
