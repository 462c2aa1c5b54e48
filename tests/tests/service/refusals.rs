//! Bad input, refused resolutions, a lost database and health: typed answers that change nothing.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_name_the_field_and_change_nothing() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let before = client
        .list_approvals(owner(pb::ListApprovalsRequest { session_id: "s1".into(), ..Default::default() }))
        .await
        .unwrap();
    let cases: Vec<(pb::AuthorizeRequest, &str)> = vec![
        (pb::AuthorizeRequest { session_id: String::new(), ..act(None) }, "session_id"),
        (pb::AuthorizeRequest { session_id: "bad id".into(), ..act(None) }, "session_id"),
        (pb::AuthorizeRequest { run: None, ..act(None) }, "run"),
        (pb::AuthorizeRequest { agent_version: String::new(), ..act(None) }, "agent_version"),
        (pb::AuthorizeRequest { page_url: String::new(), ..act(None) }, "page_url"),
        (pb::AuthorizeRequest { action: Some(pb::Action::default()), ..act(None) }, "action.kind"),
        (
            pb::AuthorizeRequest { action: Some(pb::Action { kind: 99, ..Default::default() }), ..act(None) },
            "action.kind",
        ),
        (
            pb::AuthorizeRequest {
                action: Some(pb::Action { kind: pb::ActionKind::Press as i32, ..Default::default() }),
                ..act(None)
            },
            "action.key",
        ),
        (pb::AuthorizeRequest { node_ref: String::new(), ..act(None) }, "snapshot_id"),
        (pb::AuthorizeRequest { element: None, ..act(None) }, "element"),
        // A click on a field: the runtime never dispatches one.
        (
            pb::AuthorizeRequest {
                element: Some(pb::ElementFacts { role: "textbox".into(), ..act(None).element.unwrap() }),
                ..act(None)
            },
            "action.kind",
        ),
        // Every id fits a stream name beside any tenant: at most 120 bytes (193 used to panic).
        (pb::AuthorizeRequest { session_id: "s".repeat(121), ..act(None) }, "session_id"),
        (pb::AuthorizeRequest { tool_call_id: "c".repeat(195), ..act(None) }, "tool_call_id"),
        (pb::AuthorizeRequest { snapshot_id: "x".repeat(5_000), node_ref: "n1".into(), ..act(None) }, "snapshot_id"),
    ];
    for (request, field) in cases {
        let err = client.authorize(owner(request)).await.unwrap_err();
        assert_eq!((err.code(), field_violation(&err).as_str()), (Code::InvalidArgument, field), "{err:?}");
    }
    let err = client
        .get_approval(owner(pb::GetApprovalRequest { approval_id: "nope".into(), min_position: None }))
        .await
        .unwrap_err();
    assert_eq!((err.code(), field_violation(&err).as_str()), (Code::InvalidArgument, "approval_id"));
    let err = client
        .create_session(owner(pb::CreateSessionRequest { session_id: "s2".into(), ..Default::default() }))
        .await
        .unwrap_err();
    assert_eq!(field_violation(&err), "surface");
    let scheduled = pb::CreateSessionRequest {
        session_id: "s3".into(),
        surface: pb::Surface::Interactive as i32,
        schedule_id: "every day".into(),
        ..Default::default()
    };
    let err = client.create_session(owner(scheduled)).await.unwrap_err();
    assert_eq!(field_violation(&err), "schedule_id");
    let err = client
        .redeem_token(owner(pb::RedeemTokenRequest { approval_token: "apv_XYZ".into(), ..Default::default() }))
        .await
        .unwrap_err();
    assert_eq!(field_violation(&err), "approval_token");
    let after = client
        .list_approvals(owner(pb::ListApprovalsRequest { session_id: "s1".into(), ..Default::default() }))
        .await
        .unwrap();
    assert_eq!(before.into_inner(), after.into_inner(), "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_resolutions_leave_the_card_pending_and_retries_are_safe() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let again = client
        .create_session(owner(pb::CreateSessionRequest { session_id: "s1".into(), surface: 1, ..Default::default() }))
        .await
        .unwrap_err();
    assert_eq!(again.code(), Code::AlreadyExists);

    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    let wider = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: "https://www.lesson.test".into(),
        offered_path_prefix: "/".into(),
    };
    let err = client.resolve_approval(owner(wider)).await.unwrap_err();
    assert_eq!((err.code(), reason(&err).as_str()), (Code::FailedPrecondition, "OFFER_MISMATCH"));
    let pending = client
        .get_approval(owner(pb::GetApprovalRequest { approval_id: card.approval_id.clone(), min_position: None }))
        .await
        .unwrap();
    assert_eq!(pending.into_inner().status, "PENDING", "the owner can still allow once");
    let once = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    let ok = client.resolve_approval(owner(once.clone())).await.unwrap().into_inner();
    assert_eq!(ok.status, "APPROVED");
    let retry = client.resolve_approval(owner(once)).await.unwrap_err();
    assert_eq!((retry.code(), reason(&retry).as_str()), (Code::FailedPrecondition, "APPROVAL_NOT_PENDING"));

    // The token issued with the approval redeems once, for its own run, snapshot and node only.
    let click = pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() };
    let redeem_as = |token: &str, node: &str, action: &pb::Action| pb::RedeemTokenRequest {
        approval_token: token.into(),
        run_id: "run-1".into(),
        snapshot_id: "snap_0123456789ab".into(),
        node_ref: node.into(),
        action: Some(action.clone()),
        browser_profile_id: "profile-1".into(),
        // The card's element, on the card's page, as the runtime reads it live.
        element_role: "button".into(),
        element_name: "el gato".into(),
        page_origin: "https://www.lesson.test".into(),
        ..Default::default()
    };
    let redeem = |token: &str, node: &str| redeem_as(token, node, &click);
    let wrong = client.redeem_token(owner(redeem(&ok.approval_token, "n8"))).await.unwrap_err();
    assert_eq!((wrong.code(), reason(&wrong).as_str()), (Code::PermissionDenied, "APPROVAL_TOKEN_INVALID"));
    // Approved for a click: not spent on a key press or a type on the same node.
    let press = pb::Action { kind: pb::ActionKind::Press as i32, key: "Enter".into(), ..Default::default() };
    let typed = pb::Action { kind: pb::ActionKind::Type as i32, field_id: "answer".into(), ..Default::default() };
    // A typed text must come with its digest; a click redeemed in another profile is not this one.
    let in_other_profile =
        pb::RedeemTokenRequest { browser_profile_id: "profile-2".into(), ..redeem(&ok.approval_token, "n7") };
    let wrong = client.redeem_token(owner(in_other_profile)).await.unwrap_err();
    assert_eq!(reason(&wrong), "APPROVAL_TOKEN_INVALID");
    for (other, digest) in [(press, vec![]), (typed, vec![7; 32])] {
        let asked = pb::RedeemTokenRequest { text_sha256: digest, ..redeem_as(&ok.approval_token, "n7", &other) };
        let wrong = client.redeem_token(owner(asked)).await.unwrap_err();
        assert_eq!(reason(&wrong), "APPROVAL_TOKEN_INVALID", "{other:?}");
    }
    let tries: Vec<_> = (0..16)
        .map(|_| {
            let mut c = client.clone();
            let r = redeem(&ok.approval_token, "n7");
            tokio::spawn(async move { c.redeem_token(owner(r)).await })
        })
        .collect();
    let mut redeemed = 0;
    for t in tries {
        match t.await.unwrap() {
            Ok(r) => {
                redeemed += 1;
                // The redemption is the approved act's dispatch ticket.
                let ticket = r.into_inner().ticket.expect("a ticket");
                let body = tests::ticket_keys().open(TENANT, &ticket).expect("sealed for the tenant");
                assert_eq!((body.authorization_kind.as_str(), body.node_ref.as_str()), ("approval", "n7"));
                assert!(body.constraint.is_none(), "the owner saw the act whole");
            }
            Err(e) => assert_eq!(reason(&e), "APPROVAL_TOKEN_INVALID"),
        }
    }
    assert_eq!(redeemed, 1, "single use under concurrent redemption");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_serving() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let authority = Arc::new(Authority::new(MemoryGrants::default(), Policy::empty(), TenantId::new(TENANT).unwrap()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(
        listener,
        AuthorizerService::new(authority, Credentials::memory(), tests::ticket_keys()).accepting_unsealed_facts(),
        None,
        async {
            let _ = stopped.await;
        },
    ));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel);
    let asked = |service: &str| HealthCheckRequest { service: service.into() };
    let overall = health.check(asked("")).await.unwrap().into_inner();
    assert_eq!(overall.status, ServingStatus::Serving as i32);
    let named = health.check(asked("grant_ledger.v1.Authorizer")).await.unwrap().into_inner();
    assert_eq!(named.status, ServingStatus::Serving as i32);

    // With a check (in production: the database answering), gRPC health follows it, as /healthz
    // does: a failing check is NOT_SERVING, overall and for the service.
    let authority = Arc::new(Authority::new(MemoryGrants::default(), Policy::empty(), TenantId::new(TENANT).unwrap()));
    let failing = telemetry::HealthCheck::new(|| async { telemetry::Health::Failing("the database is gone".into()) });
    let service =
        AuthorizerService::new(authority, Credentials::memory(), tests::ticket_keys()).with_health_check(failing);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop_too, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, service, None, async {
        let _ = stopped.await;
    }));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let health = HealthClient::new(channel);
    let within = std::time::Duration::from_secs(10);
    tests::poll_until("gRPC health to follow the failing check", within, std::time::Duration::from_millis(20), || {
        let mut health = health.clone();
        async move {
            let mut all = Vec::new();
            for service in ["", "grant_ledger.v1.Authorizer"] {
                all.push(health.check(asked(service)).await.ok()?.into_inner().status);
            }
            all.iter().all(|s| *s == ServingStatus::NotServing as i32).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_database_is_unavailable_writes_nothing_and_a_retry_succeeds() {
    let db = TestDb::new().await;
    let Served { mut client, _stop, .. } = start_on_postgres(&db, 4).await;
    session(&mut client).await;
    let admin = {
        let mut config = db.config.clone();
        config.dbname("postgres");
        let (c, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        c
    };
    let cut = format!(
        "ALTER DATABASE {0} ALLOW_CONNECTIONS false; \
         SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{0}';",
        db.name
    );
    admin.batch_execute(&cut).await.unwrap();
    let err = client.authorize(owner(act(None))).await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    assert!(err.message().contains("nothing was written"), "{}", err.message());

    admin.batch_execute(&format!("ALTER DATABASE {} ALLOW_CONNECTIONS true", db.name)).await.unwrap();
    // The pool may still hand out a connection killed above; a caller retries a determinate
    // failure, and within a few tries gets a fresh connection.
    let mut reply = None;
    for _ in 0..8 {
        match client.authorize(owner(act(None))).await {
            Ok(r) => {
                reply = Some(r.into_inner());
                break;
            }
            Err(e) => assert_eq!(e.code(), Code::Unavailable, "{e:?}"),
        }
    }
    let reply = reply.expect("the retry went through once the database was back");
    let card = asked(&reply).clone();
    // Exactly one approval exists: the failed attempt wrote nothing.
    let list = client
        .list_approvals(owner(pb::ListApprovalsRequest { session_id: "s1".into(), ..Default::default() }))
        .await
        .unwrap();
    let ids: Vec<String> = list.into_inner().approvals.into_iter().map(|a| a.approval_id).collect();
    assert_eq!(ids, [card.approval_id]);
}

/// Bad input never looks like an outage: a NUL in a string that would be recorded is
/// INVALID_ARGUMENT naming where it went, not UNAVAILABLE, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_in_a_recorded_string_is_invalid_argument_not_unavailable() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let at = position();
    let mut req = act(None);
    req.element.as_mut().unwrap().name = "el\u{0}gato".into();
    let err = client.authorize(owner(req)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert_eq!(field_violation(&err), "element.name");
    assert_eq!(position(), at, "nothing written");
}
