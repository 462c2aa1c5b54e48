//! The owner's Stop for the agent in a chat session, and Stop everything for all of them: served
//! whatever the task-grant flag, since they only take authority away.

use axum::Json;
use axum::extract::Request;
use credentials::Scope;
use proto::v1 as pb;
use schemars::JsonSchema;

use super::grants::empty_body;
use crate::api::{Position, Written};
use crate::call::{Answer, Call, NoQuery, Seg, entity_id, status};
use crate::docs::{Doc, doc, schema};
use crate::problem::Problem;

pub(crate) const STOP_SESSION: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    ..doc(
        "post",
        "/v1/sessions/{session_id}/stop",
        "Stops the agent in a chat session: its task permission ends, its waiting cards are denied, the run \
         acting ends at its next action, and nothing runs until the owner's next message",
        schema::<Written>,
    )
};
pub(crate) const STOP_EVERYTHING: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    ..doc(
        "post",
        "/v1/stop-everything",
        "Stops the agent in every chat of the owner's that is not stopped already, as the stop of one chat does",
        schema::<Stopped>,
    )
};

pub(super) async fn stop_session(call: Call, Seg(session_id): Seg, req: Request) -> Answer<Written> {
    let (owner, _) = call.owner(&STOP_SESSION).await?;
    call.query::<NoQuery>()?;
    entity_id("session_id", &session_id)?;
    empty_body(req).await?;
    let req = pb::StopSessionRequest { session_id };
    let reply = call.gateway.authorizer().stop_session(call.grpc(&owner, req)?).await.map_err(status)?;
    Ok(Json(Written { position: Position::from_pb(reply.into_inner().position) }))
}

/// The most calls one Stop everything makes (each stops up to a batch of sessions).
const STOP_CALLS: usize = 100;

pub(super) async fn stop_everything(call: Call, req: Request) -> Answer<Stopped> {
    let (owner, _) = call.owner(&STOP_EVERYTHING).await?;
    call.query::<NoQuery>()?;
    empty_body(req).await?;
    let (mut sessions, mut position) = (0, None);
    for _ in 0..STOP_CALLS {
        let req = call.grpc(&owner, pb::StopEverythingRequest {})?;
        let reply = match call.gateway.authorizer().stop_everything(req).await {
            Ok(r) => r.into_inner(),
            Err(e) => return Err(settled(sessions, status(e)).await),
        };
        sessions += reply.stopped;
        position = Position::from_pb(reply.position).or(position);
        if !reply.more {
            return Ok(Json(Stopped { sessions, position }));
        }
    }
    let more = Problem::unavailable("more chats are left to stop than one call stops: press Stop everything again");
    Err(settled(sessions, more).await)
}

/// `problem`, answered only once the chats already stopped have had their dispatch window: the
/// authorizer's last call waits it out, and a loop that never reached that call must too.
async fn settled(stopped: u32, problem: Problem) -> Problem {
    if stopped > 0 {
        tokio::time::sleep(proto::STOP_SETTLE).await;
    }
    problem
}

/// What Stop everything stopped.
#[derive(Debug, Clone, serde::Serialize, JsonSchema)]
pub(crate) struct Stopped {
    /// Chats stopped now (chats stopped before are not counted again).
    pub sessions: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
}
