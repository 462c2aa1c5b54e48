//! `grantctl-bench waits`: another client's Authorize while many workers wait for owners'
//! answers at once over two replicas, beside the same client with no waits held, in one run; and
//! what each held wait costs the replicas and PostgreSQL.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use pb::authorizer_client::AuthorizerClient;
use proto::v1 as pb;
use tonic::transport::Channel;

use super::authorize::{TENANT, Tokens, act, drive, new_session, start_replicas};
use super::{Cpu, Samples, Scratch, postmaster_of};

/// Waits sent over one connection (each replica takes at most 64 streams on one).
const WAITS_PER_CONNECTION: usize = 50;
/// Cards asked in one session before the next is made.
const CARDS_PER_SESSION: usize = 100;

pub async fn run(url: &str, waits: &[usize], clients: usize, duration: Duration) -> Result<String> {
    let scratch = Scratch::create(url).await?;
    let db_url = format!("{}/{}", url.rsplit_once('/').map_or(url, |(base, _)| base), scratch.name);
    let result = run_on(scratch.config.clone(), &db_url, &scratch.name, waits, clients, duration).await;
    scratch.drop_now().await?;
    result
}

async fn run_on(
    config: tokio_postgres::Config,
    db_url: &str,
    db_name: &str,
    waits: &[usize],
    clients: usize,
    duration: Duration,
) -> Result<String> {
    super::lesson_settings(db_url, TENANT).await?;
    let (key_line, ca_pem, mut replicas) = start_replicas(db_url).await?;
    let pool = ledger::postgres::pool(config, clients + 2).map_err(anyhow::Error::msg)?;
    let tokens = Tokens::register(&pool, ca_pem, &key_line).await?;
    let endpoints = &replicas.endpoints;
    let pids: Vec<u32> = replicas.servers.iter().map(|(_, pid, _)| *pid).collect();
    let pm = postmaster_of(&pool).await;
    let mut out = String::from(
        "| waits held | Authorize p50 µs | p99 µs | per second | replicas' RSS MiB | database connections open (busy) | \
         machine CPU while idle, ms/s |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut notes = String::new();
    // The waiting workers run apart from the measured client, as other processes would: their
    // replies never queue ahead of its calls in one runtime.
    let holders_runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    for &n in waits {
        let cards = Arc::new(open_cards(&endpoints[0], &tokens, n).await?);
        drive(endpoints, false, &tokens, clients, Duration::from_millis(500)).await?;
        // No waits: the client alone, and what the replicas hold at rest.
        // Quiet and held rounds alternate, so the machine's drift falls on both alike.
        let (mut quiet, mut busy) = (Samples::default(), Samples::default());
        let (mut rest, mut held) = (None, None);
        for _ in 0..2 {
            quiet.merge(drive(endpoints, false, &tokens, clients, duration / 4).await?);
            rest.get_or_insert(Held::read(&pool, db_name, &pids, pm).await?);
            // The waits, each a worker's AwaitApproval of its own card, renewed every 20 s.
            let started = Arc::new(AtomicUsize::new(0));
            let holding = hold(endpoints.clone(), tokens.clone(), Arc::clone(&cards), Arc::clone(&started));
            let holders = holders_runtime.spawn(holding).await??;
            while started.load(Ordering::Relaxed) < n {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // Every wait has made its first read once the database has been idle for a while.
            quiet_database(&pool, db_name).await?;
            drive(endpoints, false, &tokens, clients, Duration::from_millis(500)).await?;
            held.get_or_insert(Held::read(&pool, db_name, &pids, pm).await?);
            busy.merge(drive(endpoints, false, &tokens, clients, duration / 4).await?);
            for h in holders {
                h.abort();
            }
            // The replicas drop the cancelled waits; what follows is quiet again.
            quiet_database(&pool, db_name).await?;
            drive(endpoints, false, &tokens, clients, Duration::from_millis(500)).await?;
        }
        let (rest, held) = (rest.context("measured")?, held.context("measured")?);
        for (label, s, h) in [(0, &quiet, &rest), (n, &busy, &held)] {
            writeln!(
                out,
                "| {label} | {} | {} | {:.0} | {:.1} | {} ({}) | {:.1} |",
                s.percentile(50).as_micros(),
                s.percentile(99).as_micros(),
                s.throughput(),
                h.rss_kib as f64 / 1024.0,
                h.connections,
                h.busy,
                h.idle_cpu_ms_per_s,
            )?;
        }
        let ratio = |p| busy.percentile(p).as_secs_f64() / quiet.percentile(p).as_secs_f64().max(1e-9);
        writeln!(
            notes,
            "{n} waits: Authorize p50 = {:.2}x, p99 = {:.2}x the same client with none; per wait: {:.1} KiB of the \
             replicas' memory, {:.3} busy database connections, {:.1} µs of machine CPU a second",
            ratio(50),
            ratio(99),
            (held.rss_kib as f64 - rest.rss_kib as f64) / n as f64,
            (held.busy as f64 - rest.busy as f64) / n as f64,
            (held.idle_cpu_ms_per_s - rest.idle_cpu_ms_per_s) * 1e3 / n as f64,
        )?;
    }
    holders_runtime.shutdown_background();
    for (server, _, _) in &mut replicas.servers {
        server.start_kill()?;
        let _ = server.wait().await;
    }
    Ok(format!(
        "{out}\n{notes}{clients} client(s) authorizing; 2 replicas, the waits spread over both, {WAITS_PER_CONNECTION} \
         per connection, each on a card of its own, on one worker credential\n"
    ))
}

/// Returns once no connection to `db` but this one has been busy for half a second.
async fn quiet_database(pool: &deadpool_postgres::Pool, db: &str) -> Result<()> {
    let mut idle_for = 0;
    while idle_for < 5 {
        let client = pool.get().await?;
        let busy: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND state <> 'idle' \
                 AND pid <> pg_backend_pid()",
                &[&db],
            )
            .await?
            .get(0);
        idle_for = if busy == 0 { idle_for + 1 } else { 0 };
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// What the replicas and the database hold at one moment, and what the machine spends idle.
struct Held {
    rss_kib: u64,
    /// Open (the replicas' pools keep what a burst opened) and busy at that moment.
    connections: i64,
    busy: i64,
    idle_cpu_ms_per_s: f64,
}

impl Held {
    async fn read(pool: &deadpool_postgres::Pool, db: &str, pids: &[u32], pm: Option<u32>) -> Result<Self> {
        let rss_kib = pids.iter().filter_map(|p| rss_kib(*p)).sum();
        let client = pool.get().await?;
        let row = client
            .query_one(
                "SELECT count(*), count(*) FILTER (WHERE state <> 'idle' AND pid <> pg_backend_pid()) \
                 FROM pg_stat_activity WHERE datname = $1",
                &[&db],
            )
            .await?;
        drop(client);
        // Nothing else runs: what the replicas and PostgreSQL spend now is the held waits' cost.
        let before = Cpu::now(pids, pm);
        let window = Duration::from_secs(2);
        tokio::time::sleep(window).await;
        let spent = Cpu::now(pids, pm).since(before);
        let idle_cpu_ms_per_s = (spent.servers + spent.postgres).as_secs_f64() * 1e3 / window.as_secs_f64();
        Ok(Self { rss_kib, connections: row.get(0), busy: row.get(1), idle_cpu_ms_per_s })
    }
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// `n` pending cards, each asked by an act no grant covers: (session, approval id).
async fn open_cards(endpoint: &str, tokens: &Tokens, n: usize) -> Result<Vec<(String, String)>> {
    let mut client = AuthorizerClient::new(tokens.connect(endpoint).await?);
    let mut cards = Vec::with_capacity(n);
    let mut session = String::new();
    for i in 0..n {
        if i % CARDS_PER_SESSION == 0 {
            session = new_session(&mut client, tokens, "wait").await?;
        }
        let reply = client.authorize(tokens.worker(act(&tokens.keys, &session))).await?.into_inner();
        let Some(pb::authorize_reply::Decision::RequireApproval(card)) = reply.decision else {
            bail!("an act no grant covers should ask the owner")
        };
        cards.push((session.clone(), card.approval_id));
    }
    Ok(cards)
}

/// One task per card waiting for its answer until aborted, the connections spread over the
/// replicas; `started` counts the waits sent.
async fn hold(
    endpoints: Vec<String>,
    tokens: Tokens,
    cards: Arc<Vec<(String, String)>>,
    started: Arc<AtomicUsize>,
) -> Result<Vec<tokio::task::JoinHandle<Result<()>>>> {
    let mut tasks = Vec::with_capacity(cards.len());
    for (c, chunk) in cards.chunks(WAITS_PER_CONNECTION).enumerate() {
        let channel: Channel = tokens.connect(&endpoints[c % endpoints.len()]).await?;
        for (session, approval) in chunk {
            let (mut client, tokens) = (AuthorizerClient::new(channel.clone()), tokens.clone());
            let request = pb::AwaitApprovalRequest {
                session_id: session.clone(),
                approval_id: approval.clone(),
                wait_ms: authorizer::service::MAX_APPROVAL_WAIT_MS,
            };
            let started = Arc::clone(&started);
            // Independent workers renew at independent moments: the first wait is of any length.
            let first_wait = rand::random_range(1..=request.wait_ms);
            tasks.push(tokio::spawn(async move {
                let mut first = true;
                loop {
                    let wait_ms = if first { first_wait } else { request.wait_ms };
                    let call =
                        client.await_approval(tokens.worker(pb::AwaitApprovalRequest { wait_ms, ..request.clone() }));
                    if std::mem::take(&mut first) {
                        started.fetch_add(1, Ordering::Relaxed);
                    }
                    let at = Instant::now();
                    let reply = call.await?.into_inner();
                    if reply.status != proto::ApprovalStatus::Pending.code() {
                        bail!("a card nobody answered came back {} after {:?}", reply.status, at.elapsed());
                    }
                }
            }));
        }
    }
    Ok(tasks)
}
