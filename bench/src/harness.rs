//! `grantctl-bench harness`: the harness's own work for one step, without the model, the
//! runtime or the authorizer: a snapshot taken in (the repeated-page digest, the page's own
//! stops), the step's prompt rendered, and the model's answer checked against its schema and the
//! rules (grounded target, evidence line). On a page of `nodes` interactive nodes. Beside it,
//! the model client's own round trip: one step's request over HTTPS to a provider on loopback
//! that answers at once (TLS, the request and the answer encoded and read; no model's thinking).

use std::time::Instant;

use agent::model::{Model, View, on_named};
use agent::prompt::{self, Step};
use agent::rules::Rules;
use anyhow::Result;
use proto::runtime as rt;

use super::Samples;

fn page(nodes: usize, i: usize) -> rt::ObserveReply {
    rt::ObserveReply {
        snapshot_id: format!("snap_{i:012x}"),
        url: "https://www.lesson.test/lesson/unit-3".into(),
        // A new title each step: the same page three times would end the run.
        title: format!("Lesson, step {i}"),
        nodes: (0..nodes)
            .map(|n| rt::Node {
                r#ref: format!("n{n}"),
                role: if n % 5 == 0 { rt::Role::Textbox } else { rt::Role::Button } as i32,
                name: if n == 1 { "Next".into() } else { format!("Choice {n}: a word in the lesson") },
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

pub async fn run(iterations: usize, nodes: usize) -> Result<String> {
    let mut step = Samples::default();
    let mut render = Samples::default();
    let log: Vec<String> = (0..8).map(|i| format!("{i} click \"Choice {i}\" ref=n{i} → ok, changed = true")).collect();
    let fields = vec!["name".to_owned(), "city".to_owned()];
    let mut rules = Rules::for_fields(u32::MAX, fields.clone());
    for i in 0..iterations + 10 {
        let o = page(nodes, i);
        let t = Instant::now();
        rules.observed(&o).map_err(|e| anyhow::anyhow!("the page ended the run: {e:?}"))?;
        let r = Instant::now();
        let text = prompt::render(&Step {
            number: 1,
            max_steps: 50,
            subgoal: &prompt::subgoal(1, 1, "Go on to the next lesson"),
            org_name: "Ada",
            field_ids: &fields,
            step_log: &log,
            last_result: "ok, changed = true",
            snapshot: &o,
        });
        let rendered = r.elapsed();
        let view =
            View { system: prompt::SYSTEM, prompt: &text, snapshot: Some(&o), last_result: "", step: 1, subgoal: 1 };
        let turn = on_named(view, "click", "Next", false, serde_json::json!({}));
        let verdict = rules.turn(&turn.calls, &turn.evidence);
        let took = t.elapsed();
        anyhow::ensure!(matches!(verdict, agent::rules::Verdict::Run(_)), "the turn was refused: {verdict:?}");
        std::hint::black_box(&text);
        if i >= 10 {
            step.latencies.push(took);
            render.latencies.push(rendered);
        }
    }
    let model = round_trips(iterations.min(500), nodes).await?;
    let us = |s: &Samples, p: usize| s.percentile(p).as_secs_f64() * 1e6;
    let share = us(&model, 50) / (us(&model, 50) + us(&step, 50));
    Ok(format!(
        "harness step ({nodes}-node page)   n={:<5} p50 {:>8.1} µs  p99 {:>8.1} µs\n  of which the prompt rendered  p50 {:>8.1} µs  p99 {:>8.1} µs\n\
         model round trip (HTTPS, loopback stub)  n={:<5} p50 {:>8.1} µs  p99 {:>8.1} µs\n  \
         the round trip's share of a step without runtime and authorizer: {:.0} %",
        step.latencies.len(),
        us(&step, 50),
        us(&step, 99),
        us(&render, 50),
        us(&render, 99),
        model.latencies.len(),
        us(&model, 50),
        us(&model, 99),
        share * 100.0,
    ))
}

/// A provider on loopback over HTTPS that answers every request with `answer` at once; its base
/// URL and the CA its certificate chains to. (Not the test kit's stub: the bench never links the
/// test kit.)
async fn provider_at_once(answer: serde_json::Value) -> Result<(String, String)> {
    use http_body_util::Full;
    use hyper::body::Bytes;
    let (acceptor, ca) = browser_runtime::fixture::tls(&["localhost"])?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let body = Bytes::from(answer.to_string());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, body) = (acceptor.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else { return };
                let answer = hyper::service::service_fn(move |_req| {
                    let body = body.clone();
                    async move {
                        hyper::Response::builder().header("content-type", "application/json").body(Full::new(body))
                    }
                });
                let io = hyper_util::rt::TokioIo::new(tls);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, answer).await;
            });
        }
    });
    Ok((format!("https://localhost:{port}/v1"), ca))
}

/// `n` model calls of one step's prompt (on a `nodes`-node page) to an OpenAI-shaped provider
/// on loopback over HTTPS, one connection kept.
async fn round_trips(n: usize, nodes: usize) -> Result<Samples> {
    let o = page(nodes, 0);
    let click = serde_json::json!({ "snapshot_id": o.snapshot_id, "ref": "n1", "expected_role": "button",
        "expected_name": "Next", "consequential": false });
    let line = format!("SUBGOAL 1 | evidence: button \"Next\" ref=n1 from snapshot {} | intent: go on", o.snapshot_id);
    let answer = serde_json::json!({ "choices": [{ "message": { "role": "assistant", "content": line,
        "tool_calls": [{ "id": "c1", "type": "function",
            "function": { "name": "click", "arguments": click.to_string() } }] } }] });
    let (base_url, ca) = provider_at_once(answer).await?;
    let mut config = agent::provider::Config::new(
        agent::provider::Kind::OpenAi,
        Some(base_url),
        "stub".into(),
        agent::provider::Key::new("sk-bench"),
    );
    config.ca_bundle = Some(ca.into_bytes());
    let mut provider = agent::provider::Provider::new(config).map_err(anyhow::Error::msg)?;
    let text = prompt::render(&Step {
        number: 1,
        max_steps: 50,
        subgoal: &prompt::subgoal(1, 1, "Go on to the next lesson"),
        org_name: "Ada",
        field_ids: &[],
        step_log: &[],
        last_result: "",
        snapshot: &o,
    });
    let mut samples = Samples::default();
    for i in 0..n + 10 {
        let view =
            View { system: prompt::SYSTEM, prompt: &text, snapshot: Some(&o), last_result: "", step: 1, subgoal: 1 };
        let t = Instant::now();
        let turn = provider.next(view).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let took = t.elapsed();
        anyhow::ensure!(turn.calls.len() == 1, "the stub's answer was read: {turn:?}");
        if i >= 10 {
            samples.latencies.push(took);
        }
    }
    Ok(samples)
}
