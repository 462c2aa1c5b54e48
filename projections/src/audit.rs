//! The audit log: one row per event, tenant-scoped. What an auditor reads: who, what, when, and
//! under which authorization, with what was clicked or typed taken from the view the event holds.

use grant_domain::catalogue::DecodeError;
use grant_domain::catalogue::{ActionView, ApprovalStatus, Author, AuthorizationKind, Event, Resolution, SignInPhase};
use ledger::RecordedEvent;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::{Cells, text_time};

/// The table it keeps, and the projection's name.
pub const TABLE: &str = "audit_log";

/// One audit row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub tenant_id: String,
    pub global_position: u64,
    pub tx_id: u64,
    pub recorded_at: OffsetDateTime,
    pub stream_id: String,
    pub event_type: String,
    pub principal: String,
    pub session_id: Option<String>,
    pub grant_id: Option<Uuid>,
    pub approval_id: Option<Uuid>,
    pub authorization: Option<String>,
    pub summary: String,
}

impl AuditRow {
    pub fn cells(&self) -> Cells {
        vec![
            self.tenant_id.clone(),
            self.global_position.to_string(),
            self.tx_id.to_string(),
            text_time(self.recorded_at),
            self.stream_id.clone(),
            self.event_type.clone(),
            self.principal.clone(),
            self.session_id.clone().unwrap_or_default(),
            self.grant_id.map(|g| g.to_string()).unwrap_or_default(),
            self.approval_id.map(|a| a.to_string()).unwrap_or_default(),
            self.authorization.clone().unwrap_or_default(),
            self.summary.clone(),
        ]
    }
}

/// What was acted on, in the card's words: the server-authored summary, then the element's name
/// and what was typed, chosen or pressed (already redacted where the field is sensitive). Those
/// two are the website's and the model's words: quoted with every quote, newline and control
/// character escaped, and labelled, so no page text can pass for a line of the log.
fn acted(view: &ActionView) -> String {
    let mut s = view.action_summary.clone();
    if let Some(name) = &view.element_name {
        s.push_str(&format!(", element named {name:?}"));
    }
    if let Some(detail) = &view.detail {
        s.push_str(&format!(", value {detail:?}"));
    }
    s
}

/// The authorization a use ran under, as the owner's activity rows say it.
pub fn authorization_text(kind: AuthorizationKind) -> &'static str {
    match kind {
        AuthorizationKind::BrowserTaskGrant => "Allowed by task permission",
        AuthorizationKind::StandingGrant => "Allowed by standing permission",
        AuthorizationKind::Approval => "Allowed by the owner",
        AuthorizationKind::Policy => "Allowed by policy",
    }
}

