//! The owner's Stop for the agent in a chat session: served whatever the task-grant flag, since
//! it only takes authority away.

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
