//! The store contract: one suite every `EventStore` adapter must pass. Each check uses streams
//! of its own, so one store can serve the whole suite.

use serde_json::{Value, json};
use uuid::Uuid;

use crate::{
    AppendError, AppendRequest, ChainError, Checkpoint, EventStore, ExpectedVersion, MemoryStore, Metadata, NewEvent,
    PgStore, StreamAppend, StreamId, TenantId, verify_stream,
};

/// A store the suite can also corrupt, to prove the hash chain catches an edit, and whose
/// transaction ids it can move, to page across a boundary where their digit count changes.
pub trait ContractStore: EventStore {
    fn tamper(&self, event_id: Uuid, payload: Value) -> impl Future<Output = ()> + Send;
    /// A lower bound on the transaction id the next append gets.
    fn next_tx_id(&self) -> impl Future<Output = u64> + Send;
    /// Uses up transaction ids until the next append gets at least `target`.
    fn burn_tx_ids(&self, target: u64) -> impl Future<Output = ()> + Send;
}

impl ContractStore for MemoryStore {
    async fn tamper(&self, event_id: Uuid, payload: Value) {
        MemoryStore::tamper(self, event_id, payload);
    }

    async fn next_tx_id(&self) -> u64 {
        MemoryStore::next_tx_id(self)
    }

    async fn burn_tx_ids(&self, target: u64) {
        MemoryStore::burn_tx_ids(self, target);
    }
}

impl ContractStore for PgStore {
    async fn tamper(&self, event_id: Uuid, payload: Value) {
        // A superuser can switch triggers off; the hash chain is what still catches the edit.
        let client = self.pool().get().await.expect("connection");
        client.batch_execute("SET session_replication_role = replica").await.expect("replica role");
        client
            .execute("UPDATE events SET payload = $2 WHERE event_id = $1", &[&event_id, &payload])
            .await
            .expect("edit");
        client.batch_execute("RESET session_replication_role").await.expect("reset");
    }

    async fn next_tx_id(&self) -> u64 {
        let client = self.pool().get().await.expect("connection");
        let row = client.query_one("SELECT pg_current_xact_id()::text", &[]).await.expect("xid");
        row.get::<_, &str>(0).parse::<u64>().expect("an xid8 is a u64") + 1
    }

    async fn burn_tx_ids(&self, target: u64) {
        // Transaction ids are cluster-wide, so this moves every database's. Each explicit
        // BEGIN … COMMIT in one simple query is a transaction of its own: a round trip burns
        // a batch, and no commit waits for the disk.
        let client = self.pool().get().await.expect("connection");
        client.batch_execute("SET synchronous_commit = off").await.expect("async commit");
        loop {
            let next = self.next_tx_id().await;
            if next >= target {
                break;
            }
            let batch = (target - next).min(2_000);
            let sql = "BEGIN; SELECT pg_current_xact_id(); COMMIT;".repeat(usize::try_from(batch).expect("small"));
            client.batch_execute(&sql).await.expect("burning transaction ids");
        }
        client.batch_execute("RESET synchronous_commit").await.expect("reset");
    }
}

pub fn tenant() -> TenantId {
    TenantId::new("tenant-a").expect("valid")
}

pub fn stream(category: &str) -> StreamId {
    StreamId::for_entity(category, Uuid::new_v4().simple()).expect("valid")
}

pub fn event(n: u64) -> NewEvent {
    NewEvent {
        event_id: Uuid::new_v4(),
        event_type: "test.happened".into(),
        schema_version: 1,
        payload: json!({ "n": n, "text": "ünïcödé ✓" }),
        metadata: Metadata { principal: "owner-1".into(), causation_id: None, correlation_id: Some(Uuid::new_v4()) },
    }
}

fn one(stream: &StreamId, expected: ExpectedVersion, events: Vec<NewEvent>) -> AppendRequest {
    AppendRequest::single(tenant(), stream.clone(), expected, events)
}

