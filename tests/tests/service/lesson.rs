//! The lesson end to end, on memory and on PostgreSQL, and what ends or answers a grant through the API.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

/// The lesson path end to end: card with an offer, Allow for this task, covered acts, list,
/// get, revoke.
async fn lesson_path(served: Served) {
    let Served { mut client, _stop, .. } = served;
    session(&mut client).await;

    let first = client.authorize(owner(act(None))).await.unwrap().into_inner();
    let card = asked(&first).clone();
    let offer = card.offer.clone().expect("inside the configured scope");
    assert_eq!(
        (offer.origin.as_str(), offer.path_prefix.as_str(), offer.minutes, offer.max_actions),
        ("https://www.lesson.test", "/lesson", 30, 200)
    );
    assert!(offer.text.contains("can stop this permission at any time"));
    let view = card.view.clone().unwrap();
    assert_eq!(view.element_name, "el gato");
    assert_eq!(view.action_summary, "Click a button on www.lesson.test/lesson");
    let shown = format!("{view:?}");
    assert!(!shown.contains("secret") && !shown.contains("n7") && !shown.contains("snap_"), "{shown}");

    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin.clone(),
        offered_path_prefix: offer.path_prefix.clone(),
    };
    let resolved = client.resolve_approval(owner(resolve)).await.unwrap().into_inner();
    assert_eq!(resolved.status, "APPROVED");
    assert!(!resolved.grant_id.is_empty());
    assert!(resolved.approval_token.starts_with("apv_") && resolved.approval_token.len() == 28);

    let second = client.authorize(owner(act(Some("la manzana")))).await.unwrap().into_inner();
    let Some(pb::authorize_reply::Decision::Allow(allow)) = second.decision else {
        panic!("the second action runs: {second:?}")
    };
    assert_eq!(
        (allow.kind.as_str(), allow.grant_id.as_str(), allow.use_ordinal),
        ("browser_task_grant", resolved.grant_id.as_str(), 1)
    );
    let c = allow.constraint.unwrap();
    assert_eq!(
        (c.grant_kind, c.origins.as_slice(), c.path_prefix.as_str()),
        (pb::GrantKind::Task as i32, &["https://www.lesson.test".to_owned()][..], "/lesson")
    );
    let domain = DispatchConstraint::from_wire(WireConstraint {
        kind: GrantKind::Task,
        origins: c.origins.clone(),
        path_prefix: c.path_prefix.clone(),
        not_after: time::OffsetDateTime::parse(&c.not_after, &time::format_description::well_known::Rfc3339).unwrap(),
        consequence_ceiling: c.consequence_ceiling.clone(),
        max_text_chars: c.max_text_chars,
    });
    assert!(domain.is_ok(), "{domain:?}");

    let at = second.position;
    let grants = client
        .list_grants(owner(pb::ListGrantsRequest { session_id: "s1".into(), active_only: true, min_position: at }))
        .await
        .unwrap()
        .into_inner()
        .grants;
    assert_eq!(grants.len(), 1);
    assert_eq!((grants[0].actions_used, grants[0].chars_used), (1, 10));
    let got = client
        .get_grant(owner(pb::GetGrantRequest { grant_id: resolved.grant_id.clone(), min_position: at }))
        .await
        .unwrap();
    assert_eq!(got.into_inner().end_reason, "");
    let approval = client
        .get_approval(owner(pb::GetApprovalRequest { approval_id: card.approval_id.clone(), min_position: at }))
        .await
        .unwrap();
    assert_eq!(approval.into_inner().status, "APPROVED");

    client.revoke_grant(owner(pb::RevokeGrantRequest { grant_id: resolved.grant_id.clone() })).await.unwrap();
    let after = client.authorize(owner(act(None))).await.unwrap().into_inner();
    asked(&after);
    let ended =
        client.get_grant(owner(pb::GetGrantRequest { grant_id: resolved.grant_id, min_position: None })).await.unwrap();
    assert_eq!(ended.into_inner().end_reason, "revoked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lesson_path_in_memory() {
    lesson_path(start_in_process(MemoryGrants::default()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lesson_path_on_postgres() {
    let db = TestDb::new().await;
    lesson_path(start_on_postgres(&db, 8).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_and_a_deleted_session_end_grants_through_the_api() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let grant_for_task = |card: pb::RequireApproval| pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: card.offer.clone().unwrap().origin,
        offered_path_prefix: card.offer.unwrap().path_prefix,
    };
    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    let grant_id = client.resolve_approval(owner(grant_for_task(card))).await.unwrap().into_inner().grant_id;
    let began = pb::ProfileEventRequest {
        profile_id: "profile-1".into(),
        event: pb::ProfileEvent::SignInBegan as i32,
        owner_principal_id: "owner".into(),
    };
    client.record_profile_event(owner(began)).await.unwrap();
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id, min_position: None })).await.unwrap().into_inner();
    assert_eq!(g.end_reason, "profile_changed");
    let bad = pb::ProfileEventRequest { profile_id: "profile-1".into(), event: 0, owner_principal_id: "owner".into() };
    assert_eq!(client.record_profile_event(owner(bad)).await.unwrap_err().code(), Code::InvalidArgument);

    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    let grant_id = client.resolve_approval(owner(grant_for_task(card))).await.unwrap().into_inner().grant_id;
    assert_eq!(
        client.delete_session(intruder(pb::DeleteSessionRequest { session_id: "s1".into() })).await.unwrap_err().code(),
        Code::NotFound
    );
    client.delete_session(owner(pb::DeleteSessionRequest { session_id: "s1".into() })).await.unwrap();
    let gone = client.get_grant(owner(pb::GetGrantRequest { grant_id, min_position: None })).await.unwrap_err();
    assert_eq!(gone.code(), Code::NotFound, "a deleted chat's grants leave every get");
    let listed = client.list_grants(owner(pb::ListGrantsRequest::default())).await.unwrap().into_inner().grants;
    assert!(listed.is_empty(), "and every list: {listed:?}");
    assert_eq!(
        client.authorize(owner(act(None))).await.unwrap_err().code(),
        Code::NotFound,
        "a deleted session takes no acts"
    );
}

