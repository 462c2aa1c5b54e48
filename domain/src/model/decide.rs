//! Commands decided into events.

use crate::catalogue::{
    ApprovalExpired, ApprovalResolved, ApprovalStatus, ApprovalTokenIssued, ApprovalTokenRedeemed,
    DeploymentPolicyChanged, DeploymentScopesChanged, EndReason, Event, ProfileDeleted, ProfileGenerationAdvanced,
    ProfileRevoked, Resolution, RunCompleted, RunEscalated, RunRefused, RunStarted, RunStepped, SessionCreated,
    SessionDeleted, SessionMessageRecorded, SessionStopped, SessionToolCalled, SignInPhase, SiteScope,
    StandingGrantPinned, StandingGrantUnpinned, TaskClaimed, TaskGrantCreated, TaskStarted, TokenBinding,
};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::limits::{GRANT_DURATION, MAX_ACTIONS, MAX_TYPED_CHARS};
use crate::scopes::TaskGrantSettings;

use super::authorize::{STANDING_GRANT_DURATION, StandingPin, session_ineligible};
use super::error::{Conflict, DomainError};
use super::world::{Approval, ApprovalState, Session, TASK_RUN_PREFIX, Versions, World, stored};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    CreateSession(SessionCreated),
    RecordMessage(SessionMessageRecorded),
    DeleteSession {
        session_id: String,
        principal_id: String,
    },
    /// A sign-in began or became ready: the generation advances and every grant on it ends.
    /// A profile created for its owner: recorded as that owner's, nothing else changes.
    ClaimProfile {
        profile_id: String,
        owner_principal_id: String,
    },
    /// The other profile commands name the owner the profiles service reports them for: the
    /// first report records it, and one naming another owner finds no such profile. A report
    /// naming none (a profiles service older than owners) still ends the grants on the profile:
    /// ending grants is never unsafe, and refusing it would leave them live.
    AdvanceProfile {
        profile_id: String,
        owner_principal_id: Option<String>,
        phase: SignInPhase,
    },
    RevokeProfile {
        profile_id: String,
        owner_principal_id: Option<String>,
    },
    DeleteProfile {
        profile_id: String,
        owner_principal_id: Option<String>,
    },
    /// A tool call the worker made: the session's record of the turn.
    RecordToolCall(SessionToolCalled),
    /// What the agent harness enforced in a run of the session: its start, a refused turn, its
    /// escalation or its completion.
    RecordRun(RunEvent),
    ChangeSettings(TaskGrantSettings),
    /// The operator's whole deployment record at once: settings and pin, recorded together.
    ApplyDeployment {
        settings: TaskGrantSettings,
        pin: Option<StandingPin>,
        /// The version of the policy every replica must run from now on.
        policy_version: Option<String>,
        now: OffsetDateTime,
    },
    /// The operator's standing-grant pin as configured now (`None`: no pin). Recorded only when
    /// it differs from the pin in force; a new pin lasts [`STANDING_GRANT_DURATION`].
    PinStandingGrant {
        pin: Option<StandingPin>,
        now: OffsetDateTime,
    },
    ResolveApproval {
        approval_id: Uuid,
        principal_id: String,
        resolution: Resolution,
        /// `approve_for_task` repeats the offered scope.
        repeated_scope: Option<SiteScope>,
        new_grant_id: Uuid,
        versions: Versions,
        now: OffsetDateTime,
        /// The SHA-256 (hex) of a fresh approval token, issued when the action is approved and
        /// the approval is bound to a run, snapshot and node.
        token_sha256: Option<String>,
    },
    /// Redeems an approval token for the exact run, snapshot and node it was issued for, by the
    /// runtime acting for the owner of the approval's session.
    RedeemToken {
        principal_id: String,
        token_sha256: String,
        binding: TokenBinding,
        /// The browser profile the act would be dispatched in: the session's own.
        profile_id: String,
        now: OffsetDateTime,
    },
    ExpireApprovals {
        now: OffsetDateTime,
    },
    RevokeGrant {
        grant_id: Uuid,
        principal_id: String,
    },
    /// The owner's Stop for the agent in a session: its task grant ends, its pending cards are
    /// denied, and no act is decided for it until the owner's next message.
    StopSession {
        session_id: String,
        principal_id: String,
        now: OffsetDateTime,
    },
    /// The owner's Stop everything: [`Command::StopSession`] for each of the owner's sessions the
    /// read found (neither deleted nor stopped).
    StopEverything {
        principal_id: String,
        now: OffsetDateTime,
    },
    /// Ends every grant whose time is up.
    Sweep {
        now: OffsetDateTime,
    },
    /// The owner's message that starts a task in the chat (its start page inside a configured
    /// scope): it replaces the chat's task, and lifts a Stop as every owner's message does.
    StartTask {
        principal_id: String,
        message: SessionMessageRecorded,
        task: TaskStarted,
    },
    /// The owner's "continue": the chat's newest task again, as a new task, once it has ended;
    /// while it still runs, the message alone.
    ContinueTask {
        principal_id: String,
        message: SessionMessageRecorded,
        task_id: String,
        now: OffsetDateTime,
    },
    /// A worker takes the first task nobody holds (none: nothing to record), for `lease`
    /// ([`crate::limits::TASK_LEASE`] in service).
    ClaimTask {
        /// The owner the worker acts for: it takes that owner's tasks only.
        principal_id: String,
        holder: String,
        now: OffsetDateTime,
        lease: time::Duration,
    },
    /// The worker that holds a task keeps it for another `lease`, while its run is the task's.
    RenewTask {
        principal_id: String,
        session_id: String,
        run_id: String,
        holder: String,
        now: OffsetDateTime,
        lease: time::Duration,
    },
}