/// Runs every check against `store`.
pub async fn run_all<S: ContractStore>(store: &S) {
    append_with_expected_versions(store).await;
    wrong_version_conflicts_and_writes_nothing(store).await;
    multi_stream_append_is_all_or_nothing(store).await;
    reappend_of_same_event_ids_is_idempotent(store).await;
    reused_event_id_with_other_content_is_refused(store).await;
    hash_chain_catches_an_edited_payload(store).await;
    global_read_is_ordered_and_resumes_from_checkpoint(store).await;
    global_read_pages_across_a_transaction_id_digit_boundary(store).await;
    find_event_settles_by_id(store).await;
    stream_never_changes_tenant(store).await;
    bad_input_is_refused_and_writes_nothing(store).await;
    wake_up_moves_after_append(store).await;
}

pub async fn append_with_expected_versions<S: EventStore>(store: &S) {
    let s = stream("contract");
    let first = store.append(one(&s, ExpectedVersion::NoStream, vec![event(1), event(2)])).await.expect("first append");
    assert_eq!(first.version_of(&s), Some(2));
    assert!(!first.replayed);
    let second = store.append(one(&s, ExpectedVersion::At(2), vec![event(3)])).await.expect("second append");
    assert_eq!(second.version_of(&s), Some(3));
    let third = store.append(one(&s, ExpectedVersion::Any, vec![event(4)])).await.expect("any");
    assert_eq!(third.version_of(&s), Some(4));
    assert!(third.checkpoint() > second.checkpoint() && second.checkpoint() > first.checkpoint());

    let read = store.read_stream(&s, 1).await.expect("read");
    let ns: Vec<_> = read.iter().map(|e| e.payload["n"].as_u64().unwrap()).collect();
    assert_eq!(ns, [1, 2, 3, 4]);
    let versions: Vec<_> = read.iter().map(|e| e.stream_version).collect();
    assert_eq!(versions, [1, 2, 3, 4]);
    assert_eq!(read[0].metadata.principal, "owner-1");
    verify_stream(&s, &read).expect("chain verifies");
    let tail = store.read_stream(&s, 3).await.expect("read tail");
    assert_eq!(tail.iter().map(|e| e.stream_version).collect::<Vec<_>>(), [3, 4]);
}

pub async fn wrong_version_conflicts_and_writes_nothing<S: EventStore>(store: &S) {
    let s = stream("contract");
    store.append(one(&s, ExpectedVersion::NoStream, vec![event(1), event(2)])).await.expect("seed");
    for expected in [ExpectedVersion::At(1), ExpectedVersion::At(5), ExpectedVersion::NoStream] {
        match store.append(one(&s, expected, vec![event(9)])).await {
            Err(e @ AppendError::Conflict { actual: Some(2), .. }) => assert!(e.is_determinate()),
            other => panic!("expected a conflict at version 2 for {expected:?}, got {other:?}"),
        }
    }
    let missing = stream("contract");
    let err = store.append(one(&missing, ExpectedVersion::At(1), vec![event(1)])).await.unwrap_err();
    assert!(matches!(err, AppendError::Conflict { actual: Some(0), .. }), "{err:?}");
    assert_eq!(store.read_stream(&s, 1).await.unwrap().len(), 2);
    assert!(store.read_stream(&missing, 1).await.unwrap().is_empty());
}

pub async fn multi_stream_append_is_all_or_nothing<S: EventStore>(store: &S) {
    let (a, b) = (stream("approval"), stream("grant"));
    store.append(one(&b, ExpectedVersion::NoStream, vec![event(1)])).await.expect("seed b");
    let bad = AppendRequest {
        tenant_id: tenant(),
        streams: vec![
            StreamAppend { stream_id: a.clone(), expected: ExpectedVersion::NoStream, events: vec![event(1)] },
            StreamAppend { stream_id: b.clone(), expected: ExpectedVersion::NoStream, events: vec![event(2)] },
        ],
    };
    assert!(matches!(store.append(bad).await, Err(AppendError::Conflict { .. })));
    assert!(store.read_stream(&a, 1).await.unwrap().is_empty(), "nothing of a failed append is stored");
    assert_eq!(store.read_stream(&b, 1).await.unwrap().len(), 1);

    let good = AppendRequest {
        tenant_id: tenant(),
        streams: vec![
            StreamAppend { stream_id: a.clone(), expected: ExpectedVersion::NoStream, events: vec![event(1)] },
            StreamAppend { stream_id: b.clone(), expected: ExpectedVersion::At(1), events: vec![event(2), event(3)] },
        ],
    };
    let ids: Vec<_> = good.streams.iter().flat_map(|s| s.events.iter().map(|e| e.event_id)).collect();
    let out = store.append(good).await.expect("both streams");
    assert_eq!(out.events.iter().map(|e| e.event_id).collect::<Vec<_>>(), ids, "outcome in request order");
    let positions: Vec<u64> = out.events.iter().map(|e| e.global_position).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "log order is request order: {positions:?}");
    assert_eq!(out.version_of(&a), Some(1));
    assert_eq!(out.version_of(&b), Some(3));
    let stored_a = store.read_stream(&a, 1).await.unwrap();
    let stored_b = store.read_stream(&b, 1).await.unwrap();
    assert_eq!(stored_a[0].tx_id, stored_b[2].tx_id, "one transaction");
    verify_stream(&b, &stored_b).expect("chain continues across appends");
}

