//! `grantctl audit keygen|checkpoint|cosign|rotate|prove|verify --public-key` and `grantctl
//! serve checkpoints`: the Merkle tree kept beside the log, checkpoints signed with a key held
//! outside the database, proofs, and the verifier that needs only the public key.
//!
//! Checkpoints go to the `log_checkpoints` table and, when the operator names one, to a file
//! opened for appending only, one JSON line each, which the operator ships elsewhere: a
//! database superuser who rewrites the log and the table cannot reach that copy.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ledger::postgres::{StoredCheckpoint, heads_from_json, heads_json};
use ledger::proof::checkpoint::{Checkpoint, Sealed, heads_line, heads_of, prev_line, rotation_note, tenant_key};
use ledger::proof::merkle::{self, Hash};
use ledger::proof::note::{Note, Signer, Verifier};
use ledger::proof::verify::{self, Finding, Signed, Unchecked, Walk};
use ledger::proof::{event_from_json, event_json};
use ledger::{PgStore, RecordedEvent};
use serde_json::{Value, json};

/// Reads a private key file (`PRIVATE+KEY+…`, as `keygen` writes it).
pub fn load_signer(path: &Path) -> Result<Signer> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading the key file {}", path.display()))?;
    Signer::parse(&text).with_context(|| format!("{} is not a signed-note private key", path.display()))
}

/// A public key: the string itself, or a file holding it.
pub fn load_verifier(key: &str) -> Result<Verifier> {
    let looks_like_key = key.matches('+').count() >= 2 && !key.contains('/') || key.starts_with("PRIVATE+KEY+");
    let text = if Path::new(key).is_file() {
        std::fs::read_to_string(key).with_context(|| format!("reading {key}"))?
    } else if looks_like_key {
        key.to_owned()
    } else {
        bail!("{key}: no such file, and not a public key (name+id+key) either");
    };
    if text.trim_start().starts_with("PRIVATE+KEY+") {
        bail!("{key} is a private key: give the public key (what `grantctl audit keygen` printed)");
    }
    Verifier::parse(&text).with_context(|| format!("{key:?} is not a signed-note public key (name+id+key)"))
}

/// `grantctl audit keygen`: a new key in `out` (created, never overwritten, readable by its
/// owner only); returns the public key to give auditors.
pub fn keygen(name: &str, out: &Path) -> Result<String> {
    let signer = Signer::generate(name)?;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(out).with_context(|| format!("creating {} (it must not exist)", out.display()))?;
    writeln!(f, "{}", signer.to_private_string())?;
    Ok(signer.verifier().to_string())
}

/// Where signed checkpoints go and how often.
#[derive(Debug)]
pub struct Signing {
    pub key: Signer,
    /// Sign when this many events have joined the tree since the last checkpoint…
    pub every_events: u64,
    /// …or when this long has passed and at least one has.
    pub every: Duration,
    /// The append-only copy the operator ships elsewhere.
    pub file: Option<PathBuf>,
}

/// Adds every readable event to the tree.
pub async fn extend(store: &PgStore) -> Result<u64> {
    let mut size = None;
    loop {
        let head = store.extend_tree(ledger::READ_PAGE).await?;
        if size == Some(head.size) {
            return Ok(head.size);
        }
        size = Some(head.size);
    }
}

/// Extends the tree and signs a checkpoint of it if `due` says so, given the size of the
/// newest checkpoint. Returns the checkpoint this call stored, if any.
pub async fn checkpoint(
    store: &PgStore,
    signing: &Signing,
    due: impl FnOnce(u64, u64) -> bool,
) -> Result<Option<StoredCheckpoint>> {
    let size = extend(store).await?;
    sign_head(store, signing, size, due).await
}

