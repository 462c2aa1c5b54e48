//! Task-grant uses through the `Authority` on PostgreSQL: retries, one-statement uses, a card
//! racing the owner's Stop, and a thousand authorizations racing for 200 uses.

use super::*;
use authorizer::Authority;
use authorizer::domain::{AuthorizeRequest, Command, Decision, RunContext, Versions};
use authorizer::policy::Policy;
use authorizer::scopes::{TaskGrantSettings, parse_scopes};
use classifier::{Action, ElementFacts, PageFacts};
use grant_domain::catalogue::{Author, EndReason, Resolution, SessionCreated, SessionMessageRecorded, Surface};

fn request(session: &str, text: &str) -> AuthorizeRequest {
    AuthorizeRequest {
        tenant_id: "tenant-1".into(),
        principal_id: "owner".into(),
        session_id: session.into(),
        run_id: "run".into(),
        tool_call_id: "call".into(),
        run: RunContext { interactive: true, top_level: true, turn_visible: true },
        turn_tool_calls: vec!["browser.act".into()],
        versions: Versions { agent: "agent-7".into(), policy: Policy::empty().version },
        element: ElementFacts {
            role: "textbox".into(),
            name: Some("Answer".into()),
            field_kind: classifier::FieldKind::Text,
            ..ElementFacts::default()
        },
        page: PageFacts { url: "https://www.lesson.test/lesson/1".into() },
        action: Action::Type { text: text.into() },
        view: ActionView {
            action_kind: "type".into(),
            describable: true,
            action_summary: "Type into a field".into(),
            ..ActionView::default()
        },
        snapshot: None,
        field_id: None,
        facts_profile: None,
        form: None,
        text_sha256: None,
    }
}

/// A session with a grant made the only way there is: the card's "Allow for this task".
async fn session_with_grant(authority: &Authority<PgGrants>, session: &str, now: OffsetDateTime) -> Uuid {
    let created = SessionCreated {
        session_id: session.into(),
        tenant_id: "tenant-1".into(),
        principal_id: "owner".into(),
        browser_profile_id: Some("profile-1".into()),
        schedule_id: None,
        surface: Surface::Interactive,
    };
    let claim = Command::ClaimProfile { profile_id: "profile-1".into(), owner_principal_id: "owner".into() };
    authority.execute(claim, "profiles").await.unwrap();
    authority.execute(Command::CreateSession(created), "owner").await.unwrap();
    let said = SessionMessageRecorded { session_id: session.into(), message_id: "m".into(), author: Author::Owner };
    authority.execute(Command::RecordMessage(said), "owner").await.unwrap();
    let (Decision::RequireApproval { approval_id, .. }, _) =
        authority.authorize_uncalled(&request(session, "hola"), now, Uuid::new_v4()).await.unwrap()
    else {
        panic!("the first act asks")
    };
    let grant_id = Uuid::new_v4();
    let scope = parse_scopes("https://www.lesson.test/lesson").unwrap().remove(0);
    let resolve = Command::ResolveApproval {
        approval_id,
        principal_id: "owner".into(),
        resolution: Resolution::ApproveForTask,
        repeated_scope: Some(scope),
        new_grant_id: grant_id,
        versions: Versions { agent: "agent-7".into(), policy: Policy::empty().version },
        now,
        token_sha256: None,
    };
    authority.execute(resolve, "owner").await.unwrap();
    grant_id
}

/// An authority with the lesson's scope configured and session `s1` holding a task grant.
async fn lesson_grant(db: &TestDb) -> (Authority<PgGrants>, Uuid, OffsetDateTime) {
    let authority = Authority::new(PgGrants::new(db.store(4)), Policy::empty(), tenant());
    let settings = TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/lesson").unwrap() };
    authority.execute(Command::ChangeSettings(settings), "operator").await.unwrap();
    let now = OffsetDateTime::now_utc();
    let grant_id = session_with_grant(&authority, "s1", now).await;
    (authority, grant_id, now)
}

async fn actions_used(db: &TestDb, grant_id: Uuid) -> i32 {
    let q = "SELECT actions_used FROM active_task_grants WHERE grant_id = $1";
    db.client().await.query_one(q, &[&grant_id]).await.unwrap().get(0)
}

