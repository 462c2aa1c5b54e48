//! Tasks the owner starts in a chat: only through the gateway, into a configured site, and run
//! by one worker at a time. Two replicas on one PostgreSQL race for a task; a worker that stops
//! renewing loses it to another, and its run is then refused at its next act.

use std::time::Duration;

use super::*;

/// A task's start, as the owner's gateway sends it.
pub(super) fn task(session: &str, start_url: &str) -> pb::StartTaskRequest {
    pb::StartTaskRequest {
        session_id: session.into(),
        message_id: format!("m-{}", uuid::Uuid::new_v4().simple()),
        goal: "Finish today's lesson".into(),
        subgoals: vec!["Open the lesson".into(), "Finish it".into()],
        start_url: start_url.into(),
    }
}

pub(super) const START: &str = "https://www.lesson.test/lesson/1";

/// `act` by run `run_id`.
fn act_by(run_id: &str) -> pb::AuthorizeRequest {
    let mut a = act(None);
    a.run.as_mut().unwrap().run_id = run_id.into();
    a
}

fn denied(reply: &pb::AuthorizeReply) -> Option<&str> {
    match &reply.decision {
        Some(pb::authorize_reply::Decision::Deny(d)) => Some(d.code.as_str()),
        _ => None,
    }
}

fn claim_as(holder: &str) -> pb::ClaimTaskRequest {
    pb::ClaimTaskRequest { holder: holder.into() }
}

