//! The hosted models over HTTPS, against stub providers on loopback under a throwaway CA (no
//! network): each API asked in its own shape and its answer read; a slow answer, a 429 with
//! Retry-After and a 500 tried again, a 401 not; a malformed call and two calls left for the
//! rules to refuse; the key in no error and no log line; the proxy taken and bypassed as told;
//! only a trusted certificate, and plain HTTP on loopback only. Then a whole run through each
//! provider, in Chromium.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent::model::{Model, Turn, View};
use agent::provider::{Config, Key, Kind, Provider};
use agent::rules::{Rules, Verdict};
use serde_json::{Value, json};
use tests::model_stub::{Proxy, Reply, Stub, anthropic, openai};

const KEY: &str = "sk-test-0123456789abcdef-not-for-logs";

fn config(kind: Kind, stub: &Stub) -> Config {
    let mut c = Config::new(kind, Some(stub.base_url.clone()), "stub-model".into(), Key::new(KEY));
    c.ca_bundle = Some(stub.ca_pem.clone().into_bytes());
    c.timeout = Duration::from_secs(2);
    c.retries = 2;
    c.longest_wait = Duration::from_secs(5);
    c
}

fn view() -> View<'static> {
    View { system: "SYSTEM PROMPT", prompt: "STEP 1 PROMPT", snapshot: None, last_result: "", step: 1, subgoal: 1 }
}

const LINE: &str = "SUBGOAL 1 | evidence: none | intent: observe the page";

async fn ask(config: Config) -> Result<Turn, String> {
    Provider::new(config)?.next(view()).await.map_err(|e| e.to_string())
}

#[tokio::test]
async fn each_provider_is_asked_in_its_own_shape_and_its_answer_read() {
    let stub = Stub::start(|_, _| Reply::ok(openai(&[("snapshot", json!({}))], LINE))).await;
    let turn = ask(config(Kind::OpenAi, &stub)).await.unwrap();
    assert_eq!(turn, Turn { calls: vec![("snapshot".into(), json!({}))], evidence: LINE.into(), extra: String::new() });
    let sent = &stub.seen()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(sent.body["model"], "stub-model");
    assert_eq!(sent.body["messages"][0], json!({ "role": "system", "content": "SYSTEM PROMPT" }));
    assert_eq!(sent.body["messages"][1], json!({ "role": "user", "content": "STEP 1 PROMPT" }));
    let tools = agent::tools::tools();
    let functions = sent.body["tools"].as_array().unwrap();
    assert_eq!(functions.len(), tools.len());
    for (f, t) in functions.iter().zip(&tools) {
        assert_eq!((&f["function"]["name"], &f["function"]["parameters"]), (&json!(t.name), &t.input_schema));
    }

    let call = json!({ "reason": "uncertain", "refs": ["n3"] });
    let stub = Stub::start(move |_, _| Reply::ok(anthropic(&[("escalate", call.clone())], LINE))).await;
    let turn = ask(config(Kind::Anthropic, &stub)).await.unwrap();
    assert_eq!(turn.calls, vec![("escalate".to_owned(), json!({ "reason": "uncertain", "refs": ["n3"] }))]);
    assert_eq!(turn.evidence, LINE);
    let sent = &stub.seen()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None, "the key travels once");
    assert_eq!(sent.body["system"], "SYSTEM PROMPT");
    assert_eq!(sent.body["messages"], json!([{ "role": "user", "content": "STEP 1 PROMPT" }]));
    assert!(sent.body["max_tokens"].as_u64().is_some_and(|n| n > 0));
    let first = &sent.body["tools"][0];
    assert_eq!((&first["name"], &first["input_schema"]), (&json!(tools[0].name), &tools[0].input_schema));
}