/// A call whose use died in its COMMIT, sent again with the same call key through another
/// replica, spends exactly one use; sent a third time (its reply lost, say) it spends nothing
/// and answers the same ordinal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_retried_after_its_commit_died_spends_one_use() {
    use authorizer::CallKey;
    let db = TestDb::new().await;
    let grants = PgGrants::new(db.store(4));
    let authority = Arc::new(Authority::new(grants.clone(), Policy::empty(), tenant()));
    let settings = TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/lesson").unwrap() };
    authority.execute(Command::ChangeSettings(settings), "operator").await.unwrap();
    let now = OffsetDateTime::now_utc();
    let grant_id = session_with_grant(&authority, "s1", now).await;
    let admin = db.client().await;
    hold_use_commits(&admin).await;
    let req = request("s1", "gato");
    let call = CallKey::new(&tenant(), "s1", "call-retried", &[7; 32]);
    let first = {
        let (authority, req) = (Arc::clone(&authority), req.clone());
        tokio::spawn(async move { authority.authorize(&req, &|_| req.view.clone(), now, call, None).await })
    };
    assert_eq!(kill_held_commit(&admin).await, 1);
    assert!(first.await.unwrap().is_err(), "a use whose commit died is not an allow");
    admin.batch_execute("DROP TRIGGER hold_commit ON events").await.unwrap();
    assert_eq!(grants.usage(&tenant(), grant_id).await.unwrap().unwrap().0, 0, "nothing was spent");
    // The retries arrive at another replica (its own pool and caches), then at the first.
    let other = Authority::new(PgGrants::new(db.store(4)), Policy::empty(), tenant());
    let mut ordinals = Vec::new();
    for replica in [&other, &*authority] {
        let a = replica.authorize(&req, &|_| req.view.clone(), now, call, None).await.unwrap();
        let Decision::Allow { use_ordinal, .. } = a.decision else { panic!("{:?}", a.decision) };
        ordinals.push(use_ordinal);
    }
    assert_eq!(ordinals, [Some(1), Some(1)]);
    assert_eq!(grants.usage(&tenant(), grant_id).await.unwrap().unwrap().0, 1, "one use in all");
}

/// The same as [`a_call_retried_after_its_commit_died_spends_one_use`], for a use made on the
/// replica's remembered read: the statement that died is the remembered one (it alone checks the
/// caller's credential and the settings' version), nothing of it stays, the replica forgets the
/// read, and the retries through it and another replica spend exactly one use between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_use_whose_commit_died_is_retried_once() {
    use authorizer::CallKey;
    let db = TestDb::new().await;
    let (authority, grant_id, now) = lesson_grant(&db).await;
    let authority = Arc::new(authority);
    let req = request("s1", "gato");
    let view = |_: &[SiteScope]| req.view.clone();
    let first = authority.authorize(&req, &view, now, CallKey::new(&tenant(), "s1", "c1", &[1; 32]), None);
    assert!(matches!(first.await.unwrap().decision, Decision::Allow { use_ordinal: Some(1), .. }));
    assert!(authority.backend().remembered(&tenant(), "s1").is_some(), "the first use left its read remembered");
    let admin = db.client().await;
    hold_use_commits(&admin).await;
    let call = CallKey::new(&tenant(), "s1", "c2", &[2; 32]);
    let second = {
        let (authority, req) = (Arc::clone(&authority), req.clone());
        tokio::spawn(async move { authority.authorize(&req, &|_| req.view.clone(), now, call, None).await })
    };
    let held: String = poll_held_use(&admin).await;
    // The remembered statement's first guard beyond the fresh one's, inside the 1,024 bytes of a
    // query pg_stat_activity keeps.
    let remembered = "($9::uuid IS NULL OR EXISTS (SELECT 1 FROM credentials";
    assert!(held.contains(remembered), "the held use is the remembered statement: {held}");
    assert_eq!(kill_held_commit(&admin).await, 1);
    assert!(second.await.unwrap().is_err(), "a use whose commit died is not an allow");
    admin.batch_execute("DROP TRIGGER hold_commit ON events").await.unwrap();
    assert_eq!(actions_used(&db, grant_id).await, 1, "nothing of the dead use stays");
    assert!(authority.backend().remembered(&tenant(), "s1").is_none(), "the replica forgot the read");
    // The replica whose use died retries first (on a fresh read), then another replica and the
    // first again answer the call's recorded decision.
    let other = Authority::new(PgGrants::new(db.store(4)), Policy::empty(), tenant());
    let mut ordinals = Vec::new();
    for replica in [&*authority, &other, &*authority] {
        let a = replica.authorize(&req, &view, now, call, None).await.unwrap();
        let Decision::Allow { use_ordinal, .. } = a.decision else { panic!("{:?}", a.decision) };
        ordinals.push(use_ordinal);
    }
    assert_eq!(ordinals, [Some(2), Some(2), Some(2)]);
    assert_eq!(authority.backend().remembered_uses(), 0, "the retry was decided on a fresh read");
    assert_eq!(actions_used(&db, grant_id).await, 2, "one use for the call in all");
    check_consistent(authority.backend(), grant_id, &Round::default()).await;
}

