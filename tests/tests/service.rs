//! The Authorizer gRPC service: in process over an in-memory duplex (the memory backend), and over
//! a real loopback socket (PostgreSQL, health, a lost database). Each call's happy path,
//! validation, authentication, another principal's objects, failures and retries, and tokens.

use std::sync::Arc;

use authorizer::PgGrants;
use authorizer::auth::Rpc;
use authorizer::constraint::{DispatchConstraint, GrantKind};
use authorizer::domain::Command;
use authorizer::policy::Policy;
use authorizer::scopes::{TaskGrantSettings, parse_scopes};
use authorizer::service::{AuthorizerService, CALLER_NOT_PERMITTED, serve};
use authorizer::{Authority, Backend, MemoryGrants};
use credentials::{Credentials, Role};
use ledger::TenantId;
use pb::authorizer_client::AuthorizerClient;
use proto::v1 as pb;
use tests::TestDb;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

const TENANT: &str = "tenant-1";

/// A served authority and a client for it; the server stops when this is dropped.
struct Served {
    client: AuthorizerClient<Channel>,
    credentials: Credentials,
    /// The ledger position the served authority has reached: unchanged means nothing written.
    position: Arc<dyn Fn() -> ledger::Checkpoint + Send + Sync>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Which call a request message is for, so a test can send it as the service that makes it.
trait Call {
    const RPC: Rpc;

    /// The service that sends this message.
    fn role(&self) -> Role {
        Self::RPC.roles()[0]
    }
}

macro_rules! calls {
    ($($message:ty => $rpc:ident),* $(,)?) => { $(impl Call for $message { const RPC: Rpc = Rpc::$rpc; })* };
}

impl Call for pb::RecordMessageRequest {
    const RPC: Rpc = Rpc::RecordMessage;

    /// The owner's own words come through the gateway; everyone else's through the worker.
    fn role(&self) -> Role {
        if self.from_owner { Role::Gateway } else { Role::Worker }
    }
}

calls!(
    pb::CreateSessionRequest => CreateSession,
    pb::RecordToolCallRequest => RecordToolCall,
    pb::RecordRunRequest => RecordRun,
    pb::DeleteSessionRequest => DeleteSession,
    pb::StopSessionRequest => StopSession,
    pb::StopEverythingRequest => StopEverything,
    pb::ProfileEventRequest => RecordProfileEvent,
    pb::AuthorizeRequest => Authorize,
    pb::ResolveApprovalRequest => ResolveApproval,
    pb::GetApprovalRequest => GetApproval,
    pb::ListApprovalsRequest => ListApprovals,
    pb::AwaitApprovalRequest => AwaitApproval,
    pb::RedeemTokenRequest => RedeemToken,
    pb::GetGrantRequest => GetGrant,
    pb::ListGrantsRequest => ListGrants,
    pb::RevokeGrantRequest => RevokeGrant,
);

/// A known token per role and owner (owners matter for worker and runtime only).
fn token(role: Role, principal: &str) -> String {
    let r = Role::ALL.iter().position(|x| *x == role).unwrap() as u64;
    let p = match (role.acts_as_one_owner(), principal) {
        (false, _) => 0,
        (true, "owner") => 1,
        (true, "intruder") => 2,
        (true, other) => panic!("no test credential for {other}"),
    };
    format!("glc_{:064x}", 16 * (r + 1) + p)
}

/// Every role's credential for this tenant: worker and runtime once for each owner.
async fn seed(credentials: &Credentials) {
    for role in Role::ALL {
        let owners: &[Option<&str>] =
            if role.acts_as_one_owner() { &[Some("owner"), Some("intruder")] } else { &[None] };
        for owner in owners {
            let t = token(role, owner.unwrap_or(""));
            credentials.register(&t, TENANT, role, *owner, None).await.unwrap();
        }
    }
}

/// `message` sent by `role` for `principal`: the gateway names the owner and carries every scope.
fn with_role<T>(role: Role, principal: &str, message: T) -> Request<T> {
    let token = token(role, principal);
    if role == Role::Gateway { tests::as_owner(&token, principal, message) } else { tests::bearer(&token, message) }
}

/// `message` sent by the service whose call it is, on behalf of `principal`.
fn as_who<T: Call>(principal: &str, message: T) -> Request<T> {
    with_role(message.role(), principal, message)
}

fn owner<T: Call>(message: T) -> Request<T> {
    as_who("owner", message)
}

fn intruder<T: Call>(message: T) -> Request<T> {
    as_who("intruder", message)
}

async fn authority_with_scope<B: Backend + 'static>(backend: B, task_grants: bool) -> Arc<Authority<B>> {
    let authority = Arc::new(Authority::new(backend, Policy::empty(), TenantId::new(TENANT).unwrap()));
    if task_grants {
        let settings =
            TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/lesson").unwrap() };
        authority.execute(Command::ChangeSettings(settings), "operator").await.unwrap();
    }
    authority
}

