//! A session's server-sent events, so that a page never polls: `approval.pending` when a card
//! appears, `approval.resolved` when it is answered or expires, `grant.changed` when a task
//! permission is created or its uses, characters or minutes move, `grant.ended` once when it
//! ends, `activity.changed` when the session's activity has a newer row. The stream opens with
//! the session's pending cards and active permissions. It re-reads when the ledger announces an
//! append (any replica's) and every few seconds, and closes when
//! the credential that opened it is revoked or expires, or after [`STREAM_LIFETIME`] (a client
//! reconnects). A token holds at most [`MAX_STREAMS_PER_TOKEN`] streams on a replica.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use credentials::Scope;
use futures_util::Stream;
use proto::ApprovalStatus;
use schemars::JsonSchema;
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::sync::watch;

use crate::Owner;
use crate::api::{Approval, Grant, GrantStatus};
use crate::call::{Call, NoQuery, Seg, entity_id};
use crate::docs::{Doc, doc, schema};
use crate::guard::Slot;
use crate::problem::Problem;
use crate::settings::STREAM_LIFETIME;

use super::approvals::approvals_of;
use super::grants::grants_of;

/// The longest between two reads with no append announced: minutes left move on their own.
const TICK: Duration = Duration::from_secs(5);
/// How often a stream looks its credential up again.
const RECHECK: Duration = Duration::from_secs(5);
/// The shortest between two reads, however often the ledger announces appends (any tenant's).
const MIN_REFRESH: Duration = Duration::from_secs(1);
pub(crate) const EVENTS: Doc = Doc {
    scopes: &[Scope::ApprovalResolve],
    events: true,
    ..doc(
        "get",
        "/v1/sessions/{session_id}/events",
        "Server-sent events: approval.pending, approval.resolved, grant.changed, grant.ended, activity.changed",
        schema::<StreamEvent>,
    )
};

/// The `data` of one event: an approval card or a task permission, as the read routes give them.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum StreamEvent {
    Approval(Box<Approval>),
    Grant(Box<Grant>),
    Activity(ActivityMark),
}

/// The newest row of the session's activity: read `/activity` for the rows.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub(crate) struct ActivityMark {
    pub newest_position: u64,
}

struct Watch {
    _slot: Slot,
    opened: tokio::time::Instant,
    last: tokio::time::Instant,
    checked: tokio::time::Instant,
    call: Call,
    owner: Owner,
    secret: String,
    session_id: String,
    wake: watch::Receiver<u64>,
    approvals: HashMap<String, String>,
    grants: HashMap<String, Grant>,
    grants_on: bool,
    /// The newest activity row seen.
    activity: Option<u64>,
    queue: VecDeque<Event>,
}

