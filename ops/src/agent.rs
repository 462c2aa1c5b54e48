//! `grantctl agent run`: one task through the harness, configured from the environment.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use agent::model::{PlanStep, Scripted};
use agent::openai::{Endpoint as ModelEndpoint, OpenAi};
use agent::run::{Clients, Outcome, TaskFile, run as run_task, start};
use proto::runtime as rt;

pub(crate) async fn channel(url: &str, ca: Option<&[u8]>) -> Result<Channel> {
    let mut endpoint = Endpoint::from_shared(url.to_owned()).with_context(|| format!("{url:?} is not a URL"))?;
    if url.starts_with("https://") {
        let mut tls = ClientTlsConfig::new().with_enabled_roots();
        if let Some(ca) = ca {
            tls = tls.ca_certificate(Certificate::from_pem(ca));
        }
        endpoint = endpoint.tls_config(tls)?;
    }
    endpoint.connect().await.with_context(|| format!("connecting to {url}"))
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

/// Runs the task at `task_path` with the plan at `script` or the model `(url, name)`.
pub async fn run(
    task_path: &Path,
    script: Option<&Path>,
    model: Option<(String, String)>,
    get: impl Fn(&str) -> Option<String>,
) -> Result<String> {
    crate::observe::harness_metrics(&get).await?;
    if script.is_some() == model.is_some() {
        bail!("give --script, or --model-url and --model");
    }
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
    };
    let task = start(&mut clients, &file).await?;
    let outcome = play(&mut clients, &task, script, model, &get).await;
    // The run's browser goes back to the pool however the run ended.
    let close = rt::CloseSessionRequest { session_id: task.browser_session.clone() };
    let closed = clients.runtime.close_session(clients.req(close)).await;
    let outcome = outcome?;
    if let Err(e) = closed {
        tracing::warn!(session = %task.browser_session, error = %e, "the run's browser session did not close");
    }
    Ok(report(&outcome))
}

/// The plan at `script`, or the model `(url, name)`, through the harness.
async fn play(
    clients: &mut Clients,
    task: &agent::run::Task,
    script: Option<&Path>,
    model: Option<(String, String)>,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Outcome> {
    Ok(match (script, model) {
        (Some(path), None) => {
            let steps = plan(&std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?)?;
            run_task(clients, task, &mut Scripted::from_plan(steps)).await?
        }
        (None, Some((base_url, name))) => {
            let endpoint = ModelEndpoint {
                base_url,
                api_key: get("AGENT_MODEL_KEY").unwrap_or_default(),
                model: name,
                timeout: Duration::from_secs(60),
                retries: 2,
            };
            run_task(clients, task, &mut OpenAi::new(endpoint).map_err(anyhow::Error::msg)?).await?
        }
        _ => bail!("give --script, or --model-url and --model"),
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
