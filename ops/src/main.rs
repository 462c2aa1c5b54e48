//! `grantctl`: the operator's command.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use ledger::PgStore;
use ops::pgcluster::{self, Durability};

#[derive(Debug, Parser)]
#[command(name = "grantctl", about = "Operate the grant ledger")]
struct Cli {
    /// The PostgreSQL server; unset, commands that need one start the local cluster in `.pgdata/main`.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Apply pending migrations (idempotent; concurrent runs serialise).
    Migrate,
    /// Start local PostgreSQL if needed, migrate, and check the ledger: the main job.
    Up,
    /// Check the ledger: migrations applied, the paged global read against count(*), and every
    /// stream's hash chain.
    Check {
        /// Events per page of the global read.
        #[arg(long, default_value_t = ledger::READ_PAGE as u64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        page_size: u64,
    },
    /// Classify elements: JSON lines on stdin, one JSON line per input on stdout.
    Classify,
    /// What an operator opens first: each service's health (from the metrics addresses the
    /// services read, AUTHORIZER_METRICS_LISTEN and the rest), each projection's lag, active
    /// grants and pending cards per tenant, and the errors each service has answered.
    Status,
    /// Run a service.
    Serve {
        #[command(subcommand)]
        service: ServeCmd,
    },
    /// The read side: projections' status and verification against the log.
    Projections {
        #[command(subcommand)]
        command: ProjectionsCmd,
    },
    /// What an auditor runs: replay stories from the log, verify chains and views.
    Audit {
        #[command(subcommand)]
        command: AuditCmd,
    },
    /// A tenant's deployment settings: the one truth every authorizer replica serves.
    Settings {
        #[command(subcommand)]
        command: SettingsCmd,
    },
    /// Browser profiles as the authorizer holds them.
    Profiles {
        #[command(subcommand)]
        command: ProfilesCmd,
    },
    /// The browser task agent's harness.
    Agent {
        #[command(subcommand)]
        command: AgentCmd,
    },
    /// The lesson a newcomer watches (`scripts/run --demo`).
    Demo {
        #[command(subcommand)]
        command: DemoCmd,
    },
    /// Owners' credentials at the gateway: API tokens and one-time sign-in links.
    Owners {
        #[command(subcommand)]
        command: OwnersCmd,
    },
    /// Credentials of the services that call the authorizer.
    Credentials {
        #[command(subcommand)]
        command: CredentialsCmd,
    },
    /// The dispatch-ticket keyring the authorizer and the runtime share (TICKET_KEYS_FILE).
    Tickets {
        #[command(subcommand)]
        command: TicketsCmd,
    },
    /// Certificates for TLS on loopback.
    Tls {
        #[command(subcommand)]
        command: TlsCmd,
    },
    /// Manage a local throwaway cluster.
    Db {
        #[command(subcommand)]
        command: DbCmd,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        command: BenchCmd,
    },
}

#[derive(Debug, Subcommand)]
enum ServeCmd {
    /// The authorizer gRPC service, for every tenant. Configured by AUTHORIZER_LISTEN,
    /// AUTHORIZER_TLS_CERT, AUTHORIZER_TLS_KEY, POLICY_FILE, SWEEP_INTERVAL_SECONDS,
    /// AUTHORIZER_DB_POOL; settings
    /// are recorded per tenant with `grantctl settings apply`.
    Authorizer {
        /// Serve plaintext on a loopback address instead of TLS: local development only.
        #[arg(long)]
        insecure_loopback: bool,
    },
    /// A worker per async projection (audit_log, grant_list, pending_approvals) until Ctrl-C,
    /// with metrics and health on PROJECTIONS_METRICS_LISTEN (default 127.0.0.1:9404).
    Projections,
    /// The browser runtime gRPC service. Configured by RUNTIME_LISTEN, RUNTIME_TLS_CERT,
    /// RUNTIME_TLS_KEY, BROWSER_CHROMEDRIVER, BROWSER_CHROMIUM, BROWSER_EXTRA_ARGS (a JSON array),
    /// BROWSER_CA_BUNDLE, BROWSER_POOL_SIZE, RUNTIME_AUTHORIZER_URL, RUNTIME_AUTHORIZER_CA,
    /// RUNTIME_AUTHORIZER_TOKEN and TASK_RECORDS_DIR; callers' credentials are in DATABASE_URL.
    Runtime {
        /// Serve plaintext on a loopback address instead of TLS: local development only.
        #[arg(long)]
        insecure_loopback: bool,
    },
    /// The owner's HTTP gateway. Configured by GATEWAY_LISTEN, GATEWAY_TLS_CERT, GATEWAY_TLS_KEY,
    /// GATEWAY_AUTHORIZER_URL, GATEWAY_AUTHORIZER_CA, GATEWAY_CREDENTIALS_FILE and
    /// GATEWAY_RATE_PER_MINUTE; owner tokens are in DATABASE_URL.
    Gateway {
        /// Serve plaintext on a loopback address instead of TLS: local development only.
        #[arg(long)]
        insecure_loopback: bool,
    },
}

