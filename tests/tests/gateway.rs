//! The owner's gateway over real HTTP, on two gateway and two authorizer replicas sharing one
//! PostgreSQL: resolve, list, get, revoke and activity, each refusal typed and writing nothing,
//! browser sign-in with its cookie and CSRF, the route census with the flag off and on, the
//! event stream, and read-your-writes across replicas.

use std::time::Duration;

use credentials::Scope;
use proto::v1::authorize_reply::Decision;
use serde_json::json;
use tests::gateway::{GatewayStack, OFF, ON, SCOPE};
use tests::http::{Call, Reply, next_event};

const ALL: &[Scope] = &[Scope::ApprovalResolve, Scope::GrantRead, Scope::GrantWrite];

fn resolve_body(resolution: &str) -> serde_json::Value {
    json!({ "resolution": resolution })
}

fn for_task(origin: &str, prefix: &str) -> serde_json::Value {
    json!({ "resolution": "approve_for_task", "offered_origin": origin, "offered_path_prefix": prefix })
}

fn position(r: &Reply) -> String {
    let p = &r.json()["position"];
    format!("{}.{}", p["tx_id"], p["position"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_resolves_lists_revokes_and_reads_activity_across_replicas() {
    let s = GatewayStack::start(10_000).await;
    let (_, owner) = s.token(ON, "owner-a", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let (first, offer) = s.card(ON, "owner-a", "s1").await;
    let offer = offer.expect("the lesson scope is offered");
    assert_eq!(format!("{}{}", offer.origin, offer.path_prefix), SCOPE);

    // The card is listed pending first and read through the other replica.
    let listed = s.call(0, "GET", "/v1/sessions/s1/approvals").bearer(&owner).send().await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let cards = listed.json();
    assert_eq!(cards["approvals"][0]["approval_id"], first.as_str());
    assert_eq!(cards["approvals"][0]["status"], "PENDING");
    assert_eq!(cards["approvals"][0]["view"]["element_name"], "Next");
    assert_eq!(cards["approvals"][0]["offer"]["max_actions"], 200);
    let read = s.call(1, "GET", &format!("/v1/approvals/{first}")).bearer(&owner).send().await;
    assert_eq!((read.status, read.json()["status"].as_str()), (200, Some("PENDING")));

    // A stale or mismatched offer is 409 and the card stays pending; then Allow once succeeds.
    let before = s.events().await;
    let path = format!("/v1/approvals/{first}/resolve");
    let mismatched = s.call(0, "POST", &path).bearer(&owner).json(&for_task(&offer.origin, "/settings")).send().await;
    assert_eq!((mismatched.status, mismatched.code().as_str()), (409, "offer_mismatch"), "{mismatched:?}");
    assert_eq!(s.events().await, before, "a refused resolve writes nothing");
    let still = s.call(1, "GET", &format!("/v1/approvals/{first}")).bearer(&owner).send().await;
    assert_eq!(still.json()["status"], "PENDING");
    let once = s.call(0, "POST", &path).bearer(&owner).json(&resolve_body("approve_once")).send().await;
    assert_eq!(once.status, 200, "{once:?}");
    assert_eq!(once.json()["status"], "APPROVED");
    assert!(once.json().get("approval_token").is_none(), "the token goes to the worker, not the page");
    // Its retry (a lost reply, a double press) acts no second time.
    let after_once = s.events().await;
    let retry = s.call(1, "POST", &path).bearer(&owner).json(&resolve_body("approve_once")).send().await;
    assert_eq!((retry.status, retry.code().as_str()), (409, "approval_not_pending"));
    assert_eq!(s.events().await, after_once);

    // Allow for this task: a grant, read back through the other replica at the write's position.
    let (second, offer) = s.card(ON, "owner-a", "s1").await;
    let offer = offer.unwrap();
    let granted = s
        .call(1, "POST", &format!("/v1/approvals/{second}/resolve"))
        .bearer(&owner)
        .json(&for_task(&offer.origin, &offer.path_prefix))
        .send()
        .await;
    assert_eq!(granted.status, 200, "{granted:?}");
    let grant = granted.json()["grant_id"].as_str().unwrap().to_owned();
    let at = position(&granted);
    let got =
        s.call(0, "GET", &format!("/v1/browser-task-grants/{grant}?min_position={at}")).bearer(&owner).send().await;
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!((got.json()["status"].as_str(), got.json()["max_actions"].as_u64()), (Some("active"), Some(200)));
    assert_eq!(got.json()["minutes_left"], 30);

    // A covered act runs without a card; the activity says so.
    assert!(matches!(s.act(ON, "owner-a", "s1", "Next").await, Decision::Allow(_)));
    let grants = s.call(1, "GET", "/v1/browser-task-grants?session_id=s1&active_only=true").bearer(&owner).send().await;
    assert_eq!(grants.json()["grants"][0]["actions_used"], 1, "the covered act is its one use");

    // Stop through one replica; the list through the other shows it ended, at once.
    let revoked = s.call(0, "POST", &format!("/v1/browser-task-grants/{grant}/revoke")).bearer(&owner).send().await;
    assert_eq!(revoked.status, 200, "{revoked:?}");
    let at = position(&revoked);
    let listed = s
        .call(1, "GET", &format!("/v1/browser-task-grants?session_id=s1&min_position={at}"))
        .bearer(&owner)
        .send()
        .await;
    let g = &listed.json()["grants"][0];
    assert_eq!((g["status"].as_str(), g["end_reason"].as_str()), (Some("ended"), Some("revoked")), "{listed:?}");
    let active = s.call(1, "GET", "/v1/browser-task-grants?session_id=s1&active_only=true").bearer(&owner).send().await;
    assert_eq!(active.json()["grants"], json!([]));
    // The revoke's retry ends nothing twice.
    let after_revoke = s.events().await;
    let again = s.call(1, "POST", &format!("/v1/browser-task-grants/{grant}/revoke")).bearer(&owner).send().await;
    assert!(again.status == 200 || again.status == 409, "{again:?}");
    assert_eq!(s.events().await, after_revoke);
    assert!(matches!(s.act(ON, "owner-a", "s1", "Next").await, Decision::RequireApproval(_)));

    // Activity: each act with how it was allowed, once the view has reached the revoke. The
    // projection's gap-safe read waits behind any transaction open in the cluster (other tests
    // hold some on purpose), so one pass of the worker may stop short of the revoke: it runs
    // again until the view says it caught up (seen once in the full suite: caught_up false).
    let path = format!("/v1/sessions/s1/activity?min_position={at}");
    let a = tests::poll_until(
        "the activity view past the revoke",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let (s, owner, path) = (&s, &owner, &path);
            async move {
                s.project().await;
                let activity = s.call(0, "GET", path).bearer(owner).send().await;
                assert_eq!(activity.status, 200, "{activity:?}");
                let a = activity.json();
                (a["caught_up"] == true).then_some(a)
            }
        },
    )
    .await;
    let rows = a["rows"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["authorization"] == "Allowed by task permission"), "{rows:?}");
    assert!(rows.iter().any(|r| r["summary"] == "Allowed once"), "the answer to a card is its session's: {rows:?}");
    assert!(rows.iter().any(|r| r["summary"] == "Allowed for this task"), "{rows:?}");
    assert!(rows.iter().any(|r| r["summary"] == "Task permission ended: revoked"), "the Stop: {rows:?}");
    assert!(rows.iter().any(|r| r["summary"].as_str().unwrap().contains("\"Next\"")), "{rows:?}");
    // A position the view has not reached: answered within the bound, and said so.
    let ahead = s.call(0, "GET", "/v1/sessions/s1/activity?min_position=999999999.1").bearer(&owner).send().await;
    assert_eq!((ahead.status, ahead.json()["caught_up"].as_bool()), (200, Some(false)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_is_typed_and_writes_nothing() {
    let mut s = GatewayStack::start(10_000).await;
    let (_, owner) = s.token(ON, "owner-a", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let (card, offer) = s.card(ON, "owner-a", "s1").await;
    let offer = offer.unwrap();
    let resolve = format!("/v1/approvals/{card}/resolve");
    // A grant of owner-a's in a second session, for the cross-owner reads and the revoke.
    s.session(ON, "owner-a", "s2").await;
    let (granting, _) = s.card(ON, "owner-a", "s2").await;
    let granted = s
        .call(0, "POST", &format!("/v1/approvals/{granting}/resolve"))
        .bearer(&owner)
        .json(&for_task(&offer.origin, &offer.path_prefix))
        .send()
        .await;
    let grant = granted.json()["grant_id"].as_str().unwrap().to_owned();
    let before = s.events().await;

    // Unauthenticated: nothing, garbage, a service credential, a revoked or an expired token.
    let (revoked_id, revoked) = s.token(ON, "owner-a", ALL).await;
    assert!(s.owners().revoke(ON, revoked_id).await.unwrap());
    let glc = s.tenants[ON].gateway.clone();
    for (what, call) in [
        ("no credential", s.call(0, "POST", &resolve)),
        ("garbage", s.call(0, "POST", &resolve).bearer("nonsense")),
        ("a service credential", s.call(0, "POST", &resolve).bearer(&glc)),
        ("a revoked token", s.call(0, "POST", &resolve).bearer(&revoked)),
        ("an unknown token", s.call(0, "POST", &resolve).bearer(&format!("glo_{}", "0".repeat(64)))),
    ] {
        let r = call.json(&resolve_body("approve_once")).send().await;
        assert_eq!((r.status, r.code().as_str()), (401, "unauthenticated"), "{what}: {r:?}");
        assert!(r.header("www-authenticate").is_some_and(|v| v.starts_with("Bearer")), "{what}");
    }

    // Each missing scope.
    let (_, read_only) = s.token(ON, "owner-a", &[Scope::GrantRead]).await;
    let (_, resolve_only) = s.token(ON, "owner-a", &[Scope::ApprovalResolve]).await;
    for (what, token, method, path, body) in [
        ("resolve without approval.resolve", &read_only, "POST", resolve.clone(), Some(resolve_body("deny"))),
        (
            "approve_for_task without browser.grant.write",
            &resolve_only,
            "POST",
            resolve.clone(),
            Some(for_task(&offer.origin, &offer.path_prefix)),
        ),
        ("list cards without approval.resolve", &read_only, "GET", "/v1/sessions/s1/approvals".into(), None),
        (
            "list grants without browser.grant.read",
            &resolve_only,
            "GET",
            "/v1/browser-task-grants?session_id=s1".into(),
            None,
        ),
        (
            "revoke without browser.grant.write",
            &read_only,
            "POST",
            format!("/v1/browser-task-grants/{}/revoke", uuid::Uuid::new_v4()),
            None,
        ),
        ("activity without approval.resolve", &read_only, "GET", "/v1/sessions/s1/activity".into(), None),
    ] {
        let mut call = s.call(0, method, &path).bearer(token);
        if let Some(b) = &body {
            call = call.json(b);
        }
        let r = call.send().await;
        assert_eq!((r.status, r.code().as_str()), (403, "scope_missing"), "{what}: {r:?}");
    }

    // Bad input: 400 for what is not JSON, 422 naming the field, 415, 413.
    let bad = |body: &'static [u8]| s.call(0, "POST", &resolve).bearer(&owner).raw("application/json", body);
    for (what, call, status, field) in [
        ("not JSON", bad(b"{\"resolution\":"), 400, None),
        ("two values", bad(b"{} {}"), 400, None),
        ("an unknown field", bad(b"{\"resolution\":\"deny\",\"admin\":true}"), 422, Some("admin")),
        ("no resolution", bad(b"{}"), 422, Some("resolution")),
        ("an unknown resolution", bad(b"{\"resolution\":\"approve_forever\"}"), 422, Some("resolution")),
        ("a wrong type", bad(b"{\"resolution\":7}"), 422, Some("resolution")),
        (
            "an offer without its prefix",
            bad(b"{\"resolution\":\"approve_for_task\",\"offered_origin\":\"https://www.lesson.test\"}"),
            422,
            Some("offered_path_prefix"),
        ),
        (
            "an offer on approve_once",
            bad(b"{\"resolution\":\"approve_once\",\"offered_origin\":\"x\"}"),
            422,
            Some("offered_origin"),
        ),
        (
            "a form body",
            s.call(0, "POST", &resolve).bearer(&owner).raw("application/x-www-form-urlencoded", b"resolution=deny"),
            415,
            None,
        ),
        (
            "a huge body",
            s.call(0, "POST", &resolve).bearer(&owner).raw("application/json", &vec![b' '; 20_000]),
            413,
            None,
        ),
        (
            "a malformed approval id",
            s.call(0, "POST", "/v1/approvals/not-a-uuid/resolve").bearer(&owner).json(&resolve_body("deny")),
            422,
            Some("approval_id"),
        ),
        (
            "an unknown query parameter",
            s.call(0, "GET", "/v1/sessions/s1/approvals?debug=1").bearer(&owner),
            422,
            Some("debug"),
        ),
        (
            "a malformed position",
            s.call(0, "GET", "/v1/sessions/s1/approvals?min_position=7").bearer(&owner),
            422,
            Some("min_position"),
        ),
        (
            "a malformed session id",
            s.call(0, "GET", "/v1/sessions/s%20x/approvals").bearer(&owner),
            422,
            Some("session_id"),
        ),
        (
            "a misspelt grant query",
            s.call(0, "GET", "/v1/browser-task-grants?sesion_id=s1").bearer(&owner),
            422,
            Some("sesion_id"),
        ),
        ("a path that is not text", s.call(0, "GET", "/v1/sessions/%FF/approvals").bearer(&owner), 422, Some("path")),
        (
            "a revoke with a body",
            s.call(0, "POST", &format!("/v1/browser-task-grants/{grant}/revoke")).bearer(&owner).json(&json!({"x": 1})),
            422,
            Some("x"),
        ),
    ] {
        let r = call.send().await;
        assert_eq!(r.status, status, "{what}: {r:?}");
        assert_eq!(r.json()["field"].as_str(), field, "{what}: {r:?}");
        assert!(r.json()["request_id"].as_str().is_some_and(|id| !id.is_empty()), "{what}: {r:?}");
    }

    // Another principal's and another tenant's objects do not exist for the caller.
    let (_, other_owner) = s.token(ON, "owner-b", ALL).await;
    let (_, other_tenant) = s.token(OFF, "owner-a", ALL).await;
    for token in [&other_owner, &other_tenant] {
        for (method, path) in [
            ("GET", "/v1/sessions/s1/approvals".to_owned()),
            ("GET", format!("/v1/approvals/{card}")),
            ("GET", "/v1/sessions/s1/activity".to_owned()),
            ("GET", "/v1/sessions/s1/events".to_owned()),
            ("GET", "/v1/browser-task-grants?session_id=s2".to_owned()),
            ("GET", format!("/v1/browser-task-grants/{grant}")),
            ("POST", format!("/v1/browser-task-grants/{grant}/revoke")),
        ] {
            let r = s.call(0, method, &path).bearer(token).send().await;
            assert_eq!((r.status, r.code().as_str()), (404, "not_found"), "{method} {path}: {r:?}");
        }
        let r = s.call(1, "POST", &resolve).bearer(token).json(&resolve_body("approve_once")).send().await;
        assert_eq!((r.status, r.code().as_str()), (404, "not_found"), "{r:?}");
    }
    assert_eq!(s.events().await, before, "no refusal wrote anything");
    let mine = s.call(1, "GET", &format!("/v1/browser-task-grants/{grant}")).bearer(&owner).send().await;
    assert_eq!(mine.json()["status"], "active", "another owner's revoke ended nothing");

    // The authorizer unreachable: 503, nothing written, and the card still answerable after.
    // Port 1, not a port bound and dropped: another test running beside this one can be given a
    // freed ephemeral port, and the gateway then meets a server that is not the authorizer (a
    // failure seen once in the full suite: 504 outcome_unknown instead of 503). Nothing listens
    // on a privileged port the tests never bind, so the connection is refused at once.
    let down = s.gateway_to("http://127.0.0.1:1").await;
    let r = Call::new(down, "POST", &resolve).bearer(&owner).json(&resolve_body("approve_once")).send().await;
    assert_eq!((r.status, r.code().as_str()), (503, "unavailable"), "{r:?}");
    assert!(r.header("retry-after").is_some());
    assert_eq!(s.events().await, before);
    let r = s.call(0, "POST", &resolve).bearer(&owner).json(&resolve_body("approve_once")).send().await;
    assert_eq!(r.status, 200, "{r:?}");

    // Hardening every response carries; no CORS for anyone.
    let r = s.call(0, "GET", "/v1/me").bearer(&owner).header("origin", "https://evil.test").send().await;
    assert_eq!(r.status, 200);
    assert!(r.header("access-control-allow-origin").is_none());
    for (h, v) in [("x-content-type-options", "nosniff"), ("x-frame-options", "DENY"), ("cache-control", "no-store")] {
        assert_eq!(r.header(h), Some(v), "{h}");
    }
    assert!(r.header("content-security-policy").is_some_and(|v| v.contains("default-src 'none'")));
    assert!(r.header("x-request-id").is_some());
    let preflight = s.call(0, "OPTIONS", "/v1/me").header("origin", "https://evil.test").send().await;
    assert!(preflight.header("access-control-allow-origin").is_none() && preflight.status >= 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_past_its_rate_is_refused_with_retry_after() {
    let s = GatewayStack::start(5).await;
    let (_, owner) = s.token(ON, "owner-a", ALL).await;
    let (_, other) = s.token(ON, "owner-a", ALL).await;
    for _ in 0..5 {
        assert_eq!(s.call(0, "GET", "/v1/me").bearer(&owner).send().await.status, 200);
    }
    let r = s.call(0, "GET", "/v1/me").bearer(&owner).send().await;
    assert_eq!((r.status, r.code().as_str()), (429, "rate_limited"));
    assert!(r.header("retry-after").is_some_and(|v| v.parse::<u64>().is_ok_and(|n| n >= 1)));
    assert_eq!(s.call(0, "GET", "/v1/me").bearer(&other).send().await.status, 200, "another token is not slowed");
}

fn set_cookie(r: &Reply) -> String {
    r.header("set-cookie").unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_signs_in_once_by_link_and_its_writes_need_the_csrf_token() {
    let s = GatewayStack::start(10_000).await;
    let (token_id, _) = s.token(ON, "owner-a", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let (card, _) = s.card(ON, "owner-a", "s1").await;
    let code = s.owners().link(ON, token_id).await.unwrap();

    // Opening the link spends nothing: the page's button does.
    for _ in 0..2 {
        let page = s.call(0, "GET", &format!("/sign-in?code={code}")).send().await;
        assert_eq!(page.status, 200);
        assert!(page.body.contains("method=\"post\""), "{}", page.body);
        assert!(page.body.contains("<strong>owner-a</strong> of <strong>tenant-on</strong>"), "whom it signs in");
    }
    let form = format!("code={code}");
    let cross = s
        .call(0, "POST", "/sign-in")
        .header("origin", "https://evil.test")
        .raw("application/x-www-form-urlencoded", form.as_bytes())
        .send()
        .await;
    assert_eq!(cross.status, 403, "a sign-in posted from another site");
    assert!(cross.header("set-cookie").is_none());

    // Raced from eight connections, the link opens exactly one session.
    let mut racing = Vec::new();
    for i in 0..8 {
        let call = s
            .call(i % 2, "POST", "/sign-in")
            .header("origin", &format!("http://127.0.0.1:{}", s.gateways[i % 2]))
            .raw("application/x-www-form-urlencoded", form.as_bytes());
        racing.push(tokio::spawn(call.send()));
    }
    let mut signed = Vec::new();
    for r in racing {
        let r = r.await.unwrap();
        if r.status == 303 {
            signed.push(r);
        } else {
            assert_eq!(r.status, 401, "{r:?}");
        }
    }
    assert_eq!(signed.len(), 1, "one link, one session");
    let cookie = set_cookie(&signed[0]);
    assert_eq!(signed[0].header("location"), Some("/"));
    assert!(cookie.starts_with("__Host-gl_session=gls_"), "{cookie}");
    for flag in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(cookie.split("; ").any(|p| p == flag), "{flag} in {cookie}");
    }
    assert!(!cookie.contains("Domain"), "{cookie}");
    let session = cookie.split(';').next().unwrap().to_owned();

    // The page learns its CSRF token from /v1/me, through either replica.
    let me = s.call(1, "GET", "/v1/me").header("cookie", &session).send().await;
    assert_eq!((me.status, me.json()["signed_in_by"].as_str()), (200, Some("session")));
    let csrf = me.json()["csrf_token"].as_str().unwrap().to_owned();
    let resolve = format!("/v1/approvals/{card}/resolve");
    let before = s.events().await;
    for (what, extra) in [
        ("no CSRF token", vec![]),
        ("a wrong CSRF token", vec![("x-csrf-token", "0".repeat(64))]),
        ("another site's request", vec![("x-csrf-token", csrf.clone()), ("sec-fetch-site", "cross-site".to_owned())]),
    ] {
        let mut call = s.call(0, "POST", &resolve).header("cookie", &session);
        for (k, v) in &extra {
            call = call.header(k, v);
        }
        let r = call.json(&resolve_body("approve_once")).send().await;
        assert_eq!((r.status, r.code().as_str()), (403, "csrf_refused"), "{what}: {r:?}");
    }
    assert_eq!(s.events().await, before);
    let pending = s.call(0, "GET", &format!("/v1/approvals/{card}")).header("cookie", &session).send().await;
    assert_eq!(pending.json()["status"], "PENDING", "a refused write leaves the card pending");
    let ok = s
        .call(0, "POST", &resolve)
        .header("cookie", &session)
        .header("x-csrf-token", &csrf)
        .header("sec-fetch-site", "same-origin")
        .json(&resolve_body("approve_once"))
        .send()
        .await;
    assert_eq!(ok.status, 200, "{ok:?}");

    // Two session cookies (one planted by someone else): believed neither.
    let planted = format!("{session}; __Host-gl_session=gls_{}", "1".repeat(64));
    assert_eq!(s.call(0, "GET", "/v1/me").header("cookie", &planted).send().await.status, 401);

    // Signing out ends the session; revoking the token ends every session made from it.
    let again = s.owners().link(ON, token_id).await.unwrap();
    // A browser under no-referrer posts `Origin: null`; `Sec-Fetch-Site` decides, which no page
    // can set.
    let from_own_page = s.owners().link(ON, token_id).await.unwrap();
    let browser = s
        .call(0, "POST", "/sign-in")
        .header("origin", "null")
        .header("sec-fetch-site", "same-origin")
        .raw("application/x-www-form-urlencoded", format!("code={from_own_page}").as_bytes())
        .send()
        .await;
    assert_eq!(browser.status, 303, "a browser's own-page post: {browser:?}");
    let forged = s
        .call(0, "POST", "/sign-in")
        .header("origin", &format!("http://127.0.0.1:{}", s.gateways[0]))
        .header("sec-fetch-site", "cross-site")
        .raw("application/x-www-form-urlencoded", format!("code={again}").as_bytes())
        .send()
        .await;
    assert_eq!(forged.status, 403, "another site's post, whatever its Origin says");
    let no_origin = s
        .call(0, "POST", "/sign-in")
        .raw("application/x-www-form-urlencoded", format!("code={again}").as_bytes())
        .send()
        .await;
    assert_eq!(no_origin.status, 403, "a sign-in post that names no origin is not a browser's page");
    let second = s
        .call(0, "POST", "/sign-in")
        .header("origin", &format!("http://127.0.0.1:{}", s.gateways[0]))
        .raw("application/x-www-form-urlencoded", format!("code={again}").as_bytes())
        .send()
        .await;
    let second_session = set_cookie(&second).split(';').next().unwrap().to_owned();
    let out = s.call(0, "POST", "/v1/sign-out").header("cookie", &session).header("x-csrf-token", &csrf).send().await;
    assert_eq!(out.status, 200, "{out:?}");
    assert!(set_cookie(&out).contains("Max-Age=0"));
    assert_eq!(s.call(0, "GET", "/v1/me").header("cookie", &session).send().await.status, 401);
    assert_eq!(s.call(0, "GET", "/v1/me").header("cookie", &second_session).send().await.status, 200);
    assert!(s.owners().revoke(ON, token_id).await.unwrap());
    assert_eq!(s.call(1, "GET", "/v1/me").header("cookie", &second_session).send().await.status, 401);
    let used = s.owners().link(ON, token_id).await;
    assert!(used.is_err(), "a revoked token makes no link");
}

/// The documented routes, each called as its owner would, with the tenant's flag on and then
/// off: the task-grant routes answer exactly as a path that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_route_census_with_the_flag_on_and_off() {
    let s = GatewayStack::start(10_000).await;
    let (_, owner) = s.token(ON, "owner-a", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let (card, offer) = s.card(ON, "owner-a", "s1").await;
    let offer = offer.unwrap();
    let granted = s
        .call(0, "POST", &format!("/v1/approvals/{card}/resolve"))
        .bearer(&owner)
        .json(&for_task(&offer.origin, &offer.path_prefix))
        .send()
        .await;
    let grant = granted.json()["grant_id"].as_str().unwrap().to_owned();
    let doc = s.call(0, "GET", "/v1/openapi.json").send().await;
    assert_eq!(doc.status, 200);
    let doc = doc.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut routes: Vec<(String, String, bool)> = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            routes.push((method.to_uppercase(), path.clone(), op.get("x-mounted-when").is_some()));
        }
    }
    routes.sort();
    let census = |flag: bool| {
        routes.iter().filter(|(_, _, f)| flag || !f).map(|(m, p, _)| format!("{m} {p}")).collect::<Vec<_>>()
    };
    println!("mounted with the flag on:\n  {}", census(true).join("\n  "));
    println!("mounted with the flag off:\n  {}", census(false).join("\n  "));
    assert_eq!(
        census(false),
        [
            "GET /v1/approvals/{approval_id}",
            "GET /v1/approvals/{approval_id}/live",
            "GET /v1/me",
            "GET /v1/openapi.json",
            "GET /v1/sessions/{session_id}/activity",
            "GET /v1/sessions/{session_id}/approvals",
            "GET /v1/sessions/{session_id}/events",
            "POST /v1/approvals/{approval_id}/live/input",
            "POST /v1/approvals/{approval_id}/resolve",
            "POST /v1/sessions/{session_id}/stop",
            "POST /v1/sign-out",
            "POST /v1/stop-everything",
        ]
    );
    let flagged: Vec<_> = routes.iter().filter(|r| r.2).map(|(m, p, _)| format!("{m} {p}")).collect();
    assert_eq!(
        flagged,
        [
            "GET /v1/browser-task-grants",
            "GET /v1/browser-task-grants/{grant_id}",
            "POST /v1/browser-task-grants/{grant_id}/revoke"
        ]
    );
    let grant_calls = |s: &GatewayStack| {
        [
            s.call(0, "GET", "/v1/browser-task-grants?session_id=s1").bearer(&owner),
            s.call(0, "GET", &format!("/v1/browser-task-grants/{grant}")).bearer(&owner),
            s.call(0, "POST", &format!("/v1/browser-task-grants/{grant}/revoke")).bearer(&owner),
        ]
    };
    for call in grant_calls(&s).into_iter().take(2) {
        assert_eq!(call.send().await.status, 200, "mounted with the flag on");
    }
    // The operator turns the flag off: the same objects, the same owner, no such routes.
    ops::serve::apply_settings(&s.db.url(), ON, tests::gateway::settings(false)).await.unwrap();
    let missing = s.call(0, "GET", "/v1/no-such-route").bearer(&owner).send().await;
    assert_eq!(missing.status, 404);
    for call in grant_calls(&s) {
        let r = call.send().await;
        assert_eq!((r.status, r.json()["code"].clone()), (404, missing.json()["code"].clone()), "{r:?}");
    }
    // Nor do they answer a bad query, id, body or a missing scope as anything but absent.
    let (_, resolve_only) = s.token(ON, "owner-a", &[Scope::ApprovalResolve]).await;
    for call in [
        s.call(0, "GET", "/v1/browser-task-grants?sesion_id=s1").bearer(&owner),
        s.call(0, "GET", "/v1/browser-task-grants/not-a-uuid").bearer(&owner),
        s.call(0, "POST", &format!("/v1/browser-task-grants/{grant}/revoke")).bearer(&owner).json(&json!({"x": 1})),
        s.call(0, "GET", "/v1/browser-task-grants").bearer(&resolve_only),
        s.call(0, "GET", "/v1/browser-task-grants/%FF").bearer(&owner),
    ] {
        let r = call.send().await;
        assert_eq!((r.status, r.code().as_str()), (404, "not_found"), "{r:?}");
    }
    let (card, offer) = s.card(ON, "owner-a", "s1").await;
    assert!(offer.is_none(), "no offer with the flag off");
    let r = s
        .call(1, "POST", &format!("/v1/approvals/{card}/resolve"))
        .bearer(&owner)
        .json(&for_task("https://www.lesson.test", "/lesson"))
        .send()
        .await;
    assert_eq!(r.status, 409, "approve_for_task is refused with the flag off: {r:?}");
    assert_eq!(s.call(1, "GET", "/v1/sessions/s1/approvals").bearer(&owner).send().await.status, 200);
    // Stop takes authority away, so it is served with the flag off and to an owner who may only
    // answer cards; another owner's chat does not exist for it.
    let (_, other) = s.token(ON, "owner-b", ALL).await;
    let r = s.call(0, "POST", "/v1/sessions/s1/stop").bearer(&other).send().await;
    assert_eq!((r.status, r.code().as_str()), (404, "not_found"), "{r:?}");
    let r = s.call(0, "POST", "/v1/sessions/s1/stop").bearer(&resolve_only).json(&json!({"x": 1})).send().await;
    assert_eq!((r.status, r.code().as_str()), (422, "invalid_field"), "a body with a field is refused: {r:?}");
    let r = s.call(0, "POST", "/v1/sessions/s1/stop").bearer(&resolve_only).send().await;
    assert_eq!(r.status, 200, "{r:?}");
    let pending = s.call(1, "GET", "/v1/sessions/s1/approvals?pending_only=true").bearer(&owner).send().await;
    assert_eq!(pending.json()["approvals"], json!([]), "the stop denied the waiting card: {pending:?}");
    // Stop everything finds the owner's other chat (a card waits there), not the stopped one.
    s.session(ON, "owner-a", "s2").await;
    let (card, _) = s.card(ON, "owner-a", "s2").await;
    let r = s.call(1, "POST", "/v1/stop-everything").bearer(&resolve_only).send().await;
    assert_eq!((r.status, r.json()["sessions"].clone()), (200, json!(1)), "{r:?}");
    let got = s.call(0, "GET", &format!("/v1/approvals/{card}")).bearer(&owner).send().await;
    assert_eq!(got.json()["status"], "DENIED", "{got:?}");
    let r = s.call(0, "POST", "/v1/stop-everything").bearer(&other).send().await;
    assert_eq!((r.status, r.json()["sessions"].clone()), (200, json!(0)), "owner-b has nothing to stop: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_shows_cards_and_grants_move_without_polling() {
    let s = GatewayStack::start(10_000).await;
    let (token_id, owner) = s.token(ON, "owner-a", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let (card, offer) = s.card(ON, "owner-a", "s1").await;
    let (status, mut events) = s.call(0, "GET", "/v1/sessions/s1/events").bearer(&owner).stream().await;
    assert_eq!(status, 200);
    let within = Duration::from_secs(10);
    let (name, data) = next_event(&mut events, within).await.expect("the opening state");
    assert_eq!((name.as_str(), data["approval_id"].as_str()), ("approval.pending", Some(card.as_str())));

    // Answered through the other replica: the stream on this one hears of it.
    let offer = offer.unwrap();
    let granted = s
        .call(1, "POST", &format!("/v1/approvals/{card}/resolve"))
        .bearer(&owner)
        .json(&for_task(&offer.origin, &offer.path_prefix))
        .send()
        .await;
    let grant = granted.json()["grant_id"].as_str().unwrap().to_owned();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let (name, data) = next_event(&mut events, within).await.expect("the resolve is streamed");
        seen.push((name, data));
    }
    let names: Vec<_> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"approval.resolved") && names.contains(&"grant.changed"), "{names:?}");
    assert!(matches!(s.act(ON, "owner-a", "s1", "Next").await, Decision::Allow(_)));
    let (name, data) = next_event(&mut events, within).await.expect("a use is streamed");
    assert_eq!((name.as_str(), data["actions_used"].as_u64()), ("grant.changed", Some(1)));
    s.call(1, "POST", &format!("/v1/browser-task-grants/{grant}/revoke")).bearer(&owner).send().await;
    let (name, data) = next_event(&mut events, within).await.expect("the end is streamed");
    assert_eq!((name.as_str(), data["end_reason"].as_str()), ("grant.ended", Some("revoked")));

    // A token holds a few streams on a replica, not a connection table's worth.
    let mut held = Vec::new();
    for _ in 1..gateway::MAX_STREAMS_PER_TOKEN {
        let (status, reader) = s.call(0, "GET", "/v1/sessions/s1/events").bearer(&owner).stream().await;
        assert_eq!(status, 200);
        held.push(reader);
    }
    let over = s.call(0, "GET", "/v1/sessions/s1/events").bearer(&owner).send().await;
    assert_eq!((over.status, over.code().as_str()), (429, "too_many_streams"));
    drop(held);

    // Revoking the token that opened the stream closes it.
    assert!(s.owners().revoke(ON, token_id).await.unwrap());
    assert!(next_event(&mut events, Duration::from_secs(15)).await.is_none(), "the stream ends");
}

/// The table itself holds what the code promises: a revocation or a spent link is never undone,
/// a service makes no owner token, and a session lies within its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_token_rows_only_move_forward() {
    let s = GatewayStack::start(10_000).await;
    let (token_id, _) = s.token(ON, "owner-a", &[Scope::ApprovalResolve]).await;
    let code = s.owners().link(ON, token_id).await.unwrap();
    let (_, _) = s.owners().sign_in(&code).await.unwrap().expect("the link opens a session");
    assert!(s.owners().revoke(ON, token_id).await.unwrap());
    let db = s.db.client().await;
    for (what, sql) in [
        ("un-revoke", "UPDATE owner_tokens SET revoked_at = NULL WHERE kind = 'token'"),
        ("re-arm a spent link", "UPDATE owner_tokens SET used_at = NULL WHERE kind = 'link'"),
        (
            "a session with more scopes than its token",
            "INSERT INTO owner_tokens (token_id, kind, parent_id, tenant_id, principal_id, scopes, token_sha256, \
             expires_at) SELECT gen_random_uuid(), 'session', token_id, tenant_id, principal_id, \
             ARRAY['approval.resolve', 'browser.grant.write'], sha256('x'), expires_at FROM owner_tokens \
             WHERE kind = 'token'",
        ),
    ] {
        let refused = db.execute(sql, &[]).await;
        assert!(refused.is_err(), "{what} is refused by the table");
    }
    db.batch_execute("SET ROLE grant_ledger_service").await.unwrap();
    let minted = db
        .execute(
            "INSERT INTO owner_tokens (token_id, kind, tenant_id, principal_id, scopes, token_sha256, expires_at) \
             VALUES (gen_random_uuid(), 'token', 'tenant-on', 'owner-a', ARRAY['approval.resolve'], sha256('y'), \
             now() + interval '1 day')",
            &[],
        )
        .await;
    assert!(minted.is_err(), "a service makes no owner token");
}

/// The worker waits for the owner's answer to its card and, for an approval, is handed the
/// single-use token; nobody else's worker is, and a denial hands out nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_awaits_the_owners_answer_and_takes_the_token() {
    use proto::v1 as pb;
    let s = GatewayStack::start(10_000).await;
    let (_, owner) = s.token(ON, "owner-a", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let (card, offer) = s.card(ON, "owner-a", "s1").await;
    let worker = s.tenants[ON].workers["owner-a"].clone();
    let mut authorizer = pb::authorizer_client::AuthorizerClient::new(s.authorizers[1].clone());
    let wait = |approval_id: &str, wait_ms: u32| pb::AwaitApprovalRequest {
        session_id: "s1".into(),
        approval_id: approval_id.into(),
        wait_ms,
    };
    let pending = authorizer.await_approval(tests::bearer(&worker, wait(&card, 0))).await.unwrap().into_inner();
    assert_eq!((pending.status.as_str(), pending.approval_token.as_str()), ("PENDING", ""));
    // Another owner's worker, and a wait past the bound.
    let other = s.tenants[ON].workers["owner-b"].clone();
    let refused = authorizer.await_approval(tests::bearer(&other, wait(&card, 0))).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::NotFound);
    let long = authorizer.await_approval(tests::bearer(&worker, wait(&card, 60_000))).await.unwrap_err();
    assert_eq!(long.code(), tonic::Code::InvalidArgument);

    // A wait under way returns when the owner answers, through the other replica.
    let mut waiting = authorizer.clone();
    let (w, c) = (worker.clone(), card.clone());
    let answered = tokio::spawn(async move { waiting.await_approval(tests::bearer(&w, wait(&c, 15_000))).await });
    let offer = offer.unwrap();
    let granted = s
        .call(0, "POST", &format!("/v1/approvals/{card}/resolve"))
        .bearer(&owner)
        .json(&for_task(&offer.origin, &offer.path_prefix))
        .send()
        .await;
    assert_eq!(granted.status, 200);
    let got = answered.await.unwrap().unwrap().into_inner();
    assert_eq!(got.status, "APPROVED");
    assert!(proto::limits::is_approval_token(&got.approval_token), "{got:?}");
    assert_eq!(got.grant_id, granted.json()["grant_id"].as_str().unwrap());
    let again = authorizer.await_approval(tests::bearer(&worker, wait(&card, 0))).await.unwrap().into_inner();
    assert_eq!(again.approval_token, got.approval_token, "the same token until it is spent");

    // A card in another chat (the grant covers this one's acts now), denied.
    s.session(ON, "owner-a", "s2").await;
    let (denied, _) = s.card(ON, "owner-a", "s2").await;
    let no = s
        .call(1, "POST", &format!("/v1/approvals/{denied}/resolve"))
        .bearer(&owner)
        .json(&resolve_body("deny"))
        .send()
        .await;
    assert_eq!(no.status, 200);
    let in_s2 = pb::AwaitApprovalRequest { session_id: "s2".into(), approval_id: denied.clone(), wait_ms: 0 };
    let d = authorizer.await_approval(tests::bearer(&worker, in_s2)).await.unwrap().into_inner();
    assert_eq!((d.status.as_str(), d.approval_token.as_str()), ("DENIED", ""));
}
