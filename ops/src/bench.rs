//! `grantctl bench append`: ledger appends against a bare one-row insert-and-commit on the same
//! database, interleaved in the same run so the machine's noise hits both alike.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use deadpool_postgres::Pool;
use ledger::{AppendRequest, EventStore, ExpectedVersion, Metadata, NewEvent, PgStore, StreamId, TenantId};
use serde_json::json;
use uuid::Uuid;

/// Latency samples of one kind of write at one concurrency.
#[derive(Debug, Default)]
struct Samples {
    latencies: Vec<Duration>,
    elapsed: Duration,
}

impl Samples {
    fn merge(&mut self, other: Self) {
        self.latencies.extend(other.latencies);
        self.elapsed += other.elapsed;
    }

    fn percentile(&self, p: usize) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        sorted.get((sorted.len() * p / 100).min(sorted.len().saturating_sub(1))).copied().unwrap_or_default()
    }

    fn throughput(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

fn payload() -> serde_json::Value {
    // About the size of a tool.call.authorized event.
    json!({
        "session_id": "session-0f3c", "run_id": "run-91aa", "tool_call_id": "call-7d21",
        "authorization_kind": "browser_task_grant", "grant_id": Uuid::nil(), "use_ordinal": 17, "typed_chars": 5,
        "view": { "action_kind": "click", "describable": true, "element_role": "button", "element_name": "Continue",
                  "page_origin": "https://www.example.org", "page_path": "/lesson/unit-3",
                  "action_summary": "Click a button on www.example.org/lesson" }
    })
}

/// Runs `op` from `writers` tasks until `duration` has passed; each task records its latencies.
async fn drive<F, Fut>(writers: usize, duration: Duration, op: F) -> Result<Samples>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let op = Arc::new(op);
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let op = Arc::clone(&op);
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut n = 0;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    op(w, n).await?;
                    latencies.push(t.elapsed());
                    n += 1;
                }
                Ok::<_, anyhow::Error>(latencies)
            })
        })
        .collect();
    let mut samples = Samples::default();
    for t in tasks {
        samples.latencies.extend(t.await??);
    }
    samples.elapsed = start.elapsed();
    Ok(samples)
}

async fn bare(pool: Pool, writers: usize, duration: Duration) -> Result<Samples> {
    let payload = payload();
    drive(writers, duration, move |_, _| {
        let (pool, payload) = (pool.clone(), payload.clone());
        async move {
            let mut client = pool.get().await?;
            let tx = client.transaction().await?;
            let stmt = tx.prepare_cached("INSERT INTO bench_bare (payload) VALUES ($1)").await?;
            tx.execute(&stmt, &[&payload]).await?;
            tx.commit().await?;
            Ok(())
        }
    })
    .await
}

async fn ledger_append(store: PgStore, writers: usize, duration: Duration) -> Result<Samples> {
    let payload = payload();
    let streams: Arc<Vec<StreamId>> = Arc::new(
        (0..writers).map(|_| StreamId::for_entity("bench", Uuid::new_v4().simple()).expect("valid")).collect(),
    );
    let tenant = TenantId::new("bench")?;
    drive(writers, duration, move |w, n| {
        let request = AppendRequest::single(
            tenant.clone(),
            streams[w].clone(),
            if n == 0 { ExpectedVersion::NoStream } else { ExpectedVersion::At(n) },
            vec![NewEvent {
                event_id: Uuid::new_v4(),
                event_type: "tool.call.authorized".into(),
                schema_version: 1,
                payload: payload.clone(),
                metadata: Metadata::by("bench"),
            }],
        );
        let store = store.clone();
        async move {
            store.append(request).await?;
            Ok(())
        }
    })
    .await
}

/// A migrated scratch database with the bare-insert table, dropped by [`Scratch::drop_now`].
struct Scratch {
    admin: tokio_postgres::Client,
    name: String,
    config: tokio_postgres::Config,
}

