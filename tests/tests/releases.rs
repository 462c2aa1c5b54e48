//! Releases: during a roll, what the previous release sends is answered as the skew policy in
//! docs/scaling.md says. Its requests are kept as wire bytes (`tests/golden/release-1/`): each
//! decodes with this release's types and encodes back to the same bytes (no field dropped,
//! renumbered or retyped), and an authorizer of this release serves it, or refuses it with a
//! typed error that names the upgrade. A runtime of this release in front of an authorizer of
//! the previous one dispatches nothing and says to upgrade the authorizer first.
//!
//! `GOLDEN_WRITE=1` writes the files from [`requests`] (only when a release is cut: the files
//! are the released requests, and a later change must answer them as they are).

use std::sync::Arc;

use authorizer::policy::Policy;
use authorizer::service::AuthorizerService;
use authorizer::{Authority, MemoryGrants};
use credentials::{Credentials, Role};
use prost::Message;
use proto::runtime as rt;
use proto::v1 as pb;
use tonic::Code;
use tonic::transport::Channel;

const WORKER: &str = "glc_000000000000000000000000000000000000000000000000000000000000c0a1";
const GATEWAY: &str = "glc_000000000000000000000000000000000000000000000000000000000000c0a2";
const RUNTIME: &str = "glc_000000000000000000000000000000000000000000000000000000000000c0a3";
const TENANT: &str = "tenant-1";

/// The last release cut (as `scripts/check-wire` names it).
const RELEASE: &str = "release-1";

fn golden(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("golden").join(RELEASE).join(format!("{name}.bin"))
}

