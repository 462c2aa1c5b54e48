//! `grantctl-bench rebuild`: a ledger of `events` events across many tenants and grants, every
//! projection rebuilt from it, side by side with a plain sequential read of the same events
//! (`COPY … TO STDOUT`) in the same run.

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Result;
use futures_util::StreamExt;
use grant_domain::catalogue::{
    ActionView, AuthorizationKind, EndReason, Event, SiteScope, TaskGrantCreated, TaskGrantEnded, ToolCallAuthorized,
};
use ledger::{AppendRequest, EventStore, ExpectedVersion, Metadata, PgStore, StreamId, TenantId};
use projections::Projection;
use time::OffsetDateTime;
use uuid::Uuid;

use super::Scratch;

/// One grant's life: created, `uses` uses, ended.
fn grant_events(uses: u32, now: OffsetDateTime) -> (Uuid, Vec<Event>) {
    let grant_id = Uuid::new_v4();
    let session_id = format!("s-{}", grant_id.simple());
    let mut events = vec![Event::TaskGrantCreated(TaskGrantCreated {
        grant_id,
        approval_id: Uuid::new_v4(),
        tenant_id: String::new(),
        principal_id: "owner".into(),
        session_id: session_id.clone(),
        profile_id: "profile".into(),
        profile_generation: 0,
        agent_version: "bench".into(),
        policy_version: "bench".into(),
        scope: SiteScope { origin: "https://www.lesson.test".into(), path_prefix: "/lesson".into() },
        created_at: now,
        expires_at: now + authorizer::limits::GRANT_DURATION,
        max_actions: authorizer::limits::MAX_ACTIONS,
        max_typed_chars: authorizer::limits::MAX_TYPED_CHARS,
    })];
    for n in 1..=uses {
        events.push(Event::ToolCallAuthorized(ToolCallAuthorized {
            session_id: session_id.clone(),
            run_id: "run".into(),
            tool_call_id: format!("call-{n}"),
            authorization_kind: AuthorizationKind::BrowserTaskGrant,
            grant_id: Some(grant_id),
            use_ordinal: Some(n),
            typed_chars: 3,
            view: ActionView {
                action_kind: "type".into(),
                describable: true,
                element_name: Some("Answer".into()),
                detail: Some("uno".into()),
                action_summary: "Type into a text field on www.lesson.test/lesson".into(),
                ..ActionView::default()
            },
            snapshot_id: None,
            decided: None,
        }));
    }
    events.push(Event::TaskGrantEnded(TaskGrantEnded { grant_id, reason: EndReason::Exhausted, uses: None }));
    (grant_id, events)
}

/// Appends about `total` events: grants of 198 uses each, over 10 tenants, from 4 writers.
pub(crate) async fn generate(store: &PgStore, total: u64) -> Result<u64> {
    const USES: u32 = authorizer::limits::MAX_ACTIONS - 2; // with its creation and end, 200 events a grant
    let grants = total.div_ceil(u64::from(USES) + 2);
    let writers = 4u64;
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                let mut written = 0u64;
                for g in (w..grants).step_by(usize::try_from(writers).unwrap_or(1)) {
                    let tenant = TenantId::new(format!("tenant-{}", g % 10))?;
                    let (grant_id, events) = grant_events(USES, OffsetDateTime::now_utc());
                    let stream = StreamId::of_entity("grant", &tenant, grant_id)?;
                    let new = events.iter().map(|e| e.to_new(Uuid::new_v4(), Metadata::by("bench"))).collect();
                    store.append(AppendRequest::single(tenant, stream, ExpectedVersion::NoStream, new)).await?;
                    written += u64::from(USES) + 2;
                }
                Ok::<_, anyhow::Error>(written)
            })
        })
        .collect();
    let mut written = 0;
    for t in tasks {
        written += t.await??;
    }
    Ok(written)
}

pub async fn run(url: &str, events: u64) -> Result<String> {
    let scratch = Scratch::create(url).await?;
    let result = run_on(scratch.config.clone(), events).await;
    scratch.drop_now().await?;
    result
}

async fn run_on(config: tokio_postgres::Config, events: u64) -> Result<String> {
    let store = PgStore::new(ledger::postgres::pool(config.clone(), 6).map_err(anyhow::Error::msg)?);
    let t = Instant::now();
    let written = generate(&store, events).await?;
    let mut out = format!("generated {written} events in {:.1} s\n\n", t.elapsed().as_secs_f64());
    out.push_str("| read | events | seconds | events/s | vs COPY |\n|---|---:|---:|---:|---:|\n");
    let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    // The plain sequential read: every event, in log order, as COPY sends it.
    let t = Instant::now();
    let copy =
        client.copy_out("COPY (SELECT * FROM events ORDER BY events.tx_id, events.global_position) TO STDOUT").await?;
    tokio::pin!(copy);
    let mut bytes = 0usize;
    while let Some(chunk) = copy.next().await {
        bytes += chunk?.len();
    }
    let copy_rate = written as f64 / t.elapsed().as_secs_f64().max(1e-9);
    writeln!(
        out,
        "| COPY … TO STDOUT ({} MiB) | {written} | {:.1} | {copy_rate:.0} | 1.00× |",
        bytes >> 20,
        t.elapsed().as_secs_f64()
    )?;
    // The global read alone, decoded as every reader decodes it: the floor under a rebuild.
    let t = Instant::now();
    let (mut at, mut read) = (ledger::Checkpoint::START, 0u64);
    loop {
        let page = store.read_all(at, 5_000).await?;
        let Some(last) = page.last() else { break };
        at = last.checkpoint();
        for e in &page {
            Event::from_recorded(e)?;
        }
        read += page.len() as u64;
    }
    let seconds = t.elapsed().as_secs_f64();
    let rate = read as f64 / seconds.max(1e-9);
    writeln!(out, "| read_all + decode, no writes | {read} | {seconds:.1} | {rate:.0} | {:.2}× |", rate / copy_rate)?;
    let (mut client, connection) = config.connect(tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    for p in Projection::ALL {
        let t = Instant::now();
        let done = projections::rebuild::rebuild(&mut client, &store, p, 5_000, |_| {}).await?;
        let seconds = t.elapsed().as_secs_f64();
        let rate = done.events as f64 / seconds.max(1e-9);
        writeln!(
            out,
            "| rebuild {} | {} | {seconds:.1} | {rate:.0} | {:.2}× |",
            p.name(),
            done.events,
            rate / copy_rate
        )?;
    }
    Ok(out)
}