/// Decides a command against the world. `Ok(vec![])` means nothing to record.
pub fn decide(world: &World, command: Command) -> Result<Vec<Event>, DomainError> {
    match command {
        Command::CreateSession(created) => {
            if world.sessions.contains_key(&created.session_id) {
                return Err(DomainError::conflict(Conflict::SessionExists, created.session_id));
            }
            // Another owner's profile, or one no owner was recorded for, does not exist for this one.
            if let Some(p) = &created.browser_profile_id
                && !world.profile_owned_by(p, &created.principal_id)
            {
                return Err(DomainError::not_found("browser profile", p));
            }
            Ok(vec![Event::SessionCreated(created)])
        }
        Command::RecordToolCall(call) => {
            let session = world.sessions.get(&call.session_id).filter(|s| !s.deleted);
            session.ok_or_else(|| DomainError::not_found("session", &call.session_id))?;
            Ok(vec![Event::SessionToolCalled(call)])
        }
        Command::RecordRun(run) => {
            let session = world.sessions.get(run.session_id()).filter(|s| !s.deleted);
            session.ok_or_else(|| DomainError::not_found("session", run.session_id()))?;
            // A run that ends waits for nothing: its waiting cards are withdrawn in the same
            // write, so no approval or grant can be made from them on any replica.
            let ended = match &run {
                RunEvent::Escalated(e) => Some(e.run_id.clone()),
                RunEvent::Completed(e) => Some(e.run_id.clone()),
                RunEvent::Started(_) | RunEvent::Refused(_) | RunEvent::Stepped(_) => None,
            };
            let session_id = run.session_id().to_owned();
            let mut events = vec![run.into_event()];
            if let Some(run_id) = ended {
                events.extend(withdraw(world, &session_id, &run_id));
            }
            Ok(events)
        }
        Command::RecordMessage(message) => {
            let session = world.sessions.get(&message.session_id).filter(|s| !s.deleted);
            session.ok_or_else(|| DomainError::not_found("session", &message.session_id))?;
            Ok(vec![Event::SessionMessageRecorded(message)])
        }
        Command::DeleteSession { session_id, principal_id } => {
            let session = world.session_of(&session_id, &principal_id)?;
            let mut events = vec![Event::SessionDeleted(SessionDeleted { session_id: session_id.clone() })];
            // The record's nine reasons have none for a deleted chat: the owner's deletion revokes.
            events.extend(session.active_grant.and_then(|g| world.end(g, EndReason::Revoked)));
            Ok(events)
        }
        Command::ClaimProfile { profile_id, owner_principal_id } => world.claim(&profile_id, &owner_principal_id),
        Command::AdvanceProfile { profile_id, owner_principal_id, phase } => {
            let mut events = world.claim_if(&profile_id, owner_principal_id.as_deref())?;
            let generation = world.profiles.get(&profile_id).map_or(0, |p| p.generation) + 1;
            events.push(Event::ProfileGenerationAdvanced(ProfileGenerationAdvanced {
                profile_id: profile_id.clone(),
                generation,
                phase,
            }));
            events.extend(world.end_grants_on_profile(&profile_id, EndReason::ProfileChanged));
            Ok(events)
        }
        Command::RevokeProfile { profile_id, owner_principal_id } => {
            let mut events = world.claim_if(&profile_id, owner_principal_id.as_deref())?;
            events.push(Event::ProfileRevoked(ProfileRevoked { profile_id: profile_id.clone() }));
            events.extend(world.end_grants_on_profile(&profile_id, EndReason::ProfileRevoked));
            Ok(events)
        }
        Command::DeleteProfile { profile_id, owner_principal_id } => {
            let mut events = world.claim_if(&profile_id, owner_principal_id.as_deref())?;
            events.push(Event::ProfileDeleted(ProfileDeleted { profile_id: profile_id.clone() }));
            events.extend(world.end_grants_on_profile(&profile_id, EndReason::ProfileRevoked));
            Ok(events)
        }
        Command::ApplyDeployment { settings, pin, policy_version, now } => {
            apply_deployment(world, settings, pin, policy_version, now)
        }
        Command::PinStandingGrant { pin, now } => pin_standing(world, pin, now),
        Command::ChangeSettings(settings) => change_settings(world, settings),
        Command::ResolveApproval {
            approval_id,
            principal_id,
            resolution,
            repeated_scope,
            new_grant_id,
            versions,
            now,
            token_sha256,
        } => {
            let mut events =
                resolve(world, approval_id, &principal_id, resolution, repeated_scope, new_grant_id, &versions, now)?;
            let binding = &world.approvals[&approval_id].requested.binding;
            if let (Some(token_sha256), Some(binding), ApprovalStatus::Approved) =
                (token_sha256, binding, resolution.status())
            {
                events.push(Event::ApprovalTokenIssued(ApprovalTokenIssued {
                    approval_id,
                    token_sha256,
                    run_id: binding.run_id.clone(),
                    snapshot_id: binding.snapshot_id.clone(),
                    node_ref: binding.node_ref.clone(),
                }));
            }
            Ok(events)
        }
        Command::RedeemToken { principal_id, token_sha256, binding, profile_id, now } => {
            redeem_token(world, &principal_id, token_sha256, &binding, &profile_id, now)
        }
        Command::ExpireApprovals { now } => {
            let mut ids: Vec<Uuid> = world
                .approvals
                .values()
                .filter(|a| a.state == ApprovalState::Pending && a.requested.expires_at <= now)
                .map(|a| a.requested.approval_id)
                .collect();
            ids.sort();
            Ok(ids.into_iter().map(|approval_id| Event::ApprovalExpired(ApprovalExpired { approval_id })).collect())
        }
        Command::RevokeGrant { grant_id, principal_id } => {
            let grant = world
                .grants
                .get(&grant_id)
                .filter(|g| g.created.principal_id == principal_id)
                .ok_or_else(|| DomainError::not_found("grant", grant_id))?;
            // Revoking an ended grant records nothing: each grant ends exactly once.
            Ok(world.end(grant.created.grant_id, EndReason::Revoked).into_iter().collect())
        }
        Command::StopSession { session_id, principal_id, now } => {
            let session = world.session_of(&session_id, &principal_id)?;
            Ok(stop(world, session, now))
        }
        Command::StopEverything { principal_id, now } => {
            let mut mine: Vec<&Session> =
                world.sessions.values().filter(|s| s.created.principal_id == principal_id && !s.deleted).collect();
            mine.sort_by(|a, b| a.created.session_id.cmp(&b.created.session_id));
            Ok(mine.into_iter().flat_map(|s| stop(world, s, now)).collect())
        }
        Command::StartTask { principal_id, message, task } => {
            let session = world.session_of(&message.session_id, &principal_id)?;
            // The same message again (a retry after a lost reply) started its task already.
            if session.task.as_ref().is_some_and(|t| t.started.message_id == message.message_id) {
                return Ok(vec![]);
            }
            task_may_start(world, session, &task.start_url)?;
            let mut events = vec![Event::SessionMessageRecorded(message)];
            // The task it replaces is over: its run's cards wait for nothing now.
            events.extend(withdraw_task_run(world, session));
            events.push(Event::TaskStarted(task));
            Ok(events)
        }
        Command::ContinueTask { principal_id, message, task_id, now } => {
            let session = world.session_of(&message.session_id, &principal_id)?;
            let last = session.task.as_ref().ok_or_else(|| {
                DomainError::conflict(Conflict::NoTask, "this chat has no task to continue: start one")
            })?;
            // A task still running goes on; the message is the owner's turn (and lifts a Stop).
            if !last.ended {
                return Ok(vec![Event::SessionMessageRecorded(message)]);
            }
            // A finished task is not done twice by a "continue": the owner starts a new one.
            if last.completed {
                return Err(DomainError::conflict(Conflict::TaskDone, "this task is finished: start a new one"));
            }
            task_may_start(world, session, &last.started.start_url)?;
            let again = TaskStarted {
                session_id: message.session_id.clone(),
                task_id,
                message_id: message.message_id.clone(),
                goal: last.started.goal.clone(),
                subgoals: last.started.subgoals.clone(),
                start_url: last.started.start_url.clone(),
                continues: Some(last.started.task_id.clone()),
                started_at: stored(now),
            };
            let mut events = vec![Event::SessionMessageRecorded(message)];
            events.extend(withdraw_task_run(world, session));
            events.push(Event::TaskStarted(again));
            Ok(events)
        }
        Command::ClaimTask { principal_id, holder, now, lease } => {
            let mut open: Vec<&Session> = world
                .sessions
                .values()
                .filter(|s| s.created.principal_id == principal_id)
                .filter(|s| !s.deleted && !s.stopped && s.task.as_ref().is_some_and(|t| t.claimable(now)))
                .collect();
            open.sort_by(|a, b| a.created.session_id.cmp(&b.created.session_id));
            let Some((session, t)) = open.first().and_then(|s| s.task.as_ref().map(|t| (*s, t))) else {
                return Ok(vec![]);
            };
            // The attempt that lost it asked for nothing that can still be answered.
            let mut events = withdraw_task_run(world, session);
            let attempt = t.attempt + 1;
            events.push(Event::TaskClaimed(TaskClaimed {
                session_id: t.started.session_id.clone(),
                task_id: t.started.task_id.clone(),
                attempt,
                run_id: task_run_id(&t.started.task_id, attempt),
                holder,
                lease_until: stored(now + lease),
                renewal: false,
            }));
            Ok(events)
        }
        Command::RenewTask { principal_id, session_id, run_id, holder, now, lease } => {
            let session = world.session_of(&session_id, &principal_id)?;
            let task = session.task.as_ref().filter(|t| {
                !t.ended && t.run_id.as_deref() == Some(run_id.as_str()) && t.lease_until.is_some_and(|u| u > now)
            });
            let Some(task) = task else {
                return Err(DomainError::conflict(Conflict::TaskNotHeld, "this run no longer holds its task"));
            };
            Ok(vec![Event::TaskClaimed(TaskClaimed {
                session_id,
                task_id: task.started.task_id.clone(),
                attempt: task.attempt,
                run_id,
                holder,
                lease_until: stored(now + lease),
                renewal: true,
            })])
        }
        Command::Sweep { now } => {
            let mut ids: Vec<Uuid> = world
                .grants
                .values()
                .filter(|g| g.is_active() && g.created.expires_at <= now)
                .map(|g| g.created.grant_id)
                .collect();
            ids.sort();
            Ok(ids.into_iter().filter_map(|id| world.end(id, EndReason::Expired)).collect())
        }
    }
}