impl Scratch {
    async fn create(url: &str) -> Result<Self> {
        let admin = crate::connect(url).await?;
        let name = format!("grantctl_bench_{}", Uuid::new_v4().simple());
        admin.batch_execute(&format!("CREATE DATABASE {name}")).await.context("creating the scratch database")?;
        let mut config: tokio_postgres::Config = url.parse()?;
        config.dbname(&name);
        let scratch = Self { admin, name, config };
        let (mut client, connection) = scratch.config.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        crate::migrate::run(&mut client).await?;
        client
            .batch_execute(
                "CREATE TABLE bench_bare (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL)",
            )
            .await?;
        Ok(scratch)
    }

    async fn drop_now(self) -> Result<()> {
        self.admin
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await
            .context("dropping the scratch database")
    }
}

/// Creates a scratch database on the server at `url`, runs the comparison and drops it.
pub async fn append(url: &str, writers: &[usize], duration: Duration) -> Result<String> {
    let scratch = Scratch::create(url).await?;
    let result = run_append(scratch.config.clone(), writers, duration).await;
    scratch.drop_now().await?;
    result
}

async fn run_append(config: tokio_postgres::Config, writers: &[usize], duration: Duration) -> Result<String> {
    let max = writers.iter().copied().max().unwrap_or(1);
    let pool = ledger::postgres::pool(config, max + 2).map_err(anyhow::Error::msg)?;
    let store = PgStore::new(pool.clone());

    let mut out = String::from("| writers | write | p50 µs | p99 µs | appends/s |\n|---:|---|---:|---:|---:|\n");
    let mut ratios = String::new();
    for &w in writers {
        // Warm the pool and the plan caches, then alternate halves so drift hits both kinds.
        bare(pool.clone(), w, Duration::from_millis(300)).await?;
        ledger_append(store.clone(), w, Duration::from_millis(300)).await?;
        let (mut b, mut l) = (Samples::default(), Samples::default());
        for _ in 0..2 {
            b.merge(bare(pool.clone(), w, duration / 4).await?);
            l.merge(ledger_append(store.clone(), w, duration / 4).await?);
        }
        for (label, s) in [("bare INSERT; COMMIT", &b), ("ledger append", &l)] {
            writeln!(
                out,
                "| {w} | {label} | {} | {} | {:.0} |",
                s.percentile(50).as_micros(),
                s.percentile(99).as_micros(),
                s.throughput()
            )?;
        }
        let p50 = l.percentile(50).as_secs_f64() / b.percentile(50).as_secs_f64().max(1e-9);
        let tput = l.throughput() / b.throughput().max(1e-9);
        writeln!(ratios, "{w} writer(s): ledger/bare p50 = {p50:.2}x, throughput = {tput:.2}x")?;
    }
    Ok(format!("{out}\n{ratios}"))
}

