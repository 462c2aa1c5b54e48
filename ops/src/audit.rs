//! `grantctl projections …` and `grantctl audit …`: the read side for operators and auditors.
//! Replay reads the log itself, never a projection, so what it prints rests on the hash chains.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use ledger::PgStore;
use projections::audit::{AuditRow, row};

use crate::each_page;
use projections::worker::{Worker, status};
use projections::{Projection, verify};
use time::OffsetDateTime;
use uuid::Uuid;

/// Which events a replay prints.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub tenant: Option<String>,
    pub session: Option<String>,
    pub grant: Option<Uuid>,
    pub since: Option<OffsetDateTime>,
}

/// The log's audit rows that pass `filter`, in log order. A grant's story includes the approval
/// that created it (its request and resolution) as well as its uses and its end.
pub async fn replay(store: &PgStore, filter: &Filter) -> Result<Vec<AuditRow>> {
    replay_with(store, filter, |_| {}).await
}

/// [`replay`], telling `progress` how many events it has read.
async fn replay_with(store: &PgStore, filter: &Filter, mut progress: impl FnMut(u64)) -> Result<Vec<AuditRow>> {
    let mut rows = Vec::new();
    each_page(store, |page| {
        for e in page {
            rows.push(row(e).with_context(|| format!("event at position {}", e.global_position))?);
        }
        progress(rows.len() as u64);
        Ok(())
    })
    .await?;
    // Session and grant ids are a tenant's own: scope every lookup by the tenant asked for.
    rows.retain(|r| filter.tenant.as_ref().is_none_or(|t| &r.tenant_id == t));
    let creating_approval = filter.grant.and_then(|g| {
        rows.iter()
            .find(|r| r.grant_id == Some(g) && r.event_type == "browser.task_grant.created")
            .and_then(|r| r.approval_id)
    });
    // A session's story holds what its cards and grants became, though an answer, a token or a
    // grant's end names no session of its own.
    let (mut approvals, mut grants) = (std::collections::HashSet::new(), std::collections::HashSet::new());
    if let Some(s) = &filter.session {
        for r in rows.iter().filter(|r| r.session_id.as_ref() == Some(s)) {
            approvals.extend(r.approval_id);
            grants.extend(r.grant_id);
        }
    }
    let in_session = |r: &AuditRow, s: &String| {
        r.session_id.as_ref() == Some(s)
            || r.approval_id.is_some_and(|a| approvals.contains(&a))
            || r.grant_id.is_some_and(|g| grants.contains(&g))
    };
    rows.retain(|r| {
        filter.tenant.as_ref().is_none_or(|t| &r.tenant_id == t)
            && filter.session.as_ref().is_none_or(|s| in_session(r, s))
            && filter.grant.is_none_or(|g| {
                r.grant_id == Some(g) || (r.approval_id.is_some() && r.approval_id == creating_approval)
            })
            && filter.since.is_none_or(|t| r.recorded_at >= t)
    });
    Ok(rows)
}

/// One row as the JSON line an export holds.
pub(crate) fn json_line(r: &AuditRow) -> String {
    serde_json::json!({
        "tenant": r.tenant_id, "position": r.global_position, "tx_id": r.tx_id.to_string(),
        "recorded_at": r.cells()[3], "stream": r.stream_id, "event_type": r.event_type,
        "principal": r.principal, "session_id": r.session_id, "grant_id": r.grant_id,
        "approval_id": r.approval_id, "authorization": r.authorization, "summary": r.summary,
    })
    .to_string()
}

/// Prints rows as text lines or JSON lines.
pub fn print(rows: &[AuditRow], jsonl: bool, mut out: impl Write) -> Result<()> {
    for r in rows {
        if jsonl {
            writeln!(out, "{}", json_line(r))?;
        } else {
            let authz = r.authorization.as_deref().map(|a| format!(" [{a}]")).unwrap_or_default();
            writeln!(
                out,
                "{} #{} {} {}: {}{authz}",
                r.cells()[3],
                r.global_position,
                r.tenant_id,
                r.principal,
                r.summary
            )?;
        }
    }
    Ok(())
}

/// What an export's manifest says: checked later by [`verify_export`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub count: u64,
    pub first_position: Option<u64>,
    pub last_position: Option<u64>,
    /// SHA-256 over the export file's bytes, hex.
    pub sha256: String,
    pub tenant: Option<String>,
}

