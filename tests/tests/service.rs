//! The Authorizer gRPC service: in process over an in-memory duplex (the memory backend), and over
//! a real loopback socket (PostgreSQL, health, a lost database). Each call's happy path,
//! validation, authentication, another principal's objects, failures and retries, and tokens.

use std::sync::Arc;

use authorizer::authority::{Authority, Backend, MemoryGrants};
use authorizer::constraint::{DispatchConstraint, GrantKind};
use authorizer::domain::Command;
use authorizer::pg::PgGrants;
use authorizer::policy::Policy;
use authorizer::scopes::{TaskGrantSettings, parse_scopes};
use authorizer::service::{AuthorizerService, serve};
use ledger::TenantId;
use pb::authorizer_client::AuthorizerClient;
use proto::v1 as pb;
use tests::TestDb;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

const TENANT: &str = "tenant-1";

/// A served authority and a client for it; the server stops when this is dropped.
struct Served {
    client: AuthorizerClient<Channel>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start<B: Backend + 'static>(backend: B) -> Served {
    let authority = Arc::new(Authority::new(backend, Policy::empty(), TenantId::new(TENANT).unwrap()));
    let settings = TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/lesson").unwrap() };
    authority.execute(Command::ChangeSettings(settings), "operator").await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, AuthorizerService::new(authority, TENANT), async {
        let _ = stopped.await;
    }));
    let client = AuthorizerClient::connect(format!("http://{addr}")).await.unwrap();
    Served { client, _stop: stop }
}

/// The same service in process: tonic over an in-memory duplex, no socket.
async fn start_in_process(backend: MemoryGrants) -> Served {
    start_in_process_with(backend, true).await
}

/// [`start_in_process`] with BROWSER_TASK_GRANTS_ENABLED as given (off: no scope either).
async fn start_in_process_with(backend: MemoryGrants, task_grants: bool) -> Served {
    let authority = Arc::new(Authority::new(backend, Policy::empty(), TenantId::new(TENANT).unwrap()));
    if task_grants {
        let settings =
            TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/lesson").unwrap() };
        authority.execute(Command::ChangeSettings(settings), "operator").await.unwrap();
    }
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let service = AuthorizerService::new(authority, TENANT).into_server();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            // One connection, then an incoming stream that stays open: the server stops on the
            // signal, not when its incoming stream ends.
            .serve_with_incoming_shutdown(
                tokio_stream::StreamExt::chain(
                    tokio_stream::once(Ok::<_, std::io::Error>(server_io)),
                    tokio_stream::pending(),
                ),
                async {
                    let _ = stopped.await;
                },
            )
            .await
    });
    let mut client_io = Some(client_io);
    let channel =
        tonic::transport::Endpoint::from_static("http://in-process.invalid")
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let io = client_io.take();
                async move {
                    io.map(hyper_util::rt::TokioIo::new).ok_or_else(|| std::io::Error::other("one connection only"))
                }
            }))
            .await
            .unwrap();
    Served { client: AuthorizerClient::new(channel), _stop: stop }
}

fn as_who<T>(principal: &str, message: T) -> Request<T> {
    let mut req = Request::new(message);
    req.metadata_mut().insert("x-tenant-id", TENANT.parse().unwrap());
    req.metadata_mut().insert("x-principal-id", principal.parse().unwrap());
    req
}

fn owner<T>(message: T) -> Request<T> {
    as_who("owner", message)
}

fn intruder<T>(message: T) -> Request<T> {
    as_who("intruder", message)
}

fn act(text: Option<&str>) -> pb::AuthorizeRequest {
    let (kind, field_kind) = match text {
        Some(_) => (pb::ActionKind::Type, pb::FieldKind::Text),
        None => (pb::ActionKind::Click, pb::FieldKind::None),
    };
    pb::AuthorizeRequest {
        session_id: "s1".into(),
        run: Some(pb::RunContext { run_id: "run-1".into(), interactive: true, top_level: true }),
        tool_call_id: "call-1".into(),
        turn_tool_calls: vec!["browser.observe".into(), "browser.act".into()],
        agent_version: "agent-7".into(),
        element: Some(pb::ElementFacts {
            role: "button".into(),
            name: "el gato".into(),
            visible_text: "el gato".into(),
            field_kind: field_kind as i32,
            ..Default::default()
        }),
        page_url: "https://www.lesson.test/lesson/unit-3?token=secret".into(),
        page_title: "Lesson".into(),
        action: Some(pb::Action { kind: kind as i32, text: text.unwrap_or_default().into(), ..Default::default() }),
        snapshot_id: "snap_0123456789ab".into(),
        node_ref: "n7".into(),
    }
}