pub async fn reappend_of_same_event_ids_is_idempotent<S: EventStore>(store: &S) {
    let s = stream("contract");
    store.append(one(&s, ExpectedVersion::NoStream, vec![event(1)])).await.expect("seed");
    let request = one(&s, ExpectedVersion::At(1), vec![event(2), event(3)]);
    let first = store.append(request.clone()).await.expect("append");
    // The same request again, as a retry after an unknown outcome would send it.
    let again = store.append(request.clone()).await.expect("replay");
    assert!(again.replayed);
    assert_eq!(again.events, first.events);
    assert_eq!(again.tx_id, first.tx_id);
    // A retry that also lost track of the version still replays.
    let mut any = request;
    any.streams[0].expected = ExpectedVersion::Any;
    assert_eq!(store.append(any).await.expect("replay with any").events, first.events);
    assert_eq!(store.read_stream(&s, 1).await.unwrap().len(), 3, "nothing new written");
}

pub async fn reused_event_id_with_other_content_is_refused<S: EventStore>(store: &S) {
    let s = stream("contract");
    let stored = event(1);
    store.append(one(&s, ExpectedVersion::NoStream, vec![stored.clone()])).await.expect("seed");
    let mut changed = stored.clone();
    changed.payload = json!({ "n": 666 });
    let err = store.append(one(&s, ExpectedVersion::Any, vec![changed])).await.unwrap_err();
    assert!(matches!(err, AppendError::DuplicateEventId { event_id } if event_id == stored.event_id), "{err:?}");
    // Part stored, part new: refused whole.
    let other = stream("contract");
    let err = store.append(one(&other, ExpectedVersion::NoStream, vec![event(5), stored.clone()])).await.unwrap_err();
    assert!(matches!(err, AppendError::DuplicateEventId { .. }), "{err:?}");
    assert!(store.read_stream(&other, 1).await.unwrap().is_empty());
    assert_eq!(store.read_stream(&s, 1).await.unwrap().len(), 1);
}

pub async fn hash_chain_catches_an_edited_payload<S: ContractStore>(store: &S) {
    let s = stream("contract");
    let events = vec![event(1), event(2), event(3)];
    let victim = events[1].event_id;
    store.append(one(&s, ExpectedVersion::NoStream, events)).await.expect("seed");
    verify_stream(&s, &store.read_stream(&s, 1).await.unwrap()).expect("intact");
    store.tamper(victim, json!({ "n": 2, "text": "edited" })).await;
    let read = store.read_stream(&s, 1).await.unwrap();
    assert_eq!(verify_stream(&s, &read), Err(ChainError::Tampered { stream: s.clone(), version: 2 }));
    // Dropping an event breaks the chain too.
    let without: Vec<_> = read.iter().filter(|e| e.stream_version != 2).cloned().collect();
    assert!(matches!(verify_stream(&s, &without), Err(ChainError::VersionGap { .. })));
}

