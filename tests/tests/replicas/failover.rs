//! Failover with PostgreSQL's own replication: the primary dies with SIGKILL while two replicas
//! spend one grant's uses; its synchronous standby is promoted; every service, given both hosts
//! with `target_session_attrs=read-write`, finds it.

#[allow(clippy::wildcard_imports)] // the suite's helpers and imports
use super::*;

/// Four workers spend a grant's uses through two replicas; after a worker's tenth allow the
/// standby is cut off until the primary has written past it, then the primary is killed with
/// SIGKILL and the standby promoted. Every allow a caller saw is in the new primary's log, the uses run 1 to 200 once each, the inline row equals them, the chains and the
/// inline state verify, callers saw only UNAVAILABLE or UNKNOWN before a settled answer, and the
/// projection worker continues from its checkpoint to the log's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_under_load_fails_over_and_loses_no_allow() {
    let pair = tests::replication::Pair::start().await;
    let db = pair.db().await;
    let t = Tokens::register(&db, TENANT).await;
    apply_settings(&db.url(), TENANT, lesson()).await.unwrap();
    let replicas = [Replica::start(&db, &[]).await, Replica::start(&db, &[]).await];
    let clients = vec![replicas[0].client().await, replicas[1].client().await];
    let mut projections = tokio::process::Command::new(tests::grantctl())
        .args(["serve", "projections"])
        .env("DATABASE_URL", db.url())
        .env("PROJECTIONS_METRICS_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the projection workers start");
    let (mut a, mut b) = (clients[0].clone(), clients[1].clone());
    let grant_id = grant_across(&mut a, &mut b, &t, "s1", "p1").await;

    let tenth = Arc::new(tokio::sync::Notify::new());
    let heard = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (mut clients, t, tenth, heard) = (clients.clone(), t.clone(), Arc::clone(&tenth), Arc::clone(&heard));
            tokio::spawn(async move {
                let (mut allowed, mut codes, mut unheard) = (Vec::new(), Vec::new(), 0);
                loop {
                    let (decision, seen) = settled(&mut clients, w, &t, act("s1", "agent-7")).await;
                    codes.extend(seen);
                    match decision {
                        Some(Decision::Allow(a)) => {
                            heard.fetch_add(1, Ordering::Relaxed);
                            allowed.push((a.grant_id, a.use_ordinal));
                        }
                        Some(Decision::RequireApproval(_)) => return (allowed, codes, unheard),
                        None => unheard += 1,
                        other => panic!("a wrong answer: {other:?}"),
                    }
                    if w == 0 && allowed.len() == 10 {
                        tenth.notify_one();
                    }
                }
            })
        })
        .collect();
    tenth.notified().await;
    // The standby is cut off first: the primary's last commits are its own, and with a
    // synchronous standby none of them was acknowledged.
    pair.cut_standby().await;
    // Were the standby not synchronous, allows would go on being heard now: give them a moment
    // to be, so that the check below sees their loss (with it, none comes and the moment ends).
    let before = heard.load(Ordering::Relaxed);
    let _ = tokio::time::timeout(Duration::from_millis(300), async {
        while heard.load(Ordering::Relaxed) < before + 5 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    pair.kill_primary().await;
    pair.promote().await;
    let (mut allowed, mut codes, mut unheard) = (Vec::new(), Vec::new(), 0);
    for w in workers {
        let (a, c, u) = w.await.unwrap();
        allowed.extend(a);
        codes.extend(c);
        unheard += u;
    }
    assert!(!codes.is_empty(), "no call met the failover: the primary died after the work was done");

    // Every answer a caller saw is in the new primary's log, and the log holds 200 uses, once each.
    let client = db.client().await;
    let uses = recorded_uses(&db, &grant_id).await;
    assert_eq!(uses, (1..=200).collect::<Vec<i64>>(), "exactly 200 recorded uses, once each");
    assert!(allowed.iter().all(|(g, _)| *g == grant_id));
    let mut seen: Vec<i64> = allowed.iter().map(|(_, o)| i64::from(*o)).collect();
    seen.sort_unstable();
    let heard = seen.len();
    seen.dedup();
    assert_eq!(seen.len(), heard, "a use was answered to two calls");
    // Every allow heard is recorded; a recorded use not heard is one whose call was answered
    // that its grant had ended (and so was never dispatched).
    assert!(seen.iter().all(|o| uses.contains(o)), "an allow heard is not recorded");
    assert_eq!(seen.len() + unheard, uses.len(), "a recorded use reached no caller");
    assert_eq!(actions_used(&db, grant_id.parse().unwrap()).await, 200, "the row equals its use events");

    // The chains and the inline state verify on the new primary.
    drop(replicas);
    let checked = ops::check::run(&db.config, ledger::READ_PAGE).await.expect("grantctl check passes");
    assert!(checked.read >= 200, "{checked}");
    let (ok, said) = ops::authority::authority_verify(&db.config).await.unwrap();
    assert!(ok, "{said}");
    // The projection worker reconnected and went on from its checkpoint to the end of the log.
    let end = client.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get::<_, i64>(0);
    let status = tests::poll_until(
        "the audit projection to catch up",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let client = &client;
            async move {
                let s = projections::worker::status(client).await.ok()?;
                s.iter().all(|s| s.lag_events == 0 && s.applied >= u64::try_from(end).unwrap()).then_some(s)
            }
        },
    )
    .await;
    let audit: i64 = client.query_one("SELECT count(*) FROM audit_log", &[]).await.unwrap().get(0);
    assert_eq!(audit, end, "the audit log holds every event once: {status:?}");
    projections.start_kill().unwrap();
}