/// The previous release's requests, in the order a run sends them: the worker opens the chat and
/// records its turns, the gateway lists the cards and stops the chat; and a worker from before
/// sealed facts asks with the element in the clear.
fn requests() -> Vec<(&'static str, Vec<u8>)> {
    let chat = pb::CreateSessionRequest {
        session_id: "s1".into(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    };
    let message = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m1".into(), from_owner: false };
    let tool = pb::RecordToolCallRequest {
        session_id: "s1".into(),
        tool_call_id: "c1".into(),
        tool: "browser.observe".into(),
    };
    let step = pb::RecordRunRequest {
        session_id: "s1".into(),
        run_id: "run-1".into(),
        kind: pb::RunEventKind::Step as i32,
        detail: "snapshot".into(),
        account: Some(pb::RunAccount {
            step: 1,
            text: "The lesson page is open.".into(),
            result: "ok".into(),
            snapshot_id: "snap_000000000001".into(),
            elapsed_ms: 40,
            model_ms: 900,
            ..Default::default()
        }),
    };
    let cards = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: true, min_position: None };
    let unsealed = pb::AuthorizeRequest {
        session_id: "s1".into(),
        run: Some(pb::RunContext { run_id: "run-1".into(), interactive: true, top_level: true }),
        tool_call_id: "c2".into(),
        turn_tool_calls: vec!["browser.act".into()],
        agent_version: "agent-1".into(),
        action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
        snapshot_id: "snap_000000000001".into(),
        node_ref: "n1".into(),
        element: Some(pb::ElementFacts { role: "link".into(), name: "Next".into(), ..Default::default() }),
        page_url: "https://www.lesson.test/lesson/1".into(),
        ..Default::default()
    };
    let stop = pb::StopSessionRequest { session_id: "s1".into() };
    let redeem = pb::RedeemTokenRequest {
        approval_token: format!("apv_{}", "0".repeat(24)),
        run_id: "run-1".into(),
        snapshot_id: "snap_000000000001".into(),
        node_ref: "n1".into(),
        action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
        browser_profile_id: "p1".into(),
        element_role: "link".into(),
        element_name: "Next".into(),
        page_origin: "https://www.lesson.test".into(),
        ..Default::default()
    };
    let resolve = pb::ResolveApprovalRequest {
        approval_id: "00000000-0000-4000-8000-000000000001".into(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    // What a worker of the release sends the runtime: read by this release's runtime as it was.
    let open = rt::OpenSessionRequest {
        browser_profile_id: "p1".into(),
        allowed_origins: vec!["https://www.lesson.test".into()],
        start_url: "https://www.lesson.test/lesson/1".into(),
        max_steps: 50,
    };
    let observe = rt::ObserveRequest { session_id: "bs_000000000000000000000001".into(), run_id: "run-1".into() };
    let act = rt::ActRequest {
        session_id: "bs_000000000000000000000001".into(),
        sequence: 1,
        run_id: "run-1".into(),
        snapshot_id: "snap_000000000001".into(),
        r#ref: "n1".into(),
        expected_name: "Next".into(),
        expected_role: rt::Role::Link as i32,
        wait_for: rt::WaitFor::Navigation as i32,
        ticket: Some(pb::DispatchTicket { key_id: "k1".into(), body: vec![1, 2, 3], mac: vec![0; 32] }),
        action: Some(rt::act_request::Action::Click(rt::Click {})),
        ..Default::default()
    };
    let read_form = rt::ReadFormRequest {
        session_id: "bs_000000000000000000000001".into(),
        snapshot_id: "snap_000000000001".into(),
        r#ref: "n1".into(),
        run_id: "run-1".into(),
    };
    vec![
        ("CreateSession", chat.encode_to_vec()),
        ("RecordMessage", message.encode_to_vec()),
        ("RecordToolCall", tool.encode_to_vec()),
        ("RecordRun", step.encode_to_vec()),
        ("ListApprovals", cards.encode_to_vec()),
        ("Authorize.unsealed", unsealed.encode_to_vec()),
        ("StopSession", stop.encode_to_vec()),
        ("RedeemToken", redeem.encode_to_vec()),
        ("ResolveApproval", resolve.encode_to_vec()),
        ("runtime.OpenSession", open.encode_to_vec()),
        ("runtime.Observe", observe.encode_to_vec()),
        ("runtime.Act", act.encode_to_vec()),
        ("runtime.ReadForm", read_form.encode_to_vec()),
    ]
}

/// `name`'s released bytes, decoded as `M` and held to encode back the same.
fn released<M: Message + Default>(name: &str) -> M {
    let bytes = std::fs::read(golden(name)).unwrap_or_else(|e| panic!("{}: {e}", golden(name).display()));
    let m = M::decode(bytes.as_slice()).unwrap_or_else(|e| panic!("{name}: the released bytes no longer decode: {e}"));
    assert_eq!(m.encode_to_vec(), bytes, "{name}: a released field was dropped, renumbered or retyped");
    m
}

async fn authorizer() -> pb::authorizer_client::AuthorizerClient<Channel> {
    let credentials = Credentials::memory();
    for (token, role, principal) in
        [(WORKER, Role::Worker, Some("owner")), (GATEWAY, Role::Gateway, None), (RUNTIME, Role::Runtime, Some("owner"))]
    {
        credentials.register(token, TENANT, role, principal, None).await.expect("credential");
    }
    let tenant = ledger::TenantId::new(TENANT).unwrap();
    let authority = Arc::new(Authority::new(MemoryGrants::default(), Policy::empty(), tenant));
    let service = AuthorizerService::new(authority, credentials, tests::ticket_keys());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(authorizer::service::serve(listener, service, None, std::future::pending()));
    let channel = Channel::from_shared(format!("http://127.0.0.1:{port}")).unwrap().connect().await.unwrap();
    pb::authorizer_client::AuthorizerClient::new(channel)
}

#[tokio::test]
async fn the_previous_releases_requests_are_answered_as_the_policy_says() {
    if std::env::var_os("GOLDEN_WRITE").is_some() {
        for (name, bytes) in requests() {
            std::fs::write(golden(name), bytes).unwrap();
        }
    }
    let mut a = authorizer().await;
    a.create_session(tests::bearer(WORKER, released::<pb::CreateSessionRequest>("CreateSession")))
        .await
        .expect("served");
    a.record_message(tests::bearer(WORKER, released::<pb::RecordMessageRequest>("RecordMessage")))
        .await
        .expect("served");
    a.record_tool_call(tests::bearer(WORKER, released::<pb::RecordToolCallRequest>("RecordToolCall")))
        .await
        .expect("served");
    a.record_run(tests::bearer(WORKER, released::<pb::RecordRunRequest>("RecordRun"))).await.expect("served");
    let cards = tests::as_owner(GATEWAY, "owner", released::<pb::ListApprovalsRequest>("ListApprovals"));
    assert!(a.list_approvals(cards).await.expect("served").into_inner().approvals.is_empty());
    // A worker from before sealed facts is refused, typed, and told to upgrade; nothing is asked.
    let unsealed = released::<pb::AuthorizeRequest>("Authorize.unsealed");
    let refused = a.authorize(tests::bearer(WORKER, unsealed)).await.expect_err("refused");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(refused.message().contains("upgrade it"), "{refused:?}");
    let cards = tests::as_owner(GATEWAY, "owner", released::<pb::ListApprovalsRequest>("ListApprovals"));
    assert!(a.list_approvals(cards).await.unwrap().into_inner().approvals.is_empty(), "no card was asked");
    // A token or a card that does not exist: typed refusals, as release 1 answered them.
    let redeemed = a.redeem_token(tests::bearer(RUNTIME, released::<pb::RedeemTokenRequest>("RedeemToken"))).await;
    assert_eq!(redeemed.map(drop).unwrap_err().code(), Code::PermissionDenied);
    let resolve = tests::as_owner(GATEWAY, "owner", released::<pb::ResolveApprovalRequest>("ResolveApproval"));
    assert_eq!(a.resolve_approval(resolve).await.map(drop).unwrap_err().code(), Code::NotFound);
    let stop = tests::as_owner(GATEWAY, "owner", released::<pb::StopSessionRequest>("StopSession"));
    a.stop_session(stop).await.expect("served");
    // This release's own call, on the chat the released requests made.
    let check = pb::CheckStopRequest { session_id: "s1".into(), ticket: None };
    assert!(a.check_stop(tests::bearer(WORKER, check)).await.unwrap().into_inner().stopped);
}

/// What a worker of the release sends the runtime decodes as it did: no field dropped,
/// renumbered or retyped (the runtime's answers are held by the browser suites).
#[test]
fn the_previous_releases_runtime_requests_decode_unchanged() {
    released::<rt::OpenSessionRequest>("runtime.OpenSession");
    released::<rt::ObserveRequest>("runtime.Observe");
    let act = released::<rt::ActRequest>("runtime.Act");
    assert!(act.ticket.is_some() && matches!(act.action, Some(rt::act_request::Action::Click(_))));
    released::<rt::ReadFormRequest>("runtime.ReadForm");
}

/// A runtime of this release in front of an authorizer of the previous one (which has no
/// `CheckStop`: here, a server of the health service alone) refuses to dispatch, typed, naming
/// the upgrade.
#[tokio::test]
async fn a_runtime_before_its_authorizer_dispatches_nothing_and_says_to_upgrade_it() {
    use browser_runtime::session::{Redeem, RedeemError};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_, health) = tonic_health::server::health_reporter();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tokio::spawn(tonic::transport::Server::builder().add_service(health).serve_with_incoming(incoming));
    let link = browser_runtime::config::AuthorizerLink {
        url: format!("http://127.0.0.1:{port}"),
        ca_pem: None,
        token: RUNTIME.into(),
    };
    let runtime = browser_runtime::service::AuthorizerRedeemer::new(Some(&link)).unwrap();
    let keys = tests::ticket_keys();
    let ticket = keys.seal(&pb::TicketBody { tenant_id: TENANT.into(), session_id: "s1".into(), ..Default::default() });
    match runtime.check_stop(&ticket).await {
        Err(RedeemError::Older(why)) => assert!(why.contains("upgrade the authorizers before the runtimes"), "{why}"),
        other => panic!("not refused as an older authorizer: {other:?}"),
    }
}
