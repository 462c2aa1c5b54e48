//! Signing in by link, the CSRF token, and owner tokens that only move forward.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

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