/// The cards the session's current task run still waits on, withdrawn: that run is over.
fn withdraw_task_run(world: &World, session: &Session) -> Vec<Event> {
    match session.task.as_ref().and_then(|t| t.run_id.as_deref()) {
        Some(run) => withdraw(world, &session.created.session_id, run),
        None => vec![],
    }
}

/// The run id of a task's `attempt`.
pub fn task_run_id(task_id: &str, attempt: u32) -> String {
    format!("{TASK_RUN_PREFIX}{task_id}-{attempt}")
}

/// A task runs in a chat with its own browser, from a page inside a scope the owner configured.
fn task_may_start(world: &World, session: &Session, start_url: &str) -> Result<(), DomainError> {
    if session.created.browser_profile_id.is_none() || !world.session_profile_is_own(session) {
        return Err(DomainError::conflict(
            Conflict::NoBrowser,
            "this chat has no browser of the owner's to run a task in",
        ));
    }
    if crate::scopes::scope_for(&world.settings.scopes, start_url).is_none() {
        return Err(DomainError::Invalid {
            field: "start_url",
            reason: "is not inside a site set up for tasks (BROWSER_TASK_GRANT_SCOPES)".into(),
        });
    }
    Ok(())
}

/// `resolution` for every pending card that `which` picks, in id order: one `approval.resolved`
/// each.
fn resolve_pending(world: &World, which: impl Fn(&Approval) -> bool, resolution: Resolution) -> Vec<Event> {
    let mut pending: Vec<Uuid> = world
        .approvals
        .values()
        .filter(|a| a.state == ApprovalState::Pending && which(a))
        .map(|a| a.requested.approval_id)
        .collect();
    pending.sort();
    let status = resolution.status();
    pending
        .into_iter()
        .map(|approval_id| {
            Event::ApprovalResolved(ApprovalResolved { approval_id, resolution, status, grant_id: None })
        })
        .collect()
}

