//! The owner's path: resolve, list, revoke, activity, the live stream, the worker's wait.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_resolves_lists_revokes_and_reads_activity_across_replicas() {
    let s = GatewayStack::start(10_000).await;
    let (_, owner) = s.token(ON, "owner-a", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let (first, offer) = s.card(ON, "owner-a", "s1").await;
    let offer = offer.expect("the lesson scope is offered");
    assert_eq!(format!("{}{}", offer.origin, offer.path_prefix), SCOPE);

    // The card is listed pending first and read through the other replica.
    let listed = s.call(0, "GET", "/v1/sessions/s1/approvals").bearer(&owner).send().await;
    assert_eq!(listed.status, 200, "{listed:?}");
    let cards = listed.json();
    assert_eq!(cards["approvals"][0]["approval_id"], first.as_str());
    assert_eq!(cards["approvals"][0]["status"], "PENDING");
    assert_eq!(cards["approvals"][0]["view"]["element_name"], "Next");
    assert_eq!(cards["approvals"][0]["offer"]["max_actions"], 200);
    let read = s.call(1, "GET", &format!("/v1/approvals/{first}")).bearer(&owner).send().await;
    assert_eq!((read.status, read.json()["status"].as_str()), (200, Some("PENDING")));

    // A stale or mismatched offer is 409 and the card stays pending; then Allow once succeeds.
    let before = s.events().await;
    let path = format!("/v1/approvals/{first}/resolve");
    let mismatched = s.call(0, "POST", &path).bearer(&owner).json(&for_task(&offer.origin, "/settings")).send().await;
    assert_eq!((mismatched.status, mismatched.code().as_str()), (409, "offer_mismatch"), "{mismatched:?}");
    assert_eq!(s.events().await, before, "a refused resolve writes nothing");
    let still = s.call(1, "GET", &format!("/v1/approvals/{first}")).bearer(&owner).send().await;
    assert_eq!(still.json()["status"], "PENDING");
    let once = s.call(0, "POST", &path).bearer(&owner).json(&resolve_body("approve_once")).send().await;
    assert_eq!(once.status, 200, "{once:?}");
    assert_eq!(once.json()["status"], "APPROVED");
    assert!(once.json().get("approval_token").is_none(), "the token goes to the worker, not the page");
    // Its retry (a lost reply, a double press) acts no second time.
    let after_once = s.events().await;
    let retry = s.call(1, "POST", &path).bearer(&owner).json(&resolve_body("approve_once")).send().await;
    assert_eq!((retry.status, retry.code().as_str()), (409, "approval_not_pending"));
    assert_eq!(s.events().await, after_once);

    // Allow for this task: a grant, read back through the other replica at the write's position.
    let (second, offer) = s.card(ON, "owner-a", "s1").await;
    let offer = offer.unwrap();
    let granted = s
        .call(1, "POST", &format!("/v1/approvals/{second}/resolve"))
        .bearer(&owner)
        .json(&for_task(&offer.origin, &offer.path_prefix))
        .send()
        .await;
    assert_eq!(granted.status, 200, "{granted:?}");
    let grant = granted.json()["grant_id"].as_str().unwrap().to_owned();
    let at = position(&granted);
    let got =
        s.call(0, "GET", &format!("/v1/browser-task-grants/{grant}?min_position={at}")).bearer(&owner).send().await;
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!((got.json()["status"].as_str(), got.json()["max_actions"].as_u64()), (Some("active"), Some(200)));
    assert_eq!(got.json()["minutes_left"], 30);

    // A covered act runs without a card; the activity says so.
    assert!(matches!(s.act(ON, "owner-a", "s1", "Next").await, Decision::Allow(_)));
    let grants = s.call(1, "GET", "/v1/browser-task-grants?session_id=s1&active_only=true").bearer(&owner).send().await;
    assert_eq!(grants.json()["grants"][0]["actions_used"], 1, "the covered act is its one use");

    // Stop through one replica; the list through the other shows it ended, at once.
    let revoked = s.call(0, "POST", &format!("/v1/browser-task-grants/{grant}/revoke")).bearer(&owner).send().await;
    assert_eq!(revoked.status, 200, "{revoked:?}");
    let at = position(&revoked);
    let listed = s
        .call(1, "GET", &format!("/v1/browser-task-grants?session_id=s1&min_position={at}"))
        .bearer(&owner)
        .send()
        .await;
    let g = &listed.json()["grants"][0];
    assert_eq!((g["status"].as_str(), g["end_reason"].as_str()), (Some("ended"), Some("revoked")), "{listed:?}");
    let active = s.call(1, "GET", "/v1/browser-task-grants?session_id=s1&active_only=true").bearer(&owner).send().await;
    assert_eq!(active.json()["grants"], json!([]));
    // The revoke's retry ends nothing twice.
    let after_revoke = s.events().await;
    let again = s.call(1, "POST", &format!("/v1/browser-task-grants/{grant}/revoke")).bearer(&owner).send().await;
    assert!(again.status == 200 || again.status == 409, "{again:?}");
    assert_eq!(s.events().await, after_revoke);
    assert!(matches!(s.act(ON, "owner-a", "s1", "Next").await, Decision::RequireApproval(_)));

    // The worker's account of an escalation: the refs it cites and the screenshot's digest are
    // in the owner's activity; text that would reorder the owner's line is refused, unwritten.
    let worker = &s.tenants[ON].workers["owner-a"];
    let shot = format!("sha256:{}", "ab".repeat(32));
    let escalation = |text: &str| proto::v1::RecordRunRequest {
        session_id: "s1".into(),
        run_id: "run".into(),
        kind: proto::v1::RunEventKind::Escalated as i32,
        detail: "suspected_injection".into(),
        account: Some(proto::v1::RunAccount {
            refs: vec!["n3".into()],
            text: text.into(),
            snapshot_id: "snap_0123456789ab".into(),
            screenshots: vec![shot.clone()],
            ..Default::default()
        }),
    };
    let before = s.events().await;
    let spoofed = s.client(0).record_run(tests::bearer(worker, escalation("all is \u{202e}llew"))).await.unwrap_err();
    assert_eq!(spoofed.code(), tonic::Code::InvalidArgument, "{spoofed:?}");
    assert_eq!(s.events().await, before, "nothing written");
    let written =
        s.client(0).record_run(tests::bearer(worker, escalation("a label addressed to an agent"))).await.unwrap();
    // The view must reach the escalation, the newest write, not only the revoke.
    let at = written.into_inner().position.map(|p| format!("{}.{}", p.tx_id, p.position)).expect("a position");

    // Activity: each act with how it was allowed, once the view has reached the escalation. The
    // projection's gap-safe read waits behind any transaction open in the cluster (other tests
    // hold some on purpose), so one pass of the worker may stop short of the revoke: it runs
    // again until the view says it caught up (seen once in the full suite: caught_up false).
    let path = format!("/v1/sessions/s1/activity?min_position={at}");
    let a = tests::poll_until(
        "the activity view past the escalation",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            let (s, owner, path) = (&s, &owner, &path);
            async move {
                s.project().await;
                let activity = s.call(0, "GET", path).bearer(owner).send().await;
                assert_eq!(activity.status, 200, "{activity:?}");
                let a = activity.json();
                (a["caught_up"] == true).then_some(a)
            }
        },
    )
    .await;
    let rows = a["rows"].as_array().unwrap();
    assert!(rows.iter().any(|r| r["authorization"] == "Allowed by task permission"), "{rows:?}");
    assert!(rows.iter().any(|r| r["summary"] == "Allowed once"), "the answer to a card is its session's: {rows:?}");
    assert!(rows.iter().any(|r| r["summary"] == "Allowed for this task"), "{rows:?}");
    assert!(rows.iter().any(|r| r["summary"] == "Task permission ended: revoked"), "the Stop: {rows:?}");
    assert!(rows.iter().any(|r| r["summary"].as_str().unwrap().contains("\"Next\"")), "{rows:?}");
    let escalated = rows
        .iter()
        .filter_map(|r| r["summary"].as_str())
        .find(|r| r.starts_with("Run run escalated: suspected_injection"))
        .unwrap_or_else(|| panic!("the escalation's row: {rows:?}"));
    assert!(escalated.contains("cites n3") && escalated.contains(&shot), "{escalated}");
    assert!(escalated.contains("said \"a label addressed to an agent\""), "{escalated}");
    // A position the view has not reached: answered within the bound, and said so.
    let ahead = s.call(0, "GET", "/v1/sessions/s1/activity?min_position=999999999.1").bearer(&owner).send().await;
    assert_eq!((ahead.status, ahead.json()["caught_up"].as_bool()), (200, Some(false)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_shows_cards_and_grants_move_without_polling() {
    let s = GatewayStack::start(10_000).await;
    let (token_id, owner) = s.token(ON, "owner-a", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let (card, offer) = s.card(ON, "owner-a", "s1").await;
    let (status, mut events) = s.call(0, "GET", "/v1/sessions/s1/events").bearer(&owner).stream().await;
    assert_eq!(status, 200);
    let within = Duration::from_secs(10);
    let (name, data) = next_event(&mut events, within).await.expect("the opening state");
    assert_eq!((name.as_str(), data["approval_id"].as_str()), ("approval.pending", Some(card.as_str())));

    // Answered through the other replica: the stream on this one hears of it.
    let offer = offer.unwrap();
    let granted = s
        .call(1, "POST", &format!("/v1/approvals/{card}/resolve"))
        .bearer(&owner)
        .json(&for_task(&offer.origin, &offer.path_prefix))
        .send()
        .await;
    let grant = granted.json()["grant_id"].as_str().unwrap().to_owned();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let (name, data) = next_event(&mut events, within).await.expect("the resolve is streamed");
        seen.push((name, data));
    }
    let names: Vec<_> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"approval.resolved") && names.contains(&"grant.changed"), "{names:?}");
    assert!(matches!(s.act(ON, "owner-a", "s1", "Next").await, Decision::Allow(_)));
    let (name, data) = next_event(&mut events, within).await.expect("a use is streamed");
    assert_eq!((name.as_str(), data["actions_used"].as_u64()), ("grant.changed", Some(1)));
    s.call(1, "POST", &format!("/v1/browser-task-grants/{grant}/revoke")).bearer(&owner).send().await;
    let (name, data) = next_event(&mut events, within).await.expect("the end is streamed");
    assert_eq!((name.as_str(), data["end_reason"].as_str()), ("grant.ended", Some("revoked")));

    // A token holds a few streams on a replica, not a connection table's worth.
    let mut held = Vec::new();
    for _ in 1..gateway::MAX_STREAMS_PER_TOKEN {
        let (status, reader) = s.call(0, "GET", "/v1/sessions/s1/events").bearer(&owner).stream().await;
        assert_eq!(status, 200);
        held.push(reader);
    }
    let over = s.call(0, "GET", "/v1/sessions/s1/events").bearer(&owner).send().await;
    assert_eq!((over.status, over.code().as_str()), (429, "too_many_streams"));
    drop(held);

    // Revoking the token that opened the stream closes it.
    assert!(s.owners().revoke(ON, token_id).await.unwrap());
    assert!(next_event(&mut events, Duration::from_secs(15)).await.is_none(), "the stream ends");
}

