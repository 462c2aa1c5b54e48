//! `grantctl projections …` and `grantctl audit …`: the read side for operators and auditors.
//! Replay reads the log itself, never a projection, so what it prints rests on the hash chains.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use ledger::{Checkpoint, EventStore, PgStore};
use projections::audit::{AuditRow, row};
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
    let mut rows = Vec::new();
    let mut at = Checkpoint::START;
    loop {
        let page = store.read_all(at, ledger::READ_PAGE).await?;
        let Some(last) = page.last() else { break };
        at = last.checkpoint();
        for e in &page {
            rows.push(row(e).with_context(|| format!("event at position {}", e.global_position))?);
        }
    }
    let creating_approval = filter.grant.and_then(|g| {
        rows.iter()
            .find(|r| r.grant_id == Some(g) && r.event_type == "browser.task_grant.created")
            .and_then(|r| r.approval_id)
    });
    rows.retain(|r| {
        filter.tenant.as_ref().is_none_or(|t| &r.tenant_id == t)
            && filter.session.as_ref().is_none_or(|s| r.session_id.as_ref() == Some(s))
            && filter.grant.is_none_or(|g| {
                r.grant_id == Some(g) || (r.approval_id.is_some() && r.approval_id == creating_approval)
            })
            && filter.since.is_none_or(|t| r.recorded_at >= t)
    });
    Ok(rows)
}

/// Prints rows as text lines or JSON lines.
pub fn print(rows: &[AuditRow], jsonl: bool, mut out: impl Write) -> Result<()> {
    for r in rows {
        if jsonl {
            let line = serde_json::json!({
                "tenant": r.tenant_id, "position": r.global_position, "tx_id": r.tx_id.to_string(),
                "recorded_at": r.cells()[3], "stream": r.stream_id, "event_type": r.event_type,
                "principal": r.principal, "session_id": r.session_id, "grant_id": r.grant_id,
                "approval_id": r.approval_id, "authorization": r.authorization, "summary": r.summary,
            });
            writeln!(out, "{line}")?;
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
        Some(n) => {
            let p = Projection::from_name(n)
                .with_context(|| format!("no projection {n:?}: audit_log, grant_list or active_task_grants"))?;
            vec![verify::projection(&mut client, p).await?]
        }
    };
    let text = reports.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n");
    if reports.iter().any(|r| !r.ok()) {
        bail!("{text}");
    }
    Ok(text)
}

/// `grantctl projections rebuild NAME`, with a progress line on standard error.
pub async fn rebuild(config: &tokio_postgres::Config, name: &str) -> Result<String> {
    let projection =
        Projection::from_name(name).with_context(|| format!("no projection {name:?}: audit_log or grant_list"))?;
    let mut client = crate::connect_config(config).await?;
    let store = PgStore::new(ledger::postgres::pool(config.clone(), 2).map_err(anyhow::Error::msg)?);
    let started = std::time::Instant::now();
    let mut last_report = started;
    let done = projections::rebuild::rebuild(&mut client, &store, projection, 5_000, |n| {
        if last_report.elapsed() >= Duration::from_secs(1) {
            eprintln!("{name}: {n} events applied to the next generation");
            last_report = std::time::Instant::now();
        }
    })
    .await?;
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
pub async fn serve(config: tokio_postgres::Config) -> Result<()> {
    let client = crate::connect_config(&config).await?;
    projections::worker::ensure_current(&client).await?;
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
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(5), w).await;
    }
    Ok(())
}
