//! What one replica records, the others obey; approvals travel; caps hold under kills.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

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
    let (t, _replicas, mut ca, mut cb) = s1_on_two_replicas(&db).await;
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
        let uses = recorded_uses(&db, &grant_id).await;
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
    let (ok, said) = ops::authority::authority_verify(&db.config).await.unwrap();
    assert!(ok, "{said}");
}

/// A card lives as long as its run waits. The run's end, recorded through one replica, withdraws
/// the card in the same write: a wait on another replica returns WITHDRAWN, and the owner's
/// answer through that replica is refused and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_end_withdraws_its_card_on_every_replica() {
    let db = TestDb::new().await;
    let (t, _replicas, mut ca, mut cb) = s1_on_two_replicas(&db).await;
    let Decision::RequireApproval(card) = decide(&mut ca, &t, act("s1", "agent-7")).await else { panic!("asks") };
    let wait =
        pb::AwaitApprovalRequest { session_id: "s1".into(), approval_id: card.approval_id.clone(), wait_ms: 20_000 };
    let mut waiter = cb.clone();
    let waiting = {
        let req = t.worker(wait);
        tokio::spawn(async move { waiter.await_approval(req).await })
    };
    let end = pb::RecordRunRequest {
        session_id: "s1".into(),
        run_id: "run".into(),
        kind: pb::RunEventKind::Escalated as i32,
        detail: "approval_timeout".into(),
        account: None,
    };
    ca.record_run(t.worker(end)).await.unwrap();
    let seen = waiting.await.unwrap().unwrap().into_inner();
    assert_eq!(seen.status, "WITHDRAWN", "{seen:?}");
    assert!(seen.approval_token.is_empty());
    let before = events_of(&db).await;
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    let refused = cb.resolve_approval(t.owner(resolve)).await.unwrap_err();
    assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    assert_eq!(events_of(&db).await, before, "the refused answer wrote nothing");
    let read = pb::GetApprovalRequest { approval_id: card.approval_id, min_position: None };
    assert_eq!(cb.get_approval(t.owner(read)).await.unwrap().into_inner().status, "WITHDRAWN");
}

/// Workers wait for twenty cards on one replica. The log moving for another session answers none
/// of them; the owner's answer through the other replica ends exactly its own card's wait. A
/// renewed wait starts without a read of its own, and still checks who asks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_waits_end_on_their_own_answer_only() {
    let db = TestDb::new().await;
    let (t, _replicas, mut ca, mut cb) = s1_on_two_replicas(&db).await;
    let mut cards = Vec::new();
    for _ in 0..20 {
        let Decision::RequireApproval(card) = decide(&mut ca, &t, act("s1", "agent-7")).await else { panic!("asks") };
        cards.push(card.approval_id);
    }
    let wait = |approval: &str, wait_ms| pb::AwaitApprovalRequest {
        session_id: "s1".into(),
        approval_id: approval.into(),
        wait_ms,
    };
    // A first look at each finds it pending; the waits that follow are renewals.
    for card in &cards {
        let seen = cb.await_approval(t.worker(wait(card, 0))).await.unwrap().into_inner();
        assert_eq!(seen.status, "PENDING", "{seen:?}");
    }
    let mut waits: Vec<_> = cards
        .iter()
        .map(|card| {
            let (mut waiter, req) = (cb.clone(), t.worker(wait(card, 20_000)));
            tokio::spawn(async move { waiter.await_approval(req).await })
        })
        .collect();
    // Another worker of the tenant cannot ride on what the owner's worker read: not its session.
    let intruder = new_token();
    let credentials = Credentials::postgres(db.pool(1));
    credentials.register(&intruder, TENANT, Role::Worker, Some("intruder"), None).await.unwrap();
    let refused = cb.await_approval(Request::new(wait(&cards[0], 0))).await;
    assert!(refused.is_err(), "a call with no credential is refused");
    let refused = cb.await_approval(tests::bearer(&intruder, wait(&cards[0], 0))).await.unwrap_err();
    assert_eq!(refused.code(), Code::NotFound, "{refused:?}");
    // Another session's acts move the log; no wait ends for them.
    grant_across(&mut ca, &mut cb, &t, "s2", "p2").await;
    for _ in 0..5 {
        assert!(matches!(decide(&mut ca, &t, act("s2", "agent-7")).await, Decision::Allow(_)));
    }
    let resolve = pb::ResolveApprovalRequest {
        approval_id: cards[7].clone(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    ca.resolve_approval(t.owner(resolve)).await.unwrap();
    let answered = waits.remove(7).await.unwrap().unwrap().into_inner();
    assert_eq!(answered.status, "APPROVED", "{answered:?}");
    assert!(waits.iter().all(|w| !w.is_finished()), "the other nineteen still wait");
    for w in waits {
        w.abort();
    }
}

/// Two replicas on `db`, the lesson's settings, and the owner's session `s1` on profile `p1`
/// created through the first: the tokens, the replicas (stopped when dropped) and a client of each.
async fn s1_on_two_replicas(
    db: &TestDb,
) -> (Tokens, (Replica, Replica), AuthorizerClient<Channel>, AuthorizerClient<Channel>) {
    let t = Tokens::register(db, TENANT).await;
    apply_settings(&db.url(), TENANT, lesson()).await.unwrap();
    let (a, b) = (Replica::start(db, &[]).await, Replica::start(db, &[]).await);
    let (mut ca, cb) = (a.client().await, b.client().await);
    t.claim(&mut ca, "p1").await;
    let create = pb::CreateSessionRequest {
        session_id: "s1".into(),
        browser_profile_id: "p1".into(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    };
    ca.create_session(t.session(create)).await.unwrap();
    (t, (a, b), ca, cb)
}
