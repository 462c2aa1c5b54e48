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
                let ms = |ms: i64| OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok();
                let (Some(decided), Some(not_after)) = (ms(body.decided_ms), ms(body.not_after_ms)) else {
                    return Err(invalid("ticket", "has no decision time or end"));
                };
                // A ticket that names a task grant (every grant allow's does) is spent only while
                // that grant is the session's live one and has time left.
                let grant = match body.authorization_kind == AuthorizationKind::BrowserTaskGrant.code() {
                    true if !body.grant_id.is_empty() => {
                        Some(body.grant_id.parse::<uuid::Uuid>().map_err(|_| invalid("ticket", "names no grant"))?)
                    }
                    _ => None,
                };
                let now = OffsetDateTime::now_utc();
                // The Stop's time against the decision's: both from the replicas' clocks, as a
                // card's token is held to the Stop (see ARCHITECTURE.md's invariants).
                authority
                    .read(Need::SessionGrant(&body.session_id), |w| {
                        let session = w.sessions.get(&body.session_id);
                        let grant_over = |g: uuid::Uuid| {
                            session.is_none_or(|s| s.active_grant != Some(g))
                                || w.grants.get(&g).is_none_or(|live| live.created.expires_at <= now)
                        };
                        not_after <= now
                            || session
                                .is_none_or(|s| s.deleted || s.stopped || s.stopped_at.is_some_and(|at| at >= decided))
                            || grant.is_some_and(grant_over)
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
                super::shared::bound(&caller, &session_id)?;
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

/// What a Stop, a revoke or a delete answers, once [`proto::STOP_SETTLE`] has passed: an act
/// whose `CheckStop` read the state before it was written has started by then, or never will.
pub(super) async fn settled<T>(reply: Result<T, Status>) -> Result<T, Status> {
    if reply.is_ok() {
        tokio::time::sleep(proto::STOP_SETTLE).await;
    }
    reply
}
