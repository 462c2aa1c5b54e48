//! `grantctl-bench stop`: how soon the owner's Stop reaches the browser. Two browser sessions
//! click a button that fetches a ping, as fast as the runtime lets them, each act's ticket naming
//! one chat; the runtime checks each ticket at one authorizer replica, and the owner's Stop goes
//! to the other (both on one PostgreSQL). The figure is the time from the Stop's answer to the
//! last ping the site receives: nothing may start after the answer, and what was already under
//! way lands within the act's settle. The runtime is served in this process; the authorizers are
//! `grantctl serve authorizer` processes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use browser_runtime::fixture::Fixture;
use browser_runtime::service::{AuthorizerRedeemer, BrowserRuntime};
use browser_runtime::session::ActAction;
use browser_runtime::ticket::{self, Expected};
use credentials::{Credentials, Role};
use proto::runtime as rt;
use proto::ticket::Keyring;
use proto::v1 as pb;
use tonic::transport::Channel;

use crate::authorize::{TENANT, Tokens};

const HOST: &str = "www.lesson.test";
const ORIGIN: &str = "https://www.lesson.test";
const PAGE: &str =
    "<!doctype html><title>Stop</title><button onclick=\"fetch('/lesson/ping?'+Date.now())\">Tap</button>";

fn bearer<T>(token: &str, m: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(m);
    r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ascii"));
    r
}

/// The ticket the authorizer would seal for the owner's approval of a click on "Tap", in `chat`.
fn ticket(
    keys: &Keyring,
    profile: &str,
    o: &rt::ObserveReply,
    node_ref: &str,
    chat: &str,
    n: u64,
) -> pb::DispatchTicket {
    let now = time::OffsetDateTime::now_utc();
    let expected = Expected {
        tenant: TENANT,
        principal: "owner",
        profile,
        run_id: "stop",
        snapshot_id: &o.snapshot_id,
        node_ref,
        action: &ActAction::Click,
        text: None,
        element_role: "button",
        element_name: "Tap",
        page_origin: ORIGIN,
        now,
    };
    keys.seal(&ticket::body_for(keys, &expected, (&format!("stop-{n}"), chat), None, now + time::Duration::seconds(60)))
}

