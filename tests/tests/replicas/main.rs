//! Authorizer replicas on one database, each a process of its own (the `replica` binary runs the
//! production `ops::serve`): what one records, the other's very next call obeys; uses stay capped
//! while backends are killed and a replica dies with SIGKILL; tenants never see each other.
#![allow(clippy::cast_possible_truncation)] // small test counts

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use credentials::{Credentials, Role, new_token};
use grant_domain::catalogue::Event;
use ops::serve::{DeploymentSettings, apply_settings};
use proto::v1 as pb;
use proto::v1::authorize_reply::Decision;
use proto::v1::authorizer_client::AuthorizerClient;
use rand::Rng;
use tests::TestDb;
use tokio::io::AsyncBufReadExt;
use tonic::transport::Channel;
use tonic::{Code, Request};

const TENANT: &str = "tenant-r";
const SCOPE: &str = "https://www.lesson.test/lesson";

/// A folder of its own for one replica's keyring file.
fn keys_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("grant-ledger-replica-keys-{}", uuid::Uuid::new_v4().simple()))
}

/// One replica process, killed when dropped.
struct Replica {
    child: tokio::process::Child,
    port: u16,
}

impl Replica {
    async fn start(db: &TestDb, env: &[(&str, &str)]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_replica"));
        for var in ops::serve::SETTINGS_VARIABLES {
            command.env_remove(var);
        }
        command
            .env("DATABASE_URL", db.url())
            .env("AUTHORIZER_LISTEN", format!("127.0.0.1:{port}"))
            .env("AUTHORIZER_DB_POOL", "12")
            .env("AUTHORIZER_METRICS_LISTEN", "127.0.0.1:0")
            .env("SWEEP_INTERVAL_SECONDS", "3600")
            .env(proto::ticket::KEYS_FILE_VAR, tests::ticket_keys_file(&keys_dir()))
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("the replica binary starts");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let serving = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if line.contains("serving on") {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(serving, Ok(true), "the replica did not start serving");
        Self { child, port }
    }

    async fn client(&self) -> AuthorizerClient<Channel> {
        let channel = Channel::from_shared(format!("http://127.0.0.1:{}", self.port)).unwrap().connect().await.unwrap();
        AuthorizerClient::new(channel)
    }

    /// SIGKILL: requests in flight die with it.
    async fn kill(&mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
    }
}

/// A credential per calling service of the tenant.
#[derive(Clone)]
struct Tokens {
    tenant: String,
    worker: String,
    gateway: String,
    profiles: String,
    runtime: String,
    /// Each session's browser profile, which a runtime seals the facts it reads with.
    profiles_of: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

impl Tokens {
    async fn register(db: &TestDb, tenant: &str) -> Self {
        let credentials = Credentials::postgres(db.pool(2));
        let t = Self {
            tenant: tenant.into(),
            worker: new_token(),
            gateway: new_token(),
            profiles: new_token(),
            runtime: new_token(),
            profiles_of: Arc::default(),
        };
        credentials.register(&t.worker, tenant, Role::Worker, Some("owner"), None).await.unwrap();
        credentials.register(&t.gateway, tenant, Role::Gateway, None, None).await.unwrap();
        credentials.register(&t.profiles, tenant, Role::Profiles, None, None).await.unwrap();
        credentials.register(&t.runtime, tenant, Role::Runtime, Some("owner"), None).await.unwrap();
        t
    }

    fn bearer<T>(token: &str, m: T) -> Request<T> {
        tests::bearer(token, m)
    }

    fn worker<T>(&self, m: T) -> Request<T> {
        Self::bearer(&self.worker, m)
    }

    /// A session's creation, with its profile noted for the facts sealed in it.
    fn session(&self, m: pb::CreateSessionRequest) -> Request<pb::CreateSessionRequest> {
        self.profiles_of.lock().unwrap().insert(m.session_id.clone(), m.browser_profile_id.clone());
        self.worker(m)
    }

