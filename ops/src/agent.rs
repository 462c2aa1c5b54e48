//! `grantctl agent run`: one task through the harness, configured from the environment.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use agent::model::{PlanStep, Scripted};
use agent::provider::{Config as ModelConfig, Key, Kind, Provider};
use agent::run::{Clients, Outcome, TaskFile, run as run_task, start};
use proto::runtime as rt;

pub(crate) async fn channel(url: &str, ca: Option<&[u8]>) -> Result<Channel> {
    endpoint(url, ca)?.connect().await.with_context(|| format!("connecting to {url}"))
}

/// A channel that connects on first use and again after a loss: for a service that starts
/// beside the ones it calls.
pub(crate) fn lazy_channel(url: &str, ca: Option<&[u8]>) -> Result<Channel> {
    Ok(endpoint(url, ca)?.connect_lazy())
}

fn endpoint(url: &str, ca: Option<&[u8]>) -> Result<Endpoint> {
    let mut endpoint = Endpoint::from_shared(url.to_owned()).with_context(|| format!("{url:?} is not a URL"))?;
    if url.starts_with("https://") {
        let mut tls = ClientTlsConfig::new().with_enabled_roots();
        if let Some(ca) = ca {
            tls = tls.ca_certificate(Certificate::from_pem(ca));
        }
        endpoint = endpoint.tls_config(tls)?;
    }
    Ok(endpoint)
}

/// Reads a plan: a JSON array of steps, or one step per line.
pub fn plan(text: &str) -> Result<Vec<PlanStep>> {
    if text.trim_start().starts_with('[') {
        return serde_json::from_str(text).context("the script is a JSON array of steps");
    }
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, l)| serde_json::from_str(l).with_context(|| format!("script line {}", n + 1)))
        .collect()
}

/// A hosted model: its provider's API, address and name.
#[derive(Debug, Clone)]
pub struct ModelChoice {
    pub provider: String,
    pub base_url: Option<String>,
    pub name: String,
}

/// The provider `choice` names, configured from the environment: the key from AGENT_MODEL_KEY
/// or the file AGENT_MODEL_KEY_FILE, the CA bundle, the proxy, the timeout and retries.
pub fn provider(choice: ModelChoice, get: &impl Fn(&str) -> Option<String>) -> Result<Provider> {
    Provider::new(provider_config(choice, get)?).map_err(anyhow::Error::msg)
}

/// [`provider`]'s configuration, checked, for a service that makes a provider per run.
pub fn provider_config(choice: ModelChoice, get: &impl Fn(&str) -> Option<String>) -> Result<ModelConfig> {
    let kind = Kind::parse(&choice.provider)
        .with_context(|| format!("--provider is openai or anthropic, not {:?}", choice.provider))?;
    let key = match (get("AGENT_MODEL_KEY"), get("AGENT_MODEL_KEY_FILE")) {
        (Some(_), Some(_)) => bail!("give AGENT_MODEL_KEY or AGENT_MODEL_KEY_FILE, not both"),
        (Some(k), None) => Key::new(k),
        (None, Some(f)) => Key::from_file(Path::new(&f)).map_err(anyhow::Error::msg)?,
        (None, None) if choice.base_url.as_deref().is_none_or(|u| u.starts_with("https://")) => {
            bail!("the {} key is missing: set AGENT_MODEL_KEY or AGENT_MODEL_KEY_FILE", kind.name())
        }
        (None, None) => Key::default(),
    };
    let mut config = ModelConfig::new(kind, choice.base_url, choice.name, key);
    let number = |k: &str, default: u64, range: std::ops::RangeInclusive<u64>| -> Result<u64> {
        let n = get(k).map_or(Ok(default), |v| v.parse().with_context(|| format!("{k} is a whole number")))?;
        anyhow::ensure!(range.contains(&n), "{k} is {} to {}, not {n}", range.start(), range.end());
        Ok(n)
    };
    config.timeout = Duration::from_secs(number("AGENT_MODEL_TIMEOUT_SECONDS", 60, 1..=600)?);
    config.retries = u32::try_from(number("AGENT_MODEL_RETRIES", 3, 0..=10)?)?;
    config.ca_bundle = get("AGENT_MODEL_CA").map(std::fs::read).transpose().context("AGENT_MODEL_CA cannot be read")?;
    config.proxy = get("HTTPS_PROXY").or_else(|| get("https_proxy"));
    config.no_proxy = get("NO_PROXY").or_else(|| get("no_proxy"));
    // Checked once here: the service's runs make theirs from the same configuration.
    Provider::new(config.clone()).map_err(anyhow::Error::msg)?;
    Ok(config)
}

