//! What an operator sees of a running stack: a lesson driven through the harness, the runtime,
//! the authorizer, the gateway and the projection workers (the workers as `grantctl serve
//! projections` runs them), then every service's metrics endpoint scraped, its exposition parsed,
//! and the counters the lesson must have moved read; and both gRPC services listed through
//! reflection, as `grpcurl list` does.

use std::collections::HashMap;
use std::time::Duration;

use agent::model::{Scripted, on_named, snapshot};
use credentials::Scope;
use serde_json::json;
use tests::browser::TENANT;
use tests::http::Call;
use tests::lesson::Lesson;

const LESSON_1: &str = r#"<!doctype html><title>Lesson 1</title><h1>Lesson 1</h1><a href="/lesson/2">Next</a>"#;
const LESSON_2: &str = r#"<!doctype html><title>Lesson 2</title><h1>Lesson 2</h1><a href="/lesson/3">Next</a>"#;
// Typing into a payment field: the authorizer refuses it outright, no card.
const LESSON_3: &str = r#"<!doctype html><title>Lesson 3</title><h1>Lesson 3</h1>
<input aria-label="Card number" autocomplete="cc-number">"#;

/// The samples of an OpenMetrics exposition, by `name{labels}` as written; panics, naming the
/// line, on anything the format does not allow.
fn parse(text: &str) -> HashMap<String, f64> {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "an exposition ends with # EOF");
    let name_ok = |n: &str| {
        n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    let mut samples = HashMap::new();
    for line in &lines[..lines.len() - 1] {
        if let Some(comment) = line.strip_prefix("# ") {
            let mut words = comment.splitn(3, ' ');
            let (kind, name) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
            assert!(["HELP", "TYPE", "UNIT"].contains(&kind) && name_ok(name), "a bad comment line: {line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("a sample without a value: {line}"));
        let name = series.split('{').next().unwrap_or_default();
        assert!(name_ok(name), "a bad metric name: {line}");
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            let inner = labels.strip_prefix('{').and_then(|l| l.strip_suffix('}'));
            let inner = inner.unwrap_or_else(|| panic!("bad label braces: {line}"));
            for pair in inner.split("\",").filter(|p| !p.is_empty()) {
                let (key, quoted) = pair.split_once("=\"").unwrap_or_else(|| panic!("a bad label: {line}"));
                assert!(name_ok(key) && !quoted.contains('\n'), "a bad label: {line}");
            }
        }
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("a value that is not a number: {line}")),
        };
        samples.insert(series.to_owned(), value);
    }
    samples
}

/// GET `path` on `addr` over plain HTTP: the status and the body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let r = Call::new(addr.port(), "GET", path).send().await;
    (r.status, r.body)
}

async fn scrape(addr: std::net::SocketAddr) -> HashMap<String, f64> {
    let (status, text) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    parse(&text)
}

