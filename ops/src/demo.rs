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

/// The lesson: three answers typed from the task record, a purchase button, a link off the
/// lesson, and a form whose read-back shows a value the page changed and one it filled itself.
pub const PAGES: [(&str, &str); 9] = [
    (
        "/lesson/1",
        "<!doctype html><title>Spanish, lesson 1</title><h1>Lesson 1: greetings</h1>\
         <p><i>Hola</i> means hello. <i>Gracias</i> means thank you. <i>Adiós</i> means goodbye.</p>\
         <a href=\"/lesson/2\">Start</a>",
    ),
    (
        "/lesson/2",
        "<!doctype html><title>Spanish, question 1</title><h1>How do you say hello?</h1>\
         <label>Answer <input></label> <a href=\"/lesson/3\">Check</a>",
    ),
    (
        "/lesson/3",
        "<!doctype html><title>Spanish, well done</title><h1>Correct!</h1>\
         <p>Keep going, or get more hearts.</p><button>Buy 100 gems for $4.99</button> <a href=\"/lesson/4\">Next</a>",
    ),
    (
        "/lesson/4",
        "<!doctype html><title>Spanish, question 2</title><h1>How do you say thank you?</h1>\
         <label>Answer <input></label> <a href=\"/lesson/5\">Check</a>",
    ),
    (
        "/lesson/5",
        "<!doctype html><title>Spanish, well done</title><h1>Correct!</h1>\
         <p><a href=\"https://www.lesson.test/stories/1\">Read a story</a></p><a href=\"/lesson/6\">Next</a>",
    ),
    (
        "/lesson/6",
        "<!doctype html><title>Spanish, question 3</title><h1>How do you say goodbye?</h1>\
         <label>Answer <input></label> <a href=\"/lesson/7\">Check</a>",
    ),
    (
        "/lesson/7",
        "<!doctype html><title>Spanish, your certificate</title><h1>Your certificate</h1>\
         <form action=\"/lesson/done\" method=\"get\">\
         <label>Full name <input name=\"name\"></label>\
         <label>City <input name=\"city\" oninput=\"if (this.value === 'London') this.value = 'Londonderry'\"></label>\
         <label>Level <input name=\"level\" value=\"Advanced\"></label>\
         <button>Confirm certificate</button></form>",
    ),
    ("/lesson/done", "<!doctype html><title>Certificate ready: reference ES-1001</title><p>Well done."),
    ("/stories/1", "<!doctype html><title>A story</title><p>Once upon a time."),
];

/// The step budget the demo's plan needs, with room to spare (the worker's own is
/// `WORKER_MAX_STEPS`, 100 by default).
pub const MAX_STEPS: u32 = 40;

/// What the agent may type, by field id: the task record (the model sees the ids only).
pub const RECORD: &str =
    r#"{"answer_1": "hola", "answer_2": "gracias", "answer_3": "adios", "name": "Ada Lovelace", "city": "London"}"#;

/// The plan the scripted model plays, paced as a model would be (`scripts/run --demo` gives it to
/// the worker): the first act asks; once allowed for the task the answers go without a card,
/// while a purchase and a link off the lesson each ask (the run goes on without them), and the
/// certificate's form waits for the owner's review.
pub const PLAN: &str = r#"{"tool": "snapshot"}
{"tool": "click", "name": "Start"}
{"tool": "request_approval", "name": "Start"}
{"tool": "click", "name": "Start", "with_token": true}
{"tool": "snapshot"}
{"tool": "type", "name": "Answer", "field_id": "answer_1"}
{"tool": "snapshot"}
{"tool": "click", "name": "Check"}
{"tool": "snapshot"}
{"tool": "click", "name": "Buy 100 gems for $4.99", "consequential": true}
{"tool": "snapshot"}
{"tool": "click", "name": "Next"}
{"tool": "snapshot"}
{"tool": "type", "name": "Answer", "field_id": "answer_2"}
{"tool": "snapshot"}
{"tool": "click", "name": "Check"}
{"tool": "snapshot"}
{"tool": "click", "name": "Read a story"}
{"tool": "snapshot"}
{"tool": "click", "name": "Next"}
{"tool": "snapshot"}
{"tool": "type", "name": "Answer", "field_id": "answer_3"}
{"tool": "snapshot"}
{"tool": "click", "name": "Check"}
{"tool": "snapshot"}
{"tool": "type", "name": "Full name", "field_id": "name"}
{"tool": "snapshot"}
{"tool": "type", "name": "City", "field_id": "city"}
{"tool": "snapshot"}
{"tool": "click", "name": "Confirm certificate", "consequential": true}
{"tool": "request_approval", "name": "Confirm certificate", "consequential": true}
{"tool": "click", "name": "Confirm certificate", "consequential": true, "with_token": true}
{"tool": "snapshot"}"#;

/// Serves the lesson until Ctrl-C; writes `dir/browser-args.json` (BROWSER_EXTRA_ARGS) and
/// `dir/fixture-ca.pem` (BROWSER_CA_BUNDLE) for the runtime.
pub async fn site(dir: &Path) -> Result<()> {
    let fixture = Fixture::start(&[HOST], dir).await.context("starting the lesson site")?;
    for (path, html) in PAGES {
        fixture.page(HOST, path, html);
    }
    write_plan(dir)?;
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

/// Claims the demo profile for `owner`, opens the chat, and starts the lesson there as the
/// owner's task (the owner's message, through the tenant's gateway credential, as the console
/// would send it): the worker service `scripts/run --demo` starts takes it and plays [`PLAN`].
/// Needs AGENT_AUTHORIZER_URL, AGENT_CA, AGENT_WORKER_TOKEN and the tenant's DEMO_PROFILES_TOKEN
/// and DEMO_GATEWAY_TOKEN.
pub async fn run(owner: &str, get: impl Fn(&str) -> Option<String>) -> Result<String> {
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
    let task = pb::StartTaskRequest {
        session_id: SESSION.into(),
        message_id: format!("demo-{}", uuid::Uuid::new_v4().simple()),
        goal: "Do today's Spanish lesson".into(),
        subgoals: vec!["Finish the lesson and get its certificate".into()],
        start_url: format!("https://{HOST}/lesson/1"),
    };
    authorizer.start_task(with(&need("DEMO_GATEWAY_TOKEN")?, Some(owner), task)?).await?;
    Ok(format!("the lesson is started as a task in chat {SESSION}"))
}

/// Writes the demo's plan and task record into `dir`, for the worker (WORKER_SCRIPT,
/// WORKER_TASK_RECORD).
pub fn write_plan(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("plan.jsonl"), PLAN)?;
    std::fs::write(dir.join("record.json"), RECORD)?;
    Ok(())
}
