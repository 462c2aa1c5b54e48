//! Who may make which call: roles, scopes, credentials, and each caller's own data only.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_see_only_their_own() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let err = client.authorize(Request::new(act(None))).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

    let card = asked(&client.authorize(owner(act(None))).await.unwrap().into_inner()).clone();
    assert_eq!(
        client.authorize(intruder(act(None))).await.unwrap_err().code(),
        Code::NotFound,
        "another principal's session"
    );
    let get = pb::GetApprovalRequest { approval_id: card.approval_id.clone(), min_position: None };
    assert_eq!(client.get_approval(intruder(get)).await.unwrap_err().code(), Code::NotFound);
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id.clone(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    assert_eq!(client.resolve_approval(intruder(resolve)).await.unwrap_err().code(), Code::NotFound);
    let list = pb::ListApprovalsRequest { session_id: "s1".into(), ..Default::default() };
    assert_eq!(client.list_approvals(intruder(list)).await.unwrap_err().code(), Code::NotFound);
    let offer = card.offer.unwrap();
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin,
        offered_path_prefix: offer.path_prefix,
    };
    let grant_id = client.resolve_approval(owner(resolve)).await.unwrap().into_inner().grant_id;
    let get = pb::GetGrantRequest { grant_id: grant_id.clone(), min_position: None };
    assert_eq!(client.get_grant(intruder(get)).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(
        client.revoke_grant(intruder(pb::RevokeGrantRequest { grant_id: grant_id.clone() })).await.unwrap_err().code(),
        Code::NotFound
    );
    let theirs = client.list_grants(intruder(pb::ListGrantsRequest::default())).await.unwrap().into_inner().grants;
    assert!(theirs.is_empty());
    let mine =
        client.get_grant(owner(pb::GetGrantRequest { grant_id, min_position: None })).await.unwrap().into_inner();
    assert_eq!(mine.end_reason, "", "the intruder's revoke changed nothing");
}

/// Which calls exist: every RPC called once; the task-grant calls answer UNIMPLEMENTED, as a route
/// that is not mounted, exactly when the flag is off.
#[tokio::test]
async fn census_of_calls_served_with_the_flag_off_and_on() {
    fn code<T>(r: Result<tonic::Response<T>, Status>) -> Code {
        r.err().map_or(Code::Ok, |s| s.code())
    }
    async fn unimplemented(client: &mut AuthorizerClient<Channel>) -> Vec<&'static str> {
        let mut codes: Vec<(&'static str, Code)> = Vec::new();
        codes.push(("CreateSession", code(client.create_session(owner(pb::CreateSessionRequest::default())).await)));
        codes.push(("RecordMessage", code(client.record_message(owner(pb::RecordMessageRequest::default())).await)));
        codes
            .push(("RecordToolCall", code(client.record_tool_call(owner(pb::RecordToolCallRequest::default())).await)));
        codes.push(("RecordRun", code(client.record_run(owner(pb::RecordRunRequest::default())).await)));
        codes.push(("DeleteSession", code(client.delete_session(owner(pb::DeleteSessionRequest::default())).await)));
        codes.push(("StopSession", code(client.stop_session(owner(pb::StopSessionRequest::default())).await)));
        codes.push(("StopEverything", code(client.stop_everything(owner(pb::StopEverythingRequest {})).await)));
        codes.push((
            "RecordProfileEvent",
            code(client.record_profile_event(owner(pb::ProfileEventRequest::default())).await),
        ));
        codes.push(("Authorize", code(client.authorize(owner(pb::AuthorizeRequest::default())).await)));
        codes.push((
            "ResolveApproval",
            code(client.resolve_approval(owner(pb::ResolveApprovalRequest::default())).await),
        ));
        codes.push(("GetApproval", code(client.get_approval(owner(pb::GetApprovalRequest::default())).await)));
        codes.push(("ListApprovals", code(client.list_approvals(owner(pb::ListApprovalsRequest::default())).await)));
        codes.push(("AwaitApproval", code(client.await_approval(owner(pb::AwaitApprovalRequest::default())).await)));
        codes.push(("RedeemToken", code(client.redeem_token(owner(pb::RedeemTokenRequest::default())).await)));
        codes.push(("CheckStop", code(client.check_stop(owner(pb::CheckStopRequest::default())).await)));
        codes.push(("GetGrant", code(client.get_grant(owner(pb::GetGrantRequest::default())).await)));
        codes.push(("ListGrants", code(client.list_grants(owner(pb::ListGrantsRequest::default())).await)));
        codes.push(("RevokeGrant", code(client.revoke_grant(owner(pb::RevokeGrantRequest::default())).await)));
        codes.push(("ConnectAgent", code(client.connect_agent(owner(pb::ConnectAgentRequest::default())).await)));
        codes.push(("ListAgents", code(client.list_agents(owner(pb::ListAgentsRequest::default())).await)));
        codes.push((
            "DisconnectAgent",
            code(client.disconnect_agent(owner(pb::DisconnectAgentRequest::default())).await),
        ));
        codes.push(("DescribeCaller", code(client.describe_caller(owner(pb::DescribeCallerRequest {})).await)));
        codes.push(("StartTask", code(client.start_task(owner(pb::StartTaskRequest::default())).await)));
        codes.push(("ContinueTask", code(client.continue_task(owner(pb::ContinueTaskRequest::default())).await)));
        codes.push(("ListChats", code(client.list_chats(owner(pb::ListChatsRequest {})).await)));
        codes.push(("ClaimTask", code(client.claim_task(owner(pb::ClaimTaskRequest::default())).await)));
        codes.push(("RenewTask", code(client.renew_task(owner(pb::RenewTaskRequest::default())).await)));
        assert_eq!(codes.len(), Rpc::ALL.len(), "every RPC of the service");
        codes.into_iter().filter(|(_, c)| *c == Code::Unimplemented).map(|(n, _)| n).collect()
    }
    let mut off = start_in_process_with(MemoryGrants::default(), false).await;
    assert_eq!(unimplemented(&mut off.client).await, ["GetGrant", "ListGrants", "RevokeGrant"]);
    // Unmounted for everyone, whoever asks and whatever they send.
    let status = off.client.list_grants(intruder(pb::ListGrantsRequest::default())).await.unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
    let mut on = start_in_process_with(MemoryGrants::default(), true).await;
    assert!(unimplemented(&mut on.client).await.is_empty());
}