/// Asserts each `(series, wanted)` of `samples`, showing the whole scrape when one differs.
fn expect(what: &str, samples: &HashMap<String, f64>, wanted: &[(&str, f64)]) {
    for (series, value) in wanted {
        let got = samples.get(*series).copied();
        if got != Some(*value) {
            let mut all: Vec<_> = samples.iter().map(|(k, v)| format!("{k} {v}")).collect();
            all.sort();
            panic!("{what}: {series} is {got:?}, not {value}; the scrape:\n{}", all.join("\n"));
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[tokio::test]
async fn a_lesson_moves_the_counters_every_service_exposes() {
    let mut l = Lesson::start(&[("/lesson/1", LESSON_1), ("/lesson/2", LESSON_2), ("/lesson/3", LESSON_3)]).await;
    let workers_port = free_port();
    let workers_addr: std::net::SocketAddr = format!("127.0.0.1:{workers_port}").parse().unwrap();
    let _workers = tokio::process::Command::new(tests::grantctl())
        .args(["serve", "projections"])
        .env("DATABASE_URL", l.db.url())
        .env("PROJECTIONS_METRICS_LISTEN", workers_addr.to_string())
        .kill_on_drop(true)
        .spawn()
        .expect("grantctl serve projections");
    let owners = gateway::Owners::new(l.db.pool(2));
    let scopes = [Scope::ApprovalResolve, Scope::GrantWrite];
    let (_, token) = owners.create(TENANT, "owner", &scopes, Duration::from_secs(3600)).await.unwrap();

    // One card, allowed for the task; two acts under the grant; a payment field refused by the
    // policy, which ends the run.
    let model = Scripted::new()
        .then(|_| snapshot())
        .then(|v| on_named(v, "click", "Next", false, json!({})))
        .then(|v| on_named(v, "request_approval", "Next", false, json!({})))
        .then(|v| on_named(v, "click", "Next", false, json!({})))
        .then(|_| snapshot())
        .then(|v| on_named(v, "click", "Next", false, json!({})))
        .then(|_| snapshot())
        .then(|v| on_named(v, "type", "Card number", false, json!({ "field_id": "card" })));
    let running = l.run_from("/lesson/1", "run-1", &[("card", "4111 1111 1111 1111")], model).await;
    let gateway = l.gateway;
    let card = tests::poll_until("the lesson's card", Duration::from_secs(30), Duration::from_millis(50), || {
        let token = token.clone();
        async move {
            let r = Call::new(gateway, "GET", "/v1/sessions/s1/approvals").bearer(&token).send().await;
            let first = r.json()["approvals"].as_array()?.first()?.clone();
            (first["status"] == "PENDING").then_some(first)
        }
    })
    .await;
    let (id, offer) = (card["approval_id"].as_str().unwrap(), &card["offer"]);
    let answer = json!({
        "resolution": "approve_for_task",
        "offered_origin": offer["origin"],
        "offered_path_prefix": offer["path_prefix"],
        "shown_for_ms": 1500,
    });
    let r =
        Call::new(gateway, "POST", &format!("/v1/approvals/{id}/resolve")).bearer(&token).json(&answer).send().await;
    assert_eq!(r.status, 200, "{r:?}");
    let outcome = running.await.unwrap();
    assert_eq!(outcome.end.reason(), "policy_denied", "{}", outcome.log.join("\n"));

    let authorizer = scrape(l.stack.authorizer_metrics).await;
    let grpc = |service: &str, method: &str, code: &str| {
        format!(r#"grpc_server_handled_total{{grpc_service="{service}",grpc_method="{method}",grpc_code="{code}"}}"#)
    };
    let resolved = grpc("grant_ledger.v1.Authorizer", "ResolveApproval", "OK");
    expect(
        "authorizer",
        &authorizer,
        &[
            (r#"authorizer_approvals_requested_total{reason="no_task_grant"}"#, 1.0),
            (r#"authorizer_approvals_resolved_total{resolution="approve_for_task"}"#, 1.0),
            ("authorizer_task_grants_created_total", 1.0),
            ("authorizer_task_grant_uses_total", 2.0),
            (r#"authorizer_authorizations_total{decision="allow",kind="browser_task_grant"}"#, 2.0),
            (r#"authorizer_authorizations_total{decision="require_approval",kind="none"}"#, 1.0),
            (r#"authorizer_authorizations_total{decision="deny",kind="none"}"#, 1.0),
            (r#"authorizer_denials_total{code="payment_field"}"#, 1.0),
            (&resolved, 1.0),
        ],
    );
    let authorize = grpc("grant_ledger.v1.Authorizer", "Authorize", "OK");
    assert!(authorizer.get(&authorize).copied().unwrap_or_default() >= 4.0, "{authorize}");

    let runtime = scrape(l.stack.runtime_metrics).await;
    expect(
        "runtime",
        &runtime,
        &[(r#"runtime_acts_total{code="OK"}"#, 2.0), (r#"runtime_call_seconds_count{call="act"}"#, 2.0)],
    );
    let observed = grpc("browser_runtime.v1.BrowserRuntime", "Observe", "OK");
    assert!(runtime.get(&observed).copied().unwrap_or_default() >= 3.0, "{observed}");

    let gateway = scrape(l.gateway_metrics).await;
    expect(
        "gateway",
        &gateway,
        &[
            (
                r#"http_server_request_duration_seconds_count{method="POST",route="/v1/approvals/{approval_id}/resolve",status="200"}"#,
                1.0,
            ),
            (r#"gateway_card_dwell_seconds_count{resolution="approve_for_task"}"#, 1.0),
            (r#"gateway_card_dwell_seconds_bucket{le="1.0",resolution="approve_for_task"}"#, 0.0),
            (r#"gateway_card_dwell_seconds_bucket{le="2.0",resolution="approve_for_task"}"#, 1.0),
        ],
    );
    assert!(!gateway.keys().any(|k| k.contains("approvals/") && !k.contains("{approval_id}")), "a raw path");

    let harness = scrape(l.harness_metrics).await;
    expect(
        "harness",
        &harness,
        &[
            (r#"harness_runs_total{end="escalated"}"#, 1.0),
            (r#"harness_escalations_total{reason="policy_denied"}"#, 1.0),
            (r#"harness_enforcements_total{rule="denied"}"#, 1.0),
            ("harness_steps_per_run_count", 1.0),
        ],
    );

    // The workers' checkpoints reach the log's last event, and they say they are healthy.
    let client = l.db.client().await;
    let last: i64 = client.query_one("SELECT max(global_position) FROM events", &[]).await.unwrap().get(0);
    let within = Duration::from_secs(30);
    tests::poll_until("the workers' checkpoints at the last event", within, Duration::from_millis(100), || async {
        let Ok(r) = tokio::net::TcpStream::connect(workers_addr).await else { return None };
        drop(r);
        let samples = scrape(workers_addr).await;
        projections::Projection::ALL
            .iter()
            .all(|p| {
                let series = format!(r#"projection_checkpoint_position{{projection="{}"}}"#, p.name());
                samples.get(&series).is_some_and(|v| *v >= last as f64)
            })
            .then_some(())
    })
    .await;
    assert_eq!(get(workers_addr, "/healthz").await, (200, "serving\n".to_owned()));

    // Every metric the operator's dashboard reads is one a service exposes: moved by this lesson,
    // or one of the few it does not move (named here, so a misspelt name still fails).
    let scraped: Vec<&HashMap<String, f64>> = vec![&authorizer, &runtime, &gateway, &harness];
    let families: std::collections::HashSet<String> = scraped
        .iter()
        .flat_map(|s| s.keys())
        .map(|k| k.split('{').next().unwrap().to_owned())
        .flat_map(|n| {
            let base =
                ["_total", "_bucket", "_count", "_sum"].iter().find_map(|x| n.strip_suffix(x)).map(str::to_owned);
            [Some(n), base].into_iter().flatten()
        })
        .chain(["projection_lag_events", "projection_lag_seconds", "projection_high_water_frozen"].map(String::from))
        .collect();
    let unmoved = [
        "authorizer_task_grants_ended_total",
        "credential_refusals_total",
        "authorizer_sealed_facts_refused_total",
        "authorizer_token_redemptions_total",
        "authorizer_decision_retries_total",
        "authorizer_replayed_calls_total",
        "runtime_grant_refusals_total",
        "runtime_browser_restarts_total",
    ];
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../ops/grafana/grant-ledger.json")).expect("the dashboard is JSON");
    for target in dashboard["panels"].as_array().unwrap().iter().flat_map(|p| p["targets"].as_array().unwrap()) {
        let expr = target["expr"].as_str().unwrap();
        let labels = ["grpc_service", "grpc_method", "grpc_code"];
        let names = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| !labels.contains(w))
            .filter(|w| {
                ["authorizer_", "runtime_", "gateway_", "harness_", "projection_", "grpc_", "http_", "credential_"]
                    .iter()
                    .any(|p| w.starts_with(p))
            });
        for name in names {
            assert!(
                families.contains(name) || unmoved.contains(&name),
                "the dashboard reads {name}, which nothing exposes"
            );
        }
    }

    // `grantctl status` puts it on one screen: every service serving, each projection caught up,
    // the tenant's one active grant.
    let status = tokio::process::Command::new(tests::grantctl())
        .arg("status")
        .env("DATABASE_URL", l.db.url())
        .env("AUTHORIZER_METRICS_LISTEN", l.stack.authorizer_metrics.to_string())
        .env("RUNTIME_METRICS_LISTEN", l.stack.runtime_metrics.to_string())
        .env("GATEWAY_METRICS_LISTEN", l.gateway_metrics.to_string())
        .env("PROJECTIONS_METRICS_LISTEN", workers_addr.to_string())
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&status.stdout);
    println!("grantctl status:\n{said}");
    assert!(status.status.success(), "{said}{}", String::from_utf8_lossy(&status.stderr));
    for service in ["authorizer", "browser runtime", "gateway", "projection workers"] {
        let line = said.lines().find(|l| l.trim_start().starts_with(service)).unwrap_or_else(|| panic!("{said}"));
        assert!(line.ends_with("serving"), "{line}\n{said}");
    }
    for p in projections::Projection::ALL {
        assert!(said.contains(&format!("{:<20} at {last:<10} 0 event(s) behind, the first", p.name())), "{said}");
    }
    assert!(said.contains("tenant-1             1 active grant(s), 0 pending card(s)"), "{said}");
    assert!(said.contains("checkpoint           no checkpoint signed yet: nothing is proven"), "{said}");
    assert!(said.ends_with("errors answered since each service started\n  none\n"), "{said}");
    assert_eq!(get(l.stack.authorizer_metrics, "/healthz").await.0, 200);
    assert_eq!(get(l.stack.authorizer_metrics, "/anything").await.0, 404, "only /metrics and /healthz");
}

/// `grpcurl list` through reflection, on both services: their own service, health and reflection.
#[tokio::test]
async fn both_grpc_services_list_themselves_through_reflection() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let s = tests::browser::Stack::start(1).await;
    for (port, own) in
        [(s.authorizer_port, "grant_ledger.v1.Authorizer"), (s.runtime_port, "browser_runtime.v1.BrowserRuntime")]
    {
        let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{port}")).unwrap();
        let mut client = ServerReflectionClient::new(channel.connect().await.unwrap());
        let ask = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut replies = client.server_reflection_info(tokio_stream::once(ask)).await.unwrap().into_inner();
        let reply = replies.message().await.unwrap().expect("a reply");
        let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
            panic!("not a list: {reply:?}");
        };
        let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        names.sort();
        let mut wanted = vec![own, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"];
        wanted.sort_unstable();
        assert_eq!(names, wanted, "{port}");
    }
}
