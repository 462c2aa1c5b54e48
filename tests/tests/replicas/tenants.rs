//! Tenants with the same ids never see each other.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

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

/// The sweep loop of a replica serving every tenant: one sweep (the replica's first; the next is
/// ten minutes on) ends the expired grants of three tenants, each in its own tenant's log; one
/// with time left stays live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_loop_ends_every_tenants_expired_grants() {
    use grant_domain::catalogue::{SiteScope, TaskGrantCreated};
    use ledger::{Metadata, TenantId};
    use time::{Duration as Span, OffsetDateTime};
    let db = TestDb::new().await;
    let grants = authorizer::PgGrants::new(db.store(4));
    let now = OffsetDateTime::now_utc();
    let created = |tenant: &str, session: &str, grant_id: uuid::Uuid, expires_at: OffsetDateTime| {
        Event::TaskGrantCreated(TaskGrantCreated {
            grant_id,
            approval_id: uuid::Uuid::new_v4(),
            tenant_id: tenant.into(),
            principal_id: "owner".into(),
            session_id: session.into(),
            profile_id: "p1".into(),
            profile_generation: 0,
            agent_version: "agent-7".into(),
            policy_version: authorizer::policy::Policy::empty().version,
            scope: SiteScope { origin: "https://www.lesson.test".into(), path_prefix: "/lesson".into() },
            created_at: expires_at - Span::minutes(30),
            expires_at,
            max_actions: 200,
            max_typed_chars: 4096,
        })
    };
    // Each ran out a minute ago; one has half an hour left.
    let mut due = Vec::new();
    for tenant in ["tenant-a", "tenant-b", "tenant-c"] {
        let grant_id = uuid::Uuid::new_v4();
        let t = TenantId::new(tenant).unwrap();
        grants
            .commit(&t, &Metadata::by("owner"), &[created(tenant, "s1", grant_id, now - Span::minutes(1))])
            .await
            .unwrap();
        due.push((tenant, grant_id));
    }
    let live = uuid::Uuid::new_v4();
    let b = TenantId::new("tenant-b").unwrap();
    grants
        .commit(&b, &Metadata::by("owner"), &[created("tenant-b", "s2", live, now + Span::minutes(30))])
        .await
        .unwrap();

    let _replica = Replica::start(&db, &[("SWEEP_INTERVAL_SECONDS", "600")]).await;
    let client = db.client().await;
    let ended = |tenant: &'static str, grant_id: uuid::Uuid| {
        let client = &client;
        async move {
            let sql = "SELECT end_reason FROM active_task_grants WHERE tenant_id = $1 AND grant_id = $2";
            client.query_one(sql, &[&tenant, &grant_id]).await.unwrap().get::<_, Option<String>>(0)
        }
    };
    for (tenant, grant_id) in due {
        let reason = tests::poll_until(
            "the sweep to end the grant",
            Duration::from_secs(30),
            Duration::from_millis(100),
            || ended(tenant, grant_id),
        )
        .await;
        assert_eq!(reason, "expired", "{tenant}");
        // Ended in its own tenant's log, by the authorizer.
        let by: String = client
            .query_one(
                "SELECT tenant_id FROM events WHERE event_type = 'browser.task_grant.ended' AND payload->>'grant_id' = $1",
                &[&grant_id.to_string()],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(by, tenant);
    }
    assert_eq!(ended("tenant-b", live).await, None, "a grant with time left was ended");
}
