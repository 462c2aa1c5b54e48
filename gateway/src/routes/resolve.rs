//! The owner's answer to a card: approve once, approve for the task (repeating the offer), deny,
//! or take the live tab over.

use axum::Json;
use axum::extract::Request;
use credentials::Scope;
use proto::ApprovalStatus;
use proto::v1 as pb;

use super::live::{card_tab, runtime_problem};
use crate::api::{Position, Resolution, Resolve, Resolved};
use crate::call::{Answer, Call, NoQuery, Seg, status, uuid};
use crate::docs::{Doc, doc, schema};
use crate::guard;
use crate::problem::Problem;

pub(crate) const RESOLVE: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    body: Some(schema::<Resolve>),
    ..doc(
        "post",
        "/v1/approvals/{approval_id}/resolve",
        "Answers a card: approve_once, approve_for_task (also needs browser.grant.write, and repeats the offer), \
         deny, or take_over (denied to the agent, whose run ends, and the owner acts in the live tab); a stale or \
         mismatched offer is 409 and the card stays pending",
        schema::<Resolved>,
    )
};

pub(super) async fn resolve(call: Call, Seg(approval_id): Seg, req: Request) -> Answer<Resolved> {
    let (owner, _) = call.owner(&RESOLVE).await?;
    call.query::<NoQuery>()?;
    uuid("approval_id", &approval_id)?;
    let body: Resolve = guard::json_body(req).await?;
    let (resolution, origin, prefix) = match body.resolution {
        Resolution::ApproveForTask => {
            if !owner.has(Scope::GrantWrite) {
                return Err(Problem::forbidden("scope_missing", "approve_for_task also needs browser.grant.write"));
            }
            let origin = offered("offered_origin", body.offered_origin, proto::limits::MAX_ORIGIN_CHARS)?;
            let prefix = offered("offered_path_prefix", body.offered_path_prefix, proto::limits::MAX_URL_CHARS)?;
            (pb::Resolution::ApproveForTask, origin, prefix)
        }
        other => {
            if let Some(field) =
                [("offered_origin", &body.offered_origin), ("offered_path_prefix", &body.offered_path_prefix)]
                    .iter()
                    .find_map(|(f, v)| v.is_some().then_some(*f))
            {
                return Err(Problem::invalid(field, "is sent only with approve_for_task"));
            }
            let r = match other {
                Resolution::Deny => pb::Resolution::Deny,
                Resolution::TakeOver => pb::Resolution::TakeOver,
                _ => pb::Resolution::ApproveOnce,
            };
            (r, String::new(), String::new())
        }
    };
    let shown_for = body.shown_for_ms.map(|ms| (ms, approval_id.clone()));
    // Taking over marks the tab first, so that from the answer on nothing of the agent's reaches
    // it: the owner meant to act there even if the card cannot be answered any more.
    let taken = if resolution == pb::Resolution::TakeOver {
        let (mut runtime, tab) = card_tab(&call, &owner, approval_id.clone(), &[ApprovalStatus::Pending]).await?;
        let req = proto::runtime::TakeOverRequest {
            browser_profile_id: tab.profile.clone(),
            snapshot_id: tab.snapshot.clone(),
            release: false,
        };
        runtime.take_over(call.grpc(&owner, req)?).await.map_err(runtime_problem)?;
        Some((runtime, tab))
    } else {
        None
    };
    let req = pb::ResolveApprovalRequest {
        approval_id,
        resolution: resolution.into(),
        offered_origin: origin,
        offered_path_prefix: prefix,
    };
    // The approval token in the reply is not the owner's to hold: the session's worker takes it
    // from the authorizer (AwaitApproval), so it never reaches a page's script.
    let r = match call.gateway.authorizer().resolve_approval(call.grpc(&owner, req)?).await {
        Ok(r) => r.into_inner(),
        Err(s) => {
            // Not recorded (expired, answered elsewhere, a failure): the tab goes back, or the
            // worker would be refused a tab the owner cannot use either.
            if let Some((mut runtime, tab)) = taken {
                let back = proto::runtime::TakeOverRequest {
                    browser_profile_id: tab.profile,
                    snapshot_id: tab.snapshot,
                    release: true,
                };
                if let Err(e) = runtime.take_over(call.grpc(&owner, back)?).await {
                    tracing::warn!(error = %e, "a take-over whose answer failed could not be undone");
                }
            }
            return Err(status(s));
        }
    };
    // Counted once the answer is recorded, and held to an hour: the client measures it, so a made-up
    // card or a made-up figure moves nothing.
    if let Some((ms, approval_id)) = shown_for {
        tracing::info!(%approval_id, shown_for_ms = ms, resolution = ?body.resolution, "card answered");
        crate::metrics::dwell(body.resolution.code(), std::time::Duration::from_millis(ms.min(3_600_000)));
    }
    Ok(Json(Resolved {
        status: r.status,
        grant_id: Some(r.grant_id).filter(|g| !g.is_empty()),
        position: Position::from_pb(r.position),
    }))
}

fn offered(field: &str, value: Option<String>, max: usize) -> Result<String, Problem> {
    match value {
        Some(v) if !v.is_empty() && v.chars().count() <= max && !v.chars().any(char::is_control) => Ok(v),
        Some(_) => Err(Problem::invalid(field, format!("is the offer's text exactly: 1 to {max} characters"))),
        None => Err(Problem::invalid(field, "approve_for_task repeats the offer's origin and path prefix")),
    }
}