/// The audit row of `recorded`: the same function the worker writes with and `verify` replays.
pub fn row(recorded: &RecordedEvent) -> Result<AuditRow, DecodeError> {
    let event = Event::from_recorded(recorded)?;
    let (mut session, mut grant, mut approval, mut authorization) = (None, None, None, None);
    let summary = match &event {
        Event::SessionCreated(e) => {
            session = Some(e.session_id.clone());
            format!("Session started ({:?} surface)", e.surface).to_lowercase()
        }
        Event::SessionMessageRecorded(e) => {
            session = Some(e.session_id.clone());
            match e.author {
                Author::Owner => "Message from the owner".to_owned(),
                Author::Other => "Message from someone else".to_owned(),
            }
        }
        Event::SessionToolCalled(e) => {
            session = Some(e.session_id.clone());
            format!("Tool called: {}", e.tool)
        }
        Event::SessionDeleted(e) => {
            session = Some(e.session_id.clone());
            "Session deleted".to_owned()
        }
        Event::SessionStopped(e) => {
            session = Some(e.session_id.clone());
            "Agent stopped by the owner: nothing more runs until the owner's next message".to_owned()
        }
        Event::ProfileClaimed(e) => {
            format!("Browser profile {} recorded as {}'s", e.profile_id, e.owner_principal_id)
        }
        Event::ProfileGenerationAdvanced(e) => match e.phase {
            SignInPhase::Began => format!("Sign-in began on browser profile {}", e.profile_id),
            SignInPhase::Ready => format!("Sign-in ready on browser profile {}", e.profile_id),
        },
        Event::ProfileRevoked(e) => format!("Browser profile {} revoked", e.profile_id),
        Event::ProfileDeleted(e) => format!("Browser profile {} deleted", e.profile_id),
        Event::DeploymentScopesChanged(e) => {
            let scopes: Vec<String> = e.scopes.iter().map(|s| format!("{}{}", s.origin, s.path_prefix)).collect();
            let on = if e.task_grants_enabled { "on" } else { "off" };
            format!("Task grants {on}; scopes: {}", if scopes.is_empty() { "none".into() } else { scopes.join(", ") })
        }
        Event::ApprovalRequested(e) => {
            session = Some(e.session_id.clone());
            approval = Some(e.approval_id);
            let why = e.not_covered_reason.as_deref().map(|r| format!(" (not covered: {r})")).unwrap_or_default();
            format!("Asked the owner: {}{why}", acted(&e.view))
        }
        Event::ApprovalResolved(e) => {
            approval = Some(e.approval_id);
            grant = e.grant_id;
            match (e.resolution, e.status) {
                (Resolution::ApproveForTask, ApprovalStatus::Approved) => "Allowed for this task".to_owned(),
                (Resolution::ApproveOnce, ApprovalStatus::Approved) => "Allowed once".to_owned(),
                (Resolution::TakeOver, _) => "Taken over: the owner acts in the live tab".to_owned(),
                (Resolution::Withdrawn, _) => {
                    "Withdrawn: the agent stopped waiting, and the action will not run".to_owned()
                }
                _ => "Denied".to_owned(),
            }
        }
        Event::ApprovalExpired(e) => {
            approval = Some(e.approval_id);
            "Approval expired unanswered".to_owned()
        }
        Event::TaskGrantCreated(e) => {
            session = Some(e.session_id.clone());
            grant = Some(e.grant_id);
            approval = Some(e.approval_id);
            format!(
                "Task permission on {}{} for {} actions and {} typed characters until {}",
                e.scope.origin,
                e.scope.path_prefix,
                e.max_actions,
                e.max_typed_chars,
                text_time(e.expires_at)
            )
        }
        Event::ToolCallAuthorized(e) => {
            session = Some(e.session_id.clone());
            grant = e.grant_id;
            authorization = Some(authorization_text(e.authorization_kind).to_owned());
            match e.use_ordinal {
                Some(n) => format!("{} (use {n})", acted(&e.view)),
                None => acted(&e.view),
            }
        }
        Event::TaskGrantEnded(e) => {
            grant = Some(e.grant_id);
            format!("Task permission ended: {}", e.reason.code())
        }
        Event::StandingGrantPinned(e) => {
            format!(
                "Standing grant {} pinned on profile {} until {}",
                e.grant_id,
                e.profile_id,
                text_time(e.expires_at)
            )
        }
        Event::StandingGrantUnpinned(e) => format!("Standing grant {} unpinned", e.grant_id),
        Event::DeploymentPolicyChanged(e) => format!("Policy {} in force", e.policy_version),
        Event::ApprovalTokenIssued(e) => {
            approval = Some(e.approval_id);
            "Approval token issued".to_owned()
        }
        Event::ApprovalTokenRedeemed(e) => {
            approval = Some(e.approval_id);
            "Approval token redeemed".to_owned()
        }
        Event::RunEscalated(e) => {
            session = Some(e.session_id.clone());
            let mut text = format!("Run {} escalated: {}", e.run_id, e.reason);
            if !e.refs.is_empty() {
                text.push_str(&format!("; cites {}", e.refs.join(", ")));
            }
            if !e.snapshot_id.is_empty() {
                text.push_str(&format!("; in snapshot {}", e.snapshot_id));
            }
            if !e.detail.is_empty() {
                // The model's words, which may repeat the page's: quoted, never bare.
                text.push_str(&format!("; said {}", serde_json::Value::from(e.detail.as_str())));
            }
            if !e.screenshots.is_empty() {
                text.push_str(&format!("; screenshots {}", e.screenshots.join(", ")));
            }
            text
        }
        Event::RunStepped(e) => {
            session = Some(e.session_id.clone());
            format!(
                "Run {} step {}: {} → {} ({} ms, the model {} ms); evidence {}",
                e.run_id,
                e.step,
                e.tool,
                e.result,
                e.elapsed_ms,
                e.model_ms,
                serde_json::Value::from(e.evidence.as_str())
            )
        }
        Event::RunStarted(e) => {
            session = Some(e.session_id.clone());
            format!("Run {} started ({})", e.run_id, e.agent_version)
        }
        Event::RunRefused(e) => {
            session = Some(e.session_id.clone());
            format!("Run {} refused a turn: {}", e.run_id, e.rule)
        }
        Event::RunCompleted(e) => {
            session = Some(e.session_id.clone());
            format!("Run {} completed: reference {}", e.run_id, e.reference)
        }
        Event::TaskStarted(e) => {
            session = Some(e.session_id.clone());
            let what = if e.continues.is_some() { "Task continued" } else { "Task started" };
            format!("{what} by the owner: {} from {}", serde_json::Value::from(e.goal.as_str()), e.start_url)
        }
        Event::TaskClaimed(e) if e.renewal => {
            session = Some(e.session_id.clone());
            format!("Task kept by worker {} as run {} (attempt {})", e.holder, e.run_id, e.attempt)
        }
        Event::TaskClaimed(e) if e.attempt > 1 => {
            session = Some(e.session_id.clone());
            format!("Task taken over by worker {} as run {} (attempt {})", e.holder, e.run_id, e.attempt)
        }
        Event::TaskClaimed(e) => {
            session = Some(e.session_id.clone());
            format!("Task taken by worker {} as run {}", e.holder, e.run_id)
        }
    };
    Ok(AuditRow {
        tenant_id: recorded.tenant_id.as_str().to_owned(),
        global_position: recorded.global_position,
        tx_id: recorded.tx_id,
        recorded_at: recorded.recorded_at,
        stream_id: recorded.stream_id.as_str().to_owned(),
        event_type: recorded.event_type.clone(),
        principal: recorded.metadata.principal.clone(),
        session_id: session,
        grant_id: grant,
        approval_id: approval,
        authorization,
        summary,
    })
}

