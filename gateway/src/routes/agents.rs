//! Agent clients the owner connects to one chat (an MCP client such as a coding assistant): a
//! key made here, shown once, that lets that client drive this chat's browser and nothing else;
//! every act it asks for is decided, fenced and recorded as the harness's are. Served whatever
//! the task-grant flag: a key lends no authority the owner's cards do not grant.

use axum::Json;
use axum::extract::Request;
use credentials::Scope;
use proto::v1 as pb;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::rfc3339_ms;
use crate::call::{Answer, Call, NoQuery, Seg, entity_id, status, uuid};
use crate::docs::{Doc, doc, schema};
use crate::guard;

pub(crate) const CONNECT_AGENT: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    body: Some(schema::<Connect>),
    ..doc(
        "post",
        "/v1/sessions/{session_id}/agents",
        "Makes a key for one agent client (an MCP client) to drive this chat's browser; the key is shown this \
         once. Only when browser_only says the client has no tools besides this browser can its actions be \
         offered or run under a task permission; otherwise each is allowed once",
        schema::<Connected>,
    )
};
pub(crate) const LIST_AGENTS: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    ..doc("get", "/v1/sessions/{session_id}/agents", "The agent keys made for a chat, newest first", schema::<Agents>)
};
pub(crate) const DISCONNECT_AGENT: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    write: true,
    ..doc(
        "post",
        "/v1/agents/{agent_id}/disconnect",
        "Revokes an agent key: the client's next call is refused",
        schema::<Disconnected>,
    )
};

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Connect {
    /// The owner says the client has no tools besides this browser (no files, mail, shell or
    /// other servers). Without it the chat's task permission never covers this client's acts.
    pub(crate) browser_only: bool,
    /// The page the app's browser opens at: an https URL.
    pub(crate) start_url: String,
    /// How long the key lives, 1 to 1440 minutes (60 when absent).
    #[serde(default)]
    pub(crate) minutes: Option<u32>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Connected {
    pub(crate) agent_id: String,
    /// The bearer key, shown this once.
    pub(crate) key: String,
    pub(crate) expires_at: String,
    pub(crate) browser_only: bool,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Agent {
    pub(crate) agent_id: String,
    pub(crate) browser_only: bool,
    pub(crate) start_url: String,
    pub(crate) expires_at: String,
    /// When the owner revoked it, if they did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) revoked_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Agents {
    pub(crate) agents: Vec<Agent>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct Disconnected {
    /// False when it was revoked already.
    pub(crate) disconnected: bool,
}

pub(super) async fn connect_agent(call: Call, Seg(session_id): Seg, req: Request) -> Answer<Connected> {
    let (owner, _) = call.owner(&CONNECT_AGENT).await?;
    call.query::<NoQuery>()?;
    entity_id("session_id", &session_id)?;
    let body: Connect = guard::json_body(req).await?;
    let minutes = body.minutes.unwrap_or(60);
    if !(1..=proto::limits::MAX_AGENT_MINUTES).contains(&u64::from(minutes)) {
        return Err(crate::problem::Problem::invalid("minutes", "is 1 to 1440"));
    }
    if body.start_url.len() > proto::limits::MAX_URL_CHARS {
        return Err(crate::problem::Problem::invalid("start_url", "is too long"));
    }
    let req =
        pb::ConnectAgentRequest { session_id, browser_only: body.browser_only, minutes, start_url: body.start_url };
    let reply = call.gateway.authorizer().connect_agent(call.grpc(&owner, req)?).await.map_err(status)?.into_inner();
    Ok(Json(Connected {
        agent_id: reply.credential_id,
        key: reply.token,
        expires_at: rfc3339_ms(reply.expires_at_ms),
        browser_only: body.browser_only,
    }))
}

pub(super) async fn list_agents(call: Call, Seg(session_id): Seg) -> Answer<Agents> {
    let (owner, _) = call.owner(&LIST_AGENTS).await?;
    call.query::<NoQuery>()?;
    entity_id("session_id", &session_id)?;
    let req = pb::ListAgentsRequest { session_id };
    let reply = call.gateway.authorizer().list_agents(call.grpc(&owner, req)?).await.map_err(status)?.into_inner();
    let agents = reply
        .agents
        .into_iter()
        .map(|a| Agent {
            agent_id: a.credential_id,
            browser_only: a.browser_only,
            start_url: a.start_url,
            expires_at: rfc3339_ms(a.expires_at_ms),
            revoked_at: (a.revoked_at_ms != 0).then(|| rfc3339_ms(a.revoked_at_ms)),
        })
        .collect();
    Ok(Json(Agents { agents }))
}

pub(super) async fn disconnect_agent(call: Call, Seg(agent_id): Seg, req: Request) -> Answer<Disconnected> {
    let (owner, _) = call.owner(&DISCONNECT_AGENT).await?;
    call.query::<NoQuery>()?;
    uuid("agent_id", &agent_id)?;
    super::grants::empty_body(req).await?;
    let req = pb::DisconnectAgentRequest { credential_id: agent_id };
    let reply = call.gateway.authorizer().disconnect_agent(call.grpc(&owner, req)?).await.map_err(status)?;
    Ok(Json(Disconnected { disconnected: reply.into_inner().disconnected }))
}