#[tokio::test]
async fn a_slow_answer_a_429_and_a_500_are_tried_again_and_a_401_is_not() {
    let ok = openai(&[("snapshot", json!({}))], LINE);
    // Slow past the timeout, then a 429 asking for one second, then a 500, then the answer.
    let answer = ok.clone();
    let stub = Stub::start(move |i, _| match i {
        0 => Reply::ok(answer.clone()).after(Duration::from_secs(4)),
        1 => Reply::status(429, json!({ "error": { "message": "slow down" } })).with_header("retry-after", "1"),
        2 => Reply::status(500, json!({ "error": { "message": "overloaded" } })),
        _ => Reply::ok(answer.clone()),
    })
    .await;
    let mut c = config(Kind::OpenAi, &stub);
    c.retries = 3;
    let turn = ask(c).await.unwrap();
    assert_eq!(turn.calls[0].0, "snapshot");
    let seen = stub.seen();
    assert_eq!(seen.len(), 4, "a timeout, a 429 and a 500, each tried again");
    assert!(seen[2].at.duration_since(seen[1].at) >= Duration::from_secs(1), "Retry-After is honoured");

    // Every try fails: the error says who answered what, and how often it was asked.
    let stub = Stub::start(|_, _| Reply::status(503, json!({ "error": { "message": "down for maintenance" } }))).await;
    let err = ask(config(Kind::Anthropic, &stub)).await.unwrap_err();
    assert!(err.contains("anthropic at localhost answered 503: down for maintenance (after 3 tries)"), "{err}");
    assert_eq!(stub.seen().len(), 3);

    // A 4xx other than 429 will not get better by asking again; nor will a wait longer than a
    // step waits.
    let stub = Stub::start(|_, _| Reply::status(400, json!({ "error": { "message": "bad tools" } }))).await;
    let err = ask(config(Kind::OpenAi, &stub)).await.unwrap_err();
    assert!(err.contains("openai at localhost answered 400: bad tools"), "{err}");
    assert_eq!(stub.seen().len(), 1);
    let stub =
        Stub::start(|_, _| Reply::status(429, json!({ "error": "quota" })).with_header("retry-after", "3600")).await;
    let err = ask(config(Kind::OpenAi, &stub)).await.unwrap_err();
    assert!(err.contains("asked to wait 3600 s"), "{err}");
    assert_eq!(stub.seen().len(), 1);
}

#[tokio::test]
async fn a_malformed_call_two_calls_and_text_beside_a_call_are_refused_by_the_rules() {
    let click = json!({ "snapshot_id": "snap_0123456789ab", "ref": "n1", "expected_role": "button",
        "expected_name": "Next", "consequential": false });
    let stub = Stub::start(move |i, _| {
        Reply::ok(match i {
            0 => {
                // Arguments that are not JSON.
                let mut a = openai(&[("click", json!({}))], LINE);
                a["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = json!("{\"ref\": n1");
                a
            }
            1 => openai(&[("snapshot", json!({})), ("click", click.clone())], LINE),
            _ => openai(&[("snapshot", json!({}))], &format!("{LINE}\nNext I will click the button.")),
        })
    })
    .await;
    let mut provider = Provider::new(config(Kind::OpenAi, &stub)).unwrap();
    let mut rules = Rules::new(10);
    for rule in ["schema", "one_action_per_turn", "extra_text"] {
        let turn = provider.next(view()).await.unwrap();
        match rules.reply(&turn) {
            Verdict::Refuse { rule: got, .. } => assert_eq!(got, rule, "{turn:?}"),
            other => panic!("{rule}: {other:?}"),
        }
    }
    assert_eq!(rules.steps(), 3, "each refused turn is a step");
}

/// Log lines written while `f` runs, on this thread.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn the_key_is_in_no_error_and_no_log_line() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Providers echo a key they refuse; and a server error may too.
    let echo = format!("Incorrect API key provided: {KEY}");
    let said = echo.clone();
    let stub = Stub::start(move |i, _| {
        Reply::status(if i == 0 { 500 } else { 401 }, json!({ "error": { "message": said.clone() } }))
    })
    .await;
    let c = config(Kind::OpenAi, &stub);
    let shown = format!("{c:?}");
    let err = ask(c).await.unwrap_err();
    assert_eq!(stub.seen().len(), 2, "the 500 tried again, the 401 final");
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("model call failed; trying again"), "the retry is logged: {logs}");
    assert!(err.contains("Incorrect API key provided: [REDACTED]"), "{err}");
    for (what, text) in [("the error", &err), ("the log", &logs), ("the configuration", &shown)] {
        assert!(!text.contains(KEY), "{what} holds the key: {text}");
    }
}

#[tokio::test]
async fn the_proxy_is_taken_and_no_proxy_bypasses_it() {
    let ok = openai(&[("snapshot", json!({}))], LINE);
    let stub = Stub::start(move |_, _| Reply::ok(ok.clone())).await;
    let proxy = Proxy::start().await;
    let mut c = config(Kind::OpenAi, &stub);
    c.proxy = Some(proxy.url.clone());
    ask(c.clone()).await.unwrap();
    assert_eq!(*proxy.tunnels.lock().unwrap(), [format!("localhost:{}", stub.port)]);
    c.no_proxy = Some("example.test, localhost".into());
    ask(c).await.unwrap();
    assert_eq!(proxy.tunnels.lock().unwrap().len(), 1, "NO_PROXY names the host: no tunnel");
    assert_eq!(stub.seen().len(), 2);
}