/// Over a real loopback socket with TLS, the server's certificate from a throwaway CA.
async fn start<B: Backend + 'static>(backend: B, credentials: Credentials) -> Served {
    seed(&credentials).await;
    let authority = authority_with_scope(backend, true).await;
    let pki = ops::tls::DevPki::generate().unwrap();
    let tls = transport::tls_config(pki.server_cert.as_bytes(), pki.server_key.as_bytes()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let position: Arc<dyn Fn() -> ledger::Checkpoint + Send + Sync> =
        Arc::new(|| unreachable!("the written-or-not probe is the in-process server's"));
    // The decisions through the API, with facts in the clear: no runtime seals them here (the
    // browser and ticket tests decide on sealed facts).
    let service =
        AuthorizerService::new(authority, credentials.clone(), tests::ticket_keys()).accepting_unsealed_facts();
    tokio::spawn(serve(listener, service, Some(tls), async {
        let _ = stopped.await;
    }));
    let client_tls =
        ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&pki.ca_cert)).domain_name("localhost");
    let channel = Channel::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(client_tls)
        .unwrap()
        .connect()
        .await
        .unwrap();
    Served { client: AuthorizerClient::new(channel), credentials, position, _stop: stop }
}

/// [`start`] on PostgreSQL: the ledger and the credentials in `db`.
async fn start_on_postgres(db: &TestDb, pool_size: usize) -> Served {
    start(PgGrants::new(db.store(pool_size)), Credentials::postgres(db.pool(2))).await
}

/// The same service in process: tonic over an in-memory duplex, no socket.
async fn start_in_process(backend: MemoryGrants) -> Served {
    start_in_process_with(backend, true).await
}

/// [`start_in_process`] with BROWSER_TASK_GRANTS_ENABLED as given (off: no scope either).
async fn start_in_process_with(backend: MemoryGrants, task_grants: bool) -> Served {
    start_in_process_on(authority_with_scope(backend, task_grants).await).await
}

/// [`start_in_process`] over an authority the test prepared.
async fn start_in_process_on(authority: Arc<Authority<MemoryGrants>>) -> Served {
    let credentials = Credentials::memory();
    seed(&credentials).await;
    let (client_io, server_io) = tokio::io::duplex(1 << 20);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let position = {
        let authority = Arc::clone(&authority);
        // The memory store's next transaction id moves with every append.
        Arc::new(move || ledger::Checkpoint { tx_id: authority.backend().store.next_tx_id(), position: 0 })
    };
    let service = AuthorizerService::new(authority, credentials.clone(), tests::ticket_keys())
        .accepting_unsealed_facts()
        .into_server();
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
    Served { client: AuthorizerClient::new(channel), credentials, position, _stop: stop }
}

fn act(text: Option<&str>) -> pb::AuthorizeRequest {
    let (kind, field_kind) = match text {
        Some(_) => (pb::ActionKind::Type, pb::FieldKind::Text),
        None => (pb::ActionKind::Click, pb::FieldKind::None),
    };
    pb::AuthorizeRequest {
        session_id: "s1".into(),
        run: Some(pb::RunContext { run_id: "run-1".into(), interactive: true, top_level: true }),
        // Every act is a tool call of its own (the same id would be a retry of one call).
        tool_call_id: format!("call-{}", uuid::Uuid::new_v4().simple()),
        turn_tool_calls: vec!["browser.observe".into(), "browser.act".into()],
        agent_version: "agent-7".into(),
        element: Some(pb::ElementFacts {
            role: "button".into(),
            name: "el gato".into(),
            visible_text: "el gato".into(),
            field_kind: Some(field_kind as i32),
            download: Some(false),
            disabled: Some(false),
            truncated: Some(false),
            nav_targets_carried: true,
            ..Default::default()
        }),
        page_url: "https://www.lesson.test/lesson/unit-3?token=secret".into(),
        page_title: "Lesson".into(),
        action: Some(pb::Action {
            kind: kind as i32,
            text: text.unwrap_or_default().into(),
            field_id: if text.is_some() { "answer".into() } else { String::new() },
            ..Default::default()
        }),
        snapshot_id: "snap_0123456789ab".into(),
        node_ref: "n7".into(),
        facts: None,
        text: None,
        form: None,
    }
}

/// Records `profile` as the owner's, as the profiles service does when it makes one.
async fn claim(client: &mut AuthorizerClient<Channel>, profile: &str) {
    let created = pb::ProfileEventRequest {
        profile_id: profile.into(),
        event: pb::ProfileEvent::Created as i32,
        owner_principal_id: "owner".into(),
    };
    client.record_profile_event(owner(created)).await.unwrap();
}

