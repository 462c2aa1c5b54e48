//! Tasks the owner starts in a chat, and the workers that run them. The owner's words come only
//! through the gateway (`StartTask`, `ContinueTask`); a worker takes a task for a lease it renews
//! (`ClaimTask`, `RenewTask`), recorded in the session's stream, so two replicas never both take
//! it and a replica that dies loses it to another once its lease has passed. A run acts only while
//! it holds its task (`Session::runs_its_task`, checked by `Authorize` and token redemption).

use grant_domain::catalogue::{Author, Event, SessionMessageRecorded, TaskStarted};
use grant_domain::model::{ApprovalState, World};
use proto::v1 as pb;
use time::OffsetDateTime;
use tonic::{Code, Request, Response, Status};

use crate::auth::Rpc;
use crate::domain::Command;
use crate::store::{Backend, Need};

use super::convert::{id, unix_ms};
use super::shared::AuthorizerService;
use super::status::{invalid, status, with_reason};

/// An agent key drives its own run, never the owner's tasks.
fn not_an_agent_key(caller: &credentials::Caller) -> Result<(), Status> {
    if caller.binding.is_some() {
        let says = "an agent key runs only its own run";
        return Err(with_reason(Code::PermissionDenied, transport::CALLER_NOT_PERMITTED, says.into()));
    }
    Ok(())
}

/// One line of the owner's, as the record keeps it: trimmed, not empty, no control, format or
/// direction characters (it is shown back to the owner and to the model).
fn line(field: &'static str, text: &str) -> Result<String, Status> {
    let t = text.trim();
    if t.is_empty() || t.chars().any(proto::limits::hidden_char) {
        return Err(invalid(field, "is one line of text without control, format or direction characters"));
    }
    Ok(t.to_owned())
}

/// A task's state as the owner reads it.
fn state(t: &grant_domain::model::SessionTask, now: OffsetDateTime) -> &'static str {
    if t.completed {
        "done"
    } else if t.ended {
        "ended"
    } else if t.lease_until.is_some_and(|u| u > now) {
        "running"
    } else {
        // Not taken yet, or its worker stopped renewing it: the next worker takes it.
        "waiting"
    }
}

fn chat(w: &World, s: &grant_domain::model::Session) -> pb::Chat {
    let id = &s.created.session_id;
    let grant = s.active_grant.and_then(|g| w.grants.get(&g));
    pb::Chat {
        session_id: id.clone(),
        stopped: s.stopped,
        pending_cards: u32::try_from(
            w.approvals.values().filter(|a| &a.requested.session_id == id && a.state == ApprovalState::Pending).count(),
        )
        .unwrap_or(u32::MAX),
        grant_expires_at_ms: grant.map_or(0, |g| unix_ms(g.created.expires_at)),
        grant_actions_used: grant.map_or(0, |g| g.actions_used),
        task: s.task.as_ref().map(|t| pb::ChatTask {
            task_id: t.started.task_id.clone(),
            goal: t.started.goal.clone(),
            subgoals: t.started.subgoals.clone(),
            start_url: t.started.start_url.clone(),
            started_at_ms: unix_ms(t.started.started_at),
            state: state(t, OffsetDateTime::now_utc()).into(),
            run_id: t.run_id.clone().unwrap_or_default(),
        }),
        has_browser: s.created.browser_profile_id.is_some() && w.session_profile_is_own(s),
    }
}