#[tokio::test]
async fn only_a_trusted_certificate_and_plain_http_on_loopback_are_taken() {
    let ok = openai(&[("snapshot", json!({}))], LINE);
    let stub = Stub::start(move |_, _| Reply::ok(ok.clone())).await;
    // The system's roots do not hold the stub's CA.
    let mut c = config(Kind::OpenAi, &stub);
    c.ca_bundle = None;
    c.retries = 0;
    let err = ask(c).await.unwrap_err();
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    assert!(stub.seen().is_empty(), "nothing was sent to a server the client does not trust");
    let url = |u: &str| Config::new(Kind::OpenAi, Some(u.into()), "m".into(), Key::new(KEY));
    for refused in ["http://api.example.com/v1", "ftp://localhost/v1", "https://user:pw@api.example.com/v1"] {
        assert!(Provider::new(url(refused)).is_err(), "{refused}");
    }
    assert!(Provider::new(url("http://127.0.0.1:9/v1")).is_ok(), "a local model on loopback");
    let mut keyless = url("https://api.example.com/v1");
    keyless.key = Key::default();
    assert!(Provider::new(keyless).unwrap_err().contains("key is empty"));
}

/// A provider that plays the lesson's run from what each prompt shows: observe, click Next, ask
/// for the approval the click needs, click with the token, observe the confirmation.
fn lesson_model(prompt: &str) -> (&'static str, Value, String) {
    let last = prompt.split("RESULT OF YOUR LAST ACTION\n").nth(1).and_then(|r| r.lines().next()).unwrap_or("");
    let block = prompt.split("<<<UNTRUSTED_SNAPSHOT ").nth(1).unwrap_or("");
    let snapshot_id = block.split_whitespace().next().unwrap_or("").to_owned();
    let next = block.lines().find(|l| l.ends_with("\"Next\"")).and_then(|l| l.split_whitespace().next());
    let observe = ("snapshot", json!({}), LINE.to_owned());
    let Some(node) = next.filter(|_| {
        last.starts_with("snapshot ") || last.contains("APPROVAL_REQUIRED") || last.contains("approval_token")
    }) else {
        return observe;
    };
    let evidence =
        format!("SUBGOAL 1 | evidence: link \"Next\" ref={node} from snapshot {snapshot_id} | intent: go on");
    let mut args = json!({ "snapshot_id": snapshot_id, "ref": node, "expected_role": "link",
        "expected_name": "Next", "consequential": false });
    if last.contains("APPROVAL_REQUIRED") {
        return ("request_approval", args, evidence);
    }
    if let Some(token) = agent::model::token_in(last) {
        args["approval_token"] = json!(token);
    }
    ("click", args, evidence)
}

async fn a_run_through(kind: Kind) {
    let stub = Stub::start(move |_, seen| {
        let prompt = match kind {
            Kind::OpenAi => seen.body["messages"][1]["content"].as_str(),
            Kind::Anthropic => seen.body["messages"][0]["content"].as_str(),
        };
        let (tool, args, line) = lesson_model(prompt.unwrap_or_default());
        Reply::ok(match kind {
            Kind::OpenAi => openai(&[(tool, args)], &line),
            Kind::Anthropic => anthropic(&[(tool, args)], &line),
        })
    })
    .await;
    let mut s = tests::browser::Stack::start(1).await;
    let (mut clients, task) = super::ready(&mut s).await;
    let answering = super::owner_answers(&s, proto::v1::Resolution::ApproveOnce);
    let system = agent::prompt::system(&agent::prompt::Run {
        portal_origin: &task.portal_origin,
        org_name: &task.org_name,
        run_id: &task.run_id,
        goal: &task.goal,
        max_steps: task.max_steps,
    });
    let mut provider = Provider::new(config(kind, &stub)).unwrap();
    let outcome = agent::run::run(&mut clients, &task, &mut provider).await.unwrap();
    answering.await.unwrap();
    assert_eq!(outcome.end, agent::rules::End::Done { reference: "LX-4471".into() }, "{:?}", outcome.log);
    let seen = stub.seen();
    assert_eq!(seen.len(), 5, "one request a step");
    // The record's system prompt with the run's values, on every request.
    let sent_system = match kind {
        Kind::OpenAi => seen[0].body["messages"][0]["content"].clone(),
        Kind::Anthropic => seen[0].body["system"].clone(),
    };
    assert_eq!(sent_system, json!(system));
    assert!(system.contains("in the web application at https://www.lesson.test, on behalf of Ada. Run id run-1."));
    assert_eq!(outcome.trace.len(), 5);
    assert!(outcome.trace.iter().all(|t| t.evidence.starts_with("SUBGOAL 1 | evidence: ")), "{:?}", outcome.trace);
}

