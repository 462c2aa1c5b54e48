//! Atomic use of a task grant against real PostgreSQL: racing requests, and killed connections.
#![allow(clippy::cast_possible_truncation)] // small test counts

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use authorizer::limits::{MAX_ACTIONS, MAX_TYPED_CHARS};
use authorizer::{Consumed, PgGrants, UseOf};
use grant_domain::catalogue::{ActionView, AuthorizationKind, Event, SiteScope, TaskGrantCreated, ToolCallAuthorized};
use ledger::{EventStore, Metadata, TenantId};
use rand::Rng;
use tests::TestDb;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

fn tenant() -> TenantId {
    TenantId::new("tenant-1").unwrap()
}

fn created(grant_id: Uuid, session: &str, now: OffsetDateTime) -> Event {
    Event::TaskGrantCreated(TaskGrantCreated {
        grant_id,
        approval_id: Uuid::new_v4(),
        tenant_id: "tenant-1".into(),
        principal_id: "owner".into(),
        session_id: session.into(),
        profile_id: "profile-1".into(),
        profile_generation: 0,
        agent_version: "agent-7".into(),
        policy_version: "sha256:x".into(),
        scope: SiteScope { origin: "https://www.lesson.test".into(), path_prefix: "/lesson".into() },
        created_at: now,
        expires_at: now + Duration::minutes(30),
        max_actions: MAX_ACTIONS,
        max_typed_chars: MAX_TYPED_CHARS,
    })
}

fn use_event(grant_id: Uuid, chars: u32, ordinal: u32) -> Event {
    Event::ToolCallAuthorized(ToolCallAuthorized {
        session_id: "s1".into(),
        run_id: "run-1".into(),
        tool_call_id: Uuid::new_v4().to_string(),
        authorization_kind: AuthorizationKind::BrowserTaskGrant,
        grant_id: Some(grant_id),
        use_ordinal: Some(ordinal),
        typed_chars: chars,
        view: ActionView {
            action_kind: "type".into(),
            describable: true,
            action_summary: "Type into a field".into(),
            ..ActionView::default()
        },
        snapshot_id: None,
        decided: None,
    })
}

fn use_of(grant_id: Uuid, typed_chars: u32, now: OffsetDateTime, read_used: Option<u32>) -> UseOf<'static> {
    UseOf { grant_id, typed_chars, now, session: None, read_used }
}

/// What a round of racing requests left behind.
#[derive(Debug, Default)]
struct Round {
    allowed: Vec<(u32, u32)>, // (ordinal, chars)
    refused: usize,
    errors: usize,
}

async fn race(grants: &PgGrants, grant_id: Uuid, requests: usize, max_chars: u32, now: OffsetDateTime) -> Round {
    let tasks: Vec<_> = (0..requests)
        .map(|i| {
            let grants = grants.clone();
            let chars = rand::rng().random_range(0..=max_chars);
            tokio::spawn(async move {
                // Half read the row first, as a decision does, and try the one-statement use
                // at what they read; the other half queue on the row lock.
                let read_used = if i % 2 == 0 {
                    grants.usage(&tenant(), grant_id).await.ok().flatten().map(|(used, _, _)| used)
                } else {
                    None
                };
                let out = grants
                    .consume(&tenant(), &Metadata::by("agent"), use_of(grant_id, chars, now, read_used), |o| {
                        use_event(grant_id, chars, o)
                    })
                    .await;
                (chars, out)
            })
        })
        .collect();
    let mut round = Round::default();
    for t in tasks {
        match t.await.unwrap() {
            (chars, Ok(Consumed::Allowed { ordinal, .. })) => round.allowed.push((ordinal, chars)),
            (_, Ok(Consumed::Refused)) => round.refused += 1,
            (_, Err(_)) => round.errors += 1,
        }
    }
    round
}