async fn session(client: &mut AuthorizerClient<Channel>) {
    claim(client, "profile-1").await;
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
    let Served { mut client, _stop, .. } = served;
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
    lesson_path(start_on_postgres(&db, 8).await).await;
}

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
async fn callers_see_only_their_own() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let err = client.authorize(Request::new(act(None))).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

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
async fn a_sign_in_and_a_deleted_session_end_grants_through_the_api() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let grant_for_task = |card: pb::RequireApproval| pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: card.offer.clone().unwrap().origin,
        offered_path_prefix: card.offer.unwrap().path_prefix,
    };
    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    let grant_id = client.resolve_approval(owner(grant_for_task(card))).await.unwrap().into_inner().grant_id;
    let began = pb::ProfileEventRequest {
        profile_id: "profile-1".into(),
        event: pb::ProfileEvent::SignInBegan as i32,
        owner_principal_id: "owner".into(),
    };
    client.record_profile_event(owner(began)).await.unwrap();
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id, min_position: None })).await.unwrap().into_inner();
    assert_eq!(g.end_reason, "profile_changed");
    let bad = pb::ProfileEventRequest { profile_id: "profile-1".into(), event: 0, owner_principal_id: "owner".into() };
    assert_eq!(client.record_profile_event(owner(bad)).await.unwrap_err().code(), Code::InvalidArgument);

    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    let grant_id = client.resolve_approval(owner(grant_for_task(card))).await.unwrap().into_inner().grant_id;
    assert_eq!(
        client.delete_session(intruder(pb::DeleteSessionRequest { session_id: "s1".into() })).await.unwrap_err().code(),
        Code::NotFound
    );
    client.delete_session(owner(pb::DeleteSessionRequest { session_id: "s1".into() })).await.unwrap();
    let gone = client.get_grant(owner(pb::GetGrantRequest { grant_id, min_position: None })).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "a deleted chat's grants leave every get");
    let listed = client.list_grants(owner(pb::ListGrantsRequest::default())).await.unwrap().into_inner().grants;
    assert!(listed.is_empty(), "and every list: {listed:?}");
    assert_eq!(
        client.authorize(owner(act(None))).await.unwrap_err().code(),
        Code::NotFound,
        "a deleted session takes no acts"
    );
}

/// The owner's Stop: the grant ends, the pending card is denied, every act is denied with no card
/// and no approved token is spent, until the owner writes again; nobody else can stop it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_session_acts_on_nothing_until_the_owners_next_message() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    let s = scene(&mut client).await;
    let stop = || pb::StopSessionRequest { session_id: "s1".into() };
    let before = act(None);
    let allowed = client.authorize(owner(before.clone())).await.unwrap().into_inner();
    assert!(matches!(allowed.decision, Some(pb::authorize_reply::Decision::Allow(_))), "{allowed:?}");
    let at = position();
    let err = client.stop_session(intruder(stop())).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "another owner's session does not exist for the intruder");
    assert_eq!(position(), at, "the intruder's stop wrote nothing");

    client.stop_session(owner(stop())).await.unwrap();
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id: s.grant_id.clone(), min_position: None }));
    assert_eq!(g.await.unwrap().into_inner().end_reason, "revoked");
    let get = pb::GetApprovalRequest { approval_id: s.pending.approval_id.clone(), min_position: None };
    assert_eq!(client.get_approval(owner(get)).await.unwrap().into_inner().status, "DENIED");
    let wait =
        pb::AwaitApprovalRequest { session_id: "s1".into(), approval_id: s.pending.approval_id.clone(), wait_ms: 0 };
    let waited = client.await_approval(owner(wait)).await.unwrap().into_inner();
    assert_eq!((waited.status.as_str(), waited.approval_token.as_str()), (proto::AWAIT_STOPPED, ""));
    let denied = |r: pb::AuthorizeReply| match r.decision {
        Some(pb::authorize_reply::Decision::Deny(d)) => d.code,
        other => panic!("{other:?}"),
    };
    for text in [None, Some("hola")] {
        let reply = client.authorize(owner(act(text))).await.unwrap().into_inner();
        assert_eq!(denied(reply), proto::DENY_SESSION_STOPPED, "no allow and no card while stopped");
    }
    assert_eq!(proto::DENY_SESSION_STOPPED, grant_domain::model::SESSION_STOPPED, "the worker reads the domain's code");
    // A retry of a call allowed before the Stop is not answered with its ticket again.
    let retried = client.authorize(owner(before)).await.unwrap().into_inner();
    assert_eq!(denied(retried), proto::DENY_SESSION_STOPPED);
    let at = position();
    client.stop_session(owner(stop())).await.unwrap();
    assert_eq!(position(), at, "a second stop has nothing left to record");

    // Someone else's message does not lift it; the owner's does.
    let other = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m-other".into(), from_owner: false };
    client.record_message(owner(other)).await.unwrap();
    assert_eq!(denied(client.authorize(owner(act(None))).await.unwrap().into_inner()), "session_stopped");
    let mine = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m-owner".into(), from_owner: true };
    client.record_message(owner(mine)).await.unwrap();
    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    assert!(card.offer.is_some(), "after the owner's message the agent asks again: {card:?}");
}

