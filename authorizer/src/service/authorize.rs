//! `Authorize`: the request read into the domain's terms (the sealed facts, text and form opened,
//! every field checked), decided once per tool call, and the decision answered (an allow sealed
//! into its one dispatch ticket).

use classifier::{Action, PageFacts};
use grant_domain::catalogue::{ActionView, Event, SiteScope};
use proto::v1 as pb;

use crate::auth::Rpc;
use credentials::Caller;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use tonic::{Request, Response, Status};

use crate::authority::{Authority, CallKey};
use crate::constraint::{self as dispatch};
use crate::domain::{AuthorizeRequest, Decision, RunContext, Versions};
use crate::store::Backend;
use crate::view::approval_view_in_session;

use super::convert::{action_of, constraint, element, id, offer, opt, position, view_pb};
use super::shared::AuthorizerService;
use super::status::{invalid, status};
use super::{facts, ticket};
use crate::authority::Authorized;

impl<B: Backend + 'static> AuthorizerService<B> {
    pub(super) async fn authorize_call(
        &self,
        req: Request<pb::AuthorizeRequest>,
    ) -> Result<Response<pb::AuthorizeReply>, Status> {
        let (mut caller, authority) = self.caller(&req, Rpc::Authorize).await?;
        let answered = self.authorize_as(&caller, &authority, req.into_inner()).await;
        if caller.unconfirmed.is_none() {
            return answered.map(|(reply, _)| reply);
        }
        // A credential recognised from memory is confirmed by the call's own read. A decision
        // answered from the record, or a call refused before the read, confirms it here, so a
        // revoked caller learns nothing else; one the read refused is forgotten.
        match answered {
            Ok((reply, true)) => {
                caller.mark_confirmed();
                Ok(reply)
            }
            Err(e) if e.code() == tonic::Code::Unauthenticated => {
                self.credentials.forget(&caller);
                Err(e)
            }
            answered => {
                self.credentials.confirm(&mut caller).await.map_err(transport::auth_status)?;
                answered.map(|(reply, _)| reply)
            }
        }
    }

    /// The call decided for `caller`; with whether the decision came from a read of this call's
    /// (which confirmed a remembered credential), not from the record of an earlier one.
    async fn authorize_as(
        &self,
        caller: &Caller,
        authority: &Authority<B>,
        r: pb::AuthorizeRequest,
    ) -> Result<(Response<pb::AuthorizeReply>, bool), Status> {
        let principal = caller.principal.clone();
        // A retry of this call is the same bytes: its digest tells it from a reuse of the id.
        let request_sha256: [u8; 32] = Sha256::digest(prost::Message::encode_to_vec(&r)).into();
        let now = OffsetDateTime::now_utc();
        let (snapshot_id, node_ref) = (r.snapshot_id.clone(), r.node_ref.clone());
        let named = facts::Named {
            tenant: authority.tenant().as_str(),
            principal: &principal,
            snapshot_id: &snapshot_id,
            node_ref: &node_ref,
        };
        let (mut r, facts_profile) =
            facts::unsealed(&self.tickets, &self.refusals, self.accept_unsealed, r, &named, now)?;
        let (keys, refusals, accept) = (&self.tickets, &self.refusals, self.accept_unsealed);
        let text_sha256 = facts::sealed_text(keys, refusals, accept, &mut r, &named, facts_profile.as_deref(), now)?;
        let form = facts::sealed_form(keys, refusals, &mut r, &named, facts_profile.as_deref(), now)?;
        let session_id = id("session_id", &r.session_id)?;
        super::shared::bound(caller, &session_id)?;
        tracing::Span::current().record("session_id", session_id.as_str());
        let run = r.run.ok_or_else(|| invalid("run", "is required"))?;
        let run_id = id("run.run_id", &run.run_id)?;
        super::shared::bound_run(caller, &run_id)?;
        let tool_call_id = id("tool_call_id", &r.tool_call_id)?;
        if r.agent_version.is_empty() {
            return Err(invalid("agent_version", "is required"));
        }
        if r.page_url.is_empty() {
            return Err(invalid("page_url", "is required"));
        }
        let (action, field_id) = action_of(r.action)?;
        let element = match r.element {
            Some(e) => Some(element(e)?),
            None if matches!(action, Action::Scroll { .. }) => None,
            None => return Err(invalid("element", "is required")),
        };
        // The tool contract's click takes no field: the runtime refuses one, so no card is asked.
        if matches!(action, Action::Click)
            && element.as_ref().is_some_and(|e| {
                matches!(e.role.as_str(), "textbox" | "searchbox" | "listbox" | "spinbutton" | "slider")
            })
        {
            return Err(invalid(
                "action.kind",
                "a click takes no textbox, searchbox, listbox, spinbutton or slider: type or select",
            ));
        }
        // A slider is shown, never acted on: the runtime refuses any act but a scroll from one.
        if !matches!(action, Action::Scroll { .. }) && element.as_ref().is_some_and(|e| e.role == "slider") {
            return Err(invalid("action.kind", "no act but a scroll takes a slider"));
        }
        let snapshot = match (r.snapshot_id.is_empty(), r.node_ref.is_empty()) {
            (false, false) => Some((id("snapshot_id", &r.snapshot_id)?, id("node_ref", &r.node_ref)?)),
            (true, true) => None,
            _ => return Err(invalid("snapshot_id", "snapshot_id and node_ref go together")),
        };
        // A type on a snapshot may be dispatched: its ticket names the record field it types.
        if matches!(action, Action::Type { .. }) && snapshot.is_some() && field_id.is_none() {
            return Err(invalid("action.field_id", "is required for a type named on a snapshot and ref"));
        }
        let page = PageFacts { url: r.page_url };
        let has_element = element.is_some();
        let request = AuthorizeRequest {
            tenant_id: authority.tenant().to_string(),
            principal_id: principal,
            session_id,
            run_id,
            tool_call_id,
            // Whether the record can see the turn is the credential's, never the request's.
            run: RunContext {
                interactive: run.interactive,
                top_level: run.top_level,
                turn_visible: caller.turn_visible(),
            },
            turn_tool_calls: r.turn_tool_calls,
            versions: Versions { agent: r.agent_version, policy: authority.policy().version.clone() },
            element: element.unwrap_or_default(),
            page,
            action,
            view: ActionView::default(),
            snapshot,
            field_id,
            facts_profile,
            text_sha256,
            form,
        };
        let title = opt(&r.page_title);
        let named = has_element.then_some(&request.element);
        let view = |scopes: &[SiteScope]| {
            approval_view_in_session(named, &request.page, title.as_deref(), &request.action, scopes)
        };
        let call = CallKey::new(authority.tenant(), &request.session_id, &request.tool_call_id, &request_sha256);
        let ticket_id = call.id.to_string();
        let credential = caller.unconfirmed.as_ref().map(|u| u.credential_id);
        let authorized = authority.authorize(&request, &view, now, call, credential).await.map_err(status)?;
        let reply = self.answer(&request, &authorized, ticket_id);
        let name = match &reply {
            pb::authorize_reply::Decision::Allow(_) => "allow",
            pb::authorize_reply::Decision::RequireApproval(_) => "require_approval",
            pb::authorize_reply::Decision::Deny(_) => "deny",
        };
        tracing::Span::current().record("decision", name);
        let reply = pb::AuthorizeReply { decision: Some(reply), position: authorized.at.and_then(position) };
        Ok((Response::new(reply), !authorized.replayed))
    }

    /// The reply to `request`'s decision: an allow with its constraint and ticket, a card with
    /// its view and offer, or a denial's code.
    fn answer(
        &self,
        request: &AuthorizeRequest,
        authorized: &Authorized,
        ticket_id: String,
    ) -> pb::authorize_reply::Decision {
        let events = &authorized.events;
        match &authorized.decision {
            &Decision::Allow { kind, grant_id, use_ordinal, .. } => {
                let dispatch = match &authorized.grant {
                    Some(g) => Some(dispatch::for_task_grant(g)),
                    None => {
                        let origin =
                            classifier::paths::location(&request.page.url).map(|l| l.origin).unwrap_or_default();
                        authorized.standing_until.map(|t| dispatch::for_standing_grant(&origin, t))
                    }
                };
                let constraint = dispatch.as_ref().map(constraint);
                // A ticket binds the snapshot and ref the act is dispatched on: without them
                // the allow is an answer, and nothing can be dispatched with it.
                let ticket = match (&request.snapshot, &authorized.profile) {
                    (Some((snapshot_id, node_ref)), Some(profile)) => Some(ticket::seal(
                        &self.tickets,
                        ticket::Allowed {
                            ticket_id,
                            tenant_id: &request.tenant_id,
                            principal_id: &request.principal_id,
                            session_id: &request.session_id,
                            profile,
                            run_id: &request.run_id,
                            snapshot_id,
                            node_ref,
                            action: &request.bound_action(),
                            kind,
                            grant_id: grant_id.map(|g| g.to_string()),
                            use_ordinal,
                            approval_id: None,
                            until: dispatch.as_ref().map(|d| d.not_after),
                            constraint: constraint.clone(),
                        },
                        authorized.decided_at,
                    )),
                    _ => None,
                };
                pb::authorize_reply::Decision::Allow(pb::Allow {
                    kind: kind.code().to_owned(),
                    grant_id: grant_id.map(|g| g.to_string()).unwrap_or_default(),
                    use_ordinal: use_ordinal.unwrap_or_default(),
                    constraint,
                    ticket,
                })
            }
            Decision::RequireApproval { approval_id, reason, offer: o } => {
                let shown = events.iter().find_map(|e| match e {
                    Event::ApprovalRequested(a) => Some(view_pb(&a.view)),
                    _ => None,
                });
                pb::authorize_reply::Decision::RequireApproval(pb::RequireApproval {
                    approval_id: approval_id.to_string(),
                    view: shown,
                    offer: o.as_ref().map(offer),
                    reason: reason.map(|r| r.code().to_owned()).unwrap_or_default(),
                })
            }
            Decision::Deny(denial) => pb::authorize_reply::Decision::Deny(pb::Deny { code: denial.code().to_owned() }),
        }
    }
}
