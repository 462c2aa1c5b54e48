//! Differential property test: random command sequences against the in-memory authority and the
//! PostgreSQL one, both deciding per request from what `state::load` reads, give the same
//! decisions, the same events and the same inline state, and that state is the log folded.

use authorizer::PgGrants;
use authorizer::domain::{AuthorizeRequest, Command, Decision, DomainError, RunContext, Versions};
use authorizer::policy::Policy;
use authorizer::scopes::{TaskGrantSettings, parse_scopes};
use authorizer::{Authority, AuthorityError, Backend, MemoryGrants};
use classifier::{Action, ElementFacts, FieldKind, PageFacts};
use grant_domain::catalogue::{
    ActionView, Author, Event, Resolution, SessionCreated, SessionMessageRecorded, SignInPhase, Surface,
};
use ledger::TenantId;
use proptest::prelude::*;
use tests::TestDb;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

#[derive(Debug, Clone)]
enum Op {
    Message(bool),
    SignIn,
    Act { kind: u8, chars: usize },
    Resolve(u8),
    Revoke,
    Advance(i64),
    Settings(u8),
    Sweep,
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => any::<bool>().prop_map(Op::Message),
        1 => Just(Op::SignIn),
        10 => (0u8..8, 0usize..300).prop_map(|(kind, chars)| Op::Act { kind, chars }),
        4 => prop_oneof![3 => Just(1u8), 1 => 0u8..4].prop_map(Op::Resolve),
        1 => Just(Op::Revoke),
        2 => prop_oneof![4 => 0i64..5, 1 => 25i64..40].prop_map(Op::Advance),
        1 => (0u8..3).prop_map(Op::Settings),
        1 => Just(Op::Sweep),
        1 => Just(Op::Expire),
    ]
}

/// Everything a step produced, in a form both backends can be compared on.
#[derive(Debug, PartialEq)]
enum Step {
    Decided(Decision, Vec<Event>),
    Executed(Vec<Event>),
    Refused(DomainError),
}

fn step(result: Result<Step, AuthorityError>) -> Step {
    match result {
        Ok(s) => s,
        Err(AuthorityError::Domain(e)) => Step::Refused(e),
        Err(AuthorityError::Store(e)) => panic!("store error: {e}"),
        Err(AuthorityError::Contended) => panic!("contended with no other request running"),
    }
}

fn scope_settings(which: u8) -> TaskGrantSettings {
    match which {
        0 => TaskGrantSettings { enabled: true, scopes: parse_scopes("https://www.lesson.test/lesson").unwrap() },
        1 => TaskGrantSettings::default(),
        _ => TaskGrantSettings { enabled: true, scopes: vec![] },
    }
}

fn request(kind: u8, chars: usize) -> AuthorizeRequest {
    let mut element = ElementFacts { role: "button".into(), name: Some("el gato".into()), ..ElementFacts::default() };
    let mut action = Action::Click;
    let mut page = "https://www.lesson.test/lesson/unit-1".to_owned();
    let mut run = RunContext { interactive: true, top_level: true, turn_visible: true };
    let mut turn = vec!["browser.act".to_owned()];
    match kind {
        1 => element.name = Some("Pay $4".into()),
        2 => {
            element.field_kind = FieldKind::Text;
            action = Action::Type { text: "a".repeat(chars.min(256)) };
        }
        3 => page = "https://www.lesson.test/shop".into(),
        4 => run.top_level = false,
        5 => turn.push("memory.read".into()),
        6 => run.turn_visible = false,
        _ => {}
    }
    AuthorizeRequest {
        tenant_id: "tenant-1".into(),
        principal_id: "owner".into(),
        session_id: "s1".into(),
        run_id: "run".into(),
        tool_call_id: "call".into(),
        run,
        turn_tool_calls: turn,
        versions: Versions { agent: "agent-7".into(), policy: Policy::empty().version },
        element,
        page: PageFacts { url: page },
        action,
        view: ActionView {
            action_kind: "click".into(),
            describable: true,
            action_summary: "Click a button".into(),
            ..ActionView::default()
        },
        snapshot: None,
        field_id: None,
        facts_profile: None,
        form: None,
        text_sha256: None,
    }
}