/// Signs a checkpoint of the tree's first `size` leaves if `due` says so, given the size of the
/// newest checkpoint.
pub async fn sign_head(
    store: &PgStore,
    signing: &Signing,
    size: u64,
    due: impl FnOnce(u64, u64) -> bool,
) -> Result<Option<StoredCheckpoint>> {
    let head = store.tree_head().await?.size;
    if size > head {
        bail!("the tree holds {head} leaves: a checkpoint of {size} cannot be signed");
    }
    let last = store.newest_checkpoint_size().await?.unwrap_or(0);
    // Nothing to sign in an empty log, nor twice for one size.
    if size == 0 || size <= last && last != 0 || !due(last, size) {
        return Ok(None);
    }
    let heads = store.heads_between(last, size).await?;
    let root = store.tree_root(size).await?;
    let extensions = vec![prev_line(last), heads_line(&heads, &[])];
    let c = Checkpoint { origin: signing.key.name.clone(), size, root, extensions };
    let stored = StoredCheckpoint { size, note: c.sign(&signing.key)?, heads };
    if !store.save_checkpoint(&stored).await? {
        return Ok(None);
    }
    if let Some(path) = &signing.file {
        append_line(path, &json!({ "size": size, "note": stored.note, "heads": heads_json(&stored.heads) }))?;
    }
    Ok(Some(stored))
}

fn append_line(path: &Path, line: &Value) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .with_context(|| format!("opening {} for appending", path.display()))?;
    writeln!(f, "{line}")?;
    f.sync_data()?;
    Ok(())
}

/// The checkpoint service's metrics: how far the tree reaches and when the newest checkpoint was
/// signed, so an alert can fire when nobody signs any more.
#[derive(Debug, Default, Clone)]
pub struct ProofMetrics {
    leaves: telemetry::Gauge,
    signed_size: telemetry::Gauge,
    signed_at: telemetry::Gauge,
    signed: telemetry::Counter,
    failures: telemetry::Counter,
}

impl ProofMetrics {
    pub fn register(&self, registry: &mut telemetry::Registry) {
        let r = registry.sub_registry_with_prefix("ledger");
        r.register("tree_leaves", "Events the Merkle tree holds", self.leaves.clone());
        r.register(
            "checkpoint_size",
            "Leaves the newest checkpoint this process signed covers",
            self.signed_size.clone(),
        );
        r.register(
            "checkpoint_signed_timestamp_seconds",
            "When this process last signed a checkpoint (Unix time)",
            self.signed_at.clone(),
        );
        r.register("checkpoints_signed", "Checkpoints this process signed", self.signed.clone());
        r.register(
            "checkpoint_failures",
            "Tree extensions or signatures that failed and were retried",
            self.failures.clone(),
        );
    }
}

/// How often the service extends the tree.
pub const EXTEND_EVERY: Duration = Duration::from_secs(1);

/// `grantctl serve checkpoints`: keeps the tree and signs checkpoints until `shutdown`.
pub async fn serve(
    store: PgStore,
    signing: Signing,
    metrics: ProofMetrics,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let mut signed_at = tokio::time::Instant::now();
    tokio::pin!(shutdown);
    loop {
        let now = tokio::time::Instant::now();
        let by_time = now.duration_since(signed_at) >= signing.every;
        let made =
            checkpoint(&store, &signing, |last, size| size > last && (size - last >= signing.every_events || by_time))
                .await;
        match made {
            Ok(Some(c)) => {
                signed_at = now;
                metrics.signed.inc();
                metrics.signed_size.set(i64::try_from(c.size).unwrap_or(i64::MAX));
                metrics.signed_at.set(time::OffsetDateTime::now_utc().unix_timestamp());
                tracing::info!(size = c.size, "checkpoint signed");
            }
            Ok(None) => {}
            Err(e) => {
                metrics.failures.inc();
                tracing::error!(error = format!("{e:#}"), "checkpoint failed; trying again");
            }
        }
        if let Ok(head) = store.tree_head().await {
            metrics.leaves.set(i64::try_from(head.size).unwrap_or(i64::MAX));
        }
        // Once a second: the tree grows in batches, a few statements each, whatever the rate
        // of appends.
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            () = tokio::time::sleep(EXTEND_EVERY) => {}
        }
    }
}

/// `grantctl audit cosign`: a witness adds its signature to a checkpoint it has checked is the
/// log's. Prints the cosigned note.
pub fn cosign(note: &str, log_key: &Verifier, witness: &Signer) -> Result<String> {
    Checkpoint::open(note, std::slice::from_ref(log_key), &log_key.name).context("the checkpoint is not the log's")?;
    Ok(Note::cosign(note, witness)?)
}

