//! What every call of the runtime shares: the service, its sessions and their bookkeeping, the
//! caller checks, and the reads several calls make. The per-call files use it; it uses none of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use credentials::{Caller, Credentials, Role};
use proto::runtime as pb;
use proto::v1 as gl;
use time::OffsetDateTime;
use tonic::{Request, Status};

use crate::config::RuntimeConfig;
use crate::records::RecordStore;
use crate::session::{Redeem, Session};

pub(super) type Shared = Arc<tokio::sync::Mutex<Session>>;

use super::convert::{Reader, id};

/// An open session, with the owner and profile it was opened for (fixed for its life).
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) tenant: String,
    pub(super) principal: String,
    pub(super) profile: String,
    /// The agent key that opened it, if one did: only that key reaches it.
    pub(super) opened_by: Option<uuid::Uuid>,
    pub(super) session: Shared,
}

/// An agent key (a worker credential bound to one chat) acts in its own run only; any other
/// caller in any of its owner's.
pub(super) fn own_run(caller: &Caller, run_id: &str) -> Result<(), Status> {
    if run_id.is_empty() || caller.may_run(run_id) {
        Ok(())
    } else {
        Err(Status::permission_denied("an agent key reads and acts in its own run only"))
    }
}

/// A pool slot taken for a session being opened: given back on drop unless kept, so a call
/// cancelled while Chromium starts leaks neither the slot nor the profile.
pub(super) struct Slot<'a> {
    pub(super) sessions: &'a Mutex<HashMap<String, Entry>>,
    pub(super) id: String,
    pub(super) kept: bool,
}

/// Observes a call's time in the browser when dropped, answered or failed alike.
pub(super) struct Timer(&'static str, std::time::Instant);

impl Timer {
    pub(super) fn start(call: &'static str) -> Self {
        Self(call, std::time::Instant::now())
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        crate::metrics::METRICS.latency.get_or_create(&[("call", self.0)]).observe(self.1.elapsed().as_secs_f64());
    }
}

/// Takes session `id` off the map, its browser back to the pool.
pub(super) fn forget(sessions: &Mutex<HashMap<String, Entry>>, id: &str) {
    let mut sessions = sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    sessions.remove(id);
    note_open(sessions.len());
}

pub(super) fn note_open(open: usize) {
    crate::metrics::METRICS.sessions_open.set(i64::try_from(open).unwrap_or(i64::MAX));
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if !self.kept {
            forget(self.sessions, &self.id);
        }
    }
}

/// Every open session of this process, by id.
#[derive(Debug)]
pub struct BrowserRuntime<R> {
    pub(super) config: RuntimeConfig,
    pub(super) credentials: Credentials,
    pub(super) records: RecordStore,
    pub(super) redeemer: R,
    pub(super) sessions: Mutex<HashMap<String, Entry>>,
    /// What the gate records of every call, when the operator serves metrics.
    pub(super) gate_metrics: Option<transport::GateMetrics>,
    /// What gRPC health follows, when set (otherwise SERVING while the server runs).
    pub(super) health_check: Option<telemetry::HealthCheck>,
}

impl<R: Redeem + 'static> BrowserRuntime<R> {
    /// The run's record values, each sealed with its shape: the text itself only where a card
    /// shows it (never a value that reads as a secret).
    pub(super) fn record_texts(&self, by: &Reader<'_>, run: &str) -> Result<Vec<pb::RecordText>, Status> {
        let fields = self.records.fields(by.tenant, by.principal, run).map_err(record_status)?;
        let read_ms = i64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX);
        Ok(fields
            .into_iter()
            .map(|(field_id, value)| {
                let secret = classifier::text_shape::is_credential_shaped(&value);
                let body = gl::TextBody {
                    tenant_id: by.tenant.to_owned(),
                    principal_id: by.principal.to_owned(),
                    browser_profile_id: by.profile.to_owned(),
                    run_id: run.to_owned(),
                    field_id: field_id.clone(),
                    chars: u32::try_from(value.chars().count()).unwrap_or(u32::MAX),
                    digest: by.keys.text_digest(by.tenant, &value),
                    credential_shaped: secret,
                    text: if secret { String::new() } else { value },
                    read_ms,
                };
                pb::RecordText { field_id, sealed: Some(by.keys.seal_text(&body)) }
            })
            .collect())
    }
}