/// Clicks "Tap" in `session` until an act is refused; answers how many were dispatched.
async fn clicking(
    mut runtime: rt::browser_runtime_client::BrowserRuntimeClient<Channel>,
    token: String,
    keys: Arc<Keyring>,
    (session, profile, chat): (String, String, String),
    sequence: Arc<std::sync::atomic::AtomicU64>,
) -> Result<u64> {
    use std::sync::atomic::Ordering;
    let mut dispatched = 0;
    loop {
        let o = runtime
            .observe(bearer(&token, rt::ObserveRequest { session_id: session.clone(), run_id: String::new() }))
            .await?
            .into_inner();
        let node = o.nodes.iter().find(|n| n.name == "Tap").context("the Tap node")?;
        let n = sequence.load(Ordering::Relaxed) + 1;
        let act = rt::ActRequest {
            session_id: session.clone(),
            sequence: n,
            run_id: "stop".into(),
            snapshot_id: o.snapshot_id.clone(),
            r#ref: node.r#ref.clone(),
            expected_name: "Tap".into(),
            expected_role: rt::Role::Button as i32,
            wait_for: rt::WaitFor::Settle as i32,
            ticket: Some(ticket(&keys, &profile, &o, &node.r#ref, &chat, rand::random())),
            action: Some(rt::act_request::Action::Click(rt::Click {})),
            ..Default::default()
        };
        let reply = runtime.act(bearer(&token, act)).await?.into_inner();
        if reply.dispatched {
            sequence.store(n, Ordering::Relaxed);
            dispatched += 1;
        } else if rt::ActCode::try_from(reply.code) == Ok(rt::ActCode::ApprovalRequired) {
            return Ok(dispatched);
        } else {
            anyhow::bail!("the click was refused: {reply:?}");
        }
    }
}

pub async fn run(url: &str, rounds: usize) -> Result<String> {
    let scratch = crate::Scratch::create(url).await?;
    let db_url = format!("{}/{}", url.rsplit_once('/').map_or(url, |(base, _)| base), scratch.name);
    let result = run_on(scratch.config.clone(), &db_url, rounds).await;
    scratch.drop_now().await?;
    result
}

/// What a browser bench stands on: two authorizer replicas on `db_url` (`grantctl serve
/// authorizer`, TLS), a credential of each calling role, the fixture site, and a browser runtime
/// served in this process that checks tickets at the first replica.
pub(crate) struct Stage {
    pub(crate) replicas: crate::authorize::Replicas,
    pub(crate) tokens: Tokens,
    pub(crate) fixture: Fixture,
    pub(crate) dir: std::path::PathBuf,
    /// The replicas' CA, as a file.
    pub(crate) ca_file: std::path::PathBuf,
    pub(crate) records: std::path::PathBuf,
    pub(crate) keys: Arc<Keyring>,
    pub(crate) runtime_port: u16,
}

impl Stage {
    /// The stage for bench `name`, its runtime's pool of `pool` browsers.
    pub(crate) async fn start(config: tokio_postgres::Config, db_url: &str, name: &str, pool: usize) -> Result<Self> {
        let (key_line, ca_pem, replicas) = crate::authorize::start_replicas(db_url).await?;
        let db = ledger::postgres::pool(config, 4).map_err(anyhow::Error::msg)?;
        let tokens = Tokens::register(&db, ca_pem.clone(), &key_line).await?;
        let runtime_token = credentials::new_token();
        let credentials = Credentials::postgres(db.clone());
        credentials.register(&runtime_token, TENANT, Role::Runtime, Some("owner"), None).await?;
        let dir = std::env::temp_dir().join(format!("grant-ledger-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let fixture = Fixture::start(&[HOST], &dir).await.context("the fixture site")?;
        let (keys_file, ca_file, records) =
            (dir.join("ticket-keys"), dir.join("authorizer-ca.pem"), dir.join("records"));
        std::fs::write(&keys_file, &key_line)?;
        std::fs::write(&ca_file, &ca_pem)?;
        let env = [
            ("BROWSER_EXTRA_ARGS", serde_json::to_string(&[fixture.resolver_rule()])?),
            ("BROWSER_CA_BUNDLE", fixture.ca_bundle.display().to_string()),
            ("BROWSER_POOL_SIZE", pool.to_string()),
            ("TASK_RECORDS_DIR", records.display().to_string()),
            (proto::ticket::KEYS_FILE_VAR, keys_file.display().to_string()),
            ("RUNTIME_AUTHORIZER_URL", replicas.endpoints[0].clone()),
            ("RUNTIME_AUTHORIZER_TOKEN", runtime_token.clone()),
            ("RUNTIME_AUTHORIZER_CA", ca_file.display().to_string()),
        ];
        let config =
            browser_runtime::RuntimeConfig::parse(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))?;
        let keys = Arc::clone(&config.tickets);
        let redeemer = AuthorizerRedeemer::new(config.authorizer.as_ref()).map_err(anyhow::Error::msg)?;
        let served = Arc::new(BrowserRuntime::new(config, credentials, redeemer));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let runtime_port = listener.local_addr()?.port();
        tokio::spawn(browser_runtime::service::serve(listener, served, None, std::future::pending()));
        Ok(Self { replicas, tokens, fixture, dir, ca_file, records, keys, runtime_port })
    }

    /// Stops the replicas and removes the stage's files.
    pub(crate) fn end(self) {
        drop(self.replicas);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn run_on(config: tokio_postgres::Config, db_url: &str, rounds: usize) -> Result<String> {
    let stage = Stage::start(config, db_url, "stop", 2).await?;
    let (replicas, tokens, fixture, keys, port) =
        (&stage.replicas, &stage.tokens, &stage.fixture, Arc::clone(&stage.keys), stage.runtime_port);
    fixture.page(HOST, "/lesson/stop", PAGE);
    fixture.page(HOST, "/lesson/ping", "ok");
    let channel = Channel::from_shared(format!("http://127.0.0.1:{port}"))?.connect().await?;
    let mut runtime = rt::browser_runtime_client::BrowserRuntimeClient::new(channel);
    let mut sessions = Vec::new();
    for profile in ["stop-1", "stop-2"] {
        let open = rt::OpenSessionRequest {
            browser_profile_id: profile.into(),
            allowed_origins: vec![ORIGIN.into()],
            start_url: format!("{ORIGIN}/lesson/stop"),
            max_steps: 10_000,
        };
        let session = runtime.open_session(tokens.worker(open)).await?.into_inner().session_id;
        sessions.push((session, profile.to_owned(), Arc::new(std::sync::atomic::AtomicU64::new(0))));
    }

    let mut worker = pb::authorizer_client::AuthorizerClient::new(tokens.connect(&replicas.endpoints[0]).await?);
    let mut owner = pb::authorizer_client::AuthorizerClient::new(tokens.connect(&replicas.endpoints[1]).await?);
    let (mut after, mut pressed, mut answered, mut acts, mut late) = (Vec::new(), Vec::new(), Vec::new(), 0u64, 0usize);
    for round in 0..rounds {
        let chat = format!("stop-chat-{round}");
        let create = pb::CreateSessionRequest {
            session_id: chat.clone(),
            surface: pb::Surface::Interactive as i32,
            ..Default::default()
        };
        worker.create_session(tokens.worker(create)).await?;
        fixture.clear();
        let clickers: Vec<_> = sessions
            .iter()
            .map(|(session, profile, sequence)| {
                let (token, keys) = (tokens.worker.clone(), Arc::clone(&keys));
                let who = (session.clone(), profile.clone(), chat.clone());
                tokio::spawn(clicking(runtime.clone(), token, keys, who, Arc::clone(sequence)))
            })
            .collect();
        // The owner presses Stop while both sessions click.
        tokio::time::sleep(Duration::from_millis(300 + rand::random::<u64>() % 400)).await;
        let asked = Instant::now();
        owner.stop_session(tokens.gateway(pb::StopSessionRequest { session_id: chat })).await?;
        let answer = Instant::now();
        answered.push(answer - asked);
        for c in clickers {
            acts += c.await??;
        }
        // Whatever was under way has landed by now.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pings: Vec<Instant> =
            fixture.requests().into_iter().filter(|r| r.path() == "/lesson/ping").map(|r| r.at).collect();
        late += pings.iter().filter(|at| **at > answer).count();
        let last = pings.into_iter().max().context("no ping reached the site")?;
        // Signed: before the instant is negative.
        let since = |t: Instant| if last >= t { (last - t).as_secs_f64() } else { -(t - last).as_secs_f64() } * 1e3;
        after.push(since(answer));
        pressed.push(since(asked));
    }
    stage.end();
    after.sort_by(f64::total_cmp);
    pressed.sort_by(f64::total_cmp);
    answered.sort_unstable();
    let pick = |v: &[f64], p: usize| v[(v.len() * p / 100).min(v.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok(format!(
        "{rounds} Stops, {acts} clicks dispatched (two sessions, the Stop to the other replica)\n\
         the last ping, from the Stop's answer (negative: before it): p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms\n\
         the last ping, from the owner's press (negative: before it): p50 {:.1} ms  p99 {:.1} ms\n\
         pings that arrived after the answer: {late} (goal: 0)\n\
         the Stop's answer, its settle included: p50 {:.1} ms  p99 {:.1} ms",
        pick(&after, 50),
        pick(&after, 99),
        after.last().copied().unwrap_or_default(),
        pick(&pressed, 50),
        pick(&pressed, 99),
        ms(answered[answered.len() / 2]),
        ms(answered[(answered.len() * 99 / 100).min(answered.len() - 1)]),
    ))
}