/// The statement of the use sitting in its held COMMIT (see `hold_use_commits`).
async fn poll_held_use(admin: &tokio_postgres::Client) -> String {
    tests::poll_until(
        "a use held at its commit",
        std::time::Duration::from_secs(20),
        std::time::Duration::from_millis(10),
        || async {
            admin
                .query_opt(
                    "SELECT query FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'",
                    &[],
                )
                .await
                .unwrap()
                .map(|r| r.get::<_, String>(0))
        },
    )
    .await
}

/// One act after another on one grant: each use after the read is made in one statement
/// (the authorize read found the grant stream's head), recorded with its ordinal and its
/// snapshot named, and the chain stays whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_uses_are_made_in_one_statement_each() {
    let db = TestDb::new().await;
    let (authority, grant_id, now) = lesson_grant(&db).await;
    for n in 1..=5u32 {
        let mut req = request("s1", "hola");
        req.snapshot = Some((format!("snap-{n}"), "e1".into()));
        let (decision, _) = authority.authorize_uncalled(&req, now, Uuid::new_v4()).await.unwrap();
        assert!(
            matches!(decision, Decision::Allow { use_ordinal: Some(o), grant_id: Some(g), .. } if o == n && g == grant_id),
            "{decision:?}"
        );
    }
    let grants = authority.backend();
    // The first on a fresh read, the next four on the read the first one made, moved along.
    assert_eq!((grants.one_statement_uses(), grants.remembered_uses()), (1, 4), "every use took one statement");
    check_consistent(authority.backend(), grant_id, &Round::default()).await;
    let client = db.client().await;
    let named: i64 = client
        .query_one("SELECT count(*) FROM run_snapshots WHERE session_id = 's1' AND snapshot_id LIKE 'snap-%'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(named, 5, "each use named its snapshot in the same statement");
}

/// A session's next allow is decided on the read the replica remembers only while everything
/// that read saw still holds. A profile moved, the settings changed (even to something that still
/// covers the act), the session moved: each time the remembered use is refused and the call is
/// decided on a fresh read, which is what it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_read_is_used_only_while_all_it_saw_still_holds() {
    let db = TestDb::new().await;
    let (authority, grant_id, now) = lesson_grant(&db).await;
    let lesson = |scopes: &str| TaskGrantSettings { enabled: true, scopes: parse_scopes(scopes).unwrap() };
    let grants = authority.backend();
    let decide = async || authority.authorize_uncalled(&request("s1", "hola"), now, Uuid::new_v4()).await.unwrap().0;
    let mut ordinal = 0;
    let mut allowed = async |remembered: bool| {
        let before = grants.remembered_uses();
        let decision = decide().await;
        ordinal += 1;
        assert!(matches!(decision, Decision::Allow { use_ordinal: Some(o), .. } if o == ordinal), "{decision:?}");
        assert_eq!(grants.remembered_uses() - before, u64::from(remembered), "use {ordinal} on a remembered read");
    };
    allowed(false).await;
    allowed(true).await;

    // The profile's row moves. No profile event does that and leaves the grant running (each
    // ends the grants on the profile), so the row is moved by hand: the guard is a second line.
    // After a refused use the session pauses one call before its memory is tried again.
    let client = db.client().await;
    let moved = client
        .execute("UPDATE authority_profiles SET version = version + 1 WHERE tenant_id = 'tenant-1'", &[])
        .await
        .unwrap();
    assert_eq!(moved, 1);
    allowed(false).await;
    allowed(false).await;
    allowed(true).await;

    // The settings change to a wider set that still covers the act.
    let wider = lesson("https://www.lesson.test/lesson, https://www.other.test/docs");
    authority.execute(Command::ChangeSettings(wider), "operator").await.unwrap();
    allowed(false).await;
    allowed(false).await;
    allowed(true).await;

    // A message that is not the owner's moves the session: the fresh read asks.
    let said = SessionMessageRecorded { session_id: "s1".into(), message_id: "m9".into(), author: Author::Other };
    authority.execute(Command::RecordMessage(said), "worker").await.unwrap();
    let before = grants.remembered_uses();
    let decision = decide().await;
    assert!(matches!(&decision, Decision::RequireApproval { .. }), "{decision:?}");
    assert_eq!(grants.remembered_uses(), before);
    assert_eq!(actions_used(&db, grant_id).await, 8, "no use after the message");
}

