//! The auditor's proof against a real PostgreSQL: a database superuser rewrites, deletes,
//! inserts and drops, and the verifier that holds only the public key names what changed.
//! Go's reference implementation of the formats checks what this project signs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use grant_domain::catalogue::{Author, Event, SessionCreated, SessionMessageRecorded, Surface};
use ledger::proof::checkpoint::Checkpoint;
use ledger::proof::merkle;
use ledger::proof::note::{Note, Signer};
use ledger::{AppendRequest, EventStore, ExpectedVersion, Metadata, PgStore, StreamId, TenantId};
use ops::proof::{Signing, Trust};
use tests::TestDb;
use uuid::Uuid;

const ORIGIN: &str = "ledger.test/audit";

struct Log {
    db: TestDb,
    store: PgStore,
    signing: Signing,
    dir: PathBuf,
}

impl Log {
    async fn new(test: &str) -> Self {
        let db = TestDb::new().await;
        let store = db.store(4);
        let dir = std::env::temp_dir().join(format!("gl-audit-{test}-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = Some(dir.join("checkpoints.jsonl"));
        let signing =
            Signing { key: Signer::generate(ORIGIN).unwrap(), every_events: 1, every: Default::default(), file };
        Self { db, store, signing, dir }
    }

    fn trust(&self) -> Trust {
        Trust { log_key: self.signing.key.verifier(), witnesses: vec![] }
    }

    /// A session stream of `tenant` with its creation and `messages` messages.
    async fn session(&self, tenant: &str, messages: usize) -> StreamId {
        let id = Uuid::new_v4().simple().to_string();
        let stream = StreamId::new(format!("session-{tenant}.{id}")).unwrap();
        let mut events = vec![Event::SessionCreated(SessionCreated {
            session_id: id.clone(),
            tenant_id: tenant.into(),
            principal_id: "owner-1".into(),
            browser_profile_id: None,
            schedule_id: None,
            surface: Surface::Interactive,
        })];
        for m in 0..messages {
            events.push(Event::SessionMessageRecorded(SessionMessageRecorded {
                session_id: id.clone(),
                message_id: format!("m{m}"),
                author: Author::Owner,
            }));
        }
        let new = events.iter().map(|e| e.to_new(Uuid::new_v4(), Metadata::by("owner-1"))).collect();
        let request =
            AppendRequest::single(TenantId::new(tenant).unwrap(), stream.clone(), ExpectedVersion::NoStream, new);
        self.store.append(request).await.unwrap();
        stream
    }

    /// Signs a checkpoint of every event appended so far. The tree takes an event only once no
    /// older transaction in the cluster is open (other tests' among them), so wait for that.
    async fn sign(&self) -> u64 {
        let client = self.db.client().await;
        let count: i64 = client.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get(0);
        let count = u64::try_from(count).unwrap();
        tests::poll_until(
            "the tree to take every event",
            Duration::from_secs(30),
            Duration::from_millis(20),
            || async { (ops::proof::extend(&self.store).await.unwrap() == count).then_some(()) },
        )
        .await;
        let c = ops::proof::checkpoint(&self.store, &self.signing, |last, size| size > last).await.unwrap();
        c.expect("a checkpoint was due").size
    }

    async fn verify(&self) -> Result<String, String> {
        ops::proof::verify_log(&self.store, &self.trust(), None).await.map_err(|e| format!("{e:#}"))
    }

    async fn verify_with_file(&self) -> Result<String, String> {
        let file = self.signing.file.as_deref();
        ops::proof::verify_log(&self.store, &self.trust(), file).await.map_err(|e| format!("{e:#}"))
    }

    /// Writes `events` back as a superuser who recomputes their links and hashes from `prev`, so
    /// the stream's own chain still verifies; `set` names the other columns changed.
    async fn rechain(
        &self,
        events: &mut [ledger::RecordedEvent],
        mut prev: [u8; 32],
        set: impl Fn(&ledger::RecordedEvent) -> String,
    ) {
        for e in events {
            e.prev_hash = prev;
            e.hash = ledger::hash::content_hash(e);
            prev = e.hash;
            self.superuser(&format!(
                "UPDATE events SET {}, prev_hash = '\\x{}', hash = '\\x{}' WHERE global_position = {}",
                set(e),
                hex::encode(e.prev_hash),
                hex::encode(e.hash),
                e.global_position
            ))
            .await;
        }
    }

    /// A superuser's session: triggers off, so the append-only guard does not stop it.
    async fn superuser(&self, sql: &str) {
        let c = self.db.client().await;
        c.batch_execute(&format!("SET session_replication_role = replica; {sql}")).await.unwrap();
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn expect_err(result: Result<String, String>, wanted: &[&str]) -> String {
    let e = result.expect_err("the verifier must catch this");
    for w in wanted {
        assert!(e.contains(w), "expected {w:?} in: {e}");
    }
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_rewritten_with_a_recomputed_chain_is_caught_at_its_first_changed_leaf() {
    let log = Log::new("rewrite").await;
    log.session("tenant-a", 3).await;
    let victim = log.session("tenant-a", 4).await;
    log.session("tenant-b", 2).await;
    let size = log.sign().await;
    assert_eq!(size, 12);
    let ok = log.verify().await.unwrap();
    assert!(ok.contains("12 events") && ok.contains("1 signed checkpoints"), "{ok}");

    // Rewrite every event of the stream from version 2, recomputing each hash and link so the
    // stream's own chain still verifies.
    let mut events = log.store.read_stream(&victim, 1).await.unwrap();
    let prev = events[0].hash;
    events.iter_mut().skip(1).for_each(|e| e.payload["author"] = serde_json::json!("other"));
    log.rechain(&mut events[1..], prev, |e| format!("payload = '{}'::jsonb", e.payload)).await;
    ledger::verify_stream(&victim, &log.store.read_stream(&victim, 1).await.unwrap())
        .expect("the recomputed chain holds on its own: only the signed tree can tell");
    // The stream's second event is leaf 5 (four events of the first session come before it).
    let e = expect_err(log.verify().await, &[&format!("checkpoint {size}"), "leaf 5 is the first that differs"]);
    assert!(!e.contains("leaf 4 "), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_newest_events_after_a_checkpoint_is_caught_even_with_the_checkpoint_row() {
    let log = Log::new("truncate").await;
    log.session("tenant-a", 2).await;
    let last = log.session("tenant-a", 2).await;
    let size = log.sign().await;
    log.superuser(&format!("DELETE FROM events WHERE stream_id = '{last}' AND stream_version > 1")).await;
    expect_err(log.verify().await, &[&format!("stream {last}"), "signed its head at version 3", "version 1"]);
    // The attacker also deletes the checkpoint from the table: the auditor's file still has it.
    log.superuser("DELETE FROM log_checkpoints").await;
    expect_err(log.verify().await, &["no signed checkpoint: nothing is proven"]);
    expect_err(log.verify_with_file().await, &["signed its head at version 3"]);
    // Deleting a whole stream's newest part and nothing a head records: the size alone.
    let (notes, rotations) = ops::proof::read_checkpoint_file(log.signing.file.as_deref().unwrap()).unwrap();
    let bare: Vec<_> = notes.into_iter().map(|(n, _, o)| (n, Default::default(), o)).collect();
    let opened = ledger::proof::verify::open_checkpoints(&log.signing.key.verifier(), &[], &rotations, &bare);
    assert!(opened.is_err(), "heads are signed: a file without them does not verify");
    assert_eq!(size, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_inserted_between_two_checkpoints_is_caught() {
    let log = Log::new("insert").await;
    log.session("tenant-a", 2).await;
    let first = log.sign().await;
    let middle = log.session("tenant-a", 2).await;
    log.session("tenant-a", 1).await;
    let second = log.sign().await;
    assert!(log.verify().await.is_ok());

    // A whole new stream, its own chain valid, placed in the global order just after the
    // middle session's events, in its transaction: between the two checkpoints.
    let anchor = log.store.read_stream(&middle, 1).await.unwrap().remove(0);
    let mut forged = anchor.clone();
    forged.stream_id = StreamId::new(format!("session-tenant-a.{}", Uuid::new_v4().simple())).unwrap();
    forged.event_id = Uuid::new_v4();
    forged.global_position = 1_000_000;
    forged.prev_hash = ledger::hash::GENESIS;
    forged.hash = ledger::hash::content_hash(&forged);
    log.superuser(&format!(
        "INSERT INTO events (global_position, tx_id, stream_id, stream_version, event_id, event_type, schema_version, \
         tenant_id, payload, metadata, recorded_at, prev_hash, hash) OVERRIDING SYSTEM VALUE \
         SELECT {}, tx_id, '{}', 1, '{}', event_type, schema_version, tenant_id, payload, metadata, recorded_at, \
         '\\x{}', '\\x{}' FROM events WHERE global_position = {}",
        forged.global_position,
        forged.stream_id,
        forged.event_id,
        hex::encode(forged.prev_hash),
        hex::encode(forged.hash),
        anchor.global_position
    ))
    .await;
    expect_err(log.verify().await, &[&format!("checkpoint {second}"), &format!("leaves {first}..{second}")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_is_named() {
    let log = Log::new("drop").await;
    log.session("tenant-a", 1).await;
    let dropped = log.session("tenant-b", 3).await;
    log.session("tenant-a", 1).await;
    log.sign().await;
    log.superuser(&format!("DELETE FROM events WHERE stream_id = '{dropped}'")).await;
    expect_err(log.verify().await, &[&format!("stream {dropped}"), "the stream was dropped"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_signed_by_another_key_is_refused() {
    let mut log = Log::new("other-key").await;
    log.session("tenant-a", 1).await;
    log.sign().await;
    log.session("tenant-a", 1).await;
    // Someone with the database but not the key signs the next checkpoint with a key of the
    // same name.
    let genuine = log.signing.key.verifier();
    log.signing.key = Signer::generate(ORIGIN).unwrap();
    log.sign().await;
    let trust = Trust { log_key: genuine, witnesses: vec![] };
    let e = ops::proof::verify_log(&log.store, &trust, None).await.unwrap_err();
    assert!(format!("{e:#}").contains("no signature by a key this verifier trusts"), "{e:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_cosignature_verifies_a_forged_one_does_not_and_the_tree_proves_consistency() {
    let log = Log::new("witness").await;
    log.session("tenant-a", 4).await;
    let a = log.sign().await;
    log.session("tenant-b", 6).await;
    let b = log.sign().await;
    let witness = Signer::generate("witness.test").unwrap();
    let file = log.signing.file.clone().unwrap();
    let cosigned = log.dir.join("cosigned.jsonl");
    assert_eq!(ops::proof::cosign_file(&file, &log.signing.key.verifier(), &witness, &cosigned).unwrap(), 2);
    let trust = Trust { log_key: log.signing.key.verifier(), witnesses: vec![witness.verifier()] };
    let ok = ops::proof::verify_log(&log.store, &trust, Some(&cosigned)).await.unwrap();
    assert!(ok.contains("2 cosigned by witness.test"), "{ok}");

    // A witness line whose signature was changed fails for an auditor who trusts the witness.
    let text = std::fs::read_to_string(&cosigned).unwrap();
    let mut lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut note = Note::parse(lines[1]["note"].as_str().unwrap()).unwrap();
    note.signatures[1].bytes[10] ^= 0x40;
    lines[1]["note"] = serde_json::json!(note.to_string());
    let forged = log.dir.join("forged.jsonl");
    std::fs::write(&forged, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).unwrap();
    let e = ops::proof::verify_log(&log.store, &trust, Some(&forged)).await.unwrap_err();
    assert!(format!("{e:#}").contains("witness.test"), "{e:#}");

    // The consistency proof the service serves checks against the two signed roots.
    let p = ops::proof::prove_consistency(&log.store, a, b).await.unwrap();
    let root = |n: &str| {
        let body = Note::parse(n).unwrap().text;
        Checkpoint::parse_body(&body).unwrap().root
    };
    let proof = hashes(&p["consistency_proof"]);
    let (ra, rb) = (root(p["from_checkpoint"].as_str().unwrap()), root(p["to_checkpoint"].as_str().unwrap()));
    assert_eq!(merkle::verify_consistency(a, b, &ra, &rb, &proof), Ok(()));
    // A stored tree that forked after the first checkpoint no longer proves it.
    log.superuser("UPDATE log_tree_nodes SET hash = sha256(hash) WHERE level = 0 AND node_index = 5").await;
    let e = log.verify().await.unwrap_err();
    assert!(e.contains(&format!("checkpoints {a} and {b}")), "{e}");
}

fn hashes(v: &serde_json::Value) -> Vec<merkle::Hash> {
    use base64::Engine as _;
    v.as_array()
        .unwrap()
        .iter()
        .map(|h| base64::engine::general_purpose::STANDARD.decode(h.as_str().unwrap()).unwrap().try_into().unwrap())
        .collect()
}

async fn export(log: &Log, tenant: Option<&str>, out: &Path) {
    ops::proof::export(&log.store, tenant, out).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_verifies_offline_with_only_the_public_key() {
    let log = Log::new("export").await;
    log.session("tenant-a", 2).await;
    log.session("tenant-b", 3).await;
    log.sign().await;
    log.session("tenant-a", 1).await;
    log.sign().await;
    let whole = log.dir.join("whole.jsonl");
    let one = log.dir.join("tenant-a.jsonl");
    export(&log, None, &whole).await;
    export(&log, Some("tenant-a"), &one).await;
    let trust = log.trust();
    // The database is gone: the auditor has the files and the public key.
    let auditor = std::env::temp_dir().join(format!("gl-auditor-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&auditor).unwrap();
    for f in [&whole, &one] {
        let mut manifest = f.as_os_str().to_owned();
        manifest.push(".manifest.json");
        for path in [f.clone(), ops::proof::evidence_path(f), PathBuf::from(manifest)] {
            std::fs::copy(&path, auditor.join(path.file_name().unwrap())).unwrap();
        }
    }
    drop(log);
    let (whole, one) = (auditor.join("whole.jsonl"), auditor.join("tenant-a.jsonl"));
    let ok = ops::proof::verify_export_offline(&whole, &trust, None).unwrap();
    assert!(ok.contains("9 rows match") && ok.contains("9 events"), "{ok}");
    let ok = ops::proof::verify_export_offline(&one, &trust, None).unwrap();
    assert!(ok.contains("5 rows match"), "{ok}");

    // A row changed in the export, or an event changed in its evidence, is caught.
    let rows = std::fs::read_to_string(&one).unwrap();
    std::fs::write(&one, rows.replacen("Message from the owner", "Message from someone else", 1)).unwrap();
    let e = ops::proof::verify_export_offline(&one, &trust, None).unwrap_err();
    assert!(format!("{e:#}").contains("the export was changed"), "{e:#}");
    std::fs::write(&one, rows).unwrap();
    let evidence = ops::proof::evidence_path(&one);
    let text = std::fs::read_to_string(&evidence).unwrap();
    std::fs::write(&evidence, text.replacen("\"author\":\"owner\"", "\"author\":\"other\"", 1)).unwrap();
    let e = ops::proof::verify_export_offline(&one, &trust, None).unwrap_err();
    assert!(format!("{e:#}").contains("does not match its hash"), "{e:#}");
    // Signed by another key: refused.
    let stranger = Trust { log_key: Signer::generate(ORIGIN).unwrap().verifier(), witnesses: vec![] };
    assert!(ops::proof::verify_export_offline(&whole, &stranger, None).is_err());
    std::fs::remove_dir_all(&auditor).unwrap();
}

/// Go's `golang.org/x/mod/sumdb/note` and `tlog` (Debian's golang-golang-x-mod-dev) verify the
/// note, parse the C2SP body, and check the inclusion and consistency proofs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gos_reference_implementation_verifies_the_checkpoints_and_proofs() {
    let go = std::process::Command::new("go").arg("version").output();
    let gocode = Path::new("/usr/share/gocode/src/golang.org/x/mod/sumdb/note");
    assert!(
        go.is_ok_and(|o| o.status.success()) && gocode.is_dir(),
        "this test needs Go and golang.org/x/mod: apt-get install -y golang-go golang-golang-x-mod-dev"
    );
    let log = Log::new("go").await;
    log.session("tenant-a", 5).await;
    let a = log.sign().await;
    let stream = log.session("tenant-b", 7).await;
    let b = log.sign().await;
    let witness = Signer::generate("witness.test").unwrap();
    let event = log.store.read_stream(&stream, 3).await.unwrap().remove(0);
    let inclusion = ops::proof::prove_event(&log.store, event.event_id).await.unwrap();
    let consistency = ops::proof::prove_consistency(&log.store, a, b).await.unwrap();
    let cosigned =
        ops::proof::cosign(inclusion["checkpoint"].as_str().unwrap(), &log.signing.key.verifier(), &witness).unwrap();
    let input = serde_json::json!({
        "public_key": log.signing.key.verifier().to_string(),
        "witness_key": witness.verifier().to_string(),
        "checkpoint": cosigned,
        "leaf_index": inclusion["leaf_index"], "leaf_hash": inclusion["leaf_hash"],
        "inclusion_proof": inclusion["inclusion_proof"],
        "old_checkpoint": consistency["from_checkpoint"], "consistency_proof": consistency["consistency_proof"],
    });
    let out = run_go(&input);
    assert!(out.contains(&format!("size {b} signed by {ORIGIN},witness.test")), "{out}");
    assert!(out.contains(&format!("leaf 8 is in the tree of {b}")), "{out}");
    assert!(out.contains(&format!("the tree of {a} is a prefix of the tree of {b}")), "{out}");

    // And Go refuses what it should: a wrong leaf, and a note signed by another key.
    let mut wrong = input.clone();
    wrong["leaf_index"] = serde_json::json!(9);
    assert!(run_go_result(&wrong).is_err());
    let mut other = input;
    other["checkpoint"] = serde_json::json!(
        Note::sign(
            &Note::parse(inclusion["checkpoint"].as_str().unwrap()).unwrap().text,
            &[&Signer::generate(ORIGIN).unwrap()]
        )
        .unwrap()
    );
    let e = run_go_result(&other).unwrap_err();
    assert!(e.contains("note.Open"), "{e}");
}

fn run_go(input: &serde_json::Value) -> String {
    run_go_result(input).unwrap_or_else(|e| panic!("{e}"))
}

fn run_go_result(input: &serde_json::Value) -> Result<String, String> {
    use std::io::Write as _;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cache = root.join("../target/go-cache");
    let mut child = std::process::Command::new("go")
        .args(["run", "main.go"])
        .current_dir(root.join("interop/checkpoint"))
        .env("GO111MODULE", "off")
        .env("GOPATH", "/usr/share/gocode")
        .env("GOCACHE", cache)
        .env("GOFLAGS", "")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("go run");
    child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if out.status.success() { Ok(text) } else { Err(text) }
}

mod rejudge {
    use grant_domain::catalogue::{
        ActionView, AuthorizationKind, DecidedUnder, Event, SiteScope, TaskGrantCreated, ToolCallAuthorized,
    };
    use grant_domain::policy::Policy;
    use ledger::{AppendRequest, EventStore, ExpectedVersion, Metadata, StreamId, TenantId};
    use ops::rejudge::{Report, Scope};
    use time::OffsetDateTime;
    use uuid::Uuid;

    use super::Log;

    const SHOP: &str = "https://shop.test";

    /// A task grant on `origin/lesson` and one use per label, each recorded as decided under
    /// `classifier` and the empty policy.
    async fn uses(log: &Log, tenant: &str, origin: &str, labels: &[&str], classifier: &str) {
        let grant_id = Uuid::new_v4();
        let now = ledger::hash::truncate_to_micros(OffsetDateTime::now_utc());
        let created = Event::TaskGrantCreated(TaskGrantCreated {
            grant_id,
            approval_id: Uuid::new_v4(),
            tenant_id: tenant.into(),
            principal_id: "owner-1".into(),
            session_id: "s1".into(),
            profile_id: "p1".into(),
            profile_generation: 0,
            agent_version: "agent-1".into(),
            policy_version: Policy::empty().version,
            scope: SiteScope { origin: origin.into(), path_prefix: "/lesson".into() },
            created_at: now,
            expires_at: now + time::Duration::minutes(30),
            max_actions: 200,
            max_typed_chars: 4096,
        });
        let mut events = vec![created];
        for (i, label) in labels.iter().enumerate() {
            let element = classifier::ElementFacts {
                role: "button".into(),
                name: Some((*label).into()),
                visible_text: Some((*label).into()),
                ..Default::default()
            };
            events.push(Event::ToolCallAuthorized(ToolCallAuthorized {
                session_id: "s1".into(),
                run_id: "r1".into(),
                tool_call_id: format!("c{i}"),
                authorization_kind: AuthorizationKind::BrowserTaskGrant,
                grant_id: Some(grant_id),
                use_ordinal: Some(u32::try_from(i).unwrap() + 1),
                typed_chars: 0,
                view: ActionView {
                    action_kind: "click".into(),
                    element_name: Some((*label).into()),
                    ..Default::default()
                },
                snapshot_id: None,
                decided: Some(Box::new(DecidedUnder {
                    classifier_version: classifier.into(),
                    policy_version: Policy::empty().version,
                    element,
                    page: classifier::PageFacts { url: format!("{origin}/lesson/page") },
                    action: classifier::Action::Click,
                })),
            }));
        }
        let new = events.iter().map(|e| e.to_new(Uuid::new_v4(), Metadata::by("authorizer"))).collect();
        let stream = StreamId::new(format!("grant-{tenant}.{grant_id}")).unwrap();
        let request = AppendRequest::single(TenantId::new(tenant).unwrap(), stream, ExpectedVersion::NoStream, new);
        log.store.append(request).await.unwrap();
    }

    async fn judge(log: &Log, policy: &Policy) -> (Report, String) {
        let report = ops::rejudge::run(&log.store, policy, &Scope::default()).await.unwrap();
        let mut text = Vec::new();
        ops::rejudge::print(&report, policy, false, &mut text).unwrap();
        (report, String::from_utf8(text).unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_classifier_that_now_excludes_a_word_lists_the_uses_on_it_and_nothing_else() {
        let log = Log::new("rejudge-classifier").await;
        // Decided by an older classifier that did not read "payment": allowed then.
        uses(&log, "tenant-a", SHOP, &["Next page", "Continue to payment", "Show more"], "sha256:older").await;
        // Decided by this classifier: nothing changed for them.
        uses(&log, "tenant-b", SHOP, &["Next page", "Open lesson two"], classifier::version()).await;
        let (report, text) = judge(&log, &Policy::empty()).await;
        assert_eq!(report.judged, 5);
        let changed: Vec<_> = report.changed.iter().map(|c| (c.tenant.as_str(), c.what.as_str())).collect();
        assert_eq!(changed, [("tenant-a", "click \"Continue to payment\" on https://shop.test/lesson/page")], "{text}");
        assert!(text.contains("would ask the owner (payment)") && text.contains("classifier changed"), "{text}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unchanged_classifier_and_policy_report_nothing_and_a_policy_denying_an_origin_lists_every_act_on_it() {
        let log = Log::new("rejudge-policy").await;
        uses(&log, "tenant-a", SHOP, &["Next page", "Show more"], classifier::version()).await;
        uses(&log, "tenant-a", "https://www.lesson.test", &["Next page"], classifier::version()).await;
        let (report, text) = judge(&log, &Policy::empty()).await;
        assert_eq!((report.judged, report.changed.len()), (3, 0), "{text}");

        let deny =
            Policy::parse(br#"{"rules":[{"id":"no-shop","effect":"deny","origins":["https://shop.test"]}]}"#).unwrap();
        let (report, text) = judge(&log, &deny).await;
        assert_eq!(report.changed.len(), 2, "{text}");
        assert!(report.changed.iter().all(|c| c.what.contains(SHOP)), "{text}");
        assert!(text.contains("would be refused (policy:no-shop): 2") && text.contains("policy changed"), "{text}");
        let mut lines = Vec::new();
        ops::rejudge::print(&report, &deny, true, &mut lines).unwrap();
        let lines: Vec<serde_json::Value> =
            String::from_utf8(lines).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["now"], "would_deny");
        assert_eq!(lines[0]["policy_now"], deny.version.as_str());
    }
}

/// A use deleted before any checkpoint signed it, its stream renumbered and its chain
/// recomputed so the stream verifies: the grant's end still says how many uses it gave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_use_deleted_before_a_checkpoint_is_found_by_the_grants_end() {
    use grant_domain::catalogue::{ActionView, AuthorizationKind, EndReason, TaskGrantEnded, ToolCallAuthorized};
    let log = Log::new("use-count").await;
    log.session("tenant-a", 1).await;
    log.sign().await;
    let grant_id = Uuid::new_v4();
    let stream = StreamId::new(format!("grant-tenant-a.{grant_id}")).unwrap();
    let mut events: Vec<Event> = (1..=3)
        .map(|n| {
            Event::ToolCallAuthorized(ToolCallAuthorized {
                session_id: "s1".into(),
                run_id: "r1".into(),
                tool_call_id: format!("c{n}"),
                authorization_kind: AuthorizationKind::BrowserTaskGrant,
                grant_id: Some(grant_id),
                use_ordinal: Some(n),
                typed_chars: 0,
                view: ActionView::default(),
                snapshot_id: None,
                decided: None,
            })
        })
        .collect();
    events.push(Event::TaskGrantEnded(TaskGrantEnded { grant_id, reason: EndReason::Revoked, uses: Some(3) }));
    let new = events.iter().map(|e| e.to_new(Uuid::new_v4(), Metadata::by("authorizer"))).collect();
    let tenant = TenantId::new("tenant-a").unwrap();
    log.store.append(AppendRequest::single(tenant, stream.clone(), ExpectedVersion::NoStream, new)).await.unwrap();
    assert!(log.verify().await.is_ok());

    // Delete use 2; move the later events down one version, their links and hashes recomputed.
    let mut stored = log.store.read_stream(&stream, 1).await.unwrap();
    log.superuser(&format!("DELETE FROM events WHERE global_position = {}", stored[1].global_position)).await;
    let prev = stored[0].hash;
    stored.iter_mut().skip(2).for_each(|e| e.stream_version -= 1);
    log.rechain(&mut stored[2..], prev, |e| format!("stream_version = {}", e.stream_version)).await;
    ledger::verify_stream(&stream, &log.store.read_stream(&stream, 1).await.unwrap())
        .expect("the chain was recomputed");
    expect_err(log.verify().await, &[&format!("grant {grant_id} of tenant tenant-a ended after 3 uses"), "[2]"]);
}

/// Changes every line of an export's evidence as `edit` says.
fn edit_evidence(export: &Path, edit: impl Fn(&mut serde_json::Value)) {
    let evidence = ops::proof::evidence_path(export);
    let text: String = std::fs::read_to_string(&evidence)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            edit(&mut v);
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&evidence, text).unwrap();
}

/// Rewrites an export's rows file and its manifest as an attacker who holds them would.
fn rewrite_export(export: &Path, keep: impl Fn(&str) -> bool, keep_evidence: impl Fn(&serde_json::Value) -> bool) {
    use sha2::Digest as _;
    let rows: String =
        std::fs::read_to_string(export).unwrap().lines().filter(|l| keep(l)).map(|l| format!("{l}\n")).collect();
    std::fs::write(export, &rows).unwrap();
    let mut manifest = export.as_os_str().to_owned();
    manifest.push(".manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m["count"] = serde_json::json!(rows.lines().count());
    m["sha256"] = serde_json::json!(hex::encode(sha2::Sha256::digest(rows.as_bytes())));
    std::fs::write(&manifest, m.to_string()).unwrap();
    let evidence = ops::proof::evidence_path(export);
    let kept: String = std::fs::read_to_string(&evidence)
        .unwrap()
        .lines()
        .filter(|l| keep_evidence(&serde_json::from_str(l).unwrap()))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&evidence, kept).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_export_cut_short_stripped_of_proofs_or_relabelled_does_not_verify() {
    let log = Log::new("tenant-export").await;
    log.session("tenant-a", 2).await;
    log.session("tenant-b", 1).await;
    let newest = log.session("tenant-a", 2).await;
    log.sign().await;
    let trust = log.trust();
    let fresh = |name: &str| {
        let (log, out) = (&log, log.dir.join(name));
        async move {
            export(log, Some("tenant-a"), &out).await;
            out
        }
    };
    let one = fresh("cut.jsonl").await;
    ops::proof::verify_export_offline(&one, &trust, None).unwrap();
    // The tenant's newest event dropped from the rows, the evidence and the manifest alike.
    let last = log.store.read_stream(&newest, 3).await.unwrap().remove(0);
    let (id, position) = (last.event_id.to_string(), format!("\"position\":{},", last.global_position));
    rewrite_export(&one, |l| !l.contains(&position), |v| v["event"]["event_id"] != id.as_str());
    let e = format!("{:#}", ops::proof::verify_export_offline(&one, &trust, None).unwrap_err());
    assert!(e.contains(&format!("stream {newest}")) && e.contains("signed its head at version 3"), "{e}");

    // Every proof stripped: nothing of the tenant is proven.
    let stripped = fresh("stripped.jsonl").await;
    edit_evidence(&stripped, |v| {
        if let Some(o) = v.as_object_mut() {
            o.remove("proof");
            o.remove("leaf");
        }
    });
    let e = format!("{:#}", ops::proof::verify_export_offline(&stripped, &trust, None).unwrap_err());
    assert!(e.contains("no proven event"), "{e}");

    // The tenant's own heads moved among the sealed ones, so that none would have to be shown.
    let sealed = fresh("sealed.jsonl").await;
    edit_evidence(&sealed, |v| {
        if v["kind"] == "checkpoint" {
            v["heads"] = serde_json::json!({});
            let own = [hex::encode(ledger::proof::checkpoint::tenant_key("tenant-a")), hex::encode([0u8; 32])];
            v["others"].as_array_mut().unwrap().push(serde_json::json!(own));
        }
    });
    let e = format!("{:#}", ops::proof::verify_export_offline(&sealed, &trust, None).unwrap_err());
    assert!(e.contains("seals heads that this export must show"), "{e}");

    // A whole-log export relabelled as tenant-a's, tenant-b's events dropped.
    let whole = log.dir.join("whole.jsonl");
    export(&log, None, &whole).await;
    rewrite_export(&whole, |l| !l.contains("tenant-b"), |v| v["event"]["tenant"] != "tenant-b");
    let evidence = ops::proof::evidence_path(&whole);
    let text = std::fs::read_to_string(&evidence).unwrap().replacen("\"tenant\":null", "\"tenant\":\"tenant-a\"", 1);
    std::fs::write(&evidence, text).unwrap();
    let e = format!("{:#}", ops::proof::verify_export_offline(&whole, &trust, None).unwrap_err());
    assert!(e.contains("the evidence is of tenant tenant-a's events only, the manifest of the whole log"), "{e}");
}

/// Checkpoints name the one before them: one left out of the auditor's copy (or deleted from the
/// table) is found, so the heads only it signed cannot be dodged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_left_out_between_two_others_is_found() {
    let log = Log::new("gap").await;
    log.session("tenant-a", 1).await;
    log.sign().await;
    log.session("tenant-b", 1).await;
    let middle = log.sign().await;
    log.session("tenant-a", 1).await;
    let newest = log.sign().await;
    assert!(log.verify_with_file().await.is_ok());
    let file = log.signing.file.clone().unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["size"] != middle)
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(kept.lines().count(), 2);
    std::fs::write(&file, kept).unwrap();
    expect_err(
        log.verify_with_file().await,
        &[&format!("checkpoint {newest} follows checkpoint {middle}, which is missing")],
    );
    log.superuser(&format!("DELETE FROM log_checkpoints WHERE tree_size = {middle}")).await;
    expect_err(log.verify().await, &["which is missing"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_rotation_the_new_key_signs_on_and_the_old_key_signs_nothing_larger() {
    let mut log = Log::new("rotation").await;
    log.session("tenant-a", 1).await;
    log.sign().await;
    let first = log.trust();
    let old = Signer::parse(&log.signing.key.to_private_string()).unwrap();
    let new = Signer::generate(ORIGIN).unwrap();
    ops::proof::rotate(&log.store, &old, &new, log.signing.file.as_deref()).await.unwrap();
    // The new key signs on; the auditor holds only the first key, and the rotation brings in the next.
    log.signing.key = Signer::parse(&new.to_private_string()).unwrap();
    log.session("tenant-a", 1).await;
    log.sign().await;
    let ok = ops::proof::verify_log(&log.store, &first, log.signing.file.as_deref()).await.unwrap();
    assert!(ok.contains("2 signed checkpoints"), "{ok}");
    // The old key, leaked, signs a larger checkpoint: refused, from the table and from the file.
    log.signing.key = old;
    log.session("tenant-a", 1).await;
    log.sign().await;
    let e = ops::proof::verify_log(&log.store, &first, None).await.unwrap_err();
    assert!(format!("{e:#}").contains("no signature by a key this verifier trusts"), "{e:#}");
    let e = ops::proof::verify_log(&log.store, &first, log.signing.file.as_deref()).await.unwrap_err();
    assert!(format!("{e:#}").contains("no signature by a key this verifier trusts"), "{e:#}");
}

/// An auditor's machine has no database: the offline check starts none and needs no URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offline_check_runs_with_no_database_at_all() {
    let log = Log::new("offline-cli").await;
    log.session("tenant-a", 1).await;
    log.sign().await;
    let out = log.dir.join("offline.jsonl");
    export(&log, None, &out).await;
    let key = log.dir.join("log.pub");
    std::fs::write(&key, log.signing.key.verifier().to_string()).unwrap();
    let cwd = log.dir.join("auditor");
    std::fs::create_dir_all(&cwd).unwrap();
    let run = std::process::Command::new(tests::grantctl())
        .args(["audit", "verify", "--public-key"])
        .arg(&key)
        .arg("--export")
        .arg(&out)
        .current_dir(&cwd)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&run.stdout).into_owned() + &String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{text}");
    assert!(text.contains("rows match their events"), "{text}");
    assert!(!cwd.join(".pgdata").exists(), "the offline check started a database");
}

/// `grantctl serve checkpoints` as an operator runs it: it signs what the log holds, appends it
/// to the file, and says so on its metrics, with its health beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkpoint_service_signs_appends_and_says_so_on_its_metrics() {
    use tokio::io::AsyncBufReadExt as _;
    let log = Log::new("service").await;
    log.session("tenant-a", 2).await;
    let key = log.dir.join("log.key");
    std::fs::write(&key, log.signing.key.to_private_string()).unwrap();
    let file = log.dir.join("service.jsonl");
    let mut child = tokio::process::Command::new(tests::grantctl())
        .args(["serve", "checkpoints", "--every-events", "1", "--key"])
        .arg(&key)
        .arg("--file")
        .arg(&file)
        .env("DATABASE_URL", log.db.url())
        .env("CHECKPOINTS_METRICS_LISTEN", "127.0.0.1:0")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let addr: std::net::SocketAddr = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line()).await.unwrap().unwrap();
        let line = line.expect("the service printed where its metrics are before it ended");
        if let Some(rest) = line.strip_prefix("checkpoint service metrics on http://") {
            break rest.trim_end_matches("/metrics").parse().unwrap();
        }
    };
    let metrics = tests::poll_until(
        "a checkpoint on the metrics",
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async {
            let (_, text) = ops::status::get(addr, "/metrics").await.ok()?;
            text.contains("ledger_checkpoints_signed_total 1").then_some(text)
        },
    )
    .await;
    assert!(metrics.contains("ledger_tree_leaves 3") && metrics.contains("ledger_checkpoint_size 3"), "{metrics}");
    assert_eq!(ops::status::get(addr, "/healthz").await.unwrap().0, 200);
    let ok = ops::proof::verify_log(&log.store, &log.trust(), Some(&file)).await.unwrap();
    assert!(ok.contains("3 events") && ok.contains("1 signed checkpoints"), "{ok}");
    child.start_kill().unwrap();
}