/// Stop everything stops each of the owner's chats, whatever they hold (a grant, a card, or only a
/// run between acts), and none of another owner's; pressed again it has nothing left to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_everything_stops_every_chat_of_the_owner_and_no_one_elses() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    let s = scene(&mut client).await;
    let bare = pb::CreateSessionRequest { session_id: "s2".into(), surface: 1, ..Default::default() };
    client.create_session(owner(bare)).await.unwrap();
    let theirs = pb::CreateSessionRequest { session_id: "s3".into(), surface: 1, ..Default::default() };
    client.create_session(intruder(theirs)).await.unwrap();
    let reply = client.stop_everything(owner(pb::StopEverythingRequest {})).await.unwrap().into_inner();
    assert_eq!((reply.stopped, reply.more), (2, true), "{reply:?}");
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id: s.grant_id.clone(), min_position: None }));
    assert_eq!(g.await.unwrap().into_inner().end_reason, "revoked");
    let get = pb::GetApprovalRequest { approval_id: s.pending.approval_id.clone(), min_position: None };
    assert_eq!(client.get_approval(owner(get)).await.unwrap().into_inner().status, "DENIED");
    for session in ["s1", "s2"] {
        let reply = client.authorize(owner(pb::AuthorizeRequest { session_id: session.into(), ..act(None) })).await;
        match reply.unwrap().into_inner().decision {
            Some(pb::authorize_reply::Decision::Deny(d)) => assert_eq!(d.code, proto::DENY_SESSION_STOPPED),
            other => panic!("{session}: {other:?}"),
        }
    }
    let theirs = client.authorize(intruder(pb::AuthorizeRequest { session_id: "s3".into(), ..act(None) })).await;
    assert!(
        !matches!(theirs.unwrap().into_inner().decision, Some(pb::authorize_reply::Decision::Deny(_))),
        "another owner's chat is not stopped"
    );
    let at = position();
    let again = client.stop_everything(owner(pb::StopEverythingRequest {})).await.unwrap().into_inner();
    assert_eq!((again.stopped, again.more), (0, false));
    assert_eq!(position(), at, "nothing left to record");
}

/// A card raised before the stop cannot be approved after it: its act would be denied anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_of_a_stopped_session_is_not_approved() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    client.stop_session(owner(pb::StopSessionRequest { session_id: "s1".into() })).await.unwrap();
    let once = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    let err = client.resolve_approval(owner(once)).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert_eq!(reason(&err), "APPROVAL_NOT_PENDING", "the stop denied it: {err:?}");
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
        codes
            .push(("RecordToolCall", code(client.record_tool_call(owner(pb::RecordToolCallRequest::default())).await)));
        codes.push(("RecordRun", code(client.record_run(owner(pb::RecordRunRequest::default())).await)));
        codes.push(("DeleteSession", code(client.delete_session(owner(pb::DeleteSessionRequest::default())).await)));
        codes.push(("StopSession", code(client.stop_session(owner(pb::StopSessionRequest::default())).await)));
        codes.push(("StopEverything", code(client.stop_everything(owner(pb::StopEverythingRequest {})).await)));
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
        codes.push(("AwaitApproval", code(client.await_approval(owner(pb::AwaitApprovalRequest::default())).await)));
        codes.push(("RedeemToken", code(client.redeem_token(owner(pb::RedeemTokenRequest::default())).await)));
        codes.push(("GetGrant", code(client.get_grant(owner(pb::GetGrantRequest::default())).await)));
        codes.push(("ListGrants", code(client.list_grants(owner(pb::ListGrantsRequest::default())).await)));
        codes.push(("RevokeGrant", code(client.revoke_grant(owner(pb::RevokeGrantRequest::default())).await)));
        assert_eq!(codes.len(), Rpc::ALL.len(), "every RPC of the service");
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

/// A lesson in progress for the role matrix: a grant from one card, and a second card pending.
struct Scene {
    grant_id: String,
    pending: pb::RequireApproval,
}

/// The owner's session `s1`, its first card allowed for the task: the new grant's id.
async fn granted(client: &mut AuthorizerClient<Channel>) -> String {
    session(client).await;
    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    let offer = card.offer.clone().unwrap();
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin,
        offered_path_prefix: offer.path_prefix,
    };
    client.resolve_approval(owner(resolve)).await.unwrap().into_inner().grant_id
}

async fn scene(client: &mut AuthorizerClient<Channel>) -> Scene {
    let grant_id = granted(client).await;
    let mut pay = act(None);
    pay.element.as_mut().unwrap().visible_text = "Pay $5".into();
    let pending = asked(&client.authorize(owner(pay)).await.unwrap().into_inner()).clone();
    Scene { grant_id, pending }
}