#[derive(Debug, Subcommand)]
enum AgentCmd {
    /// Print the tools a model is given, as a JSON array of {name, description, input_schema}.
    Tools,
    /// Run one task end to end against a runtime and an authorizer, with a written plan
    /// (--script) or an OpenAI-compatible model (--model-url and --model, key in AGENT_MODEL_KEY).
    /// Reaches them by AGENT_RUNTIME_URL, AGENT_AUTHORIZER_URL, AGENT_CA (PEM, for https) and
    /// AGENT_WORKER_TOKEN (a worker credential of the owner).
    Run {
        #[arg(long)]
        task: PathBuf,
        #[arg(long, conflicts_with_all = ["model_url", "model"])]
        script: Option<PathBuf>,
        #[arg(long, requires = "model")]
        model_url: Option<String>,
        #[arg(long, requires = "model_url")]
        model: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum DemoCmd {
    /// Serve the demo lesson on loopback until Ctrl-C; writes DIR/browser-args.json and
    /// DIR/fixture-ca.pem for the runtime (BROWSER_EXTRA_ARGS, BROWSER_CA_BUNDLE).
    Site {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Play the scripted lesson through the running stack in chat `demo`, asking OWNER on the
    /// console. Reaches the stack as `agent run` does, plus DEMO_PROFILES_TOKEN and
    /// DEMO_GATEWAY_TOKEN.
    Run {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value = "owner")]
        owner: String,
    },
}

#[derive(Debug, Subcommand)]
enum OwnersCmd {
    /// API tokens.
    Token {
        #[command(subcommand)]
        command: OwnerTokenCmd,
    },
    /// Print a one-time sign-in link for a token's owner (valid ten minutes, used once); the
    /// browser it opens in stays signed in for twelve hours, or until the token is revoked.
    Link {
        #[arg(long)]
        tenant: String,
        token_id: uuid::Uuid,
        /// The gateway's address as the owner's browser reaches it.
        #[arg(long, default_value = "https://localhost:8443")]
        base: String,
        /// The chat session whose page the link lands on.
        #[arg(long)]
        session: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
enum OwnerTokenCmd {
    /// Make an owner token and print its id and its secret; the secret is shown only this once.
    Create {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        principal: String,
        /// Comma-separated: approval.resolve, browser.grant.read, browser.grant.write.
        #[arg(long)]
        scopes: String,
        #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u32).range(1..=366))]
        expires_in_days: u32,
    },
    /// Revoke a token, and every link and browser session made from it, from the next request.
    Revoke {
        #[arg(long)]
        tenant: String,
        token_id: uuid::Uuid,
    },
    /// A tenant's owner tokens (never their secrets).
    List {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
enum SettingsCmd {
    /// Records the tenant's settings from BROWSER_TASK_GRANTS_ENABLED, BROWSER_TASK_GRANT_SCOPES,
    /// BROWSER_GRANT_ID and BROWSER_PROFILE_ID (unset: off, no scopes, no pin). Grants whose scope
    /// is gone, or every grant once the flag is off, end with the change; every replica serves
    /// it from the next request.
    Apply {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
enum ProjectionsCmd {
    /// Each projection's version, checkpoint and lag.
    Status,
    /// Builds NAME's next generation from position zero beside the live one, then swaps it in
    /// (and records this build's version): what an operator runs after a migration.
    Rebuild { name: String },
    /// Replays the log in memory and diffs NAME (every view when unset, the inline
    /// active_task_grants included) against it; prints the first differing row.
    Verify { name: Option<String> },
}

#[derive(Debug, Subcommand)]
enum AuditCmd {
    /// A story from the log itself, in order.
    Replay {
        #[arg(long)]
        tenant: Option<String>,
        /// A session's story (ids are a tenant's own: needs --tenant).
        #[arg(long, conflicts_with = "grant", requires = "tenant")]
        session: Option<String>,
        /// A grant's story: the approval that created it, its uses and its end (needs --tenant).
        #[arg(long, requires = "tenant")]
        grant: Option<uuid::Uuid>,
        /// RFC 3339: only events recorded at or after it.
        #[arg(long)]
        since: Option<String>,
        #[arg(long, default_value = "text", value_parser = ["text", "jsonl"])]
        format: String,
    },
    /// Every stream's hash chain and every projection against the log; with --export, an
    /// export file against its manifest and against the log.
    Verify {
        #[arg(long)]
        export: Option<PathBuf>,
    },
    /// The audit rows replayed from the log as JSON lines in OUT, with OUT.manifest.json beside
    /// it (count, first and last position, SHA-256 of the file).
    Export {
        #[arg(long)]
        tenant: Option<String>,
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum TicketsCmd {
    /// Print a keyring line for a new random key: `<id> <64 hex digits>`. To rotate, add the new
    /// line second in every service's file and roll them (all verify it), move it first and roll
    /// again (services seal with it), then drop the old line ten minutes later and roll.
    Keygen {
        #[arg(long, default_value = "k1")]
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum TlsCmd {
    /// Make a throwaway CA and a loopback server certificate in DIR (ca.pem, server.pem,
    /// server-key.pem), unless they are there already.
    Init {
        #[arg(long, default_value = ".pgdata/tls")]
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum ProfilesCmd {
    /// Profiles recorded before profiles had owners, with the sessions bound to them: nothing
    /// binds them or acts through them until the profiles service reports each for its owner.
    Unclaimed {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
enum CredentialsCmd {
    /// Make a credential and print its id and its token; the token is shown only this once.
    Create {
        /// worker, runtime, gateway, profiles or operator.
        #[arg(long)]
        role: String,
        #[arg(long)]
        tenant: String,
        /// The owner a worker or runtime credential acts as.
        #[arg(long)]
        principal: Option<String>,
        /// Hours until it expires; unset, it lasts until revoked.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        expires_in_hours: Option<u32>,
    },
    /// Revoke a credential: calls made with it are refused from now on.
    Revoke {
        #[arg(long)]
        tenant: String,
        credential_id: uuid::Uuid,
    },
    /// List a tenant's credentials (never their tokens).
    List {
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Debug, Subcommand)]
enum DbCmd {
    /// Start (or reuse) the cluster in DIR and print its URL.
    Start {
        #[arg(long, default_value = ".pgdata/main")]
        dir: PathBuf,
        /// fsync off, and wiped at its next start: for test clusters only.
        #[arg(long)]
        throwaway: bool,
    },
    /// Stop the cluster in DIR.
    Stop {
        #[arg(long, default_value = ".pgdata/main")]
        dir: PathBuf,
    },
    /// Print the URL of the running cluster in DIR.
    Url {
        #[arg(long, default_value = ".pgdata/main")]
        dir: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum BenchCmd {
    /// Authorize-and-consume over loopback gRPC against a bare insert-and-commit, side by side.
    Authorize {
        #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
        clients: Vec<usize>,
        /// Seconds per client count, split between the two kinds.
        #[arg(long, default_value_t = 8.0)]
        seconds: f64,
        /// Also run the projection workers beside the server and report their lag (they share
        /// the machine's cores, so the ratios are then not comparable with runs without them).
        #[arg(long)]
        with_projections: bool,
        /// Filler events written to the log before the replicas start (not chains anyone
        /// reads): start-up time and memory must not grow with it.
        #[arg(long, default_value_t = 0, conflicts_with = "with_projections")]
        log_events: u64,
        /// After each quiet round, open this many idle connections (and one slow handshake) to
        /// each replica and measure again beside it.
        #[arg(long, default_value_t = 0)]
        flood: usize,
        /// Also measure with every replica's /metrics scraped this often (ms), beside a quiet
        /// measurement; 0: not measured.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
        scrape_ms: u64,
    },
    /// Every projection rebuilt from a generated ledger, beside a plain COPY of the same events.
    Rebuild {
        #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1_000..=20_000_000))]
        events: u64,
    },
    /// A covered click through the browser runtime beside a plain WebDriver click on the same
    /// fixture page, and observe on a large page (needs Chromium and chromedriver; no database).
    Act {
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(10..=100_000))]
        iterations: u64,
        #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=9_000))]
        nodes: u64,
    },
    /// The agent harness's own work for one step (the snapshot taken in, the prompt, the answer
    /// checked), without the model, the runtime or the authorizer.
    Harness {
        #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(10..=1_000_000))]
        iterations: u64,
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=9_000))]
        nodes: u64,
    },
    /// The gateway's routes (list grants, list pending approvals, resolve) beside the gRPC call
    /// each wraps, over TLS, at each connection count.
    Gateway {
        #[arg(long, value_delimiter = ',', default_value = "1,32")]
        connections: Vec<usize>,
        /// Seconds per route and connection count, split between the two kinds.
        #[arg(long, default_value_t = 8.0)]
        seconds: f64,
    },
    /// Ledger append against a bare insert-and-commit, side by side.
    Append {
        #[arg(long, value_delimiter = ',', default_value = "1,32")]
        writers: Vec<usize>,
        /// Seconds per writer count, split between the two kinds.
        #[arg(long, default_value_t = 8.0)]
        seconds: f64,
    },
}

fn database_url(cli: &Option<String>) -> Result<String> {
    match cli {
        Some(url) => Ok(url.clone()),
        None => pgcluster::ensure_started(&PathBuf::from(".pgdata/main"), Durability::Durable),
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Cmd::Migrate => {
            let url = database_url(&cli.database_url)?;
            let report = ops::migrate::run(&mut ops::connect(&url).await?).await?;
            println!("migrations: {} already applied, applied now: {:?}", report.already, report.applied_now);
        }
        Cmd::Up => {
            let url = database_url(&cli.database_url)?;
            let report = ops::migrate::run(&mut ops::connect(&url).await?).await?;
            let checked =
                ops::check::run(&url.parse().context("DATABASE_URL is not a valid PostgreSQL URL")?, ledger::READ_PAGE)
                    .await?;
            println!(
                "ledger ready at {} ({} migrations applied now): {checked}",
                ops::redact(&url),
                report.applied_now.len()
            );
        }
        Cmd::Check { page_size } => {
            let url = database_url(&cli.database_url)?;
            println!(
                "{}",
                ops::check::run(
                    &url.parse().context("DATABASE_URL is not a valid PostgreSQL URL")?,
                    usize::try_from(page_size)?
                )
                .await?
            );
        }
        Cmd::Serve { service: ServeCmd::Authorizer { insecure_loopback } } => {
            // Parsed once, here; nothing reads the environment after start-up.
            let config = ops::serve::AuthorizerConfig::parse(|k| std::env::var(k).ok(), insecure_loopback)?;
            let url = database_url(&cli.database_url)?;
            ops::serve::authorizer(config, url).await?;
        }
        Cmd::Serve { service: ServeCmd::Runtime { insecure_loopback } } => {
            let config = ops::serve::RuntimeServeConfig::parse(|k| std::env::var(k).ok(), insecure_loopback)?;
            let url = database_url(&cli.database_url)?;
            ops::serve::runtime(config, url).await?;
        }
        Cmd::Serve { service: ServeCmd::Gateway { insecure_loopback } } => {
            let config = ops::serve::GatewayConfig::parse(|k| std::env::var(k).ok(), insecure_loopback)?;
            let url = database_url(&cli.database_url)?;
            ops::serve::gateway(config, url).await?;
        }
        Cmd::Owners { command } => owners_command(&database_url(&cli.database_url)?, command).await?,
        Cmd::Demo { command: DemoCmd::Site { dir } } => ops::demo::site(&dir).await?,
        Cmd::Demo { command: DemoCmd::Run { dir, owner } } => {
            println!("{}", ops::demo::run(&dir, &owner, |k| std::env::var(k).ok()).await?);
        }
        Cmd::Agent { command: AgentCmd::Run { task, script, model_url, model } } => {
            let outcome =
                ops::agent::run(&task, script.as_deref(), model_url.zip(model), |k| std::env::var(k).ok()).await?;
            println!("{outcome}");
        }
        Cmd::Agent { command: AgentCmd::Tools } => {
            let tools: Vec<serde_json::Value> = agent::tools::tools()
                .into_iter()
                .map(|t| serde_json::json!({ "name": t.name, "description": t.description, "input_schema": t.input_schema }))
                .collect();
            println!("{}", serde_json::to_string_pretty(&tools)?);
        }
        Cmd::Settings { command: SettingsCmd::Apply { tenant } } => {
            let wanted = ops::serve::DeploymentSettings::parse(|k| std::env::var(k).ok())?;
            let url = database_url(&cli.database_url)?;
            let recorded = ops::serve::apply_settings(&url, &tenant, wanted).await?;
            if recorded.is_empty() {
                println!("tenant {tenant}: the settings in force are these already; nothing recorded");
            } else {
                println!("tenant {tenant}: recorded {}", recorded.join(", "));
            }
        }
        Cmd::Serve { service: ServeCmd::Projections } => {
            let url = database_url(&cli.database_url)?;
            ops::migrate::run(&mut ops::connect(&url).await?).await?;
            let metrics = telemetry::MetricsListen::parse(
                |k| std::env::var(k).ok(),
                "PROJECTIONS",
                ops::observe::PROJECTIONS_METRICS,
            )?;
            ops::audit::serve(url.parse().context("DATABASE_URL is not a valid PostgreSQL URL")?, metrics).await?;
        }
        Cmd::Projections { command } => {
            let url = database_url(&cli.database_url)?;
            let config: tokio_postgres::Config = url.parse().context("DATABASE_URL is not a valid PostgreSQL URL")?;
            match command {
                ProjectionsCmd::Status => print!("{}", ops::audit::projections_status(&config).await?),
                ProjectionsCmd::Rebuild { name } => println!("{}", ops::audit::rebuild(&config, &name).await?),
                ProjectionsCmd::Verify { name } => {
                    println!("{}", ops::audit::projections_verify(&config, name.as_deref()).await?);
                }
            }
        }
        Cmd::Audit { command } => audit(&database_url(&cli.database_url)?, command).await?,
        Cmd::Tickets { command: TicketsCmd::Keygen { id } } => {
            let line = proto::ticket::Keyring::line(&id, rand::random());
            // The line must read back as a keyring: a bad id is refused here, not at start-up.
            proto::ticket::Keyring::parse(&line)?;
            println!("{line}");
        }
        Cmd::Tls { command: TlsCmd::Init { dir } } => {
            let (ca, cert, key) = ops::tls::DevPki::paths(&dir);
            if !(ca.is_file() && cert.is_file() && key.is_file()) {
                ops::tls::DevPki::generate()?.write(&dir)?;
            }
            println!("{}", dir.display());
        }
        Cmd::Profiles { command: ProfilesCmd::Unclaimed { tenant } } => {
            let url = database_url(&cli.database_url)?;
            let client = ops::connect(&url).await?;
            for (profile, sessions) in ops::audit::unclaimed_profiles(&client, &tenant).await? {
                println!("{profile}\t{}", if sessions.is_empty() { "-".into() } else { sessions.join(",") });
            }
        }
        Cmd::Credentials { command } => credentials_command(&database_url(&cli.database_url)?, command).await?,
        Cmd::Status => {
            let url = database_url(&cli.database_url)?;
            let config: tokio_postgres::Config = url.parse().context("DATABASE_URL is not a valid PostgreSQL URL")?;
            let services = ops::status::services(|k| std::env::var(k).ok())?;
            print!("{}", ops::status::report(&config, &services).await?);
        }
        Cmd::Classify => {
            ops::classify::run(std::io::stdin().lock(), std::io::stdout().lock()).context("classify")?;
        }
        Cmd::Db { command } => match command {
            DbCmd::Start { dir, throwaway } => {
                let durability = if throwaway { Durability::Throwaway } else { Durability::Durable };
                println!("{}", pgcluster::ensure_started(&dir, durability)?);
            }
            DbCmd::Stop { dir } => pgcluster::stop(&dir)?,
            DbCmd::Url { dir } => match pgcluster::running_url(&dir) {
                Some(url) => println!("{url}"),
                None => bail!("no cluster is running in {}", dir.display()),
            },
        },
        Cmd::Bench { command } => bench(&cli.database_url, command).await?,
    }
    Ok(())
}

/// `grantctl audit …`.
async fn audit(url: &str, command: AuditCmd) -> Result<()> {
    let config: tokio_postgres::Config = url.parse().context("DATABASE_URL is not a valid PostgreSQL URL")?;
    match command {
        AuditCmd::Replay { tenant, session, grant, since, format } => {
            let since = since
                .map(|t| {
                    time::OffsetDateTime::parse(&t, &time::format_description::well_known::Rfc3339)
                        .with_context(|| format!("--since {t:?} is not an RFC 3339 time"))
                })
                .transpose()?;
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            let filter = ops::audit::Filter { tenant, session, grant, since };
            let rows = ops::audit::replay(&store, &filter).await?;
            ops::audit::print(&rows, format == "jsonl", std::io::stdout().lock())?;
        }
        AuditCmd::Verify { export: Some(path) } => {
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            println!("{}", ops::audit::verify_export(&store, &path).await?);
        }
        AuditCmd::Verify { export: None } => {
            println!("{}", ops::check::run(&config, ledger::READ_PAGE).await?);
            println!("{}", ops::audit::projections_verify(&config, None).await?);
        }
        AuditCmd::Export { tenant, out } => {
            let store = PgStore::new(ledger::postgres::pool(config, 2).map_err(anyhow::Error::msg)?);
            let filter = ops::audit::Filter { tenant, ..ops::audit::Filter::default() };
            let m = ops::audit::export(&store, &filter, &out).await?;
            println!(
                "{}: {} rows, positions {:?} to {:?}, sha256 {}",
                out.display(),
                m.count,
                m.first_position,
                m.last_position,
                m.sha256
            );
        }
    }
    Ok(())
}

/// `grantctl owners …`.
async fn owners_command(url: &str, command: OwnersCmd) -> Result<()> {
    ops::migrate::run(&mut ops::connect(url).await?).await?;
    let owners = gateway::Owners::new(ledger::postgres::pool(url.parse()?, 1).map_err(anyhow::Error::msg)?);
    match command {
        OwnersCmd::Token { command: OwnerTokenCmd::Create { tenant, principal, scopes, expires_in_days } } => {
            let scopes = gateway::owners::parse_scopes(&scopes)?;
            let lifetime = Duration::from_secs(u64::from(expires_in_days) * 24 * 3600);
            let (token, secret) = owners.create(&tenant, &principal, &scopes, lifetime).await?;
            println!("token_id: {}", token.token_id);
            println!("token: {secret}");
        }
        OwnersCmd::Token { command: OwnerTokenCmd::Revoke { tenant, token_id } } => {
            if owners.revoke(&tenant, token_id).await? {
                println!("revoked {token_id}, with its links and browser sessions");
            } else {
                bail!("tenant {tenant} has no unrevoked owner token {token_id}");
            }
        }
        OwnersCmd::Token { command: OwnerTokenCmd::List { tenant } } => {
            for t in owners.list(&tenant).await? {
                let scopes: Vec<_> = t.scopes.iter().map(|s| s.code()).collect();
                let state = match t.revoked_at {
                    Some(at) => format!("revoked {at}"),
                    None => format!("expires {}", t.expires_at),
                };
                println!("{}\t{}\t{}\t{state}", t.token_id, t.principal, scopes.join(","));
            }
        }
        OwnersCmd::Link { tenant, token_id, base, session } => {
            if let Some(s) = &session {
                ledger::check_entity_id("session", s).map_err(|e| anyhow::anyhow!("--session: {}", e.reason))?;
            }
            let code = owners.link(&tenant, token_id).await?;
            let landing = session.map(|s| format!("&session={s}")).unwrap_or_default();
            println!("{}/sign-in?code={code}{landing}", base.trim_end_matches('/'));
        }
    }
    Ok(())
}

/// `grantctl credentials …`.
async fn credentials_command(url: &str, command: CredentialsCmd) -> Result<()> {
    ops::migrate::run(&mut ops::connect(url).await?).await?;
    let pool = ledger::postgres::pool(url.parse()?, 1).map_err(anyhow::Error::msg)?;
    let credentials = credentials::Credentials::postgres(pool);
    match command {
        CredentialsCmd::Create { role, tenant, principal, expires_in_hours } => {
            let role = credentials::Role::from_code(&role)
                .with_context(|| format!("--role {role:?}: one of worker, runtime, gateway, profiles, operator"))?;
            ops::serve::credential_names(&tenant, principal.as_deref())?;
            let expires =
                expires_in_hours.map(|h| time::OffsetDateTime::now_utc() + time::Duration::hours(i64::from(h)));
            let token = credentials::new_token();
            let c = credentials.register(&token, &tenant, role, principal.as_deref(), expires).await?;
            println!("{} {token}", c.credential_id);
        }
        CredentialsCmd::Revoke { tenant, credential_id } => {
            if !credentials.revoke(&tenant, credential_id).await? {
                bail!("no credential {credential_id} of tenant {tenant} that is not revoked already");
            }
            println!("revoked {credential_id}");
        }
        CredentialsCmd::List { tenant } => {
            for c in credentials.list(&tenant).await? {
                let state = if c.revoked_at.is_some() { "revoked" } else { "active" };
                let expires = c.expires_at.map_or_else(|| "never".to_owned(), |t| t.to_string());
                let principal = c.principal.as_deref().unwrap_or("-");
                println!("{} {} {principal} {state} expires {expires}", c.credential_id, c.role);
            }
        }
    }
    Ok(())
}

/// `grantctl bench …`.
async fn bench(database: &Option<String>, command: BenchCmd) -> Result<()> {
    match command {
        BenchCmd::Gateway { connections, seconds } => {
            if connections.is_empty() || connections.contains(&0) || !seconds.is_finite() || seconds <= 0.0 {
                bail!("--connections takes positive counts and --seconds a positive number");
            }
            let url = database_url(database)?;
            println!("{}", ops::bench::gateway::run(&url, &connections, Duration::from_secs_f64(seconds)).await?);
        }
        BenchCmd::Authorize { clients, seconds, with_projections, log_events, flood, scrape_ms } => {
            if clients.is_empty() || clients.contains(&0) || !seconds.is_finite() || seconds <= 0.0 {
                bail!("--clients takes positive counts and --seconds a positive number");
            }
            let url = database_url(database)?;
            println!(
                "{}",
                ops::bench::authorize::run(
                    &url,
                    &clients,
                    Duration::from_secs_f64(seconds),
                    ops::bench::authorize::Extras {
                        with_projections,
                        log_events,
                        flood,
                        scrape_every: (scrape_ms > 0).then(|| Duration::from_millis(scrape_ms)),
                    },
                )
                .await?
            );
        }
        BenchCmd::Harness { iterations, nodes } => {
            println!("{}", ops::bench::harness::run(usize::try_from(iterations)?, usize::try_from(nodes)?)?);
        }
        BenchCmd::Act { iterations, nodes } => {
            println!("{}", ops::bench::act::run(usize::try_from(iterations)?, usize::try_from(nodes)?).await?);
        }
        BenchCmd::Rebuild { events } => {
            let url = database_url(database)?;
            println!("{}", ops::bench::rebuild::run(&url, events).await?);
        }
        BenchCmd::Append { writers, seconds } => {
            if writers.is_empty() || writers.contains(&0) || !seconds.is_finite() || seconds <= 0.0 {
                bail!("--writers takes positive counts and --seconds a positive number");
            }
            let url = database_url(database)?;
            println!("{}", ops::bench::append(&url, &writers, Duration::from_secs_f64(seconds)).await?);
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    // RUST_LOG when set, otherwise info; JSON lines unless standard error is a terminal.
    telemetry::init_logs();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("grantctl: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("grantctl: {e:#}");
            ExitCode::FAILURE
        }
    }
}