/// Every call by every role: the call's own role gets in, every other is PERMISSION_DENIED and
/// writes nothing — the worker cannot resolve its own card, the gateway cannot act in the browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_matrix_every_call_by_every_role() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    let s = scene(&mut client).await;
    let list = |c: &mut AuthorizerClient<Channel>| {
        let mut c = c.clone();
        async move {
            let a = c.list_approvals(owner(pb::ListApprovalsRequest { session_id: "s1".into(), ..Default::default() }));
            let approvals = a.await.unwrap().into_inner();
            let grants = c.list_grants(owner(pb::ListGrantsRequest::default())).await.unwrap().into_inner();
            format!("{approvals:?} {grants:?}")
        }
    };
    // Stopping and deleting the session end the scene, so they come last.
    let mut order = Rpc::ALL.to_vec();
    let last = [Rpc::StopEverything, Rpc::StopSession, Rpc::DeleteSession];
    order.retain(|r| !last.contains(r));
    order.extend(last);
    let mut allowed = Vec::new();
    for rpc in order {
        let (before, at) = (list(&mut client).await, position());
        for role in Role::ALL.into_iter().filter(|r| !rpc.roles().contains(r)) {
            let status = call_as(&mut client, role, rpc, &s).await.expect_err("refused");
            assert_eq!(
                (status.code(), reason(&status).as_str()),
                (Code::PermissionDenied, CALLER_NOT_PERMITTED),
                "{rpc:?} by {role}: {status:?}"
            );
            assert_eq!(position(), at, "{rpc:?} refused to {role} appended to the ledger");
            assert_eq!(list(&mut client).await, before, "{rpc:?} refused to {role} wrote something");
        }
        for &role in rpc.roles() {
            let own = call_as(&mut client, role, rpc, &s).await;
            // Let in: whatever the domain then says (a bad token is its own refusal), not the caller's.
            let refusal = own.as_ref().err().map(|e| (e.code(), reason(e)));
            assert!(
                !matches!(&refusal, Some((Code::Unauthenticated, _)))
                    && refusal.as_ref().is_none_or(|(_, r)| r != CALLER_NOT_PERMITTED),
                "{rpc:?} by {role}: {own:?}"
            );
        }
        allowed.push(rpc);
    }
    assert_eq!(allowed.len(), Rpc::ALL.len(), "every call is let in for its own role: {allowed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_cannot_resolve_its_own_card_and_its_principal_claims_are_ignored() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    let s = scene(&mut client).await;
    for resolution in [pb::Resolution::ApproveForTask, pb::Resolution::ApproveOnce, pb::Resolution::Deny] {
        let offer = s.pending.offer.clone().unwrap_or_default();
        let m = pb::ResolveApprovalRequest {
            approval_id: s.pending.approval_id.clone(),
            resolution: resolution as i32,
            offered_origin: offer.origin,
            offered_path_prefix: offer.path_prefix,
        };
        let mut req = with_role(Role::Worker, "owner", m);
        // Even dressed as the gateway would be.
        req.metadata_mut().insert("x-principal-id", "owner".parse().unwrap());
        req.metadata_mut().insert("x-owner-scopes", "approval.resolve,browser.grant.write".parse().unwrap());
        assert_eq!(client.resolve_approval(req).await.unwrap_err().code(), Code::PermissionDenied);
    }
    let get = pb::GetApprovalRequest { approval_id: s.pending.approval_id.clone(), min_position: None };
    assert_eq!(client.get_approval(owner(get)).await.unwrap().into_inner().status, "PENDING");

    // The intruder's worker naming the owner still acts as the intruder: not the owner's session.
    let mut req = with_role(Role::Worker, "intruder", act(None));
    req.metadata_mut().insert("x-principal-id", "owner".parse().unwrap());
    assert_eq!(client.authorize(req).await.unwrap_err().code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_needs_the_owner_and_the_owners_scopes() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    let s = scene(&mut client).await;
    let with_scopes = |scopes: &str, m: pb::ResolveApprovalRequest| {
        let mut req = owner(m);
        req.metadata_mut().insert("x-owner-scopes", scopes.parse().unwrap());
        req
    };
    // The pending card is a payment's, offered no task: the scopes are refused before the offer is
    // read, so the lesson's scope stands in.
    let for_task = pb::ResolveApprovalRequest {
        approval_id: s.pending.approval_id.clone(),
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: "https://www.lesson.test".into(),
        offered_path_prefix: "/lesson".into(),
    };
    let err = client.resolve_approval(with_scopes("approval.resolve", for_task.clone())).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "approve_for_task needs browser.grant.write too");
    assert_eq!(reason(&err), CALLER_NOT_PERMITTED);
    let err = client.resolve_approval(with_scopes("browser.grant.write", for_task.clone())).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "and approval.resolve");
    let mut nameless = owner(for_task);
    nameless.metadata_mut().remove("x-principal-id");
    assert_eq!(client.resolve_approval(nameless).await.unwrap_err().code(), Code::Unauthenticated);
    let get = pb::GetApprovalRequest { approval_id: s.pending.approval_id.clone(), min_position: None };
    assert_eq!(client.get_approval(owner(get)).await.unwrap().into_inner().status, "PENDING", "nothing resolved");

    let mut read_only = owner(pb::RevokeGrantRequest { grant_id: s.grant_id.clone() });
    read_only.metadata_mut().insert("x-owner-scopes", "browser.grant.read".parse().unwrap());
    assert_eq!(client.revoke_grant(read_only).await.unwrap_err().code(), Code::PermissionDenied);
    let g = client.get_grant(owner(pb::GetGrantRequest { grant_id: s.grant_id, min_position: None })).await.unwrap();
    assert_eq!(g.into_inner().end_reason, "", "not revoked");
}