/// `grantctl audit cosign`: every checkpoint of a checkpoints file, checked and cosigned, into
/// `out`; rotation lines are copied. Returns how many were cosigned.
pub fn cosign_file(path: &Path, log_key: &Verifier, witness: &Signer, out: &Path) -> Result<usize> {
    // The whole file first: every note the log's, no two roots for one size, each heads line
    // the heads beside it. A witness that keeps no state sees no more than this file.
    let (notes, rotations) = read_checkpoint_file(path)?;
    verify::open_checkpoints(log_key, &[], &rotations, &notes).context("the witness refuses to cosign")?;
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = Vec::new();
    let mut n = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut v: Value = serde_json::from_str(line)?;
        if let Some(note) = v.get("note").and_then(Value::as_str) {
            // Checked above with the rotations, so a note of a rotated key is cosigned too.
            v["note"] = json!(Note::cosign(note, witness)?);
            n += 1;
        }
        lines.push(v.to_string());
    }
    std::fs::write(out, lines.join("\n") + "\n").with_context(|| format!("writing {}", out.display()))?;
    Ok(n)
}

/// `grantctl audit rotate`: the note by which the old key introduces the new, stored and, when
/// named, appended to the file.
pub async fn rotate(store: &PgStore, old: &Signer, new: &Signer, file: Option<&Path>) -> Result<String> {
    if old.name != new.name {
        bail!("the new key must carry the log's name {:?}, not {:?}", old.name, new.name);
    }
    // Checkpoints up to the tree's size now stay the old key's; every later one is the new's.
    let from = extend(store).await?;
    let note = rotation_note(old, new, from)?;
    store.save_rotation(&note).await?;
    if let Some(path) = file {
        append_line(path, &json!({ "rotation": note }))?;
    }
    Ok(note)
}

fn b64_list(hashes: &[Hash]) -> Vec<String> {
    hashes.iter().map(|h| B64.encode(h)).collect()
}

fn hashes_of(v: &Value) -> Result<Vec<Hash>> {
    v.as_array()
        .context("a proof is a list")?
        .iter()
        .map(|h| {
            let bytes = B64.decode(h.as_str().context("a proof hash is a string")?)?;
            <Hash>::try_from(bytes).map_err(|_| anyhow::anyhow!("a proof hash is not 32 bytes"))
        })
        .collect()
}

/// `grantctl audit prove --event ID`: the event's leaf, the newest checkpoint holding it, and
/// the inclusion proof, as JSON.
pub async fn prove_event(store: &PgStore, event_id: uuid::Uuid) -> Result<Value> {
    let (event, leaf) = store.leaf_of(event_id).await?.with_context(|| format!("no event {event_id}"))?;
    let leaf = leaf.context("the event is not in the tree yet: wait for the next checkpoint")?;
    let c = store
        .checkpoint_holding(leaf)
        .await?
        .context("no checkpoint holds the event yet: run `grantctl audit checkpoint` or wait for the service")?;
    let (proof, _) = store.inclusion_proof(leaf, c.size).await?;
    Ok(json!({
        "event_id": event_id, "position": event.global_position, "leaf_index": leaf,
        "leaf_hash": B64.encode(merkle::event_leaf(&event)), "event_hash": hex::encode(event.hash),
        "tree_size": c.size, "checkpoint": c.note, "inclusion_proof": b64_list(&proof),
    }))
}

/// `grantctl audit prove --from A --to B`: both checkpoints and the consistency proof.
pub async fn prove_consistency(store: &PgStore, from: u64, to: u64) -> Result<Value> {
    let checkpoints = store.checkpoints().await?;
    let sizes: Vec<u64> = checkpoints.iter().map(|c| c.size).collect();
    let find = |size| {
        checkpoints
            .iter()
            .find(|c| c.size == size)
            .with_context(|| format!("no checkpoint of size {size}; the checkpoints' sizes are {sizes:?}"))
    };
    let (a, b) = (find(from)?, find(to)?);
    let proof = store.consistency_proof(from, to).await?;
    Ok(json!({
        "from": from, "to": to, "from_checkpoint": a.note, "to_checkpoint": b.note,
        "consistency_proof": b64_list(&proof),
    }))
}