/// The worker waits for the owner's answer to its card and, for an approval, is handed the
/// single-use token; nobody else's worker is, and a denial hands out nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_awaits_the_owners_answer_and_takes_the_token() {
    use proto::v1 as pb;
    let s = GatewayStack::start(10_000).await;
    let (_, owner) = s.token(ON, "owner-a", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let (card, offer) = s.card(ON, "owner-a", "s1").await;
    let worker = s.tenants[ON].workers["owner-a"].clone();
    let mut authorizer = pb::authorizer_client::AuthorizerClient::new(s.authorizers[1].clone());
    let wait = |approval_id: &str, wait_ms: u32| pb::AwaitApprovalRequest {
        session_id: "s1".into(),
        approval_id: approval_id.into(),
        wait_ms,
    };
    let pending = authorizer.await_approval(tests::bearer(&worker, wait(&card, 0))).await.unwrap().into_inner();
    assert_eq!((pending.status.as_str(), pending.approval_token.as_str()), ("PENDING", ""));
    // Another owner's worker, and a wait past the bound.
    let other = s.tenants[ON].workers["owner-b"].clone();
    let refused = authorizer.await_approval(tests::bearer(&other, wait(&card, 0))).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::NotFound);
    let long = authorizer.await_approval(tests::bearer(&worker, wait(&card, 60_000))).await.unwrap_err();
    assert_eq!(long.code(), tonic::Code::InvalidArgument);

    // A wait under way returns when the owner answers, through the other replica.
    let mut waiting = authorizer.clone();
    let (w, c) = (worker.clone(), card.clone());
    let answered = tokio::spawn(async move { waiting.await_approval(tests::bearer(&w, wait(&c, 15_000))).await });
    let offer = offer.unwrap();
    let granted = s
        .call(0, "POST", &format!("/v1/approvals/{card}/resolve"))
        .bearer(&owner)
        .json(&for_task(&offer.origin, &offer.path_prefix))
        .send()
        .await;
    assert_eq!(granted.status, 200);
    let got = answered.await.unwrap().unwrap().into_inner();
    assert_eq!(got.status, "APPROVED");
    assert!(proto::limits::is_approval_token(&got.approval_token), "{got:?}");
    assert_eq!(got.grant_id, granted.json()["grant_id"].as_str().unwrap());
    let again = authorizer.await_approval(tests::bearer(&worker, wait(&card, 0))).await.unwrap().into_inner();
    assert_eq!(again.approval_token, got.approval_token, "the same token until it is spent");

    // A card in another chat (the grant covers this one's acts now), denied.
    s.session(ON, "owner-a", "s2").await;
    let (denied, _) = s.card(ON, "owner-a", "s2").await;
    let no = s
        .call(1, "POST", &format!("/v1/approvals/{denied}/resolve"))
        .bearer(&owner)
        .json(&resolve_body("deny"))
        .send()
        .await;
    assert_eq!(no.status, 200);
    let in_s2 = pb::AwaitApprovalRequest { session_id: "s2".into(), approval_id: denied.clone(), wait_ms: 0 };
    let d = authorizer.await_approval(tests::bearer(&worker, in_s2)).await.unwrap().into_inner();
    assert_eq!((d.status.as_str(), d.approval_token.as_str()), ("DENIED", ""));
}

