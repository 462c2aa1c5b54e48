//! `grantctl-bench authorize`: authorize-and-consume over loopback gRPC against a server process
//! of its own, side by side with a bare insert-and-commit on the same database.

use std::fmt::Write as _;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use credentials::{Credentials, Role, new_token};
use pb::authorizer_client::AuthorizerClient;
use proto::v1 as pb;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};
use uuid::Uuid;

use super::{Cpu, Samples, Scratch, bare, postmaster_of};

pub(crate) const TENANT: &str = "bench";
/// Authorizer replicas behind the clients.
const REPLICAS: usize = 2;

/// The bench's credentials: the worker that authorizes, the gateway that resolves the card.
#[derive(Debug, Clone)]
pub(crate) struct Tokens {
    pub(crate) worker: String,
    pub(crate) gateway: String,
    pub(crate) profiles: String,
    pub(crate) ca_pem: String,
    /// The runtime's part: the facts a worker carries come sealed by it.
    pub(crate) keys: std::sync::Arc<proto::ticket::Keyring>,
}

impl Tokens {
    /// New credentials of each role, registered in the bench's tenant, trusting `ca_pem` and
    /// sealing with the keyring `key_line`.
    pub(crate) async fn register(pool: &deadpool_postgres::Pool, ca_pem: String, key_line: &str) -> Result<Self> {
        let credentials = Credentials::postgres(pool.clone());
        let tokens = Self {
            worker: new_token(),
            gateway: new_token(),
            profiles: new_token(),
            ca_pem,
            keys: std::sync::Arc::new(proto::ticket::Keyring::parse(key_line)?),
        };
        credentials.register(&tokens.worker, TENANT, Role::Worker, Some("owner"), None).await?;
        credentials.register(&tokens.gateway, TENANT, Role::Gateway, None, None).await?;
        credentials.register(&tokens.profiles, TENANT, Role::Profiles, None, None).await?;
        Ok(tokens)
    }

    fn bearer<T>(m: T, token: &str) -> tonic::Request<T> {
        let mut r = tonic::Request::new(m);
        r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ascii"));
        r
    }

    pub(crate) fn worker<T>(&self, m: T) -> tonic::Request<T> {
        Self::bearer(m, &self.worker)
    }

    pub(crate) fn profiles<T>(&self, m: T) -> tonic::Request<T> {
        Self::bearer(m, &self.profiles)
    }

    pub(crate) fn gateway<T>(&self, m: T) -> tonic::Request<T> {
        let mut r = Self::bearer(m, &self.gateway);
        r.metadata_mut().insert("x-principal-id", "owner".parse().expect("ascii"));
        r.metadata_mut().insert("x-owner-scopes", "approval.resolve,browser.grant.write".parse().expect("ascii"));
        r
    }

    pub(crate) async fn connect(&self, endpoint: &str) -> Result<Channel> {
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem)).domain_name("localhost");
        Ok(Channel::from_shared(endpoint.to_owned())?.tls_config(tls)?.connect().await?)
    }
}

/// A click as a worker sends it, with the facts sealed as the runtime on profile `p` seals them.
pub(crate) fn act(keys: &proto::ticket::Keyring, session: &str) -> pb::AuthorizeRequest {
    let mut r = plain_act(session);
    let read_ms = i64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or_default();
    r.facts = Some(keys.seal_facts(&pb::FactsBody {
        tenant_id: TENANT.into(),
        principal_id: "owner".into(),
        browser_profile_id: "p".into(),
        snapshot_id: r.snapshot_id.clone(),
        node_ref: r.node_ref.clone(),
        page_url: std::mem::take(&mut r.page_url),
        page_title: std::mem::take(&mut r.page_title),
        element: r.element.take(),
        read_ms,
    }));
    r
}