/// Every card `run_id` of `session_id` still waits on, withdrawn.
fn withdraw(world: &World, session_id: &str, run_id: &str) -> Vec<Event> {
    let of_run = |a: &Approval| a.requested.session_id == session_id && a.requested.run_id == run_id;
    resolve_pending(world, of_run, Resolution::Withdrawn)
}

/// The owner's Stop of one session: its pending cards denied, its grant revoked, and the stop
/// recorded once (a second Stop records only what the first left).
fn stop(world: &World, session: &Session, now: OffsetDateTime) -> Vec<Event> {
    let session_id = &session.created.session_id;
    let live = |a: &Approval| &a.requested.session_id == session_id && a.requested.expires_at > now;
    let mut events = resolve_pending(world, live, Resolution::Deny);
    events.extend(session.active_grant.and_then(|g| world.end(g, EndReason::Revoked)));
    if !session.stopped {
        events.push(Event::SessionStopped(SessionStopped { session_id: session_id.clone(), stopped_at: stored(now) }));
    }
    events
}

/// The operator's whole deployment record: settings and pin, and a new policy in force.
fn apply_deployment(
    world: &World,
    settings: TaskGrantSettings,
    pin: Option<StandingPin>,
    policy_version: Option<String>,
    now: OffsetDateTime,
) -> Result<Vec<Event>, DomainError> {
    let mut events = decide(world, Command::ChangeSettings(settings))?;
    events.extend(decide(world, Command::PinStandingGrant { pin, now })?);
    // A new policy is in force for every replica at once: the grants made under another
    // end in the same append, so no replica still running the old one can use them.
    if let Some(version) = policy_version.filter(|v| world.policy.as_ref() != Some(v)) {
        let after = world.clone().applied(&events);
        let mut stale: Vec<Uuid> = after
            .grants
            .values()
            .filter(|g| g.is_active() && g.created.policy_version != version)
            .map(|g| g.created.grant_id)
            .collect();
        stale.sort();
        events.push(Event::DeploymentPolicyChanged(DeploymentPolicyChanged { policy_version: version }));
        events.extend(stale.into_iter().filter_map(|id| after.end(id, EndReason::PolicyChanged)));
    }
    Ok(events)
}