/// Writes `events`' rows into `table` (the live table or a rebuild's next one), inside `tx`.
pub(crate) async fn apply(
    tx: &tokio_postgres::Transaction<'_>,
    table: &str,
    events: &[ledger::RecordedEvent],
) -> Result<(), crate::Error> {
    let rows = events.iter().map(row).collect::<Result<Vec<_>, _>>()?;
    let col = |f: &dyn Fn(&AuditRow) -> String| rows.iter().map(f).collect::<Vec<String>>();
    let opt = |f: &dyn Fn(&AuditRow) -> Option<String>| rows.iter().map(f).collect::<Vec<_>>();
    let positions: Vec<i64> = rows.iter().map(|r| i64::try_from(r.global_position).unwrap_or(i64::MAX)).collect();
    let times: Vec<OffsetDateTime> = rows.iter().map(|r| r.recorded_at).collect();
    let grants: Vec<Option<uuid::Uuid>> = rows.iter().map(|r| r.grant_id).collect();
    let approvals: Vec<Option<uuid::Uuid>> = rows.iter().map(|r| r.approval_id).collect();
    tx.execute(
        &format!(
            "INSERT INTO {table} (tenant_id, global_position, tx_id, recorded_at, stream_id, event_type, \
                 principal, session_id, grant_id, approval_id, authorization_text, summary) \
                 SELECT t, p, x::xid8, r, s, e, pr, se, g, a, au, su FROM unnest($1::text[], $2::int8[], \
                 $3::text[], $4::timestamptz[], $5::text[], $6::text[], $7::text[], $8::text[], $9::uuid[], \
                 $10::uuid[], $11::text[], $12::text[]) AS u(t, p, x, r, s, e, pr, se, g, a, au, su)"
        ),
        &[
            &col(&|r| r.tenant_id.clone()),
            &positions,
            &col(&|r| r.tx_id.to_string()),
            &times,
            &col(&|r| r.stream_id.clone()),
            &col(&|r| r.event_type.clone()),
            &col(&|r| r.principal.clone()),
            &opt(&|r| r.session_id.clone()),
            &grants,
            &approvals,
            &opt(&|r| r.authorization.clone()),
            &col(&|r| r.summary.clone()),
        ],
    )
    .await?;
    Ok(())
}

/// One row of a session's activity, as the owner's routes show it.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivityRow {
    pub global_position: u64,
    pub recorded_at: OffsetDateTime,
    pub event_type: String,
    /// Who recorded it: the owner who answered a card, the worker that acted.
    pub principal: String,
    pub authorization: Option<String>,
    pub summary: String,
    /// The card the row is about, if any: a card's answer and its act join on it.
    pub approval_id: Option<uuid::Uuid>,
}

/// The newest `limit` activity rows of a session of `tenant`, newest first: its own rows, the
/// answers to its approvals and the ends of its grants (which name the approval or the grant,
/// not the session).
pub async fn session_activity(
    client: &impl tokio_postgres::GenericClient,
    tenant: &str,
    session_id: &str,
    limit: i64,
) -> Result<Vec<ActivityRow>, crate::Error> {
    let rows = client
        .query(
            "SELECT global_position, recorded_at, event_type, authorization_text, summary, principal, approval_id \
             FROM audit_log a \
             WHERE a.tenant_id = $1 AND (a.session_id = $2 \
               OR a.approval_id IN (SELECT r.approval_id FROM audit_log r \
                 WHERE r.tenant_id = $1 AND r.session_id = $2 AND r.approval_id IS NOT NULL) \
               OR a.grant_id IN (SELECT r.grant_id FROM audit_log r \
                 WHERE r.tenant_id = $1 AND r.session_id = $2 AND r.grant_id IS NOT NULL)) \
             ORDER BY global_position DESC LIMIT $3",
            &[&tenant, &session_id, &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ActivityRow {
            global_position: u64::try_from(r.get::<_, i64>(0)).unwrap_or_default(),
            recorded_at: r.get(1),
            event_type: r.get(2),
            authorization: r.get(3),
            summary: r.get(4),
            principal: r.get(5),
            approval_id: r.get(6),
        })
        .collect())
}

/// Whether the audit view has applied every event up to and including `at` (a write's answer).
pub async fn audit_reached(
    client: &impl tokio_postgres::GenericClient,
    at: ledger::Checkpoint,
) -> Result<bool, crate::Error> {
    let row = client
        .query_one(
            "SELECT COALESCE((SELECT (tx_id, position) >= ($1::text::xid8, $2) FROM projection_checkpoints \
             WHERE projection = $3), false)",
            &[&at.tx_id.to_string(), &i64::try_from(at.position).unwrap_or(i64::MAX), &TABLE],
        )
        .await?;
    Ok(row.get(0))
}