fn plain_act(session: &str) -> pb::AuthorizeRequest {
    pb::AuthorizeRequest {
        session_id: session.into(),
        run: Some(pb::RunContext { run_id: "run".into(), interactive: true, top_level: true }),
        // Each call a new tool call: the same id would be a retry, answered without a use.
        tool_call_id: format!("call-{}", Uuid::new_v4().simple()),
        turn_tool_calls: vec!["browser.act".into()],
        agent_version: "bench".into(),
        element: Some(super::button("el gato")),
        page_url: "https://www.lesson.test/lesson/unit-1".into(),
        action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
        // Named, as a worker names them: every allow then carries its sealed dispatch ticket.
        snapshot_id: "snap_000000000001".into(),
        node_ref: "n1".into(),
        ..Default::default()
    }
}

/// A new session `<prefix>-…` of the owner's on the browser profile `p`, which is claimed first.
pub(crate) async fn new_session(
    client: &mut AuthorizerClient<Channel>,
    tokens: &Tokens,
    prefix: &str,
) -> Result<String> {
    let session = format!("{prefix}-{}", Uuid::new_v4().simple());
    let created = pb::ProfileEventRequest {
        profile_id: "p".into(),
        event: pb::ProfileEvent::Created as i32,
        owner_principal_id: "owner".into(),
    };
    client.record_profile_event(tokens.profiles(created)).await?;
    let create = pb::CreateSessionRequest {
        session_id: session.clone(),
        browser_profile_id: "p".into(),
        surface: 1,
        ..Default::default()
    };
    client.create_session(tokens.worker(create)).await?;
    Ok(session)
}

/// A new session with a fresh grant, made the only way there is: the card.
async fn fresh_grant(client: &mut AuthorizerClient<Channel>, tokens: &Tokens) -> Result<String> {
    let session = new_session(client, tokens, "bench").await?;
    client
        .record_message(tokens.gateway(pb::RecordMessageRequest {
            session_id: session.clone(),
            message_id: "m".into(),
            from_owner: true,
        }))
        .await?;
    let reply = client.authorize(tokens.worker(act(&tokens.keys, &session))).await?.into_inner();
    let Some(pb::authorize_reply::Decision::RequireApproval(card)) = reply.decision else {
        bail!("the first act should ask")
    };
    let offer = card.offer.context("no offer")?;
    let resolve = pb::ResolveApprovalRequest {
        approval_id: card.approval_id,
        resolution: pb::Resolution::ApproveForTask as i32,
        offered_origin: offer.origin,
        offered_path_prefix: offer.path_prefix,
    };
    client.resolve_approval(tokens.gateway(resolve)).await?;
    Ok(session)
}

/// Timed authorize-and-consume calls from `clients` clients for `duration`; with `spread`, each
/// client's calls go to the replicas in turn.
pub(crate) async fn drive(
    endpoints: &[String],
    spread: bool,
    tokens: &Tokens,
    clients: usize,
    duration: Duration,
) -> Result<Samples> {
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let targets: Vec<String> = if spread {
                endpoints.iter().cycle().skip(i).take(endpoints.len()).cloned().collect()
            } else {
                vec![endpoints[i % endpoints.len()].clone()]
            };
            let tokens = tokens.clone();
            tokio::spawn(async move {
                let mut clients = Vec::new();
                for endpoint in &targets {
                    clients.push(AuthorizerClient::new(tokens.connect(endpoint).await?));
                }
                let mut latencies = Vec::new();
                let mut session = fresh_grant(&mut clients[0], &tokens).await?;
                let mut used = 0;
                while Instant::now() < deadline {
                    if used == authorizer::limits::MAX_ACTIONS {
                        session = fresh_grant(&mut clients[0], &tokens).await?;
                        used = 0;
                    }
                    let n = clients.len();
                    let client = &mut clients[used as usize % n];
                    // Sealed before the clock starts: a worker gets the facts sealed from Observe.
                    let request = tokens.worker(act(&tokens.keys, &session));
                    let t = Instant::now();
                    let reply = client.authorize(request).await?.into_inner();
                    let elapsed = t.elapsed();
                    match reply.decision {
                        Some(pb::authorize_reply::Decision::Allow(a)) if a.ticket.is_some() => latencies.push(elapsed),
                        other => bail!("expected an allow, got {other:?}"),
                    }
                    used += 1;
                }
                Ok::<_, anyhow::Error>(latencies)
            })
        })
        .collect();
    super::gather(start, tasks).await
}