/// The grant's stream, inline row and the round must all agree.
async fn check_consistent(grants: &PgGrants, grant_id: Uuid, round: &Round) {
    let stream = authorizer::domain::entity_stream(&tenant(), "grant", &grant_id).unwrap();
    let events = grants.store().read_stream(&stream, 1).await.unwrap();
    ledger::verify_stream(&stream, &events).expect("contiguous, unbroken chain");
    let uses: Vec<ToolCallAuthorized> = events
        .iter()
        .filter_map(|e| match Event::from_recorded(e).unwrap() {
            Event::ToolCallAuthorized(u) => Some(u),
            _ => None,
        })
        .collect();
    let (actions, chars, _) = grants.usage(&tenant(), grant_id).await.unwrap().unwrap();
    assert_eq!(actions as usize, uses.len(), "actions_used equals the number of use events");
    assert_eq!(
        chars,
        uses.iter().map(|u| u.typed_chars).sum::<u32>(),
        "chars_used equals the typed characters recorded"
    );
    assert!(actions <= MAX_ACTIONS && chars <= MAX_TYPED_CHARS);
    let mut ordinals: Vec<u32> = uses.iter().map(|u| u.use_ordinal.unwrap()).collect();
    ordinals.sort_unstable();
    assert_eq!(ordinals, (1..=actions).collect::<Vec<_>>(), "ordinals 1..=n, each once");
    // Every use the caller was told to dispatch is recorded, with its ordinal.
    for (ordinal, c) in &round.allowed {
        assert!(
            uses.iter().any(|u| u.use_ordinal == Some(*ordinal) && u.typed_chars == *c),
            "allowed use {ordinal} not recorded"
        );
    }
}

