//! `grantctl serve worker`: runs the tasks owners start in the console. Each replica asks the
//! authorizer for a task nobody holds (`ClaimTask`, one tenant credential at a time), runs it
//! through the harness with the deployment's model, and renews its lease while it runs. The
//! authorizer gives a task to one replica at a time; a replica that dies loses its tasks to
//! another once their lease has passed, and a run that lost its task is refused at its next act.
//! The worker is a courier: it holds a `worker` credential, never the owner's.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use proto::v1 as pb;
use tokio::task::JoinSet;

use agent::model::{PlanStep, Scripted};
use agent::provider::Provider;
use agent::run::{Clients, TaskFile};

/// The model every run of this replica uses.
#[derive(Clone)]
pub enum WorkerModel {
    /// A scripted plan (the demo and tests): each run plays it from its start, each turn after
    /// the pace.
    Script(Vec<PlanStep>, Duration),
    /// A hosted model, configured once at start-up.
    Hosted(agent::provider::Config),
}

impl std::fmt::Debug for WorkerModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Script(plan, _) => write!(f, "Script({} steps)", plan.len()),
            Self::Hosted(_) => f.write_str("Hosted"),
        }
    }
}

/// Everything a worker replica reads from its environment, parsed once.
#[derive(Clone)]
pub struct WorkerConfig {
    pub authorizer_url: String,
    pub runtime_url: String,
    pub ca: Option<Vec<u8>>,
    /// `(tenant, worker credential)`, one per tenant served.
    pub tenants: Vec<(String, String)>,
    /// This replica's name in the claims it records.
    pub holder: String,
    pub model: WorkerModel,
    pub max_steps: u32,
    /// Runs at once, at most.
    pub runs: usize,
    /// How long an idle replica waits before asking again.
    pub poll: Duration,
    /// The demo's task record (field id to value), written for each run where the runtime reads
    /// task records (`dir/<tenant>/<owner>/<run id>.json`): a worker otherwise never holds one.
    pub record: Option<(std::path::PathBuf, std::collections::BTreeMap<String, String>)>,
}

/// The tokens are left out.
impl std::fmt::Debug for WorkerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("authorizer_url", &self.authorizer_url)
            .field("runtime_url", &self.runtime_url)
            .field("tenants", &self.tenants.iter().map(|(t, _)| t).collect::<Vec<_>>())
            .field("holder", &self.holder)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl WorkerConfig {
    /// Reads WORKER_* and the harness's AGENT_* variables; each refusal names the variable.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let need = |k: &str| get(k).with_context(|| format!("{k} is required"));
        let file = need("WORKER_CREDENTIALS_FILE")?;
        let text = std::fs::read_to_string(&file).with_context(|| format!("WORKER_CREDENTIALS_FILE {file}"))?;
        let tenants = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [tenant, token] => Ok((tenant.to_owned(), token.to_owned())),
                _ => bail!("WORKER_CREDENTIALS_FILE has one `<tenant> <worker token>` per line"),
            })
            .collect::<Result<Vec<_>>>()?;
        if tenants.is_empty() {
            bail!("WORKER_CREDENTIALS_FILE names no tenant");
        }
        let model = match (get("WORKER_SCRIPT"), get("WORKER_MODEL")) {
            (Some(_), Some(_)) => bail!("give WORKER_SCRIPT or WORKER_MODEL, not both"),
            (Some(path), None) => WorkerModel::Script(
                crate::agent::plan(&std::fs::read_to_string(&path).with_context(|| format!("WORKER_SCRIPT {path}"))?)?,
                Duration::from_millis(get("WORKER_SCRIPT_PACE_MS").map_or(Ok(0), |v| {
                    v.parse::<u64>().context("WORKER_SCRIPT_PACE_MS is a whole number of milliseconds")
                })?),
            ),
            (None, Some(name)) => {
                let choice = crate::agent::ModelChoice {
                    provider: get("WORKER_MODEL_PROVIDER").unwrap_or_else(|| "openai".into()),
                    base_url: get("WORKER_MODEL_URL"),
                    name,
                };
                WorkerModel::Hosted(crate::agent::provider_config(choice, &get)?)
            }
            (None, None) => bail!("WORKER_SCRIPT or WORKER_MODEL is required: the model tasks run with"),
        };
        let number = |k: &str, default: u64, range: std::ops::RangeInclusive<u64>| -> Result<u64> {
            let n = get(k).map_or(Ok(default), |v| v.parse().with_context(|| format!("{k} is a whole number")))?;
            anyhow::ensure!(range.contains(&n), "{k} is {} to {}, not {n}", range.start(), range.end());
            Ok(n)
        };
        let record = match (get("WORKER_TASK_RECORD"), get("WORKER_TASK_RECORDS_DIR")) {
            (Some(file), Some(dir)) => {
                let text = std::fs::read_to_string(&file).with_context(|| format!("WORKER_TASK_RECORD {file}"))?;
                let fields = serde_json::from_str(&text).context("WORKER_TASK_RECORD is a JSON object of strings")?;
                Some((std::path::PathBuf::from(dir), fields))
            }
            (None, None) => None,
            _ => bail!("WORKER_TASK_RECORD and WORKER_TASK_RECORDS_DIR go together"),
        };
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host: String = host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(60).collect();
        let holder = get("WORKER_NAME").unwrap_or_else(|| format!("worker-{host}-{}", std::process::id()));
        ledger::check_entity_id("WORKER_NAME", &holder).map_err(|e| anyhow::anyhow!("WORKER_NAME: {e}"))?;
        Ok(Self {
            authorizer_url: need("AGENT_AUTHORIZER_URL")?,
            runtime_url: need("AGENT_RUNTIME_URL")?,
            ca: get("AGENT_CA").map(std::fs::read).transpose().context("AGENT_CA cannot be read")?,
            tenants,
            holder,
            model,
            max_steps: u32::try_from(number("WORKER_MAX_STEPS", 100, 1..=proto::limits::MAX_STEPS)?)?,
            runs: usize::try_from(number("WORKER_RUNS", 2, 1..=64)?)?,
            poll: Duration::from_millis(number("WORKER_POLL_MS", 1_000, 50..=60_000)?),
            record,
        })
    }
}