/// `grantctl bench authorize`: authorize-and-consume over loopback gRPC against a server process
/// of its own, side by side with a bare insert-and-commit on the same database.
pub mod authorize {
    use std::fmt::Write as _;
    use std::process::Stdio;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result, bail};
    use credentials::{Credentials, Role, new_token};
    use pb::authorizer_client::AuthorizerClient;
    use proto::v1 as pb;
    use tokio::io::AsyncBufReadExt;
    use tonic::transport::{Certificate, Channel, ClientTlsConfig};
    use uuid::Uuid;

    use super::{Samples, Scratch, bare};

    const TENANT: &str = "bench";
    /// Authorizer replicas behind the clients.
    const REPLICAS: usize = 2;

    /// The bench's credentials: the worker that authorizes, the gateway that resolves the card.
    #[derive(Debug, Clone)]
    struct Tokens {
        worker: String,
        gateway: String,
        profiles: String,
        ca_pem: String,
    }

    impl Tokens {
        fn bearer<T>(m: T, token: &str) -> tonic::Request<T> {
            let mut r = tonic::Request::new(m);
            r.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ascii"));
            r
        }

        fn worker<T>(&self, m: T) -> tonic::Request<T> {
            Self::bearer(m, &self.worker)
        }

        fn profiles<T>(&self, m: T) -> tonic::Request<T> {
            Self::bearer(m, &self.profiles)
        }

        fn gateway<T>(&self, m: T) -> tonic::Request<T> {
            let mut r = Self::bearer(m, &self.gateway);
            r.metadata_mut().insert("x-principal-id", "owner".parse().expect("ascii"));
            r.metadata_mut().insert("x-owner-scopes", "approval.resolve,browser.grant.write".parse().expect("ascii"));
            r
        }

        async fn connect(&self, endpoint: &str) -> Result<AuthorizerClient<Channel>> {
            let tls =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem)).domain_name("localhost");
            let channel = Channel::from_shared(endpoint.to_owned())?.tls_config(tls)?.connect().await?;
            Ok(AuthorizerClient::new(channel))
        }
    }

    fn act(session: &str) -> pb::AuthorizeRequest {
        pb::AuthorizeRequest {
            session_id: session.into(),
            run: Some(pb::RunContext { run_id: "run".into(), interactive: true, top_level: true }),
            // Each call a new tool call: the same id would be a retry, answered without a use.
            tool_call_id: format!("call-{}", Uuid::new_v4().simple()),
            turn_tool_calls: vec!["browser.act".into()],
            agent_version: "bench".into(),
            element: Some(pb::ElementFacts {
                role: "button".into(),
                name: "el gato".into(),
                visible_text: "el gato".into(),
                field_kind: Some(pb::FieldKind::None as i32),
                download: Some(false),
                disabled: Some(false),
                truncated: Some(false),
                nav_targets_carried: true,
                ..Default::default()
            }),
            page_url: "https://www.lesson.test/lesson/unit-1".into(),
            action: Some(pb::Action { kind: pb::ActionKind::Click as i32, ..Default::default() }),
            ..Default::default()
        }
    }

    /// A new session with a fresh grant, made the only way there is: the card.
    async fn fresh_grant(client: &mut AuthorizerClient<Channel>, tokens: &Tokens) -> Result<String> {
        let session = format!("bench-{}", Uuid::new_v4().simple());
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
        client
            .record_message(tokens.gateway(pb::RecordMessageRequest {
                session_id: session.clone(),
                message_id: "m".into(),
                from_owner: true,
            }))
            .await?;
        let reply = client.authorize(tokens.worker(act(&session))).await?.into_inner();
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

    /// Timed authorize-and-consume calls from `clients` clients for `duration`.
    async fn drive(endpoints: &[String], tokens: &Tokens, clients: usize, duration: Duration) -> Result<Samples> {
        let start = Instant::now();
        let deadline = start + duration;
        let tasks: Vec<_> = (0..clients)
            .map(|i| {
                let (endpoint, tokens) = (endpoints[i % endpoints.len()].clone(), tokens.clone());
                tokio::spawn(async move {
                    let mut client = tokens.connect(&endpoint).await?;
                    let mut latencies = Vec::new();
                    let mut session = fresh_grant(&mut client, &tokens).await?;
                    let mut used = 0;
                    while Instant::now() < deadline {
                        if used == authorizer::limits::MAX_ACTIONS {
                            session = fresh_grant(&mut client, &tokens).await?;
                            used = 0;
                        }
                        let t = Instant::now();
                        let reply = client.authorize(tokens.worker(act(&session))).await?.into_inner();
                        let elapsed = t.elapsed();
                        match reply.decision {
                            Some(pb::authorize_reply::Decision::Allow(_)) => latencies.push(elapsed),
                            other => bail!("expected an allow, got {other:?}"),
                        }
                        used += 1;
                    }
                    Ok::<_, anyhow::Error>(latencies)
                })
            })
            .collect();
        let mut samples = Samples::default();
        for t in tasks {
            samples.latencies.extend(t.await??);
        }
        samples.elapsed = start.elapsed();
        Ok(samples)
    }

    /// Opens `per_replica` silent TCP connections to each replica and one client sending a TLS
    /// ClientHello a byte every 200 ms, held for 22 s (the server closes silent ones after its
    /// 5 s handshake timeout, and a new one evicts the oldest past 256 pending). Returns how many
    /// connections the replicas took in all.
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

    pub async fn run(
        url: &str,
        clients: &[usize],
        duration: Duration,
        with_projections: bool,
        log_events: u64,
        flood: usize,
    ) -> Result<String> {
        let scratch = Scratch::create(url).await?;
        let db_url = format!("{}/{}", url.rsplit_once('/').map_or(url, |(base, _)| base), scratch.name);
        let result =
            run_on(scratch.config.clone(), &db_url, clients, duration, with_projections, log_events, flood).await;
        scratch.drop_now().await?;
        result
    }

    async fn run_on(
        config: tokio_postgres::Config,
        db_url: &str,
        clients: &[usize],
        duration: Duration,
        with_projections: bool,
        log_events: u64,
        flood: usize,
    ) -> Result<String> {
        // The settings are recorded once, as an operator does; the replicas serve them.
        let lesson = authorizer::scopes::settings(Some("true"), Some("https://www.lesson.test/lesson"))?;
        let wanted = crate::serve::DeploymentSettings {
            settings: lesson,
            standing: None,
            policy_version: Some(authorizer::policy::Policy::empty().version),
        };
        crate::serve::apply_settings(db_url, TENANT, wanted).await?;
        if log_events > 0 {
            // Filler rows of other tenants' streams, inserted in bulk: nothing the authorizer
            // reads at start-up or per request, which is the point.
            let client = crate::connect_config(&config).await?;
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
        }
        // TLS as in production: its cost is part of the call.
        let pki_dir = std::env::temp_dir().join(format!("grantctl-bench-{}", Uuid::new_v4().simple()));
        let pki = crate::tls::DevPki::generate()?;
        pki.write(&pki_dir)?;
        let (_, cert, key) = crate::tls::DevPki::paths(&pki_dir);
        // Two replicas on one database, the clients spread over them round robin.
        let mut servers = Vec::new();
        let mut endpoints = Vec::new();
        for _ in 0..REPLICAS {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            let mut server = tokio::process::Command::new(std::env::current_exe()?)
                .args(["serve", "authorizer"])
                .env("AUTHORIZER_TLS_CERT", &cert)
                .env("AUTHORIZER_TLS_KEY", &key)
                .env("DATABASE_URL", db_url)
                .env("AUTHORIZER_LISTEN", format!("127.0.0.1:{port}"))
                .env("RUST_LOG", "warn")
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .context("starting the authorizer")?;
            let mut lines = tokio::io::BufReader::new(server.stdout.take().context("server stdout")?).lines();
            let started = Instant::now();
            tokio::time::timeout(Duration::from_secs(30), async {
                while let Some(line) = lines.next_line().await? {
                    if line.contains("serving on") {
                        return Ok(());
                    }
                }
                bail!("the authorizer exited before serving")
            })
            .await
            .context("the authorizer did not start within 30 s")??;
            let pid = server.id().context("server pid")?;
            servers.push((server, pid, started.elapsed()));
            endpoints.push(format!("https://localhost:{port}"));
        }
        std::fs::remove_dir_all(&pki_dir)?;
        // With --with-projections: the projection workers beside it, as in production, and their
        // lag sampled every 100 ms.
        let mut workers = match with_projections {
            true => Some(
                tokio::process::Command::new(std::env::current_exe()?)
                    .args(["serve", "projections"])
                    .env("DATABASE_URL", db_url)
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
                let client = crate::connect_config(&config).await?;
                while sampling.load(Ordering::Relaxed) {
                    if let Ok(s) = projections::worker::status(&client).await {
                        lags.push(s.iter().map(|s| s.lag_seconds).fold(0.0, f64::max));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok::<_, anyhow::Error>(lags)
            })
        };
        let pool = ledger::postgres::pool(config, clients.iter().copied().max().unwrap_or(1) + 2)
            .map_err(anyhow::Error::msg)?;
        let credentials = Credentials::postgres(pool.clone());
        let tokens = Tokens { worker: new_token(), gateway: new_token(), profiles: new_token(), ca_pem: pki.ca_cert };
        credentials.register(&tokens.worker, TENANT, Role::Worker, Some("owner"), None).await?;
        credentials.register(&tokens.gateway, TENANT, Role::Gateway, None, None).await?;
        credentials.register(&tokens.profiles, TENANT, Role::Profiles, None, None).await?;

        let mut out = String::from("| clients | call | p50 µs | p99 µs | per second |\n|---:|---|---:|---:|---:|\n");
        let mut ratios = String::new();
        for &n in clients {
            bare(pool.clone(), n, Duration::from_millis(300)).await?;
            drive(&endpoints, &tokens, n, Duration::from_millis(500)).await?;
            let (mut b, mut a) = (Samples::default(), Samples::default());
            for _ in 0..2 {
                b.merge(bare(pool.clone(), n, duration / 4).await?);
                a.merge(drive(&endpoints, &tokens, n, duration / 4).await?);
            }
            for (label, s) in [("bare INSERT; COMMIT", &b), ("Authorize (gRPC, consumes a use)", &a)] {
                writeln!(
                    out,
                    "| {n} | {label} | {} | {} | {:.0} |",
                    s.percentile(50).as_micros(),
                    s.percentile(99).as_micros(),
                    s.throughput()
                )?;
            }
            let p50 = a.percentile(50).as_secs_f64() / b.percentile(50).as_secs_f64().max(1e-9);
            let tput = a.throughput() / b.throughput().max(1e-9);
            writeln!(ratios, "{n} client(s): authorize/bare p50 = {p50:.2}x, throughput = {tput:.2}x")?;
            if flood > 0 {
                let held = flood_replicas(&endpoints, flood).await;
                let f = drive(&endpoints, &tokens, n, duration / 2).await?;
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
        let rss: Vec<String> = servers
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
        for (server, _, _) in &mut servers {
            server.start_kill()?;
            let _ = server.wait().await;
        }
        if let Some(workers) = workers.as_mut() {
            workers.start_kill()?;
            let _ = workers.wait().await;
        }
        Ok(format!(
            "{out}\n{ratios}{REPLICAS} replicas, round robin, {log_events} events in the log before they started; \
             peak RSS (VmHWM) each: {rss}\n{lag}"
        ))
    }
}

/// `grantctl bench rebuild`: a ledger of `events` events across many tenants and grants, every
/// projection rebuilt from it, side by side with a plain sequential read of the same events
/// (`COPY … TO STDOUT`) in the same run.
pub mod rebuild {
    use std::fmt::Write as _;
    use std::time::Instant;

    use anyhow::Result;
    use futures_util::StreamExt;
    use grant_domain::catalogue::{
        ActionView, AuthorizationKind, EndReason, Event, SiteScope, TaskGrantCreated, TaskGrantEnded,
        ToolCallAuthorized,
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
            }));
        }
        events.push(Event::TaskGrantEnded(TaskGrantEnded { grant_id, reason: EndReason::Exhausted }));
        (grant_id, events)
    }

    /// Appends about `total` events: grants of 198 uses each, over 10 tenants, from 4 writers.
    async fn generate(store: &PgStore, total: u64) -> Result<u64> {
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
        let copy = client
            .copy_out("COPY (SELECT * FROM events ORDER BY events.tx_id, events.global_position) TO STDOUT")
            .await?;
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
        writeln!(
            out,
            "| read_all + decode, no writes | {read} | {seconds:.1} | {rate:.0} | {:.2}× |",
            rate / copy_rate
        )?;
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
}