async fn new_grant(grants: &PgGrants, session: &str) -> Uuid {
    let grant_id = Uuid::new_v4();
    grants
        .commit(&tenant(), &Metadata::by("owner"), &[created(grant_id, session, OffsetDateTime::now_utc())])
        .await
        .unwrap();
    grant_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_200_of_1000_concurrent_uses_from_64_connections_20_times() {
    let db = TestDb::new().await;
    let grants = PgGrants::new(db.store(64));
    for round_no in 0..20 {
        let grant_id = new_grant(&grants, &format!("s{round_no}")).await;
        // At most 20 characters each: 200 uses fit in 4,096, so the action cap is what binds.
        let round = race(&grants, grant_id, 1000, 20, OffsetDateTime::now_utc()).await;
        assert_eq!(round.errors, 0);
        assert_eq!(round.allowed.len(), 200, "round {round_no}");
        assert_eq!(round.refused, 800);
        let mut ordinals: Vec<u32> = round.allowed.iter().map(|a| a.0).collect();
        ordinals.sort_unstable();
        assert_eq!(ordinals, (1..=200).collect::<Vec<_>>());
        check_consistent(&grants, grant_id, &round).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_text_never_passes_4096_characters() {
    let db = TestDb::new().await;
    let grants = PgGrants::new(db.store(64));
    for round_no in 0..5 {
        let grant_id = new_grant(&grants, &format!("s{round_no}")).await;
        let round = race(&grants, grant_id, 1000, 64, OffsetDateTime::now_utc()).await;
        assert_eq!(round.errors, 0);
        let chars: u32 = round.allowed.iter().map(|a| a.1).sum();
        assert!(
            chars <= MAX_TYPED_CHARS && round.allowed.len() <= MAX_ACTIONS as usize,
            "{chars} chars, {} uses",
            round.allowed.len()
        );
        check_consistent(&grants, grant_id, &round).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_or_ended_grant_gives_no_use() {
    let db = TestDb::new().await;
    let grants = PgGrants::new(db.store(4));
    let grant_id = new_grant(&grants, "s1").await;
    let late = OffsetDateTime::now_utc() + Duration::minutes(31);
    let out = grants
        .consume(&tenant(), &Metadata::by("agent"), use_of(grant_id, 1, late, Some(0)), |o| use_event(grant_id, 1, o))
        .await
        .unwrap();
    assert_eq!(out, Consumed::Refused);
    let ended = Event::TaskGrantEnded(grant_domain::catalogue::TaskGrantEnded {
        grant_id,
        reason: grant_domain::catalogue::EndReason::Revoked,
        uses: None,
    });
    grants.commit(&tenant(), &Metadata::by("owner"), std::slice::from_ref(&ended)).await.unwrap();
    let now = OffsetDateTime::now_utc();
    let out = grants
        .consume(&tenant(), &Metadata::by("agent"), use_of(grant_id, 1, now, Some(0)), |o| use_event(grant_id, 1, o))
        .await
        .unwrap();
    assert_eq!(out, Consumed::Refused);
    // Ending it again is refused by the grant row: a grant ends exactly once (to the authority,
    // a sign that another request ended it first, so it decides again).
    let again = grants.commit(&tenant(), &Metadata::by("owner"), &[ended]).await;
    assert!(matches!(again, Err(authorizer::StoreError::Contended(_))), "{again:?}");
    assert_eq!(grants.usage(&tenant(), grant_id).await.unwrap().unwrap(), (0, 0, Some("revoked".into())));
    // A second active grant for the same session is refused too.
    let dup = grants.commit(&tenant(), &Metadata::by("owner"), &[created(Uuid::new_v4(), "s2", now)]).await;
    assert!(dup.is_ok());
    let second = grants.commit(&tenant(), &Metadata::by("owner"), &[created(Uuid::new_v4(), "s2", now)]).await;
    assert!(matches!(second, Err(authorizer::StoreError::Projection(_))), "{second:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_lose_nothing_and_exceed_no_cap() {
    let db = TestDb::new().await;
    // Only the racing pool's connections are killed; setup and checks use another pool, so a
    // failure here is the code under test, never the harness.
    let mut racer_config = db.config.clone();
    racer_config.application_name("racer");
    let racers = PgGrants::new(ledger::PgStore::new(ledger::postgres::pool(racer_config, 64).unwrap()));
    let checker = PgGrants::new(db.store(4));
    let (mut killed, mut failed_requests, mut allowed) = (0, 0, 0);
    for round_no in 0..5 {
        let grant_id = new_grant(&checker, &format!("s{round_no}")).await;
        let done = Arc::new(AtomicBool::new(false));
        let killer = {
            let done = Arc::clone(&done);
            let client = db.client().await;
            tokio::spawn(async move {
                let mut n = 0;
                while !done.load(Ordering::Relaxed) {
                    let row = client
                        .query_one(
                            "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity \
                             WHERE datname = current_database() AND application_name = 'racer' \
                             ORDER BY random() LIMIT 1) victims",
                            &[],
                        )
                        .await
                        .unwrap();
                    n += row.get::<_, i64>(0);
                    tokio::task::yield_now().await;
                }
                n
            })
        };
        let round = race(&racers, grant_id, 1000, 20, OffsetDateTime::now_utc()).await;
        done.store(true, Ordering::Relaxed);
        killed += killer.await.unwrap();
        failed_requests += round.errors;
        allowed += round.allowed.len();
        assert!(round.allowed.len() <= MAX_ACTIONS as usize);
        check_consistent(&checker, grant_id, &round).await;
        // Nothing recorded that the caller was not told about, beyond requests that errored.
        let (actions, _, _) = checker.usage(&tenant(), grant_id).await.unwrap().unwrap();
        assert!(actions as usize >= round.allowed.len() && actions as usize <= round.allowed.len() + round.errors);
    }
    assert!(killed > 0, "the killer never killed a connection: the fault did not happen");
    assert!(failed_requests > 0, "no request failed: the kills never hit a request in flight");
    assert!(allowed > 0, "no use got through at all");
    let settled = racers.settled();
    eprintln!(
        "killed {killed} connections; {failed_requests} requests failed; {allowed} uses allowed; settled {} stored, {} not",
        settled.stored.load(Ordering::Relaxed),
        settled.not_stored.load(Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_for_task_is_stored_as_approved() {
    use grant_domain::catalogue::{ApprovalResolved, ApprovalStatus, Resolution};
    let db = TestDb::new().await;
    let grants = PgGrants::new(db.store(2));
    let approval_id = Uuid::new_v4();
    let grant_id = Uuid::new_v4();
    let resolved = Event::ApprovalResolved(ApprovalResolved {
        approval_id,
        resolution: Resolution::ApproveForTask,
        status: Resolution::ApproveForTask.status(),
        grant_id: Some(grant_id),
    });
    grants
        .commit(&tenant(), &Metadata::by("owner"), &[resolved, created(grant_id, "s1", OffsetDateTime::now_utc())])
        .await
        .unwrap();
    let stream = authorizer::domain::entity_stream(&tenant(), "approval", &approval_id).unwrap();
    let stored = grants.store().read_stream(&stream, 1).await.unwrap();
    let Event::ApprovalResolved(back) = Event::from_recorded(&stored[0]).unwrap() else { panic!("not a resolution") };
    assert_eq!((back.resolution, back.status), (Resolution::ApproveForTask, ApprovalStatus::Approved));
    let raw: String = db
        .client()
        .await
        .query_one("SELECT payload->>'status' FROM events WHERE stream_id = $1", &[&stream.as_str()])
        .await
        .unwrap()
        .get(0);
    assert_eq!(raw, "APPROVED");
}

mod through_the_authority;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_use_whose_commit_dies_is_settled_before_dispatch() {
    use_dies_at_commit(None).await;
}

/// The same for the one-statement use, whose statement is its own commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_statement_use_whose_commit_dies_is_settled_before_dispatch() {
    use_dies_at_commit(Some(0)).await;
}

/// Test-only: holds every commit that wrote a use event open (a deferred trigger sleeps), where
/// it can be killed.
async fn hold_use_commits(admin: &tokio_postgres::Client) {
    admin
        .batch_execute(
            "CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
               BEGIN IF NEW.event_type = 'tool.call.authorized' THEN PERFORM pg_sleep(30); END IF; RETURN NULL; END $$; \
             CREATE CONSTRAINT TRIGGER hold_commit AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED \
               FOR EACH ROW EXECUTE FUNCTION hold_commit();",
        )
        .await
        .unwrap();
}

/// Waits (bounded) for a use to sit in its held COMMIT, then kills that backend: how many died.
async fn kill_held_commit(admin: &tokio_postgres::Client) -> i64 {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let n: i64 = admin
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event = 'PgSleep'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            return n;
        }
        assert!(tokio::time::Instant::now() < deadline, "the use never reached its commit");
        tokio::task::yield_now().await;
    }
}

async fn use_dies_at_commit(read_used: Option<u32>) {
    let db = TestDb::new().await;
    let grants = PgGrants::new(db.store(4));
    let grant_id = new_grant(&grants, "s1").await;
    let admin = db.client().await;
    hold_use_commits(&admin).await;
    let use_task = {
        let grants = grants.clone();
        tokio::spawn(async move {
            grants
                .consume(
                    &tenant(),
                    &Metadata::by("agent"),
                    use_of(grant_id, 3, OffsetDateTime::now_utc(), read_used),
                    |o| use_event(grant_id, 3, o),
                )
                .await
        })
    };

    assert_eq!(kill_held_commit(&admin).await, 1);
    let outcome = use_task.await.unwrap();
    let err = outcome.expect_err("a use whose commit died must not be reported as allowed");
    assert!(err.is_determinate(), "settled by event id: certainly not stored ({err})");
    assert_eq!(grants.settled().not_stored.load(std::sync::atomic::Ordering::Relaxed), 1, "settled through the lookup");
    assert_eq!(grants.usage(&tenant(), grant_id).await.unwrap().unwrap(), (0, 0, None), "nothing consumed");
    let stream = authorizer::domain::entity_stream(&tenant(), "grant", &grant_id).unwrap();
    assert_eq!(grants.store().read_stream(&stream, 1).await.unwrap().len(), 1, "only the creation is stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_redeemed_by_many_at_once_is_redeemed_once() {
    use authorizer::Authority;
    use authorizer::domain::{AuthorizeRequest, Command, Decision, RunContext, Versions};
    use authorizer::policy::Policy;
    use classifier::{Action, ElementFacts, PageFacts};
    use grant_domain::catalogue::{Resolution, SessionCreated, Surface, TokenBinding};

    let db = TestDb::new().await;
    let authority = Arc::new(Authority::new(PgGrants::new(db.store(16)), Policy::empty(), tenant()));
    let session = SessionCreated {
        session_id: "s1".into(),
        tenant_id: "tenant-1".into(),
        principal_id: "owner".into(),
        browser_profile_id: Some("profile-1".into()),
        schedule_id: None,
        surface: Surface::Interactive,
    };
    let claim = Command::ClaimProfile { profile_id: "profile-1".into(), owner_principal_id: "owner".into() };
    authority.execute(claim, "profiles").await.unwrap();
    authority.execute(Command::CreateSession(session), "owner").await.unwrap();
    let now = OffsetDateTime::now_utc();
    let req = AuthorizeRequest {
        tenant_id: "tenant-1".into(),
        principal_id: "owner".into(),
        session_id: "s1".into(),
        run_id: "run-1".into(),
        tool_call_id: "call".into(),
        run: RunContext { interactive: true, top_level: true, turn_visible: true },
        turn_tool_calls: vec!["browser.act".into()],
        versions: Versions { agent: "agent-7".into(), policy: Policy::empty().version },
        element: ElementFacts { role: "button".into(), name: Some("Confirm".into()), ..ElementFacts::default() },
        page: PageFacts { url: "https://portal.example/forms/5".into() },
        action: Action::Click,
        view: ActionView::default(),
        field_id: None,
        facts_profile: None,
        form: None,
        text_sha256: None,
        snapshot: Some(("snap_9f2c1a0b7d31".into(), "n42".into())),
    };
    let (Decision::RequireApproval { approval_id, .. }, _) =
        authority.authorize_uncalled(&req, now, Uuid::new_v4()).await.unwrap()
    else {
        panic!()
    };
    let resolve = Command::ResolveApproval {
        approval_id,
        principal_id: "owner".into(),
        resolution: Resolution::ApproveOnce,
        repeated_scope: None,
        new_grant_id: Uuid::new_v4(),
        versions: Versions { agent: "agent-7".into(), policy: Policy::empty().version },
        now,
        token_sha256: Some("d1".into()),
    };
    authority.execute(resolve, "owner").await.unwrap();
    let binding = TokenBinding {
        run_id: "run-1".into(),
        snapshot_id: "snap_9f2c1a0b7d31".into(),
        node_ref: "n42".into(),
        action: Some(Box::new(grant_domain::catalogue::BoundAction::of(&Action::Click, None).on(
            &ElementFacts { role: "button".into(), name: Some("Confirm".into()), ..ElementFacts::default() },
            "https://portal.example/forms/5",
        ))),
    };
    let tries: Vec<_> = (0..32)
        .map(|_| {
            let (authority, binding) = (Arc::clone(&authority), binding.clone());
            tokio::spawn(async move {
                let redeem = Command::RedeemToken {
                    principal_id: "owner".into(),
                    token_sha256: "d1".into(),
                    binding,
                    profile_id: "profile-1".into(),
                    now,
                };
                authority.execute(redeem, "runtime").await
            })
        })
        .collect();
    let mut ok = 0;
    for t in tries {
        if t.await.unwrap().is_ok() {
            ok += 1;
        }
    }
    assert_eq!(ok, 1, "exactly one redemption");
    let stream = authorizer::domain::entity_stream(&tenant(), "approval", &approval_id).unwrap();
    let redeemed = authority
        .backend()
        .store()
        .read_stream(&stream, 1)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == "approval.token_redeemed")
        .count();
    assert_eq!(redeemed, 1, "recorded once");
}

/// Each statement that makes a use finds its grant through an index on (tenant, id), even in the
/// plan a connection makes on a young table without statistics, which it keeps while the table
/// grows: never through a tenant-led index, which would read every running grant of the tenant
/// on each use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_use_finds_its_grant_by_tenant_and_id_in_a_plan_made_before_statistics() {
    let db = TestDb::new().await;
    let grants = PgGrants::new(db.store(2));
    for n in 0..3 {
        new_grant(&grants, &format!("s{n}")).await;
    }
    let client = db.client().await;
    client.batch_execute("SET plan_cache_mode = force_generic_plan").await.unwrap();
    for (n, sql) in PgGrants::use_statements().into_iter().enumerate() {
        let params = (1..=40).rev().find(|p| sql.contains(&format!("${p}"))).unwrap();
        client.batch_execute(&format!("PREPARE use_{n} AS {sql}")).await.unwrap();
        let nulls = vec!["NULL"; params].join(", ");
        let rows = client.query(&format!("EXPLAIN EXECUTE use_{n}({nulls})"), &[]).await.unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        let plan = plan.join("\n");
        let scans: Vec<&str> =
            plan.lines().filter(|l| l.contains("Scan") && l.contains(" on active_task_grants")).collect();
        assert!(!scans.is_empty(), "{plan}");
        // Either index keyed by (tenant, id), and as many conditions on both as scans.
        let by_key = ["Index Scan using active_task_grants_running ", "Index Scan using active_task_grants_pkey "];
        assert!(
            scans.iter().all(|l| by_key.iter().any(|k| l.contains(k))),
            "statement {n} scans the grants by another way:\n{plan}"
        );
        let conditions =
            plan.lines().filter(|l| l.contains("Index Cond: ((tenant_id = $6) AND (grant_id = $1))")).count();
        assert_eq!(conditions, scans.len(), "statement {n}: each scan of the grants by tenant and id:\n{plan}");
    }
}