/// The auditor's own copy of the checkpoints: (note, heads) and rotation notes, in file order.
pub fn read_checkpoint_file(path: &Path) -> Result<(Vec<Unchecked>, Vec<String>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let (mut notes, mut rotations) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).with_context(|| format!("{} line {}", path.display(), i + 1))?;
        if let Some(r) = v.get("rotation").and_then(Value::as_str) {
            rotations.push(r.to_owned());
        } else {
            let note = v.get("note").and_then(Value::as_str).context("a checkpoint line has a note")?;
            let heads = heads_from_json(v.get("heads").unwrap_or(&Value::Null)).map_err(anyhow::Error::msg)?;
            notes.push((note.to_owned(), heads, Vec::new()));
        }
    }
    Ok((notes, rotations))
}

/// The uses each grant gave, counted from the log, against the count its end states: a use
/// deleted before any checkpoint signed it (its stream's chain recomputed) is still found.
#[derive(Debug, Default)]
pub struct GrantUses {
    uses: std::collections::HashMap<(String, String), Vec<u64>>,
    ended: std::collections::HashMap<(String, String), u64>,
}

impl GrantUses {
    pub fn push(&mut self, e: &RecordedEvent) {
        let grant =
            || e.payload.get("grant_id").and_then(Value::as_str).map(|g| (e.tenant_id.to_string(), g.to_owned()));
        match e.event_type.as_str() {
            "tool.call.authorized" => {
                if let (Some(k), Some(n)) = (grant(), e.payload.get("use_ordinal").and_then(Value::as_u64)) {
                    self.uses.entry(k).or_default().push(n);
                }
            }
            "browser.task_grant.ended" => {
                if let (Some(k), Some(n)) = (grant(), e.payload.get("uses").and_then(Value::as_u64)) {
                    self.ended.insert(k, n);
                }
            }
            _ => {}
        }
    }

    /// Every ended grant's uses are exactly 1..=its stated count.
    pub fn check(&self) -> Result<usize> {
        let mut ended: Vec<_> = self.ended.iter().collect();
        ended.sort();
        for ((tenant, grant), &n) in ended {
            let mut seen = self.uses.get(&(tenant.clone(), grant.clone())).cloned().unwrap_or_default();
            seen.sort_unstable();
            if seen != (1..=n).collect::<Vec<_>>() {
                let missing: Vec<u64> = (1..=n).filter(|k| !seen.contains(k)).collect();
                bail!(
                    "grant {grant} of tenant {tenant} ended after {n} uses; the log holds {} of them (missing:                      {missing:?}): uses were deleted",
                    seen.len()
                );
            }
        }
        Ok(self.ended.len())
    }
}

/// What the auditor trusts: the log's public key and any witnesses'.
#[derive(Debug)]
pub struct Trust {
    pub log_key: Verifier,
    /// Each must have cosigned the newest checkpoint.
    pub witnesses: Vec<Verifier>,
}

impl Trust {
    pub fn load(log_key: &str, witnesses: &[String]) -> Result<Self> {
        Ok(Self {
            log_key: load_verifier(log_key)?,
            witnesses: witnesses.iter().map(|w| load_verifier(w)).collect::<Result<_>>()?,
        })
    }

    /// Something must be proven: at least one checkpoint, the newest cosigned by each witness.
    fn require(&self, checkpoints: &[Signed]) -> Result<()> {
        let Some(newest) = checkpoints.last() else {
            bail!("no signed checkpoint: nothing is proven (is `grantctl serve checkpoints` running?)");
        };
        for w in &self.witnesses {
            if !newest.witnessed_by.contains(&w.name) {
                bail!(
                    "the newest checkpoint (size {}) carries no cosignature by {}: the witness has not seen it",
                    newest.checkpoint.size,
                    w.name
                );
            }
        }
        Ok(())
    }
}