    /// `m` with its facts sealed as the runtime serving its session would seal them.
    fn sealed(&self, m: pb::AuthorizeRequest) -> pb::AuthorizeRequest {
        let profile = self.profiles_of.lock().unwrap().get(&m.session_id).cloned().unwrap_or_default();
        tests::sealed(&self.tenant, "owner", &profile, m)
    }

    fn profiles<T>(&self, m: T) -> Request<T> {
        Self::bearer(&self.profiles, m)
    }

    fn runtime<T>(&self, m: T) -> Request<T> {
        Self::bearer(&self.runtime, m)
    }

    /// Records `profile` as the owner's, as the profiles service does when it makes one.
    async fn claim(&self, c: &mut AuthorizerClient<Channel>, profile: &str) {
        let created = pb::ProfileEventRequest {
            profile_id: profile.into(),
            event: pb::ProfileEvent::Created as i32,
            owner_principal_id: "owner".into(),
        };
        c.record_profile_event(self.profiles(created)).await.unwrap();
    }

    fn owner<T>(&self, m: T) -> Request<T> {
        tests::as_owner(&self.gateway, "owner", m)
    }
}

fn lesson() -> DeploymentSettings {
    DeploymentSettings {
        settings: authorizer::scopes::settings(Some("true"), Some(SCOPE)).unwrap(),
        standing: None,
        policy_version: Some(authorizer::policy::Policy::empty().version),
    }
}

fn act(session: &str, agent: &str) -> pb::AuthorizeRequest {
    pb::AuthorizeRequest {
        session_id: session.into(),
        run: Some(pb::RunContext { run_id: "run".into(), interactive: true, top_level: true }),
        // Every act is a tool call of its own (the same id would be a retry of one call).
        tool_call_id: format!("call-{}", uuid::Uuid::new_v4().simple()),
        turn_tool_calls: vec!["browser.act".into()],
        agent_version: agent.into(),
        element: Some(pb::ElementFacts {
            role: "button".into(),
            name: "el gato".into(),
            visible_text: "el gato".into(),
            field_kind: Some(pb::FieldKind::None as i32),
            download: Some(false),
            disabled: Some(false),
            truncated: Some(false),
            nav_targets_carried: true,
            ..Default::default()
        }),
        page_url: "https://www.lesson.test/lesson/unit-1".into(),
        action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
        ..Default::default()
    }
}

async fn decide(c: &mut AuthorizerClient<Channel>, t: &Tokens, m: pb::AuthorizeRequest) -> Decision {
    c.authorize(t.worker(t.sealed(m))).await.unwrap().into_inner().decision.unwrap()
}

/// A session of its own on `profile`, asked through `a`, allowed for the task through `b`.
async fn grant_across(
    a: &mut AuthorizerClient<Channel>,
    b: &mut AuthorizerClient<Channel>,
    t: &Tokens,
    session: &str,
    profile: &str,
) -> String {
    t.claim(a, profile).await;
    let create = pb::CreateSessionRequest {
        session_id: session.into(),
        browser_profile_id: profile.into(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    };
    a.create_session(t.session(create)).await.unwrap();
    let said = pb::RecordMessageRequest { session_id: session.into(), message_id: "m".into(), from_owner: true };
    b.record_message(t.owner(said)).await.unwrap();
    let Decision::RequireApproval(card) = decide(a, t, act(session, "agent-7")).await else {
        panic!("the first act asks")
    };
    // The card asked through A is read and answered through B.
    let read = pb::GetApprovalRequest { approval_id: card.approval_id.clone(), min_position: None };
    assert_eq!(b.get_approval(t.owner(read)).await.unwrap().into_inner().status, "PENDING");
    let offer = card.offer.expect("an offer");
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin,
        offered_path_prefix: offer.path_prefix,
    };
    let resolved = b.resolve_approval(t.owner(resolve)).await.unwrap().into_inner();
    assert_eq!(resolved.status, "APPROVED");
    resolved.grant_id
}

#[derive(Debug, Clone, Copy)]
enum Change {
    SignIn,
    ProfileRevoked,
    ProfileDeleted,
    SessionDeleted,
    GrantRevoked,
    ScopeRemoved,
    FlagOff,
    AgentChanged,
    PolicyChanged,
}

/// Kills random backends of this database until told to stop.
fn killer(db: &TestDb, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<usize> {
    let config = db.config.clone();
    tokio::spawn(async move {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        let mut killed = 0;
        while !stop.load(Ordering::Relaxed) {
            let pause = rand::rng().random_range(5..40);
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let row = client
                .query_one(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1) victims",
                    &[],
                )
                .await;
            killed += row.map_or(0, |r| usize::try_from(r.get::<_, i64>(0)).unwrap_or(0));
        }
        killed
    })
}

/// Asks until it gets a decision: a failure the client may retry (the replica or its backend
/// died) is retried on the next replica. An allow whose reply was lost with its replica is not
/// seen, but is in the log.
async fn until_decided(
    clients: &mut [AuthorizerClient<Channel>],
    first: usize,
    t: &Tokens,
    session: &str,
) -> Option<Decision> {
    for attempt in 0..50 {
        let c = &mut clients[(first + attempt) % clients.len()];
        match c.authorize(t.worker(t.sealed(act(session, "agent-7")))).await {
            Ok(r) => return r.into_inner().decision,
            Err(s)
                if matches!(
                    s.code(),
                    Code::Unavailable | Code::Unknown | Code::Aborted | Code::Cancelled | Code::Internal
                ) =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(s) => panic!("{s:?}"),
        }
    }
    panic!("no decision after 50 attempts")
}

/// The lesson settings applied, and session `s1` on profile `p1` whose newest message is the
/// owner's: where each in-process test starts.
async fn owner_session_s1(a: &authorizer::Authority<authorizer::PgGrants>, tenant: &str) {
    use authorizer::domain::Command;
    use grant_domain::catalogue::{Author, SessionCreated, SessionMessageRecorded, Surface};
    a.execute(Command::ChangeSettings(lesson().settings), "operator").await.unwrap();
    let claim = Command::ClaimProfile { profile_id: "p1".into(), owner_principal_id: "owner".into() };
    a.execute(claim, "profiles").await.unwrap();
    let created = SessionCreated {
        session_id: "s1".into(),
        tenant_id: tenant.into(),
        principal_id: "owner".into(),
        browser_profile_id: Some("p1".into()),
        schedule_id: None,
        surface: Surface::Interactive,
    };
    a.execute(Command::CreateSession(created), "owner").await.unwrap();
    let said = SessionMessageRecorded { session_id: "s1".into(), message_id: "m".into(), author: Author::Owner };
    a.execute(Command::RecordMessage(said), "owner").await.unwrap();
}

fn differential_request(tenant: &str) -> authorizer::domain::AuthorizeRequest {
    use authorizer::domain::{AuthorizeRequest, RunContext, Versions};
    AuthorizeRequest {
        tenant_id: tenant.into(),
        principal_id: "owner".into(),
        session_id: "s1".into(),
        run_id: "run".into(),
        tool_call_id: "call".into(),
        run: RunContext { interactive: true, top_level: true, turn_visible: true },
        turn_tool_calls: vec!["browser.act".into()],
        versions: Versions { agent: "agent-7".into(), policy: authorizer::policy::Policy::empty().version },
        element: classifier::ElementFacts { role: "button".into(), name: Some("el gato".into()), ..Default::default() },
        page: classifier::PageFacts { url: "https://www.lesson.test/lesson/unit-1".into() },
        action: classifier::Action::Click,
        view: grant_domain::catalogue::ActionView {
            action_kind: "click".into(),
            describable: true,
            action_summary: "Click a button".into(),
            ..Default::default()
        },
        snapshot: None,
        field_id: None,
        facts_profile: None,
        form: None,
        text_sha256: None,
    }
}

/// Two replicas, A and B, on one database, with a session whose grant A has used once.
async fn in_process_pair(
    db: &TestDb,
) -> (
    authorizer::Authority<authorizer::PgGrants>,
    authorizer::Authority<authorizer::PgGrants>,
    authorizer::domain::AuthorizeRequest,
    uuid::Uuid,
) {
    use authorizer::Authority;
    use authorizer::domain::{Command, Decision as Decided, Versions};
    use grant_domain::catalogue::Resolution;
    let tenant = ledger::TenantId::new(TENANT).unwrap();
    let policy = authorizer::policy::Policy::empty;
    let a = Authority::new(authorizer::PgGrants::new(db.store(4)), policy(), tenant.clone());
    let b = Authority::new(authorizer::PgGrants::new(db.store(4)), policy(), tenant);
    let now = time::OffsetDateTime::now_utc();
    owner_session_s1(&a, TENANT).await;
    let req = differential_request(TENANT);
    let (Decided::RequireApproval { approval_id, .. }, _) =
        a.authorize_uncalled(&req, now, uuid::Uuid::new_v4()).await.unwrap()
    else {
        panic!("the first act asks")
    };
    let grant_id = uuid::Uuid::new_v4();
    let resolve = Command::ResolveApproval {
        approval_id,
        principal_id: "owner".into(),
        resolution: Resolution::ApproveForTask,
        repeated_scope: Some(lesson().settings.scopes[0].clone()),
        new_grant_id: grant_id,
        versions: Versions { agent: "agent-7".into(), policy: policy().version },
        now,
        token_sha256: None,
    };
    b.execute(resolve, "owner").await.unwrap();
    assert!(matches!(a.authorize_uncalled(&req, now, uuid::Uuid::new_v4()).await.unwrap().0, Decided::Allow { .. }));
    (a, b, req, grant_id)
}

fn not_the_owner() -> authorizer::domain::Command {
    use grant_domain::catalogue::{Author, SessionMessageRecorded};
    let said = SessionMessageRecorded { session_id: "s1".into(), message_id: "m2".into(), author: Author::Other };
    authorizer::domain::Command::RecordMessage(said)
}

async fn actions_used(db: &TestDb, grant_id: uuid::Uuid) -> i32 {
    let client = db.client().await;
    client
        .query_one(
            "SELECT actions_used FROM active_task_grants WHERE tenant_id = $1 AND grant_id = $2",
            &[&TENANT, &grant_id],
        )
        .await
        .unwrap()
        .get(0)
}

/// The use ordinals the log records for `grant_id`, in order.
async fn recorded_uses(db: &TestDb, grant_id: &str) -> Vec<i64> {
    let sql = "SELECT (payload->>'use_ordinal')::bigint FROM events WHERE event_type = 'tool.call.authorized' \
               AND payload->>'grant_id' = $1 ORDER BY 1";
    db.client().await.query(sql, &[&grant_id]).await.unwrap().iter().map(|r| r.get(0)).collect()
}

/// One call, retried with its own tool-call id (a retry of the same call) on the next replica
/// until it is decided: its decision (`None`: it was allowed, but its grant ended before the
/// answer was heard, so it is never dispatched), and every error code on the way, each of which
/// must be UNAVAILABLE or UNKNOWN.
async fn settled(
    clients: &mut [AuthorizerClient<Channel>],
    first: usize,
    t: &Tokens,
    request: pb::AuthorizeRequest,
) -> (Option<Decision>, Vec<Code>) {
    let (mut seen, request) = (Vec::new(), t.sealed(request));
    for attempt in 0..600 {
        let c = &mut clients[(first + attempt) % clients.len()];
        match c.authorize(t.worker(request.clone())).await {
            Ok(r) => return (Some(r.into_inner().decision.expect("a decision")), seen),
            Err(s) if !seen.is_empty() && reason(&s) == "TOOL_CALL_GRANT_ENDED" => return (None, seen),
            Err(s) => {
                assert!(
                    matches!(s.code(), Code::Unavailable | Code::Unknown),
                    "a caller saw {:?} ({}), not UNAVAILABLE or UNKNOWN",
                    s.code(),
                    s.message()
                );
                seen.push(s.code());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    panic!("no decision after 600 tries: {seen:?}")
}

fn reason(s: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    s.get_details_error_info().map(|i| i.reason).unwrap_or_default()
}

async fn events_of(db: &TestDb) -> i64 {
    db.client().await.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get(0)
}

mod across;
mod failover;
mod faults;
mod races;
mod retries;
mod tenants;