/// Serves until `shutdown`: takes tasks while fewer than `runs` run, and runs each to its end.
/// Runs in flight when `shutdown` comes are dropped: their leases lapse and another replica
/// takes them.
pub async fn serve(config: WorkerConfig, shutdown: impl std::future::Future<Output = ()>) -> Result<()> {
    // Connected on first use: the worker may start before the services it calls.
    let authorizer = crate::agent::lazy_channel(&config.authorizer_url, config.ca.as_deref())?;
    let runtime = crate::agent::lazy_channel(&config.runtime_url, config.ca.as_deref())?;
    let config = Arc::new(config);
    let mut runs = JoinSet::new();
    tokio::pin!(shutdown);
    tracing::info!(holder = %config.holder, tenants = config.tenants.len(), "worker serving");
    loop {
        let mut took = false;
        for (tenant, token) in &config.tenants {
            while runs.try_join_next().is_some() {}
            if runs.len() >= config.runs {
                break;
            }
            let clients = Clients {
                runtime: proto::runtime::browser_runtime_client::BrowserRuntimeClient::new(runtime.clone()),
                authorizer: pb::authorizer_client::AuthorizerClient::new(authorizer.clone()),
                bearer: format!("Bearer {token}").parse().context("a worker token is not a header value")?,
                request_id: None,
            };
            let claim = pb::ClaimTaskRequest { holder: config.holder.clone() };
            let task = match clients.authorizer.clone().claim_task(clients.req(claim)).await {
                Ok(r) => r.into_inner().task,
                Err(e) => {
                    tracing::warn!(tenant = %tenant, error = %e, "could not ask for a task");
                    None
                }
            };
            if let Some(task) = task {
                took = true;
                runs.spawn(run_claimed(Arc::clone(&config), tenant.clone(), clients, task));
            }
        }
        if took {
            continue;
        }
        tokio::select! {
            () = &mut shutdown => break,
            _ = tokio::time::sleep(config.poll) => {}
            Some(_) = runs.join_next(), if !runs.is_empty() => {}
        }
    }
    runs.abort_all();
    Ok(())
}

