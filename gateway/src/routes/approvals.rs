//! A session's approval cards, and one card.

use axum::Json;
use credentials::Scope;
use proto::ApprovalStatus;
use proto::v1 as pb;
use schemars::JsonSchema;

use crate::api::{Approval, Approvals};
use crate::call::{Answer, Call, ReadQuery, Seg, entity_id, min_position, status, uuid};
use crate::docs::{Doc, doc, schema};
use crate::owners::Owner;
use crate::problem::Problem;

pub(crate) const LIST_APPROVALS: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    query: Some(schema::<ApprovalsQuery>),
    ..doc("get", "/v1/sessions/{session_id}/approvals", "A session's approvals, pending first", schema::<Approvals>)
};
pub(crate) const GET_APPROVAL: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    query: Some(schema::<ReadQuery>),
    ..doc("get", "/v1/approvals/{approval_id}", "One approval card", schema::<Approval>)
};

#[derive(Debug, Clone, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalsQuery {
    /// Only the pending ones.
    #[serde(default)]
    pub pending_only: Option<bool>,
    /// `<tx_id>.<position>` from a write's answer.
    #[serde(default)]
    pub min_position: Option<String>,
}

/// A session's approvals, pending first; `session` must be the owner's (else 404).
pub(crate) async fn approvals_of(
    call: &Call,
    owner: &Owner,
    session_id: &str,
    pending_only: bool,
    min: Option<pb::Position>,
) -> Result<Vec<Approval>, Problem> {
    let req = pb::ListApprovalsRequest { session_id: session_id.into(), pending_only, min_position: min };
    let reply = call.gateway.authorizer().list_approvals(call.grpc(owner, req)?).await.map_err(status)?;
    let mut approvals: Vec<Approval> = reply.into_inner().approvals.into_iter().map(Approval::from).collect();
    approvals.sort_by_key(|a| ApprovalStatus::from_code(&a.status) != Some(ApprovalStatus::Pending));
    Ok(approvals)
}

pub(super) async fn list_approvals(call: Call, Seg(session_id): Seg) -> Answer<Approvals> {
    let (owner, _) = call.owner(&LIST_APPROVALS).await?;
    let q: ApprovalsQuery = call.query()?;
    entity_id("session_id", &session_id)?;
    let min = min_position(q.min_position.as_deref())?;
    let approvals = approvals_of(&call, &owner, &session_id, q.pending_only.unwrap_or(false), min).await?;
    Ok(Json(Approvals { approvals }))
}

pub(super) async fn get_approval(call: Call, Seg(approval_id): Seg) -> Answer<Approval> {
    let (owner, _) = call.owner(&GET_APPROVAL).await?;
    let q: ReadQuery = call.query()?;
    uuid("approval_id", &approval_id)?;
    let req = pb::GetApprovalRequest { approval_id, min_position: min_position(q.min_position.as_deref())? };
    let reply = call.gateway.authorizer().get_approval(call.grpc(&owner, req)?).await.map_err(status)?;
    Ok(Json(reply.into_inner().into()))
}