fn manifest_path(export: &std::path::Path) -> std::path::PathBuf {
    let mut name = export.as_os_str().to_owned();
    name.push(".manifest.json");
    std::path::PathBuf::from(name)
}

/// `grantctl audit export`: the audit rows replayed from the log as JSON lines in `path`, and a
/// manifest beside it (`path.manifest.json`) an auditor keeps.
pub async fn export(store: &PgStore, filter: &Filter, path: &std::path::Path) -> Result<Manifest> {
    let total: i64 = store.pool().get().await?.query_one("SELECT count(*) FROM events", &[]).await?.get(0);
    let mut progress = Progress::new("exporting", u64::try_from(total).unwrap_or_default());
    let rows = replay_with(store, filter, |n| progress.at(n)).await?;
    progress.finish();
    let lines: Vec<(u64, String)> = rows.iter().map(|r| (r.global_position, json_line(r))).collect();
    write_export(path, &lines, filter.tenant.clone())
}

/// Writes an export's rows (each with its event's position) and the manifest beside them.
pub(crate) fn write_export(path: &std::path::Path, rows: &[(u64, String)], tenant: Option<String>) -> Result<Manifest> {
    use sha2::Digest;
    let mut bytes = Vec::new();
    for (_, line) in rows {
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
    }
    std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))?;
    let manifest = Manifest {
        count: rows.len() as u64,
        first_position: rows.first().map(|r| r.0),
        last_position: rows.last().map(|r| r.0),
        sha256: hex::encode(sha2::Sha256::digest(&bytes)),
        tenant,
    };
    std::fs::write(manifest_path(path), serde_json::to_vec_pretty(&manifest)?)?;
    Ok(manifest)
}

/// The export against its manifest: its digest and its row count. Returns both.
pub(crate) fn check_manifest(path: &std::path::Path) -> Result<(Manifest, String)> {
    use sha2::Digest;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let manifest: Manifest = serde_json::from_slice(
        &std::fs::read(manifest_path(path)).with_context(|| format!("reading {}", manifest_path(path).display()))?,
    )
    .context("the manifest is not valid")?;
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    if digest != manifest.sha256 {
        bail!(
            "{}: its SHA-256 is {digest}, the manifest says {}: the export was changed",
            path.display(),
            manifest.sha256
        );
    }
    let text = String::from_utf8(bytes).context("the export is not UTF-8")?;
    if text.lines().count() as u64 != manifest.count {
        bail!("{} lines, the manifest says {}", text.lines().count(), manifest.count);
    }
    Ok((manifest, text))
}

/// `grantctl audit verify --export FILE`: the file against its manifest (count, positions,
/// digest), then every line against the log's own replay at that position.
pub async fn verify_export(store: &PgStore, path: &std::path::Path) -> Result<String> {
    let (manifest, text) = check_manifest(path)?;
    let lines: Vec<&str> = text.lines().collect();
    // The manifest sits beside the file and could be rewritten with it, so the file must also be
    // exactly the log's own rows for the manifest's tenant between its first and last position:
    // nothing removed, repeated, reordered or changed.
    let filter = Filter { tenant: manifest.tenant.clone(), ..Filter::default() };
    let expected: Vec<String> = replay(store, &filter)
        .await?
        .iter()
        .filter(|r| {
            manifest.first_position.is_some_and(|f| r.global_position >= f)
                && manifest.last_position.is_some_and(|l| r.global_position <= l)
        })
        .map(json_line)
        .collect();
    let differs =
        (0..expected.len().max(lines.len())).find(|&i| expected.get(i).map(String::as_str) != lines.get(i).copied());
    if let Some(i) = differs {
        bail!(
            "line {}: the log says\n  {}\nthe export says\n  {}",
            i + 1,
            expected.get(i).map_or("(nothing)", String::as_str),
            lines.get(i).copied().unwrap_or("(nothing)")
        );
    }
    Ok(format!("{}: {} rows, {}; digest and every row match the log", path.display(), manifest.count, span(&manifest)))
}

/// Where an export's rows lie in the log, in words.
pub fn span(m: &Manifest) -> String {
    match (m.first_position, m.last_position) {
        (Some(a), Some(b)) => format!("positions {a} to {b}"),
        _ => "no positions (the export is empty)".to_owned(),
    }
}

