//! A message racing a use.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

/// A message that is not the owner's, recorded through replica B after A's decision read the
/// session and before A's use: the use finds the session moved on, A decides again, and the card
/// asks, the owner being no longer newest. Both when A decides on the read it remembers from its
/// last allow and when it reads afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_recorded_between_the_read_and_the_use_refuses_the_use() {
    message_between_read_and_use(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_recorded_between_a_fresh_read_and_the_use_refuses_the_use() {
    message_between_read_and_use(false).await;
}

async fn message_between_read_and_use(remembered: bool) {
    use authorizer::domain::Decision as Decided;
    let db = TestDb::new().await;
    let (a, b, req, grant_id) = in_process_pair(&db).await;
    if !remembered {
        a.backend().forget_reads();
    }
    let (from_memory, refusals) = (a.backend().remembered_uses(), a.backend().remembered_refusals());
    let pause = Arc::new(authorizer::Pause::default());
    a.backend().pause_next_use(Arc::clone(&pause));
    let waiting = {
        let (a, req) = (a.clone(), req.clone());
        tokio::spawn(
            async move { a.authorize_uncalled(&req, time::OffsetDateTime::now_utc(), uuid::Uuid::new_v4()).await },
        )
    };
    pause.reached.notified().await;
    b.execute(not_the_owner(), "worker").await.unwrap();
    pause.go.notify_one();
    let (decision, _) = waiting.await.unwrap().unwrap();
    assert!(
        matches!(&decision, Decided::RequireApproval { reason: Some(r), .. } if r.code() == "owner_not_newest"),
        "{decision:?}"
    );
    assert_eq!(actions_used(&db, grant_id).await, 1, "only the use before the message");
    assert_eq!(a.backend().remembered_uses(), from_memory, "nothing used from memory");
    let refused = a.backend().remembered_refusals() - refusals;
    assert_eq!(refused, u64::from(remembered), "the use paused was the one on the remembered read");
}

/// The other order: a use already under way holds the session, so a message recorded through B
/// meanwhile waits for it and lands after it in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_recorded_during_a_use_waits_for_it() {
    use authorizer::domain::Decision as Decided;
    let db = TestDb::new().await;
    let (a, b, req, grant_id) = in_process_pair(&db).await;
    // Hold the grant row from a test connection: A's use takes the session's share lock, then
    // waits for the row.
    let mut blocker = db.client().await;
    let held = blocker.transaction().await.unwrap();
    held.execute("SELECT 1 FROM active_task_grants WHERE grant_id = $1 FOR UPDATE", &[&grant_id]).await.unwrap();
    let using = {
        let (a, req) = (a.clone(), req.clone());
        tokio::spawn(
            async move { a.authorize_uncalled(&req, time::OffsetDateTime::now_utc(), uuid::Uuid::new_v4()).await },
        )
    };
    let watcher = db.client().await;
    // Waits until at least `at_least` statements whose text holds `what` wait on a lock.
    let blocked_on = |what: &'static str, at_least: i64| {
        let watcher = &watcher;
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let n: i64 = watcher
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                         AND wait_event_type = 'Lock' AND query LIKE $1",
                        &[&format!("%{what}%")],
                    )
                    .await
                    .unwrap()
                    .get(0);
                if n >= at_least {
                    return;
                }
                assert!(tokio::time::Instant::now() < deadline, "fewer than {at_least} waited on {what}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    blocked_on("UPDATE active_task_grants", 1).await;
    let speaking = {
        let b = b.clone();
        tokio::spawn(async move { b.execute(not_the_owner(), "worker").await })
    };
    // A's own use names the sessions table too: B waits only once two statements do.
    blocked_on("authority_sessions", 2).await;
    held.commit().await.unwrap();
    let (decision, events) = using.await.unwrap().unwrap();
    assert!(matches!(decision, Decided::Allow { use_ordinal: Some(2), .. }), "{decision:?}");
    speaking.await.unwrap().unwrap();
    assert_eq!(actions_used(&db, grant_id).await, 2);
    let grant_domain::catalogue::Event::ToolCallAuthorized(used) = &events[0] else { panic!("{events:?}") };
    let order: Vec<String> = watcher
        .query(
            "SELECT event_type FROM events WHERE event_type IN ('tool.call.authorized', 'session.message_recorded') \
             ORDER BY tx_id, global_position",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order.last().map(String::as_str), Some("session.message_recorded"), "{order:?} ({used:?})");
}