fn summary(walked: &verify::Walked, checkpoints: &[Signed], consistent: usize, witnesses: &[Verifier]) -> String {
    let (size, root) =
        checkpoints.last().map_or((0, String::new()), |c| (c.checkpoint.size, B64.encode(c.checkpoint.root)));
    let mut out = format!(
        "{} events in {} streams: every hash and link checked; {} signed checkpoints match the log, the newest of \
         size {size} with root {root}; {consistent} consistency proofs between them check; {} events after the \
         newest checkpoint are not signed yet",
        walked.events, walked.streams, walked.checkpoints, walked.unsigned
    );
    for w in witnesses {
        let n = checkpoints.iter().filter(|c| c.witnessed_by.contains(&w.name)).count();
        out.push_str(&format!("; {n} cosigned by {}", w.name));
    }
    out
}

/// `grantctl audit verify --public-key K`: the whole log against the signed checkpoints (the
/// auditor's file when given, else the table), naming the first place it differs.
pub async fn verify_log(store: &PgStore, trust: &Trust, file: Option<&Path>) -> Result<String> {
    let (notes, rotations) = match file {
        Some(path) => read_checkpoint_file(path)?,
        None => (
            store.checkpoints().await?.into_iter().map(|c| (c.note, c.heads, Vec::new())).collect(),
            store.rotations().await?,
        ),
    };
    let checkpoints = verify::open_checkpoints(&trust.log_key, &trust.witnesses, &rotations, &notes)?;
    trust.require(&checkpoints)?;
    let mut walk = Walk::new(&checkpoints);
    let mut grants = GrantUses::default();
    let mut found = None;
    crate::each_page_all(store, |page| {
        for e in page {
            grants.push(e);
            if let Err(f) = walk.push(e) {
                found = Some(f);
                anyhow::bail!("stop");
            }
        }
        Ok(())
    })
    .await
    .or_else(|e| if found.is_some() { Ok(()) } else { Err(e) })?;
    if let Some(f) = found {
        return Err(locate(store, &walk, &checkpoints, f).await.into());
    }
    let leaves = walk.leaves().len() as u64;
    let walked = walk.finish()?;
    grants.check()?;
    // The stored tree must prove each checkpoint a prefix of the next: the roots above came
    // from the events themselves, so this checks the tree that proofs are served from.
    let mut proofs = Vec::new();
    for pair in checkpoints.windows(2) {
        let (a, b) = (pair[0].checkpoint.size, pair[1].checkpoint.size);
        if b <= leaves {
            proofs.push(((a, b), store.consistency_proof(a, b).await?));
        }
    }
    let consistent = verify::check_consistency(&checkpoints, |a, b| {
        proofs.iter().find(|(k, _)| *k == (a, b)).map(|(_, p)| p.clone())
    })?;
    let mut out = summary(&walked, &checkpoints, consistent, &trust.witnesses);
    if file.is_none() {
        out.push_str(
            ". The checkpoints came from the database: compare the newest root with your own copy, or give \
             --checkpoints with it, to catch a deleted checkpoint",
        );
    }
    Ok(out)
}

/// A root that differs, narrowed to its first leaf when the stored tree still matches the
/// signature (an attacker who rewrote events but not the tree).
async fn locate(store: &PgStore, walk: &Walk<'_>, checkpoints: &[Signed], f: Finding) -> Finding {
    let Finding::Root { size, from, heads, .. } = f else { return f };
    let signed = checkpoints.iter().find(|c| c.checkpoint.size == size).map(|c| c.checkpoint.root);
    let (Ok(stored_leaves), Ok(stored)) = (store.tree_leaves(from, size).await, store.tree_root(size).await) else {
        return Finding::Root { size, from, at: String::new(), heads };
    };
    let first = (from..size).zip(0..).find(|&(i, k)| {
        let mine = usize::try_from(i).ok().and_then(|i| walk.leaves().get(i));
        stored_leaves.get(k) != mine
    });
    let first = first.map(|(i, _)| i);
    let at = match first {
        Some(leaf) if Some(stored) == signed => {
            format!(": leaf {leaf} is the first that differs from what was signed")
        }
        _ => String::new(),
    };
    Finding::Root { size, from, at, heads }
}