/// One session's calls spread over two replicas in turn: each replica's remembered read is stale
/// every time (the other's use came between), so every try from memory is refused and the call
/// decided afresh; the uses still come one by one, each answered once, and the refused tries
/// thin out as the session's pause grows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_spread_over_two_replicas_use_the_grant_one_by_one() {
    let db = TestDb::new().await;
    let (a, grant_id, now) = lesson_grant(&db).await;
    let b = Authority::new(PgGrants::new(db.store(4)), Policy::empty(), tenant());
    let req = request("s1", "hola");
    for n in 1..=40u32 {
        let replica = if n % 2 == 1 { &a } else { &b };
        let (decision, _) = replica.authorize_uncalled(&req, now, Uuid::new_v4()).await.unwrap();
        assert!(matches!(decision, Decision::Allow { use_ordinal: Some(o), .. } if o == n), "{decision:?}");
    }
    assert_eq!(actions_used(&db, grant_id).await, 40);
    for replica in [&a, &b] {
        let grants = replica.backend();
        assert_eq!(grants.remembered_uses(), 0, "never a use on a stale read");
        // 19 tries from memory per replica without the pause; with it, at calls 2, 4, 8, 16.
        assert!((1..=5).contains(&grants.remembered_refusals()), "{}", grants.remembered_refusals());
    }
}

/// A credential a replica recognised from memory is confirmed by the statement that makes a use
/// on a remembered read: once it is revoked, the next call is refused and spends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_credential_spends_nothing_on_a_remembered_read() {
    use authorizer::CallKey;
    use credentials::{Credentials, Role, new_token};
    let db = TestDb::new().await;
    let (authority, grant_id, now) = lesson_grant(&db).await;
    let credentials = Credentials::postgres(db.pool(1));
    let id =
        credentials.register(&new_token(), "tenant-1", Role::Worker, Some("owner"), None).await.unwrap().credential_id;
    let req = request("s1", "hola");
    let view = |_: &[SiteScope]| req.view.clone();
    let call = |n: u8| {
        let key = CallKey::new(&tenant(), "s1", &format!("call-{n}"), &[n; 32]);
        authority.authorize(&req, &view, now, key, Some(id))
    };
    for n in 1..=2 {
        let a = call(n).await.unwrap();
        assert!(matches!(a.decision, Decision::Allow { use_ordinal: Some(o), .. } if o == u32::from(n)), "{a:?}");
    }
    assert_eq!(authority.backend().remembered_uses(), 1, "the second use on the read the first made");
    assert!(credentials.revoke("tenant-1", id).await.unwrap());
    let refused = call(3).await.unwrap_err();
    assert!(matches!(refused, authorizer::AuthorityError::Store(authorizer::StoreError::CallerRefused)), "{refused:?}");
    assert_eq!(authority.backend().remembered_uses(), 1);
    assert_eq!(actions_used(&db, grant_id).await, 2, "nothing spent by the revoked credential");
}

