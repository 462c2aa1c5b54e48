//! Every corner page, driven through the MCP server by an MCP client of the ecosystem's, under a
//! task permission: what the runtime refuses on its own is never dispatched through MCP either
//! (refused there, or held for a card first by the authorizer), and nothing leaves the prefix.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;
use serde_json::json;
use tests::browser::{GATEWAY, LESSON_ORIGIN, with};
use tests::mcp::{Client, look, on};

/// An agent key for chat s1 whose client has no other tools, opening at `path`: its id and key.
async fn key(s: &mut Stack, path: &str) -> (String, String) {
    let connect = pb::ConnectAgentRequest {
        session_id: "s1".into(),
        browser_only: true,
        minutes: 10,
        start_url: format!("{LESSON_ORIGIN}{path}"),
    };
    let made = s.authorizer.connect_agent(with(GATEWAY, connect)).await.unwrap().into_inner();
    (made.credential_id, made.token)
}

/// Ends the client's run, so its browser goes back to the pool.
async fn end_run(client: &mut Client) {
    let evidence = "SUBGOAL 1 | evidence: none | intent: escalate (uncertain)";
    let ended = client.call("escalate", json!({ "reason": "uncertain", "evidence": evidence })).await;
    assert!(ended.error, "{ended:?}");
}

#[tokio::test]
async fn every_corner_through_an_mcp_client_dispatches_nothing_the_runtime_would_refuse() {
    let mut s = stack().await;
    s.chat("s1", "profile-1").await;
    s.fixture.page(LESSON, "/lesson/begin", r#"<!doctype html><title>Begin</title><a href="/lesson/2">Next</a>"#);
    s.fixture.page(LESSON, "/account/x", "<!doctype html><title>Account</title>");
    for (path, body, _, _, _) in corners() {
        s.fixture.page(LESSON, path, &format!("<!doctype html><title>Corner</title>{body}"));
    }
    let (url, _stop) = tests::mcp::serve(s.authorizer_port, s.runtime_port, "http://127.0.0.1:9").await;
    let mut client = Client::start().await;

    // The owner allows the first act for the task: the corners run under that permission.
    let (_, first) = key(&mut s, "/lesson/begin").await;
    client.connect_http(&url, &first).await;
    let page = client.call("snapshot", look()).await;
    let asked = client.call("click", on(&page, "Next", false)).await;
    assert_eq!(asked.code(), "APPROVAL_REQUIRED", "{asked:?}");
    let pending = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: true, min_position: None };
    let card = s.authorizer.list_approvals(with(GATEWAY, pending)).await.unwrap().into_inner().approvals[0].clone();
    let offer = card.offer.clone().expect("a task permission is offered");
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin,
        offered_path_prefix: offer.path_prefix,
    };
    s.authorizer.resolve_approval(with(GATEWAY, resolve)).await.unwrap();
    end_run(&mut client).await;

    for (path, _, name, typed, expect) in corners() {
        let (agent, key) = key(&mut s, path).await;
        s.record(&format!("mcp-{agent}"), &[("answer", "e")]);
        client.connect_http(&url, &key).await;
        let page = client.call("snapshot", look()).await;
        assert!(!page.error, "{path}: {page:?}");
        let (tool, mut args) = (if typed.is_some() { "type" } else { "click" }, on(&page, name, false));
        if let Some(field) = typed {
            args["field_id"] = json!(field);
        }
        let before = s.fixture.requests().len();
        let acted = client.call(tool, args).await;
        let code = acted.code();
        match expect {
            Expect::Done => assert!(!acted.error, "{path}: {acted:?}"),
            // Dispatched and fenced: the run cannot say what the act did.
            Expect::Fenced => assert!(acted.text.contains("outcome_unknown"), "{path}: {acted:?}"),
            Expect::Refused(refused) => {
                // Refused by the runtime, held for a card by the authorizer, or ended by the
                // harness's own read of the form: never dispatched.
                let named = refused.as_str_name().trim_start_matches("ACT_CODE_");
                assert!(acted.error, "{path}: expected {named}, a card or an end: {acted:?}");
                let reached: Vec<String> = s.fixture.requests()[before..]
                    .iter()
                    .map(|r| r.target.clone())
                    .filter(|t| t != "/favicon.ico")
                    .collect();
                assert!(reached.is_empty(), "{path}: a refused act reached the site: {reached:?}");
            }
        }
        println!("{path}: {}", if code.is_empty() { acted.text.lines().next().unwrap_or_default() } else { &code });
        if !acted.json()["terminal"].as_bool().unwrap_or(false) {
            end_run(&mut client).await;
        }
        stayed_inside(&s);
    }
    client.close().await;
}