/// Runs one claimed task to its end, renewing the lease meanwhile; a lost lease ends the run
/// where it is (the authorizer refuses its acts already).
#[tracing::instrument(skip_all, fields(session_id = %claimed.session_id, run_id = %claimed.run_id))]
async fn run_claimed(config: Arc<WorkerConfig>, tenant: String, mut clients: Clients, claimed: pb::ClaimedTask) {
    let run_id = claimed.run_id.clone();
    let origin = url::Url::parse(&claimed.start_url).map(|u| u.origin().ascii_serialization()).unwrap_or_default();
    let file = TaskFile {
        chat_session: claimed.session_id.clone(),
        browser_profile: claimed.browser_profile_id.clone(),
        start_url: claimed.start_url.clone(),
        allowed_origins: vec![origin],
        run_id: run_id.clone(),
        subgoals: claimed.subgoals.clone(),
        goal: Some(claimed.goal.clone()),
        org_name: None,
        field_ids: config.record.as_ref().map(|(_, f)| f.keys().cloned().collect()).unwrap_or_default(),
        max_steps: config.max_steps,
        agent_version: format!("worker-{}", env!("CARGO_PKG_VERSION")),
        approval_wait_seconds: 600,
    };
    // A name that is only dots would leave the records folder.
    let plain = |name: &str| !name.is_empty() && !name.chars().all(|c| c == '.') && !name.contains('/');
    if let Some((dir, fields)) = config.record.as_ref().filter(|_| plain(&tenant) && plain(&claimed.owner)) {
        let dir = dir.join(&tenant).join(&claimed.owner);
        let written = std::fs::create_dir_all(&dir).and_then(|()| {
            std::fs::write(dir.join(format!("{run_id}.json")), serde_json::to_vec(fields).unwrap_or_default())
        });
        if let Err(e) = written {
            tracing::warn!(error = %e, "the task record was not written");
        }
    }
    let renew = renew_until_lost(clients.clone(), claimed.clone(), config.holder.clone());
    tokio::pin!(renew);
    let start = open_browser(clients.clone(), file);
    tokio::pin!(start);
    let started = tokio::select! {
        biased;
        started = &mut start => started,
        () = &mut renew => {
            // A browser the start opens after all goes back at once.
            if let Ok(Ok(task)) = tokio::time::timeout(OPEN_PATIENCE, start).await {
                close(&clients, task.browser_session).await;
            }
            return tracing::warn!("task lost before its run started");
        }
    };
    let mut task = match started {
        Ok(task) => task,
        Err(e) if retryable(&e) => {
            // The profile is still held (a run that lost its task is closing its browser) or a
            // service is away: the lease lapses and the task is taken again.
            return tracing::warn!(error = %e, "task run did not start; it will be taken again");
        }
        Err(e) => {
            // Recorded as the run's end, so the task ends and the owner reads why; taking it again
            // would fail the same way.
            tracing::warn!(error = %e, "task run did not start");
            let end = pb::RecordRunRequest {
                session_id: claimed.session_id.clone(),
                run_id: run_id.clone(),
                kind: pb::RunEventKind::Escalated as i32,
                detail: agent::reason::Reason::ServiceError.code().into(),
                account: None,
            };
            if let Err(e) = clients.authorizer.clone().record_run(clients.req(end)).await {
                tracing::warn!(error = %e, "the run's failed start was not recorded");
            }
            return;
        }
    };
    task.close_at_end = true;
    let browser = task.browser_session.clone();
    let run = async {
        match &config.model {
            WorkerModel::Script(plan, pace) => {
                let mut model = Scripted::from_plan(plan.clone()).paced(*pace);
                agent::run::run(&mut clients, &task, &mut model).await.map_err(|f| f.error.to_string())
            }
            WorkerModel::Hosted(c) => match Provider::new(c.clone()) {
                Ok(mut p) => agent::run::run(&mut clients, &task, &mut p).await.map_err(|f| f.error.to_string()),
                Err(e) => Err(format!("the model: {e}")),
            },
        }
    };
    tokio::select! {
        ended = run => match ended {
            Ok(o) => tracing::info!(report = %crate::agent::report(&o).lines().next().unwrap_or_default(), "task run ended"),
            Err(e) => tracing::warn!(error = %e, "task run failed"),
        },
        () = &mut renew => {
            // Its browser goes back at once: the task's next attempt opens the same profile.
            tracing::warn!("task lost: its run stops here");
            close(&clients, browser).await;
        }
    }
}

/// How long a start waits for the chat's profile to be free.
const OPEN_PATIENCE: Duration = Duration::from_secs(30);

/// The run's start, tried again while the profile is held or a service is away, for at most
/// [`OPEN_PATIENCE`].
async fn open_browser(mut clients: Clients, file: TaskFile) -> Result<agent::run::Task, agent::run::RunError> {
    let deadline = tokio::time::Instant::now() + OPEN_PATIENCE;
    loop {
        match agent::run::start(&mut clients, &file).await {
            Err(e) if retryable(&e) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            done => return done,
        }
    }
}

/// A start a later try may cure: the profile still held, a service away or full.
fn retryable(e: &agent::run::RunError) -> bool {
    use agent::run::RunError;
    use tonic::Code;
    matches!(e, RunError::Runtime(s) | RunError::Authorizer(s)
        if matches!(s.code(), Code::AlreadyExists | Code::Unavailable | Code::ResourceExhausted | Code::Aborted))
}

async fn close(clients: &Clients, browser: String) {
    let close = proto::runtime::CloseSessionRequest { session_id: browser };
    if let Err(e) = clients.runtime.clone().close_session(clients.req(close)).await {
        tracing::warn!(error = %e, "the run's browser did not close");
    }
}

/// Renews the lease at a third of its length; returns once the task is no longer this run's
/// (another worker took it, or it ended), or the lease passed with no renewal answered.
async fn renew_until_lost(clients: Clients, claimed: pb::ClaimedTask, holder: String) {
    let now_ms = || i64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    let mut until = claimed.lease_until_ms;
    loop {
        let left = u64::try_from(until - now_ms()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis((left / 3).max(50))).await;
        let renew = pb::RenewTaskRequest {
            session_id: claimed.session_id.clone(),
            run_id: claimed.run_id.clone(),
            holder: holder.clone(),
        };
        match clients.authorizer.clone().renew_task(clients.req(renew)).await {
            Ok(r) => until = r.into_inner().lease_until_ms,
            // Another worker took it, it ended, or its chat is gone.
            Err(e) if matches!(e.code(), tonic::Code::FailedPrecondition | tonic::Code::NotFound) => return,
            // An outage: try again while the lease lasts; past it another worker may hold the task.
            Err(e) if now_ms() < until => tracing::warn!(error = %e, "the task's lease was not renewed"),
            Err(_) => return,
        }
    }
}