/// A standing-grant pin set, renewed by a new grant id only, or removed.
fn pin_standing(world: &World, pin: Option<StandingPin>, now: OffsetDateTime) -> Result<Vec<Event>, DomainError> {
    match (pin, world.standing.as_ref()) {
        // The same pin, expired or not: a restart renews nothing; a new grant id does.
        (Some(pin), Some(c)) if c.grant_id == pin.grant_id && c.profile_id == pin.profile_id => Ok(vec![]),
        (Some(pin), _) => Ok(vec![Event::StandingGrantPinned(StandingGrantPinned {
            grant_id: pin.grant_id,
            profile_id: pin.profile_id,
            expires_at: stored(now + STANDING_GRANT_DURATION),
        })]),
        (None, _) => Ok(world
            .standing
            .as_ref()
            .map(|c| Event::StandingGrantUnpinned(StandingGrantUnpinned { grant_id: c.grant_id.clone() }))
            .into_iter()
            .collect()),
    }
}

/// New settings, ending the grants they no longer allow in the same append.
fn change_settings(world: &World, settings: TaskGrantSettings) -> Result<Vec<Event>, DomainError> {
    if settings == world.settings {
        return Ok(vec![]);
    }
    // A grant whose scope is gone, or every grant once the flag is off, ends in the same
    // append: a use on another replica then finds its row ended.
    let mut ended: Vec<Uuid> = world
        .grants
        .values()
        .filter(|g| g.is_active() && !(settings.enabled && settings.scopes.contains(&g.created.scope)))
        .map(|g| g.created.grant_id)
        .collect();
    ended.sort();
    let mut events = vec![Event::DeploymentScopesChanged(DeploymentScopesChanged {
        task_grants_enabled: settings.enabled,
        scopes: settings.scopes,
    })];
    events.extend(ended.into_iter().filter_map(|id| world.end(id, EndReason::ScopeRemoved)));
    Ok(events)
}

