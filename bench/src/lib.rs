//! The benchmarks behind `grantctl-bench`, each a figure beside its floor in one run, and
//! `grantctl-bench append`: ledger appends against a bare one-row insert-and-commit on the same
//! database, interleaved in the same run so the machine's noise hits both alike.
//!
//! Not built on the test kit (`tests`): the kit turns on the authorizer's test hooks, and cargo
//! would unify them into a `grantctl` built in the same command as this crate.

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

/// CPU time spent so far by this process (the bench's clients), by the server processes it
/// started, and by one PostgreSQL cluster (its postmaster with the children it reaped, and its
/// live children): read from Linux's `/proc`, zero where it is not. Each total only grows, a
/// child's time moving to the postmaster when it exits, so the difference of two is what one phase
/// cost the machine.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    bench: Duration,
    servers: Duration,
    postgres: Duration,
}

impl Cpu {
    fn now(servers: &[u32], postmaster: Option<u32>) -> Self {
        let of = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| proc_stat(&s));
        let bench = of("self").map(|s| s.cpu).unwrap_or_default();
        let servers = servers.iter().filter_map(|p| of(&p.to_string())).map(|s| s.cpu).sum();
        let postgres = postmaster.map_or(Duration::ZERO, |pm| {
            let own = of(&pm.to_string()).map(|s| s.cpu + s.reaped).unwrap_or_default();
            let children: Duration = std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
                .filter_map(|e| of(&e.file_name().to_string_lossy()))
                .filter(|s| s.parent == pm)
                .map(|s| s.cpu)
                .sum();
            own + children
        });
        Self { bench, servers, postgres }
    }

    /// What was spent between `before` and this.
    fn since(self, before: Self) -> Self {
        Self {
            bench: self.bench.saturating_sub(before.bench),
            servers: self.servers.saturating_sub(before.servers),
            postgres: self.postgres.saturating_sub(before.postgres),
        }
    }

    fn add(&mut self, other: Self) {
        self.bench += other.bench;
        self.servers += other.servers;
        self.postgres += other.postgres;
    }

    /// Microseconds of each part per call, and their sum, over `calls` calls.
    fn per_call(self, calls: usize) -> [f64; 4] {
        let us = |d: Duration| d.as_secs_f64() * 1e6 / calls.max(1) as f64;
        let parts = [us(self.bench), us(self.servers), us(self.postgres)];
        [parts[0], parts[1], parts[2], parts.iter().sum()]
    }
}

/// The postmaster of the cluster `pool` reaches: the parent of the backend serving it.
async fn postmaster_of(pool: &Pool) -> Option<u32> {
    let client = pool.get().await.ok()?;
    let backend: i32 = client.query_one("SELECT pg_backend_pid()", &[]).await.ok()?.get(0);
    let stat = std::fs::read_to_string(format!("/proc/{backend}/stat")).ok()?;
    proc_stat(&stat).map(|s| s.parent)
}

/// What one `/proc/<pid>/stat` line says of a process.
#[derive(Debug, PartialEq, Eq)]
struct ProcStat {
    name: String,
    parent: u32,
    /// Its own user plus system time.
    cpu: Duration,
    /// The user plus system time of the children it has waited for.
    reaped: Duration,
}

