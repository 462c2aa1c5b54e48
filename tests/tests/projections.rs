//! Async projections against real PostgreSQL: exactly-once application across a crash, one
//! leader at a time, lag rather than skips behind an open transaction, and verify against replay.

use std::time::Duration;

use authorizer::Authority;
use authorizer::PgGrants;
use authorizer::domain::{AuthorizeRequest, Command, Decision, RunContext, Versions};
use authorizer::policy::Policy;
use authorizer::scopes::{TaskGrantSettings, parse_scopes};
use classifier::{Action, ElementFacts, PageFacts};
use grant_domain::catalogue::{ActionView, Author, Resolution, SessionCreated, SessionMessageRecorded, Surface};
use ledger::contract::{stream, tenant};
use ledger::{AppendRequest, EventStore, ExpectedVersion, PgStore, TenantId};
use projections::worker::Worker;
use projections::{Projection, verify};
use tests::TestDb;
use time::OffsetDateTime;
use uuid::Uuid;

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
            element_name: Some("Answer".into()),
            detail: Some(text.into()),
            action_summary: "Type into a text field on www.lesson.test/lesson".into(),
            ..ActionView::default()
        },
        snapshot: None,
        field_id: None,
        facts_profile: None,
        form: None,
        text_sha256: None,
    }
}

/// A lesson in `session`: a card, "Allow for this task", then `uses` covered acts. Returns the grant.
async fn lesson(authority: &Authority<PgGrants>, session: &str, uses: usize) -> Uuid {
    let now = OffsetDateTime::now_utc();
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
    let resolve = Command::ResolveApproval {
        approval_id,
        principal_id: "owner".into(),
        resolution: Resolution::ApproveForTask,
        repeated_scope: Some(parse_scopes("https://www.lesson.test/lesson").unwrap().remove(0)),
        new_grant_id: grant_id,
        versions: Versions { agent: "agent-7".into(), policy: Policy::empty().version },
        now,
        token_sha256: None,
    };
    authority.execute(resolve, "owner").await.unwrap();
    for i in 0..uses {
        let (decision, _) =
            authority.authorize_uncalled(&request(session, &format!("word {i}")), now, Uuid::new_v4()).await.unwrap();
        assert!(matches!(decision, Decision::Allow { .. }), "{decision:?}");
    }
    grant_id
}

/// A catalogue event of its own session.
fn started(session: &str) -> ledger::NewEvent {
    let created = SessionCreated {
        session_id: session.into(),
        tenant_id: "tenant-a".into(),
        principal_id: "owner".into(),
        browser_profile_id: None,
        schedule_id: None,
        surface: Surface::Interactive,
    };
    grant_domain::catalogue::Event::SessionCreated(created).to_new(Uuid::new_v4(), ledger::Metadata::by("owner"))
}

async fn authority(db: &TestDb) -> Authority<PgGrants> {
    let authority = Authority::new(PgGrants::new(db.store(8)), Policy::empty(), TenantId::new("tenant-1").unwrap());
    let settings = TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/lesson").unwrap() };
    authority.execute(Command::ChangeSettings(settings), "operator").await.unwrap();
    authority
}

