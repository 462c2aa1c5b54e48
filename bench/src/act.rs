//! `grantctl-bench act`: a covered click through the runtime (the snapshot check, the live
//! re-read, the dispatch ticket's check, the classifier's coverage under the ticket's
//! constraint, dispatch) under a standing and under a task grant, beside a plain WebDriver click
//! on the same fixture page, interleaved in one run; the seal and check of one ticket alone; and
//! observe on a page of `nodes` interactive nodes. The runtime's acts include the click guard's
//! arming, the fence's settle and the turns of the page's event loop after the input. The plain
//! click waits for nothing after chromedriver answers. The bench holds the ticket key and seals
//! each act's ticket as the authorizer would; the runtime checks each ticket for the owner's
//! Stop at an authorizer over loopback gRPC (on the memory ledger: its read costs no database).

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use browser_runtime::browser::Browser;
use browser_runtime::fixture::Fixture;
use browser_runtime::service::{AuthorizerRedeemer, BrowserRuntime};
use browser_runtime::session::ActAction;
use browser_runtime::ticket::{self, Expected};
use credentials::{Credentials, Role};
use fantoccini::Locator;
use proto::runtime as rt;
use proto::ticket::Keyring;
use proto::v1 as pb;
use tonic::Request;

use super::Samples;

const HOST: &str = "www.lesson.test";
const TOKEN: &str = "glc_00000000000000000000000000000000000000000000000000000000000000b1";
const TENANT: &str = "bench";
const ORIGIN: &str = "https://www.lesson.test";

const RUNTIME_TOKEN: &str = "glc_00000000000000000000000000000000000000000000000000000000000000b3";
/// The chat the bench's tickets name.
const CHAT: &str = "bench-chat";

const OWNER_TOKEN: &str = "glc_00000000000000000000000000000000000000000000000000000000000000b2";

/// `message` as the gateway sends it for the owner (a look at the tab behind a card).
fn as_owner<T>(message: T) -> Request<T> {
    let mut req = Request::new(message);
    let m = req.metadata_mut();
    m.insert("authorization", format!("Bearer {OWNER_TOKEN}").parse().expect("ascii"));
    m.insert("x-principal-id", "owner".parse().expect("ascii"));
    m.insert("x-owner-scopes", "approval.resolve".parse().expect("ascii"));
    req
}

fn with<T>(message: T) -> Request<T> {
    let mut req = Request::new(message);
    req.metadata_mut().insert("authorization", format!("Bearer {TOKEN}").parse().expect("ascii"));
    req
}

/// A lesson page: a tile that counts its taps, among a few other controls.
fn click_page() -> String {
    let mut html = String::from("<!doctype html><title>Bench</title><h1>Tap the cat</h1>");
    for i in 0..20 {
        let _ = write!(html, "<button>Answer {i}</button>");
    }
    html.push_str("<button id=tap onclick=\"document.getElementById('n').textContent++\">Tap</button><p id=n>0</p>");
    html
}

/// `nodes` interactive nodes: links, buttons, fields and selects inside labelled sections.
fn big_page(nodes: usize) -> String {
    let mut html = String::from("<!doctype html><title>Big</title><form action=/lesson/answer>");
    for i in 0..nodes {
        let _ = match i % 4 {
            0 => write!(html, "<section><a href=/lesson/{i}>Go to part {i}</a></section>"),
            1 => write!(html, "<button title='Part {i}'>Answer {i}</button>"),
            2 => write!(html, "<label>Word {i} <input name=w{i}></label>"),
            _ => write!(html, "<select aria-label='Pick {i}'><option>a</option><option>b</option></select>"),
        };
    }
    html.push_str("</form>");
    html
}

fn constraint() -> pb::DispatchConstraint {
    let not_after = time::OffsetDateTime::now_utc() + time::Duration::minutes(30);
    let kind = classifier::constraint::GrantKind::Task;
    pb::DispatchConstraint {
        grant_kind: pb::GrantKind::Task as i32,
        origins: vec![format!("https://{HOST}")],
        path_prefix: "/lesson".into(),
        not_after: not_after.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        consequence_ceiling: kind.consequence_ceiling().into(),
        max_text_chars: kind.max_text_chars(),
    }
}

