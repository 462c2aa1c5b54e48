//! Agent keys: made by the owner through the gateway for one chat, they name that chat alone,
//! and unless the owner said the client has no other tools, no task permission covers or is
//! offered to their acts.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

fn connect(browser_only: bool) -> pb::ConnectAgentRequest {
    pb::ConnectAgentRequest {
        session_id: "s1".into(),
        browser_only,
        minutes: 5,
        start_url: "https://www.lesson.test/lesson/unit-3".into(),
    }
}

fn decision(reply: pb::AuthorizeReply) -> pb::authorize_reply::Decision {
    reply.decision.expect("a decision")
}

/// An act in the key's own run (`mcp-<agent id>`).
fn act_in(run: &str) -> pb::AuthorizeRequest {
    let mut a = act(None);
    a.run.as_mut().unwrap().run_id = run.into();
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_key_names_its_one_chat_and_holds_to_allow_once_unless_browser_only() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    // A chat with a live task permission, and a second chat of the same owner.
    let _ = granted(&mut client).await;
    let s2 = pb::CreateSessionRequest {
        session_id: "s2".into(),
        browser_profile_id: "profile-1".into(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    };
    client.create_session(owner(s2)).await.unwrap();

    // Bad requests are refused and make nothing.
    let listed = || pb::ListAgentsRequest { session_id: "s1".into() };
    for (bad, field) in [
        (pb::ConnectAgentRequest { start_url: "http://www.lesson.test/".into(), ..connect(true) }, "start_url"),
        (pb::ConnectAgentRequest { start_url: "https://u:p@www.lesson.test/".into(), ..connect(true) }, "start_url"),
        (pb::ConnectAgentRequest { start_url: "lesson".into(), ..connect(true) }, "start_url"),
        (pb::ConnectAgentRequest { minutes: 1441, ..connect(true) }, "minutes"),
    ] {
        let err = client.connect_agent(owner(bad)).await.unwrap_err();
        assert_eq!((err.code(), field_violation(&err).as_str()), (Code::InvalidArgument, field), "{err:?}");
    }
    let err = client.connect_agent(intruder(connect(true))).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "another owner's chat is not there: {err:?}");
    assert!(client.list_agents(owner(listed())).await.unwrap().into_inner().agents.is_empty(), "nothing was made");

    let made = client.connect_agent(owner(connect(false))).await.unwrap().into_inner();
    let key = made.token.clone();
    let run = format!("mcp-{}", made.credential_id);
    let named = client.describe_caller(tests::bearer(&key, pb::DescribeCallerRequest {})).await.unwrap();
    assert_eq!(named.into_inner().run_id, run, "the authorizer names the key's one run");
    let described =
        client.describe_caller(tests::bearer(&key, pb::DescribeCallerRequest {})).await.unwrap().into_inner();
    assert_eq!(
        (described.session_id.as_str(), described.browser_only, described.browser_profile_id.as_str()),
        ("s1", false, "profile-1")
    );
    assert_eq!(
        (described.agent_id.as_str(), described.start_url.as_str()),
        (made.credential_id.as_str(), "https://www.lesson.test/lesson/unit-3")
    );

    // The key names its chat alone: any other is not there, and nothing is written.
    let at = position();
    let other = pb::AuthorizeRequest { session_id: "s2".into(), ..act_in(&run) };
    assert_eq!(client.authorize(tests::bearer(&key, other)).await.unwrap_err().code(), Code::NotFound);
    let check = pb::CheckStopRequest { session_id: "s2".into(), ticket: None };
    assert_eq!(client.check_stop(tests::bearer(&key, check)).await.unwrap_err().code(), Code::NotFound);
    let new = pb::CreateSessionRequest {
        session_id: "s3".into(),
        surface: pb::Surface::Interactive as i32,
        ..Default::default()
    };
    assert_eq!(client.create_session(tests::bearer(&key, new)).await.unwrap_err().code(), Code::NotFound);
    // Nor does it write the chat's messages or tool calls, even in its own chat.
    for session in ["s1", "s2"] {
        let said = pb::RecordMessageRequest { session_id: session.into(), message_id: "m2".into(), from_owner: false };
        let err = client.record_message(tests::bearer(&key, said)).await.unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    }
    let tool =
        pb::RecordToolCallRequest { session_id: "s1".into(), tool_call_id: "c2".into(), tool: "mail.send".into() };
    assert_eq!(client.record_tool_call(tests::bearer(&key, tool)).await.unwrap_err().code(), Code::PermissionDenied);
    // And no other caller takes an agent key's run id.
    let err = client.authorize(owner(act_in(&run))).await.unwrap_err();
    assert_eq!((err.code(), field_violation(&err).as_str()), (Code::InvalidArgument, "run_id"), "{err:?}");
    // And its one run: another run's acts and account are refused.
    let err = client.authorize(tests::bearer(&key, act(None))).await.unwrap_err();
    assert_eq!((err.code(), field_violation(&err).as_str()), (Code::InvalidArgument, "run_id"), "{err:?}");
    assert_eq!(position(), at, "nothing was written for another chat or run");

    // Its acts in its own chat: the live permission does not cover them, and no card offers one.
    match decision(client.authorize(tests::bearer(&key, act_in(&run))).await.unwrap().into_inner()) {
        pb::authorize_reply::Decision::RequireApproval(card) => {
            assert!(card.offer.is_none(), "{card:?}");
            assert_eq!(card.reason, "client_tools_unknown");
        }
        other => panic!("the permission covered a client that may hold other tools: {other:?}"),
    }
    // The same act from a key whose owner said the client has no other tools: the permission covers it.
    let browser_only = client.connect_agent(owner(connect(true))).await.unwrap().into_inner();
    let its_run = format!("mcp-{}", browser_only.credential_id);
    let allowed =
        decision(client.authorize(tests::bearer(&browser_only.token, act_in(&its_run))).await.unwrap().into_inner());
    assert!(matches!(allowed, pb::authorize_reply::Decision::Allow(_)), "{allowed:?}");
    // Its run's end spends it.
    let end = pb::RecordRunRequest {
        session_id: "s1".into(),
        run_id: its_run.clone(),
        kind: pb::RunEventKind::Escalated as i32,
        detail: "uncertain".into(),
        account: None,
    };
    client.record_run(tests::bearer(&browser_only.token, end)).await.unwrap();
    let spent = client.describe_caller(tests::bearer(&browser_only.token, pb::DescribeCallerRequest {})).await;
    assert_eq!(spent.unwrap_err().code(), Code::Unauthenticated, "a run's end spends its key");

    // The owner lists and revokes; another owner can do neither.
    let agents = client.list_agents(owner(listed())).await.unwrap().into_inner().agents;
    assert_eq!(agents.len(), 2, "{agents:?}");
    assert_eq!(agents.iter().filter(|a| a.revoked_at_ms == 0).count(), 1, "the spent one is revoked: {agents:?}");
    assert!(agents.iter().all(|a| a.expires_at_ms > 0 && a.start_url == "https://www.lesson.test/lesson/unit-3"));
    assert_eq!(client.list_agents(intruder(listed())).await.unwrap_err().code(), Code::NotFound);
    let off = || pb::DisconnectAgentRequest { credential_id: made.credential_id.clone() };
    assert_eq!(client.disconnect_agent(intruder(off())).await.unwrap_err().code(), Code::NotFound);
    assert!(client.describe_caller(tests::bearer(&key, pb::DescribeCallerRequest {})).await.is_ok(), "still usable");
    assert!(client.disconnect_agent(owner(off())).await.unwrap().into_inner().disconnected);
    assert!(!client.disconnect_agent(owner(off())).await.unwrap().into_inner().disconnected, "once");
    let refused = client.describe_caller(tests::bearer(&key, pb::DescribeCallerRequest {})).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    // A card an app raised and the owner denied ends that app's key: never retried.
    let third = client.connect_agent(owner(connect(false))).await.unwrap().into_inner();
    let third_run = format!("mcp-{}", third.credential_id);
    let asked =
        match decision(client.authorize(tests::bearer(&third.token, act_in(&third_run))).await.unwrap().into_inner()) {
            pb::authorize_reply::Decision::RequireApproval(c) => c,
            other => panic!("{other:?}"),
        };
    let deny = pb::ResolveApprovalRequest {
        approval_id: asked.approval_id,
        resolution: pb::Resolution::Deny as i32,
        ..Default::default()
    };
    client.resolve_approval(owner(deny)).await.unwrap();
    let denied = client.describe_caller(tests::bearer(&third.token, pb::DescribeCallerRequest {})).await;
    assert_eq!(denied.unwrap_err().code(), Code::Unauthenticated, "a denied card ends its app's key");
    // Deleting the chat ends every key made for it.
    let fourth = client.connect_agent(owner(connect(true))).await.unwrap().into_inner();
    client.delete_session(owner(pb::DeleteSessionRequest { session_id: "s1".into() })).await.unwrap();
    let gone = client.describe_caller(tests::bearer(&fourth.token, pb::DescribeCallerRequest {})).await;
    assert_eq!(gone.unwrap_err().code(), Code::Unauthenticated, "a deleted chat's key is spent");
    // A worker's own credential is no agent's: it names no chat.
    let plain = client.describe_caller(owner(pb::DescribeCallerRequest {})).await.unwrap().into_inner();
    assert!(plain.session_id.is_empty());
}