pub async fn global_read_is_ordered_and_resumes_from_checkpoint<S: EventStore>(store: &S) {
    let start = last_checkpoint(store).await;
    let s = stream("contract");
    let a = store.append(one(&s, ExpectedVersion::NoStream, vec![event(1), event(2)])).await.unwrap();
    let b = store.append(one(&s, ExpectedVersion::At(2), vec![event(3)])).await.unwrap();
    let all = read_until(store, start, |r| r.iter().filter(|e| e.stream_id == s).count() == 3).await;
    let mine: Vec<_> = all.iter().filter(|e| e.stream_id == s).collect();
    assert_eq!(mine.len(), 3);
    assert!(all.windows(2).all(|w| w[0].checkpoint() < w[1].checkpoint()), "strictly ordered");
    assert_eq!(mine[2].checkpoint(), b.checkpoint());
    let after_a = read_until(store, a.checkpoint(), |r| r.iter().any(|e| e.stream_id == s)).await;
    assert!(after_a.iter().all(|e| e.checkpoint() > a.checkpoint()));
    assert_eq!(after_a.iter().filter(|e| e.stream_id == s).count(), 1);
    let limited = store.read_all(start, 1).await.unwrap();
    assert_eq!(limited.len(), 1);
}

/// Appends in transactions whose ids straddle a power of ten, then pages through the global read
/// with small limits: every event exactly once, in numeric `(tx_id, position)` order. A store
/// that orders ids as text ("1000" before "999") cuts a page past events it never returned.
pub async fn global_read_pages_across_a_transaction_id_digit_boundary<S: ContractStore>(store: &S) {
    // Appends below burn one id each; start a few hundred short of the next power of ten. Should
    // other sessions take so many ids meanwhile that the first append is already past it, try
    // the next power.
    const LEAD: u64 = 300;
    // About 90,000 ids a second on PostgreSQL: a few minutes at most.
    const MOST_TO_BURN: u64 = 20_000_000;
    let mut attempt = 0;
    let (s, ids, start) = loop {
        attempt += 1;
        let next = store.next_tx_id().await;
        let boundary = std::iter::successors(Some(10u64), |p| p.checked_mul(10))
            .find(|&p| p > next + LEAD)
            .expect("a power of ten above the next id");
        assert!(
            boundary - next <= MOST_TO_BURN,
            "transaction ids are at {next}: reaching {boundary} takes too many transactions. Start a fresh \
             cluster: `grantctl db stop --dir target/pg-test` (the next test run starts it anew), or point \
             DATABASE_URL at a younger server"
        );
        store.burn_tx_ids(boundary - LEAD).await;

        let start = last_checkpoint(store).await;
        let s = stream("boundary");
        let (mut version, mut tx_ids, mut ids) = (0u64, Vec::new(), Vec::new());
        // One to three events per transaction, until two transactions have ids past the boundary.
        while tx_ids.iter().filter(|&&t| t >= boundary).count() < 2 {
            let events: Vec<_> = (0..version % 3 + 1).map(|i| event(version + i)).collect();
            ids.extend(events.iter().map(|e| e.event_id));
            let expected = if version == 0 { ExpectedVersion::NoStream } else { ExpectedVersion::At(version) };
            let out = store.append(one(&s, expected, events)).await.expect("append");
            version = out.version_of(&s).expect("appended");
            tx_ids.push(out.tx_id);
            assert!(tx_ids.len() < 100_000, "transaction ids never reached {boundary}");
        }
        if tx_ids[0] < boundary {
            break (s, ids, start);
        }
        assert!(attempt < 3, "other sessions took ids past {boundary} before the first append, {attempt} times");
    };

    for limit in [1, 2, 7] {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let (mut read, mut at) = (Vec::<crate::RecordedEvent>::new(), start);
        while read.iter().filter(|e| e.stream_id == s).count() < ids.len() {
            let page = store.read_all(at, limit).await.expect("read_all");
            assert!(page.len() <= limit, "a page of {} for limit {limit}", page.len());
            match page.last() {
                Some(last) => at = last.checkpoint(),
                None => {
                    // Every event is committed; only an older open transaction elsewhere in
                    // the cluster can hold the read back, and it ends soon.
                    assert!(tokio::time::Instant::now() < deadline, "paging with limit {limit} stalled");
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            }
            read.extend(page);
        }
        assert!(
            read.windows(2).all(|w| w[0].checkpoint() < w[1].checkpoint()),
            "limit {limit}: not in numeric (tx_id, position) order: {:?}",
            read.iter().map(|e| (e.tx_id, e.global_position)).collect::<Vec<_>>()
        );
        let mine: Vec<_> = read.iter().filter(|e| e.stream_id == s).map(|e| e.event_id).collect();
        assert_eq!(mine, ids, "limit {limit}: every event once, in append order");
    }
}

/// Reads after `from` until `done` holds for what was read, or panics after 30 s. The gap-safe
/// read lags while any transaction older than an event is open, on PostgreSQL anywhere in the
/// cluster, so a committed event becomes readable soon but not always at once.
pub async fn read_until<S: EventStore>(
    store: &S,
    from: Checkpoint,
    done: impl Fn(&[crate::RecordedEvent]) -> bool,
) -> Vec<crate::RecordedEvent> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let (mut read, mut at) = (Vec::new(), from);
    loop {
        let page = store.read_all(at, 10_000).await.expect("read_all");
        if let Some(last) = page.last() {
            at = last.checkpoint();
        }
        read.extend(page);
        if done(&read) {
            return read;
        }
        assert!(tokio::time::Instant::now() < deadline, "events not readable within 30 s; read {} so far", read.len());
        // Polls a condition with a deadline; the wait is on other transactions ending.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

async fn last_checkpoint<S: EventStore>(store: &S) -> Checkpoint {
    let mut at = Checkpoint::START;
    loop {
        let page = store.read_all(at, 1000).await.unwrap();
        match page.last() {
            Some(e) => at = e.checkpoint(),
            None => return at,
        }
    }
}

pub async fn find_event_settles_by_id<S: EventStore>(store: &S) {
    let s = stream("contract");
    let e = event(1);
    store.append(one(&s, ExpectedVersion::NoStream, vec![e.clone()])).await.unwrap();
    let found = store.find_event(e.event_id).await.unwrap().expect("stored");
    assert_eq!((found.stream_id, found.stream_version, found.payload), (s, 1, e.payload));
    assert!(store.find_event(Uuid::new_v4()).await.unwrap().is_none());
}

pub async fn stream_never_changes_tenant<S: EventStore>(store: &S) {
    let s = stream("session");
    store.append(one(&s, ExpectedVersion::NoStream, vec![event(1)])).await.unwrap();
    let other = TenantId::new("tenant-b").unwrap();
    let err = store.append(AppendRequest::single(other, s.clone(), ExpectedVersion::Any, vec![event(2)])).await;
    assert!(matches!(err, Err(AppendError::TenantMismatch { .. })), "{err:?}");
    assert_eq!(store.read_stream(&s, 1).await.unwrap().len(), 1);
}

pub async fn bad_input_is_refused_and_writes_nothing<S: EventStore>(store: &S) {
    let s = stream("contract");
    let dup = event(1);
    let mut nul = event(2);
    nul.payload = json!({ "x": "a\u{0}b" });
    let mut zero = event(3);
    zero.schema_version = 0;
    let cases = [
        AppendRequest { tenant_id: tenant(), streams: vec![] },
        one(&s, ExpectedVersion::NoStream, vec![]),
        one(&s, ExpectedVersion::NoStream, vec![dup.clone(), dup]),
        one(&s, ExpectedVersion::NoStream, vec![nul]),
        one(&s, ExpectedVersion::NoStream, vec![zero]),
        AppendRequest {
            tenant_id: tenant(),
            streams: vec![
                StreamAppend { stream_id: s.clone(), expected: ExpectedVersion::Any, events: vec![event(4)] },
                StreamAppend { stream_id: s.clone(), expected: ExpectedVersion::Any, events: vec![event(5)] },
            ],
        },
    ];
    for request in cases {
        let err = store.append(request).await.unwrap_err();
        assert!(matches!(err, AppendError::Invalid(_)) && err.is_determinate(), "{err:?}");
    }
    assert!(store.read_stream(&s, 1).await.unwrap().is_empty());
    assert!(StreamId::new("").is_err() && StreamId::new("a b").is_err() && StreamId::new("x".repeat(201)).is_err());
}

pub async fn wake_up_moves_after_append<S: EventStore>(store: &S) {
    let mut wake = store.wake_ups();
    wake.borrow_and_update();
    store.append(one(&stream("contract"), ExpectedVersion::NoStream, vec![event(1)])).await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), wake.changed())
        .await
        .expect("a wake-up within 10 s")
        .expect("store alive");
}