/// Steps until a step applies nothing, with a deadline (the gap-safe read lags while another
/// transaction in the cluster is open).
async fn catch_up(worker: &Worker, client: &mut tokio_postgres::Client, events: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        worker.step(client).await.unwrap();
        let s = projections::worker::status(client).await.unwrap();
        let me = s.iter().find(|s| s.projection == worker.projection).unwrap();
        if me.applied >= events && me.lag_events == 0 {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "not caught up within 30 s: {me:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn event_count(db: &TestDb) -> u64 {
    let n: i64 = db.client().await.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get(0);
    u64::try_from(n).unwrap()
}

async fn verify_all(db: &TestDb) -> Vec<verify::Report> {
    let mut client = db.client().await;
    verify::all(&mut client).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_build_every_view_equal_to_the_replay_and_verify_catches_an_edit() {
    let db = TestDb::new().await;
    let a = authority(&db).await;
    let grant = lesson(&a, "s1", 5).await;
    lesson(&a, "s2", 2).await;
    let store = db.store(4);
    let events = event_count(&db).await;
    for p in Projection::ALL {
        let mut w = Worker::new(p, db.config.clone(), store.clone());
        w.batch = 7; // several batches, cut inside transactions
        let mut client = w.connect().await;
        catch_up(&w, client.as_mut().unwrap(), events).await;
    }
    for r in verify_all(&db).await {
        assert!(r.ok(), "{r}");
        assert!(r.actual_rows > 0, "{r}");
    }
    // The grants' one read model, the authorizer's inline table, says what the owner's routes show.
    let row = db
        .client()
        .await
        .query_one("SELECT actions_used, end_reason FROM active_task_grants WHERE grant_id = $1", &[&grant])
        .await
        .unwrap();
    assert_eq!((row.get::<_, i32>(0), row.get::<_, Option<String>>(1)), (5, None));
    // The audit log says what each unreviewed act was and under which authorization.
    let rows = db
        .client()
        .await
        .query(
            "SELECT summary FROM audit_log WHERE grant_id = $1 AND authorization_text = 'Allowed by task permission' \
             ORDER BY audit_log.global_position",
            &[&grant],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(
        rows[0].get::<_, String>(0),
        "Type into a text field on www.lesson.test/lesson, element named \"Answer\", value \"word 0\" (use 1)"
    );

    // The views no reader had are gone: one read model per question.
    let gone: i64 = db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname IN ('grant_list', 'grant_list_status', 'pending_approvals')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(gone, 0);
    let activity: i64 = db
        .client()
        .await
        .query_one("SELECT count(*) FROM session_activity WHERE session_id = 's1'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(activity >= 9, "session, message, card, resolution, grant and five uses: {activity}");

    // An edit by hand shows, with the row.
    db.client().await.batch_execute("UPDATE audit_log SET summary = 'edited 99'").await.unwrap();
    let reports = verify_all(&db).await;
    let bad = reports.iter().find(|r| r.view == "audit_log").unwrap();
    assert!(!bad.ok() && bad.to_string().contains("edited 99"), "{bad}");
    db.client().await.batch_execute("UPDATE active_task_grants SET chars_used = chars_used + 1").await.unwrap();
    let inline = verify_all(&db).await.into_iter().find(|r| r.view == "active_task_grants").unwrap();
    assert!(!inline.ok(), "the inline projection is verified too: {inline}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_apply_and_commit_applies_nothing_and_the_next_applies_once() {
    let db = TestDb::new().await;
    let a = authority(&db).await;
    lesson(&a, "s1", 3).await;
    let events = event_count(&db).await;
    let w = Worker::new(Projection::AuditLog, db.config.clone(), db.store(4));
    let mut client = w.connect().await.unwrap();
    let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    let killer = db.client().await;
    // Another test's open transaction may hold the gap-safe read back for a moment.
    ledger::contract::read_until(&w.store, ledger::Checkpoint::START, |r| r.len() as u64 >= events).await;
    let killed = w
        .step_paused(&mut client, async {
            killer.execute("SELECT pg_terminate_backend($1)", &[&pid]).await.unwrap();
        })
        .await;
    assert!(killed.is_err(), "the commit must fail: {killed:?}");
    let mut fresh = w.connect().await.unwrap();
    let s = projections::worker::status(&fresh).await.unwrap();
    assert_eq!(s.iter().find(|s| s.projection == Projection::AuditLog).unwrap().applied, 0, "nothing applied");
    catch_up(&w, &mut fresh, events).await;
    let rows: i64 = fresh.query_one("SELECT count(*) FROM audit_log", &[]).await.unwrap().get(0);
    assert_eq!(u64::try_from(rows).unwrap(), events, "each event once");
    assert!(verify_all(&db).await.iter().all(verify::Report::ok));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_leads_and_a_standby_takes_over_when_it_dies() {
    let db = TestDb::new().await;
    let store = db.store(4);
    let (first, second) = (
        Worker::new(Projection::AuditLog, db.config.clone(), store.clone()),
        Worker::new(Projection::AuditLog, db.config.clone(), store.clone()),
    );
    let leader = first.connect().await.unwrap();
    let standby = second.connect().await.unwrap();
    assert!(first.try_lead(&leader).await.unwrap());
    assert!(!second.try_lead(&standby).await.unwrap(), "one leader at a time");
    drop(leader); // the leader's process dies: its session and its lock go
    tests::poll_until("the standby taking over", Duration::from_secs(10), Duration::from_millis(20), || async {
        second.try_lead(&standby).await.unwrap().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_lags_behind_an_open_transaction_and_never_skips() {
    let db = TestDb::new().await;
    let store: PgStore = db.store(4);
    let w = Worker::new(Projection::AuditLog, db.config.clone(), store.clone());
    let mut client = w.connect().await.unwrap();
    // A holds an older transaction id open; B commits after it.
    let a = tests::HeldAppend::start(
        &store,
        AppendRequest::single(tenant(), stream("session"), ExpectedVersion::NoStream, vec![started("a")]),
    )
    .await;
    store
        .append(AppendRequest::single(tenant(), stream("session"), ExpectedVersion::NoStream, vec![started("b")]))
        .await
        .unwrap();
    assert_eq!(w.step(&mut client).await.unwrap(), 0, "B waits behind the older open A");
    a.commit().await.unwrap();
    catch_up(&w, &mut client, 2).await;
    let rows =
        client.query("SELECT global_position FROM audit_log ORDER BY audit_log.global_position", &[]).await.unwrap();
    assert_eq!(rows.len(), 2, "both, once each");
}

/// Rebuild under live load: while authorizations run and the live workers apply, every view is
/// rebuilt blue/green; every authorization is allowed, and after the workers catch up every view
/// equals the replay of the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_under_live_load_swaps_in_a_view_equal_to_the_replay() {
    let db = TestDb::new().await;
    let a = std::sync::Arc::new(authority(&db).await);
    lesson(&a, "s1", 20).await;
    let store = db.store(4);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let workers: Vec<_> = Projection::ALL
        .into_iter()
        .map(|p| {
            let mut w = Worker::new(p, db.config.clone(), store.clone());
            w.poll = Duration::from_millis(20);
            let mut stopped = stopped.clone();
            tokio::spawn(w.run(async move {
                let _ = stopped.wait_for(|s| *s).await;
            }))
        })
        .collect();
    let load = {
        let a = std::sync::Arc::clone(&a);
        tokio::spawn(async move { lesson(&a, "s2", 150).await })
    };
    for p in Projection::ALL {
        let mut client = db.client().await;
        let live = projections::worker::status(&client).await.unwrap();
        let live = live.iter().find(|s| s.projection == p).unwrap().checkpoint;
        let rebuilt = projections::rebuild::rebuild(&mut client, &store, p, 50, |_| {}).await.unwrap();
        // The read is gap-safe cluster-wide, so another test's open transaction may hold it back:
        // what is asserted is that the swap never goes behind the live generation, and that the
        // rebuild applied exactly the events up to where it swapped.
        assert!(rebuilt.checkpoint >= live, "{p:?} swapped at {:?}, behind the live {live:?}", rebuilt.checkpoint);
        let upto: i64 = client
            .query_one(
                "SELECT count(*) FROM events WHERE (tx_id, global_position) <= ($1::text::xid8, $2)",
                &[&rebuilt.checkpoint.tx_id.to_string(), &i64::try_from(rebuilt.checkpoint.position).unwrap()],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(rebuilt.events, u64::try_from(upto).unwrap(), "{p:?}");
    }
    load.await.expect("every authorization under load was allowed");
    let events = event_count(&db).await;
    tests::poll_until(
        "workers catching up after the swap",
        Duration::from_secs(30),
        Duration::from_millis(20),
        || async {
            let client = db.client().await;
            let s = projections::worker::status(&client).await.unwrap();
            s.iter().all(|s| s.lag_events == 0 && s.applied == events).then_some(())
        },
    )
    .await;
    let _ = stop.send(true);
    for w in workers {
        w.await.unwrap();
    }
    for r in verify_all(&db).await {
        assert!(r.ok(), "{r}");
    }
}

/// The auditor's tools: a grant's story replayed from the log in order; an export that verifies
/// against its manifest and the log, and fails once edited; an event edited in the table (the
/// triggers switched off by a superuser) fails the chain check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_replay_export_and_verify_catch_edits() {
    let db = TestDb::new().await;
    let a = authority(&db).await;
    let grant = lesson(&a, "s1", 3).await;
    lesson(&a, "s2", 1).await;
    let store = db.store(4);
    let events = event_count(&db).await;
    ledger::contract::read_until(&store, ledger::Checkpoint::START, |r| r.len() as u64 >= events).await;

    let story =
        ops::audit::replay(&store, &ops::audit::Filter { grant: Some(grant), ..Default::default() }).await.unwrap();
    let kinds: Vec<&str> = story.iter().map(|r| r.event_type.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "approval.requested",
            "approval.resolved",
            "browser.task_grant.created",
            "tool.call.authorized",
            "tool.call.authorized",
            "tool.call.authorized"
        ],
        "from the card to the last use, in order"
    );
    assert!(story.windows(2).all(|w| w[0].global_position < w[1].global_position));

    let dir = std::env::temp_dir().join(format!("audit-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("export.jsonl");
    let manifest = ops::audit::export(&store, &ops::audit::Filter::default(), &file).await.unwrap();
    assert_eq!(manifest.count, events);
    ops::audit::verify_export(&store, &file).await.expect("a fresh export verifies");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replacen("Allowed by task permission", "Allowed by the owner", 1)).unwrap();
    let err = ops::audit::verify_export(&store, &file).await.unwrap_err().to_string();
    assert!(err.contains("was changed"), "{err}");
    // A line removed, and the manifest rewritten to match the shorter file, still fails: the file
    // must be the log's own rows.
    let shorter: String = text.lines().enumerate().filter(|(i, _)| *i != 3).map(|(_, l)| format!("{l}\n")).collect();
    std::fs::write(&file, &shorter).unwrap();
    let manifest_file = dir.join("export.jsonl.manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest_file).unwrap()).unwrap();
    m["count"] = (events - 1).into();
    m["sha256"] = hex_sha256(shorter.as_bytes()).into();
    std::fs::write(&manifest_file, m.to_string()).unwrap();
    let err = ops::audit::verify_export(&store, &file).await.unwrap_err().to_string();
    assert!(err.contains("line 4: the log says"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();

    ops::check::run(&db.config, 100).await.expect("an untouched ledger checks");
    let admin = db.client().await;
    admin
        .batch_execute(
            "SET session_replication_role = replica; \
             UPDATE events SET payload = jsonb_set(payload, '{typed_chars}', '0') \
               WHERE event_type = 'tool.call.authorized' AND global_position = \
               (SELECT min(global_position) FROM events WHERE event_type = 'tool.call.authorized'); \
             RESET session_replication_role;",
        )
        .await
        .unwrap();
    let err = format!("{:#}", ops::check::run(&db.config, 100).await.unwrap_err());
    assert!(err.contains("does not match its content"), "{err}");
}

fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Rows built by another version of a projection's code are stale: start-up refuses them and
/// names the command, a worker of this build writes nothing onto them, and a rebuild makes them
/// current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_projection_is_refused_until_rebuilt() {
    let db = TestDb::new().await;
    let a = authority(&db).await;
    lesson(&a, "s1", 2).await;
    let store = db.store(4);
    let events = event_count(&db).await;
    ledger::contract::read_until(&store, ledger::Checkpoint::START, |r| r.len() as u64 >= events).await;
    let w = Worker::new(Projection::AuditLog, db.config.clone(), store.clone());
    let mut client = w.connect().await.unwrap();
    catch_up(&w, &mut client, events).await;
    client.execute("UPDATE projection_checkpoints SET version = 0 WHERE projection = 'audit_log'", &[]).await.unwrap();
    let err = projections::worker::ensure_current(&client).await.unwrap_err().to_string();
    assert!(err.contains("grantctl projections rebuild audit_log"), "{err}");
    // New events, readable, that a worker of this build would write if it took stale rows.
    lesson(&a, "s2", 1).await;
    let more = event_count(&db).await;
    ledger::contract::read_until(&store, ledger::Checkpoint::START, |r| r.len() as u64 >= more).await;
    let rows_before: i64 = client.query_one("SELECT count(*) FROM audit_log", &[]).await.unwrap().get(0);
    assert_eq!(w.step(&mut client).await.unwrap(), 0, "nothing written onto another version's rows");
    let rows_after: i64 = client.query_one("SELECT count(*) FROM audit_log", &[]).await.unwrap().get(0);
    assert_eq!(rows_after, rows_before, "no row written");
    assert!(rows_before < i64::try_from(more).unwrap(), "the new events were there to write");
    projections::rebuild::rebuild(&mut client, &store, Projection::AuditLog, 100, |_| {}).await.unwrap();
    projections::worker::ensure_current(&client).await.expect("current after the rebuild");
    assert!(verify::projection(&mut client, Projection::AuditLog).await.unwrap().ok());
}

/// The authorizer's inline state verifies against each tenant's log folded, and an edit to it
/// (a deleted session revived by hand) is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_authority_state_verifies_against_the_log_and_an_edit_is_named() {
    let db = TestDb::new().await;
    let a = authority(&db).await;
    lesson(&a, "s1", 3).await;
    lesson(&a, "s2", 1).await;
    let (ok, said) = ops::authority::authority_verify(&db.config).await.unwrap();
    assert!(ok, "{said}");
    assert!(said.contains("equal to its log folded"), "{said}");
    assert!(said.contains("every stored version is its stream's head"), "{said}");
    // A stored version off by one is named: the next command on that session would conflict.
    let client = db.client().await;
    client.execute("UPDATE authority_sessions SET version = version + 1 WHERE session_id = 's1'", &[]).await.unwrap();
    let (ok, said) = ops::authority::authority_verify(&db.config).await.unwrap();
    assert!(!ok && said.contains("session \"s1\" of tenant-1 is stored at version"), "{said}");
    client.execute("UPDATE authority_sessions SET version = version - 1 WHERE session_id = 's1'", &[]).await.unwrap();
    db.client()
        .await
        .execute(
            "UPDATE authority_sessions SET state = jsonb_set(state, '{deleted}', 'true') WHERE session_id = 's2'",
            &[],
        )
        .await
        .unwrap();
    let (ok, said) = ops::authority::authority_verify(&db.config).await.unwrap();
    assert!(!ok);
    assert!(said.contains("session \"s2\""), "{said}");
    let err = ops::audit::projections_verify(&db.config, Some("authority")).await.unwrap_err();
    assert!(format!("{err}").contains("differs from its log folded"), "{err}");
}

/// Workers reading one event, two or seven at a time build views equal to the replay from a log
/// whose transaction ids cross a power of ten (…999 → …000), where ids compared as text would
/// cut a page past events never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_page_across_a_transaction_id_digit_boundary() {
    use ledger::contract::ContractStore;
    let db = TestDb::new().await;
    let a = authority(&db).await;
    let store = db.store(4);
    // Each command below is one transaction; other tests may take ids meanwhile, so the sessions
    // go on until two of this test's transactions are past the boundary, and a first one already
    // past it tries the next power (at most three times).
    const LEAD: u64 = 60;
    let mut sessions = 0;
    for attempt in 1..=3 {
        let next = store.next_tx_id().await;
        let boundary = std::iter::successors(Some(10u64), |p| p.checked_mul(10)).find(|&p| p > next + LEAD).unwrap();
        assert!(
            boundary - next <= 20_000_000,
            "transaction ids are at {next}: start a fresh cluster (`grantctl db stop --dir target/pg-test`)"
        );
        store.burn_tx_ids(boundary - LEAD).await;
        let first = store.next_tx_id().await;
        while store.next_tx_id().await < boundary + 2 {
            sessions += 1;
            lesson(&a, &format!("s{sessions}"), 20).await;
        }
        if first < boundary {
            break;
        }
        assert!(attempt < 3, "other sessions took ids past {boundary} before this test's first transaction");
    }
    let events = event_count(&db).await;
    for batch in [1, 2, 7] {
        // Each batch size builds the view from the start of the log.
        db.client()
            .await
            .batch_execute("DELETE FROM audit_log; DELETE FROM projection_checkpoints WHERE projection = 'audit_log'")
            .await
            .unwrap();
        let mut w = Worker::new(Projection::AuditLog, db.config.clone(), store.clone());
        w.batch = batch;
        let mut client = w.connect().await;
        catch_up(&w, client.as_mut().unwrap(), events).await;
        for r in verify_all(&db).await {
            assert!(r.ok(), "batch {batch}: {r}");
        }
    }
}