/// A card decided on a read from before the owner's Stop and written while the Stop runs is
/// never left pending in the stopped chat: the card holds the session row as read, so the
/// Stop waits for it and denies it (or the card is decided again and denied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_racing_the_owners_stop_is_never_left_pending() {
    let db = TestDb::new().await;
    let authority = Arc::new(Authority::new(PgGrants::new(db.store(4)), Policy::empty(), tenant()));
    let created = SessionCreated {
        session_id: "s1".into(),
        tenant_id: "tenant-1".into(),
        principal_id: "owner".into(),
        browser_profile_id: Some("profile-1".into()),
        schedule_id: None,
        surface: Surface::Interactive,
    };
    let claim = Command::ClaimProfile { profile_id: "profile-1".into(), owner_principal_id: "owner".into() };
    authority.execute(claim, "profiles").await.unwrap();
    authority.execute(Command::CreateSession(created), "owner").await.unwrap();
    let admin = db.client().await;
    // The card's insert waits on a lock the test holds.
    admin
        .batch_execute(
            "CREATE FUNCTION hold_card() RETURNS trigger LANGUAGE plpgsql AS $$ \
               BEGIN IF NEW.event_type = 'approval.requested' THEN PERFORM pg_advisory_xact_lock_shared(42); \
               END IF; RETURN NEW; END $$; \
             CREATE TRIGGER hold_card BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION hold_card(); \
             SELECT pg_advisory_lock(42);",
        )
        .await
        .unwrap();
    let now = OffsetDateTime::now_utc();
    let card = {
        let authority = Arc::clone(&authority);
        tokio::spawn(async move { authority.authorize_uncalled(&request("s1", "hola"), now, Uuid::new_v4()).await })
    };
    let waiting = |what: &'static str| {
        let admin = &admin;
        async move {
            admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                     AND wait_event_type = 'Lock' AND wait_event = $1",
                    &[&what],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
        }
    };
    tests::poll_until(
        "the card held at its insert",
        std::time::Duration::from_secs(20),
        std::time::Duration::from_millis(20),
        || async { (waiting("advisory").await > 0).then_some(()) },
    )
    .await;
    let stop = {
        let authority = Arc::clone(&authority);
        let stop = Command::StopSession { session_id: "s1".into(), principal_id: "owner".into(), now };
        tokio::spawn(async move { authority.execute(stop, "owner").await })
    };
    // The Stop either finishes (the card held nothing) or waits behind the card's hold.
    tests::poll_until(
        "the stop done or waiting",
        std::time::Duration::from_secs(20),
        std::time::Duration::from_millis(20),
        || async { (stop.is_finished() || waiting("transactionid").await + waiting("tuple").await > 0).then_some(()) },
    )
    .await;
    admin.batch_execute("SELECT pg_advisory_unlock(42)").await.unwrap();
    stop.await.unwrap().unwrap();
    let (decision, _) = card.await.unwrap().unwrap();
    let world = authority.world().await.unwrap();
    let pending: Vec<_> =
        world.approvals.values().filter(|a| a.state == authorizer::domain::ApprovalState::Pending).collect();
    assert!(pending.is_empty(), "a card is pending in the stopped chat: {pending:?} ({decision:?})");
    assert!(world.sessions["s1"].stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_authorizations_give_exactly_200_allows_20_times() {
    let db = TestDb::new().await;
    let authority = Arc::new(Authority::new(PgGrants::new(db.store(64)), Policy::empty(), tenant()));
    let settings = TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/lesson").unwrap() };
    authority.execute(Command::ChangeSettings(settings), "operator").await.unwrap();
    for round in 0..20 {
        let now = OffsetDateTime::now_utc();
        let session = format!("s{round}");
        let grant_id = session_with_grant(&authority, &session, now).await;
        let tasks: Vec<_> = (0..1000)
            .map(|_| {
                let (authority, session) = (Arc::clone(&authority), session.clone());
                let text: String = "ab".repeat(rand::rng().random_range(0..=10));
                tokio::spawn(async move {
                    authority.authorize_uncalled(&request(&session, &text), now, Uuid::new_v4()).await.unwrap().0
                })
            })
            .collect();
        let mut ordinals = Vec::new();
        let mut asked = 0;
        for t in tasks {
            match t.await.unwrap() {
                Decision::Allow { use_ordinal: Some(o), grant_id: Some(g), .. } if g == grant_id => ordinals.push(o),
                Decision::RequireApproval { .. } => asked += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        ordinals.sort_unstable();
        assert_eq!(ordinals, (1..=200).collect::<Vec<_>>(), "round {round}");
        assert_eq!(asked, 800);
        // A request that found the row spent decided again from a fresh read and ended the
        // grant as exhausted; the next request finds no grant at all.
        let (next, _) = authority.authorize_uncalled(&request(&session, "x"), now, Uuid::new_v4()).await.unwrap();
        assert!(matches!(&next, Decision::RequireApproval { reason: None, .. }), "{next:?}");
        check_consistent(authority.backend(), grant_id, &Round::default()).await;
        let stream = authorizer::domain::entity_stream(&tenant(), "grant", &grant_id).unwrap();
        let ends: Vec<EndReason> = authority
            .backend()
            .store()
            .read_stream(&stream, 1)
            .await
            .unwrap()
            .iter()
            .filter_map(|e| match Event::from_recorded(e).unwrap() {
                Event::TaskGrantEnded(x) => Some(x.reason),
                _ => None,
            })
            .collect();
        assert_eq!(ends, [EndReason::Exhausted], "ended exactly once, as exhausted");
    }
}
