//! `grantctl bench act`: a covered click through the runtime (the snapshot check, the live
//! re-read, the classifier's coverage under a task constraint, dispatch) beside a plain
//! WebDriver click on the same fixture page, interleaved in one run; and observe on a page of
//! `nodes` interactive nodes. The runtime's acts include the click guard's arming and the
//! turns of the page's event loop after the input; the fenced one also the fence's settle.
//! The plain click waits for nothing after chromedriver answers.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use browser_runtime::browser::Browser;
use browser_runtime::fixture::Fixture;
use browser_runtime::service::{AuthorizerRedeemer, BrowserRuntime};
use credentials::{Credentials, Role};
use fantoccini::Locator;
use proto::runtime as rt;
use proto::v1 as pb;
use tonic::Request;

use super::Samples;

const HOST: &str = "www.lesson.test";
const TOKEN: &str = "glc_00000000000000000000000000000000000000000000000000000000000000b1";

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
    pb::DispatchConstraint {
        grant_kind: pb::GrantKind::Task as i32,
        origins: vec![format!("https://{HOST}")],
        path_prefix: "/lesson".into(),
        not_after: not_after.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        consequence_ceiling: classifier::constraint::GrantKind::Task.consequence_ceiling().into(),
        max_text_chars: classifier::constraint::GrantKind::Task.max_text_chars(),
    }
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
    credentials.register(TOKEN, "bench", Role::Worker, Some("owner"), None).await?;
    let extra = serde_json::to_string(&[fixture.resolver_rule()])?;
    let env = [
        ("BROWSER_EXTRA_ARGS", extra),
        ("BROWSER_CA_BUNDLE", fixture.ca_bundle.display().to_string()),
        ("BROWSER_POOL_SIZE", "2".to_owned()),
        ("TASK_RECORDS_DIR", dir.join("records").display().to_string()),
    ];
    let config = browser_runtime::RuntimeConfig::parse(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))?;
    let browser_config = config.browser.clone();
    let runtime =
        Arc::new(BrowserRuntime::new(config, credentials, AuthorizerRedeemer::new(None).map_err(anyhow::Error::msg)?));
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

    let (mut covered, mut fenced, mut bare) = (Samples::default(), Samples::default(), Samples::default());
    let mut sequence = 0u64;
    for i in 0..iterations + 10 {
        // The same click three ways: re-checked, re-checked under a grant with the fence armed,
        // and plain.
        for grant in [false, true] {
            let o = client.observe(with(rt::ObserveRequest { session_id: session.clone() })).await?.into_inner();
            let node = o.nodes.iter().find(|n| n.name == "Tap").context("the Tap node")?;
            sequence += 1;
            let act = rt::ActRequest {
                session_id: session.clone(),
                sequence,
                run_id: "bench".into(),
                snapshot_id: o.snapshot_id.clone(),
                r#ref: node.r#ref.clone(),
                expected_name: "Tap".into(),
                expected_role: rt::Role::Button as i32,
                wait_for: rt::WaitFor::None as i32,
                constraint: grant.then(constraint),
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
    plain.close().await;

    let big = client.open_session(with(open("/lesson/big", "bench-2"))).await?.into_inner().session_id;
    let mut observe = Samples::default();
    let mut seen = 0;
    for i in 0..iterations.min(100) + 3 {
        let t = Instant::now();
        let o = client.observe(with(rt::ObserveRequest { session_id: big.clone() })).await?.into_inner();
        if i >= 3 {
            observe.latencies.push(t.elapsed());
        }
        seen = o.nodes.len();
    }

    let _ = stop.send(());
    let _ = server.await;
    let _ = std::fs::remove_dir_all(&dir);
    let ratio = |a: &Samples, p: usize| a.percentile(p).as_secs_f64() / bare.percentile(p).as_secs_f64().max(1e-9);
    Ok(format!(
        "{}\n{}\n{}\n  re-check: p50 {:.2}x, p99 {:.2}x the plain click (goal: at most 1.5x)\n  \
         under a grant, guard and fence armed: p50 {:.2}x, p99 {:.2}x (goal: at most 1.5x)\n{}  \
         ({seen} nodes; goal: p50 under 50 ms)\n{}",
        line("act: click, full re-check", &covered),
        line("act: click under a grant, fenced", &fenced),
        line("plain WebDriver element click", &bare),
        ratio(&covered, 50),
        ratio(&covered, 99),
        ratio(&fenced, 50),
        ratio(&fenced, 99),
        line(&format!("observe, {nodes}-node page"), &observe),
        line("  of which the page read alone", &read),
    ))
}