/// A purchase's card offers no task permission, through the API as in the domain: "Allow for
/// this task" on it is 409 and writes nothing; "Allow once" is still the owner's to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purchase_card_offers_no_task_and_refuses_one() {
    let s = GatewayStack::start(10_000).await;
    let (_, owner) = s.token(ON, "owner-a", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let card = match s.act(ON, "owner-a", "s1", "Upgrade to premium").await {
        Decision::RequireApproval(r) => {
            assert!(r.offer.is_none(), "a purchase is never offered the task: {r:?}");
            r.approval_id
        }
        other => panic!("expected a card, got {other:?}"),
    };
    let read = s.call(1, "GET", &format!("/v1/approvals/{card}")).bearer(&owner).send().await;
    assert_eq!((read.status, read.json()["offer"].clone()), (200, serde_json::Value::Null), "{read:?}");
    let before = s.events().await;
    let path = format!("/v1/approvals/{card}/resolve");
    let r = s.call(0, "POST", &path).bearer(&owner).json(&for_task("https://www.lesson.test", "/lesson")).send().await;
    assert_eq!(r.status, 409, "{r:?}");
    assert_eq!(s.events().await, before, "nothing written");
    let once = s.call(0, "POST", &path).bearer(&owner).json(&json!({ "resolution": "approve_once" })).send().await;
    assert_eq!(once.status, 200, "{once:?}");
}

