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

/// Each change the rule names, recorded through one replica (or by the operator), stops the
/// other replica's very next authorization under the grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_one_replica_records_the_others_next_authorization_obeys() {
    let db = TestDb::new().await;
    let t = Tokens::register(&db, TENANT).await;
    apply_settings(&db.url(), TENANT, lesson()).await.unwrap();
    let policy = std::env::temp_dir().join(format!("policy-{}.json", uuid::Uuid::new_v4().simple()));
    std::fs::write(&policy, br#"{ "rules": [] }"#).unwrap();
    let other_policy_version = authorizer::policy::Policy::parse(br#"{ "rules": [] }"#).unwrap().version;
    let (a, b) = (Replica::start(&db, &[]).await, Replica::start(&db, &[]).await);
    let other_policy = Replica::start(&db, &[("POLICY_FILE", policy.to_str().unwrap())]).await;
    let (mut ca, mut cb, mut cp) = (a.client().await, b.client().await, other_policy.client().await);
    use Change::*;
    for change in [
        SignIn,
        ProfileRevoked,
        ProfileDeleted,
        SessionDeleted,
        GrantRevoked,
        ScopeRemoved,
        FlagOff,
        AgentChanged,
        PolicyChanged,
    ] {
        apply_settings(&db.url(), TENANT, lesson()).await.unwrap();
        let (session, profile) = (format!("s-{change:?}"), format!("p-{change:?}"));
        let grant_id = grant_across(&mut ca, &mut cb, &t, &session, &profile).await;
        assert!(matches!(decide(&mut ca, &t, act(&session, "agent-7")).await, Decision::Allow(_)), "{change:?}");
        let profile_event = |event: pb::ProfileEvent| pb::ProfileEventRequest {
            profile_id: profile.clone(),
            event: event as i32,
            owner_principal_id: "owner".into(),
        };
        match change {
            SignIn => {
                drop(cb.record_profile_event(t.profiles(profile_event(pb::ProfileEvent::SignInBegan))).await.unwrap())
            }
            ProfileRevoked => {
                drop(cb.record_profile_event(t.profiles(profile_event(pb::ProfileEvent::Revoked))).await.unwrap())
            }
            ProfileDeleted => {
                drop(cb.record_profile_event(t.profiles(profile_event(pb::ProfileEvent::Deleted))).await.unwrap())
            }
            SessionDeleted => {
                let delete = pb::DeleteSessionRequest { session_id: session.clone() };
                cb.delete_session(t.owner(delete)).await.unwrap();
            }
            GrantRevoked => {
                let revoke = pb::RevokeGrantRequest { grant_id: grant_id.clone() };
                cb.revoke_grant(t.owner(revoke)).await.unwrap();
            }
            ScopeRemoved => {
                let elsewhere =
                    authorizer::scopes::settings(Some("true"), Some("https://www.lesson.test/unit")).unwrap();
                apply_settings(&db.url(), TENANT, DeploymentSettings { settings: elsewhere, ..lesson() })
                    .await
                    .unwrap();
            }
            FlagOff => {
                let off = DeploymentSettings { settings: Default::default(), ..lesson() };
                apply_settings(&db.url(), TENANT, off).await.unwrap();
            }
            AgentChanged => {
                let asked = decide(&mut cb, &t, act(&session, "agent-8")).await;
                assert!(matches!(&asked, Decision::RequireApproval(c) if c.reason == "agent_changed"), "{asked:?}");
            }
            PolicyChanged => {
                // Before it is recorded, the replica running the new policy serves no one.
                let early = cp.authorize(t.worker(t.sealed(act(&session, "agent-7")))).await.unwrap_err();
                assert_eq!(early.code(), Code::Unavailable, "{early:?}");
                // Recorded, it is in force everywhere at once: the grant ends with the change,
                // the replica running it asks, and A, left behind, serves no one.
                let newer = DeploymentSettings { policy_version: Some(other_policy_version.clone()), ..lesson() };
                apply_settings(&db.url(), TENANT, newer).await.unwrap();
                let asked = decide(&mut cp, &t, act(&session, "agent-7")).await;
                assert!(matches!(&asked, Decision::RequireApproval(c) if c.reason.is_empty()), "{asked:?}");
            }
        }
        let next = ca.authorize(t.worker(t.sealed(act(&session, "agent-7")))).await;
        match change {
            SessionDeleted => assert_eq!(next.unwrap_err().code(), Code::NotFound),
            PolicyChanged => assert_eq!(next.unwrap_err().code(), Code::Unavailable),
            _ => {
                let next = next.unwrap().into_inner().decision.unwrap();
                assert!(matches!(next, Decision::RequireApproval(_)), "{change:?}: A still allowed: {next:?}");
            }
        }
        // The grant's row and its log agree that it ended, once.
        let ended: i64 = db
            .client()
            .await
            .query_one(
                "SELECT count(*) FROM events WHERE event_type = 'browser.task_grant.ended' AND payload->>'grant_id' = $1",
                &[&grant_id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(ended, 1, "{change:?}: the grant ends exactly once");
    }
    std::fs::remove_file(policy).unwrap();
}

/// An approval asked through one replica is resolved, read and its token redeemed through the
/// others; a second redemption anywhere is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_travels_across_replicas_and_its_token_is_redeemed_once() {
    let db = TestDb::new().await;
    let t = Tokens::register(&db, TENANT).await;
    apply_settings(&db.url(), TENANT, lesson()).await.unwrap();
    let (a, b) = (Replica::start(&db, &[]).await, Replica::start(&db, &[]).await);
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    t.claim(&mut ca, "p1").await;
    let create = pb::CreateSessionRequest {
        session_id: "s1".into(),
        browser_profile_id: "p1".into(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    };
    ca.create_session(t.session(create)).await.unwrap();
    let mut m = act("s1", "agent-7");
    m.snapshot_id = "snap_0123456789ab".into();
    m.node_ref = "n7".into();
    let Decision::RequireApproval(card) = decide(&mut ca, &t, m).await else { panic!("asks") };
    let listed = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: true, min_position: None };
    let listed = cb.list_approvals(t.owner(listed)).await.unwrap().into_inner().approvals;
    assert_eq!(listed.iter().map(|a| a.approval_id.as_str()).collect::<Vec<_>>(), [card.approval_id.as_str()]);
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    let token = cb.resolve_approval(t.owner(resolve)).await.unwrap().into_inner().approval_token;
    assert!(token.starts_with("apv_"));
    let redeem = || pb::RedeemTokenRequest {
        approval_token: token.clone(),
        run_id: "run".into(),
        snapshot_id: "snap_0123456789ab".into(),
        node_ref: "n7".into(),
        action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
        browser_profile_id: "p1".into(),
        element_role: "button".into(),
        element_name: "el gato".into(),
        page_origin: "https://www.lesson.test".into(),
        ..Default::default()
    };
    let redeemed = ca.redeem_token(t.runtime(redeem())).await.unwrap().into_inner();
    assert_eq!(redeemed.approval_id, card.approval_id);
    let again = cb.redeem_token(t.runtime(redeem())).await.unwrap_err();
    assert_eq!(again.code(), Code::PermissionDenied, "{again:?}");
    let read = pb::GetApprovalRequest { approval_id: card.approval_id, min_position: None };
    assert_eq!(ca.get_approval(t.owner(read)).await.unwrap().into_inner().status, "APPROVED");
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

/// 1,000 concurrent authorizations over four replicas against one grant, twenty times, while a
/// killer terminates random backends and, in one round, a replica dies with SIGKILL and starts
/// again: never more than 200 uses; every allow a client saw is a recorded use; the row equals
/// its use events; and `grantctl check` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_authorizations_over_four_replicas_under_kills_never_pass_200() {
    let db = TestDb::new().await;
    let t = Tokens::register(&db, TENANT).await;
    apply_settings(&db.url(), TENANT, lesson()).await.unwrap();
    let mut replicas = Vec::new();
    for _ in 0..4 {
        replicas.push(Replica::start(&db, &[]).await);
    }
    let mut clients = Vec::new();
    for r in &replicas {
        clients.push(r.client().await);
    }
    const KILL_ROUND: usize = 7;
    let mut killed = 0;
    for round in 0..20 {
        let session = format!("s{round}");
        let (mut x, mut y) = (clients[0].clone(), clients[1].clone());
        let grant_id = grant_across(&mut x, &mut y, &t, &session, &format!("p{round}")).await;
        let stop = Arc::new(AtomicBool::new(false));
        let killing = killer(&db, Arc::clone(&stop));
        let tasks: Vec<_> = (0..1000)
            .map(|i| {
                let (mut clients, t, session) = (clients.clone(), t.clone(), session.clone());
                tokio::spawn(async move { until_decided(&mut clients, i, &t, &session).await })
            })
            .collect();
        if round == KILL_ROUND {
            replicas[2].kill().await;
            replicas[2] = Replica::start(&db, &[]).await;
            clients[2] = replicas[2].client().await;
        }
        let mut seen = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Some(Decision::Allow(a)) => {
                    assert_eq!(a.grant_id, grant_id);
                    seen.push(a.use_ordinal);
                }
                Some(Decision::RequireApproval(_)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        killed += killing.await.unwrap();
        seen.sort_unstable();
        let client = db.client().await;
        let uses: Vec<i64> = client
            .query(
                "SELECT (payload->>'use_ordinal')::bigint FROM events WHERE event_type = 'tool.call.authorized' \
                 AND payload->>'grant_id' = $1 ORDER BY 1",
                &[&grant_id],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(uses, (1..=200).collect::<Vec<i64>>(), "round {round}: exactly 200 recorded uses, once each");
        let row: i32 = client
            .query_one(
                "SELECT actions_used FROM active_task_grants WHERE tenant_id = $1 AND grant_id = $2::text::uuid",
                &[&TENANT, &grant_id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(row, 200, "round {round}: the row equals its use events");
        assert!(seen.iter().all(|o| (1..=200).contains(o)), "round {round}");
        seen.dedup();
        if round == KILL_ROUND {
            assert!(seen.len() <= 200, "round {round}");
        } else {
            assert_eq!(seen.len(), 200, "round {round}: every recorded use reached its caller");
        }
    }
    assert!(killed > 0, "the killer terminated no backend");
    drop(replicas);
    let checked = ops::check::run(&db.config, ledger::READ_PAGE).await.expect("grantctl check passes");
    assert!(checked.read >= 20 * 200, "{checked}");
    // The inline state the replicas wrote, through every kill, is the log folded.
    let (ok, said) = ops::audit::authority_verify(&db.config).await.unwrap();
    assert!(ok, "{said}");
}

/// Two tenants on one replica with the same session and grant ids: neither sees, changes or
/// uses the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_with_the_same_ids_never_see_each_other() {
    let db = TestDb::new().await;
    let (ta, tb) = (Tokens::register(&db, "tenant-a").await, Tokens::register(&db, "tenant-b").await);
    for tenant in ["tenant-a", "tenant-b"] {
        apply_settings(&db.url(), tenant, lesson()).await.unwrap();
    }
    let replica = Replica::start(&db, &[]).await;
    let (mut c1, mut c2) = (replica.client().await, replica.client().await);
    let ga = grant_across(&mut c1, &mut c2, &ta, "s1", "p1").await;
    let gb = grant_across(&mut c1, &mut c2, &tb, "s1", "p1").await;
    for _ in 0..3 {
        assert!(matches!(decide(&mut c1, &ta, act("s1", "agent-7")).await, Decision::Allow(_)));
    }
    assert!(matches!(decide(&mut c1, &tb, act("s1", "agent-7")).await, Decision::Allow(_)));
    // B's sign-in on "p1" ends B's grant only.
    let signed_in = pb::ProfileEventRequest {
        profile_id: "p1".into(),
        event: pb::ProfileEvent::SignInBegan as i32,
        owner_principal_id: "owner".into(),
    };
    c1.record_profile_event(tb.profiles(signed_in)).await.unwrap();
    assert!(matches!(decide(&mut c1, &ta, act("s1", "agent-7")).await, Decision::Allow(_)));
    assert!(matches!(decide(&mut c1, &tb, act("s1", "agent-7")).await, Decision::RequireApproval(_)));
    // Neither reads or revokes the other's grant.
    let get = |g: &str| pb::GetGrantRequest { grant_id: g.into(), min_position: None };
    assert_eq!(c1.get_grant(tb.owner(get(&ga))).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(
        c1.revoke_grant(tb.owner(pb::RevokeGrantRequest { grant_id: ga.clone() })).await.unwrap_err().code(),
        Code::NotFound
    );
    let a = c1.get_grant(ta.owner(get(&ga))).await.unwrap().into_inner();
    assert_eq!((a.actions_used, a.end_reason.as_str()), (4, ""));
    let b = c1.get_grant(tb.owner(get(&gb))).await.unwrap().into_inner();
    assert_eq!((b.actions_used, b.end_reason.as_str()), (1, "profile_changed"));
    let list = |c: &mut AuthorizerClient<Channel>, t: &Tokens| {
        let r = t.owner(pb::ListGrantsRequest { session_id: String::new(), active_only: false, min_position: None });
        let mut c = c.clone();
        async move {
            c.list_grants(r).await.unwrap().into_inner().grants.into_iter().map(|g| g.grant_id).collect::<Vec<_>>()
        }
    };
    assert_eq!(list(&mut c1, &ta).await, [ga]);
    assert_eq!(list(&mut c1, &tb).await, [gb]);
}

/// The same grant id in two tenants, decided through the authority on one database: each
/// tenant's stream, row and uses are its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_grant_id_in_two_tenants_is_two_grants() {
    use authorizer::Authority;
    use authorizer::domain::{Command, Versions};
    use grant_domain::catalogue::Resolution;
    let db = TestDb::new().await;
    let base = Authority::new(
        authorizer::PgGrants::new(db.store(4)),
        authorizer::policy::Policy::empty(),
        ledger::TenantId::new("tenant-a").unwrap(),
    );
    let grant_id = uuid::Uuid::from_u128(7);
    let approval_id = uuid::Uuid::from_u128(9);
    let now = time::OffsetDateTime::now_utc();
    for tenant in ["tenant-a", "tenant-b"] {
        let a = base.for_tenant(ledger::TenantId::new(tenant).unwrap());
        owner_session_s1(&a, tenant).await;
        let mut req = differential_request(tenant);
        req.view.describable = true;
        a.authorize_uncalled(&req, now, approval_id).await.unwrap();
        let resolve = Command::ResolveApproval {
            approval_id,
            principal_id: "owner".into(),
            resolution: Resolution::ApproveForTask,
            repeated_scope: Some(lesson().settings.scopes[0].clone()),
            new_grant_id: grant_id,
            versions: Versions { agent: "agent-7".into(), policy: a.policy().version.clone() },
            now,
            token_sha256: None,
        };
        let events = a.execute(resolve, "owner").await.unwrap();
        assert!(events.iter().any(|e| matches!(e, Event::TaskGrantCreated(c) if c.grant_id == grant_id)), "{tenant}");
    }
    let a = base.for_tenant(ledger::TenantId::new("tenant-a").unwrap());
    for _ in 0..2 {
        a.authorize_uncalled(&differential_request("tenant-a"), now, uuid::Uuid::new_v4()).await.unwrap();
    }
    let (wa, wb) =
        (a.world().await.unwrap(), base.for_tenant(ledger::TenantId::new("tenant-b").unwrap()).world().await.unwrap());
    assert_eq!((wa.grants[&grant_id].actions_used, wb.grants[&grant_id].actions_used), (2, 0));
    assert_eq!(wa.grants[&grant_id].created.tenant_id, "tenant-a");
    assert_eq!(wb.grants[&grant_id].created.tenant_id, "tenant-b");
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
        run: RunContext { interactive: true, top_level: true },
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

/// A message that is not the owner's, recorded through replica B after A's decision read the
/// session and before A's use: the use finds the session moved on, A decides again, and the card
/// asks, the owner being no longer newest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_recorded_between_the_read_and_the_use_refuses_the_use() {
    use authorizer::domain::Decision as Decided;
    let db = TestDb::new().await;
    let (a, b, req, grant_id) = in_process_pair(&db).await;
    let pause = Arc::new(authorizer::Pause::default());
    a.backend().pause_next_use(Arc::clone(&pause));
    let waiting = {
        let (a, req) = (a.clone(), req.clone());
        tokio::spawn(
            async move { a.authorize_uncalled(&req, time::OffsetDateTime::now_utc(), uuid::Uuid::new_v4()).await },
        )
    };
    pause.reached.notified().await;
    b.execute(not_the_owner(), "worker").await.unwrap();
    pause.go.notify_one();
    let (decision, _) = waiting.await.unwrap().unwrap();
    assert!(
        matches!(&decision, Decided::RequireApproval { reason: Some(r), .. } if r == "owner_not_newest"),
        "{decision:?}"
    );
    assert_eq!(actions_used(&db, grant_id).await, 1, "only the use before the message");
}

/// The other order: a use already under way holds the session, so a message recorded through B
/// meanwhile waits for it and lands after it in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_recorded_during_a_use_waits_for_it() {
    use authorizer::domain::Decision as Decided;
    let db = TestDb::new().await;
    let (a, b, req, grant_id) = in_process_pair(&db).await;
    // Hold the grant row from a test connection: A's use takes the session's share lock, then
    // waits for the row.
    let mut blocker = db.client().await;
    let held = blocker.transaction().await.unwrap();
    held.execute("SELECT 1 FROM active_task_grants WHERE grant_id = $1 FOR UPDATE", &[&grant_id]).await.unwrap();
    let using = {
        let (a, req) = (a.clone(), req.clone());
        tokio::spawn(
            async move { a.authorize_uncalled(&req, time::OffsetDateTime::now_utc(), uuid::Uuid::new_v4()).await },
        )
    };
    let watcher = db.client().await;
    // Waits until at least `at_least` statements whose text holds `what` wait on a lock.
    let blocked_on = |what: &'static str, at_least: i64| {
        let watcher = &watcher;
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let n: i64 = watcher
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                         AND wait_event_type = 'Lock' AND query LIKE $1",
                        &[&format!("%{what}%")],
                    )
                    .await
                    .unwrap()
                    .get(0);
                if n >= at_least {
                    return;
                }
                assert!(tokio::time::Instant::now() < deadline, "fewer than {at_least} waited on {what}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    blocked_on("UPDATE active_task_grants", 1).await;
    let speaking = {
        let b = b.clone();
        tokio::spawn(async move { b.execute(not_the_owner(), "worker").await })
    };
    // A's own use names the sessions table too: B waits only once two statements do.
    blocked_on("authority_sessions", 2).await;
    held.commit().await.unwrap();
    let (decision, events) = using.await.unwrap().unwrap();
    assert!(matches!(decision, Decided::Allow { use_ordinal: Some(2), .. }), "{decision:?}");
    speaking.await.unwrap().unwrap();
    assert_eq!(actions_used(&db, grant_id).await, 2);
    let grant_domain::catalogue::Event::ToolCallAuthorized(used) = &events[0] else { panic!("{events:?}") };
    let order: Vec<String> = watcher
        .query(
            "SELECT event_type FROM events WHERE event_type IN ('tool.call.authorized', 'session.message_recorded') \
             ORDER BY tx_id, global_position",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order.last().map(String::as_str), Some("session.message_recorded"), "{order:?} ({used:?})");
}

fn reason(s: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    s.get_details_error_info().map(|i| i.reason).unwrap_or_default()
}

async fn events_of(db: &TestDb) -> i64 {
    db.client().await.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get(0)
}

/// One tool call sent fifty times at once through two replicas is decided once: one use spent,
/// every reply the same allow with the same ordinal. The same id with other arguments is refused
/// and writes nothing; after a Stop, a retry of an allowed call is refused, not allowed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_authorize_through_any_replica_never_spends_twice() {
    let db = TestDb::new().await;
    let t = Tokens::register(&db, TENANT).await;
    apply_settings(&db.url(), TENANT, lesson()).await.unwrap();
    let (a, b) = (Replica::start(&db, &[]).await, Replica::start(&db, &[]).await);
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let grant_id = grant_across(&mut ca, &mut cb, &t, "s1", "p1").await;
    let plain = act("s1", "agent-7");
    // Sealed once: a retry is the same bytes.
    let call = t.sealed(plain.clone());
    let racers: Vec<_> = (0..50)
        .map(|i| {
            let (mut c, t, call) = (if i % 2 == 0 { ca.clone() } else { cb.clone() }, t.clone(), call.clone());
            tokio::spawn(async move { c.authorize(t.worker(call)).await.map(|r| r.into_inner().decision) })
        })
        .collect();
    let mut ordinals = Vec::new();
    for r in racers {
        match r.await.unwrap().unwrap() {
            Some(Decision::Allow(allow)) => {
                assert_eq!(allow.grant_id, grant_id);
                assert!(allow.constraint.is_some(), "a replayed allow carries its constraint");
                ordinals.push(allow.use_ordinal);
            }
            other => panic!("{other:?}"),
        }
    }
    ordinals.dedup();
    assert_eq!(ordinals, [1], "one use, answered fifty times");
    let used: i32 = db
        .client()
        .await
        .query_one("SELECT actions_used FROM active_task_grants WHERE grant_id = $1::text::uuid", &[&grant_id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(used, 1);

    // The same id with other arguments: refused, nothing written, through either replica.
    let before = events_of(&db).await;
    let mut other = plain;
    other.element.as_mut().unwrap().name = "la casa".into();
    let other = t.sealed(other);
    for c in [&mut ca, &mut cb] {
        let err = c.authorize(t.worker(other.clone())).await.unwrap_err();
        assert_eq!((err.code(), reason(&err).as_str()), (Code::FailedPrecondition, "TOOL_CALL_REUSED"), "{err:?}");
    }
    assert_eq!(events_of(&db).await, before);

    // A card is asked once however often its call is sent: the same approval every time.
    let mut pay = act("s1", "agent-7");
    pay.element.as_mut().unwrap().visible_text = "Pay $5".into();
    let pay = t.sealed(pay);
    let mut cards = Vec::new();
    for mut c in [ca.clone(), cb.clone(), ca.clone()] {
        match c.authorize(t.worker(pay.clone())).await.unwrap().into_inner().decision {
            Some(Decision::RequireApproval(card)) => cards.push(card.approval_id),
            other => panic!("{other:?}"),
        }
    }
    cards.dedup();
    assert_eq!(cards.len(), 1, "{cards:?}");
    let listed = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: true, min_position: None };
    assert_eq!(cb.list_approvals(t.owner(listed)).await.unwrap().into_inner().approvals.len(), 1);

    // Stop, then the first call again: refused, and nothing spent.
    cb.revoke_grant(t.owner(pb::RevokeGrantRequest { grant_id: grant_id.clone() })).await.unwrap();
    let before = events_of(&db).await;
    let err = ca.authorize(t.worker(call)).await.unwrap_err();
    assert_eq!(reason(&err), "TOOL_CALL_GRANT_ENDED", "{err:?}");
    assert_eq!(events_of(&db).await, before);
}

/// Each replica remembers the credentials it has seen, and still a revocation holds at the very
/// next call through every one of them: an Authorize confirms its credential in its own read, any
/// other call before it acts, and a refused call (a bad request, too) says only "unknown".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_credential_is_refused_at_the_next_call_through_every_replica() {
    let db = TestDb::new().await;
    let t = Tokens::register(&db, TENANT).await;
    apply_settings(&db.url(), TENANT, lesson()).await.unwrap();
    let (a, b) = (Replica::start(&db, &[]).await, Replica::start(&db, &[]).await);
    let (mut ca, mut cb) = (a.client().await, b.client().await);
    let grant_id = grant_across(&mut ca, &mut cb, &t, "s1", "p1").await;
    // Two more worker credentials of the same owner, each seen by both replicas.
    let credentials = Credentials::postgres(db.pool(1));
    let (w2, w3) = (new_token(), new_token());
    let mut ids = Vec::new();
    for w in [&w2, &w3] {
        ids.push(credentials.register(w, TENANT, Role::Worker, Some("owner"), None).await.unwrap().credential_id);
        for c in [&mut ca, &mut cb] {
            for _ in 0..2 {
                let reply = c.authorize(Tokens::bearer(w, t.sealed(act("s1", "agent-7")))).await.unwrap();
                assert!(matches!(reply.into_inner().decision, Some(Decision::Allow(_))));
            }
        }
    }
    let used = || async {
        let q = "SELECT actions_used FROM active_task_grants WHERE grant_id = $1::text::uuid";
        db.client().await.query_one(q, &[&grant_id]).await.unwrap().get::<_, i32>(0)
    };
    let (uses, events) = (used().await, events_of(&db).await);
    for id in &ids {
        assert!(credentials.revoke(TENANT, *id).await.unwrap());
    }
    fn refused<T: std::fmt::Debug>(r: Result<T, tonic::Status>) {
        let e = r.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    }
    // Warm on both replicas: an Authorize through A, another call through B.
    refused(ca.authorize(Tokens::bearer(&w2, t.sealed(act("s1", "agent-7")))).await);
    let create =
        pb::CreateSessionRequest { session_id: "s2".into(), browser_profile_id: "p1".into(), ..Default::default() };
    refused(cb.create_session(Tokens::bearer(&w2, create)).await);
    // A bad request (no tool-call id) through A, a good one through B.
    let mut bad = act("s1", "agent-7");
    bad.tool_call_id.clear();
    refused(ca.authorize(Tokens::bearer(&w3, t.sealed(bad))).await);
    refused(cb.authorize(Tokens::bearer(&w3, t.sealed(act("s1", "agent-7")))).await);
    // Forgotten once refused: read again, refused at the door.
    for c in [&mut ca, &mut cb] {
        for w in [&w2, &w3] {
            refused(c.authorize(Tokens::bearer(w, t.sealed(act("s1", "agent-7")))).await);
        }
    }
    assert_eq!((used().await, events_of(&db).await), (uses, events), "nothing spent, nothing written");
    // The owner's own credential, never revoked, still acts through both.
    for c in [&mut ca, &mut cb] {
        let reply = c.authorize(t.worker(t.sealed(act("s1", "agent-7")))).await.unwrap();
        assert!(matches!(reply.into_inner().decision, Some(Decision::Allow(_))));
    }
}