/// What an export covers, in words.
fn scope_words(tenant: Option<&str>) -> String {
    tenant.map_or_else(|| "the whole log".to_owned(), |t| format!("tenant {t}'s events only"))
}

/// Other tenants' sealed heads, as hex pairs.
fn sealed_of(v: &Value) -> Result<Vec<Sealed>> {
    let Some(list) = v.as_array() else { return Ok(Vec::new()) };
    list.iter()
        .map(|pair| {
            let part = |i: usize| -> Result<Hash> {
                let bytes =
                    hex::decode(pair.get(i).and_then(Value::as_str).context("a sealed head is two hex strings")?)?;
                <Hash>::try_from(bytes).map_err(|_| anyhow::anyhow!("a sealed head is two 32-byte hashes"))
            };
            Ok((part(0)?, part(1)?))
        })
        .collect()
}

/// The evidence file an export carries beside its rows.
pub fn evidence_path(export: &Path) -> PathBuf {
    let mut name = export.as_os_str().to_owned();
    name.push(".evidence.jsonl");
    PathBuf::from(name)
}

/// Writes the evidence for an export: the rotation notes, every checkpoint with its heads,
/// the consistency proofs between consecutive checkpoints, and every event (of `tenant`, when
/// given) with, for a tenant's export, its leaf and its inclusion proof in the newest checkpoint.
/// A whole-log export needs no per-event proof: the verifier rebuilds the tree itself.
/// `grantctl audit export`: the rows, their manifest and the evidence, all from one read of the
/// log, so that each row's event is in the evidence and nothing else is.
pub async fn export(store: &PgStore, tenant: Option<&str>, out: &Path) -> Result<(crate::audit::Manifest, u64)> {
    let mut rows = Vec::new();
    let events = export_evidence(store, tenant, &evidence_path(out), &mut rows).await?;
    let manifest = crate::audit::write_export(out, &rows, tenant.map(str::to_owned))?;
    Ok((manifest, events))
}

/// Writes the evidence file; each event's audit row goes to `rows`.
async fn export_evidence(
    store: &PgStore,
    tenant: Option<&str>,
    path: &Path,
    rows: &mut Vec<(u64, String)>,
) -> Result<u64> {
    extend(store).await?;
    let checkpoints = store.checkpoints().await?;
    let newest = checkpoints.last().map_or(0, |c| c.size);
    let mut out =
        std::io::BufWriter::new(std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?);
    writeln!(out, "{}", json!({ "kind": "header", "format": "grant-ledger-evidence/v1", "tenant": tenant }))?;
    for r in store.rotations().await? {
        writeln!(out, "{}", json!({ "kind": "rotation", "note": r }))?;
    }
    for c in &checkpoints {
        // A tenant's export holds its own streams' heads, and the other tenants' sealed.
        let (heads, others) = match tenant {
            Some(t) => heads_of(&c.heads, t),
            None => (c.heads.clone(), Vec::new()),
        };
        let others: Vec<[String; 2]> = others.iter().map(|(k, d)| [hex::encode(k), hex::encode(d)]).collect();
        let line = json!({ "kind": "checkpoint", "size": c.size, "note": c.note, "heads": heads_json(&heads), "others": others });
        writeln!(out, "{line}")?;
    }
    // The signed part of the tree, in memory, from the stored leaves.
    let mut tree = merkle::MemoryTree::default();
    let leaves = store.tree_leaves(0, newest).await?;
    if leaves.len() as u64 != newest {
        bail!("the stored tree lacks leaf {}", leaves.len());
    }
    leaves.into_iter().for_each(|leaf| tree.push(leaf));
    for pair in checkpoints.windows(2) {
        let (a, b) = (pair[0].size, pair[1].size);
        let proof = b64_list(&merkle::consistency_proof(&tree, a, b));
        writeln!(out, "{}", json!({ "kind": "consistency", "from": a, "to": b, "proof": proof }))?;
    }
    let mut count = 0u64;
    let mut leaf = 0u64;
    let mut failed = None;
    crate::each_page_all(store, |page| {
        for e in page {
            let this = leaf;
            leaf += 1;
            if tenant.is_some_and(|t| e.tenant_id.as_str() != t) {
                continue;
            }
            let mut line = json!({ "kind": "event", "event": event_json(e) });
            if tenant.is_some() && this < newest {
                line["leaf"] = json!(this);
                line["proof"] = json!(b64_list(&merkle::inclusion_proof(&tree, this, newest)));
            }
            if let Err(err) = writeln!(out, "{line}") {
                failed = Some(err);
            }
            let row = projections::audit::row(e).with_context(|| format!("event at position {}", e.global_position))?;
            rows.push((e.global_position, crate::audit::json_line(&row)));
            count += 1;
        }
        Ok(())
    })
    .await?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    out.flush()?;
    Ok(count)
}