/// Timed gRPC health checks from `clients` clients for `duration`: the same TLS connection and
/// gate as an Authorize, no credential and no database. The floor under any call's latency.
async fn check(endpoints: &[String], tokens: &Tokens, clients: usize, duration: Duration) -> Result<Samples> {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let (endpoint, tokens) = (endpoints[i % endpoints.len()].clone(), tokens.clone());
            tokio::spawn(async move {
                let mut client = HealthClient::new(tokens.connect(&endpoint).await?);
                let mut latencies = Vec::new();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    client.check(HealthCheckRequest { service: String::new() }).await?;
                    latencies.push(t.elapsed());
                }
                Ok::<_, anyhow::Error>(latencies)
            })
        })
        .collect();
    super::gather(start, tasks).await
}

/// Opens `per_replica` silent TCP connections to each replica and one client sending a TLS
/// ClientHello a byte every 200 ms, held for 22 s (the server closes silent ones after its
/// 5 s handshake timeout, and a new one evicts the oldest past 256 pending). Returns how many
/// connections the replicas took in all.
/// Writes the rows of `base` and `other` at `n` clients; answers other/base p50 and throughput.
fn side_by_side(out: &mut String, n: usize, base: (&str, &Samples), other: (&str, &Samples)) -> Result<(f64, f64)> {
    for (label, s) in [base, other] {
        let (p50, p99) = (s.percentile(50).as_micros(), s.percentile(99).as_micros());
        writeln!(out, "| {n} | {label} | {p50} | {p99} | {:.0} |", s.throughput())?;
    }
    let p50 = other.1.percentile(50).as_secs_f64() / base.1.percentile(50).as_secs_f64().max(1e-9);
    Ok((p50, other.1.throughput() / base.1.throughput().max(1e-9)))
}

/// Scrapes every replica's `/metrics` every `every` until aborted, as Prometheus would.
async fn scrape(replicas: Vec<std::net::SocketAddr>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        for r in &replicas {
            let _ = ops::status::get(*r, "/metrics").await;
        }
    }
}

/// The replicas' own time in `Authorize` so far (from the arrival of a call to its status, as
/// their `grpc_server_handling_seconds` records it): total seconds and calls.
async fn handling(replicas: &[std::net::SocketAddr]) -> (f64, f64) {
    let mut total = (0.0, 0.0);
    for r in replicas {
        let Ok((_, text)) = ops::status::get(*r, "/metrics").await else { continue };
        for line in text.lines().filter(|l| l.contains("grpc_method=\"Authorize\"")) {
            let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            if line.starts_with("grpc_server_handling_seconds_sum") {
                total.0 += value;
            } else if line.starts_with("grpc_server_handling_seconds_count") {
                total.1 += value;
            }
        }
    }
    total
}