/// A second replica on the same database: its own authority, credentials read from `db`.
async fn second_replica(db: &TestDb, lease: Duration) -> (AuthorizerClient<Channel>, tokio::sync::oneshot::Sender<()>) {
    let authority =
        Arc::new(Authority::new(PgGrants::new(db.store(4)), Policy::empty(), TenantId::new(TENANT).unwrap()));
    let service = AuthorizerService::new(authority, Credentials::postgres(db.pool(2)), tests::ticket_keys())
        .accepting_unsealed_facts()
        .with_task_lease(lease);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, service, None, async {
        let _ = stopped.await;
    }));
    let channel = Channel::from_shared(format!("http://127.0.0.1:{port}")).unwrap().connect().await.unwrap();
    (AuthorizerClient::new(channel), stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_goes_to_one_worker_and_to_another_once_its_lease_lapses() {
    let db = TestDb::new().await;
    let lease = Duration::from_millis(1500);
    let Served { client: mut a, credentials, _stop, .. } =
        start_with_lease(PgGrants::new(db.store(4)), Credentials::postgres(db.pool(2)), Some(lease)).await;
    drop(credentials);
    let (mut b, _stop_b) = second_replica(&db, lease).await;
    session(&mut a).await;
    a.start_task(owner(task("s1", START))).await.unwrap();

    // Eight workers ask at once, four on each replica: one of them takes the task.
    let mut asks = tokio::task::JoinSet::new();
    for n in 0..8 {
        let mut c = if n % 2 == 0 { a.clone() } else { b.clone() };
        asks.spawn(async move { c.claim_task(owner(claim_as(&format!("worker-{n}")))).await });
    }
    let mut taken = Vec::new();
    while let Some(r) = asks.join_next().await {
        match r.unwrap() {
            Ok(reply) => taken.extend(reply.into_inner().task),
            // Contended reads are refused whole and may be asked again; nothing else is.
            Err(e) => assert_eq!(e.code(), Code::Aborted, "{e:?}"),
        }
    }
    assert_eq!(taken.len(), 1, "one worker took the task: {taken:?}");
    let first = taken.pop().unwrap();
    assert_eq!((first.attempt, first.session_id.as_str(), first.browser_profile_id.as_str()), (1, "s1", "profile-1"));
    assert_eq!(first.subgoals, ["Open the lesson", "Finish it"]);
    assert!(b.claim_task(owner(claim_as("late"))).await.unwrap().into_inner().task.is_none(), "it is held");

    // Its run acts; a run of the task it does not hold is refused, not carded.
    let own = a.authorize(owner(act_by(&first.run_id))).await.unwrap().into_inner();
    assert_eq!(denied(&own), None, "the holder's run is decided: {own:?}");
    let forged = format!("task-{}-2", first.task_id);
    let other = b.authorize(owner(act_by(&forged))).await.unwrap().into_inner();
    assert_eq!(denied(&other), Some(grant_domain::model::RUN_SUPERSEDED));

    // Renewed, it stays; left alone, another worker takes it once the lease has passed.
    let renew = |run: &str| pb::RenewTaskRequest { session_id: "s1".into(), run_id: run.into(), holder: "w".into() };
    let kept = b.renew_task(owner(renew(&first.run_id))).await.unwrap().into_inner();
    assert!(kept.lease_until_ms > first.lease_until_ms, "the lease moved on");
    let second = tests::poll_until("the lapsed task taken again", lease * 10, Duration::from_millis(100), || {
        let mut b = b.clone();
        async move { b.claim_task(owner(claim_as("worker-b"))).await.ok().and_then(|r| r.into_inner().task) }
    })
    .await;
    assert_eq!((second.task_id.as_str(), second.attempt), (first.task_id.as_str(), 2));
    assert_ne!(second.run_id, first.run_id);

    // The first run lost it: the card it asked is withdrawn, its acts and renewals are refused.
    let list = pb::ListApprovalsRequest { session_id: "s1".into(), pending_only: true, min_position: None };
    let pending = a.list_approvals(owner(list)).await.unwrap().into_inner().approvals;
    assert!(pending.is_empty(), "the lost run's card waits for nothing: {pending:?}");
    // Another owner's worker cannot keep the task alive.
    let theirs = a.renew_task(intruder(renew(&second.run_id))).await.unwrap_err();
    assert_eq!(theirs.code(), Code::NotFound);
    let late = a.authorize(owner(act_by(&first.run_id))).await.unwrap().into_inner();
    assert_eq!(denied(&late), Some(grant_domain::model::RUN_SUPERSEDED));
    let lost = a.renew_task(owner(renew(&first.run_id))).await.unwrap_err();
    assert_eq!((lost.code(), reason(&lost).as_str()), (Code::FailedPrecondition, "TASK_NOT_HELD"));

    // Its run's end ends the task: nobody takes it again.
    let done = pb::RecordRunRequest {
        session_id: "s1".into(),
        run_id: second.run_id.clone(),
        kind: pb::RunEventKind::Completed as i32,
        detail: "ES-1".into(),
        account: None,
    };
    a.record_run(owner(done)).await.unwrap();
    let chats = a.list_chats(owner(pb::ListChatsRequest {})).await.unwrap().into_inner();
    assert_eq!(chats.chats[0].task.as_ref().unwrap().state, "done");
    assert!(a.claim_task(owner(claim_as("w"))).await.unwrap().into_inner().task.is_none());
    // A finished task is not done again by "continue".
    let again = a.continue_task(owner(pb::ContinueTaskRequest { session_id: "s1".into(), message_id: "m9".into() }));
    let again = again.await.unwrap_err();
    assert_eq!((again.code(), reason(&again).as_str()), (Code::FailedPrecondition, "TASK_DONE"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_starts_tasks_in_a_configured_site_and_continues_them_after_a_stop() {
    let Served { mut client, position, _stop, .. } = start_in_process(MemoryGrants::default()).await;
    session(&mut client).await;
    let at = position();
    // Refused whole, and nothing written: outside every site, no step, a hidden character, an
    // http page, another owner's chat, a chat that is not there.
    let outside = task("s1", "https://www.lesson.test/shop/1");
    let e = client.start_task(owner(outside)).await.unwrap_err();
    assert_eq!((e.code(), field_violation(&e).as_str()), (Code::InvalidArgument, "start_url"));
    let e = client.start_task(owner(task("s1", "http://www.lesson.test/lesson/1"))).await.unwrap_err();
    assert_eq!(field_violation(&e), "start_url");
    let e = client.start_task(owner(pb::StartTaskRequest { subgoals: vec![], ..task("s1", START) })).await.unwrap_err();
    assert_eq!(field_violation(&e), "subgoals");
    let hidden = pb::StartTaskRequest { goal: "Finish\u{202e} it".into(), ..task("s1", START) };
    assert_eq!(field_violation(&client.start_task(owner(hidden)).await.unwrap_err()), "goal");
    assert_eq!(client.start_task(intruder(task("s1", START))).await.unwrap_err().code(), Code::NotFound);
    assert_eq!(client.start_task(owner(task("s9", START))).await.unwrap_err().code(), Code::NotFound);
    let e = client.continue_task(owner(pb::ContinueTaskRequest { session_id: "s1".into(), message_id: "m2".into() }));
    let e = e.await.unwrap_err();
    assert_eq!((e.code(), reason(&e).as_str()), (Code::FailedPrecondition, "NO_TASK"));
    assert_eq!(position(), at, "nothing was written");

    client.start_task(owner(task("s1", START))).await.unwrap();
    // Another owner's worker never takes it.
    assert!(client.claim_task(intruder(claim_as("w0"))).await.unwrap().into_inner().task.is_none());
    let claimed = client.claim_task(owner(claim_as("w1"))).await.unwrap().into_inner().task.unwrap();
    let chats = client.list_chats(owner(pb::ListChatsRequest {})).await.unwrap().into_inner();
    assert_eq!(chats.sites, ["https://www.lesson.test/lesson"]);
    let t = chats.chats[0].task.clone().unwrap();
    assert_eq!(
        (t.state.as_str(), t.goal.as_str(), chats.chats[0].has_browser),
        ("running", "Finish today's lesson", true)
    );
    assert!(client.list_chats(intruder(pb::ListChatsRequest {})).await.unwrap().into_inner().chats.is_empty());

    // The owner's Stop ends the task: its run is refused, and no worker takes it.
    client.stop_session(owner(pb::StopSessionRequest { session_id: "s1".into() })).await.unwrap();
    let stopped = client.authorize(owner(act_by(&claimed.run_id))).await.unwrap().into_inner();
    assert_eq!(denied(&stopped), Some(proto::DENY_SESSION_STOPPED));
    assert!(client.claim_task(owner(claim_as("w2"))).await.unwrap().into_inner().task.is_none());
    let chats = client.list_chats(owner(pb::ListChatsRequest {})).await.unwrap().into_inner();
    assert!(chats.chats[0].stopped);
    assert_eq!(chats.chats[0].task.as_ref().unwrap().state, "ended");

    // "Continue": the Stop lifts and the same task waits again, as a new task; the old run stays
    // refused.
    let go_on = pb::ContinueTaskRequest { session_id: "s1".into(), message_id: "m3".into() };
    client.continue_task(owner(go_on)).await.unwrap();
    let chats = client.list_chats(owner(pb::ListChatsRequest {})).await.unwrap().into_inner();
    let again = chats.chats[0].task.clone().unwrap();
    assert!(!chats.chats[0].stopped);
    assert_eq!((again.state.as_str(), again.goal.as_str()), ("waiting", "Finish today's lesson"));
    assert_ne!(again.task_id, t.task_id);
    let next = client.claim_task(owner(claim_as("w3"))).await.unwrap().into_inner().task.unwrap();
    assert_eq!((next.task_id.as_str(), next.attempt), (again.task_id.as_str(), 1));
    let old = client.authorize(owner(act_by(&claimed.run_id))).await.unwrap().into_inner();
    assert_eq!(denied(&old), Some(grant_domain::model::RUN_SUPERSEDED));
    let fresh = client.authorize(owner(act_by(&next.run_id))).await.unwrap().into_inner();
    assert_eq!(denied(&fresh), None, "{fresh:?}");
    // While it runs, "continue" is the owner's word alone: the run goes on.
    let go_on = pb::ContinueTaskRequest { session_id: "s1".into(), message_id: "m4".into() };
    client.continue_task(owner(go_on)).await.unwrap();
    let chats = client.list_chats(owner(pb::ListChatsRequest {})).await.unwrap().into_inner();
    assert_eq!(chats.chats[0].task.as_ref().unwrap().task_id, again.task_id);
}