/// Reads a `/proc/<pid>/stat` line. The name is in parentheses and may hold spaces; the parent is
/// the 4th field and the times the 14th to 17th, in clock ticks of 1/100 s (`USER_HZ`, 100 on
/// every Linux this runs on).
fn proc_stat(stat: &str) -> Option<ProcStat> {
    let (head, rest) = stat.rsplit_once(") ")?;
    let name = head.split_once(" (")?.1.to_owned();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let parent = u32::try_from(ticks(1)?).ok()?;
    let (cpu, reaped) = (ticks(11)? + ticks(12)?, ticks(13)? + ticks(14)?);
    Some(ProcStat { name, parent, cpu: Duration::from_millis(cpu * 10), reaped: Duration::from_millis(reaped * 10) })
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

/// The latencies every task recorded, and the time since `start`: one run's samples.
async fn gather(start: Instant, tasks: Vec<tokio::task::JoinHandle<Result<Vec<Duration>>>>) -> Result<Samples> {
    let mut samples = Samples::default();
    for t in tasks {
        samples.latencies.extend(t.await??);
    }
    samples.elapsed = start.elapsed();
    Ok(samples)
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
    gather(start, tasks).await
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

/// The checkpoint service's own loop beside the writers (the tree extended every second, a
/// checkpoint signed every 1,000 events), until aborted.
async fn keep_tree(store: PgStore) {
    let Ok(key) = ledger::proof::note::Signer::generate("bench.test/log") else { return };
    let signing = ops::proof::Signing { key, every_events: 1000, every: Duration::from_secs(60), file: None };
    let _ = ops::proof::serve(store, signing, ops::proof::ProofMetrics::default(), std::future::pending()).await;
}

/// A migrated scratch database with the bare-insert table, dropped by [`Scratch::drop_now`].
pub(crate) struct Scratch {
    admin: tokio_postgres::Client,
    pub(crate) name: String,
    pub(crate) config: tokio_postgres::Config,
}

impl Scratch {
    pub(crate) async fn create(url: &str) -> Result<Self> {
        let admin = ops::connect(url).await?;
        let name = format!("grantctl_bench_{}", Uuid::new_v4().simple());
        admin.batch_execute(&format!("CREATE DATABASE {name}")).await.context("creating the scratch database")?;
        let mut config: tokio_postgres::Config = url.parse()?;
        config.dbname(&name);
        let scratch = Self { admin, name, config };
        let (mut client, connection) = scratch.config.connect(tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        ops::migrate::run(&mut client).await?;
        client
            .batch_execute(
                "CREATE TABLE bench_bare (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, payload jsonb NOT NULL)",
            )
            .await?;
        Ok(scratch)
    }

    pub(crate) async fn drop_now(self) -> Result<()> {
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
        let (mut b, mut l, mut t) = (Samples::default(), Samples::default(), Samples::default());
        for _ in 0..2 {
            b.merge(bare(pool.clone(), w, duration / 6).await?);
            l.merge(ledger_append(store.clone(), w, duration / 6).await?);
            let keeper = tokio::spawn(keep_tree(store.clone()));
            t.merge(ledger_append(store.clone(), w, duration / 6).await?);
            keeper.abort();
        }
        for (label, s) in [("bare INSERT; COMMIT", &b), ("ledger append", &l), ("ledger append, tree kept", &t)] {
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
        let kept = t.percentile(50).as_secs_f64() / l.percentile(50).as_secs_f64().max(1e-9);
        let kept_tput = t.throughput() / l.throughput().max(1e-9);
        writeln!(ratios, "{w} writer(s): tree kept/ledger p50 = {kept:.2}x, throughput = {kept_tput:.2}x")?;
    }
    Ok(format!("{out}\n{ratios}"))
}

/// Records `tenant`'s settings as an operator does, once: task grants on, the lesson's scope, the
/// empty policy in force. The benches' replicas serve them.
async fn lesson_settings(db_url: &str, tenant: &str) -> Result<()> {
    let lesson = authorizer::scopes::settings(Some("true"), Some("https://www.lesson.test/lesson"))?;
    let wanted = ops::serve::DeploymentSettings {
        settings: lesson,
        standing: None,
        policy_version: Some(authorizer::policy::Policy::empty().version),
    };
    ops::serve::apply_settings(db_url, tenant, wanted).await?;
    Ok(())
}

/// The facts of an enabled, routine button named `name`, as a runtime reads them.
pub(crate) fn button(name: &str) -> proto::v1::ElementFacts {
    use proto::v1 as pb;
    pb::ElementFacts {
        role: "button".into(),
        name: name.into(),
        visible_text: name.into(),
        field_kind: Some(pb::FieldKind::None as i32),
        download: Some(false),
        disabled: Some(false),
        truncated: Some(false),
        nav_targets_carried: true,
        ..Default::default()
    }
}

/// A throwaway CA with a loopback certificate and a ticket keyring, in a new folder named after
/// `what`: TLS as in production, its cost part of every call.
pub(crate) struct Pki {
    pub(crate) dir: std::path::PathBuf,
    pub(crate) ca: std::path::PathBuf,
    pub(crate) cert: std::path::PathBuf,
    pub(crate) key: std::path::PathBuf,
    pub(crate) keys_file: std::path::PathBuf,
    pub(crate) key_line: String,
    /// The CA's certificate, PEM: what a client trusts.
    pub(crate) ca_pem: String,
}

impl Pki {
    pub(crate) fn new(what: &str) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("grantctl-bench-{what}-{}", Uuid::new_v4().simple()));
        let pki = ops::tls::DevPki::generate()?;
        pki.write(&dir)?;
        let (ca, cert, key) = ops::tls::DevPki::paths(&dir);
        let keys_file = dir.join("ticket-keys");
        let key_line = proto::ticket::Keyring::line("bench", rand::random());
        std::fs::write(&keys_file, &key_line)?;
        Ok(Self { dir, ca, cert, key, keys_file, key_line, ca_pem: pki.ca_cert })
    }
}

/// `grantctl` (built beside this binary) run as `args` with `env`, once it prints that it is
/// serving (within 30 s); killed when dropped.
pub(crate) async fn spawn_serving(args: &[&str], env: &[(&str, String)]) -> Result<tokio::process::Child> {
    let mut command = tokio::process::Command::new(grantctl()?);
    command.args(args).env("RUST_LOG", "warn").stdout(std::process::Stdio::piped()).kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().with_context(|| format!("starting {args:?}"))?;
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().context("stdout")?));
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await? {
            if line.contains("serving on") {
                return Ok(());
            }
        }
        anyhow::bail!("{args:?} exited before serving")
    })
    .await
    .with_context(|| format!("{args:?} did not start within 30 s"))??;
    Ok(child)
}

/// The `grantctl` binary beside this one: the services a bench measures run as in production.
pub(crate) fn grantctl() -> Result<std::path::PathBuf> {
    let path = std::env::current_exe()?.with_file_name("grantctl");
    anyhow::ensure!(
        path.is_file(),
        "{} is missing: build it beside the bench (cargo build --release -p ops -p bench)",
        path.display()
    );
    Ok(path)
}

pub mod authorize;
pub mod mcp;

pub mod gateway;

pub mod proof;
pub mod rebuild;

pub mod act;
pub mod harness;
pub mod stop;
pub mod waits;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_the_name_the_parent_and_the_cpu_times() {
        // The name may hold spaces and parentheses: only the last `) ` ends it.
        let line = "4242 (postgres: x (y) z) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 37 4 6 20 0 1 0 5 0 0";
        let read = ProcStat {
            name: "postgres: x (y) z".into(),
            parent: 17,
            cpu: Duration::from_millis(2_870),
            reaped: Duration::from_millis(100),
        };
        assert_eq!(proc_stat(line), Some(read));
        assert_eq!(proc_stat("4242 (short) S 1"), None, "too few fields");
        let me = std::fs::read_to_string("/proc/self/stat").expect("Linux /proc");
        assert!(proc_stat(&me).is_some(), "{me}");
    }
}