async fn flood_replicas(endpoints: &[String], per_replica: usize) -> usize {
    use tokio::io::AsyncWriteExt;
    let mut opened = 0;
    for e in endpoints {
        let addr = e.replace("https://localhost", "127.0.0.1");
        let mut held = Vec::new();
        for _ in 0..per_replica {
            if let Ok(sock) = tokio::net::TcpStream::connect(&addr).await {
                held.push(sock);
            }
        }
        opened += held.len();
        tokio::spawn(async move {
            let mut slow = tokio::net::TcpStream::connect(&addr).await.ok();
            for b in [0x16u8, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03].repeat(10) {
                if let Some(s) = slow.as_mut() {
                    let _ = s.write_all(&[b]).await;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            drop(held);
        });
    }
    opened
}

fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// What a run of the authorize bench adds to the plain comparison.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras {
    pub with_projections: bool,
    pub log_events: u64,
    pub flood: usize,
    /// Scrape every replica's metrics this often in a second measurement beside a quiet one.
    pub scrape_every: Option<Duration>,
    /// Each client's calls go to the replicas in turn, not all to one.
    pub spread: bool,
}

pub async fn run(url: &str, clients: &[usize], duration: Duration, extras: Extras) -> Result<String> {
    let scratch = Scratch::create(url).await?;
    let db_url = format!("{}/{}", url.rsplit_once('/').map_or(url, |(base, _)| base), scratch.name);
    let result = run_on(scratch.config.clone(), &db_url, clients, duration, extras).await;
    scratch.drop_now().await?;
    result
}

async fn run_on(
    config: tokio_postgres::Config,
    db_url: &str,
    clients: &[usize],
    duration: Duration,
    extras: Extras,
) -> Result<String> {
    let Extras { with_projections, log_events, .. } = extras;
    // The settings are recorded once, as an operator does; the replicas serve them.
    super::lesson_settings(db_url, TENANT).await?;
    if log_events > 0 {
        fill_log(&config, log_events).await?;
    }
    let (key_line, ca_pem, mut replicas) = start_replicas(db_url).await?;
    // With --with-projections: the projection workers beside it, as in production, and their
    // lag sampled every 100 ms.
    let mut workers = match with_projections {
        true => Some(
            tokio::process::Command::new(super::grantctl()?)
                .args(["serve", "projections"])
                .env("DATABASE_URL", db_url)
                .env("PROJECTIONS_METRICS_LISTEN", "127.0.0.1:0")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("starting the projection workers")?,
        ),
        false => None,
    };
    let sampling = Arc::new(AtomicBool::new(with_projections));
    let sampler = {
        let (config, sampling) = (config.clone(), Arc::clone(&sampling));
        tokio::spawn(async move {
            let mut lags = Vec::new();
            if !sampling.load(Ordering::Relaxed) {
                return Ok(lags);
            }
            let client = ops::connect_config(&config).await?;
            while sampling.load(Ordering::Relaxed) {
                if let Ok(s) = projections::worker::status(&client).await {
                    lags.push(s.iter().map(|s| s.lag_seconds).fold(0.0, f64::max));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok::<_, anyhow::Error>(lags)
        })
    };
    let pool =
        ledger::postgres::pool(config, clients.iter().copied().max().unwrap_or(1) + 2).map_err(anyhow::Error::msg)?;
    let tokens = Tokens::register(&pool, ca_pem, &key_line).await?;
    let (out, ratios) = measure(&pool, &replicas, &tokens, clients, duration, extras).await?;
    let rss: Vec<String> = replicas
        .servers
        .iter()
        .map(|(_, pid, up)| {
            let rss = peak_rss_kib(*pid).map_or("unknown".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
            format!("{rss} (serving after {} ms)", up.as_millis())
        })
        .collect();
    let rss = rss.join(", ");
    sampling.store(false, Ordering::Relaxed);
    let mut lags = sampler.await??;
    lags.sort_by(f64::total_cmp);
    let at = |pct: usize| lags.get(lags.len().saturating_sub(1) * pct / 100).copied().unwrap_or(0.0);
    let lag = if with_projections {
        format!(
            "projection lag over the run ({} samples, 100 ms apart): p50 {:.3} s, p99 {:.3} s, max {:.3} s\n",
            lags.len(),
            at(50),
            at(99),
            lags.last().copied().unwrap_or(0.0)
        )
    } else {
        String::new()
    };
    // SIGINT would be gentler, but the server is ours and about to be dropped with its database.
    for (server, _, _) in &mut replicas.servers {
        server.start_kill()?;
        let _ = server.wait().await;
    }
    if let Some(workers) = workers.as_mut() {
        workers.start_kill()?;
        let _ = workers.wait().await;
    }
    let turn = if extras.spread { "per call" } else { "per client" };
    Ok(format!(
        "{out}\n{ratios}{REPLICAS} replicas, round robin {turn}, {log_events} events in the log before they started; \
         peak RSS (VmHWM) each: {rss}\n{lag}"
    ))
}

/// Writes `log_events` filler rows of other tenants' streams, in bulk: nothing the authorizer
/// reads at start-up or per request, which is the point.
async fn fill_log(config: &tokio_postgres::Config, log_events: u64) -> Result<()> {
    let client = ops::connect_config(config).await?;
    let started = Instant::now();
    client
        .execute(
            "INSERT INTO events (stream_id, stream_version, event_id, event_type, schema_version, tenant_id, \
             payload, metadata, recorded_at, prev_hash, hash) \
             SELECT 'filler-' || (g / 200), g % 200 + 1, gen_random_uuid(), 'session.tool_called', 1, \
             'filler-' || (g % 10), '{}', '{}', now(), decode(repeat('00', 32), 'hex'), \
             decode(repeat('00', 32), 'hex') FROM generate_series(0, $1::bigint - 1) g",
            &[&i64::try_from(log_events)?],
        )
        .await
        .context("writing filler events")?;
    eprintln!("{log_events} filler events written in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The replicas the clients call, each a `grantctl serve authorizer` of its own.
pub(crate) struct Replicas {
    /// Each server, its pid and how long it took to serve.
    pub(crate) servers: Vec<(tokio::process::Child, u32, Duration)>,
    pub(crate) endpoints: Vec<String>,
    pub(crate) metrics: Vec<std::net::SocketAddr>,
}

/// Starts [`REPLICAS`] servers on `db_url` with a throwaway CA and ticket keyring; answers the
/// keyring's line, the CA's certificate and the replicas.
pub(crate) async fn start_replicas(db_url: &str) -> Result<(String, String, Replicas)> {
    let super::Pki { dir: pki_dir, cert, key, keys_file: keys, key_line, ca_pem, .. } = super::Pki::new("authorize")?;
    // Two replicas on one database, the clients spread over them round robin.
    let mut r = Replicas { servers: Vec::new(), endpoints: Vec::new(), metrics: Vec::new() };
    for _ in 0..REPLICAS {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let metrics_at = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let port = port.port();
        let started = Instant::now();
        let server = super::spawn_serving(
            &["serve", "authorizer"],
            &[
                ("AUTHORIZER_TLS_CERT", cert.display().to_string()),
                ("AUTHORIZER_TLS_KEY", key.display().to_string()),
                (proto::ticket::KEYS_FILE_VAR, keys.display().to_string()),
                ("DATABASE_URL", db_url.to_owned()),
                ("AUTHORIZER_LISTEN", format!("127.0.0.1:{port}")),
                ("AUTHORIZER_METRICS_LISTEN", metrics_at.to_string()),
            ],
        )
        .await?;
        let pid = server.id().context("server pid")?;
        r.servers.push((server, pid, started.elapsed()));
        r.endpoints.push(format!("https://localhost:{port}"));
        r.metrics.push(metrics_at);
    }
    std::fs::remove_dir_all(&pki_dir)?;
    Ok((key_line, ca_pem, r))
}

/// The side-by-side measurements at each client count: the table's rows and the ratios.
async fn measure(
    pool: &deadpool_postgres::Pool,
    replicas: &Replicas,
    tokens: &Tokens,
    clients: &[usize],
    duration: Duration,
    extras: Extras,
) -> Result<(String, String)> {
    let (endpoints, tokens) = (&replicas.endpoints, tokens);
    let mut out = String::from("| clients | call | p50 µs | p99 µs | per second |\n|---:|---|---:|---:|---:|\n");
    let mut ratios = String::new();
    for &n in clients {
        bare(pool.clone(), n, Duration::from_millis(300)).await?;
        drive(endpoints, extras.spread, tokens, n, Duration::from_millis(500)).await?;
        let (mut b, mut a, mut c) = (Samples::default(), Samples::default(), Samples::default());
        let mut cpu = [Cpu::default(); 3];
        let pids: Vec<u32> = replicas.servers.iter().map(|(_, pid, _)| *pid).collect();
        let pm = postmaster_of(pool).await;
        let before = handling(&replicas.metrics).await;
        for _ in 0..2 {
            let t = Cpu::now(&pids, pm);
            b.merge(bare(pool.clone(), n, duration / 4).await?);
            let u = Cpu::now(&pids, pm);
            cpu[0].add(u.since(t));
            a.merge(drive(endpoints, extras.spread, tokens, n, duration / 4).await?);
            let v = Cpu::now(&pids, pm);
            cpu[1].add(v.since(u));
            c.merge(check(endpoints, tokens, n, duration / 8).await?);
            cpu[2].add(Cpu::now(&pids, pm).since(v));
        }
        let (p50, tput) =
            side_by_side(&mut out, n, ("bare INSERT; COMMIT", &b), ("Authorize (gRPC, consumes a use)", &a))?;
        writeln!(ratios, "{n} client(s): authorize/bare p50 = {p50:.2}x, throughput = {tput:.2}x")?;
        let (p50, p99) = (c.percentile(50).as_micros(), c.percentile(99).as_micros());
        writeln!(
            out,
            "| {n} | gRPC health Check (same TLS and gate, no database) | {p50} | {p99} | {:.0} |",
            c.throughput()
        )?;
        let floor = c.percentile(50).as_secs_f64() / b.percentile(50).as_secs_f64().max(1e-9);
        writeln!(ratios, "{n} client(s): health check/bare p50 = {floor:.2}x (the gRPC hop alone)")?;
        for (name, samples, spent) in
            [("bare insert", &b, cpu[0]), ("Authorize", &a, cpu[1]), ("health Check", &c, cpu[2])]
        {
            let [bench, servers, pg, total] = spent.per_call(samples.latencies.len());
            writeln!(
                ratios,
                "{n} client(s): machine CPU per {name} = {total:.0} µs (bench clients {bench:.0}, replicas \
                 {servers:.0}, PostgreSQL {pg:.0})"
            )?;
        }
        let after = handling(&replicas.metrics).await;
        let calls = (after.1 - before.1).max(1.0);
        writeln!(
            ratios,
            "{n} client(s): mean time inside the replica per Authorize = {:.0} µs (its own clock, arrival to status)",
            (after.0 - before.0) / calls * 1e6
        )?;
        if let Some(every) = extras.scrape_every {
            // Quiet and scraped halves alternate, so the machine's noise falls on both.
            let (mut quiet, mut scraped) = (Samples::default(), Samples::default());
            for _ in 0..2 {
                quiet.merge(drive(endpoints, extras.spread, tokens, n, duration / 4).await?);
                let scraper = tokio::spawn(scrape(replicas.metrics.clone(), every));
                scraped.merge(drive(endpoints, extras.spread, tokens, n, duration / 4).await?);
                scraper.abort();
            }
            let quiet = ("Authorize, no scraper", &quiet);
            let (p50, tput) = side_by_side(&mut out, n, quiet, ("Authorize, every replica scraped", &scraped))?;
            writeln!(
                ratios,
                "{n} client(s): scraped every {} ms/no scraper p50 = {p50:.2}x, throughput = {tput:.2}x",
                every.as_millis()
            )?;
        }
        if extras.flood > 0 {
            let held = flood_replicas(endpoints, extras.flood).await;
            let f = drive(endpoints, extras.spread, tokens, n, duration / 2).await?;
            writeln!(
                out,
                "| {n} | Authorize, just after {held} idle connections and a slow handshake opened | {} | {} | {:.0} |",
                f.percentile(50).as_micros(),
                f.percentile(99).as_micros(),
                f.throughput()
            )?;
            let p99 = f.percentile(99).as_secs_f64() / a.percentile(99).as_secs_f64().max(1e-9);
            writeln!(ratios, "{n} client(s): flooded/quiet Authorize p99 = {p99:.2}x")?;
        }
    }
    Ok((out, ratios))
}