pub mod act {
    //! `grantctl bench act`: a covered click through the runtime (the snapshot check, the live
    //! re-read, the classifier's coverage under a task constraint, dispatch) beside a plain
    //! WebDriver click on the same fixture page, interleaved in one run; and observe on a page of
    //! `nodes` interactive nodes. The runtime's acts include the click guard's arming and the
    //! turns of the page's event loop after the input; the fenced one also the fence's settle.
    //! The plain click waits for nothing after chromedriver answers.

    use std::fmt::Write as _;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result};
    use browser_runtime::browser::Browser;
    use browser_runtime::fixture::Fixture;
    use browser_runtime::service::{AuthorizerRedeemer, BrowserRuntime};
    use credentials::{Credentials, Role};
    use fantoccini::Locator;
    use proto::runtime as rt;
    use proto::v1 as pb;
    use tonic::Request;

    use super::Samples;

    const HOST: &str = "www.lesson.test";
    const TOKEN: &str = "glc_00000000000000000000000000000000000000000000000000000000000000b1";

    fn with<T>(message: T) -> Request<T> {
        let mut req = Request::new(message);
        req.metadata_mut().insert("authorization", format!("Bearer {TOKEN}").parse().expect("ascii"));
        req
    }

    /// A lesson page: a tile that counts its taps, among a few other controls.
    fn click_page() -> String {
        let mut html = String::from("<!doctype html><title>Bench</title><h1>Tap the cat</h1>");
        for i in 0..20 {
            let _ = write!(html, "<button>Answer {i}</button>");
        }
        html.push_str(
            "<button id=tap onclick=\"document.getElementById('n').textContent++\">Tap</button><p id=n>0</p>",
        );
        html
    }

    /// `nodes` interactive nodes: links, buttons, fields and selects inside labelled sections.
    fn big_page(nodes: usize) -> String {
        let mut html = String::from("<!doctype html><title>Big</title><form action=/lesson/answer>");
        for i in 0..nodes {
            let _ = match i % 4 {
                0 => write!(html, "<section><a href=/lesson/{i}>Go to part {i}</a></section>"),
                1 => write!(html, "<button title='Part {i}'>Answer {i}</button>"),
                2 => write!(html, "<label>Word {i} <input name=w{i}></label>"),
                _ => write!(html, "<select aria-label='Pick {i}'><option>a</option><option>b</option></select>"),
            };
        }
        html.push_str("</form>");
        html
    }

    fn constraint() -> pb::DispatchConstraint {
        let not_after = time::OffsetDateTime::now_utc() + time::Duration::minutes(30);
        pb::DispatchConstraint {
            grant_kind: pb::GrantKind::Task as i32,
            origins: vec![format!("https://{HOST}")],
            path_prefix: "/lesson".into(),
            not_after: not_after.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
            consequence_ceiling: classifier::constraint::GrantKind::Task.consequence_ceiling().into(),
            max_text_chars: classifier::constraint::GrantKind::Task.max_text_chars(),
        }
    }

    fn line(name: &str, s: &Samples) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        format!(
            "{name:<34} n={:<5} p50 {:>7.2} ms  p99 {:>7.2} ms",
            s.latencies.len(),
            ms(s.percentile(50)),
            ms(s.percentile(99))
        )
    }

    pub async fn run(iterations: usize, nodes: usize) -> Result<String> {
        let dir = std::env::temp_dir().join(format!("grant-ledger-bench-act-{}", std::process::id()));
        let fixture = Fixture::start(&[HOST], &dir).await.context("the fixture site")?;
        fixture.page(HOST, "/lesson/bench", &click_page());
        fixture.page(HOST, "/lesson/big", &big_page(nodes));
        let credentials = Credentials::memory();
        credentials.register(TOKEN, "bench", Role::Worker, Some("owner"), None).await?;
        let extra = serde_json::to_string(&[fixture.resolver_rule()])?;
        let env = [
            ("BROWSER_EXTRA_ARGS", extra),
            ("BROWSER_CA_BUNDLE", fixture.ca_bundle.display().to_string()),
            ("BROWSER_POOL_SIZE", "2".to_owned()),
            ("TASK_RECORDS_DIR", dir.join("records").display().to_string()),
        ];
        let config =
            browser_runtime::RuntimeConfig::parse(|k| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))?;
        let browser_config = config.browser.clone();
        let runtime = Arc::new(BrowserRuntime::new(
            config,
            credentials,
            AuthorizerRedeemer::new(None).map_err(anyhow::Error::msg)?,
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(browser_runtime::service::serve(listener, Arc::clone(&runtime), None, async {
            let _ = stopped.await;
        }));
        let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{port}"))?.connect().await?;
        let mut client = rt::browser_runtime_client::BrowserRuntimeClient::new(channel);
        let open = |path: &str, profile: &str| rt::OpenSessionRequest {
            browser_profile_id: profile.into(),
            allowed_origins: vec![format!("https://{HOST}")],
            start_url: format!("https://{HOST}{path}"),
            max_steps: 10_000,
        };
        let session = client.open_session(with(open("/lesson/bench", "bench-1"))).await?.into_inner().session_id;

        // The plain WebDriver click: its own Chromium with the same flags, on the same page.
        let plain = Browser::start(&browser_config).await?;
        plain.client.goto(&format!("https://{HOST}/lesson/bench")).await?;
        let tap = plain.client.find(Locator::Css("#tap")).await?;

        let (mut covered, mut fenced, mut bare) = (Samples::default(), Samples::default(), Samples::default());
        let mut sequence = 0u64;
        for i in 0..iterations + 10 {
            // The same click three ways: re-checked, re-checked under a grant with the fence armed,
            // and plain.
            for grant in [false, true] {
                let o = client.observe(with(rt::ObserveRequest { session_id: session.clone() })).await?.into_inner();
                let node = o.nodes.iter().find(|n| n.name == "Tap").context("the Tap node")?;
                sequence += 1;
                let act = rt::ActRequest {
                    session_id: session.clone(),
                    sequence,
                    run_id: "bench".into(),
                    snapshot_id: o.snapshot_id.clone(),
                    r#ref: node.r#ref.clone(),
                    expected_name: "Tap".into(),
                    expected_role: rt::Role::Button as i32,
                    wait_for: rt::WaitFor::None as i32,
                    constraint: grant.then(constraint),
                    action: Some(rt::act_request::Action::Click(rt::Click {})),
                    ..Default::default()
                };
                let t = Instant::now();
                let reply = client.act(with(act)).await?.into_inner();
                let took = t.elapsed();
                anyhow::ensure!(reply.ok, "the click was refused: {reply:?}");
                if i >= 10 {
                    if grant { fenced.latencies.push(took) } else { covered.latencies.push(took) }
                }
            }
            let t = Instant::now();
            tap.click().await?;
            let bare_took = t.elapsed();
            if i >= 10 {
                bare.latencies.push(bare_took);
            }
        }
        // The read alone, without gRPC: what the script round trip and parsing cost.
        plain.client.goto(&format!("https://{HOST}/lesson/big")).await?;
        let mut read = Samples::default();
        for i in 0..iterations.min(100) + 3 {
            let t = Instant::now();
            // Each snapshot's key is fixed for the document's life: a new id each time.
            browser_runtime::page::snapshot(&plain.fence.handle(), &format!("snap_{i:012x}")).await?;
            if i >= 3 {
                read.latencies.push(t.elapsed());
            }
        }
        plain.close().await;

        let big = client.open_session(with(open("/lesson/big", "bench-2"))).await?.into_inner().session_id;
        let mut observe = Samples::default();
        let mut seen = 0;
        for i in 0..iterations.min(100) + 3 {
            let t = Instant::now();
            let o = client.observe(with(rt::ObserveRequest { session_id: big.clone() })).await?.into_inner();
            if i >= 3 {
                observe.latencies.push(t.elapsed());
            }
            seen = o.nodes.len();
        }

        let _ = stop.send(());
        let _ = server.await;
        let _ = std::fs::remove_dir_all(&dir);
        let ratio = |a: &Samples, p: usize| a.percentile(p).as_secs_f64() / bare.percentile(p).as_secs_f64().max(1e-9);
        Ok(format!(
            "{}\n{}\n{}\n  re-check: p50 {:.2}x, p99 {:.2}x the plain click (goal: at most 1.5x)\n  \
             under a grant, guard and fence armed: p50 {:.2}x, p99 {:.2}x (goal: at most 1.5x)\n{}  \
             ({seen} nodes; goal: p50 under 50 ms)\n{}",
            line("act: click, full re-check", &covered),
            line("act: click under a grant, fenced", &fenced),
            line("plain WebDriver element click", &bare),
            ratio(&covered, 50),
            ratio(&covered, 99),
            ratio(&fenced, 50),
            ratio(&fenced, 99),
            line(&format!("observe, {nodes}-node page"), &observe),
            line("  of which the page read alone", &read),
        ))
    }
}
