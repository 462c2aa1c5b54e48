//! The owner's task permissions: listed, read and stopped (mounted only while the tenant's flag
//! is on).

use axum::Json;
use axum::extract::Request;
use credentials::Scope;
use proto::v1 as pb;
use schemars::JsonSchema;
use time::OffsetDateTime;

use crate::api::{Grant, GrantStatus, Grants, Position, Written};
use crate::call::{Answer, Call, NoQuery, ReadQuery, Seg, entity_id, min_position, status, uuid};
use crate::docs::{Doc, doc, schema};
use crate::guard;
use crate::owners::Owner;
use crate::problem::Problem;

pub(crate) const LIST_GRANTS: Doc = Doc {
    scopes: &[Scope::GrantRead],
    flagged: true,
    query: Some(schema::<GrantsQuery>),
    ..doc(
        "get",
        "/v1/browser-task-grants",
        "The owner's task permissions (or one session's), newest first",
        schema::<Grants>,
    )
};
pub(crate) const GET_GRANT: Doc = Doc {
    scopes: &[Scope::GrantRead],
    flagged: true,
    query: Some(schema::<ReadQuery>),
    ..doc("get", "/v1/browser-task-grants/{grant_id}", "One task permission", schema::<Grant>)
};
pub(crate) const REVOKE_GRANT: Doc = Doc {
    scopes: &[Scope::GrantWrite],
    flagged: true,
    write: true,
    ..doc(
        "post",
        "/v1/browser-task-grants/{grant_id}/revoke",
        "Stops a task permission; it holds from the next action",
        schema::<Written>,
    )
};

#[derive(Debug, Clone, Default, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrantsQuery {
    /// The chat session whose permissions to list; absent, every one of the owner's.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Only the active ones.
    #[serde(default)]
    pub active_only: Option<bool>,
    #[serde(default)]
    pub min_position: Option<String>,
}

pub(super) async fn list_grants(call: Call) -> Answer<Grants> {
    let owner = call.flagged(&LIST_GRANTS).await?;
    let listed = async {
        call.scoped(&owner, &LIST_GRANTS)?;
        let q: GrantsQuery = call.query()?;
        let session_id = q.session_id.unwrap_or_default();
        if !session_id.is_empty() {
            entity_id("session_id", &session_id)?;
        }
        let min = min_position(q.min_position.as_deref())?;
        grants_of(&call, &owner, &session_id, q.active_only.unwrap_or(false), min).await
    };
    let grants = unless_unmounted(&call, &owner, listed.await).await?;
    Ok(Json(Grants { grants }))
}

/// A task-grant route's refusal of its caller's scope or input stands only if the route is
/// mounted: with the tenant's flag off it does not exist, and answers 404 as an unknown path.
/// The authorizer checks the flag before anything else, so a call it cannot serve tells.
pub(super) async fn unless_unmounted<T>(call: &Call, owner: &Owner, r: Result<T, Problem>) -> Result<T, Problem> {
    match r {
        Err(p) if matches!(p.status, 400 | 403 | 413 | 415 | 422) => {
            // A probe that reads nothing: the flag, then an empty id that no grant has.
            let probe = Owner { scopes: vec![Scope::GrantRead], ..owner.clone() };
            let req = pb::GetGrantRequest { grant_id: String::new(), min_position: None };
            match call.gateway.authorizer().get_grant(call.grpc(&probe, req)?).await {
                Err(s) if s.code() == tonic::Code::Unimplemented => Err(Problem::not_found()),
                _ => Err(p),
            }
        }
        other => other,
    }
}

pub(crate) async fn grants_of(
    call: &Call,
    owner: &Owner,
    session_id: &str,
    active_only: bool,
    min: Option<pb::Position>,
) -> Result<Vec<Grant>, Problem> {
    let req = pb::ListGrantsRequest { session_id: session_id.into(), active_only, min_position: min };
    let reply = call.gateway.authorizer().list_grants(call.grpc(owner, req)?).await.map_err(status)?;
    let now = OffsetDateTime::now_utc();
    let grants = reply.into_inner().grants.into_iter().map(|g| Grant::from_pb(g, now));
    // A grant past its expiry that the sweep has not yet ended is shown ended, and so is no
    // longer active.
    Ok(grants.filter(|g| !active_only || g.status == GrantStatus::Active).collect())
}

pub(super) async fn get_grant(call: Call, grant_id: Result<Seg, Problem>) -> Answer<Grant> {
    let owner = call.flagged(&GET_GRANT).await?;
    let got = async {
        call.scoped(&owner, &GET_GRANT)?;
        let q: ReadQuery = call.query()?;
        let Seg(grant_id) = grant_id?;
        uuid("grant_id", &grant_id)?;
        let req = pb::GetGrantRequest { grant_id, min_position: min_position(q.min_position.as_deref())? };
        call.gateway.authorizer().get_grant(call.grpc(&owner, req)?).await.map_err(status)
    };
    let reply = unless_unmounted(&call, &owner, got.await).await?;
    Ok(Json(Grant::from_pb(reply.into_inner(), OffsetDateTime::now_utc())))
}

pub(super) async fn revoke_grant(call: Call, grant_id: Result<Seg, Problem>, req: Request) -> Answer<Written> {
    let owner = call.flagged(&REVOKE_GRANT).await?;
    let revoked = async {
        call.scoped(&owner, &REVOKE_GRANT)?;
        call.query::<NoQuery>()?;
        let Seg(grant_id) = grant_id?;
        uuid("grant_id", &grant_id)?;
        empty_body(req).await?;
        let req = pb::RevokeGrantRequest { grant_id };
        call.gateway.authorizer().revoke_grant(call.grpc(&owner, req)?).await.map_err(status)
    };
    let reply = unless_unmounted(&call, &owner, revoked.await).await?;
    Ok(Json(Written { position: Position::from_pb(reply.into_inner().position) }))
}

/// A route with nothing to send takes no body, or `{}`.
pub(super) async fn empty_body(req: Request) -> Result<(), Problem> {
    let bytes =
        axum::body::to_bytes(req.into_body(), crate::MAX_BODY_BYTES).await.map_err(|_| guard::too_large_problem())?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    guard::parse_json::<NoQuery>(&bytes).map(|_| ())
}