/// The operator's standing grant, like a task permission, covers no act of an app whose other
/// tools the record cannot see: its owner is asked each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_grant_covers_no_act_of_a_client_that_may_hold_other_tools() {
    let Served { mut client, _stop, .. } = start_with_standing_pin().await;
    session(&mut client).await;
    let routine = |run: &str| {
        let mut req = act_in(run);
        let e = req.element.as_mut().unwrap();
        (e.name, e.visible_text) = ("Continue".into(), "Continue".into());
        req
    };
    for (browser_only, standing) in [(true, true), (false, false)] {
        let made = client.connect_agent(owner(connect(browser_only))).await.unwrap().into_inner();
        let run = format!("mcp-{}", made.credential_id);
        let reply = client.authorize(tests::bearer(&made.token, routine(&run))).await.unwrap().into_inner();
        let allowed =
            matches!(&reply.decision, Some(pb::authorize_reply::Decision::Allow(a)) if a.kind == "standing_grant");
        assert_eq!(allowed, standing, "browser only: {browser_only}: {reply:?}");
    }
}

/// An agent key drives its own run, never the owner's tasks: it takes none and renews none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_key_takes_no_task_of_its_owner() {
    let Served { mut client, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let key = client.connect_agent(owner(connect(true))).await.unwrap().into_inner().token;
    client.start_task(owner(super::tasks::task("s1", super::tasks::START))).await.unwrap();
    let claim = pb::ClaimTaskRequest { holder: "app".into() };
    let refused = client.claim_task(tests::bearer(&key, claim.clone())).await.unwrap_err();
    assert_eq!((refused.code(), reason(&refused).as_str()), (Code::PermissionDenied, CALLER_NOT_PERMITTED));
    let taken = client.claim_task(owner(claim)).await.unwrap().into_inner().task.expect("the owner's worker takes it");
    let renew = pb::RenewTaskRequest { session_id: "s1".into(), run_id: taken.run_id, holder: "app".into() };
    let refused = client.renew_task(tests::bearer(&key, renew)).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied);
}