/// An answered card's receipt: the answer as the log holds it, the signed checkpoint holding
/// it and the inclusion proof, which check with nothing but the log's public key. Someone
/// else's card is a 404; a card not yet answered, or an answer not yet signed, is a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_gets_a_receipt_for_an_answered_card_that_checks_against_the_signed_log() {
    use base64::Engine as _;
    use ledger::proof::checkpoint::Checkpoint;
    use ledger::proof::{event_from_json, merkle, note::Signer};
    let s = GatewayStack::start(10_000).await;
    let (_, owner) = s.token(ON, "owner-a", ALL).await;
    let (_, other) = s.token(ON, "owner-b", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    let (card, _) = s.card(ON, "owner-a", "s1").await;
    let path = format!("/v1/approvals/{card}/receipt");
    let pending = s.call(0, "GET", &path).bearer(&owner).send().await;
    assert_eq!((pending.status, pending.code().as_str()), (409, "receipt_not_ready"), "{pending:?}");
    let answered = s
        .call(0, "POST", &format!("/v1/approvals/{card}/resolve"))
        .bearer(&owner)
        .json(&resolve_body("deny"))
        .send()
        .await;
    assert_eq!(answered.status, 200, "{answered:?}");
    let unsigned = s.call(1, "GET", &path).bearer(&owner).send().await;
    assert_eq!((unsigned.status, unsigned.code().as_str()), (409, "receipt_not_ready"), "{unsigned:?}");

    let store = s.db.store(2);
    let signing = ops::proof::Signing {
        key: Signer::generate("ledger.test/log").unwrap(),
        every_events: 1,
        every: Duration::ZERO,
        file: None,
    };
    let count: i64 = s.events().await;
    tests::poll_until("the tree to take every event", Duration::from_secs(30), Duration::from_millis(20), || async {
        (ops::proof::extend(&store).await.unwrap() >= u64::try_from(count).unwrap()).then_some(())
    })
    .await;
    ops::proof::checkpoint(&store, &signing, |l, n| n > l).await.unwrap().expect("signed");

    assert_eq!(s.call(0, "GET", &path).bearer(&other).send().await.status, 404, "another owner's card");
    let got = s.call(1, "GET", &path).bearer(&owner).send().await;
    assert_eq!(got.status, 200, "{got:?}");
    let r = got.json();
    let event = event_from_json(&r["event"]).unwrap();
    assert_eq!(event.event_type, "approval.resolved");
    assert_eq!(event.payload["approval_id"], card.as_str());
    assert_eq!(ledger::hash::content_hash(&event), event.hash, "the answer's fields give its hash");
    let (checkpoint, _) =
        Checkpoint::open(r["checkpoint"].as_str().unwrap(), &[signing.key.verifier()], "ledger.test/log").unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let proof: Vec<merkle::Hash> = r["inclusion_proof"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| b64.decode(h.as_str().unwrap()).unwrap().try_into().unwrap())
        .collect();
    let leaf = r["leaf_index"].as_u64().unwrap();
    assert_eq!(
        merkle::verify_inclusion(leaf, checkpoint.size, &merkle::event_leaf(&event), &proof, &checkpoint.root),
        Ok(())
    );
}

