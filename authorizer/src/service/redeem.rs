//! `RedeemToken`: the runtime spends an approve-once token on exactly the act its card recorded,
//! and gets that act's one dispatch ticket.

use classifier::Action;
use grant_domain::catalogue::{AuthorizationKind, BoundAction, Event, TokenBinding};
use proto::v1 as pb;

use crate::auth::Rpc;
use time::OffsetDateTime;
use tonic::{Code, Request, Response, Status};

use crate::domain::Command;
use crate::store::Backend;
use crate::store::Need;

use super::convert::{action_of, id, position, token_digest};
use super::shared::AuthorizerService;
use super::status::{invalid, status};
use super::ticket;

impl<B: Backend + 'static> AuthorizerService<B> {
    pub(super) async fn redeem_call(
        &self,
        req: Request<pb::RedeemTokenRequest>,
    ) -> Result<Response<pb::RedeemTokenReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::RedeemToken).await?;
        let principal = caller.principal;
        let r = req.into_inner();
        proto::ids::Id::ApprovalToken.check(&r.approval_token).map_err(|why| invalid("approval_token", &why))?;
        let (action, field_id) = action_of(r.action)?;
        let mut asked = BoundAction {
            element_role: r.element_role,
            element_name: r.element_name,
            page_origin: r.page_origin,
            ..BoundAction::of(&action, field_id.as_deref())
        };
        asked.text_sha256 = match (&action, r.text_sha256.len()) {
            (Action::Type { .. }, 32) => Some(format!("hmac-sha256:{}", hex::encode(&r.text_sha256))),
            (Action::Type { .. }, _) => {
                return Err(invalid(
                    "text_sha256",
                    "is the keyed digest of the text a type types (its sealed TextBody.digest)",
                ));
            }
            (_, 0) => None,
            _ => return Err(invalid("text_sha256", "is only for a type")),
        };
        asked.form_sha256 = match (&action, r.form_digest.len()) {
            (_, 0) => None,
            (Action::Click | Action::Check | Action::Select { .. }, 32) => {
                Some(format!("hmac-sha256:{}", hex::encode(&r.form_digest)))
            }
            _ => return Err(invalid("form_digest", "is a click's 32-byte keyed digest of the live form")),
        };
        let binding = TokenBinding {
            run_id: id("run_id", &r.run_id)?,
            snapshot_id: id("snapshot_id", &r.snapshot_id)?,
            node_ref: id("node_ref", &r.node_ref)?,
            action: Some(Box::new(asked)),
        };
        let profile_id = id("browser_profile_id", &r.browser_profile_id)?;
        let now = OffsetDateTime::now_utc();
        let command = Command::RedeemToken {
            principal_id: principal.clone(),
            token_sha256: token_digest(&r.approval_token),
            binding: binding.clone(),
            profile_id,
            now,
        };
        let (events, at) = authority.execute_at(command, &principal).await.map_err(|e| {
            let refused = status(e);
            if refused.code() == Code::PermissionDenied {
                authority.metrics().token("refused");
            }
            refused
        })?;
        let Some(approval_id) = events.iter().find_map(|e| match e {
            Event::ApprovalTokenRedeemed(x) => Some(x.approval_id),
            _ => None,
        }) else {
            return Err(Status::internal("a redemption recorded no redeemed token"));
        };
        // The approved act as the card recorded it (with the digest of the text it showed),
        // sealed for its one dispatch.
        let approved = authority
            .read(Need::Approval(approval_id), |w| {
                let a = w.approvals.get(&approval_id)?;
                let session = w.sessions.get(&a.requested.session_id)?;
                let profile = session.created.browser_profile_id.clone()?;
                let action = *a.requested.binding.as_ref()?.action.clone()?;
                Some((a.requested.session_id.clone(), profile, action, a.requested.expires_at))
            })
            .await
            .map_err(status)?;
        let Some((session_id, profile, approved_action, expires_at)) = approved else {
            return Err(Status::internal("a redeemed approval is not readable"));
        };
        let ticket = ticket::seal(
            &self.tickets,
            ticket::Allowed {
                ticket_id: approval_id.to_string(),
                tenant_id: authority.tenant().as_str(),
                principal_id: &principal,
                session_id: &session_id,
                profile: &profile,
                run_id: &binding.run_id,
                snapshot_id: &binding.snapshot_id,
                node_ref: &binding.node_ref,
                action: &approved_action,
                kind: AuthorizationKind::Approval,
                grant_id: None,
                use_ordinal: None,
                approval_id: Some(approval_id.to_string()),
                constraint: None,
                until: Some(expires_at),
            },
            now,
        );
        Ok(Response::new(pb::RedeemTokenReply {
            approval_id: approval_id.to_string(),
            position: at.and_then(position),
            ticket: Some(ticket),
        }))
    }
}
