//! The owner's chats: the inbox (what waits in each), and the owner's words in one: a task
//! started, or "continue". Only these routes record the owner's messages, on the owner's own
//! credential; a worker never writes as the owner. Served whatever the task-grant flag.

use axum::Json;
use axum::extract::Request;
use credentials::Scope;
use proto::v1 as pb;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::grants::empty_body;
use crate::api::{Position, Written, rfc3339_ms};
use crate::call::{Answer, Call, NoQuery, Seg, entity_id, status};
use crate::docs::{Doc, doc, schema};
use crate::guard;
use crate::problem::Problem;

pub(crate) const LIST_CHATS: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    ..doc(
        "get",
        "/v1/chats",
        "The owner's chats, newest task first, with what waits in each; and the sites a task may start in",
        schema::<Inbox>,
    )
};
pub(crate) const START_TASK: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    body: Some(schema::<NewTask>),
    ..doc(
        "post",
        "/v1/sessions/{session_id}/tasks",
        "The owner's message that starts a task in a chat: recorded as the owner's, it lifts a Stop, replaces \
         the chat's task, and a worker runs it. Each act is still decided and may ask on a card",
        schema::<Written>,
    )
};
pub(crate) const CONTINUE_TASK: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    ..doc(
        "post",
        "/v1/sessions/{session_id}/continue",
        "The owner's \"continue\": lifts a Stop, and runs the chat's task again once it stopped before it was \
         done (a finished task is refused: start a new one)",
        schema::<Written>,
    )
};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NewTask {
    /// What the owner asks for, in one line.
    pub(crate) goal: String,
    /// The steps, given to the agent one at a time (1 to 20 lines).
    pub(crate) subgoals: Vec<String>,
    /// Where the browser starts: a page inside one of the sites the inbox lists.
    pub(crate) start_url: String,
    /// The client's own id for this message: a retry with the same id starts nothing more.
    #[serde(default)]
    pub(crate) message_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Permission {
    pub(crate) expires_at: String,
    pub(crate) actions_used: u32,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Task {
    pub(crate) goal: String,
    pub(crate) subgoals: Vec<String>,
    pub(crate) start_url: String,
    pub(crate) started_at: String,
    /// `waiting` (for a worker), `running`, `ended` (stopped before it was done) or `done`.
    pub(crate) state: String,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Chat {
    pub(crate) session_id: String,
    pub(crate) stopped: bool,
    pub(crate) waiting_cards: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) permission: Option<Permission>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) task: Option<Task>,
    /// A task can run here: the chat has a browser of the owner's.
    pub(crate) has_browser: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Inbox {
    pub(crate) chats: Vec<Chat>,
    /// The sites a task may start in (origin and path).
    pub(crate) sites: Vec<String>,
}

pub(super) async fn list_chats(call: Call) -> Answer<Inbox> {
    let (owner, _) = call.owner(&LIST_CHATS).await?;
    call.query::<NoQuery>()?;
    let reply = call
        .gateway
        .authorizer()
        .list_chats(call.grpc(&owner, pb::ListChatsRequest {})?)
        .await
        .map_err(status)?
        .into_inner();
    let chats = reply
        .chats
        .into_iter()
        .map(|c| Chat {
            session_id: c.session_id,
            stopped: c.stopped,
            waiting_cards: c.pending_cards,
            permission: (c.grant_expires_at_ms != 0).then(|| Permission {
                expires_at: rfc3339_ms(c.grant_expires_at_ms),
                actions_used: c.grant_actions_used,
            }),
            task: c.task.map(|t| Task {
                goal: t.goal,
                subgoals: t.subgoals,
                start_url: t.start_url,
                started_at: rfc3339_ms(t.started_at_ms),
                state: t.state,
            }),
            has_browser: c.has_browser,
        })
        .collect();
    Ok(Json(Inbox { chats, sites: reply.sites }))
}

/// A message id of the gateway's own: one per owner's message.
fn message_id() -> String {
    format!("owner-{}", uuid::Uuid::new_v4().simple())
}

pub(super) async fn start_task(call: Call, Seg(session_id): Seg, req: Request) -> Answer<Written> {
    let (owner, _) = call.owner(&START_TASK).await?;
    call.query::<NoQuery>()?;
    entity_id("session_id", &session_id)?;
    let body: NewTask = guard::json_body(req).await?;
    let max = proto::limits::MAX_GOAL_CHARS;
    if body.goal.chars().count() > max {
        return Err(Problem::invalid("goal", format!("is at most {max} characters")));
    }
    if body.subgoals.is_empty() || body.subgoals.len() > proto::limits::MAX_SUBGOALS {
        return Err(Problem::invalid("subgoals", format!("is 1 to {} steps", proto::limits::MAX_SUBGOALS)));
    }
    if body.subgoals.iter().any(|s| s.chars().count() > max) {
        return Err(Problem::invalid("subgoals", format!("each is at most {max} characters")));
    }
    if body.start_url.len() > proto::limits::MAX_URL_CHARS {
        return Err(Problem::invalid("start_url", "is too long"));
    }
    let message = match body.message_id {
        Some(id) => {
            entity_id("message_id", &id)?;
            format!("owner-{id}")
        }
        None => message_id(),
    };
    let req = pb::StartTaskRequest {
        session_id,
        message_id: message,
        goal: body.goal,
        subgoals: body.subgoals,
        start_url: body.start_url,
    };
    let reply = call.gateway.authorizer().start_task(call.grpc(&owner, req)?).await.map_err(status)?;
    Ok(Json(Written { position: Position::from_pb(reply.into_inner().position) }))
}

pub(super) async fn continue_task(call: Call, Seg(session_id): Seg, req: Request) -> Answer<Written> {
    let (owner, _) = call.owner(&CONTINUE_TASK).await?;
    call.query::<NoQuery>()?;
    entity_id("session_id", &session_id)?;
    empty_body(req).await?;
    let req = pb::ContinueTaskRequest { session_id, message_id: message_id() };
    let reply = call.gateway.authorizer().continue_task(call.grpc(&owner, req)?).await.map_err(status)?;
    Ok(Json(Written { position: Position::from_pb(reply.into_inner().position) }))
}