impl<R: Redeem + 'static> BrowserRuntime<R> {
    pub fn new(config: RuntimeConfig, credentials: Credentials, redeemer: R) -> Self {
        let records = RecordStore::new(config.records_dir.clone());
        Self {
            config,
            credentials,
            records,
            redeemer,
            sessions: Mutex::new(HashMap::new()),
            gate_metrics: None,
            health_check: None,
        }
    }

    /// Records every call the server's gate sees (method, status, time; refused callers) in
    /// `metrics`.
    #[must_use]
    pub fn with_gate_metrics(self, metrics: transport::GateMetrics) -> Self {
        Self { gate_metrics: Some(metrics), ..self }
    }

    /// gRPC health follows `check` (the credentials' database answering), as `/healthz` does.
    #[must_use]
    pub fn with_health_check(self, check: telemetry::HealthCheck) -> Self {
        Self { health_check: Some(check), ..self }
    }

    /// The caller, as the gate authenticated it from the headers before the body was read, or
    /// authenticated here when the service is called without the gate (in-process).
    pub(super) async fn caller<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        if let Some(c) = req.extensions().get::<Caller>().filter(|c| c.role == Role::Worker) {
            return Ok(c.clone());
        }
        self.credentials
            .authenticate(req.metadata(), &[Role::Worker], &[], OffsetDateTime::now_utc())
            .await
            .map_err(transport::auth_status)
    }

    /// The owner the gateway names, with the scope to answer cards (`route`'s rule for LiveView).
    pub(super) async fn owner<T>(&self, req: &Request<T>) -> Result<Caller, Status> {
        if let Some(c) = req.extensions().get::<Caller>().filter(|c| c.role == Role::Gateway) {
            return Ok(c.clone());
        }
        let scopes = [credentials::Scope::ApprovalResolve];
        self.credentials
            .authenticate(req.metadata(), &[Role::Gateway], &scopes, OffsetDateTime::now_utc())
            .await
            .map_err(transport::auth_status)
    }

    /// The owner's open session on `profile`, locked: a profile has at most one, and another
    /// owner's is as absent as none.
    pub(super) async fn owners_tab(
        &self,
        owner: &Caller,
        profile: &str,
        snapshot: &str,
    ) -> Result<tokio::sync::OwnedMutexGuard<Session>, Status> {
        let profile = id("browser_profile_id", profile)?;
        let snapshot = id("snapshot_id", snapshot)?;
        let entry = {
            let sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let mut mine = sessions
                .values()
                .filter(|e| e.tenant == owner.tenant && e.principal == owner.principal && e.profile == profile);
            mine.next().cloned()
        };
        let Some(entry) = entry else { return Err(Status::not_found("no open session on this browser profile")) };
        let mut s = entry.session.lock_owned().await;
        s.last_used = std::time::Instant::now();
        // Closed, still starting (no browser of its own yet), or not the session that issued the
        // card's snapshot (one the worker opened since, on a page of its choosing): not the
        // card's tab.
        if s.closed || s.driver_pid().is_none() || !s.issued(&snapshot) {
            return Err(Status::not_found("no open session on this browser profile showed the card's page"));
        }
        Ok(s)
    }

    /// The caller's session, locked: another owner's session is as absent as one that never
    /// existed, and so is one closed while the call waited for it.
    pub(super) async fn owned(
        &self,
        caller: &Caller,
        session_id: &str,
    ) -> Result<tokio::sync::OwnedMutexGuard<Session>, Status> {
        let entry = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(session_id).cloned();
        match entry {
            Some(e)
                if e.tenant == caller.tenant
                    && e.principal == caller.principal
                    && (caller.binding.is_none() || e.opened_by == Some(caller.credential_id)) =>
            {
                let mut guard = e.session.lock_owned().await;
                guard.last_used = std::time::Instant::now();
                if guard.closed {
                    Err(Status::not_found("no such session"))
                } else if guard.taken_over {
                    // Its own code: the harness ends the run as taken over, not as a failure.
                    Err(Status::aborted("the owner has taken this tab over: the run is over"))
                } else {
                    Ok(guard)
                }
            }
            _ => Err(Status::not_found("no such session")),
        }
    }

    /// Closes every session no call has used for the configured idle time (one in use now is
    /// left alone): its browser goes back to the pool.
    pub async fn reap_idle(&self) {
        let all: Vec<(String, Shared, String, Option<uuid::Uuid>)> = {
            let sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            sessions.iter().map(|(id, e)| (id.clone(), Arc::clone(&e.session), e.tenant.clone(), e.opened_by)).collect()
        };
        for (id, shared, tenant, opened_by) in all {
            // A session an agent key opened closes once the key is revoked or expired: the key's
            // own close would be refused, and the chat's profile would stay held.
            let key_spent = match opened_by {
                Some(key) => matches!(self.credentials.usable(&tenant, key).await, Ok(false)),
                None => false,
            };
            let Ok(mut s) = shared.try_lock_owned() else { continue };
            // A tab the owner took over is the owner's now, whatever became of the key.
            let spent = key_spent && !s.taken_over;
            if s.closed || s.driver_pid().is_none() || (!spent && s.last_used.elapsed() < self.config.idle) {
                continue;
            }
            tracing::info!(session = %id, taken_over = s.taken_over, spent, "closing a session no call used for the idle time, or whose agent key is spent");
            s.close().await;
            s.closed = true;
            drop(s);
            forget(&self.sessions, &id);
        }
    }

    /// Closes every session: the shutdown path.
    pub async fn close_all(&self) {
        let all: Vec<Shared> = {
            let mut sessions = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            sessions.drain().map(|(_, e)| e.session).collect()
        };
        for s in all {
            s.lock().await.close().await;
        }
    }

    /// chromedriver's pid for a session, whose process group holds its Chromium (for tests that
    /// kill the browser they started).
    pub async fn driver_pid(&self, session_id: &str) -> Option<u32> {
        let e = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(session_id).cloned()?;
        let guard = e.session.lock().await;
        guard.driver_pid()
    }

    /// The DevTools connection of a session's browser, for tests that read the page as the
    /// browser shows it, beside the runtime.
    #[cfg(feature = "fixture")]
    pub async fn devtools(&self, session_id: &str) -> Option<crate::fence::Handle> {
        let e = self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(session_id).cloned()?;
        let guard = e.session.lock().await;
        guard.devtools()
    }

    /// The ids of the open sessions, for an operator's look (and the tests').
    pub fn session_ids(&self) -> Vec<String> {
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keys().cloned().collect()
    }
}

/// A task record that cannot be read: the caller's fault, the file's, or the disk's for now.
pub(super) fn record_status(e: crate::records::RecordError) -> Status {
    use crate::records::RecordError as E;
    match e {
        E::Invalid(_) | E::NoField { .. } => Status::invalid_argument(e.to_string()),
        E::Malformed(..) => Status::internal(e.to_string()),
        E::Unreadable(..) => Status::unavailable(e.to_string()),
    }
}

/// The most fields a form's card shows (the authorizer takes no more).
pub(super) const MAX_FORM_ROWS: usize = 200;
