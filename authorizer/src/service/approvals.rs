//! The owner's answer to a card (`ResolveApproval`) and the worker's bounded wait for it
//! (`AwaitApproval`), with the approve-once token each hands out.

use grant_domain::catalogue::{Event, Resolution, SiteScope};
use proto::v1 as pb;

use crate::auth::Rpc;
use credentials::{Caller, Scope};
use time::OffsetDateTime;
use tonic::{Code, Request, Response, Status};
use uuid::Uuid;

use crate::authority::Authority;
use crate::domain::{ApprovalState, Command, Versions};
use crate::store::Backend;
use crate::store::Need;

use super::CALLER_NOT_PERMITTED;
use super::convert::{id, position, token_digest, uuid};
use super::shared::{AuthorizerService, MAX_APPROVAL_WAIT_MS, own_session};
use super::status::{invalid, status, with_reason};

impl<B: Backend + 'static> AuthorizerService<B> {
    pub(super) async fn resolve_call(
        &self,
        req: Request<pb::ResolveApprovalRequest>,
    ) -> Result<Response<pb::ResolveApprovalReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::ResolveApproval).await?;
        let principal = caller.principal.clone();
        let r = req.into_inner();
        let approval_id = uuid("approval_id", &r.approval_id)?;
        tracing::Span::current().record("approval_id", r.approval_id.as_str());
        let resolution = match pb::Resolution::try_from(r.resolution) {
            Ok(pb::Resolution::ApproveOnce) => Resolution::ApproveOnce,
            Ok(pb::Resolution::ApproveForTask) => Resolution::ApproveForTask,
            Ok(pb::Resolution::Deny) => Resolution::Deny,
            Ok(pb::Resolution::TakeOver) => Resolution::TakeOver,
            _ => return Err(invalid("resolution", "is required")),
        };
        let repeated_scope = match resolution {
            Resolution::ApproveForTask if !caller.has(Scope::GrantWrite) => {
                return Err(with_reason(
                    Code::PermissionDenied,
                    CALLER_NOT_PERMITTED,
                    "approve_for_task needs the owner's scope browser.grant.write".into(),
                ));
            }
            Resolution::ApproveForTask => {
                if r.offered_origin.is_empty() || r.offered_path_prefix.is_empty() {
                    return Err(invalid(
                        "offered_origin",
                        "approve_for_task repeats the offered origin and path prefix",
                    ));
                }
                Some(SiteScope { origin: r.offered_origin, path_prefix: r.offered_path_prefix })
            }
            _ => None,
        };
        let asked = authority
            .read(Need::Approval(approval_id), |w| {
                w.approvals.get(&approval_id).map(|a| (a.requested.agent_version.clone(), a.requested.run_id.clone()))
            })
            .await
            .map_err(status)?;
        let Some((agent, run_id)) = asked else { return Err(Status::not_found("approval not found")) };
        // Derived from the approval under the tenant's key, so the session's worker can be handed
        // it (AwaitApproval) without it ever being stored.
        let token = self.tickets.approval_token(authority.tenant().as_str(), approval_id.as_bytes());
        let command = Command::ResolveApproval {
            approval_id,
            principal_id: principal.clone(),
            resolution,
            repeated_scope,
            new_grant_id: Uuid::new_v4(),
            versions: Versions { agent, policy: authority.policy().version.clone() },
            now: OffsetDateTime::now_utc(),
            token_sha256: Some(token_digest(&token)),
        };
        let (events, at) = authority.execute_at(command, &principal).await.map_err(status)?;
        let mut reply = pb::ResolveApprovalReply { position: at.and_then(position), ..Default::default() };
        for e in &events {
            match e {
                Event::ApprovalResolved(x) => {
                    // The name clients read: a take-over is denied to the agent, and says so.
                    reply.status = grant_domain::model::ApprovalState::Resolved(x.resolution).code().into();
                    reply.grant_id = x.grant_id.map(|g| g.to_string()).unwrap_or_default();
                }
                Event::ApprovalTokenIssued(_) => reply.approval_token.clone_from(&token),
                _ => {}
            }
        }
        // A rejected approval is never retried (the record's stop rule): a card an agent app
        // raised, denied or taken over, ends that app's key, whatever its own process does next.
        if matches!(resolution, Resolution::Deny | Resolution::TakeOver) && !events.is_empty() {
            self.end_agent_of_run(&caller, authority.tenant().as_str(), &run_id).await;
        }
        Ok(Response::new(reply))
    }

    pub(super) async fn await_call(
        &self,
        req: Request<pb::AwaitApprovalRequest>,
    ) -> Result<Response<pb::AwaitApprovalReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::AwaitApproval).await?;
        let caller_was = caller.clone();
        let principal = caller.principal;
        // A wait may outlast the credential: it is read again before an answer after one.
        let metadata = req.metadata().clone();
        let mut waited = false;
        let r = req.into_inner();
        let session_id = id("session_id", &r.session_id)?;
        super::shared::bound(&caller_was, &session_id)?;
        let approval_id = uuid("approval_id", &r.approval_id)?;
        if r.wait_ms > MAX_APPROVAL_WAIT_MS {
            return Err(invalid("wait_ms", &format!("is at most {MAX_APPROVAL_WAIT_MS}")));
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(u64::from(r.wait_ms));
        // Held before the first read, so an answer given after that read always wakes the wait.
        let mut waiting = self.waits.hold(&self.authority, (authority.tenant().clone(), approval_id));
        // A renewed wait on a card this principal's read found pending, with nothing moved
        // since, starts waiting without a read: a held wait costs the database nothing.
        let mut read_now = !waiting.known_pending(&session_id, &principal);
        if read_now {
            own_session(&authority, &session_id, &principal).await?;
        }
        loop {
            if read_now {
                match self.look(&authority, approval_id, &session_id, &caller_was).await? {
                    Looked::Answered(reply) => {
                        if waited {
                            self.still_live(&metadata, &caller_was, Rpc::AwaitApproval).await?;
                        }
                        return Ok(Response::new(reply));
                    }
                    Looked::Pending(mark) => waiting.pending_at(mark, &session_id, &principal),
                }
            }
            // Woken only when this approval or its session changed: a held wait makes no reads.
            // Still pending at the deadline, the answer says so and hands nothing out.
            tokio::select! {
                () = waiting.moved() => read_now = true,
                () = tokio::time::sleep_until(deadline) => {
                    let status = ApprovalState::Pending.code().into();
                    return Ok(Response::new(pb::AwaitApprovalReply { status, ..Default::default() }));
                }
            }
            waited = true;
        }
    }

    /// One read of a waited-for card: its answer (the token with an approval, STOPPED after the
    /// owner's Stop), or the mark it is pending at.
    /// A bound credential (an agent key) sees only the cards of its own run.
    async fn look(
        &self,
        authority: &Authority<B>,
        approval_id: Uuid,
        session_id: &str,
        caller: &Caller,
    ) -> Result<Looked, Status> {
        let seen = authority
            .read_loaded(Need::Approval(approval_id), |l| {
                let w = &l.world;
                let a = w
                    .approvals
                    .get(&approval_id)
                    .filter(|a| a.requested.session_id == session_id && caller.may_run(&a.requested.run_id))?;
                let grant = w
                    .grants
                    .values()
                    .find(|g| g.created.approval_id == approval_id)
                    .map(|g| g.created.grant_id.to_string());
                // A token is handed out only while it could still be redeemed: never after a
                // Stop since the card was asked.
                let live = a.requested.expires_at > OffsetDateTime::now_utc();
                let session = w.sessions.get(session_id);
                let void = session.is_some_and(|s| s.stopped_since(&a.requested));
                let unspent = a.token_sha256.clone().filter(|_| !a.token_redeemed && live && !void);
                let mark = (l.version_of("approval", &approval_id), l.version_of("session", &session_id));
                Some((a.state, unspent, grant, session.is_some_and(|s| s.stopped), mark))
            })
            .await
            .map_err(status)?;
        let Some((state, unspent, grant, stopped, mark)) = seen else {
            return Err(Status::not_found("approval not found"));
        };
        // The owner stopped the agent here: the worker ends its run, whatever the card says.
        if stopped {
            let status = proto::AWAIT_STOPPED.into();
            return Ok(Looked::Answered(pb::AwaitApprovalReply { status, ..Default::default() }));
        }
        if state == ApprovalState::Pending {
            return Ok(Looked::Pending(mark));
        }
        // The token is handed out only while its record stands unspent, and found under
        // whichever key of the ring issued it.
        let tenant = authority.tenant().as_str();
        let approval_token = unspent
            .and_then(|digest| {
                self.tickets.approval_tokens(tenant, approval_id.as_bytes()).find(|t| token_digest(t) == digest)
            })
            .unwrap_or_default();
        Ok(Looked::Answered(pb::AwaitApprovalReply {
            status: state.code().into(),
            approval_token,
            grant_id: grant.unwrap_or_default(),
        }))
    }
}

/// What one read of a waited-for card found.
enum Looked {
    Answered(pb::AwaitApprovalReply),
    /// Still pending, at this mark (the card's version and its session's).
    Pending((u64, u64)),
}
