//! Agent clients the owner connects to one chat (an MCP client): each is a worker credential
//! bound to that chat, made, listed and revoked through the gateway for the owner, and shown
//! once. The courier in front of the client learns its chat from `DescribeCaller`.

use credentials::{Binding, Caller};
use proto::v1 as pb;
use time::{Duration, OffsetDateTime};
use tonic::{Request, Response, Status};

use crate::auth::Rpc;
use crate::store::{Backend, Need};

use super::convert::id;
use super::shared::{AuthorizerService, own_session};
use super::status::invalid;

/// The page an agent's browser opens at: an absolute https URL with no credentials in it.
pub(super) fn start_url(url: &str) -> Result<String, Status> {
    let parsed = url::Url::parse(url).map_err(|_| invalid("start_url", "is an absolute https URL"))?;
    if parsed.scheme() != "https"
        || parsed.host_str().is_none()
        || !parsed.username().is_empty()
        || parsed.password().is_some()
    {
        return Err(invalid("start_url", "is an https URL with a host and no user name or password"));
    }
    Ok(parsed.to_string())
}

/// A credential's life when the owner names none.
const DEFAULT_MINUTES: u32 = 60;

fn ms(t: Option<OffsetDateTime>) -> i64 {
    t.map_or(0, super::convert::unix_ms)
}

fn unavailable(e: credentials::AuthError) -> Status {
    transport::auth_status(e)
}