/// `grantctl projections status`.
pub async fn projections_status(config: &tokio_postgres::Config) -> Result<String> {
    let client = crate::connect_config(config).await?;
    let mut out = String::new();
    for s in status(&client).await? {
        let stale = if s.stored_version == s.projection.version() { "" } else { " STALE: rebuild needed" };
        out.push_str(&format!(
            "{}: version {}{stale}, checkpoint ({}, {}), {} applied, {} events behind ({:.1} s)\n",
            s.projection.name(),
            s.stored_version,
            s.checkpoint.tx_id,
            s.checkpoint.position,
            s.applied,
            s.lag_events,
            s.lag_seconds
        ));
    }
    Ok(out)
}

/// `grantctl projections verify [NAME]`: fails when any view differs from the replay.
pub async fn projections_verify(config: &tokio_postgres::Config, name: Option<&str>) -> Result<String> {
    let mut client = crate::connect_config(config).await?;
    let reports = match name {
        None => verify::all(&mut client).await?,
        Some("active_task_grants") => vec![verify::active_task_grants(&mut client).await?],
        Some("authority") => vec![],
        Some(n) => {
            let p = Projection::from_name(n)
                .with_context(|| format!("no projection {n:?}: audit_log, active_task_grants or authority"))?;
            vec![verify::projection(&mut client, p).await?]
        }
    };
    let mut text = reports.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
    let mut ok = reports.iter().all(verify::Report::ok);
    if matches!(name, None | Some("authority")) {
        let (authority_ok, said) = crate::authority::authority_verify(config).await?;
        ok &= authority_ok;
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&said);
    }
    if !ok {
        bail!("{text}");
    }
    Ok(text)
}

/// Progress on standard error: a bar when it is a terminal, otherwise a plain line a second.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    label: String,
    last_line: std::time::Instant,
}

impl Progress {
    fn new(label: &str, total: u64) -> Self {
        use std::io::IsTerminal;
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = indicatif::ProgressBar::new(total);
            let style =
                indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} events ({per_sec}, {eta})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_message(label.to_owned());
            bar
        });
        Self { bar, label: label.to_owned(), last_line: std::time::Instant::now() }
    }

    fn at(&mut self, done: u64) {
        match &self.bar {
            Some(bar) => bar.set_position(done),
            None if self.last_line.elapsed() >= Duration::from_secs(1) => {
                eprintln!("{}: {done} events", self.label);
                self.last_line = std::time::Instant::now();
            }
            None => {}
        }
    }

    fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}

/// `grantctl projections rebuild NAME`, with progress on standard error.
pub async fn rebuild(config: &tokio_postgres::Config, name: &str) -> Result<String> {
    let projection = Projection::from_name(name).with_context(|| format!("no projection {name:?}: audit_log"))?;
    let mut client = crate::connect_config(config).await?;
    let total: i64 = client.query_one("SELECT count(*) FROM events", &[]).await?.get(0);
    let store = PgStore::new(ledger::postgres::pool(config.clone(), 2).map_err(anyhow::Error::msg)?);
    let started = std::time::Instant::now();
    let mut progress = Progress::new(&format!("rebuilding {name}"), u64::try_from(total).unwrap_or_default());
    let done = projections::rebuild::rebuild(&mut client, &store, projection, 5_000, |n| progress.at(n)).await?;
    progress.finish();
    let seconds = started.elapsed().as_secs_f64();
    Ok(format!(
        "{name}: rebuilt from {} events in {seconds:.1} s ({:.0} events/s) and swapped in at ({}, {})",
        done.events,
        done.events as f64 / seconds.max(1e-9),
        done.checkpoint.tx_id,
        done.checkpoint.position
    ))
}