impl<B: Backend + 'static> AuthorizerService<B> {
    pub(super) async fn start_task_call(
        &self,
        req: Request<pb::StartTaskRequest>,
    ) -> Result<Response<pb::WriteReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::StartTask).await?;
        let r = req.into_inner();
        let session_id = id("session_id", &r.session_id)?;
        let message_id = id("message_id", &r.message_id)?;
        let goal = line("goal", &r.goal)?;
        if r.subgoals.is_empty() {
            return Err(invalid("subgoals", "names at least one step"));
        }
        let subgoals = r.subgoals.iter().map(|s| line("subgoals", s)).collect::<Result<Vec<_>, _>>()?;
        let start_url = super::agents::start_url(&r.start_url)?;
        let message = SessionMessageRecorded { session_id: session_id.clone(), message_id, author: Author::Owner };
        let task = TaskStarted {
            session_id,
            task_id: uuid::Uuid::new_v4().simple().to_string(),
            message_id: message.message_id.clone(),
            goal,
            subgoals,
            start_url,
            continues: None,
            started_at: grant_domain::model::stored(OffsetDateTime::now_utc()),
        };
        let principal = caller.principal;
        self.write(&authority, Command::StartTask { principal_id: principal.clone(), message, task }, &principal).await
    }

    pub(super) async fn continue_task_call(
        &self,
        req: Request<pb::ContinueTaskRequest>,
    ) -> Result<Response<pb::WriteReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::ContinueTask).await?;
        let r = req.into_inner();
        let session_id = id("session_id", &r.session_id)?;
        let message_id = id("message_id", &r.message_id)?;
        let message = SessionMessageRecorded { session_id, message_id, author: Author::Owner };
        let principal = caller.principal;
        let command = Command::ContinueTask {
            principal_id: principal.clone(),
            message,
            task_id: uuid::Uuid::new_v4().simple().to_string(),
            now: OffsetDateTime::now_utc(),
        };
        self.write(&authority, command, &principal).await
    }

    pub(super) async fn list_chats_call(
        &self,
        req: Request<pb::ListChatsRequest>,
    ) -> Result<Response<pb::ListChatsReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::ListChats).await?;
        let principal = caller.principal;
        let (mut chats, sites) = authority
            .read(Need::PrincipalChats(&principal), |w| {
                let chats: Vec<pb::Chat> = w
                    .sessions
                    .values()
                    .filter(|s| s.created.principal_id == principal && !s.deleted)
                    .map(|s| chat(w, s))
                    .collect();
                let sites: Vec<String> =
                    w.settings.scopes.iter().map(|s| format!("{}{}", s.origin, s.path_prefix)).collect();
                (chats, sites)
            })
            .await
            .map_err(status)?;
        // Newest task first; chats without one after, by id.
        chats.sort_by(|a, b| {
            let at = |c: &pb::Chat| c.task.as_ref().map_or(i64::MIN, |t| t.started_at_ms);
            at(b).cmp(&at(a)).then_with(|| a.session_id.cmp(&b.session_id))
        });
        Ok(Response::new(pb::ListChatsReply { chats, sites }))
    }

    pub(super) async fn claim_task_call(
        &self,
        req: Request<pb::ClaimTaskRequest>,
    ) -> Result<Response<pb::ClaimTaskReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::ClaimTask).await?;
        not_an_agent_key(&caller)?;
        let holder = id("holder", &req.into_inner().holder)?;
        let principal = caller.principal;
        let (now, lease) = (OffsetDateTime::now_utc(), self.task_lease);
        let events = authority
            .execute(Command::ClaimTask { principal_id: principal.clone(), holder, now, lease }, &principal)
            .await
            .map_err(status)?;
        // Withdrawn cards of the attempt before may come first.
        let claimed = events.into_iter().find_map(|e| match e {
            Event::TaskClaimed(c) => Some(c),
            _ => None,
        });
        let Some(claimed) = claimed else {
            return Ok(Response::new(pb::ClaimTaskReply { task: None }));
        };
        let session_id = claimed.session_id.clone();
        let task = authority
            .read(Need::Session(&session_id), |w| {
                let s = w.sessions.get(&session_id)?;
                let t = s.task.as_ref()?;
                Some(pb::ClaimedTask {
                    session_id: session_id.clone(),
                    task_id: t.started.task_id.clone(),
                    run_id: claimed.run_id.clone(),
                    attempt: claimed.attempt,
                    goal: t.started.goal.clone(),
                    subgoals: t.started.subgoals.clone(),
                    start_url: t.started.start_url.clone(),
                    browser_profile_id: s.created.browser_profile_id.clone().unwrap_or_default(),
                    lease_until_ms: unix_ms(claimed.lease_until),
                    owner: s.created.principal_id.clone(),
                })
            })
            .await
            .map_err(status)?;
        tracing::info!(session_id = %session_id, run_id = %claimed.run_id, attempt = claimed.attempt, "task taken");
        Ok(Response::new(pb::ClaimTaskReply { task }))
    }

    pub(super) async fn renew_task_call(
        &self,
        req: Request<pb::RenewTaskRequest>,
    ) -> Result<Response<pb::RenewTaskReply>, Status> {
        let (caller, authority) = self.caller(&req, Rpc::RenewTask).await?;
        not_an_agent_key(&caller)?;
        let r = req.into_inner();
        let command = Command::RenewTask {
            principal_id: caller.principal.clone(),
            session_id: id("session_id", &r.session_id)?,
            run_id: id("run_id", &r.run_id)?,
            holder: id("holder", &r.holder)?,
            now: OffsetDateTime::now_utc(),
            lease: self.task_lease,
        };
        let events = authority.execute(command, &caller.principal).await.map_err(status)?;
        let until = events.iter().find_map(|e| match e {
            Event::TaskClaimed(c) => Some(unix_ms(c.lease_until)),
            _ => None,
        });
        Ok(Response::new(pb::RenewTaskReply { lease_until_ms: until.unwrap_or_default() }))
    }
}
