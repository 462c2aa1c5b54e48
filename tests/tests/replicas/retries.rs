//! Retried calls and revoked credentials, through any replica.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

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
    // Three more worker credentials of the same owner, each seen by both replicas.
    let credentials = Credentials::postgres(db.pool(1));
    let (w2, w3, w4) = (new_token(), new_token(), new_token());
    let mut ids = Vec::new();
    for w in [&w2, &w3, &w4] {
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
    // A call of another role's, refused from memory, is refused as "unknown" once revoked.
    let resolve = pb::ResolveApprovalRequest { approval_id: uuid::Uuid::new_v4().to_string(), ..Default::default() };
    refused(ca.resolve_approval(Tokens::bearer(&w4, resolve.clone())).await);
    refused(cb.resolve_approval(Tokens::bearer(&w4, resolve)).await);
    // Forgotten once refused: read again, refused at the door.
    for c in [&mut ca, &mut cb] {
        for w in [&w2, &w3, &w4] {
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