/// An approve-once token spent on the very action it was issued for, once.
fn redeem_token(
    world: &World,
    principal_id: &str,
    token_sha256: String,
    binding: &TokenBinding,
    profile_id: &str,
    now: OffsetDateTime,
) -> Result<Vec<Event>, DomainError> {
    // Any mismatch is the same terminal refusal: a token that does not fit is a policy
    // violation, not something to retry.
    let invalid = || DomainError::conflict(Conflict::ApprovalTokenInvalid, "the token does not fit this action");
    let approval = world
        .approvals
        .values()
        .find(|a| a.token_sha256.as_deref() == Some(token_sha256.as_str()))
        .ok_or_else(invalid)?;
    // A Stop since the card was asked voids its token, even once the owner writes again.
    let session = world
        .sessions
        .get(&approval.requested.session_id)
        .filter(|s| !s.deleted && !s.stopped_since(&approval.requested));
    let owner = session.map(|s| s.created.principal_id.as_str());
    let bound = approval.requested.binding.as_ref();
    let same_place = bound.is_some_and(|b| {
        (&b.run_id, &b.snapshot_id, &b.node_ref) == (&binding.run_id, &binding.snapshot_id, &binding.node_ref)
    });
    // The very act the card showed: kind and argument, the typed text's digest, and the element
    // and page as the runtime now reads them live.
    let same_act = match (bound.and_then(|b| b.action.as_ref()), &binding.action) {
        // A card binds the form it showed, and a card that showed none binds "no form": a submit
        // whose form the owner never saw is not approved by it (the runtime reads a button's
        // form live at every redemption).
        (Some(approved), Some(asked)) => approved == asked,
        _ => false,
    };
    let fits = same_place
        && same_act
        && session.is_some_and(|s| s.created.browser_profile_id.as_deref() == Some(profile_id))
        && owner == Some(principal_id)
        && session.is_some_and(|s| world.session_profile_is_own(s) && s.runs_its_task(&binding.run_id))
        && world
            .run_snapshots
            .get(&(approval.requested.session_id.clone(), binding.run_id.clone()))
            .is_some_and(|r| r.current == binding.snapshot_id)
        && !approval.token_redeemed
        && approval.requested.expires_at > now;
    if !fits {
        return Err(invalid());
    }
    let approval_id = approval.requested.approval_id;
    Ok(vec![Event::ApprovalTokenRedeemed(ApprovalTokenRedeemed { approval_id, token_sha256 })])
}

