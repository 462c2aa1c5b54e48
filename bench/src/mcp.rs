//! `grantctl-bench mcp`: the same page and the same steps (snapshot, click, snapshot, type)
//! through `grantctl mcp stdio` and through Playwright's MCP server, on the same Chromium, driven
//! by one MCP client (the official TypeScript SDK) over stdio, the two interleaved round by round.
//! Ours runs each act through the authorizer (two `grantctl serve authorizer` replicas on
//! PostgreSQL, under a task permission the owner gave on the first card) and the runtime (served
//! in this process); Playwright's acts on the page directly. Each step's time is the client
//! library's, from the call to its result.

use anyhow::{Context, Result};
use mcp_client::{Called, Client, look, on};
use proto::v1 as pb;
use serde_json::json;

use crate::authorize::TENANT;

const HOST: &str = "www.lesson.test";
const ORIGIN: &str = "https://www.lesson.test";
/// Tap names its taps (so no two rounds' pages read the same, which would end a run as a page
/// seen three times); the answer box takes the typed text.
const PAGE: &str = "<!doctype html><title>Bench</title><h1>Tap the cat</h1>\
<button id=t onclick=\"this.textContent = 'Tap ' + (++this.dataset.n)\" data-n=0>Tap 0</button>\
<label>Answer <input id=a></label>";
/// Playwright's MCP server, as `npm install --prefix target/tools` puts it.
const PLAYWRIGHT: &str = "target/tools/node_modules/@playwright/mcp/cli.js";
pub const PLAYWRIGHT_VERSION: &str = "0.0.86";

/// Each step's times, in milliseconds.
#[derive(Debug, Default)]
struct Steps {
    snapshot: Vec<f64>,
    click: Vec<f64>,
    typed: Vec<f64>,
}

impl Steps {
    fn row(name: &str, v: &mut [f64]) -> (f64, f64) {
        v.sort_by(f64::total_cmp);
        let pick = |p: usize| v[(v.len() * p / 100).min(v.len() - 1)];
        let _ = name;
        (pick(50), pick(99))
    }
}

pub async fn run(url: &str, rounds: usize) -> Result<String> {
    let scratch = crate::Scratch::create(url).await?;
    let db_url = format!("{}/{}", url.rsplit_once('/').map_or(url, |(base, _)| base), scratch.name);
    let result = run_on(scratch.config.clone(), &db_url, rounds).await;
    scratch.drop_now().await?;
    result
}

/// The full name of the node whose name starts with `prefix`, in our snapshot.
fn named(snapshot: &Called, prefix: &str) -> Result<String> {
    let start = format!("\"{prefix}");
    let line = snapshot.text.lines().find(|l| l.contains(" button ") && l.contains(&start)).context("no Tap")?;
    let quoted = &line[line.find('"').context("a name")?..];
    Ok(serde_json::Deserializer::from_str(quoted).into_iter::<String>().next().context("a name")??)
}

/// The ref Playwright's snapshot gives the element whose name starts with `name`
/// (`- button "Tap 3" [ref=e3]`).
fn playwright_ref(snapshot: &Called, name: &str) -> Result<String> {
    let quoted = format!("\"{name}");
    let line = snapshot.text.lines().find(|l| l.contains(&quoted) && l.contains("[ref=")).context("no such node")?;
    let at = line.find("[ref=").context("a ref")? + 5;
    Ok(line[at..].split(']').next().unwrap_or_default().to_owned())
}

