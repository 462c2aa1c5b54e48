//! The owner's Stop for the agent in a chat session, and Stop everything for all of them: served
//! whatever the task-grant flag, since they only take authority away.

#[allow(clippy::wildcard_imports)] // the routes' own helpers and types
use super::*;

pub(super) async fn stop_session(call: Call, Seg(session_id): Seg, req: Request) -> Answer<Written> {
    let (owner, _) = call.owner(&STOP_SESSION).await?;
    call.query::<NoQuery>()?;
    entity_id("session_id", &session_id)?;
    grants::empty_body(req).await?;
    let req = pb::StopSessionRequest { session_id };
    let reply = call.gateway.authorizer().stop_session(call.grpc(&owner, req)?).await.map_err(status)?;
    Ok(Json(Written { position: Position::from_pb(reply.into_inner().position) }))
}

/// The most calls one Stop everything makes (each stops up to a batch of sessions).
const STOP_CALLS: usize = 100;

pub(super) async fn stop_everything(call: Call, req: Request) -> Answer<Stopped> {
    let (owner, _) = call.owner(&STOP_EVERYTHING).await?;
    call.query::<NoQuery>()?;
    grants::empty_body(req).await?;
    let (mut sessions, mut position) = (0, None);
    for _ in 0..STOP_CALLS {
        let req = call.grpc(&owner, pb::StopEverythingRequest {})?;
        let reply = call.gateway.authorizer().stop_everything(req).await.map_err(status)?.into_inner();
        sessions += reply.stopped;
        position = Position::from_pb(reply.position).or(position);
        if !reply.more {
            return Ok(Json(Stopped { sessions, position }));
        }
    }
    Err(Problem::unavailable("more chats are left to stop than one call stops: press Stop everything again"))
}

/// What Stop everything stopped.
#[derive(Debug, Clone, serde::Serialize, JsonSchema)]
pub(crate) struct Stopped {
    /// Chats stopped now (chats stopped before are not counted again).
    pub sessions: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<Position>,
}
