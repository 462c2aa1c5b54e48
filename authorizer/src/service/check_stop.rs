//! `CheckStop`: the owner's Stop read fresh just before an act is dispatched or a read is made.
//! A ticket handed out before a Stop, a revoke or a delete is never spent after it: the runtime
//! sends the ticket here last, and the owner's answer waits out the dispatch window ([`settled`]).

use credentials::Role;
use grant_domain::catalogue::AuthorizationKind;
use proto::v1 as pb;
use time::OffsetDateTime;
use tonic::{Request, Response, Status};

use crate::auth::Rpc;
use crate::store::{Backend, Need};

use super::convert::id;
use super::shared::AuthorizerService;
use super::status::{invalid, status};

impl<B: Backend + 'static> AuthorizerService<B> {
    pub(super) async fn check_stop_call(
        &self,
        req: Request<pb::CheckStopRequest>,
    ) -> Result<Response<pb::CheckStopReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::CheckStop).await?;
        let r = req.into_inner();
        let stopped = match (caller.role, r.ticket) {
            (Role::Runtime, Some(ticket)) => {
                let body = self
                    .tickets
                    .open(authority.tenant().as_str(), &ticket)
                    .map_err(|e| invalid("ticket", &format!("is not a ticket sealed for this tenant: {e}")))?;
                if !r.session_id.is_empty() && r.session_id != body.session_id {
                    return Err(invalid("session_id", "is empty or the ticket's session"));
                }
                let decided = OffsetDateTime::from_unix_timestamp_nanos(i128::from(body.decided_ms) * 1_000_000)
                    .map_err(|_| invalid("ticket", "has no decision time"))?;
                // A ticket that names a task grant (every grant allow's does) is spent only while
                // that grant is the session's live one.
                let grant = match body.authorization_kind == AuthorizationKind::BrowserTaskGrant.code() {
                    true if !body.grant_id.is_empty() => {
                        Some(body.grant_id.parse::<uuid::Uuid>().map_err(|_| invalid("ticket", "names no grant"))?)
                    }
                    _ => None,
                };
                authority
                    .read(Need::SessionGrant(&body.session_id), |w| {
                        w.sessions.get(&body.session_id).is_none_or(|s| {
                            s.deleted
                                || s.stopped
                                || s.stopped_at.is_some_and(|at| at >= decided)
                                || grant.is_some_and(|g| s.active_grant != Some(g))
                        })
                    })
                    .await
                    .map_err(status)?
            }
            (Role::Runtime, None) => {
                return Err(invalid("ticket", "is required: the runtime checks the act it is about to dispatch"));
            }
            (_, Some(_)) => return Err(invalid("ticket", "is the runtime's to send: name the session")),
            (_, None) => {
                let session_id = id("session_id", &r.session_id)?;
                let principal = caller.principal;
                authority
                    .read(Need::Session(&session_id), |w| w.session_of(&session_id, &principal).map(|s| s.stopped).ok())
                    .await
                    .map_err(status)?
                    .ok_or_else(|| Status::not_found("session not found"))?
            }
        };
        let within = if stopped { 0 } else { u32::try_from(proto::DISPATCH_WINDOW.as_millis()).unwrap_or(u32::MAX) };
        Ok(Response::new(pb::CheckStopReply { stopped, dispatch_within_ms: within }))
    }
}

/// What a Stop, a revoke or a delete answers, once its dispatch window has passed: an act whose
/// `CheckStop` read the state before it was written has started by then, or never will.
pub(super) async fn settled<T>(reply: Result<T, Status>) -> Result<T, Status> {
    if reply.is_ok() {
        tokio::time::sleep(proto::DISPATCH_WINDOW).await;
    }
    reply
}