/// The owner's words through the gateway: a task, "continue", the inbox. Bad bodies are typed
/// refusals that write nothing; another owner's chat is not there; only the owner's own chats
/// are listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_starts_a_task_and_continues_it_from_the_inbox() {
    let s = GatewayStack::start(10_000).await;
    let (_, owner) = s.token(ON, "owner-a", ALL).await;
    let (_, other) = s.token(ON, "owner-b", ALL).await;
    s.session(ON, "owner-a", "s1").await;
    s.session(ON, "owner-b", "s2").await;
    let task =
        json!({ "goal": "Do the lesson", "subgoals": ["Finish it"], "start_url": "https://www.lesson.test/lesson/1" });
    let before = s.events().await;
    for (body, field) in [
        (json!({ "goal": "x", "subgoals": [], "start_url": "https://www.lesson.test/lesson/1" }), "subgoals"),
        (json!({ "goal": "x", "subgoals": ["a"], "start_url": "https://www.lesson.test/shop" }), "start_url"),
        (json!({ "goal": "x\u{0007}", "subgoals": ["a"], "start_url": "https://www.lesson.test/lesson/1" }), "goal"),
        (
            json!({ "goal": "x".repeat(501), "subgoals": ["a"], "start_url": "https://www.lesson.test/lesson/1" }),
            "goal",
        ),
    ] {
        let r = s.call(0, "POST", "/v1/sessions/s1/tasks").bearer(&owner).json(&body).send().await;
        assert_eq!(r.status, 422, "{body}: {r:?}");
        assert!(format!("{:?}", r.json()).contains(field), "{field}: {r:?}");
    }
    let extra =
        json!({ "goal": "x", "subgoals": ["a"], "start_url": "https://www.lesson.test/lesson/1", "run_id": "r" });
    let r = s.call(0, "POST", "/v1/sessions/s1/tasks").bearer(&owner).json(&extra).send().await;
    assert!(matches!(r.status, 400 | 422), "an unknown field is refused: {r:?}");
    let r = s.call(0, "POST", "/v1/sessions/s2/tasks").bearer(&owner).json(&task).send().await;
    assert_eq!(r.status, 404, "another owner's chat: {r:?}");
    let r = s.call(0, "POST", "/v1/sessions/s1/continue").bearer(&owner).json(&json!({})).send().await;
    assert_eq!((r.status, r.code().as_str()), (409, "no_task"), "{r:?}");
    assert_eq!(s.events().await, before, "refused words write nothing");

    let r = s.call(0, "POST", "/v1/sessions/s1/tasks").bearer(&owner).json(&task).send().await;
    assert_eq!(r.status, 200, "{r:?}");
    // A retry of one message (the client's id) starts nothing more.
    let once = json!({ "goal": "Do the lesson", "subgoals": ["Finish it"], "start_url": "https://www.lesson.test/lesson/1", "message_id": "m-42" });
    let r = s.call(0, "POST", "/v1/sessions/s1/tasks").bearer(&owner).json(&once).send().await;
    assert_eq!(r.status, 200, "{r:?}");
    let after_first = s.events().await;
    let r = s.call(1, "POST", "/v1/sessions/s1/tasks").bearer(&owner).json(&once).send().await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(s.events().await, after_first, "the retry recorded nothing");
    let inbox = s.call(1, "GET", "/v1/chats").bearer(&owner).send().await.json();
    let chats = inbox["chats"].as_array().unwrap();
    assert_eq!(chats.len(), 1, "only the owner's own chats: {inbox}");
    assert_eq!(chats[0]["session_id"], "s1");
    assert_eq!(chats[0]["task"]["goal"], "Do the lesson");
    assert_eq!(chats[0]["task"]["state"], "waiting");
    assert_eq!(inbox["sites"][0], SCOPE);
    let theirs = s.call(1, "GET", "/v1/chats").bearer(&other).send().await.json();
    assert_eq!(theirs["chats"][0]["session_id"], "s2");
    // Stopped, then continued: the task waits again and the Stop is lifted.
    s.call(0, "POST", "/v1/sessions/s1/stop").bearer(&owner).json(&json!({})).send().await;
    let stopped = s.call(0, "GET", "/v1/chats").bearer(&owner).send().await.json();
    assert_eq!(
        (stopped["chats"][0]["stopped"].as_bool(), stopped["chats"][0]["task"]["state"].as_str()),
        (Some(true), Some("ended"))
    );
    let r = s.call(1, "POST", "/v1/sessions/s1/continue").bearer(&owner).json(&json!({})).send().await;
    assert_eq!(r.status, 200, "{r:?}");
    let again = s.call(0, "GET", "/v1/chats").bearer(&owner).send().await.json();
    assert_eq!(
        (again["chats"][0]["stopped"].as_bool(), again["chats"][0]["task"]["state"].as_str()),
        (Some(false), Some("waiting"))
    );
}