async fn session(client: &mut AuthorizerClient<Channel>) {
    let create = pb::CreateSessionRequest {
        session_id: "s1".into(),
        browser_profile_id: "profile-1".into(),
        schedule_id: String::new(),
        surface: pb::Surface::Interactive as i32,
    };
    client.create_session(owner(create)).await.unwrap();
    let said = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m1".into(), from_owner: true };
    client.record_message(owner(said)).await.unwrap();
}

fn asked(reply: &pb::AuthorizeReply) -> &pb::RequireApproval {
    match &reply.decision {
        Some(pb::authorize_reply::Decision::RequireApproval(r)) => r,
        other => panic!("expected an approval, got {other:?}"),
    }
}

fn field_violation(status: &Status) -> String {
    let details = status.get_error_details();
    details.bad_request().and_then(|b| b.field_violations.first()).map(|v| v.field.clone()).unwrap_or_default()
}

fn reason(status: &Status) -> String {
    status.get_error_details().error_info().map(|i| i.reason.clone()).unwrap_or_default()
}

/// The lesson path end to end: card with an offer, Allow for this task, covered acts, list,
/// get, revoke.
async fn lesson_path(served: Served) {
    let Served { mut client, _stop } = served;
    session(&mut client).await;

    let first = client.authorize(owner(act(None))).await.unwrap().into_inner();
    let card = asked(&first).clone();
    let offer = card.offer.clone().expect("inside the configured scope");
    assert_eq!(
        (offer.origin.as_str(), offer.path_prefix.as_str(), offer.minutes, offer.max_actions),
        ("https://www.lesson.test", "/lesson", 30, 200)
    );
    assert!(offer.text.contains("can stop this permission at any time"));
    let view = card.view.clone().unwrap();
    assert_eq!(view.element_name, "el gato");
    assert_eq!(view.action_summary, "Click a button on www.lesson.test/lesson");
    let shown = format!("{view:?}");
    assert!(!shown.contains("secret") && !shown.contains("n7") && !shown.contains("snap_"), "{shown}");

    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin.clone(),
        offered_path_prefix: offer.path_prefix.clone(),
    };
    let resolved = client.resolve_approval(owner(resolve)).await.unwrap().into_inner();
    assert_eq!(resolved.status, "APPROVED");
    assert!(!resolved.grant_id.is_empty());
    assert!(resolved.approval_token.starts_with("apv_") && resolved.approval_token.len() == 28);

    let second = client.authorize(owner(act(Some("la manzana")))).await.unwrap().into_inner();
    let Some(pb::authorize_reply::Decision::Allow(allow)) = second.decision else {
        panic!("the second action runs: {second:?}")
    };
    assert_eq!(
        (allow.kind.as_str(), allow.grant_id.as_str(), allow.use_ordinal),
        ("browser_task_grant", resolved.grant_id.as_str(), 1)
    );
    let c = allow.constraint.unwrap();
    assert_eq!(
        (c.grant_kind, c.origins.as_slice(), c.path_prefix.as_str()),
        (pb::GrantKind::Task as i32, &["https://www.lesson.test".to_owned()][..], "/lesson")
    );
    let domain = DispatchConstraint {
        kind: GrantKind::Task,
        origins: c.origins.clone(),
        path_prefix: c.path_prefix.clone(),
        not_after: time::OffsetDateTime::parse(&c.not_after, &time::format_description::well_known::Rfc3339).unwrap(),
        consequence_ceiling: c.consequence_ceiling.clone(),
        max_text_chars: c.max_text_chars,
    };
    assert_eq!(domain.validate(), Ok(()));

    let at = second.position;
    let grants = client
        .list_grants(owner(pb::ListGrantsRequest { session_id: "s1".into(), active_only: true, min_position: at }))
        .await
        .unwrap()
        .into_inner()
        .grants;
    assert_eq!(grants.len(), 1);
    assert_eq!((grants[0].actions_used, grants[0].chars_used), (1, 10));
    let got = client
        .get_grant(owner(pb::GetGrantRequest { grant_id: resolved.grant_id.clone(), min_position: at }))
        .await
        .unwrap();
    assert_eq!(got.into_inner().end_reason, "");
    let approval = client
        .get_approval(owner(pb::GetApprovalRequest { approval_id: card.approval_id.clone(), min_position: at }))
        .await
        .unwrap();
    assert_eq!(approval.into_inner().status, "APPROVED");

    client.revoke_grant(owner(pb::RevokeGrantRequest { grant_id: resolved.grant_id.clone() })).await.unwrap();
    let after = client.authorize(owner(act(None))).await.unwrap().into_inner();
    asked(&after);
    let ended =
        client.get_grant(owner(pb::GetGrantRequest { grant_id: resolved.grant_id, min_position: None })).await.unwrap();
    assert_eq!(ended.into_inner().end_reason, "revoked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lesson_path_in_memory() {
    lesson_path(start_in_process(MemoryGrants::default()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lesson_path_on_postgres() {
    let db = TestDb::new().await;
    lesson_path(start(PgGrants::new(db.store(8))).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_name_the_field_and_change_nothing() {
    let Served { mut client, _stop } = start_in_process(MemoryGrants::default()).await;
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
async fn callers_must_say_who_they_are_and_see_only_their_own() {
    let Served { mut client, _stop } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let err = client.authorize(Request::new(act(None))).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let mut other_tenant = owner(act(None));
    other_tenant.metadata_mut().insert("x-tenant-id", "tenant-2".parse().unwrap());
    assert_eq!(client.authorize(other_tenant).await.unwrap_err().code(), Code::PermissionDenied);

    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    assert_eq!(
        client.authorize(intruder(act(None))).await.unwrap_err().code(),
        Code::NotFound,
        "another principal's session"
    );
    let get = pb::GetApprovalRequest { approval_id: card.approval_id.clone(), min_position: None };
    assert_eq!(client.get_approval(intruder(get)).await.unwrap_err().code(), Code::NotFound);
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    assert_eq!(client.resolve_approval(intruder(resolve)).await.unwrap_err().code(), Code::NotFound);
    let list = pb::ListApprovalsRequest { session_id: "s1".into(), ..Default::default() };
    assert_eq!(client.list_approvals(intruder(list)).await.unwrap_err().code(), Code::NotFound);
    let offer = card.offer.unwrap();
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin,
        offered_path_prefix: offer.path_prefix,
    };
    let grant_id = client.resolve_approval(owner(resolve)).await.unwrap().into_inner().grant_id;
    let get = pb::GetGrantRequest { grant_id: grant_id.clone(), min_position: None };
    assert_eq!(client.get_grant(intruder(get)).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(
        client.revoke_grant(intruder(pb::RevokeGrantRequest { grant_id: grant_id.clone() })).await.unwrap_err().code(),
        Code::NotFound
    );
    let theirs = client.list_grants(intruder(pb::ListGrantsRequest::default())).await.unwrap().into_inner().grants;
    assert!(theirs.is_empty());
    let mine =
        client.get_grant(owner(pb::GetGrantRequest { grant_id, min_position: None })).await.unwrap().into_inner();
    assert_eq!(mine.end_reason, "", "the intruder's revoke changed nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_resolutions_leave_the_card_pending_and_retries_are_safe() {
    let Served { mut client, _stop } = start_in_process(MemoryGrants::default()).await;
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
    let redeem = |token: &str, node: &str| pb::RedeemTokenRequest {
        approval_token: token.into(),
        run_id: "run-1".into(),
        snapshot_id: "snap_0123456789ab".into(),
        node_ref: node.into(),
    };
    let wrong = client.redeem_token(owner(redeem(&ok.approval_token, "n8"))).await.unwrap_err();
    assert_eq!((wrong.code(), reason(&wrong).as_str()), (Code::PermissionDenied, "APPROVAL_TOKEN_INVALID"));
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
            Ok(_) => redeemed += 1,
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
    tokio::spawn(serve(listener, AuthorizerService::new(authority, TENANT), async {
        let _ = stopped.await;
    }));
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel);
    let asked = |service: &str| HealthCheckRequest { service: service.into() };
    let overall = health.check(asked("")).await.unwrap().into_inner();
    assert_eq!(overall.status, ServingStatus::Serving as i32);
    let named = health.check(asked("grant_ledger.v1.Authorizer")).await.unwrap().into_inner();
    assert_eq!(named.status, ServingStatus::Serving as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_and_a_deleted_session_end_grants_through_the_api() {
    let Served { mut client, _stop } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let grant_for_task = |card: pb::RequireApproval| pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: card.offer.clone().unwrap().origin,
        offered_path_prefix: card.offer.unwrap().path_prefix,
    };
    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    let grant_id = client.resolve_approval(owner(grant_for_task(card))).await.unwrap().into_inner().grant_id;
    let began = pb::ProfileEventRequest { profile_id: "profile-1".into(), event: pb::ProfileEvent::SignInBegan as i32 };
    client.record_profile_event(owner(began)).await.unwrap();
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id, min_position: None })).await.unwrap().into_inner();
    assert_eq!(g.end_reason, "profile_changed");
    let bad = pb::ProfileEventRequest { profile_id: "profile-1".into(), event: 0 };
    assert_eq!(client.record_profile_event(owner(bad)).await.unwrap_err().code(), Code::InvalidArgument);

    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    let grant_id = client.resolve_approval(owner(grant_for_task(card))).await.unwrap().into_inner().grant_id;
    assert_eq!(
        client.delete_session(intruder(pb::DeleteSessionRequest { session_id: "s1".into() })).await.unwrap_err().code(),
        Code::NotFound
    );
    client.delete_session(owner(pb::DeleteSessionRequest { session_id: "s1".into() })).await.unwrap();
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id, min_position: None })).await.unwrap().into_inner();
    assert_eq!(g.end_reason, "session_deleted");
    assert_eq!(
        client.authorize(owner(act(None))).await.unwrap_err().code(),
        Code::NotFound,
        "a deleted session takes no acts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_database_is_unavailable_writes_nothing_and_a_retry_succeeds() {
    let db = TestDb::new().await;
    let Served { mut client, _stop } = start(PgGrants::new(db.store(4))).await;
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

/// Which calls exist: every RPC called once; the task-grant calls answer UNIMPLEMENTED, as a route
/// that is not mounted, exactly when the flag is off.
#[tokio::test]
async fn census_of_calls_served_with_the_flag_off_and_on() {
    fn code<T>(r: Result<tonic::Response<T>, Status>) -> Code {
        r.err().map_or(Code::Ok, |s| s.code())
    }
    async fn unimplemented(client: &mut AuthorizerClient<Channel>) -> Vec<&'static str> {
        let mut codes: Vec<(&'static str, Code)> = Vec::new();
        codes.push(("CreateSession", code(client.create_session(owner(pb::CreateSessionRequest::default())).await)));
        codes.push(("RecordMessage", code(client.record_message(owner(pb::RecordMessageRequest::default())).await)));
        codes.push(("DeleteSession", code(client.delete_session(owner(pb::DeleteSessionRequest::default())).await)));
        codes.push((
            "RecordProfileEvent",
            code(client.record_profile_event(owner(pb::ProfileEventRequest::default())).await),
        ));
        codes.push(("Authorize", code(client.authorize(owner(pb::AuthorizeRequest::default())).await)));
        codes.push((
            "ResolveApproval",
            code(client.resolve_approval(owner(pb::ResolveApprovalRequest::default())).await),
        ));
        codes.push(("GetApproval", code(client.get_approval(owner(pb::GetApprovalRequest::default())).await)));
        codes.push(("ListApprovals", code(client.list_approvals(owner(pb::ListApprovalsRequest::default())).await)));
        codes.push(("RedeemToken", code(client.redeem_token(owner(pb::RedeemTokenRequest::default())).await)));
        codes.push(("GetGrant", code(client.get_grant(owner(pb::GetGrantRequest::default())).await)));
        codes.push(("ListGrants", code(client.list_grants(owner(pb::ListGrantsRequest::default())).await)));
        codes.push(("RevokeGrant", code(client.revoke_grant(owner(pb::RevokeGrantRequest::default())).await)));
        assert_eq!(codes.len(), 12, "every RPC of the service");
        codes.into_iter().filter(|(_, c)| *c == Code::Unimplemented).map(|(n, _)| n).collect()
    }
    let mut off = start_in_process_with(MemoryGrants::default(), false).await;
    assert_eq!(unimplemented(&mut off.client).await, ["GetGrant", "ListGrants", "RevokeGrant"]);
    // Unmounted for everyone, whoever asks and whatever they send.
    let status = off.client.list_grants(intruder(pb::ListGrantsRequest::default())).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    let mut on = start_in_process_with(MemoryGrants::default(), true).await;
    assert!(unimplemented(&mut on.client).await.is_empty());
}