/// Calls `rpc` as `role` for the owner, with a request that would change the scene if let in.
async fn call_as(client: &mut AuthorizerClient<Channel>, role: Role, rpc: Rpc, s: &Scene) -> Result<(), Status> {
    let pending = s.pending.approval_id.clone();
    match rpc {
        Rpc::CreateSession => {
            let m = pb::CreateSessionRequest { session_id: "s2".into(), surface: 1, ..Default::default() };
            client.create_session(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::RecordMessage => {
            let from_owner = role == Role::Gateway;
            let m = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m9".into(), from_owner };
            client.record_message(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::RecordToolCall => {
            let m = pb::RecordToolCallRequest {
                session_id: "s1".into(),
                tool_call_id: "c9".into(),
                tool: "email.read".into(),
            };
            client.record_tool_call(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::RecordRun => {
            let m = pb::RecordRunRequest {
                session_id: "s1".into(),
                run_id: "run-9".into(),
                kind: pb::RunEventKind::Escalated as i32,
                detail: "uncertain".into(),
            };
            client.record_run(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::DeleteSession => client
            .delete_session(with_role(role, "owner", pb::DeleteSessionRequest { session_id: "s1".into() }))
            .await
            .map(drop),
        Rpc::StopSession => client
            .stop_session(with_role(role, "owner", pb::StopSessionRequest { session_id: "s1".into() }))
            .await
            .map(drop),
        Rpc::StopEverything => {
            client.stop_everything(with_role(role, "owner", pb::StopEverythingRequest {})).await.map(drop)
        }
        Rpc::RecordProfileEvent => {
            let m = pb::ProfileEventRequest {
                profile_id: "profile-1".into(),
                event: pb::ProfileEvent::Revoked as i32,
                owner_principal_id: "owner".into(),
            };
            client.record_profile_event(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::Authorize => client.authorize(with_role(role, "owner", act(None))).await.map(drop),
        Rpc::ResolveApproval => {
            let m = pb::ResolveApprovalRequest {
                approval_id: pending,
                resolution: pb::Resolution::ApproveOnce as i32,
                ..Default::default()
            };
            client.resolve_approval(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::GetApproval => client
            .get_approval(with_role(role, "owner", pb::GetApprovalRequest { approval_id: pending, min_position: None }))
            .await
            .map(drop),
        Rpc::ListApprovals => {
            let m = pb::ListApprovalsRequest { session_id: "s1".into(), ..Default::default() };
            client.list_approvals(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::AwaitApproval => {
            let m = pb::AwaitApprovalRequest { session_id: "s1".into(), approval_id: pending, wait_ms: 0 };
            client.await_approval(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::RedeemToken => {
            let m = pb::RedeemTokenRequest {
                approval_token: format!("apv_{}", "0".repeat(24)),
                run_id: "run-1".into(),
                snapshot_id: "snap_000000000001".into(),
                node_ref: "n7".into(),
                action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
                browser_profile_id: "profile-1".into(),
                ..Default::default()
            };
            client.redeem_token(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::GetGrant => {
            let m = pb::GetGrantRequest { grant_id: s.grant_id.clone(), min_position: None };
            client.get_grant(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::ListGrants => {
            client.list_grants(with_role(role, "owner", pb::ListGrantsRequest::default())).await.map(drop)
        }
        Rpc::RevokeGrant => client
            .revoke_grant(with_role(role, "owner", pb::RevokeGrantRequest { grant_id: s.grant_id.clone() }))
            .await
            .map(drop),
    }
}

/// Every call by every role: the call's own role gets in, every other is PERMISSION_DENIED and
/// writes nothing — the worker cannot resolve its own card, the gateway cannot act in the browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_matrix_every_call_by_every_role() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    let s = scene(&mut client).await;
    let list = |c: &mut AuthorizerClient<Channel>| {
        let mut c = c.clone();
        async move {
            let a = c.list_approvals(owner(pb::ListApprovalsRequest { session_id: "s1".into(), ..Default::default() }));
            let approvals = a.await.unwrap().into_inner();
            let grants = c.list_grants(owner(pb::ListGrantsRequest::default())).await.unwrap().into_inner();
            format!("{approvals:?} {grants:?}")
        }
    };
    // Stopping and deleting the session end the scene, so they come last.
    let mut order = Rpc::ALL.to_vec();
    let last = [Rpc::StopEverything, Rpc::StopSession, Rpc::DeleteSession];
    order.retain(|r| !last.contains(r));
    order.extend(last);
    let mut allowed = Vec::new();
    for rpc in order {
        let (before, at) = (list(&mut client).await, position());
        for role in Role::ALL.into_iter().filter(|r| !rpc.roles().contains(r)) {
            let status = call_as(&mut client, role, rpc, &s).await.expect_err("refused");
            assert_eq!(
                (status.code(), reason(&status).as_str()),
                (Code::PermissionDenied, CALLER_NOT_PERMITTED),
                "{rpc:?} by {role}: {status:?}"
            );
            assert_eq!(position(), at, "{rpc:?} refused to {role} appended to the ledger");
            assert_eq!(list(&mut client).await, before, "{rpc:?} refused to {role} wrote something");
        }
        for &role in rpc.roles() {
            let own = call_as(&mut client, role, rpc, &s).await;
            // Let in: whatever the domain then says (a bad token is its own refusal), not the caller's.
            let refusal = own.as_ref().err().map(|e| (e.code(), reason(e)));
            assert!(
                !matches!(&refusal, Some((Code::Unauthenticated, _)))
                    && refusal.as_ref().is_none_or(|(_, r)| r != CALLER_NOT_PERMITTED),
                "{rpc:?} by {role}: {own:?}"
            );
        }
        allowed.push(rpc);
    }
    assert_eq!(allowed.len(), Rpc::ALL.len(), "every call is let in for its own role: {allowed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_cannot_resolve_its_own_card_and_its_principal_claims_are_ignored() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    let s = scene(&mut client).await;
    for resolution in [pb::Resolution::ApproveForTask, pb::Resolution::ApproveOnce, pb::Resolution::Deny] {
        let offer = s.pending.offer.clone().unwrap_or_default();
        let m = pb::ResolveApprovalRequest {
            approval_id: s.pending.approval_id.clone(),
            resolution: resolution as i32,
            offered_origin: offer.origin,
            offered_path_prefix: offer.path_prefix,
        };
        let mut req = with_role(Role::Worker, "owner", m);
        // Even dressed as the gateway would be.
        req.metadata_mut().insert("x-principal-id", "owner".parse().unwrap());
        req.metadata_mut().insert("x-owner-scopes", "approval.resolve,browser.grant.write".parse().unwrap());
        assert_eq!(client.resolve_approval(req).await.unwrap_err().code(), Code::PermissionDenied);
    }
    let get = pb::GetApprovalRequest { approval_id: s.pending.approval_id.clone(), min_position: None };
    assert_eq!(client.get_approval(owner(get)).await.unwrap().into_inner().status, "PENDING");

    // The intruder's worker naming the owner still acts as the intruder: not the owner's session.
    let mut req = with_role(Role::Worker, "intruder", act(None));
    req.metadata_mut().insert("x-principal-id", "owner".parse().unwrap());
    assert_eq!(client.authorize(req).await.unwrap_err().code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_needs_the_owner_and_the_owners_scopes() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    let s = scene(&mut client).await;
    let with_scopes = |scopes: &str, m: pb::ResolveApprovalRequest| {
        let mut req = owner(m);
        req.metadata_mut().insert("x-owner-scopes", scopes.parse().unwrap());
        req
    };
    let offer = s.pending.offer.clone().unwrap();
    let for_task = pb::ResolveApprovalRequest {
        approval_id: s.pending.approval_id.clone(),
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin,
        offered_path_prefix: offer.path_prefix,
    };
    let err = client.resolve_approval(with_scopes("approval.resolve", for_task.clone())).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "approve_for_task needs browser.grant.write too");
    assert_eq!(reason(&err), CALLER_NOT_PERMITTED);
    let err = client.resolve_approval(with_scopes("browser.grant.write", for_task.clone())).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "and approval.resolve");
    let mut nameless = owner(for_task);
    nameless.metadata_mut().remove("x-principal-id");
    assert_eq!(client.resolve_approval(nameless).await.unwrap_err().code(), Code::Unauthenticated);
    let get = pb::GetApprovalRequest { approval_id: s.pending.approval_id.clone(), min_position: None };
    assert_eq!(client.get_approval(owner(get)).await.unwrap().into_inner().status, "PENDING", "nothing resolved");

    let mut read_only = owner(pb::RevokeGrantRequest { grant_id: s.grant_id.clone() });
    read_only.metadata_mut().insert("x-owner-scopes", "browser.grant.read".parse().unwrap());
    assert_eq!(client.revoke_grant(read_only).await.unwrap_err().code(), Code::PermissionDenied);
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id: s.grant_id, min_position: None })).await.unwrap();
    assert_eq!(g.into_inner().end_reason, "", "not revoked");
}

/// On PostgreSQL over TLS: a missing, malformed, unknown, expired or revoked credential is
/// UNAUTHENTICATED and writes nothing; one for another tenant acts only in that tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_revoked_and_foreign_credentials_are_refused() {
    let db = TestDb::new().await;
    let Served { mut client, credentials, _stop, .. } = start_on_postgres(&db, 4).await;
    let create = |id: &str| pb::CreateSessionRequest { session_id: id.into(), surface: 1, ..Default::default() };
    use tests::bearer;
    let past = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
    let expired = credentials::new_token();
    credentials.register(&expired, TENANT, Role::Worker, Some("owner"), Some(past)).await.unwrap();
    let foreign = credentials::new_token();
    credentials.register(&foreign, "tenant-2", Role::Worker, Some("owner"), None).await.unwrap();
    let revocable = credentials::new_token();
    let c = credentials.register(&revocable, TENANT, Role::Worker, Some("owner"), None).await.unwrap();
    client.create_session(bearer(&revocable, create("s-ok"))).await.expect("a good credential works");
    assert!(credentials.revoke(TENANT, c.credential_id).await.unwrap());

    for (token, code) in [
        (String::new(), Code::Unauthenticated),
        ("glc_nothex".to_owned(), Code::Unauthenticated),
        (credentials::new_token(), Code::Unauthenticated),
        (expired, Code::Unauthenticated),
        (revocable, Code::Unauthenticated),
    ] {
        let err = client.create_session(bearer(&token, create("s-bad"))).await.unwrap_err();
        assert_eq!(err.code(), code, "{token:?}: {err:?}");
    }
    // Another tenant's credential acts in its own tenant: the same session id is a session of
    // its own, and the first tenant's does not exist for it.
    let call = || pb::RecordToolCallRequest { session_id: "s-ok".into(), tool_call_id: "c".into(), tool: "x".into() };
    let err = client.record_tool_call(bearer(&foreign, call())).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "tenant-1's session is not tenant-2's");
    client.create_session(bearer(&foreign, create("s-ok"))).await.expect("tenant-2 has ids of its own");
    client.record_tool_call(bearer(&foreign, call())).await.expect("its own session");
    let sessions = db
        .client()
        .await
        .query(
            "SELECT tenant_id, count(*) FROM events WHERE event_type = 'session.created' GROUP BY tenant_id \
             ORDER BY tenant_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .collect::<Vec<_>>();
    assert_eq!(sessions, [(TENANT.to_owned(), 1), ("tenant-2".to_owned(), 1)], "only the good credentials wrote");
}

/// An absent fact means no coverage: a covered click stops being covered when any fact the rules
/// read is left out, and the card says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_fact_means_no_coverage() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    scene(&mut client).await;
    let allowed = |r: &pb::AuthorizeReply| matches!(r.decision, Some(pb::authorize_reply::Decision::Allow(_)));
    assert!(allowed(&client.authorize(owner(act(None))).await.unwrap().into_inner()), "all facts carried: covered");
    type Strip = fn(&mut pb::ElementFacts);
    let leave_out: [(&str, Strip); 5] = [
        ("field kind", |e| e.field_kind = None),
        ("nav targets", |e| e.nav_targets_carried = false),
        ("download", |e| e.download = None),
        ("disabled", |e| e.disabled = None),
        ("truncated", |e| e.truncated = None),
    ];
    for (fact, strip) in leave_out {
        let mut req = act(None);
        strip(req.element.as_mut().unwrap());
        let reply = client.authorize(owner(req)).await.unwrap().into_inner();
        assert_eq!(asked(&reply).reason, "facts_missing", "{fact} left out");
    }
    // A link whose targets were never sent is not covered.
    let mut link = act(None);
    let e = link.element.as_mut().unwrap();
    e.role = "link".into();
    e.nav_targets_carried = false;
    assert_eq!(asked(&client.authorize(owner(link)).await.unwrap().into_inner()).reason, "facts_missing");
}

/// On PostgreSQL: deleting a profile ends every grant on it, and deleting a chat ends its grant as
/// revoked and takes it off every list and get; the inline rows say the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_profile_or_a_session_ends_grants_on_postgres() {
    let db = TestDb::new().await;
    let Served { mut client, _stop, .. } = start_on_postgres(&db, 4).await;
    let grant_in = |client: &mut AuthorizerClient<Channel>, session_id: &'static str| {
        let mut client = client.clone();
        async move {
            claim(&mut client, "profile-1").await;
            let create = pb::CreateSessionRequest {
                session_id: session_id.into(),
                browser_profile_id: "profile-1".into(),
                surface: pb::Surface::Interactive as i32,
                ..Default::default()
            };
            client.create_session(owner(create)).await.unwrap();
            let said =
                pb::RecordMessageRequest { session_id: session_id.into(), message_id: "m1".into(), from_owner: true };
            client.record_message(owner(said)).await.unwrap();
            let mut req = act(None);
            req.session_id = session_id.into();
            let card = asked(&client.authorize(owner(req)).await.unwrap().into_inner()).clone();
            let offer = card.offer.unwrap();
            let resolve = pb::ResolveApprovalRequest {
                approval_id: card.approval_id,
                resolution: pb::Resolution::ApproveForTask as i32,
                offered_origin: offer.origin,
                offered_path_prefix: offer.path_prefix,
            };
            client.resolve_approval(owner(resolve)).await.unwrap().into_inner().grant_id
        }
    };
    let first = grant_in(&mut client, "s1").await;
    let deleted = pb::ProfileEventRequest {
        profile_id: "profile-1".into(),
        event: pb::ProfileEvent::Deleted as i32,
        owner_principal_id: "owner".into(),
    };
    client.record_profile_event(owner(deleted)).await.unwrap();
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id: first.clone(), min_position: None })).await;
    assert_eq!(g.unwrap().into_inner().end_reason, "profile_revoked");
    assert_eq!(ended_row(&db, &first).await, (true, Some("profile_revoked".into())));

    let db2 = TestDb::new().await;
    let Served { mut client, _stop, .. } = start_on_postgres(&db2, 4).await;
    let second = grant_in(&mut client, "s2").await;
    client.delete_session(owner(pb::DeleteSessionRequest { session_id: "s2".into() })).await.unwrap();
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id: second.clone(), min_position: None })).await;
    assert_eq!(g.unwrap_err().code(), Code::NotFound);
    assert!(client.list_grants(owner(pb::ListGrantsRequest::default())).await.unwrap().into_inner().grants.is_empty());
    assert_eq!(ended_row(&db2, &second).await, (true, Some("revoked".into())));
}

/// Whether a grant's inline row is ended, and why.
async fn ended_row(db: &TestDb, grant_id: &str) -> (bool, Option<String>) {
    let id = uuid::Uuid::parse_str(grant_id).unwrap();
    let sql = "SELECT ended_at IS NOT NULL, end_reason FROM active_task_grants WHERE grant_id = $1";
    let r = db.client().await.query_one(sql, &[&id]).await.unwrap();
    (r.get(0), r.get(1))
}

/// The operator's standing grant answers a routine button on its profile, and the constraint it
/// sends validates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_grant_allow_carries_a_valid_constraint() {
    use authorizer::domain::StandingPin;
    let authority = authority_with_scope(MemoryGrants::default(), true).await;
    let pin = StandingPin { grant_id: "standing-1".into(), profile_id: "profile-1".into() };
    let now = time::OffsetDateTime::now_utc();
    authority.execute(Command::PinStandingGrant { pin: Some(pin), now }, "operator").await.unwrap();
    let Served { mut client, _stop, .. } = start_in_process_on(authority).await;
    session(&mut client).await;
    let mut req = act(None);
    let e = req.element.as_mut().unwrap();
    (e.name, e.visible_text) = ("Continue".into(), "Continue".into());
    let reply = client.authorize(owner(req)).await.unwrap().into_inner();
    let Some(pb::authorize_reply::Decision::Allow(allow)) = reply.decision else { panic!("{reply:?}") };
    assert_eq!(allow.kind, "standing_grant");
    let c = allow.constraint.expect("every allow carries a constraint");
    let rebuilt = DispatchConstraint {
        kind: GrantKind::Standing,
        origins: c.origins,
        path_prefix: c.path_prefix,
        not_after: time::OffsetDateTime::parse(&c.not_after, &time::format_description::well_known::Rfc3339).unwrap(),
        consequence_ceiling: c.consequence_ceiling,
        max_text_chars: c.max_text_chars,
    };
    assert_eq!(c.grant_kind, pb::GrantKind::Standing as i32);
    rebuilt.validate().expect("the standing grant's constraint validates");
    assert_eq!(rebuilt.origins, ["https://www.lesson.test"]);
}

/// The turn a task grant checks is the session's record: a non-browser tool recorded since the
/// owner's newest message stops coverage whatever the act's own list says; the owner's next
/// message starts a new turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_record_of_tool_calls_decides_the_browser_only_turn() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    scene(&mut client).await;
    let allowed = |r: &pb::AuthorizeReply| matches!(r.decision, Some(pb::authorize_reply::Decision::Allow(_)));
    assert!(allowed(&client.authorize(owner(act(None))).await.unwrap().into_inner()));
    let call =
        pb::RecordToolCallRequest { session_id: "s1".into(), tool_call_id: "c1".into(), tool: "email.read".into() };
    client.record_tool_call(owner(call)).await.unwrap();
    let reply = client.authorize(owner(act(None))).await.unwrap().into_inner();
    assert_eq!(asked(&reply).reason, "turn_not_browser_only", "the act's list said browser only");
    let said = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m2".into(), from_owner: true };
    client.record_message(owner(said)).await.unwrap();
    assert!(allowed(&client.authorize(owner(act(None))).await.unwrap().into_inner()), "a new turn");
    let bad = pb::RecordToolCallRequest { session_id: "s1".into(), tool_call_id: "c2".into(), tool: String::new() };
    assert_eq!(field_violation(&client.record_tool_call(owner(bad)).await.unwrap_err()), "tool");
}

/// Only the gateway records the owner's words: a worker claiming the owner spoke is refused and
/// starts no new turn; the gateway cannot record someone else's words either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_gateway_records_the_owners_messages() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    scene(&mut client).await;
    let at = position();
    let said = |from_owner| pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m5".into(), from_owner };
    for (role, from_owner) in [(Role::Worker, true), (Role::Gateway, false)] {
        let err = client.record_message(with_role(role, "owner", said(from_owner))).await.unwrap_err();
        assert_eq!((err.code(), reason(&err).as_str()), (Code::PermissionDenied, CALLER_NOT_PERMITTED), "{role}");
    }
    assert_eq!(position(), at, "nothing written");
    client.record_message(with_role(Role::Worker, "owner", said(false))).await.unwrap();
    client.record_message(with_role(Role::Gateway, "owner", said(true))).await.unwrap();
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

/// In memory as on PostgreSQL: a tool call sent again answers its first decision and spends
/// nothing, and the same id with other arguments is refused even when those would be denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_call_answers_its_first_decision_in_memory() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    granted(&mut client).await;
    let call = act(None);
    let mut ordinals = Vec::new();
    for _ in 0..3 {
        match client.authorize(owner(call.clone())).await.unwrap().into_inner().decision {
            Some(pb::authorize_reply::Decision::Allow(a)) => ordinals.push(a.use_ordinal),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ordinals, [1, 1, 1]);
    let at = position();
    let mut password = call.clone();
    password.element.as_mut().unwrap().field_kind = Some(pb::FieldKind::Password as i32);
    let err = client.authorize(owner(password)).await.unwrap_err();
    assert_eq!(reason(&err), "TOOL_CALL_REUSED", "{err:?}");
    assert_eq!(position(), at, "nothing written");
}
