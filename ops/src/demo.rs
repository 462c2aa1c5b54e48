//! `grantctl demo`: the lesson a newcomer watches. `demo site` serves a small lesson on loopback
//! (the fixture site, with its own CA, reached by Chromium through a host-resolver rule), and
//! `demo run` plays a scripted lesson through the harness against the running stack: its first
//! act asks the owner on the console, and once the owner allows it for the task the rest run
//! with no card while the banner counts them.

use std::path::Path;

use anyhow::{Context, Result};
use browser_runtime::fixture::Fixture;
use proto::v1 as pb;

pub const HOST: &str = "www.lesson.test";
/// The task-grant scope the demo's tenant is configured with.
pub const SCOPE: &str = "https://www.lesson.test/lesson";
/// The demo's chat session, and the browser profile it is bound to.
pub const SESSION: &str = "demo";
pub const PROFILE: &str = "demo-profile";

const PAGES: [(&str, &str); 4] = [
    (
        "/lesson/1",
        "<!doctype html><title>Spanish, lesson 1</title><h1>Lesson 1: greetings</h1>\
         <p><i>Hola</i> means hello.</p><a href=\"/lesson/2\">Next</a>",
    ),
    (
        "/lesson/2",
        "<!doctype html><title>Spanish, lesson 2</title><h1>Lesson 2: thanks</h1>\
         <p><i>Gracias</i> means thank you.</p><a href=\"/lesson/3\">Next</a> <button>Upgrade to premium</button>",
    ),
    (
        "/lesson/3",
        "<!doctype html><title>Spanish, lesson 3</title><h1>Lesson 3: goodbye</h1>\
         <p><i>Adiós</i> means goodbye.</p><a href=\"/lesson/done\">Finish</a>",
    ),
    ("/lesson/done", "<!doctype html><title>Unit complete: reference ES-1001</title><p>Well done."),
];

/// The plan the scripted model plays: ask once, then walk the lesson to its confirmation.
const PLAN: &str = r#"{"tool": "snapshot"}
{"tool": "click", "name": "Next"}
{"tool": "request_approval", "name": "Next"}
{"tool": "click", "name": "Next", "with_token": true}
{"tool": "snapshot"}
{"tool": "click", "name": "Next"}
{"tool": "snapshot"}
{"tool": "click", "name": "Finish"}
{"tool": "snapshot"}"#;

/// Serves the lesson until Ctrl-C; writes `dir/browser-args.json` (BROWSER_EXTRA_ARGS) and
/// `dir/fixture-ca.pem` (BROWSER_CA_BUNDLE) for the runtime.
pub async fn site(dir: &Path) -> Result<()> {
    let fixture = Fixture::start(&[HOST], dir).await.context("starting the lesson site")?;
    for (path, html) in PAGES {
        fixture.page(HOST, path, html);
    }
    let args = dir.join("browser-args.json");
    std::fs::write(&args, serde_json::to_string(&[fixture.resolver_rule()])?)?;
    println!(
        "lesson site: https://{HOST}/lesson/1 (loopback port {}; the runtime reaches it by {})",
        fixture.port,
        args.display()
    );
    let _ = tokio::signal::ctrl_c().await;
    Ok(())
}

/// `message` with `token` as its bearer, and (for the gateway's credential) the owner it speaks for.
fn with<T>(token: &str, owner: Option<&str>, message: T) -> Result<tonic::Request<T>> {
    let mut req = tonic::Request::new(message);
    req.metadata_mut().insert("authorization", format!("Bearer {token}").parse()?);
    if let Some(owner) = owner {
        req.metadata_mut().insert("x-principal-id", owner.parse()?);
        req.metadata_mut().insert("x-owner-scopes", "approval.resolve".parse()?);
    }
    Ok(req)
}

/// Claims the demo profile for `owner`, opens the chat with the owner's first message, and
/// plays the lesson through `grantctl agent run`'s path. Needs the agent's variables
/// (AGENT_RUNTIME_URL, AGENT_AUTHORIZER_URL, AGENT_CA, AGENT_WORKER_TOKEN) and the tenant's
/// DEMO_PROFILES_TOKEN and DEMO_GATEWAY_TOKEN (the gateway's, which records the owner's message).
pub async fn run(dir: &Path, owner: &str, get: impl Fn(&str) -> Option<String>) -> Result<String> {
    crate::observe::harness_metrics(&get).await?;
    let need = |k: &str| get(k).with_context(|| format!("{k} is required"));
    let ca = get("AGENT_CA").map(std::fs::read).transpose().context("AGENT_CA cannot be read")?;
    let channel = crate::agent::channel(&need("AGENT_AUTHORIZER_URL")?, ca.as_deref()).await?;
    let mut authorizer = pb::authorizer_client::AuthorizerClient::new(channel);
    let claim = pb::ProfileEventRequest {
        profile_id: PROFILE.into(),
        event: pb::ProfileEvent::Created as i32,
        owner_principal_id: owner.into(),
    };
    authorizer.record_profile_event(with(&need("DEMO_PROFILES_TOKEN")?, None, claim)?).await?;
    let chat = pb::CreateSessionRequest {
        session_id: SESSION.into(),
        browser_profile_id: PROFILE.into(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    };
    match authorizer.create_session(with(&need("AGENT_WORKER_TOKEN")?, None, chat)?).await {
        Err(s) if s.code() != tonic::Code::AlreadyExists => return Err(s.into()),
        _ => {}
    }
    // Each demo is a new turn of the owner's: a permission allowed in an earlier one does not
    // carry over.
    let said = pb::RecordMessageRequest {
        session_id: SESSION.into(),
        message_id: format!("demo-{}", uuid::Uuid::new_v4().simple()),
        from_owner: true,
    };
    authorizer.record_message(with(&need("DEMO_GATEWAY_TOKEN")?, Some(owner), said)?).await?;
    let run_id = format!("demo-{}", uuid::Uuid::new_v4().simple());
    let task = serde_json::json!({
        "chat_session": SESSION, "browser_profile": PROFILE,
        "start_url": format!("https://{HOST}/lesson/1"), "allowed_origins": [format!("https://{HOST}")],
        "run_id": run_id, "subgoals": ["Finish the lesson's three pages"], "max_steps": 20,
        "agent_version": "demo-script-1", "approval_wait_seconds": 600
    });
    std::fs::create_dir_all(dir)?;
    let (task_path, plan_path) = (dir.join("task.json"), dir.join("plan.jsonl"));
    std::fs::write(&task_path, task.to_string())?;
    std::fs::write(&plan_path, PLAN)?;
    crate::agent::run(&task_path, Some(&plan_path), None, None, get).await
}