/// On PostgreSQL: deleting a profile ends every grant on it, and deleting a chat ends its grant as
/// revoked and takes it off every list and get; the inline rows say the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_profile_or_a_session_ends_grants_on_postgres() {
    let db = TestDb::new().await;
    let Served { mut client, _stop, .. } = start_on_postgres(&db, 4).await;
    let grant_in = |client: &mut AuthorizerClient<Channel>, session_id: &'static str| {
        let mut client = client.clone();
        async move {
            claim(&mut client, "profile-1").await;
            let create = pb::CreateSessionRequest {
                session_id: session_id.into(),
                browser_profile_id: "profile-1".into(),
                surface: pb::Surface::Interactive as i32,
                ..Default::default()
            };
            client.create_session(owner(create)).await.unwrap();
            let said =
                pb::RecordMessageRequest { session_id: session_id.into(), message_id: "m1".into(), from_owner: true };
            client.record_message(owner(said)).await.unwrap();
            let mut req = act(None);
            req.session_id = session_id.into();
            let card = asked(&client.authorize(owner(req)).await.unwrap().into_inner()).clone();
            let offer = card.offer.unwrap();
            let resolve = pb::ResolveApprovalRequest {
                approval_id: card.approval_id,
                resolution: pb::Resolution::ApproveForTask as i32,
                offered_origin: offer.origin,
                offered_path_prefix: offer.path_prefix,
            };
            client.resolve_approval(owner(resolve)).await.unwrap().into_inner().grant_id
        }
    };
    let first = grant_in(&mut client, "s1").await;
    let deleted = pb::ProfileEventRequest {
        profile_id: "profile-1".into(),
        event: pb::ProfileEvent::Deleted as i32,
        owner_principal_id: "owner".into(),
    };
    client.record_profile_event(owner(deleted)).await.unwrap();
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id: first.clone(), min_position: None })).await;
    assert_eq!(g.unwrap().into_inner().end_reason, "profile_revoked");
    assert_eq!(ended_row(&db, &first).await, (true, Some("profile_revoked".into())));

    let db2 = TestDb::new().await;
    let Served { mut client, _stop, .. } = start_on_postgres(&db2, 4).await;
    let second = grant_in(&mut client, "s2").await;
    client.delete_session(owner(pb::DeleteSessionRequest { session_id: "s2".into() })).await.unwrap();
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id: second.clone(), min_position: None })).await;
    assert_eq!(g.unwrap_err().code(), Code::NotFound);
    assert!(client.list_grants(owner(pb::ListGrantsRequest::default())).await.unwrap().into_inner().grants.is_empty());
    assert_eq!(ended_row(&db2, &second).await, (true, Some("revoked".into())));
}