/// Runs `ops` against one authority, returning every step.
async fn play<B: Backend>(authority: &Authority<B>, ops: &[Op]) -> Vec<Step> {
    let mut now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
    let mut ids = 0u128;
    let mut next_id = || {
        ids += 1;
        Uuid::from_u128(ids)
    };
    let mut steps = Vec::new();
    let exec = |c: Command| async { step(authority.execute(c, "owner").await.map(Step::Executed)) };
    steps.push(exec(Command::ChangeSettings(scope_settings(0))).await);
    let claim = Command::ClaimProfile { profile_id: "profile-1".into(), owner_principal_id: "owner".into() };
    steps.push(exec(claim).await);
    steps.push(
        exec(Command::CreateSession(SessionCreated {
            session_id: "s1".into(),
            tenant_id: "tenant-1".into(),
            principal_id: "owner".into(),
            browser_profile_id: Some("profile-1".into()),
            schedule_id: None,
            surface: Surface::Interactive,
        }))
        .await,
    );
    let owner_said = SessionMessageRecorded { session_id: "s1".into(), message_id: "m0".into(), author: Author::Owner };
    steps.push(exec(Command::RecordMessage(owner_said)).await);
    let mut last_approval = None;
    // Every sequence starts inside a live grant, then wanders.
    let prefix = [Op::Act { kind: 0, chars: 0 }, Op::Resolve(1), Op::Act { kind: 0, chars: 0 }];
    for op in prefix.iter().chain(ops) {
        let s = match op {
            Op::Message(owner) => {
                let author = if *owner { Author::Owner } else { Author::Other };
                exec(Command::RecordMessage(SessionMessageRecorded {
                    session_id: "s1".into(),
                    message_id: "m".into(),
                    author,
                }))
                .await
            }
            Op::SignIn => {
                let owner_principal_id = Some("owner".into());
                exec(Command::AdvanceProfile {
                    profile_id: "profile-1".into(),
                    owner_principal_id,
                    phase: SignInPhase::Began,
                })
                .await
            }
            Op::Act { kind, chars } => {
                let id = next_id();
                let s = step(
                    authority
                        .authorize_uncalled(&request(*kind, *chars), now, id)
                        .await
                        .map(|(d, e)| Step::Decided(d, e)),
                );
                if matches!(&s, Step::Decided(Decision::RequireApproval { .. }, _)) {
                    last_approval = Some(id);
                }
                s
            }
            Op::Resolve(how) => {
                let Some(approval_id) = last_approval else { continue };
                let (resolution, repeated) = match how {
                    0 => (Resolution::ApproveOnce, None),
                    1 => (Resolution::ApproveForTask, scope_settings(0).scopes.first().cloned()),
                    2 => (Resolution::Deny, None),
                    _ => (Resolution::ApproveForTask, None),
                };
                exec(Command::ResolveApproval {
                    approval_id,
                    principal_id: "owner".into(),
                    resolution,
                    repeated_scope: repeated,
                    new_grant_id: next_id(),
                    versions: Versions { agent: "agent-7".into(), policy: Policy::empty().version },
                    now,
                    token_sha256: None,
                })
                .await
            }
            Op::Revoke => {
                let world = authority.world().await.unwrap();
                let Some(grant_id) = world.sessions.get("s1").and_then(|s| s.active_grant) else { continue };
                exec(Command::RevokeGrant { grant_id, principal_id: "owner".into() }).await
            }
            Op::Advance(minutes) => {
                now += Duration::minutes(*minutes);
                continue;
            }
            Op::Settings(which) => exec(Command::ChangeSettings(scope_settings(*which))).await,
            Op::Sweep => exec(Command::Sweep { now }).await,
            Op::Expire => exec(Command::ExpireApprovals { now }).await,
        };
        steps.push(s);
    }
    steps
}

/// Every event a store holds, decoded, in log order, with where each stands in the log.
async fn stored<S: ledger::EventStore>(store: &S, expected: usize) -> (Vec<Event>, Vec<ledger::Checkpoint>) {
    let all = ledger::contract::read_until(store, ledger::Checkpoint::START, |r| r.len() >= expected).await;
    (
        all.iter().map(|e| Event::from_recorded(e).unwrap()).collect(),
        all.iter().map(ledger::RecordedEvent::checkpoint).collect(),
    )
}

#[test]
fn memory_and_postgres_decide_and_record_alike() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 24, ..ProptestConfig::default() });
    let uses = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&prop::collection::vec(op(), 1..80), |ops| {
        rt.block_on(async {
            let tenant = TenantId::new("tenant-1").unwrap();
            let memory = Authority::new(MemoryGrants::default(), Policy::empty(), tenant.clone());
            let db = TestDb::new().await;
            let pg = Authority::new(PgGrants::new(db.store(4)), Policy::empty(), tenant);
            let a = play(&memory, &ops).await;
            let b = play(&pg, &ops).await;
            prop_assert_eq!(a.len(), b.len());
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                prop_assert_eq!(x, y, "step {} of {:?}", i, ops);
            }
            prop_assert_eq!(memory.world().await.unwrap(), pg.world().await.unwrap());
            let (in_memory, _) = stored(&memory.backend().store, 0).await;
            let (in_pg, at) = stored(pg.backend().store(), in_memory.len()).await;
            prop_assert_eq!(
                &in_memory,
                &in_pg,
                "the stores recorded different logs; PostgreSQL (tx_id, position): {:?}",
                at
            );
            // The inline state is the log folded: what a replay would rebuild.
            prop_assert_eq!(authorizer::fold(&in_pg), pg.world().await.unwrap());
            let n = a.iter().filter(|s| matches!(s, Step::Decided(Decision::Allow { .. }, _))).count();
            uses.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // Every case reached the interesting part: grant-authorized uses (at least the prefix's).
    assert!(uses.into_inner() >= 24, "a sequence never used a grant");
}
