//! The Authorizer gRPC service: in process over an in-memory duplex (the memory backend), and over
//! a real loopback socket (PostgreSQL, health, a lost database). Each call's happy path,
//! validation, authentication, another principal's objects, failures and retries, and tokens.

use std::sync::Arc;

use authorizer::PgGrants;
use authorizer::auth::Rpc;
use authorizer::constraint::{DispatchConstraint, GrantKind, WireConstraint};
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

impl Call for pb::CheckStopRequest {
    const RPC: Rpc = Rpc::CheckStop;

    /// The runtime checks a ticket; the worker its session.
    fn role(&self) -> Role {
        if self.ticket.is_some() { Role::Runtime } else { Role::Worker }
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
    pb::ConnectAgentRequest => ConnectAgent,
    pb::ListAgentsRequest => ListAgents,
    pb::DisconnectAgentRequest => DisconnectAgent,
    pb::DescribeCallerRequest => DescribeCaller,
    pb::StartTaskRequest => StartTask,
    pb::ContinueTaskRequest => ContinueTask,
    pb::ListChatsRequest => ListChats,
    pb::ClaimTaskRequest => ClaimTask,
    pb::RenewTaskRequest => RenewTask,
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
    start_with_lease(backend, credentials, None).await
}

/// [`start`], its workers holding a task for `lease` when given.
async fn start_with_lease<B: Backend + 'static>(
    backend: B,
    credentials: Credentials,
    lease: Option<std::time::Duration>,
) -> Served {
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
    let mut service =
        AuthorizerService::new(authority, credentials.clone(), tests::ticket_keys()).accepting_unsealed_facts();
    if let Some(lease) = lease {
        service = service.with_task_lease(lease);
    }
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

/// [`start_in_process`] with the operator's standing grant pinned on profile-1.
async fn start_with_standing_pin() -> Served {
    use authorizer::domain::StandingPin;
    let authority = authority_with_scope(MemoryGrants::default(), true).await;
    let pin = StandingPin { grant_id: "standing-1".into(), profile_id: "profile-1".into() };
    let now = time::OffsetDateTime::now_utc();
    authority.execute(Command::PinStandingGrant { pin: Some(pin), now }, "operator").await.unwrap();
    start_in_process_on(authority).await
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
                account: None,
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
        Rpc::CheckStop => {
            let m = pb::CheckStopRequest { session_id: "s1".into(), ticket: None };
            client.check_stop(with_role(role, "owner", m)).await.map(drop)
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
        Rpc::ConnectAgent => {
            let m = pb::ConnectAgentRequest {
                session_id: "s1".into(),
                browser_only: true,
                minutes: 5,
                start_url: "https://www.lesson.test/lesson".into(),
            };
            client.connect_agent(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::ListAgents => client
            .list_agents(with_role(role, "owner", pb::ListAgentsRequest { session_id: "s1".into() }))
            .await
            .map(drop),
        Rpc::DisconnectAgent => {
            let m = pb::DisconnectAgentRequest { credential_id: uuid::Uuid::new_v4().to_string() };
            client.disconnect_agent(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::DescribeCaller => {
            client.describe_caller(with_role(role, "owner", pb::DescribeCallerRequest {})).await.map(drop)
        }
        Rpc::StartTask => {
            let m = pb::StartTaskRequest {
                session_id: "s1".into(),
                message_id: "m8".into(),
                goal: "Finish the lesson".into(),
                subgoals: vec!["Finish the lesson".into()],
                start_url: "https://www.lesson.test/lesson/1".into(),
            };
            client.start_task(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::ContinueTask => {
            let m = pb::ContinueTaskRequest { session_id: "s1".into(), message_id: "m7".into() };
            client.continue_task(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::ListChats => client.list_chats(with_role(role, "owner", pb::ListChatsRequest {})).await.map(drop),
        Rpc::ClaimTask => {
            let m = pb::ClaimTaskRequest { holder: "worker-9".into() };
            client.claim_task(with_role(role, "owner", m)).await.map(drop)
        }
        Rpc::RenewTask => {
            let m =
                pb::RenewTaskRequest { session_id: "s1".into(), run_id: "task-x-1".into(), holder: "worker-9".into() };
            client.renew_task(with_role(role, "owner", m)).await.map(drop)
        }
    }
}

/// Whether a grant's inline row is ended, and why.
async fn ended_row(db: &TestDb, grant_id: &str) -> (bool, Option<String>) {
    let id = uuid::Uuid::parse_str(grant_id).unwrap();
    let sql = "SELECT ended_at IS NOT NULL, end_reason FROM active_task_grants WHERE grant_id = $1";
    let r = db.client().await.query_one(sql, &[&id]).await.unwrap();
    (r.get(0), r.get(1))
}

mod agents;
mod callers;
mod lesson;
mod refusals;
mod stop;
mod tasks;