#[allow(clippy::too_many_arguments)] // one command's fields, unpacked
fn resolve(
    world: &World,
    approval_id: Uuid,
    principal_id: &str,
    resolution: Resolution,
    repeated_scope: Option<SiteScope>,
    new_grant_id: Uuid,
    versions: &Versions,
    now: OffsetDateTime,
) -> Result<Vec<Event>, DomainError> {
    if resolution == Resolution::Withdrawn {
        return Err(DomainError::Invalid {
            field: "resolution",
            reason: "a card is withdrawn by its run's end, never by an answer".into(),
        });
    }
    let approval = world.approvals.get(&approval_id).ok_or_else(|| DomainError::not_found("approval", approval_id))?;
    let session = world
        .sessions
        .get(&approval.requested.session_id)
        .filter(|s| s.created.principal_id == principal_id && !s.deleted)
        .ok_or_else(|| DomainError::not_found("approval", approval_id))?;
    if approval.state != ApprovalState::Pending {
        return Err(DomainError::conflict(
            Conflict::ApprovalNotPending,
            "the approval was already resolved or expired",
        ));
    }
    if approval.requested.expires_at <= now {
        return Err(DomainError::conflict(Conflict::ApprovalExpired, "the approval expired"));
    }
    if session.stopped && resolution.status() == ApprovalStatus::Approved {
        return Err(DomainError::conflict(
            Conflict::SessionStopped,
            "the agent in this session is stopped until the owner's next message",
        ));
    }
    // A task's run that lost its task asks for nothing: neither its act nor a permission from it.
    if !session.runs_its_task(&approval.requested.run_id) && resolution.status() == ApprovalStatus::Approved {
        return Err(DomainError::conflict(Conflict::TaskNotHeld, "the agent's run that asked has ended"));
    }
    let resolved = |grant_id| {
        Event::ApprovalResolved(ApprovalResolved { approval_id, resolution, status: resolution.status(), grant_id })
    };
    if resolution != Resolution::ApproveForTask {
        return Ok(vec![resolved(None)]);
    }
    // Every refusal below leaves the approval pending, so the owner can still allow once.
    world.policy_in_force(&versions.policy)?;
    if !world.settings.enabled {
        return Err(DomainError::conflict(Conflict::TaskGrantsDisabled, "task grants are not enabled"));
    }
    let offer = approval
        .requested
        .offer
        .as_ref()
        .ok_or_else(|| DomainError::conflict(Conflict::NoOffer, "the approval carries no offer"))?;
    if repeated_scope.as_ref() != Some(&offer.scope) {
        return Err(DomainError::conflict(Conflict::OfferMismatch, "the origin and prefix differ from the offer"));
    }
    if !world.settings.scopes.contains(&offer.scope) {
        return Err(DomainError::conflict(Conflict::OfferNoLongerValid, "the offered scope is no longer configured"));
    }
    if let Some(why) = session_ineligible(session) {
        return Err(DomainError::conflict(Conflict::OfferNoLongerValid, why.code()));
    }
    let profile_id = session.created.browser_profile_id.clone().unwrap_or_default();
    let profile = world.profiles.get(&profile_id).cloned().unwrap_or_default();
    if profile.revoked || profile.deleted {
        return Err(DomainError::conflict(Conflict::OfferNoLongerValid, "the browser profile was revoked"));
    }
    if profile.owner.as_deref() != Some(principal_id) {
        return Err(DomainError::conflict(Conflict::OfferNoLongerValid, "the browser profile is not this owner's"));
    }
    let mut events = vec![resolved(Some(new_grant_id))];
    events.extend(session.active_grant.and_then(|old| world.end(old, EndReason::Superseded)));
    events.push(Event::TaskGrantCreated(TaskGrantCreated {
        grant_id: new_grant_id,
        approval_id,
        tenant_id: session.created.tenant_id.clone(),
        principal_id: principal_id.to_owned(),
        session_id: session.created.session_id.clone(),
        profile_id,
        profile_generation: profile.generation,
        agent_version: versions.agent.clone(),
        policy_version: versions.policy.clone(),
        scope: offer.scope.clone(),
        created_at: stored(now),
        expires_at: stored(now + GRANT_DURATION),
        max_actions: MAX_ACTIONS,
        max_typed_chars: MAX_TYPED_CHARS,
    }));
    Ok(events)
}

/// One thing the agent harness records of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunEvent {
    Started(RunStarted),
    Refused(RunRefused),
    Escalated(RunEscalated),
    Completed(RunCompleted),
    Stepped(RunStepped),
}

impl RunEvent {
    pub fn session_id(&self) -> &str {
        match self {
            Self::Started(e) => &e.session_id,
            Self::Refused(e) => &e.session_id,
            Self::Escalated(e) => &e.session_id,
            Self::Completed(e) => &e.session_id,
            Self::Stepped(e) => &e.session_id,
        }
    }

    pub fn into_event(self) -> Event {
        match self {
            Self::Started(e) => Event::RunStarted(e),
            Self::Refused(e) => Event::RunRefused(e),
            Self::Escalated(e) => Event::RunEscalated(e),
            Self::Completed(e) => Event::RunCompleted(e),
            Self::Stepped(e) => Event::RunStepped(e),
        }
    }
}