/// `grantctl audit verify --public-key K --export F`: the export checked with nothing but the
/// public key (and any witness keys): the checkpoints' signatures, the consistency proofs, every
/// event's hash and links, the tree's roots (a whole-log export) or each event's inclusion proof
/// (a tenant's), and every row of the export against the events it claims to show.
pub fn verify_export_offline(export: &Path, trust: &Trust, own: Option<&Path>) -> Result<String> {
    let (manifest, _) = crate::audit::check_manifest(export)?;
    let evidence = evidence_path(export);
    let text = std::fs::read_to_string(&evidence).with_context(|| format!("reading {}", evidence.display()))?;
    let (mut tenant, mut rotations, mut notes, mut consistency, mut events) = (None, vec![], vec![], vec![], vec![]);
    for (i, line) in text.lines().enumerate() {
        let v: Value = serde_json::from_str(line).with_context(|| format!("{} line {}", evidence.display(), i + 1))?;
        match v.get("kind").and_then(Value::as_str) {
            Some("header") => tenant = v.get("tenant").and_then(Value::as_str).map(str::to_owned),
            Some("rotation") => rotations.push(v["note"].as_str().context("a rotation's note")?.to_owned()),
            Some("checkpoint") => notes.push((
                v["note"].as_str().context("a checkpoint's note")?.to_owned(),
                heads_from_json(&v["heads"]).map_err(anyhow::Error::msg)?,
                sealed_of(&v["others"])?,
            )),
            Some("consistency") => consistency.push((
                (v["from"].as_u64().context("from")?, v["to"].as_u64().context("to")?),
                hashes_of(&v["proof"])?,
            )),
            Some("event") => {
                let proof = v.get("proof").map(hashes_of).transpose()?;
                events.push((
                    event_from_json(&v["event"]).map_err(anyhow::Error::msg)?,
                    v.get("leaf").and_then(Value::as_u64),
                    proof,
                ));
            }
            _ => bail!("{} line {}: unknown kind", evidence.display(), i + 1),
        }
    }
    if tenant != manifest.tenant {
        bail!(
            "the evidence is of {}, the manifest of {}",
            scope_words(tenant.as_deref()),
            scope_words(manifest.tenant.as_deref())
        );
    }
    // Only other tenants are sealed: a tenant's own heads, or a whole log's, are all in view.
    for (_, _, others) in &notes {
        let own_key = tenant.as_deref().map(tenant_key);
        if tenant.is_none() && !others.is_empty() || others.iter().any(|(k, _)| Some(*k) == own_key) {
            bail!("a checkpoint line seals heads that this export must show: the evidence was altered");
        }
    }
    let carried = verify::open_checkpoints(&trust.log_key, &trust.witnesses, &rotations, &notes)?;
    let consistent = verify::check_consistency(&carried, |a, b| {
        consistency.iter().find(|(k, _)| *k == (a, b)).map(|(_, p)| p.clone())
    })?;
    // The auditor's own copy, when given, is what the export must reach: an export cut short,
    // its newest checkpoint dropped with the events it signed, is found against it.
    let checkpoints = match own {
        None => carried.clone(),
        Some(path) => {
            let (notes, rotations) = read_checkpoint_file(path)?;
            verify::open_checkpoints(&trust.log_key, &trust.witnesses, &rotations, &notes)?
        }
    };
    trust.require(&checkpoints)?;
    let newest_of = |c: &[Signed]| c.last().map(|c| (c.checkpoint.size, c.checkpoint.root));
    if tenant.is_some() && own.is_some() && newest_of(&carried) != newest_of(&checkpoints) {
        bail!(
            "this tenant's export is proven up to checkpoint {}, your copy goes to {}: export it again",
            carried.last().map_or(0, |c| c.checkpoint.size),
            checkpoints.last().map_or(0, |c| c.checkpoint.size)
        );
    }
    let mut grants = GrantUses::default();
    events.iter().for_each(|(e, _, _)| grants.push(e));
    grants.check()?;
    let walked = if tenant.is_none() {
        let mut walk = Walk::new(&checkpoints);
        for (e, _, _) in &events {
            walk.push(e)?;
        }
        walk.finish()?
    } else {
        let tenant = tenant.as_deref().unwrap_or_default();
        let newest = carried.last().map(|c| &c.checkpoint);
        let mut walk = Walk::new(&[]);
        let mut last_leaf = None;
        let mut unsigned = 0;
        let mut proven = std::collections::HashSet::new();
        for (e, leaf, proof) in &events {
            if e.tenant_id.as_str() != tenant {
                bail!("position {}: an event of tenant {} in tenant {tenant}'s export", e.global_position, e.tenant_id);
            }
            walk.link(e)?;
            match (leaf, proof, newest) {
                (Some(leaf), Some(proof), Some(c)) => {
                    if last_leaf.is_some_and(|l| l >= *leaf) {
                        bail!("position {}: leaves out of order", e.global_position);
                    }
                    last_leaf = Some(*leaf);
                    merkle::verify_inclusion(*leaf, c.size, &merkle::event_leaf(e), proof, &c.root)
                        .map_err(|reason| Finding::Inclusion { position: e.global_position, leaf: *leaf, reason })?;
                    proven.insert((e.stream_id.to_string(), e.stream_version, e.hash));
                }
                _ => unsigned += 1,
            }
        }
        // Every head of this tenant a checkpoint signed is here, proven: an event cut from the
        // export, or stripped of its proof, leaves a head unmet.
        for c in &checkpoints {
            for (stream, head) in c.heads.iter().filter(|(_, h)| h.tenant == tenant) {
                if !proven.contains(&(stream.clone(), head.version, head.hash)) {
                    return Err(Finding::Head {
                        size: c.checkpoint.size,
                        stream: stream.clone(),
                        signed: head.version,
                        found: walk.newest(stream).map_or("none of it, proven".into(), |(v, _)| {
                            format!("no proven event at that version (the newest here is {v})")
                        }),
                    }
                    .into());
                }
            }
        }
        let mut w = walk.finish()?;
        w.events = events.len() as u64;
        w.checkpoints = checkpoints.len();
        w.unsigned = unsigned;
        w
    };
    // The rows an auditor reads are the events' own rows, nothing added, dropped or changed.
    let rows_text = std::fs::read_to_string(export).with_context(|| format!("reading {}", export.display()))?;
    let mut expected = Vec::new();
    for (e, _, _) in &events {
        expected.push(crate::audit::json_line(&projections::audit::row(e)?));
    }
    if rows_text.lines().count() != expected.len() {
        bail!(
            "{} holds {} rows; the evidence holds {} events for them: rows were added or dropped",
            export.display(),
            rows_text.lines().count(),
            expected.len()
        );
    }
    for (i, line) in rows_text.lines().enumerate() {
        if expected.get(i).map(String::as_str) != Some(line) {
            bail!(
                "{} line {}: this row is not the row of the event the evidence holds at that place\n  row:      {line}\n  evidence: {}",
                export.display(),
                i + 1,
                expected.get(i).map_or("(nothing)", String::as_str)
            );
        }
    }
    Ok(format!(
        "{} ({}): {} rows match their events; {}",
        export.display(),
        scope_words(tenant.as_deref()),
        rows_text.lines().count(),
        summary(&walked, &checkpoints, consistent, &trust.witnesses)
    ))
}