/// Runs the task at `task_path` with the plan at `script` or the hosted `model`; writes the
/// trace to `trace` when given.
pub async fn run(
    task_path: &Path,
    script: Option<&Path>,
    model: Option<ModelChoice>,
    trace: Option<&Path>,
    get: impl Fn(&str) -> Option<String>,
) -> Result<String> {
    crate::observe::harness_metrics(&get).await?;
    if script.is_some() == model.is_some() {
        bail!("give --script, or --model (with --provider)");
    }
    // The model's settings are checked before anything is opened.
    let model = model.map(|choice| provider(choice, &get)).transpose()?;
    let text = std::fs::read_to_string(task_path).with_context(|| format!("reading {}", task_path.display()))?;
    let file: TaskFile =
        serde_json::from_str(&text).with_context(|| format!("{} is not a task", task_path.display()))?;
    let need = |k: &str| get(k).with_context(|| format!("{k} is required"));
    let ca = get("AGENT_CA").map(std::fs::read).transpose().context("AGENT_CA cannot be read")?;
    let token = need("AGENT_WORKER_TOKEN")?;
    let mut clients = Clients {
        runtime: proto::runtime::browser_runtime_client::BrowserRuntimeClient::new(
            channel(&need("AGENT_RUNTIME_URL")?, ca.as_deref()).await?,
        ),
        authorizer: proto::v1::authorizer_client::AuthorizerClient::new(
            channel(&need("AGENT_AUTHORIZER_URL")?, ca.as_deref()).await?,
        ),
        bearer: format!("Bearer {token}").parse().context("AGENT_WORKER_TOKEN is not a header value")?,
        request_id: None,
    };
    let task = start(&mut clients, &file).await?;
    let outcome = play(&mut clients, &task, script, model).await;
    // The run's browser goes back to the pool however the run ended.
    let close = rt::CloseSessionRequest { session_id: task.browser_session.clone() };
    let closed = clients.runtime.close_session(clients.req(close)).await;
    if let Err(e) = closed {
        tracing::warn!(session = %task.browser_session, error = %e, "the run's browser session did not close");
    }
    // The trace is kept however the run ended: a failed run's is the one most needed.
    let (trace_of, shots) = match &outcome {
        Ok(Ok(o)) => (o.trace.as_slice(), o.screenshots.as_slice()),
        Ok(Err(f)) => (f.trace.as_slice(), f.screenshots.as_slice()),
        Err(_) => (&[][..], &[][..]),
    };
    if let Some(path) = trace
        && let Err(e) = write_trace(path, trace_of, shots)
    {
        // The run's own end or failure is the answer; a trace that could not be written is said.
        tracing::error!(error = %e, "the run's trace could not be written");
        eprintln!("the run's trace could not be written: {e:#}");
    }
    Ok(report(&outcome??))
}

/// A run's trace as JSON lines at `path`, and each screenshot beside it as `path.<hex>.png`.
pub fn write_trace(path: &Path, steps: &[agent::run::TraceStep], shots: &[agent::run::Screenshot]) -> Result<()> {
    let mut text = String::new();
    for step in steps {
        text.push_str(&serde_json::to_string(step)?);
        text.push('\n');
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    for shot in shots {
        let hex = shot.digest.trim_start_matches("sha256:");
        let mut png = path.as_os_str().to_owned();
        png.push(format!(".{hex}.png"));
        std::fs::write(&png, &shot.png).with_context(|| format!("writing {}", Path::new(&png).display()))?;
    }
    Ok(())
}

/// The plan at `script`, or the hosted `model`, through the harness: the run's outcome, or how
/// it failed with what it had done.
async fn play(
    clients: &mut Clients,
    task: &agent::run::Task,
    script: Option<&Path>,
    model: Option<Provider>,
) -> Result<Result<Outcome, agent::run::RunFailed>> {
    Ok(match (script, model) {
        (Some(path), None) => {
            let steps = plan(&std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?)?;
            run_task(clients, task, &mut Scripted::from_plan(steps)).await
        }
        (None, Some(mut provider)) => run_task(clients, task, &mut provider).await,
        _ => bail!("give --script, or --model (with --provider)"),
    })
}

/// What a run did, as the operator reads it.
pub fn report(o: &Outcome) -> String {
    let mut counts: Vec<_> = o.counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    counts.sort();
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let t = &o.time;
    let per_step = t.harness().as_secs_f64() * 1e6 / f64::from(o.steps.max(1));
    let time = format!(
        "time: {:.1} ms in all; the harness {:.2} ms ({per_step:.0} µs a step), the runtime {:.1} ms, \
         the authorizer {:.1} ms, the owner {:.1} ms, the model {:.1} ms",
        ms(t.total),
        ms(t.harness()),
        ms(t.runtime),
        ms(t.authorizer),
        ms(t.owner),
        ms(t.model)
    );
    format!(
        "run ended: {} after {} steps{}\n{time}\n{}",
        match &o.end {
            agent::rules::End::Done { reference } => format!("done, reference {reference}"),
            agent::rules::End::Escalated { reason, detail } => format!("escalated ({reason}) {detail}"),
        },
        o.steps,
        if counts.is_empty() { String::new() } else { format!("; enforced: {}", counts.join(", ")) },
        o.log.join("\n")
    )
}