async fn run_on(config: tokio_postgres::Config, db_url: &str, rounds: usize) -> Result<String> {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().context("the workspace")?.to_path_buf();
    let playwright = root.join(PLAYWRIGHT);
    anyhow::ensure!(
        playwright.is_file(),
        "Playwright's MCP server is missing: npm install --prefix target/tools @playwright/mcp@{PLAYWRIGHT_VERSION}"
    );
    super::lesson_settings(db_url, TENANT).await?;
    let stage = crate::stop::Stage::start(config, db_url, "mcp", 1).await?;
    let (replicas, tokens, fixture, runtime_port) =
        (&stage.replicas, &stage.tokens, &stage.fixture, stage.runtime_port);
    fixture.page(HOST, "/lesson/bench", PAGE);

    // The owner's chat on a profile of theirs, its newest message the owner's, and a key for an
    // app with no other tools.
    let mut authorizer = pb::authorizer_client::AuthorizerClient::new(tokens.connect(&replicas.endpoints[0]).await?);
    let profile = pb::ProfileEventRequest {
        profile_id: "bench-profile".into(),
        event: pb::ProfileEvent::Created as i32,
        owner_principal_id: "owner".into(),
    };
    authorizer.record_profile_event(tokens.profiles(profile)).await?;
    let chat = pb::CreateSessionRequest {
        session_id: "bench-chat".into(),
        browser_profile_id: "bench-profile".into(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    };
    authorizer.create_session(tokens.worker(chat)).await?;
    let said = pb::RecordMessageRequest { session_id: "bench-chat".into(), message_id: "m1".into(), from_owner: true };
    authorizer.record_message(tokens.gateway(said)).await?;
    let connect = pb::ConnectAgentRequest {
        session_id: "bench-chat".into(),
        browser_only: true,
        minutes: 120,
        start_url: format!("{ORIGIN}/lesson/bench"),
    };
    let agent = authorizer.connect_agent(tokens.gateway(connect)).await?.into_inner();
    let record = stage.records.join(TENANT).join("owner");
    std::fs::create_dir_all(&record)?;
    std::fs::write(record.join(format!("mcp-{}.json", agent.credential_id)), r#"{"answer": "el gato"}"#)?;

    let grantctl = super::grantctl()?;
    let mut ours = Client::start().await;
    let ours_env = [
        ("MCP_KEY", agent.token.clone()),
        ("MCP_AUTHORIZER_URL", replicas.endpoints[1].clone()),
        ("MCP_AUTHORIZER_CA", stage.ca_file.display().to_string()),
        ("MCP_RUNTIME_URL", format!("http://127.0.0.1:{runtime_port}")),
        ("MCP_MAX_STEPS", "10000".to_owned()),
        ("RUST_LOG", "warn,mcp=info".to_owned()),
    ];
    ours.connect_stdio(&grantctl.display().to_string(), &["mcp", "stdio"], &ours_env).await;
    // The first click asks the owner, who allows it for the task; the rest run under it.
    let page = ours.call("snapshot", look()).await;
    let asked = ours.call("click", on(&page, &named(&page, "Tap")?, false)).await;
    anyhow::ensure!(asked.code() == "APPROVAL_REQUIRED", "the first click: {asked:?}");
    let pending = pb::ListApprovalsRequest { session_id: "bench-chat".into(), pending_only: true, min_position: None };
    let card = authorizer.list_approvals(tokens.gateway(pending)).await?.into_inner().approvals;
    let card = card.first().context("the first card")?.clone();
    let offer = card.offer.clone().context("a task permission is offered")?;
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin,
        offered_path_prefix: offer.path_prefix,
    };
    authorizer.resolve_approval(tokens.gateway(resolve)).await?;

    // Playwright's server on the same Chromium, reaching the same fixture site.
    let config_file = stage.dir.join("playwright.json");
    let launch = json!({ "browser": {
        "browserName": "chromium",
        "launchOptions": { "executablePath": "/usr/bin/chromium", "headless": true,
            "args": [fixture.resolver_rule(), "--no-sandbox"] },
        "contextOptions": { "ignoreHTTPSErrors": true } } });
    std::fs::write(&config_file, launch.to_string())?;
    let mut peer = Client::start().await;
    let args =
        [playwright.display().to_string(), "--isolated".into(), "--config".into(), config_file.display().to_string()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    peer.connect_stdio("node", &args[..], &[("PATH", std::env::var("PATH").unwrap_or_default())]).await;
    let opened = peer.call("browser_navigate", json!({ "url": format!("{ORIGIN}/lesson/bench") })).await;
    anyhow::ensure!(!opened.error, "Playwright could not open the page: {}", opened.text);

    let (mut guarded, mut plain) = (Steps::default(), Steps::default());
    let warmup = 5;
    for round in 0..rounds + warmup {
        let keep = round >= warmup;
        // Ours: every act names its snapshot, and an act voids it.
        let page = ours.call("snapshot", look()).await;
        let clicked = ours.call("click", on(&page, &named(&page, "Tap")?, false)).await;
        anyhow::ensure!(!clicked.error, "our click: {}", clicked.text);
        let again = ours.call("snapshot", look()).await;
        let mut typing = on(&again, "Answer", false);
        typing["field_id"] = json!("answer");
        let typed = ours.call("type", typing).await;
        anyhow::ensure!(!typed.error, "our type: {}", typed.text);
        if keep {
            guarded.snapshot.extend([page.ms, again.ms]);
            guarded.click.push(clicked.ms);
            guarded.typed.push(typed.ms);
        }
        // Playwright's: the same steps.
        let page = peer.call("browser_snapshot", json!({})).await;
        let tap = playwright_ref(&page, "Tap")?;
        let clicked = peer.call("browser_click", json!({ "element": "Tap button", "target": tap })).await;
        anyhow::ensure!(!clicked.error, "Playwright's click: {}", clicked.text);
        let again = peer.call("browser_snapshot", json!({})).await;
        let answer = playwright_ref(&again, "Answer")?;
        let typed =
            peer.call("browser_type", json!({ "element": "Answer box", "target": answer, "text": "el gato" })).await;
        anyhow::ensure!(!typed.error, "Playwright's type: {}", typed.text);
        if keep {
            plain.snapshot.extend([page.ms, again.ms]);
            plain.click.push(clicked.ms);
            plain.typed.push(typed.ms);
        }
    }
    // Our run ends, so its server logs where the run's time went.
    let evidence = "SUBGOAL 1 | evidence: none | intent: escalate (uncertain)";
    ours.call("escalate", json!({ "reason": "uncertain", "evidence": evidence })).await;
    ours.close().await;
    peer.close().await;
    stage.end();
    let mut out = format!(
        "{rounds} rounds of snapshot, click, snapshot, type on one page, one MCP client over stdio\n\
         step       grantctl mcp p50 / p99 ms   Playwright MCP p50 / p99 ms   ratio p50 / p99\n"
    );
    for (name, g, p) in [
        ("snapshot", &mut guarded.snapshot, &mut plain.snapshot),
        ("click", &mut guarded.click, &mut plain.click),
        ("type", &mut guarded.typed, &mut plain.typed),
    ] {
        let ((g50, g99), (p50, p99)) = (Steps::row(name, g), Steps::row(name, p));
        out.push_str(&format!(
            "{name:<10} {g50:>10.1} / {g99:>7.1}          {p50:>10.1} / {p99:>7.1}         {:>5.2}× / {:>5.2}×\n",
            g50 / p50,
            g99 / p99
        ));
    }
    Ok(out)
}