/// The ticket the authorizer would seal for a click on `node_ref` of `snapshot_id`: under a task
/// grant, or approved by the owner.
fn ticket(keys: &Keyring, snapshot_id: &str, node_ref: &str, task: bool, id: usize) -> pb::DispatchTicket {
    let expected = tap_click(snapshot_id, node_ref);
    let not_after = expected.now + time::Duration::seconds(60);
    keys.seal(&ticket::body_for(keys, &expected, (&format!("bench-{id}"), CHAT), task.then(constraint), not_after))
}

/// The click on "Tap" of the bench page as the runtime reads it, on `node_ref` of `snapshot_id`.
fn tap_click<'a>(snapshot_id: &'a str, node_ref: &'a str) -> Expected<'a> {
    Expected {
        tenant: TENANT,
        principal: "owner",
        profile: "bench-1",
        run_id: "bench",
        snapshot_id,
        node_ref,
        action: &ActAction::Click,
        text: None,
        element_role: "button",
        element_name: "Tap",
        page_origin: ORIGIN,
        now: time::OffsetDateTime::now_utc(),
    }
}

/// The same click three ways, `iterations` times after ten to warm: approved (fenced to the run's
/// origins), under a task grant (its prefix fenced, its coverage read), and plain WebDriver.
async fn clicks(
    client: &mut rt::browser_runtime_client::BrowserRuntimeClient<tonic::transport::Channel>,
    session: &str,
    keys: &Keyring,
    tap: &fantoccini::elements::Element,
    iterations: usize,
) -> Result<(Samples, Samples, Samples)> {
    let (mut covered, mut fenced, mut bare) = (Samples::default(), Samples::default(), Samples::default());
    let mut sequence = 0u64;
    for i in 0..iterations + 10 {
        for grant in [false, true] {
            let o = client
                .observe(with(rt::ObserveRequest { session_id: session.to_owned(), run_id: String::new() }))
                .await?
                .into_inner();
            let node = o.nodes.iter().find(|n| n.name == "Tap").context("the Tap node")?;
            sequence += 1;
            let act = rt::ActRequest {
                session_id: session.to_owned(),
                sequence,
                run_id: "bench".into(),
                snapshot_id: o.snapshot_id.clone(),
                r#ref: node.r#ref.clone(),
                expected_name: "Tap".into(),
                expected_role: rt::Role::Button as i32,
                wait_for: rt::WaitFor::None as i32,
                ticket: Some(ticket(keys, &o.snapshot_id, &node.r#ref, grant, 2 * i + usize::from(grant))),
                action: Some(rt::act_request::Action::Click(rt::Click {})),
                ..Default::default()
            };
            let t = Instant::now();
            let reply = client.act(with(act)).await?.into_inner();
            let took = t.elapsed();
            anyhow::ensure!(reply.ok, "the click was refused: {reply:?}");
            if i >= 10 {
                if grant { fenced.latencies.push(took) } else { covered.latencies.push(took) }
            }
        }
        let t = Instant::now();
        tap.click().await?;
        let bare_took = t.elapsed();
        if i >= 10 {
            bare.latencies.push(bare_took);
        }
    }
    Ok((covered, fenced, bare))
}

/// An authorizer on the memory ledger over loopback, holding the chat the tickets name: where
/// the runtime reads the owner's Stop before each act. Answers its port.
async fn authorizer(credentials: Credentials, keys: Arc<Keyring>) -> Result<u16> {
    use authorizer::{Authority, MemoryGrants, service::AuthorizerService};
    let tenant = ledger::TenantId::new(TENANT)?;
    let authority = Arc::new(Authority::new(MemoryGrants::default(), authorizer::policy::Policy::empty(), tenant));
    let service = AuthorizerService::new(authority, credentials, keys);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(authorizer::service::serve(listener, service, None, std::future::pending()));
    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{port}"))?.connect().await?;
    let chat = pb::CreateSessionRequest {
        session_id: CHAT.into(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    };
    pb::authorizer_client::AuthorizerClient::new(channel).create_session(with(chat)).await?;
    Ok(port)
}

fn line(name: &str, s: &Samples) -> String {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    format!(
        "{name:<34} n={:<5} p50 {:>7.2} ms  p99 {:>7.2} ms",
        s.latencies.len(),
        ms(s.percentile(50)),
        ms(s.percentile(99))
    )
}

pub async fn run(iterations: usize, nodes: usize) -> Result<String> {
    let dir = std::env::temp_dir().join(format!("grant-ledger-bench-act-{}", std::process::id()));
    let fixture = Fixture::start(&[HOST], &dir).await.context("the fixture site")?;
    fixture.page(HOST, "/lesson/bench", &click_page());
    fixture.page(HOST, "/lesson/big", &big_page(nodes));
    let credentials = Credentials::memory();
    credentials.register(TOKEN, TENANT, Role::Worker, Some("owner"), None).await?;
    credentials.register(OWNER_TOKEN, TENANT, Role::Gateway, None, None).await?;
    credentials.register(RUNTIME_TOKEN, TENANT, Role::Runtime, Some("owner"), None).await?;
    std::fs::create_dir_all(&dir)?;
    let keys_file = dir.join("ticket-keys");
    std::fs::write(&keys_file, Keyring::line("bench", rand::random()))?;
    let extra = serde_json::to_string(&[fixture.resolver_rule()])?;
    let env = [
        ("BROWSER_EXTRA_ARGS", extra),
        ("BROWSER_CA_BUNDLE", fixture.ca_bundle.display().to_string()),
        ("BROWSER_POOL_SIZE", "2".to_owned()),
        ("TASK_RECORDS_DIR", dir.join("records").display().to_string()),
        (proto::ticket::KEYS_FILE_VAR, keys_file.display().to_string()),
    ];
    let keys = Arc::new(Keyring::parse(&std::fs::read_to_string(&keys_file)?)?);
    let authorizer_port = authorizer(credentials.clone(), Arc::clone(&keys)).await?;
    let env = env.into_iter().chain([
        ("RUNTIME_AUTHORIZER_URL", format!("http://127.0.0.1:{authorizer_port}")),
        ("RUNTIME_AUTHORIZER_TOKEN", RUNTIME_TOKEN.to_owned()),
    ]);
    let env: Vec<_> = env.collect();
    let config = browser_runtime::RuntimeConfig::parse(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))?;
    let browser_config = config.browser.clone();
    let redeemer = AuthorizerRedeemer::new(config.authorizer.as_ref()).map_err(anyhow::Error::msg)?;
    let runtime = Arc::new(BrowserRuntime::new(config, credentials, redeemer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(browser_runtime::service::serve(listener, Arc::clone(&runtime), None, async {
        let _ = stopped.await;
    }));
    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{port}"))?.connect().await?;
    let mut client = rt::browser_runtime_client::BrowserRuntimeClient::new(channel);
    let open = |path: &str, profile: &str| rt::OpenSessionRequest {
        browser_profile_id: profile.into(),
        allowed_origins: vec![format!("https://{HOST}")],
        start_url: format!("https://{HOST}{path}"),
        max_steps: 10_000,
    };
    let session = client.open_session(with(open("/lesson/bench", "bench-1"))).await?.into_inner().session_id;

    // The plain WebDriver click: its own Chromium with the same flags, on the same page.
    let plain = Browser::start(&browser_config).await?;
    plain.client.goto(&format!("https://{HOST}/lesson/bench")).await?;
    let tap = plain.client.find(Locator::Css("#tap")).await?;

    let (covered, fenced, bare) = clicks(&mut client, &session, &keys, &tap, iterations).await?;
    // A ticket's seal (the authorizer's part) and check (the runtime's), on their own.
    let mut sealed = Samples::default();
    for i in 0..iterations.max(1000) {
        let t = Instant::now();
        let sealed_ticket = ticket(&keys, "snap_000000000000", "n1", true, i);
        ticket::check(&keys, &sealed_ticket, &tap_click("snap_000000000000", "n1"))?;
        sealed.latencies.push(t.elapsed());
    }

    // The read alone, without gRPC: what the script round trip and parsing cost.
    plain.client.goto(&format!("https://{HOST}/lesson/big")).await?;
    let mut read = Samples::default();
    for i in 0..iterations.min(100) + 3 {
        let t = Instant::now();
        // Each snapshot's key is fixed for the document's life: a new id each time.
        browser_runtime::page::snapshot(&plain.fence.handle(), &format!("snap_{i:012x}")).await?;
        if i >= 3 {
            read.latencies.push(t.elapsed());
        }
    }
    // The accessibility tree alone: the part of the read the browser spends naming the nodes.
    let mut tree = Samples::default();
    let h = plain.fence.handle();
    let (session, frame) = h.tab().context("the plain browser's tab")?;
    for i in 0..iterations.min(100) + 3 {
        let t = Instant::now();
        browser_runtime::platform::tree(&h, &session, &frame).await?;
        if i >= 3 {
            tree.latencies.push(t.elapsed());
        }
    }
    plain.close().await;

    let big = client.open_session(with(open("/lesson/big", "bench-2"))).await?.into_inner().session_id;
    let mut observe = Samples::default();
    let mut seen = 0;
    for i in 0..iterations.min(100) + 3 {
        let t = Instant::now();
        let o = client
            .observe(with(rt::ObserveRequest { session_id: big.clone(), run_id: String::new() }))
            .await?
            .into_inner();
        if i >= 3 {
            observe.latencies.push(t.elapsed());
        }
        seen = o.nodes.len();
    }
    // A card's picture of that page (its element outlined, the private fields painted over)
    // beside the raw screenshot the agent gets, the two alternating.
    let o = client.observe(with(rt::ObserveRequest { session_id: big.clone(), run_id: String::new() })).await?;
    let o = o.into_inner();
    let view = rt::LiveViewRequest {
        browser_profile_id: "bench-2".into(),
        snapshot_id: o.snapshot_id.clone(),
        node_ref: o.nodes.get(o.nodes.len() / 2).map(|n| n.r#ref.clone()).unwrap_or_default(),
    };
    let (mut picture, mut screenshot) = (Samples::default(), Samples::default());
    for i in 0..iterations.min(100) + 3 {
        let t = Instant::now();
        let shown = client.live_view(as_owner(view.clone())).await?.into_inner();
        let p = t.elapsed();
        anyhow::ensure!(shown.masked && !shown.png.is_empty(), "the card's picture was not made");
        let t = Instant::now();
        client.screenshot(with(rt::ScreenshotRequest { session_id: big.clone() })).await?;
        if i >= 3 {
            picture.latencies.push(p);
            screenshot.latencies.push(t.elapsed());
        }
    }

    let _ = stop.send(());
    let _ = server.await;
    let _ = std::fs::remove_dir_all(&dir);
    let ratio = |a: &Samples, p: usize| a.percentile(p).as_secs_f64() / bare.percentile(p).as_secs_f64().max(1e-9);
    let share = sealed.percentile(50).as_secs_f64() / covered.percentile(50).as_secs_f64().max(1e-9);
    Ok(format!(
        "{}\n{}\n{}\n  approved: p50 {:.2}x, p99 {:.2}x the plain click (goal: at most 1.5x)\n  \
         task grant: p50 {:.2}x, p99 {:.2}x (goal: at most 1.5x)\n{}  \
         ({:.1} µs, {:.3}% of the approved act's p50; goal: under 5%)\n{}  ({seen} nodes; goal: p50 under 50 ms)\n{}\n{}\n\
         {}\n{}\n  card picture: p50 {:.2}x the raw screenshot",
        line("act: click, approved", &covered),
        line("act: click, task grant", &fenced),
        line("plain WebDriver element click", &bare),
        ratio(&covered, 50),
        ratio(&covered, 99),
        ratio(&fenced, 50),
        ratio(&fenced, 99),
        line("a ticket sealed and checked", &sealed),
        sealed.percentile(50).as_secs_f64() * 1e6,
        share * 100.0,
        line(&format!("observe, {nodes}-node page"), &observe),
        line("  of which the page read alone", &read),
        line("  the accessibility tree alone", &tree),
        line("card picture (outlined, masked), same page", &picture),
        line("raw screenshot (the agent's), same page", &screenshot),
        picture.percentile(50).as_secs_f64() / screenshot.percentile(50).as_secs_f64().max(1e-9),
    ))
}