pub(super) async fn events(
    call: Call,
    Seg(session_id): Seg,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Problem> {
    let (owner, secret) = call.owner(&EVENTS).await?;
    call.query::<NoQuery>()?;
    entity_id("session_id", &session_id)?;
    let wake = call.gateway.0.wake.clone();
    let grants_on = owner.has(Scope::GrantRead);
    let slot = call.gateway.0.streams.open(owner.token_id)?;
    let now = tokio::time::Instant::now();
    let mut watch = Watch {
        _slot: slot,
        opened: now,
        last: now,
        checked: now,
        call,
        owner,
        secret,
        session_id,
        wake,
        approvals: HashMap::new(),
        grants: HashMap::new(),
        grants_on,
        activity: None,
        queue: VecDeque::new(),
    };
    // The first read proves the session is the owner's (else 404) and gives the opening state.
    watch.refresh().await?;
    let stream = futures_util::stream::unfold(watch, |mut w| async move {
        loop {
            if let Some(e) = w.queue.pop_front() {
                return Some((Ok(e), w));
            }
            w.wake.borrow_and_update();
            // A closed wake-up channel (never, while the gateway runs) falls back to the tick.
            if let Ok(Err(_)) = tokio::time::timeout(TICK, w.wake.changed()).await {
                tokio::time::sleep(TICK).await;
            }
            // Appends of every tenant wake every stream: at most one read a second each.
            tokio::time::sleep_until(w.last + MIN_REFRESH).await;
            w.last = tokio::time::Instant::now();
            if w.opened.elapsed() >= STREAM_LIFETIME {
                return None;
            }
            // The credential is looked up again at most every few seconds, not on every wake-up:
            // a revocation ends the stream within that, and the owner pool stays free.
            if w.checked.elapsed() >= RECHECK {
                match w.call.gateway.owners().find(&w.secret).await {
                    Ok(Some(_)) => w.checked = tokio::time::Instant::now(),
                    Ok(None) => return None,
                    Err(_) => continue,
                }
            }
            if let Err(p) = w.refresh().await {
                // The session gone (404) ends the stream; an outage is tried again next tick.
                if p.status == 404 {
                    return None;
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

impl Watch {
    /// Reads the session's cards and permissions and queues an event for each change.
    async fn refresh(&mut self) -> Result<(), Problem> {
        let approvals = approvals_of(&self.call, &self.owner, &self.session_id, false, None).await?;
        for a in approvals {
            let before = self.approvals.insert(a.approval_id.clone(), a.status.clone());
            let is_pending = |s: &str| ApprovalStatus::from_code(s) == Some(ApprovalStatus::Pending);
            let pending = is_pending(&a.status);
            // A card withdrawn before this stream saw it waiting still says so while it would
            // have waited.
            let withdrawn = ApprovalStatus::from_code(&a.status) == Some(ApprovalStatus::Withdrawn)
                && OffsetDateTime::parse(&a.expires_at, &Rfc3339).is_ok_and(|t| t > OffsetDateTime::now_utc());
            let name = match before.as_deref() {
                None if pending => "approval.pending",
                None if withdrawn => "approval.resolved",
                Some(b) if is_pending(b) && !pending => "approval.resolved",
                _ => continue,
            };
            self.push(name, &StreamEvent::Approval(Box::new(a)));
        }
        self.activity().await?;
        if !self.grants_on {
            return Ok(());
        }
        let grants = match grants_of(&self.call, &self.owner, &self.session_id, false, None).await {
            Ok(g) => g,
            // The tenant's flag is off: no permissions to follow.
            Err(p) if p.status == 404 => {
                self.grants_on = false;
                return Ok(());
            }
            Err(p) => return Err(p),
        };
        for g in grants {
            let before = self.grants.insert(g.grant_id.clone(), g.clone());
            let ended = g.status == GrantStatus::Ended;
            let name = match &before {
                Some(b) if *b == g => continue,
                Some(b) if ended && b.status != GrantStatus::Ended => "grant.ended",
                None if !ended => "grant.changed",
                Some(_) if !ended => "grant.changed",
                _ => continue,
            };
            self.push(name, &StreamEvent::Grant(Box::new(g)));
        }
        Ok(())
    }

    /// The activity view projects behind the log: its newest row is looked at on every read,
    /// so a console learns of a new row within a tick of its projection.
    async fn activity(&mut self) -> Result<(), Problem> {
        let client = self.call.gateway.0.views.get().await.map_err(|e| Problem::unavailable(e.to_string()))?;
        let newest = projections::audit::session_activity(&**client, &self.owner.tenant, &self.session_id, 1)
            .await
            .map_err(|e| Problem::unavailable(e.to_string()))?
            .first()
            .map(|r| r.global_position);
        drop(client);
        if let Some(newest_position) = newest.filter(|n| Some(*n) != self.activity) {
            self.activity = Some(newest_position);
            self.push("activity.changed", &StreamEvent::Activity(ActivityMark { newest_position }));
        }
        Ok(())
    }

    fn push(&mut self, name: &str, data: &StreamEvent) {
        if let Ok(e) = Event::default().event(name).json_data(data) {
            self.queue.push_back(e);
        }
    }
}