/// The operator's standing grant answers a routine button on its profile, and the constraint it
/// sends validates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_grant_allow_carries_a_valid_constraint() {
    let Served { mut client, _stop, .. } = start_with_standing_pin().await;
    session(&mut client).await;
    let mut req = act(None);
    let e = req.element.as_mut().unwrap();
    (e.name, e.visible_text) = ("Continue".into(), "Continue".into());
    let reply = client.authorize(owner(req)).await.unwrap().into_inner();
    let Some(pb::authorize_reply::Decision::Allow(allow)) = reply.decision else { panic!("{reply:?}") };
    assert_eq!(allow.kind, "standing_grant");
    let c = allow.constraint.expect("every allow carries a constraint");
    assert_eq!(c.grant_kind, pb::GrantKind::Standing as i32);
    let rebuilt = DispatchConstraint::from_wire(WireConstraint {
        kind: GrantKind::Standing,
        origins: c.origins,
        path_prefix: c.path_prefix,
        not_after: time::OffsetDateTime::parse(&c.not_after, &time::format_description::well_known::Rfc3339).unwrap(),
        consequence_ceiling: c.consequence_ceiling,
        max_text_chars: c.max_text_chars,
    })
    .expect("the standing grant's constraint validates");
    assert_eq!(rebuilt.origins, ["https://www.lesson.test"]);
}

/// The turn a task grant checks is the session's record: a non-browser tool recorded since the
/// owner's newest message stops coverage whatever the act's own list says; the owner's next
/// message starts a new turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_record_of_tool_calls_decides_the_browser_only_turn() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    scene(&mut client).await;
    let allowed = |r: &pb::AuthorizeReply| matches!(r.decision, Some(pb::authorize_reply::Decision::Allow(_)));
    assert!(allowed(&client.authorize(owner(act(None))).await.unwrap().into_inner()));
    let call =
        pb::RecordToolCallRequest { session_id: "s1".into(), tool_call_id: "c1".into(), tool: "email.read".into() };
    client.record_tool_call(owner(call)).await.unwrap();
    let reply = client.authorize(owner(act(None))).await.unwrap().into_inner();
    assert_eq!(asked(&reply).reason, "turn_not_browser_only", "the act's list said browser only");
    let said = pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m2".into(), from_owner: true };
    client.record_message(owner(said)).await.unwrap();
    assert!(allowed(&client.authorize(owner(act(None))).await.unwrap().into_inner()), "a new turn");
    let bad = pb::RecordToolCallRequest { session_id: "s1".into(), tool_call_id: "c2".into(), tool: String::new() };
    assert_eq!(field_violation(&client.record_tool_call(owner(bad)).await.unwrap_err()), "tool");
}

/// An absent fact means no coverage: a covered click stops being covered when any fact the rules
/// read is left out, and the card says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_fact_means_no_coverage() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    scene(&mut client).await;
    let allowed = |r: &pb::AuthorizeReply| matches!(r.decision, Some(pb::authorize_reply::Decision::Allow(_)));
    assert!(allowed(&client.authorize(owner(act(None))).await.unwrap().into_inner()), "all facts carried: covered");
    type Strip = fn(&mut pb::ElementFacts);
    let leave_out: [(&str, Strip); 5] = [
        ("field kind", |e| e.field_kind = None),
        ("nav targets", |e| e.nav_targets_carried = false),
        ("download", |e| e.download = None),
        ("disabled", |e| e.disabled = None),
        ("truncated", |e| e.truncated = None),
    ];
    for (fact, strip) in leave_out {
        let mut req = act(None);
        strip(req.element.as_mut().unwrap());
        let reply = client.authorize(owner(req)).await.unwrap().into_inner();
        assert_eq!(asked(&reply).reason, "facts_missing", "{fact} left out");
    }
    // A link whose targets were never sent is not covered.
    let mut link = act(None);
    let e = link.element.as_mut().unwrap();
    e.role = "link".into();
    e.nav_targets_carried = false;
    assert_eq!(asked(&client.authorize(owner(link)).await.unwrap().into_inner()).reason, "facts_missing");
}

/// In memory as on PostgreSQL: a tool call sent again answers its first decision and spends
/// nothing, and the same id with other arguments is refused even when those would be denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_call_answers_its_first_decision_in_memory() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    granted(&mut client).await;
    let call = act(None);
    let mut ordinals = Vec::new();
    for _ in 0..3 {
        match client.authorize(owner(call.clone())).await.unwrap().into_inner().decision {
            Some(pb::authorize_reply::Decision::Allow(a)) => ordinals.push(a.use_ordinal),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(ordinals, [1, 1, 1]);
    let at = position();
    let mut password = call.clone();
    password.element.as_mut().unwrap().field_kind = Some(pb::FieldKind::Password as i32);
    let err = client.authorize(owner(password)).await.unwrap_err();
    assert_eq!(reason(&err), "TOOL_CALL_REUSED", "{err:?}");
    assert_eq!(position(), at, "nothing written");
}