#[tokio::test]
async fn a_run_completes_through_an_openai_shaped_provider() {
    a_run_through(Kind::OpenAi).await;
}

#[tokio::test]
async fn a_run_completes_through_an_anthropic_shaped_provider() {
    a_run_through(Kind::Anthropic).await;
}

/// `grantctl agent run --provider … --model …` as an operator runs it: the key from the
/// environment, the provider's CA from a file, a 500 tried again, the run done; and the key in
/// nothing the command printed, at the most verbose log level.
#[tokio::test]
async fn grantctl_agent_run_drives_a_hosted_model_and_prints_no_key() {
    let stub = Stub::start(|i, seen| {
        if i == 1 {
            return Reply::status(
                500,
                json!({ "error": { "message": format!("overloaded; your key {KEY} is fine") } }),
            );
        }
        let prompt = seen.body["messages"][1]["content"].as_str().unwrap_or_default();
        let (tool, args, line) = lesson_model(prompt);
        Reply::ok(openai(&[(tool, args)], &line))
    })
    .await;
    let mut s = tests::browser::Stack::start(1).await;
    s.fixture.page(tests::browser::LESSON, "/lesson/1", super::START);
    s.fixture.page(tests::browser::LESSON, "/lesson/2", super::DONE);
    s.chat("s1", "profile-1").await;
    let dir = std::env::temp_dir().join(format!("grant-ledger-model-run-{}", hex::encode(rand::random::<[u8; 6]>())));
    std::fs::create_dir_all(&dir).unwrap();
    let (task, ca) = (dir.join("task.json"), dir.join("model-ca.pem"));
    let file = json!({
        "chat_session": "s1", "browser_profile": "profile-1", "run_id": "run-m",
        "start_url": "https://www.lesson.test/lesson/1", "allowed_origins": ["https://www.lesson.test"],
        "goal": "Finish the lesson", "org_name": "Ada", "subgoals": ["Go on to the next lesson"],
        "max_steps": 10, "agent_version": "agent-1", "approval_wait_seconds": 20
    });
    std::fs::write(&task, file.to_string()).unwrap();
    std::fs::write(&ca, &stub.ca_pem).unwrap();
    let answering = super::owner_answers(&s, proto::v1::Resolution::ApproveOnce);
    let out = tokio::process::Command::new(tests::grantctl())
        .args([
            "agent",
            "run",
            "--provider",
            "openai",
            "--model",
            "stub-model",
            "--model-url",
            &stub.base_url,
            "--task",
        ])
        .arg(&task)
        .arg("--trace")
        .arg(dir.join("run.jsonl"))
        .env("AGENT_RUNTIME_URL", format!("http://127.0.0.1:{}", s.runtime_port))
        .env("AGENT_AUTHORIZER_URL", format!("http://127.0.0.1:{}", s.authorizer_port))
        .env("AGENT_WORKER_TOKEN", tests::browser::WORKER)
        .env("AGENT_MODEL_KEY", KEY)
        .env("AGENT_MODEL_CA", &ca)
        .env("RUST_LOG", "trace")
        .output()
        .await
        .unwrap();
    answering.await.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("run ended: done, reference LX-4471"), "{stdout}");
    assert!(stderr.contains("model call failed; trying again"), "the 500 was tried again: {stderr}");
    assert!(!stdout.contains(KEY) && !stderr.contains(KEY), "the key was printed:\n{stdout}\n{stderr}");
    let trace = std::fs::read_to_string(dir.join("run.jsonl")).unwrap();
    assert_eq!(trace.lines().count(), 5, "{trace}");
    assert!(!trace.contains(KEY));
    let _ = std::fs::remove_dir_all(&dir);
}