/// On PostgreSQL over TLS: a missing, malformed, unknown, expired or revoked credential is
/// UNAUTHENTICATED and writes nothing; one for another tenant acts only in that tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_revoked_and_foreign_credentials_are_refused() {
    let db = TestDb::new().await;
    let Served { mut client, credentials, _stop, .. } = start_on_postgres(&db, 4).await;
    let create = |id: &str| pb::CreateSessionRequest { session_id: id.into(), surface: 1, ..Default::default() };
    use tests::bearer;
    let past = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
    let expired = credentials::new_token();
    credentials.register(&expired, TENANT, Role::Worker, Some("owner"), Some(past)).await.unwrap();
    let foreign = credentials::new_token();
    credentials.register(&foreign, "tenant-2", Role::Worker, Some("owner"), None).await.unwrap();
    let revocable = credentials::new_token();
    let c = credentials.register(&revocable, TENANT, Role::Worker, Some("owner"), None).await.unwrap();
    client.create_session(bearer(&revocable, create("s-ok"))).await.expect("a good credential works");
    assert!(credentials.revoke(TENANT, c.credential_id).await.unwrap());

    for (token, code) in [
        (String::new(), Code::Unauthenticated),
        ("glc_nothex".to_owned(), Code::Unauthenticated),
        (credentials::new_token(), Code::Unauthenticated),
        (expired, Code::Unauthenticated),
        (revocable, Code::Unauthenticated),
    ] {
        let err = client.create_session(bearer(&token, create("s-bad"))).await.unwrap_err();
        assert_eq!(err.code(), code, "{token:?}: {err:?}");
    }
    // Another tenant's credential acts in its own tenant: the same session id is a session of
    // its own, and the first tenant's does not exist for it.
    let call = || pb::RecordToolCallRequest { session_id: "s-ok".into(), tool_call_id: "c".into(), tool: "x".into() };
    let err = client.record_tool_call(bearer(&foreign, call())).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "tenant-1's session is not tenant-2's");
    client.create_session(bearer(&foreign, create("s-ok"))).await.expect("tenant-2 has ids of its own");
    client.record_tool_call(bearer(&foreign, call())).await.expect("its own session");
    let sessions = db
        .client()
        .await
        .query(
            "SELECT tenant_id, count(*) FROM events WHERE event_type = 'session.created' GROUP BY tenant_id \
             ORDER BY tenant_id",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .collect::<Vec<_>>();
    assert_eq!(sessions, [(TENANT.to_owned(), 1), ("tenant-2".to_owned(), 1)], "only the good credentials wrote");
}

