//! The ledger against a real PostgreSQL server.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // small test counts

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use ledger::contract::{event, read_until, stream, tenant};
use ledger::{AppendError, AppendRequest, Checkpoint, EventStore, ExpectedVersion, PgStore, RecordedEvent};
use tests::TestDb;
use tokio::sync::Barrier;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_passes_the_contract() {
    let db = TestDb::new().await;
    ledger::contract::run_all(&db.store(8)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_events_round_trip_through_both_stores() {
    let db = TestDb::new().await;
    tests::typed_events_round_trip(&db.store(2)).await;
    tests::typed_events_round_trip(&ledger::MemoryStore::new()).await;
}

/// Reads everything after `from` in one call.
async fn read_from(store: &PgStore, from: Checkpoint) -> Vec<RecordedEvent> {
    store.read_all(from, 100_000).await.expect("read_all")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_never_skips_an_event_that_commits_after_a_later_one() {
    let db = TestDb::new().await;
    let store = db.store(4);

    // A takes the lower position and stays open.
    let held = tests::HeldAppend::start(
        &store,
        AppendRequest::single(tenant(), stream("a"), ExpectedVersion::NoStream, vec![event(1)]),
    )
    .await;
    let a = held.outcome.clone();
    // B takes a higher position and commits first.
    let b = store
        .append(AppendRequest::single(tenant(), stream("b"), ExpectedVersion::NoStream, vec![event(2)]))
        .await
        .unwrap();
    assert!(a.events[0].global_position < b.events[0].global_position);

    // The reader runs between B's commit and A's: it must hold B back rather than pass A.
    let early = read_from(&store, Checkpoint::START).await;
    assert!(early.is_empty(), "B delivered while A, older, was still open: {early:?}");
    let checkpoint = early.last().map_or(Checkpoint::START, RecordedEvent::checkpoint);

    held.commit().await.unwrap();
    let late = read_until(&store, checkpoint, |r| r.len() >= 2).await;
    let ids: Vec<_> = late.iter().map(|e| e.event_id).collect();
    assert_eq!(ids, [a.events[0].event_id, b.events[0].event_id], "A then B, each once");
    assert!(read_from(&store, late[1].checkpoint()).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_open_transaction_makes_the_reader_lag_not_skip() {
    let db = TestDb::new().await;
    let store = db.store(4);
    let holder = db.client().await;
    holder.batch_execute("BEGIN; SELECT pg_current_xact_id();").await.unwrap();

    let mut written = Vec::new();
    for n in 0..5 {
        let out = store
            .append(AppendRequest::single(tenant(), stream("s"), ExpectedVersion::NoStream, vec![event(n)]))
            .await
            .unwrap();
        written.push(out.events[0].event_id);
    }
    assert!(read_from(&store, Checkpoint::START).await.is_empty(), "the reader passed a running transaction's xid");

    holder.batch_execute("ROLLBACK").await.unwrap();
    let caught_up: Vec<_> =
        read_until(&store, Checkpoint::START, |r| r.len() >= 5).await.iter().map(|e| e.event_id).collect();
    assert_eq!(caught_up, written);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tailing_reader_gets_every_event_once_while_writers_race() {
    let db = TestDb::new().await;
    let store = db.store(20);
    const WRITERS: usize = 12;
    const APPENDS: u64 = 40;
    let writers: Vec<_> = (0..WRITERS)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                let s = stream("race");
                let mut ids = Vec::new();
                for n in 0..APPENDS {
                    let expected = if n == 0 { ExpectedVersion::NoStream } else { ExpectedVersion::At(n) };
                    let e = event(n);
                    ids.push(e.event_id);
                    store.append(AppendRequest::single(tenant(), s.clone(), expected, vec![e])).await.unwrap();
                }
                ids
            })
        })
        .collect();

    // Tail the log in small pages while the writers run, checkpointing on the last event read.
    let mut seen = Vec::new();
    let mut at = Checkpoint::START;
    let mut wake = store.wake_ups();
    let total = WRITERS * APPENDS as usize;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < total && tokio::time::Instant::now() < deadline {
        let page = store.read_all(at, 7).await.unwrap();
        if let Some(last) = page.last() {
            at = last.checkpoint();
            seen.extend(page.iter().map(|e| e.event_id));
        } else {
            // Woken by a commit, or re-read after a moment when held back by an open transaction.
            let _ = tokio::time::timeout(Duration::from_millis(20), wake.changed()).await;
        }
    }
    // Nothing more arrives after everything was delivered.
    assert!(store.read_all(at, 10).await.unwrap().is_empty());
    let mut written = HashSet::new();
    for w in writers {
        written.extend(w.await.unwrap());
    }
    let unique: HashSet<_> = seen.iter().copied().collect();
    assert_eq!(unique.len(), seen.len(), "an event was delivered twice");
    assert_eq!(unique, written, "the tailing reader missed events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_to_one_stream_stay_contiguous() {
    let db = TestDb::new().await;
    let s = stream("hot");
    const TASKS: usize = 32;
    const EACH: usize = 5;
    let barrier = Arc::new(Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            // Half share one store (cached heads), half have their own (read the head first).
            let store = if i % 2 == 0 { db.store(40) } else { db.store(2) };
            let (s, barrier) = (s.clone(), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                let (mut mine, mut conflicts) = (Vec::new(), 0);
                while mine.len() < EACH {
                    let current = store.read_stream(&s, 1).await.unwrap().len() as u64;
                    let expected = if current == 0 { ExpectedVersion::NoStream } else { ExpectedVersion::At(current) };
                    let e = event(i as u64);
                    match store.append(AppendRequest::single(tenant(), s.clone(), expected, vec![e.clone()])).await {
                        Ok(_) => mine.push(e.event_id),
                        Err(AppendError::Conflict { .. }) => conflicts += 1,
                        Err(other) => panic!("a loser must get a typed conflict, got {other:?}"),
                    }
                }
                (mine, conflicts)
            })
        })
        .collect();
    let (mut written, mut conflicts) = (HashSet::new(), 0);
    for t in tasks {
        let (mine, c) = t.await.unwrap();
        written.extend(mine);
        conflicts += c;
    }
    let stored = db.store(1).read_stream(&s, 1).await.unwrap();
    let versions: Vec<_> = stored.iter().map(|e| e.stream_version).collect();
    assert_eq!(versions, (1..=(TASKS * EACH) as u64).collect::<Vec<_>>(), "versions contiguous");
    assert_eq!(stored.iter().map(|e| e.event_id).collect::<HashSet<_>>(), written, "nothing lost");
    assert!(conflicts > 0, "32 racing writers never collided: the race did not happen");
    ledger::verify_stream(&s, &stored).expect("one unbroken chain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_table_refuses_update_delete_and_truncate() {
    let db = TestDb::new().await;
    let store = db.store(2);
    store
        .append(AppendRequest::single(tenant(), stream("s"), ExpectedVersion::NoStream, vec![event(1)]))
        .await
        .unwrap();
    let client = db.client().await;
    for sql in ["UPDATE events SET payload = '{}'", "DELETE FROM events", "TRUNCATE events"] {
        let err = client.batch_execute(sql).await.expect_err(sql);
        assert!(
            err.to_string().contains("append-only") || format!("{err:?}").contains("append-only"),
            "{sql}: {err:?}"
        );
    }
    // The service role may read and insert, nothing else, even with the triggers off.
    client.batch_execute("SET ROLE grant_ledger_service").await.unwrap();
    let count: i64 = client.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get(0);
    assert_eq!(count, 1);
    for sql in ["UPDATE events SET payload = '{}'", "DELETE FROM events", "TRUNCATE events"] {
        let err = client.batch_execute(sql).await.expect_err(sql);
        assert_eq!(err.code(), Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE), "{sql}: {err:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_twice_and_twice_at_once_applies_one_set() {
    let db = TestDb::unmigrated().await;
    let (mut c1, mut c2) = (db.client().await, db.client().await);
    let (r1, r2) = tokio::join!(ops::migrate::run(&mut c1), ops::migrate::run(&mut c2));
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    let total = ops::migrate::MIGRATIONS.len();
    assert_eq!(r1.applied_now.len() + r2.applied_now.len(), total, "each migration applied once: {r1:?} {r2:?}");
    let again = ops::migrate::run(&mut c1).await.unwrap();
    assert_eq!((again.applied_now.len(), again.already), (0, total));
    let rows: i64 = c1.query_one("SELECT count(*) FROM schema_migrations", &[]).await.unwrap().get(0);
    assert_eq!(rows as usize, total);

    // An applied migration edited afterwards is refused, and nothing runs.
    c1.batch_execute("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1").await.unwrap();
    assert!(matches!(ops::migrate::run(&mut c1).await, Err(ops::migrate::MigrateError::Edited { version: 1, .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_killed_at_commit_is_indeterminate_and_settles_by_event_id() {
    let db = TestDb::new().await;
    let store = db.store(4);
    let killer = db.client().await;
    let request = AppendRequest::single(tenant(), stream("k"), ExpectedVersion::NoStream, vec![event(1)]);
    let held = tests::HeldAppend::start(&store, request.clone()).await;
    killer.execute("SELECT pg_terminate_backend($1)", &[&held.backend_pid]).await.unwrap();
    // The ledger settles the lost commit itself: its server process ended before COMMIT, so
    // nothing is stored, and it says so as a determinate failure.
    let err = held.commit().await.expect_err("the connection was killed");
    assert!(err.is_determinate(), "{err:?}");
    assert!(err.to_string().contains("not stored"), "{err}");
    assert_eq!(store.settled().not_stored.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert!(store.find_event(request.streams[0].events[0].event_id).await.unwrap().is_none());

    // Retrying with the same event ids is safe: it writes once, and a second retry replays.
    let first = store.append(request.clone()).await.unwrap();
    let second = store.append(request).await.unwrap();
    assert!(!first.replayed && second.replayed);
    assert_eq!(first.events, second.events);
}

/// A transaction whose body swallowed a failed append is not committed: what it appended
/// before the failure is not stored, and the caller hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_with_a_failed_append_is_never_committed() {
    let db = TestDb::new().await;
    let store = db.store(2);
    let first = AppendRequest::single(tenant(), stream("kept"), ExpectedVersion::NoStream, vec![event(1)]);
    let wrong = AppendRequest::single(tenant(), stream("wrong"), ExpectedVersion::At(7), vec![event(2)]);
    let done = store
        .transaction(tokio_postgres::IsolationLevel::ReadCommitted, async |tx| {
            tx.append(&first).await?;
            let refused = tx.append(&wrong).await;
            assert!(matches!(refused, Err(AppendError::Conflict { .. })), "{refused:?}");
            Ok::<_, AppendError>(())
        })
        .await;
    let err = done.expect_err("the transaction is refused");
    assert!(err.is_determinate(), "{err:?}");
    assert!(store.find_event(first.streams[0].events[0].event_id).await.unwrap().is_none(), "nothing committed");
}

/// The one-statement append's reply lost with its connection: the ledger waits for the server
/// process to end, looks the event up, and answers determinately.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_statement_append_whose_server_process_dies_is_settled() {
    let db = TestDb::new().await;
    let store = db.store(1);
    let killer = db.client().await;
    // The statement waits on a lock the test holds, and its server process is ended while it
    // waits: the reply is lost and nothing was written.
    // One append first, so the insert is prepared on the store's one connection and the wait
    // below is the statement's, not its preparation's.
    store
        .append(AppendRequest::single(tenant(), stream("warm"), ExpectedVersion::NoStream, vec![event(0)]))
        .await
        .unwrap();
    let mut locker = db.client().await;
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute("LOCK TABLE events IN SHARE MODE").await.unwrap();
    let request = AppendRequest::single(tenant(), stream("lost"), ExpectedVersion::NoStream, vec![event(1)]);
    let appending = tokio::spawn({
        let store = store.clone();
        let request = request.clone();
        async move { store.append(request).await }
    });
    let pid: i32 = tests::poll_until(
        "the insert waiting on the lock",
        Duration::from_secs(30),
        Duration::from_millis(1),
        || async {
            let row = killer
                .query_opt(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database() \
                 AND query LIKE 'INSERT INTO events%'",
                    &[],
                )
                .await
                .unwrap();
            row.map(|r| r.get(0))
        },
    )
    .await;
    killer.execute("SELECT pg_terminate_backend($1)", &[&pid]).await.unwrap();
    let err = appending.await.unwrap().expect_err("the insert's server process was ended before it wrote");
    assert!(err.is_determinate(), "settled: {err:?}");
    assert_eq!(store.settled().not_stored.load(std::sync::atomic::Ordering::Relaxed), 1);
    tx.rollback().await.unwrap();
    assert!(store.find_event(request.streams[0].events[0].event_id).await.unwrap().is_none());
    let again = store.append(request).await.unwrap();
    assert!(!again.replayed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_appends_wake_a_listening_store() {
    let db = TestDb::new().await;
    let writer = PgStore::with_listener(db.pool(2), db.config.clone());
    let reader = PgStore::with_listener(db.pool(2), db.config.clone());
    let mut wake = reader.wake_ups();
    // The first wake-up says LISTEN is in place.
    tokio::time::timeout(Duration::from_secs(10), wake.changed()).await.expect("listening").unwrap();
    wake.borrow_and_update();
    writer
        .append(AppendRequest::single(tenant(), stream("w"), ExpectedVersion::NoStream, vec![event(1)]))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), wake.changed())
        .await
        .expect("woken by the other store's NOTIFY")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_reaches_no_row() {
    let db = TestDb::new().await;
    let store = db.store(2);
    let too_many = (0..=ledger::MAX_EVENTS_PER_APPEND as u64).map(event).collect();
    let err = store
        .append(AppendRequest::single(tenant(), stream("big"), ExpectedVersion::NoStream, too_many))
        .await
        .unwrap_err();
    assert!(matches!(err, AppendError::Invalid(_)), "{err:?}");
    let n: i64 = db.client().await.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get(0);
    assert_eq!(n, 0);
}

/// The global read walks the primary key in order: no sort, whatever the select list casts. A
/// sort here means the ORDER BY resolved to an output column (text), as it once did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_read_walks_the_primary_key_without_a_sort() {
    let db = TestDb::new().await;
    let client = db.client().await;
    // Forbid the sort the planner may prefer on a small table: it then still sorts only when no
    // index gives the order asked for.
    client.batch_execute("SET enable_sort = off; SET enable_seqscan = off").await.unwrap();
    let sql = format!("EXPLAIN {}", ledger::postgres::read_all_sql());
    let plan: Vec<String> = client
        .query(&sql, &[&"0", &0i64, &100i64])
        .await
        .expect("explain")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let plan = plan.join("\n");
    assert!(!plan.contains("Sort"), "the global read sorts:\n{plan}");
    assert!(plan.contains("events_pkey"), "the global read does not use the primary key:\n{plan}");
}

/// `grantctl check` pages the global read as readers do and finds the count of `count(*)`, at any
/// page size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_every_event_at_every_page_size() {
    let db = TestDb::new().await;
    let store = db.store(4);
    let mut appended = 0u64;
    for n in 0..40u64 {
        let events: Vec<_> = (0..n % 4 + 1).map(event).collect();
        appended += events.len() as u64;
        store
            .append(AppendRequest::single(tenant(), stream("check"), ExpectedVersion::NoStream, events))
            .await
            .unwrap();
    }
    for page_size in [1, 3, 1_000] {
        let checked = ops::check::run(&db.config, page_size).await.expect("check passes");
        assert_eq!((checked.read, checked.counted, checked.total), (appended, appended, appended), "page {page_size}");
        assert_eq!(checked.streams, 40);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_stream_name_is_the_ledgers() {
    let db = TestDb::new().await;
    let client = db.client().await;
    let tenant = ledger::TenantId::new("tenant-a").unwrap();
    let id = uuid::Uuid::new_v4();
    let sql = format!("SELECT {}", ledger::entity_stream_sql("$1::text", "$2::text", "$3::text"));
    let row = client.query_one(&sql, &[&"grant", &tenant.as_str(), &id.to_string()]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), ledger::StreamId::of_entity("grant", &tenant, id).unwrap().as_str());
}