impl<B: Backend + 'static> AuthorizerService<B> {
    pub(super) async fn connect_agent_call(
        &self,
        req: Request<pb::ConnectAgentRequest>,
    ) -> Result<Response<pb::ConnectAgentReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::ConnectAgent).await?;
        let r = req.into_inner();
        let session_id = id("session_id", &r.session_id)?;
        let minutes = if r.minutes == 0 { DEFAULT_MINUTES } else { r.minutes };
        if u64::from(minutes) > proto::limits::MAX_AGENT_MINUTES {
            return Err(invalid("minutes", &format!("is 1 to {}", proto::limits::MAX_AGENT_MINUTES)));
        }
        let start_url = start_url(&r.start_url)?;
        let principal = caller.principal.clone();
        // The chat's own browser profile: the only one the key may open.
        let profile = authority
            .read(Need::Session(&session_id), |w| {
                w.session_of(&session_id, &principal).map(|s| s.created.browser_profile_id.clone()).ok()
            })
            .await
            .map_err(super::status::status)?
            .ok_or_else(|| Status::not_found("session not found"))?
            .ok_or_else(|| invalid("session_id", "names a chat with no browser profile: no browser can open for it"))?;
        let token = credentials::new_token();
        let expires_at = OffsetDateTime::now_utc() + Duration::minutes(i64::from(minutes));
        let binding = Binding { session_id, browser_only: r.browser_only, start_url, browser_profile_id: profile };
        let made = self
            .credentials
            .register_bound(&token, authority.tenant().as_str(), &caller.principal, binding, expires_at)
            .await
            .map_err(unavailable)?;
        tracing::info!(credential_id = %made.credential_id, browser_only = r.browser_only, "agent connected");
        Ok(Response::new(pb::ConnectAgentReply {
            credential_id: made.credential_id.to_string(),
            token,
            expires_at_ms: ms(made.expires_at),
        }))
    }

    pub(super) async fn list_agents_call(
        &self,
        req: Request<pb::ListAgentsRequest>,
    ) -> Result<Response<pb::ListAgentsReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::ListAgents).await?;
        let session_id = id("session_id", &req.into_inner().session_id)?;
        own_session(&authority, &session_id, &caller.principal).await?;
        let agents = self
            .agents_of(&caller, authority.tenant().as_str())
            .await?
            .into_iter()
            .filter(|(_, b)| b.session_id == session_id)
            .map(|(c, b)| pb::Agent {
                credential_id: c.credential_id.to_string(),
                browser_only: b.browser_only,
                expires_at_ms: ms(c.expires_at),
                revoked_at_ms: ms(c.revoked_at),
                start_url: b.start_url,
            })
            .collect();
        Ok(Response::new(pb::ListAgentsReply { agents }))
    }

    pub(super) async fn disconnect_agent_call(
        &self,
        req: Request<pb::DisconnectAgentRequest>,
    ) -> Result<Response<pb::DisconnectAgentReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::DisconnectAgent).await?;
        let r = req.into_inner();
        let credential_id: uuid::Uuid = r.credential_id.parse().map_err(|_| invalid("credential_id", "is a UUID"))?;
        let tenant = authority.tenant().as_str();
        // Another owner's agent, or a credential that is no agent's, is not there.
        if self.agent_of(&caller, tenant, credential_id).await?.is_none() {
            return Err(Status::not_found("agent not found"));
        }
        let disconnected = self.credentials.revoke(tenant, credential_id).await.map_err(unavailable)?;
        Ok(Response::new(pb::DisconnectAgentReply { disconnected }))
    }

    pub(super) async fn describe_caller_call(
        &self,
        req: Request<pb::DescribeCallerRequest>,
    ) -> Result<Response<pb::DescribeCallerReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::DescribeCaller).await?;
        let Some(b) = caller.binding else { return Ok(Response::new(pb::DescribeCallerReply::default())) };
        let principal = caller.principal;
        let live = authority
            .read(Need::Session(&b.session_id), |w| w.session_of(&b.session_id, &principal).is_ok())
            .await
            .map_err(super::status::status)?;
        if !live {
            return Err(Status::not_found("the chat this key was made for is not there any more"));
        }
        Ok(Response::new(pb::DescribeCallerReply {
            session_id: b.session_id,
            browser_only: b.browser_only,
            start_url: b.start_url,
            browser_profile_id: b.browser_profile_id,
            agent_id: caller.credential_id.to_string(),
            run_id: Binding::run_id(caller.credential_id),
        }))
    }

    /// Revokes the agent key whose run `run_id` is (`mcp-<agent id>`), if it is one of the owner's:
    /// its run is over. Best effort: a failure is logged, and the key's own run ends anyway.
    pub(super) async fn end_agent_of_run(&self, owner: &Caller, tenant: &str, run_id: &str) {
        let prefix = credentials::AGENT_RUN_PREFIX;
        let Some(agent) = run_id.strip_prefix(prefix).and_then(|id| id.parse::<uuid::Uuid>().ok()) else { return };
        match self.agent_of(owner, tenant, agent).await {
            Ok(Some(_)) => {
                if let Err(e) = self.credentials.revoke(tenant, agent).await {
                    tracing::warn!(%agent, error = %e, "an ended agent key was not revoked");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(%agent, error = %e, "an ended agent key was not looked up"),
        }
    }

    /// Revokes every agent key the owner made for chat `session_id`. Best effort, as above.
    pub(super) async fn end_agents_of_chat(&self, owner: &Caller, tenant: &str, session_id: &str) {
        match self.agents_of(owner, tenant).await {
            Ok(agents) => {
                for (c, _) in agents.iter().filter(|(c, b)| b.session_id == session_id && c.revoked_at.is_none()) {
                    if let Err(e) = self.credentials.revoke(tenant, c.credential_id).await {
                        tracing::warn!(agent = %c.credential_id, error = %e, "a deleted chat's agent key was not revoked");
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "a deleted chat's agent keys were not looked up"),
        }
    }

    /// The binding of agent key `id`, if it is one of the owner `caller` acts for.
    async fn agent_of(&self, caller: &Caller, tenant: &str, id: uuid::Uuid) -> Result<Option<Binding>, Status> {
        let found = self.credentials.find_id(tenant, id).await.map_err(unavailable)?;
        Ok(found.filter(|c| c.principal.as_deref() == Some(caller.principal.as_str())).and_then(|c| c.binding))
    }

    /// The agent credentials of the owner `caller` acts for, newest first.
    async fn agents_of(
        &self,
        caller: &Caller,
        tenant: &str,
    ) -> Result<Vec<(credentials::Credential, Binding)>, Status> {
        let all = self.credentials.list(tenant).await.map_err(unavailable)?;
        Ok(all
            .into_iter()
            .filter(|c| c.principal.as_deref() == Some(caller.principal.as_str()))
            .filter_map(|c| c.binding.clone().map(|b| (c, b)))
            .collect())
    }
}