/// Only the gateway records the owner's words: a worker claiming the owner spoke is refused and
/// starts no new turn; the gateway cannot record someone else's words either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_gateway_records_the_owners_messages() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    scene(&mut client).await;
    let at = position();
    let said = |from_owner| pb::RecordMessageRequest { session_id: "s1".into(), message_id: "m5".into(), from_owner };
    for (role, from_owner) in [(Role::Worker, true), (Role::Gateway, false)] {
        let err = client.record_message(with_role(role, "owner", said(from_owner))).await.unwrap_err();
        assert_eq!((err.code(), reason(&err).as_str()), (Code::PermissionDenied, CALLER_NOT_PERMITTED), "{role}");
    }
    assert_eq!(position(), at, "nothing written");
    client.record_message(with_role(Role::Worker, "owner", said(false))).await.unwrap();
    client.record_message(with_role(Role::Gateway, "owner", said(true))).await.unwrap();
}

/// A worker whose credential runs out or is revoked while it waits for the owner's answer is not
/// given the answer, nor the approve-once token: a wait reads its credential again before it
/// answers. Both waits are seen still waiting once the first credential has run out, and the
/// second is revoked only then, through another handle on the store (as another replica would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_that_runs_out_during_a_wait_gets_no_answer() {
    let db = TestDb::new().await;
    runs_out_during_a_wait(&db, Credentials::postgres(db.pool(2))).await;
}

/// The same with the credentials remembered, as a served replica has them: the memory that let
/// the waits in does not answer for them after the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_credential_that_runs_out_during_a_wait_gets_no_answer() {
    let db = TestDb::new().await;
    runs_out_during_a_wait(&db, Credentials::postgres(db.pool(2)).remembering(16)).await;
}

async fn runs_out_during_a_wait(db: &TestDb, credentials: Credentials) {
    use tests::bearer;
    let Served { mut client, credentials, _stop, .. } = start(PgGrants::new(db.store(4)), credentials).await;
    let elsewhere = Credentials::postgres(db.pool(1));
    let s = scene(&mut client).await;
    let short = credentials::new_token();
    let until = time::OffsetDateTime::now_utc() + time::Duration::seconds(2);
    credentials.register(&short, TENANT, Role::Worker, Some("owner"), Some(until)).await.unwrap();
    let wait = |wait_ms| pb::AwaitApprovalRequest {
        session_id: "s1".into(),
        approval_id: s.pending.approval_id.clone(),
        wait_ms,
    };
    let waiting = |request: Request<pb::AwaitApprovalRequest>| {
        let mut client = client.clone();
        tokio::spawn(async move { client.await_approval(request).await })
    };
    let revocable = credentials::new_token();
    let id = credentials.register(&revocable, TENANT, Role::Worker, Some("owner"), None).await.unwrap().credential_id;
    let (expiring, revoked, live) = (
        waiting(bearer(&short, wait(20_000))),
        waiting(bearer(&revocable, wait(20_000))),
        waiting(owner(wait(20_000))),
    );
    // The owner answers once the credential has run out.
    let left = until - time::OffsetDateTime::now_utc() + time::Duration::milliseconds(100);
    tokio::time::sleep(left.try_into().unwrap_or_default()).await;
    assert!(!expiring.is_finished() && !revoked.is_finished(), "both still wait: the start let them in");
    assert!(elsewhere.revoke(TENANT, id).await.unwrap());
    let once = pb::ResolveApprovalRequest {
        approval_id: s.pending.approval_id.clone(),
        resolution: pb::Resolution::ApproveOnce as i32,
        ..Default::default()
    };
    client.resolve_approval(owner(once)).await.unwrap();
    for waiter in [expiring, revoked] {
        let refused = waiter.await.unwrap().unwrap_err();
        assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    }
    // The owner's own worker, waiting beside it and still live, is given the answer and its token.
    let answer = live.await.unwrap().unwrap().into_inner();
    assert_eq!(answer.status, "APPROVED");
    assert!(!answer.approval_token.is_empty());
}