/// `grantctl serve projections`: a worker per projection until Ctrl-C. Refuses to start while a
/// projection's rows were built by another version of its code.
pub async fn serve(config: tokio_postgres::Config, metrics: telemetry::MetricsListen) -> Result<()> {
    let client = crate::connect_config(&config).await?;
    projections::worker::ensure_current(&client).await?;
    let mut registry = telemetry::Registry::default();
    projections::metrics::register(&mut registry);
    // Nothing is sampled when nothing is served.
    let sampler = match metrics {
        telemetry::MetricsListen::Off => None,
        telemetry::MetricsListen::At(_) => {
            let (health, sampler) = sample_standings(config.clone());
            crate::observe::serve_metrics(metrics, "projection workers", registry, health).await?;
            Some(sampler)
        }
    };
    let pool = ledger::postgres::pool(config.clone(), 4).map_err(anyhow::Error::msg)?;
    let store = PgStore::with_listener(pool, config.clone());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let workers: Vec<_> = Projection::ALL
        .into_iter()
        .map(|p| {
            let mut stopped = stopped.clone();
            let worker = Worker::new(p, config.clone(), store.clone());
            tokio::spawn(worker.run(async move {
                let _ = stopped.wait_for(|s| *s).await;
            }))
        })
        .collect();
    println!("projection workers running: {}", Projection::ALL.map(Projection::name).join(", "));
    let _ = tokio::signal::ctrl_c().await;
    tracing::info!("shutting down projection workers");
    let _ = stop.send(true);
    if let Some(s) = sampler {
        s.abort();
    }
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(5), w).await;
    }
    Ok(())
}

/// How often the workers' standing is read for the metrics and health.
const SAMPLE_EVERY: Duration = Duration::from_secs(2);

/// The longest one reading may take: a database that does not answer is a failure, not a wait.
const SAMPLE_WITHIN: Duration = Duration::from_secs(2);

/// Reads where each projection stands every [`SAMPLE_EVERY`] into the metrics, and answers health
/// from the newest reading: failing when the database could not be read for three readings, when
/// the newest reading is older than three periods (the sampler itself is stuck), or when a
/// projection's high-water mark is frozen. Health says what failed in fixed words; the detail is
/// logged.
fn sample_standings(config: tokio_postgres::Config) -> (telemetry::HealthCheck, tokio::task::JoinHandle<()>) {
    use std::sync::{Arc, Mutex, PoisonError};
    // The server ends a reading that outlives its bound: a connection dropped on the client's
    // timeout would otherwise stay open until its stalled query finished, one more each period.
    let mut config = config;
    let bound = format!("-c statement_timeout={}", SAMPLE_WITHIN.as_millis());
    let options = config.get_options().map_or_else(|| bound.clone(), |given| format!("{bound} {given}"));
    config.options(&options);
    use telemetry::Health;
    type Reading = (Health, std::time::Instant);
    let last: Arc<Mutex<Reading>> =
        Arc::new(Mutex::new((Health::Failing("not read yet".into()), std::time::Instant::now())));
    let written = Arc::clone(&last);
    let sampler = tokio::spawn(async move {
        let mut frozen = projections::worker::FrozenClock::default();
        let mut client: Option<tokio_postgres::Client> = None;
        let mut failures = 0u32;
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        loop {
            tick.tick().await;
            let read = tokio::time::timeout(SAMPLE_WITHIN, async {
                if client.as_ref().is_none_or(tokio_postgres::Client::is_closed) {
                    client = Some(crate::connect_config(&config).await?);
                }
                let c = client.as_ref().context("no connection")?;
                Ok::<_, anyhow::Error>(projections::worker::standings(c).await?)
            })
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {SAMPLE_WITHIN:?}")));
            let health = match read {
                Ok(standings) => {
                    failures = 0;
                    match projections::worker::sample(&standings, &mut frozen).as_slice() {
                        [] => Health::Serving,
                        stuck => Health::Failing(format!(
                            "frozen for {}s or more with events waiting: {}",
                            projections::worker::FROZEN_AFTER.as_secs(),
                            stuck.join(", ")
                        )),
                    }
                }
                Err(e) => {
                    failures += 1;
                    client = None;
                    tracing::warn!(error = %format!("{e:#}"), failures, "the projections' standing cannot be read");
                    if failures < 3 {
                        continue;
                    }
                    Health::Failing("the database cannot be read".into())
                }
            };
            *written.lock().unwrap_or_else(PoisonError::into_inner) = (health, std::time::Instant::now());
        }
    });
    let health = telemetry::HealthCheck::new(move || {
        let (health, at) = last.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let stale = at.elapsed() > SAMPLE_EVERY * 3 + SAMPLE_WITHIN;
        async move { if stale { Health::Failing("the standing has not been read lately".into()) } else { health } }
    });
    (health, sampler)
}
